"""Browser sign-in sessions that survive a reload, a new tab and a deep link.

A sign-in (password or OIDC) starts a session: the browser keeps only an opaque random
token in a cookie, and the catalog keeps the token's SHA-256 with the user, the sign-in
method, the client and three clocks. A token is honoured while it is

- not revoked (sign-out, ``revoke_user_access``, a password reset or disabling the account revoke it),
- used within the idle timeout (``OREO_SESSION_IDLE_HOURS``, default 12), and
- younger than the absolute lifetime (``OREO_SESSION_MAX_DAYS``, default 7).

Nothing in the cookie says who the user is or what they may do: roles are read from the
catalog on every run, and a stolen database leaks no usable token.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from core import audit
from core.auth import SYSTEM, AccessRevoked, User, revoke_api_tokens, user_from_row
from core.catalog import Catalog, UserRow, WebSessionRow, utcnow
from core.config import get_settings
from core.errors import InvalidInput, NotFound, PermissionDenied

AuthMethod = Literal["password", "oidc"]
SessionState = Literal["active", "idle", "expired", "revoked"]
METHODS: tuple[AuthMethod, ...] = ("password", "oidc")
# last_seen_at is written at most this often, so a busy page does not write on every run.
TOUCH_EVERY = timedelta(minutes=1)
CLIENT_LENGTH = 200


@dataclass(frozen=True)
class WebSession:
    """One browser sign-in as the catalog keeps it (never the token itself)."""

    id: str
    user: User
    method: AuthMethod
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    client: str
    state: SessionState

    @property
    def idle_expires_at(self) -> datetime:
        return self.last_seen_at + _idle_timeout()


def _idle_timeout() -> timedelta:
    hours = get_settings().web_session_idle_hours
    if hours < 1:
        raise InvalidInput(f"setting OREO_SESSION_IDLE_HOURS must be at least 1, got {hours}", field="idle_hours")
    return timedelta(hours=hours)


def _lifetime() -> timedelta:
    days = get_settings().web_session_max_days
    if days < 1:
        raise InvalidInput(f"setting OREO_SESSION_MAX_DAYS must be at least 1, got {days}", field="max_days")
    return timedelta(days=days)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _state(row: WebSessionRow, now: datetime) -> SessionState:
    if row.revoked_at is not None:
        return "revoked"
    if now >= row.expires_at:
        return "expired"
    if now >= row.last_seen_at + _idle_timeout():
        return "idle"
    return "active"


def _to_session(row: WebSessionRow, user: UserRow, now: datetime) -> WebSession:
    method: AuthMethod = "oidc" if row.method == "oidc" else "password"
    return WebSession(
        id=row.id,
        user=user_from_row(user),
        method=method,
        created_at=row.created_at,
        last_seen_at=row.last_seen_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        client=row.client,
        state=_state(row, now),
    )


def start_web_session(catalog: Catalog, user: User, method: AuthMethod, *, client: str = "") -> str:
    """Start a session for a user who just signed in, and return its token for the cookie.

    The user's sessions that ended more than one lifetime ago are deleted on the way, so
    the table stays as small as the number of recent sign-ins.

    Args:
        catalog: The catalog to write to.
        user: The signed-in user.
        method: ``"password"`` or ``"oidc"``.
        client: Where the sign-in came from (address and browser), shown by ``oreo user sessions``.

    Returns:
        The opaque token; only its SHA-256 is stored.

    Raises:
        InvalidInput: Unknown method.
    """
    if method not in METHODS:
        raise InvalidInput(f"unknown sign-in method {method!r}; use one of: {', '.join(METHODS)}", field="method")
    lifetime = _lifetime()
    token = secrets.token_urlsafe(32)
    now = utcnow()
    with catalog.session() as s:
        s.execute(
            delete(WebSessionRow).where(WebSessionRow.user_id == user.id, WebSessionRow.expires_at < now - lifetime)
        )
        row = WebSessionRow(
            id=uuid.uuid4().hex,
            token_sha256=_digest(token),
            user_id=user.id,
            method=method,
            created_at=now,
            last_seen_at=now,
            expires_at=now + lifetime,
            client=client[:CLIENT_LENGTH],
        )
        s.add(row)
        audit.record(
            s, audit.WebSessionStarted(actor=user.username, session_id=row.id, method=method, client=row.client)
        )
    return token


def _find(s: Session, token: str) -> tuple[WebSessionRow, UserRow] | None:
    found = s.execute(
        select(WebSessionRow, UserRow)
        .join(UserRow, UserRow.id == WebSessionRow.user_id)
        .where(WebSessionRow.token_sha256 == _digest(token))
    ).one_or_none()
    return None if found is None else found.tuple()


def resume_web_session(catalog: Catalog, token: str | None) -> WebSession | None:
    """The active session a cookie's token names, or None when it is unknown, ended or its user disabled.

    Using a session keeps it from going idle (``last_seen_at`` is written at most once a minute).
    """
    if not token:
        return None
    now = utcnow()
    with catalog.session() as s:
        found = _find(s, token)
        if found is None:
            return None
        row, user = found
        if user.disabled or _state(row, now) != "active":
            return None
        if now - row.last_seen_at >= TOUCH_EVERY:
            row.last_seen_at = now
        return _to_session(row, user, now)


def find_web_session(catalog: Catalog, token: str | None) -> WebSession | None:
    """The session a token names in whatever state it is (an ended one too), without touching it."""
    if not token:
        return None
    with catalog.session() as s:
        found = _find(s, token)
        return None if found is None else _to_session(*found, utcnow())


def end_web_session(catalog: Catalog, token: str | None) -> bool:
    """Sign out: revoke the session a token names, so the cookie is worthless from now on.

    Returns:
        True when a session was revoked; False when the token was unknown or already revoked.
    """
    if not token:
        return False
    with catalog.session() as s:
        found = _find(s, token)
        if found is None or found[0].revoked_at is not None:
            return False
        row, user = found
        row.revoked_at = utcnow()
        audit.record(s, audit.SignedOut(actor=user.username, session_id=row.id))
        return True


def _user_for(s: Session, username: str) -> UserRow:
    user = s.scalar(select(UserRow).where(UserRow.username == username))
    if user is None:
        raise NotFound(f"unknown user {username!r}", kind="user", ident=username)
    return user


def list_web_sessions(catalog: Catalog, username: str, *, actor: User = SYSTEM) -> list[WebSession]:
    """A user's sessions, newest first, ended ones included (a site admin, or the user themself).

    Raises:
        NotFound: No such user.
        PermissionDenied: ``actor`` is neither a site admin nor ``username``.
    """
    if not actor.site_admin and actor.username != username:
        raise PermissionDenied(
            f"only a site admin can list another user's sessions; {actor.username!r} is not one", user=actor.username
        )
    now = utcnow()
    with catalog.session() as s:
        user = _user_for(s, username)
        rows = s.scalars(
            select(WebSessionRow)
            .where(WebSessionRow.user_id == user.id)
            .order_by(WebSessionRow.created_at.desc(), WebSessionRow.id)
        )
        return [_to_session(row, user, now) for row in rows]


def revoke_user_sessions(catalog: Catalog, username: str, *, actor: User = SYSTEM) -> int:
    """Revoke every active session and API token of a user (site admins only); see ``revoke_user_access``.

    Returns:
        How many sessions were active and are now revoked.
    """
    return revoke_user_access(catalog, username, actor=actor).sessions


def revoke_user_access(catalog: Catalog, username: str, *, actor: User = SYSTEM) -> AccessRevoked:
    """Revoke every active browser session and every API token of a user (site admins only).

    Their next page load asks for sign-in, and their tokens answer 401; the password and
    the account stay as they are.

    Returns:
        How many sessions were active and how many tokens were not yet revoked.

    Raises:
        NotFound: No such user.
        PermissionDenied: ``actor`` is not a site admin.
    """
    if not actor.site_admin:
        raise PermissionDenied(
            f"only a site admin can revoke a user's sessions; {actor.username!r} is not one", user=actor.username
        )
    now = utcnow()
    with catalog.session() as s:
        user = _user_for(s, username)
        rows = s.scalars(
            select(WebSessionRow).where(WebSessionRow.user_id == user.id, WebSessionRow.revoked_at.is_(None))
        ).all()
        active = [row for row in rows if _state(row, now) == "active"]
        for row in active:
            row.revoked_at = now
        tokens = revoke_api_tokens(s, user.id, now)
        audit.record(
            s,
            audit.WebSessionsRevoked(
                actor=actor.username, username=username, revoked=len(active), tokens_revoked=tokens
            ),
        )
        return AccessRevoked(username, len(active), tokens)
