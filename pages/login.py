"""Sign in with a local account, or with SSO when OIDC is configured.

The router serves this page under every page's address while nobody is signed in, so a
deep link asks for sign-in first and, once signed in, the rerun lands on the page asked for.
"""

from __future__ import annotations

import streamlit as st

from app.components import catalog, client_address, oidc_configured, oreo_errors, sign_in
from core import auth

st.title("Oreo")
st.caption("Review console for collaborative editing of Delta Lake tables")

left, _ = st.columns([2, 3])
with left:
    with st.form("login_form", border=True):
        st.header("Sign in", anchor=False)  # under the page title: no heading level skipped
        username = st.text_input("Username", key="login_username", autocomplete="username")
        password = st.text_input("Password", type="password", key="login_password", autocomplete="current-password")
        submitted = st.form_submit_button("Sign in", type="primary", key="login_submit")
    if submitted:
        with oreo_errors():
            user = auth.authenticate(catalog(), username.strip(), password, client=client_address())
            sign_in(user, "password")
            st.rerun()
    if oidc_configured():
        st.divider()
        st.button("Sign in with SSO", key="login_sso", icon=":material/key:", on_click=st.login)
