"""Live-edit sessions: one user's pending changes to one dataset, stored cell by cell.

Storage (seed 002 section 5)::

    live_edit/<session_id>/edits.delta    append-only Delta log of edit events (delta-rs)
    live_edit/<session_id>/metadata.json  owner, dataset, base_version, created_at, last_activity

``edits.delta`` has exactly the spec's schema: ``edit_id, session_id, row_id, column,
old_value, new_value, user_id, ts, validation`` (values as text, ``validation`` as JSON
text). delta-rs writes it: a single edit is one small append, far cheaper than a Spark
job, and ``main/`` and ``staging/`` stay Spark-only.

How changes are represented. Every save appends events; the *effective* edit of a
``(row_id, column)`` is its newest event (``edit_id`` sorts by time):

* **Cell update** - ``column`` is the column name, ``old_value`` the value in ``main`` at
  the session's base version, ``new_value`` the new value (NULL clears the cell). When
  the newest ``new_value`` equals ``old_value`` the cell is back to its original and
  drops out of the overlay; that is also how "undo" works.
* **Row insert** - a marker event with ``column = "__row__"`` and ``new_value =
  "insert"``, plus one cell event per given value with ``old_value`` NULL. The row's
  ``row_id`` follows the dataset's rule: its key value in a keyed dataset, else a UUID.
* **Row delete** - a marker event with ``column = "__row__"`` and ``new_value = "delete"``.
* **Undoing a row marker** - a newer ``__row__`` event with ``new_value`` NULL.
* **Bulk change** (``core.bulk``) - a marker event with ``column = "__bulk__"``, ``row_id``
  the bulk's id and ``new_value`` its description (JSON), plus one ordinary cell update
  per changed cell whose ``validation`` is ``{"bulk": <id>}``, all in one append. Undoing
  it appends the cells' earlier values and the marker with ``new_value`` NULL. Everything
  downstream (diff, conflicts, validation, merge) sees only the cell updates.

Only changed cells are ever stored, never full rows.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from core import audit, disk, duck, metrics, reads
from core.auth import Role, User, require_role
from core.catalog import Catalog, ChangeRequestRow
from core.config import get_settings
from core.datasets import DatasetInfo, dataset_settings, get_dataset, layout_for, stable_order, time_ordered_ids
from core.errors import ConflictError, InvalidInput, NotFound, OreoError, OutOfSpace, PermissionDenied
from core.filters import Condition
from core.layout import DatasetLayout, new_id, validate_id
from core.storage import (
    Location,
    ObjectPath,
    glob,
    location,
    remove_tree,
    storage_options_for,
    tree_bytes,
    write_text_atomic,
)
from core.values import canonical_text

if TYPE_CHECKING:
    from deltalake import DeltaTable

ROW_MARKER = "__row__"
BULK_MARKER = "__bulk__"
INSERT = "insert"
DELETE = "delete"
MAX_SESSION_BYTES = 100 * 1024 * 1024
_ZSTD_FROM_ROWS = 250_000

EDITS_SCHEMA = pa.schema(
    [
        ("edit_id", pa.string()),
        ("session_id", pa.string()),
        ("row_id", pa.string()),
        ("column", pa.string()),
        ("old_value", pa.string()),
        ("new_value", pa.string()),
        ("user_id", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("validation", pa.string()),
    ]
)
# Small tables of many tiny commits: checkpoint often so reads stay fast.
_EDITS_TABLE_CONFIG = {"delta.checkpointInterval": "20", "delta.logRetentionDuration": "interval 7 days"}

ChangeKind = Literal["update", "insert", "delete"]
_seq_lock = threading.Lock()
_last_ns = 0


def _edit_id() -> str:
    """Sortable by creation time within and across processes (ns clock + random tail)."""
    global _last_ns
    with _seq_lock:
        now = max(time.time_ns(), _last_ns + 1)
        _last_ns = now
    return f"{now:020d}-{uuid.uuid4().hex[:8]}"


def bulk_edit_ids(row_ids: pa.Array) -> tuple[str, pa.Array]:
    """The ids of a bulk change's marker and of its cells (one per row of ``row_ids``), in creation order.

    A cell's id is ``<marker id>/<row_id>``: unique (a bulk change has one cell per row),
    sorted after its marker and before any later event, and made without a clock per row.
    """
    marker = _edit_id()
    return marker, pc.binary_join_element_wise(marker + "/", row_ids, "")


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    owner: str
    project_id: str
    dataset_id: str
    base_version: int
    created_at: str
    last_activity: str
    state: str = "open"
    cr_id: str | None = None


@dataclass(frozen=True)
class CellEdit:
    """One effective change of a session."""

    row_id: str
    column: str | None  # None for whole-row inserts and deletes
    old_value: str | None
    new_value: str | None
    change: ChangeKind


# ---------------------------------------------------------------- metadata


def _now() -> datetime:
    return datetime.now(UTC)


def _write_metadata(layout: DatasetLayout, info: SessionInfo) -> None:
    write_text_atomic(layout.session_metadata(info.session_id), json.dumps(asdict(info), indent=2))


def _read_metadata(layout: DatasetLayout, session_id: str) -> SessionInfo:
    path = layout.session_metadata(session_id)
    if not path.is_file():
        raise NotFound(f"unknown session {session_id!r}", kind="session", ident=session_id)
    return SessionInfo(**json.loads(path.read_text()))


def find_session(catalog: Catalog, session_id: str) -> tuple[SessionInfo, DatasetLayout]:
    """Locate a session by id across all datasets.

    Raises:
        NotFound: No session with that id.
    """
    validate_id(session_id, kind="session id")
    root = get_settings().data_root / "projects"
    for meta in root.glob(f"*/datasets/*/live_edit/{session_id}/metadata.json"):
        info = SessionInfo(**json.loads(meta.read_text()))
        return info, layout_for(info.project_id, info.dataset_id)
    raise NotFound(f"unknown session {session_id!r}", kind="session", ident=session_id)


def _expired(info: SessionInfo) -> bool:
    if info.state == REVISING:
        return False  # it belongs to a change request awaiting its revision
    ttl = timedelta(hours=get_settings().session_ttl_hours)
    return _now() - datetime.fromisoformat(info.last_activity) > ttl


def open_session(catalog: Catalog, project_id: str, dataset_id: str, *, actor: User) -> SessionInfo:
    """The actor's open session on a dataset, created (at the current version) if none.

    A session being revised (``REVISING``) comes first. An expired session is removed
    first, and a new one is started.
    """
    dataset = get_dataset(catalog, project_id, dataset_id, actor=actor)
    require_role(catalog, actor, project_id, Role.EDITOR, action="edit this dataset")
    layout = layout_for(project_id, dataset_id)
    for info in _own_editable(layout, actor.username):
        if _expired(info):  # never one being revised
            discard_session(catalog, info.session_id, actor=actor, reason="expired")
            continue
        return info
    now = _now().isoformat()
    info = SessionInfo(
        session_id=new_id("sess"),
        owner=actor.username,
        project_id=project_id,
        dataset_id=dataset_id,
        base_version=int(dataset.version or 0),
        created_at=now,
        last_activity=now,
    )
    try:
        layout.session_dir(info.session_id).mkdir(parents=True)
        _write_metadata(layout, info)
    except OSError as exc:
        remove_tree(layout.session_dir(info.session_id))
        if disk.is_out_of_space(exc):
            raise _disk_full(layout.session_dir(info.session_id), "no session was started") from exc
        raise
    with catalog.session() as s:
        audit.record(
            s,
            SessionStarted(
                actor=actor.username,
                project_id=project_id,
                dataset_id=dataset_id,
                session_id=info.session_id,
                base_version=info.base_version,
            ),
        )
    return info


def mark_submitted(layout: DatasetLayout, session_id: str, cr_id: str) -> None:
    """Freeze a session once its edits became change request ``cr_id`` (or its next revision)."""
    info = _read_metadata(layout, session_id)
    _write_metadata(layout, SessionInfo(**{**asdict(info), "state": "submitted", "cr_id": cr_id}))


# A submitted session its author may edit again: changes were requested on its change request.
REVISING = "revising"
EDITABLE = ("open", REVISING)


def mark_revising(layout: DatasetLayout, session_id: str) -> None:
    """Unfreeze a submitted session while changes are requested on its change request.

    It becomes its owner's current session on the dataset (``current_session`` and
    ``open_session`` prefer it) until ``mark_submitted`` freezes it again.
    """
    info = _read_metadata(layout, session_id)
    now = _now().isoformat()
    _write_metadata(layout, SessionInfo(**{**asdict(info), "state": REVISING, "last_activity": now}))
    _events_cache.pop(session_id, None)


def get_session(catalog: Catalog, session_id: str, *, actor: User) -> SessionInfo:
    """A session, for its owner (or an approver of its project)."""
    info, _ = find_session(catalog, session_id)
    if info.owner != actor.username:
        require_role(catalog, actor, info.project_id, Role.APPROVER, action="view another user's session")
    return info


@dataclass(frozen=True, kw_only=True)
class SessionStarted(audit.AuditEvent):
    name = "session_started"
    session_id: str
    base_version: int


def request_holding(catalog: Catalog, info: SessionInfo) -> tuple[str, str] | None:
    """The change request (id, state) a session was submitted as, while it is still in review; else None."""
    if info.cr_id is None or info.state not in ("submitted", REVISING):
        return None
    with catalog.session() as s:
        row = s.get(ChangeRequestRow, info.cr_id)
        # The review states of core.change_requests.IN_REVIEW (it builds on this module).
        if row is None or row.state not in ("open", "changes_requested"):
            return None
        return row.id, row.state


@dataclass(frozen=True, kw_only=True)
class SessionDiscarded(audit.AuditEvent):
    name = "session_discarded"
    session_id: str
    owner: str
    reason: str


def discard_session(catalog: Catalog, session_id: str, *, actor: User, reason: str = "discarded") -> None:
    """Delete a session's folder (owner, or an admin of the project).

    Raises:
        ConflictError: The session belongs to a change request still in review (open, or
            awaiting its revision): its edits are that request's; withdraw the request instead.
    """
    info, layout = find_session(catalog, session_id)
    if info.owner != actor.username:
        require_role(catalog, actor, info.project_id, Role.ADMIN, action="discard another user's session")
    blocker = request_holding(catalog, info)
    if blocker is not None:
        cr_id, state = blocker
        waiting = "awaiting revision" if state == "changes_requested" else "in review"
        raise ConflictError(
            f"session {session_id} belongs to change request {cr_id} {waiting}; withdraw the request first"
        )
    remove_tree(layout.session_dir(session_id))
    _events_cache.pop(session_id, None)
    with catalog.session() as s:
        audit.record(
            s,
            SessionDiscarded(
                actor=actor.username,
                project_id=info.project_id,
                dataset_id=info.dataset_id,
                session_id=session_id,
                owner=info.owner,
                reason=reason,
            ),
        )


# ---------------------------------------------------------------- events


def _append(
    layout: DatasetLayout, info: SessionInfo, events: list[dict[str, Any]] | pa.Table, table: DeltaTable | None
) -> tuple[SessionInfo, DeltaTable | None]:
    """Commit ``events`` to ``edits.delta``; ``table`` is the session's open table, if known.

    Returns the updated metadata and the open table at the new version (None when this
    commit created it), so the next save skips re-reading the log.
    """
    from deltalake import DeltaTable, WriterProperties, write_deltalake  # delta-rs: loaded when first needed

    path = layout.live_edit(info.session_id)
    if _session_bytes(layout, info.session_id) > MAX_SESSION_BYTES:
        raise ConflictError(
            f"session {info.session_id} is over the {MAX_SESSION_BYTES // 2**20} MB limit; "
            "submit it as a change request or discard it"
        )
    data = events if isinstance(events, pa.Table) else pa.Table.from_pylist(events, schema=EDITS_SCHEMA)
    # A bulk change of very many cells: zstd (a third more CPU than snappy) halves what they take
    # of the session's size limit, so a change of OREO_MAX_BULK_ROWS cells can be undone and redone.
    properties = WriterProperties(compression="ZSTD" if data.num_rows > _ZSTD_FROM_ROWS else "SNAPPY")
    if table is None and (path / "_delta_log").is_dir():
        table = DeltaTable(str(path), storage_options=storage_options_for(path))
    try:
        if table is None:
            write_deltalake(
                path if isinstance(path, Path) else str(path),
                data,
                mode="append",
                configuration=_EDITS_TABLE_CONFIG,
                storage_options=storage_options_for(path),
                writer_properties=properties,
            )
        else:
            # A commit from a stale table is still safe: delta-rs retries an append on top.
            write_deltalake(table, data, mode="append", writer_properties=properties)
        updated = SessionInfo(**{**asdict(info), "last_activity": _now().isoformat()})
        _write_metadata(layout, updated)
    except Exception as exc:  # delta-rs reports a full disk as its own error, Python as OSError
        if disk.is_out_of_space(exc):
            raise _disk_full(path, "these edits were not saved") from exc
        raise
    return updated, table


def _disk_full(path: Location, outcome: str) -> OutOfSpace:
    return OutOfSpace(
        f"the disk is full: no space left on the device holding {path}; {outcome}",
        path=str(path),
        hint="free some space (or grow the volume) and try again",
    )


def _session_bytes(layout: DatasetLayout, session_id: str) -> int:
    top = layout.session_dir(session_id)
    if isinstance(top, ObjectPath):
        return tree_bytes(top)
    total = 0
    folders = [top]
    while folders:  # os.scandir: a save must not pay pathlib's cost per file of a long session
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(Path(entry.path))
                elif entry.is_file():
                    total += entry.stat().st_size
    return total


def _event(
    info: SessionInfo,
    actor: User,
    row_id: str,
    column: str,
    old: str | None,
    new: str | None,
    validation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "edit_id": _edit_id(),
        "session_id": info.session_id,
        "row_id": row_id,
        "column": column,
        "old_value": old,
        "new_value": new,
        "user_id": actor.username,
        "ts": _now(),
        "validation": json.dumps(validation or {}),
    }


@dataclass(frozen=True)
class _Cached:
    """A session's stored events (oldest first), and its open ``edits.delta`` table, as of ``last_activity``.

    With what a save needs of their fold: how many effective edits, the rows inserted and the
    rows deleted. A save refolds only the rows it touches (each row's net changes depend on
    its own events alone), so a pending bulk change of a million cells does not slow it.
    """

    last_activity: str
    events: pa.Table
    table: DeltaTable | None
    count: int
    inserted: frozenset[str]
    deleted: frozenset[str]


# Every save rewrites last_activity, so a cached entry is reused only while nobody (in
# any process) has saved since it was read.
_events_cache: dict[str, _Cached] = {}


def _cached(layout: DatasetLayout, info: SessionInfo) -> _Cached:
    cached = _events_cache.get(info.session_id)
    if cached is not None and cached.last_activity == info.last_activity:
        return cached
    table = _open_edits(layout, info.session_id)
    events = _sorted_events(table)
    folded = fold_events(events)
    change, column, rows = folded.column("change"), folded.column("column"), folded.column("row_id")
    inserted = frozenset(pc.unique(rows.filter(pc.equal(change, "insert"))).to_pylist())
    deleted = frozenset(pc.unique(rows.filter(pc.and_(pc.equal(change, "delete"), pc.is_null(column)))).to_pylist())
    cached = _Cached(info.last_activity, events, table, folded.num_rows, inserted, deleted)
    _events_cache[info.session_id] = cached
    return cached


def _events_of(events: pa.Table, row_ids: set[str]) -> list[dict[str, Any]]:
    """The events of ``row_ids`` (oldest first)."""
    if not row_ids or events.num_rows == 0:
        return []
    return events.filter(pc.is_in(events.column("row_id"), pa.array(sorted(row_ids), pa.string()))).to_pylist()


def read_events(layout: DatasetLayout, session_id: str) -> pa.Table:
    """Every stored event of a session, oldest first (empty when nothing was saved)."""
    return _sorted_events(_open_edits(layout, session_id))


def _open_edits(layout: DatasetLayout, session_id: str) -> DeltaTable | None:
    from deltalake import DeltaTable

    path = layout.live_edit(session_id)
    if not (path / "_delta_log").is_dir():
        return None
    return DeltaTable(str(path), storage_options=storage_options_for(path))


def _sorted_events(table: DeltaTable | None) -> pa.Table:
    if table is None:
        return EDITS_SCHEMA.empty_table()
    return table.to_pyarrow_table().sort_by("edit_id")


def effective_edits(layout: DatasetLayout, session_id: str) -> list[CellEdit]:
    """The session's net changes: newest event per cell, no-ops dropped."""
    return cell_edits(fold_events(read_events(layout, session_id)))


