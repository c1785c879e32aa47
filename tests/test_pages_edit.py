"""Table page editing: grid edits saved to the session, overlay marks, pending list and undo, submit and discard."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import editing
from app.components import status_badge
from core import change_requests, sessions
from core.catalog import Catalog
from core.reads import Column
from core.sessions import DeleteRow, SetCell
from tests.page_support import (
    ROWS,
    TABLE_PAGE,
    button_keys,
    copy_workspace,
    edit,
    has_text,
    order,
    pending,
    seed_workspace,
    signed_in,
    texts,
    user,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seed_workspace(tmp_path_factory.mktemp("pages-edit"))


@pytest.fixture
def workspace(seeded: Path, data_root: Path) -> Catalog:
    return copy_workspace(seeded, data_root)


def _editor(at: AppTest) -> Any:
    editors = at.data_editor
    assert len(editors) == 1, [d.key for d in at.dataframe]
    return editors[0]


def _grid_edit(at: AppTest, **state: Any) -> AppTest:
    """Hand the editor the state the browser would send after a cell edit or row delete, and rerun."""
    key = _editor(at).key
    at.session_state[key] = {"edited_rows": {}, "added_rows": [], "deleted_rows": [], **state}
    return at.run(timeout=120)


def _row(at: AppTest, order_id: str) -> pd.Series:
    grid = _editor(at).value
    match = grid[grid["order_id"].astype(str) == order_id]
    assert len(match) == 1, order_id
    return match.iloc[0]


def _preview(at: AppTest) -> Any:
    """The read-only preview of the changed rows (a keyed st.dataframe without selection has no id)."""
    (preview,) = [d for d in at.dataframe if d.editing_mode == "read_only"]
    return preview


def _styled_cells(at: AppTest) -> dict[tuple[int, int], str]:
    """(row, column) -> CSS of the preview's styled cells (pandas Styler output)."""
    css = _preview(at).proto.arrow_data.styler.styles
    found: dict[tuple[int, int], str] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", css):
        for r, c in re.findall(r"_row(\d+)_col(\d+)", selectors):
            found[(int(r), int(c))] = found.get((int(r), int(c)), "") + body
    return found


def _expander_labels(at: AppTest) -> list[str]:
    return [e.label for e in at.expander]


def test_editor_sees_the_grid_with_a_change_column_and_locked_ids(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)

    editor = _editor(at)
    assert editor.editing_mode == "delete"
    grid = editor.value
    assert list(grid.columns[:3]) == [editing.MARK_COLUMN, "row_id", "order_id"]
    assert list(grid["order_id"].astype(str)) == [order(i)["order_id"] for i in range(50)]
    assert set(grid[editing.MARK_COLUMN]) == {""}
    config = json.loads(editor.proto.columns)
    locked = {name for name, c in config.items() if c.get("disabled")}
    assert locked == {"row_id", "order_id", editing.MARK_COLUMN}, config
    assert "Pending edits (0)" in _expander_labels(at)
    assert not [d for d in at.dataframe if d.editing_mode == "read_only"]
    # Nothing to submit or discard yet, and looking starts no session.
    assert at.button(key="table_submit").disabled
    assert at.button(key="table_discard").disabled
    assert sessions.current_session(workspace, "shop", "orders", actor=user(workspace, "erin")) is None


def test_a_cell_edit_is_saved_at_once_and_overlaid(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)
    first = _editor(at).key

    at = _grid_edit(at, edited_rows={0: {"plan": "pro"}, 2: {"amount": 9.25}})

    assert not at.exception
    assert not at.error, texts(at.error)
    assert {(e.row_id, e.column, e.old_value, e.new_value) for e in pending(workspace, "erin")} == {
        ("1000", "plan", "free", "pro"),
        ("1002", "amount", "3.0", "9.25"),
    }
    # A fresh editor shows the saved values with their marks; the edits are not sent again.
    assert _editor(at).key != first
    assert _row(at, "1000")["plan"] == "pro"
    assert _row(at, "1000")[editing.MARK_COLUMN] == "✎ edited"
    assert _row(at, "1002")["amount"] == pytest.approx(9.25)
    assert _row(at, "1001")[editing.MARK_COLUMN] == ""
    assert "Pending edits (2)" in _expander_labels(at)
    assert not at.button(key="table_submit").disabled

    preview = _preview(at).value
    assert list(preview["order_id"].astype(str)) == ["1000", "1002"]
    styled = _styled_cells(at)
    plan = list(preview.columns).index("plan")
    amount = list(preview.columns).index("amount")
    assert "fff3b0" in styled[(0, plan)]
    assert "fff3b0" in styled[(1, amount)]
    assert "fff3b0" not in styled.get((0, amount), "")
    assert "fff3b0" not in styled.get((1, plan), "")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"amount": "lots"}, "value 'lots' is not a valid DOUBLE for column 'amount'"),
        ({"order_id": 7}, "column 'order_id' identifies the row and cannot be edited"),
    ],
    ids=["wrong-type", "key-column"],
)
def test_a_refused_edit_is_shown_and_not_saved(workspace: Catalog, changes: dict[str, Any], message: str) -> None:
    at = signed_in("erin", TABLE_PAGE)

    at = _grid_edit(at, edited_rows={0: changes})

    assert not at.exception
    assert has_text(at.error, message), texts(at.error)
    assert pending(workspace, "erin") == []
    # The error stands under the grid; the rest of the page is still there.
    assert "Pending edits (0)" in _expander_labels(at)
    assert "table_add_submit" in button_keys(at)


