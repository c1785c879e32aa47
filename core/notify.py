"""Notifications: who is told what about a change request, by email, webhook and in-app inbox.

``emit`` runs right after the action it reports has committed. In one catalog
transaction it writes an inbox row per recipient and an outbox row per delivery: one per
recipient with an email address (when SMTP is configured) and one per webhook of the
project. It never raises: a failure to enqueue is logged and the action stands.

Who is told (never the actor about their own action):

* ``submitted``, ``revised``: the project's approvers (approver and admin members);
* ``approved``, ``rejected``, ``changes_requested``, ``commented``, ``withdrawn``: the
  author and the participants (commenters and whoever closed the request);
* ``stale`` (``main`` moved under an open request and it now conflicts): the author,
  once per request and conflicting version of ``main``.

The outbox is the retry mechanism. ``drain`` claims the deliveries that are due with one
atomic update each (it moves ``next_attempt_at`` past a lease, so a cron ``oreo notify
drain`` and an app server's background drainer never send one twice), sends them and
records the outcome: sent; or failed and due again after an exponential backoff (30 s,
1, 2, 4, 8 minutes); or, on the ``MAX_ATTEMPTS``-th failure, dead, which marks a
webhook failing with its last error until one of its deliveries succeeds again.

A webhook delivery is a JSON POST of ``{"event", "project", "dataset", "cr_id", "actor",
"at", "title", "summary", ...}``, the same bytes on every attempt, signed in the header
``X-Oreo-Signature: sha256=<hex>``, the HMAC-SHA256 of the raw body with the webhook's
secret. It goes only to public addresses or hosts listed in ``OREO_WEBHOOK_ALLOWED_HOSTS``
(``core.egress``, checked when the webhook is added and again before each delivery),
follows no redirect, and counts as sent on a 2xx status line; the answer's body is never
read, and an outcome never repeats what the target sent. An email is plain text over
SMTP (``OREO_SMTP_*`` settings), its header fields folded onto one line. Each delivery
has ``OREO_DELIVERY_DEADLINE_S`` in all.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import hashlib
import hmac
import json
import logging
import re
import smtplib
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email.message import EmailMessage
from typing import Any, ClassVar, TypeVar

import httpx
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from core import audit, egress, events, metrics
from core.auth import Role, User, require_role
from core.catalog import (
    Catalog,
    ChangeRequestRow,
    CommentRow,
    InboxRow,
    MembershipRow,
    OutboxRow,
    ProjectRow,
    UserRow,
    WebhookRow,
    utcnow,
)
from core.config import Settings, get_settings
from core.errors import AlreadyExists, CatalogUnavailable, InvalidInput, NotFound
from core.layout import new_id, validate_id

log = logging.getLogger(__name__)
_T = TypeVar("_T")

SIGNATURE_HEADER = "X-Oreo-Signature"
MIN_SECRET_LENGTH = 16  # a webhook secret signs every POST: a short one can be guessed
# A delivery that failed this many times is dead; its webhook is marked failing.
MAX_ATTEMPTS = 6
BACKOFF_S = 30.0
MAX_BACKOFF_S = 3600.0
# A claimed delivery is due again after this long, should its drainer die mid-send.
CLAIM_LEASE_S = 300.0
# Deliveries in flight at once in one drain (each to its own target; one target's go one after another).
SEND_CONCURRENCY = 16
_SMTP_PORTS = {"none": 25, "starttls": 587, "ssl": 465}


class NotifyEvent(enum.StrEnum):
    SUBMITTED = "submitted"
    REVISED = "revised"
    APPROVED = "approved"
    REJECTED = "rejected"
    CHANGES_REQUESTED = "changes_requested"
    COMMENTED = "commented"
    WITHDRAWN = "withdrawn"
    STALE = "stale"


_TO_APPROVERS = {NotifyEvent.SUBMITTED, NotifyEvent.REVISED}
_VERBS = {
    NotifyEvent.SUBMITTED: "submitted",
    NotifyEvent.REVISED: "revised",
    NotifyEvent.APPROVED: "approved and merged",
    NotifyEvent.REJECTED: "rejected",
    NotifyEvent.CHANGES_REQUESTED: "asked for changes to",
    NotifyEvent.COMMENTED: "commented on",
    NotifyEvent.WITHDRAWN: "withdrew",
}


@dataclass(frozen=True)
class InboxItem:
    id: int
    event: str
    project_id: str | None
    dataset_id: str | None
    cr_id: str | None
    actor: str
    at: datetime
    summary: str
    read: bool


@dataclass(frozen=True)
class Webhook:
    """A project's webhook as listed (never with its secret)."""

    id: str
    project_id: str
    url: str
    created_by: str
    created_at: datetime
    failing: bool
    last_error: str | None
    last_error_at: datetime | None
    last_success_at: datetime | None
    pending: int = 0
    dead: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project_id,
            "url": self.url,
            "created_by": self.created_by,
            "created_at": self.created_at.isoformat(),
            "failing": self.failing,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at.isoformat() if self.last_error_at else None,
            "last_success_at": self.last_success_at.isoformat() if self.last_success_at else None,
            "pending": self.pending,
            "dead": self.dead,
        }


