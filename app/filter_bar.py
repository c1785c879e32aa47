"""The Table page's query: the filter bar (conditions ANDed, values typed by column) and its URL.

The page keeps dataset, page, sort and filters in ``st.query_params``
(``?dataset=demo/customers&page=3&sort=country&desc=1&f=<filters.to_param>&f=...``), so a
link opens the same view for a colleague with access. ``TableQuery`` is that state; a URL
is read into one (bad parts are dropped with a warning) and written back on every run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import streamlit as st

from app.components import oreo_errors
from app.formatting import display_value
from core.errors import InvalidInput
from core.filters import NO_VALUE_OPS, OP_LABELS, Condition, Op, check_conditions, describe, from_param
from core.filters import to_param as condition_param
from core.values import type_family

if TYPE_CHECKING:
    from app.editing import ColumnRule
    from core.reads import Column

CONDITIONS_KEY = "table_conditions"
MIN_DATE = dt.date(1900, 1, 1)
MAX_DATE = dt.date(2200, 12, 31)
# Integer types a browser number input holds exactly (JavaScript numbers are exact up to 2**53);
# wider columns take text, checked exactly by core.
SAFE_INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "INTEGER", "UTINYINT", "USMALLINT", "UINTEGER"})
_COMPARE: tuple[Op, ...] = ("eq", "ne", "lt", "le", "gt", "ge", "between", "in", "is_empty", "is_not_empty")
_TEXT: tuple[Op, ...] = ("eq", "ne", "contains", "starts_with", "in", "lt", "le", "gt", "ge", "between",
                         "is_empty", "is_not_empty")  # fmt: skip
_IN_SET: tuple[Op, ...] = ("eq", "ne", "in", "is_empty", "is_not_empty")
_BOOLEAN: tuple[Op, ...] = ("eq", "ne", "is_empty", "is_not_empty")


@dataclass(frozen=True)
class TableQuery:
    """What the Table page shows: the dataset, the page number, the server sort and the filters."""

    dataset: str | None = None
    page: int | None = None
    sort: str | None = None
    descending: bool = False
    conditions: tuple[Condition, ...] = field(default_factory=tuple)

    def to_params(self) -> dict[str, str | list[str]]:
        params: dict[str, str | list[str]] = {}
        if self.dataset:
            params["dataset"] = self.dataset
        if self.page and self.page > 1:
            params["page"] = str(self.page)
        if self.sort:
            params["sort"] = self.sort
            if self.descending:
                params["desc"] = "1"
        if self.conditions:
            params["f"] = [condition_param(c) for c in self.conditions]
        return params


def url_params() -> dict[str, str | list[str]]:
    """The page's part of ``st.query_params``, as ``TableQuery.to_params`` writes it."""
    params: dict[str, str | list[str]] = {}
    for name in ("dataset", "page", "sort", "desc"):
        if name in st.query_params:
            params[name] = st.query_params.get(name, "")
    filters = st.query_params.get_all("f")
    if filters:
        params["f"] = list(filters)
    return params


def write_url(query: TableQuery) -> dict[str, str | list[str]]:
    """Put ``query`` in the address bar (only when it changed); returns what was written."""
    params = query.to_params()
    if url_params() != params:
        st.query_params.from_dict(params)
    return params


