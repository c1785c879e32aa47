"""Fast interactive reads of Delta tables through DuckDB's delta extension.

The extension binary is the signed one shipped in the ``duckdb-extension-delta`` wheel;
it is LOADed from the package folder, never INSTALLed from the network, and unsigned
extensions stay forbidden.

The process's database and its cursors are ``core.duck``'s. Every user value is a bound
parameter; column names are checked against the table's schema and then quoted.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

import duckdb

from core import damage, metrics
from core.config import get_settings
from core.duck import close as close
from core.duck import cursor as cursor
from core.duck import extension_path as extension_path
from core.duck import open_duckdb as open_duckdb
from core.duck import quote_ident as quote_ident
from core.duck import quote_literal as quote_literal
from core.duck import recover as recover
from core.errors import EngineError, InvalidInput, NotFound
from core.filters import Condition, check_conditions, condition_sql, where_sql
from core.storage import Location, location, storage_options_for
from core.values import type_family

if TYPE_CHECKING:
    import pandas as pd

FilterOp = Literal["eq", "contains"]


def _scan(version: int | None) -> tuple[str, list[Any]]:
    if version is None:
        return "delta_scan(?)", []
    return "delta_scan(?, version => ?)", [int(version)]


def _run(sql: str, params: list[Any], path: Location) -> duckdb.DuckDBPyConnection:
    try:
        try:
            return cursor().execute(sql, params)
        except duckdb.Error as exc:
            if not recover(exc):  # an internal error invalidated DuckDB's database: a new one, once
                raise
            return cursor().execute(sql, params)
    except duckdb.Error as exc:
        # A missing data file or a cut commit reads as some engine error; name the damage instead.
        damaged = damage.find_damage(location(path))
        if damaged is not None:
            raise damaged from exc
        message = str(exc)
        lowered = message.lower()
        if "logsegment end version" in lowered or ("version" in lowered and "not found" in lowered):
            raise NotFound(f"table {path} has no such version", kind="version") from exc
        raise EngineError(f"DuckDB could not read {path}: {message}") from exc


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass(frozen=True)
class RowFilter:
    """``column = value`` (op "eq") or ``value`` within the column's text (op "contains")."""

    column: str
    value: str
    op: FilterOp = "eq"


@dataclass(frozen=True)
class Page:
    rows: pd.DataFrame
    total: int


def table_schema(path: Location, version: int | None = None) -> list[Column]:
    """Column names and DuckDB types of a Delta table (optionally at ``version``)."""
    _require_table(path)
    if version is not None:
        # A committed version never changes, so its schema is remembered by the version's
        # commit file identity: a table replaced at the same path (by any process) is read anew.
        key = _version_key(location(path), int(version))
        if key is not None:
            return list(_schema_at(*key))
    return list(_describe(location(path), version))


@lru_cache(maxsize=512)
def _schema_at(path: str, version: int, _mtime_ns: int, _size: int) -> tuple[Column, ...]:
    return _describe(location(path), version)


def _describe(path: Location, version: int | None) -> tuple[Column, ...]:
    scan, extra = _scan(version)
    result = _run(f"DESCRIBE SELECT * FROM {scan}", [str(path), *extra], path).fetchall()
    return tuple(Column(name=row[0], type=str(row[1])) for row in result)


def count_rows(path: Location, version: int | None = None) -> int:
    """Row count of a Delta table, counted by DuckDB (seed 002 section 8.D)."""
    _require_table(path)
    scan, extra = _scan(version)
    row = _run(f"SELECT count(*) FROM {scan}", [str(path), *extra], path).fetchone()
    return int(row[0]) if row else 0


def _require_table(path: Location) -> None:
    if not (location(path) / "_delta_log").is_dir():
        raise NotFound(f"no Delta table at {path}", kind="table", ident=str(path))
    # A last commit cut at a line boundary reads, as the version before: refuse it (cached, cheap).
    damage.raise_if_latest_commit_cut(location(path))


def _where(filters: list[RowFilter], columns: dict[str, str]) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for f in filters:
        if f.column not in columns:
            raise InvalidInput(f"unknown column {f.column!r}; columns are: {', '.join(columns)}", field="filter")
        col = quote_ident(f.column)
        if f.op == "contains":
            clauses.append(f"contains(lower(CAST({col} AS VARCHAR)), lower(?))")
            params.append(f.value)
        elif f.op == "eq":
            # Compare as text so "42" matches an integer column and a bad literal never errors.
            clauses.append(f"CAST({col} AS VARCHAR) = ?")
            params.append(f.value)
        else:
            raise InvalidInput(f"unknown filter operator {f.op!r}; use eq or contains", field="filter")
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def _all_where(filters: list[RowFilter], conditions: list[Condition], columns: dict[str, str]) -> tuple[str, list[Any]]:
    """One WHERE clause for the old ``RowFilter``s and the ``Condition``s, ANDed."""
    old_sql, old_params = _where(filters, columns)
    new_sql, new_params = where_sql(conditions, columns)
    clauses = [w.removeprefix(" WHERE ") for w in (old_sql, new_sql) if w]
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", [*old_params, *new_params]


