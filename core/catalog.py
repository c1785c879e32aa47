"""The metadata catalog: projects, datasets, users, memberships, the audit log and notifications.

SQLAlchemy 2 ORM over any URL (SQLite by default, PostgreSQL through
``postgresql+psycopg://``). The schema is owned by Alembic migrations in
``core/migrations``; ``open_catalog`` upgrades to head before first use.

Audit events are append-only: the ORM refuses to update or delete them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Integer,
    String,
    Text,
    create_engine,
    event,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.types import TypeDecorator
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from core.config import get_settings
from core.errors import CatalogUnavailable, EngineError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps stored in UTC and always returned timezone-aware (SQLite drops tz)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    pass


class ProjectRow(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(63), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class UserRow(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(63), unique=True)
    email: Mapped[str | None] = mapped_column(String(320), unique=True, nullable=True)
    display_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    password_hash: Mapped[str | None] = mapped_column(String(200), nullable=True)
    site_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    auth_source: Mapped[str] = mapped_column(String(16), default="local")
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_login_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class MembershipRow(Base):
    __tablename__ = "memberships"

    project_id: Mapped[str] = mapped_column(String(63), ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(Integer, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class DatasetRow(Base):
    __tablename__ = "datasets"

    project_id: Mapped[str] = mapped_column(String(63), ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(String(63), primary_key=True)
    key_column: Mapped[str | None] = mapped_column(String(200), nullable=True)
    delta_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_commit_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    last_commit_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    row_count: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_by: Mapped[str] = mapped_column(String(63))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The writer lease of the main table (core.writer): who holds it, and until when.
    writer: Mapped[str | None] = mapped_column(String(200), nullable=True)
    writer_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # The identifying columns diffs show beside each row's key (JSON list; NULL: the default, core.diff).
    label_columns: Mapped[str | None] = mapped_column(Text, nullable=True)


class ChangeRequestRow(Base):
    __tablename__ = "change_requests"
    __table_args__ = (
        ForeignKeyConstraint(
            ["project_id", "dataset_id"], ["datasets.project_id", "datasets.dataset_id"], ondelete="CASCADE"
        ),
    )

    id: Mapped[str] = mapped_column(String(63), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(63))
    dataset_id: Mapped[str] = mapped_column(String(63))
    author: Mapped[str] = mapped_column(String(63))
    title: Mapped[str] = mapped_column(String(300))
    description: Mapped[str] = mapped_column(Text, default="")
    state: Mapped[str] = mapped_column(String(16), index=True)
    base_version: Mapped[int] = mapped_column(Integer)
    session_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    rows: Mapped[int] = mapped_column(Integer, default=0)
    cells: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    closed_by: Mapped[str | None] = mapped_column(String(63), nullable=True)
    close_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    merged_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    validation_run_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    validation_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # "edit" (a live-edit session) or "import" (an uploaded file, ``upload_id``).
    kind: Mapped[str] = mapped_column(String(16), default="edit", server_default="edit")
    upload_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    schema_changes: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON list
    # JSON list of {"action", "stage", "seconds"}: how long each submit/approve stage took.
    stages: Mapped[str | None] = mapped_column(Text, nullable=True)
    # 1 at submit; each ``revise`` after changes were requested adds one (``CRRevisionRow``).
    revision: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # The current revision's ``CRRevisionRow.digest`` (NULL for requests staged before 0016).
    digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # JSON list: the current revision's bulk changes (``core.bulk.BulkChange.to_json``); NULL before 0018.
    bulk_changes: Mapped[str | None] = mapped_column(Text, nullable=True)


class CRRevisionRow(Base):
    """One revision of a change request: its staging (``layout.staging(cr_id, revision)``) and validation run."""

    __tablename__ = "cr_revisions"

    cr_id: Mapped[str] = mapped_column(
        String(63), ForeignKey("change_requests.id", ondelete="CASCADE"), primary_key=True
    )
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)
    staged_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    rows: Mapped[int] = mapped_column(Integer)
    cells: Mapped[int] = mapped_column(Integer)
    validation_run_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    validation_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    base_version: Mapped[int] = mapped_column(Integer)
    # sha256 of the staged content (``core.change_requests.staging_digest``); NULL before 0016.
    digest: Mapped[str | None] = mapped_column(String(64), nullable=True)


class CommentRow(Base):
    """A comment in a change request's thread; ``row_id`` and ``column_name`` set when it is on one cell."""

    __tablename__ = "cr_comments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cr_id: Mapped[str] = mapped_column(String(63), ForeignKey("change_requests.id", ondelete="CASCADE"), index=True)
    author: Mapped[str] = mapped_column(String(63))
    ts: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    body: Mapped[str] = mapped_column(Text)
    row_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    column_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    revision: Mapped[int | None] = mapped_column(Integer, nullable=True)  # of the request, when it was written