def query_from_url(
    params: Mapping[str, str | list[str]], *, datasets: Sequence[str]
) -> tuple[TableQuery, list[str]]:
    """The query a URL asks for, and one warning per part that was ignored.

    Columns are not known yet (they depend on the dataset): ``check_query`` checks them.
    """
    problems: list[str] = []
    dataset = params.get("dataset")
    if isinstance(dataset, str) and dataset not in datasets:
        problems.append(f"dataset {dataset!r} does not exist or you have no access to it")
        dataset = None
    page: int | None = None
    raw_page = params.get("page")
    if isinstance(raw_page, str):
        if raw_page.isdigit() and int(raw_page) >= 1:
            page = int(raw_page)
        else:
            problems.append(f"page {raw_page!r} is not a page number")
    sort = params.get("sort")
    desc = params.get("desc")
    if desc not in (None, "0", "1"):
        problems.append(f"desc={desc!r} is not 0 or 1")
    conditions: list[Condition] = []
    raw_filters = params.get("f") or []
    for text in [raw_filters] if isinstance(raw_filters, str) else raw_filters:
        try:
            conditions.append(from_param(text))
        except InvalidInput as exc:
            problems.append(str(exc))
    return (
        TableQuery(
            dataset=dataset if isinstance(dataset, str) else None,
            page=page,
            sort=sort if isinstance(sort, str) and sort else None,
            descending=desc == "1",
            conditions=tuple(conditions),
        ),
        problems,
    )


def check_query(query: TableQuery, types: Mapping[str, str]) -> tuple[TableQuery, list[str]]:
    """``query`` with the sort and the filters checked against the dataset's columns."""
    problems: list[str] = []
    sort = query.sort
    if sort is not None and sort not in types:
        problems.append(f"cannot sort by unknown column {sort!r}")
        sort = None
    kept: list[Condition] = []
    for condition in query.conditions:
        try:
            kept.extend(check_conditions([condition], dict(types)))
        except InvalidInput as exc:
            problems.append(str(exc))
    return replace(query, sort=sort, descending=query.descending and sort is not None, conditions=tuple(kept)), problems


# ---------------------------------------------------------------- the filter bar


def operators(duck_type: str, rule: ColumnRule | None) -> tuple[Op, ...]:
    """The operators the bar offers for a column: what its type can compare."""
    family = type_family(duck_type)
    if rule is not None and rule.value_set is not None:
        return _IN_SET
    if family == "boolean":
        return _BOOLEAN
    if family == "text":
        return _TEXT
    if family in ("nested", "other"):
        return ("contains", "starts_with", "is_empty", "is_not_empty")
    return _COMPARE


def _value_widget(slot: Any, column: Column, rule: ColumnRule | None, op: Op, key: str, label: str) -> Any:
    """One typed input for a filter value: a date picker, a number input, a select box or text."""
    family = type_family(column.type)
    if rule is not None and rule.value_set is not None:
        if op == "in":
            return slot.multiselect(label, list(rule.value_set), key=key, placeholder="choose values")
        return slot.selectbox(label, list(rule.value_set), index=None, key=key, placeholder="choose a value")
    if op == "in":
        return slot.text_input(label, key=key, placeholder="a, b, c", help="Values separated by commas")
    if family == "date":
        return slot.date_input(label, value=None, min_value=MIN_DATE, max_value=MAX_DATE, format="YYYY-MM-DD", key=key)
    if family == "integer" and column.type.upper() in SAFE_INTEGER_TYPES:
        return slot.number_input(label, value=None, step=1, format="%d", key=key, placeholder="a whole number")
    if family == "integer":
        return slot.text_input(label, key=key, placeholder="a whole number")
    if family == "float":
        return slot.number_input(label, value=None, step=1.0, format="%g", key=key, placeholder="a number")
    if family == "boolean":
        return slot.selectbox(label, ["true", "false"], index=None, key=key, placeholder="true or false")
    placeholder = "YYYY-MM-DD HH:MM:SS" if family in ("timestamp", "timestamptz") else "text"
    return slot.text_input(label, key=key, placeholder=placeholder)


def _as_values(raw: Any, op: Op) -> tuple[str, ...] | None:
    """A widget's value as condition text values; None while it is still empty."""
    if raw is None or raw == "" or raw == []:
        return None
    if isinstance(raw, list):
        return tuple(str(v) for v in raw)
    if op == "in" and isinstance(raw, str):
        values = tuple(v.strip() for v in raw.split(",") if v.strip())
        return values or None
    if isinstance(raw, bool):
        return ("true" if raw else "false",)
    if isinstance(raw, float) and raw.is_integer():
        return (str(int(raw)),)
    if isinstance(raw, dt.date):
        return (raw.isoformat(),)
    return (str(raw),)


