"""A change request's conflicts with newer commits: base, theirs and mine, and the author's two choices.

Shared by the Review page (approvers, and an author who is one) and My requests (every author).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.components import catalog, flash
from app.formatting import EMPTY, display_value
from core.auth import User
from core.change_requests import ChangeRequest
from core.conflicts import Choice, Conflict, resolve_conflict


def conflict_value(text: str | None, conflict: Conflict, types: dict[str, str]) -> str:
    """A conflict's base, theirs or mine as the grid shows it (a whole-row conflict's text as it is)."""
    if conflict.column is None:
        return text or EMPTY
    return display_value(text, types.get(conflict.column))


_MARKDOWN = str.maketrans({ch: "\\" + ch for ch in "\\`*_[]<>#|~$"})


def _shown(text: str | None, conflict: Conflict, types: dict[str, str]) -> str:
    """A value in a line of Markdown: as the grid shows it, Markdown's own characters escaped."""
    return conflict_value(text, conflict, types).translate(_MARKDOWN)


def conflict_table(
    cr: ChangeRequest, conflicts: list[Conflict], types: dict[str, str], user: User, *, key: str
) -> None:
    """What collides, with the three values, the commit and who made it; the author settles each right here.

    Args:
        cr: An open change request.
        conflicts: Its conflicts (``core.conflicts.find_conflicts``), at least one.
        types: The dataset's column types, to show values as the grid does.
        user: The signed-in user; the request's author gets a "Keep mine" and a "Take theirs" per conflict.
        key: Prefix of the widget keys (one per page).
    """
    author = cr.author == user.username
    # A conflict left undecided by an earlier resolution is compared from an older version than the request's.
    since = min(cr.base_version, *(c.version - 1 for c in conflicts))
    if author:
        advice = "For each, keep your change over the newer value or take theirs; the approver then reviews it again."
    else:
        advice = f"`{cr.author}`, the author, decides each: keep their change or take the newer value."
        advice += " An approver can request changes meanwhile."
    st.warning(
        f"{len(conflicts)} change(s) collide with commits made after version {since}. {advice}",
        icon=":material/merge_type:",
    )
    # Which cells, as the page has always listed them; the values of each follow, one line per conflict.
    st.dataframe(
        pd.DataFrame(
            [
                {"row_id": c.row_id, "column": c.column or "(whole row)", "version": c.version, "reason": c.reason}
                for c in conflicts
            ]
        ),
        hide_index=True,
        width="stretch",
        key=f"{key}_conflicts_table",
    )
    for i, c in enumerate(conflicts):
        by = f" by {c.committed_by}" if c.committed_by else ""
        line = (
            f"`{c.row_id}` · `{c.column or '(whole row)'}` · {c.reason}  \n"
            f"base **{_shown(c.base, c, types)}** → theirs **{_shown(c.theirs, c, types)}** "
            f"(version {c.version}{by}) · mine **{_shown(c.mine, c, types)}**"
        )
        with st.container(key=f"{key}_conflict_{i}", border=True):
            if not author:
                st.markdown(line)
                continue
            text, keep, take = st.columns([3, 1.4, 1.4], vertical_alignment="center")
            text.markdown(line)
            choice: Choice | None = None
            if keep.button(
                "Keep mine", key=f"{key}_keep_mine_{i}", icon=":material/person:", width="stretch",
                help="Your change stands over the newer one; the request is re-based on the current version.",
            ):  # fmt: skip
                choice = "mine"
            if take.button(
                "Take theirs", key=f"{key}_take_theirs_{i}", icon=":material/group:", width="stretch",
                help="The newer value stays; this change leaves your request.",
            ):  # fmt: skip
                choice = "theirs"
            if choice is not None:
                with st.spinner("Staging the next revision…"):
                    revised = resolve_conflict(catalog(), cr.id, c.row_id, c.column, choice, actor=user)
                kept = "Kept your change" if choice == "mine" else "Took the newer value"
                flash(f"{kept} on `{c.row_id}` · `{c.column or '(whole row)'}`: revision {revised.revision} is open.")
                st.rerun()
