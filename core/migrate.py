"""Migrating a PostgreSQL table or a folder of Parquet files into a new dataset, with a parity report.

The target is checked first (ids, the actor's admin role, no such dataset yet), then the
source is read into Arrow and handed, in memory, to
``core.datasets.create_dataset_from_table``, so a migration leaves exactly what a create
leaves (the rows kept as the upload's ``converted.parquet``), and nothing when it fails.

PostgreSQL is read with psycopg: ``COPY (SELECT ...) TO STDOUT`` as CSV, parsed by
pyarrow with an explicit Arrow schema derived from the catalog types, all in one
read-only REPEATABLE READ transaction; a second connection imports its snapshot
(``pg_export_snapshot``), so the rows read and the source checksums see one snapshot
while PostgreSQL computes the checksums during the read and the write.

The parity report compares the source, as its own engine sees it (SQL inside
PostgreSQL, DuckDB over the Parquet files), with the Delta table as DuckDB reads it
back. DuckDB computes the Delta side's checksums over the rows on their way to Spark,
while Spark writes them; then one cheap read of the stored table compares its
fingerprint (row count, sums of DuckDB's value hashes per column and per row) with the
rows handed over. Equal, they are the same rows, so their checksums are the stored
table's; different, the stored table's checksums are computed from it. The same DuckDB
pass infers the new dataset's default warning rules (``core.rules``) from those rows,
which ``create_dataset_from_table`` would otherwise infer by reading the stored table
again after the write; they are used only when the fingerprints agree. Every value gets
a canonical text that both engines spell alike:

=========== ================================================================
integer     decimal digits
decimal     digits with exactly the column's scale (``1.50`` in a scale-2 column)
float       ``NaN``, else the 16 lower-case hex digits of the IEEE-754 double's bits
            (exactly one text per double, ``-0`` apart from ``0``; a real is widened)
text        the text itself (``char(n)`` keeps its padding)
boolean     ``true`` / ``false``
date        days since 1970-01-01
timestamp   microseconds since 1970-01-01 UTC (a naive timestamp counts as UTC)
=========== ================================================================

A value's cell text is ``=`` followed by that text; NULL is ``NULL`` (so NULL and the
empty string differ). A digest is the first 15 hex digits (60 bits) of the md5 of a
UTF-8 text. The table hash is the sum of the row digests over all rows: the md5 of the
row's cell texts joined by ``|`` in column order, each text column's cell preceded by its
length in UTF-8 bytes and ``|`` (no other cell text holds a ``|``), so it changes when
any value changes or moves between rows.

A column checksum is the sum over rows of each cell's contribution: for text, binary
and decimals wider than 18 digits the digest of the cell text; for the other types
2**64 plus the value's integer image (the integer itself, 1/0 for true/false, the days
or microseconds above, a float's bits as a signed 64-bit integer, a decimal's unscaled
digits), so every value adds a positive amount and a NULL adds the digest of ``NULL``.
A changed value, a NULL for a value and a lost row change it; values that move between
rows do not. Sums are order-independent and exact (decimal strings).

md5 is the cheapest digest both engines have, and PostgreSQL pays about a microsecond
per call. So the source engine first computes only the row count and the table hash,
while the table is written, and the Delta side hashes only its text columns and its
rows (typed columns are summed, which costs next to nothing). Equal counts and table
hashes mean both sides hold the same rows, so every column checksum is equal too, and
the source's are the ones the Delta side computed. Only when they differ does the
source engine compute its column checksums, to name the columns that differ.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal, localcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from core import datasets, reads, rules
from core.auth import SYSTEM, Role, User, require_role
from core.catalog import Catalog, DatasetRow, ProjectRow
from core.config import get_settings
from core.errors import AlreadyExists, EngineError, InvalidFile, InvalidInput, NotFound, OreoError
from core.ingest import check_column_names, check_input_file, normalise_types, read_input_file
from core.layout import validate_id
from core.storage import Location, location

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

Progress = Callable[[float, str], None]
_T = TypeVar("_T")
Kind = Literal["integer", "decimal", "float", "text", "boolean", "date", "timestamp", "binary"]

ROW_ID = datasets.ROW_ID
_MAX_DECIMAL_PRECISION = 38  # Spark's and DuckDB's limit
_MIN_POSTGRES = 130000  # trim_scale() and min_scale() arrived in PostgreSQL 13
_CONNECT_TIMEOUT_S = 10
_COPY_CHUNK_LOG = 64 << 20  # report COPY progress every this many bytes


@dataclass(frozen=True)
class ColumnParity:
    """One column's checksum on each side."""

    name: str
    source_checksum: str
    delta_checksum: str

    @property
    def match(self) -> bool:
        return self.source_checksum == self.delta_checksum


@dataclass(frozen=True)
class ParityReport:
    """Row counts, column checksums and table hashes of the source and the written table.

    ``version`` is the new dataset's Delta version; None on a dry run, where the Delta side
    is computed over the data as it would be written.
    """

    source_rows: int
    delta_rows: int
    columns: tuple[ColumnParity, ...]
    table_hash_source: str
    table_hash_delta: str
    version: int | None

    @property
    def match(self) -> bool:
        return (
            self.source_rows == self.delta_rows
            and all(c.match for c in self.columns)
            and self.table_hash_source == self.table_hash_delta
        )

    @property
    def mismatched_columns(self) -> list[str]:
        return [c.name for c in self.columns if not c.match]

    def to_json(self) -> dict[str, Any]:
        return {
            "source_rows": self.source_rows,
            "delta_rows": self.delta_rows,
            "columns": [
                {"name": c.name, "source_checksum": c.source_checksum, "delta_checksum": c.delta_checksum}
                for c in self.columns
            ],
            "table_hash_source": self.table_hash_source,
            "table_hash_delta": self.table_hash_delta,
            "match": self.match,
            "version": self.version,
        }


@dataclass(frozen=True)
class _Column:
    """A source column: its name, how its values are compared, and its DuckDB type."""

    name: str
    kind: Kind
    source_type: str  # as the source spells it, for messages
    duck_type: str  # the DuckDB type of the values; the Delta side is cast back to it if it differs


@dataclass(frozen=True)
class _Checksums:
    """Row count, table hash and, unless only the first two were asked for, the column checksums."""

    rows: int
    columns: tuple[str, ...] | None
    table_hash: str


def _report(source: _Checksums, delta: _Checksums, columns: Sequence[_Column], version: int | None) -> ParityReport:
    if source.columns is None or delta.columns is None:  # both passes always sum columns here
        raise TypeError("a parity report needs the column checksums of both sides")
    return ParityReport(
        source_rows=source.rows,
        delta_rows=delta.rows,
        columns=tuple(
            ColumnParity(name=c.name, source_checksum=s, delta_checksum=d)
            for c, s, d in zip(columns, source.columns, delta.columns, strict=True)
        ),
        table_hash_source=source.table_hash,
        table_hash_delta=delta.table_hash,
        version=version,
    )