# The net changes of events, as ``_fold`` makes them, in one DuckDB query (a bulk change stores a
# million cell events; folding them in Python took 5-8 s). ``seq`` is the events' order.
_FOLD_SQL = f"""
WITH ev AS (
    SELECT seq, row_id, "column" AS col, old_value, new_value, validation FROM {{events}}
    WHERE "column" <> '{BULK_MARKER}'),
inserts AS (
    SELECT row_id, max(seq) AS last FROM ev WHERE col = '{ROW_MARKER}' AND new_value = '{INSERT}' GROUP BY row_id),
latest AS (
    SELECT ev.* FROM ev LEFT JOIN inserts i USING (row_id)
    WHERE ev.col = '{ROW_MARKER}' OR i.last IS NULL OR ev.seq > i.last
    QUALIFY row_number() OVER (PARTITION BY ev.row_id, ev.col ORDER BY ev.seq DESC) = 1),
markers AS (
    SELECT row_id, new_value AS marker FROM latest WHERE col = '{ROW_MARKER}' AND coalesce(new_value, '') <> '')
SELECT l.row_id,
       CASE WHEN l.col = '{ROW_MARKER}' THEN NULL ELSE l.col END AS "column",
       CASE WHEN l.col = '{ROW_MARKER}' OR m.marker = '{INSERT}' THEN NULL ELSE l.old_value END AS old_value,
       CASE WHEN l.col = '{ROW_MARKER}' THEN NULL ELSE l.new_value END AS new_value,
       CASE WHEN l.col = '{ROW_MARKER}' THEN m.marker WHEN m.marker = '{INSERT}' THEN 'insert' ELSE 'update' END
           AS change,
       l.validation
FROM latest l LEFT JOIN markers m USING (row_id) LEFT JOIN inserts i USING (row_id)
WHERE CASE WHEN l.col = '{ROW_MARKER}' THEN coalesce(m.marker IN ('{INSERT}', '{DELETE}'), false)
           WHEN m.marker = '{INSERT}' THEN l.new_value IS NOT NULL
           WHEN m.marker = '{DELETE}' OR i.row_id IS NOT NULL THEN false
           ELSE l.old_value IS DISTINCT FROM l.new_value END
ORDER BY l.row_id, l.col
"""
_FOLDED = pa.schema(
    [("row_id", pa.string()), ("column", pa.string()), ("old_value", pa.string()), ("new_value", pa.string()),
     ("change", pa.string()), ("validation", pa.string())]
)  # fmt: skip


