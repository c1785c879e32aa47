"""Browser sign-in sessions: opaque tokens, idle and absolute expiry, sign-out and revocation, and their CLI."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update
from streamlit.testing.v1 import AppTest

from cli import context
from cli import main as cli
from core import auth, web_sessions
from core.audit import list_events
from core.catalog import Catalog, UserRow, WebSessionRow, utcnow
from core.config import get_settings
from core.errors import InvalidInput, NotFound, PermissionDenied


@pytest.fixture
def alice(catalog: Catalog) -> auth.User:
    user, _ = auth.create_user(catalog, "alice", password="alice-password")
    return user


def _row(catalog: Catalog, token: str) -> WebSessionRow:
    with catalog.session() as s:
        return s.scalars(
            select(WebSessionRow).where(WebSessionRow.token_sha256 == hashlib.sha256(token.encode()).hexdigest())
        ).one()


def _age(catalog: Catalog, token: str, **values: object) -> None:
    """Move a session's clocks, as if time had passed."""
    with catalog.session() as s:
        s.execute(
            update(WebSessionRow)
            .where(WebSessionRow.token_sha256 == hashlib.sha256(token.encode()).hexdigest())
            .values(**values)
        )


def test_a_session_stores_only_the_tokens_hash_and_resumes_the_user(catalog: Catalog, alice: auth.User) -> None:
    token = web_sessions.start_web_session(catalog, alice, "password", client="10.0.0.7 · Firefox")
    other = web_sessions.start_web_session(catalog, alice, "password")
    assert token != other and len(token) >= 40  # 32 random bytes, URL-safe

    row = _row(catalog, token)
    assert token not in (row.id, row.token_sha256, row.client)
    assert (row.method, row.client, row.revoked_at) == ("password", "10.0.0.7 · Firefox", None)
    assert row.expires_at - row.created_at == timedelta(days=7)

    resumed = web_sessions.resume_web_session(catalog, token)
    assert resumed is not None
    assert (resumed.user, resumed.method, resumed.state, resumed.id) == (alice, "password", "active", row.id)
    [event] = list_events(catalog, name="web_session_started", limit=1)
    assert (event.actor, event.details["method"]) == ("alice", "password")


@pytest.mark.parametrize("token", ["", None, "not-a-token", "x" * 43])
def test_unknown_tokens_resume_nothing(catalog: Catalog, alice: auth.User, token: str | None) -> None:
    web_sessions.start_web_session(catalog, alice, "password")
    assert web_sessions.resume_web_session(catalog, token) is None


def test_idle_timeout_ends_a_session_and_use_keeps_it_alive(catalog: Catalog, alice: auth.User) -> None:
    token = web_sessions.start_web_session(catalog, alice, "oidc")
    now = utcnow()
    _age(catalog, token, last_seen_at=now - timedelta(hours=11, minutes=59))
    resumed = web_sessions.resume_web_session(catalog, token)
    assert resumed is not None and resumed.method == "oidc"
    # Resuming touched last_seen_at (it was older than a minute), so the idle clock restarted.
    assert _row(catalog, token).last_seen_at >= now

    _age(catalog, token, last_seen_at=now - timedelta(hours=12, seconds=1))
    assert web_sessions.resume_web_session(catalog, token) is None
    [listed] = web_sessions.list_web_sessions(catalog, "alice")
    assert listed.state == "idle"


def test_last_seen_is_written_at_most_once_a_minute(catalog: Catalog, alice: auth.User) -> None:
    token = web_sessions.start_web_session(catalog, alice, "password")
    recent = utcnow() - timedelta(seconds=20)
    _age(catalog, token, last_seen_at=recent)
    assert web_sessions.resume_web_session(catalog, token) is not None
    assert _row(catalog, token).last_seen_at == recent


def test_absolute_lifetime_ends_a_session_even_in_use(catalog: Catalog, alice: auth.User) -> None:
    token = web_sessions.start_web_session(catalog, alice, "password")
    _age(catalog, token, expires_at=utcnow() - timedelta(seconds=1))  # last_seen_at is fresh
    assert web_sessions.resume_web_session(catalog, token) is None
    assert web_sessions.list_web_sessions(catalog, "alice")[0].state == "expired"


