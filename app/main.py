"""Oreo's Streamlit entrypoint: page config, sign-in gate, then the page router."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.components import current_user, remember_deep_link, sign_out, sync_session_cookie, take_deep_link
from core import auth

PAGES = Path(__file__).resolve().parent.parent / "pages"
# Every page's address. Streamlit names a page by a hash of its url_path, so the login page,
# served under these same paths while signed out, reruns into the page asked for after sign-in.
URL_PATHS = ("datasets", "table", "imports", "history", "requests", "review", "admin")

st.set_page_config(page_title="Oreo", page_icon=":material/table_view:", layout="wide")

user = current_user()
if user is None:
    login = [st.Page(PAGES / "login.py", title="Sign in", icon=":material/login:", url_path="login", default=True)]
    login += [
        st.Page(PAGES / "login.py", title="Sign in", icon=":material/login:", url_path=path, visibility="hidden")
        for path in URL_PATHS
    ]
    router = st.navigation(login)
else:
    from app.components import catalog

    role = auth.highest_role(catalog(), user)
    pages = [
        st.Page(
            PAGES / "datasets.py", title="Datasets", icon=":material/folder_open:", url_path="datasets", default=True
        ),
        st.Page(PAGES / "table.py", title="Table", icon=":material/table:", url_path="table"),
        st.Page(PAGES / "imports.py", title="Import", icon=":material/upload_file:", url_path="imports"),
        st.Page(PAGES / "history.py", title="History", icon=":material/history:", url_path="history"),
        st.Page(PAGES / "requests.py", title="My requests", icon=":material/outbox:", url_path="requests"),
    ]
    if role is not None and role.rank >= auth.Role.APPROVER.rank:
        pages.append(st.Page(PAGES / "review.py", title="Review", icon=":material/rule:", url_path="review"))
    if role is not None and role.rank >= auth.Role.ADMIN.rank:
        pages.append(st.Page(PAGES / "admin.py", title="Admin", icon=":material/build:", url_path="admin"))
    router = st.navigation({"Oreo": pages})
    with st.sidebar:
        st.markdown(f"Signed in as **{user.label}**  \n`{user.username}` · {role.value if role else 'no role yet'}")
        if st.button("Sign out", key="sign_out", icon=":material/logout:"):
            sign_out()
        sync_session_cookie()
    asked_for = take_deep_link()  # after an SSO sign-in, which always returns to the root
    for page in pages:
        if asked_for is not None and page.url_path == asked_for and page is not router:
            st.switch_page(page)
router.run()
if user is None:
    # Below the form, where their script elements take no room.
    sync_session_cookie()  # clears an ended session's cookie
    remember_deep_link(router.url_path)
