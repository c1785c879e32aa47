"""The signed-in user's notifications: requests waiting for review, decisions and comments on theirs, stale requests."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.components import STATE_BADGES, catalog, flash, local_time, oreo_errors, require_user, show_flash
from core import auth, change_requests, notify
from core.change_requests import CRState
from core.errors import OreoError

PAGES = Path(__file__).parent
EVENT_BADGES = {
    "submitted": ":blue-badge[submitted]",
    "revised": ":blue-badge[revised]",
    "approved": ":green-badge[approved]",
    "rejected": ":red-badge[rejected]",
    "changes_requested": ":orange-badge[changes requested]",
    "commented": ":gray-badge[comment]",
    "withdrawn": ":gray-badge[withdrawn]",
    "stale": ":violet-badge[stale]",
}

user = require_user()
st.title("Inbox")
show_flash()


def open_request(item: notify.InboxItem) -> None:
    """Mark the event read and go where the request can be acted on: Review for its approvers, else My requests."""
    notify.mark_read(catalog(), user, [item.id])
    assert item.cr_id is not None
    try:
        cr = change_requests.get_change_request(catalog(), item.cr_id, actor=user)
    except OreoError:
        flash(f"Change request `{item.cr_id}` is no longer available to you.", kind="warning")
        st.rerun()
    if cr.author == user.username:
        st.switch_page(PAGES / "requests.py", query_params={"cr": cr.id})
    role = auth.role_in(catalog(), user, cr.project_id)
    # The Review page lists requests waiting for a revision too (changes requested).
    reviewable = cr.state in (CRState.OPEN, CRState.CHANGES_REQUESTED)
    if reviewable and role is not None and role.rank >= auth.Role.APPROVER.rank:
        st.session_state["review_cr"] = cr.id  # the Review page opens the request it finds here
        st.switch_page(PAGES / "review.py", query_params={"cr": cr.id})
    flash(f"Change request `{cr.id}` ({cr.title}) is {cr.state.value}: it left the review queue.", kind="info")
    st.rerun()


with oreo_errors():
    everything = notify.inbox(catalog(), user)
    unread = sum(not item.read for item in everything)
    # Rows that wrap, each control as wide as its label: fixed columns cut them short at 1024 px.
    head = st.container(horizontal=True, vertical_alignment="center", key="inbox_head")
    head.caption(f"**{unread}** unread of {len(everything)} event(s), newest first")
    unread_only = head.toggle("Unread only", key="inbox_unread_only", width="content")
    if head.button("Mark all read", key="inbox_mark_all", icon=":material/done_all:", disabled=not unread):
        notify.mark_read(catalog(), user)
        st.rerun()

    shown = [item for item in everything if not (unread_only and item.read)]
    # Each request as it is now (an event says what happened then; the request may have moved on).
    states = {cr.id: cr.state.value for cr in change_requests.list_change_requests(catalog(), actor=user)}
    if not shown:
        st.info("Nothing here yet. You are told when a request waits for you or something happens to yours.")
    for item in shown:
        with st.container(border=True, key=f"inbox_item_{item.id}"):
            line = st.container(horizontal=True, vertical_alignment="center")
            text = line.container(width="stretch")
            badge = EVENT_BADGES.get(item.event, f":gray-badge[{item.event}]")
            summary = item.summary if item.read else f"**{item.summary}**"
            text.markdown(f"{badge} {summary}")
            where = f"{item.project_id}/{item.dataset_id}" if item.dataset_id else item.project_id or ""
            now = states.get(item.cr_id or "")
            text.caption(
                f"{local_time(item.at)} · {where} · `{item.cr_id or ''}`"
                + (f" · now {STATE_BADGES.get(now, now)}" if now else "")
                + ("" if item.read else " · :red[unread]")
            )
            if item.cr_id and line.button("Open request", key=f"inbox_open_{item.id}", icon=":material/open_in_new:"):
                open_request(item)
            if not item.read and line.button("Mark read", key=f"inbox_read_{item.id}", type="tertiary"):
                notify.mark_read(catalog(), user, [item.id])
                st.rerun()
