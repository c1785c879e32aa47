"""Accounts and access: ``oreo user``, ``oreo token``, ``oreo project`` and ``oreo member``."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Annotated, Any

import typer

from cli.context import AsUser, acting_user, command_catalog, emit
from core import auth, projects, tokens, web_sessions
from core.errors import InvalidInput
from interface import documents

user_app = typer.Typer(no_args_is_help=True, help="Local accounts.")
token_app = typer.Typer(no_args_is_help=True, help="Personal access tokens for the HTTP API.")
project_app = typer.Typer(no_args_is_help=True, help="Projects.")
member_app = typer.Typer(no_args_is_help=True, help="Project memberships and roles.")


def _read_password_stdin() -> str:
    line = sys.stdin.readline()
    if not line:
        raise InvalidInput("--password-stdin given but nothing was read from standard input", field="password")
    return line.rstrip("\r\n")


@user_app.command("add")
def user_add(
    username: str,
    email: Annotated[str | None, typer.Option(help="Email; OIDC sign-ins match on it.")] = None,
    site_admin: Annotated[bool, typer.Option("--site-admin", help="Admin in every project.")] = False,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
) -> None:
    """Create a local account (a password is generated and printed unless --password-stdin)."""
    password = _read_password_stdin() if password_stdin else None
    user, used = auth.create_user(command_catalog(), username, email=email, password=password, site_admin=site_admin)
    doc: dict[str, Any] = {"username": user.username, "email": user.email, "site_admin": user.site_admin}
    if password is None:
        doc["password"] = used
    human = f"created user {user.username}" + (f" with password {used}" if password is None else "")
    emit(doc, human)


@user_app.command("password")
def user_password(
    username: str,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
) -> None:
    """Set a new password (generated and printed unless --password-stdin).

    The user's browser sessions and API tokens are revoked: whoever knew the old password signs in again.
    """
    password = _read_password_stdin() if password_stdin else auth.generate_password()
    auth.set_password(command_catalog(), username, password)
    doc: dict[str, Any] = {"username": username}
    if not password_stdin:
        doc["password"] = password
    emit(doc, f"password of {username} changed" + ("" if password_stdin else f" to {password}"))


@user_app.command("list")
def user_list() -> None:
    """List accounts (disabled ones are marked in the text output)."""
    users = auth.list_users(command_catalog())
    doc = {
        "users": [
            {"username": u.username, "email": u.email, "site_admin": u.site_admin, "auth_source": u.auth_source}
            for u in users
        ]
    }
    emit(
        doc,
        "\n".join(
            f"{u.username:<20} {u.email or '':<30} {'site-admin' if u.site_admin else ''}"
            + ("  disabled" if u.disabled else "")
            for u in users
        ),
    )


@user_app.command("sessions")
def user_sessions(username: str, as_user: AsUser = None) -> None:
    """List a user's browser sign-ins, newest first (ended ones too, with their state)."""
    catalog = command_catalog()
    items = web_sessions.list_web_sessions(catalog, username, actor=acting_user(catalog, as_user))
    doc = {
        "username": username,
        "sessions": [
            {
                "id": w.id,
                "method": w.method,
                "created_at": w.created_at,
                "last_seen_at": w.last_seen_at,
                "expires_at": w.expires_at,
                "idle_expires_at": w.idle_expires_at,
                "client": w.client,
                "state": w.state,
            }
            for w in items
        ],
    }

    def when(value: datetime) -> str:
        return value.strftime("%Y-%m-%d %H:%M")

    lines = [f"{'id':<8}  {'method':<8}  {'created':<16}  {'last seen':<16}  {'expires':<16}  {'state':<7}  client"]
    lines += [
        f"{w.id[:8]:<8}  {w.method:<8}  {when(w.created_at)}  {when(w.last_seen_at)}  "
        f"{when(min(w.expires_at, w.idle_expires_at))}  {w.state:<7}  {w.client}"
        for w in items
    ]
    emit(doc, "\n".join(lines) if items else f"{username} has no browser sessions")


@user_app.command("revoke")
def user_revoke(username: str, as_user: AsUser = None) -> None:
    """Revoke every active browser sign-in and every API token of a user (site admins).

    Their next page load asks for sign-in and their tokens answer 401; the account and its password stay.
    """
    catalog = command_catalog()
    revoked = web_sessions.revoke_user_access(catalog, username, actor=acting_user(catalog, as_user))
    doc: dict[str, Any] = {"username": username, "revoked": revoked.sessions}
    if revoked.tokens:
        doc["tokens_revoked"] = revoked.tokens
    tokens_said = f" and {revoked.tokens} API token(s)" if revoked.tokens else ""
    emit(doc, f"revoked {revoked.sessions} session(s){tokens_said} of {username}")


