"""The approver's queue: change requests of their projects in review, each with its diff, thread, checks and conflicts.

An open request can be approved, rejected or sent back with "Request changes" (a reason
the author reads); one whose changes were requested waits for its author's revision.

The address names the request shown (``?cr=<id>``): a link opens exactly that request, or
says that it is no longer open, and never another one. Each decision carries the revision
(and digest) the page showed when its button was clicked; core refuses it if the request
moved on since.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import streamlit as st

from app import background, live_views
from app.approval_views import approval_note, approval_outcome, follow_approval, stage_timings
from app.change_views import findings, schema_change_line, schema_changes
from app.components import (
    catalog,
    close_dialog,
    dialog_value,
    flash,
    open_dialog,
    oreo_errors,
    require_user,
    show_flash,
    status_badge,
    wait_for_engine,
)
from app.conflict_views import conflict_table
from app.diff_views import change_request_rows
from app.import_views import replace_banner
from app.thread_views import cell_notes, discussion
from core import auth, change_requests, datasets, merge, warmup
from core.change_requests import ChangeRequest, CRState
from core.errors import OreoError
from interface import views

PAGES = Path(__file__).resolve().parent
CR_ID = re.compile(r"\bcr_[0-9a-f]+\b")
user = require_user()
st.title("Review")
show_flash()

IMPORT_CHANGES = (
    "An import can't be sent back for changes: its rows come from a file, not edits the author can revise. "
    "Reject it with a reason; the author imports a corrected file."
)


def decide(name: str, cr: ChangeRequest) -> None:
    """Open dialog ``name`` on ``cr`` as the page showed it when the button was clicked: id, revision, digest.

    A button's callback gets the arguments of the run that drew it, so a revision staged
    since is not what the approver decides on: core refuses that decision instead.
    """
    open_dialog(name, (cr.id, cr.revision, cr.digest))


def reviewed(name: str, cr: ChangeRequest) -> tuple[int, str | None] | None:
    """The (revision, digest) dialog ``name`` was opened on, if it is open on ``cr``."""
    value = dialog_value(name)
    if isinstance(value, tuple) and len(value) == 3 and value[0] == cr.id:
        return int(value[1]), value[2]
    return None


@st.dialog("Approve and merge?", on_dismiss=lambda: close_dialog("approve"))
def approve_dialog(cr: ChangeRequest, revision: int, digest: str | None) -> None:
    st.write(f"Merge **{cr.title}** by `{cr.author}` into `{cr.project_id}/{cr.dataset_id}` as one new version.")
    # What is approved is what the page showed: this id at this revision (and content digest).
    shown = f" · {cr.rows} row(s), {cr.cells} cell(s)" if revision == cr.revision else ""
    content = f" · content `{digest[:12]}`" if digest else ""
    st.markdown(f"Change request `{cr.id}` · **revision {revision}**{shown}{content}")
    if cr.schema_changes:
        st.markdown(
            "It also changes the table's schema: " + "; ".join(schema_change_line(c) for c in cr.schema_changes) + "."
        )
    comment = st.text_area("Comment (optional)", key="approve_comment")
    left, right = st.columns(2)
    if right.button("Cancel", key="approve_cancel", width="stretch"):
        close_dialog("approve")
        st.rerun()
    if left.button("Approve and merge", key="approve_confirm", type="primary", width="stretch"):
        # The approval runs in the server (app.background): closing this tab does not stop it,
        # and the request shows "Merging…" and then the outcome to whoever opens it.
        job = background.start_approval(
            catalog(), cr, actor=user, comment=comment.strip() or None, revision=revision, digest=digest
        )
        st.caption("You can close this page: the approval goes on, and the Review page shows how it ended.")
        wait_for_engine()  # the approval itself waits for it in the server
        job = follow_approval(job, st.container(key="approve_status"))
        if job.running or job.outcome == "merged":
            close_dialog("approve")
            st.session_state.pop("approve_comment", None)
            st.rerun()  # the page shows the outcome
        else:
            st.error(job.error, icon=":material/error:")


@st.dialog("Request changes?", on_dismiss=lambda: close_dialog("request_changes"))
def request_changes_dialog(cr: ChangeRequest, revision: int, digest: str | None) -> None:
    st.write(
        f"Send **{cr.title}** (`{cr.id}`, revision {revision}) back to `{cr.author}`. They edit the same session "
        "again and submit a revision; it cannot be approved until then."
    )
    reason = st.text_area("What should change? (required, shown to the author)", key="request_changes_reason")
    left, right = st.columns(2)
    if right.button("Cancel", key="request_changes_cancel", width="stretch"):
        close_dialog("request_changes")
        st.rerun()
    if left.button("Request changes", key="request_changes_confirm", type="primary", width="stretch"):
        with oreo_errors():
            change_requests.request_changes(
                catalog(), cr.id, reason, actor=user, expected_revision=revision, expected_digest=digest
            )
            flash(f"Asked `{cr.author}` for changes to `{cr.id}` ({cr.title}).", kind="info")
            close_dialog("request_changes")
            st.session_state.pop("request_changes_reason", None)
            st.rerun()


@st.dialog("Reject change request?", on_dismiss=lambda: close_dialog("reject"))
def reject_dialog(cr: ChangeRequest, revision: int, digest: str | None) -> None:
    st.write(
        f"Reject **{cr.title}** (`{cr.id}`, revision {revision}) by `{cr.author}`. "
        "Its staged changes are deleted; the table is not changed."
    )
    reason = st.text_area("Reason (required, shown to the author)", key="reject_reason")
    left, right = st.columns(2)
    if right.button("Cancel", key="reject_cancel", width="stretch"):
        close_dialog("reject")
        st.rerun()
    if left.button("Reject", key="reject_confirm", type="primary", width="stretch"):
        with oreo_errors():
            change_requests.reject_change_request(
                catalog(), cr.id, actor=user, reason=reason, expected_revision=revision, expected_digest=digest
            )
            flash(f"Rejected `{cr.id}` ({cr.title}).", kind="info")
            close_dialog("reject")
            st.session_state.pop("reject_reason", None)
            st.rerun()


def recent_outcomes(projects: set[str]) -> None:
    """The user's own approvals that ended: taken once from the server, kept in this session until dismissed."""
    kept = st.session_state.setdefault("review_outcomes", {})
    for job in background.claim_outcomes(user.username):
        kept[job.cr_id] = job
    for job in list(kept.values()):
        if job.project_id not in projects:
            continue
        with st.container(key=f"review_outcome_{job.cr_id}"):
            # 1/6 of the row: "Dismiss" keeps its whole label at 1024 px (at 1/9 it was cut to "D…").
            text, close = st.columns([5, 1], vertical_alignment="top")
            with text:
                approval_outcome(job)
            if close.button("Dismiss", key=f"review_dismiss_{job.cr_id}", icon=":material/close:", type="tertiary"):
                kept.pop(job.cr_id, None)
                st.rerun()