@dataclass(frozen=True)
class Delivery:
    """One outbox row: a notification to one email address or webhook, and where it stands."""

    id: int
    event: str
    channel: str
    target: str
    project_id: str | None
    cr_id: str | None
    state: str  # pending | sent | dead
    attempts: int
    last_error: str | None
    next_attempt_at: datetime | None
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "event": self.event,
            "channel": self.channel,
            "target": self.target,
            "project": self.project_id,
            "cr_id": self.cr_id,
            "state": self.state,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "next_attempt_at": self.next_attempt_at.isoformat() if self.next_attempt_at else None,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True)
class DrainReport:
    """What one ``drain`` did: deliveries sent, failed (to be retried) and dead."""

    sent: list[Delivery] = field(default_factory=list)
    failed: list[Delivery] = field(default_factory=list)
    dead: list[Delivery] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "sent": [d.to_json() for d in self.sent],
            "failed": [d.to_json() for d in self.failed],
            "dead": [d.to_json() for d in self.dead],
        }


@dataclass(frozen=True, kw_only=True)
class WebhookAdded(audit.AuditEvent):
    name: ClassVar[str] = "webhook_added"
    webhook_id: str
    url: str


@dataclass(frozen=True, kw_only=True)
class WebhookRemoved(audit.AuditEvent):
    name: ClassVar[str] = "webhook_removed"
    webhook_id: str
    url: str


# ---------------------------------------------------------------- emitting


def emit(
    catalog: Catalog,
    event: str,
    *,
    project: str,
    dataset: str | None,
    cr_id: str | None,
    actor: str,
    extra: dict[str, Any] | None = None,
    dedup_key: str | None = None,
) -> int:
    """Queue ``event`` for its recipients and the project's webhooks; never raises.

    Args:
        catalog: The catalog the action committed to.
        event: A ``NotifyEvent`` value.
        project: The project of the request.
        dataset: Its dataset.
        cr_id: The change request the event is about.
        actor: The user whose action it was (not told about it).
        extra: More fields for the webhook body (a reason, a version, a comment).
        dedup_key: When given, an event already queued under this key is not queued again.

    Returns:
        How many inbox and outbox rows were written (0 when it could not enqueue).
    """
    try:
        return _enqueue(catalog, NotifyEvent(event), project, dataset, cr_id, actor, extra or {}, dedup_key)
    except Exception:  # the action already happened: a lost notification must not undo or fail it
        log.warning("could not queue the %s notification of %s", event, cr_id or project, exc_info=True)
        return 0


def emit_stale(catalog: Catalog, project: str, dataset: str, cr_id: str, conflict_versions: Iterable[int]) -> int:
    """Tell the author that ``main`` moved under an open request and now conflicts.

    Told once per request and newest conflicting version; nothing when there is no conflict.
    """
    versions = list(conflict_versions)
    if not versions:
        return 0
    newest = max(versions)
    return emit(
        catalog,
        NotifyEvent.STALE,
        project=project,
        dataset=dataset,
        cr_id=cr_id,
        actor="system",
        extra={"main_version": newest},
        dedup_key=f"stale:{cr_id}:{newest}",
    )


def _enqueue(
    catalog: Catalog,
    event: NotifyEvent,
    project: str,
    dataset: str | None,
    cr_id: str | None,
    actor: str,
    extra: dict[str, Any],
    dedup_key: str | None,
) -> int:
    settings = get_settings()
    now = utcnow()
    with catalog.session() as s:
        if dedup_key is not None and _already_queued(s, dedup_key):
            return 0
        request = s.get(ChangeRequestRow, cr_id) if cr_id else None
        title = request.title if request is not None else ""
        summary = _summary(event, actor, title, project, dataset, extra)
        body = {
            "event": event.value,
            "project": project,
            "dataset": dataset,
            "cr_id": cr_id,
            "actor": actor,
            "at": now.isoformat(),
            "title": title,
            "summary": summary,
            **{k: v for k, v in extra.items() if k not in _BODY_FIELDS},
        }
        payload = json.dumps(body, separators=(",", ":"), default=str)
        written = 0
        for user in _recipients(s, event, project, request, actor):
            s.add(
                InboxRow(
                    username=user.username,
                    event=event.value,
                    project_id=project,
                    dataset_id=dataset,
                    cr_id=cr_id,
                    actor=actor,
                    at=now,
                    summary=summary,
                    dedup_key=dedup_key,
                )
            )
            written += 1
            if settings.smtp_host and user.email:
                email = _outbox(event, project, dataset, cr_id, actor, now, "email", user.email, payload, dedup_key)
                email.recipient = user.username
                s.add(email)
                written += 1
        for hook_id in s.scalars(select(WebhookRow.id).where(WebhookRow.project_id == project)):
            s.add(_outbox(event, project, dataset, cr_id, actor, now, "webhook", hook_id, payload, dedup_key))
            written += 1
        return written