def _noop(fraction: float, message: str) -> None:
    return None


# ---------------------------------------------------------------- PostgreSQL


def migrate_postgres(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    *,
    dsn: str,
    table: str,
    key: str | None = None,
    dry_run: bool = False,
    actor: User = SYSTEM,
    progress: Progress | None = None,
) -> ParityReport:
    """Create a dataset from a PostgreSQL table and compare both sides.

    Args:
        catalog: The catalog.
        project_id: An existing project.
        dataset_id: A new dataset id.
        dsn: A libpq connection string or ``postgresql://`` URL (a SQLAlchemy
            ``postgresql+psycopg://`` URL is accepted too). Passwords may come from
            ``PGPASSWORD`` or ``~/.pgpass`` instead.
        table: ``schema.table`` or ``table`` (found through the search path); names are
            case-sensitive.
        key: Column whose values become ``row_id``; unique, non-null. None: UUIDs.
        dry_run: Read and compare, create nothing.
        actor: Must be admin in the project.
        progress: Called with (fraction done, what is happening).

    Returns:
        The parity report; ``version`` is None on a dry run.

    Raises:
        InvalidInput: Bad ids, DSN, key, column names or an unsupported column type;
            the server cannot be reached or refuses the login.
        NotFound: Unknown project or table.
        AlreadyExists: The dataset exists.
        PermissionDenied: ``actor`` is not an admin of the project.
        ValidationFailed: Duplicate or NULL keys.
        EngineError: PostgreSQL, Spark or DuckDB failed; nothing is left behind, except when
            only the source checksums fail after the dataset was written: it stays, whole,
            and the message says so.
    """
    report = progress or _noop
    _check_target(catalog, project_id, dataset_id, actor)
    with _connect(dsn) as conn, _translate_pg_errors(table):
        relation, label = _resolve_table(conn, table)
        columns = _pg_columns(conn, relation, label)
        _check_columns([c.column.name for c in columns], key, source=label)
        columns = _profile(conn, relation, columns, label)
        # PostgreSQL hashes its rows on a second connection, in the same snapshot, while the
        # first one streams them out and Spark writes them: the engines work at once.
        snapshot = _export_snapshot(conn)
        with (
            _connect(dsn) as hasher,
            _in_background(_pg_checksums_in, hasher, snapshot, relation, columns, cancel=hasher.cancel_safe) as source,
        ):
            report(0.05, f"reading {label}; PostgreSQL computes the source checksums meanwhile")
            with tempfile.TemporaryDirectory(prefix="oreo-migrate-") as tmp:
                arrow = _copy_to_arrow(conn, relation, columns, Path(tmp))
            report(0.35, f"read {arrow.num_rows:,} rows")
            safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
            return _finish(
                catalog,
                project_id,
                dataset_id,
                arrow,
                [c.column for c in columns],
                lambda: _translated(source, table),
                lambda: _translated(lambda: _pg_checksums(conn, relation, columns, per_column=True), table),
                key=key,
                dry_run=dry_run,
                actor=actor,
                file_name=f"postgres-{safe}.parquet",
                report=report,
            )


@dataclass(frozen=True)
class _PgColumn:
    """A PostgreSQL column and how it travels: the exported text, its parse type and final Arrow type."""

    column: _Column
    base: str  # the base type's name (domains resolved), e.g. int4, numeric, timestamptz
    precision: int | None = None
    scale: int | None = None
    unconstrained: bool = False  # numeric without (p,s): its decimal type is found from the data


_PG_SUPPORTED = (
    "smallint, integer, bigint, numeric, real, double precision, text, varchar, char, uuid, json, jsonb, "
    "enums, boolean, date, timestamp, timestamp with time zone"
)
_PG_TEXT = {"text", "varchar", "bpchar", "name", "uuid", "json", "jsonb"}
_PG_SIMPLE: dict[str, tuple[Kind, str]] = {
    "int2": ("integer", "SMALLINT"),
    "int4": ("integer", "INTEGER"),
    "int8": ("integer", "BIGINT"),
    "float4": ("float", "FLOAT"),
    "float8": ("float", "DOUBLE"),
    "bool": ("boolean", "BOOLEAN"),
    "date": ("date", "DATE"),
    "timestamp": ("timestamp", "TIMESTAMP WITH TIME ZONE"),
    "timestamptz": ("timestamp", "TIMESTAMP WITH TIME ZONE"),
}


def _libpq_dsn(dsn: str) -> dict[str, Any]:
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    if not dsn or not dsn.strip():
        raise InvalidInput("the PostgreSQL DSN is empty", field="dsn")
    # SQLAlchemy URLs (OREO_DATABASE_URL) name a driver libpq does not know.
    dsn = re.sub(r"^postgres(?:ql)?\+\w+://", "postgresql://", dsn.strip())
    try:
        params: dict[str, Any] = conninfo_to_dict(dsn)
    except ProgrammingError as exc:
        raise InvalidInput(
            f"invalid PostgreSQL DSN: {_first_line(exc)}",
            field="dsn",
            hint="use postgresql://user@host:port/dbname or 'host=... dbname=...'",
        ) from exc
    params.setdefault("connect_timeout", _CONNECT_TIMEOUT_S)
    params.setdefault("application_name", "oreo-migrate")
    return params