def test_lifetimes_come_from_the_settings(
    catalog: Catalog, alice: auth.User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_SESSION_IDLE_HOURS", "1")
    monkeypatch.setenv("OREO_SESSION_MAX_DAYS", "2")
    get_settings.cache_clear()
    token = web_sessions.start_web_session(catalog, alice, "password")
    row = _row(catalog, token)
    assert row.expires_at - row.created_at == timedelta(days=2)
    _age(catalog, token, last_seen_at=utcnow() - timedelta(minutes=61))
    assert web_sessions.resume_web_session(catalog, token) is None

    monkeypatch.setenv("OREO_SESSION_IDLE_HOURS", "0")
    get_settings.cache_clear()
    with pytest.raises(InvalidInput, match="OREO_SESSION_IDLE_HOURS must be at least 1, got 0"):
        web_sessions.resume_web_session(catalog, token)


def test_sign_out_revokes_the_token(catalog: Catalog, alice: auth.User) -> None:
    token = web_sessions.start_web_session(catalog, alice, "password")
    kept = web_sessions.start_web_session(catalog, alice, "password")
    assert web_sessions.end_web_session(catalog, token) is True
    assert web_sessions.resume_web_session(catalog, token) is None
    assert web_sessions.end_web_session(catalog, token) is False  # already ended
    assert web_sessions.end_web_session(catalog, "unknown") is False
    assert web_sessions.resume_web_session(catalog, kept) is not None  # other browsers stay signed in
    [event] = list_events(catalog, name="signed_out")
    assert (event.actor, event.details["session_id"]) == ("alice", _row(catalog, token).id)


def test_a_disabled_user_is_not_resumed(catalog: Catalog, alice: auth.User) -> None:
    token = web_sessions.start_web_session(catalog, alice, "password")
    with catalog.session() as s:
        s.scalars(select(UserRow).where(UserRow.username == "alice")).one().disabled = True
    assert web_sessions.resume_web_session(catalog, token) is None


def test_a_new_password_revokes_every_session(catalog: Catalog, alice: auth.User) -> None:
    token = web_sessions.start_web_session(catalog, alice, "password")
    auth.set_password(catalog, "alice", "a-brand-new-password")
    assert web_sessions.resume_web_session(catalog, token) is None
    assert web_sessions.list_web_sessions(catalog, "alice")[0].state == "revoked"


def test_a_site_admin_revokes_a_users_active_sessions(catalog: Catalog, alice: auth.User) -> None:
    root, _ = auth.create_user(catalog, "root", site_admin=True)
    bob, _ = auth.create_user(catalog, "bob")
    tokens = [web_sessions.start_web_session(catalog, alice, method) for method in ("password", "oidc")]
    ended = web_sessions.start_web_session(catalog, alice, "password")
    web_sessions.end_web_session(catalog, ended)
    bobs = web_sessions.start_web_session(catalog, bob, "password")

    assert web_sessions.revoke_user_sessions(catalog, "alice", actor=root) == 2  # the ended one is not counted
    assert all(web_sessions.resume_web_session(catalog, t) is None for t in tokens)
    assert web_sessions.resume_web_session(catalog, bobs) is not None
    assert {w.state for w in web_sessions.list_web_sessions(catalog, "alice")} == {"revoked"}
    assert web_sessions.revoke_user_sessions(catalog, "alice") == 0  # SYSTEM may too; nothing left
    events = list_events(catalog, name="web_sessions_revoked")
    assert [(e.actor, e.target, e.details["revoked"]) for e in events] == [
        ("system", "user:alice", 0),
        ("root", "user:alice", 2),
    ]


def test_only_site_admins_revoke_and_only_they_or_the_user_list(catalog: Catalog, alice: auth.User) -> None:
    bob, _ = auth.create_user(catalog, "bob")
    token = web_sessions.start_web_session(catalog, alice, "password")
    with pytest.raises(PermissionDenied, match="only a site admin can revoke a user's sessions; 'alice' is not one"):
        web_sessions.revoke_user_sessions(catalog, "alice", actor=alice)
    with pytest.raises(PermissionDenied, match="only a site admin can list another user's sessions"):
        web_sessions.list_web_sessions(catalog, "alice", actor=bob)
    assert [w.state for w in web_sessions.list_web_sessions(catalog, "alice", actor=alice)] == ["active"]
    with pytest.raises(NotFound, match="unknown user 'ghost'"):
        web_sessions.revoke_user_sessions(catalog, "ghost")
    assert web_sessions.resume_web_session(catalog, token) is not None
    assert list_events(catalog, name="web_sessions_revoked") == []


def test_unknown_method_is_refused(catalog: Catalog, alice: auth.User) -> None:
    with pytest.raises(InvalidInput, match="unknown sign-in method 'magic'"):
        web_sessions.start_web_session(catalog, alice, "magic")  # type: ignore[arg-type]
    assert web_sessions.list_web_sessions(catalog, "alice") == []


def test_sessions_long_over_are_deleted_at_the_next_sign_in(catalog: Catalog, alice: auth.User) -> None:
    old = web_sessions.start_web_session(catalog, alice, "password")
    recent = web_sessions.start_web_session(catalog, alice, "password")
    _age(catalog, old, expires_at=utcnow() - timedelta(days=8))
    _age(catalog, recent, expires_at=utcnow() - timedelta(days=1))
    web_sessions.start_web_session(catalog, alice, "password")
    assert [w.state for w in web_sessions.list_web_sessions(catalog, "alice")] == ["active", "expired"]


# ---------------------------------------------------------------- CLI


def _oreo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    context.state.json = False
    code = cli.main(list(args))
    context.state.json = False
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_lists_and_revokes_sessions(
    capsys: pytest.CaptureFixture[str], catalog: Catalog, alice: auth.User
) -> None:
    auth.create_user(catalog, "root", site_admin=True)
    token = web_sessions.start_web_session(catalog, alice, "password", client="10.0.0.7 · Firefox 140")
    session_id = _row(catalog, token).id

    code, out, err = _oreo(capsys, "--json", "user", "sessions", "alice")
    assert code == 0, err
    doc = json.loads(out)
    [listed] = doc["sessions"]
    assert doc["username"] == "alice"
    assert (listed["id"], listed["method"], listed["state"], listed["client"]) == (
        session_id,
        "password",
        "active",
        "10.0.0.7 · Firefox 140",
    )
    assert set(listed) == {
        "id", "method", "created_at", "last_seen_at", "expires_at", "idle_expires_at", "client", "state"
    }  # fmt: skip

    code, out, _ = _oreo(capsys, "user", "sessions", "alice")
    assert code == 0
    header, line = out.splitlines()
    assert header.split()[:3] == ["id", "method", "created"]
    assert line.startswith(session_id[:8]) and "active" in line and "10.0.0.7 · Firefox 140" in line

    code, out, err = _oreo(capsys, "--json", "user", "revoke", "alice", "--as", "root")
    assert (code, json.loads(out)) == (0, {"username": "alice", "revoked": 1}), err
    assert web_sessions.resume_web_session(catalog, token) is None
    code, out, _ = _oreo(capsys, "user", "revoke", "alice")
    assert (code, out) == (0, "revoked 0 session(s) of alice\n")
    code, out, _ = _oreo(capsys, "--json", "user", "sessions", "alice")
    assert [s["state"] for s in json.loads(out)["sessions"]] == ["revoked"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("user", "revoke", "alice", "--as", "alice"), "only a site admin can revoke"),
        (("user", "revoke", "ghost"), "unknown user 'ghost'"),
        (("user", "sessions", "ghost"), "unknown user 'ghost'"),
        (("user", "sessions", "alice", "--as", "nobody"), "unknown user 'nobody'"),
    ],
)
def test_cli_refusals_are_one_error_line(
    capsys: pytest.CaptureFixture[str], catalog: Catalog, alice: auth.User, args: tuple[str, ...], message: str
) -> None:
    token = web_sessions.start_web_session(catalog, alice, "password")
    code, out, err = _oreo(capsys, "--json", *args)
    assert (code, out) == (1, "")
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    assert web_sessions.resume_web_session(catalog, token) is not None


