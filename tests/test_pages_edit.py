"""Table page editing: grid edits saved to the session, overlay marks, pending list and undo, submit and discard."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import editing, filter_bar, live_views
from app.components import status_badge
from app.formatting import display_value
from core import auth, change_requests, datasets, merge, sessions
from core.catalog import Catalog
from core.errors import InvalidInput
from core.filters import Condition
from core.reads import Column
from core.sessions import AddRow, DeleteRow, SetCell
from tests.page_support import (
    APP,
    PLANS,
    ROWS,
    RULES,
    TABLE_PAGE,
    button_keys,
    copy_workspace,
    edit,
    has_text,
    order,
    pending,
    record_timers,
    seed_requests,
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


def test_editor_sees_typed_columns_the_key_and_no_row_id(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)

    editor = _editor(at)
    # A fixed-size editor keeps its place across saves; rows are deleted by ticking "delete".
    assert editor.editing_mode == "fixed"
    grid = editor.value
    assert list(grid.columns[:4]) == [editing.MARK_COLUMN, editing.DELETE_COLUMN, "row_id", "order_id"]
    assert list(grid["order_id"].astype(str)) == [order(i)["order_id"] for i in range(50)]
    assert set(grid[editing.MARK_COLUMN]) == {""}
    assert not [c for c in at.caption if "Others have changes pending" in c.value]  # no one else has any
    config = json.loads(editor.proto.columns)
    locked = {name for name, c in config.items() if c.get("disabled")}
    assert locked == {"order_id", editing.MARK_COLUMN}, config
    # The key names the row (pinned, sorted ▲ by default); row_id is hidden.
    assert config["row_id"].get("hidden") is True
    assert config["order_id"]["pinned"] is True and config["order_id"]["label"] == "order_id ▲"
    # Numbers are typed as text (right-aligned), so what was typed reaches core unchanged.
    assert config["amount"]["type_config"]["type"] == "text" and config["amount"]["alignment"] == "right"
    assert config["plan"]["type_config"]["type"] == "text"
    assert config[editing.DELETE_COLUMN]["type_config"]["type"] == "checkbox"
    assert "Pending changes (0)" in _expander_labels(at)
    assert not [d for d in at.dataframe if d.editing_mode == "read_only"]
    # Nothing to submit or discard yet, and looking starts no session.
    assert at.button(key="table_submit").disabled
    assert at.button(key="table_discard").disabled
    assert sessions.current_session(workspace, "shop", "orders", actor=user(workspace, "erin")) is None


def test_a_cell_edit_is_saved_at_once_and_the_grid_keeps_its_place(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)
    first = _editor(at).key

    at = _grid_edit(at, edited_rows={0: {"plan": "pro"}, 2: {"amount": 9.25}})

    assert not at.exception
    assert not at.error, texts(at.error)
    assert {(e.row_id, e.column, e.old_value, e.new_value) for e in pending(workspace, "erin")} == {
        ("1000", "plan", "free", "pro"),
        ("1002", "amount", "3.0", "9.25"),
    }
    # The same editor (its scroll and selection) shows the saved values with their marks.
    assert _editor(at).key == first
    assert _row(at, "1000")["plan"] == "pro"
    assert _row(at, "1000")[editing.MARK_COLUMN] == "✎ edited"
    assert _row(at, "1002")["amount"] == "9.25"
    assert _row(at, "1001")[editing.MARK_COLUMN] == ""
    assert "Pending changes (2)" in _expander_labels(at)
    assert not at.button(key="table_submit").disabled
    # The editor's state still holds those edits: a rerun does not save them again.
    at.run(timeout=120)
    assert len(pending(workspace, "erin")) == 2
    assert "Pending changes (2)" in _expander_labels(at)

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
        ({"amount": "lots"}, "row '1000', column 'amount': 'lots' is not a number (DOUBLE); nothing was saved"),
        ({"order_id": 7}, "column 'order_id' identifies the row and cannot be edited"),
        ({"plan": "x" * 2001}, "row '1000', column 'plan': 'xxxxx"),
    ],
    ids=["letters-in-a-number", "key-column", "too-long"],
)
def test_a_refused_edit_is_shown_and_not_saved(workspace: Catalog, changes: dict[str, Any], message: str) -> None:
    at = signed_in("erin", TABLE_PAGE)
    first = _editor(at).key

    at = _grid_edit(at, edited_rows={0: changes})

    assert not at.exception
    assert has_text(at.error, message), texts(at.error)
    assert pending(workspace, "erin") == []
    # The grid goes back to the stored values; the rest of the page is still there.
    assert _editor(at).key != first
    assert _row(at, "1000")["plan"] == "free"
    assert "Pending changes (0)" in _expander_labels(at)
    assert "table_add_submit" in button_keys(at)


def test_an_emptied_cell_is_saved_only_when_confirmed_and_shows_as_empty(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)

    # What the grid sends when letters typed into a number cell left it empty, or Delete was pressed.
    at = _grid_edit(at, edited_rows={1: {"amount": None}})

    assert not at.error, texts(at.error)
    assert pending(workspace, "erin") == []
    assert has_text(at.warning, "You emptied 1 cell(s): row `1001` · **amount** (was `1.5`). **Nothing is saved yet.**")
    at.button(key="table_clear_no").click().run(timeout=120)
    assert pending(workspace, "erin") == []
    assert not has_text(at.warning, "You emptied")
    assert _row(at, "1001")["amount"] == "1.5"

    at = _grid_edit(at, edited_rows={1: {"amount": None}})
    at.button(key="table_clear_yes").click().run(timeout=120)

    assert [(e.row_id, e.column, e.old_value, e.new_value) for e in pending(workspace, "erin")] == [
        ("1001", "amount", "1.5", None)
    ]
    assert "row `1001` · **amount**: `1.5` → `∅`" in " ".join(texts(at.markdown))
    assert pd.isna(_row(at, "1001")["amount"])
    assert _editor(at).proto.placeholder == "∅"


def test_ticking_delete_marks_rows_and_unticking_takes_it_back(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)

    at = _grid_edit(at, edited_rows={1: {editing.DELETE_COLUMN: True}, 3: {editing.DELETE_COLUMN: True}})

    assert not at.error, texts(at.error)
    assert {(e.row_id, e.change) for e in pending(workspace, "erin")} == {("1001", "delete"), ("1003", "delete")}
    # Deleted rows stay on the page, marked and ticked, until the change is merged.
    assert _row(at, "1001")[editing.MARK_COLUMN] == "✖ deleted"
    assert bool(_row(at, "1003")[editing.DELETE_COLUMN]) is True
    styled = _styled_cells(at)
    assert all("line-through" in styled[(0, c)] for c in range(3))

    at = _grid_edit(at, edited_rows={1: {editing.DELETE_COLUMN: False}})
    assert {(e.row_id, e.change) for e in pending(workspace, "erin")} == {("1003", "delete")}
    assert _row(at, "1001")[editing.MARK_COLUMN] == ""


def test_pending_changes_are_listed_and_undone_one_by_one(workspace: Catalog) -> None:
    edit(workspace, "erin", SetCell("1000", "plan", "pro"), DeleteRow("1001"), SetCell("1004", "amount", "1"))
    at = signed_in("erin", TABLE_PAGE)

    assert "Pending changes (3)" in _expander_labels(at)
    listed = " ".join(texts(at.markdown))
    assert "row `1000` · **plan**: `free` → `pro`" in listed
    assert "row `1001` deleted" in listed
    assert "row `1004` · **amount**: `6` → `1`" in listed  # numbers read as the grid shows them
    assert {"undo_1000_plan", "undo_1001_", "undo_1004_amount"} <= set(button_keys(at))

    at.button(key="undo_1000_plan").click().run(timeout=120)
    assert {(e.row_id, e.column) for e in pending(workspace, "erin")} == {("1001", None), ("1004", "amount")}
    assert _row(at, "1000")["plan"] == "free"
    assert _row(at, "1000")[editing.MARK_COLUMN] == ""

    at.button(key="undo_1001_").click().run(timeout=120)
    assert {(e.row_id, e.column) for e in pending(workspace, "erin")} == {("1004", "amount")}
    assert _row(at, "1001")[editing.MARK_COLUMN] == ""
    assert "Pending changes (1)" in _expander_labels(at)


def test_a_row_added_through_the_typed_form_is_one_change_and_the_view_stays(workspace: Catalog) -> None:
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
    # One pending change with one undo; the view stays on page 1.
    assert "Pending changes (1)" in _expander_labels(at)
    assert has_text(
        at.success, "Row `5000` added as one pending change; it is listed after the table's last row (page 3)"
    )
    assert at.pagination(key="table_page").value == 1
    assert any(c.startswith(f"Rows **1–50** of **{ROWS + 1}**") for c in texts(at.caption))
    # The form is empty again.
    assert at.text_input(key="table_add_order_id_1").value == ""
    assert at.text_input(key="table_add_plan_1").value == ""

    at.button(key="undo_5000_").click().run(timeout=120)
    assert pending(workspace, "erin") == []
    assert "Pending changes (0)" in _expander_labels(at)


def test_an_added_row_shows_on_the_last_page(workspace: Catalog) -> None:
    edit(workspace, "erin", AddRow({"order_id": "5000", "plan": "pro"}))
    at = signed_in("erin", TABLE_PAGE)

    at.pagination(key="table_page").set_value(3).run(timeout=120)

    assert any(c.startswith(f"Rows **101–{ROWS + 1}** of **{ROWS + 1}**") for c in texts(at.caption))
    assert _row(at, "5000")[editing.MARK_COLUMN] == "＋ added"
    assert pd.isna(_row(at, "5000")["amount"])
    styled = _styled_cells(at)
    assert "d8f5d0" in styled[(0, 0)]


def test_adding_a_row_with_a_taken_key_is_refused(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)

    at.text_input(key="table_add_order_id").input("1000")
    at.button(key="table_add_submit").click().run(timeout=120)

    assert has_text(at.error, "a row with key '1000' already exists"), texts(at.error)
    assert pending(workspace, "erin") == []
    assert at.text_input(key="table_add_order_id").value == "1000"


@pytest.mark.parametrize("typed", ["1,5", "12abc", "1.5.0"])
def test_a_number_typed_into_the_form_reaches_core_as_typed_and_a_refused_one_starts_no_session(
    workspace: Catalog, typed: str
) -> None:
    at = signed_in("erin", TABLE_PAGE)

    at.text_input(key="table_add_order_id").input("5000")
    at.text_input(key="table_add_amount").input(typed)  # text: a number input would drop or round characters
    at.button(key="table_add_submit").click().run(timeout=120)

    message = f"row '(new row)', column 'amount': '{typed}' is not a number (DOUBLE); nothing was saved"
    assert has_text(at.error, message), texts(at.error)
    assert sessions.current_session(workspace, "shop", "orders", actor=user(workspace, "erin")) is None
    assert at.text_input(key="table_add_amount").value == typed


def test_a_column_with_allowed_values_is_a_select_box(workspace: Catalog) -> None:
    datasets.set_dataset_rules(workspace, "shop", "orders", RULES, actor=auth.SYSTEM)
    at = signed_in("erin", TABLE_PAGE)

    config = json.loads(_editor(at).proto.columns)
    assert config["plan"]["type_config"]["type"] == "selectbox"
    assert [o["value"] if isinstance(o, dict) else o for o in config["plan"]["type_config"]["options"]] == list(PLANS)
    assert at.selectbox(key="table_add_plan").options == list(PLANS)


def test_the_url_opens_the_same_page_and_sort(workspace: Catalog) -> None:
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.session_state["oreo_username"] = "erin"
    at.run(timeout=120)
    at.switch_page(TABLE_PAGE)
    at.query_params.update({"dataset": "shop/orders", "page": "2", "sort": "amount", "desc": "1"})
    at.run(timeout=120)

    assert not at.exception, at.exception
    assert any(c.startswith(f"Rows **51–100** of **{ROWS}**") for c in texts(at.caption)), texts(at.caption)
    amounts = [float(a) for a in _editor(at).value["amount"]]
    assert amounts == sorted(amounts, reverse=True)
    assert amounts[0] == pytest.approx(float(order(ROWS - 51)["amount"]))
    assert json.loads(_editor(at).proto.columns)["amount"]["label"] == "amount ▼"
    assert at.selectbox(key="table_sort_col").value == "amount"

    at.pagination(key="table_page").set_value(3).run(timeout=120)
    assert at.query_params == {"dataset": "shop/orders", "page": "3", "sort": "amount", "desc": "1"}


def test_filters_are_typed_anded_and_an_empty_result_names_the_filter(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)

    at.selectbox(key="table_filter_col").select("amount").run(timeout=120)
    at.selectbox(key="table_filter_op_amount").select("in").run(timeout=120)
    at.text_input(key="table_filter_value_amount_in").input("1.5, lots").run(timeout=120)
    at.button(key="table_filter_add").click().run(timeout=120)
    assert has_text(at.error, "'lots' is not a number"), texts(at.error)
    assert "table_filter_remove_0" not in button_keys(at)

    at.selectbox(key="table_filter_op_amount").select("ge").run(timeout=120)
    at.number_input(key="table_filter_value_amount_one").set_value(150).run(timeout=120)
    at.button(key="table_filter_add").click().run(timeout=120)
    assert not at.exception and not at.error, texts(at.error)
    assert at.button(key="table_filter_remove_0").label == "amount ≥ 150"
    assert any(c.startswith("Rows **1–20** of **20**") for c in texts(at.caption)), texts(at.caption)
    assert at.query_params["f"].startswith("amount~ge~150")
    # The row is empty again (new keys) for the next filter.
    assert at.selectbox(key="table_filter_col_1").value is None

    at.selectbox(key="table_filter_col_1").select("plan").run(timeout=120)
    at.text_input(key="table_filter_value_plan_one_1").input("gold").run(timeout=120)
    at.button(key="table_filter_add").click().run(timeout=120)
    assert not at.exception, at.exception
    assert has_text(at.info, "No rows: the filter **plan = gold** removed everything that the filters before it left")

    at.button(key="table_filter_clear").click().run(timeout=120)
    assert any(c.startswith(f"Rows **1–50** of **{ROWS}**") for c in texts(at.caption)), texts(at.caption)
    assert "f" not in at.query_params


def test_bad_url_parts_are_ignored_with_a_warning(workspace: Catalog) -> None:
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.session_state["oreo_username"] = "erin"
    at.run(timeout=120)
    at.switch_page(TABLE_PAGE)
    at.query_params.update({"dataset": "shop/orders", "page": "x", "sort": "nope", "f": ["plan~eq~pro", "garbage"]})
    at.run(timeout=120)

    assert not at.exception, at.exception
    warnings = " ".join(texts(at.warning))
    assert "page 'x' is not a page number" in warnings
    assert "cannot sort by unknown column 'nope'" in warnings
    assert "not a filter: 'garbage'" in warnings
    assert at.button(key="table_filter_remove_0").label == "plan = pro"
    assert any(f"of **{ROWS // 4}**" in c for c in texts(at.caption)), texts(at.caption)


def test_the_live_strip_pauses_its_timer_while_the_submit_dialog_is_open(
    workspace: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on the Review page (test_pages_review): no timed fragment rerun under a dialog that ends with a rerun.
    edit(workspace, "erin", SetCell("1000", "plan", "pro"))
    every = live_views.refresh_every()
    assert every is not None
    timers = record_timers(monkeypatch)
    at = signed_in("erin", TABLE_PAGE)
    assert ("_table_strip", every) in timers

    for opens, closes in (("table_submit", "submit_cancel"), ("table_discard", "discard_cancel")):
        timers.clear()
        at.button(key=opens).click().run(timeout=120)
        assert closes in button_keys(at), button_keys(at)
        assert [t for t in timers if t[0] == "_table_strip"] == [("_table_strip", None)], timers
        timers.clear()
        at.button(key=closes).click().run(timeout=120)
        assert closes not in button_keys(at)
        assert ("_table_strip", every) in timers, timers
    assert not at.exception


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
    assert "Pending changes (0)" in _expander_labels(at)
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


def test_keep_mine_brings_back_a_row_main_deleted_under_the_session(workspace: Catalog) -> None:
    erin = user(workspace, "erin")
    edit(workspace, "erin", SetCell("1001", "plan", "enterprise"))
    gone = edit(workspace, "eve", DeleteRow("1001"))
    cr = change_requests.submit_change_request(workspace, gone.session_id, actor=user(workspace, "eve"))
    merge.approve_change_request(workspace, cr.id, actor=user(workspace, "ann"))

    at = signed_in("erin", TABLE_PAGE)
    panel = " ".join(m.value for m in at.markdown)
    assert "Main changed under 1 of your pending change(s)" in panel
    assert "row `1001` · **plan** (row deleted since, version 1): base `pro` · mine `enterprise` · now `∅`" in panel
    keep = at.button(key="early_keep_0")
    assert "brings the row back" in (keep.help or ""), keep.help
    assert "early_take_0" in button_keys(at)

    at = keep.click().run(timeout=120)
    assert not at.exception, at.exception
    assert has_text(at.success, "Keep mine on row 1001 · plan. Your session now starts from version 1.")
    assert not [k for k in button_keys(at) if k.startswith("early_")]
    rows = {(e.row_id, e.column, e.new_value, e.change) for e in pending(workspace, "erin")}
    assert ("1001", "plan", "enterprise", "insert") in rows and ("1001", "amount", "1.5", "insert") in rows
    assert sessions.current_session(workspace, "shop", "orders", actor=erin) is not None


def test_each_user_sees_only_their_own_session(workspace: Catalog) -> None:
    edit(workspace, "eve", SetCell("1000", "plan", "enterprise"))
    at = signed_in("erin", TABLE_PAGE)

    assert _row(at, "1000")["plan"] == "free"  # eve's draft value is hers
    # Only that she has a change pending on the cell is said (issue 29 §2).
    assert _row(at, "1000")[editing.MARK_COLUMN] == "also pending: plan · Eve (session)"
    # The narrow change column cuts a long mark: above the grid it is said whole, the row named by its label.
    listed = [c.value for c in at.caption if "Others have changes pending" in c.value]
    assert listed == [
        ":material/group: Others have changes pending on 1 row(s) of this page, not shown to you until they "
        "submit: **1000 · free**: plan · Eve (session)."
    ], listed
    assert "Pending changes (0)" in _expander_labels(at)


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
        ("", "name", None),
        ("", "n", None),
        ("2024-05-01T10:00:00.000", "day", "2024-05-01T10:00:00.000"),
        ("2024-05-01T00:00:00.000", "day", "2024-05-01"),
        ("2024-05-01", "day", "2024-05-01"),
        ("hello", "name", "hello"),
    ],
)
def test_cell_text(value: Any, column: str, text: str | None) -> None:
    assert editing.cell_text(value, TYPES[column]) == text


def test_grid_changes_maps_positions_and_holds_back_emptied_cells() -> None:
    frame = pd.DataFrame(
        {
            editing.MARK_COLUMN: ["", "", "", ""],
            editing.DELETE_COLUMN: [False, False, False, True],
            "row_id": ["a", "b", "c", "d"],
            "n": pd.array([1, 2, None, 4], dtype="Int64"),
        }
    )
    state = {
        "edited_rows": {
            "2": {"n": 9, editing.MARK_COLUMN: "x", "row_id": "z"},
            0: {"n": None},  # had 1: a clear, to confirm
            1: {editing.DELETE_COLUMN: True},
            3: {editing.DELETE_COLUMN: False},
            7: {"n": 1},
        },
    }

    changes = editing.grid_changes(state, frame, TYPES)

    assert changes.ops == [DeleteRow("b"), SetCell("c", "n", "9"), sessions.UndoCell("d", None)]
    assert changes.clears == [SetCell("a", "n", None)]
    # An empty cell sent empty again is no change at all.
    assert editing.grid_changes({"edited_rows": {2: {"n": None}}}, frame, TYPES) == editing.GridChanges()
    assert editing.grid_ops({}, frame, TYPES) == []


@pytest.mark.parametrize(
    ("value", "duck_type", "shown"),
    [
        (None, "DOUBLE", "∅"),
        (float("nan"), "DOUBLE", "∅"),
        (pd.NA, "BIGINT", "∅"),
        (pd.NaT, "TIMESTAMP", "∅"),
        (12.0, "DOUBLE", "12"),
        (12.123456, "DOUBLE", "12.1235"),
        ("3.0", "DOUBLE", "3"),
        ("9.25", "DOUBLE", "9.25"),
        (100001, "BIGINT", "100001"),
        (7.0, "BIGINT", "7"),
        (True, "BOOLEAN", "true"),
        (__import__("datetime").date(2024, 5, 1), "DATE", "2024-05-01"),
        (pd.Timestamp("2024-05-01 10:30:00"), "TIMESTAMP", "2024-05-01 10:30:00"),
        ("2024-05-01T10:30:00", "TIMESTAMP", "2024-05-01 10:30:00"),
        (__import__("decimal").Decimal("12.50"), "DECIMAL(10,2)", "12.50"),
        ("", "VARCHAR", ""),
        ("Zoë", "VARCHAR", "Zoë"),
    ],
)
def test_display_value_is_the_same_everywhere(value: Any, duck_type: str, shown: str) -> None:
    assert display_value(value, duck_type) == shown


def test_column_rules_read_the_suite_and_long_text_is_refused() -> None:
    rules = editing.column_rules(
        {
            "expectations": [
                {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": "plan", "value_set": ["a", "b"]}},
                {"type": "expect_column_value_lengths_to_be_between", "kwargs": {"column": "name", "max_value": 5}},
                {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "row_id"}},
            ]
        }
    )
    assert rules == {"plan": editing.ColumnRule(value_set=("a", "b")), "name": editing.ColumnRule(max_length=5)}
    # Inferred and turned-off rules warn at review; they never restrict what an editor types.
    inferred = {
        "type": "expect_column_values_to_be_in_set",
        "kwargs": {"column": "city", "value_set": ["x"]},
        "meta": {"oreo": {"inferred": True}},
    }
    off = {
        "type": "expect_column_value_lengths_to_be_between",
        "kwargs": {"column": "note", "max_value": 3},
        "meta": {"oreo": {"disabled": True}},
    }
    assert editing.column_rules({"expectations": [inferred, off]}) == {}

    editing.check_lengths({"name": "12345", "n": 123456}, rules, TYPES, "r1")
    with pytest.raises(
        InvalidInput, match=r"row 'r1', column 'name': '123456' has 6 characters, more than the 5 allowed"
    ):
        editing.check_lengths({"name": "123456"}, rules, TYPES, "r1")
    with pytest.raises(InvalidInput, match="more than the 2,000 allowed"):
        editing.check_lengths({"other": "x" * 2001}, rules, {"other": "VARCHAR"}, "r1")


def test_a_table_query_round_trips_through_its_url() -> None:
    query = filter_bar.TableQuery(
        "demo/customers",
        3,
        "country",
        True,
        (Condition("country", "eq", ("France",)), Condition("age", "between", ("18", "65"))),
    )
    params = query.to_params()
    assert params["page"] == "3" and params["desc"] == "1" and len(params["f"]) == 2

    read, problems = filter_bar.query_from_url(params, datasets=["demo/customers"])
    assert (read, problems) == (query, [])
    checked, problems = filter_bar.check_query(read, {"country": "VARCHAR"})
    assert checked.conditions == (Condition("country", "eq", ("France",)),)
    assert problems and "unknown column 'age'" in problems[0]
    _, problems = filter_bar.query_from_url({"dataset": "other/x", "desc": "2"}, datasets=["demo/customers"])
    assert problems == ["dataset 'other/x' does not exist or you have no access to it", "desc='2' is not 0 or 1"]


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
    # Numbers are edited as text: the grid's number editor dropped characters it did not expect.
    assert str(frame["n"].dtype) == "string" and list(frame["n"].fillna("∅")) == ["1", "∅", "3"]
    assert str(frame["name"].dtype) == "string"


# ---------------------------------------------------------------- a session under a change request, and its words


@pytest.fixture(scope="module")
def seeded_requests(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The workspace with open change requests (``seed_requests``): a session may be one's, awaiting a revision."""
    folder = tmp_path_factory.mktemp("pages-edit-requests")
    return folder, seed_requests(folder)