def fold_events(events: pa.Table) -> pa.Table:
    """The net changes of stored events (oldest first, as ``read_events``), as ``effective_edits`` lists them.

    Returns one row per ``CellEdit`` (``row_id``, ``column``, ``old_value``, ``new_value``,
    ``change``) in the same order, with the ``validation`` of the event it comes from (a
    bulk change's cells carry its tag).
    """
    if events.num_rows == 0:
        return _FOLDED.empty_table()
    if events.num_rows <= _FOLD_IN_PYTHON_ROWS:
        return _fold_in_python(events.to_pylist())
    view = f"oreo_fold_{uuid.uuid4().hex}"
    numbered = events.select(["row_id", "column", "old_value", "new_value", "validation"]).append_column(
        "seq", pa.array(np.arange(events.num_rows, dtype=np.int64))
    )
    cur = duck.cursor()
    cur.register(view, numbered)
    try:
        return cur.execute(_FOLD_SQL.format(events=view)).to_arrow_table().cast(_FOLDED)
    finally:
        cur.unregister(view)


# Below this many events the Python fold is faster than a DuckDB query's fixed cost (about 10 ms).
_FOLD_IN_PYTHON_ROWS = 2_000


def _fold_in_python(events: list[dict[str, Any]]) -> pa.Table:
    newest = {(e["row_id"], e["column"]): e["validation"] for e in events}
    edits = _fold(events)
    return pa.table(
        {
            "row_id": [e.row_id for e in edits],
            "column": [e.column for e in edits],
            "old_value": [e.old_value for e in edits],
            "new_value": [e.new_value for e in edits],
            "change": [e.change for e in edits],
            "validation": [newest.get((e.row_id, e.column or ROW_MARKER)) for e in edits],
        },
        schema=_FOLDED,
    )


