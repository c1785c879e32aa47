"""``sessions.fold_events`` (DuckDB, for sessions with a bulk change of a million cells) against ``_fold`` (Python)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import sessions

ROWS = ["1", "2", "10", "n-1"]
COLUMNS = ["a", "b", "é"]
VALUES = [None, "", "x", "y"]


@st.composite
def events(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random event sequences: cell edits, row inserts, deletes and undos, bulk markers, bulk-tagged cells."""
    found = []
    for i in range(draw(st.integers(0, 16))):
        kind = draw(st.sampled_from(["cell", "cell", "cell", "row", "bulk"]))
        if kind == "row":
            column, old, new = (
                sessions.ROW_MARKER,
                None,
                draw(st.sampled_from([sessions.INSERT, sessions.DELETE, None])),
            )
        elif kind == "bulk":
            column, old, new = sessions.BULK_MARKER, None, draw(st.sampled_from(['{"column": "a"}', None]))
        else:
            column, old, new = (
                draw(st.sampled_from(COLUMNS)),
                draw(st.sampled_from(VALUES)),
                draw(st.sampled_from(VALUES)),
            )
        found.append(
            {
                "edit_id": f"e{i:04d}", "session_id": "s", "row_id": draw(st.sampled_from(ROWS)), "column": column,
                "old_value": old, "new_value": new, "user_id": "ed", "ts": None,
                "validation": draw(st.sampled_from([None, "{}", '{"bulk": "bulk_1"}'])),
            }
        )  # fmt: skip
    return found


@settings(max_examples=150, deadline=None)
@given(events())
def test_the_duckdb_fold_makes_the_same_net_changes_as_the_python_fold(stored: list[dict[str, Any]]) -> None:
    table = pa.Table.from_pylist(stored, schema=sessions.EDITS_SCHEMA)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sessions, "_FOLD_IN_PYTHON_ROWS", 0)  # DuckDB's fold, as for a large session
        folded = sessions.fold_events(table)
    assert sessions.cell_edits(folded) == sessions._fold(stored)
    # A small session is folded in Python, to the same table.
    assert folded.equals(sessions.fold_events(table)) or table.num_rows == 0
    # Each net change carries the validation of the newest event of its cell.
    newest = {(e["row_id"], e["column"]): e["validation"] for e in stored}
    for row in folded.to_pylist():
        if row["column"] is not None:
            assert row["validation"] == newest[(row["row_id"], row["column"])]


def test_an_empty_session_folds_to_nothing() -> None:
    assert sessions.fold_events(sessions.EDITS_SCHEMA.empty_table()).num_rows == 0
    assert sessions.cell_edits(sessions.fold_events(sessions.EDITS_SCHEMA.empty_table())) == []