@pytest.fixture
def ids(seeded_requests: tuple[Path, dict[str, str]]) -> dict[str, str]:
    return seeded_requests[1]


@pytest.fixture
def in_review(seeded_requests: tuple[Path, dict[str, str]], data_root: Path) -> Catalog:
    return copy_workspace(seeded_requests[0], data_root)


def test_the_table_page_will_not_discard_a_session_awaiting_its_revision(
    in_review: Catalog, ids: dict[str, str]
) -> None:
    cr_id = ids["warn"]
    change_requests.request_changes(in_review, cr_id, "use gold", actor=user(in_review, "abe"))
    cr = change_requests.get_change_request(in_review, cr_id, actor=user(in_review, "erin"))
    gold = [sessions.SetCell("1000", "plan", "gold")]
    sessions.apply_edits(in_review, cr.session_id or "", gold, actor=user(in_review, "erin"))
    at = signed_in("erin", TABLE_PAGE)
    discard = at.button(key="table_discard")
    assert discard.disabled
    assert cr_id in (discard.help or "") and "withdraw the request on My requests" in (discard.help or "")
    assert has_text(at.caption, f"You are revising change request `{cr_id}`")
    assert has_text(at.caption, "cannot be discarded while the request waits")
    # A plain session with pending edits, of another editor, still discards from the same page.
    edit(in_review, "eve", sessions.SetCell("1001", "amount", "99.25"))
    other = signed_in("eve", TABLE_PAGE)
    assert not other.button(key="table_discard").disabled
    assert not has_text(other.caption, "You are revising")