_BODY_FIELDS = {"event", "project", "dataset", "cr_id", "actor", "at", "title", "summary"}


def _outbox(
    event: NotifyEvent,
    project: str,
    dataset: str | None,
    cr_id: str | None,
    actor: str,
    now: datetime,
    channel: str,
    target: str,
    payload: str,
    dedup_key: str | None,
) -> OutboxRow:
    return OutboxRow(
        event=event.value,
        project_id=project,
        dataset_id=dataset,
        cr_id=cr_id,
        actor=actor,
        created_at=now,
        channel=channel,
        target=target,
        recipient=None,
        payload=payload,
        state="pending",
        attempts=0,
        next_attempt_at=now,
        dedup_key=dedup_key,
    )


def _already_queued(s: Session, key: str) -> bool:
    for table in (InboxRow, OutboxRow):
        if s.scalar(select(table.id).where(table.dedup_key == key).limit(1)) is not None:
            return True
    return False


def _recipients(
    s: Session, event: NotifyEvent, project: str, request: ChangeRequestRow | None, actor: str
) -> list[UserRow]:
    """The active users to tell about ``event``, without its actor."""
    names: set[str] = set()
    if event in _TO_APPROVERS:
        names |= set(
            s.scalars(
                select(UserRow.username)
                .join(MembershipRow, MembershipRow.user_id == UserRow.id)
                .where(
                    MembershipRow.project_id == project,
                    MembershipRow.role.in_([Role.APPROVER.value, Role.ADMIN.value]),
                )
            )
        )
    elif request is not None:
        names.add(request.author)
        if event != NotifyEvent.STALE:
            if request.closed_by:
                names.add(request.closed_by)
            names |= set(s.scalars(select(CommentRow.author).where(CommentRow.cr_id == request.id)))
    names.discard(actor)
    if not names:
        return []
    rows = s.scalars(select(UserRow).where(UserRow.username.in_(sorted(names)), UserRow.disabled.is_(False)))
    return sorted(rows, key=lambda u: u.username)


def _summary(
    event: NotifyEvent, actor: str, title: str, project: str, dataset: str | None, extra: dict[str, Any]
) -> str:
    where = f"{project}/{dataset}" if dataset else project
    named = f"“{title}” on {where}" if title else where
    if event == NotifyEvent.STALE:
        version = extra.get("main_version")
        at = f" (version {version})" if version is not None else ""
        return (
            f"{named} conflicts with newer commits to main{at}; "
            "open it to keep your value or take theirs for each conflict"
        )
    text = f"{actor} {_VERBS[event]} {named}"
    if event == NotifyEvent.REVISED and extra.get("revision") is not None:
        text += f" (revision {extra['revision']})"
    reason = extra.get("reason") or extra.get("comment")
    if reason:
        text += f": {str(reason).strip()[:200]}"
    return text


# ---------------------------------------------------------------- inbox


def inbox(catalog: Catalog, user: User, *, unread_only: bool = False, limit: int = 200) -> list[InboxItem]:
    """The user's inbox, newest first."""
    query = select(InboxRow).where(InboxRow.username == user.username).order_by(InboxRow.id.desc()).limit(limit)
    if unread_only:
        query = query.where(InboxRow.read_at.is_(None))
    with catalog.session() as s:
        return [
            InboxItem(
                r.id, r.event, r.project_id, r.dataset_id, r.cr_id, r.actor, r.at, r.summary, r.read_at is not None
            )
            for r in s.scalars(query)
        ]


def unread_count(catalog: Catalog, user: User) -> int:
    """How many of the user's inbox events are unread."""
    with catalog.session() as s:
        count = s.scalar(
            select(func.count())
            .select_from(InboxRow)
            .where(InboxRow.username == user.username, InboxRow.read_at.is_(None))
        )
        return int(count or 0)


def mark_read(catalog: Catalog, user: User, ids: Iterable[int] | None = None) -> int:
    """Mark the user's events ``ids`` (all when None) read; returns how many changed."""
    query = update(InboxRow).where(InboxRow.username == user.username, InboxRow.read_at.is_(None))
    if ids is not None:
        query = query.where(InboxRow.id.in_(list(ids)))
    with catalog.session() as s:
        return int(s.execute(query.values(read_at=utcnow())).rowcount or 0)  # type: ignore[attr-defined]


# ---------------------------------------------------------------- webhooks