def follow_pick() -> None:
    """Keep the address naming the request the picker shows, so a reload or a shared link opens it."""
    picked = str(st.session_state["review_cr"])
    # When a request's label changed under the picker (its state moved on), Streamlit can hand
    # back the label it showed ("title · author · cr_…") rather than the option: its id is in it.
    ids = CR_ID.findall(picked)
    st.query_params["cr"] = ids[-1] if ids else picked


def not_open(cr_id: str) -> None:
    """Say plainly that the request the address names is not open for review here, and where to find it."""
    try:
        named = change_requests.get_change_request(catalog(), cr_id, actor=user)
    except OreoError:
        st.warning(
            f"Change request `{cr_id}` is not in your projects or does not exist — there is nothing to review.",
            icon=":material/search_off:",
        )
        return
    if named.state in change_requests.IN_REVIEW:
        st.warning(
            f"Change request `{named.id}` ({named.title}) is {named.state.value}, but you are not an approver of "
            f"project `{named.project_id}`: you cannot review it.",
            icon=":material/block:",
        )
    else:
        merged = f" as version {named.merged_version}" if named.merged_version is not None else ""
        by = f" by {named.closed_by}" if named.closed_by else ""
        st.warning(
            f"Change request `{named.id}` ({named.title}) is {named.state.value} — it is no longer open.  \n"
            f"{named.state.value.capitalize()}{merged}{by} at revision {named.revision}.",
            icon=":material/info:",
        )
    if named.author == user.username:
        st.page_link(
            PAGES / "requests.py", label="See it on My requests", icon=":material/outbox:", query_params={"cr": cr_id}
        )
    else:
        st.page_link(
            PAGES / "history.py",
            label=f"See the history of {named.project_id}/{named.dataset_id}",
            icon=":material/history:",
        )
    if st.button("Review the open requests", key="review_show_queue", icon=":material/rule:"):
        del st.query_params["cr"]
        st.session_state.pop("review_cr", None)
        st.rerun()