@user_app.command("disable")
def user_disable(username: str, as_user: AsUser = None) -> None:
    """Disable an account (site admins): it cannot sign in, and its browser sessions and API tokens are revoked.

    Its memberships, change requests and history stay; `oreo user enable` lets it sign in again (with new
    sessions and tokens). The last enabled site admin cannot be disabled.
    """
    catalog = command_catalog()
    revoked = auth.disable_user(catalog, username, actor=acting_user(catalog, as_user))
    counts = {"sessions_revoked": revoked.sessions, "tokens_revoked": revoked.tokens}
    emit(
        {"username": username, "disabled": True, **counts},
        f"disabled {username}; revoked {revoked.sessions} session(s) and {revoked.tokens} API token(s)",
    )


@user_app.command("enable")
def user_enable(username: str, as_user: AsUser = None) -> None:
    """Let a disabled account sign in again (site admins); revoked sessions and tokens stay revoked."""
    catalog = command_catalog()
    user = auth.enable_user(catalog, username, actor=acting_user(catalog, as_user))
    emit({"username": user.username, "disabled": False}, f"enabled {user.username}")


@user_app.command("delete")
def user_delete(username: str, as_user: AsUser = None) -> None:
    """Delete an account for good (site admins), with its memberships, sessions, API tokens and inbox.

    What it did stays readable: change requests, comments, history and the audit log keep its username.
    The username may later be given to a new account; to stop someone but keep the account, use
    `oreo user disable`. The last enabled site admin cannot be deleted.
    """
    catalog = command_catalog()
    revoked = auth.delete_user(catalog, username, actor=acting_user(catalog, as_user))
    counts = {"sessions_revoked": revoked.sessions, "tokens_revoked": revoked.tokens}
    emit(
        {"username": username, "deleted": True, **counts},
        f"deleted {username}; revoked {revoked.sessions} session(s) and {revoked.tokens} API token(s)",
    )


@token_app.command("create")
def token_create(
    as_user: Annotated[str, typer.Option("--as", help="Whose token it is.")],
    project: Annotated[str | None, typer.Option("--project", help="Only this project.")] = None,
    role: Annotated[str | None, typer.Option("--role", help="At most this role: editor, approver or admin.")] = None,
    expires_days: Annotated[
        int | None,
        typer.Option(
            "--expires-days",
            help="Valid this many days, 1 to 3650 (default: OREO_TOKEN_DEFAULT_DAYS, 90).",
        ),
    ] = None,
) -> None:
    """Create a personal access token for the HTTP API; it is printed once, only its hash is kept."""
    created = tokens.create_token(command_catalog(), as_user, project_id=project, role=role, expires_days=expires_days)
    doc = {"token": created.secret, **created.token.to_json()}
    emit(doc, f"token {created.token.id} for {as_user} (shown once, keep it safe):\n{created.secret}")


@token_app.command("list")
def token_list(as_user: Annotated[str | None, typer.Option("--as", help="Only this user's tokens.")] = None) -> None:
    """List API tokens (never their secrets)."""
    catalog = command_catalog()
    if as_user is not None:
        auth.get_user(catalog, as_user)  # an unknown username is an error, not an empty list
    found = tokens.list_tokens(catalog, username=as_user)
    lines = [
        f"{t.id}  {t.username:<16} {t.project_id or '*':<16} {t.role or '-':<9} {t.state:<8} "
        + (f"expires {t.expires_at:%Y-%m-%d %H:%M}" if t.expires_at else "no expiry")
        for t in found
    ]
    emit({"tokens": [t.to_json() for t in found]}, "\n".join(lines) or "no tokens")


@token_app.command("revoke")
def token_revoke(token_id: str) -> None:
    """Revoke an API token for good."""
    revoked = tokens.revoke_token(command_catalog(), token_id)
    emit(revoked.to_json(), f"token {revoked.id} of {revoked.username} revoked")


@project_app.command("create")
def project_create(project_id: str, name: Annotated[str | None, typer.Option(help="Display name.")] = None) -> None:
    """Create a project."""
    project = projects.create_project(command_catalog(), project_id, name=name)
    emit({"project": project.id, "name": project.name}, f"created project {project.id}")


@project_app.command("list")
def project_list(as_user: AsUser = None) -> None:
    """List the projects visible to a user."""
    catalog = command_catalog()
    items = projects.list_projects(catalog, acting_user(catalog, as_user))
    emit(
        {"projects": [documents.project_doc(p) for p in items]},
        "\n".join(f"{p.id:<20} {p.name}" for p in items),
    )


@member_app.command("add")
def member_add(
    project_id: str,
    username: str,
    role: Annotated[str, typer.Option("--role", help="editor, approver or admin.")],
) -> None:
    """Give a user a role in a project."""
    if role not in {r.value for r in auth.Role}:
        raise typer.BadParameter(f"{role!r} is not one of editor, approver, admin", param_hint="--role")
    auth.add_member(command_catalog(), project_id, username, role)
    emit({"project": project_id, "username": username, "role": role}, f"{username} is {role} in {project_id}")
