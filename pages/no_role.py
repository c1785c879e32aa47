"""What a signed-in user sees at the address of a page their role does not open (Review, Admin, Rules).

The router serves this page hidden under those addresses, so a bookmark or a shared link
says which role the page needs instead of Streamlit's "Page not found".
"""

from __future__ import annotations

import streamlit as st

from app.components import NEEDED_ROLE_KEY, require_user

require_user()
title, role = st.session_state.get(NEEDED_ROLE_KEY, ("This page", "another"))
st.warning(
    f"**{title}** needs the {role} role in a project. Ask an admin of your project to give you that role; "
    "until then, the pages on the left are the ones you can use.",
    icon=":material/lock:",
)