@event.listens_for(CommentRow, "before_update")
@event.listens_for(CommentRow, "before_delete")
def _comments_are_append_only(mapper: Any, connection: Any, target: CommentRow) -> None:
    raise EngineError("comments are append-only and cannot be changed or deleted")


class WebSessionRow(Base):
    """A browser sign-in (core.web_sessions); the cookie's token is kept only as its SHA-256."""

    __tablename__ = "web_sessions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(Integer, ForeignKey("users.id", ondelete="CASCADE"), index=True)
    method: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    client: Mapped[str] = mapped_column(String(200), default="")


class SignInFailureRow(Base):
    """Failed sign-ins counted per typed username (``kind='user'``) or per client address."""

    __tablename__ = "sign_in_failures"

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    last_failure_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    blocked_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class AuditEventRow(Base):
    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(63), index=True)
    project_id: Mapped[str | None] = mapped_column(String(63), nullable=True, index=True)
    dataset_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    target: Mapped[str] = mapped_column(Text)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


@event.listens_for(AuditEventRow, "before_update")
@event.listens_for(AuditEventRow, "before_delete")
def _audit_is_append_only(mapper: Any, connection: Any, target: AuditEventRow) -> None:
    raise EngineError("audit events are append-only and cannot be changed or deleted")


class WebhookRow(Base):
    """A project's webhook (core.notify). The secret is kept as given: every delivery is signed with it."""

    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(String(63), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(63), ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(63))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Set when one of its deliveries died (ran out of attempts); cleared by the next success.
    failing: Mapped[bool] = mapped_column(Boolean, default=False)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    last_error_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class OutboxRow(Base):
    """One notification to send on one channel (an email address or a webhook), with its retries."""

    __tablename__ = "notify_outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    event: Mapped[str] = mapped_column(String(32))
    project_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    dataset_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    cr_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    actor: Mapped[str] = mapped_column(String(63))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    channel: Mapped[str] = mapped_column(String(16))  # "email" or "webhook"
    target: Mapped[str] = mapped_column(String(320))  # the email address, or the webhook id
    recipient: Mapped[str | None] = mapped_column(String(63), nullable=True)  # the username of an email
    payload: Mapped[str] = mapped_column(Text)  # the JSON body, sent byte for byte on every attempt
    state: Mapped[str] = mapped_column(String(16), default="pending", index=True)  # pending | sent | dead
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    dedup_key: Mapped[str | None] = mapped_column(String(200), nullable=True, index=True)


class InboxRow(Base):
    """An event in a user's in-app inbox (core.notify), unread until ``read_at``."""

    __tablename__ = "notify_inbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(63), index=True)
    event: Mapped[str] = mapped_column(String(32))
    project_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    dataset_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    cr_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    actor: Mapped[str] = mapped_column(String(63))
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    summary: Mapped[str] = mapped_column(Text)
    read_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    dedup_key: Mapped[str | None] = mapped_column(String(200), nullable=True, index=True)


# ---------------------------------------------------------------- the HTTP API (core.tokens, api/)


