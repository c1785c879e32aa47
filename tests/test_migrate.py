"""Migrations from a real PostgreSQL server and from Parquet folders: exact values, the parity report, refusals."""

from __future__ import annotations

import hashlib
import json
import math
import random
import struct
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from core import datasets, migrate, reads, rules, validation
from core.audit import list_events
from core.auth import SYSTEM, Role, add_member, create_user, get_user
from core.catalog import Catalog, DatasetRow
from core.errors import (
    AlreadyExists,
    EngineError,
    InvalidFile,
    InvalidInput,
    NotFound,
    PermissionDenied,
    ValidationFailed,
)
from core.projects import create_project

PROJECT = "mig"
REPORT_KEYS = {
    "source_rows",
    "delta_rows",
    "columns",
    "table_hash_source",
    "table_hash_delta",
    "match",
    "version",
}
ROWS = 300

TYPES_DDL = """
    id integer PRIMARY KEY,
    small smallint,
    big bigint,
    amount numeric(12,3),
    ratio numeric,
    score real,
    measure double precision,
    name text,
    code varchar(12),
    flag char(4),
    active boolean,
    born date,
    seen timestamp,
    at timestamptz,
    ref uuid
"""
TEXTS = [
    "",
    None,
    "Zoë Åsa",
    "😀 日本語 e\u0301",
    'O\'Brien, "Pat"',
    "line one\nline two\r\n",
    "tab\there",
    "\\N",
    "NULL",
    "  padded  ",
    "x" * 500,
]
FLOAT_SPECIALS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308, None]
REAL_SPECIALS = [math.nan, math.inf, -math.inf, -0.0, 1e-40, 3.4028234663852886e38, None]


def _random_double(rng: random.Random) -> float:
    while True:
        value = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(value):
            return float(value)


def type_rows(n: int = ROWS) -> list[tuple[Any, ...]]:
    """Deterministic rows covering every supported type, NULLs, extremes and awkward text."""
    rng = random.Random(5)
    rows = []
    for i in range(1, n + 1):
        big = {1: -(2**63), 2: 2**63 - 1}.get(i, i * 10**15 * (-1) ** i)
        amount = None if i % 17 == 0 else Decimal(rng.randrange(-(10**12), 10**12)).scaleb(-3)
        ratio: Decimal | None = {
            1: Decimal("12345678901234567890.123456789"),
            2: Decimal("2.500"),
            3: Decimal("-0.000000001"),
            4: None,
            5: Decimal("0"),
        }.get(i, Decimal(i).scaleb(-(i % 6)))
        score = REAL_SPECIALS[i - 1] if i <= len(REAL_SPECIALS) else rng.uniform(-1e6, 1e6)
        measure = FLOAT_SPECIALS[i - 1] if i <= len(FLOAT_SPECIALS) else _random_double(rng)
        name = TEXTS[i % len(TEXTS)] if i % 3 else f"person {i:03d}"
        offset = timezone(timedelta(hours=i % 13 - 6, minutes=30 * (i % 2)))
        at = None if i % 19 == 0 else datetime(2024, 3, 31, 1, 30, 0, i * 7, tzinfo=offset) + timedelta(hours=i)
        seen = {1: datetime(1969, 12, 31, 23, 59, 59, 999999), 2: datetime(1850, 6, 1, 12, 0)}.get(
            i, datetime(2000, 1, 1) + timedelta(seconds=i * 12345, microseconds=i * 7)
        )
        born = {1: date(1200, 3, 1), 2: date(9999, 12, 31)}.get(i, date(1900, 1, 1) + timedelta(days=i * 97))
        rows.append(
            (
                i,
                (i * 37) % 65536 - 32768,
                big,
                amount,
                ratio,
                score,
                measure,
                name,
                f"c{i:05d}",
                None if i % 7 == 0 else "ab",
                None if i % 5 == 0 else i % 2 == 0,
                None if i % 23 == 0 else born,
                None if i % 29 == 0 else seen,
                at,
                uuid.uuid5(uuid.NAMESPACE_URL, str(i)),
            )
        )
    return rows