def cell_edits(folded: pa.Table) -> list[CellEdit]:
    """``fold_events``' rows as ``CellEdit``s."""
    columns = [folded.column(name).to_pylist() for name in ("row_id", "column", "old_value", "new_value", "change")]
    return [CellEdit(*values) for values in zip(*columns, strict=True)]


@dataclass(frozen=True)
class PendingChange:
    """One change as a person counts it: a cell update, a whole added row, or a deleted row.

    An added row is one change however many cells it fills (``values``, in column
    order of the events); undoing it is one ``UndoCell(row_id, None)``.
    """

    row_id: str
    change: ChangeKind
    column: str | None = None  # the updated cell's column; None for added and deleted rows
    old_value: str | None = None
    new_value: str | None = None
    values: tuple[tuple[str, str | None], ...] = ()  # an added row's cells

    @property
    def undo(self) -> UndoCell:
        """The one operation that takes this change back."""
        return UndoCell(self.row_id, self.column)


def pending_changes(edits: list[CellEdit]) -> list[PendingChange]:
    """Group effective edits (``effective_edits``) the way the pending list shows them.

    Cell updates stay one change each; a row insert and all of its cells become one
    change; a row delete is one change. The order of ``edits`` is kept (by first mention).
    """
    added: dict[str, list[tuple[str, str | None]]] = {}
    order: list[tuple[str, str | None]] = []
    by_key: dict[tuple[str, str | None], PendingChange] = {}
    for e in edits:
        if e.change == "insert":
            if e.row_id not in added:
                added[e.row_id] = []
                order.append((e.row_id, None))
            if e.column is not None:
                added[e.row_id].append((e.column, e.new_value))
        else:
            key = (e.row_id, e.column)
            order.append(key)
            by_key[key] = PendingChange(e.row_id, e.change, e.column, e.old_value, e.new_value)
    return [
        PendingChange(key[0], "insert", values=tuple(added[key[0]]))
        if key[1] is None and key[0] in added and key not in by_key
        else by_key[key]
        for key in order
    ]


