"""Conflicts of an open change request with newer commits to ``main``, and how its author settles each.

A commit after a request's base version conflicts with the request only where it changed
a value the request depends on. The request's staged rows are read from ``main`` at the
base version and at the current version (DuckDB time travel, filtered to the staged
``row_id``s) and compared value by value, as ``oreo diff --from --to`` compares versions,
never by the files a commit wrote: a restore re-adds whole files, yet conflicts only with
the cells whose values it really changed.

* the request updates a cell whose value differs now: "also changed";
* the request updates or deletes a row deleted since: "row deleted since";
* the request deletes a row some of whose values differ now: "row changed since; cannot delete";
* the request stages a ``row_id`` that did not exist at its base but does now: "row added since".

Each ``Conflict`` names the newest commit that changed it and who made it (found by walking
back from the current version, only when something conflicts), and shows the values:
``base`` (main at the base version), ``theirs`` (main now) and ``mine`` (the request's), as
DuckDB text like every diff.

The request's author decides each conflict (four-eyes: an approver must not edit what they
then approve): **keep mine** (the request's value stands over the newer one) or **take
theirs** (the cell, or the row, leaves the request). ``resolve_conflict`` stages the result
as the request's next revision, re-based onto the current version, so the approver reviews
it again. Conflicts not decided yet must not vanish with the re-base: their cells stay
*pinned* to the version they were based on, recorded in the new staging table's commit
userMetadata (``pinned``, a staging table is written once), and are compared from there.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from sqlalchemy import select

from core import audit, engine, events, reads
from core.auth import Role, User, require_role
from core.catalog import Catalog, ChangeRequestRow, CommentRow, CRRevisionRow, utcnow
from core.change_requests import (
    CHANGED_COLUMN,
    MERGE_ACTION,
    OP_COLUMN,
    ChangeRequest,
    ChangeRequestRevised,
    CRState,
    Stopwatch,
    get_change_request,
    record_from_row,
    revision_row,
    save_staging,
    staged_columns,
    stages_json,
    staging_digest,
    staging_path,
    validate_change_request,
)
from core.datasets import get_dataset, layout_for
from core.diff import select_list
from core.errors import ConflictError, EngineError, InvalidInput, NotFound, PermissionDenied
from core.storage import Location, location, remove_tree, spark_uri

if TYPE_CHECKING:
    from core.layout import DatasetLayout

ALSO_CHANGED = "also changed"
ROW_DELETED = "row deleted since"
ROW_CHANGED = "row changed since; cannot delete"
ROW_ADDED = "row added since"

Choice = Literal["mine", "theirs"]
CHOICES: tuple[Choice, ...] = ("mine", "theirs")
EMPTY = "∅"  # how every screen shows an empty value (app.formatting.EMPTY)


@dataclass(frozen=True)
class Conflict:
    """A cell (or whole row, ``column`` None) the request changes that commit ``version`` changed too.

    ``base``, ``theirs`` and ``mine`` are the values at the request's base version, in main
    now and in the request (DuckDB text; a row conflict describes the rows). They, and
    ``committed_by``, describe the conflict and take no part in comparing two.
    """

    row_id: str
    column: str | None
    version: int
    reason: str
    base: str | None = field(default=None, compare=False)
    theirs: str | None = field(default=None, compare=False)
    mine: str | None = field(default=None, compare=False)
    committed_by: str | None = field(default=None, compare=False)

    @property
    def cell(self) -> str:
        """``row_id.column``, ``row_id.*`` for the whole row: how messages name it."""
        return f"{self.row_id}.{self.column or '*'}"

    def command(self, cr_id: str) -> str:
        """The ``oreo`` command that settles this conflict of ``cr_id`` (its author picks one flag)."""
        column = self.column or "'*'"
        return f"oreo cr resolve {cr_id} {self.row_id} {column} --keep-mine|--take-theirs --as AUTHOR"

    def to_json(self) -> dict[str, Any]:
        return {
            "row_id": self.row_id,
            "column": self.column,
            "version": self.version,
            "reason": self.reason,
            "base": self.base,
            "theirs": self.theirs,
            "mine": self.mine,
            "committed_by": self.committed_by,
        }


# ---------------------------------------------------------------- finding conflicts


@dataclass(frozen=True)
class _Compared:
    """One staged row that differs between ``main`` at some base version and now."""

    op: str
    changed: list[str] | None
    existed: bool
    exists: bool
    base: dict[str, str | None]
    now: dict[str, str | None]
    mine: dict[str, str | None]


# Up to this many staged row ids are spelled as an ``IN`` list, which DuckDB pushes into the
# scan (file and row group skipping); more are read from the staging table.
_LISTED_IDS = 1000


def pinned_cells(staging: Location) -> dict[tuple[str, str | None], int]:
    """Cells of a staging table still compared from an older version than its request's base (see module doc)."""
    found = engine.find_commit(staging, -1)
    pins = found[1].get("pinned") if found else None
    return {(str(r), c if c is None else str(c)): int(v) for r, c, v in pins or []}