def _order(order_by: str | None, descending: bool, default_order: list[str], columns: dict[str, str]) -> str:
    """``ORDER BY`` the chosen column, then the default order (or ``row_id``), so pages never overlap.

    A default order identifies rows on its own (a dataset's key, or ``row_id``), so
    ``row_id`` breaks ties only without one.
    """
    if order_by is not None and order_by not in columns:
        raise InvalidInput(
            f"cannot order by unknown column {order_by!r}; columns are: {', '.join(columns)}",
            field="order_by",
        )
    keys: list[str] = []
    if order_by is not None:
        keys.append(f"{quote_ident(order_by)} {'DESC' if descending else 'ASC'} NULLS LAST")
    ties = [c for c in (default_order or ["row_id"]) if c != order_by and c in columns]
    keys += [f"{quote_ident(c)} ASC NULLS LAST" for c in dict.fromkeys(ties)]
    if order_by is None and not default_order:
        return ""  # the table's natural order
    return " ORDER BY " + ", ".join(keys)


@dataclass(frozen=True)
class Overlay:
    """Rows that replace (same ``row_id``) or join a table's rows for one read, as DuckDB text.

    ``rows`` maps a ``row_id`` to every column's text (None is NULL); each value is cast
    to the column's type in the query, so the rows filter and sort like stored ones.
    ``added`` counts the rows the table does not have (an unfiltered total grows by it).
    ``key`` names a column that identifies rows as ``row_id`` does (the dataset key): the
    replaced rows are then left out by it, which reads a narrower column than ``row_id``.
    """

    rows: dict[str, dict[str, str | None]] = field(default_factory=dict)
    added: int = 0
    key: str | None = None
    # Rows left out of the read altogether (the ``row_id`` of each row a session deletes).
    removed: frozenset[str] = frozenset()
    # The rows as an Arrow table of text columns (``row_id`` among them), instead of ``rows``:
    # a session with a bulk change of a million cells lays a million rows over the table.
    table: Any = None

    @property
    def laid(self) -> bool:
        """Whether it has rows to lay over the table."""
        return bool(self.rows) or (self.table is not None and self.table.num_rows > 0)

    def rows_of(self, row_ids: list[str]) -> dict[str, dict[str, str | None]]:
        """The rows of ``row_ids`` laid over the table (those it has), by ``row_id``."""
        if self.table is None:
            return {r: self.rows[r] for r in row_ids if r in self.rows}
        import pyarrow as pa
        import pyarrow.compute as pc

        wanted = pa.array(row_ids, pa.string())
        return {r["row_id"]: r for r in self.table.filter(pc.is_in(self.table.column("row_id"), wanted)).to_pylist()}


def _source(
    path: Location, version: int | None, overlay: Overlay | None, columns: dict[str, str], held: _Held | None = None
) -> tuple[str, list[Any], list[str]]:
    """The FROM item of a page query, its parameters, and the views it registered (the overlay's).

    With an overlay and the version ``held`` in memory, the overlay is laid over the held
    table instead of a scan of the files.
    """
    scan, extra = _scan(version)
    if overlay is None or not (overlay.laid or overlay.removed):
        return scan, [str(path), *extra], []
    import pyarrow as pa

    views: list[str] = []
    base_params: list[Any] = [str(path), *extra]
    if held is not None:
        scan, base_params = f"oreo_base_{uuid.uuid4().hex}", []
        cursor().register(scan, held.table)
        views.append(scan)
    names = list(columns)
    view = f"oreo_overlay_{uuid.uuid4().hex}"
    cursor().register(view, _overlay_table(overlay, names))
    views.append(view)
    typed = ", ".join(f"CAST({quote_ident(c)} AS {columns[c]}) AS {quote_ident(c)}" for c in names)
    by = overlay.key if overlay.key in columns else "row_id"
    replaced = f"SELECT CAST({quote_ident(by)} AS {columns[by]}) FROM {view}"
    gone = ""
    if overlay.removed:
        removed = f"oreo_removed_{uuid.uuid4().hex}"
        cursor().register(removed, pa.table({"row_id": pa.array(sorted(overlay.removed), pa.string())}))
        views.append(removed)
        gone = f" AND row_id NOT IN (SELECT row_id FROM {removed})"
    sql = (
        f"(SELECT * FROM {scan} WHERE {quote_ident(by)} NOT IN ({replaced}){gone} "
        f"UNION ALL BY NAME SELECT {typed} FROM {view})"
    )
    return sql, base_params, views


