"""The Table page's editing pieces: the grid's frame and typed columns, its edits as core operations, the preview.

``st.data_editor`` cannot colour its cells, so the page shows the editable grid with a
read-only marker column, and beside it a styled, read-only preview of the changed rows.
Everything here is plain pandas, so it is tested without a browser.

Each column gets the editor its type needs: checkboxes for booleans, a select box when the
validation suite lists the allowed values, and text for everything else. Numbers, dates and
timestamps are edited as text too, because the grid's own number and date editors change
what was typed (its number editor drops every character it does not expect, so ``1.5``
became ``15`` and ``1e3`` became ``13``; its date picker rewrites a typed day): the text
reaches ``core.values`` exactly as typed, which saves its canonical value or refuses it.
An emptied cell is never saved from the grid directly: it comes back as a *clear* that the
person confirms (``GridChanges.clears``).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from app.formatting import display_value, float_text, is_empty, shortened
from core import rules
from core.errors import InvalidInput
from core.sessions import CHANGE_COLUMN, EDITED_COLUMN, DeleteRow, EditOp, SetCell, UndoCell
from core.values import INTEGER_RANGES, canonical_text, decimal_shape, type_family

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler

    from core.reads import Column

MARK_COLUMN = "_mark"
DELETE_COLUMN = "_delete"
EDIT_COLUMNS = (MARK_COLUMN, DELETE_COLUMN)  # the grid's own columns, not the table's
MARKS = {"update": "✎ edited", "insert": "＋ added", "delete": "✖ deleted", "": ""}
EDITED_CELL = "background-color: #fff3b0; color: #4a3b00"
ADDED_ROW = "background-color: #d8f5d0; color: #14501a"
DELETED_ROW = "background-color: #fbd5d5; color: #7a1010; text-decoration: line-through"
# Longest text a cell takes when the suite sets no length limit.
DEFAULT_MAX_TEXT = 2000
_MIDNIGHT = re.compile(r"(\d{4}-\d{2}-\d{2})T00:00(?::00(?:\.0+)?)?Z?")
# Column types the grid edits as text: its number and date editors would change the keystrokes.
TYPED_AS_TEXT = ("integer", "decimal", "float", "date", "timestamp", "timestamptz")
NUMBERS = ("integer", "decimal", "float")


@dataclass(frozen=True)
class ColumnRule:
    """What the dataset's validation suite says about one column's values."""

    value_set: tuple[Any, ...] | None = None  # expect_column_values_to_be_in_set
    max_length: int | None = None  # expect_column_value_lengths_to_be_between


def column_rules(suite: Mapping[str, Any]) -> dict[str, ColumnRule]:
    """Per column, the allowed values and the longest text the GX suite allows.

    Rules Oreo inferred from the data, and turned-off rules, shape no editor: an inferred
    value set warns the approver about a new value, it does not stop anyone typing one.
    """
    sets: dict[str, tuple[Any, ...]] = {}
    lengths: dict[str, int] = {}
    for item in suite.get("expectations") or []:
        if rules.is_inferred(item) or rules.is_disabled(item):
            continue
        kwargs = item.get("kwargs") or {}
        column = kwargs.get("column")
        if not isinstance(column, str):
            continue
        kind = item.get("type") or item.get("expectation_type")
        if kind == "expect_column_values_to_be_in_set" and isinstance(kwargs.get("value_set"), list | tuple):
            sets[column] = tuple(kwargs["value_set"])
        elif kind == "expect_column_value_lengths_to_be_between" and kwargs.get("max_value") is not None:
            lengths[column] = int(kwargs["max_value"])
    return {c: ColumnRule(sets.get(c), lengths.get(c)) for c in {*sets, *lengths}}


def _pandas_dtype(duck_type: str) -> str | None:
    """The nullable pandas dtype that gives a DuckDB column the right grid editor."""
    family = type_family(duck_type)
    if family == "boolean":
        return "boolean"
    if family == "text" or family in TYPED_AS_TEXT:
        return "string"
    return None  # nested and other columns: shown as DuckDB returned them


def _float_text(number: float, duck_type: str) -> str:
    """A float as a cell's text: as the grid draws numbers when that is exact, else every digit it holds."""
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"  # what core takes back (the screens draw ∞)
    single = duck_type.upper().strip() in ("FLOAT", "REAL")
    shown = float_text(number)
    if (np.float32(shown) == np.float32(number)) if single else float(shown) == number:
        return shown
    return str(np.float32(number)) if single else repr(float(number))


