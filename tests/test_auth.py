"""Accounts, password and OIDC sign-in, and the project role model."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from argon2 import PasswordHasher
from sqlalchemy import select, update

from core import auth, tokens, web_sessions
from core.audit import list_events
from core.auth import SYSTEM, Role, User
from core.catalog import Catalog, MembershipRow, SignInFailureRow, UserRow, utcnow
from core.config import get_settings
from core.errors import AlreadyExists, AuthenticationFailed, InvalidInput, NotFound, PermissionDenied
from core.projects import create_project

GROUP_ROLES = {"leads": ["demo:approver"], "platform": ["*:admin"], "staff": ["demo:editor", "other:editor"]}


def _stored_hash(catalog: Catalog, username: str) -> str | None:
    with catalog.session() as s:
        return s.scalars(select(UserRow.password_hash).where(UserRow.username == username)).one()


def _membership(catalog: Catalog, project_id: str, user: User) -> str | None:
    with catalog.session() as s:
        row = s.get(MembershipRow, (project_id, user.id))
        return row.role if row is not None else None


@pytest.fixture
def demo(catalog: Catalog) -> Catalog:
    """A catalog with project ``demo`` and one user per role in it."""
    create_project(catalog, "demo")
    for role in Role:
        auth.create_user(catalog, role.value, email=f"{role.value}@example.com", password=f"{role.value}-password")
        auth.add_member(catalog, "demo", role.value, role)
    return catalog


# ---------------------------------------------------------------- accounts


def test_create_user_generates_a_password_and_stores_only_an_argon2_hash(catalog: Catalog) -> None:
    user, password = auth.create_user(catalog, "alice", email="Alice@Example.COM", display_name="Alice A.")
    assert user.username == "alice"
    assert user.email == "alice@example.com"
    assert user.label == "Alice A."
    assert not user.site_admin and user.auth_source == "local"
    assert len(password) >= auth.MIN_PASSWORD_LENGTH

    stored = _stored_hash(catalog, "alice")
    assert stored is not None and stored.startswith("$argon2id$")
    assert password not in stored
    assert PasswordHasher().verify(stored, password)

    _, other = auth.create_user(catalog, "bob")
    assert other != password  # generated, not a constant
    [event] = list_events(catalog, name="user_created", limit=1)
    assert (event.actor, event.target) == ("system", "user:bob")


def test_the_product_hashes_passwords_and_tokens_at_argon2s_default_work_factor() -> None:
    """The suite hashes cheaply (tests/conftest.py); a process of the product uses argon2id's defaults."""
    code = "from core import auth, tokens; print(auth._hasher.hash('x')); print(tokens._hasher.hash('x'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    default = PasswordHasher()
    expected = f"$argon2id$v=19$m={default.memory_cost},t={default.time_cost},p={default.parallelism}$"
    lines = done.stdout.split()
    assert len(lines) == 2 and all(line.startswith(expected) for line in lines), done.stdout
    assert (default.memory_cost, default.time_cost) >= (65536, 3)