def _overlay_table(overlay: Overlay, names: list[str]) -> Any:
    """The overlay's rows (but the removed ones) as an Arrow table of ``names``, each a text column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if overlay.table is not None:
        table = overlay.table
        if overlay.removed:
            gone = pa.array(sorted(overlay.removed), pa.string())
            table = table.filter(pc.invert(pc.is_in(table.column("row_id"), value_set=gone)))
        return pa.table(
            {c: table.column(c) if c in table.column_names else pa.nulls(table.num_rows, pa.string()) for c in names}
        )
    laid = {row_id: r for row_id, r in overlay.rows.items() if row_id not in overlay.removed}
    data = {c: [r.get(c) if c != "row_id" else row_id for row_id, r in laid.items()] for c in names}
    return pa.table({c: pa.array(data[c], pa.string()) for c in names})


@dataclass(frozen=True)
class _Query:
    path: Location
    source: str
    source_params: list[Any]
    where: str
    where_params: list[Any]
    order: str
    version: int | None = None  # a committed version (no overlay): its order may be remembered


# Families whose values order the same in DuckDB and as bound Python values, so a page's
# first and last sort value can bound the second read (and let DuckDB skip files).
_TOTAL = "__oreo_total"
_RANGE_FAMILIES = {"integer", "decimal", "float", "date", "timestamp", "timestamptz", "text", "boolean"}


def _ordered_page(
    query: _Query, first: str, first_type: str, identity: str, limit: int, offset: int, *, count: bool
) -> tuple[Any, int | None] | None:
    """An ordered page read in two steps, as an Arrow table, and (with ``count``) the
    number of matching rows; None when the steps disagree.

    Sorting whole rows to reach a deep offset costs a scan of every column and a heap of
    whole rows; sorting only the sort column and the row's identity (the dataset key, or
    ``row_id``), then reading the page's rows by identity within the page's range of the
    first sort column (which lets DuckDB skip the files and row groups outside it) costs
    a fraction of that. If the identity turns out not to be unique, the caller reads the
    page in one step. The count of a filtered read rides on the first step (a window over
    the matching rows' two columns) instead of a second scan.
    """
    q, ident = quote_ident(first), quote_ident(identity)
    cols = ", ".join(quote_ident(c) for c in dict.fromkeys([identity, first]))
    ordering = _ordering(query, cols)
    if ordering is not None:
        keys, total = ordering.slice(offset, limit), ordering.num_rows
    else:
        total_sql = f", count(*) OVER () AS {quote_ident(_TOTAL)}" if count else ""
        sql = f"SELECT {cols}{total_sql} FROM {query.source}{query.where}{query.order} LIMIT ? OFFSET ?"
        keys = _run(sql, [*query.source_params, *query.where_params, limit, offset], query.path).to_arrow_table()
        total = int(keys.column(_TOTAL)[0].as_py()) if count and keys.num_rows else None
    if not keys.num_rows:
        empty = _run(f"SELECT * FROM {query.source} LIMIT 0", query.source_params, query.path).to_arrow_table()
        return empty, total
    within = ""
    params: list[Any] = list(query.source_params)
    if type_family(first_type) in _RANGE_FAMILIES:
        import pyarrow.compute as pc

        values = keys.column(first)
        bounds = pc.min_max(values).as_py()
        if bounds["min"] is not None:
            within = f" AND ({q} BETWEEN ? AND ?{f' OR {q} IS NULL' if values.null_count else ''})"
            params += [bounds["min"], bounds["max"]]
    view = f"oreo_page_{uuid.uuid4().hex}"
    cursor().register(view, keys.select([identity]))
    try:
        sql = f"SELECT * FROM {query.source} WHERE {ident} IN (SELECT {ident} FROM {view}){within}{query.order}"
        rows = _run(sql, params, query.path).to_arrow_table()
    finally:
        cursor().unregister(view)
    if rows.num_rows != keys.num_rows or not rows.column(identity).equals(keys.column(identity)):
        return None
    return rows, total


# ---------------------------------------------------------------- remembered orderings

# Paging through one sorted (and filtered) view of a committed version repeats the same
# sort for every page; from the second page read of a view in a process, the whole order
# of its rows (their identity and first sort column) is kept, so each later page of it,
# in any thread, slices the order instead of sorting the table again (~16 MB per million
# int64 rows). A committed version never changes; its commit file's identity is part of
# the key, so a table replaced under the same path is never answered from memory.
_ORDERINGS_MAX_BYTES = 256 * 1024 * 1024
_ORDERINGS_MAX = 128
_orderings_lock = threading.Lock()
_orderings: dict[tuple[Any, ...], Any] = {}  # insertion order = age; values are pyarrow Tables
_orderings_seen: set[tuple[Any, ...]] = set()
_orderings_building: set[tuple[Any, ...]] = set()
_orderings_refused: set[tuple[Any, ...]] = set()


def _kept_or_claimed(
    key: tuple[Any, ...],
    lock: threading.Lock,
    kept: dict[tuple[Any, ...], Any],
    seen: set[tuple[Any, ...]],
    building: set[tuple[Any, ...]],
    refused: set[tuple[Any, ...]],
) -> tuple[Any | None, bool]:
    """(the kept value, now the newest; False) or (None, whether this thread now builds it).

    A key's first read only marks it seen (a one-off reader, like the CLI, never pays for
    building); a key being built or refused is not built again.
    """
    with lock:
        if key in kept:
            kept[key] = value = kept.pop(key)
            return value, False
        if key not in seen:
            if len(seen) > 1024:
                seen.clear()
            seen.add(key)
            return None, False
        if key in building or key in refused:
            return None, False
        building.add(key)
        return None, True


def _ordering_key(query: _Query, cols: str) -> tuple[Any, ...] | None:
    version = None if query.version is None else _version_key(query.path, query.version)
    if version is None:
        return None  # no version, or one only in a checkpoint: not remembered
    params = tuple(repr(p) for p in (*query.source_params, *query.where_params))
    return (*version, query.where, query.order, cols, params)


def _ordering(query: _Query, cols: str) -> Any | None:
    """The whole order of ``query``'s rows (columns ``cols``) if kept or now built; None on a first read.

    The first read of a view only marks it seen (a one-off reader, like the CLI, never pays
    for the whole order); while one thread builds an order, the others read their page
    with LIMIT/OFFSET.
    """
    key = _ordering_key(query, cols)
    if key is None:
        return None
    kept, claimed = _kept_or_claimed(
        key, _orderings_lock, _orderings, _orderings_seen, _orderings_building, _orderings_refused
    )
    if not claimed:
        return kept
    try:
        sql = f"SELECT {cols} FROM {query.source}{query.where}{query.order}"
        ordering = _run(sql, [*query.source_params, *query.where_params], query.path).to_arrow_table()
        ordering = ordering.combine_chunks()
    finally:
        with _orderings_lock:
            _orderings_building.discard(key)
    if ordering.nbytes > _ORDERINGS_MAX_BYTES:
        with _orderings_lock:
            _orderings_refused.add(key)  # too big to keep: later reads page with LIMIT/OFFSET
    _remember(key, ordering)
    return ordering


# ---------------------------------------------------------------- versions held in memory

# A committed version read again and again (the Table page of a dataset many people look
# at) is held whole in memory as an Arrow table, from its second read in a process, when
# it fits the budget (``OREO_READ_CACHE_MB``; the oldest held version goes first). A page
# of a held version is then one ``take`` of row positions: each view (filter and sort)
# keeps the positions of its matching rows in order (in ``_orderings``, computed once by
# DuckDB over the held table with the same WHERE and ORDER BY as a scan), and its later
# pages, in any thread, slice them. Versions too big for the budget keep the scan path,
# so a page of a 10M-row table still costs the page, not the table.
_POS = "__oreo_pos"
_HELD_SAMPLE_ROWS = 2048
_HELD_NOW_BYTES = 256 << 20
_held_lock = threading.Lock()
_held: dict[tuple[Any, ...], _Held] = {}  # insertion order = age
_held_seen: set[tuple[Any, ...]] = set()
_held_building: set[tuple[Any, ...]] = set()
_held_refused: set[tuple[Any, ...]] = set()
_held_loads = iter(range(1, 1 << 62))


@dataclass(frozen=True)
class _Held:
    """One committed version in memory; ``positioned`` adds each row's position (``_POS``)."""

    load: int  # tells two loads of one version apart (their orderings are not shared)
    table: Any  # pyarrow.Table
    positioned: Any  # pyarrow.Table

    @property
    def nbytes(self) -> int:
        return int(self.positioned.nbytes)