def editor_text(value: Any, duck_type: str) -> str | None:
    """A typed value as the text its cell holds in the grid, and so the text its editor starts from.

    The screens' reading (``display_value``: ISO dates, whole numbers without separators,
    decimals with their scale), except that a float keeps every digit it holds: a cell
    opened for editing never starts from a rounded number. None: empty.
    """
    if is_empty(value):
        return None
    family = type_family(duck_type)
    if family == "float" and isinstance(value, float | np.floating):
        return _float_text(float(value), duck_type)
    if family == "float" and isinstance(value, str):
        return value  # DuckDB's own text of the value: exact already
    if family == "date" and isinstance(value, dt.datetime):
        return value.date().isoformat()
    return display_value(value, duck_type)


def grid_frame(rows: pd.DataFrame, columns: Sequence[Column], *, deletable: bool = False) -> pd.DataFrame:
    """The overlay page as the editor shows it: typed columns and a read-only change marker first.

    With ``deletable``, a checkbox column follows the marker: ticked rows are deleted.

    The overlay hands every value over as a Python object; booleans get checkboxes, and
    numbers, dates and timestamps become their text (``editor_text``) for the grid's text
    editor. A cleared cell stays empty instead of "None".
    """
    frame = rows.drop(columns=[CHANGE_COLUMN, EDITED_COLUMN], errors="ignore").copy()
    for column in columns:
        dtype = _pandas_dtype(column.type)
        if dtype is None or column.name not in frame.columns:
            continue
        if type_family(column.type) in TYPED_AS_TEXT:
            texts = [editor_text(v, column.type) for v in frame[column.name]]
            frame[column.name] = pd.Series(texts, dtype=dtype, index=frame.index)
        else:
            frame[column.name] = frame[column.name].astype(dtype)
    changes = list(rows[CHANGE_COLUMN]) if CHANGE_COLUMN in rows.columns else [""] * len(rows)
    frame.insert(0, MARK_COLUMN, [MARKS.get(c or "", "") for c in changes])
    if deletable:
        frame.insert(1, DELETE_COLUMN, pd.Series([c == "delete" for c in changes], dtype=bool, index=frame.index))
    return frame.reset_index(drop=True)


def sort_label(name: str, sort: str | None, descending: bool) -> str:
    """A header as the grid shows it: the server's sort column carries ▲ or ▼."""
    if name != sort:
        return name
    return f"{name} {'▼' if descending else '▲'}"


def _type_help(column: Column, rule: ColumnRule | None) -> str:
    family = type_family(column.type)
    parts = [column.type.lower()]
    if family == "integer":
        low, high = INTEGER_RANGES[column.type.upper().strip()]
        parts.append(f"whole numbers {low:,} to {high:,}")
    if family == "decimal":
        shape = decimal_shape(column.type)
        if shape:
            parts.append(f"at most {shape[1]} decimal place(s)")
    if rule and rule.value_set is not None:
        parts.append("one of: " + ", ".join(map(str, rule.value_set)))
    if family == "text":
        parts.append(f"at most {(rule.max_length if rule and rule.max_length else DEFAULT_MAX_TEXT):,} characters")
    if family == "date":
        parts.append("YYYY-MM-DD")
    if family in ("timestamp", "timestamptz"):
        parts.append("YYYY-MM-DD HH:MM:SS" + ("[+HH:MM]" if family == "timestamptz" else ""))
    return " · ".join(parts)