# ---------------------------------------------------------------- the app's sign-in gate (AppTest)

APP = Path(__file__).resolve().parent.parent / "app" / "main.py"
SSO_SECRETS = {
    "redirect_uri": "http://localhost:8501/oauth2callback",
    "cookie_secret": "web-session-tests-only",
    "client_id": "oreo",
    "client_secret": "unused",
    "server_metadata_url": "http://localhost:9/.well-known/openid-configuration",
}


def _sso_app(issued_at: datetime) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.secrets["auth"] = SSO_SECRETS
    issued = int(issued_at.timestamp())
    at.user = {"is_logged_in": True, "email": "stella@oreo.example", "name": "Stella", "iat": issued}
    return at


def test_a_fresh_sso_identity_gets_a_web_session(catalog: Catalog) -> None:
    at = _sso_app(utcnow()).run(timeout=60)

    assert not at.exception
    assert at.session_state["oreo_auth_method"] == "oidc"
    [session] = web_sessions.list_web_sessions(catalog, "stella")
    assert (session.method, session.state) == ("oidc", "active")
    assert web_sessions.resume_web_session(catalog, at.session_state["oreo_session_token"]) == session

    # Revoked while the tab is open: the next run signs out here and at the provider.
    web_sessions.revoke_user_sessions(catalog, "stella")
    at.run(timeout=60)
    assert at.user == {"is_logged_in": False}
    assert "oreo_username" not in at.session_state


def test_an_sso_identity_older_than_the_lifetime_is_ended(catalog: Catalog) -> None:
    at = _sso_app(utcnow() - timedelta(days=7, minutes=1)).run(timeout=60)

    assert not at.exception
    assert at.user == {"is_logged_in": False}  # st.logout: sign in at the provider again
    assert "oreo_username" not in at.session_state
    assert auth.list_users(catalog) == []  # not even matched to an account