def _data_columns(main: Location, staging: Location, versions: list[int]) -> tuple[list[str], dict[int, set[str]]]:
    """Every data column of the staging table and of ``main`` at ``versions``, and which each version has."""
    present = {v: {c.name for c in reads.table_schema(main, v)} for v in versions}
    names = [c for c in staged_columns(staging) if c != "row_id"]
    for v in versions:
        names += [c.name for c in reads.table_schema(main, v) if c.name != "row_id" and c.name not in names]
    return names, present


def _texts(alias: str, columns: list[str]) -> str:
    q = reads.quote_ident
    return "[" + ", ".join(f"CAST({alias}.{q(c)} AS VARCHAR)" for c in columns) + "]::VARCHAR[]"


def _staged_filter(staging: Location, ids: list[str]) -> tuple[str, list[str]]:
    """A DuckDB ``WHERE`` condition on ``row_id`` for the staged ``ids``, and its parameters (see ``_LISTED_IDS``)."""
    if len(ids) <= _LISTED_IDS:
        return f"row_id IN ({', '.join('?' * len(ids))})", list(ids)
    return "row_id IN (SELECT row_id FROM delta_scan(?))", [str(staging)]


def _open_staging(catalog: Catalog, cr_id: str, *, actor: User) -> tuple[ChangeRequest, DatasetLayout, Location] | None:
    """The request ``cr_id``, its dataset's layout and its staging table; ``None`` if closed or not staged."""
    record = get_change_request(catalog, cr_id, actor=actor)
    layout = layout_for(record.project_id, record.dataset_id)
    staging = staging_path(layout, record)
    if record.state != CRState.OPEN or not (staging / "_delta_log").is_dir():
        return None
    return record, layout, staging


def _compare(
    main: Location, staging: Location, base: int, now: int, columns: list[str], present: dict[int, set[str]],
    ids: list[str] | None,
) -> dict[str, _Compared]:  # fmt: skip
    """The staged rows (or only ``ids``) whose values in ``main`` differ between ``base`` and ``now``."""
    q = reads.quote_ident
    staged_ids = ids if ids is not None else _staged_ids(staging)
    if not staged_ids:
        return {}
    where, id_params = _staged_filter(staging, staged_ids)
    staged = set(staged_columns(staging))
    differs = " OR ".join(f"CAST(b.{q(c)} AS VARCHAR) IS DISTINCT FROM CAST(n.{q(c)} AS VARCHAR)" for c in columns)
    sql = f"""
        WITH s AS (SELECT row_id, {OP_COLUMN}, {CHANGED_COLUMN}, {select_list(columns, staged)}
                   FROM delta_scan(?) WHERE {where}),
        b AS (SELECT row_id, {select_list(columns, present[base])} FROM delta_scan(?, version => ?) WHERE {where}),
        n AS (SELECT row_id, {select_list(columns, present[now])} FROM delta_scan(?, version => ?) WHERE {where})
        SELECT s.row_id, s.{OP_COLUMN}, s.{CHANGED_COLUMN}, b.row_id IS NOT NULL, n.row_id IS NOT NULL,
               {_texts("b", columns)}, {_texts("n", columns)}, {_texts("s", columns)}
        FROM s LEFT JOIN b ON b.row_id = s.row_id LEFT JOIN n ON n.row_id = s.row_id
        WHERE (b.row_id IS NULL) <> (n.row_id IS NULL) OR (b.row_id IS NOT NULL AND ({differs or "false"}))
    """
    params = [str(staging), *id_params, str(main), base, *id_params, str(main), now, *id_params]
    try:
        rows = reads.cursor().execute(sql, params).fetchall()
    except Exception as exc:  # duckdb.Error and its many subclasses
        raise EngineError(f"DuckDB could not compare {main} with version {base}: {str(exc).splitlines()[0]}") from exc
    return {
        str(r[0]): _Compared(
            op=str(r[1]),
            changed=None if r[2] is None else [str(c) for c in r[2]],
            existed=bool(r[3]),
            exists=bool(r[4]),
            base=dict(zip(columns, r[5], strict=True)),
            now=dict(zip(columns, r[6], strict=True)),
            mine=dict(zip(columns, r[7], strict=True)),
        )
        for r in rows
    }


