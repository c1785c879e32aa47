"""The signed-in user's own change requests; open ones can be withdrawn or re-submitted on the current version.

A request whose changes were requested shows the reviewer's reason, a way back to the
Table page (its session is editable again) and "Submit revision". Any request opens
below with its diff, its conflicts with newer commits (each kept or dropped right there),
thread, revisions and state history.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from app.approval_views import approval_note, stage_summary, stage_timings
from app.components import (
    STATE_BADGES,
    catalog,
    close_dialog,
    dialog_value,
    dialogs_open,
    flash,
    local_time,
    open_dialog,
    oreo_errors,
    require_user,
    show_flash,
    status_badge,
)
from app.conflict_views import conflict_table
from app.diff_views import change_request_rows
from app.thread_views import cell_notes, discussion
from core import change_requests, datasets, merge
from core.change_requests import (
    ChangeRequest,
    CRState,
    list_change_requests,
    revise_change_request,
    withdraw_change_request,
)
from core.resubmit import resubmit_change_request
from interface import views

STATES = ["all", *(s.value for s in CRState)]
TABLE_PAGE = Path(__file__).parent / "table.py"

# Closed without a merge: the staged changes are gone (core.change_requests.remove_leftovers).
CLOSED_UNMERGED = (CRState.REJECTED, CRState.WITHDRAWN)


def state_line(cr: ChangeRequest) -> str:
    """Where the request stands, in words: its state, who closed it and when, and why."""
    line = f"{STATE_BADGES.get(cr.state.value, cr.state.value)} **{cr.title}** · revision {cr.revision}"
    if cr.closed_at is not None:
        who = "you" if cr.closed_by == user.username else f"**{cr.closed_by}**"
        line += f" · {cr.state.value} by {who} on {local_time(cr.closed_at)}"
    if cr.merged_version is not None:
        line += f" as version {cr.merged_version}"
    if cr.close_reason:
        line += f": {cr.close_reason}"
    return line


user = require_user()
st.title("My requests")
show_flash()


@st.dialog("Withdraw change request?", on_dismiss=lambda: close_dialog("withdraw"))
def withdraw_dialog(cr: ChangeRequest) -> None:
    st.write(
        f"Withdraw **{cr.title}** (`{cr.id}`, {cr.rows} row(s), {cr.cells} cell(s))? "
        "Its staged changes are deleted and it leaves the review queue; the table is not changed."
    )
    left, right = st.columns(2)
    if right.button("Keep it", key="withdraw_cancel", width="stretch"):
        close_dialog("withdraw")
        st.rerun()
    if left.button("Withdraw", key="withdraw_confirm", type="primary", width="stretch"):
        with oreo_errors():
            withdraw_change_request(catalog(), cr.id, actor=user)
            close_dialog("withdraw")
            flash(f"Withdrew change request `{cr.id}`.", kind="info")
            st.rerun()


with oreo_errors():
    mine = [cr for cr in list_change_requests(catalog(), actor=user) if cr.author == user.username]
    if not mine:
        st.info("You have not submitted any change requests yet. Edit a table and submit your changes.")
        st.stop()

    state = st.segmented_control("State", STATES, default="all", key="requests_state")
    shown = [cr for cr in mine if state in (None, "all") or cr.state.value == state]
    st.caption(f"{len(shown)} of your {len(mine)} change request(s), newest first")
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "id": cr.id,
                    "state": cr.state.value,
                    "title": cr.title,
                    "kind": cr.kind,
                    "dataset": f"{cr.project_id}/{cr.dataset_id}",
                    "checks": getattr(cr, "validation_status", None) or "",
                    "revision": cr.revision,
                    "stages": stage_summary(cr.stages),
                    "rows": cr.rows,
                    "cells": cr.cells,
                    "created": cr.created_at,
                    "closed by": cr.closed_by or "",
                    "note": cr.close_reason or "",
                }
                for cr in shown
            ],
            columns=[
                "id",
                "state",
                "title",
                "kind",
                "dataset",
                "checks",
                "revision",
                "stages",
                "rows",
                "cells",
                "created",
                "closed by",
                "note",
            ],
        ),
        hide_index=True,
        width="stretch",
        key="requests_table",
    )

    asked = [cr for cr in shown if cr.state == CRState.CHANGES_REQUESTED]
    if asked:
        st.header("Changes requested", anchor=False)
    for cr in asked:
        thread = change_requests.comments(catalog(), cr.id, actor=user)
        reasons = [c for c in thread if c.row_id is None]
        cells = [c for c in thread if c.row_id is not None and c.revision == cr.revision]
        with st.container(border=True, key=f"request_{cr.id}"):
            # The text, then its buttons in a row that wraps: beside it, fixed columns cut them to "W" at 1024 px.
            text = st.container()
            actions = st.container(horizontal=True, key=f"request_actions_{cr.id}")
            text.markdown(
                f"**{cr.title}** · `{cr.id}` · {cr.project_id}/{cr.dataset_id} · revision {cr.revision} · "
                f"{cr.rows} row(s), {cr.cells} cell(s)"
            )
            if reasons:
                text.warning(f"**{reasons[-1].author}** asks: {reasons[-1].body}", icon=":material/edit_note:")
            for c in cells:
                text.caption(f":material/comment: **{c.author}** on row {c.row_id} · {c.column}: {c.body}")
            if cr.kind == "import":
                # Asked before imports refused it: there is no session to revise (core refuses too).
                text.caption(
                    "Import requests are revised by importing again: withdraw this one and import a corrected file "
                    "on the Import page."
                )
            else:
                text.caption(
                    "Your session is editable again: fix it on the Table page, then submit the revision here "
                    "(or with Submit on the Table page)."
                )
            if cr.kind != "import" and actions.button("Edit in Table", key=f"edit_{cr.id}", icon=":material/table:"):
                st.switch_page(TABLE_PAGE, query_params={"dataset": f"{cr.project_id}/{cr.dataset_id}"})
            if cr.kind != "import" and actions.button(
                "Submit revision", key=f"revise_{cr.id}", type="primary", icon=":material/send:"
            ):
                with oreo_errors(), st.spinner("Re-staging and validating your changes..."):
                    revised = revise_change_request(catalog(), cr.id, actor=user)
                    flash(f"Submitted revision {revised.revision} of `{cr.id}` ({cr.title}).", kind="info")
                    st.rerun()
            actions.button(
                "Withdraw",
                key=f"withdraw_{cr.id}",
                icon=":material/undo:",
                on_click=open_dialog,
                args=("withdraw", cr.id),
            )

    open_ones = [cr for cr in shown if cr.state == CRState.OPEN]
    if open_ones:
        st.header("Open", anchor=False)
    for cr in open_ones:
        current = datasets.get_dataset(catalog(), cr.project_id, cr.dataset_id, actor=user).version or 0
        with st.container(border=True, key=f"request_{cr.id}"):
            text = st.container()
            actions = st.container(horizontal=True, key=f"request_actions_{cr.id}")
            text.markdown(
                f"**{cr.title}** · `{cr.id}` · {cr.project_id}/{cr.dataset_id} · "
                f"{cr.rows} row(s), {cr.cells} cell(s) · checks {status_badge(getattr(cr, 'validation_status', None))}"
            )
            if cr.description:
                text.caption(cr.description)
            with text:
                stage_timings(cr)
                state = merge.approval_state(catalog(), cr.id, actor=user)
                approval_note(cr.id, state, author=True, paused=dialogs_open("withdraw"))
            if current > cr.base_version:
                text.caption(
                    f"Based on version {cr.base_version}; the table is now at version {current}. "
                    "Re-submit to have it reviewed against the current data."
                )
                if actions.button(f"Re-submit on v{current}", key=f"resubmit_{cr.id}", icon=":material/sync:"):
                    with st.spinner("Re-staging and validating your changes..."):
                        fresh = resubmit_change_request(catalog(), cr.id, actor=user)
                    flash(f"Re-submitted `{cr.id}` as `{fresh.id}` on version {fresh.base_version}.", kind="info")
                    st.rerun()
            actions.button(
                "Withdraw",
                key=f"withdraw_{cr.id}",
                icon=":material/undo:",
                on_click=open_dialog,
                args=("withdraw", cr.id),
            )

    chosen = dialog_value("withdraw")
    if chosen:
        match = [cr for cr in mine if cr.id == chosen and cr.state in change_requests.IN_REVIEW]
        if match:
            withdraw_dialog(match[0])
        else:
            close_dialog("withdraw")

    # ---------------------------------------------------------------- one request in full
    if shown:
        st.header("Request details", anchor=False)
        by_id = {cr.id: cr for cr in shown}
        wanted = st.query_params.get("cr")
        if wanted in by_id and st.session_state.get("requests_from_url") != wanted:
            st.session_state["requests_from_url"] = wanted
            st.session_state["requests_cr"] = wanted
        if st.session_state.get("requests_cr") not in by_id:
            st.session_state["requests_cr"] = shown[0].id
        # The state is shown beside the picker, not in its labels: a label that changes as the
        # request does (open, then withdrawn) could be left showing the old one.
        chosen_id = st.selectbox(
            "Change request", list(by_id), key="requests_cr", format_func=lambda i: f"{by_id[i].title} · {i}"
        )
        view = views.change_request_view(catalog(), chosen_id, actor=user)  # as ``cr show`` and the API show it
        cr, thread = view.request, view.thread
        info = datasets.get_dataset(catalog(), cr.project_id, cr.dataset_id, actor=user)
        with st.container(key="requests_state_line"):
            st.markdown(state_line(cr))
        with st.container(key="requests_changes"):
            st.markdown(f"**Changes** (revision {cr.revision})")
            if cr.state in CLOSED_UNMERGED:
                st.info(
                    f"It changed **{cr.rows}** row(s), **{cr.cells}** cell(s) of `{cr.project_id}/{cr.dataset_id}`. "
                    f"Its staged changes were deleted when it was {cr.state.value}, so they cannot be shown; "
                    "the table never had them.",
                    icon=":material/inventory_2:",
                )
                page = None
            else:
                page = change_request_rows(
                    cr.id, user, catalog(), key="requests_diff", key_column=info.key_column,
                    types={c.name: c.type for c in datasets.dataset_columns(info)},
                    notes=cell_notes(thread, cr.revision), revision=cr.revision,
                )  # fmt: skip
        if view.conflicts:
            with st.container(key="requests_conflicts"):
                st.markdown("**Conflicts**")
                types = {c.name: c.type for c in datasets.dataset_columns(info)}
                conflict_table(cr, view.conflicts, types, user, key="requests")
        with st.container(key="requests_discussion"):
            discussion(view, user, page, key="requests")
