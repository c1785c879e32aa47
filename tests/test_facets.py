"""Facets: a column's values, counts and histogram under the filters, against a plain Python reference."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import auth, facets, projects, reads, sessions
from core.catalog import Catalog, DatasetRow
from core.datasets import layout_for
from core.errors import InvalidInput, NotFound, PermissionDenied
from core.filters import Condition

ROWS = 400
CITIES = ["Oslo", "Lima", "Paris", "", "Zürich", "N.Y.", None]


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(28)
    start = dt.datetime(2024, 1, 1, 6, 30)
    return [
        {
            "row_id": f"{i:04d}",
            "city": rng.choice(CITIES),
            "n": None if i % 11 == 0 else rng.randint(-5, 40),
            "x": rng.uniform(-3, 3) if i % 13 else None,
            "price": Decimal(rng.randint(0, 99_999)) / 100,
            "day": dt.date(2023, 1, 1) + dt.timedelta(days=rng.randint(0, 500)),
            "at": start + dt.timedelta(minutes=rng.randint(0, 60 * 24 * 90)),
            "ok": rng.random() < 0.3,
        }
        for i in range(ROWS)
    ]


SCHEMA = pa.schema(
    [
        ("row_id", pa.string()), ("city", pa.string()), ("n", pa.int64()), ("x", pa.float64()),
        ("price", pa.decimal128(7, 2)), ("day", pa.date32()), ("at", pa.timestamp("us")), ("ok", pa.bool_()),
    ]
)  # fmt: skip


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """One delta-rs table (no Spark) and its rows, the reference's input."""
    path = tmp_path_factory.mktemp("facets") / "t"
    rows = _rows()
    write_deltalake(path, pa.Table.from_pylist(rows, SCHEMA))
    return path, rows