def label(condition: Condition, types: Mapping[str, str]) -> str:
    """A condition as its chip reads: ``describe`` with values formatted as the grid shows them."""
    duck_type = types.get(condition.column)
    return describe(replace(condition, values=tuple(display_value(v, duck_type) for v in condition.values)))


def filter_bar(
    columns: Sequence[Column], rules: Mapping[str, ColumnRule], conditions: list[Condition]
) -> list[Condition]:
    """Show the active filters (each removable), "Clear filters", and a row to add one more.

    Returns the conditions after this run's clicks; a value that does not fit its column is
    refused with a message and nothing is added.
    """
    types = {c.name: c.type for c in columns}
    by_name = {c.name: c for c in columns}
    conditions = list(conditions)
    if conditions:
        with st.container(horizontal=True, vertical_alignment="center", key="table_filters_active", gap="small"):
            st.markdown("**Filters** (all must hold):")
            for i, condition in enumerate(conditions):
                if i:
                    st.markdown("and")
                if st.button(
                    label(condition, types),
                    key=f"table_filter_remove_{i}",
                    icon=":material/close:",
                    help="Remove this filter",
                ):
                    del conditions[i]
                    return conditions
            if st.button("Clear filters", key="table_filter_clear", icon=":material/filter_alt_off:", type="tertiary"):
                return []

    names = list(types)
    # The button's slot fits "Add filter" at 1024 px (0.9 cut it to "Ad…").
    column_slot, op_slot, value_slot, add_slot = st.columns([1.3, 1, 1.9, 1.3], vertical_alignment="bottom")
    # New keys after each added filter: the browser keeps a widget's value under its old key.
    rev = st.session_state.get("table_filter_rev", 0)
    suffix = f"_{rev}" if rev else ""
    name = column_slot.selectbox(
        "Filter column", names, index=None, key=f"table_filter_col{suffix}", placeholder="column"
    )
    column = by_name.get(name) if name else None
    rule = rules.get(name) if name else None
    ops = operators(column.type, rule) if column else _COMPARE
    op: Op = op_slot.selectbox(
        "Operator", ops, format_func=lambda o: OP_LABELS[o], key=f"table_filter_op_{name}{suffix}"
    )
    raw: list[Any] = []
    if column is not None and op not in NO_VALUE_OPS:
        widget_key = f"table_filter_value_{name}_{'in' if op == 'in' else 'one'}{suffix}"
        if op == "between":
            low, high = value_slot.columns(2)
            raw = [
                _value_widget(low, column, rule, op, f"{widget_key}_low", "From"),
                _value_widget(high, column, rule, op, f"{widget_key}_high", "To"),
            ]
        else:
            raw = [_value_widget(value_slot, column, rule, op, widget_key, "Value")]
    elif column is None:
        value_slot.text_input("Value", key="table_filter_value_none", disabled=True, placeholder="choose a column")
    add = add_slot.button("Add filter", key="table_filter_add", icon=":material/filter_alt:", width="stretch")
    if not add:
        return conditions
    if column is None:
        st.error("Choose a column to filter on.", icon=":material/error:")
        return conditions
    values: tuple[str, ...] = ()
    for part in raw:
        got = _as_values(part, op)
        if got is None:
            st.error(f"Give a value for the filter on {name!r} ({OP_LABELS[op]}).", icon=":material/error:")
            return conditions
        values += got
    with oreo_errors():
        (checked,) = check_conditions([Condition(column.name, op, values)], types)
        # The row is empty again for the next filter.
        for key in [k for k in st.session_state if str(k).startswith(("table_filter_value_", "table_filter_op_"))]:
            del st.session_state[key]
        st.session_state.pop(f"table_filter_col{suffix}", None)
        st.session_state["table_filter_rev"] = rev + 1
        return [*conditions, checked]
    return conditions