@pytest.fixture(autouse=True)
def _no_temporary_files_left(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Temporary files go to a folder of the test's own, which must be empty afterwards."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    yield
    assert list(scratch.iterdir()) == []


@pytest.fixture(scope="module")
def dsn(postgres_url: str) -> str:
    """A libpq URL for the shared test server (the fixture gives a SQLAlchemy one)."""
    return postgres_url.replace("postgresql+psycopg://", "postgresql://")


def make_table(dsn: str, ddl: str, rows: list[tuple[Any, ...]], *, schema: str = "public") -> str:
    """A fresh table with a unique name (the server is shared); returns ``schema.name``."""
    name = f"mig_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(f"CREATE TABLE {schema}.{name} ({ddl})")
        if rows:
            with conn.cursor().copy(f"COPY {schema}.{name} FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
    return f"{schema}.{name}"


@pytest.fixture(scope="module")
def types_table(dsn: str) -> str:
    return make_table(dsn, TYPES_DDL, type_rows(), schema="sales")


def small_table(dsn: str, n: int = 20) -> str:
    return make_table(dsn, "id integer, name text", [(i, f"name {i}") for i in range(1, n + 1)])


@pytest.fixture
def project(catalog: Catalog) -> Catalog:
    create_project(catalog, PROJECT)
    return catalog


def source_rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    """The rows as PostgreSQL holds them (binary transfer: floats and reals arrive bit-exact)."""
    with psycopg.connect(dsn) as conn, conn.cursor(binary=True) as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY id")
        return cur.fetchall()


def delta_rows(path: str, columns: list[str]) -> list[dict[str, Any]]:
    select_list = ", ".join(reads.quote_ident(c) for c in columns)
    cur = reads.cursor()
    return cur.execute(f"SELECT {select_list} FROM delta_scan(?) ORDER BY id", [path]).to_arrow_table().to_pylist()


def same_value(expected: Any, actual: Any) -> bool:
    """Equal, floats compared by their bits (NaN and -0.0 included), naive timestamps as UTC."""
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, float):
        return isinstance(actual, float) and struct.pack("<d", expected) == struct.pack("<d", actual)
    if isinstance(expected, datetime) and expected.tzinfo is None:
        expected = expected.replace(tzinfo=UTC)
    if isinstance(expected, uuid.UUID):
        expected = str(expected)
    if isinstance(expected, Decimal):
        return isinstance(actual, Decimal) and expected == actual
    return bool(expected == actual) and type(expected) is type(actual)


def assert_nothing_created(catalog: Catalog, data_root: Path, dataset_id: str) -> None:
    assert not datasets.layout_for(PROJECT, dataset_id).root.exists()
    assert not (data_root / "projects").exists() or not any((data_root / "projects").rglob("*"))
    with catalog.session() as s:
        assert s.scalars(select(DatasetRow)).all() == []
    assert list_events(catalog, name="dataset_created") == []


# ---------------------------------------------------------------- PostgreSQL: the round trip


@pytest.mark.spark
def test_postgres_migration_keeps_every_value_exactly(  # type: ignore[no-untyped-def]
    spark, project: Catalog, dsn: str, types_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[str] = []  # the relations whose md5 checksums DuckDB computes
    original = migrate._duck_checksums

    def recorded(relation: str, *args: Any, **kwargs: Any) -> Any:
        hashed.append(relation)
        return original(relation, *args, **kwargs)

    monkeypatch.setattr(migrate, "_duck_checksums", recorded)
    seen: list[tuple[float, str]] = []
    report = migrate.migrate_postgres(
        project,
        PROJECT,
        "typed",
        dsn=dsn,
        table=types_table,
        key="id",
        progress=lambda fraction, message: seen.append((fraction, message)),
    )

    doc = report.to_json()
    assert set(doc) == REPORT_KEYS
    assert json.loads(json.dumps(doc)) == doc
    assert doc["match"] is True, doc
    assert (doc["source_rows"], doc["delta_rows"], doc["version"]) == (ROWS, ROWS, 0)
    names = [line.split()[0] for line in TYPES_DDL.strip().splitlines()]
    assert [c["name"] for c in doc["columns"]] == names  # the source's columns, not row_id
    for c in doc["columns"]:
        assert c["source_checksum"] == c["delta_checksum"]
        assert c["source_checksum"].isdigit() and int(c["source_checksum"]) > 0
    assert doc["table_hash_source"] == doc["table_hash_delta"]
    assert [f for f, _ in seen] == sorted(f for f, _ in seen) and seen[-1][0] == 1.0
    # Every type's stored values matched the fingerprint of the rows hashed on their way to Spark:
    # the stored table was not hashed again.
    assert len(hashed) == 1 and hashed[0].startswith('"oreo_migrate_'), hashed

    info = datasets.get_dataset(project, PROJECT, "typed", actor=SYSTEM)
    assert (info.rows, info.version, info.key_column) == (ROWS, 0, "id")
    types = {c.name: c.type for c in reads.table_schema(Path(info.path))}
    assert types == {
        "row_id": "VARCHAR",
        "id": "INTEGER",
        "small": "SMALLINT",
        "big": "BIGINT",
        "amount": "DECIMAL(12,3)",
        "ratio": "DECIMAL(38,9)",  # the unconstrained numeric: the data's scale, the widest precision
        "score": "FLOAT",
        "measure": "DOUBLE",
        "name": "VARCHAR",
        "code": "VARCHAR",
        "flag": "VARCHAR",
        "active": "BOOLEAN",
        "born": "DATE",
        "seen": "TIMESTAMP WITH TIME ZONE",
        "at": "TIMESTAMP WITH TIME ZONE",
        "ref": "VARCHAR",
    }

    expected = source_rows(dsn, types_table)
    actual = delta_rows(info.path, ["row_id", *names])
    assert len(actual) == len(expected) == ROWS
    for want, got in zip(expected, actual, strict=True):
        assert got["row_id"] == str(want[0])
        for name, value in zip(names, want, strict=True):
            assert same_value(value, got[name]), (name, want[0], value, got[name])
    # Spot checks of what the helpers above could blur.
    by_id = {r["id"]: r for r in actual}
    assert by_id[1]["flag"] == "ab  "  # char(n) keeps its padding
    assert by_id[1]["ratio"] == Decimal("12345678901234567890.123456789")
    assert math.copysign(1.0, by_id[4]["measure"]) == -1.0
    assert (by_id[11]["name"], by_id[1]["name"]) == ("", None)  # empty text and NULL stay apart
    assert by_id[1]["seen"] == datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert by_id[1]["at"] == datetime(2024, 3, 31, 2, 30, 0, 7, tzinfo=timezone(timedelta(hours=-5, minutes=30)))

    created = list_events(project, name="dataset_created")
    assert len(created) == 1


def test_dry_run_reports_and_creates_nothing(project: Catalog, dsn: str, types_table: str, data_root: Path) -> None:
    report = migrate.migrate_postgres(project, PROJECT, "typed", dsn=dsn, table=types_table, key="id", dry_run=True)
    assert report.match, report.to_json()
    assert (report.source_rows, report.delta_rows, report.version) == (ROWS, ROWS, None)
    assert report.to_json()["version"] is None
    assert_nothing_created(project, data_root, "typed")


def test_the_table_is_found_through_the_search_path(project: Catalog, dsn: str, data_root: Path) -> None:
    table = small_table(dsn)
    bare = table.split(".", 1)[1]
    report = migrate.migrate_postgres(project, PROJECT, "small", dsn=dsn, table=bare, dry_run=True)
    assert report.match and report.source_rows == 20
    # A SQLAlchemy URL, as OREO_DATABASE_URL spells it, is accepted too.
    sqlalchemy_url = dsn.replace("postgresql://", "postgresql+psycopg://")
    assert migrate.migrate_postgres(project, PROJECT, "small", dsn=sqlalchemy_url, table=table, dry_run=True).match


def test_a_row_id_column_may_be_the_key(project: Catalog, dsn: str) -> None:
    """Oreo stores row_id as text; the parity check compares the values, not their spelling."""
    table = make_table(dsn, "row_id numeric(8,2), v text", [(Decimal(i).scaleb(-1), f"v{i}") for i in range(1, 31)])
    report = migrate.migrate_postgres(project, PROJECT, "keyed", dsn=dsn, table=table, key="row_id", dry_run=True)
    assert report.match, report.to_json()
    assert [c.name for c in report.columns] == ["row_id", "v"]
    with pytest.raises(InvalidInput, match=r"column 'row_id'.*reserved.*--key row_id"):
        migrate.migrate_postgres(project, PROJECT, "keyed", dsn=dsn, table=table, dry_run=True)


# ---------------------------------------------------------------- the parity report catches differences


def _tampered_reader(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Make the reader hand on altered rows, as a buggy or lossy copy would."""
    original = migrate._copy_to_arrow

    def reader(*args: Any, **kwargs: Any) -> pa.Table:
        return change(original(*args, **kwargs))

    monkeypatch.setattr(migrate, "_copy_to_arrow", reader)


def _set_value(table: pa.Table, column: str, row: int, value: Any) -> pa.Table:
    values = table.column(column).to_pylist()
    values[row] = value
    index = table.column_names.index(column)
    return table.set_column(index, table.field(index), pa.array(values, type=table.field(index).type))


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("name", "altered"),
        ("name", None),
        ("score", -0.0),
        ("at", datetime(2030, 1, 1, tzinfo=UTC)),
        ("ratio", None),
        ("big", 0),
        ("amount", Decimal("0.001")),
        ("active", True),
        ("born", date(1970, 1, 1)),
        ("measure", math.nan),
    ],
)
def test_an_altered_cell_changes_its_column_checksum_and_the_table_hash(
    project: Catalog, dsn: str, types_table: str, monkeypatch: pytest.MonkeyPatch, column: str, value: Any
) -> None:
    _tampered_reader(monkeypatch, lambda t: _set_value(t, column, 4, value))
    report = migrate.migrate_postgres(project, PROJECT, "typed", dsn=dsn, table=types_table, key="id", dry_run=True)
    doc = report.to_json()
    assert doc["match"] is False
    assert report.mismatched_columns == [column]
    assert doc["source_rows"] == doc["delta_rows"] == ROWS
    assert doc["table_hash_source"] != doc["table_hash_delta"]


def _digest(text: str) -> int:
    return int(hashlib.md5(text.encode()).hexdigest()[:15], 16)


def test_the_checksums_are_the_documented_sums(project: Catalog, dsn: str) -> None:
    """Both engines compute the sums the module docstring defines, here worked out by hand."""
    table = make_table(
        dsn,
        "id int, n bigint, d numeric(6,2), f double precision, b boolean, day date, t text",
        [(1, -3, Decimal("1.50"), 1.5, True, date(1970, 1, 3), "a|b"), (2, None, None, -0.0, False, None, None)],
    )
    offset, null = 2**64, _digest("NULL")

    def bits(x: float) -> int:
        return int(struct.unpack(">q", struct.pack(">d", x))[0])

    want_columns = [
        str(1 + 2 + 2 * offset),
        str(-3 + offset + null),
        str(150 + offset + null),
        str(bits(1.5) + bits(-0.0) + 2 * offset),
        str(1 + 0 + 2 * offset),
        str(2 + offset + null),
        str(_digest("=a|b") + null),
    ]
    rows = ["=1|=-3|=1.50|=3ff8000000000000|=true|=2|4|=a|b", "=2|NULL|NULL|=8000000000000000|=false|NULL|4|NULL"]
    want_hash = str(sum(_digest(r) for r in rows))

    report = migrate.migrate_postgres(project, PROJECT, "sums", dsn=dsn, table=table, dry_run=True)
    assert report.match, report.to_json()
    assert [c.delta_checksum for c in report.columns] == want_columns
    assert report.table_hash_delta == report.table_hash_source == want_hash
    with migrate._connect(dsn) as conn:
        relation, label = migrate._resolve_table(conn, table)
        columns = migrate._profile(conn, relation, migrate._pg_columns(conn, relation, label), label)
        postgres = migrate._pg_checksums(conn, relation, columns, per_column=True)
    assert postgres.columns == tuple(want_columns) and postgres.table_hash == want_hash


def test_a_lost_row_of_zeros_changes_every_column_checksum(
    project: Catalog, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every value adds a positive amount to its column's sum, a zero or false too."""
    table = make_table(
        dsn,
        "id int, d numeric(4,1), f real, b boolean, t text",
        [(0, Decimal("0.0"), 0.0, False, ""), (1, Decimal("1.0"), 1.0, True, "x")],
    )
    _tampered_reader(monkeypatch, lambda t: t.filter(pc.not_equal(t.column("id"), 0)))
    report = migrate.migrate_postgres(project, PROJECT, "zeros", dsn=dsn, table=table, dry_run=True)
    assert (report.source_rows, report.delta_rows) == (2, 1)
    assert report.mismatched_columns == ["id", "d", "f", "b", "t"]


def test_a_lost_row_changes_the_counts(
    project: Catalog, dsn: str, types_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tampered_reader(monkeypatch, lambda t: t.slice(1))
    report = migrate.migrate_postgres(project, PROJECT, "typed", dsn=dsn, table=types_table, key="id", dry_run=True)
    assert report.match is False
    assert (report.source_rows, report.delta_rows) == (ROWS, ROWS - 1)
    assert report.mismatched_columns == [c.name for c in report.columns]


def test_swapping_values_between_rows_keeps_column_checksums_but_not_the_table_hash(
    project: Catalog, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = small_table(dsn)

    def swap(t: pa.Table) -> pa.Table:
        first, second = t.column("name")[0].as_py(), t.column("name")[1].as_py()
        return _set_value(_set_value(t, "name", 0, second), "name", 1, first)

    _tampered_reader(monkeypatch, swap)
    report = migrate.migrate_postgres(project, PROJECT, "small", dsn=dsn, table=table, dry_run=True)
    assert report.mismatched_columns == []
    assert report.table_hash_source != report.table_hash_delta
    assert report.match is False


def test_agreeing_sides_report_the_column_checksums_postgresql_would_compute(
    project: Catalog, dsn: str, types_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL hashes each cell only when the tables differ; when they agree, its column sums are the Delta's."""
    calls: list[bool] = []
    original = migrate._pg_checksums

    def counted(*args: Any, per_column: bool = False) -> Any:
        calls.append(per_column)
        return original(*args, per_column=per_column)

    monkeypatch.setattr(migrate, "_pg_checksums", counted)
    report = migrate.migrate_postgres(project, PROJECT, "typed", dsn=dsn, table=types_table, key="id", dry_run=True)
    assert report.match and calls == [False]

    with migrate._connect(dsn) as conn:
        relation, label = migrate._resolve_table(conn, types_table)
        columns = migrate._profile(conn, relation, migrate._pg_columns(conn, relation, label), label)
        full = original(conn, relation, columns, per_column=True)
    assert full.columns == tuple(c.source_checksum for c in report.columns)
    assert (full.rows, full.table_hash) == (report.source_rows, report.table_hash_source)


def test_differing_sides_get_the_source_column_checksums_from_postgresql(
    project: Catalog, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(dsn, "id int, a text, b text", [(1, "x", "=y"), (2, "x=", "y")])
    calls: list[bool] = []
    original = migrate._pg_checksums

    def counted(*args: Any, per_column: bool = False) -> Any:
        calls.append(per_column)
        return original(*args, per_column=per_column)

    monkeypatch.setattr(migrate, "_pg_checksums", counted)
    # Row 2's "=" moves from the end of a to the front of b. Run together without their lengths, the
    # cell texts would read alike ("=x==y"), the table hashes would agree and the change would go unseen.
    _tampered_reader(monkeypatch, lambda t: _set_value(_set_value(t, "a", 1, "x"), "b", 1, "=y"))
    report = migrate.migrate_postgres(project, PROJECT, "moved", dsn=dsn, table=table, dry_run=True)
    assert calls == [False, True]
    assert report.mismatched_columns == ["a", "b"]
    assert report.table_hash_source != report.table_hash_delta


def _lossy_writer(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Make the Delta write store altered rows, as a buggy writer would (the rows handed to it are right)."""
    original = datasets._write_main

    def writer(layout: Any, converted: Path, commit: Any) -> None:
        pq.write_table(change(pq.read_table(converted)), converted)
        original(layout, converted, commit)

    monkeypatch.setattr(datasets, "_write_main", writer)


def test_a_value_the_delta_write_alters_is_reported(  # type: ignore[no-untyped-def]
    spark, project: Catalog, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Delta side is the stored table's: rows altered after they were handed to the writer are caught."""
    table = small_table(dsn)
    _lossy_writer(monkeypatch, lambda t: _set_value(t, "name", 2, "altered"))
    report = migrate.migrate_postgres(project, PROJECT, "small", dsn=dsn, table=table, key="id")
    assert report.version == 0
    assert report.match is False
    assert report.mismatched_columns == ["name"]
    assert report.source_rows == report.delta_rows == 20
    assert report.table_hash_source != report.table_hash_delta


def test_a_row_the_delta_write_loses_is_reported(  # type: ignore[no-untyped-def]
    spark, project: Catalog, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = small_table(dsn)
    _lossy_writer(monkeypatch, lambda t: t.slice(1))
    report = migrate.migrate_postgres(project, PROJECT, "small", dsn=dsn, table=table)
    assert report.match is False
    assert (report.source_rows, report.delta_rows) == (20, 19)
    assert report.mismatched_columns == ["id", "name"]


def test_the_default_rules_come_from_the_rows_written_without_reading_the_table_again(  # type: ignore[no-untyped-def]
    spark, project: Catalog, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-flight DuckDB pass infers the warning rules; they are the ones the stored table gives."""
    table = make_table(
        dsn, "id integer, n integer, code text", [(i, i % 7, ("AB", "CD", "EF")[i % 3]) for i in range(1, 41)]
    )
    stored_reads: list[Any] = []
    original = rules.infer_rules

    def recorded(*args: Any) -> Any:
        stored_reads.append(args)
        return original(*args)

    monkeypatch.setattr(rules, "infer_rules", recorded)
    report = migrate.migrate_postgres(project, PROJECT, "ruled", dsn=dsn, table=table, key="id")
    assert report.match and stored_reads == []
    layout = datasets.layout_for(PROJECT, "ruled")
    inferred = [e for e in validation.load_suite(layout)["expectations"] if rules.is_inferred(e)]
    expected = original(layout.main, report.version, reads.table_schema(layout.main, report.version))
    assert inferred == expected
    kinds = {(e["type"], e["kwargs"]["column"]) for e in inferred}
    assert {("expect_column_values_to_be_unique", "id"), ("expect_column_values_to_be_in_set", "code")} <= kinds


def test_rules_are_inferred_from_the_stored_table_when_the_write_altered_it(  # type: ignore[no-untyped-def]
    spark, project: Catalog, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(dsn, "id integer, code text", [(i, ("AB", "CD")[i % 2]) for i in range(1, 21)])
    _lossy_writer(monkeypatch, lambda t: _set_value(t, "code", 2, "ZZ"))
    report = migrate.migrate_postgres(project, PROJECT, "altered", dsn=dsn, table=table, key="id")
    assert report.mismatched_columns == ["code"]
    layout = datasets.layout_for(PROJECT, "altered")
    in_set = [
        e["kwargs"]["value_set"]
        for e in validation.load_suite(layout)["expectations"]
        if rules.is_inferred(e) and e["type"] == "expect_column_values_to_be_in_set"
    ]
    assert in_set == [["AB", "CD", "ZZ"]]


def test_a_negative_zero_the_delta_write_flips_is_reported(  # type: ignore[no-untyped-def]
    spark, project: Catalog, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB's value hash takes -0.0 for 0.0; the written table's fingerprint must not."""
    table = make_table(dsn, "id int, x double precision", [(1, -0.0), (2, 1.5)])
    _lossy_writer(monkeypatch, lambda t: _set_value(t, "x", 0, 0.0))
    report = migrate.migrate_postgres(project, PROJECT, "zero", dsn=dsn, table=table, key="id")
    assert report.match is False
    assert report.mismatched_columns == ["x"]


def test_null_and_empty_text_are_told_apart(project: Catalog, dsn: str) -> None:
    table = make_table(dsn, "id int, t text", [(1, ""), (2, None)])
    honest = migrate.migrate_postgres(project, PROJECT, "t", dsn=dsn, table=table, dry_run=True)
    assert honest.match
    with pytest.MonkeyPatch.context() as mp:
        _tampered_reader(mp, lambda t: _set_value(t, "t", 0, None))
        assert migrate.migrate_postgres(
            project, PROJECT, "t", dsn=dsn, table=table, dry_run=True
        ).mismatched_columns == ["t"]


# ---------------------------------------------------------------- PostgreSQL: refusals, nothing left behind


def _closed_port_dsn() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://oreo@127.0.0.1:{port}/oreo"


def test_connection_failures_are_one_line_input_errors(project: Catalog, dsn: str, data_root: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DO $$ BEGIN CREATE ROLE mig_nologin NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    base = dsn.rsplit("/", 1)[0]
    cases = [
        (_closed_port_dsn(), r"cannot connect to PostgreSQL: .*(refused|failed)"),
        (dsn.replace("oreo@", "mig_nologin@"), r"cannot connect to PostgreSQL: .*not permitted to log in"),
        (f"{base}/no_such_db", r'cannot connect to PostgreSQL: .*database "no_such_db" does not exist'),
        ("host=127.0.0.1 port", r"invalid PostgreSQL DSN"),
        ("", r"DSN is empty"),
    ]
    for bad, message in cases:
        with pytest.raises(InvalidInput, match=message) as caught:
            migrate.migrate_postgres(project, PROJECT, "d", dsn=bad, table="t")
        assert "\n" not in str(caught.value)
    assert_nothing_created(project, data_root, "d")


def test_missing_table(project: Catalog, dsn: str, data_root: Path) -> None:
    with pytest.raises(NotFound, match=r"PostgreSQL table 'public.no_such_table' not found \(names are case"):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table="public.no_such_table")
    with pytest.raises(NotFound, match=r"'no_schema.t' not found"):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table="no_schema.t")
    with pytest.raises(InvalidInput, match=r"invalid table name"):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table="public.")
    assert_nothing_created(project, data_root, "d")


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        (
            "id int, tags text[]",
            r"column 'tags' of public\.mig_\w+ has the PostgreSQL type text\[\], which oreo migrate",
        ),
        ("id int, span interval", r"column 'span' .* type interval"),
        ("id int, big numeric(40,2)", r"column 'big' .* numeric\(40,2\); Delta decimals hold at most 38 digits"),
        ('id int, "first name" text', r"column name 'first name' .* contains ' '"),
        ('id int, "_op" text', r"column '_op' in public\.mig_\w+ has a name Oreo reserves"),
        ('id int, "_changed" text', r"column '_changed' in public\.mig_\w+ has a name Oreo reserves"),
        ('id int, "a`b" text', r"column 'a`b' in public\.mig_\w+ contains a backtick"),
        ("id int, pos point", r"column 'pos' .* type point"),
    ],
)
def test_columns_delta_cannot_hold_are_refused_before_reading(
    project: Catalog, dsn: str, data_root: Path, ddl: str, message: str
) -> None:
    table = make_table(dsn, ddl, [])
    with pytest.raises((InvalidInput, InvalidFile), match=message):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table=table)
    assert_nothing_created(project, data_root, "d")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (Decimal("1" * 30 + "." + "1" * 10), r"up to 30 integer and 10 fraction digits, which does not fit decimal"),
        (Decimal("NaN"), r"1 NaN or infinite numeric value"),
    ],
)
def test_unconstrained_numerics_that_fit_no_decimal_are_refused(
    project: Catalog, dsn: str, data_root: Path, value: Decimal, message: str
) -> None:
    table = make_table(dsn, "id int, n numeric", [(1, Decimal("1.5")), (2, value)])
    with pytest.raises(InvalidInput, match=message):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table=table)
    assert_nothing_created(project, data_root, "d")


def test_infinite_dates_are_refused(project: Catalog, dsn: str, data_root: Path) -> None:
    table = make_table(dsn, "id int, d date", [(1, date(2024, 1, 1))])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {table} VALUES (2, 'infinity')")
    with pytest.raises(InvalidInput, match=r"column 'd' .* 1 value\(s\) that are infinite or outside"):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table=table)
    assert_nothing_created(project, data_root, "d")


def test_target_checks_come_before_the_source_is_touched(project: Catalog, dsn: str, data_root: Path) -> None:
    """Bad ids, a non-admin and an existing dataset are refused even with an unreachable source."""
    unreachable = _closed_port_dsn()
    with pytest.raises(InvalidInput, match=r"invalid dataset id 'Bad Id'"):
        migrate.migrate_postgres(project, PROJECT, "Bad Id", dsn=unreachable, table="t")
    with pytest.raises(InvalidInput, match=r"invalid project id"):
        migrate.migrate_postgres(project, "../up", "d", dsn=unreachable, table="t")
    with pytest.raises(NotFound, match=r"unknown project 'nope'"):
        migrate.migrate_postgres(project, "nope", "d", dsn=unreachable, table="t")

    create_user(project, "ed", password="ed-password-1")
    add_member(project, PROJECT, "ed", Role.APPROVER)
    create_user(project, "stranger", password="stranger-password-1")
    for username, held in (("ed", "has the approver role"), ("stranger", "is not a member")):
        with pytest.raises(
            PermissionDenied, match=rf"'{username}' cannot migrate a table .* needs the admin role .*{held}"
        ):
            migrate.migrate_postgres(
                project, PROJECT, "d", dsn=unreachable, table="t", actor=get_user(project, username)
            )
    assert_nothing_created(project, data_root, "d")

    with project.session() as s:
        s.add(DatasetRow(project_id=PROJECT, dataset_id="taken", key_column=None, created_by="system"))
    with pytest.raises(AlreadyExists, match=r"dataset mig/taken already exists"):
        migrate.migrate_postgres(project, PROJECT, "taken", dsn=unreachable, table="t")
    stray = datasets.layout_for(PROJECT, "stray").root
    (stray / "main").mkdir(parents=True)
    (stray / "main" / "keep.txt").write_text("mine")
    with pytest.raises(AlreadyExists, match=r"already exists but is not in the catalog"):
        migrate.migrate_postgres(project, PROJECT, "stray", dsn=unreachable, table="t")
    assert (stray / "main" / "keep.txt").read_text() == "mine"  # never touched


def test_an_admin_of_the_project_may_migrate(project: Catalog, dsn: str) -> None:
    create_user(project, "ada", password="ada-password-1")
    add_member(project, PROJECT, "ada", Role.ADMIN)
    report = migrate.migrate_postgres(
        project, PROJECT, "d", dsn=dsn, table=small_table(dsn), dry_run=True, actor=get_user(project, "ada")
    )
    assert report.match


@pytest.mark.parametrize("dry_run", [True, False])
def test_bad_keys_are_refused_and_nothing_is_left(project: Catalog, dsn: str, data_root: Path, dry_run: bool) -> None:
    table = make_table(dsn, "id int, k text", [(1, "a"), (2, "b"), (3, "a"), (4, None)])
    with pytest.raises(InvalidInput, match=r"key column 'nope' is not in public\.mig_\w+; columns are: id, k"):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table=table, key="nope", dry_run=dry_run)
    with pytest.raises(ValidationFailed, match=r"key column 'k' has 1 empty value"):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table=table, key="k", dry_run=dry_run)
    no_nulls = make_table(dsn, "id int, k text", [(1, "a"), (2, "b"), (3, "a")])
    with pytest.raises(ValidationFailed, match=r"key column 'k' has 1 duplicated value\(s\): a"):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table=no_nulls, key="k", dry_run=dry_run)
    assert_nothing_created(project, data_root, "d")