@contextmanager
def _connect(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    import psycopg

    params = _libpq_dsn(dsn)
    try:
        conn = psycopg.connect(**params)
    except psycopg.Error as exc:
        reason = re.sub(r"^connection failed:\s*", "", _first_line(exc))
        raise InvalidInput(
            f"cannot connect to PostgreSQL: {reason}",
            field="dsn",
            hint="check the host, port, user, password and database in --dsn",
        ) from exc
    try:
        version = conn.info.server_version
        if version < _MIN_POSTGRES:
            raise InvalidInput(
                f"PostgreSQL {version // 10000} is too old to migrate from; version 13 or later is needed", field="dsn"
            )
        try:
            conn.execute("SET TimeZone TO 'UTC'")
            conn.execute("SET client_encoding TO 'UTF8'")
            conn.execute("SET extra_float_digits TO 3")  # shortest exact text for floats
            conn.commit()
        except psycopg.Error as exc:
            raise EngineError(f"PostgreSQL refused the session settings: {_first_line(exc)}") from exc
        # One snapshot for the profile, the COPY and the checksums.
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        yield conn
    finally:
        try:
            conn.rollback()
        except psycopg.Error:
            pass  # a broken connection has nothing to roll back
        conn.close()


@contextmanager
def _in_background(fn: Callable[..., _T], *args: Any, cancel: Callable[[], None]) -> Iterator[Callable[[], _T]]:
    """Run ``fn(*args)`` in a thread; yield a function that waits for its result.

    Leaving early (an error, Ctrl-C) cancels it with ``cancel`` and waits for the thread,
    so the connection it uses is idle before it is closed.
    """
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oreo-migrate")
    future = pool.submit(fn, *args)
    try:
        yield future.result
    except BaseException:
        if not future.done():
            try:
                cancel()
            except Exception:  # a failed cancel only means waiting for the query to end
                pass
        raise
    finally:
        pool.shutdown(wait=True)


def _translated(result: Callable[[], _Checksums], table: str) -> _Checksums:
    with _translate_pg_errors(table):
        return result()


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


@contextmanager
def _translate_pg_errors(table: str) -> Iterator[None]:
    import psycopg
    from psycopg import errors

    try:
        yield
    except OreoError:
        raise
    except errors.InsufficientPrivilege as exc:
        raise InvalidInput(
            f"PostgreSQL refused to read {table}: {_first_line(exc)}", field="table", hint="GRANT SELECT to the user"
        ) from exc
    except psycopg.Error as exc:
        raise EngineError(f"PostgreSQL failed while reading {table}: {_first_line(exc)}") from exc


def _resolve_table(conn: psycopg.Connection[Any], table: str) -> tuple[sql.Identifier, str]:
    """The table as a quoted identifier and as ``schema.table`` for messages."""
    from psycopg import sql

    if not table or not table.strip():
        raise InvalidInput("the table name is empty", field="table")
    parts = table.split(".", 1)
    if any(not p for p in parts):
        raise InvalidInput(f"invalid table name {table!r}: use schema.table or table", field="table")
    quoted = sql.Identifier(*parts).as_string(conn)
    row = conn.execute(
        "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = to_regclass(%s)",
        [quoted],
    ).fetchone()
    if row is None:
        raise NotFound(
            f"PostgreSQL table {table!r} not found",
            kind="table",
            ident=table,
            hint="names are case-sensitive; unquoted names are stored in lower case",
        )
    schema, name, relkind = row
    if relkind not in ("r", "p", "v", "m", "f"):
        raise InvalidInput(f"{schema}.{name} is not a table or view", field="table")
    return sql.Identifier(schema, name), f"{schema}.{name}"


def _pg_columns(conn: psycopg.Connection[Any], relation: sql.Identifier, label: str) -> list[_PgColumn]:
    rows = conn.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod), bt.typname, bt.typtype, bn.nspname,
               format_type(bt.oid, CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END)
        FROM pg_attribute a
        JOIN pg_type t ON t.oid = a.atttypid
        JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
        JOIN pg_namespace bn ON bn.oid = bt.typnamespace
        WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        [relation.as_string(conn)],
    ).fetchall()
    if not rows:
        raise InvalidInput(f"{label} has no columns", field="table")
    return [_pg_column(*row, label=label) for row in rows]


def _pg_column(
    name: str, declared: str, base: str, typtype: str, namespace: str, base_declared: str, *, label: str
) -> _PgColumn:
    if typtype == "e":
        return _PgColumn(_Column(name, "text", declared, "VARCHAR"), base="enum")
    if namespace == "pg_catalog" and base in _PG_TEXT:
        return _PgColumn(_Column(name, "text", declared, "VARCHAR"), base=base)
    if namespace == "pg_catalog" and base in _PG_SIMPLE:
        kind, duck = _PG_SIMPLE[base]
        return _PgColumn(_Column(name, kind, declared, duck), base=base)
    if namespace == "pg_catalog" and base == "numeric":
        found = re.fullmatch(r"numeric(?:\((\d+)(?:,(-?\d+))?\))?", base_declared)
        if found is None or found.group(1) is None:
            # The decimal type is decided once the data is profiled.
            return _PgColumn(_Column(name, "decimal", declared, ""), base=base, unconstrained=True)
        precision, scale = int(found.group(1)), int(found.group(2) or 0)
        if precision > _MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
            raise InvalidInput(
                f"column {name!r} of {label} is {declared}; Delta decimals hold at most "
                f"{_MAX_DECIMAL_PRECISION} digits with a scale between 0 and the precision",
                field="table",
                hint="cast it in a view, e.g. numeric(38,s), and migrate the view",
            )
        return _PgColumn(
            _Column(name, "decimal", declared, f"DECIMAL({precision},{scale})"),
            base=base,
            precision=precision,
            scale=scale,
        )
    raise InvalidInput(
        f"column {name!r} of {label} has the PostgreSQL type {declared}, which oreo migrate cannot carry; "
        f"supported: {_PG_SUPPORTED}",
        field="table",
        hint="cast or drop it in a view and migrate the view",
    )


def _profile(
    conn: psycopg.Connection[Any], relation: sql.Identifier, columns: list[_PgColumn], label: str
) -> list[_PgColumn]:
    """Refuse values Delta cannot hold; give unconstrained numerics the decimal type their data needs."""
    from psycopg import sql

    checks: list[tuple[int, str, sql.SQL]] = []
    for i, c in enumerate(columns):
        if c.unconstrained:
            checks.append((i, "nonfinite", sql.SQL("count(*) FILTER (WHERE {e} IS NOT NULL AND scale({e}) IS NULL)")))
            checks.append((i, "scale", sql.SQL("max(min_scale({e}))")))
            digits = "max(CASE WHEN trunc({e}) = 0 THEN 0 ELSE length(abs(trunc({e}))::text) END)"
            checks.append((i, "digits", sql.SQL(digits)))
        elif c.column.kind in ("date", "timestamp"):
            bad = "count(*) FILTER (WHERE NOT isfinite({e}) OR {e} < '0001-01-01' OR {e} >= '10000-01-01')"
            checks.append((i, "range", sql.SQL(bad)))
    if not checks:
        return columns
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(part.format(e=sql.Identifier(columns[i].column.name)) for i, _, part in checks), relation
    )
    row = conn.execute(query).fetchone()
    found: dict[tuple[int, str], Any] = {(i, what): v for (i, what, _), v in zip(checks, row or (), strict=True)}
    result = list(columns)
    for (i, what), value in found.items():
        c = columns[i]
        if what == "range" and value:
            raise InvalidInput(
                f"column {c.column.name!r} of {label} has {value} value(s) that are infinite or outside "
                "0001-01-01..9999-12-31, which Delta cannot store",
                field="table",
            )
        if what == "nonfinite" and value:
            raise InvalidInput(
                f"column {c.column.name!r} of {label} has {value} NaN or infinite numeric value(s), "
                "which a Delta decimal cannot store",
                field="table",
                hint="migrate a view that maps them to NULL, or casts the column to double precision",
            )
    for i, c in enumerate(columns):
        if not c.unconstrained:
            continue
        scale = int(found[(i, "scale")] or 0)
        integer_digits = int(found[(i, "digits")] or 0)
        if integer_digits + scale > _MAX_DECIMAL_PRECISION:
            raise InvalidInput(
                f"column {c.column.name!r} of {label} is numeric with values of up to {integer_digits} integer and "
                f"{scale} fraction digits, which does not fit decimal({_MAX_DECIMAL_PRECISION},s)",
                field="table",
                hint="migrate a view that rounds it or casts it to double precision",
            )
        # The widest precision leaves room for later edits; the scale is what the data needs.
        result[i] = _PgColumn(
            _Column(c.column.name, "decimal", c.column.source_type, f"DECIMAL({_MAX_DECIMAL_PRECISION},{scale})"),
            base=c.base,
            precision=_MAX_DECIMAL_PRECISION,
            scale=scale,
            unconstrained=True,
        )
    return result