def _fold(events: list[dict[str, Any]]) -> list[CellEdit]:
    """Net changes of ``events`` (oldest first): the newest event per cell wins."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    ever_inserted: set[str] = set()
    cells_of: dict[str, set[str]] = {}
    for event in events:
        row_id, column = event["row_id"], event["column"]
        if column == BULK_MARKER:
            continue  # a bulk change's description: its cells are events of their own
        if column == ROW_MARKER and event["new_value"] == INSERT:
            ever_inserted.add(row_id)
            # A (re-)insert starts from empty cells: those of an earlier, undone insert are gone.
            for earlier in cells_of.pop(row_id, set()):
                latest.pop((row_id, earlier), None)
        elif column != ROW_MARKER:
            cells_of.setdefault(row_id, set()).add(column)
        latest[(row_id, column)] = event
    markers = {rid: e["new_value"] for (rid, col), e in latest.items() if col == ROW_MARKER and e["new_value"]}
    edits: list[CellEdit] = []
    for (row_id, column), e in sorted(latest.items()):
        marker = markers.get(row_id)
        if column == ROW_MARKER:
            if marker == INSERT:
                edits.append(CellEdit(row_id, None, None, None, "insert"))
            elif marker == DELETE:
                edits.append(CellEdit(row_id, None, None, None, "delete"))
        elif marker == INSERT:
            if e["new_value"] is not None:
                edits.append(CellEdit(row_id, column, None, e["new_value"], "insert"))
        elif marker == DELETE or row_id in ever_inserted:
            continue  # cells of a deleted row, or of an insert that was undone, no longer matter
        elif e["old_value"] != e["new_value"]:
            edits.append(CellEdit(row_id, column, e["old_value"], e["new_value"], "update"))
    return edits


# ---------------------------------------------------------------- edit operations


@dataclass(frozen=True)
class SetCell:
    row_id: str
    column: str
    value: str | None


@dataclass(frozen=True)
class AddRow:
    values: dict[str, Any]


@dataclass(frozen=True)
class DeleteRow:
    row_id: str


@dataclass(frozen=True)
class UndoCell:
    row_id: str
    column: str | None  # None undoes a row insert/delete marker


EditOp = SetCell | AddRow | DeleteRow | UndoCell


def _allow_non_finite(dataset: DatasetInfo) -> bool:
    return dataset_settings(dataset.project_id, dataset.dataset_id).allow_non_finite


def _main_values(
    dataset: DatasetInfo, base_version: int, row_ids: list[str], columns: list[str]
) -> dict[str, dict[str, Any]]:
    """Base values of some rows (``row_id`` and ``columns``, as text), keyed by row_id."""
    if not row_ids:
        return {}
    return reads.read_rows_as_text(location(dataset.path), base_version, row_ids, columns)


def _seen_base_values(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Base values the session already looked up: rows of ``main`` it edited or deleted.

    An update's ``old_value`` is the cell at the (fixed) base version, so it needs no
    second lookup; a row that was ever inserted in the session is left out.
    """
    inserted = {e["row_id"] for e in events if e["column"] == ROW_MARKER and e["new_value"] == INSERT}
    seen: dict[str, dict[str, Any]] = {}
    for e in events:
        row_id = e["row_id"]
        if row_id in inserted or e["column"] == BULK_MARKER:
            continue
        if e["column"] != ROW_MARKER:
            seen.setdefault(row_id, {"row_id": row_id})[e["column"]] = e["old_value"]
        elif e["new_value"] == DELETE:
            seen.setdefault(row_id, {"row_id": row_id})
    return seen


def _base_rows(
    dataset: DatasetInfo,
    info: SessionInfo,
    schema: dict[str, str],
    stored: pa.Table,
    inserted: set[str],
    ops: list[EditOp],
) -> dict[str, dict[str, Any]]:
    """The base rows ``ops`` need, with the cells they touch, looking up only what is new."""
    needed: dict[str, set[str]] = {}
    for op in ops:
        if isinstance(op, SetCell | DeleteRow | UndoCell) and op.row_id not in inserted:
            if isinstance(op, UndoCell) and op.column is None:
                continue  # undoing a row marker needs no base value
            columns = needed.setdefault(op.row_id, set())
            if isinstance(op, SetCell | UndoCell) and op.column in schema:
                columns.add(op.column)
    seen = _seen_base_values(_events_of(stored, set(needed))) if needed else {}
    base = {r: seen[r] for r, columns in needed.items() if r in seen and columns <= seen[r].keys()}
    missing = [r for r in needed if r not in base]
    if missing:
        wanted = sorted(set().union(*(needed[r] for r in missing)))
        base.update(_main_values(dataset, info.base_version, missing, wanted))
    return base


def editable_session(catalog: Catalog, session_id: str, *, actor: User) -> tuple[SessionInfo, DatasetLayout]:
    """The actor's own session, still open for edits (an expired one is removed first).

    Raises:
        PermissionDenied: Not the owner, or no longer an editor.
        ConflictError: The session expired or was submitted.
    """
    info, layout = find_session(catalog, session_id)
    if info.owner != actor.username:
        raise PermissionDenied(
            f"session {session_id} belongs to {info.owner!r}; only its owner can edit it", user=actor.username
        )
    require_role(catalog, actor, info.project_id, Role.EDITOR, action="edit this dataset")
    if _expired(info):
        discard_session(catalog, session_id, actor=actor, reason="expired")
        raise ConflictError(
            f"session {session_id} expired after {get_settings().session_ttl_hours} h without activity "
            "and was removed; start a new one"
        )
    if info.state not in EDITABLE:
        raise ConflictError(f"session {session_id} was submitted as {info.cr_id}; edits go to a new session")
    return info, layout


def append_events(layout: DatasetLayout, info: SessionInfo, events: pa.Table) -> SessionInfo:
    """Commit ``events`` (``EDITS_SCHEMA``, ids from ``bulk_edit_ids``) to a session in one append.

    The caller checked the session (``editable_session``) and every value. Returns the
    session's updated metadata.

    Raises:
        ConflictError: The session is over its size limit.
        OutOfSpace: The disk is full (nothing was saved).
    """
    cached = _events_cache.pop(info.session_id, None)
    table = cached.table if cached is not None and cached.last_activity == info.last_activity else None
    updated, _table = _append(layout, info, events, table)
    return updated