def _version_key(path: Location, version: int) -> tuple[Any, ...] | None:
    """(path, version, commit file identity), or None for a version only in a checkpoint."""
    try:
        stat = (location(path) / "_delta_log" / f"{int(version):020d}.json").stat()
    except OSError:
        return None
    return (str(path), int(version), stat.st_mtime_ns, stat.st_size)


def _held_budget() -> int:
    return max(0, int(get_settings().read_cache_mb)) << 20


def _held_version(path: Location, version: int, known_total: int | None) -> _Held | None:
    """``path`` at ``version`` if held in memory; its second read starts holding it if it fits.

    A version estimated at up to ``_HELD_NOW_BYTES`` is loaded by the reading thread (a
    second or so per million rows); a bigger one is loaded in a background thread while
    every read, this one too, keeps the scan path until it is there.
    """
    key = _version_key(path, version)
    budget = _held_budget()
    if key is None or not budget:
        return None
    held, claimed = _kept_or_claimed(key, _held_lock, _held, _held_seen, _held_building, _held_refused)
    if not claimed:
        return held
    try:
        estimate = _held_estimate(path, version, known_total)
    except BaseException:
        with _held_lock:
            _held_building.discard(key)
        raise
    if estimate > budget:
        with _held_lock:
            _held_building.discard(key)
            _held_refused.add(key)
        return None
    if estimate <= _HELD_NOW_BYTES:
        return _hold(key, path, version, budget)
    threading.Thread(target=_hold, args=(key, path, version, budget), name="oreo-hold", daemon=True).start()
    return None


def _held_estimate(path: Location, version: int, known_total: int | None) -> float:
    """The bytes ``path`` at ``version`` would take in memory, from a sample of its rows."""
    scan, extra = _scan(version)
    params = [str(path), *extra]
    total = known_total
    if total is None:
        row = _run(f"SELECT count(*) FROM {scan}", params, path).fetchone()
        total = int(row[0]) if row else 0
    sample = _run(f"SELECT * FROM {scan} LIMIT {_HELD_SAMPLE_ROWS}", params, path).to_arrow_table()
    per_row = sample.nbytes / sample.num_rows if sample.num_rows else 0.0
    return per_row * total * 1.25 + 4 * total  # Arrow buffers' slack, and the positions


def _hold(key: tuple[Any, ...], path: Location, version: int, budget: int) -> _Held | None:
    """Load ``path`` at ``version`` and keep it as the newest held version (None if over ``budget``)."""
    import numpy as np
    import pyarrow as pa

    held = None
    try:
        scan, extra = _scan(version)
        table = _run(f"SELECT * FROM {scan}", [str(path), *extra], path).to_arrow_table().combine_chunks()
        if table.nbytes <= budget:
            kind = np.int32 if table.num_rows < 2**31 else np.int64
            positions = pa.array(np.arange(table.num_rows, dtype=kind))
            held = _Held(next(_held_loads), table, table.append_column(_POS, positions))
    finally:
        with _held_lock:
            _held_building.discard(key)
            if held is None:
                _held_refused.add(key)
            else:
                # Older versions of the same table go: their readers move on to the newer one.
                # An old version previewed in History leaves the newer ones held.
                for other in [k for k in _held if k[0] == key[0] and k[1] < key[1]]:
                    del _held[other]
                _held[key] = held
                while len(_held) > 1 and sum(h.nbytes for h in _held.values()) > budget:
                    del _held[next(iter(_held))]
    return held


