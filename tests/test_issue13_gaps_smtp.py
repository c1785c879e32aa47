"""Notification email in each SMTP TLS mode (none, STARTTLS, implicit TLS) against a real aiosmtpd on loopback."""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from core import notify
from core.catalog import Catalog
from core.config import get_settings
from tests.test_notify import Mailbox, _authenticate, _submitted, free_port, workspace  # noqa: F401


@dataclass(frozen=True)
class Certs:
    ca: Path  # what OREO_SMTP_CA_FILE points at
    cert: Path  # the server's certificate, signed by ``ca``, for 127.0.0.1
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A private CA and a server certificate it signed for 127.0.0.1 (made here with ``cryptography``)."""
    folder = tmp_path_factory.mktemp("smtp-tls")
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("Oreo test CA"))
        .issuer_name(_name("Oreo test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = Certs(ca=folder / "ca.pem", cert=folder / "server.pem", key=folder / "server.key")
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def _controller(mode: str, mailbox: Mailbox, certs: Certs, port: int) -> Controller:
    """aiosmtpd speaking ``mode``: plain, STARTTLS required before MAIL and AUTH, or TLS from the first byte."""
    common = {"hostname": "127.0.0.1", "port": port, "authenticator": _authenticate}
    if mode == "none":
        return Controller(mailbox, auth_require_tls=False, **common)
    if mode == "starttls":
        return Controller(mailbox, tls_context=certs.server_context(), require_starttls=True, **common)
    # aiosmtpd only counts STARTTLS as TLS for AUTH; this socket is TLS from its first byte.
    return Controller(mailbox, ssl_context=certs.server_context(), auth_require_tls=False, **common)


PointAt = Callable[[str, int, Path | None], None]


@pytest.fixture
def point_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[PointAt]:
    def configure(mode: str, port: int, ca: Path | None) -> None:
        env = {
            "OREO_SMTP_HOST": "127.0.0.1",
            "OREO_SMTP_PORT": str(port),
            "OREO_SMTP_TLS": mode,
            "OREO_SMTP_USER": "oreo",
            "OREO_SMTP_PASSWORD": "mail-pass",
            "OREO_SMTP_FROM": "oreo@example.test",
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        if ca is None:
            monkeypatch.delenv("OREO_SMTP_CA_FILE", raising=False)
        else:
            monkeypatch.setenv("OREO_SMTP_CA_FILE", str(ca))
        get_settings.cache_clear()

    yield configure
    get_settings.cache_clear()


@pytest.mark.parametrize("mode", ["none", "starttls", "ssl"])
def test_each_tls_mode_delivers_with_login(
    mode: str,
    workspace: Catalog,  # noqa: F811
    certs: Certs,
    point_at: PointAt,
) -> None:
    mailbox, port = Mailbox(), free_port()
    controller = _controller(mode, mailbox, certs, port)
    controller.start()
    try:
        point_at(mode, port, certs.ca)
        _submitted(workspace)
        report = notify.drain(workspace)
    finally:
        controller.stop()
    assert (len(report.sent), [f.last_error for f in report.failed], report.dead) == (1, [], [])
    [(envelope, message)] = mailbox.messages
    assert envelope.rcpt_tos == ["al@example.test"] and envelope.mail_from == "oreo@example.test"
    assert message["Subject"] == "[Oreo] ed submitted “Fix ages” on demo/people"


@pytest.mark.parametrize("mode", ["starttls", "ssl"])
def test_an_untrusted_certificate_is_a_failed_delivery_not_a_plain_fallback(
    mode: str,
    workspace: Catalog,  # noqa: F811
    certs: Certs,
    point_at: PointAt,
) -> None:
    mailbox, port = Mailbox(), free_port()
    controller = _controller(mode, mailbox, certs, port)
    controller.start()
    try:
        point_at(mode, port, None)  # the system's CAs do not know the test CA
        _submitted(workspace)
        report = notify.drain(workspace)
    finally:
        controller.stop()
    [failed] = report.failed
    assert failed.channel == "email" and "CERTIFICATE_VERIFY_FAILED" in (failed.last_error or "")
    assert mailbox.messages == []


def test_starttls_against_a_server_without_it_fails_instead_of_sending_in_clear(
    workspace: Catalog,  # noqa: F811
    certs: Certs,
    point_at: PointAt,
) -> None:
    mailbox, port = Mailbox(), free_port()
    controller = _controller("none", mailbox, certs, port)
    controller.start()
    try:
        point_at("starttls", port, certs.ca)
        _submitted(workspace)
        report = notify.drain(workspace)
    finally:
        controller.stop()
    [failed] = report.failed
    assert "SMTPNotSupportedError" in (failed.last_error or "") and mailbox.messages == []


def test_a_missing_ca_file_is_named_in_the_failure(
    workspace: Catalog,  # noqa: F811
    certs: Certs,
    point_at: PointAt,
    tmp_path: Path,
) -> None:
    mailbox, port = Mailbox(), free_port()
    controller = _controller("starttls", mailbox, certs, port)
    controller.start()
    try:
        point_at("starttls", port, tmp_path / "nope.pem")
        _submitted(workspace)
        report = notify.drain(workspace)
    finally:
        controller.stop()
    [failed] = report.failed
    assert failed.last_error == f"the SMTP CA file {tmp_path / 'nope.pem'} does not exist (OREO_SMTP_CA_FILE)"
    assert mailbox.messages == []