def _staged_ids(staging: Location) -> list[str]:
    return [str(r[0]) for r in reads.cursor().execute("SELECT row_id FROM delta_scan(?)", [str(staging)]).fetchall()]


def _listing(values: dict[str, str | None], columns: list[str]) -> str:
    return ", ".join(f"{c} = {EMPTY if values.get(c) is None else values[c]}" for c in columns) or "(no values)"


def _row_conflict(row: _Compared, columns: list[str]) -> tuple[str, str, str, str] | None:
    """The whole-row conflict of a staged row that differs between its base and now: (reason, base, theirs, mine)."""
    given = row.changed if row.changed is not None else columns
    mine = "deletes the row" if row.op == "delete" else _listing(row.mine, given)
    if row.existed and not row.exists and row.op in ("update", "delete"):
        return ROW_DELETED, _listing(row.base, given if row.op == "update" else columns), "row deleted", mine
    if not row.existed and row.exists:
        return ROW_ADDED, "no such row", _listing(row.now, columns), mine
    if row.existed and row.exists and row.op == "delete":
        moved = [c for c in columns if row.base[c] != row.now[c]]
        return ROW_CHANGED, _listing(row.base, moved), _listing(row.now, moved), mine
    return None


def _found(main: Location, staging: Location, base_version: int, now: int) -> list[tuple[Conflict, int]]:
    """Every conflict (not yet attributed to a commit) with the version its cell is compared from."""
    pins = pinned_cells(staging)
    bases = sorted(v for v in {base_version, *pins.values()} if v < now)
    if not bases:
        return []
    columns, present = _data_columns(main, staging, [*bases, now])
    compared = {
        b: _compare(
            main, staging, b, now, columns, present,
            None if b == base_version else sorted({r for (r, _), v in pins.items() if v == b}),
        )
        for b in bases
    }  # fmt: skip
    found: list[tuple[Conflict, int]] = []
    for row_id in sorted(set().union(*(c.keys() for c in compared.values()))):
        row_base = pins.get((row_id, None), base_version)
        row = compared.get(row_base, {}).get(row_id)
        whole = _row_conflict(row, columns) if row is not None else None
        if whole is not None:
            reason, base, theirs, mine = whole
            found.append((Conflict(row_id, None, 0, reason, base, theirs, mine), row_base))
            continue
        any_row = next(c[row_id] for c in compared.values() if row_id in c)
        if any_row.op != "update":
            continue
        for column in any_row.changed if any_row.changed is not None else columns:
            cell_base = pins.get((row_id, column), base_version)
            cell = compared.get(cell_base, {}).get(row_id)
            if cell is not None and cell.existed and cell.exists and cell.base[column] != cell.now[column]:
                values = cell.base[column], cell.now[column], cell.mine[column]
                found.append((Conflict(row_id, column, 0, ALSO_CHANGED, *values), cell_base))
    return found


# Versions read per query while looking for the commit that made each conflict.
_WALK_BATCH = 8