def add_webhook(catalog: Catalog, project_id: str, url: str, secret: str, *, actor: User) -> Webhook:
    """Register a webhook for a project's events (project admins).

    Raises:
        NotFound: Unknown project.
        PermissionDenied: ``actor`` is not an admin of the project.
        AlreadyExists: The project has a webhook for this URL already.
        InvalidInput: The secret is empty or shorter than ``MIN_SECRET_LENGTH``; or the URL is not an
            absolute http(s) URL, holds a user name or
            password, does not resolve, or reaches an address that is not public and not listed in
            ``OREO_WEBHOOK_ALLOWED_HOSTS`` (``core.egress``).
    """
    _require_project(catalog, project_id)
    require_role(catalog, actor, project_id, Role.ADMIN, action="manage webhooks")
    if not secret or not secret.strip():
        raise InvalidInput("the webhook secret is empty; pass it on standard input", field="secret")
    if len(secret) < MIN_SECRET_LENGTH:
        raise InvalidInput(
            f"the webhook secret has {len(secret)} characters; use at least {MIN_SECRET_LENGTH} random ones "
            "(e.g. python -c 'import secrets; print(secrets.token_hex(32))')",
            field="secret",
        )
    url = (url or "").strip()
    egress.check(url, get_settings().webhook_allowed_hosts)
    hook_id = new_id("wh")
    with catalog.session() as s:
        taken = s.scalar(select(WebhookRow.id).where(WebhookRow.project_id == project_id, WebhookRow.url == url))
        if taken is not None:
            raise AlreadyExists(f"project {project_id!r} already has a webhook for {url} ({taken})", kind="webhook")
        row = WebhookRow(id=hook_id, project_id=project_id, url=url, secret=secret, created_by=actor.username)
        s.add(row)
        s.flush()
        audit.record(s, WebhookAdded(actor=actor.username, project_id=project_id, webhook_id=hook_id, url=url))
        return _webhook(row)


def list_webhooks(catalog: Catalog, project_id: str, *, actor: User) -> list[Webhook]:
    """A project's webhooks with their state (project admins); secrets are never returned."""
    _require_project(catalog, project_id)
    require_role(catalog, actor, project_id, Role.ADMIN, action="list webhooks")
    return _webhooks(catalog, [project_id])


def remove_webhook(catalog: Catalog, project_id: str, webhook_id: str, *, actor: User) -> Webhook:
    """Remove a project's webhook and drop its undelivered deliveries (project admins).

    Raises:
        NotFound: Unknown project, or no such webhook in it.
        PermissionDenied: ``actor`` is not an admin of the project.
    """
    _require_project(catalog, project_id)
    require_role(catalog, actor, project_id, Role.ADMIN, action="manage webhooks")
    validate_id(webhook_id, kind="webhook id")
    with catalog.session() as s:
        row = s.get(WebhookRow, webhook_id)
        if row is None or row.project_id != project_id:
            raise NotFound(f"project {project_id!r} has no webhook {webhook_id!r}", kind="webhook", ident=webhook_id)
        removed = _webhook(row)
        s.execute(
            delete(OutboxRow).where(
                OutboxRow.channel == "webhook", OutboxRow.target == webhook_id, OutboxRow.state == "pending"
            )
        )
        s.delete(row)
        audit.record(s, WebhookRemoved(actor=actor.username, project_id=project_id, webhook_id=webhook_id, url=row.url))
        return removed


def failing_webhooks(catalog: Catalog, project_ids: Iterable[str]) -> list[Webhook]:
    """Webhooks of these projects that are failing (a delivery died since their last success)."""
    return [w for w in _webhooks(catalog, list(project_ids)) if w.failing]


def dead_deliveries(catalog: Catalog, project_ids: Iterable[str], *, limit: int = 50) -> list[Delivery]:
    """Deliveries of these projects that ran out of attempts, newest first."""
    query = (
        select(OutboxRow)
        .where(OutboxRow.state == "dead", OutboxRow.project_id.in_(list(project_ids)))
        .order_by(OutboxRow.id.desc())
        .limit(limit)
    )
    with catalog.session() as s:
        return [_delivery(r) for r in s.scalars(query)]