def _arrow_types(c: _PgColumn) -> tuple[pa.DataType, pa.DataType]:
    """(type the CSV text is parsed as, type the column ends up with)."""
    if c.column.kind == "decimal":
        assert c.precision is not None and c.scale is not None
        t = pa.decimal128(c.precision, c.scale)
        return t, t
    simple: dict[str, tuple[pa.DataType, pa.DataType]] = {
        "int2": (pa.int16(), pa.int16()),
        "int4": (pa.int32(), pa.int32()),
        "int8": (pa.int64(), pa.int64()),
        "float4": (pa.float32(), pa.float32()),
        "float8": (pa.float64(), pa.float64()),
        "bool": (pa.bool_(), pa.bool_()),
        "date": (pa.int32(), pa.date32()),
        "timestamp": (pa.int64(), pa.timestamp("us", tz="UTC")),
        "timestamptz": (pa.int64(), pa.timestamp("us", tz="UTC")),
    }
    return simple.get(c.base, (pa.string(), pa.string()))


def _pg_epoch_us(e: sql.Composable) -> sql.Composable:
    from psycopg import sql

    # Whole seconds and the microseconds within them are exact in a double (date_part's type): a
    # double holds every integer up to 2**53. extract() returns numeric from PostgreSQL 14 on, which
    # cost more (summing this over 1M timestamps in PostgreSQL 15: 425 ms with extract, 299 ms).
    return sql.SQL(
        "(date_part('epoch', date_trunc('second', {e}))::bigint * 1000000"
        " + date_part('microseconds', {e})::bigint % 1000000)"
    ).format(e=e)


def _pg_export(c: _PgColumn) -> sql.Composable:
    """The expression COPY writes for a column: text pyarrow parses exactly."""
    from psycopg import sql

    e = sql.Identifier(c.column.name)
    if c.column.kind == "date":
        return sql.SQL("({e} - DATE '1970-01-01')").format(e=e)
    if c.column.kind == "timestamp":
        return _pg_epoch_us(e)
    if c.unconstrained:  # exactly the scale its decimal type has, which the data's values never exceed
        return sql.SQL("{e}::numeric({p},{s})").format(e=e, p=sql.Literal(c.precision), s=sql.Literal(c.scale))
    return e


def _copy_to_arrow(
    conn: psycopg.Connection[Any], relation: sql.Identifier, columns: list[_PgColumn], tmp: Path
) -> pa.Table:
    """The table's rows, streamed by ``COPY ... TO STDOUT`` into a CSV file, parsed by pyarrow."""
    from psycopg import sql
    from pyarrow import csv

    query = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT (FORMAT csv)").format(
        sql.SQL(", ").join(_pg_export(c) for c in columns), relation
    )
    path = tmp / "copy.csv"
    with path.open("wb") as out, conn.cursor().copy(query) as copy:
        for chunk in copy:
            out.write(chunk)
    names = [f"c{i}" for i in range(len(columns))]
    types = [_arrow_types(c) for c in columns]  # (parsed as, ends up as) per column
    parse = {n: parsed for n, (parsed, _) in zip(names, types, strict=True)}
    if path.stat().st_size == 0:
        empty = [pa.array([], type=final) for _, final in types]
        return pa.Table.from_arrays(empty, names=[c.column.name for c in columns])
    try:
        table = csv.read_csv(
            path,
            read_options=csv.ReadOptions(column_names=names, block_size=16 << 20),
            parse_options=csv.ParseOptions(newlines_in_values=True),
            convert_options=csv.ConvertOptions(
                column_types=parse,
                null_values=[""],  # COPY writes NULL unquoted and empty, '' as ""
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
                true_values=["t"],
                false_values=["f"],
            ),
        )
    except pa.ArrowException as exc:
        raise EngineError(f"could not parse PostgreSQL's COPY output: {_first_line(exc)}") from exc
    finally:
        path.unlink(missing_ok=True)
    arrays = [
        table.column(n).cast(final) if parsed != final else table.column(n)
        for n, (parsed, final) in zip(names, types, strict=True)
    ]
    return pa.Table.from_arrays(arrays, names=[c.column.name for c in columns])


def _pg_text(c: _PgColumn) -> sql.Composable:
    """A non-NULL value's text in the parity checksums, computed by PostgreSQL (see the module docstring)."""
    from psycopg import sql

    e = sql.Identifier(c.column.name)
    kind = c.column.kind
    if kind == "decimal" and c.unconstrained:  # with the scale of its decimal type, as the Delta side prints it
        return sql.SQL("{e}::numeric({p},{s})::text").format(e=e, p=sql.Literal(c.precision), s=sql.Literal(c.scale))
    if kind == "float":
        return sql.SQL("CASE WHEN {e} = 'NaN' THEN 'NaN' ELSE encode(float8send({e}::float8), 'hex') END").format(e=e)
    if kind == "date":
        return sql.SQL("({e} - DATE '1970-01-01')::text").format(e=e)
    if kind == "timestamp":
        return sql.SQL("{t}::text").format(t=_pg_epoch_us(e))
    if c.base == "bpchar":
        return sql.SQL("concat({e})").format(e=e)  # keeps the padding COPY writes; ::text would trim it
    # Integers, a constrained numeric (always printed with its scale), true/false, text.
    return sql.SQL("{e}::text").format(e=e)


def _pg_image(c: _PgColumn) -> sql.Composable | None:
    """The integer a value adds to its column checksum (see the module docstring); None: an md5 digest."""
    from psycopg import sql

    e = sql.Identifier(c.column.name)
    kind = c.column.kind
    if kind == "integer" or (kind == "decimal" and _summed_decimal(c.column)):
        return e
    if kind == "boolean":
        return sql.SQL("{e}::int").format(e=e)
    if kind == "date":
        return sql.SQL("({e} - DATE '1970-01-01')").format(e=e)
    if kind == "timestamp":
        return _pg_epoch_us(e)
    if kind == "float":
        return sql.SQL(
            "CASE WHEN {e} = 'NaN' THEN {nan} ELSE ('x' || encode(float8send({e}::float8), 'hex'))::bit(64)::bigint END"
        ).format(e=e, nan=sql.Literal(_NAN_BITS))
    return None