def test_a_revision_submitted_on_the_table_page_names_its_request_and_keeps_its_title(
    in_review: Catalog, ids: dict[str, str]
) -> None:
    cr_id = ids["warn"]
    change_requests.request_changes(in_review, cr_id, "use gold", actor=user(in_review, "abe"))
    cr = change_requests.get_change_request(in_review, cr_id, actor=user(in_review, "erin"))
    sessions.apply_edits(
        in_review, cr.session_id or "", [sessions.SetCell("1000", "plan", "gold")], actor=user(in_review, "erin")
    )
    at = signed_in("erin", TABLE_PAGE)
    at.button(key="table_submit").click().run(timeout=120)
    assert has_text(at.markdown, f"as revision **2** of **{cr.title}** (`{cr_id}`)")
    assert not [t for t in at.text_input if t.key == "submit_title"]  # a revision keeps its title

    at.button(key="submit_confirm").click().run(timeout=900)
    assert not at.exception, at.exception
    revised = change_requests.get_change_request(in_review, cr_id, actor=user(in_review, "erin"))
    assert (revised.revision, revised.title) == (2, cr.title)
    said = texts(at.success) + texts(at.warning)
    assert any(f"Submitted revision 2 of change request `{cr_id}` ({cr.title})" in t for t in said), said


