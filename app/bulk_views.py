"""Bulk changes on the Table page and in a change request: "Change matching rows", its pending line, its summary.

``bulk_panel`` changes one column of every row the filter bar keeps: set to a value (the
column's own widget, or ∅ on purpose), find and replace, or a transform; a preview counts
the matching and changing rows and shows a sample, before → after; "Apply" saves it as one
pending change (``core.bulk``). ``pending_bulk_lines`` lists each as one line with one undo;
``bulk_summaries`` shows them above a change request's row diff.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import streamlit as st

from app.components import flash, oreo_errors
from app.editing import ColumnRule
from app.filter_bar import label
from app.formatting import EMPTY
from core import bulk
from core.auth import User
from core.catalog import Catalog
from core.datasets import DatasetInfo
from core.filters import Condition
from core.reads import Column
from core.values import type_family

KINDS = {"set": "Set to a value", "replace": "Find and replace", "transform": "Transform"}
MODES = {"substring": "Within the value", "whole": "Whole value", "regex": "Regular expression"}
TEXT_TRANSFORMS = {
    "trim": "Trim spaces at both ends",
    "collapse": "Collapse runs of whitespace",
    "upper": "UPPER CASE",
    "lower": "lower case",
    "title": "Title Case",
    "number": "Text → number (explicit decimal separator)",
    "date": "Text → date (explicit format)",
}
NUMBER_TRANSFORMS = {"round": "Round to N places"}
PREVIEW_KEY = "bulk_preview"
PLACEHOLDERS = {"integer": "whole number", "decimal": "number", "float": "number", "date": "YYYY-MM-DD",
                "timestamp": "YYYY-MM-DD HH:MM:SS", "timestamptz": "YYYY-MM-DD HH:MM:SS[+HH:MM]"}  # fmt: skip


def _value_input(column: Column, rule: ColumnRule | None) -> Any:
    """The column's own widget for the value every matching cell gets (None: nothing chosen yet)."""
    family = type_family(column.type)
    text = f"New value of {column.name} ({column.type.lower()})"
    if rule is not None and rule.value_set is not None:
        return st.selectbox(text, list(rule.value_set), index=None, key="bulk_set_choice", placeholder="choose")
    if family == "boolean":
        return st.toggle(f"{column.name} is true", key="bulk_set_bool")
    typed = st.text_input(text, key="bulk_set_text", placeholder=PLACEHOLDERS.get(family, "text"))
    return None if typed == "" and family != "text" else typed


def _operation(kind: str, column: Column, rule: ColumnRule | None) -> bulk.Operation | None:
    """The operation the inputs describe (None while one is incomplete)."""
    if kind == "set":
        empty = st.checkbox(f"Empty the cells ({EMPTY})", key="bulk_set_empty")
        if empty:
            return bulk.SetValue(None)
        value = _value_input(column, rule)
        return None if value is None else bulk.SetValue(value)
    if kind == "replace":
        left, right = st.columns(2)
        find = left.text_input("Find", key="bulk_find")
        replace = right.text_input("Replace with", key="bulk_replace", help="A regular expression's groups: \\1")
        mode = st.radio("Match", list(MODES), format_func=MODES.__getitem__, horizontal=True, key="bulk_mode")
        ignore_case = st.checkbox("Ignore case", key="bulk_ignore_case")
        return bulk.Replace(find, replace, mode, ignore_case) if find or mode == "whole" else None
    family = type_family(column.type)
    numeric = family in ("integer", "decimal", "float")
    choices = TEXT_TRANSFORMS if family == "text" else NUMBER_TRANSFORMS if numeric else {}
    if not choices:
        st.caption(f"No transform applies to {column.type.lower()} values.")
        return None
    name = st.selectbox("Transform", list(choices), format_func=choices.__getitem__, key="bulk_transform")
    if name == "round":
        places = st.number_input("Places", min_value=-18, max_value=18, value=2, step=1, key="bulk_places")
        return bulk.Transform("round", places=int(places))
    if name == "number":
        separator = st.radio("Decimal separator", [".", ","], horizontal=True, key="bulk_separator")
        return bulk.Transform("number", fmt=separator)
    if name == "date":
        fmt = st.text_input("Format (strptime)", key="bulk_date_format", placeholder="%d/%m/%Y")
        return bulk.Transform("date", fmt=fmt) if fmt else None
    return bulk.Transform(name)  # type: ignore[arg-type]


def sample_frame(preview: bulk.BulkPreview, columns: Sequence[Column]) -> pd.DataFrame:
    """The preview's sample, row-shaped: the changed column as before → after, then the row's other cells."""
    others = [c.name for c in columns if c.name not in ("row_id", preview.column)]
    records = []
    for s in preview.sample:
        cells = {"row": s.row_id, f"{preview.column} (before)": s.before, f"{preview.column} (after)": s.after}
        records.append({**cells, **{name: s.values.get(name) for name in others}})
    return pd.DataFrame.from_records(records).astype(object).where(lambda f: f.notna(), EMPTY)