def test_create_user_keeps_a_given_password(catalog: Catalog) -> None:
    _, password = auth.create_user(catalog, "alice", password="correct horse battery")
    assert password == "correct horse battery"
    assert PasswordHasher().verify(_stored_hash(catalog, "alice"), "correct horse battery")


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ({"username": "alice"}, {"username": "alice"}, "user 'alice' already exists"),
        (
            {"username": "alice", "email": "a@example.com"},
            {"username": "bob", "email": "A@example.com"},
            "email 'a@example.com' is already used",
        ),
    ],
)
def test_duplicate_username_or_email_is_refused(catalog: Catalog, first: dict, second: dict, message: str) -> None:
    auth.create_user(catalog, **first)
    with pytest.raises(AlreadyExists, match=message):
        auth.create_user(catalog, **second)
    assert [u.username for u in auth.list_users(catalog)] == [first["username"]]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"username": "Alice"}, InvalidInput, "invalid username"),
        ({"username": "al ice"}, InvalidInput, "invalid username"),
        ({"username": ""}, InvalidInput, "username must not be empty"),
        ({"username": "alice", "email": "not-an-email"}, InvalidInput, "invalid email address"),
        ({"username": "alice", "email": "a@b"}, InvalidInput, "invalid email address"),
        ({"username": "alice", "email": "a b@example.com"}, InvalidInput, "invalid email address"),
        ({"username": "alice", "password": "short"}, InvalidInput, "at least 8 characters"),
        ({"username": "alice", "password": ""}, InvalidInput, "at least 8 characters"),
        ({"username": "alice", "actor": User(id=9, username="eve")}, PermissionDenied, "only a site admin"),
    ],
)
def test_bad_accounts_are_refused(catalog: Catalog, kwargs: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        auth.create_user(catalog, **kwargs)
    assert auth.list_users(catalog) == []
    assert list_events(catalog) == []


def test_set_password_by_self_or_site_admin_only(demo: Catalog) -> None:
    editor = auth.get_user(demo, "editor")
    auth.set_password(demo, "editor", "brand-new-password", actor=editor)
    assert auth.authenticate(demo, "editor", "brand-new-password") == editor
    with pytest.raises(PermissionDenied, match="another user's password"):
        auth.set_password(demo, "admin", "taken-over-password", actor=editor)
    with pytest.raises(InvalidInput, match="at least 8"):
        auth.set_password(demo, "editor", "short")
    with pytest.raises(NotFound, match="unknown user 'ghost'"):
        auth.set_password(demo, "ghost", "long-enough-password")


# ---------------------------------------------------------------- password sign-in


def test_authenticate_ok_records_sign_in(catalog: Catalog) -> None:
    user, password = auth.create_user(catalog, "alice")
    assert auth.authenticate(catalog, "alice", password) == user
    [event] = list_events(catalog, name="signed_in")
    assert event.actor == "alice"
    with catalog.session() as s:
        assert s.scalars(select(UserRow.last_login_at).where(UserRow.username == "alice")).one() is not None


@pytest.mark.parametrize(
    ("username", "password"),
    [("alice", "wrong-password"), ("alice", ""), ("nobody", "alice-password"), ("", "alice-password")],
)
def test_failed_sign_in_gives_one_message_and_is_audited(catalog: Catalog, username: str, password: str) -> None:
    auth.create_user(catalog, "alice", password="alice-password")
    with pytest.raises(AuthenticationFailed) as info:
        auth.authenticate(catalog, username, password)
    assert str(info.value) == "invalid username or password"  # never says which part was wrong
    [event] = list_events(catalog, name="sign_in_failed")
    assert event.actor == (username or "?")
    assert list_events(catalog, name="signed_in") == []


def test_disabled_account_cannot_sign_in(catalog: Catalog) -> None:
    _, password = auth.create_user(catalog, "alice")
    with catalog.session() as s:
        s.scalars(select(UserRow).where(UserRow.username == "alice")).one().disabled = True
    # Only whoever knows the password learns that the account is disabled.
    with pytest.raises(AuthenticationFailed, match=r"^this account is disabled; ask a site admin to enable it$"):
        auth.authenticate(catalog, "alice", password)
    with pytest.raises(AuthenticationFailed, match=r"^invalid username or password$"):
        auth.authenticate(catalog, "alice", password + "x")
    assert [e.details["reason"] for e in list_events(catalog, name="sign_in_failed")] == ["invalid", "disabled"]
    assert list_events(catalog, name="signed_in") == []


# ---------------------------------------------------------------- password policy


@pytest.mark.parametrize(
    ("password", "message"),
    [
        ("seven77", "at least 8 characters"),
        ("x" * 1025, "at most 1024 characters"),
        (" " * 12, "must not be only spaces"),
        ("\t \n  \t  \n", "must not be only spaces"),
        ("password123", "one of the most common passwords"),
        ("Qwertyuiop", "one of the most common passwords"),
        ("iloveyou", "one of the most common passwords"),
    ],
)
def test_the_password_policy_refuses_weak_passwords(catalog: Catalog, password: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        auth.create_user(catalog, "alice", password=password)
    assert auth.list_users(catalog) == []
    auth.create_user(catalog, "bob", password="bob-password-1")
    with pytest.raises(InvalidInput, match=message):
        auth.set_password(catalog, "bob", password)
    assert auth.authenticate(catalog, "bob", "bob-password-1").username == "bob"


@pytest.mark.parametrize(
    ("password", "what"),
    [
        ("alice2024!", "username"),
        ("ALICE-alice", "username"),
        ("alice.liddell7", "email address"),
        ("Alice.Liddell!", "email address"),
    ],
)
def test_a_password_too_much_like_the_user_s_name_or_email_is_refused(
    catalog: Catalog, password: str, what: str
) -> None:
    with pytest.raises(InvalidInput, match=f"password is too much like the {what}; choose another"):
        auth.create_user(catalog, "alice", password=password, email="alice.liddell@example.test")
    assert auth.list_users(catalog) == []
    auth.create_user(catalog, "alice", password="alice-in-wonderland-1865", email="alice.liddell@example.test")
    with pytest.raises(InvalidInput, match=f"too much like the {what}"):
        auth.set_password(catalog, "alice", password)
    assert auth.authenticate(catalog, "alice", "alice-in-wonderland-1865").username == "alice"


def test_the_password_policy_accepts_long_and_generated_passwords(catalog: Catalog) -> None:
    auth.create_user(catalog, "alice", password="x" * 1000 + " correct horse")
    auth.create_user(catalog, "bob", password=auth.generate_password())
    assert [u.username for u in auth.list_users(catalog)] == ["alice", "bob"]


def test_the_shortest_password_is_a_setting(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OREO_PASSWORD_MIN_LENGTH", "16")
    get_settings.cache_clear()
    try:
        with pytest.raises(InvalidInput, match="at least 16 characters"):
            auth.create_user(catalog, "alice", password="fifteen-chars-x")
        auth.create_user(catalog, "alice", password="sixteen-chars-xy")
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


# ---------------------------------------------------------------- disabling and deleting accounts


def test_disabling_ends_sessions_and_tokens_and_enabling_lets_the_user_back(catalog: Catalog) -> None:
    alice, password = auth.create_user(catalog, "alice")
    cookie = web_sessions.start_web_session(catalog, alice, "password")
    token = tokens.create_token(catalog, "alice")

    revoked = auth.disable_user(catalog, "alice")
    assert (revoked.sessions, revoked.tokens) == (1, 1)
    assert web_sessions.resume_web_session(catalog, cookie) is None
    with pytest.raises(AuthenticationFailed, match="revoked"):
        tokens.authenticate_token(catalog, token.secret)
    with pytest.raises(AuthenticationFailed, match="this account is disabled"):
        auth.authenticate(catalog, "alice", password)
    assert auth.get_user(catalog, "alice").disabled
    assert auth.disable_user(catalog, "alice") == auth.AccessRevoked("alice", 0, 0)  # nothing left to end

    auth.enable_user(catalog, "alice")
    assert auth.authenticate(catalog, "alice", password).username == "alice"
    assert web_sessions.resume_web_session(catalog, cookie) is None  # what was revoked stays revoked
    events = [(e.name, e.actor, e.target) for e in list_events(catalog) if e.name in ("user_disabled", "user_enabled")]
    assert sorted(events) == [("user_disabled", "system", "user:alice"), ("user_enabled", "system", "user:alice")]


def test_a_disabled_user_cannot_sign_in_with_sso(catalog: Catalog) -> None:
    auth.create_user(catalog, "alice", email="alice@example.com")
    auth.disable_user(catalog, "alice")
    with pytest.raises(AuthenticationFailed, match="this account is disabled; ask a site admin"):
        auth.sign_in_oidc(catalog, email="alice@example.com")


@pytest.mark.parametrize("action", [auth.disable_user, auth.enable_user, auth.delete_user])
def test_only_site_admins_manage_accounts(catalog: Catalog, action) -> None:  # type: ignore[no-untyped-def]
    auth.create_user(catalog, "alice")
    bob, _ = auth.create_user(catalog, "bob")
    with pytest.raises(PermissionDenied, match=r"only a site admin can (disable|enable|delete) accounts; 'bob'"):
        action(catalog, "alice", actor=bob)
    with pytest.raises(NotFound, match="unknown user 'ghost'"):
        action(catalog, "ghost")
    assert not auth.get_user(catalog, "alice").disabled


@pytest.mark.parametrize("action", [auth.disable_user, auth.delete_user])
def test_the_last_site_admin_stays(catalog: Catalog, action) -> None:  # type: ignore[no-untyped-def]
    root, _ = auth.create_user(catalog, "root", site_admin=True)
    with pytest.raises(InvalidInput, match="'root': it is the last enabled site admin"):
        action(catalog, "root")
    assert auth.get_user(catalog, "root") == root
    auth.create_user(catalog, "root2", site_admin=True)
    action(catalog, "root", actor=root)  # another one is left: allowed, even for themself
    with pytest.raises(InvalidInput, match="last enabled site admin"):
        action(catalog, "root2")


def test_deleting_keeps_what_the_user_did_readable(demo: Catalog) -> None:
    editor = auth.get_user(demo, "editor")
    cookie = web_sessions.start_web_session(demo, editor, "password")
    token = tokens.create_token(demo, "editor")
    root, _ = auth.create_user(demo, "root", site_admin=True)

    assert auth.delete_user(demo, "editor", actor=root) == auth.AccessRevoked("editor", 1, 1)
    with pytest.raises(NotFound, match="unknown user 'editor'"):
        auth.get_user(demo, "editor")
    assert web_sessions.resume_web_session(demo, cookie) is None
    with pytest.raises(AuthenticationFailed):
        tokens.authenticate_token(demo, token.secret)
    with pytest.raises(AuthenticationFailed, match="invalid username or password"):
        auth.authenticate(demo, "editor", "editor-password")
    with demo.session() as s:
        assert s.scalar(select(MembershipRow).where(MembershipRow.user_id == editor.id)) is None
    # The audit log still names the account, what it did and who deleted it.
    assert [e.target for e in list_events(demo, name="user_created") if e.details["username"] == "editor"]
    [deleted] = list_events(demo, name="user_deleted")
    assert (deleted.actor, deleted.target, deleted.details["email"]) == ("root", "user:editor", "editor@example.com")
    auth.create_user(demo, "editor", email="editor@example.com")  # the name and email are free again


def test_a_new_password_ends_sessions_and_tokens(catalog: Catalog) -> None:
    alice, _ = auth.create_user(catalog, "alice")
    cookie = web_sessions.start_web_session(catalog, alice, "password")
    token = tokens.create_token(catalog, "alice")
    auth.set_password(catalog, "alice", "a-brand-new-password")
    assert web_sessions.resume_web_session(catalog, cookie) is None
    with pytest.raises(AuthenticationFailed, match="revoked"):
        tokens.authenticate_token(catalog, token.secret)
    [event] = list_events(catalog, name="password_changed")
    assert event.details["tokens_revoked"] == 1


# ---------------------------------------------------------------- roles


@pytest.mark.parametrize(
    ("lower", "higher"), [(Role.EDITOR, Role.APPROVER), (Role.APPROVER, Role.ADMIN), (Role.EDITOR, Role.ADMIN)]
)
def test_roles_are_ordered(lower: Role, higher: Role) -> None:
    assert lower.rank < higher.rank


def test_role_parse() -> None:
    assert Role.parse("approver") is Role.APPROVER
    with pytest.raises(InvalidInput, match="unknown role 'owner'; use one of: editor, approver, admin"):
        Role.parse("owner")


@pytest.mark.parametrize("held", list(Role))
@pytest.mark.parametrize("needed", list(Role))
def test_require_role_allows_the_role_and_below(demo: Catalog, held: Role, needed: Role) -> None:
    user = auth.get_user(demo, held.value)
    if held.rank >= needed.rank:
        assert auth.require_role(demo, user, "demo", needed, action="do it") is held
    else:
        with pytest.raises(PermissionDenied) as info:
            auth.require_role(demo, user, "demo", needed, action="approve changes")
        message = str(info.value)
        assert f"'{held.value}' cannot approve changes" in message
        assert f"needs the {needed.value} role in project 'demo'" in message
        assert f"has the {held.value} role" in message
        assert (info.value.user, info.value.project_id, info.value.required) == (held.value, "demo", needed.value)


def test_non_member_is_told_so(demo: Catalog) -> None:
    stranger, _ = auth.create_user(demo, "stranger")
    assert auth.role_in(demo, stranger, "demo") is None
    with pytest.raises(PermissionDenied, match="'stranger' is not a member"):
        auth.require_role(demo, stranger, "demo", Role.EDITOR, action="read this dataset")


def test_site_admin_is_admin_everywhere(catalog: Catalog) -> None:
    create_project(catalog, "demo")
    create_project(catalog, "other")
    root, _ = auth.create_user(catalog, "root", site_admin=True)
    for project_id in ("demo", "other"):
        assert auth.role_in(catalog, root, project_id) is Role.ADMIN
        assert auth.require_role(catalog, root, project_id, Role.ADMIN, action="x") is Role.ADMIN
    assert auth.memberships(catalog, root) == {"demo": Role.ADMIN, "other": Role.ADMIN}
    assert auth.highest_role(catalog, root) is Role.ADMIN
    assert auth.role_in(catalog, SYSTEM, "demo") is Role.ADMIN


def test_memberships_and_highest_role(demo: Catalog) -> None:
    create_project(demo, "other")
    editor = auth.get_user(demo, "editor")
    auth.add_member(demo, "other", "editor", "approver")
    assert auth.memberships(demo, editor) == {"demo": Role.EDITOR, "other": Role.APPROVER}
    assert auth.highest_role(demo, editor) is Role.APPROVER
    loner, _ = auth.create_user(demo, "loner")
    assert auth.memberships(demo, loner) == {}
    assert auth.highest_role(demo, loner) is None


def test_add_member_replaces_the_role_and_is_audited(demo: Catalog) -> None:
    admin = auth.get_user(demo, "admin")
    editor = auth.get_user(demo, "editor")
    auth.add_member(demo, "demo", "editor", Role.APPROVER, actor=admin)
    assert auth.role_in(demo, editor, "demo") is Role.APPROVER
    [event] = list_events(demo, name="member_added", limit=1)
    assert (event.actor, event.project_id, event.details["username"], event.details["role"]) == (
        "admin",
        "demo",
        "editor",
        "approver",
    )


@pytest.mark.parametrize("actor", ["editor", "approver"])
def test_add_member_requires_an_admin_actor(demo: Catalog, actor: str) -> None:
    auth.create_user(demo, "newbie")
    with pytest.raises(PermissionDenied, match=f"'{actor}' cannot manage project members: it needs the admin role"):
        auth.add_member(demo, "demo", "newbie", "editor", actor=auth.get_user(demo, actor))
    assert auth.role_in(demo, auth.get_user(demo, "newbie"), "demo") is None


@pytest.mark.parametrize(
    ("project_id", "username", "role", "error", "message"),
    [
        ("nope", "editor", "editor", NotFound, "unknown project 'nope'"),
        ("demo", "ghost", "editor", NotFound, "unknown user 'ghost'"),
        ("demo", "editor", "owner", InvalidInput, "unknown role 'owner'"),
        ("De mo", "editor", "editor", InvalidInput, "invalid project id"),
    ],
)
def test_add_member_bad_arguments(
    demo: Catalog, project_id: str, username: str, role: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        auth.add_member(demo, project_id, username, role)


# ---------------------------------------------------------------- OIDC sign-in


def test_oidc_matches_an_existing_account_by_email(demo: Catalog) -> None:
    local = auth.get_user(demo, "editor")
    user = auth.sign_in_oidc(demo, email="EDITOR@example.com", name="Ed Itor")
    assert user == local
    assert len(auth.list_users(demo)) == 3
    [event] = list_events(demo, name="signed_in", limit=1)
    assert (event.actor, event.details["method"]) == ("editor", "oidc")


def test_oidc_creates_the_user_on_first_sign_in(catalog: Catalog) -> None:
    user = auth.sign_in_oidc(catalog, email="Grace.Hopper@Example.com", name="Grace Hopper")
    assert user.username == "grace-hopper"
    assert user.email == "grace.hopper@example.com"
    assert (user.display_name, user.auth_source, user.site_admin) == ("Grace Hopper", "oidc", False)
    assert _stored_hash(catalog, "grace-hopper") is None  # no local password to guess
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(catalog, "grace-hopper", "")
    # The second sign-in finds the same account instead of creating another.
    assert auth.sign_in_oidc(catalog, email="grace.hopper@example.com") == user
    assert [u.username for u in auth.list_users(catalog)] == ["grace-hopper"]
    [created] = list_events(catalog, name="user_created")
    assert created.details["auth_source"] == "oidc"


def test_oidc_username_never_collides(catalog: Catalog) -> None:
    auth.create_user(catalog, "ada")
    user = auth.sign_in_oidc(catalog, email="ada@other.org")
    assert user.username == "ada-2"
    assert auth.sign_in_oidc(catalog, email="Ada@third.org").username == "ada-3"


@pytest.mark.parametrize("email", [None, ""])
def test_oidc_without_email_is_refused(catalog: Catalog, email: str | None) -> None:
    with pytest.raises(AuthenticationFailed, match="did not send an email address"):
        auth.sign_in_oidc(catalog, email=email, name="No Mail", groups=["platform"], group_roles=GROUP_ROLES)
    assert auth.list_users(catalog) == []


def test_oidc_group_mapping_raises_roles(catalog: Catalog) -> None:
    create_project(catalog, "demo")
    create_project(catalog, "other")
    user = auth.sign_in_oidc(catalog, email="lead@example.com", groups=["leads", "staff"], group_roles=GROUP_ROLES)
    assert auth.memberships(catalog, user) == {"demo": Role.APPROVER, "other": Role.EDITOR}
    assert not user.site_admin
    sources = {e.project_id: e.details["source"] for e in list_events(catalog, name="member_added")}
    assert sources == {"demo": "oidc-group", "other": "oidc-group"}


def test_oidc_platform_group_makes_a_site_admin(catalog: Catalog) -> None:
    create_project(catalog, "demo")
    user = auth.sign_in_oidc(catalog, email="ops@example.com", groups=["platform"], group_roles=GROUP_ROLES)
    assert user.site_admin
    assert auth.role_in(catalog, user, "demo") is Role.ADMIN


def test_oidc_groups_never_lower_a_manual_role(demo: Catalog) -> None:
    admin = auth.get_user(demo, "admin")
    user = auth.sign_in_oidc(demo, email="admin@example.com", groups=["leads", "staff"], group_roles=GROUP_ROLES)
    assert user == admin
    assert _membership(demo, "demo", admin) == "admin"
    assert list_events(demo, name="member_added", limit=10)[0].details["source"] == "manual"


def test_oidc_groups_raise_a_lower_manual_role(demo: Catalog) -> None:
    editor = auth.get_user(demo, "editor")
    auth.sign_in_oidc(demo, email="editor@example.com", groups=["leads"], group_roles=GROUP_ROLES)
    assert _membership(demo, "demo", editor) == "approver"


def test_oidc_grants_for_unknown_projects_are_skipped(catalog: Catalog) -> None:
    user = auth.sign_in_oidc(catalog, email="lead@example.com", groups=["leads"], group_roles=GROUP_ROLES)
    assert auth.memberships(catalog, user) == {}


def test_grants_from_groups_keeps_the_strongest_role() -> None:
    mapping = {"a": ["demo:editor"], "b": ["demo:admin", "x:approver"], "c": ["demo:approver"]}
    assert auth.grants_from_groups(["a", "b", "c", "unmapped"], mapping) == {"demo": Role.ADMIN, "x": Role.APPROVER}
    assert auth.grants_from_groups([], mapping) == {}


@pytest.mark.parametrize(
    ("grant", "message"),
    [
        ("demo", "must look like 'project:role'"),
        (":admin", "must look like"),
        ("demo:owner", "unknown role"),
        ("De mo:admin", "invalid project id"),
    ],
)
def test_bad_group_grants_are_refused(grant: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        auth.grants_from_groups(["g"], {"g": [grant]})


# ---------------------------------------------------------------- throttling failed sign-ins


def _failure_row(catalog: Catalog, kind: str, key: str) -> SignInFailureRow | None:
    with catalog.session() as s:
        return s.get(SignInFailureRow, (kind, key))


def _unblock(catalog: Catalog) -> None:
    """Let every block lapse, as if its delay had passed (the counts stay)."""
    with catalog.session() as s:
        s.execute(
            update(SignInFailureRow)
            .where(SignInFailureRow.blocked_until.is_not(None))
            .values(blocked_until=utcnow() - timedelta(seconds=1))
        )


def _fail(catalog: Catalog, username: str, client: str = "10.0.0.1", times: int = 1) -> None:
    for _ in range(times):
        with pytest.raises(AuthenticationFailed, match=r"^invalid username or password$"):
            auth.authenticate(catalog, username, "wrong-password", client=client)


@pytest.mark.parametrize("username", ["alice", "nobody"], ids=["known-user", "unknown-user"])
def test_five_failures_block_the_username_with_one_message_for_known_and_unknown(
    catalog: Catalog, username: str
) -> None:
    auth.create_user(catalog, "alice", password="alice-password")
    for client in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"):
        _fail(catalog, username, client=client)
    assert _failure_row(catalog, "user", username).blocked_until is None  # four failures: no delay yet
    _fail(catalog, username, client="10.0.0.5")

    # Even the right password from a fresh client is not checked while the username is blocked.
    with pytest.raises(AuthenticationFailed) as info:
        auth.authenticate(catalog, username, f"{username}-password", client="10.0.0.9")
    # 30 s from the fifth failure; a slow machine (argon2 under load) may already show 29.
    assert re.fullmatch(r"too many failed sign-ins; wait (29|30) seconds and try again", str(info.value))
    assert list_events(catalog, name="signed_in") == []
    throttled = [e for e in list_events(catalog, name="sign_in_failed") if e.details["reason"] == "throttled"]
    assert [(e.actor, e.details["client"]) for e in throttled] == [(username, "10.0.0.9")]
    assert _failure_row(catalog, "user", username).failures == 5  # a refused attempt is not counted


def test_the_delay_doubles_per_failure_up_to_fifteen_minutes(catalog: Catalog) -> None:
    delays = []
    for _ in range(11):
        _fail(catalog, "alice", client="10.0.0.1")
        row = _failure_row(catalog, "user", "alice")
        if row.blocked_until is not None:
            delays.append(round((row.blocked_until - row.last_failure_at).total_seconds()))
        _unblock(catalog)
    assert delays == [30, 60, 120, 240, 480, 900, 900]


def test_five_failures_block_the_client_for_every_username(catalog: Catalog) -> None:
    auth.create_user(catalog, "alice", password="alice-password")
    for name in ("u1", "u2", "u3", "u4", "u5"):
        _fail(catalog, name, client="10.6.6.6")
    with pytest.raises(AuthenticationFailed, match="too many failed sign-ins"):
        auth.authenticate(catalog, "alice", "alice-password", client="10.6.6.6")
    # Another client is not held back by that one.
    assert auth.authenticate(catalog, "alice", "alice-password", client="10.0.0.1").username == "alice"


def test_success_clears_the_usernames_count_and_an_hour_forgets_failures(catalog: Catalog) -> None:
    auth.create_user(catalog, "alice", password="alice-password")
    _fail(catalog, "alice", times=4)
    auth.authenticate(catalog, "alice", "alice-password", client="10.0.0.1")
    assert _failure_row(catalog, "user", "alice") is None
    assert _failure_row(catalog, "client", "10.0.0.1").failures == 4

    with catalog.session() as s:
        s.execute(update(SignInFailureRow).values(last_failure_at=utcnow() - timedelta(hours=1, seconds=1)))
    _fail(catalog, "bob", client="10.0.0.1")
    assert _failure_row(catalog, "client", "10.0.0.1").failures == 1


def test_unknown_users_cost_a_password_check_too(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Answering "no such user" faster than "wrong password" would tell which usernames exist."""
    checked: list[str] = []

    class CountingHasher(PasswordHasher):
        def verify(self, hash: str | bytes, password: str | bytes) -> bool:
            checked.append(str(hash))
            return super().verify(hash, password)

    monkeypatch.setattr(auth, "_hasher", CountingHasher())
    auth.create_user(catalog, "alice", password="alice-password")
    _fail(catalog, "nobody")
    _fail(catalog, "alice")
    assert len(checked) == 2 and all(h.startswith("$argon2id$") for h in checked)


def test_two_first_failures_at_once_both_count(catalog: Catalog) -> None:
    """Two first attempts for one key in two processes both count: the counter is inserted once, then raised."""
    now = utcnow()
    with catalog.session() as other:  # another process inserted the counter between our two statements
        auth._ensure_counter(other, "user", "alice", now)
        other.execute(update(SignInFailureRow).values(failures=1))
    _fail(catalog, "alice")
    assert _failure_row(catalog, "user", "alice").failures == 2
    assert _failure_row(catalog, "client", "10.0.0.1").failures == 1
    assert len(list_events(catalog, name="sign_in_failed")) == 1


class _CountingHasher(PasswordHasher):
    """Counts argon2 checks, from any thread."""

    def __init__(self) -> None:
        super().__init__()
        self.checked = 0
        self._lock = threading.Lock()

    def verify(self, hash: str | bytes, password: str | bytes) -> bool:
        with self._lock:
            self.checked += 1
        return super().verify(hash, password)


def _sign_in_at_once(url: str, attempts: int, username: str, password: str) -> list[str]:
    """``attempts`` sign-ins started together, each on its own engine (as separate processes would be)."""
    start = threading.Barrier(attempts)

    def attempt(client: str) -> str:
        own = Catalog(url)
        try:
            start.wait(timeout=60)
            auth.authenticate(own, username, password, client=client)
            return "signed in"
        except AuthenticationFailed as exc:
            return str(exc)
        finally:
            own.engine.dispose()

    with ThreadPoolExecutor(max_workers=attempts) as pool:
        return list(pool.map(attempt, [f"10.1.0.{n}" for n in range(attempts)]))


@pytest.mark.parametrize("username", ["alice", "nobody"], ids=["known-user", "unknown-user"])
def test_concurrent_wrong_passwords_get_at_most_the_limit_of_checks(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, username: str
) -> None:
    auth.create_user(catalog, "alice", password="alice-password")
    hasher = _CountingHasher()
    monkeypatch.setattr(auth, "_hasher", hasher)

    answers = _sign_in_at_once(catalog.url, 30, username, "wrong-password")

    assert hasher.checked == auth.THROTTLE_AFTER
    assert answers.count("invalid username or password") == auth.THROTTLE_AFTER
    assert sum(a.startswith("too many failed sign-ins") for a in answers) == 30 - auth.THROTTLE_AFTER
    assert _failure_row(catalog, "user", username).failures == auth.THROTTLE_AFTER
    assert _failure_row(catalog, "user", username).blocked_until is not None


def test_concurrent_right_passwords_leave_nobody_blocked(catalog: Catalog) -> None:
    auth.create_user(catalog, "alice", password="alice-password")
    answers = _sign_in_at_once(catalog.url, 8, "alice", "alice-password")
    # Each is counted before its check (so a few may be told to wait); those that got in take their count back.
    assert "signed in" in answers
    with catalog.session() as s:
        left = [(r.kind, r.key, r.failures, r.blocked_until) for r in s.scalars(select(SignInFailureRow))]
    assert all(failures == 0 and until is None for kind, _, failures, until in left if kind == "client"), left
    assert ("user", "alice") not in {(kind, key) for kind, key, _, _ in left}
    assert auth.authenticate(catalog, "alice", "alice-password", client="10.1.0.0").username == "alice"