class ApiTokenRow(Base):
    """A personal access token (core.tokens): only its secret's argon2 hash is kept."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[int] = mapped_column(Integer, ForeignKey("users.id", ondelete="CASCADE"), index=True)
    secret_hash: Mapped[str] = mapped_column(String(200))
    # Scopes that narrow the user's roles: only this project, at most this role (NULL: no narrowing).
    project_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    role: Mapped[str | None] = mapped_column(String(16), nullable=True)
    created_by: Mapped[str] = mapped_column(String(63))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class IdempotencyKeyRow(Base):
    """The first response to a POST sent with an ``Idempotency-Key``, per caller and key."""

    __tablename__ = "api_idempotency_keys"

    principal: Mapped[str] = mapped_column(String(63), primary_key=True)  # the token id
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))  # method, path and body: a reuse must match
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    status: Mapped[int | None] = mapped_column(Integer, nullable=True)  # NULL while the first call runs
    body: Mapped[str | None] = mapped_column(Text, nullable=True)
    headers: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON object (e.g. Location)
    # refreshed while the first call runs: a stale one means its process died (api/jobs.py)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class OperationRow(Base):
    """A long operation asked for with ``Prefer: respond-async`` (api/operations.py)."""

    __tablename__ = "api_operations"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    token_id: Mapped[str] = mapped_column(String(32))
    username: Mapped[str] = mapped_column(String(63))
    state: Mapped[str] = mapped_column(String(16), default="running")  # running | succeeded | failed
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    status: Mapped[int | None] = mapped_column(Integer, nullable=True)  # what the synchronous call answers
    result: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON document
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON error document
    # Written every few seconds by the process running it; stale means that process died.
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class PresenceRow(Base):
    """Who has a page open (core.presence): one row per person and page, beaten while the page is open."""

    __tablename__ = "presence"

    page: Mapped[str] = mapped_column(String(140), primary_key=True)  # "table/<project>/<dataset>", "review/<cr>"
    username: Mapped[str] = mapped_column(String(63), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    since: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)


class Catalog:
    """A migrated catalog database and its session factory."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: committed on success, rolled back on any error.

        The connection is taken first, retried briefly, so a database that is restarting
        is waited for; one that stays unreachable (or drops the connection mid-way) raises
        ``CatalogUnavailable`` and nothing of the unit of work is kept.
        """
        with self._sessions() as s:
            try:
                _connect(s)
                yield s
                s.commit()
            except DBAPIError as exc:
                _rollback_quietly(s)
                if isinstance(exc, OperationalError | InterfaceError) or exc.connection_invalidated:
                    raise CatalogUnavailable(
                        f"the catalog at {_redact(self.url)} is unavailable: {_first_line(exc.orig or exc)}",
                        hint="nothing was saved; try again once it is back",
                    ) from exc
                raise
            except BaseException:
                _rollback_quietly(s)
                raise

    def upgrade(self) -> None:
        """Bring the schema to the newest Alembic revision."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        with self.engine.begin() as connection:
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")


# A catalog restart (PostgreSQL stopping and starting) takes a few seconds; taking the
# connection is retried that long before the caller is told the catalog is unreachable.
CONNECT_ATTEMPTS = 4


def _connect(s: Session) -> None:
    """Take the unit of work's connection; when the catalog is unreachable, retry as ``CONNECT_ATTEMPTS`` says.

    The first try is plain: building tenacity's retry loop for every unit of work cost about
    a tenth of a presence heartbeat's CPU (core.presence), though a healthy catalog never needs it.
    """
    try:
        s.connection()
        return
    except OperationalError:
        pass  # retried below, with the usual waits
    for attempt in Retrying(
        retry=retry_if_exception_type(OperationalError),
        stop=stop_after_attempt(CONNECT_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.25, max=2),
        reraise=True,
    ):
        with attempt:
            s.connection()


def _rollback_quietly(s: Session) -> None:
    try:
        s.rollback()
    except DBAPIError:
        pass  # the connection is gone; the database discards the transaction itself


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _make_engine(url: str) -> Engine:
    kwargs: dict[str, Any] = {"future": True}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    else:
        kwargs["pool_pre_ping"] = True
    engine = create_engine(url, **kwargs)
    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, record: Any) -> None:
            cur = dbapi_connection.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

    return engine


_catalogs: dict[str, Catalog] = {}
_catalog_lock = threading.Lock()


def open_catalog(url: str | None = None) -> Catalog:
    """The migrated catalog at ``url`` (default: the configured one), opened once per process."""
    url = url or get_settings().database_url
    with _catalog_lock:
        catalog = _catalogs.get(url)
        if catalog is None:
            try:
                # A bad URL fails already here (unknown dialect, unusable SQLite folder).
                catalog = Catalog(url)
                catalog.upgrade()
            except OperationalError as exc:
                raise CatalogUnavailable(
                    f"could not open the catalog at {_redact(url)}: it is unavailable: {_first_line(exc.orig or exc)}",
                    hint="try again once it is back",
                ) from exc
            except Exception as exc:
                raise EngineError(f"could not open the catalog at {_redact(url)}: {exc}") from exc
            _catalogs[url] = catalog
    return catalog


def reset_catalogs() -> None:
    """Forget opened catalogs (tests switch databases between cases)."""
    with _catalog_lock:
        for catalog in _catalogs.values():
            catalog.engine.dispose()
        _catalogs.clear()


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