def _held_page(held: _Held, query: _Query, limit: int, offset: int) -> tuple[Any, int]:
    """A page of a held version (Arrow) and the number of rows matching ``query``."""
    positions = _held_ordering(held, query)
    return held.table.take(positions.slice(offset, limit)), len(positions)


def _held_ordering(held: _Held, query: _Query) -> Any:
    """The positions of ``query``'s rows in ``held``, in the query's order (remembered)."""
    params = tuple(repr(p) for p in query.where_params)
    key = ("held", held.load, query.where, query.order, params)
    with _orderings_lock:
        if key in _orderings:
            _orderings[key] = kept = _orderings.pop(key)
            return kept
    if not query.where and not query.order:
        return held.positioned.column(_POS).combine_chunks()
    view = f"oreo_held_{uuid.uuid4().hex}"
    cursor().register(view, held.positioned)
    try:
        order = query.order or f" ORDER BY {quote_ident(_POS)}"
        sql = f"SELECT {quote_ident(_POS)} FROM {view}{query.where}{order}"
        positions = _run(sql, list(query.where_params), query.path).to_arrow_table().column(0).combine_chunks()
    finally:
        cursor().unregister(view)
    _remember(key, positions)
    return positions


def _remember(key: tuple[Any, ...], ordering: Any) -> None:
    """Keep ``ordering`` (an Arrow table or array) as the newest, within the orderings' budget."""
    with _orderings_lock:
        if ordering.nbytes > _ORDERINGS_MAX_BYTES:
            return
        _orderings[key] = ordering
        while len(_orderings) > _ORDERINGS_MAX or sum(t.nbytes for t in _orderings.values()) > _ORDERINGS_MAX_BYTES:
            del _orderings[next(iter(_orderings))]  # the oldest


def check_page(limit: int, offset: int) -> None:
    """Refuse a page size outside 1..10,000 or a negative offset (``InvalidInput``)."""
    if not 1 <= int(limit) <= 10_000:
        raise InvalidInput(f"limit must be between 1 and 10000, got {limit}", field="limit")
    if int(offset) < 0:
        raise InvalidInput(f"offset must be >= 0, got {offset}", field="offset")


def read_page(
    path: Location,
    *,
    version: int | None = None,
    filters: list[RowFilter] | None = None,
    conditions: list[Condition] | None = None,
    order_by: str | None = None,
    descending: bool = False,
    default_order: list[str] | None = None,
    limit: int = 50,
    offset: int = 0,
    known_total: int | None = None,
    overlay: Overlay | None = None,
) -> Page:
    """One page of a Delta table, filtered and ordered in DuckDB.

    Args:
        path: The Delta table folder.
        version: Read the table as of this version (time travel); latest when None.
        filters: Old-style conditions (``RowFilter``) ANDed together; their columns must exist.
        conditions: ``core.filters.Condition``s ANDed together (and with ``filters``);
            checked against the schema, values bound and compared in the column's type.
        order_by: A column to sort the whole table by.
        descending: Sort direction for ``order_by``.
        default_order: Columns that identify a row, which the rows are in when
            ``order_by`` is None and which break its ties (``core.datasets.stable_order``:
            the key, or ``row_id``). Without it ``row_id`` breaks ties, and no ``order_by``
            keeps the table's natural order.
        limit: Page size, 1..10,000.
        offset: Rows to skip, >= 0.
        known_total: The table's row count at ``version`` if the caller already knows it
            (the catalog counts it at every commit); skips the count query when unfiltered.
        overlay: Rows that replace or join the table's rows for this read (a session's edits).

    Raises:
        InvalidInput: Unknown column, a filter value that does not fit its column, bad limit/offset.
        NotFound: No table at ``path`` or no such version.
    """
    started = time.perf_counter()
    check_page(limit, offset)
    _require_table(path)
    filters = filters or []
    conditions = conditions or []
    default_order = list(default_order or [])
    needs_schema = filters or conditions or order_by or default_order or (overlay is not None and overlay.laid)
    # The schema is only needed to check names; unfiltered natural-order pages skip it.
    columns = {c.name: c.type for c in table_schema(path, version)} if needs_schema else {}
    where, where_params = _all_where(filters, conditions, columns)
    order = _order(order_by, descending, default_order, columns)
    held = None if version is None else _held_version(path, version, known_total)
    source, source_params, views = _source(path, version, overlay, columns, held)
    try:
        query = _Query(path, source, source_params, where, where_params, order, None if views else version)
        rows, total = None, None
        if known_total is not None and not filters and not conditions:
            total = known_total + (overlay.added if overlay is not None else 0)
        if held is not None and not views:
            rows, total = _held_page(held, query, int(limit), int(offset))
        identity = [c for c in (default_order or ["row_id"]) if c in columns]
        if rows is None and order and len(identity) == 1:
            first = order_by if order_by is not None else identity[0]
            ordered = _ordered_page(
                query, first, columns[first], identity[0], int(limit), int(offset), count=bool(where) and total is None
            )
            if ordered is not None:
                rows, total = ordered[0], total if total is not None else ordered[1]
        if rows is None:
            sql = f"SELECT * FROM {source}{where}{order} LIMIT ? OFFSET ?"
            rows = _run(sql, [*source_params, *where_params, int(limit), int(offset)], path).to_arrow_table()
        # A whole-number column with a NULL would become float64 (BIGINT 2**63-1 rounded, 127 as 127.0):
        # such columns hold Python ints and None instead.
        frame = rows.to_pandas(integer_object_nulls=True)
        if total is None:
            row = _run(f"SELECT count(*) FROM {source}{where}", [*source_params, *where_params], path).fetchone()
            total = int(row[0]) if row else 0
    finally:
        for view in views:
            cursor().unregister(view)
    metrics.page_read(time.perf_counter() - started)
    return Page(rows=frame, total=total)


