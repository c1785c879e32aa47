"""The Table grid never changes what was typed: its text reaches core unchanged, and is saved canonically or refused."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app import editing
from core import auth, datasets, projects, sessions
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.errors import InvalidInput
from core.reads import Column
from core.values import canonical_text

# ---------------------------------------------------------------- the grid's cells and editors, no Spark


@pytest.mark.parametrize(
    ("value", "duck_type", "text"),
    [
        (None, "BIGINT", None),
        (pd.NA, "BIGINT", None),
        (np.int64(7), "BIGINT", "7"),
        (2**100, "HUGEINT", str(2**100)),
        (np.float64(0.0), "DOUBLE", "0"),
        (25.36, "DOUBLE", "25.36"),
        (0.123456789, "DOUBLE", "0.123456789"),  # every digit, not the screens' four decimals
        (1e16, "DOUBLE", "10000000000000000"),
        (float("inf"), "DOUBLE", "inf"),
        (float("nan"), "DOUBLE", None),
        (np.float32(0.1), "FLOAT", "0.1"),  # the float32 value, not its float64 widening
        (float(np.float32(1.23456789)), "FLOAT", "1.2345679"),
        ("0.123456789", "DOUBLE", "0.123456789"),
        (Decimal("12.50"), "DECIMAL(10,2)", "12.50"),
        (dt.date(2024, 2, 29), "DATE", "2024-02-29"),
        (pd.Timestamp("2024-02-29"), "DATE", "2024-02-29"),
        (dt.datetime(2024, 5, 1, 10, 30), "TIMESTAMP", "2024-05-01 10:30:00"),
        (dt.datetime(2024, 5, 1, 10, 30, tzinfo=dt.UTC), "TIMESTAMP WITH TIME ZONE", "2024-05-01 10:30:00+00:00"),
    ],
)
def test_a_cell_holds_text_that_core_reads_back_as_the_same_value(value: Any, duck_type: str, text: str) -> None:
    assert editing.editor_text(value, duck_type) == text
    if text is not None and duck_type != "TIMESTAMP WITH TIME ZONE":
        assert canonical_text(text, column="c", duck_type=duck_type, allow_non_finite=True) is not None


COLUMNS = [
    Column("row_id", "VARCHAR"),
    Column("n", "BIGINT"),
    Column("small", "TINYINT"),
    Column("x", "DOUBLE"),
    Column("amount", "DECIMAL(10,2)"),
    Column("day", "DATE"),
    Column("at", "TIMESTAMP"),
    Column("ok", "BOOLEAN"),
    Column("name", "VARCHAR"),
]


def test_numbers_dates_and_timestamps_are_typed_into_text_editors() -> None:
    config = editing.column_config(COLUMNS, {}, key_column=None)

    kinds = {name: config[name]["type_config"]["type"] for name in config}
    # The grid's number editor dropped characters ("1.5" became 15) and its date picker rewrote
    # a typed day; text editors hand core what was typed.
    assert {c: kinds[c] for c in ("n", "small", "x", "amount", "day", "at", "ok", "name")} == {
        "n": "text", "small": "text", "x": "text", "amount": "text", "day": "text", "at": "text",
        "ok": "checkbox", "name": "text",
    }  # fmt: skip
    assert all(config[c]["alignment"] == "right" for c in ("n", "small", "x", "amount"))
    assert "YYYY-MM-DD" in config["day"]["help"] and "-128 to 127" in config["small"]["help"]

    rows = pd.DataFrame(
        {"row_id": ["a"], "n": [7], "small": [None], "x": [2.5], "amount": [Decimal("1.50")],
         "day": [dt.date(2024, 3, 1)], "at": [dt.datetime(2024, 3, 1, 9)], "ok": [True], "name": ["z"]},
        dtype=object,
    )  # fmt: skip
    frame = editing.grid_frame(rows, COLUMNS)
    assert frame.iloc[0][["n", "x", "amount", "day", "at"]].tolist() == [
        "7", "2.5", "1.50", "2024-03-01", "2024-03-01 09:00:00",
    ]  # fmt: skip
    assert pd.isna(frame.iloc[0]["small"])


@pytest.mark.parametrize("typed", ["1.5", "12abc", "-0", "1e3", " 7 ", "1,5", "1.005", "31/02/2024", "2024-02-30"])
def test_a_typed_cell_reaches_core_as_typed(typed: str) -> None:
    frame = editing.grid_frame(pd.DataFrame({"row_id": ["a"], "n": [1]}, dtype=object), COLUMNS[:2], deletable=True)
    for column in ("n", "x", "amount", "day"):
        changes = editing.grid_changes({"edited_rows": {0: {column: typed}}}, frame, {c.name: c.type for c in COLUMNS})
        assert changes.ops == [sessions.SetCell("a", column, typed)]


def test_the_grid_is_redrawn_when_a_saved_value_reads_otherwise_than_typed() -> None:
    types = {c.name: c.type for c in COLUMNS}
    for typed in ("1e3", "-0", " 7 ", "+7", "7.0"):
        assert editing.saved_otherwise([sessions.SetCell("a", "n", typed)], types), typed
    assert editing.saved_otherwise([sessions.SetCell("a", "x", "25.360")], types)
    for column, typed in (("n", "1000"), ("x", "25.36"), ("amount", "1.50"), ("day", "2024-02-29"), ("name", " z ")):
        assert not editing.saved_otherwise([sessions.SetCell("a", column, typed)], types), typed
    assert not editing.saved_otherwise([sessions.DeleteRow("a"), sessions.SetCell("a", "n", None)], types)


# ---------------------------------------------------------------- typed text saved through a session (Spark)

TYPED = {
    "n": ("BIGINT", pa.int64()),
    "i": ("INTEGER", pa.int32()),
    "x": ("DOUBLE", pa.float64()),
    "f": ("FLOAT", pa.float32()),
    "amount": ("DECIMAL(10,2)", pa.decimal128(10, 2)),
    "day": ("DATE", pa.date32()),
    "at": ("TIMESTAMP", pa.timestamp("us")),
}
ISSUE_INPUTS = ["1.5", "12abc", "-0", "1e3", " 7 ", "1,5", "1.005", "31/02/2024", "2024-02-30"]
TYPED_TEXT = (
    st.sampled_from([*ISSUE_INPUTS, "", "  ", "1_000", "0x10", "nan", "2024-02-29", "2024-02-29 10:00:00", "12.50"])
    | st.from_regex(r"[-+ ]?[0-9]{1,12}([.,][0-9]{0,6})?([eE][-+]?[0-9]{1,3})? ?", fullmatch=True)
    | st.text(max_size=12)
)


@pytest.fixture(scope="module")
def typed_workspace(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """One dataset with a typed column of each kind and one row (key ``id``), editor ``ed``."""
    base = tmp_path_factory.mktemp("grid_typing")
    columns: dict[str, pa.Array] = {"id": pa.array([1], pa.int64())}
    columns |= {name: pa.nulls(1, arrow) for name, (_, arrow) in TYPED.items()}
    pq.write_table(pa.table(columns), base / "typed.parquet")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_DATA_ROOT", str(base / "delta"))
        mp.setenv("OREO_DATABASE_URL", f"sqlite:///{base / 'catalog.db'}")
        get_settings.cache_clear()
        reset_catalogs()
        catalog = open_catalog()
        projects.create_project(catalog, "demo")
        auth.create_user(catalog, "ed", password="ed-password-1")
        auth.add_member(catalog, "demo", "ed", auth.Role.EDITOR)
        datasets.create_dataset(catalog, "demo", "typed", base / "typed.parquet", key="id")
        reset_catalogs()
    get_settings.cache_clear()
    return base


@pytest.fixture
def typed_catalog(typed_workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    monkeypatch.setenv("DELTA_DATA_ROOT", str(typed_workspace / "delta"))
    monkeypatch.setenv("OREO_DATABASE_URL", f"sqlite:///{typed_workspace / 'catalog.db'}")
    get_settings.cache_clear()
    reset_catalogs()
    return open_catalog()


def _saved(catalog: Catalog) -> dict[str, str | None]:
    session = sessions.current_session(catalog, "demo", "typed", actor=auth.get_user(catalog, "ed"))
    if session is None:
        return {}
    edits = sessions.effective_edits(datasets.layout_for("demo", "typed"), session.session_id)
    return {e.column: e.new_value for e in edits if e.column}


@pytest.mark.spark
def test_a_refused_first_edit_starts_no_session(typed_catalog: Catalog) -> None:
    ed = auth.get_user(typed_catalog, "ed")
    for typed in ("1.5", "12abc"):
        with pytest.raises(InvalidInput, match=rf"row '1', column 'n': '{typed}' is not a .*nothing was saved"):
            sessions.save_edits(typed_catalog, "demo", "typed", [sessions.SetCell("1", "n", typed)], actor=ed)
    assert sessions.current_session(typed_catalog, "demo", "typed", actor=ed) is None


@pytest.mark.spark
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.sampled_from(sorted(TYPED)), typed=TYPED_TEXT)
@example(column="n", typed="1.5")
@example(column="n", typed="12abc")
@example(column="n", typed="1e3")
@example(column="x", typed="1,5")
@example(column="amount", typed="1.005")
@example(column="day", typed="2024-02-30")
def test_a_typed_cell_is_saved_as_its_canonical_value_or_not_at_all(
    typed_catalog: Catalog, column: str, typed: str
) -> None:
    """What the Table page does with one typed cell: the grid's state, ``grid_changes``, then the save."""
    ed = auth.get_user(typed_catalog, "ed")
    page = datasets.dataset_rows(typed_catalog, "demo", "typed", actor=ed, offset=0, limit=10)
    # The types main holds, as the page reads them (Spark stores the naive Parquet timestamp zoned).
    info = datasets.get_dataset(typed_catalog, "demo", "typed", actor=ed)
    columns = [c for c in datasets.dataset_columns(info) if c.name in TYPED]
    frame = editing.grid_frame(page.rows, [Column("row_id", "VARCHAR"), *columns], deletable=True)
    types = {c.name: c.type for c in columns}
    before = _saved(typed_catalog)

    changes = editing.grid_changes({"edited_rows": {0: {column: typed}}}, frame, types)
    try:
        canonical = canonical_text(typed, column=column, duck_type=types[column])
    except InvalidInput:
        canonical = None
    if not changes.ops:  # an emptied cell: held back for the person to confirm, nothing saved
        assert typed == "" and changes.clears == [] and _saved(typed_catalog) == before
        return
    try:
        sessions.save_edits(typed_catalog, "demo", "typed", changes.ops, actor=ed)
    except InvalidInput as exc:
        assert canonical is None, (typed, canonical)
        assert repr(typed) in str(exc) and "nothing was saved" in str(exc)
        assert _saved(typed_catalog) == before
        return
    assert canonical is not None
    assert _saved(typed_catalog) == {**before, column: canonical}
