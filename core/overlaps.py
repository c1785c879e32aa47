"""Others' pending edits on a dataset: which cells someone else has a change pending on, never their values.

Two kinds of pending change overlap an editor's:

* another person's **live-edit session** (open, or being revised) on the same dataset: a
  draft, so only *who* and *which cell* are told, never the value;
* an **open change request** (in review, or awaiting its revision) of someone else: its
  values are already readable on the Review page by the project's members, so the request
  is named ("in request cr_…").

A whole-row change (an added or deleted row) overlaps every cell of its row. Nothing here
locks anything: the grid marks the cells and a save on one says so, then saves.

Sessions are read once per save of theirs (cached by their ``last_activity``) and requests
once per revision, so marking a page costs a glob of the sessions' metadata and a lookup.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import select

from core import reads, sessions
from core.auth import Role, User, require_role
from core.catalog import Catalog, ChangeRequestRow, UserRow
from core.change_requests import CHANGED_COLUMN, IN_REVIEW, OP_COLUMN, record_from_row, staging_path
from core.datasets import layout_for
from core.errors import EngineError
from core.layout import DatasetLayout
from core.sessions import SessionInfo
from core.storage import glob

Where = Literal["session", "request"]


@dataclass(frozen=True)
class Overlap:
    """Someone else's pending change on ``row_id``.``column`` (``column`` None: the whole row)."""

    row_id: str
    column: str | None
    username: str
    name: str
    where: Where
    cr_id: str | None = None

    @property
    def label(self) -> str:
        """How the grid says it: "Bob (session)" or "Bob in request cr_…"."""
        return f"{self.name} (session)" if self.where == "session" else f"{self.name} in request {self.cr_id}"

    def covers(self, row_id: str, column: str) -> bool:
        return self.row_id == row_id and (self.column is None or self.column == column)

    def to_json(self) -> dict[str, Any]:
        return {
            "row_id": self.row_id, "column": self.column, "username": self.username, "name": self.name,
            "where": self.where, "cr_id": self.cr_id,
        }  # fmt: skip


# (session id, last_activity) -> its cells; (cr id, revision) -> its staged cells.
_session_cells: dict[tuple[str, str], list[tuple[str, str | None]]] = {}
_request_cells: dict[tuple[str, int], list[tuple[str, str | None]]] = {}
_lock = threading.Lock()
_CACHED = 512


def pending_elsewhere(
    catalog: Catalog, project_id: str, dataset_id: str, *, actor: User, row_ids: list[str] | None = None
) -> list[Overlap]:
    """Everyone else's pending changes on a dataset (module docstring), on ``row_ids`` only when given.

    Raises:
        PermissionDenied: ``actor`` has no role in the project.
    """
    require_role(catalog, actor, project_id, Role.EDITOR, action="see pending changes")
    layout = layout_for(project_id, dataset_id)
    wanted = set(row_ids) if row_ids is not None else None
    found: list[tuple[str, str | None, str, Where, str | None]] = []
    for info in _other_sessions(layout, actor.username):
        found += [(r, c, info.owner, "session", None) for r, c in _cells_of_session(layout, info)]
    for record in _other_requests(catalog, project_id, dataset_id, actor.username):
        found += [(r, c, record.author, "request", record.id) for r, c in _cells_of_request(layout, record)]
    found = [f for f in found if wanted is None or f[0] in wanted]
    names = _names(catalog, {f[2] for f in found})
    unique = {(r, c, who, where, cr): None for r, c, who, where, cr in found}
    return [Overlap(r, c, who, names.get(who, who), where, cr) for r, c, who, where, cr in unique]


def overlaps_on(overlaps: list[Overlap], row_id: str, column: str) -> list[Overlap]:
    """The overlaps that cover one cell."""
    return [o for o in overlaps if o.covers(row_id, column)]


def also_pending(
    catalog: Catalog, project_id: str, dataset_id: str, cells: list[tuple[str, str]], *, actor: User
) -> list[str]:
    """One sentence per cell of ``cells`` that someone else has a change pending on (saving goes ahead)."""
    if not cells:
        return []
    overlaps = pending_elsewhere(catalog, project_id, dataset_id, actor=actor, row_ids=sorted({r for r, _ in cells}))
    said: list[str] = []
    for row_id, column in cells:
        here = overlaps_on(overlaps, row_id, column)
        if here:
            who = " and ".join(sorted({o.label for o in here}))
            said.append(f"{who} also has a pending change to this cell (row {row_id}, {column}); yours is saved too")
    return said


def _other_sessions(layout: DatasetLayout, me: str) -> list[SessionInfo]:
    found = []
    for meta in glob(layout.live_edit_root, "*/metadata.json"):
        try:
            info = SessionInfo(**json.loads(meta.read_text()))
        except (OSError, ValueError, TypeError):
            continue  # being written or removed right now
        if info.owner != me and info.state in sessions.EDITABLE:
            found.append(info)
    return found


def _cells_of_session(layout: DatasetLayout, info: SessionInfo) -> list[tuple[str, str | None]]:
    key = (info.session_id, info.last_activity)
    with _lock:
        if key in _session_cells:
            return _session_cells[key]
    try:
        edits = sessions.effective_edits(layout, info.session_id)
    except (OSError, EngineError):
        return []
    cells = sorted({(e.row_id, e.column if e.change == "update" else None) for e in edits})
    with _lock:
        if len(_session_cells) > _CACHED:
            _session_cells.clear()
        _session_cells[key] = cells
    return cells


def _other_requests(catalog: Catalog, project_id: str, dataset_id: str, me: str) -> list[Any]:
    with catalog.session() as s:
        rows = s.scalars(
            select(ChangeRequestRow).where(
                ChangeRequestRow.project_id == project_id, ChangeRequestRow.dataset_id == dataset_id,
                ChangeRequestRow.state.in_([state.value for state in IN_REVIEW]), ChangeRequestRow.author != me,
            )
        ).all()  # fmt: skip
        return [record_from_row(r) for r in rows]


def _cells_of_request(layout: DatasetLayout, record: Any) -> list[tuple[str, str | None]]:
    key = (record.id, record.revision)
    with _lock:
        if key in _request_cells:
            return _request_cells[key]
    staging = staging_path(layout, record)
    if not (staging / "_delta_log").is_dir():
        return []
    try:
        rows = reads.cursor().execute(
            f"SELECT row_id, {OP_COLUMN}, {CHANGED_COLUMN} FROM delta_scan(?)", [str(staging)]
        ).fetchall()
    except Exception:  # duckdb.Error: a staging table being replaced; marks are a hint, not a check
        return []
    cells: list[tuple[str, str | None]] = []
    for row_id, op, changed in rows:
        if op == "update" and changed:
            cells += [(str(row_id), str(c)) for c in changed]
        else:
            cells.append((str(row_id), None))
    with _lock:
        if len(_request_cells) > _CACHED:
            _request_cells.clear()
        _request_cells[key] = cells
    return cells


def _names(catalog: Catalog, usernames: set[str]) -> dict[str, str]:
    if not usernames:
        return {}
    with catalog.session() as s:
        rows = s.execute(select(UserRow.username, UserRow.display_name).where(UserRow.username.in_(usernames)))
        return {str(u): str(d or u) for u, d in rows}