def sign(secret: str, body: bytes) -> str:
    """The ``X-Oreo-Signature`` value of ``body``: ``sha256=`` and the hex HMAC-SHA256 with ``secret``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _require_project(catalog: Catalog, project_id: str) -> None:
    validate_id(project_id, kind="project id")
    with catalog.session() as s:
        if s.get(ProjectRow, project_id) is None:
            raise NotFound(f"unknown project {project_id!r}", kind="project", ident=project_id)


def _webhooks(catalog: Catalog, project_ids: list[str]) -> list[Webhook]:
    with catalog.session() as s:
        rows = list(
            s.scalars(select(WebhookRow).where(WebhookRow.project_id.in_(project_ids)).order_by(WebhookRow.created_at))
        )
        counts: dict[tuple[str, str], int] = {}
        if rows:
            query = (
                select(OutboxRow.target, OutboxRow.state, func.count())
                .where(OutboxRow.channel == "webhook", OutboxRow.target.in_([r.id for r in rows]))
                .group_by(OutboxRow.target, OutboxRow.state)
            )
            counts = {(target, state): int(n) for target, state, n in s.execute(query)}
        return [
            _webhook(r, pending=counts.get((r.id, "pending"), 0), dead=counts.get((r.id, "dead"), 0)) for r in rows
        ]


def _webhook(row: WebhookRow, *, pending: int = 0, dead: int = 0) -> Webhook:
    return Webhook(
        id=row.id,
        project_id=row.project_id,
        url=row.url,
        created_by=row.created_by,
        created_at=row.created_at,
        failing=bool(row.failing),
        last_error=row.last_error,
        last_error_at=row.last_error_at,
        last_success_at=row.last_success_at,
        pending=pending,
        dead=dead,
    )


def _delivery(row: OutboxRow) -> Delivery:
    return Delivery(
        id=row.id,
        event=row.event,
        channel=row.channel,
        target=row.target,
        project_id=row.project_id,
        cr_id=row.cr_id,
        state=row.state,
        attempts=row.attempts,
        last_error=row.last_error,
        next_attempt_at=row.next_attempt_at if row.state == "pending" else None,
        created_at=row.created_at,
    )


# ---------------------------------------------------------------- sending


def drain(catalog: Catalog, now: datetime | None = None, limit: int = 100) -> DrainReport:
    """Send the deliveries that are due (at most ``limit``) and record each outcome.

    Each delivery has ``OREO_DELIVERY_DEADLINE_S`` in all, from the lookup to the answer's
    status line. Deliveries to different targets go out side by side (at most
    ``SEND_CONCURRENCY`` at once), so a slow target holds up only its own; one target's
    deliveries go one after another, in the order they came due, and once one of them
    times out the rest are left for the next drain, not tried.

    Args:
        catalog: The catalog holding the outbox.
        now: The time to judge what is due by (default: now).
        limit: At most this many deliveries are attempted.

    Returns:
        The deliveries sent, failed (due again after a backoff) and dead (out of attempts).
    """
    now = now or utcnow()
    due = _due(catalog, now, limit)
    if not due:
        return DrainReport()
    outcomes = _run_to_end(_send_all(catalog, due, now, get_settings()))
    position = {row_id: n for n, (row_id, _, _) in enumerate(due)}
    report = DrainReport()
    for outcome in sorted(outcomes, key=lambda d: position[d.id]):
        {"sent": report.sent, "pending": report.failed, "dead": report.dead}[outcome.state].append(outcome)
    return report


def _due(catalog: Catalog, now: datetime, limit: int) -> list[tuple[int, str, str]]:
    """The (id, channel, target) of the deliveries due at ``now``, the longest due first."""
    with catalog.session() as s:
        rows = s.execute(
            select(OutboxRow.id, OutboxRow.channel, OutboxRow.target)
            .where(OutboxRow.state == "pending", OutboxRow.next_attempt_at <= now)
            .order_by(OutboxRow.next_attempt_at, OutboxRow.id)
            .limit(limit)
        )
        return [(int(i), str(channel), str(target)) for i, channel, target in rows]


async def _send_all(
    catalog: Catalog, due: list[tuple[int, str, str]], now: datetime, settings: Settings
) -> list[Delivery]:
    lanes: dict[tuple[str, str], list[int]] = {}
    for row_id, channel, target in due:
        lanes.setdefault((channel, target), []).append(row_id)
    timeout = httpx.Timeout(settings.delivery_deadline_s)
    # No proxies from the environment: a proxy would look the name up again, not connect to the address
    # core.egress checked. The CAs to trust still come from it (SSL_CERT_FILE, SSL_CERT_DIR).
    verify = httpx.create_ssl_context(trust_env=True)
    async with httpx.AsyncClient(timeout=timeout, verify=verify, follow_redirects=False, trust_env=False) as client:
        sending = _Round(catalog, now, settings, client, asyncio.Semaphore(SEND_CONCURRENCY))
        done = await asyncio.gather(*(sending.lane(row_ids) for row_ids in lanes.values()))
    return [outcome for lane in done for outcome in lane]


@dataclass(frozen=True)
class _Claimed:
    id: int
    event: str
    channel: str
    target: str
    payload: str


@dataclass(frozen=True)
class _Round:
    """One drain's sending: its clock, settings, HTTP client and the cap on deliveries in flight."""

    catalog: Catalog
    now: datetime
    settings: Settings
    client: httpx.AsyncClient
    gate: asyncio.Semaphore

    async def lane(self, row_ids: list[int]) -> list[Delivery]:
        """One target's deliveries, in order, until one times out: the rest wait for the next drain untouched."""
        outcomes = []
        for row_id in row_ids:
            async with self.gate:
                outcome = await self.deliver(row_id)
            if outcome is None:
                continue
            outcomes.append(outcome)
            if outcome.state != "sent" and outcome.last_error == _timed_out(self.settings.delivery_deadline_s):
                break  # a target this slow would hold the drain a deadline per delivery
        return outcomes

    async def deliver(self, row_id: int) -> Delivery | None:
        """Claim, send and record one delivery; None when another drainer took it."""
        # The lease outlasts the attempt, so no other drainer retries a delivery still in flight.
        lease = max(CLAIM_LEASE_S, 2 * self.settings.delivery_deadline_s)
        claimed = _claim(self.catalog, row_id, self.now, lease)
        if claimed is None:
            return None
        error = await _attempt(self.catalog, claimed, self.settings, self.client)
        outcome = _record_outcome(self.catalog, row_id, self.now, error)
        metrics.notification_attempt(claimed.channel, outcome.state)
        return outcome


