"""Accounts, sign-in and per-project roles.

Roles are ordered ``editor < approver < admin``; each includes the ones below it, and a
site admin holds ``admin`` everywhere. Every core operation takes the acting ``User`` and
calls ``require_role`` before it touches anything.

Local accounts keep an argon2id hash; password sign-ins are counted per typed username
and per client in the catalog before the password is checked, and throttled from the
fifth failure on. A site admin can disable an account (ending its browser sessions and
API tokens), enable it again, or delete it. New passwords pass ``check_password``. OIDC
accounts (``st.login``) are matched by email; ``sign_in_oidc`` creates the account on
first sign-in and grants the roles that the configured group mapping derives from the
identity provider's group claim. ``core.web_sessions`` keeps either kind signed in.

``SYSTEM`` is the operator at the command line who did not name a user with ``--as``:
whoever can run ``oreo`` on the server already holds the data and the catalog.
"""

from __future__ import annotations

import difflib
import enum
import functools
import math
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy import ColumnElement, bindparam, case, delete, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from zxcvbn.frequency_lists import FREQUENCY_LISTS

from core import audit
from core.catalog import (
    ApiTokenRow,
    Catalog,
    InboxRow,
    MembershipRow,
    ProjectRow,
    SignInFailureRow,
    UserRow,
    WebSessionRow,
    utcnow,
)
from core.config import get_settings
from core.errors import (
    AlreadyExists,
    AuthenticationFailed,
    InvalidInput,
    NotFound,
    PermissionDenied,
)
from core.layout import validate_id

_hasher = PasswordHasher()
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
# The default of the setting OREO_PASSWORD_MIN_LENGTH; NIST SP 800-63B asks for 8 with a common-password check.
MIN_PASSWORD_LENGTH = 8
PASSWORD_SIMILARITY = 0.7  # Django's UserAttributeSimilarityValidator default
# Long enough for any passphrase or password manager, short enough that argon2 is not handed megabytes.
MAX_PASSWORD_LENGTH = 1024
DISABLED_MESSAGE = "this account is disabled; ask a site admin to enable it"


class Role(enum.StrEnum):
    EDITOR = "editor"
    APPROVER = "approver"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @classmethod
    def parse(cls, value: str) -> Role:
        try:
            return cls(value)
        except ValueError as exc:
            raise InvalidInput(
                f"unknown role {value!r}; use one of: {', '.join(r.value for r in cls)}", field="role"
            ) from exc


_RANK = {Role.EDITOR: 1, Role.APPROVER: 2, Role.ADMIN: 3}


@dataclass(frozen=True)
class TokenScope:
    """How a personal access token (core.tokens) narrows its user's roles; it never raises them.

    ``project_id``: the token works in this project only. ``role``: the effective role is
    the lower of the user's and this one. ``account_site_admin``: the account's own flag
    (the acting ``User.site_admin`` is only kept for an unscoped token).
    """

    token_id: str
    project_id: str | None = None
    role: Role | None = None
    account_site_admin: bool = False

    def narrow(self, project_id: str, held: Role | None) -> Role | None:
        if self.project_id is not None and project_id != self.project_id:
            return None
        if held is None or self.role is None or held.rank <= self.role.rank:
            return held
        return self.role


@dataclass(frozen=True)
class User:
    id: int
    username: str
    email: str | None = None
    display_name: str | None = None
    site_admin: bool = False
    auth_source: str = "local"
    # Set when the user acts through an API token: every role check goes through it.
    scope: TokenScope | None = None
    disabled: bool = False

    @property
    def label(self) -> str:
        return self.display_name or self.username


SYSTEM = User(id=0, username="system", display_name="command line operator", site_admin=True, auth_source="system")


def user_from_row(row: UserRow) -> User:
    return User(
        id=row.id,
        username=row.username,
        email=row.email,
        display_name=row.display_name,
        site_admin=row.site_admin,
        auth_source=row.auth_source,
        disabled=row.disabled,
    )


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def generate_password() -> str:
    return secrets.token_urlsafe(12)