def _attributed(main: Location, found: list[tuple[Conflict, int]], now: int) -> list[Conflict]:
    """``found`` with each conflict's ``version``: the newest commit after which its cell (or row) is as it is now.

    Walks back from ``now``, a few versions per query, reading only the conflicting rows,
    and stops once every conflict is placed (at the latest at its base version, where by
    definition it differed). DuckDB compares each conflict's state at every version with
    its state now and returns only the newest version where it differed: a request of
    100,000 conflicting rows took 50 CPU-s when the states came back to Python to be
    compared there, and the server's background sweep ran it again at every new version.
    """
    if not found:
        return []
    oldest = min(b for _, b in found)
    keys = _state_keys(main, found, [now])
    view = f"oreo_conflicts_{uuid.uuid4().hex}"
    cells = pa.table(
        {
            "i": pa.array(range(len(found)), pa.int64()),
            "row_id": pa.array([c.row_id for c, _ in found], pa.string()),
            "key": pa.array([None if c.column is None else keys.get(c.column, "") for c, _ in found], pa.string()),
            "base": pa.array([b for _, b in found], pa.int64()),
        }
    )
    placed: dict[int, int] = {}
    reads.cursor().register(view, cells)
    try:
        version = now - 1
        while len(placed) < len(found) and version >= oldest:
            batch = list(range(version, max(oldest, version - _WALK_BATCH + 1) - 1, -1))
            _more_keys(keys, main, batch)
            for i, newest in _newest_differing(main, view, keys, now, batch):
                placed.setdefault(int(i), int(newest) + 1)
            version = batch[-1] - 1
    finally:
        reads.cursor().unregister(view)
    by = _committers(main, set(placed.values()))
    return [
        Conflict(c.row_id, c.column, placed.get(i, base + 1), c.reason, c.base, c.theirs, c.mine, by.get(placed.get(i)))
        for i, (c, base) in enumerate(found)
    ]


def _state_keys(main: Location, found: list[tuple[Conflict, int]], versions: list[int]) -> dict[str, str]:
    """A short JSON key (``c0``, ``c1``...) for every column of ``main`` at ``versions`` and of the conflicts."""
    keys: dict[str, str] = {}
    _more_keys(keys, main, versions)
    for c, _ in found:
        if c.column is not None and c.column not in keys:
            keys[c.column] = f"c{len(keys)}"
    return keys


def _more_keys(keys: dict[str, str], main: Location, versions: list[int]) -> None:
    """Give the columns ``main`` has at ``versions`` and ``keys`` lacks the next keys (a column keeps its key)."""
    for v in versions:
        for column in reads.table_schema(main, v):
            if column.name != "row_id" and column.name not in keys:
                keys[column.name] = f"c{len(keys)}"


def _row_states(main: Location, version: int, keys: dict[str, str], view: str) -> tuple[str, list[Any]]:
    """The conflicting rows of ``main`` at ``version``, each as one JSON text of its values (keys in one order)."""
    present = {c.name for c in reads.table_schema(main, version)}
    pairs = ", ".join(
        f"{reads.quote_literal(key)}, CAST({reads.quote_ident(name)} AS VARCHAR)"
        for name, key in keys.items()
        if name in present
    )
    sql = (
        f"SELECT {int(version)} AS v, row_id, CAST(json_object({pairs}) AS VARCHAR) AS j "
        f"FROM delta_scan(?, version => ?) WHERE row_id IN (SELECT row_id FROM {view})"
    )
    return sql, [str(main), int(version)]


def _newest_differing(
    main: Location, view: str, keys: dict[str, str], now: int, batch: list[int]
) -> list[tuple[int, int]]:
    """Each conflict of ``view`` with the newest version of ``batch`` (from its base on) where it differs from now.

    A conflict's state is its row's absence, or its whole row (a whole-row conflict), or its
    cell's value (a missing column reads as an empty cell).
    """
    now_sql, params = _row_states(main, now, keys, view)
    unions = []
    for v in batch:
        sql, more = _row_states(main, v, keys, view)
        unions.append(sql)
        params += more
    versions = ", ".join(f"({int(v)})" for v in batch)

    def state(alias: str) -> str:
        cell = f"coalesce(CAST(json_extract({alias}.j, '$.' || g.key) AS VARCHAR), 'null')"
        whole = f"CASE WHEN g.key IS NULL THEN {alias}.j ELSE {cell} END"
        return f"CASE WHEN {alias}.row_id IS NULL THEN 'N' ELSE 'R' || {whole} END"

    sql = f"""
        WITH n AS ({now_sql}), s AS ({" UNION ALL ".join(unions)}),
        g AS (SELECT c.i, c.row_id, c.key, b.v FROM {view} c, (VALUES {versions}) b(v) WHERE b.v >= c.base)
        SELECT g.i, max(g.v) FROM g
        LEFT JOIN s ON s.v = g.v AND s.row_id = g.row_id
        LEFT JOIN n ON n.row_id = g.row_id
        WHERE {state("s")} IS DISTINCT FROM {state("n")}
        GROUP BY g.i
    """
    try:
        return [(int(i), int(v)) for i, v in reads.cursor().execute(sql, params).fetchall()]
    except Exception as exc:  # duckdb.Error and its many subclasses
        raise EngineError(f"DuckDB could not read the history of {main}: {str(exc).splitlines()[0]}") from exc


