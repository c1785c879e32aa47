"""A bare Streamlit page with a timed fragment: the baseline of ``live_presence`` (``streamlit run`` it).

The framework's own cost of one fragment refresh, with the server configuration Oreo's
uses (``.streamlit/config.toml``): a page with a title and a caption, and a fragment that
reruns every ``BARE_REFRESH_S`` seconds (0: no fragment timer) and writes one caption, as
Oreo's presence line does. No catalog, no sign-in, no widgets.
"""

from __future__ import annotations

import os
import time

import streamlit as st

every = float(os.environ.get("BARE_REFRESH_S", "5")) or None
st.title("Bare fragment")
st.caption("Rows 1-50 of 1,000,000")


@st.fragment(run_every=every)
def _strip() -> None:
    st.caption(f"No one else has this page open ({time.monotonic():.0f}).")


_strip()