def test_deleting_rows_in_the_grid_marks_them(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)

    at = _grid_edit(at, deleted_rows=[1, 3])

    assert not at.error, texts(at.error)
    assert {(e.row_id, e.change) for e in pending(workspace, "erin")} == {("1001", "delete"), ("1003", "delete")}
    # Deleted rows stay on the page, marked, until the change is merged.
    assert _row(at, "1001")[editing.MARK_COLUMN] == "✖ deleted"
    assert _row(at, "1003")[editing.MARK_COLUMN] == "✖ deleted"
    styled = _styled_cells(at)
    assert all("line-through" in styled[(0, c)] for c in range(3))


def test_pending_edits_are_listed_and_undone_one_by_one(workspace: Catalog) -> None:
    edit(workspace, "erin", SetCell("1000", "plan", "pro"), DeleteRow("1001"), SetCell("1004", "amount", "1"))
    at = signed_in("erin", TABLE_PAGE)

    assert "Pending edits (3)" in _expander_labels(at)
    listed = " ".join(texts(at.markdown))
    assert "row `1000` · **plan**: `free` → `pro`" in listed
    assert "row `1001` deleted" in listed
    assert {"undo_1000_plan", "undo_1001_", "undo_1004_amount"} <= set(button_keys(at))

    at.button(key="undo_1000_plan").click().run(timeout=120)
    assert {(e.row_id, e.column) for e in pending(workspace, "erin")} == {("1001", None), ("1004", "amount")}
    assert _row(at, "1000")["plan"] == "free"
    assert _row(at, "1000")[editing.MARK_COLUMN] == ""

    at.button(key="undo_1001_").click().run(timeout=120)
    assert {(e.row_id, e.column) for e in pending(workspace, "erin")} == {("1004", "amount")}
    assert _row(at, "1001")[editing.MARK_COLUMN] == ""
    assert "Pending edits (1)" in _expander_labels(at)


def test_a_row_added_through_the_form_shows_on_the_last_page(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)

    at.text_input(key="table_add_order_id").input("5000")
    at.text_input(key="table_add_plan").input("pro")
    at.text_input(key="table_add_amount").input("12.5")
    at.button(key="table_add_submit").click().run(timeout=120)

    assert not at.error, texts(at.error)
    assert {(e.row_id, e.column, e.new_value) for e in pending(workspace, "erin")} == {
        ("5000", None, None),
        ("5000", "order_id", "5000"),
        ("5000", "plan", "pro"),
        ("5000", "amount", "12.5"),
    }
    assert at.pagination(key="table_page").value == 3
    assert any(c.startswith(f"Rows **101–{ROWS + 1}** of **{ROWS + 1}**") for c in texts(at.caption))
    assert _row(at, "5000")[editing.MARK_COLUMN] == "＋ added"
    styled = _styled_cells(at)
    assert "d8f5d0" in styled[(0, 0)]
    # The form is empty again.
    assert at.text_input(key="table_add_order_id").value == ""


def test_adding_a_row_with_a_taken_key_is_refused(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)

    at.text_input(key="table_add_order_id").input("1000")
    at.button(key="table_add_submit").click().run(timeout=120)

    assert has_text(at.error, "a row with key '1000' already exists"), texts(at.error)
    assert pending(workspace, "erin") == []
    assert at.text_input(key="table_add_order_id").value == "1000"