def _show_preview(preview: bulk.BulkPreview, columns: Sequence[Column]) -> None:
    with st.container(key="bulk_preview_box"):
        m1, m2, m3 = st.columns(3)
        m1.metric("Matching rows", f"{preview.matched:,}", border=True)
        m2.metric("Would change", f"{preview.changed:,}", border=True)
        m3.metric("Already so (no-op)", f"{preview.unchanged:,}", border=True)
        st.markdown(f"**{preview.summary}**")
        if preview.sample:
            st.caption(f"The first {len(preview.sample)} changing row(s), before → after:")
            st.dataframe(sample_frame(preview, columns), hide_index=True, width="stretch", key="bulk_sample")


def bulk_panel(
    catalog: Catalog,
    user: User,
    info: DatasetInfo,
    columns: Sequence[Column],
    rules: Mapping[str, ColumnRule],
    conditions: list[Condition],
    session_id: str | None,
    on_applied: Callable[[], None],
) -> None:
    """The "Change matching rows" control: choose a column and a change, preview it, apply it as one pending change."""
    types = {c.name: c.type for c in columns}
    changeable = [c for c in columns if c.name not in ("row_id", info.key_column)]
    with st.expander("Change matching rows", icon=":material/auto_fix_high:", key="table_bulk"):
        rows = " AND ".join(label(c, types) for c in conditions) if conditions else "no filter: every row of the table"
        st.caption(f"Changes one column of every row the filters keep ({rows}) in one step, undone as one.")
        left, right = st.columns([1, 2])
        name = left.selectbox("Column", [c.name for c in changeable], key="bulk_column")
        kind = right.radio("Change", list(KINDS), format_func=KINDS.__getitem__, horizontal=True, key="bulk_kind")
        column = next(c for c in changeable if c.name == name)
        operation = _operation(kind, column, rules.get(name))
        signature = (info.project_id, info.dataset_id, info.version, name, operation, tuple(conditions), session_id)
        kept = st.session_state.get(PREVIEW_KEY)
        preview = kept[1] if kept is not None and kept[0] == signature else None
        buttons = st.container(horizontal=True, key="bulk_buttons")
        if buttons.button("Preview", key="bulk_preview_button", icon=":material/preview:", disabled=operation is None):
            st.session_state.pop(PREVIEW_KEY, None)
            with oreo_errors():
                assert operation is not None
                preview = bulk.preview_bulk(catalog, info.project_id, info.dataset_id, name, operation, actor=user,
                                            conditions=conditions, session_id=session_id)  # fmt: skip
                st.session_state[PREVIEW_KEY] = (signature, preview)
        apply = buttons.button(
            "Apply", key="bulk_apply", type="primary", icon=":material/done_all:",
            disabled=preview is None or not preview.changed,
        )  # fmt: skip
        if preview is not None:
            _show_preview(preview, columns)
        if apply and operation is not None:
            with oreo_errors():
                change = bulk.apply_bulk(catalog, info.project_id, info.dataset_id, name, operation, actor=user,
                                         conditions=conditions, session_id=session_id)  # fmt: skip
                st.session_state.pop(PREVIEW_KEY, None)
                flash(f"{change.summary}: saved as one pending change.", kind="success")
                on_applied()
                st.rerun()


def pending_bulk_lines(
    catalog: Catalog, user: User, session_id: str, changes: list[bulk.BulkChange], on_undone: Callable[[], None]
) -> None:
    """Each bulk change of the session as one pending line with one "Undo"."""
    for change in changes:
        text, undo = st.columns([4, 1], vertical_alignment="center")
        text.markdown(f":material/auto_fix_high: **{change.summary}** (one change)", help=_where(change))
        if undo.button("Undo", key=f"undo_{change.bulk_id}", icon=":material/undo:"):
            with oreo_errors():
                cells = bulk.undo_bulk(catalog, session_id, change.bulk_id, actor=user)
                flash(f"Undone: {change.summary} ({cells:,} cell(s) restored).", kind="info")
                on_undone()
                st.rerun()


def _where(change: bulk.BulkChange) -> str:
    rows = " AND ".join(label(c, {}) for c in change.conditions) or "every row"
    return f"Rows: {rows} · computed on version {change.base_version} · {change.matched:,} matching"


def bulk_summaries(changes: Sequence[Mapping[str, Any]], *, key: str) -> None:
    """A change request's bulk changes (``ChangeRequest.bulk_changes``), one summary line each, above its row diff."""
    if not changes:
        return
    with st.container(key=f"{key}_bulk"):
        for change in changes:
            rows = " AND ".join(change["where"]) or "every row"
            where = f"Rows: {rows} · computed on version {change['base_version']} · {change['matched']:,} matching"
            st.markdown(f":material/auto_fix_high: **Bulk change** · {change['summary']}", help=where)
