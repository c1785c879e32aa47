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


def flash(message: str, *, kind: str = "success") -> None:
    """Keep a message for the next run (``st.rerun`` would otherwise drop it)."""
    st.session_state["oreo_flash"] = (kind, message)


def show_flash() -> None:
    """Show, once, the message kept by ``flash``."""
    kept = st.session_state.pop("oreo_flash", None)
    if kept is not None:
        kind, message = kept
        {"success": st.success, "warning": st.warning, "error": st.error}.get(kind, st.info)(message)


# Dialogs stay open through a session flag, not through the button that opened them:
# a click inside a dialog reruns without that button being pressed.
def open_dialog(name: str, value: Any = True) -> None:
    st.session_state[f"oreo_dialog_{name}"] = value


def dialog_value(name: str) -> Any:
    """What ``open_dialog`` stored for an open dialog, or None while it is closed."""
    return st.session_state.get(f"oreo_dialog_{name}")


def close_dialog(name: str) -> None:
    st.session_state.pop(f"oreo_dialog_{name}", None)


STATUS_BADGES = {
    "passed": ":green-badge[:material/check_circle: passed]",
    "warning": ":orange-badge[:material/warning: warning]",
    "failed": ":red-badge[:material/error: failed]",
}
SEVERITY_BADGES = {
    "critical": ":red-badge[critical]",
    "warning": ":orange-badge[warning]",
    "info": ":blue-badge[info]",
}


def status_badge(status: str | None) -> str:
    """Markdown badge for a validation status ("not validated" when there is none)."""
    if status is None:
        return ":gray-badge[not validated]"
    return STATUS_BADGES.get(status, f":gray-badge[{status}]")
