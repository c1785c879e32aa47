"""Property: random schemas of every type Oreo accepts survive create, edit, approve and export, or are refused."""

from __future__ import annotations

import csv
import datetime as dt
import math
from dataclasses import dataclass
from decimal import Context, Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from core.catalog import Catalog, DatasetRow
from core.errors import InvalidFile, InvalidInput
from core.values import canonical_text
from tests.test_values_property import TEXTS, _stored, _value

UTC_US = pa.timestamp("us", tz="UTC")
_YEARS = st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))
_MOMENTS = st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30))


@dataclass(frozen=True)
class Kind:
    """An Arrow type a file may have, what Oreo keeps it as, and the values to draw."""

    arrow: pa.DataType
    stored: pa.DataType  # the Arrow type ``main`` is read back as
    duck_type: str
    values: st.SearchStrategy[Any]


def _ints(arrow: pa.DataType, stored: pa.DataType, duck_type: str, low: int, high: int) -> Kind:
    return Kind(arrow, stored, duck_type, st.sampled_from([low, high, 0]) | st.integers(low, high))


def _decimal(precision: int, scale: int) -> Kind:
    most = 10**precision - 1
    exact = Context(prec=precision + 1)  # the default context keeps 28 digits and would round a 38-digit value
    units = st.sampled_from([most, -most, 0]) | st.integers(-most, most)
    values = units.map(lambda n: Decimal(n).scaleb(-scale, exact))
    t = pa.decimal128(precision, scale)
    return Kind(t, t, f"DECIMAL({precision},{scale})", values)


def _timestamp(unit: str, tz: str | None) -> Kind:
    # Nanoseconds since 1970 in an int64 span only the years 1678 to 2261.
    moments = st.datetimes(dt.datetime(1678, 1, 1), dt.datetime(2261, 12, 31)) if unit == "ns" else _MOMENTS
    moments = moments if tz is None else moments.map(lambda m: m.replace(tzinfo=dt.UTC))
    return Kind(pa.timestamp(unit, tz=tz), UTC_US, "TIMESTAMP WITH TIME ZONE", moments)


SCALARS: list[Kind] = [
    _ints(pa.int8(), pa.int8(), "TINYINT", -(2**7), 2**7 - 1),
    _ints(pa.int16(), pa.int16(), "SMALLINT", -(2**15), 2**15 - 1),
    _ints(pa.int32(), pa.int32(), "INTEGER", -(2**31), 2**31 - 1),
    _ints(pa.int64(), pa.int64(), "BIGINT", -(2**63), 2**63 - 1),
    _ints(pa.uint8(), pa.int64(), "BIGINT", 0, 2**8 - 1),
    _ints(pa.uint32(), pa.int64(), "BIGINT", 0, 2**32 - 1),
    _ints(pa.uint64(), pa.int64(), "BIGINT", 0, 2**64 - 1),
    Kind(pa.float32(), pa.float32(), "FLOAT", st.floats(width=32)),
    Kind(pa.float64(), pa.float64(), "DOUBLE", st.floats()),
    _decimal(1, 0),
    _decimal(10, 2),
    _decimal(18, 18),
    _decimal(38, 10),
    Kind(pa.bool_(), pa.bool_(), "BOOLEAN", st.booleans()),
    Kind(pa.string(), pa.string(), "VARCHAR", st.text(max_size=16)),
    Kind(pa.large_string(), pa.string(), "VARCHAR", st.text(max_size=16)),
    Kind(pa.date32(), pa.date32(), "DATE", _YEARS),
    Kind(pa.date64(), pa.date32(), "DATE", _YEARS),
    _timestamp("us", "UTC"),
    _timestamp("us", None),
    _timestamp("ms", "UTC"),
    _timestamp("ns", None),
]


@dataclass(frozen=True)
class Drawn:
    """A file's table, the kind of each column ``c<i>``, and the text typed into each later."""

    table: pa.Table
    kinds: list[Kind]
    typed: list[str]


