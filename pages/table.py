"""The main table of a dataset, paged, sorted and filtered on the server (DuckDB)."""

from __future__ import annotations

import math

import streamlit as st

from app.components import DATASET_KEY, catalog, dataset_options, oreo_errors, require_user, split_dataset
from core import datasets
from core.config import get_settings
from core.reads import RowFilter

NO_FILTER = "(no filter)"
NATURAL = "(table order)"
OPS = {"equals": "eq", "contains": "contains"}

user = require_user()
st.title("Table")

options = dataset_options(user)
if not options:
    st.info("No datasets to show.")
    st.stop()
if st.session_state.get(DATASET_KEY) not in options:
    st.session_state[DATASET_KEY] = options[0]
choice = st.selectbox("Dataset", options, key=DATASET_KEY)
project_id, dataset_id = split_dataset(choice)

with oreo_errors():
    info = datasets.get_dataset(catalog(), project_id, dataset_id, actor=user)
    columns = [c.name for c in datasets.dataset_columns(info)]

    f1, f2, f3, s1, s2, s3 = st.columns([2, 1.2, 2, 2, 1, 1.2], vertical_alignment="bottom")
    filter_col = f1.selectbox("Filter column", [NO_FILTER, *columns], key="table_filter_col")
    filter_op = f2.selectbox("Match", list(OPS), key="table_filter_op")
    filter_value = f3.text_input("Value", key="table_filter_value", placeholder="press Enter to apply")
    sort_col = s1.selectbox("Sort by", [NATURAL, *columns], key="table_sort_col")
    descending = s2.toggle("Desc", key="table_sort_desc")
    sizes = sorted({25, 50, 100, get_settings().page_size})
    page_size = s3.selectbox("Rows/page", sizes, index=sizes.index(get_settings().page_size), key="table_page_size")

    filters = []
    if filter_col != NO_FILTER and filter_value != "":
        filters.append(RowFilter(column=filter_col, value=filter_value, op=OPS[filter_op]))  # type: ignore[arg-type]

    # A new query starts at page 1.
    signature = (choice, filter_col, filter_op, filter_value, sort_col, descending, page_size)
    if st.session_state.get("table_signature") != signature:
        st.session_state["table_signature"] = signature
        st.session_state["table_page"] = 1

    page_no = int(st.session_state.get("table_page", 1))
    page = datasets.dataset_rows(
        catalog(),
        project_id,
        dataset_id,
        actor=user,
        filters=filters,
        order_by=None if sort_col == NATURAL else sort_col,
        descending=descending,
        limit=page_size,
        offset=(page_no - 1) * page_size,
    )
    num_pages = max(1, math.ceil(page.total / page_size))
    if page_no > num_pages:
        st.session_state["table_page"] = num_pages
        st.rerun()

    first = (page_no - 1) * page_size + 1 if page.total else 0
    last = min(page_no * page_size, page.total)
    st.caption(
        f"Rows **{first:,}–{last:,}** of **{page.total:,}** · version {info.version} · "
        f"{'key ' + info.key_column if info.key_column else 'generated row ids'}"
    )
    st.dataframe(
        page.rows, hide_index=True, width="stretch", height=min(35 * (len(page.rows) + 1) + 3, 900), key="table_grid"
    )
    st.pagination(num_pages, key="table_page", max_visible_pages=9)
