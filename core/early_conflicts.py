"""Early conflicts: a live-edit session's pending changes that ``main`` changed under it, decided before review.

A session edits ``main`` as it was at its base version. When a newer version lands, each
pending change is compared with ``main`` now, as ``core.conflicts`` compares a change
request at approval (its reasons and choices), but while the editor is still editing:

* a pending cell update whose cell differs now from the value it was edited from
  (``CellEdit.old_value``): "also changed";
* a pending cell update or row delete of a row deleted since: "row deleted since";
* a pending row delete of a row some of whose values differ now: "row changed since; cannot delete";
* a pending row insert whose key a row added since holds: "row added since".

Each shows ``base`` (what the edit started from), ``mine`` (the pending value) and ``now``
(``main`` now), as DuckDB text. The editor decides each:

* **keep mine** - the cell is re-based: a new event records the pending value over ``main``'s
  value now (its ``old_value``), so it no longer differs from what it was edited from; a
  row deleted since comes back as the session has it (an insert of its values at the
  session's base with the pending cells over them, as a change request's "keep mine"
  brings it back at approval); a deleted row that changed is pinned to the version it
  was decided at (``early_conflicts.json`` beside the session's metadata);
* **take theirs** - the pending change is dropped (an event whose new value is the value now,
  or the row marker undone);
* or **edit again**: an ordinary save on the cell (``sessions.apply_edits``) after keeping
  mine, or taking theirs and editing the cell anew.

Once no conflict is left, the session moves its base version to ``main``'s version now:
every pending cell then starts from the value it has there, so the change request it
becomes has no conflict at approval for what was decided.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from sqlalchemy import select

from core import conflicts, engine, reads, sessions
from core.auth import User
from core.catalog import Catalog, ChangeRequestRow
from core.datasets import DatasetInfo, get_dataset, layout_for
from core.errors import InvalidInput
from core.layout import DatasetLayout
from core.sessions import CellEdit, SessionInfo
from core.storage import Location, location, write_text_atomic

PINS_FILE = "early_conflicts.json"
Choice = conflicts.Choice


@dataclass(frozen=True)
class EarlyConflict:
    """A pending change of a session that ``main`` (at ``version``) changed under it; ``column`` None: the row."""

    row_id: str
    column: str | None
    reason: str
    base: str | None
    mine: str | None
    now: str | None
    version: int

    @property
    def cell(self) -> str:
        return f"{self.row_id}.{self.column or '*'}"

    @property
    def choices(self) -> tuple[Choice, ...]:
        """What may be chosen: an insert over a row added since can only go; anything else may stay."""
        if self.reason == conflicts.ROW_ADDED:
            return ("theirs",)
        return conflicts.CHOICES

    def to_json(self) -> dict[str, Any]:
        return {
            "row_id": self.row_id,
            "column": self.column,
            "reason": self.reason,
            "base": self.base,
            "mine": self.mine,
            "now": self.now,
            "version": self.version,
            "choices": list(self.choices),
        }


@dataclass(frozen=True)
class Resolved:
    """What deciding one early conflict left: the conflicts still open, and the base version now."""

    remaining: list[EarlyConflict]
    base_version: int
    rebased: bool


# ---------------------------------------------------------------- finding


def find_early_conflicts(catalog: Catalog, session_id: str, *, actor: User) -> list[EarlyConflict]:
    """The early conflicts (module docstring) of a session with ``main`` now, by row then column.

    Nothing is read when ``main`` has not moved since the session's base version.

    Raises:
        NotFound: No such session.
        PermissionDenied: Not the owner (nor an approver of its project).
    """
    info = sessions.get_session(catalog, session_id, actor=actor)
    dataset = get_dataset(catalog, info.project_id, info.dataset_id, actor=actor)
    return _conflicts(info, dataset, layout_for(info.project_id, info.dataset_id))


def _conflicts(info: SessionInfo, dataset: DatasetInfo, layout: DatasetLayout) -> list[EarlyConflict]:
    now = int(dataset.version or 0)
    if now <= info.base_version:
        return []
    edits = sessions.effective_edits(layout, info.session_id)
    main = location(dataset.path)
    ids = sorted({e.row_id for e in edits})
    rows_now = reads.read_rows_as_text(main, now, ids) if ids else {}
    pins = _pins(layout, info.session_id)
    found: list[EarlyConflict] = []
    for e in edits:
        if e.change == "update" and e.column is not None:
            found += _cell_conflict(e, rows_now.get(e.row_id), now)
        elif e.change == "delete" and e.column is None:
            found += _delete_conflict(main, e, rows_now.get(e.row_id), pins.get(e.row_id, info.base_version), now)
        elif e.change == "insert" and e.column is None and dataset.key_column and e.row_id in rows_now:
            found.append(EarlyConflict(e.row_id, None, conflicts.ROW_ADDED, "no such row", "adds the row",
                                       _listing(rows_now[e.row_id]), now))  # fmt: skip
    return sorted(found, key=lambda c: (c.row_id, c.column or ""))


def _cell_conflict(e: CellEdit, row: dict[str, str | None] | None, now: int) -> list[EarlyConflict]:
    assert e.column is not None
    if row is None:
        return [EarlyConflict(e.row_id, e.column, conflicts.ROW_DELETED, e.old_value, e.new_value, None, now)]
    if e.column in row and row[e.column] != e.old_value:
        return [EarlyConflict(e.row_id, e.column, conflicts.ALSO_CHANGED, e.old_value, e.new_value, row[e.column], now)]
    return []


def _delete_conflict(
    main: Location, e: CellEdit, row: dict[str, str | None] | None, since: int, now: int
) -> list[EarlyConflict]:
    if row is None:
        return [EarlyConflict(e.row_id, None, conflicts.ROW_DELETED, "the row", "deletes the row", "row deleted", now)]
    if since >= now:
        return []
    before = reads.read_rows_as_text(main, since, [e.row_id]).get(e.row_id) or {}
    moved = [c for c in row if c != "row_id" and c in before and before[c] != row[c]]
    if not moved:
        return []
    return [
        EarlyConflict(
            e.row_id, None, conflicts.ROW_CHANGED, _listing(before, moved), "deletes the row", _listing(row, moved), now
        )
    ]


def _listing(values: dict[str, str | None], columns: list[str] | None = None) -> str:
    names = columns if columns is not None else [c for c in values if c != "row_id"]
    return ", ".join(f"{c} = {conflicts.EMPTY if values.get(c) is None else values[c]}" for c in names)


# ---------------------------------------------------------------- deciding


def resolve_early_conflict(
    catalog: Catalog, session_id: str, row_id: str, column: str | None, choice: Choice, *, actor: User
) -> Resolved:
    """The session's owner decides one early conflict: keep mine or take theirs (module docstring).

    Args:
        catalog: The catalog.
        session_id: The actor's own open session.
        row_id: The conflicting row (what ``oreo edit --set`` takes).
        column: The conflicting column; None (or ``*``) for a whole-row conflict.
        choice: "mine" or "theirs".
        actor: The session's owner.

    Returns:
        The conflicts left, and the session's base version (moved to ``main``'s version now once none is left).

    Raises:
        PermissionDenied: Not the owner, or no longer an editor.
        InvalidInput: An unknown choice, no such conflict, or a choice this conflict does not offer.
        ConflictError: The session expired or was submitted.
    """
    column = None if column in (None, "", "*") else column
    if choice not in conflicts.CHOICES:
        raise InvalidInput(f"unknown choice {choice!r}; use mine (keep mine) or theirs (take theirs)", field="choice")
    info, layout = sessions.editable_session(catalog, session_id, actor=actor)
    dataset = get_dataset(catalog, info.project_id, info.dataset_id, actor=actor)
    found = _conflicts(info, dataset, layout)
    target = next((c for c in found if c.row_id == row_id and c.column == column), None)
    if target is None:
        listed = ", ".join(c.cell for c in found) or "none"
        raise InvalidInput(
            f"session {session_id} has no early conflict on {row_id}.{column or '*'}; its conflicts: {listed}",
            field="column" if column else "row",
        )
    if choice not in target.choices:
        raise InvalidInput(
            f"{target.cell}: {target.reason} in version {target.version}; only take theirs (--take-theirs) settles it",
            field="choice",
        )
    info = _apply(layout, info, actor, target, choice)
    remaining = _conflicts(info, dataset, layout)
    if remaining:
        return Resolved(remaining, info.base_version, rebased=False)
    now = int(dataset.version or 0)
    _rebase(layout, info, now)
    return Resolved([], now, rebased=True)


def _apply(layout: DatasetLayout, info: SessionInfo, actor: User, target: EarlyConflict, choice: Choice) -> SessionInfo:
    """Record the decision as the session's next events (or a pin); returns the session's metadata after."""
    if choice == "mine" and target.reason == conflicts.ROW_DELETED and target.column is not None:
        return _append(layout, info, actor, _brought_back(layout, info, target.row_id))
    if target.column is not None:
        old = target.now if target.reason == conflicts.ALSO_CHANGED else target.base
        new = target.mine if choice == "mine" else old
        return _append(layout, info, actor, [(target.row_id, target.column, old, new)])
    if choice == "mine" and target.reason == conflicts.ROW_CHANGED:
        pins = _pins(layout, info.session_id)
        pins[target.row_id] = target.version
        write_text_atomic(layout.session_dir(info.session_id) / PINS_FILE, json.dumps({"pins": pins}))
        return info
    # A delete of a row gone or taken back, an insert over a row added since: the row marker is undone.
    return _append(layout, info, actor, [(target.row_id, sessions.ROW_MARKER, None, None)])


def _brought_back(
    layout: DatasetLayout, info: SessionInfo, row_id: str
) -> list[tuple[str, str, str | None, str | None]]:
    """Events inserting a row deleted since as the session has it: its base values, its pending cells over them."""
    base = reads.read_rows_as_text(layout.main, info.base_version, [row_id]).get(row_id) or {}
    mine = {
        e.column: e.new_value
        for e in sessions.effective_edits(layout, info.session_id)
        if e.row_id == row_id and e.change == "update" and e.column is not None
    }
    values = {c: v for c, v in base.items() if c != "row_id"} | mine
    events: list[tuple[str, str, str | None, str | None]] = [(row_id, sessions.ROW_MARKER, None, sessions.INSERT)]
    return events + [(row_id, column, None, value) for column, value in values.items() if value is not None]


def _append(
    layout: DatasetLayout, info: SessionInfo, actor: User, cells: list[tuple[str, str, str | None, str | None]]
) -> SessionInfo:
    events = sessions.read_events(layout, info.session_id)
    newest = max((str(i)[:20] for i in events.column("edit_id").to_pylist()), default="0")
    clock = max(time.time_ns(), int(newest) + 1 if newest.isdigit() else 0)
    rows = [
        {
            "edit_id": f"{clock + n:020d}-{uuid.uuid4().hex[:8]}", "session_id": info.session_id, "row_id": row_id,
            "column": column, "old_value": old, "new_value": new, "user_id": actor.username,
            "ts": datetime.now(UTC), "validation": json.dumps({"early_conflict": True}),
        }
        for n, (row_id, column, old, new) in enumerate(cells)
    ]  # fmt: skip
    return sessions.append_events(layout, info, pa.Table.from_pylist(rows, schema=sessions.EDITS_SCHEMA))


def _pins(layout: DatasetLayout, session_id: str) -> dict[str, int]:
    path = layout.session_dir(session_id) / PINS_FILE
    if not path.is_file():
        return {}
    return {str(r): int(v) for r, v in json.loads(path.read_text()).get("pins", {}).items()}


def _rebase(layout: DatasetLayout, info: SessionInfo, version: int) -> None:
    """Move the session's base to ``version``: no pending change differs from ``main`` there any more."""
    if version <= info.base_version:
        return
    pins = layout.session_dir(info.session_id) / PINS_FILE
    moved = SessionInfo(**{**asdict(info), "base_version": version, "last_activity": datetime.now(UTC).isoformat()})
    write_text_atomic(layout.session_metadata(info.session_id), json.dumps(asdict(moved), indent=2))
    if pins.is_file():
        write_text_atomic(pins, json.dumps({"pins": {}}))


