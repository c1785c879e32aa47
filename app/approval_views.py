"""What a page says about a change request whose approval did not finish (a restart, a crash, the catalog down)."""

from __future__ import annotations

import streamlit as st

from core.merge import ApprovalState

INTERRUPTED = "This request's approval was interrupted; it is still open and its staging is intact."


def interrupted_approval_note(state: ApprovalState, *, author: bool = False) -> None:
    """A warning when the request's last approval was interrupted, a note while one runs; nothing otherwise.

    ``author``: the reader wrote the request, so an approver, not they, approves it again.
    """
    again = "An approver can approve it again" if author else "Approve it again"
    if state.state == "interrupted":
        st.warning(f"{INTERRUPTED} {again} to merge it.", icon=":material/restart_alt:")
    elif state.state == "landed":
        st.warning(
            f"This request was merged as version {state.version}, but its approval was interrupted before it "
            f"was recorded. {again} to finish; it will not be merged twice.",
            icon=":material/restart_alt:",
        )
    elif state.state == "running":
        st.info("An approval of this request is running.", icon=":material/hourglass_top:")
