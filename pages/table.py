"""The main table of a dataset, paged, sorted and filtered on the server (DuckDB).

Editors (and above) edit it in place: every change in the grid is saved at once to
their live-edit session, which overlays the page until they submit it as a change
request or discard it.
"""

from __future__ import annotations

import math

import streamlit as st

from app import editing
from app.components import (
    DATASET_KEY,
    catalog,
    close_dialog,
    dataset_options,
    dialog_value,
    flash,
    open_dialog,
    oreo_errors,
    require_user,
    show_flash,
    split_dataset,
    status_badge,
)
from core import auth, change_requests, datasets, sessions
from core.config import get_settings
from core.reads import Page, RowFilter

NO_FILTER = "(no filter)"
NATURAL = "(table order)"
OPS = {"equals": "eq", "contains": "contains"}
ROW_PX = 35
MAX_GRID_PX = 900
PENDING_SHOWN = 100

user = require_user()
st.title("Table")
show_flash()

options = dataset_options(user)
if not options:
    st.info("No datasets to show.")
    st.stop()
if st.session_state.get(DATASET_KEY) not in options:
    st.session_state[DATASET_KEY] = options[0]
choice = st.selectbox("Dataset", options, key=DATASET_KEY)
project_id, dataset_id = split_dataset(choice)


def grid_height(rows: int) -> int:
    return min(ROW_PX * (rows + 1) + 3, MAX_GRID_PX)


def editor_key() -> str:
    # A new key after each save gives a fresh editor, so saved edits are not sent twice.
    return f"table_editor_{st.session_state.get('table_editor_rev', 0)}"


def reset_editor() -> None:
    st.session_state["table_editor_rev"] = st.session_state.get("table_editor_rev", 0) + 1


@st.dialog("Submit change request", on_dismiss=lambda: close_dialog("submit"))
def submit_dialog(session_id: str, pending: int) -> None:
    st.write(f"Send your **{pending}** pending edit(s) of `{choice}` to an approver for review.")
    title = st.text_input("Title", key="submit_title", placeholder=f"Changes to {choice}", max_chars=300)
    description = st.text_area("Description", key="submit_description", placeholder="What changed and why")
    left, right = st.columns(2)
    if right.button("Cancel", key="submit_cancel", width="stretch"):
        close_dialog("submit")
        st.rerun()
    if left.button("Submit", key="submit_confirm", type="primary", width="stretch"):
        with oreo_errors():
            with st.spinner("Staging the change and running the data checks..."):
                cr = change_requests.submit_change_request(
                    catalog(), session_id, actor=user, title=title.strip() or None, description=description.strip()
                )
            status = getattr(cr, "validation_status", None)
            flash(
                f"Submitted change request `{cr.id}` ({cr.rows} row(s), {cr.cells} cell(s)). "
                f"Data checks: {status_badge(status)}",
                kind="warning" if status in ("warning", "failed") else "success",
            )
            close_dialog("submit")
            for key in ("submit_title", "submit_description"):
                st.session_state.pop(key, None)
            reset_editor()
            st.rerun()


@st.dialog("Discard all pending edits?", on_dismiss=lambda: close_dialog("discard"))
def discard_dialog(session_id: str, pending: int) -> None:
    st.write(f"This deletes your **{pending}** unsubmitted edit(s) of `{choice}`. It cannot be undone.")
    left, right = st.columns(2)
    if right.button("Keep editing", key="discard_cancel", width="stretch"):
        close_dialog("discard")
        st.rerun()
    if left.button("Discard", key="discard_confirm", type="primary", width="stretch"):
        with oreo_errors():
            sessions.discard_session(catalog(), session_id, actor=user)
            close_dialog("discard")
            flash("Your pending edits were discarded.", kind="info")
            reset_editor()
            st.rerun()


def pending_label(edit: sessions.CellEdit) -> str:
    row = f"row `{edit.row_id}`"
    if edit.column is None:
        return f"{row} {'added' if edit.change == 'insert' else 'deleted'}"
    if edit.change == "insert":
        return f"{row} · **{edit.column}** = `{edit.new_value}` (new row)"
    return f"{row} · **{edit.column}**: `{edit.old_value}` → `{edit.new_value}`"