def test_submit_dialog_creates_a_change_request(workspace: Catalog) -> None:
    edit(workspace, "erin", SetCell("1000", "plan", "pro"), SetCell("1001", "amount", "2.5"))
    at = signed_in("erin", TABLE_PAGE)

    at.button(key="table_submit").click().run(timeout=120)
    assert at.text_input(key="submit_title").value == ""
    at.text_input(key="submit_title").input("Upgrade order 1000")
    at.text_area(key="submit_description").input("Customer asked for pro.")
    at.button(key="submit_confirm").click().run(timeout=300)

    assert not at.exception
    assert not at.error, texts(at.error)
    (cr,) = change_requests.list_change_requests(workspace, actor=user(workspace, "erin"))
    assert (cr.title, cr.description, cr.author, cr.rows, cr.cells) == (
        "Upgrade order 1000",
        "Customer asked for pro.",
        "erin",
        2,
        2,
    )
    notes = texts(at.success) + texts(at.warning)
    assert any(f"Submitted change request `{cr.id}` (2 row(s), 2 cell(s))" in n for n in notes), notes
    assert any(f"Data checks: {status_badge(getattr(cr, 'validation_status', None))}" in n for n in notes), notes
    # The dialog closed, and the user starts over in a new, empty session.
    assert "submit_confirm" not in button_keys(at)
    assert pending(workspace, "erin") == []
    assert "Pending edits (0)" in _expander_labels(at)
    assert _row(at, "1000")["plan"] == "free"


def test_submit_dialog_can_be_cancelled(workspace: Catalog) -> None:
    edit(workspace, "erin", SetCell("1000", "plan", "pro"))
    at = signed_in("erin", TABLE_PAGE)

    at.button(key="table_submit").click().run(timeout=120)
    at.button(key="submit_cancel").click().run(timeout=120)

    assert "submit_confirm" not in button_keys(at)
    assert change_requests.list_change_requests(workspace, actor=user(workspace, "erin")) == []
    assert len(pending(workspace, "erin")) == 1


def test_discard_session_drops_every_pending_edit(workspace: Catalog) -> None:
    edit(workspace, "erin", SetCell("1000", "plan", "pro"), DeleteRow("1001"))
    at = signed_in("erin", TABLE_PAGE)

    at.button(key="table_discard").click().run(timeout=120)
    at.button(key="discard_confirm").click().run(timeout=120)

    assert not at.error, texts(at.error)
    assert pending(workspace, "erin") == []
    assert _row(at, "1000")["plan"] == "free"
    assert "Your pending edits were discarded." in texts(at.info)


def test_each_user_sees_only_their_own_session(workspace: Catalog) -> None:
    edit(workspace, "eve", SetCell("1000", "plan", "enterprise"))
    at = signed_in("erin", TABLE_PAGE)

    assert _row(at, "1000")["plan"] == "free"
    assert _row(at, "1000")[editing.MARK_COLUMN] == ""
    assert "Pending edits (0)" in _expander_labels(at)


# ---------------------------------------------------------------- app/editing.py, no Spark needed

TYPES = {"row_id": "VARCHAR", "name": "VARCHAR", "n": "BIGINT", "x": "DOUBLE", "ok": "BOOLEAN", "day": "DATE"}


@pytest.mark.parametrize(
    ("value", "column", "text"),
    [
        (None, "n", None),
        (float("nan"), "x", None),
        (7, "n", "7"),
        (7.0, "n", "7"),
        (2.5, "x", "2.5"),
        (True, "ok", "true"),
        (False, "ok", "false"),
        ("", "name", ""),
        ("", "n", None),
        ("2024-05-01T00:00:00.000", "day", "2024-05-01"),
        ("2024-05-01", "day", "2024-05-01"),
        ("hello", "name", "hello"),
    ],
)
def test_cell_text(value: Any, column: str, text: str | None) -> None:
    assert editing.cell_text(value, TYPES[column]) == text


def test_grid_ops_maps_positions_to_row_ids() -> None:
    frame = pd.DataFrame({editing.MARK_COLUMN: ["", "", ""], "row_id": ["a", "b", "c"], "n": [1, 2, 3]})
    state = {
        "edited_rows": {"2": {"n": 9, editing.MARK_COLUMN: "x", "row_id": "z"}, 0: {"n": None}},
        "deleted_rows": [1, 7],
        "added_rows": [{"n": 1}],
    }

    assert editing.grid_ops(state, frame, TYPES) == [SetCell("a", "n", None), SetCell("c", "n", "9"), DeleteRow("b")]
    assert editing.grid_ops({}, frame, TYPES) == []


def test_grid_frame_types_columns_and_marks_changes() -> None:
    rows = pd.DataFrame(
        {
            "row_id": ["a", "b", "c"],
            "n": [1, None, 3],
            "name": ["x", None, "z"],
            "_change": ["update", "insert", "delete"],
            "_edited": [["n"], ["n", "name"], []],
        },
        dtype=object,
    )
    columns = [Column("row_id", "VARCHAR"), Column("n", "BIGINT"), Column("name", "VARCHAR")]

    frame = editing.grid_frame(rows, columns)

    assert list(frame.columns) == [editing.MARK_COLUMN, "row_id", "n", "name"]
    assert list(frame[editing.MARK_COLUMN]) == ["✎ edited", "＋ added", "✖ deleted"]
    assert str(frame["n"].dtype) == "Int64"
    assert str(frame["name"].dtype) == "string"