@dataclass(frozen=True)
class Selection:
    """The rows one read sees (a table version, overlaid, filtered), for a query that aggregates them.

    ``columns`` are the table's names and DuckDB types; ``run`` names the rows ``rows``.
    """

    path: Location
    sql: str
    params: list[Any]
    columns: dict[str, str]

    def run(self, query: str, params: list[Any] | None = None) -> duckdb.DuckDBPyConnection:
        """``WITH rows AS (the selection) <query>``, its parameters after the selection's.

        Raises:
            NotFound, EngineError: As ``read_page`` (a damaged table is named).
        """
        return _run(f"WITH rows AS ({self.sql}) {query}", [*self.params, *(params or [])], self.path)


@contextmanager
def selection(
    path: Location,
    *,
    version: int | None = None,
    conditions: list[Condition] | None = None,
    overlay: Overlay | None = None,
) -> Iterator[Selection]:
    """The rows ``read_page`` would page through (without an order), while the block runs.

    Raises:
        InvalidInput: As ``read_page``.
        NotFound: No table at ``path`` or no such version.
    """
    _require_table(path)
    columns = {c.name: c.type for c in table_schema(path, version)}
    where, where_params = where_sql(list(conditions or []), columns)
    source, source_params, views = _source(path, version, overlay, columns)
    try:
        yield Selection(path, f"SELECT * FROM {source}{where}", [*source_params, *where_params], columns)
    finally:
        for view in views:
            cursor().unregister(view)


def first_emptying_condition(
    path: Location, conditions: list[Condition], version: int | None = None, overlay: Overlay | None = None
) -> Condition | None:
    """The first condition after which no row is left (conditions applied in order), or None.

    Tells a person which filter removed everything: with ``a`` and ``b`` where ``a``
    alone keeps rows but ``a AND b`` keeps none, it returns ``b``.

    Raises:
        InvalidInput: As ``read_page``.
    """
    _require_table(path)
    if not conditions:
        return None
    columns = {c.name: c.type for c in table_schema(path, version)}
    checked = check_conditions(list(conditions), columns)
    source, source_params, views = _source(path, version, overlay, columns)
    try:
        # One scan: for each prefix of the conditions, whether any row passes it.
        predicates = [condition_sql(c, columns[c.column]) for c in checked]
        selects: list[str] = []
        params: list[Any] = []
        for i in range(1, len(predicates) + 1):
            selects.append("bool_or(" + " AND ".join(p[0] for p in predicates[:i]) + ")")
            for p in predicates[:i]:
                params.extend(p[1])
        sql = f"SELECT count(*), {', '.join(selects)} FROM {source}"
        row = _run(sql, [*params, *source_params], path).fetchone()
    finally:
        for view in views:
            cursor().unregister(view)
    if row is None or not row[0]:
        return None  # an empty table: no filter removed anything
    for condition, any_left in zip(conditions, row[1:], strict=False):
        if not any_left:
            return condition
    return None


def matching_values(
    path: Location,
    version: int,
    column: str,
    *,
    conditions: list[Condition] | None = None,
    overlay: Overlay | None = None,
    known_total: int | None = None,
) -> Any:
    """``row_id`` and ``column`` (as DuckDB text) of every row matching ``conditions``, in table order.

    The table is read at ``version`` with ``overlay`` laid over it (a session's pending
    rows), through the version held in memory when it is. Returns a pyarrow Table with the
    columns ``row_id`` and ``value``.

    Raises:
        InvalidInput: An unknown column, or a condition that does not fit its column.
        NotFound: No table at ``path`` or no such version.
    """
    _require_table(path)
    columns = {c.name: c.type for c in table_schema(path, version)}
    if column not in columns:
        raise InvalidInput(f"unknown column {column!r}; columns are: {', '.join(columns)}", field="column")
    where, where_params = where_sql(list(conditions or []), columns)
    held = _held_version(path, version, known_total)
    plain = overlay is None or not overlay.laid
    if held is not None and plain and type_family(columns[column]) == "text" and columns.get("row_id") == "VARCHAR":
        # Text as stored is its text: DuckDB only finds the rows, Arrow takes their two columns. DuckDB
        # sees only the filtered columns (a wide table costs its scan setup per column).
        view = f"oreo_held_{uuid.uuid4().hex}"
        filtered = list(dict.fromkeys(c.column for c in conditions or []))
        cursor().register(view, held.positioned.select([*filtered, _POS]))
        try:
            sql = f"SELECT {quote_ident(_POS)} FROM {view}{where}"
            positions = _run(sql, list(where_params), path).to_arrow_table().column(0)
        finally:
            cursor().unregister(view)
        found = held.table.select(["row_id", column]).take(positions)
        return found.rename_columns(["row_id", "value"])
    source, source_params, views = _source(path, version, overlay, columns, held)
    if held is not None and not views:
        source, source_params = f"oreo_base_{uuid.uuid4().hex}", []
        cursor().register(source, held.table)
        views.append(source)
    try:
        sql = (
            f"SELECT CAST(row_id AS VARCHAR) AS row_id, CAST({quote_ident(column)} AS VARCHAR) AS value "
            f"FROM {source}{where}"
        )
        return _run(sql, [*source_params, *where_params], path).to_arrow_table()
    finally:
        for view in views:
            cursor().unregister(view)


