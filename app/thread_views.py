"""A change request's discussion: its thread, a comment box, its revisions and its state history.

Review and My requests both show them; cell comments also appear beside their cells in
the row diff (``app.diff_views``, ``notes``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from app.components import catalog, flash, local_time, oreo_errors
from app.diff_views import Notes
from core import change_requests
from core.auth import User
from core.change_requests import ChangeRequest, Comment, Revision, StateChange
from core.diff import RowDiffPage
from interface.views import ChangeRequestView

WHOLE_REQUEST = "(the whole request)"


def cell_notes(thread: Sequence[Comment], revision: int) -> Notes:
    """The cell comments made on ``revision`` as ``author: text`` lines, for the markers in its diff.

    A comment on an earlier revision's cell stays in the thread but not beside the cell:
    the cell it pointed at may have changed since.
    """
    notes: dict[tuple[str, str], list[str]] = {}
    for c in thread:
        if c.row_id is not None and c.column is not None and c.revision == revision:
            notes.setdefault((c.row_id, c.column), []).append(f"{c.author}: {c.body}")
    return notes


def where(comment: Comment) -> str:
    """``on row 2 · age`` for a cell comment, else empty."""
    return f"on row {comment.row_id} · {comment.column}" if comment.row_id is not None else ""


def thread_view(thread: Sequence[Comment], *, key: str) -> None:
    """The comments, oldest first: author, time, the cell it is on, the text."""
    with st.container(key=key):
        if not thread:
            st.caption("No comments yet.")
            return
        for i, c in enumerate(thread):
            with st.container(border=True, key=f"{key}_{i}"):
                cell = f" · :blue-badge[{where(c)}]" if c.row_id is not None else ""
                st.markdown(
                    f"**{c.author}** · {local_time(c.ts)} · :gray-badge[on revision {c.revision}]{cell}"
                )
                st.text(c.body)


def comment_box(cr: ChangeRequest, user: User, page: RowDiffPage | None, *, key: str) -> None:
    """Add a comment, optionally on one changed cell (a row of the diff page shown, and a column)."""
    rows = [r.row_id for r in page.rows] if page is not None else []
    columns = list(page.columns) if page is not None else []
    with st.form(key, clear_on_submit=True, border=True):
        text = st.text_area("Comment", key=f"{key}_text", placeholder="Write a comment…", height=80)
        left, right = st.columns(2)
        row = left.selectbox("On row", [WHOLE_REQUEST, *rows], key=f"{key}_row", disabled=not rows)
        column = right.selectbox("Column", columns, key=f"{key}_column", disabled=not rows, index=None)
        if st.form_submit_button("Comment", key=f"{key}_submit", icon=":material/comment:"):
            on_cell = row not in (None, WHOLE_REQUEST)
            with oreo_errors():
                change_requests.add_comment(
                    catalog(), cr.id, text, actor=user,
                    row_id=row if on_cell else None, column=column if on_cell else None,
                )  # fmt: skip
                flash("Comment added.", kind="info")
                st.rerun()


def revisions_view(revisions: Sequence[Revision], *, key: str) -> None:
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "revision": r.number,
                    "staged": r.staged_at,
                    "base version": r.base_version,
                    "rows": r.rows,
                    "cells": r.cells,
                    "checks": r.validation_status or "",
                }
                for r in revisions
            ],
            columns=["revision", "staged", "base version", "rows", "cells", "checks"],
        ),
        hide_index=True,
        width="stretch",
        key=key,
    )


def state_history_view(states: Sequence[StateChange], *, key: str) -> None:
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "when": h.at,
                    "state": h.state,
                    "by": h.actor,
                    "revision": h.revision,
                    "note": h.note or "",
                }
                for h in states
            ],
            columns=["when", "state", "by", "revision", "note"],
        ),
        hide_index=True,
        width="stretch",
        key=key,
    )


def discussion(
    view: ChangeRequestView, user: User, page: RowDiffPage | None, *, key: str, can_comment: bool = True
) -> None:
    """The request's thread, the comment box, its revisions and its state history (``interface.views``)."""
    st.subheader("Discussion", anchor=False)
    thread_view(view.thread, key=f"{key}_thread")
    if can_comment:
        comment_box(view.request, user, page, key=f"{key}_comment")
    st.markdown("**Revisions**")
    revisions_view(view.revisions, key=f"{key}_revisions")
    st.markdown("**State history**")
    state_history_view(view.states, key=f"{key}_states")