def _text(value: Any) -> str | None:
    """DuckDB's text for a value, as the facet reports it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, Decimal):
        return f"{value:.2f}"  # DECIMAL(7,2) prints its scale
    return str(value)


def _reference(rows: list[dict[str, Any]], column: str, limit: int) -> tuple[int, int, list[tuple[str | None, int]]]:
    counts = Counter(r[column] for r in rows)
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] is None, kv[0] if kv[0] is not None else 0))
    return len(rows), len([v for v in counts if v is not None]), [(_text(v), n) for v, n in ordered[:limit]]


@pytest.mark.parametrize("column", ["city", "n", "x", "price", "day", "at", "ok"])
@pytest.mark.parametrize("limit", [1, 5, 1000])
def test_top_values_counts_and_distinct_match_the_reference(
    table: tuple[Path, list[dict[str, Any]]], column: str, limit: int
) -> None:
    path, rows = table
    facet = facets.column_facet(path, column, limit=limit)
    total, distinct, top = _reference(rows, column, limit)
    assert (facet.rows, facet.distinct) == (total, distinct)
    assert [(v.value, v.rows) for v in facet.values] == top


def test_the_filters_narrow_the_facet(table: tuple[Path, list[dict[str, Any]]]) -> None:
    path, rows = table
    conditions = [Condition("n", "ge", ("10",)), Condition("city", "in", ("Oslo", "Lima", "Zürich"))]
    kept = [r for r in rows if r["n"] is not None and r["n"] >= 10 and r["city"] in ("Oslo", "Lima", "Zürich")]
    facet = facets.column_facet(path, "city", conditions=conditions)
    assert facet.rows == len(kept) and 0 < len(kept) < ROWS
    assert {v.value: v.rows for v in facet.values} == dict(Counter(r["city"] for r in kept))


@pytest.mark.parametrize("column", ["n", "x", "price", "day", "at"])
def test_the_histogram_puts_every_value_in_its_bin(table: tuple[Path, list[dict[str, Any]]], column: str) -> None:
    path, rows = table
    facet = facets.column_facet(path, column, bins=7)
    values = [float(r[column]) if column == "price" else r[column] for r in rows if r[column] is not None]
    assert 1 <= len(facet.histogram) <= 7
    assert sum(b.rows for b in facet.histogram) == len(values)
    assert facet.histogram[0].low == min(values) or (column == "at" and facet.histogram[0].low <= min(values))
    for i, b in enumerate(facet.histogram):
        last = i == len(facet.histogram) - 1
        inside = [v for v in values if b.low <= v and (v < b.high or (last and v <= b.high))]
        assert b.rows == len(inside), (column, b)
    assert [b.high for b in facet.histogram[:-1]] == [b.low for b in facet.histogram[1:]]


def test_whole_numbers_with_few_values_get_one_bin_each(table: tuple[Path, list[dict[str, Any]]]) -> None:
    path, rows = table
    facet = facets.column_facet(path, "n", conditions=[Condition("n", "between", ("0", "4"))])
    assert [(b.low, b.high) for b in facet.histogram] == [(float(i), float(i + 1)) for i in range(5)]
    assert [b.rows for b in facet.histogram] == [sum(r["n"] == i for r in rows) for i in range(5)]


def test_text_and_booleans_have_no_histogram_and_nothing_matching_is_empty(
    table: tuple[Path, list[dict[str, Any]]],
) -> None:
    path, _ = table
    assert facets.column_facet(path, "city").histogram == ()
    assert facets.column_facet(path, "ok").histogram == ()
    empty = facets.column_facet(path, "n", conditions=[Condition("n", "gt", ("1000",))])
    assert (empty.rows, empty.distinct, empty.values, empty.histogram) == (0, 0, (), ())


@pytest.mark.parametrize("column", ["city", "n", "x", "price", "day", "at", "ok"])
def test_a_value_read_from_the_facet_filters_exactly_its_rows(
    table: tuple[Path, list[dict[str, Any]]], column: str
) -> None:
    path, _ = table
    facet = facets.column_facet(path, column, limit=1000)
    for item in [*facet.values[:3], *[v for v in facet.values if v.value in (None, "")]]:
        condition = facets.value_condition(column, item.value)
        page = reads.read_page(path, conditions=[condition], limit=1)
        # A text column's "is empty" holds '' too: the empty text and NULL are counted together then.
        expected = item.rows
        if item.value is None and column == "city":
            expected += next((v.rows for v in facet.values if v.value == ""), 0)
        assert page.total == expected, (column, item)


def test_the_json_document(table: tuple[Path, list[dict[str, Any]]]) -> None:
    path, _ = table
    doc = facets.column_facet(path, "day", limit=2, bins=3).to_json()
    assert set(doc) == {"column", "type", "rows", "distinct", "values", "histogram"}
    assert doc["type"] == "DATE" and len(doc["values"]) == 2 and len(doc["histogram"]) == 3
    assert isinstance(doc["histogram"][0]["low"], str) and doc["histogram"][0]["low"].startswith("2023-01-")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"column": "nope"}, r"unknown column 'nope'; columns are: row_id, city"),
        ({"column": "city", "limit": 0}, r"limit must be between 1 and 1000, got 0"),
        ({"column": "city", "bins": 500}, r"bins must be between 1 and 200"),
        ({"column": "city", "conditions": [Condition("n", "eq", ("abc",))]}, r"'abc' is not"),
    ],
)
def test_bad_requests_are_refused(table: tuple[Path, list[dict[str, Any]]], kwargs: dict[str, Any], match: str) -> None:
    path, _ = table
    with pytest.raises(InvalidInput, match=match):
        facets.column_facet(path, **kwargs)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    values=st.lists(
        st.one_of(st.none(), st.sampled_from(["a", "A", "ä", " a", "a ", "", "x'y", "%", "日本"]), st.text(max_size=4)),
        min_size=1,
        max_size=40,
    ),
    limit=st.integers(1, 12),
)
def test_random_text_columns_match_the_reference(
    tmp_path_factory: pytest.TempPathFactory, values: list[str | None], limit: int
) -> None:
    values = [v.replace("\x00", "") if v is not None else None for v in values]  # Parquet text holds no NUL
    path = tmp_path_factory.mktemp("random") / "t"
    write_deltalake(
        path, pa.table({"row_id": [str(i) for i in range(len(values))], "v": pa.array(values, pa.string())})
    )
    facet = facets.column_facet(path, "v", limit=limit)
    counts = Counter(values)
    assert (facet.rows, facet.distinct) == (len(values), len([v for v in counts if v is not None]))
    assert {v.value: v.rows for v in facet.values}.items() <= counts.items()
    assert [v.rows for v in facet.values] == sorted(counts.values(), reverse=True)[:limit]


# ---------------------------------------------------------------- a dataset, as a session sees it


@pytest.fixture
def dataset(catalog: Catalog) -> tuple[auth.User, auth.User]:
    """p/d: a keyed delta-rs table in the catalog; an editor of p and a stranger."""
    projects.create_project(catalog, "p")
    editor, _ = auth.create_user(catalog, "ed", password="correct horse battery")
    stranger, _ = auth.create_user(catalog, "sam", password="correct horse battery")
    auth.add_member(catalog, "p", "ed", "editor")
    cities = ["Oslo", "Oslo", "oslo", "Lima", None]
    write_deltalake(
        layout_for("p", "d").main,
        pa.table({"row_id": [str(i) for i in range(1, 6)], "code": [str(i) for i in range(1, 6)], "city": cities}),
    )
    with catalog.session() as s:
        s.add(
            DatasetRow(project_id="p", dataset_id="d", key_column="code", delta_version=0, created_by="ed", row_count=5)
        )
    return editor, stranger


def test_a_dataset_facet_sees_the_session_s_edits(catalog: Catalog, dataset: tuple[auth.User, auth.User]) -> None:
    editor, stranger = dataset
    before = facets.dataset_facet(catalog, "p", "d", "city", actor=editor)
    assert [(v.value, v.rows) for v in before.values] == [("Oslo", 2), ("Lima", 1), ("oslo", 1), (None, 1)]
    session, _ = sessions.save_edits(catalog, "p", "d", [sessions.SetCell("3", "city", "Oslo")], actor=editor)
    after = facets.dataset_facet(catalog, "p", "d", "city", actor=editor, session_id=session.session_id)
    assert [(v.value, v.rows) for v in after.values] == [("Oslo", 3), ("Lima", 1), (None, 1)]
    assert facets.dataset_facet(catalog, "p", "d", "city", actor=editor).values == before.values  # main is unchanged
    with pytest.raises(PermissionDenied):
        facets.dataset_facet(catalog, "p", "d", "city", actor=stranger)
    with pytest.raises((PermissionDenied, NotFound)):
        facets.dataset_facet(catalog, "p", "d", "city", actor=stranger, session_id=session.session_id)


def test_a_dataset_facet_leaves_out_the_rows_the_session_deletes(
    catalog: Catalog, dataset: tuple[auth.User, auth.User]
) -> None:
    editor, _ = dataset
    ops = [sessions.DeleteRow("1"), sessions.SetCell("4", "city", "Oslo"), sessions.DeleteRow("4")]
    session, _ = sessions.save_edits(catalog, "p", "d", ops, actor=editor)
    after = facets.dataset_facet(catalog, "p", "d", "city", actor=editor, session_id=session.session_id)
    # Row 1 (Oslo) is deleted; row 4 (Lima) was edited, then deleted: neither is counted.
    assert [(v.value, v.rows) for v in after.values] == [("Oslo", 1), ("oslo", 1), (None, 1)]
    assert after.rows == 3


def test_a_session_of_another_dataset_is_refused(catalog: Catalog, dataset: tuple[auth.User, auth.User]) -> None:
    editor, _ = dataset
    write_deltalake(layout_for("p", "e").main, pa.table({"row_id": ["1"], "code": ["1"], "city": ["Rome"]}))
    with catalog.session() as s:
        s.add(
            DatasetRow(project_id="p", dataset_id="e", key_column="code", delta_version=0, created_by="ed", row_count=1)
        )
    other, _ = sessions.save_edits(catalog, "p", "e", [sessions.SetCell("1", "city", "Roma")], actor=editor)
    with pytest.raises(InvalidInput, match=r"edits p/e, not p/d"):
        facets.dataset_facet(catalog, "p", "d", "city", actor=editor, session_id=other.session_id)