def _committers(main: Location, versions: set[int]) -> dict[int | None, str | None]:
    """Who made each of ``versions``: the Oreo actor in its userMetadata, else Delta's ``userName``."""
    found: dict[int | None, str | None] = {}
    log = location(main) / "_delta_log"
    for version in versions:
        file = log / f"{version:020d}.json"
        if not file.is_file():
            continue
        for line in file.read_text().splitlines():
            info = json.loads(line).get("commitInfo") if line.strip() else None
            if info is not None:
                meta = engine.parse_user_metadata(info.get("userMetadata"))
                found[version] = str(meta.get("actor") or info.get("userName") or "") or None
    return found


def conflicts_since(main: Location, staging: Location, base_version: int) -> list[Conflict]:
    """The conflicts (module docstring) of a staging table based on ``base_version`` with ``main`` now.

    Nothing is read when ``main`` has not moved since ``base_version`` (and no cell is pinned
    to an older one). Ordered by row, then column (the whole row first).

    Raises:
        EngineError: DuckDB could not read the tables.
    """
    return [c for c, _ in _conflicts_at(main, staging, base_version, engine.latest_version(main))]


def _conflicts_at(main: Location, staging: Location, base_version: int, now: int) -> list[tuple[Conflict, int]]:
    found = _found(main, staging, base_version, now)
    return list(zip(_attributed(main, found, now), (b for _, b in found), strict=True))


def staged_rows_moved(catalog: Catalog, cr_id: str, since: int, now: int, *, actor: User) -> bool:
    """Whether any row the open request ``cr_id`` stages differs in ``main`` between versions ``since`` and ``now``.

    When none does, the request's conflicts at ``now`` are those it had at ``since`` (they
    compare the staged rows' values now with their base): one DuckDB query, where finding
    them again reads and compares every staged row (seconds for a large request).
    A closed request, or one whose staging table is gone, has not moved.

    Raises:
        EngineError: DuckDB could not read the tables.
    """
    opened = _open_staging(catalog, cr_id, actor=actor)
    if opened is None:
        return False
    _, layout, staging = opened
    ids = _staged_ids(staging)
    if not ids:
        return False
    where, id_params = _staged_filter(staging, ids)

    def rows(version: int) -> str:
        names = sorted(c.name for c in reads.table_schema(layout.main, version) if c.name != "row_id")
        pairs = ", ".join(f"{reads.quote_literal(n)}, CAST({reads.quote_ident(n)} AS VARCHAR)" for n in names)
        scan = "delta_scan(?, version => ?)"
        return f"SELECT row_id, CAST(json_object({pairs}) AS VARCHAR) AS j FROM {scan} WHERE {where}"

    sql = f"""
        WITH a AS ({rows(since)}), b AS ({rows(now)})
        SELECT EXISTS (SELECT 1 FROM a FULL JOIN b ON a.row_id = b.row_id WHERE a.j IS DISTINCT FROM b.j)
    """
    params = [str(layout.main), int(since), *id_params, str(layout.main), int(now), *id_params]
    try:
        found = reads.cursor().execute(sql, params).fetchone()
    except Exception as exc:  # duckdb.Error and its many subclasses
        said = str(exc).splitlines()[0]
        raise EngineError(f"DuckDB could not compare {layout.main} with version {since}: {said}") from exc
    return bool(found and found[0])


def find_conflicts(catalog: Catalog, cr_id: str, *, actor: User) -> list[Conflict]:
    """Conflicts of an open change request with ``main`` as it is now (empty if closed)."""
    opened = _open_staging(catalog, cr_id, actor=actor)
    if opened is None:
        return []
    record, layout, staging = opened
    conflicts = conflicts_since(layout.main, staging, record.base_version)
    if conflicts and engine.find_commit(layout.main, record.base_version, cr_id=cr_id, action=MERGE_ACTION):
        # Its own MERGE landed and the catalog is about to say so (or an approval again finishes
        # it): the cells main changed under it are its own, not conflicts, and no one is told "stale".
        return []
    if conflicts:
        events.publish(
            events.WentStale(
                catalog=catalog, project=record.project_id, dataset=record.dataset_id, cr_id=cr_id, actor="system",
                conflict_versions=tuple(c.version for c in conflicts),
            )
        )  # fmt: skip
    return conflicts