def apply_edits(catalog: Catalog, session_id: str, ops: list[EditOp], *, actor: User) -> int:
    """Validate ``ops`` against the base table and save them in one commit.

    Args:
        catalog: The catalog.
        session_id: The actor's own open session.
        ops: Cell sets, row adds, row deletes and undos, applied in order.
        actor: The session's owner, an editor of the project.

    Returns:
        The number of effective edits in the session afterwards.

    Raises:
        PermissionDenied: Not the owner, or no longer an editor.
        NotFound: Unknown row or column.
        InvalidInput: A value that does not fit its column, a key change, an empty batch.
        ConflictError: The session expired or is over its size limit.
    """
    info, layout = editable_session(catalog, session_id, actor=actor)
    if not ops:
        raise InvalidInput("no edits given", field="edits")
    dataset = get_dataset(catalog, info.project_id, info.dataset_id, actor=actor)
    schema = {c.name: c.type for c in reads.table_schema(location(dataset.path), info.base_version)}
    cached = _cached(layout, info)
    stored = cached.events
    inserted, deleted = set(cached.inserted), set(cached.deleted)
    base = _base_rows(dataset, info, schema, stored, inserted, ops)
    # Read once per save: on an s3:// data root each read of the settings file is two
    # requests, and reading it per value made a 10,000-cell save 20,000 requests.
    allow = any(isinstance(op, SetCell | AddRow) for op in ops) and _allow_non_finite(dataset)

    events: list[dict[str, Any]] = []
    for op in ops:
        if isinstance(op, SetCell):
            events.append(_set_cell(info, actor, dataset, schema, base, inserted, deleted, op, allow))
        elif isinstance(op, AddRow):
            row_id, row_events = _add_row(info, actor, dataset, schema, inserted, op, allow)
            inserted.add(row_id)
            events.extend(row_events)
        elif isinstance(op, DeleteRow):
            if op.row_id in inserted:
                events.append(_event(info, actor, op.row_id, ROW_MARKER, None, None))
                inserted.discard(op.row_id)
            else:
                _require_row(base, op.row_id, dataset)
                events.append(_event(info, actor, op.row_id, ROW_MARKER, None, DELETE))
                deleted.add(op.row_id)
        else:
            if op.column is None:
                events.append(_event(info, actor, op.row_id, ROW_MARKER, None, None))
                inserted.discard(op.row_id)
                deleted.discard(op.row_id)
            else:
                _require_column(schema, op.column)
                original = None if op.row_id in inserted else _require_row(base, op.row_id, dataset)[op.column]
                events.append(_event(info, actor, op.row_id, op.column, original, original))
    touched = {e["row_id"] for e in events}
    before = _events_of(stored, touched)
    after = _fold(before + events)
    count = cached.count - len(_fold(before)) + len(after)
    now_inserted = (cached.inserted - touched) | {e.row_id for e in after if e.change == "insert"}
    now_deleted = (cached.deleted - touched) | {e.row_id for e in after if e.change == "delete" and e.column is None}
    new = pa.Table.from_pylist(events, schema=EDITS_SCHEMA)
    updated, table = _append(layout, info, new, cached.table)
    now = pa.concat_tables([stored, new], promote_options="permissive") if stored.num_rows else new
    _events_cache[session_id] = _Cached(updated.last_activity, now, table, count, now_inserted, now_deleted)
    metrics.edit_saved(len(ops))
    return count


def save_edits(
    catalog: Catalog, project_id: str, dataset_id: str, ops: list[EditOp], *, actor: User
) -> tuple[SessionInfo, int]:
    """Save ``ops`` to the actor's open session on a dataset, starting one only for values that fit.

    A refused first edit leaves no session behind: without an open session, the values are
    checked against the dataset's columns (``core.values``) before one is started.

    Returns:
        The session the edits went to, and its number of effective edits afterwards.

    Raises:
        The errors of ``apply_edits``, and ``InvalidInput`` for a value before any session exists.
        OutOfSpace: The disk is full (a session this save started is removed again).
    """
    info = current_session(catalog, project_id, dataset_id, actor=actor)
    if info is None:
        require_role(catalog, actor, project_id, Role.EDITOR, action="edit this dataset")
        if not ops:
            raise InvalidInput("no edits given", field="edits")
        dataset = get_dataset(catalog, project_id, dataset_id, actor=actor)
        schema = {c.name: c.type for c in reads.table_schema(location(dataset.path), int(dataset.version or 0))}
        _check_values(schema, ops, allow_non_finite=_allow_non_finite(dataset))
        info = open_session(catalog, project_id, dataset_id, actor=actor)
        try:
            return info, apply_edits(catalog, info.session_id, ops, actor=actor)
        except BaseException:
            _drop_new_session(catalog, info, actor)
            raise
    return info, apply_edits(catalog, info.session_id, ops, actor=actor)


def _drop_new_session(catalog: Catalog, info: SessionInfo, actor: User) -> None:
    """Remove a session this save started and whose first edit failed, so no empty session is left."""
    remove_tree(layout_for(info.project_id, info.dataset_id).session_dir(info.session_id))
    _events_cache.pop(info.session_id, None)
    try:
        with catalog.session() as s:
            audit.record(
                s,
                SessionDiscarded(
                    actor=actor.username,
                    project_id=info.project_id,
                    dataset_id=info.dataset_id,
                    session_id=info.session_id,
                    owner=info.owner,
                    reason="its first edit was not saved",
                ),
            )
    except OreoError:
        pass  # the catalog failing too: the folder, which is the session, is gone all the same