def _claim(catalog: Catalog, row_id: int, now: datetime, lease_s: float) -> _Claimed | None:
    with catalog.session() as s:
        taken = s.execute(
            update(OutboxRow)
            .where(OutboxRow.id == row_id, OutboxRow.state == "pending", OutboxRow.next_attempt_at <= now)
            .values(next_attempt_at=now + timedelta(seconds=lease_s))
        )
        if taken.rowcount != 1:  # type: ignore[attr-defined]
            return None
        row = s.get(OutboxRow, row_id)
        assert row is not None
        return _Claimed(row.id, row.event, row.channel, row.target, row.payload)


async def _attempt(catalog: Catalog, delivery: _Claimed, settings: Settings, client: httpx.AsyncClient) -> str | None:
    """Send one delivery within the deadline; the error in one line, or None when it went through."""
    deadline = settings.delivery_deadline_s
    try:
        async with asyncio.timeout(deadline):
            if delivery.channel == "webhook":
                with catalog.session() as s:
                    hook = s.get(WebhookRow, delivery.target)
                    url, secret = (hook.url, hook.secret) if hook is not None else (None, "")
                if url is None:
                    return "the webhook was removed"
                await _post_webhook(client, url, secret, delivery, settings)
            elif delivery.channel == "email":
                await _send_email(settings, delivery.target, json.loads(delivery.payload), deadline)
            else:
                return f"unknown channel {delivery.channel!r}"
    except Exception as exc:  # any failure is this attempt's outcome, retried later
        log.info("delivery %s (%s to %s) failed", delivery.id, delivery.channel, delivery.target, exc_info=True)
        return _failure(exc, deadline)
    return None


async def _post_webhook(
    client: httpx.AsyncClient, url: str, secret: str, delivery: _Claimed, settings: Settings
) -> None:
    destination = await _off_loop(lambda: egress.check(url, settings.webhook_allowed_hosts))
    body = delivery.payload.encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "oreo-webhooks",
        SIGNATURE_HEADER: sign(secret, body),
        "X-Oreo-Event": delivery.event,
        "X-Oreo-Delivery": str(delivery.id),
    }
    status = await _status_of(client, destination.routes(), body, headers)
    if 300 <= status < 400:
        raise _DeliveryRefused(f"HTTP {status} from {url}: redirects are not followed")
    if not 200 <= status < 300:
        raise _DeliveryRefused(f"HTTP {status} from {url}")


async def _status_of(
    client: httpx.AsyncClient, routes: list[egress.Route], body: bytes, headers: dict[str, str]
) -> int:
    """The answer's status from the first route that connects."""
    for route in routes[:-1]:
        try:
            return await _status_via(client, route, body, headers)
        except httpx.ConnectError:
            continue  # the name's next address (an IPv6 one on a host without IPv6, say)
    return await _status_via(client, routes[-1], body, headers)


async def _status_via(client: httpx.AsyncClient, route: egress.Route, body: bytes, headers: dict[str, str]) -> int:
    request = client.build_request(
        "POST", route.url, content=body, headers={**headers, **route.headers}, extensions=route.extensions
    )
    # The status line is the answer: the body is never read, so it can neither stall the delivery nor be repeated.
    response = await client.send(request, stream=True)
    await response.aclose()
    return response.status_code


class _DeliveryRefused(Exception):
    pass


