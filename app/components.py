"""Shared UI pieces: the signed-in user and their session cookie, error display, dataset picking.

Pages call core and render; everything they share lives here so each page stays thin.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import streamlit as st

from core import auth, engine, notify, web_sessions
from core.catalog import utcnow
from core.config import get_settings
from core.datasets import list_datasets
from core.errors import OreoError
from interface import context, errors

_log = logging.getLogger("oreo.app")

USER_KEY = "oreo_username"
METHOD_KEY = "oreo_auth_method"
TOKEN_KEY = "oreo_session_token"
# The browser keeps only the web session's opaque token (core.web_sessions), under this name.
SESSION_COOKIE = "oreo_session"
_CLEAR_COOKIE_KEY = "oreo_clear_session_cookie"
# A deep link kept across an SSO round trip (remember_deep_link), for ten minutes at most.
NEXT_COOKIE = "oreo_next"
_NEXT_MAX_AGE = 600
_FRESH_SSO_KEY = "oreo_fresh_sso"
_BROWSER = re.compile(r"(Edg|OPR|Firefox|HeadlessChrome|Chrome|Safari)/(\d+)")
DATASET_KEY = "oreo_dataset"
# The page and role pages/no_role.py names: set by the router for the address asked for.
NEEDED_ROLE_KEY = "oreo_needed_role"
# Streamlit fades a caption with opacity 0.6, and with it everything the caption holds: its text
# (#828180 on white, 3.88:1) and the badges and code in it (3.03:1), all below WCAG AA's 4.5:1.
# Fading only the text's own colour, a little less, keeps captions quieter than body text at 6:1
# and leaves a badge's or code's colours as they are (in the light and the dark theme alike).
READABLE_CAPTIONS = """
<style>
[data-testid="stCaptionContainer"] { opacity: 1; color: color-mix(in srgb, currentColor 75%, transparent); }
</style>
"""


# The configured catalog (``interface.context``), which every page works on.
catalog = context.catalog


def error_message(exc: OreoError) -> str:
    """What a page says of ``exc``, as ``interface.errors``' table says (an engine failure's whole text is logged)."""
    shown = errors.on_a_page(exc)
    if shown.logged:
        _log.error("a page's call failed: %s", shown.text, exc_info=exc)
    return shown.text


def show_error(exc: OreoError) -> None:
    """Show ``exc`` where the page is, as one clean message instead of a traceback."""
    st.error(error_message(exc), icon=":material/error:")


@contextmanager
def oreo_errors() -> Iterator[None]:
    """Show an ``OreoError`` as one clean message instead of a traceback."""
    try:
        yield
    except OreoError as exc:
        show_error(exc)


def readable_captions() -> None:
    """Give every caption on the page AA contrast (see READABLE_CAPTIONS); the router calls it on each run."""
    st.html(READABLE_CAPTIONS)


def oidc_configured() -> bool:
    """True when ``[auth]`` is set in .streamlit/secrets.toml, enabling ``st.login``."""
    try:
        return "auth" in st.secrets
    except (FileNotFoundError, OreoError):
        return False
    except Exception:  # StreamlitSecretNotFoundError and parse errors: no SSO
        return False


def _oidc_claims() -> dict[str, Any]:
    try:
        return dict(st.user.to_dict())
    except Exception:
        return {}


def current_user() -> auth.User | None:
    """The signed-in user, from this tab's sign-in, the browser's session cookie or an OIDC identity.

    Every run checks the web session again, so a sign-out in another tab, a revocation by
    an admin or an expiry takes effect on the next click.
    """
    token = st.session_state.get(TOKEN_KEY)
    if token:
        session = web_sessions.resume_web_session(catalog(), token)
        if session is not None:
            return session.user
        _session_ended()
        return None
    username = st.session_state.get(USER_KEY)
    if username:  # in-process page tests (AppTest) sign in this way; a browser always holds a token
        try:
            return auth.get_user(catalog(), username)
        except OreoError:
            st.session_state.pop(USER_KEY, None)
            return None
    presented = _presented_token()
    session = web_sessions.resume_web_session(catalog(), presented)
    if session is not None and presented is not None:  # a reload, a new tab or a deep link
        _remember(session.user, session.method, presented)
        return session.user
    if oidc_configured() and st.user.is_logged_in:
        return _sign_in_with_identity(presented)
    return None


def sign_in(user: auth.User, method: web_sessions.AuthMethod) -> None:
    """Start a web session for a user who just proved who they are; the cookie is written on the next run."""
    token = web_sessions.start_web_session(catalog(), user, method, client=_client_label())
    _remember(user, method, token)


def sign_out() -> None:
    """Revoke this browser's session server-side, forget the tab's state and return to the login page."""
    method = st.session_state.get(METHOD_KEY)
    web_sessions.end_web_session(catalog(), st.session_state.get(TOKEN_KEY))
    for key in list(st.session_state.keys()):
        del st.session_state[key]
    st.session_state[_CLEAR_COOKIE_KEY] = True
    if method == "oidc":
        # st.logout queues a browser redirect through the provider's logout that clears the
        # identity cookie; st.rerun would drop it and the next page load would sign back in.
        st.logout()
        st.stop()
    st.rerun()


def sync_session_cookie() -> None:
    """Make the browser's ``oreo_session`` cookie match this tab: the session's token, or none.

    ``st.context.cookies`` holds what the browser sent when the tab connected, so a sign-in
    made in this tab writes its cookie from here on every run until a reload presents it.
    Call it on every run where nothing can stop the script first: in the sidebar before
    the page runs, or after the login page, which never stops early.
    """
    token = st.session_state.get(TOKEN_KEY)
    presented = _presented_token()
    if token:
        if token != presented:
            _write_cookie(SESSION_COOKIE, token, max_age=get_settings().web_session_max_days * 86_400)
    elif presented or st.session_state.get(_CLEAR_COOKIE_KEY):
        _write_cookie(SESSION_COOKIE, "", max_age=0)
    if token and _presented(NEXT_COOKIE):
        _write_cookie(NEXT_COOKIE, "", max_age=0)


def remember_deep_link(url_path: str) -> None:
    """Keep the address a signed-out user asked for across an SSO round trip.

    The identity provider sends the browser back to the app's root, so the address waits
    in a short-lived cookie (``oreo_next``) that ``take_deep_link`` reads after the sign-in.
    A password sign-in needs none of this: its rerun stays on the address.
    """
    if url_path and oidc_configured() and _presented(NEXT_COOKIE) != url_path:
        _write_cookie(NEXT_COOKIE, url_path, max_age=_NEXT_MAX_AGE)


def take_deep_link() -> str | None:
    """The address kept by ``remember_deep_link``, once, right after an SSO sign-in in this tab."""
    if not st.session_state.pop(_FRESH_SSO_KEY, False):
        return None
    return _presented(NEXT_COOKIE)


def client_address() -> str:
    """The browser's address as the server sees it (``localhost`` for a browser on this machine)."""
    try:
        address = st.context.ip_address
    except Exception:  # no browser connection, e.g. in-process page tests
        address = None
    return address if isinstance(address, str) and address else "localhost"