# ---------------------------------------------------------------- main moved


@dataclass(frozen=True)
class MainMoved:
    """A version of ``main`` newer than the one a page shows: who made it, and what of mine it touched."""

    version: int
    by: str | None
    title: str | None
    cr_id: str | None
    touched: int  # of the actor's pending cells (and deleted rows), how many differ now from before
    conflicts: int  # of the actor's pending changes, how many are early conflicts now

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version, "by": self.by, "title": self.title, "cr_id": self.cr_id,
            "touched": self.touched, "conflicts": self.conflicts,
        }  # fmt: skip

    def sentence(self) -> str:
        what = f"“{self.title}” ({self.cr_id})" if self.title else "a commit"
        by = f", approved by {self.by}" if self.by and self.cr_id else f" by {self.by}" if self.by else ""
        mine = f"it touched {self.touched} of your pending cell(s)" if self.touched else "none of your pending cells"
        return f"Version {self.version} of main landed: {what}{by}; {mine}."


def main_moved(
    catalog: Catalog, project_id: str, dataset_id: str, seen: int, *, actor: User, session_id: str | None = None
) -> MainMoved | None:
    """What landed on ``main`` after version ``seen`` (None when nothing did), for ``actor``'s page.

    ``touched`` counts the pending changes of ``session_id`` (the actor's) whose rows' values
    differ between ``seen`` and now; ``conflicts`` how many of them are early conflicts.
    """
    dataset = get_dataset(catalog, project_id, dataset_id, actor=actor)
    now = int(dataset.version or 0)
    if now <= seen:
        return None
    by, title, cr_id = _made_by(catalog, dataset, now)
    touched = found = 0
    if session_id is not None:
        info = sessions.get_session(catalog, session_id, actor=actor)
        layout = layout_for(project_id, dataset_id)
        touched = _touched(location(dataset.path), sessions.effective_edits(layout, session_id), seen, now)
        found = len(_conflicts(info, dataset, layout))
    return MainMoved(now, by, title, cr_id, touched, found)


