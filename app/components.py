"""Shared UI pieces: the signed-in user, error display, dataset picking.

Pages call core and render; everything they share lives here so each page stays thin.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import streamlit as st

from core import auth
from core.catalog import Catalog, open_catalog
from core.config import get_settings
from core.errors import OreoError

USER_KEY = "oreo_username"
DATASET_KEY = "oreo_dataset"


def catalog() -> Catalog:
    return open_catalog()


@contextmanager
def oreo_errors() -> Iterator[None]:
    """Show an ``OreoError`` as one clean message instead of a traceback."""
    try:
        yield
    except OreoError as exc:
        st.error(str(exc), icon=":material/error:")


def oidc_configured() -> bool:
    """True when ``[auth]`` is set in .streamlit/secrets.toml, enabling ``st.login``."""
    try:
        return "auth" in st.secrets
    except (FileNotFoundError, OreoError):
        return False
    except Exception:  # StreamlitSecretNotFoundError and parse errors: no SSO
        return False


def _oidc_claims() -> dict[str, Any]:
    try:
        return dict(st.user.to_dict())
    except Exception:
        return {}


def current_user() -> auth.User | None:
    """The signed-in user: a local sign-in kept in the session, or an OIDC identity."""
    username = st.session_state.get(USER_KEY)
    if username:
        try:
            return auth.get_user(catalog(), username)
        except OreoError:
            st.session_state.pop(USER_KEY, None)
            return None
    if oidc_configured() and st.user.is_logged_in:
        settings = get_settings()
        claims = _oidc_claims()
        groups = claims.get(settings.oidc_groups_claim) or []
        if isinstance(groups, str):
            groups = [groups]
        try:
            user = auth.sign_in_oidc(
                catalog(),
                email=claims.get("email"),
                name=claims.get("name"),
                groups=[str(g) for g in groups],
                group_roles=settings.oidc_group_roles,
            )
        except OreoError as exc:
            st.error(str(exc))
            return None
        st.session_state[USER_KEY] = user.username
        st.session_state["oreo_auth_method"] = "oidc"
        return user
    return None


def sign_out() -> None:
    method = st.session_state.get("oreo_auth_method")
    for key in list(st.session_state.keys()):
        del st.session_state[key]
    if method == "oidc":
        # st.logout queues a browser redirect through the provider's logout that clears the
        # identity cookie; st.rerun would drop it and the next page load would sign back in.
        st.logout()
        st.stop()
    st.rerun()


def require_user() -> auth.User:
    """The signed-in user, or stop the page (the router only lists pages to signed-in users)."""
    user = current_user()
    if user is None:
        st.warning("Please sign in.")
        st.stop()
    return user


def dataset_options(user: auth.User) -> list[str]:
    from core.datasets import list_datasets

    return [f"{d.project_id}/{d.dataset_id}" for d in list_datasets(catalog(), actor=user)]


def split_dataset(value: str) -> tuple[str, str]:
    project_id, _, dataset_id = value.partition("/")
    return project_id, dataset_id