def _client_label() -> str:
    try:
        agent = st.context.headers.get("User-Agent")
    except Exception:
        agent = None
    agent = agent if isinstance(agent, str) else ""
    browser = _BROWSER.search(agent)
    return f"{client_address()} · {' '.join(browser.groups()) if browser else agent[:60] or 'unknown browser'}"


def _remember(user: auth.User, method: str, token: str) -> None:
    st.session_state[USER_KEY] = user.username
    st.session_state[METHOD_KEY] = method
    st.session_state[TOKEN_KEY] = token


def _presented_token() -> str | None:
    return _presented(SESSION_COOKIE)


def _presented(cookie: str) -> str | None:
    """A cookie the browser sent when this tab connected."""
    try:
        value = st.context.cookies.get(cookie)
    except Exception:  # no browser connection
        value = None
    # In-process page tests (AppTest) have a stand-in client whose values are not strings.
    return value if isinstance(value, str) and value else None


def _session_ended() -> None:
    """This tab's session was revoked or expired: sign out here too, and end an SSO identity with it."""
    method = st.session_state.get(METHOD_KEY)
    for key in (USER_KEY, METHOD_KEY, TOKEN_KEY):
        st.session_state.pop(key, None)
    st.session_state[_CLEAR_COOKIE_KEY] = True
    if method == "oidc" and oidc_configured() and st.user.is_logged_in:
        st.logout()
        st.stop()