def _made_by(catalog: Catalog, dataset: DatasetInfo, version: int) -> tuple[str | None, str | None, str | None]:
    """(who, title, request id) of a version: the request merged as it and its approver, else the commit's actor."""
    with catalog.session() as s:
        row = s.scalars(
            select(ChangeRequestRow).where(
                ChangeRequestRow.project_id == dataset.project_id, ChangeRequestRow.dataset_id == dataset.dataset_id,
                ChangeRequestRow.merged_version == version,
            )
        ).first()  # fmt: skip
        if row is not None:
            return row.closed_by, row.title, row.id
    found = engine.find_commit(location(dataset.path), version - 1)
    actor = found[1].get("actor") if found is not None and found[0] == version else None
    return (str(actor) if actor else None), None, None


def _touched(main: Location, edits: list[CellEdit], seen: int, now: int) -> int:
    cells = [e for e in edits if e.change != "insert" and (e.column is not None or e.change == "delete")]
    ids = sorted({e.row_id for e in cells})
    if not ids:
        return 0
    before, after = reads.read_rows_as_text(main, seen, ids), reads.read_rows_as_text(main, now, ids)
    count = 0
    for e in cells:
        old, new = before.get(e.row_id), after.get(e.row_id)
        if old is None:
            continue
        if new is None or (old.get(e.column) != new.get(e.column) if e.column is not None else old != new):
            count += 1
    return count