# Strings that look like a value but are not one of the column's exactly; drawn often.
TRICKY = st.sampled_from(["1.5", "2.5", "-1.4e0", "1e400", "2024-01-01 10:00+02:00", "2024-02-30", "", " 7 "])


@st.composite
def datasets(draw: st.DrawFn) -> Drawn:
    """A key column ``id`` and 1-5 columns of random kinds, with 1-4 rows of random values or NULLs."""
    kinds = draw(st.lists(st.sampled_from(SCALARS), min_size=1, max_size=5))
    ids = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=4, unique=True))
    columns: dict[str, pa.Array] = {"id": pa.array(ids, pa.int64())}
    for i, kind in enumerate(kinds):
        values = draw(st.lists(st.none() | kind.values, min_size=len(ids), max_size=len(ids)))
        if kind.arrow == pa.timestamp("ns"):
            # Nanoseconds Python's datetime cannot hold; Spark keeps microseconds.
            nanos = draw(st.lists(st.integers(0, 999), min_size=len(ids), max_size=len(ids)))
            epoch = [None if v is None else _epoch_us(v) * 1000 + n for v, n in zip(values, nanos, strict=True)]
            columns[f"c{i}"] = pa.array(epoch, pa.int64()).cast(kind.arrow)
        else:
            columns[f"c{i}"] = pa.array(values, kind.arrow)
    typed = [draw(TRICKY | TEXTS | kind.values.map(str)) for kind in kinds]
    return Drawn(pa.table(columns), kinds, typed)


def _every_kind(text: str) -> Drawn:
    """One row with a column of every kind, NULL, and ``text`` typed into each."""
    columns = {"id": pa.array([7], pa.int64())} | {f"c{i}": pa.nulls(1, k.arrow) for i, k in enumerate(SCALARS)}
    return Drawn(pa.table(columns), SCALARS, [text] * len(SCALARS))


def _unchanged_text() -> Drawn:
    """An empty string typed over an empty string: no change, so nothing to submit."""
    text = next(k for k in SCALARS if k.arrow == pa.string())
    table = pa.table({"id": pa.array([7], pa.int64()), "c0": pa.array([""], pa.string())})
    return Drawn(table, [text], [""])


def _epoch_us(moment: dt.datetime) -> int:
    naive = moment.replace(tzinfo=None)
    return (naive - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


def _stored_exactly(column: pa.Array, kind: Kind) -> pa.Array | None:
    """``column`` as ``kind.stored`` when every value converts exactly (the oracle), else None."""
    if pa.types.is_timestamp(column.type) and column.type.unit == "ns":
        # Spark keeps microseconds: nanoseconds that would be cut make the file refused.
        try:
            column = column.cast(pa.timestamp("us", tz=column.type.tz))
        except pa.ArrowInvalid:
            return None
    if pa.types.is_timestamp(column.type) and column.type.tz is None:
        column = pc.assume_timezone(column, "UTC")
    try:
        return column.cast(kind.stored, safe=True)
    except pa.ArrowInvalid:
        return None


def _same(actual: list[Any], expected: list[Any]) -> bool:
    nan = object()
    clean = [[nan if isinstance(v, float) and math.isnan(v) else v for v in values] for values in (actual, expected)]
    return clean[0] == clean[1]


@pytest.fixture
def people(catalog: Catalog) -> Catalog:
    from core.auth import Role, add_member, create_user
    from core.projects import create_project

    create_project(catalog, "demo")
    for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER)):
        create_user(catalog, name, password=f"{name}-password-1")
        add_member(catalog, "demo", name, role)
    return catalog


