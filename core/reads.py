"""Fast interactive reads of Delta tables through DuckDB's delta extension.

The extension binary is the signed one shipped in the ``duckdb-extension-delta`` wheel;
it is LOADed from the package folder, never INSTALLed from the network, and unsigned
extensions stay forbidden.

One in-memory database per process, one cursor per thread (DuckDB connections are not
thread-safe, cursors on one database are). Every user value is a bound parameter; column
names are checked against the table's schema and then quoted.
"""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import duckdb

from core.errors import EngineError, InvalidInput, NotFound

if TYPE_CHECKING:
    import pandas as pd

FilterOp = Literal["eq", "contains"]

_db_lock = threading.Lock()
_db: duckdb.DuckDBPyConnection | None = None
_local = threading.local()
_cursors: list[duckdb.DuckDBPyConnection] = []


def extension_path() -> Path:
    """The signed delta extension inside the installed ``duckdb-extension-delta`` wheel."""
    import duckdb_extension_delta

    folder = Path(duckdb_extension_delta.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    path = folder / "delta.duckdb_extension"
    if not path.is_file():
        raise EngineError(
            f"DuckDB delta extension for DuckDB {duckdb.__version__} not found at {path}",
            hint="install duckdb-extension-delta with the same version as duckdb",
        )
    return path


def open_duckdb() -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB with the signed delta extension loaded and nothing fetched."""
    con = duckdb.connect(
        ":memory:",
        config={
            "allow_unsigned_extensions": "false",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        },
    )
    con.execute(f"LOAD '{extension_path()}'")
    # Text forms of timestamps (edits, JSON output) must not depend on the host's zone.
    con.execute("SET TimeZone = 'UTC'")
    return con


def _database() -> duckdb.DuckDBPyConnection:
    global _db
    if _db is None:
        with _db_lock:
            if _db is None:
                _db = open_duckdb()
                atexit.register(close)
    return _db


def close() -> None:
    """Close this process's DuckDB database and cursors.

    Runs at exit: DuckDB's C++ threads must stop before the interpreter tears down, or
    the process can abort ("terminate called without an active exception").
    """
    global _db
    with _db_lock:
        for cur in list(_cursors):
            try:
                cur.close()
            except duckdb.Error:
                pass
        _cursors.clear()
        if _db is not None:
            _db.close()
            _db = None
        _local.__dict__.clear()


def cursor() -> duckdb.DuckDBPyConnection:
    """This thread's DuckDB cursor, with the delta extension loaded."""
    cur = getattr(_local, "cursor", None)
    if cur is None:
        cur = _database().cursor()
        _local.cursor = cur
        _cursors.append(cur)
    return cur


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """A DuckDB string literal, for names that must be spelled in SQL text (values are bound)."""
    return "'" + value.replace("'", "''") + "'"


def _scan(version: int | None) -> tuple[str, list[Any]]:
    if version is None:
        return "delta_scan(?)", []
    return "delta_scan(?, version => ?)", [int(version)]


def _run(sql: str, params: list[Any], path: Path) -> duckdb.DuckDBPyConnection:
    try:
        return cursor().execute(sql, params)
    except duckdb.Error as exc:
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


def table_schema(path: Path, version: int | None = None) -> list[Column]:
    """Column names and DuckDB types of a Delta table (optionally at ``version``)."""
    _require_table(path)
    if version is not None:
        # A committed version never changes, so its schema can be remembered.
        return list(_schema_at(str(path), int(version)))
    return list(_describe(Path(path), None))


@lru_cache(maxsize=512)
def _schema_at(path: str, version: int) -> tuple[Column, ...]:
    return _describe(Path(path), version)


def _describe(path: Path, version: int | None) -> tuple[Column, ...]:
    scan, extra = _scan(version)
    result = _run(f"DESCRIBE SELECT * FROM {scan}", [str(path), *extra], path).fetchall()
    return tuple(Column(name=row[0], type=str(row[1])) for row in result)


def count_rows(path: Path, version: int | None = None) -> int:
    """Row count of a Delta table, counted by DuckDB (seed 002 section 8.D)."""
    _require_table(path)
    scan, extra = _scan(version)
    row = _run(f"SELECT count(*) FROM {scan}", [str(path), *extra], path).fetchone()
    return int(row[0]) if row else 0


def _require_table(path: Path) -> None:
    if not (Path(path) / "_delta_log").is_dir():
        raise NotFound(f"no Delta table at {path}", kind="table", ident=str(path))


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


def read_page(
    path: Path,
    *,
    version: int | None = None,
    filters: list[RowFilter] | None = None,
    order_by: str | None = None,
    descending: bool = False,
    limit: int = 50,
    offset: int = 0,
    known_total: int | None = None,
) -> Page:
    """One page of a Delta table, filtered and ordered in DuckDB.

    Args:
        path: The Delta table folder.
        version: Read the table as of this version (time travel); latest when None.
        filters: Conditions ANDed together; their columns must exist.
        order_by: A column to sort by; None keeps the table's natural order.
        descending: Sort direction for ``order_by``.
        limit: Page size, 1..10,000.
        offset: Rows to skip, >= 0.
        known_total: The table's row count at ``version`` if the caller already knows it
            (the catalog counts it at every commit); skips the count query when unfiltered.

    Raises:
        InvalidInput: Unknown column, bad limit/offset.
        NotFound: No table at ``path`` or no such version.
    """
    if not 1 <= int(limit) <= 10_000:
        raise InvalidInput(f"limit must be between 1 and 10000, got {limit}", field="limit")
    if int(offset) < 0:
        raise InvalidInput(f"offset must be >= 0, got {offset}", field="offset")
    _require_table(path)
    filters = filters or []
    # The schema is only needed to check names; unfiltered natural-order pages skip it.
    columns = {c.name: c.type for c in table_schema(path, version)} if (filters or order_by) else {}
    if order_by is not None and order_by not in columns:
        raise InvalidInput(
            f"cannot order by unknown column {order_by!r}; columns are: {', '.join(columns)}",
            field="order_by",
        )
    scan, extra = _scan(version)
    where, where_params = _where(filters, columns)
    order = ""
    if order_by is not None:
        # row_id breaks ties so pages never overlap or skip rows.
        direction = "DESC" if descending else "ASC"
        order = f" ORDER BY {quote_ident(order_by)} {direction} NULLS LAST"
        if order_by != "row_id" and "row_id" in columns:
            order += ", row_id ASC"
    sql = f"SELECT * FROM {scan}{where}{order} LIMIT ? OFFSET ?"
    params = [str(path), *extra, *where_params, int(limit), int(offset)]
    frame = _run(sql, params, path).to_arrow_table().to_pandas()
    if known_total is not None and not filters:
        total = known_total
    else:
        row = _run(f"SELECT count(*) FROM {scan}{where}", [str(path), *extra, *where_params], path).fetchone()
        total = int(row[0]) if row else 0
    return Page(rows=frame, total=total)


def read_rows_by_id(path: Path, row_ids: list[str], version: int | None = None) -> pd.DataFrame:
    """The rows of ``path`` whose ``row_id`` is in ``row_ids``."""
    scan, extra = _scan(version)
    sql = f"SELECT * FROM {scan} WHERE row_id IN (SELECT unnest(?::VARCHAR[]))"
    return _run(sql, [str(path), *extra, list(row_ids)], path).to_arrow_table().to_pandas()


# ---------------------------------------------------------------- rows by id, as text

# A row locator costs one sorted scan of row_id (~0.5 s and ~22 MB per million rows) and
# makes each later lookup a binary search plus a read of one row from one Parquet file.
# The locators kept in a process hold at most this many rows together (~110 MB).
_LOCATOR_MAX_ROWS = 5_000_000
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
_locators: dict[tuple[str, int], _RowLocator | None] = {}  # insertion order = age
_looked_up: set[tuple[str, int]] = set()


def read_rows_as_text(
    path: Path, version: int, row_ids: list[str], columns: list[str] | None = None
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


def _locator(path: Path, version: int) -> _RowLocator | None:
    """The locator of a table version; None on its first lookup or when its layout rules one out."""
    from deltalake.exceptions import DeltaError

    key = (str(path), version)
    with _locator_lock:
        if key in _locators:
            locator = _locators[key]
            # Data files are never rewritten in place: one gone means the table was replaced.
            if locator is None or Path(locator.files[0]).is_file():
                return locator
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


def _build_locator(path: Path, version: int) -> _RowLocator | None:
    """A row locator for ``path`` at ``version``; None when the table's layout rules it out."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(str(path), version=version)
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