def _export_snapshot(conn: psycopg.Connection[Any]) -> str:
    """The id of ``conn``'s transaction snapshot, for another connection to read in it."""
    row = conn.execute("SELECT pg_export_snapshot()").fetchone()
    assert row is not None
    return str(row[0])


def _pg_checksums_in(
    conn: psycopg.Connection[Any], snapshot: str, relation: sql.Identifier, columns: list[_PgColumn]
) -> _Checksums:
    """``_pg_checksums`` on ``conn`` (a fresh transaction), in the snapshot exported by the reading one."""
    from psycopg import sql

    conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
    return _pg_checksums(conn, relation, columns)


def _pg_checksums(
    conn: psycopg.Connection[Any], relation: sql.Identifier, columns: list[_PgColumn], *, per_column: bool = False
) -> _Checksums:
    """The row count and table hash; with ``per_column``, the column checksums too."""
    from psycopg import sql

    utf8 = conn.info.parameter_status("server_encoding") in ("UTF8", "SQL_ASCII")
    # md5() and octet_length() see the server encoding's bytes; the Delta side sees UTF-8.
    as_utf8 = sql.SQL("{x}" if utf8 else "convert_to({x}, 'UTF8')")

    def digest(x: sql.Composable) -> sql.Composable:
        return sql.SQL("coalesce(sum(('x' || substr(md5({x}), 1, 15))::bit(60)::bigint), 0)").format(
            x=as_utf8.format(x=x)
        )

    cells: list[sql.Composable] = []
    row_text: list[sql.Composable] = []
    sums: list[sql.Composable] = [sql.SQL("count(*)")]
    for i, c in enumerate(columns):
        e, t = sql.Identifier(c.column.name), sql.Identifier(f"t{i}")
        cell = sql.SQL("CASE WHEN {e} IS NULL THEN 'NULL' ELSE '=' || {x} END AS {t}")
        cells.append(cell.format(e=e, x=_pg_text(c), t=t))
        if c.column.kind == "text":
            row_text.append(sql.SQL("octet_length({b})").format(b=as_utf8.format(x=t)))
        row_text.append(t)
        image = _pg_image(c) if per_column else None
        if image is not None:
            v = sql.Identifier(f"v{i}")
            cells.append(sql.SQL("{x} AS {v}").format(x=image, v=v))
            sums.append(sql.SQL("sum({v}), count({v})").format(v=v))
        elif per_column:
            sums.append(digest(t))
    sums.insert(1, digest(sql.SQL("concat_ws('|', {})").format(sql.SQL(", ").join(row_text))))
    # OFFSET 0 keeps the subquery from being flattened, so each cell text is made once.
    query = sql.SQL("SELECT {sums} FROM (SELECT {cells} FROM {relation} OFFSET 0) AS t").format(
        sums=sql.SQL(", ").join(sums), cells=sql.SQL(", ").join(cells), relation=relation
    )
    row = conn.execute(query).fetchone()
    assert row is not None
    return _checksums(tuple(row), [c.column for c in columns] if per_column else None)


# ---------------------------------------------------------------- Parquet


_PARQUET_SUPPORTED = (
    "integers, decimals up to 38 digits, float, double, string, binary, boolean, date, timestamp (any unit or zone)"
)


def migrate_parquet(
    catalog: Catalog,
    directory: Path | str,
    project_id: str,
    dataset_id: str,
    *,
    key: str | None = None,
    dry_run: bool = False,
    actor: User = SYSTEM,
    progress: Progress | None = None,
) -> ParityReport:
    """Create a dataset from every ``*.parquet`` file under ``directory`` and compare both sides.

    Files and folders whose names start with ``_`` or ``.`` are skipped (Spark's and
    Hadoop's bookkeeping). All files must have one schema.

    Args:
        catalog: The catalog.
        directory: The folder, searched recursively.
        project_id: An existing project.
        dataset_id: A new dataset id.
        key: Column whose values become ``row_id``; unique, non-null. None: UUIDs.
        dry_run: Read and compare, create nothing.
        actor: Must be admin in the project.
        progress: Called with (fraction done, what is happening).

    Returns:
        The parity report; ``version`` is None on a dry run.

    Raises:
        InvalidInput / InvalidFile: Bad ids or key; not a folder, no Parquet files, a
            corrupt file, differing schemas, unsupported column types.
        NotFound: Unknown project.
        AlreadyExists: The dataset exists.
        PermissionDenied: ``actor`` is not an admin of the project.
        ValidationFailed: Duplicate or NULL keys.
        EngineError: Spark or DuckDB failed; nothing is left behind.
    """
    report = progress or _noop
    _check_target(catalog, project_id, dataset_id, actor)
    folder = Path(directory)
    files = _parquet_files(folder)
    schema = _common_schema(files, folder)
    columns = _parquet_columns(files, schema, folder)
    _check_columns([c.name for c in columns], key, source=folder.name)
    report(0.05, f"reading {len(files)} Parquet file(s)")
    arrow = _read_parquet_files(files, schema)
    report(0.35, f"read {arrow.num_rows:,} rows; computing the source checksums in DuckDB")
    source = ("read_parquet(?, hive_partitioning = false)", [[str(f) for f in files]])
    sums = _duck_checksums(*source, columns, per_column=False)
    return _finish(
        catalog,
        project_id,
        dataset_id,
        arrow,
        columns,
        lambda: sums,
        lambda: _duck_checksums(*source, columns),
        key=key,
        dry_run=dry_run,
        actor=actor,
        file_name=f"parquet-{re.sub(r'[^A-Za-z0-9_.-]+', '_', folder.resolve().name) or 'folder'}.parquet",
        report=report,
    )


def _parquet_files(folder: Path) -> list[Path]:
    if not folder.exists():
        raise InvalidInput(f"folder not found: {folder}", field="directory")
    if not folder.is_dir():
        raise InvalidInput(f"{folder} is not a folder; give the folder that holds the Parquet files", field="directory")
    files = []
    for path in sorted(folder.rglob("*.parquet")):
        parts = path.relative_to(folder).parts
        if any(p.startswith(("_", ".")) for p in parts) or path.is_dir():
            continue
        if any("=" in p for p in parts[:-1]):
            raise InvalidInput(
                f"{folder} is partitioned Hive-style ({'/'.join(parts[:-1])}); the partition values are not in "
                "the files and would be lost",
                field="directory",
                hint="write the folder without partitionBy, or migrate each partition into a view first",
            )
        files.append(path)
    if not files:
        raise InvalidInput(f"no *.parquet files under {folder}", field="directory")
    _check_total_size(folder, sum(check_input_file(f) for f in files))
    return files