def _sign_in_with_identity(presented: str | None) -> auth.User | None:
    """Turn an OIDC identity (``st.user``) into a web session, unless the identity outlived its session."""
    claims = _oidc_claims()
    if _identity_outlived_its_session(claims, presented):
        # Signed out, revoked or expired here: ending the identity too makes the user sign in
        # at the provider again instead of being let back in by Streamlit's identity cookie.
        st.logout()
        st.stop()
    settings = get_settings()
    groups = claims.get(settings.oidc_groups_claim) or []
    if isinstance(groups, str):
        groups = [groups]
    try:
        user = auth.sign_in_oidc(
            catalog(),
            email=claims.get("email"),
            name=claims.get("name"),
            groups=[str(g) for g in groups],
            group_roles=settings.oidc_group_roles,
        )
    except OreoError as exc:
        st.error(error_message(exc))
        return None
    sign_in(user, "oidc")
    st.session_state[_FRESH_SSO_KEY] = True
    return user


def _identity_outlived_its_session(claims: dict[str, Any], presented: str | None) -> bool:
    """True when the identity provider's sign-in (the ID token's ``iat``) is not a fresh one.

    It is stale when it is older than the absolute lifetime (the cookie that would have
    carried its session is gone by then), or when the browser still presents an ended
    session that started after it: that session was this identity's.
    """
    issued = claims.get("iat")
    if not isinstance(issued, int | float):
        return False
    issued_at = datetime.fromtimestamp(issued, UTC)
    if utcnow() - issued_at > timedelta(days=get_settings().web_session_max_days):
        return True
    ended = web_sessions.find_web_session(catalog(), presented)
    return ended is not None and issued_at <= ended.created_at


def _write_cookie(name: str, value: str, *, max_age: int) -> None:
    cookie = f"{name}={value}; Path=/; Max-Age={max_age}; SameSite=Strict"
    st.html(
        "<script>(() => {"
        f"document.cookie = {json.dumps(cookie)} + (location.protocol === 'https:' ? '; Secure' : '');"
        "})();</script>",
        unsafe_allow_javascript=True,
        width=1,
    )


def require_user() -> auth.User:
    """The signed-in user, or stop the page (the router only lists pages to signed-in users)."""
    user = current_user()
    if user is None:
        st.warning("Please sign in.")
        st.stop()
    return user


def dataset_options(user: auth.User) -> list[str]:
    return [f"{d.project_id}/{d.dataset_id}" for d in list_datasets(catalog(), actor=user)]


def split_dataset(value: str) -> tuple[str, str]:
    project_id, _, dataset_id = value.partition("/")
    return project_id, dataset_id


def flash(message: str, *, kind: str = "success") -> None:
    """Keep a message for the next run (``st.rerun`` would otherwise drop it)."""
    st.session_state["oreo_flash"] = (kind, message)


def show_flash() -> None:
    """Show, once, the message kept by ``flash``."""
    kept = st.session_state.pop("oreo_flash", None)
    if kept is not None:
        kind, message = kept
        {"success": st.success, "warning": st.warning, "error": st.error}.get(kind, st.info)(message)


# Dialogs stay open through a session flag, not through the button that opened them:
# a click inside a dialog reruns without that button being pressed.
def open_dialog(name: str, value: Any = True) -> None:
    st.session_state[f"oreo_dialog_{name}"] = value


def dialog_value(name: str) -> Any:
    """What ``open_dialog`` stored for an open dialog, or None while it is closed."""
    return st.session_state.get(f"oreo_dialog_{name}")