def _failure(exc: BaseException, deadline: float) -> str:
    """A failed attempt in one line, in Oreo's words: never bytes the target sent."""
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return _timed_out(deadline)
    if isinstance(exc, InvalidInput):  # core.egress refused the URL or its address
        return f"refused: {exc.message}"
    if isinstance(exc, httpx.ConnectError):
        return f"could not connect{_connect_reason(exc)} (ConnectError)"
    if isinstance(exc, httpx.ProtocolError | httpx.DecodingError):
        return "the answer was not valid HTTP"
    if isinstance(exc, httpx.HTTPError):
        return f"the connection failed ({type(exc).__name__})"
    return _one_line(exc)


def _timed_out(deadline: float) -> str:
    return f"timed out after {deadline:g} s"


def _connect_reason(exc: BaseException) -> str:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return ": the TLS certificate was not accepted"
        if isinstance(cause, ssl.SSLError):
            return ": the TLS handshake failed"
        if isinstance(cause, ConnectionRefusedError):
            return ": connection refused"
        cause = cause.__cause__ or cause.__context__
    return ""


async def _send_email(settings: Settings, to: str, body: dict[str, Any], deadline: float) -> None:
    if not settings.smtp_host:
        raise _DeliveryRefused("no SMTP server is configured (OREO_SMTP_HOST)")
    conversation = _SmtpConversation(settings, _email_message(settings, to, body), deadline)
    await _off_loop(conversation.run, on_cancel=conversation.abort)


def _email_message(settings: Settings, to: str, body: dict[str, Any]) -> EmailMessage:
    """The email of one event: its header fields on one line each, its body's text whole."""
    message = EmailMessage()
    message["From"] = _header_text(settings.smtp_from)
    message["To"] = _header_text(to)
    message["Subject"] = f"[Oreo] {_header_text(body.get('summary') or body.get('event'))}"[:200]
    message["X-Oreo-Event"] = _header_text(body.get("event"))
    lines = [
        str(body.get("summary") or ""),
        "",
        f"Project: {body.get('project')}",
        f"Dataset: {body.get('dataset')}",
        f"Change request: {body.get('cr_id')}",
        f"By: {body.get('actor')}",
        f"At: {body.get('at')}",
    ]
    for name in ("reason", "comment", "version", "revision", "main_version"):
        if body.get(name) is not None:
            lines.append(f"{name.replace('_', ' ').capitalize()}: {body[name]}")
    message.set_content("\n".join(lines) + "\n")
    return message


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _header_text(value: object) -> str:
    """``value`` on one line: line breaks and other control characters become spaces, runs of spaces one."""
    return " ".join(_CONTROL.sub(" ", str(value)).split())


class _SmtpConversation:
    """One email's SMTP conversation in a worker thread, which the drain cuts short at the deadline."""

    def __init__(self, settings: Settings, message: EmailMessage, timeout: float) -> None:
        self._settings = settings
        self._message = message
        self._timeout = timeout  # each socket operation's; the drain's deadline bounds the whole
        self._lock = threading.Lock()
        self._client: smtplib.SMTP | None = None
        self._aborted = False

    def run(self) -> None:
        settings = self._settings
        assert settings.smtp_host is not None
        client: smtplib.SMTP
        if settings.smtp_tls == "ssl":
            client = smtplib.SMTP_SSL(timeout=self._timeout, context=_tls_context(settings))
        else:
            client = smtplib.SMTP(timeout=self._timeout)
        # Made unconnected so that abort() can reach its socket from the start; the constructor is what
        # would set the name starttls() and SMTP_SSL check the certificate against.
        client._host = settings.smtp_host  # type: ignore[attr-defined]
        with self._lock:
            self._client = client
        with client:
            self._go_on()
            client.connect(settings.smtp_host, settings.smtp_port or _SMTP_PORTS[settings.smtp_tls])
            self._go_on()
            if settings.smtp_tls == "starttls":
                client.starttls(context=_tls_context(settings))
                self._go_on()
            if settings.smtp_user:
                client.login(settings.smtp_user, settings.smtp_password or "")
                self._go_on()
            client.send_message(self._message)

    def abort(self) -> None:
        """Shut the connection: the call blocked on it fails at once and the thread ends."""
        with self._lock:
            self._aborted = True
            sock = self._client.sock if self._client is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _go_on(self) -> None:
        if self._aborted:
            raise TimeoutError("the delivery deadline passed")


def _tls_context(settings: Settings) -> ssl.SSLContext:
    """Verify the SMTP server's certificate and name: against ``OREO_SMTP_CA_FILE`` if set, else the system's CAs."""
    if settings.smtp_ca_file is not None and not settings.smtp_ca_file.is_file():
        raise _DeliveryRefused(f"the SMTP CA file {settings.smtp_ca_file} does not exist (OREO_SMTP_CA_FILE)")
    cafile = str(settings.smtp_ca_file) if settings.smtp_ca_file is not None else None
    return ssl.create_default_context(cafile=cafile)


