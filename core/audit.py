"""Audit events: one small class per state-changing action, stored append-only.

Each event has a stable ``name`` (what reports and queries filter on) and a UTC
timestamp. ``record`` writes it inside the caller's catalog session, so the event
commits or rolls back together with the change it describes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.catalog import AuditEventRow, Catalog, utcnow


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    name: ClassVar[str] = "event"

    actor: str
    project_id: str | None = None
    dataset_id: str | None = None
    ts: datetime = field(default_factory=utcnow)

    def target(self) -> str:
        parts = [p for p in (self.project_id, self.dataset_id) if p]
        return "/".join(parts) or "site"

    def details(self) -> dict[str, Any]:
        skip = {"actor", "project_id", "dataset_id", "ts"}
        return {k: v for k, v in asdict(self).items() if k not in skip}


@dataclass(frozen=True, kw_only=True)
class UserCreated(AuditEvent):
    name: ClassVar[str] = "user_created"
    username: str
    site_admin: bool = False
    auth_source: str = "local"

    def target(self) -> str:
        return f"user:{self.username}"


@dataclass(frozen=True, kw_only=True)
class PasswordChanged(AuditEvent):
    name: ClassVar[str] = "password_changed"
    username: str
    tokens_revoked: int = 0

    def target(self) -> str:
        return f"user:{self.username}"


@dataclass(frozen=True, kw_only=True)
class UserDisabled(AuditEvent):
    name: ClassVar[str] = "user_disabled"
    username: str
    sessions_revoked: int = 0
    tokens_revoked: int = 0

    def target(self) -> str:
        return f"user:{self.username}"


@dataclass(frozen=True, kw_only=True)
class UserEnabled(AuditEvent):
    name: ClassVar[str] = "user_enabled"
    username: str

    def target(self) -> str:
        return f"user:{self.username}"


@dataclass(frozen=True, kw_only=True)
class UserDeleted(AuditEvent):
    name: ClassVar[str] = "user_deleted"
    username: str
    email: str | None = None

    def target(self) -> str:
        return f"user:{self.username}"


@dataclass(frozen=True, kw_only=True)
class SignedIn(AuditEvent):
    name: ClassVar[str] = "signed_in"
    method: str = "password"


@dataclass(frozen=True, kw_only=True)
class SignInFailed(AuditEvent):
    name: ClassVar[str] = "sign_in_failed"
    method: str = "password"
    # "invalid" (wrong password or unknown user), "disabled" (right password, disabled account)
    # or "throttled" (not even checked).
    reason: str = "invalid"
    client: str = ""


@dataclass(frozen=True, kw_only=True)
class WebSessionStarted(AuditEvent):
    name: ClassVar[str] = "web_session_started"
    session_id: str
    method: str
    client: str = ""


@dataclass(frozen=True, kw_only=True)
class SignedOut(AuditEvent):
    name: ClassVar[str] = "signed_out"
    session_id: str


@dataclass(frozen=True, kw_only=True)
class WebSessionsRevoked(AuditEvent):
    name: ClassVar[str] = "web_sessions_revoked"
    username: str
    revoked: int
    tokens_revoked: int = 0

    def target(self) -> str:
        return f"user:{self.username}"


@dataclass(frozen=True, kw_only=True)
class ProjectCreated(AuditEvent):
    name: ClassVar[str] = "project_created"
    project_name: str = ""


@dataclass(frozen=True, kw_only=True)
class MemberAdded(AuditEvent):
    name: ClassVar[str] = "member_added"
    username: str
    role: str
    source: str = "manual"


@dataclass(frozen=True, kw_only=True)
class DatasetCreated(AuditEvent):
    name: ClassVar[str] = "dataset_created"
    source_file: str
    key_column: str | None
    rows: int
    version: int
    commit_id: str


@dataclass(frozen=True, kw_only=True)
class TokenCreated(AuditEvent):
    name: ClassVar[str] = "token_created"
    token_id: str
    username: str
    scope_project: str | None = None
    scope_role: str | None = None
    expires_at: str | None = None

    def target(self) -> str:
        return f"user:{self.username}"


@dataclass(frozen=True, kw_only=True)
class TokenRevoked(AuditEvent):
    name: ClassVar[str] = "token_revoked"
    token_id: str
    username: str

    def target(self) -> str:
        return f"user:{self.username}"


@dataclass(frozen=True, kw_only=True)
class ApiRequest(AuditEvent):
    """One call to the HTTP API (api/), with the token it was made with."""

    name: ClassVar[str] = "api_request"
    method: str
    route: str
    status: int
    token_id: str


# Tags that every event recorded in this context carries in its details: the HTTP API
# puts the calling token's id here, so what a core function records names the token too.
_tags: ContextVar[dict[str, str] | None] = ContextVar("oreo_audit_tags", default=None)


@contextmanager
def tagged(tags: dict[str, str]) -> Iterator[dict[str, str]]:
    """Add ``tags`` (a dict the caller may fill in later) to every event recorded inside."""
    reset = _tags.set(tags)
    try:
        yield tags
    finally:
        _tags.reset(reset)


def record(session: Session, event: AuditEvent) -> None:
    """Append ``event`` to the audit log inside ``session``'s transaction."""
    details = event.details()
    tags = _tags.get()
    if tags:
        details = {**tags, **details}
    session.add(
        AuditEventRow(
            ts=event.ts,
            actor=event.actor,
            name=event.name,
            project_id=event.project_id,
            dataset_id=event.dataset_id,
            target=event.target(),
            details=details,
        )
    )


@dataclass(frozen=True)
class StoredEvent:
    id: int
    ts: datetime
    actor: str
    name: str
    project_id: str | None
    dataset_id: str | None
    target: str
    details: dict[str, Any]


def list_events(
    catalog: Catalog, *, project_id: str | None = None, name: str | None = None, limit: int = 100
) -> list[StoredEvent]:
    """Newest audit events first, optionally narrowed to a project or event name."""
    query = select(AuditEventRow).order_by(AuditEventRow.id.desc()).limit(limit)
    if project_id is not None:
        query = query.where(AuditEventRow.project_id == project_id)
    if name is not None:
        query = query.where(AuditEventRow.name == name)
    with catalog.session() as s:
        return [
            StoredEvent(r.id, r.ts, r.actor, r.name, r.project_id, r.dataset_id, r.target, dict(r.details))
            for r in s.scalars(query)
        ]