def conflicts_of(cr: ChangeRequest, version: int | None) -> list[merge.Conflict]:
    """Conflicts compare the request's rows at two versions: remember them until ``main`` or the request moves on."""
    cache = st.session_state.setdefault("review_conflicts", {})
    key = (cr.id, cr.revision, version)
    if key not in cache:
        cache[key] = merge.find_conflicts(catalog(), cr.id, actor=user)
    return list(cache[key])


with oreo_errors():
    approving = {
        project for project, role in auth.memberships(catalog(), user).items() if role.rank >= auth.Role.APPROVER.rank
    }
    if not approving:
        st.info("You are not an approver in any project.")
        st.stop()
    recent_outcomes(approving)
    queue = [
        cr
        for cr in change_requests.list_change_requests(catalog(), actor=user)
        if cr.project_id in approving and cr.state in change_requests.IN_REVIEW
    ]
    by_id = {cr.id: cr for cr in queue}
    wanted = st.query_params.get("cr")
    if wanted is not None and wanted not in by_id:
        not_open(wanted)  # and no other request's controls: the queue below is only a list
    if not queue:
        st.info("No open change requests to review.")
        st.stop()

    merging = {job.cr_id: job for job in background.approvals() if job.running}
    waiting = sum(cr.state == CRState.CHANGES_REQUESTED for cr in queue)
    # The chosen request's title below is a level-3 heading: this one keeps the outline from skipping a level.
    st.header("Waiting for review", anchor=False)
    st.caption(
        f"**{len(queue) - waiting}** open change request(s) in your projects"
        + (f" and **{waiting}** waiting for their author's revision" if waiting else "")
        + ", newest first"
    )
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "id": cr.id,
                    "dataset": f"{cr.project_id}/{cr.dataset_id}",
                    "title": cr.title,
                    "kind": cr.kind,
                    "state": cr.state.value,
                    "revision": cr.revision,
                    "author": cr.author,
                    "checks": getattr(cr, "validation_status", None) or "",
                    "approval": "merging…" if cr.id in merging else "",
                    "rows": cr.rows,
                    "cells": cr.cells,
                    "created": cr.created_at,
                }
                for cr in queue
            ]
        ),
        hide_index=True,
        width="stretch",
        key="review_queue",
    )
    if wanted is not None and wanted not in by_id:
        st.stop()
    if wanted is not None:
        st.session_state["review_cr"] = wanted
    elif st.session_state.get("review_cr") not in by_id:
        # Someone coming back to an approval they started lands on it.
        theirs = [cr_id for cr_id, job in merging.items() if job.approver == user.username and cr_id in by_id]
        st.session_state["review_cr"] = theirs[0] if theirs else queue[0].id
    chosen = st.selectbox(
        "Change request",
        list(by_id),
        key="review_cr",
        format_func=lambda i: f"{by_id[i].title} · {by_id[i].author} · {i}"
        + (" · changes requested" if by_id[i].state == CRState.CHANGES_REQUESTED else ""),
        on_change=follow_pick,
    )
    info = datasets.get_dataset(catalog(), by_id[chosen].project_id, by_id[chosen].dataset_id, actor=user)
    # What the CLI's ``cr show`` and the API's GET show of it too (``interface.views``); its conflicts only
    # while it is open, remembered until main or the request moves on.
    view = views.change_request_view(
        catalog(), chosen, actor=user,
        find_conflicts=lambda record: conflicts_of(record, info.version) if record.state == CRState.OPEN else [],
    )  # fmt: skip
    cr = view.request
    warmup.prepare_for_review(cr, user.username)  # the table's file list, built while the approver reads

    st.subheader(cr.title, anchor=False)
    st.caption(
        f"{'**import** · ' if cr.kind == 'import' else ''}"
        f"`{cr.id}` · `{cr.project_id}/{cr.dataset_id}` · by **{cr.author}** · "
        f"{cr.created_at:%Y-%m-%d %H:%M} UTC · from version {cr.base_version} · "
        f"{cr.rows} row(s), {cr.cells} cell(s) · revision {cr.revision}"
    )
    # The page's timed fragments pause while one of its dialogs is open (``dialogs_open``).
    deciding = any(reviewed(name, cr) for name in ("approve", "reject", "request_changes"))
    live_views.review_live(catalog(), user, cr, paused=deciding)  # who else reviews it, and news of it
    replace_banner(view.imported, key="review_replace_banner")
    stage_timings(cr)
    if cr.description:
        st.markdown(cr.description)
    approval_note(cr.id, merge.approval_state(catalog(), cr.id, actor=user), paused=deciding)

    run, conflicts, thread = view.validation, view.conflicts, view.thread
    if cr.state == CRState.CHANGES_REQUESTED:
        asked = [c for c in thread if c.row_id is None]
        st.warning(
            f"Changes requested{f' by **{asked[-1].author}**' if asked else ''}: "
            f"{asked[-1].body if asked else ''}  \nWaiting for `{cr.author}` to submit revision {cr.revision + 1}.",
            icon=":material/edit_note:",
        )

    if cr.author == user.username:
        # Four-eyes: core refuses it too; the page does not offer it at all.
        st.caption(
            ":material/block: You wrote this request: authors cannot approve their own request. "
            "Another approver must review it; you can withdraw it on My requests."
        )
    else:
        blocked = []
        if cr.state == CRState.CHANGES_REQUESTED:
            blocked.append("changes were requested")
        if conflicts:
            blocked.append(f"it conflicts with newer commits in {len(conflicts)} place(s)")
        if run is not None and run.status == "failed":
            blocked.append("a critical data check fails")
        # A row that wraps, each button as wide as its label: fixed columns cut them to "A…" at 1024 px.
        actions = st.container(horizontal=True, vertical_alignment="center", key="review_actions")
        actions.button(
            "Approve",
            key="review_approve",
            type="primary",
            icon=":material/check:",
            disabled=bool(blocked) or cr.id in merging,
            on_click=decide,
            args=("approve", cr),
        )
        actions.button(
            "Request changes",
            key="review_request_changes",
            icon=":material/edit_note:",
            disabled=cr.state != CRState.OPEN or cr.id in merging or cr.kind == "import",
            help=IMPORT_CHANGES if cr.kind == "import" else None,
            on_click=decide,
            args=("request_changes", cr),
        )
        actions.button(
            "Reject",
            key="review_reject",
            icon=":material/close:",
            on_click=decide,
            args=("reject", cr),
        )
        note = actions.container(width="stretch")
        if cr.id in merging:
            note.caption(f"{merging[cr.id].approver} is approving it now.")
        elif cr.state == CRState.CHANGES_REQUESTED:
            note.caption(f"Approval waits for `{cr.author}` to revise it: changes were requested.")
        elif blocked:
            then = "Its author keeps or drops each conflict (below)." if conflicts else "Reject it or request changes."
            note.caption(f"Approval is blocked: {' and '.join(blocked)}. {then}")
        else:
            note.caption(f"Data checks: {status_badge(run.status if run else None)} · no conflicts")
        if cr.kind == "import" and cr.state == CRState.OPEN:
            with st.container(key="review_import_note"):
                st.caption(f":material/info: {IMPORT_CHANGES}")

    if cr.schema_changes:
        with st.container(key="review_schema"):
            st.subheader("Schema change", anchor=False)
            schema_changes(cr.schema_changes)

    with st.container(key="review_changes"):
        st.subheader("Changes", anchor=False)
        shown = change_request_rows(
            cr.id, user, catalog(), key="review_diff", key_column=info.key_column,
            types={c.name: c.type for c in datasets.dataset_columns(info)},
            notes=cell_notes(thread, cr.revision), revision=cr.revision,
        )  # fmt: skip

    with st.container(key="review_discussion"):
        discussion(view, user, shown, key="review")

    with st.container(key="review_checks"):
        st.subheader("Data checks", anchor=False)
        findings(run)

    with st.container(key="review_conflicts"):
        st.subheader("Conflicts", anchor=False)
        if not conflicts:
            st.write(f"No conflicts with commits after version {cr.base_version}.")
        else:
            types = {c.name: c.type for c in datasets.dataset_columns(info)}
            conflict_table(cr, conflicts, types, user, key="review")

    if (seen := reviewed("approve", cr)) and cr.author != user.username:
        approve_dialog(cr, *seen)
    if (seen := reviewed("reject", cr)) and cr.author != user.username:
        reject_dialog(cr, *seen)
    if (seen := reviewed("request_changes", cr)) and cr.author != user.username and cr.kind != "import":
        request_changes_dialog(cr, *seen)