def column_config(
    columns: Sequence[Column],
    rules: Mapping[str, ColumnRule],
    *,
    key_column: str | None,
    sort: str | None = None,
    descending: bool = False,
    editable: bool = True,
) -> dict[str, Any]:
    """``st.column_config`` for every column: its type's editor, its rules, the sort mark in its header.

    Numbers, dates and timestamps are text columns (numbers right-aligned): the grid's number
    and date editors would change what was typed. No ``max_value`` / ``max_chars`` /
    ``validate`` is set either: the grid would clamp, cut or silently drop the value. Core
    refuses a value that does not fit, with a message; the help text says the range and form.
    """
    import streamlit as st

    config: dict[str, Any] = {
        MARK_COLUMN: st.column_config.TextColumn("change", disabled=True, width="small"),
        DELETE_COLUMN: st.column_config.CheckboxColumn(
            "delete", width="small", help="Tick to delete the row (untick to keep it)", disabled=not editable
        ),
    }
    for column in columns:
        name = column.name
        if name == "row_id" and key_column:
            config[name] = None  # the key shows the row; row_id stays in exports and the CLI
            continue
        label = sort_label(name, sort, descending)
        rule = rules.get(name)
        help_text = _type_help(column, rule)
        locked = not editable or name in ("row_id", key_column)
        family = type_family(column.type)
        if rule is not None and rule.value_set is not None and family not in ("nested", "other"):
            config[name] = st.column_config.SelectboxColumn(
                label, options=list(rule.value_set), help=help_text, disabled=locked
            )
        elif family in NUMBERS:
            config[name] = st.column_config.TextColumn(
                label, help=help_text, disabled=locked, alignment="right"
            )  # text, so what was typed reaches core unchanged: core saves it exactly or refuses it
        elif family == "boolean":
            config[name] = st.column_config.CheckboxColumn(label, help=help_text, disabled=locked)
        else:
            config[name] = st.column_config.TextColumn(label, help=help_text, disabled=locked)
    if key_column and isinstance(config.get(key_column), dict):
        config[key_column]["pinned"] = True  # the row's name stays in view while scrolling sideways
    return config


def cell_text(value: Any, duck_type: str) -> str | None:
    """A grid value as the text core expects (None: the grid sent no value)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    family = type_family(duck_type)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and family == "integer" and value.is_integer():
        return str(int(value))
    text = str(value)
    if text == "":
        return None  # an emptied cell: the person confirms it (GridChanges.clears)
    if family == "date":
        midnight = _MIDNIGHT.fullmatch(text)
        if midnight:
            return midnight.group(1)  # the grid's date editor sends an ISO timestamp at midnight
    return text


def saved_otherwise(ops: Sequence[EditOp], types: Mapping[str, str]) -> bool:
    """Whether a saved cell's value reads otherwise than it was typed (``1e3`` is saved as ``1000``).

    The grid keeps showing what was typed until it is redrawn from the stored values.
    """
    for op in ops:
        if not isinstance(op, SetCell) or op.value is None:
            continue
        try:
            canonical = canonical_text(op.value, column=op.column, duck_type=types.get(op.column, "VARCHAR"))
        except InvalidInput:
            return True  # e.g. Infinity where the dataset allows it: redraw rather than guess
        if canonical != op.value:
            return True
    return False


@dataclass(frozen=True)
class GridChanges:
    """What one grid interaction asks for: edits to save, and cells it emptied (to confirm first)."""

    ops: list[EditOp] = field(default_factory=list)
    clears: list[SetCell] = field(default_factory=list)


def grid_changes(state: Mapping[str, Any], frame: pd.DataFrame, types: Mapping[str, str]) -> GridChanges:
    """The core operations that the editor's pending state (``st.session_state[key]``) stands for.

    ``edited_rows`` and ``deleted_rows`` index the rows of ``frame`` by position; the
    marker column and unknown columns are ignored (both are read-only in the grid). A
    cell that had a value and arrives empty is a clear, never an edit.
    """
    ops: list[EditOp] = []
    clears: list[SetCell] = []
    row_ids = list(frame["row_id"]) if len(frame) else []
    for position, changes in sorted((int(k), v) for k, v in (state.get("edited_rows") or {}).items()):
        if not 0 <= position < len(row_ids):
            continue
        for column, value in changes.items():
            if column == DELETE_COLUMN:
                was_deleted = bool(frame.iloc[position][DELETE_COLUMN]) if DELETE_COLUMN in frame.columns else False
                if bool(value) and not was_deleted:
                    ops.append(DeleteRow(str(row_ids[position])))
                elif not bool(value) and was_deleted:
                    ops.append(UndoCell(str(row_ids[position]), None))
                continue
            if column not in types or column == "row_id":
                continue
            text = cell_text(value, types[column])
            row_id = str(row_ids[position])
            if text is None:
                before = frame.iloc[position][column] if column in frame.columns else None
                if not is_empty(before) and str(before) != "":
                    clears.append(SetCell(row_id, column, None))
                continue
            ops.append(SetCell(row_id, column, text))
    for position in sorted(int(p) for p in state.get("deleted_rows") or []):
        if 0 <= position < len(row_ids):
            ops.append(DeleteRow(str(row_ids[position])))
    return GridChanges(ops, clears)


def grid_ops(state: Mapping[str, Any], frame: pd.DataFrame, types: Mapping[str, str]) -> list[EditOp]:
    """``grid_changes`` with clears as edits: for callers that already confirmed them."""
    changes = grid_changes(state, frame, types)
    return [*changes.ops, *changes.clears]


def check_lengths(
    values: Mapping[str, Any], rules: Mapping[str, ColumnRule], types: Mapping[str, str], row: str
) -> None:
    """Refuse text longer than its column allows (never cut it).

    Raises:
        InvalidInput: Names the row, the column, the start of the value and the limit.
    """
    for column, value in values.items():
        if not isinstance(value, str) or type_family(types.get(column, "")) != "text":
            continue
        rule = rules.get(column)
        limit = rule.max_length if rule and rule.max_length else DEFAULT_MAX_TEXT
        if len(value) > limit:
            shown = shortened(value, 40)
            raise InvalidInput(
                f"row {row!r}, column {column!r}: {shown!r} has {len(value):,} characters, more than the "
                f"{limit:,} allowed; nothing was saved",
                field=column,
            )


def check_op_lengths(ops: Sequence[EditOp], rules: Mapping[str, ColumnRule], types: Mapping[str, str]) -> None:
    """``check_lengths`` for every cell edit of a batch."""
    for op in ops:
        if isinstance(op, SetCell):
            check_lengths({op.column: op.value}, rules, types, op.row_id)


def changed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of an overlay page that the session changes."""
    if CHANGE_COLUMN not in rows.columns:
        return rows.iloc[0:0]
    return rows[rows[CHANGE_COLUMN].fillna("") != ""].reset_index(drop=True)