def _check_values(schema: dict[str, str], ops: list[EditOp], *, allow_non_finite: bool) -> None:
    """Refuse the first value of ``ops`` that does not fit its column (as ``apply_edits`` would)."""
    for op in ops:
        cells: list[tuple[str, str, Any]] = [(op.row_id, op.column, op.value)] if isinstance(op, SetCell) else []
        if isinstance(op, AddRow):
            cells = [("(new row)", c, v) for c, v in op.values.items() if c != "row_id"]
        for row_id, column, value in cells:
            canonical_text(
                value, column=column, duck_type=_require_column(schema, column), row_id=row_id,
                allow_non_finite=allow_non_finite,
            )  # fmt: skip


def _require_column(schema: dict[str, str], column: str) -> str:
    if column not in schema:
        raise NotFound(f"unknown column {column!r}; columns are: {', '.join(schema)}", kind="column")
    return schema[column]


def _require_row(base: dict[str, dict[str, Any]], row_id: str, dataset: DatasetInfo) -> dict[str, Any]:
    if row_id not in base:
        raise NotFound(f"unknown row {row_id!r} in {dataset.project_id}/{dataset.dataset_id}", kind="row", ident=row_id)
    return base[row_id]


def _set_cell(
    info: SessionInfo,
    actor: User,
    dataset: DatasetInfo,
    schema: dict[str, str],
    base: dict[str, dict[str, Any]],
    inserted: set[str],
    deleted: set[str],
    op: SetCell,
    allow_non_finite: bool,
) -> dict[str, Any]:
    duck_type = _require_column(schema, op.column)
    if op.column == "row_id" or op.column == dataset.key_column:
        raise InvalidInput(
            f"column {op.column!r} identifies the row and cannot be edited; delete the row and add a new one",
            field=op.column,
        )
    value = canonical_text(
        op.value, column=op.column, duck_type=duck_type, row_id=op.row_id, allow_non_finite=allow_non_finite
    )
    if op.row_id in inserted:
        return _event(info, actor, op.row_id, op.column, None, value)
    original = _require_row(base, op.row_id, dataset)[op.column]
    if op.row_id in deleted:
        raise ConflictError(f"row {op.row_id!r} is marked deleted in this session; undo the delete to edit it")
    return _event(info, actor, op.row_id, op.column, original, value)


def _add_row(
    info: SessionInfo,
    actor: User,
    dataset: DatasetInfo,
    schema: dict[str, str],
    inserted: set[str],
    op: AddRow,
    allow_non_finite: bool,
) -> tuple[str, list[dict[str, Any]]]:
    values = dict(op.values)
    values.pop("row_id", None)
    for column in values:
        _require_column(schema, column)
    canonical = {
        c: canonical_text(v, column=c, duck_type=schema[c], row_id="(new row)", allow_non_finite=allow_non_finite)
        for c, v in values.items()
    }
    if dataset.key_column:
        row_id = canonical.get(dataset.key_column)
        if row_id is None:
            raise InvalidInput(
                f"a new row needs a value for the key column {dataset.key_column!r}", field=dataset.key_column
            )
        if row_id in inserted or _main_values(dataset, info.base_version, [row_id], []):
            raise InvalidInput(f"a row with key {row_id!r} already exists", field=dataset.key_column)
    else:
        row_id = time_ordered_ids(1)[0]  # sorts after the rows before it: the order rows were added
    events = [_event(info, actor, row_id, ROW_MARKER, None, INSERT)]
    events += [_event(info, actor, row_id, c, None, v) for c, v in canonical.items() if v is not None]
    return row_id, events


# ---------------------------------------------------------------- overlay

CHANGE_COLUMN = "_change"
EDITED_COLUMN = "_edited"


def overlay_of(
    dataset: DatasetInfo, folded: pa.Table, version: int | None = None, *, leave_out_deleted: bool = False
) -> reads.Overlay | None:
    """The rows ``folded`` (``fold_events``) adds or changes, edits applied, to lay over ``main``.

    Updated rows are read at ``version`` (default: the dataset's latest) and their cells
    replaced in one DuckDB query, so a bulk change of a million rows stays a table. With
    ``leave_out_deleted`` the rows it deletes are the overlay's ``removed`` (a page shows
    them, marked; a facet does not count them). None when there are no changes.
    """
    if folded.num_rows == 0:
        return None
    at = int(dataset.version or 0) if version is None else version
    path = location(dataset.path)
    names = [c.name for c in reads.table_schema(path, at) if c.name != "row_id"]
    change, column, rows = folded.column("change"), folded.column("column"), folded.column("row_id")
    whole = pc.is_null(column)
    inserted = pc.unique(rows.filter(pc.and_(whole, pc.equal(change, "insert"))))
    deleted = rows.filter(pc.and_(whole, pc.equal(change, "delete"))) if leave_out_deleted else []
    removed = frozenset(pc.unique(deleted).to_pylist()) if len(deleted) else frozenset()
    updated = pc.unique(rows.filter(pc.equal(change, "update")))
    cells = folded.filter(pc.fill_null(pc.is_in(column, pa.array(names, pa.string())), False))
    if len(updated):
        base = reads.read_rows_as_text_table(path, at, updated)
    else:
        base = pa.table({c: pa.array([], pa.string()) for c in ["row_id", *names]})
    table = _laid_rows(base, cells.select(["row_id", "column", "new_value"]), inserted, names)
    return reads.Overlay(table=table, added=len(inserted), key=dataset.key_column, removed=removed)