def check_password(password: str, *, username: str | None = None, email: str | None = None) -> None:
    """Refuse a new password that is too short, too long, only whitespace, one of the most common
    ones, or too much like its user's name or email address.

    The shortest length is the setting ``OREO_PASSWORD_MIN_LENGTH`` (default 8); the common
    passwords are the 30,000 that zxcvbn ships, compared without regard to case. "Too much
    like" the username, the email address or its part before the ``@`` (without regard to
    case): the password holds it and what is left is shorter than the shortest password,
    or the two are alike by Django's rule (a ``difflib`` ratio of 0.7 or more).

    Raises:
        InvalidInput: The password breaks one of these rules (the message names which).
    """
    minimum = get_settings().password_min_length
    if len(password) < minimum:
        raise InvalidInput(f"password must have at least {minimum} characters", field="password")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise InvalidInput(f"password must have at most {MAX_PASSWORD_LENGTH} characters", field="password")
    if not password.strip():
        raise InvalidInput("password must not be only spaces", field="password")
    if password.lower() in _common_passwords():
        raise InvalidInput("password is one of the most common passwords; choose another", field="password")
    for what, value in (("username", username), ("email address", email)):
        if _too_similar(password, value, minimum):
            raise InvalidInput(f"password is too much like the {what}; choose another", field="password")


def _too_similar(password: str, value: str | None, minimum: int) -> bool:
    """Whether ``password`` is mostly ``value`` (or its part before an ``@``): it holds it and the rest is
    shorter than a password may be, or Django's similarity ratio of the two is 0.7 or more."""
    text = password.lower()
    for part in {p for p in ((value or "").lower(), (value or "").lower().split("@", 1)[0]) if len(p) >= 3}:
        if part in text and len(text.replace(part, "")) < minimum:
            return True
        if difflib.SequenceMatcher(a=text, b=part).quick_ratio() >= PASSWORD_SIMILARITY:
            return True
    return False


@functools.cache
def _common_passwords() -> frozenset[str]:
    return frozenset(FREQUENCY_LISTS["passwords"])


def _check_email(email: str | None) -> str | None:
    if email is None or email == "":
        return None
    email = email.strip().lower()
    if _EMAIL.fullmatch(email) is None:
        raise InvalidInput(f"invalid email address {email!r}", field="email")
    return email


def create_user(
    catalog: Catalog,
    username: str,
    *,
    email: str | None = None,
    password: str | None = None,
    site_admin: bool = False,
    display_name: str | None = None,
    actor: User = SYSTEM,
) -> tuple[User, str]:
    """Create a local account.

    Args:
        catalog: The catalog to write to.
        username: A new id-shaped username.
        email: Optional, unique; OIDC sign-ins are matched on it.
        password: Passes ``check_password``; generated when None.
        site_admin: Grant every role in every project.
        display_name: Shown in the UI.
        actor: Who creates it; must be a site admin.

    Returns:
        The user and the password (the generated one, or the one given).

    Raises:
        InvalidInput: Bad username, email or password (see ``check_password``).
        AlreadyExists: Username or email taken.
        PermissionDenied: ``actor`` is not a site admin.
    """
    validate_id(username, kind="username")
    email = _check_email(email)
    if not actor.site_admin:
        raise PermissionDenied(
            f"only a site admin can create users; {actor.username!r} is not one", user=actor.username
        )
    password = password if password is not None else generate_password()
    check_password(password, username=username, email=email)
    with catalog.session() as s:
        if s.scalar(select(UserRow).where(UserRow.username == username)) is not None:
            raise AlreadyExists(f"user {username!r} already exists", kind="user", ident=username)
        if email and s.scalar(select(UserRow).where(UserRow.email == email)) is not None:
            raise AlreadyExists(f"email {email!r} is already used by another user", kind="user", ident=email)
        row = UserRow(
            username=username,
            email=email,
            display_name=display_name,
            password_hash=hash_password(password),
            site_admin=site_admin,
            auth_source="local",
        )
        s.add(row)
        s.flush()
        audit.record(s, audit.UserCreated(actor=actor.username, username=username, site_admin=site_admin))
        return user_from_row(row), password