def preview(rows: pd.DataFrame, columns: Sequence[Column]) -> Styler:
    """Changed overlay rows, styled: edited cells yellow, added rows green, deleted rows red and struck through.

    Values read as everywhere else (``app.formatting``): ∅ for empty, ISO dates, grid numbers.
    """
    frame = grid_frame(rows, columns)
    changes = list(rows[CHANGE_COLUMN]) if CHANGE_COLUMN in rows.columns else [""] * len(rows)
    edited = list(rows[EDITED_COLUMN]) if EDITED_COLUMN in rows.columns else [[]] * len(rows)
    types = {c.name: c.type for c in columns}

    def style_row(row: pd.Series) -> list[str]:
        i = int(row.name)  # type: ignore[arg-type]
        if changes[i] == "insert":
            return [ADDED_ROW] * len(row)
        if changes[i] == "delete":
            return [DELETED_ROW] * len(row)
        cells = set(edited[i] or [])
        return [EDITED_CELL if c in cells else "" for c in row.index]

    # Values as text, so an empty one reads ∅ in the cell itself (not only on the canvas).
    shown = frame.astype(object)
    for name in frame.columns:
        if name in types:
            shown[name] = [display_value(v, types[name]) for v in frame[name]]
    return shown.style.apply(style_row, axis=1)


def preview_config(columns: Sequence[Column], key_column: str | None) -> dict[str, Any]:
    """The preview's columns: numbers stay right-aligned although they are shown as text."""
    import streamlit as st

    config: dict[str, Any] = {MARK_COLUMN: st.column_config.TextColumn("change", width="small")}
    for column in columns:
        if column.name == "row_id" and key_column:
            config[column.name] = None
        elif type_family(column.type) in ("integer", "decimal", "float"):
            config[column.name] = st.column_config.TextColumn(column.name, alignment="right")
    return config