def read_rows_by_id(path: Location, row_ids: list[str], version: int | None = None) -> pd.DataFrame:
    """The rows of ``path`` whose ``row_id`` is in ``row_ids``."""
    scan, extra = _scan(version)
    sql = f"SELECT * FROM {scan} WHERE row_id IN (SELECT unnest(?::VARCHAR[]))"
    return _run(sql, [str(path), *extra, list(row_ids)], path).to_arrow_table().to_pandas()


# ---------------------------------------------------------------- rows by id, as text

# A row locator costs one sorted scan of row_id (~0.5 s and ~22 MB per million rows) and
# makes each later lookup a binary search plus a read of one row from one Parquet file.
# The locators kept in a process hold at most this many rows together (~260 MB), so a
# 10,000,000-row table gets one too: without it, each edit saved to it reads whole row
# groups of every file whose row_id range holds the row (~0.3 s on Oreo's layout).
_LOCATOR_MAX_ROWS = 12_000_000
_LOCATOR_CACHE_SIZE = 16
_POINT_READ_MAX_IDS = 8  # past this, one scan of the table is cheaper than a read per row
# Reader features under which a data file's Parquet columns are exactly the table's
# columns; any other (column mapping, type widening, ...) keeps lookups on delta_scan.
# The locator casts each value to the table's type, so widened columns read right too.
_PLAIN_READER_FEATURES = frozenset(
    {"deletionVectors", "timestampNtz", "typeWidening", "v2Checkpoint", "vacuumProtocolCheck"}
)


@dataclass(frozen=True)
class _RowLocator:
    """Where each live row of one table version is: a data file and its row number in it.

    Built from ``delta_scan``, so rows hidden by deletion vectors are absent.
    """

    row_ids: Any  # pyarrow StringArray, sorted
    file_nos: Any  # pyarrow Int32Array: index into ``files``
    row_nos: Any  # pyarrow Int64Array: the row's position in its Parquet file
    files: tuple[str, ...]

    def find(self, row_id: str) -> tuple[str, int] | None:
        ids = self.row_ids
        lo, hi = 0, len(ids)
        while lo < hi:  # bisect by hand: pyarrow scalars do not compare with str
            mid = (lo + hi) // 2
            if ids[mid].as_py() < row_id:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(ids) or ids[lo].as_py() != row_id:
            return None
        return self.files[self.file_nos[lo].as_py()], self.row_nos[lo].as_py()


_locator_lock = threading.Lock()
# Keyed by ``_version_key``: a table replaced at the same path gets new commit files.
_locators: dict[tuple[Any, ...], _RowLocator | None] = {}  # insertion order = age
_looked_up: set[tuple[Any, ...]] = set()


def read_rows_as_text(
    path: Location, version: int, row_ids: list[str], columns: list[str] | None = None
) -> dict[str, dict[str, str | None]]:
    """Rows of a table version by ``row_id``, each value as DuckDB's text for it.

    ``row_id`` is always included; ``columns`` (default: all) must exist at ``version``.
    A table version never changes, so from the second lookup on one, a row locator is
    kept for it and each row is read from its own Parquet file instead of a table scan.

    Raises:
        InvalidInput: An unknown column.
        NotFound: No table at ``path`` or no such version.
    """
    _require_table(path)
    if not row_ids:
        return {}
    types = {c.name: c.type for c in table_schema(path, version)}
    names = [c for c in (columns if columns is not None else types) if c != "row_id"]
    unknown = [c for c in names if c not in types]
    if unknown:
        raise InvalidInput(f"unknown column {unknown[0]!r}; columns are: {', '.join(types)}", field="columns")
    if len(set(row_ids)) <= _POINT_READ_MAX_IDS:
        locator = _locator(path, int(version))
        if locator is not None:
            found = _read_located(locator, row_ids, names, types)
            if found is not None:
                return found
    scan, extra = _scan(version)
    select = ", ".join(f"CAST({quote_ident(c)} AS VARCHAR) AS {quote_ident(c)}" for c in ["row_id", *names])
    sql = f"SELECT {select} FROM {scan} WHERE row_id IN (SELECT unnest(?::VARCHAR[]))"
    rows = _run(sql, [str(path), *extra, list(row_ids)], path).fetchall()
    return {r[0]: dict(zip(["row_id", *names], r, strict=True)) for r in rows}


