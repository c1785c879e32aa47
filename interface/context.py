"""Which catalog, which user, which session: what every front end looks up before it calls core.

The CLI names its user with ``--as``, the API with a bearer token, a page with its sign-in;
each front end keeps that part. What they all do the same way is here.
"""

from __future__ import annotations

from core import auth, sessions, tokens
from core.catalog import Catalog, open_catalog
from core.errors import AuthenticationFailed, InvalidInput


def catalog() -> Catalog:
    """The catalog a command, a request or a page works on (the configured one)."""
    return open_catalog()


def acting_user(catalog: Catalog, username: str | None) -> auth.User:
    """The user ``username`` names (refused if disabled), or the local operator without one (the CLI's ``--as``)."""
    if username is None:
        return auth.SYSTEM
    user = auth.get_user(catalog, username)
    if user.disabled:
        raise AuthenticationFailed(f"cannot act as {username!r}: {auth.DISABLED_MESSAGE}")
    return user


def token_user(token: str | None) -> auth.User:
    """The user a bearer token acts as, with the token's scope (the API's caller).

    No token is refused before the catalog is opened.

    Raises:
        AuthenticationFailed: No token, or one that is unknown, revoked or expired.
    """
    if token is None or not token.strip():
        raise AuthenticationFailed(
            "missing 'Authorization: Bearer <token>' header; create a token with `oreo token create`"
        )
    return tokens.authenticate_token(catalog(), token)


def session_on(
    catalog: Catalog, session_id: str, project_id: str, dataset_id: str, actor: auth.User
) -> sessions.SessionInfo:
    """The live-edit session ``session_id``, refused if it belongs to another dataset than the one named.

    Raises:
        InvalidInput: The session edits another dataset (``field`` is ``session_id``).
        NotFound: No such session.
        PermissionDenied: It is not ``actor``'s to see.
    """
    info = sessions.get_session(catalog, session_id, actor=actor)
    if (info.project_id, info.dataset_id) != (project_id, dataset_id):
        raise InvalidInput(
            f"session {session_id} belongs to {info.project_id}/{info.dataset_id}, not {project_id}/{dataset_id}",
            field="session_id",
        )
    return info
