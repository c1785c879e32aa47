"""Where Oreo may send a webhook: public addresses only, unless the operator lists a host.

A webhook URL is checked when it is added and again right before each delivery, since
what a name resolves to can change. It is refused when it carries a user name or
password, or when its host resolves to any address that is not public: loopback,
private, link-local, multicast, reserved, unspecified or shared (an IPv4 address
wrapped in IPv6 is judged as the IPv4 address). ``OREO_WEBHOOK_ALLOWED_HOSTS`` lets
listed hosts through: a name as written in the URL (then whatever it resolves to), or an
address (then that address). ``0x7f000001`` and ``2130706433`` are checked as what the
resolver makes of them, ``127.0.0.1``.

A delivery connects to the address that was checked, not to a second lookup of the name
(the ``Host`` header and the TLS server name stay the URL's), so a name whose answer
changes between the check and the connection cannot reach an internal address.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from core.errors import InvalidInput

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# NAT64 (RFC 6052) carries an IPv4 address in its last 32 bits; it is judged as that address.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_ALLOW_HINT = "list the host in OREO_WEBHOOK_ALLOWED_HOSTS to allow it"


@dataclass(frozen=True)
class Destination:
    """A checked webhook URL and where to connect for it."""

    url: httpx.URL
    host: str  # lower-cased, without brackets or a trailing dot
    port: int
    addresses: tuple[str, ...]  # the checked addresses, the resolver's first first; empty: allowed by name

    def routes(self) -> list[Route]:
        """Where to send the request, in order: each checked address in place of the name (or the name)."""
        if not self.addresses:
            return [Route(self.url, {}, {})]
        return [self._route(address) for address in self.addresses]

    def _route(self, address: str) -> Route:
        if address == self.host:  # the URL names the address itself
            return Route(self.url, {}, {})
        # The Host header and the TLS server name (which the certificate must match) stay the URL's.
        headers = {"Host": self.url.netloc.decode("ascii")}
        named = self.url.scheme == "https" and _address(self.host) is None
        extensions = {"sni_hostname": self.url.raw_host.decode("ascii")} if named else {}
        return Route(self.url.copy_with(host=address), headers, extensions)


@dataclass(frozen=True)
class Route:
    """One way to send a request to a destination: the URL to connect to, headers and httpx extensions to add."""

    url: httpx.URL
    headers: dict[str, str]
    extensions: dict[str, Any]


# Longer URLs are no receiver's; they would be stored and shown as they are.
MAX_URL_LENGTH = 2048


def parse_webhook_url(url: str) -> httpx.URL:
    """``url`` as an absolute http(s) URL without a user name or password.

    Raises:
        InvalidInput: Not such a URL (the message never repeats a password).
    """
    text = (url or "").strip()
    if len(text) > MAX_URL_LENGTH:
        raise InvalidInput(f"bad webhook URL: it has {len(text):,} characters, at most {MAX_URL_LENGTH:,}", field="url")
    if any(c.isspace() for c in text):
        raise InvalidInput(f"bad webhook URL {text!r}: it holds a space; write it as %20", field="url")
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, TypeError) as exc:
        raise InvalidInput(f"bad webhook URL {text!r}: {exc}", field="url") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidInput(f"bad webhook URL {text!r}: give an absolute http:// or https:// URL", field="url")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise InvalidInput(f"bad webhook URL {text!r}: port {parsed.port} is not between 1 and 65535", field="url")
    if parsed.userinfo:
        raise InvalidInput(
            f"bad webhook URL for host {_host(parsed)!r}: it holds a user name or password; "
            "give the URL without them (the receiver checks the X-Oreo-Signature header instead)",
            field="url",
        )
    return parsed


def check(url: str, allowed: Iterable[str]) -> Destination:
    """Check ``url`` now, resolving its host: when a webhook is added, and before each delivery.

    Raises:
        InvalidInput: A bad URL, a host that does not resolve, or one that reaches an address that is not public.
    """
    parsed = parse_webhook_url(url)
    host, port = _host(parsed), _port(parsed)
    allow = _allowed(allowed)
    if host in allow:
        return Destination(parsed, host, port, ())
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidInput(f"webhook host {host!r} does not resolve; check the URL", field="url") from exc
    return _judge(parsed, host, port, [str(info[4][0]) for info in infos], allow)


def is_public(address: _Address) -> bool:
    """Whether ``address`` is on the public internet (IPv4 wrapped in IPv6 judged as the IPv4 address)."""
    address = _unwrapped(address)
    return address.is_global and not (
        address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or address.is_loopback
        or address.is_private
        or address.is_link_local
    )


def _judge(parsed: httpx.URL, host: str, port: int, addresses: list[str], allow: set[str]) -> Destination:
    """The destination, when every address ``host`` resolves to is public or listed."""
    checked = [a for a in (_address(text) for text in addresses) if a is not None]
    if not checked:
        raise InvalidInput(f"webhook host {host!r} does not resolve; check the URL", field="url")
    for address in checked:
        if not is_public(address) and str(_unwrapped(address)) not in allow:
            where = f"{host} is" if _address(host) == address else f"{host} resolves to {address}, which is"
            raise InvalidInput(f"{where} not a public address", field="url", hint=_ALLOW_HINT)
    return Destination(parsed, host, port, tuple(dict.fromkeys(str(a) for a in checked)))


def _allowed(hosts: Iterable[str]) -> set[str]:
    """The allowed names as written and addresses in their one canonical form."""
    allow = set()
    for name in hosts:
        name = name.strip().lower().strip("[]").rstrip(".")
        address = _address(name)
        allow.add(str(_unwrapped(address)) if address is not None else name)
    return allow


def _address(text: str) -> _Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])  # without an IPv6 zone (fe80::1%eth0)
    except ValueError:
        return None


def _unwrapped(address: _Address) -> _Address:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def _host(url: httpx.URL) -> str:
    return url.host.lower().strip("[]").rstrip(".")


def _port(url: httpx.URL) -> int:
    return url.port or (443 if url.scheme == "https" else 80)