def read_rows_as_text_table(path: Location, version: int, row_ids: Any) -> Any:
    """``read_rows_as_text`` for many rows: an Arrow table, ``row_id`` then every column, all as text.

    ``row_ids`` is an Arrow string array (or a list). A few rows are read as
    ``read_rows_as_text`` reads them; more, in one scan joined with the ids.

    Raises:
        NotFound: No table at ``path`` or no such version.
    """
    import pyarrow as pa

    _require_table(path)
    ids = row_ids if isinstance(row_ids, pa.Array | pa.ChunkedArray) else pa.array(list(row_ids), pa.string())
    types = {c.name: c.type for c in table_schema(path, version)}
    names = ["row_id", *(c for c in types if c != "row_id")]
    if len(ids) <= _POINT_READ_MAX_IDS:
        found = read_rows_as_text(path, version, ids.to_pylist())
        return pa.table({c: pa.array([r.get(c) for r in found.values()], pa.string()) for c in names})
    view = f"oreo_ids_{uuid.uuid4().hex}"
    cursor().register(view, pa.table({"row_id": ids}))
    try:
        scan, extra = _scan(version)
        select = ", ".join(f"CAST({quote_ident(c)} AS VARCHAR) AS {quote_ident(c)}" for c in names)
        sql = f"SELECT {select} FROM {scan} WHERE row_id IN (SELECT row_id FROM {view})"
        return _run(sql, [str(path), *extra], path).to_arrow_table()
    finally:
        cursor().unregister(view)


def _read_located(
    locator: _RowLocator, row_ids: list[str], names: list[str], types: dict[str, str]
) -> dict[str, dict[str, str | None]] | None:
    """The rows read straight from their Parquet files; None if a file disagrees with the table."""
    # Cast to the table's type first, so the text is what delta_scan would have printed.
    select = ", ".join(f"CAST(CAST({quote_ident(c)} AS {types[c]}) AS VARCHAR)" for c in names)
    sql = f"SELECT {select} FROM read_parquet(?, file_row_number = true) WHERE file_row_number = ?"
    found: dict[str, dict[str, str | None]] = {}
    for row_id in dict.fromkeys(row_ids):
        where = locator.find(row_id)
        if where is None:
            continue
        values: tuple[Any, ...] = ()
        if names:
            try:
                row = cursor().execute(sql, [where[0], where[1]]).fetchone()
            except duckdb.Error:
                return None  # e.g. a file written before a column was added
            if row is None:
                return None
            values = row
        found[row_id] = {"row_id": row_id, **dict(zip(names, values, strict=True))}
    return found


def _locator(path: Location, version: int) -> _RowLocator | None:
    """The locator of a table version; None on its first lookup or when its layout rules one out."""
    from deltalake.exceptions import DeltaError

    key = _version_key(location(path), version)
    if key is None:
        return None  # a version only in a checkpoint: scanned, not remembered
    with _locator_lock:
        if key in _locators:
            return _locators[key]
        elif key not in _looked_up:
            # The first lookup scans, so a one-off reader (the CLI) never pays for a locator.
            if len(_looked_up) > 256:
                _looked_up.clear()
            _looked_up.add(key)
            return None
    try:
        locator = _build_locator(path, version)
    except (DeltaError, EngineError, NotFound):
        return None  # the scan that follows reports what is wrong
    with _locator_lock:
        _locators.pop(key, None)
        _locators[key] = locator
        while (
            len(_locators) > _LOCATOR_CACHE_SIZE
            or sum(len(x.row_ids) for x in _locators.values() if x is not None) > _LOCATOR_MAX_ROWS
        ):
            del _locators[next(iter(_locators))]  # the oldest
    return locator


def _build_locator(path: Location, version: int) -> _RowLocator | None:
    """A row locator for ``path`` at ``version``; None when the table's layout rules it out."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(str(path), version=version, storage_options=storage_options_for(path))
    metadata = table.metadata()
    mapping = metadata.configuration.get("delta.columnMapping.mode", "none")
    features = set(table.protocol().reader_features or [])
    if metadata.partition_columns or mapping != "none" or not features <= _PLAIN_READER_FEATURES:
        return None
    actions = pa.table(table.get_add_actions(flatten=True))
    if "num_records" not in actions.column_names or actions.column("num_records").null_count:
        return None  # no file statistics: the size is unknown
    if sum(actions.column("num_records").to_pylist()) > _LOCATOR_MAX_ROWS:
        return None
    scan = "delta_scan(?, version => ?, filename => true, file_row_number => true)"
    params: list[Any] = [str(path), int(version)]
    files = [r[0] for r in _run(f"SELECT DISTINCT filename FROM {scan}", params, path).fetchall()]
    if not files:
        return None
    sql = (
        "WITH f AS (SELECT unnest(?::VARCHAR[]) AS filename, "
        "CAST(generate_subscripts(?::VARCHAR[], 1) - 1 AS INTEGER) AS file_no) "
        f"SELECT s.row_id, f.file_no, s.file_row_number FROM {scan} s JOIN f USING (filename) "
        "WHERE s.row_id IS NOT NULL ORDER BY s.row_id"
    )
    located = _run(sql, [files, files, *params], path).to_arrow_table()
    return _RowLocator(
        row_ids=located.column(0).combine_chunks(),
        file_nos=located.column(1).combine_chunks(),
        row_nos=located.column(2).combine_chunks(),
        files=tuple(files),
    )