@pytest.mark.spark
@settings(
    max_examples=6,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking re-runs Spark for many minutes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(drawn=datasets())
@example(drawn=_every_kind("1.5"))
@example(drawn=_unchanged_text())
def test_a_random_schema_round_trips_exactly_or_is_refused(
    spark,  # type: ignore[no-untyped-def]
    people: Catalog,
    tmp_path_factory: pytest.TempPathFactory,
    drawn: Drawn,
) -> None:
    from core import change_requests, history, merge, reads, sessions
    from core.auth import get_user
    from core.datasets import create_dataset, layout_for

    table, kinds = drawn.table, drawn.kinds
    folder = tmp_path_factory.mktemp("schema")
    dataset = folder.name.replace("_", "-").lower()[:40]
    pq.write_table(table, folder / "random.parquet")
    expected = {f"c{i}": _stored_exactly(table.column(f"c{i}").combine_chunks(), k) for i, k in enumerate(kinds)}

    try:
        create_dataset(people, "demo", dataset, folder / "random.parquet", key="id")
    except (InvalidFile, InvalidInput) as exc:
        assert "\n" not in str(exc)
        inexact = [name for name, values in expected.items() if values is None]
        assert inexact and any(repr(name) in str(exc) for name in inexact), (str(exc), kinds)
        assert not layout_for("demo", dataset).root.exists()
        return
    assert all(values is not None for values in expected.values()), "a value that changes must be refused"

    # Read back: the same types and exactly the same values.
    main = layout_for("demo", dataset).main
    types = {c.name: c.type for c in reads.table_schema(main)}
    assert {name: types[name] for name in expected} == {f"c{i}": k.duck_type for i, k in enumerate(kinds)}
    read = reads.cursor().execute("SELECT * FROM delta_scan(?) ORDER BY id", [str(main)]).to_arrow_table()
    order = pc.sort_indices(table.column("id"))
    for name, values in expected.items():
        assert values is not None
        assert _same(read.column(name).to_pylist(), values.take(order).to_pylist()), name

    # One edit per column with a random string: refused, or kept exactly as typed.
    ed, row_id = get_user(people, "ed"), str(table.column("id")[0].as_py())
    session = sessions.open_session(people, "demo", dataset, actor=ed)
    typed: dict[str, str] = {}
    meant: dict[str, Any] = {}  # what the text means, parsed without DuckDB (the oracle)
    for i, (kind, text) in enumerate(zip(kinds, drawn.typed, strict=True)):
        name = f"c{i}"
        try:
            sessions.apply_edits(people, session.session_id, [sessions.SetCell(row_id, name, text)], actor=ed)
        except InvalidInput as exc:
            assert "\n" not in str(exc) and repr(name) in str(exc)
            with pytest.raises(InvalidInput):
                canonical_text(text, column=name, duck_type=kind.duck_type)
            continue
        canonical = canonical_text(text, column=name, duck_type=kind.duck_type)
        assert canonical is not None
        typed[name] = canonical
        meant[name] = _value(kind.duck_type, text)
    # Text equal to the stored value (an empty string over an empty string) is no change.
    if not sessions.effective_edits(layout_for("demo", dataset), session.session_id):
        return
    cr = change_requests.submit_change_request(people, session.session_id, actor=ed)
    merge.approve_change_request(people, cr.id, actor=get_user(people, "al"))

    as_text = ", ".join(f"CAST({reads.quote_ident(n)} AS VARCHAR)" for n in typed)
    row = reads.cursor().execute(f"SELECT {as_text} FROM delta_scan(?) WHERE row_id = ?", [str(main), row_id])
    merged = dict(zip(typed, row.fetchone() or (), strict=True))
    assert merged == typed
    assert {n: _stored(_duck_type(kinds, n), str(v)) for n, v in merged.items()} == meant

    # Export, as `oreo export` does, to Parquet and to CSV.
    parquet_out, csv_out = folder / "out.parquet", folder / "out.csv"
    history.export_version(people, "demo", dataset, parquet_out, actor=ed)
    history.export_version(people, "demo", dataset, csv_out, actor=ed, raw=True)  # raw: text exactly as stored
    exported = reads.cursor().execute(
        f"SELECT {as_text} FROM read_parquet(?) WHERE row_id = ?", [str(parquet_out), row_id]
    )
    assert dict(zip(typed, exported.fetchone() or (), strict=True)) == typed
    with csv_out.open(newline="", encoding="utf-8") as fh:
        line = next(r for r in csv.DictReader(fh) if r["row_id"] == row_id)
    assert {n: canonical_text(line[n], column=n, duck_type=_duck_type(kinds, n)) for n in typed} == typed
    assert {n: _stored(_duck_type(kinds, n), line[n]) for n in typed} == meant


def _duck_type(kinds: list[Kind], name: str) -> str:
    return kinds[int(name[1:])].duck_type


# ---------------------------------------------------------------- types Oreo refuses at create

_SCALAR_ARROW = st.sampled_from([pa.int32(), pa.string(), pa.float64(), pa.bool_(), pa.date32()])
REFUSED = st.one_of(
    _SCALAR_ARROW.map(pa.list_),
    _SCALAR_ARROW.map(pa.large_list),
    _SCALAR_ARROW.map(lambda t: pa.list_(t, 2)),
    _SCALAR_ARROW.map(lambda t: pa.struct([pa.field("inner", t)])),
    _SCALAR_ARROW.map(lambda t: pa.map_(pa.string(), t)),
    _SCALAR_ARROW.map(lambda t: pa.list_(pa.struct([pa.field("a", t), pa.field("b", pa.list_(t))]))),
    st.sampled_from([pa.time32("s"), pa.time64("us"), pa.duration("us")]),  # Parquet cannot hold intervals
)
_NAMES = st.text(st.characters(categories=["L", "N"]) | st.sampled_from("_-."), min_size=1, max_size=12).filter(
    lambda n: n.lower() not in ("id", "row_id")
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arrow=REFUSED, name=_NAMES, rows=st.integers(0, 3))
def test_nested_and_unsupported_types_are_refused_at_create_naming_the_column(
    catalog: Catalog,
    data_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
    arrow: pa.DataType,
    name: str,
    rows: int,
) -> None:
    from core.datasets import create_dataset
    from core.projects import create_project

    if not catalog_has_project(catalog):
        create_project(catalog, "demo")
    folder = tmp_path_factory.mktemp("refused")
    source = pa.table({"id": pa.array(range(rows), pa.int64()), name: pa.nulls(rows, arrow)})
    pq.write_table(source, folder / "x.parquet")

    with pytest.raises((InvalidFile, InvalidInput)) as refused:
        create_dataset(catalog, "demo", "nested", folder / "x.parquet", key="id")

    assert "\n" not in str(refused.value) and repr(name) in str(refused.value)
    assert not (data_root / "projects" / "demo" / "datasets").exists()
    with catalog.session() as s:
        assert s.scalar(select(func.count()).select_from(DatasetRow)) == 0


def catalog_has_project(catalog: Catalog) -> bool:
    from core.catalog import ProjectRow

    with catalog.session() as s:
        return s.get(ProjectRow, "demo") is not None


def test_an_unsigned_value_over_the_largest_bigint_is_refused_naming_the_column(
    catalog: Catalog, data_root: Path, tmp_path: Path
) -> None:
    """Found by the property above: pyarrow's cast raised ArrowInvalid, a traceback."""
    from core.datasets import create_dataset
    from core.projects import create_project

    create_project(catalog, "demo")
    source = pa.table({"id": pa.array([1, 2], pa.int64()), "big": pa.array([2**63 - 1, 2**63], pa.uint64())})
    pq.write_table(source, tmp_path / "big.parquet")

    with pytest.raises(InvalidFile, match=r"column 'big' is uint64 with values that do not fit bigint exactly"):
        create_dataset(catalog, "demo", "big", tmp_path / "big.parquet", key="id")

    assert not (data_root / "projects" / "demo" / "datasets").exists()
