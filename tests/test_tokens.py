"""Personal access tokens (core.tokens): shown once, hashed, scopes that narrow and never raise."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from api.app import create_app
from cli import context
from cli import main as cli
from core import auth, projects, tokens, web_sessions
from core.audit import list_events
from core.catalog import ApiTokenRow, Catalog, utcnow
from core.config import get_settings
from core.errors import AuthenticationFailed, InvalidInput, NotFound, PermissionDenied


@pytest.fixture
def team(catalog: Catalog) -> Catalog:
    projects.create_project(catalog, "demo")
    projects.create_project(catalog, "other")
    for name, role in (("ed", "editor"), ("ap", "approver")):
        auth.create_user(catalog, name, password="not-a-common-password")
        auth.add_member(catalog, "demo", name, role)
    auth.add_member(catalog, "other", "ap", "editor")
    auth.create_user(catalog, "root", password="not-a-common-password", site_admin=True)
    return catalog


def test_the_secret_is_shown_once_and_only_its_hash_is_kept(team: Catalog) -> None:
    created = tokens.create_token(team, "ed")
    assert created.secret.startswith(f"oreo_{created.token.id}_")
    with team.session() as s:
        stored = s.scalar(select(ApiTokenRow.secret_hash).where(ApiTokenRow.id == created.token.id))
    assert stored is not None and stored.startswith("$argon2") and created.secret.split("_", 2)[2] not in stored
    assert "secret" not in json.dumps(tokens.list_tokens(team)[0].to_json(), default=str)
    user = tokens.authenticate_token(team, created.secret)
    assert (user.username, user.scope and user.scope.token_id) == ("ed", created.token.id)
    assert [e.name for e in list_events(team, name="token_created")] == ["token_created"]


def test_project_scope_narrows_to_one_project(team: Catalog) -> None:
    user = tokens.authenticate_token(team, tokens.create_token(team, "ap", project_id="other").secret)
    assert auth.role_in(team, user, "other") == auth.Role.EDITOR
    assert auth.role_in(team, user, "demo") is None
    assert auth.memberships(team, user) == {"other": auth.Role.EDITOR}
    with pytest.raises(PermissionDenied):
        auth.require_role(team, user, "demo", auth.Role.EDITOR, action="read")


def test_role_scope_caps_and_never_raises(team: Catalog) -> None:
    capped = tokens.authenticate_token(team, tokens.create_token(team, "ap", role="editor").secret)
    assert auth.role_in(team, capped, "demo") == auth.Role.EDITOR
    with pytest.raises(PermissionDenied):
        auth.require_role(team, capped, "demo", auth.Role.APPROVER, action="approve")
    raised = tokens.authenticate_token(team, tokens.create_token(team, "ed", role="admin").secret)
    assert auth.role_in(team, raised, "demo") == auth.Role.EDITOR
    # A site admin's token scoped to one project is no site admin any more.
    scoped_root = tokens.authenticate_token(team, tokens.create_token(team, "root", project_id="demo").secret)
    assert not scoped_root.site_admin and auth.role_in(team, scoped_root, "other") is None
    assert auth.role_in(team, scoped_root, "demo") == auth.Role.ADMIN
    whole_root = tokens.authenticate_token(team, tokens.create_token(team, "root").secret)
    assert whole_root.site_admin


def test_expired_revoked_garbled_and_wrong_tokens_fail(team: Catalog) -> None:
    expiring = tokens.create_token(team, "ed", expires_days=1)
    with team.session() as s:
        s.execute(
            update(ApiTokenRow).where(ApiTokenRow.id == expiring.token.id).values(expires_at=utcnow() - timedelta(1))
        )
    with pytest.raises(AuthenticationFailed, match="expired"):
        tokens.authenticate_token(team, expiring.secret)
    revoked = tokens.create_token(team, "ed")
    tokens.authenticate_token(team, revoked.secret)  # verified once (and remembered)...
    assert tokens.revoke_token(team, revoked.token.id).state == "revoked"
    with pytest.raises(AuthenticationFailed, match="revoked"):  # ...and still refused once revoked
        tokens.authenticate_token(team, revoked.secret)
    good = tokens.create_token(team, "ed").secret
    for bad in ("", "oreo_", "bearer", good[:-3] + "xyz", good.replace("oreo_", "oreo_f", 1)):
        with pytest.raises(AuthenticationFailed):
            tokens.authenticate_token(team, bad)


def test_creating_checks_the_user_project_role_and_who_asks(team: Catalog) -> None:
    with pytest.raises(NotFound):
        tokens.create_token(team, "nobody")
    with pytest.raises(NotFound):
        tokens.create_token(team, "ed", project_id="nope")
    with pytest.raises(InvalidInput, match="no role"):
        tokens.create_token(team, "ed", project_id="other")
    with pytest.raises(InvalidInput):
        tokens.create_token(team, "ed", role="boss")
    with pytest.raises(InvalidInput):
        tokens.create_token(team, "ed", expires_days=0)
    ed = auth.get_user(team, "ed")
    with pytest.raises(PermissionDenied):
        tokens.create_token(team, "ap", actor=ed)
    own = tokens.create_token(team, "ed", actor=ed)
    with pytest.raises(PermissionDenied):
        tokens.revoke_token(team, own.token.id, actor=auth.get_user(team, "ap"))
    assert not tokens.list_tokens(team)[0].revoked_at


def test_cli_prints_the_token_once_as_one_json_document(
    team: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    context.state.json = False
    assert cli.main(["--json", "token", "create", "--as", "ed", "--project", "demo", "--expires-days", "7"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert {"token", "id", "user", "project", "role", "expires_at"} <= set(created)
    assert created["user"] == "ed" and created["project"] == "demo"
    context.state.json = False
    assert cli.main(["--json", "token", "list"]) == 0
    listed = capsys.readouterr().out
    assert created["id"] in listed and created["token"] not in listed
    context.state.json = False
    assert cli.main(["--json", "token", "list", "--as", "nobody"]) != 0  # not an empty list
    refused = capsys.readouterr()
    assert "nobody" in refused.err and refused.out == ""
    context.state.json = False
    assert cli.main(["token", "revoke", created["id"]]) == 0
    assert "revoked" in capsys.readouterr().out
    with pytest.raises(AuthenticationFailed):
        tokens.authenticate_token(team, created["token"])


def test_tokens_and_idempotency_keys_on_postgres(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 0013 is portable: tokens, and the key row that makes a second claim wait, on PostgreSQL."""
    from api import jobs
    from core.catalog import open_catalog, reset_catalogs
    from core.config import get_settings
    from core.errors import ConflictError

    monkeypatch.setenv("OREO_DATABASE_URL", postgres_url)
    get_settings.cache_clear()
    reset_catalogs()
    catalog = open_catalog()
    auth.create_user(catalog, "pgtoken", password="not-a-common-password")
    created = tokens.create_token(catalog, "pgtoken", role="editor", expires_days=2)
    user = tokens.authenticate_token(catalog, created.secret)
    assert user.scope is not None and user.scope.role == auth.Role.EDITOR
    fingerprint = jobs.request_hash("POST", "/x", {"a": 1})
    assert jobs.claim_key(catalog, user, "k", fingerprint) is None
    with pytest.raises(ConflictError, match="still running"):
        jobs.claim_key(catalog, user, "k", fingerprint)
    jobs.settle_key(catalog, user, "k", jobs.Answer(200, {"done": True}, {}))
    assert jobs.claim_key(catalog, user, "k", fingerprint) == jobs.Answer(200, {"done": True}, {})
    with pytest.raises(ConflictError, match="different request"):
        jobs.claim_key(catalog, user, "k", jobs.request_hash("POST", "/x", {"a": 2}))
    tokens.revoke_token(catalog, created.token.id)
    with pytest.raises(AuthenticationFailed):
        tokens.authenticate_token(catalog, created.secret)