# ---------------------------------------------------------------- resolving


@dataclass(frozen=True, kw_only=True)
class ConflictResolved(audit.AuditEvent):
    name = "cr_conflict_resolved"
    cr_id: str
    revision: int
    row_id: str
    column: str | None
    choice: str
    version: int


def resolve_conflict(
    catalog: Catalog, cr_id: str, row_id: str, column: str | None, choice: Choice, *, actor: User
) -> ChangeRequest:
    """The author settles one conflict of an open request, as the request's next revision.

    "mine" keeps the request's value (or row change) over the newer one; "theirs" drops the
    cell (or the row) from the request. The next revision is the request's staged rows
    re-based onto the current version of ``main``: what they do not change is taken from
    it, and the cells of conflicts not decided yet stay pinned to their older base (module
    docstring). It is validated again and goes back to the approver, with a note in the
    thread saying what was decided. (An edit request's session is left as it was: should an
    approver later request changes, the revision staged from it is compared from the
    session's base again, so a conflict settled here shows again there.)

    Args:
        catalog: The catalog.
        cr_id: An open change request.
        row_id: The conflicting row.
        column: The conflicting column; None (or ``*``) for a whole-row conflict.
        choice: "mine" or "theirs".
        actor: The request's author.

    Returns:
        The request at its new revision.

    Raises:
        PermissionDenied: ``actor`` is not the author.
        InvalidInput: An unknown choice, no such conflict, or the request would be left empty.
        ConflictError: The request is not open, or changed while this ran.
        EngineError: Spark or DuckDB failed; the request is unchanged.
    """
    column = None if column in (None, "", "*") else column
    record = _resolvable_request(catalog, cr_id, choice, actor=actor)
    layout = layout_for(record.project_id, record.dataset_id)
    staging = staging_path(layout, record)
    if not (staging / "_delta_log").is_dir():
        raise NotFound(f"the staging table of {cr_id} is missing", kind="staging")
    main = layout.main
    now = engine.latest_version(main)
    target, pinned = _conflict_to_resolve(record, main, staging, now, row_id, column)
    revision = record.revision + 1
    fresh = layout.staging(cr_id, revision)
    remove_tree(fresh)  # a resolve that died half-way
    commit = engine.new_commit(
        actor.username, "stage_change_request", cr_id=cr_id, revision=revision, pinned=pinned,
        resolved={"row_id": row_id, "column": column, "choice": choice, "version": target.version},
    )  # fmt: skip
    updated = _stage_resolution(
        catalog, record, layout, actor=actor, now=now, staging=staging, fresh=fresh, target=target, choice=choice,
        commit=commit, revision=revision,
    )  # fmt: skip
    events.publish(
        events.Revised(
            catalog=catalog, project=record.project_id, dataset=record.dataset_id, cr_id=cr_id,
            actor=actor.username, revision=revision,
        )
    )  # fmt: skip
    return updated


def _resolvable_request(catalog: Catalog, cr_id: str, choice: Choice, *, actor: User) -> ChangeRequest:
    """The open request whose conflict its author ``actor`` resolves with ``choice``, or why not."""
    if choice not in CHOICES:
        raise InvalidInput(f"unknown choice {choice!r}; use mine (keep mine) or theirs (take theirs)", field="choice")
    record = get_change_request(catalog, cr_id, actor=actor)
    if record.author != actor.username:
        raise PermissionDenied(
            f"only the author {record.author!r} decides the conflicts of {cr_id}; an approver can request changes",
            user=actor.username,
        )
    require_role(catalog, actor, record.project_id, Role.EDITOR, action="resolve a conflict")
    if record.state != CRState.OPEN:
        raise ConflictError(f"change request {cr_id} is {record.state.value}; only an open request's conflicts resolve")
    return record


