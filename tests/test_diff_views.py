"""``app.diff_views.rows_html``: the row diff's HTML table, escaped, with a stable identity per cell."""

from __future__ import annotations

from app.diff_views import cell_dom_id, rows_html, shown_columns
from core.diff import CellChange, DiffSummary, RowChange, RowDiffPage
from tests.diff_support import diff_rows

COLUMNS = ["row_id", "code", "name", "city", "n"]


def _page(rows: list[RowChange]) -> RowDiffPage:
    return RowDiffPage(
        rows=rows,
        total=len(rows),
        summary=DiffSummary(updated=1, inserted=1, deleted=1, columns={"city": 1}),
        label_columns=["code", "name"],
        columns=COLUMNS,
    )


DELETED = [("code", "2"), ("name", "bob"), ("city", "Rome"), ("n", "2.50")]
INSERTED = [("code", "3"), ("name", "cy"), ("city", None), ("n", "7")]
ROWS = [
    RowChange(
        "1", "update", {"code": "1", "name": "<b>ann</b>"}, (CellChange("city", "Oslo & Co", "<script>x</script>"),)
    ),
    RowChange("2", "delete", {"code": "2", "name": "bob"}, tuple(CellChange(c, v, None) for c, v in DELETED)),
    RowChange("3", "insert", {"code": "3", "name": "cy"}, tuple(CellChange(c, None, v) for c, v in INSERTED)),
]


def test_rows_show_changed_cells_old_to_new_and_whole_inserted_and_deleted_rows() -> None:
    markup = rows_html(_page(ROWS), {"n": "DOUBLE"}, key_name="code")
    assert diff_rows(markup) == [
        {"row_id": "1", "kind": "update", "cells": {"code": "1", "name": "<b>ann</b>",
                                                      "city": ("Oslo & Co", "<script>x</script>"), "n": ""}},
        {"row_id": "2", "kind": "delete", "cells": {"code": "2", "name": "bob", "city": "Rome", "n": "2.5"}},
        {"row_id": "3", "kind": "insert", "cells": {"code": "3", "name": "cy", "city": "∅", "n": "7"}},
    ]  # fmt: skip
    # Values are text, never markup; the key column is shown once, as the key.
    assert "<script>" not in markup and "&lt;script&gt;x&lt;/script&gt;" in markup and "<b>ann" not in markup
    assert markup.count(">code</th>") == 1
    assert f'id="{cell_dom_id("1", "city")}" data-row-id="1" data-column="city"' in markup


def test_columns_are_the_identifying_ones_then_those_the_page_changes() -> None:
    assert shown_columns(_page(ROWS[:1])) == ["code", "name", "city"]
    assert shown_columns(_page(ROWS)) == ["code", "name", "city", "n"]
    assert cell_dom_id("1", "a") != cell_dom_id("1", "b") and cell_dom_id("1", "a") == cell_dom_id("1", "a")