def test_the_table_page_names_the_session_in_words_not_by_its_id(workspace: Catalog) -> None:
    session = edit(workspace, "eve", sessions.SetCell("1001", "amount", "99.25"))
    at = signed_in("eve", TABLE_PAGE)
    assert has_text(at.caption, "Your editing session (from version 0) · **1** pending change(s)"), texts(at.caption)
    assert not has_text(at.caption, session.session_id)


def test_changing_every_matching_row_is_previewed_then_one_pending_change_undone_as_one(workspace: Catalog) -> None:
    at = signed_in("erin", TABLE_PAGE)
    at.selectbox(key="bulk_column").select("plan").run(timeout=120)
    at.radio(key="bulk_kind").set_value("replace").run(timeout=120)
    at.text_input(key="bulk_find").input("free").run(timeout=120)
    at.text_input(key="bulk_replace").input("basic").run(timeout=120)
    at.radio(key="bulk_mode").set_value("whole").run(timeout=120)
    at.button(key="bulk_preview_button").click().run(timeout=120)
    assert {m.label: m.value for m in at.metric} == {"Matching rows": "120", "Would change": "30",
                                                     "Already so (no-op)": "90"}  # fmt: skip
    assert pending(workspace, "erin") == []  # a preview saves nothing

    at.button(key="bulk_apply").click().run(timeout=120)
    assert not at.exception
    assert "Pending changes (1)" in _expander_labels(at)
    assert "plan: replace value 'free' → 'basic' in 30 rows" in " ".join(texts(at.markdown))
    assert {e.new_value for e in pending(workspace, "erin")} == {"basic"} and len(pending(workspace, "erin")) == 30
    assert _row(at, "1000")["plan"] == "basic"
    (undo,) = [k for k in button_keys(at) if k.startswith("undo_bulk_")]
    at.button(key=undo).click().run(timeout=120)
    assert pending(workspace, "erin") == []
    assert "Pending changes (0)" in _expander_labels(at)
