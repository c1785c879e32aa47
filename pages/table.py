"""The main table of a dataset, paged, sorted and filtered on the server (DuckDB).

Editors (and above) edit it in place: every change in the grid is saved at once to
their live-edit session, which overlays the page until they submit it as a change
request or discard it. Each column is edited with its type's widget; an emptied cell
is saved only once the person confirms it. The dataset, page, sort and filters live in
the URL, so a link opens the same view.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import streamlit as st

from app import bulk_views, editing, filter_bar, live_views
from app.approval_views import SUBMIT_STAGES, StageStatus, stage_summary
from app.components import (
    DATASET_KEY,
    catalog,
    close_dialog,
    dataset_options,
    dialog_value,
    dialogs_open,
    flash,
    open_dialog,
    oreo_errors,
    require_user,
    show_flash,
    split_dataset,
    status_badge,
    wait_for_engine,
)
from app.facet_views import facet_panel
from app.filter_bar import CONDITIONS_KEY, TableQuery
from app.formatting import EMPTY, display_value, rows_span, shortened
from core import auth, bulk, change_requests, datasets, reads, sessions
from core.config import get_settings
from core.errors import OreoError
from core.filters import Condition
from core.reads import Page
from core.values import type_family

NATURAL = "(table order)"
# What the add-row form's text fields ask for, by column type family.
ADD_ROW_PLACEHOLDERS = {
    "integer": "whole number",
    "decimal": "number",
    "float": "number",
    "date": "YYYY-MM-DD",
    "timestamp": "YYYY-MM-DD HH:MM:SS",
    "timestamptz": "YYYY-MM-DD HH:MM:SS[+HH:MM]",
}
ROW_PX = 35
MAX_GRID_PX = 900
PENDING_SHOWN = 100
CLEARS_KEY = "table_clears"
URL_KEY = "table_url"
# The grid's header row is covered so a click cannot sort only the visible page; the
# server sort ("Sort by") orders the whole table and its column shows ▲ or ▼.
HEADER_SHIELD = """
<style>
.st-key-table_grid [data-testid="stDataFrameResizable"] { position: relative; }
.st-key-table_grid [data-testid="stDataFrameResizable"]::after {
  content: ""; position: absolute; top: 0; left: 0; right: 0; height: HEADERpx; z-index: 3; cursor: default;
}
.st-key-table_grid { margin-top: 2.25rem; }
</style>
""".replace("HEADER", str(ROW_PX + 1))

user = require_user()
st.title("Table")
show_flash()

options = dataset_options(user)
if not options:
    st.info("No datasets to show.")
    st.stop()

# ---------------------------------------------------------------- the URL wins over the session
url = filter_bar.url_params()
from_url: TableQuery | None = None
if url and url != st.session_state.get(URL_KEY):
    from_url, problems = filter_bar.query_from_url(url, datasets=options)
    for problem in problems:
        st.warning(f"Ignored from the link: {problem}", icon=":material/link_off:")
    if from_url.dataset:
        st.session_state[DATASET_KEY] = from_url.dataset
if st.session_state.get(DATASET_KEY) not in options:
    st.session_state[DATASET_KEY] = options[0]
choice = st.selectbox("Dataset", options, key=DATASET_KEY)
project_id, dataset_id = split_dataset(choice)
if st.session_state.get("table_dataset") != choice:
    # Another dataset: its own query, starting on page 1.
    st.session_state["table_dataset"] = choice
    for stale in (CONDITIONS_KEY, "table_sort_col", "table_sort_desc", "table_page", CLEARS_KEY):
        st.session_state.pop(stale, None)


def grid_height(rows: int) -> int:
    # An empty grid still draws one (empty) row under its header.
    return min(ROW_PX * (max(rows, 1) + 1) + 3, MAX_GRID_PX)


def editor_key() -> str:
    return f"table_editor_{st.session_state.get('table_editor_rev', 0)}"


def reset_editor() -> None:
    """A fresh editor: it shows the stored state and forgets what the browser still held."""
    st.session_state["table_editor_rev"] = st.session_state.get("table_editor_rev", 0) + 1
    st.session_state.pop("table_editor_done", None)
    st.session_state.pop("table_editor_rows", None)


@st.dialog("Submit change request", on_dismiss=lambda: close_dialog("submit"))
def submit_dialog(session_id: str, pending: int, revising: change_requests.ChangeRequest | None = None) -> None:
    """``revising``: the request whose changes were asked for; these edits become its next revision."""
    if revising is None:
        st.write(f"Send your **{pending}** pending change(s) of `{choice}` to an approver for review.")
        title = st.text_input("Title", key="submit_title", placeholder=f"Changes to {choice}", max_chars=300)
        description = st.text_area("Description", key="submit_description", placeholder="What changed and why")
    else:
        # A revision keeps its request's title and description (core ignores new ones): no fields for them.
        st.write(
            f"Send your **{pending}** pending change(s) of `{choice}` as revision **{revising.revision + 1}** of "
            f"**{revising.title}** (`{revising.id}`), the request an approver asked you to change. "
            "It keeps its title and description."
        )
        title = description = ""
    left, right = st.columns(2)
    if right.button("Cancel", key="submit_cancel", width="stretch"):
        close_dialog("submit")
        st.rerun()
    if left.button("Submit", key="submit_confirm", type="primary", width="stretch"):
        with oreo_errors():
            wait_for_engine()
            stages = StageStatus("Submitting…", SUBMIT_STAGES)
            try:
                cr = change_requests.submit_change_request(
                    catalog(),
                    session_id,
                    actor=user,
                    title=title.strip() or None,
                    description=description.strip(),
                    stage=stages,
                )
            except OreoError:
                stages.finish("Not submitted", failed=True)
                raise
            stages.finish(f"Submitted `{cr.id}`")
            status = getattr(cr, "validation_status", None)
            what = (
                f"revision {cr.revision} of change request `{cr.id}` ({cr.title})"
                if revising is not None
                else f"change request `{cr.id}`"
            )
            flash(
                f"Submitted {what} ({cr.rows} row(s), {cr.cells} cell(s)). "
                f"Data checks: {status_badge(status)} · {stage_summary(cr.stages)}",
                kind="warning" if status in ("warning", "failed") else "success",
            )
            close_dialog("submit")
            for key in ("submit_title", "submit_description"):
                st.session_state.pop(key, None)
            reset_editor()
            st.rerun()


@st.dialog("Discard all pending edits?", on_dismiss=lambda: close_dialog("discard"))
def discard_dialog(session_id: str, pending: int) -> None:
    st.write(f"This deletes your **{pending}** unsubmitted change(s) of `{choice}`. It cannot be undone.")
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


def value_text(value: str | None, column: str | None, types: dict[str, str]) -> str:
    return display_value(value, types.get(column or ""))


def pending_label(change: sessions.PendingChange, types: dict[str, str]) -> tuple[str, str]:
    """One pending change as a line of markdown, and its full text for the tooltip."""
    row = f"row `{change.row_id}`"
    if change.change == "delete":
        return f"{row} deleted", ""
    if change.change == "insert":
        order = {name: i for i, name in enumerate(types)}
        in_order = sorted(change.values, key=lambda cell: order.get(cell[0], len(order)))
        cells = ", ".join(f"{c}={value_text(v, c, types)}" for c, v in in_order)
        return f"{row} added (new row): {shortened(cells, 90)}", cells
    old = value_text(change.old_value, change.column, types)
    new = value_text(change.new_value, change.column, types)
    line = f"{row} · **{change.column}**: `{shortened(old, 40)}` → `{shortened(new, 40)}`"
    return line, f"{old} → {new}" if len(old) > 40 or len(new) > 40 else ""


def add_row_input(slot: Any, column: reads.Column, rule: editing.ColumnRule | None, key: str) -> Any:
    """The add-row form's input for one column: text, except a box to tick or a list to choose from.

    Numbers and dates are typed as text, as in the grid: Streamlit's number and date inputs
    change what was typed (they drop or round characters and rewrite a typed day), and the
    text must reach ``core.values`` unchanged, which saves its canonical value or refuses it.
    """
    family = type_family(column.type)
    label = f"{column.name} ({column.type.lower()})"
    if rule is not None and rule.value_set is not None:
        return slot.selectbox(label, list(rule.value_set), index=None, key=key, placeholder="choose")
    if family == "boolean":
        return slot.checkbox(column.name, key=key)
    return slot.text_input(label, key=key, placeholder=ADD_ROW_PLACEHOLDERS.get(family))


def form_value(value: Any) -> Any:
    """An add-row input's value as core takes it: typed text unchanged (None: left empty)."""
    return None if value is None or value == "" else value