def _check_total_size(folder: Path, size: int) -> None:
    """Refuse a source over the dataset limit before reading it (Parquet in, Parquet out)."""
    limit_mb = get_settings().max_upload_mb
    if size > limit_mb * 2**20:
        raise InvalidInput(
            f"the Parquet files under {folder.name} are {size / 2**20:.1f} MB, over the {limit_mb} MB dataset limit",
            field="directory",
            hint=f"raise OREO_MAX_UPLOAD_MB for this run, e.g. OREO_MAX_UPLOAD_MB={int(size / 2**20 * 1.2) + 1}",
        )


def _common_schema(files: list[Path], folder: Path) -> pa.Schema:
    first: pa.Schema | None = None
    for path in files:
        try:
            schema = pq.read_schema(path)
        except (pa.ArrowException, OSError) as exc:
            raise InvalidFile(
                f"{path.relative_to(folder)} is not a readable Parquet file: {_first_line(exc)}", path=str(path)
            ) from exc
        schema = schema.remove_metadata()
        if first is None:
            first = schema
            continue
        theirs = [(f.name, f.type) for f in schema]
        ours = [(f.name, f.type) for f in first]
        if theirs != ours:
            differ = next(
                (f"{a[0]} {a[1]} vs {b[0]} {b[1]}" for a, b in zip(ours, theirs, strict=False) if a != b),
                f"{len(ours)} vs {len(theirs)} columns",
            )
            raise InvalidInput(
                f"{path.relative_to(folder)} has another schema than {files[0].relative_to(folder)} ({differ}); "
                "all files must have one schema",
                field="directory",
            )
    assert first is not None
    return first


def _parquet_kind(t: pa.DataType) -> Kind | None:
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_decimal(t):
        return "decimal" if t.precision <= _MAX_DECIMAL_PRECISION and 0 <= t.scale <= t.precision else None
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
        return "text"
    if pa.types.is_dictionary(t):
        return "text" if pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type) else None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    return None


def _parquet_columns(files: list[Path], schema: pa.Schema, folder: Path) -> list[_Column]:
    cur = reads.cursor()
    try:
        described = cur.execute(
            "DESCRIBE SELECT * FROM read_parquet(?, hive_partitioning = false)", [[str(f) for f in files]]
        ).fetchall()
    except duckdb.Error as exc:
        raise InvalidFile(f"DuckDB cannot read the Parquet files under {folder}: {_first_line(exc)}") from exc
    duck_types = {row[0]: str(row[1]) for row in described}
    columns = []
    for field in schema:
        kind = _parquet_kind(field.type)
        if kind is None or field.name not in duck_types:
            raise InvalidInput(
                f"column {field.name!r} has the Parquet type {field.type}, which oreo migrate cannot carry; "
                f"supported: {_PARQUET_SUPPORTED}",
                field="directory",
            )
        columns.append(_Column(field.name, kind, str(field.type), duck_types[field.name]))
    return columns


def _read_parquet_files(files: list[Path], schema: pa.Schema) -> pa.Table:
    tables = []
    for path in files:
        try:
            # Bounded like every user file: one that grew since the size check stops at the limit.
            data = read_input_file(path, max_bytes=get_settings().max_upload_mb * 2**20)
            tables.append(pq.read_table(pa.BufferReader(data), schema=schema))
        except (pa.ArrowException, OSError) as exc:
            raise InvalidFile(
                f"{path.name} is not a readable Parquet file: {_first_line(exc)}", path=str(path)
            ) from exc
    return pa.concat_tables(tables)


# ---------------------------------------------------------------- shared steps


def _check_target(catalog: Catalog, project_id: str, dataset_id: str, actor: User) -> None:
    """The checks ``create_dataset`` makes, done before a big source is read."""
    validate_id(project_id, kind="project id")
    validate_id(dataset_id, kind="dataset id")
    require_role(catalog, actor, project_id, Role.ADMIN, action="migrate a table into a dataset")
    with catalog.session() as s:
        if s.get(ProjectRow, project_id) is None:
            raise NotFound(f"unknown project {project_id!r}", kind="project", ident=project_id)
        if s.get(DatasetRow, (project_id, dataset_id)) is not None:
            raise AlreadyExists(f"dataset {project_id}/{dataset_id} already exists", kind="dataset", ident=dataset_id)
    layout = datasets.layout_for(project_id, dataset_id)
    if layout.exists():
        raise AlreadyExists(
            f"folder {layout.root} already exists but is not in the catalog; move it away first",
            kind="dataset",
            ident=dataset_id,
        )


def _check_columns(names: list[str], key: str | None, *, source: str) -> None:
    check_column_names(names, source=source)
    if key is not None and key not in names:
        raise InvalidInput(f"key column {key!r} is not in {source}; columns are: {', '.join(names)}", field="key")
    if ROW_ID in names and key != ROW_ID:
        raise InvalidInput(
            f"{source} has a column {ROW_ID!r}, which is reserved for Oreo's row ids; "
            f"use it as the key (--key {ROW_ID}) or rename it in a view",
            field="key",
        )


def _finish(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    arrow: pa.Table,
    columns: list[_Column],
    source: Callable[[], _Checksums],
    source_columns: Callable[[], _Checksums],
    *,
    key: str | None,
    dry_run: bool,
    actor: User,
    file_name: str,
    report: Progress,
) -> ParityReport:
    """Write the data (or, on a dry run, prepare it as it would be written) and compare both sides.

    ``source`` gives the source's row count and table hash, waiting for them if they are
    still being computed; ``source_columns`` computes the source's column checksums, which
    are only needed when the two sides differ.
    """
    try:
        arrow = normalise_types(arrow)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidInput(f"the data cannot be stored in Delta: {_first_line(exc)}", field="file") from exc
    if dry_run:
        return _dry_run(arrow, columns, source, source_columns, key=key, report=report)
    report(0.5, "writing the Delta table; DuckDB hashes the rows written meanwhile")
    info, rows, handed_over = _create_while_hashing(
        catalog, project_id, dataset_id, arrow, columns, key=key, actor=actor, file_name=file_name
    )
    assert info.version is not None
    report(0.85, "checking the Delta table against the rows written")
    stored = ("delta_scan(?, version => ?)", [info.path, int(info.version)])
    if handed_over is not None and rows.stored_is_written(location(info.path), info.version):
        delta = handed_over.checksums  # the stored rows are the rows hashed on their way to Spark
    else:
        report(0.9, "the Delta table differs from the rows written; computing its checksums")
        delta = _duck_checksums(*stored, columns)
    try:
        sums = _compared(source(), delta, source_columns, report)
    except OreoError as exc:
        # The dataset is whole; only the comparison is missing, so it stays.
        raise EngineError(
            f"dataset {project_id}/{dataset_id} was created (version {info.version}, {info.rows} rows), "
            f"but the source checksums failed: {exc}"
        ) from exc
    report(1.0, "done")
    return _report(sums, delta, columns, info.version)