def set_password(catalog: Catalog, username: str, password: str, *, actor: User = SYSTEM) -> None:
    """Replace a user's password (a site admin, or the user themself) and revoke their browser sessions and API tokens.

    Raises:
        InvalidInput: The new password fails ``check_password``.
        PermissionDenied: ``actor`` is neither a site admin nor ``username``.
        NotFound: No such user.
    """
    check_password(password)
    if not actor.site_admin and actor.username != username:
        raise PermissionDenied("only a site admin can change another user's password", user=actor.username)
    with catalog.session() as s:
        row = _user_row(s, username)
        check_password(password, username=username, email=row.email)
        row.password_hash = hash_password(password)
        # Whoever knew the old password may hold a browser session or have made a token: a new password ends them all.
        _revoke_web_sessions(s, row.id, utcnow())
        tokens = revoke_api_tokens(s, row.id, utcnow())
        audit.record(s, audit.PasswordChanged(actor=actor.username, username=username, tokens_revoked=tokens))


def _revoke_web_sessions(s: Session, user_id: int, now: datetime) -> int:
    result = s.execute(
        update(WebSessionRow)
        .where(WebSessionRow.user_id == user_id, WebSessionRow.revoked_at.is_(None))
        .values(revoked_at=now)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def revoke_api_tokens(s: Session, user_id: int, now: datetime) -> int:
    """Revoke, in the caller's unit of work, every API token of a user not yet revoked; how many that was."""
    result = s.execute(
        update(ApiTokenRow)
        .where(ApiTokenRow.user_id == user_id, ApiTokenRow.revoked_at.is_(None))
        .values(revoked_at=now)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


@dataclass(frozen=True)
class AccessRevoked:
    """What revoking, disabling or deleting an account ended: its browser sessions and its API tokens."""

    username: str
    sessions: int
    tokens: int


def _require_site_admin(actor: User, action: str) -> None:
    if not actor.site_admin:
        raise PermissionDenied(f"only a site admin can {action}; {actor.username!r} is not one", user=actor.username)


def _refuse_last_site_admin(s: Session, row: UserRow, action: str) -> None:
    """Someone must still be able to manage the site in the pages and the API after ``row`` goes."""
    if not row.site_admin or row.disabled:
        return
    others = s.scalar(
        select(func.count())
        .select_from(UserRow)
        .where(UserRow.site_admin.is_(True), UserRow.disabled.is_(False), UserRow.id != row.id)
    )
    if not others:
        raise InvalidInput(
            f"cannot {action} {row.username!r}: it is the last enabled site admin; "
            "create another one first (oreo user add NAME --site-admin)",
            field="username",
        )


def disable_user(catalog: Catalog, username: str, *, actor: User = SYSTEM) -> AccessRevoked:
    """Disable an account: it can no longer sign in, and its browser sessions and API tokens are revoked.

    Its memberships, change requests, comments and history stay; ``enable_user`` lets it sign
    in again (with new sessions and tokens). Disabling a disabled account changes nothing.

    Raises:
        NotFound: No such user.
        PermissionDenied: ``actor`` is not a site admin.
        InvalidInput: It is the last enabled site admin.
    """
    _require_site_admin(actor, "disable accounts")
    now = utcnow()
    with catalog.session() as s:
        row = _user_row(s, username)
        _refuse_last_site_admin(s, row, "disable")
        sessions = _revoke_web_sessions(s, row.id, now)
        tokens = revoke_api_tokens(s, row.id, now)
        if not row.disabled or sessions or tokens:
            row.disabled = True
            audit.record(
                s,
                audit.UserDisabled(
                    actor=actor.username, username=username, sessions_revoked=sessions, tokens_revoked=tokens
                ),
            )
        return AccessRevoked(username, sessions, tokens)


def enable_user(catalog: Catalog, username: str, *, actor: User = SYSTEM) -> User:
    """Let a disabled account sign in again (its revoked sessions and tokens stay revoked).

    Raises:
        NotFound: No such user.
        PermissionDenied: ``actor`` is not a site admin.
    """
    _require_site_admin(actor, "enable accounts")
    with catalog.session() as s:
        row = _user_row(s, username)
        if row.disabled:
            row.disabled = False
            # Failures counted while it was disabled should not hold back its first sign-in.
            s.execute(delete(SignInFailureRow).where(*_is_key(*_throttle_keys(username, None)[0])))
            audit.record(s, audit.UserEnabled(actor=actor.username, username=username))
        return user_from_row(row)


def delete_user(catalog: Catalog, username: str, *, actor: User = SYSTEM) -> AccessRevoked:
    """Delete an account for good, with its memberships, browser sessions, API tokens and inbox.

    What it did stays readable: change requests, comments, history and the audit log keep
    its username as text. The username can be given to a new account later; prefer
    ``disable_user`` to stop someone while keeping the account.

    Raises:
        NotFound: No such user.
        PermissionDenied: ``actor`` is not a site admin.
        InvalidInput: It is the last enabled site admin.
    """
    _require_site_admin(actor, "delete accounts")
    now = utcnow()
    with catalog.session() as s:
        row = _user_row(s, username)
        _refuse_last_site_admin(s, row, "delete")
        sessions = _revoke_web_sessions(s, row.id, now)
        tokens = revoke_api_tokens(s, row.id, now)
        # Explicit rather than through ON DELETE CASCADE, which SQLite only honours with its foreign_keys pragma.
        for table in (MembershipRow, WebSessionRow, ApiTokenRow):
            s.execute(delete(table).where(table.user_id == row.id).execution_options(synchronize_session=False))
        s.execute(delete(InboxRow).where(InboxRow.username == username).execution_options(synchronize_session=False))
        s.execute(delete(SignInFailureRow).where(*_is_key(*_throttle_keys(username, None)[0])))
        audit.record(s, audit.UserDeleted(actor=actor.username, username=username, email=row.email))
        s.delete(row)
        return AccessRevoked(username, sessions, tokens)


def _user_row(s: Session, username: str) -> UserRow:
    row = s.scalar(select(UserRow).where(UserRow.username == username))
    if row is None:
        raise NotFound(f"unknown user {username!r}", kind="user", ident=username)
    return row


def get_user(catalog: Catalog, username: str) -> User:
    """The user called ``username``.

    Raises:
        NotFound: No such user.
    """
    with catalog.session() as s:
        return user_from_row(_user_row(s, username))


def list_users(catalog: Catalog) -> list[User]:
    with catalog.session() as s:
        return [user_from_row(r) for r in s.scalars(select(UserRow).order_by(UserRow.username))]


def authenticate(catalog: Catalog, username: str, password: str, *, client: str | None = None) -> User:
    """Check a local password and return the user.

    Attempts are counted per typed username and per client before the password is checked
    (``_reserve_attempt``), so attempts racing in many processes cannot all reach the check.
    From the fifth counted attempt on, either counter blocks further attempts for
    ``30 s * 2**(failures - 5)`` (at most 15 minutes), without checking the password;
    counters are forgotten after an hour without attempts, and a successful sign-in clears
    the username's and takes its attempt back from the client's. Unknown usernames are
    counted, checked against a dummy hash and refused exactly like known ones.

    Args:
        catalog: The catalog holding the accounts.
        username: What the user typed.
        password: What the user typed.
        client: The client's address (the browser's IP), or None when it is not known.

    Raises:
        AuthenticationFailed: Unknown user, wrong password, too many failures (the message
            never reveals which usernames exist), or a disabled account (said only to whoever
            typed its right password).
    """
    keys = _throttle_keys(username, client)
    who = str(username)[:63] or "?"
    try:
        _reserve_attempt(catalog, keys, utcnow())
    except _Throttled as blocked:
        with catalog.session() as s:
            audit.record(s, audit.SignInFailed(actor=who, reason="throttled", client=client or ""))
        raise AuthenticationFailed(
            f"too many failed sign-ins; wait {_spell_seconds(blocked.wait)} and try again"
        ) from None
    with catalog.session() as s:
        row = s.scalar(select(UserRow).where(UserRow.username == username))
    # The argon2 check runs outside any transaction: it takes long, and the attempt is already counted.
    if not _password_matches(row, password) or row is None:
        _record_failure(catalog, who, client, "invalid")
        raise AuthenticationFailed("invalid username or password")
    if row.disabled:
        _record_failure(catalog, who, client, "disabled")
        raise AuthenticationFailed(DISABLED_MESSAGE)
    return _signed_in(catalog, row.id, password, keys)


class _Throttled(Exception):
    """Raised inside the reservation's unit of work, so that nothing of it is kept."""

    def __init__(self, wait: float) -> None:
        super().__init__(wait)
        self.wait = wait


def _reserve_attempt(catalog: Catalog, keys: list[tuple[str, str]], now: datetime) -> None:
    """Count one attempt against every key, or raise ``_Throttled`` and count none.

    Each key's check and count is one UPDATE under that row's write lock, and the unit of work
    commits before the password is checked: of any number of racing attempts (threads or
    processes sharing the catalog), only as many as the limit get past a key.
    """
    with catalog.session() as s:
        blocked: list[tuple[str, str]] = []
        for kind, key in keys:
            _ensure_counter(s, kind, key, now)
            failures = s.scalar(
                update(SignInFailureRow)
                .where(
                    *_is_key(kind, key),
                    or_(SignInFailureRow.blocked_until.is_(None), SignInFailureRow.blocked_until <= now),
                )
                .values(
                    failures=case(
                        (SignInFailureRow.last_failure_at < now - THROTTLE_FORGET, 1),
                        else_=SignInFailureRow.failures + 1,
                    ),
                    last_failure_at=now,
                )
                .returning(SignInFailureRow.failures)
                .execution_options(synchronize_session=False)
            )
            if failures is None:
                blocked.append((kind, key))
            elif failures >= THROTTLE_AFTER:
                delay = min(THROTTLE_BASE * 2 ** (failures - THROTTLE_AFTER), THROTTLE_MAX)
                s.execute(
                    update(SignInFailureRow)
                    .where(*_is_key(kind, key))
                    .values(blocked_until=now + delay)
                    .execution_options(synchronize_session=False)
                )
        if blocked:
            raise _Throttled(_blocked_for(s, blocked, now))


def _ensure_counter(s: Session, kind: str, key: str, now: datetime) -> None:
    """Insert the key's counter at zero unless another attempt already did (in any process)."""
    values = {"kind": kind, "key": key, "failures": 0, "last_failure_at": now}
    dialect = s.get_bind().dialect.name
    if dialect == "postgresql":
        s.execute(postgresql.insert(SignInFailureRow).values(**values).on_conflict_do_nothing())
    elif dialect == "sqlite":
        s.execute(sqlite.insert(SignInFailureRow).values(**values).on_conflict_do_nothing())
    else:
        try:
            with s.begin_nested():
                s.execute(insert(SignInFailureRow).values(**values))
        except IntegrityError:
            pass  # another attempt inserted it first


def _record_failure(catalog: Catalog, who: str, client: str | None, reason: str) -> None:
    with catalog.session() as s:
        audit.record(s, audit.SignInFailed(actor=who, reason=reason, client=client or ""))


def _signed_in(catalog: Catalog, user_id: int, password: str, keys: list[tuple[str, str]]) -> User:
    """Record a successful sign-in: clear the username's counter and take this attempt back from the client's."""
    (user_kind, user_key), (client_kind, client_key) = keys
    with catalog.session() as s:
        row = s.get(UserRow, user_id)
        if row is None or row.disabled:
            # Deleted or disabled while its password was being checked.
            raise AuthenticationFailed("invalid username or password" if row is None else DISABLED_MESSAGE)
        if _hasher.check_needs_rehash(row.password_hash or ""):
            row.password_hash = hash_password(password)
        row.last_login_at = utcnow()
        s.execute(delete(SignInFailureRow).where(*_is_key(user_kind, user_key)))
        failures = SignInFailureRow.failures
        s.execute(
            update(SignInFailureRow)
            .where(*_is_key(client_kind, client_key), failures > 0)
            .values(
                failures=failures - 1,
                # Blocked only by this attempt's own count: a good password must not lock its client out.
                blocked_until=case((failures - 1 < THROTTLE_AFTER, None), else_=SignInFailureRow.blocked_until),
            )
            .execution_options(synchronize_session=False)
        )
        audit.record(s, audit.SignedIn(actor=row.username))
        return user_from_row(row)


# Throttling: attempts are counted per typed username and per client, in the catalog, so the
# counts survive restarts and hold across every app process that shares the catalog.
THROTTLE_AFTER = 5
THROTTLE_BASE = timedelta(seconds=30)
THROTTLE_MAX = timedelta(minutes=15)
THROTTLE_FORGET = timedelta(hours=1)


@functools.cache
def _dummy_hash() -> str:
    return _hasher.hash(secrets.token_urlsafe(16))


def _password_matches(row: UserRow | None, password: str) -> bool:
    """Verify ``password``; an unknown or password-less account costs the same argon2 work."""
    usable = row is not None and bool(row.password_hash)
    stored = row.password_hash if usable and row is not None and row.password_hash else _dummy_hash()
    try:
        return _hasher.verify(stored, password) and usable
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def _throttle_keys(username: str, client: str | None) -> list[tuple[str, str]]:
    return [("user", str(username).strip().lower()[:200]), ("client", (client or "unknown")[:200])]


def _is_key(kind: str, key: str) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    return SignInFailureRow.kind == kind, SignInFailureRow.key == key


def _blocked_for(s: Session, keys: list[tuple[str, str]], now: datetime) -> float:
    """Seconds until every counter in ``keys`` allows another attempt (0: allowed now)."""
    wait = 0.0
    for kind, key in keys:
        until = s.scalar(select(SignInFailureRow.blocked_until).where(*_is_key(kind, key)))
        if until is not None and until > now:
            wait = max(wait, (until - now).total_seconds())
    return wait


def _spell_seconds(seconds: float) -> str:
    whole = max(1, math.ceil(seconds))
    if whole < 120:
        return f"{whole} seconds" if whole != 1 else "1 second"
    return f"{math.ceil(whole / 60)} minutes"


def _username_from_email(s: Session, email: str) -> str:
    base = re.sub(r"[^a-z0-9_-]", "-", email.split("@", 1)[0].lower()).strip("-_") or "user"
    base = base[:50]
    if not base[0].isalnum():
        base = "u" + base
    candidate = base
    n = 1
    while s.scalar(select(UserRow).where(UserRow.username == candidate)) is not None:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def grants_from_groups(groups: Iterable[str], group_roles: Mapping[str, Iterable[str]]) -> dict[str, Role]:
    """Project roles that a user's identity-provider groups grant.

    ``group_roles`` maps a group to grants like ``"demo:approver"``; ``"*:admin"`` makes
    the user a site admin (returned under the key ``"*"``).

    Raises:
        InvalidInput: A grant is not ``project:role``.
    """
    granted: dict[str, Role] = {}
    for group in groups:
        for grant in group_roles.get(group, ()):
            project, _, role_name = grant.partition(":")
            if not project or not role_name:
                raise InvalidInput(f"group grant {grant!r} must look like 'project:role'", field="group_roles")
            if project != "*":
                validate_id(project, kind="project id")
            role = Role.parse(role_name)
            if project not in granted or role.rank > granted[project].rank:
                granted[project] = role
    return granted


def sign_in_oidc(
    catalog: Catalog,
    *,
    email: str | None,
    name: str | None = None,
    groups: Iterable[str] = (),
    group_roles: Mapping[str, Iterable[str]] | None = None,
) -> User:
    """Resolve an OIDC identity to an Oreo user, creating it on first sign-in.

    Users are matched by email. Group grants only ever raise a membership, never lower
    one an admin set by hand.

    Raises:
        AuthenticationFailed: The identity has no email, or the matched account is disabled.
    """
    email = _check_email(email) if email else None
    if not email:
        raise AuthenticationFailed(
            "the identity provider did not send an email address; ask your admin to add the email scope"
        )
    grants = grants_from_groups(groups, group_roles or {})
    with catalog.session() as s:
        row = s.scalar(select(UserRow).where(UserRow.email == email))
        if row is None:
            row = UserRow(
                username=_username_from_email(s, email),
                email=email,
                display_name=name,
                password_hash=None,
                site_admin=False,
                auth_source="oidc",
            )
            s.add(row)
            s.flush()
            audit.record(s, audit.UserCreated(actor=row.username, username=row.username, auth_source="oidc"))
        if row.disabled:
            raise AuthenticationFailed(DISABLED_MESSAGE)
        if grants.get("*") == Role.ADMIN and not row.site_admin:
            row.site_admin = True
        for project_id, role in grants.items():
            if project_id == "*" or s.get(ProjectRow, project_id) is None:
                continue
            _raise_membership(s, project_id, row, role, actor=row.username, source="oidc-group")
        row.last_login_at = utcnow()
        audit.record(s, audit.SignedIn(actor=row.username, method="oidc"))
        return user_from_row(row)


def _raise_membership(s: Session, project_id: str, user: UserRow, role: Role, *, actor: str, source: str) -> None:
    member = s.get(MembershipRow, (project_id, user.id))
    if member is not None and Role(member.role).rank >= role.rank:
        return
    if member is None:
        s.add(MembershipRow(project_id=project_id, user_id=user.id, role=role.value))
    else:
        member.role = role.value
    audit.record(
        s, audit.MemberAdded(actor=actor, project_id=project_id, username=user.username, role=role.value, source=source)
    )


def role_in(catalog: Catalog, user: User, project_id: str) -> Role | None:
    """The user's role in a project; site admins are admins everywhere; a token's scope narrows it."""
    site_admin = user.scope.account_site_admin if user.scope is not None else user.site_admin
    if site_admin:
        return role_within(None, user, project_id)
    with catalog.session() as s:
        return role_within(s, user, project_id)


# A member's role, built once: an open page's heartbeat (core.presence) reads it every few seconds.
_MEMBER_ROLE = select(MembershipRow.role).where(
    MembershipRow.project_id == bindparam("b_project_id"), MembershipRow.user_id == bindparam("b_user_id")
)


def role_within(s: Session | None, user: User, project_id: str) -> Role | None:
    """``role_in`` inside a unit of work of the caller's (``s`` may be None for a site admin).

    Reads the membership as the database has it (flushed), on the unit of work's connection.
    """
    site_admin = user.scope.account_site_admin if user.scope is not None else user.site_admin
    if site_admin:
        held: Role | None = Role.ADMIN
    else:
        assert s is not None, "a member's role is read from the catalog"
        member = s.connection().execute(_MEMBER_ROLE, {"b_project_id": project_id, "b_user_id": user.id}).scalar()
        held = Role(member) if member is not None else None
    return user.scope.narrow(project_id, held) if user.scope is not None else held


def require_role(catalog: Catalog, user: User, project_id: str, needed: Role, *, action: str) -> Role:
    """Raise ``PermissionDenied`` unless ``user`` holds ``needed`` (or higher) in the project."""
    held = role_in(catalog, user, project_id)
    if held is None or held.rank < needed.rank:
        have = f"has the {held.value} role" if held else "is not a member"
        raise PermissionDenied(
            f"{user.username!r} cannot {action}: it needs the {needed.value} role in project "
            f"{project_id!r} and {user.username!r} {have}",
            user=user.username,
            project_id=project_id,
            required=needed.value,
        )
    return held


def add_member(catalog: Catalog, project_id: str, username: str, role: str | Role, *, actor: User = SYSTEM) -> None:
    """Give ``username`` a role in a project, replacing any role it had (needs admin)."""
    validate_id(project_id, kind="project id")
    role = Role.parse(str(role))
    with catalog.session() as s:
        if s.get(ProjectRow, project_id) is None:
            raise NotFound(f"unknown project {project_id!r}", kind="project", ident=project_id)
        user = _user_row(s, username)
    require_role(catalog, actor, project_id, Role.ADMIN, action="manage project members")
    with catalog.session() as s:
        member = s.get(MembershipRow, (project_id, user.id))
        if member is None:
            s.add(MembershipRow(project_id=project_id, user_id=user.id, role=role.value))
        else:
            member.role = role.value
        audit.record(
            s, audit.MemberAdded(actor=actor.username, project_id=project_id, username=username, role=role.value)
        )


def memberships(catalog: Catalog, user: User) -> dict[str, Role]:
    """Project id -> role for every project the user may see (through a token: as its scope narrows them)."""
    site_admin = user.scope.account_site_admin if user.scope is not None else user.site_admin
    with catalog.session() as s:
        if site_admin:
            held = {p: Role.ADMIN for p in s.scalars(select(ProjectRow.id))}
        else:
            rows = s.scalars(select(MembershipRow).where(MembershipRow.user_id == user.id))
            held = {m.project_id: Role(m.role) for m in rows}
    if user.scope is None:
        return held
    scope = user.scope
    narrowed = {p: scope.narrow(p, r) for p, r in held.items()}
    return {p: r for p, r in narrowed.items() if r is not None}


def highest_role(catalog: Catalog, user: User) -> Role | None:
    """The strongest role the user holds in any project (drives which pages are listed)."""
    roles = memberships(catalog, user).values()
    if user.site_admin:
        return Role.ADMIN
    return max(roles, key=lambda r: r.rank, default=None)