def _laid_rows(base: pa.Table, cells: pa.Table, inserted: pa.Array, names: list[str]) -> pa.Table:
    """The updated rows (``base`` with ``cells`` applied) and the inserted rows (their cells, NULL elsewhere).

    One join per column that has edits (a bulk change edits one), not a pivot of every column.
    """
    edited = set(pc.unique(cells.column("column")).to_pylist())
    cur = duck.cursor()
    views = {what: f"oreo_{what}_{uuid.uuid4().hex}" for what in ("base", "cells", "inserted")}
    cur.register(views["base"], base)
    cur.register(views["cells"], cells)
    cur.register(views["inserted"], pa.table({"row_id": inserted.cast(pa.string())}))
    try:
        joins, changed, added = "", "", ""
        for n, name in enumerate(names):
            q = duck.quote_ident(name)
            if name not in edited:
                changed += f", b.{q}"
                added += f", CAST(NULL AS VARCHAR) AS {q}"
                continue
            joins += (
                f" LEFT JOIN (SELECT row_id, new_value FROM {views['cells']} WHERE \"column\" = "
                f"{duck.quote_literal(name)}) c{n} ON c{n}.row_id = b.row_id"
            )
            changed += f", CASE WHEN c{n}.row_id IS NULL THEN b.{q} ELSE c{n}.new_value END AS {q}"
            added += f", c{n}.new_value AS {q}"
        sql = (
            f"SELECT b.row_id{changed} FROM {views['base']} b{joins} "
            f"UNION ALL SELECT b.row_id{added} FROM {views['inserted']} b{joins}"
        )
        return cur.execute(sql).to_arrow_table()
    finally:
        for view in views.values():
            cur.unregister(view)


def session_overlay(catalog: Catalog, session_id: str, *, actor: User) -> tuple[DatasetInfo, reads.Overlay | None]:
    """The session's dataset and the rows its edits add, change or delete, to lay over ``main`` in a read.

    ``overlay_page`` reads pages through it; other reads of the table as the session
    sees it (a column's facet, its clusters) pass it to ``core.reads`` as well.

    Raises:
        NotFound, PermissionDenied: No such session, or not the actor's.
    """
    info = get_session(catalog, session_id, actor=actor)
    dataset = get_dataset(catalog, info.project_id, info.dataset_id, actor=actor)
    folded = fold_events(read_events(layout_for(info.project_id, info.dataset_id), session_id))
    return dataset, overlay_of(dataset, folded, leave_out_deleted=True)


def _session_overlay(
    catalog: Catalog, session_id: str, actor: User
) -> tuple[DatasetInfo, pa.Table, reads.Overlay | None]:
    info = get_session(catalog, session_id, actor=actor)
    layout = layout_for(info.project_id, info.dataset_id)
    dataset = get_dataset(catalog, info.project_id, info.dataset_id, actor=actor)
    folded = fold_events(read_events(layout, session_id))
    return dataset, folded, overlay_of(dataset, folded)


def overlay_page(
    catalog: Catalog,
    session_id: str,
    *,
    actor: User,
    filters: list[reads.RowFilter] | None = None,
    conditions: list[Condition] | None = None,
    order_by: str | None = None,
    descending: bool = False,
    default_order: list[str] | None = None,
    limit: int = 50,
    offset: int = 0,
) -> reads.Page:
    """A page of ``main`` with the session's edits applied and marked.

    Edited and added rows are read as they will be after the merge: filters, conditions
    and the sort see their new values, and they sit where the merge will put them (the
    dataset's ``stable_order``, or ``default_order``, unless ``order_by`` sorts the whole
    table). Two extra columns mark the overlay: ``_change`` is "update", "insert",
    "delete" or "", and ``_edited`` lists the changed columns.

    Raises:
        InvalidInput: As ``reads.read_page``.
        NotFound, PermissionDenied: No such session, or not the actor's.
    """
    dataset, folded, overlay = _session_overlay(catalog, session_id, actor)
    page = reads.read_page(
        location(dataset.path),
        version=dataset.version,
        filters=filters,
        conditions=conditions,
        order_by=order_by,
        descending=descending,
        default_order=default_order if default_order is not None else stable_order(dataset),
        limit=limit,
        offset=offset,
        known_total=dataset.rows,
        overlay=overlay,
    )
    frame = page.rows.astype(object)
    for name in page.rows.columns[page.rows.dtypes == np.float32]:  # keep FLOAT values float32 (shortest text)
        frame[name] = pd.Series(list(page.rows[name].to_numpy()), index=frame.index, dtype=object)
    shown = pa.array([str(r) for r in frame["row_id"]] if len(frame) else [], pa.string())
    by_row: dict[str, list[CellEdit]] = {}
    for e in cell_edits(folded.filter(pc.is_in(folded.column("row_id"), value_set=shown))):
        by_row.setdefault(e.row_id, []).append(e)
    changes: list[str] = []
    edited: list[list[str]] = []
    for row_id in frame["row_id"] if len(frame) else []:
        row_edits = by_row.get(row_id, [])
        kinds = {e.change for e in row_edits if e.column is None}
        cols = sorted({e.column for e in row_edits if e.column is not None})
        if "insert" in kinds:
            changes.append("insert")
        elif "delete" in kinds:
            changes.append("delete")
        else:
            changes.append("update" if cols else "")
        edited.append(cols)
    frame[CHANGE_COLUMN] = changes
    frame[EDITED_COLUMN] = edited
    return reads.Page(rows=frame, total=page.total)


def current_session(catalog: Catalog, project_id: str, dataset_id: str, *, actor: User) -> SessionInfo | None:
    """The actor's open, unexpired session on a dataset, or None (never creates one)."""
    get_dataset(catalog, project_id, dataset_id, actor=actor)
    layout = layout_for(project_id, dataset_id)
    for info in _own_editable(layout, actor.username):
        if not _expired(info):
            return info
    return None


def _own_editable(layout: DatasetLayout, owner: str) -> list[SessionInfo]:
    """``owner``'s editable sessions on a dataset: one being revised first, then open ones."""
    found = []
    for meta in glob(layout.live_edit_root, "*/metadata.json"):
        info = SessionInfo(**json.loads(meta.read_text()))
        if info.owner == owner and info.state in EDITABLE:
            found.append(info)
    return sorted(found, key=lambda info: info.state != REVISING)