def _dry_run(
    arrow: pa.Table,
    columns: list[_Column],
    source: Callable[[], _Checksums],
    source_columns: Callable[[], _Checksums],
    *,
    key: str | None,
    report: Progress,
) -> ParityReport:
    """Prepare the rows as they would be written, check their size and compare them with the source."""
    report(0.5, "dry run: preparing the rows as they would be written")
    prepared = datasets.with_row_ids(arrow, key)
    sink = pa.BufferOutputStream()
    pq.write_table(prepared, sink)
    datasets.check_dataset_size(sink.tell())
    report(0.8, "computing the checksums of the rows as they would be written")
    delta = _arrow_checksums(prepared, columns)
    sums = _compared(source(), delta, source_columns, report)
    report(1.0, "dry run done; nothing was created")
    return _report(sums, delta, columns, None)


class _HandedRows:
    """What DuckDB finds in the rows handed to Spark, and whether the stored table holds those rows.

    The stored table is read once, by the cheap fingerprint that shows it holds the
    handed rows; the default warning rules come from the handed rows when it does.
    """

    def __init__(self, columns: list[_Column], handed: Callable[[], _InFlight]) -> None:
        self._columns = columns
        self._handed = handed
        self._same: bool | None = None  # whether the stored table's fingerprint is the handed rows'

    def written(self) -> _InFlight | None:
        try:
            return self._handed()
        except OreoError:
            return None  # the stored table is hashed instead

    def stored_is_written(self, path: Location, version: int | None) -> bool:
        if self._same is None:
            found = self.written()
            stored = _fingerprint("delta_scan(?, version => ?)", [str(path), int(version or 0)], self._columns)
            self._same = found is not None and stored == found.fingerprint
        return self._same

    def infer(self, path: Location, version: int | None, schema: list[reads.Column]) -> list[dict[str, Any]]:
        found = self.written()
        ours = [c for c in schema if c.name != ROW_ID]
        if found is not None and found.columns == ours and self.stored_is_written(path, version):
            return found.rules  # inferred from the very rows the table holds
        return rules.infer_rules(path, version, schema)


def _create_while_hashing(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    arrow: pa.Table,
    columns: list[_Column],
    *,
    key: str | None,
    actor: User,
    file_name: str,
) -> tuple[datasets.DatasetInfo, _HandedRows, _InFlight | None]:
    """Create the dataset from ``arrow``; the dataset, the handed rows and what DuckDB found in them.

    DuckDB hashes the rows and infers the default warning rules from them while Spark
    writes them (another process): the two work at once.
    """
    cur = reads.cursor().cursor()
    try:
        with _in_background(_in_flight, arrow, columns, cur, cancel=cur.interrupt) as handed:
            rows = _HandedRows(columns, handed)
            info = datasets.create_dataset_from_table(
                catalog, project_id, dataset_id, arrow, key=key, actor=actor, source=file_name, infer=rows.infer
            )
            handed_over = rows.written()
    finally:
        cur.close()
    return info, rows, handed_over


def _compared(
    source: _Checksums, delta: _Checksums, source_columns: Callable[[], _Checksums], report: Progress
) -> _Checksums:
    """The source's checksums with its column checksums filled in.

    Equal row counts and table hashes mean both sides hold the same rows, so each column
    checksum is the Delta side's; otherwise the source engine computes its own, which name
    the columns that differ.
    """
    if (source.rows, source.table_hash) == (delta.rows, delta.table_hash):
        return replace(source, columns=delta.columns)
    report(0.95, "the two sides differ; computing the source's column checksums")
    found = source_columns()
    return replace(source, columns=found.columns)


@contextmanager
def _registered(table: pa.Table, cur: duckdb.DuckDBPyConnection) -> Iterator[str]:
    """``table`` as a DuckDB view of ``cur``, by its quoted name."""
    view = f"oreo_migrate_{uuid.uuid4().hex}"
    cur.register(view, table)
    try:
        yield reads.quote_ident(view)
    finally:
        cur.unregister(view)


def _arrow_checksums(table: pa.Table, columns: list[_Column]) -> _Checksums:
    cur = reads.cursor()
    with _registered(table, cur) as view:
        return _duck_checksums(view, [], columns, cur=cur)


@dataclass(frozen=True)
class _InFlight:
    """What DuckDB found in the rows handed to the writer."""

    checksums: _Checksums
    fingerprint: tuple[Any, ...]
    columns: list[reads.Column]  # as DuckDB types them (no row_id)
    rules: list[dict[str, Any]]  # the inferred warning rules (core.rules) they keep


def _in_flight(table: pa.Table, columns: list[_Column], cur: duckdb.DuckDBPyConnection) -> _InFlight:
    """The checksums, the fingerprint and the inferred rules of the rows handed to the writer."""
    with _registered(table, cur) as view:
        checksums = _duck_checksums(view, [], columns, cur=cur)
        fingerprint = _fingerprint(view, [], columns, cur=cur)
        try:
            described = cur.execute(f"DESCRIBE SELECT * FROM {view}").fetchall()
            schema = [reads.Column(name=r[0], type=str(r[1])) for r in described if r[0] != ROW_ID]
            inferred = rules.infer_rules_over(view, [], schema, cur=cur)
        except duckdb.Error as exc:
            raise EngineError(f"DuckDB could not profile the rows: {_first_line(exc)}") from exc
        return _InFlight(checksums, fingerprint, schema, inferred)


def _fingerprint(
    relation: str, params: list[Any], columns: Sequence[_Column], *, cur: duckdb.DuckDBPyConnection | None = None
) -> tuple[Any, ...]:
    """The row count and sums of DuckDB's value hashes per column and per row: the same for the same rows.

    A fraction of the md5 pass's cost; equal fingerprints of the stored table and the rows
    handed to the writer make their checksums equal. Floats are hashed by their bits, as
    ``hash()`` takes -0.0 for 0.0.
    """
    cur = cur or reads.cursor()
    try:
        typed = _typed_columns(cur, relation, params, columns)
        values = [(_duck_image(c, e) or e) if c.kind == "float" else e for c, e in zip(columns, typed, strict=True)]
        sums = [*(f"sum(hash({v}))" for v in values), f"sum(hash({', '.join(values)}))"]
        row = cur.execute(f"SELECT count(*), {', '.join(sums)} FROM {relation}", params).fetchone()
    except duckdb.Error as exc:
        raise EngineError(f"DuckDB could not compare the written table: {_first_line(exc)}") from exc
    assert row is not None
    return tuple(row)


def _typed_columns(
    cur: duckdb.DuckDBPyConnection, relation: str, params: list[Any], columns: Sequence[_Column]
) -> list[str]:
    """The columns of ``relation`` as expressions of the source's DuckDB types."""
    stored = {row[0]: str(row[1]) for row in cur.execute(f"DESCRIBE SELECT * FROM {relation}", params).fetchall()}
    typed = []
    for c in columns:
        e = reads.quote_ident(c.name)
        if c.name in stored and stored[c.name] != c.duck_type:
            # e.g. row_id holds a numeric key as text: compare the values, not their spelling.
            e = f"TRY_CAST({e} AS {c.duck_type})"
        typed.append(e)
    return typed