with oreo_errors():
    info = datasets.get_dataset(catalog(), project_id, dataset_id, actor=user)
    columns = datasets.dataset_columns(info)
    names = [c.name for c in columns]
    types = {c.name: c.type for c in columns}
    role = auth.role_in(catalog(), user, project_id)
    can_edit = role is not None and role.rank >= auth.Role.EDITOR.rank

    f1, f2, f3, s1, s2, s3 = st.columns([2, 1.2, 2, 2, 1, 1.2], vertical_alignment="bottom")
    filter_col = f1.selectbox("Filter column", [NO_FILTER, *names], key="table_filter_col")
    filter_op = f2.selectbox("Match", list(OPS), key="table_filter_op")
    filter_value = f3.text_input("Value", key="table_filter_value", placeholder="press Enter to apply")
    sort_col = s1.selectbox("Sort by", [NATURAL, *names], key="table_sort_col")
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

    query = {
        "filters": filters,
        "order_by": None if sort_col == NATURAL else sort_col,
        "descending": descending,
        "limit": page_size,
    }
    # The user's open session overlays the page; a new one is started only by a first edit.
    session = sessions.current_session(catalog(), project_id, dataset_id, actor=user) if can_edit else None

    def save(ops: list[sessions.EditOp]) -> None:
        """Save edits to the user's session (starting one if needed), then show the saved state."""
        target = session or sessions.open_session(catalog(), project_id, dataset_id, actor=user)
        sessions.apply_edits(catalog(), target.session_id, ops, actor=user)
        reset_editor()

    def read_page(page_no: int) -> Page:
        offset = (page_no - 1) * page_size
        if session is not None:
            return sessions.overlay_page(catalog(), session.session_id, actor=user, offset=offset, **query)
        return datasets.dataset_rows(catalog(), project_id, dataset_id, actor=user, offset=offset, **query)

    if st.session_state.pop("table_goto_last", False):
        st.session_state["table_page"] = 10**9  # clamped to the last page below
    page_no = int(st.session_state.get("table_page", 1))
    page = read_page(page_no)
    num_pages = max(1, math.ceil(page.total / page_size))
    if page_no > num_pages:
        st.session_state["table_page"] = page_no = num_pages
        page = read_page(page_no)

    first = (page_no - 1) * page_size + 1 if page.total else 0
    last = min(page_no * page_size, page.total)
    st.caption(
        f"Rows **{first:,}–{last:,}** of **{page.total:,}** · version {info.version} · "
        f"{'key ' + info.key_column if info.key_column else 'generated row ids'}"
    )

    if not can_edit:
        st.dataframe(page.rows, hide_index=True, width="stretch", height=grid_height(len(page.rows)), key="table_grid")
        st.pagination(num_pages, key="table_page", max_visible_pages=9)
        st.stop()

    layout = datasets.layout_for(project_id, dataset_id)
    pending = sessions.effective_edits(layout, session.session_id) if session else []
    bar = st.columns([5, 1.6, 1.4], vertical_alignment="center")
    bar[0].caption(
        (f"Editing session `{session.session_id}` (from version {session.base_version})" if session else "No edits yet")
        + f" · **{len(pending)}** pending edit(s), saved as you type · double-click a cell to edit, "
        "tick row markers at the left and press Delete to remove a row"
    )
    if bar[1].button(
        "Submit change request", key="table_submit", type="primary", icon=":material/send:", disabled=not pending
    ):
        open_dialog("submit")
    if bar[2].button("Discard session", key="table_discard", icon=":material/delete:", disabled=not pending):
        open_dialog("discard")

    frame = editing.grid_frame(page.rows, columns)
    locked = ["row_id", editing.MARK_COLUMN] + ([info.key_column] if info.key_column else [])
    key = editor_key()
    st.data_editor(
        frame,
        key=key,
        hide_index=True,
        width="stretch",
        height=grid_height(len(frame)),
        row_height=ROW_PX,
        num_rows="delete",
        disabled=locked,
        column_config={editing.MARK_COLUMN: st.column_config.TextColumn("change", disabled=True, width="small")},
    )
    st.pagination(num_pages, key="table_page", max_visible_pages=9)

    ops = editing.grid_ops(st.session_state.get(key) or {}, frame, types)
    if ops:
        # Not saved when core refuses it: the error shows under the grid, which keeps the value to fix.
        with oreo_errors():
            save(ops)
            st.rerun()

    changed = editing.changed_rows(page.rows)
    if len(changed):
        with st.container(key="table_preview"):
            st.markdown(
                f"**Changes on this page** ({len(changed)} row(s))",
                help="Yellow: edited cell · green: added row · red, struck through: deleted row",
            )
            st.dataframe(
                editing.preview(changed, columns),
                hide_index=True,
                width="stretch",
                height=grid_height(len(changed)),
                row_height=ROW_PX,
                key="table_preview_grid",
                column_config={editing.MARK_COLUMN: st.column_config.TextColumn("change", width="small")},
            )

    with st.expander(f"Pending edits ({len(pending)})", icon=":material/edit_note:", key="table_pending"):
        if not pending:
            st.write("No pending edits. Change a cell in the grid to start.")
        for edit in pending[:PENDING_SHOWN]:
            text, undo = st.columns([8, 1], vertical_alignment="center")
            text.markdown(pending_label(edit))
            if undo.button("Undo", key=f"undo_{edit.row_id}_{edit.column or ''}", icon=":material/undo:"):
                with oreo_errors():
                    save([sessions.UndoCell(edit.row_id, edit.column)])
                    st.rerun()
        if len(pending) > PENDING_SHOWN:
            st.caption(f"… and {len(pending) - PENDING_SHOWN} more.")

    with st.expander("Add a row", icon=":material/add:", key="table_add"):
        with st.form("table_add_form", border=False):
            st.caption(
                "A new row is listed after the table's last row."
                + (f" **{info.key_column}** is required and must be new." if info.key_column else "")
            )
            values = {}
            grid = st.columns(3)
            for i, column in enumerate(c for c in columns if c.name != "row_id"):
                values[column.name] = grid[i % 3].text_input(
                    f"{column.name} ({column.type.lower()})", key=f"table_add_{column.name}"
                )
            add = st.form_submit_button("Add row", type="primary", key="table_add_submit")
        if add:
            with oreo_errors():
                save([sessions.AddRow({name: value for name, value in values.items() if value != ""})])
                for name in values:  # kept when core refused the row, cleared once it is saved
                    st.session_state.pop(f"table_add_{name}", None)
                st.session_state["table_goto_last"] = True
                st.rerun()

    if session is not None and dialog_value("submit"):
        submit_dialog(session.session_id, len(pending))
    if session is not None and dialog_value("discard"):
        discard_dialog(session.session_id, len(pending))
