"""Presence: who else has a Table page (a dataset) or a Review page (a change request) open now.

An open page *beats* every ``presence_refresh_s`` seconds (``OREO_PRESENCE_REFRESH_S``, 5 by
default): one unit of work on the catalog that

* checks that the person still holds a role in the page's project (no role: no presence,
  neither shown nor seen),
* writes their row (``PresenceRow``: page, person, name, role, since when, seen at),
* deletes every row older than the idle time (``OREO_PRESENCE_IDLE_S``, 60 s), at most once
  per quarter of it in each process (reads skip idle rows anyway), so the table cleans itself
  up with no background job, on any replica,
* and reads back who else is on the page, with what the page watches for news: the
  dataset's version (the Table page) or the request's state, revision and comments (the
  Review page).

So one open page costs one catalog write and one read per beat, and what it shows is the
same on every app replica that shares the catalog. A person who closes the page (or whose
browser stops beating) drops out ``presence_idle_s`` after their last beat.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update
from sqlalchemy.orm import Session

from core.auth import Role, User, role_within
from core.catalog import Catalog, ChangeRequestRow, CommentRow, DatasetRow, PresenceRow, utcnow
from core.config import get_settings
from core.errors import NotFound, PermissionDenied
from core.layout import validate_id

PageKind = Literal["table", "review"]


@dataclass(frozen=True)
class PageRef:
    """A page people can be on together: a dataset's Table page or a change request's Review page."""

    kind: PageKind
    project_id: str
    target: str  # the dataset id, or the change request id

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.project_id}/{self.target}"


def table_page(project_id: str, dataset_id: str) -> PageRef:
    """The Table page of a dataset."""
    validate_id(project_id, kind="project id")
    validate_id(dataset_id, kind="dataset id")
    return PageRef("table", project_id, dataset_id)


def review_page(catalog: Catalog, cr_id: str) -> PageRef:
    """The Review page of a change request.

    Raises:
        NotFound: No such change request.
    """
    validate_id(cr_id, kind="change request id")
    with catalog.session() as s:
        row = s.get(ChangeRequestRow, cr_id)
        if row is None:
            raise NotFound(f"unknown change request {cr_id!r}", kind="change_request", ident=cr_id)
        return PageRef("review", row.project_id, cr_id)


@dataclass(frozen=True)
class Present:
    """Someone on a page: who, their role in its project, since when and when last seen."""

    username: str
    name: str
    role: str
    since: datetime
    seen_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "username": self.username,
            "name": self.name,
            "role": self.role,
            "since": self.since.isoformat(),
            "seen_at": self.seen_at.isoformat(),
        }


@dataclass(frozen=True)
class RequestMark:
    """What the Review page watches of its request: a change to any of it is news."""

    state: str
    revision: int
    comments: int
    author: str
    closed_by: str | None
    last_comment_by: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "revision": self.revision,
            "comments": self.comments,
            "author": self.author,
            "closed_by": self.closed_by,
            "last_comment_by": self.last_comment_by,
        }


@dataclass(frozen=True)
class Beat:
    """What one heartbeat of a page read back."""

    others: list[Present]
    version: int | None = None  # the dataset's version (Table page)
    request: RequestMark | None = None  # the request as it is now (Review page)

    def to_json(self) -> dict[str, Any]:
        return {
            "others": [p.to_json() for p in self.others],
            "version": self.version,
            "request": self.request.to_json() if self.request is not None else None,
        }


def _idle() -> timedelta:
    return timedelta(seconds=get_settings().presence_idle_s)


def _role(s: Session, page: PageRef, actor: User) -> Role:
    role = role_within(s, actor, page.project_id)
    if role is None:
        raise PermissionDenied(
            f"{actor.username!r} has no role in project {page.project_id!r}, so sees no one there",
            user=actor.username,
            project_id=page.project_id,
            required=Role.EDITOR.value,
        )
    return role


# A beat's statements, built once: building them anew (the expressions, their cache keys)
# was most of a beat's CPU. Their parameters are bound at each execution, on the unit of
# work's connection (Core, not the ORM: the ORM's per-statement work cost as much again).
_SWEEP = delete(PresenceRow).where(PresenceRow.seen_at < bindparam("b_before"))
_TOUCH = (
    update(PresenceRow)
    .where(PresenceRow.page == bindparam("b_page"), PresenceRow.username == bindparam("b_username"))
    .values(seen_at=bindparam("b_seen_at"), role=bindparam("b_role"), name=bindparam("b_name"))
)
_JOIN = insert(PresenceRow).values(
    page=bindparam("b_page"), username=bindparam("b_username"), project_id=bindparam("b_project_id"),
    since=bindparam("b_seen_at"), seen_at=bindparam("b_seen_at"), role=bindparam("b_role"), name=bindparam("b_name"),
)  # fmt: skip
_OTHERS = (
    select(PresenceRow.username, PresenceRow.name, PresenceRow.role, PresenceRow.since, PresenceRow.seen_at)
    .where(PresenceRow.page == bindparam("b_page"), PresenceRow.username != bindparam("b_username"))
    .where(PresenceRow.seen_at >= bindparam("b_after"))
    .order_by(PresenceRow.since, PresenceRow.username)
)
_VERSION = select(DatasetRow.delta_version).where(
    DatasetRow.project_id == bindparam("b_project_id"), DatasetRow.dataset_id == bindparam("b_dataset_id")
)
_REQUEST = select(
    ChangeRequestRow.state, ChangeRequestRow.revision, ChangeRequestRow.author, ChangeRequestRow.closed_by
).where(ChangeRequestRow.id == bindparam("b_cr_id"))
_COMMENTS = select(func.count()).select_from(CommentRow).where(CommentRow.cr_id == bindparam("b_cr_id"))
_LAST_COMMENTER = (
    select(CommentRow.author).where(CommentRow.cr_id == bindparam("b_cr_id")).order_by(CommentRow.id.desc()).limit(1)
)


def beat(catalog: Catalog, page: PageRef, *, actor: User) -> Beat:
    """Mark ``actor`` on ``page`` now, drop everyone idle, and read who else is there (module docstring).

    Returns:
        The others on the page (longest there first) and what the page watches.

    Raises:
        PermissionDenied: ``actor`` has no role in the page's project (nothing is written).
    """
    now = utcnow()
    with catalog.session() as s:
        role = _role(s, page, actor)
        connection = s.connection()
        run = connection.execute
        if _cleanup_due(catalog, now):  # reads skip idle rows anyway: deleting them is housekeeping
            run(_SWEEP, {"b_before": now - _idle()})
        mine = {"b_page": page.key, "b_username": actor.username, "b_seen_at": now}
        values = {**mine, "b_role": role.value, "b_name": actor.label}
        if run(_TOUCH, values).rowcount == 0:
            run(_JOIN, {**values, "b_project_id": page.project_id})
        return _read(connection, page, actor, now)


# When this process last deleted idle rows, by catalog: once per quarter of the idle time is enough.
_cleaned: dict[int, datetime] = {}


def _cleanup_due(catalog: Catalog, now: datetime) -> bool:
    last = _cleaned.get(id(catalog))
    if last is not None and now - last < _idle() / 4:
        return False
    _cleaned[id(catalog)] = now
    return True


def present(catalog: Catalog, page: PageRef, *, actor: User) -> Beat:
    """Who else is on ``page`` now, read only (``actor`` is not marked there).

    Raises:
        PermissionDenied: ``actor`` has no role in the page's project.
    """
    now = utcnow()
    with catalog.session() as s:
        _role(s, page, actor)
        return _read(s.connection(), page, actor, now)


def leave(catalog: Catalog, page: PageRef, *, actor: User) -> None:
    """``actor`` left ``page``: the others stop seeing them at once."""
    with catalog.session() as s:
        s.execute(delete(PresenceRow).where(PresenceRow.page == page.key, PresenceRow.username == actor.username))


def _read(connection: Connection, page: PageRef, actor: User, now: datetime) -> Beat:
    run = connection.execute
    rows = run(_OTHERS, {"b_page": page.key, "b_username": actor.username, "b_after": now - _idle()}).all()
    others = [Present(*r) for r in rows]
    if page.kind == "table":
        version = run(_VERSION, {"b_project_id": page.project_id, "b_dataset_id": page.target}).scalar()
        return Beat(others, version=version)
    return Beat(others, request=_request_mark(connection, page.target))


def _request_mark(connection: Connection, cr_id: str) -> RequestMark | None:
    run = connection.execute
    row = run(_REQUEST, {"b_cr_id": cr_id}).one_or_none()
    if row is None:
        return None
    count = run(_COMMENTS, {"b_cr_id": cr_id}).scalar() or 0
    last = run(_LAST_COMMENTER, {"b_cr_id": cr_id}).scalar()
    return RequestMark(row.state, row.revision or 1, int(count), row.author, row.closed_by, last)


def request_news(before: RequestMark, after: RequestMark, *, me: str) -> list[str]:
    """What someone other than ``me`` did to a request between two marks, one sentence each (may be empty)."""
    news: list[str] = []
    if after.revision > before.revision and after.author != me:
        news.append(f"{after.author} revised it: revision {after.revision} is the one to review now")
    if after.comments > before.comments and after.last_comment_by not in (None, me):
        added = after.comments - before.comments
        news.append(f"{after.last_comment_by} commented" + (f" ({added} new comments)" if added > 1 else ""))
    if after.state != before.state:
        by = after.closed_by or (after.author if after.state == "open" else None)
        if by != me:
            news.append(f"{by or 'someone'} changed its state to {after.state.replace('_', ' ')}")
    return news


def describe(others: list[Present], *, now: datetime | None = None) -> str:
    """The others on a page in one line: "Bob (editor, for 3 min), Ann (approver, for 20 s)"."""
    at = now or utcnow()
    return ", ".join(f"{p.name} ({p.role}, {_for(at - p.since)})" for p in others)


def _for(spent: timedelta) -> str:
    seconds = max(0, int(spent.total_seconds()))
    if seconds < 60:
        return f"for {seconds} s"
    if seconds < 3600:
        return f"for {seconds // 60} min"
    return f"for {seconds // 3600} h {seconds % 3600 // 60} min"