# ---------------------------------------------------------------- the checksums

# A typed value adds this plus its integer image to its column checksum, so every value is
# positive and differs from NULL, which adds the digest of the cell text 'NULL'.
_IMAGE_OFFSET = 1 << 64
_NULL_DIGEST = int(hashlib.md5(b"NULL").hexdigest()[:15], 16)
_NAN_BITS = 0x7FF8000000000000  # every NaN counts as the canonical quiet NaN
_MAX_SUMMED_DECIMAL = 18  # wider decimals could overflow DuckDB's exact sum; their cell texts are hashed


def _decimal(column: _Column) -> tuple[int, int] | None:
    """(precision, scale) of a decimal column's DuckDB type; None for any other type."""
    found = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", column.duck_type)
    return (int(found.group(1)), int(found.group(2))) if found is not None else None


def _summed_decimal(column: _Column) -> bool:
    found = _decimal(column)
    return found is not None and found[0] <= _MAX_SUMMED_DECIMAL


def _is_summed(column: _Column) -> bool:
    """Whether the column checksum sums integer images of the values (else md5 digests of cell texts)."""
    if column.kind == "decimal":
        return _summed_decimal(column)
    return column.kind in ("integer", "boolean", "date", "timestamp", "float")


def _image_sum(column: _Column, total: Any) -> int:
    """An engine's sum of a column's images as an integer; a decimal's are its unscaled values."""
    if total is None:
        return 0
    if column.kind != "decimal":
        return int(total)
    found = _decimal(column)
    assert found is not None
    with localcontext() as ctx:
        ctx.prec = 200  # exact for any sum of at most 18-digit values
        return int(Decimal(total).scaleb(found[1]))


def _checksums(row: tuple[Any, ...], columns: Sequence[_Column] | None) -> _Checksums:
    """Checksums from a query's row: count, table hash, then per column a digest sum, or an image sum and count."""
    rows, table_hash = int(row[0]), str(int(row[1]))
    if columns is None:
        return _Checksums(rows=rows, columns=None, table_hash=table_hash)
    values = iter(row[2:])
    found = []
    for c in columns:
        if _is_summed(c):
            total, count = next(values), int(next(values))
            found.append(str(_image_sum(c, total) + _IMAGE_OFFSET * count + _NULL_DIGEST * (rows - count)))
        else:
            found.append(str(int(next(values))))
    return _Checksums(rows=rows, columns=tuple(found), table_hash=table_hash)


def _duck_text(column: _Column, e: str) -> str:
    """A non-NULL value's text in the parity checksums, computed by DuckDB (see the module docstring).

    ``e`` is of the column's ``duck_type``.
    """
    kind = column.kind
    if kind == "float":
        bits = f"CAST(CAST(CAST({e} AS DOUBLE) AS BIT) AS BIGINT)"
        return f"CASE WHEN isnan({e}) THEN 'NaN' ELSE lower(lpad(hex({bits}), 16, '0')) END"
    if kind == "date":
        return f"CAST(date_diff('day', DATE '1970-01-01', {e}) AS VARCHAR)"
    if kind == "timestamp":
        return f"CAST(epoch_us({e}) AS VARCHAR)"
    if kind == "binary":
        return f"hex({e})"
    found = _decimal(column)
    if found is not None and found[0] > _MAX_SUMMED_DECIMAL and found[1] < _MAX_SUMMED_DECIMAL:
        # A wide decimal prints four times as fast through an 18-digit one when its value fits
        # (1M DECIMAL(38,4) values: 211 ms against 48 ms), with the same scale and so the same text.
        scale = found[1]
        fits = "9" * (_MAX_SUMMED_DECIMAL - scale) + ("." + "9" * scale if scale else "")
        narrow = f"CAST(CAST({e} AS DECIMAL({_MAX_SUMMED_DECIMAL},{scale})) AS VARCHAR)"
        return f"CASE WHEN {e} BETWEEN -{fits} AND {fits} THEN {narrow} ELSE CAST({e} AS VARCHAR) END"
    # Integers, decimals (always printed with their scale), true/false, text.
    return f"CAST({e} AS VARCHAR)"


def _duck_image(column: _Column, e: str) -> str | None:
    """The integer a value adds to its column checksum, computed by DuckDB; None: an md5 digest."""
    kind = column.kind
    if kind == "integer" or (kind == "decimal" and _summed_decimal(column)):
        return e
    if kind == "boolean":
        return f"CAST({e} AS INTEGER)"
    if kind == "date":
        return f"date_diff('day', DATE '1970-01-01', {e})"
    if kind == "timestamp":
        return f"epoch_us({e})"
    if kind == "float":
        return f"CASE WHEN isnan({e}) THEN {_NAN_BITS} ELSE CAST(CAST(CAST({e} AS DOUBLE) AS BIT) AS BIGINT) END"
    return None


def _duck_checksums(
    relation: str,
    params: list[Any],
    columns: Sequence[_Column],
    *,
    per_column: bool = True,
    cur: duckdb.DuckDBPyConnection | None = None,
) -> _Checksums:
    """Checksums over ``relation`` (a table function or view), the stored columns cast to the source's types.

    Without ``per_column``, only the row count and the table hash.
    """
    cur = cur or reads.cursor()

    def digest(x: str) -> str:
        return f"coalesce(sum(CAST('0x' || substr(md5({x}), 1, 15) AS BIGINT)), 0)"

    try:
        typed = _typed_columns(cur, relation, params, columns)
        cells, row_text, sums = [], [], ["count(*)"]
        for i, (c, e) in enumerate(zip(columns, typed, strict=True)):
            cells.append(f"CASE WHEN {e} IS NULL THEN 'NULL' ELSE '=' || {_duck_text(c, e)} END AS t{i}")
            row_text += [f"strlen(t{i})", f"t{i}"] if c.kind == "text" else [f"t{i}"]
            image = _duck_image(c, e) if per_column else None
            if image is not None:
                cells.append(f"{image} AS v{i}")
                sums.append(f"sum(v{i}), count(v{i})")
            elif per_column:
                sums.append(digest(f"t{i}"))
        sums.insert(1, digest(f"concat_ws('|', {', '.join(row_text)})"))
        query = f"SELECT {', '.join(sums)} FROM (SELECT {', '.join(cells)} FROM {relation})"
        row = cur.execute(query, params).fetchone()
    except duckdb.Error as exc:
        raise EngineError(f"DuckDB could not compute the parity checksums: {_first_line(exc)}") from exc
    assert row is not None
    return _checksums(tuple(row), columns if per_column else None)