def close_dialog(name: str) -> None:
    st.session_state.pop(f"oreo_dialog_{name}", None)


def dialogs_open(*names: str) -> bool:
    """Whether one of the page's dialogs ``names`` is open: its timed fragments then pause (``paused``).

    A fragment that reruns on a timer (``st.fragment(run_every=...)``) while a dialog ends
    with ``st.rerun()`` can make the browser drop elements of the page's next run (Streamlit
    1.67: the approver's "Merged" message went missing, seen in one approval in about ten
    under load, and reproduced with a bare dialog and a 0.5-s fragment). Open dialogs are
    set in a button's ``on_click`` (``open_dialog``), so the run that draws a dialog already
    draws the page's timed fragments without their timer; they resume once it closes.
    """
    return any(dialog_value(name) is not None for name in names)


STATUS_BADGES = {
    "passed": ":green-badge[:material/check_circle: passed]",
    "warning": ":orange-badge[:material/warning: warning]",
    "failed": ":red-badge[:material/error: failed]",
}
SEVERITY_BADGES = {
    "critical": ":red-badge[critical]",
    "warning": ":orange-badge[warning]",
    "info": ":blue-badge[info]",
}
# A change request's state (core.change_requests.CRState values) as every page shows it.
STATE_BADGES = {
    "open": ":blue-badge[open]",
    "changes_requested": ":orange-badge[changes requested]",
    "merged": ":green-badge[merged]",
    "rejected": ":red-badge[rejected]",
    "withdrawn": ":gray-badge[withdrawn]",
}


def local_time(value: datetime) -> str:
    """A time as the reader's clock shows it, with its zone (``2026-11-28 23:36 CET``); UTC when the browser
    does not say its zone. Naive times are UTC, as the catalog and the Delta log store them."""
    try:
        zone: tzinfo = ZoneInfo(st.context.timezone) if st.context.timezone else UTC
    except (ZoneInfoNotFoundError, ValueError):
        zone = UTC
    local = (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


def status_badge(status: str | None) -> str:
    """Markdown badge for a validation status ("not validated" when there is none)."""
    if status is None:
        return ":gray-badge[not validated]"
    return STATUS_BADGES.get(status, f":gray-badge[{status}]")


def inbox_link(page: Any, user: auth.User) -> None:
    """The sidebar's link to the Inbox, with a badge counting the user's unread events."""
    try:
        unread = notify.unread_count(catalog(), user)
    except OreoError:  # the catalog is restarting: the page itself will say so
        unread = 0
    label = f"Inbox :red-badge[{unread} unread]" if unread else "Inbox"
    with st.container(key="inbox_badge"):
        st.page_link(page, label=label, icon=":material/notifications:")


def wait_for_engine() -> None:
    """Before Spark work: while the engine is still starting, say so with progress and wait.

    The server starts Spark in the background when it starts (app/main.py); a click that
    comes sooner waits here, under a progress bar paced by the last measured start,
    instead of behind a bare spinner. In-process page tests, which have no server, start
    it here. A failed start is left to the Spark call that follows: it tries once more and
    raises the reason.
    """
    status = engine.engine_status()
    if status.state in ("ready", "failed"):
        return
    if status.state == "idle":
        engine.start_in_background()
    box = st.empty()
    with box.container():
        bar = st.progress(0.0, text="Starting the engine…")
        status = engine.engine_status()
        while status.state == "starting":
            expected = status.expected_s or _FIRST_ENGINE_START_S
            done = min(0.95, status.elapsed_s / expected)
            if status.elapsed_s <= expected:
                text = f"Starting the engine… {status.elapsed_s:.0f} s of about {expected:.0f} s"
            else:  # a busy machine: say so rather than sit at the end of the bar
                text = f"Starting the engine… {status.elapsed_s:.0f} s (slower than the usual {expected:.0f} s)"
            bar.progress(done, text=text)
            status = engine.wait_for_engine(0.5)
    box.empty()


# The progress bar's pace before any start was measured on this data root.
_FIRST_ENGINE_START_S = 20.0
