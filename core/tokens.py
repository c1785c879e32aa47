"""Personal access tokens for the HTTP API.

A token reads ``oreo_<id>_<secret>``: it is shown once, at creation; the catalog keeps
only the secret's argon2 hash, so a token is looked up by its id and then verified.
Scopes narrow the user's roles and never raise them: ``project`` limits the token to
one project, ``role`` caps the effective role at the lower of the user's and this one.
The narrowing travels with the acting ``User`` (``auth.TokenScope``), so every core
function's ``require_role`` honours it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy import select

from core import audit
from core.auth import DISABLED_MESSAGE, SYSTEM, Role, TokenScope, User, role_in, user_from_row
from core.catalog import ApiTokenRow, Catalog, ProjectRow, UserRow, utcnow
from core.config import get_settings
from core.errors import AuthenticationFailed, InvalidInput, NotFound, PermissionDenied

PREFIX = "oreo_"
_SHAPE = re.compile(r"oreo_([0-9a-f]{16})_([A-Za-z0-9_-]{20,200})")
_hasher = PasswordHasher()
# A token's last use is written at most this often (not on every request).
_TOUCH_EVERY = timedelta(minutes=1)
# Ten years: a longer life is a typo, and beyond some millions of days the date itself overflows.
MAX_EXPIRES_DAYS = 3650


@dataclass(frozen=True)
class Token:
    """A token as listed: never its secret."""

    id: str
    username: str
    project_id: str | None
    role: str | None
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= utcnow():
            return "expired"
        return "active"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "user": self.username,
            "project": self.project_id,
            "role": self.role,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
            "last_used_at": self.last_used_at,
            "state": self.state,
        }


@dataclass(frozen=True)
class NewToken:
    """A created token and its one-time secret text."""

    token: Token
    secret: str


def _token(row: ApiTokenRow, username: str) -> Token:
    return Token(
        id=row.id,
        username=username,
        project_id=row.project_id,
        role=row.role,
        created_by=row.created_by,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        last_used_at=row.last_used_at,
    )


def create_token(
    catalog: Catalog,
    username: str,
    *,
    project_id: str | None = None,
    role: str | None = None,
    expires_days: int | None = None,
    actor: User = SYSTEM,
) -> NewToken:
    """Create a token for ``username``; its text is returned here and never again.

    Args:
        catalog: The catalog.
        username: Whose token it is.
        project_id: Only this project (the user must hold a role in it).
        role: At most this role (editor, approver or admin).
        expires_days: Valid this many days, at most ``MAX_EXPIRES_DAYS`` (default: the setting
            ``OREO_TOKEN_DEFAULT_DAYS``, 90; when that is 0, until revoked).
        actor: A site admin, or the user themself.

    Raises:
        NotFound: Unknown user or project.
        InvalidInput: A bad role, an expiry out of range, or a project the user is no member of.
        PermissionDenied: ``actor`` may not create tokens for ``username``.
    """
    scope_role = Role.parse(role) if role is not None else None
    if expires_days is None:
        expires_days = get_settings().token_default_days or None
    if expires_days is not None and expires_days <= 0:
        raise InvalidInput(f"--expires-days must be at least 1, got {expires_days}", field="expires_days")
    if expires_days is not None and expires_days > MAX_EXPIRES_DAYS:
        raise InvalidInput(
            f"--expires-days must be at most {MAX_EXPIRES_DAYS} (ten years), got {expires_days}", field="expires_days"
        )
    if not actor.site_admin and actor.username != username:
        raise PermissionDenied(
            f"only a site admin can create tokens for another user; {actor.username!r} is not one", user=actor.username
        )
    with catalog.session() as s:
        user_row = s.scalar(select(UserRow).where(UserRow.username == username))
        if user_row is None:
            raise NotFound(f"unknown user {username!r}", kind="user", ident=username)
        if project_id is not None and s.get(ProjectRow, project_id) is None:
            raise NotFound(f"unknown project {project_id!r}", kind="project", ident=project_id)
        user = user_from_row(user_row)
    if project_id is not None and role_in(catalog, user, project_id) is None:
        raise InvalidInput(f"{username!r} has no role in project {project_id!r}; add them first", field="project")
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    expires_at = utcnow() + timedelta(days=expires_days) if expires_days is not None else None
    with catalog.session() as s:
        row = ApiTokenRow(
            id=token_id,
            user_id=user.id,
            secret_hash=_hasher.hash(secret),
            project_id=project_id,
            role=scope_role.value if scope_role is not None else None,
            created_by=actor.username,
            created_at=utcnow(),
            expires_at=expires_at,
        )
        s.add(row)
        audit.record(
            s,
            audit.TokenCreated(
                actor=actor.username,
                token_id=token_id,
                username=username,
                scope_project=project_id,
                scope_role=row.role,
                expires_at=expires_at.isoformat() if expires_at else None,
            ),
        )
        s.flush()
        return NewToken(_token(row, username), f"{PREFIX}{token_id}_{secret}")


def list_tokens(catalog: Catalog, *, username: str | None = None, actor: User = SYSTEM) -> list[Token]:
    """Tokens, newest first (of one user, or of everyone for a site admin); never their secrets."""
    if not actor.site_admin and username != actor.username:
        raise PermissionDenied("only a site admin can list other users' tokens", user=actor.username)
    query = select(ApiTokenRow, UserRow.username).join(UserRow, UserRow.id == ApiTokenRow.user_id)
    if username is not None:
        query = query.where(UserRow.username == username)
    with catalog.session() as s:
        return [_token(row, name) for row, name in s.execute(query.order_by(ApiTokenRow.created_at.desc()))]


def revoke_token(catalog: Catalog, token_id: str, *, actor: User = SYSTEM) -> Token:
    """Revoke a token for good (a site admin, or its owner); revoking it again changes nothing.

    Raises:
        NotFound: No such token.
        PermissionDenied: ``actor`` neither owns it nor is a site admin.
    """
    with catalog.session() as s:
        found = s.execute(
            select(ApiTokenRow, UserRow.username)
            .join(UserRow, UserRow.id == ApiTokenRow.user_id)
            .where(ApiTokenRow.id == token_id)
        ).first()
        if found is None:
            raise NotFound(f"unknown token {token_id!r}", kind="token", ident=token_id)
        row, username = found
        if not actor.site_admin and actor.username != username:
            raise PermissionDenied("only a site admin can revoke another user's token", user=actor.username)
        if row.revoked_at is None:
            row.revoked_at = utcnow()
            audit.record(s, audit.TokenRevoked(actor=actor.username, token_id=token_id, username=username))
        _forget(token_id)
        return _token(row, username)


# The argon2 check costs tens of milliseconds; a token text already verified is remembered
# (by its SHA-256) so each request pays it once per process. Revocation, expiry and the
# account are still read from the catalog on every request.
_verified: dict[str, str] = {}
_verified_lock = threading.Lock()


def _forget(token_id: str) -> None:
    with _verified_lock:
        for digest in [d for d, t in _verified.items() if t == token_id]:
            del _verified[digest]


def authenticate_token(catalog: Catalog, text: str) -> User:
    """The user a token acts as, carrying the token's scope.

    Raises:
        AuthenticationFailed: A garbled, unknown, revoked or expired token, or a disabled
            account; the message does not say which tokens exist.
    """
    shape = _SHAPE.fullmatch(text.strip())
    if shape is None:
        raise AuthenticationFailed("invalid API token: expected 'oreo_<id>_<secret>'")
    token_id, secret = shape.groups()
    digest = hashlib.sha256(text.strip().encode()).hexdigest()
    now = utcnow()
    with catalog.session() as s:
        found = s.execute(
            select(ApiTokenRow, UserRow)
            .join(UserRow, UserRow.id == ApiTokenRow.user_id)
            .where(ApiTokenRow.id == token_id)
        ).first()
        row, user_row = found if found is not None else (None, None)
        if row is None or user_row is None or not _secret_matches(row, secret, digest):
            raise AuthenticationFailed("invalid API token")
        if row.revoked_at is not None:
            raise AuthenticationFailed(f"API token {token_id} was revoked; create a new one")
        if row.expires_at is not None and row.expires_at <= now:
            raise AuthenticationFailed(f"API token {token_id} expired; create a new one")
        if user_row.disabled:
            raise AuthenticationFailed(DISABLED_MESSAGE)
        if row.last_used_at is None or now - row.last_used_at > _TOUCH_EVERY:
            row.last_used_at = now
        scope = TokenScope(
            token_id=row.id,
            project_id=row.project_id,
            role=Role(row.role) if row.role else None,
            account_site_admin=user_row.site_admin,
        )
        unscoped = row.project_id is None and scope.role in (None, Role.ADMIN)
        user = user_from_row(user_row)
    return User(
        id=user.id,
        username=user.username,
        email=user.email,
        display_name=user.display_name,
        site_admin=user.site_admin and unscoped,
        auth_source="token",
        scope=scope,
    )


def _secret_matches(row: ApiTokenRow, secret: str, digest: str) -> bool:
    with _verified_lock:
        if _verified.get(digest) == row.id:
            return True
    try:
        ok = _hasher.verify(row.secret_hash, secret)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False
    if ok:
        with _verified_lock:
            _verified[digest] = row.id
    return ok