def test_an_empty_table_migrates_to_zero_rows_in_a_dry_run(project: Catalog, dsn: str) -> None:
    report = migrate.migrate_postgres(
        project, PROJECT, "d", dsn=dsn, table=make_table(dsn, TYPES_DDL, []), dry_run=True
    )
    assert report.match
    assert (report.source_rows, report.delta_rows) == (0, 0)
    assert {c.source_checksum for c in report.columns} == {"0"}


def test_a_failing_source_checksum_is_an_engine_error(
    project: Catalog, dsn: str, data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(conn: psycopg.Connection[Any], *args: Any) -> Any:
        conn.execute("SELECT 1 / 0")

    monkeypatch.setattr(migrate, "_pg_checksums", failing)
    with pytest.raises(EngineError, match=r"PostgreSQL failed while reading public\.mig_\w+: division by zero"):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table=small_table(dsn), dry_run=True)
    assert_nothing_created(project, data_root, "d")


def test_a_failed_write_cancels_the_source_checksums(
    project: Catalog, dsn: str, data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL hashes while the data is written; a failed write does not wait for the hashing."""

    def slow(conn: psycopg.Connection[Any], *args: Any) -> Any:
        conn.execute("SELECT pg_sleep(600)")

    monkeypatch.setattr(migrate, "_pg_checksums", slow)
    table = make_table(dsn, "id int, k text", [(1, "a"), (2, "a")])
    started = time.monotonic()
    with pytest.raises(ValidationFailed, match=r"duplicated value"):
        migrate.migrate_postgres(project, PROJECT, "d", dsn=dsn, table=table, key="k")
    assert time.monotonic() - started < 300  # pg_sleep(600) was cancelled, not waited for
    with psycopg.connect(dsn) as conn:
        running = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(600)%'")
        assert running.fetchone() == (0,)
    assert_nothing_created(project, data_root, "d")


# ---------------------------------------------------------------- Parquet folders


def parquet_rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, type=pa.int64()),
            "name": pa.array([TEXTS[i % len(TEXTS)] for i in ids], type=pa.string()),
            "price": pa.array([None if i % 9 == 0 else Decimal(i).scaleb(-2) for i in ids], type=pa.decimal128(10, 2)),
            "ratio": pa.array([i / 7 if i % 4 else None for i in ids], type=pa.float32()),
            "ok": pa.array([None if i % 5 == 0 else i % 2 == 0 for i in ids], type=pa.bool_()),
            "day": pa.array([date(2020, 1, 1) + timedelta(days=i) for i in ids], type=pa.date32()),
            # Naive nanoseconds: stored as UTC microseconds.
            "at": pa.array(
                [datetime(2024, 1, 1) + timedelta(seconds=i, microseconds=i) for i in ids], type=pa.timestamp("ns")
            ),
            "small": pa.array([i % 200 for i in ids], type=pa.uint8()),
        }
    )


def write_folder(root: Path, parts: list[pa.Table]) -> Path:
    root.mkdir(parents=True)
    for i, part in enumerate(parts):
        target = root / ("nested" if i % 2 else "") / f"part-{i}.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, target)
    # Spark's and Hadoop's bookkeeping is skipped.
    (root / "_SUCCESS").write_text("")
    (root / "_delta_log").mkdir()
    pq.write_table(pa.table({"other": [1]}), root / "_delta_log" / "00.checkpoint.parquet")
    (root / ".hidden.parquet").write_bytes(b"not parquet")
    return root


@pytest.mark.spark
def test_parquet_folder_of_several_files_migrates_exactly(spark, project: Catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    parts = [parquet_rows(1, 120), parquet_rows(121, 90), parquet_rows(211, 60)]
    folder = write_folder(tmp_path / "export", parts)
    report = migrate.migrate_parquet(project, folder, PROJECT, "from_files")
    doc = report.to_json()
    assert set(doc) == REPORT_KEYS
    assert doc["match"] is True, doc
    assert (doc["source_rows"], doc["delta_rows"], doc["version"]) == (270, 270, 0)
    assert [c["name"] for c in doc["columns"]] == parts[0].column_names

    info = datasets.get_dataset(project, PROJECT, "from_files", actor=SYSTEM)
    got = delta_rows(info.path, ["row_id", *parts[0].column_names])
    want = pa.concat_tables(parts).sort_by("id").to_pylist()
    assert len({r["row_id"] for r in got}) == 270  # no key: a UUID per row
    assert all(uuid.UUID(r["row_id"]) for r in got)
    for w, g in zip(want, got, strict=True):
        assert g["at"] == w["at"].replace(tzinfo=UTC)  # ns -> us exactly (whole microseconds here)
        for name in ("id", "name", "price", "ok", "day", "small"):
            assert w[name] == g[name], (name, w, g)
        assert same_value(w["ratio"], g["ratio"])


def test_parquet_dry_run_with_a_key_creates_nothing(project: Catalog, tmp_path: Path, data_root: Path) -> None:
    folder = write_folder(tmp_path / "export", [parquet_rows(1, 50), parquet_rows(51, 50)])
    report = migrate.migrate_parquet(project, folder, PROJECT, "from_files", key="id", dry_run=True)
    assert report.match and report.version is None and report.source_rows == 100
    assert_nothing_created(project, data_root, "from_files")


def test_parquet_mismatch_is_reported(project: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_folder(tmp_path / "export", [parquet_rows(1, 50)])
    original = migrate._read_parquet_files
    monkeypatch.setattr(
        migrate, "_read_parquet_files", lambda *a: _set_value(original(*a), "price", 3, Decimal("0.01"))
    )
    report = migrate.migrate_parquet(project, folder, PROJECT, "from_files", dry_run=True)
    assert report.match is False and report.mismatched_columns == ["price"]


def test_parquet_folder_refusals(project: Catalog, tmp_path: Path, data_root: Path) -> None:
    good = parquet_rows(1, 10)
    with pytest.raises(InvalidInput, match=r"folder not found"):
        migrate.migrate_parquet(project, tmp_path / "missing", PROJECT, "d")
    a_file = tmp_path / "one.parquet"
    pq.write_table(good, a_file)
    with pytest.raises(InvalidInput, match=r"one\.parquet is not a folder"):
        migrate.migrate_parquet(project, a_file, PROJECT, "d")
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "notes.csv").write_text("a\n1\n")
    with pytest.raises(InvalidInput, match=r"no \*\.parquet files under .*empty"):
        migrate.migrate_parquet(project, empty, PROJECT, "d")

    corrupt = write_folder(tmp_path / "corrupt", [good])
    (corrupt / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(InvalidFile, match=r"broken\.parquet is not a readable Parquet file"):
        migrate.migrate_parquet(project, corrupt, PROJECT, "d")

    mixed = write_folder(tmp_path / "mixed", [good, good.set_column(1, "name", pa.array(range(10)))])
    differ = r"part-0\.parquet has another schema than nested/part-1\.parquet \(name int64 vs name string\)"
    with pytest.raises(InvalidInput, match=differ):
        migrate.migrate_parquet(project, mixed, PROJECT, "d")

    nested = write_folder(tmp_path / "nested", [pa.table({"id": [1], "tags": [["a", "b"]]})])
    with pytest.raises(
        InvalidInput, match=r"column 'tags' has the Parquet type list<\w+: string>, which oreo migrate cannot carry"
    ):
        migrate.migrate_parquet(project, nested, PROJECT, "d")

    hive = tmp_path / "hive"
    (hive / "year=2024").mkdir(parents=True)
    pq.write_table(good, hive / "year=2024" / "part-0.parquet")
    with pytest.raises(InvalidInput, match=r"partitioned Hive-style \(year=2024\)"):
        migrate.migrate_parquet(project, hive, PROJECT, "d")

    reserved = write_folder(tmp_path / "reserved", [good.rename_columns(["row_id", *good.column_names[1:]])])
    with pytest.raises(InvalidInput, match=r"column 'row_id'.*reserved"):
        migrate.migrate_parquet(project, reserved, PROJECT, "d")
    with pytest.raises(InvalidInput, match=r"key column 'nope' is not in"):
        migrate.migrate_parquet(project, write_folder(tmp_path / "k", [good]), PROJECT, "d", key="nope")

    big = write_folder(tmp_path / "big", [pa.table({"id": pa.array([2**64 - 1], type=pa.uint64())})])
    with pytest.raises(InvalidInput, match=r"column 'id' is uint64 with values that do not fit bigint exactly"):
        migrate.migrate_parquet(project, big, PROJECT, "d")
    assert_nothing_created(project, data_root, "d")


def test_parquet_target_checks_come_first(project: Catalog, tmp_path: Path) -> None:
    create_user(project, "ed", password="ed-password-1")
    with pytest.raises(PermissionDenied, match=r"'ed' cannot migrate a table into a dataset"):
        migrate.migrate_parquet(project, tmp_path / "missing", PROJECT, "d", actor=get_user(project, "ed"))
    with pytest.raises(InvalidInput, match=r"invalid dataset id"):
        migrate.migrate_parquet(project, tmp_path / "missing", PROJECT, "BAD")
