"""Oreo's Streamlit entrypoint: page config, sign-in gate, then the page router."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.components import current_user, sign_out
from core import auth

PAGES = Path(__file__).resolve().parent.parent / "pages"

st.set_page_config(page_title="Oreo", page_icon=":material/table_view:", layout="wide")

user = current_user()
if user is None:
    router = st.navigation([st.Page(PAGES / "login.py", title="Sign in", icon=":material/login:")])
else:
    from app.components import catalog

    role = auth.highest_role(catalog(), user)
    pages = [
        st.Page(PAGES / "datasets.py", title="Datasets", icon=":material/folder_open:", default=True),
        st.Page(PAGES / "table.py", title="Table", icon=":material/table:"),
        st.Page(PAGES / "imports.py", title="Import", icon=":material/upload_file:"),
        st.Page(PAGES / "history.py", title="History", icon=":material/history:"),
        st.Page(PAGES / "requests.py", title="My requests", icon=":material/outbox:"),
    ]
    if role is not None and role.rank >= auth.Role.APPROVER.rank:
        pages.append(st.Page(PAGES / "review.py", title="Review", icon=":material/rule:"))
    if role is not None and role.rank >= auth.Role.ADMIN.rank:
        pages.append(st.Page(PAGES / "admin.py", title="Admin", icon=":material/build:"))
    router = st.navigation({"Oreo": pages})
    with st.sidebar:
        st.markdown(f"Signed in as **{user.label}**  \n`{user.username}` · {role.value if role else 'no role yet'}")
        if st.button("Sign out", key="sign_out", icon=":material/logout:"):
            sign_out()
router.run()