def test_a_key_whose_first_call_failed_on_the_server_side_acts_again(team: Catalog) -> None:
    from api import jobs

    user = tokens.authenticate_token(team, tokens.create_token(team, "ed").secret)
    fingerprint = jobs.request_hash("POST", "/restore", {"version": 1})
    assert jobs.claim_key(team, user, "retry-me", fingerprint) is None
    jobs.settle_key(team, user, "retry-me", None)  # a 503: not kept
    assert jobs.claim_key(team, user, "retry-me", fingerprint) is None
    other = tokens.authenticate_token(team, tokens.create_token(team, "ap").secret)
    assert jobs.claim_key(team, other, "retry-me", fingerprint) is None  # keys are per token


def test_tokens_expire_after_the_default_days_unless_told(team: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    made = tokens.create_token(team, "ed")
    assert made.token.expires_at is not None
    assert abs(made.token.expires_at - (utcnow() + timedelta(days=90))) < timedelta(minutes=5)
    longest = tokens.create_token(team, "ed", expires_days=tokens.MAX_EXPIRES_DAYS)
    assert longest.token.expires_at is not None and longest.token.expires_at > utcnow() + timedelta(days=3649)
    monkeypatch.setenv("OREO_TOKEN_DEFAULT_DAYS", "0")
    get_settings.cache_clear()
    try:
        assert tokens.create_token(team, "ed").token.expires_at is None  # 0: until revoked, as before
        monkeypatch.setenv("OREO_TOKEN_DEFAULT_DAYS", "99999")
        get_settings.cache_clear()
        with pytest.raises(InvalidInput, match="OREO_TOKEN_DEFAULT_DAYS must be between 0 and 3650, got 99999"):
            tokens.create_token(team, "ed")
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


def test_a_token_without_expiry_keeps_working(team: Catalog) -> None:
    made = tokens.create_token(team, "ed")
    with team.session() as s:  # a token made before tokens expired by default
        s.execute(update(ApiTokenRow).where(ApiTokenRow.id == made.token.id).values(expires_at=None))
    assert tokens.authenticate_token(team, made.secret).username == "ed"


@pytest.mark.parametrize("days", [3651, 1_000_000_000, 10**30])
def test_an_absurd_expiry_is_refused_in_words(team: Catalog, capsys: pytest.CaptureFixture[str], days: int) -> None:
    with pytest.raises(InvalidInput, match=rf"--expires-days must be at most 3650 \(ten years\), got {days}"):
        tokens.create_token(team, "ed", expires_days=days)
    context.state.json = False
    assert cli.main(["token", "create", "--as", "ed", "--expires-days", str(days)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [f"error: --expires-days must be at most 3650 (ten years), got {days}"]
    assert tokens.list_tokens(team) == []


def test_a_disabled_users_tokens_answer_401(team: Catalog) -> None:
    made = tokens.create_token(team, "ed")
    client = TestClient(create_app())  # not entered: no lifespan, so no Spark
    bearer = {"Authorization": f"Bearer {made.secret}"}
    assert client.get("/api/v1/projects", headers=bearer).status_code == 200
    auth.disable_user(team, "ed")
    with team.session() as s:  # even a token that disabling did not revoke (e.g. made by hand since)
        s.execute(update(ApiTokenRow).where(ApiTokenRow.id == made.token.id).values(revoked_at=None))
    answer = client.get("/api/v1/projects", headers=bearer)
    assert answer.status_code == 401
    assert answer.json()["error"]["message"] == "this account is disabled; ask a site admin to enable it"


def test_revoking_a_users_access_revokes_their_tokens(team: Catalog) -> None:
    eds = [tokens.create_token(team, "ed") for _ in range(2)]
    aps = tokens.create_token(team, "ap")
    revoked = web_sessions.revoke_user_access(team, "ed")
    assert (revoked.sessions, revoked.tokens) == (0, 2)
    for made in eds:
        with pytest.raises(AuthenticationFailed, match="was revoked"):
            tokens.authenticate_token(team, made.secret)
    assert tokens.authenticate_token(team, aps.secret).username == "ap"
    [event] = list_events(team, name="web_sessions_revoked")
    assert event.details["tokens_revoked"] == 2