async def _off_loop(call: Callable[[], _T], *, on_cancel: Callable[[], None] | None = None) -> _T:
    """``call()`` in a daemon thread of its own, awaited; given up on (after ``on_cancel``) when the deadline passes.

    Not the loop's executor: ``asyncio.run`` waits for that one's threads on the way out, and a
    lookup or a socket given up on must not hold the drain.
    """
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[_T] = loop.create_future()

    def settle(result: _T | None, error: BaseException | None) -> None:
        if finished.done():
            return
        if error is not None:
            finished.set_exception(error)
        else:
            finished.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        result: _T | None = None
        error: BaseException | None = None
        try:
            result = call()
        except Exception as exc:  # handed to the awaiting delivery as its outcome
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop has closed: the drain already gave up on this one
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="oreo-notify-send", daemon=True).start()
    try:
        return await finished
    except asyncio.CancelledError:
        if on_cancel is not None:
            on_cancel()
        raise


def _run_to_end(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine`` on an event loop of its own (in a worker thread when this thread already runs one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _record_outcome(catalog: Catalog, row_id: int, now: datetime, error: str | None) -> Delivery:
    with catalog.session() as s:
        row = s.get(OutboxRow, row_id)
        assert row is not None
        hook = s.get(WebhookRow, row.target) if row.channel == "webhook" else None
        row.attempts += 1
        if error is None:
            row.state, row.sent_at, row.last_error = "sent", now, None
            if hook is not None:
                hook.failing, hook.last_success_at = False, now
        else:
            row.last_error = error
            if hook is not None:
                hook.last_error, hook.last_error_at = error, now
            removed = row.channel == "webhook" and hook is None
            if row.attempts >= MAX_ATTEMPTS or removed:
                row.state = "dead"
                if hook is not None:
                    hook.failing = True
            else:
                row.next_attempt_at = now + timedelta(seconds=backoff_s(row.attempts))
        s.flush()
        return _delivery(row)


def backoff_s(attempts: int) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt: 30 s, doubling, at most an hour."""
    return float(min(BACKOFF_S * 2 ** max(attempts - 1, 0), MAX_BACKOFF_S))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, _DeliveryRefused):
        return first
    return f"{type(exc).__name__}: {first}"[:500] if first else type(exc).__name__


# ---------------------------------------------------------------- what is told, on which event


def _on_submitted(e: events.Submitted) -> None:
    emit(e.catalog, NotifyEvent.SUBMITTED, project=e.project, dataset=e.dataset, cr_id=e.cr_id, actor=e.actor)


def _on_revised(e: events.Revised) -> None:
    emit(
        e.catalog, NotifyEvent.REVISED, project=e.project, dataset=e.dataset, cr_id=e.cr_id, actor=e.actor,
        extra={"revision": e.revision},
    )  # fmt: skip


def _on_approved(e: events.Approved) -> None:
    try:
        emit(
            e.catalog, NotifyEvent.APPROVED, project=e.project, dataset=e.dataset, cr_id=e.cr_id, actor=e.actor,
            extra={"version": e.version, "comment": e.comment}, dedup_key=f"approved:{e.cr_id}",
        )  # fmt: skip
    except CatalogUnavailable:
        # The request is merged and recorded; the catalog's "nothing was saved" would be untrue here.
        log.warning(
            "%s merged as version %s, but its notifications could not be queued", e.cr_id, e.version, exc_info=True
        )


def _on_closed(e: events.Closed) -> None:
    emit(
        e.catalog, NotifyEvent(e.state), project=e.project, dataset=e.dataset, cr_id=e.cr_id, actor=e.actor,
        extra={"reason": e.reason},
    )  # fmt: skip


def _on_changes_requested(e: events.ChangesRequested) -> None:
    emit(
        e.catalog, NotifyEvent.CHANGES_REQUESTED, project=e.project, dataset=e.dataset, cr_id=e.cr_id,
        actor=e.actor, extra={"reason": e.reason},
    )  # fmt: skip


def _on_commented(e: events.Commented) -> None:
    emit(
        e.catalog, NotifyEvent.COMMENTED, project=e.project, dataset=e.dataset, cr_id=e.cr_id, actor=e.actor,
        extra={"comment": e.comment, "row_id": e.row_id, "column": e.column},
    )  # fmt: skip


def _on_stale(e: events.WentStale) -> None:
    emit_stale(e.catalog, e.project, e.dataset or "", e.cr_id, e.conflict_versions)


def subscribe() -> None:
    """Tell people about every change-request event this process publishes (``core.reactions``)."""
    events.subscribe(events.Submitted, _on_submitted)
    events.subscribe(events.Revised, _on_revised)
    events.subscribe(events.Approved, _on_approved)
    events.subscribe(events.Closed, _on_closed)
    events.subscribe(events.ChangesRequested, _on_changes_requested)
    events.subscribe(events.Commented, _on_commented)
    events.subscribe(events.WentStale, _on_stale)
