"""The Table page's editing pieces: the grid's frame, its edits as core operations, the preview's styling.

``st.data_editor`` cannot colour its cells, so the page shows the editable grid with a
read-only marker column, and beside it a styled, read-only preview of the changed rows.
Everything here is plain pandas, so it is tested without a browser.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from core.sessions import CHANGE_COLUMN, EDITED_COLUMN, DeleteRow, EditOp, SetCell

if TYPE_CHECKING:
    import pandas as pd
    from pandas.io.formats.style import Styler

    from core.reads import Column

MARK_COLUMN = "_mark"
MARKS = {"update": "✎ edited", "insert": "＋ added", "delete": "✖ deleted", "": ""}
EDITED_CELL = "background-color: #fff3b0; color: #4a3b00"
ADDED_ROW = "background-color: #d8f5d0; color: #14501a"
DELETED_ROW = "background-color: #fbd5d5; color: #7a1010; text-decoration: line-through"

_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT")
_FLOAT_TYPES = ("FLOAT", "DOUBLE", "REAL")


def _pandas_dtype(duck_type: str) -> str | None:
    """The nullable pandas dtype that gives a DuckDB column the right grid editor."""
    base = duck_type.split("(")[0].strip().upper()
    if base in _INTEGER_TYPES:
        return "Int64"
    if base in _FLOAT_TYPES:
        return "Float64"
    if base == "BOOLEAN":
        return "boolean"
    if base == "VARCHAR":
        return "string"
    return None  # dates, timestamps, decimals: the objects DuckDB returned already fit


def grid_frame(rows: pd.DataFrame, columns: Sequence[Column]) -> pd.DataFrame:
    """The overlay page as the editor shows it: typed columns and a read-only change marker first.

    The overlay hands every value over as a Python object; typed columns give the grid
    number, checkbox and text editors, and a cleared cell stays empty instead of "None".
    """
    frame = rows.drop(columns=[CHANGE_COLUMN, EDITED_COLUMN], errors="ignore").copy()
    for column in columns:
        dtype = _pandas_dtype(column.type)
        if dtype is not None and column.name in frame.columns:
            frame[column.name] = frame[column.name].astype(dtype)
    changes = rows[CHANGE_COLUMN] if CHANGE_COLUMN in rows.columns else [""] * len(rows)
    frame.insert(0, MARK_COLUMN, [MARKS.get(c or "", "") for c in changes])
    return frame.reset_index(drop=True)


def cell_text(value: Any, duck_type: str) -> str | None:
    """A grid value as the text core expects (None clears the cell)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    base = duck_type.split("(")[0].strip().upper()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and base in _INTEGER_TYPES and value.is_integer():
        return str(int(value))
    text = str(value)
    if text == "" and base != "VARCHAR":
        return None  # an emptied number or date cell means "no value"
    if base == "DATE" and "T" in text:
        return text.split("T", 1)[0]  # the grid's date editor sends an ISO timestamp
    return text


def grid_ops(state: Mapping[str, Any], frame: pd.DataFrame, types: Mapping[str, str]) -> list[EditOp]:
    """The core operations that the editor's pending state (``st.session_state[key]``) stands for.

    ``edited_rows`` and ``deleted_rows`` index the rows of ``frame`` by position; the
    marker column and unknown columns are ignored (both are read-only in the grid).
    """
    ops: list[EditOp] = []
    row_ids = list(frame["row_id"]) if len(frame) else []
    for position, changes in sorted((int(k), v) for k, v in (state.get("edited_rows") or {}).items()):
        if not 0 <= position < len(row_ids):
            continue
        for column, value in changes.items():
            if column in types and column != "row_id":
                ops.append(SetCell(str(row_ids[position]), column, cell_text(value, types[column])))
    for position in sorted(int(p) for p in state.get("deleted_rows") or []):
        if 0 <= position < len(row_ids):
            ops.append(DeleteRow(str(row_ids[position])))
    return ops


def changed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of an overlay page that the session changes."""
    if CHANGE_COLUMN not in rows.columns:
        return rows.iloc[0:0]
    return rows[rows[CHANGE_COLUMN].fillna("") != ""].reset_index(drop=True)


def preview(rows: pd.DataFrame, columns: Sequence[Column]) -> Styler:
    """Changed overlay rows, styled: edited cells yellow, added rows green, deleted rows red and struck through."""
    frame = grid_frame(rows, columns)
    changes = list(rows[CHANGE_COLUMN]) if CHANGE_COLUMN in rows.columns else [""] * len(rows)
    edited = list(rows[EDITED_COLUMN]) if EDITED_COLUMN in rows.columns else [[]] * len(rows)

    def style_row(row: pd.Series) -> list[str]:
        i = int(row.name)  # type: ignore[arg-type]
        if changes[i] == "insert":
            return [ADDED_ROW] * len(row)
        if changes[i] == "delete":
            return [DELETED_ROW] * len(row)
        cells = set(edited[i] or [])
        return [EDITED_CELL if c in cells else "" for c in row.index]

    return frame.style.apply(style_row, axis=1)