def _conflict_to_resolve(
    record: ChangeRequest, main: Location, staging: Location, now: int, row_id: str, column: str | None
) -> tuple[Conflict, list[list[Any]]]:
    """The conflict on ``row_id``.``column``, and the others' cells pinned to their bases."""
    found = _conflicts_at(main, staging, record.base_version, now)
    target = next((c for c, _ in found if c.row_id == row_id and c.column == column), None)
    if target is None:
        listed = ", ".join(c.cell for c, _ in found) or "none"
        raise InvalidInput(
            f"change request {record.id} has no conflict on {row_id}.{column or '*'}; its conflicts: {listed}",
            field="column" if column else "row",
        )
    pinned = [[c.row_id, c.column, base] for c, base in found if c is not target]
    return target, pinned


def _stage_resolution(
    catalog: Catalog,
    record: ChangeRequest,
    layout: DatasetLayout,
    *,
    actor: User,
    now: int,
    staging: Location,
    fresh: Location,
    target: Conflict,
    choice: Choice,
    commit: engine.CommitInfo,
    revision: int,
) -> ChangeRequest:
    """Stage the next revision in ``fresh``, validate it and record it; a failure leaves no ``fresh``."""
    clock = Stopwatch("submit")
    try:
        clock.start("staging")
        rows, cells = _write_resolved(layout.main, now, staging, fresh, target, choice, commit, record)
        clock.start("checks")
        dataset = get_dataset(catalog, record.project_id, record.dataset_id, actor=actor)
        run = validate_change_request(layout, dataset, fresh, version=now)
        stages = clock.timings()
        return _record_resolution(
            catalog, record, actor, target, choice, revision, rows, cells, now, run, stages, staging_digest(fresh)
        )
    except BaseException:
        remove_tree(fresh)
        raise


def _fix(target: Conflict, choice: Choice, op: str, changed: list[str] | None, columns: list[str]) -> Any:
    """How the decided row is staged next: (keep it, its op, its changed columns)."""
    if target.column is not None:
        if choice == "mine":
            return True, op, changed
        left = [c for c in (changed if changed is not None else columns) if c != target.column]
        return bool(left), op, left
    if choice == "theirs" or (target.reason == ROW_DELETED and op == "delete"):
        return False, op, changed  # the row leaves the request (a delete of a deleted row has nothing left to do)
    if target.reason == ROW_DELETED:
        return True, "insert", changed  # the edited row comes back, as the request has it
    if target.reason == ROW_ADDED and op == "insert":
        return True, "update", columns  # the request's row replaces the one added since
    return True, op, changed