with oreo_errors():
    info = datasets.get_dataset(catalog(), project_id, dataset_id, actor=user)
    columns = datasets.dataset_columns(info)
    names = [c.name for c in columns]
    types = {c.name: c.type for c in columns}
    rules = editing.column_rules(datasets.dataset_rules(catalog(), project_id, dataset_id, actor=user))
    role = auth.role_in(catalog(), user, project_id)
    can_edit = role is not None and role.rank >= auth.Role.EDITOR.rank
    stable = datasets.stable_order(info)

    if from_url is not None:
        checked, problems = filter_bar.check_query(from_url, types)
        for problem in problems:
            st.warning(f"Ignored from the link: {problem}", icon=":material/link_off:")
        st.session_state[CONDITIONS_KEY] = list(checked.conditions)
        st.session_state["table_sort_col"] = checked.sort or NATURAL
        st.session_state["table_sort_desc"] = checked.descending
        st.session_state["table_page"] = checked.page or 1
        reset_editor()

    # ---------------------------------------------------------------- query: filters, sort, page size
    with st.container(key="table_query"):
        conditions: list[Condition] = list(st.session_state.get(CONDITIONS_KEY, []))
        updated = filter_bar.filter_bar(columns, rules, conditions)
        if updated != conditions:
            st.session_state[CONDITIONS_KEY] = updated
            st.rerun()
        s1, s2, s3, _ = st.columns([2, 1.6, 1.2, 1.5], vertical_alignment="bottom")  # "Descending" whole at 1024 px
        sort_col = s1.selectbox(
            "Sort by", [NATURAL, *names], key="table_sort_col",
            help="Sorts the whole table on the server; the grid's header shows the sort with ▲ or ▼",
        )  # fmt: skip
        descending = s2.toggle("Descending", key="table_sort_desc", disabled=sort_col == NATURAL)
        sizes = sorted({25, 50, 100, get_settings().page_size})
        page_size = s3.selectbox(
            "Rows/page", sizes, index=sizes.index(get_settings().page_size), key="table_page_size"
        )
    order_by = None if sort_col == NATURAL else sort_col
    descending = descending and order_by is not None

    # A new query starts at page 1 (a link's page is kept).
    signature = (choice, tuple(conditions), sort_col, descending, page_size)
    if st.session_state.get("table_signature") != signature:
        if st.session_state.get("table_signature") is not None and from_url is None:
            st.session_state["table_page"] = 1
        st.session_state["table_signature"] = signature

    query: dict[str, Any] = {
        "conditions": conditions,
        "order_by": order_by,
        "descending": descending,
        "limit": page_size,
    }
    # The user's open session overlays the page; a new one is started only by a first edit.
    session = sessions.current_session(catalog(), project_id, dataset_id, actor=user) if can_edit else None

    def save(ops: list[sessions.EditOp]) -> None:
        """Save edits to the user's session (starting one if needed)."""
        with st.spinner("Saving..."):
            if session is not None:
                sessions.apply_edits(catalog(), session.session_id, ops, actor=user)
            else:  # a first edit that is refused starts no session
                sessions.save_edits(catalog(), project_id, dataset_id, ops, actor=user)
        live_views.tell_overlaps(catalog(), user, project_id, dataset_id, ops)  # said, not refused

    def read_page(page_no: int) -> Page:
        offset = (page_no - 1) * page_size
        with st.spinner("Loading rows..."):
            if session is not None:
                return sessions.overlay_page(catalog(), session.session_id, actor=user, offset=offset, **query)
            return datasets.dataset_rows(catalog(), project_id, dataset_id, actor=user, offset=offset, **query)

    page_no = max(1, int(st.session_state.get("table_page", 1)))
    page = read_page(page_no)
    num_pages = max(1, math.ceil(page.total / page_size))
    if page_no > num_pages:
        if from_url is not None and from_url.page:
            st.warning(f"Ignored from the link: page {page_no} (there are {num_pages}).", icon=":material/link_off:")
        st.session_state["table_page"] = page_no = num_pages
        page = read_page(page_no)
    st.session_state[URL_KEY] = filter_bar.write_url(
        TableQuery(choice, page_no, order_by, descending, tuple(conditions))
    )

    first = (page_no - 1) * page_size + 1 if page.total else 0
    last = min(page_no * page_size, page.total)
    order_note = f"sorted by {order_by} {'▼' if descending else '▲'}" if order_by else (
        f"in {', '.join(stable)} order" if stable else "in the order rows were added"
    )
    st.caption(
        f"{rows_span(first, last, page.total)} · version {info.version} · "
        f"{'key ' + info.key_column if info.key_column else 'generated row ids'} · {order_note}"
    )
    live_views.table_live(
        catalog(), user, project_id, dataset_id, shown_version=int(info.version or 0),
        session_id=session.session_id if session else None, paused=dialogs_open("submit", "discard"),
    )  # fmt: skip
    if page.total == 0 and conditions:
        culprit = reads.first_emptying_condition(Path(info.path), conditions, version=info.version)
        which = culprit or conditions[-1]
        st.info(
            f"No rows: the filter **{filter_bar.label(which, types)}** removed everything"
            + (" that the filters before it left." if conditions.index(which) else ".")
            + " Remove it or clear the filters.",
            icon=":material/filter_alt_off:",
        )

    # A value clicked in the column's facet joins the filters (and the page goes back to page 1).
    clicked = facet_panel(
        catalog(), user, info, columns, conditions, session.session_id if session else None,
        can_merge=can_edit, on_merged=reset_editor,
    )  # fmt: skip
    if clicked is not None and clicked not in conditions:
        st.session_state[CONDITIONS_KEY] = [*conditions, clicked]
        st.rerun()

    st.html(HEADER_SHIELD)
    config = editing.column_config(
        columns, rules, key_column=info.key_column, sort=order_by or (stable[0] if stable else None),
        descending=descending, editable=can_edit,
    )  # fmt: skip
    if not can_edit:
        with st.container(key="table_grid"):
            st.dataframe(
                editing.grid_frame(page.rows, columns),
                hide_index=True,
                width="stretch",
                height=grid_height(len(page.rows)),
                row_height=ROW_PX,
                column_config={k: v for k, v in config.items() if k not in editing.EDIT_COLUMNS},
                placeholder=EMPTY,
                key="table_readonly",
            )
        st.pagination(num_pages, key="table_page", max_visible_pages=9)
        st.stop()

    layout = datasets.layout_for(project_id, dataset_id)
    # A bulk change ("Change matching rows") is one pending change however many cells it set.
    pending, bulks = bulk.pending_view(layout, session.session_id) if session else ([], [])
    pending_count = len(pending) + len(bulks)
    with st.container(key="table_actions", horizontal=True, vertical_alignment="center"):
        st.button(
            "Submit change request", key="table_submit", type="primary", icon=":material/send:",
            disabled=not pending_count, on_click=open_dialog, args=("submit",),  # before the run: dialogs_open
        )  # fmt: skip
        # The session of a request awaiting its revision holds that request's edits: core refuses to discard it.
        revising = session is not None and session.state == sessions.REVISING
        st.button(
            "Discard session",
            key="table_discard",
            icon=":material/delete:",
            disabled=not pending_count or revising,
            help=f"These edits are change request {session.cr_id}'s revision; withdraw the request on My requests "
            "to drop them." if revising and session is not None else None,
            on_click=open_dialog,
            args=("discard",),
        )
        st.caption(
            (f"Your editing session (from version {session.base_version})" if session else
             "No edits yet")
            + f" · **{pending_count}** pending change(s), saved as you type",
            width="stretch",
            help="Double-click a cell to edit it; select a cell and press Delete to empty it; tick **delete** to "
            "remove a row. **Sort by** sorts the whole table; the grid's header shows that sort.",
        )  # fmt: skip
    if revising and session is not None:
        with st.container(key="table_revising"):
            st.caption(
                f":material/edit_note: You are revising change request `{session.cr_id}`: changes were requested. "
                "Submit sends these edits as its next revision. They cannot be discarded while the request waits; "
                "withdraw it on My requests to drop them."
            )

    if session is not None and int(info.version or 0) > session.base_version:
        live_views.conflicts_panel(catalog(), user, session, reset_editor)

    # ---------------------------------------------------------------- cells emptied in the grid, to confirm
    clears: list[dict[str, Any]] = st.session_state.get(CLEARS_KEY, [])
    if clears:
        with st.container(key="table_clear_confirm", border=True):
            listed = "; ".join(
                f"row `{c['row_id']}` · **{c['column']}** (was `{shortened(c['was'], 40)}`)" for c in clears
            )
            st.warning(
                f"You emptied {len(clears)} cell(s): {listed}. **Nothing is saved yet.** "
                f"Empty the cell(s), or keep the value(s). Empty cells show as {EMPTY}.",
                icon=":material/backspace:",
            )
            # The safe choice comes first: this warning appears above the grid a moment after the
            # edit, so a click meant for the grid's first column can land here as it does.
            no, yes, _ = st.columns([2, 2, 1])  # wide enough for the labels at 1024 px
            if yes.button(f"Empty the cell(s) ({EMPTY})", key="table_clear_yes", width="stretch"):
                with oreo_errors():
                    save([sessions.SetCell(c["row_id"], c["column"], None) for c in clears])
                    st.session_state.pop(CLEARS_KEY, None)
                    st.rerun()
            if no.button("Keep the value(s)", key="table_clear_no", type="primary", width="stretch"):
                st.session_state.pop(CLEARS_KEY, None)
                reset_editor()
                st.rerun()

    frame = editing.grid_frame(page.rows, columns, deletable=True)
    live_views.mark_overlaps(catalog(), user, project_id, dataset_id, frame)
    row_ids = tuple(str(r) for r in frame["row_id"]) if len(frame) else ()
    if st.session_state.get("table_editor_rows") not in (None, row_ids):
        reset_editor()  # other rows: the browser's pending edits point at old positions
    st.session_state["table_editor_rows"] = row_ids
    key = editor_key()
    refused = st.session_state.pop("table_refused", None)
    if refused:
        st.error(refused, icon=":material/error:")
    with st.container(key="table_grid"):
        st.data_editor(
            frame,
            key=key,
            hide_index=True,
            width="stretch",
            height=grid_height(len(frame)),
            row_height=ROW_PX,
            num_rows="fixed",  # keeps the editor (scroll, selection) across saves; rows are deleted by tick
            column_config=config,
            placeholder=EMPTY,
        )
    st.pagination(num_pages, key="table_page", max_visible_pages=9)

    # The editor stays mounted across saves, so its state holds every edit since it was
    # created: only the ones not yet handled are new.
    state = st.session_state.get(key) or {}
    done: set[tuple[int, str, str]] = st.session_state.setdefault("table_editor_done", set())
    fresh_rows: dict[str, dict[str, Any]] = {}
    for position, changes in (state.get("edited_rows") or {}).items():
        for column, value in changes.items():
            if (int(position), column, repr(value)) not in done:
                fresh_rows.setdefault(str(position), {})[column] = value
    changes = editing.grid_changes({"edited_rows": fresh_rows}, frame, types)
    handled = {(int(p), c, repr(v)) for p, cells in fresh_rows.items() for c, v in cells.items()}
    if changes.clears:
        st.session_state[CLEARS_KEY] = [
            {"row_id": c.row_id, "column": c.column, "was": display_value(frame.loc[frame["row_id"] == c.row_id,
             c.column].iloc[0], types[c.column])}
            for c in changes.clears
        ]  # fmt: skip
    if changes.ops or changes.clears:
        try:
            editing.check_op_lengths(changes.ops, rules, types)
            if changes.ops:
                save(changes.ops)
            done |= handled
            if any(not isinstance(op, sessions.SetCell) for op in changes.ops):
                reset_editor()  # deletes and their undos change the rows' marks and ticks
            elif editing.saved_otherwise(changes.ops, types):
                reset_editor()  # the grid shows the saved value (1000), not what was typed (1e3)
            st.rerun()
        except OreoError as exc:
            # Refused: nothing was saved; the grid goes back to the stored values.
            st.session_state["table_refused"] = str(exc)
            st.session_state.pop(CLEARS_KEY, None)
            reset_editor()
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
                column_config=editing.preview_config(columns, info.key_column),
                placeholder=EMPTY,
            )

    with st.expander(f"Pending changes ({pending_count})", icon=":material/edit_note:", key="table_pending"):
        if not pending_count:
            st.write("No pending changes. Change a cell in the grid to start.")
        if session is not None:
            bulk_views.pending_bulk_lines(catalog(), user, session.session_id, bulks, reset_editor)
        for change in pending[:PENDING_SHOWN]:
            text, undo = st.columns([4, 1], vertical_alignment="center")  # "Undo" whole at 1024 px
            line, full = pending_label(change, types)
            text.markdown(line, help=full or None)
            if undo.button("Undo", key=f"undo_{change.row_id}_{change.column or ''}", icon=":material/undo:"):
                with oreo_errors():
                    save([change.undo])
                    reset_editor()
                    st.rerun()
        if len(pending) > PENDING_SHOWN:
            st.caption(f"… and {len(pending) - PENDING_SHOWN} more.")

    bulk_views.bulk_panel(
        catalog(), user, info, columns, rules, conditions, session.session_id if session else None, reset_editor
    )

    with st.expander("Add a row", icon=":material/add:", key="table_add"):
        with st.form("table_add_form", border=False):
            st.caption(
                "A new row is listed after the table's last row."
                + (f" **{info.key_column}** is required and must be new." if info.key_column else "")
            )
            values = {}
            grid = st.columns(3)
            # New keys after each saved row: the browser keeps a form's values under the old ones.
            rev = st.session_state.get("table_add_rev", 0)
            suffix = f"_{rev}" if rev else ""
            for i, column in enumerate(c for c in columns if c.name != "row_id"):
                values[column.name] = add_row_input(
                    grid[i % 3], column, rules.get(column.name), f"table_add_{column.name}{suffix}"
                )
            add = st.form_submit_button("Add row", type="primary", key="table_add_submit")
        if add:
            with oreo_errors():
                row = {name: form_value(value) for name, value in values.items()}
                row = {name: value for name, value in row.items() if value is not None}
                editing.check_lengths(row, rules, types, "(new row)")
                save([sessions.AddRow(row)])
                for name in values:  # kept when core refused the row, cleared once it is saved
                    st.session_state.pop(f"table_add_{name}{suffix}", None)
                st.session_state["table_add_rev"] = rev + 1
                total_pages = max(1, math.ceil((page.total + 1) / page_size))
                shown = row.get(info.key_column) if info.key_column else None
                flash(
                    f"Row {'`' + str(shown) + '` ' if shown is not None else ''}added as one pending change; "
                    f"it is listed after the table's last row (page {total_pages}).",
                    kind="success",
                )
                st.rerun()

    if session is not None and dialog_value("submit"):
        asked = (
            change_requests.get_change_request(catalog(), session.cr_id, actor=user)
            if session.state == sessions.REVISING and session.cr_id
            else None
        )
        submit_dialog(session.session_id, pending_count, asked)
    if session is not None and dialog_value("discard"):
        discard_dialog(session.session_id, pending_count)