def _write_resolved(
    main: Location, now: int, staging: Location, fresh: Location, target: Conflict, choice: Choice,
    commit: engine.CommitInfo, record: ChangeRequest,
) -> tuple[int, int]:  # fmt: skip
    """Write the next revision's staging table; return its rows and cells."""
    from pyspark.sql.types import ArrayType, BooleanType, StringType, StructField, StructType  # Spark loads lazily

    spark = engine.get_spark()
    q, lit = engine.spark_ident, engine.spark_string
    staged_schema = spark.read.format("delta").load(spark_uri(staging)).schema
    columns = [f.name for f in staged_schema.fields if f.name not in ("row_id", OP_COLUMN, CHANGED_COLUMN)]
    current = {c.name for c in reads.table_schema(main, now)}
    row = (
        reads.cursor()
        .execute(
            f"SELECT {OP_COLUMN}, {CHANGED_COLUMN} FROM delta_scan(?) WHERE row_id = ?", [str(staging), target.row_id]
        )
        .fetchone()
    )
    if row is None:
        raise ConflictError(f"row {target.row_id!r} is no longer staged in {record.id}; reload the request")
    op, changed = str(row[0]), None if row[1] is None else [str(c) for c in row[1]]
    keep, new_op, new_changed = _fix(target, choice, op, changed, columns)
    if not keep and record.rows <= 1:
        raise InvalidInput(f"this would leave change request {record.id} empty; withdraw it instead", field="choice")
    fix_view = f"oreo_fix_{commit.commit_id.replace('-', '')}"
    fix_schema = StructType([
        StructField("row_id", StringType()), StructField("keep", BooleanType()),
        StructField("op", StringType()), StructField("changed", ArrayType(StringType())),
    ])  # fmt: skip
    spark.createDataFrame([(target.row_id, keep, new_op, new_changed)], fix_schema).createOrReplaceTempView(fix_view)
    types = {f.name: f.dataType.simpleString() for f in staged_schema.fields}
    changed_now = f"CASE WHEN f.row_id IS NULL THEN s.{CHANGED_COLUMN} ELSE f.changed END"
    op_now = f"coalesce(f.op, s.{OP_COLUMN})"
    # What the request does not change is taken from main now: the re-base.
    values = ", ".join(
        f"CASE WHEN {op_now} = 'update' AND m.row_id IS NOT NULL AND NOT array_contains({changed_now}, {lit(c)}) "
        f"THEN CAST(m.{q(c)} AS {types[c]}) ELSE s.{q(c)} END AS {q(c)}"
        if c in current
        else f"s.{q(c)}"
        for c in columns
    )
    ids = _staged_ids(staging)
    scope = (
        "WHERE row_id IN (" + ", ".join(lit(r) for r in ids) + ")"
        if len(ids) <= _LISTED_IDS
        else f"WHERE row_id IN (SELECT row_id FROM {engine.delta_ref(staging)})"
    )
    sql = (
        f"SELECT s.row_id, {values}, {op_now} AS {OP_COLUMN}, {changed_now} AS {CHANGED_COLUMN} "
        f"FROM {engine.delta_ref(staging)} s "
        f"LEFT JOIN (SELECT * FROM {engine.delta_ref(main)} VERSION AS OF {int(now)} {scope}) m ON m.row_id = s.row_id "
        f"LEFT JOIN {fix_view} f ON f.row_id = s.row_id WHERE f.row_id IS NULL OR f.keep"
    )
    save_staging(fresh, sql, commit, views=[fix_view])
    if keep and (target.column is None or choice == "mine"):
        return record.rows, record.cells
    if not keep and target.column is None:  # the row left the request, with the cells it changed
        dropped = 0 if op == "delete" else len(changed) if changed is not None else len(columns)
        return record.rows - 1, max(0, record.cells - dropped)
    return record.rows - (0 if keep else 1), max(0, record.cells - 1)


def _record_resolution(
    catalog: Catalog, record: ChangeRequest, actor: User, target: Conflict, choice: Choice, revision: int,
    rows: int, cells: int, now: int, run: Any, stages: list[Any], digest: str,
) -> ChangeRequest:  # fmt: skip
    by = f" by {target.committed_by}" if target.committed_by else ""
    what = f"{target.row_id}.{target.column}" if target.column else f"row {target.row_id}"
    if choice == "mine":
        note = f"Resolved the conflict on {what}: kept my change ({target.mine}) over version {target.version}{by}"
        note += f" ({target.theirs})." if target.column else "."
    else:
        note = f"Resolved the conflict on {what}: took version {target.version}{by} ({target.theirs}); dropped mine."
    with catalog.session() as s:
        row = s.get(ChangeRequestRow, record.id)
        if row is None or row.state != CRState.OPEN.value or (row.revision or 1) != record.revision:
            raise ConflictError(f"change request {record.id} changed while its conflict was being resolved; reload it")
        taken = s.scalars(
            select(CRRevisionRow).where(CRRevisionRow.cr_id == record.id, CRRevisionRow.revision == revision)
        ).first()
        if taken is not None:
            raise ConflictError(f"change request {record.id} changed while its conflict was being resolved; reload it")
        row.revision = revision
        row.rows, row.cells, row.base_version = rows, cells, now
        row.validation_run_id, row.validation_status = run.run_id, run.status
        row.stages = stages_json(stages)
        row.digest = digest
        row.updated_at = utcnow()
        s.add(revision_row(record.id, revision, rows, cells, run, now, digest))
        s.add(CommentRow(cr_id=record.id, author=actor.username, body=note, revision=revision))
        for event in (
            ChangeRequestRevised(
                actor=actor.username, project_id=record.project_id, dataset_id=record.dataset_id, cr_id=record.id,
                revision=revision, rows=rows, cells=cells,
            ),
            ConflictResolved(
                actor=actor.username, project_id=record.project_id, dataset_id=record.dataset_id, cr_id=record.id,
                revision=revision, row_id=target.row_id, column=target.column, choice=choice, version=target.version,
            ),
        ):  # fmt: skip
            audit.record(s, event)
        return record_from_row(row)
