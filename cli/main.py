"""The ``oreo`` command line: every operation, for scripts and cron.

Global rules: ``oreo [--json] COMMAND ...``. With ``--json`` each command prints exactly
one JSON document on stdout. Exit codes: 0 success, 1 refused or failed (one line
``error: ...`` on stderr), 2 usage error.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from cli import rows as rows_cli
from cli.migrate import migrate_app
from cli.notify import notify_app, webhook_app
from core import (
    auth,
    change_requests,
    conflicts,
    datasets,
    documents,
    engine,
    imports,
    logs,
    projects,
    rules,
    sessions,
    tokens,
    web_sessions,
)
from core.catalog import Catalog, open_catalog
from core.documents import cr_doc as _cr_doc
from core.documents import dataset_doc as _dataset_doc
from core.documents import dumps
from core.documents import validation_doc as _validation_doc
from core.errors import AuthenticationFailed, EngineError, InvalidInput, OreoError
from core.filters import parse_where
from core.reads import RowFilter
from core.values import load_json

_logger = logging.getLogger("oreo.cli")
app = typer.Typer(no_args_is_help=True, add_completion=False, help="Oreo: review console for Delta Lake tables.")
user_app = typer.Typer(no_args_is_help=True, help="Local accounts.")
project_app = typer.Typer(no_args_is_help=True, help="Projects.")
member_app = typer.Typer(no_args_is_help=True, help="Project memberships and roles.")
dataset_app = typer.Typer(no_args_is_help=True, help="Datasets: create, list, show, read rows.")
app.add_typer(user_app, name="user")
app.add_typer(project_app, name="project")
app.add_typer(member_app, name="member")
app.add_typer(dataset_app, name="dataset")
session_app = typer.Typer(no_args_is_help=True, help="Live-edit sessions.")
app.add_typer(session_app, name="session")
cr_app = typer.Typer(no_args_is_help=True, help="Change requests: submit, review, approve, reject, withdraw.")
app.add_typer(cr_app, name="cr")
rules_app = typer.Typer(no_args_is_help=True, help="Validation rules (a GX ExpectationSuite per dataset).")
app.add_typer(rules_app, name="rules")
app.add_typer(migrate_app, name="migrate")
app.add_typer(webhook_app, name="webhook")
app.add_typer(notify_app, name="notify")
token_app = typer.Typer(no_args_is_help=True, help="Personal access tokens for the HTTP API.")
app.add_typer(token_app, name="token")


@dataclass
class _State:
    json: bool = False


state = _State()

AsUser = Annotated[str | None, typer.Option("--as", help="Act as this user (default: the local operator).")]


@app.callback()
def _global(json_output: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False) -> None:
    state.json = json_output


def emit(document: dict[str, Any], human: str | None = None) -> None:
    """Print ``document`` as JSON with --json, else ``human`` (or an indented rendering)."""
    if state.json:
        sys.stdout.write(dumps(document) + "\n")
    else:
        sys.stdout.write((human if human is not None else dumps(document, indent=2)) + "\n")


def _catalog() -> Catalog:
    return open_catalog()


def _actor(catalog: Catalog, username: str | None) -> auth.User:
    if username is None:
        return auth.SYSTEM
    user = auth.get_user(catalog, username)
    if user.disabled:
        raise AuthenticationFailed(f"cannot act as {username!r}: {auth.DISABLED_MESSAGE}")
    return user


def _read_password_stdin() -> str:
    line = sys.stdin.readline()
    if not line:
        raise InvalidInput("--password-stdin given but nothing was read from standard input", field="password")
    return line.rstrip("\r\n")


# ---------------------------------------------------------------- demo


@app.command()
def demo() -> None:
    """Seed the demo workspace (project demo, dataset customers, three accounts)."""
    from core.demo import seed_demo

    result = seed_demo(_catalog())
    doc = {
        "created": result.created,
        "project": result.project,
        "dataset": result.dataset,
        "rows": result.rows,
        "accounts": [{"username": a.username, "role": a.role, "password": a.password} for a in result.accounts],
    }
    if result.created:
        lines = [f"Demo workspace ready: {result.project}/{result.dataset} with {result.rows:,} rows.", "Accounts:"]
        lines += [f"  {a.username:<9} role={a.role:<9} password={a.password or '(unchanged)'}" for a in result.accounts]
    else:
        lines = [
            f"Demo workspace already seeded: {result.project}/{result.dataset} with {result.rows:,} rows.",
            "Accounts: editor, approver, admin (passwords were printed at first seed;",
            "reset one with: oreo user password USERNAME).",
        ]
    emit(doc, "\n".join(lines))


# ---------------------------------------------------------------- users


@user_app.command("add")
def user_add(
    username: str,
    email: Annotated[str | None, typer.Option(help="Email; OIDC sign-ins match on it.")] = None,
    site_admin: Annotated[bool, typer.Option("--site-admin", help="Admin in every project.")] = False,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
) -> None:
    """Create a local account (a password is generated and printed unless --password-stdin)."""
    password = _read_password_stdin() if password_stdin else None
    user, used = auth.create_user(_catalog(), username, email=email, password=password, site_admin=site_admin)
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
    auth.set_password(_catalog(), username, password)
    doc: dict[str, Any] = {"username": username}
    if not password_stdin:
        doc["password"] = password
    emit(doc, f"password of {username} changed" + ("" if password_stdin else f" to {password}"))


@user_app.command("list")
def user_list() -> None:
    """List accounts (disabled ones are marked in the text output)."""
    users = auth.list_users(_catalog())
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
    catalog = _catalog()
    items = web_sessions.list_web_sessions(catalog, username, actor=_actor(catalog, as_user))
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
    catalog = _catalog()
    revoked = web_sessions.revoke_user_access(catalog, username, actor=_actor(catalog, as_user))
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
    catalog = _catalog()
    revoked = auth.disable_user(catalog, username, actor=_actor(catalog, as_user))
    counts = {"sessions_revoked": revoked.sessions, "tokens_revoked": revoked.tokens}
    emit(
        {"username": username, "disabled": True, **counts},
        f"disabled {username}; revoked {revoked.sessions} session(s) and {revoked.tokens} API token(s)",
    )


@user_app.command("enable")
def user_enable(username: str, as_user: AsUser = None) -> None:
    """Let a disabled account sign in again (site admins); revoked sessions and tokens stay revoked."""
    catalog = _catalog()
    user = auth.enable_user(catalog, username, actor=_actor(catalog, as_user))
    emit({"username": user.username, "disabled": False}, f"enabled {user.username}")


@user_app.command("delete")
def user_delete(username: str, as_user: AsUser = None) -> None:
    """Delete an account for good (site admins), with its memberships, sessions, API tokens and inbox.

    What it did stays readable: change requests, comments, history and the audit log keep its username.
    The username may later be given to a new account; to stop someone but keep the account, use
    `oreo user disable`. The last enabled site admin cannot be deleted.
    """
    catalog = _catalog()
    revoked = auth.delete_user(catalog, username, actor=_actor(catalog, as_user))
    counts = {"sessions_revoked": revoked.sessions, "tokens_revoked": revoked.tokens}
    emit(
        {"username": username, "deleted": True, **counts},
        f"deleted {username}; revoked {revoked.sessions} session(s) and {revoked.tokens} API token(s)",
    )


# ---------------------------------------------------------------- API tokens and the API server


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
    created = tokens.create_token(_catalog(), as_user, project_id=project, role=role, expires_days=expires_days)
    doc = {"token": created.secret, **created.token.to_json()}
    emit(doc, f"token {created.token.id} for {as_user} (shown once, keep it safe):\n{created.secret}")


@token_app.command("list")
def token_list(as_user: Annotated[str | None, typer.Option("--as", help="Only this user's tokens.")] = None) -> None:
    """List API tokens (never their secrets)."""
    catalog = _catalog()
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
    revoked = tokens.revoke_token(_catalog(), token_id)
    emit(revoked.to_json(), f"token {revoked.id} of {revoked.username} revoked")


@app.command("api")
def api_cmd(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8600,
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs, metrics at /metrics)."""
    from api.app import serve

    serve(host=host, port=port)


# ---------------------------------------------------------------- projects and members


@project_app.command("create")
def project_create(project_id: str, name: Annotated[str | None, typer.Option(help="Display name.")] = None) -> None:
    """Create a project."""
    project = projects.create_project(_catalog(), project_id, name=name)
    emit({"project": project.id, "name": project.name}, f"created project {project.id}")


@project_app.command("list")
def project_list(as_user: AsUser = None) -> None:
    """List the projects visible to a user."""
    catalog = _catalog()
    items = projects.list_projects(catalog, _actor(catalog, as_user))
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
    auth.add_member(_catalog(), project_id, username, role)
    emit({"project": project_id, "username": username, "role": role}, f"{username} is {role} in {project_id}")


# ---------------------------------------------------------------- datasets


@dataset_app.command("create")
def dataset_create(
    project_id: str,
    dataset_id: str,
    file: Annotated[Path, typer.Option("--file", help="CSV, Parquet or XLSX file.")],
    key: Annotated[str | None, typer.Option("--key", help="Column whose values become row_id.")] = None,
    sheet: Annotated[str | None, typer.Option("--sheet", help="XLSX sheet to read.")] = None,
    as_user: AsUser = None,
) -> None:
    """Create a dataset from a file; Spark writes its main Delta table."""
    catalog = _catalog()
    info = datasets.create_dataset(
        catalog, project_id, dataset_id, file, key=key, sheet=sheet, actor=_actor(catalog, as_user)
    )
    emit(_dataset_doc(info), f"created {info.project_id}/{info.dataset_id}: {info.rows:,} rows, version {info.version}")


@dataset_app.command("list")
def dataset_list(project_id: Annotated[str | None, typer.Argument()] = None, as_user: AsUser = None) -> None:
    """List datasets (of one project, or of every visible project)."""
    catalog = _catalog()
    items = datasets.list_datasets(catalog, actor=_actor(catalog, as_user), project_id=project_id)
    emit(
        {"datasets": [_dataset_doc(i) for i in items]},
        "\n".join(f"{i.project_id}/{i.dataset_id:<30} v{i.version}  {i.rows:,} rows" for i in items) or "no datasets",
    )


@dataset_app.command("show")
def dataset_show(project_id: str, dataset_id: str, as_user: AsUser = None) -> None:
    """Show a dataset's version, row count, columns and path."""
    catalog = _catalog()
    info = datasets.get_dataset(catalog, project_id, dataset_id, actor=_actor(catalog, as_user))
    doc = documents.dataset_show_doc(info, datasets.dataset_columns(info))
    columns = doc["columns"]
    human = "\n".join(
        [
            f"{info.project_id}/{info.dataset_id}  version {info.version}  {info.rows:,} rows",
            f"path: {info.path}",
            f"last commit: {info.last_commit_id}",
            "columns:",
            *[f"  {c['name']:<24} {c['type']}" for c in columns],
        ]
    )
    emit(doc, human)


@dataset_app.command("set")
def dataset_set(
    project_id: str,
    dataset_id: str,
    allow_non_finite: Annotated[
        str | None,
        typer.Option(
            "--allow-non-finite",
            help="true: edits and imports may store NaN and ±Infinity in float columns (default false).",
            metavar="true|false",
        ),
    ] = None,
    as_user: AsUser = None,
) -> None:
    """Change a dataset's settings (admins); prints all of them."""
    allow = None if allow_non_finite is None else _parse_bool(allow_non_finite, "--allow-non-finite")
    catalog = _catalog()
    settings = datasets.set_dataset_settings(
        catalog, project_id, dataset_id, actor=_actor(catalog, as_user), allow_non_finite=allow
    )
    doc = {"project": project_id, "dataset": dataset_id, **settings.to_json()}
    emit(doc, f"{project_id}/{dataset_id}: allow_non_finite={str(settings.allow_non_finite).lower()}")


@dataset_app.command("label-columns")
def dataset_label_columns(
    project_id: str,
    dataset_id: str,
    columns: Annotated[list[str] | None, typer.Argument(help="Up to 3 columns; none: show the current ones.")] = None,
    reset: Annotated[bool, typer.Option("--reset", help="Back to the default: key + first two text columns.")] = False,
    as_user: AsUser = None,
) -> None:
    """Show or set the identifying columns diffs show beside each row's key (setting: admins)."""
    from core import diff

    if reset and columns:
        raise typer.BadParameter("give COLUMNS or --reset, not both", param_hint="--reset")
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    if columns or reset:
        chosen = diff.set_label_columns(catalog, project_id, dataset_id, columns or None, actor=actor)
    else:
        chosen = diff.label_columns(catalog, project_id, dataset_id, actor=actor)
    emit(
        {"project": project_id, "dataset": dataset_id, "label_columns": chosen},
        f"{project_id}/{dataset_id}: identifying columns {', '.join(chosen) or '(none)'}",
    )


def _parse_bool(value: str, option: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise typer.BadParameter(f"must be true or false, got {value!r}", param_hint=option)
    return lowered == "true"


def _session_on(catalog: Catalog, session_id: str, project_id: str, dataset_id: str, actor: auth.User) -> None:
    """Refuse a session that belongs to another dataset than the one named."""
    info = sessions.get_session(catalog, session_id, actor=actor)
    if (info.project_id, info.dataset_id) != (project_id, dataset_id):
        raise InvalidInput(
            f"session {session_id} belongs to {info.project_id}/{info.dataset_id}, not {project_id}/{dataset_id}"
        )


def _parse_filters(specs: list[str], op: str) -> list[RowFilter]:
    filters = []
    for spec in specs:
        column, sep, value = spec.partition("=")
        if not sep or not column:
            raise typer.BadParameter(
                f"{spec!r} must look like COLUMN=VALUE", param_hint=f"--{'filter' if op == 'eq' else 'contains'}"
            )
        filters.append(RowFilter(column=column, value=value, op=op))  # type: ignore[arg-type]
    return filters


@dataset_app.command("rows")
def dataset_rows(
    project_id: str,
    dataset_id: str,
    version: Annotated[int | None, typer.Option("--version", help="Read as of this version.")] = None,
    filter_: Annotated[list[str] | None, typer.Option("--filter", help="COLUMN=VALUE (exact), repeatable.")] = None,
    contains: Annotated[
        list[str] | None, typer.Option("--contains", help="COLUMN=TEXT (substring), repeatable.")
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            help="COLUMN OP VALUE, repeatable, ANDed; OP is = != < <= > >=, between A and B, contains, "
            "starts with, is empty, is not empty, in (A,B,...).",
        ),
    ] = None,
    order_by: Annotated[str | None, typer.Option("--order-by", help="Sort the whole table by this column.")] = None,
    desc: Annotated[bool, typer.Option("--desc", help="Sort descending.")] = False,
    limit: Annotated[int, typer.Option("--limit", help="Rows per page.")] = 50,
    offset: Annotated[int, typer.Option("--offset", help="Rows to skip.")] = 0,
    session_id: Annotated[str | None, typer.Option("--session", help="Apply this live-edit session's overlay.")] = None,
    as_user: AsUser = None,
) -> None:
    """Read a page of rows through DuckDB (optionally with a session's edits applied).

    Rows are in the dataset's stable order (its key, else the order they were added)
    unless --order-by sorts the whole table.
    """
    catalog = _catalog()
    filters = _parse_filters(filter_ or [], "eq") + _parse_filters(contains or [], "contains")
    conditions = [parse_where(text) for text in where or []]
    if session_id is not None:
        if version is not None:
            raise typer.BadParameter("--session shows pending edits over the latest version; drop --version")
        actor = _actor(catalog, as_user)
        _session_on(catalog, session_id, project_id, dataset_id, actor)
        page = sessions.overlay_page(
            catalog,
            session_id,
            actor=actor,
            filters=filters,
            conditions=conditions,
            order_by=order_by,
            descending=desc,
            limit=limit,
            offset=offset,
        )
        emit(documents.rows_doc(page), page.rows.to_string(index=False))
        return
    page = datasets.dataset_rows(
        catalog,
        project_id,
        dataset_id,
        actor=_actor(catalog, as_user),
        version=version,
        filters=filters,
        conditions=conditions,
        order_by=order_by,
        descending=desc,
        limit=limit,
        offset=offset,
    )
    doc = documents.rows_doc(page)
    human = page.rows.to_string(index=False) + f"\n({len(page.rows)} of {page.total} rows)"
    emit(doc, human)


# ---------------------------------------------------------------- live edits


_EDIT_HELP = """Save cell edits, added rows and deleted rows to a live-edit session.

Edit options, repeatable and applied in the order given:
--set ROW_ID COLUMN VALUE, --delete-row ROW_ID, --add-row JSON_OBJECT.
"""


def _parse_edit_args(args: list[str]) -> list[sessions.EditOp]:
    """Edit options in command-line order (Typer has no repeatable 3-value options)."""
    ops: list[sessions.EditOp] = []
    i = 0
    while i < len(args):
        flag = args[i]
        if flag == "--set":
            if len(args) - i < 4:
                raise typer.BadParameter("--set needs ROW_ID COLUMN VALUE", param_hint="--set")
            ops.append(sessions.SetCell(args[i + 1], args[i + 2], args[i + 3]))
            i += 4
        elif flag in ("--delete-row", "--add-row"):
            if i + 1 >= len(args):
                raise typer.BadParameter(f"{flag} needs a value", param_hint=flag)
            value = args[i + 1]
            if flag == "--delete-row":
                ops.append(sessions.DeleteRow(value))
            else:
                try:  # numbers keep their text; NaN and lone surrogates are refused, naming the place
                    row = load_json(value, field="--add-row")
                except json.JSONDecodeError:
                    row = None
                if not isinstance(row, dict):
                    raise typer.BadParameter(f"must be a JSON object, got {value!r}", param_hint="--add-row")
                ops.append(sessions.AddRow(row))
            i += 2
        else:
            raise typer.BadParameter(f"unexpected argument {flag!r}", param_hint="edit options")
    return ops


@app.command("edit", help=_EDIT_HELP, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def edit(
    ctx: typer.Context,
    project_id: str,
    dataset_id: str,
    as_user: Annotated[str, typer.Option("--as", help="The editing user.")],
    session_id: Annotated[
        str | None, typer.Option("--session", help="Session id (default: the user's open one).")
    ] = None,
) -> None:
    ops = _parse_edit_args(list(ctx.args))
    if not ops:  # refused before a session is opened, so a refused edit leaves nothing behind
        raise InvalidInput(
            "no edits given; add --set ROW_ID COLUMN VALUE, --delete-row ROW_ID or --add-row JSON_OBJECT",
            field="edits",
        )
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    if session_id is None:  # a session is started only for values that fit: a refused edit leaves none
        info, count = sessions.save_edits(catalog, project_id, dataset_id, ops, actor=actor)
        session_id = info.session_id
    else:
        _session_on(catalog, session_id, project_id, dataset_id, actor)
        count = sessions.apply_edits(catalog, session_id, ops, actor=actor)
    emit(documents.edit_doc(session_id, count), f"session {session_id}: {count} pending edit(s)")


@session_app.command("show")
def session_show(session_id: str, as_user: AsUser = None) -> None:
    """Show a session and its pending edits."""
    catalog = _catalog()
    info = sessions.get_session(catalog, session_id, actor=_actor(catalog, as_user))
    edits = sessions.effective_edits(datasets.layout_for(info.project_id, info.dataset_id), session_id)
    doc = documents.session_doc(info, edits)
    lines = [
        f"session {info.session_id} of {info.owner} on {info.project_id}/{info.dataset_id} (base v{info.base_version})"
    ]
    lines += [
        f"  {e.change:<7} {e.row_id:<38} {e.column or '(row)':<20} {e.old_value!s} -> {e.new_value!s}" for e in edits
    ]
    emit(doc, "\n".join(lines))


# ---------------------------------------------------------------- change requests


@cr_app.command("submit")
def cr_submit(
    project_id: str,
    dataset_id: str,
    as_user: Annotated[str, typer.Option("--as", help="The submitting user (the session's owner).")],
    session_id: Annotated[
        str | None, typer.Option("--session", help="Session id (default: the user's open one).")
    ] = None,
    title: Annotated[str | None, typer.Option(help="Title of the change request.")] = None,
    description: Annotated[str, typer.Option(help="Longer description.")] = "",
) -> None:
    """Submit a session's edits as a change request (staged, then validated by GX)."""
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    if session_id is None:
        found = sessions.current_session(catalog, project_id, dataset_id, actor=actor)
        if found is None:
            raise InvalidInput(
                f"{as_user} has no open session on {project_id}/{dataset_id}; make edits with `oreo edit` first",
                field="session",
            )
        session_id = found.session_id
    else:
        _session_on(catalog, session_id, project_id, dataset_id, actor)
    cr = change_requests.submit_change_request(catalog, session_id, actor=actor, title=title, description=description)
    run = change_requests.validation_for(catalog, cr.id, actor=actor)
    doc = documents.submit_doc(cr, run)
    emit(
        doc,
        f"change request {cr.id} submitted ({cr.cells} cell(s), {cr.rows} row(s)); validation {cr.validation_status}",
    )


@app.command("append")
def append_cmd(
    project_id: str,
    dataset_id: str,
    file: Annotated[Path, typer.Option("--file", help="CSV, Parquet or XLSX file.")],
    as_user: Annotated[str, typer.Option("--as", help="The submitting user (an editor).")],
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="append: every row is new; upsert: rows matching --key are updated; replace: the file becomes "
            "the table's whole content (rows matching the dataset's key or --key updated, new ones added, the "
            "rest deleted; without a key every row is replaced).",
        ),
    ] = "append",
    key: Annotated[
        str | None, typer.Option("--key", help="Column to match rows by (upsert, replace; default: the dataset's key).")
    ] = None,
    sheet: Annotated[str | None, typer.Option("--sheet", help="XLSX sheet to read.")] = None,
    title: Annotated[str | None, typer.Option(help="Title of the change request.")] = None,
    no_review: Annotated[
        bool,
        typer.Option(
            "--no-review",
            help="Project admins only: validate and merge at once, without review (audited); a critical "
            "data check failure refuses the file.",
        ),
    ] = False,
) -> None:
    """Import a file into a dataset as a change request (staged, then validated by GX)."""
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    cr, plan = imports.import_file(
        catalog,
        project_id,
        dataset_id,
        file,
        actor=actor,
        mode=mode,
        key=key,
        sheet=sheet,
        title=title,
        review=not no_review,
    )
    run = change_requests.validation_for(catalog, cr.id, actor=actor)
    summary = imports.import_summary(catalog, cr.id, actor=actor)
    doc = documents.import_doc(cr, run, plan, summary, reviewed=not no_review)
    changes = "; ".join(c.describe() for c in plan.schema_changes) or "none"
    rows = f"{doc['added']:,} added, {doc['updated']:,} updated, {doc['deleted']:,} deleted"
    if no_review:
        text = (
            f"committed {plan.upload.file_name} without review as version {cr.merged_version} ({rows}; "
            f"change request {cr.id}, audited); schema changes: {changes}; validation {cr.validation_status}"
        )
    else:
        text = (
            f"change request {cr.id} submitted ({cr.rows:,} row(s), {cr.cells:,} cell(s): {rows}); "
            f"schema changes: {changes}; validation {cr.validation_status}"
        )
    emit(doc, text)


@cr_app.command("list")
def cr_list(
    project_id: Annotated[str | None, typer.Argument()] = None,
    dataset_id: Annotated[str | None, typer.Argument()] = None,
    state_filter: Annotated[
        change_requests.CRState | None, typer.Option("--state", help="Only requests in this state.")
    ] = None,
    as_user: AsUser = None,
) -> None:
    """List change requests, newest first."""
    if (project_id is None) != (dataset_id is None):
        raise typer.BadParameter("give both PROJECT_ID and DATASET_ID, or neither", param_hint="arguments")
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    if project_id is not None and dataset_id is not None:
        datasets.get_dataset(catalog, project_id, dataset_id, actor=actor)  # names an unknown or unseen dataset
    found = change_requests.list_change_requests(
        catalog, actor=actor, project_id=project_id, dataset_id=dataset_id, state=state_filter
    )
    lines = [
        f"{c.id}  {c.state.value:<9} {c.project_id}/{c.dataset_id}  {c.author:<12} {c.cells:>6} cell(s)  {c.title}"
        for c in found
    ] or ["no change requests"]
    emit({"change_requests": [_cr_doc(c) for c in found]}, "\n".join(lines))


@cr_app.command("show")
def cr_show(
    cr_id: str,
    limit: Annotated[
        int | None, typer.Option(help="At most this many changes, and rows with --rows (default: all).")
    ] = None,
    offset: Annotated[int, typer.Option(help="Skip this many changes (and rows with --rows).")] = 0,
    rows: rows_cli.RowsOption = False,
    kind: rows_cli.KindOption = None,
    column: rows_cli.ColumnOption = None,
    export: rows_cli.ExportOption = None,
    as_user: AsUser = None,
) -> None:
    """Show a change request: its cell-level changes (and with --rows, row by row), validation and conflicts."""
    rows_cli.check_rows_options(rows, kind, column, export)
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    cr = change_requests.get_change_request(catalog, cr_id, actor=actor)
    changes: list[Any] = []
    if limit is not None:
        page = change_requests.diff_change_request(catalog, cr_id, actor=actor, limit=limit, offset=offset)
        changes, total = page.changes, page.total
    else:
        while True:
            page = change_requests.diff_change_request(
                catalog, cr_id, actor=actor, limit=10_000, offset=offset + len(changes)
            )
            changes += page.changes
            total = page.total
            if not page.changes or offset + len(changes) >= total:
                break
    found = conflicts.find_conflicts(catalog, cr_id, actor=actor)
    run = change_requests.validation_for(catalog, cr_id, actor=actor)
    thread = change_requests.comments(catalog, cr_id, actor=actor)
    revisions = change_requests.revisions(catalog, cr_id, actor=actor)
    states = change_requests.state_history(catalog, cr_id, actor=actor)
    summary = imports.import_summary(catalog, cr_id, actor=actor)  # an import: its mode and row counts
    doc = documents.cr_show_doc(
        cr, changes=changes, total=total, run=run, conflicts=found, thread=thread, revisions=revisions,
        states=states, imported=summary,
    )  # fmt: skip
    lines = [
        f"{cr.id} [{cr.state.value}] {cr.title!r} by {cr.author} on {cr.project_id}/{cr.dataset_id} "
        f"(base v{cr.base_version}, revision {cr.revision}); validation {cr.validation_status}; "
        f"{len(found)} conflict(s)"
    ]
    if cr.description:
        lines.append(f"  description: {cr.description}")
    if summary:
        lines.append(
            f"  import: {summary.file_name} ({summary.mode}): {summary.added:,} added, {summary.updated:,} updated, "
            f"{summary.deleted:,} deleted" + ("" if summary.reviewed else "; committed without review")
        )
    if cr.stages:
        lines.append("  stages: " + ", ".join(f"{t.action} {t.stage} {t.seconds:.2f}s" for t in cr.stages))
    lines += [f"  {c.change:<7} {c.row_id:<38} {c.column or '(row)':<20} {c.old!s} -> {c.new!s}" for c in changes]
    lines += _conflict_lines(cr, found)
    lines += _thread_lines(thread, revisions, states)
    if rows:
        page = rows_cli.all_rows(
            lambda size, skip: change_requests.row_diff_change_request(
                catalog, cr_id, actor=actor, kinds=kind, columns=column, limit=size, offset=skip
            ),
            limit,
            offset,
        )
        exported = None
        if export is not None:
            written = change_requests.export_change_request_diff(
                catalog, cr_id, export, actor=actor, fmt=rows_cli.export_format(export), kinds=kind, columns=column
            )
            exported = (export, written)
        doc.update(rows_cli.rows_doc(page, exported))
        lines += rows_cli.rows_lines(page, exported)
    emit(doc, "\n".join(_escape_controls(line) for line in lines))


def _escape_controls(text: str) -> str:
    """``text`` with control characters (CR, LF, ESC, ...) written as escapes, as the title's repr shows them.

    A comment or value could otherwise break a line or send terminal escape sequences.
    """
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


RevisionOption = Annotated[
    int | None,
    typer.Option(
        "--revision",
        min=1,
        help="The revision you reviewed (cr show); refused if the request has moved on. Default: the current one.",
    ),
]


@cr_app.command("approve")
def cr_approve(
    cr_id: str,
    as_user: Annotated[str, typer.Option("--as", help="The approving user (not the author).")],
    comment: Annotated[str | None, typer.Option(help="Closing comment.")] = None,
    revision: RevisionOption = None,
) -> None:
    """Merge a change request into main (one Spark Delta MERGE)."""
    from core import merge

    catalog = _catalog()
    actor = _actor(catalog, as_user)
    cr = merge.approve_change_request(catalog, cr_id, actor=actor, comment=comment, expected_revision=revision)
    emit(
        documents.approve_doc(cr),
        f"change request {cr.id} (revision {cr.revision}) merged as version {cr.merged_version}",
    )


@cr_app.command("reject")
def cr_reject(
    cr_id: str,
    as_user: Annotated[str, typer.Option("--as", help="The rejecting approver.")],
    reason: Annotated[str, typer.Option(help="Why (shown to the author).")],
    revision: RevisionOption = None,
) -> None:
    """Reject a change request; main is untouched."""
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    cr = change_requests.reject_change_request(catalog, cr_id, actor=actor, reason=reason, expected_revision=revision)
    emit(documents.state_doc(cr), f"change request {cr.id} (revision {cr.revision}) rejected")


@cr_app.command("withdraw")
def cr_withdraw(cr_id: str, as_user: Annotated[str, typer.Option("--as", help="The author.")]) -> None:
    """Withdraw your own open change request; main is untouched."""
    catalog = _catalog()
    cr = change_requests.withdraw_change_request(catalog, cr_id, actor=_actor(catalog, as_user))
    emit(documents.state_doc(cr), f"change request {cr.id} withdrawn")


@cr_app.command("resubmit")
def cr_resubmit(cr_id: str, as_user: Annotated[str, typer.Option("--as", help="The author.")]) -> None:
    """Re-submit your open request against the current version (the old one is withdrawn)."""
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    cr = change_requests.resubmit_change_request(catalog, cr_id, actor=actor)
    run = change_requests.validation_for(catalog, cr.id, actor=actor)
    doc = {"cr_id": cr.id, "state": cr.state.value, "validation": _validation_doc(run), "replaces": cr_id}
    emit(
        doc,
        f"change request {cr_id} re-submitted as {cr.id} (base v{cr.base_version}); validation {cr.validation_status}",
    )


def _conflict_lines(cr: change_requests.ChangeRequest, found: list[conflicts.Conflict]) -> list[str]:
    """Each conflict with its base, theirs and mine, and the command its author settles it with."""
    if not found:
        return []
    lines = [f"conflicts (the author {cr.author} keeps or drops each):"]
    for c in found:
        by = f" by {c.committed_by}" if c.committed_by else ""
        lines += [
            f"  {c.row_id} · {c.column or '(whole row)'} · v{c.version}{by} · {c.reason}",
            f"    base:   {_shown(c.base)}",
            f"    theirs: {_shown(c.theirs)}",
            f"    mine:   {_shown(c.mine)}",
            f"    resolve: {c.command(cr.id)}",
        ]
    return lines


def _shown(value: str | None) -> str:
    return conflicts.EMPTY if value is None else value


def _thread_lines(
    thread: list[change_requests.Comment],
    revisions: list[change_requests.Revision],
    states: list[change_requests.StateChange],
) -> list[str]:
    lines = ["thread:" if thread else "thread: no comments"]
    for c in thread:
        cell = f" on row {c.row_id} · {c.column}" if c.row_id is not None else ""
        lines.append(f"  {c.ts:%Y-%m-%d %H:%M:%S} (revision {c.revision}) {c.author}{cell}: {c.body}")
    lines.append("revisions:")
    lines += [
        f"  {r.number}  {r.staged_at:%Y-%m-%d %H:%M:%S}  base v{r.base_version}  {r.rows} row(s), {r.cells} cell(s)  "
        f"validation {r.validation_status} ({r.validation_run_id})"
        for r in revisions
    ]
    lines.append("states:")
    lines += [
        f"  {h.at:%Y-%m-%d %H:%M:%S} {h.state:<17} by {h.actor}"
        + (f" (revision {h.revision})" if h.revision else "")
        + (f": {h.note}" if h.note else "")
        for h in states
    ]
    return lines


@cr_app.command("resolve")
def cr_resolve(
    cr_id: str,
    row: Annotated[str, typer.Argument(help="The conflicting row: its ROW_ID, as `oreo edit --set` names it.")],
    column: Annotated[str, typer.Argument(help="The conflicting column, or * for a whole-row conflict.")],
    as_user: Annotated[str, typer.Option("--as", help="The request's author.")],
    keep_mine: Annotated[
        bool, typer.Option("--keep-mine", help="Your value (or row change) stands over the newer one.")
    ] = False,
    take_theirs: Annotated[
        bool, typer.Option("--take-theirs", help="The newer value stays; the cell (or row) leaves your request.")
    ] = False,
) -> None:
    """Settle one conflict of your open request; the result is its next revision, reviewed again."""
    if keep_mine == take_theirs:
        raise typer.BadParameter("give exactly one of --keep-mine and --take-theirs", param_hint="--keep-mine")
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    choice: conflicts.Choice = "mine" if keep_mine else "theirs"
    cr = conflicts.resolve_conflict(catalog, cr_id, row, column, choice, actor=actor)
    left = conflicts.find_conflicts(catalog, cr.id, actor=actor)
    doc = {**documents.revise_doc(cr, change_requests.validation_for(catalog, cr.id, actor=actor)),
           "conflicts": [documents.conflict_doc(cr, c) for c in left]}  # fmt: skip
    kept = "kept your change" if keep_mine else "took the newer value"
    emit(
        doc,
        f"change request {cr.id}: {kept} on {row}.{column}; revision {cr.revision} (base v{cr.base_version}), "
        f"{len(left)} conflict(s) left; validation {cr.validation_status}",
    )


@cr_app.command("comment")
def cr_comment(
    cr_id: str,
    as_user: Annotated[str, typer.Option("--as", help="The commenting user (any member of the project).")],
    text: Annotated[str, typer.Option("--text", help="The comment.")],
    row: Annotated[str | None, typer.Option("--row", help="The changed row (its ROW_ID) the comment is on.")] = None,
    column: Annotated[str | None, typer.Option("--column", help="The column of that row.")] = None,
) -> None:
    """Comment on a change request, or on one cell of its diff (--row and --column)."""
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    comment = change_requests.add_comment(catalog, cr_id, text, actor=actor, row_id=row, column=column)
    where = f" on row {comment.row_id} · {comment.column}" if comment.row_id is not None else ""
    emit(documents.comment_doc(cr_id, comment), f"commented on change request {cr_id}{where}")


@cr_app.command("request-changes")
def cr_request_changes(
    cr_id: str,
    as_user: Annotated[str, typer.Option("--as", help="The approver asking (not the author).")],
    reason: Annotated[str, typer.Option("--reason", help="What to change (shown to the author).")],
    revision: RevisionOption = None,
) -> None:
    """Send an open change request back to its author with a reason; they revise it."""
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    cr = change_requests.request_changes(catalog, cr_id, reason, actor=actor, expected_revision=revision)
    emit(documents.changes_requested_doc(cr), f"changes requested on change request {cr.id} (revision {cr.revision})")


@cr_app.command("revise")
def cr_revise(cr_id: str, as_user: Annotated[str, typer.Option("--as", help="The author.")]) -> None:
    """Re-stage a change request from its edited session as its next revision (after changes were requested)."""
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    cr = change_requests.revise_change_request(catalog, cr_id, actor=actor)
    run = change_requests.validation_for(catalog, cr.id, actor=actor)
    doc = documents.revise_doc(cr, run)
    emit(
        doc,
        f"change request {cr.id} revised: revision {cr.revision} ({cr.cells} cell(s), {cr.rows} row(s)); "
        f"validation {cr.validation_status}",
    )


# ---------------------------------------------------------------- rules


@rules_app.command("show")
def rules_show(project_id: str, dataset_id: str, as_user: AsUser = None) -> None:
    """Print the dataset's ExpectationSuite (GX JSON)."""
    catalog = _catalog()
    suite = datasets.dataset_rules(catalog, project_id, dataset_id, actor=_actor(catalog, as_user))
    emit(suite, dumps(suite, indent=2))


@rules_app.command("set")
def rules_set(
    project_id: str,
    dataset_id: str,
    file: Annotated[Path, typer.Option("--file", help="Suite JSON in GX's serialized form.")],
    as_user: AsUser = None,
) -> None:
    """Replace the dataset's ExpectationSuite with the one in FILE."""
    if not file.is_file():
        raise InvalidInput(f"no such file: {file}", field="file")
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{file} is not valid JSON: {exc}", field="file") from exc
    catalog = _catalog()
    suite = datasets.set_dataset_rules(catalog, project_id, dataset_id, document, actor=_actor(catalog, as_user))
    emit(suite, f"rules of {project_id}/{dataset_id}: {len(suite.get('expectations', []))} expectation(s)")


def _rules_text(suite: dict[str, Any]) -> str:
    lines = []
    for number, item in enumerate(suite.get("expectations", []), start=1):
        marks = [item.get("severity", "critical")]
        marks += [rules.source(item)] if rules.source(item) != "set" else []
        marks += ["off"] if rules.is_disabled(item) else []
        lines.append(f"{number:>3}. {rules.describe(item)} ({', '.join(marks)})")
    return "\n".join(lines) or "no rules"


@rules_app.command("infer")
def rules_infer(
    project_id: str,
    dataset_id: str,
    apply: Annotated[
        bool, typer.Option("--apply", help="Accept the whole proposal (admins), as `rules accept --all`.")
    ] = False,
    as_user: AsUser = None,
) -> None:
    """The suite as it would be with the rules inferred from the data's profile accepted.

    Rules a person wrote or edited are kept as they are. `rules propose` shows what would change,
    rule by rule; `rules accept` applies some or all of it.
    """
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    if apply:
        suite = datasets.infer_dataset_rules(catalog, project_id, dataset_id, actor=actor)
    else:
        suite = datasets.propose_rules(catalog, project_id, dataset_id, actor=actor)
    note = "" if apply else "\n(proposal only: `rules propose` shows what would change, `rules accept --all` stores it)"
    emit(suite, _rules_text(suite) + note)


def _proposal_text(proposal: datasets.RuleProposal) -> str:
    width = max((len(line.name) for line in proposal.lines), default=0)
    lines = [f"  {line.status:<8} {line.name:<{width}}  {line.change}" for line in proposal.lines]
    counts = ", ".join(f"{n} {status}" for status, n in proposal.counts().items() if n)
    return "\n".join(
        [
            f"rules proposed from {proposal.project_id}/{proposal.dataset_id} at version {proposal.version} "
            f"({counts or 'nothing'}); nothing is stored:",
            *lines,
            "accept with: oreo rules accept PROJECT DATASET --rule NAME ... | --all",
        ]
    )


@rules_app.command("propose")
def rules_propose(project_id: str, dataset_id: str, as_user: AsUser = None) -> None:
    """Rules inferred from the data, beside the current ones: new, changed, same, kept or removed. Stores nothing.

    A rule a person wrote or edited is kept ("kept: edited by USER"): no proposal changes it.
    """
    catalog = _catalog()
    proposal = datasets.propose_dataset_rules(catalog, project_id, dataset_id, actor=_actor(catalog, as_user))
    emit(documents.rule_proposal_doc(proposal), _proposal_text(proposal))


@rules_app.command("accept")
def rules_accept(
    project_id: str,
    dataset_id: str,
    rule: Annotated[
        list[str] | None, typer.Option("--rule", help="A proposed rule's name, as `rules propose` shows it.")
    ] = None,
    accept_all: Annotated[bool, typer.Option("--all", help="Accept every proposed change.")] = False,
    as_user: AsUser = None,
) -> None:
    """Accept proposed rules (admins): those named with --rule, or --all. A person's rules are kept.

    The audit log records who accepted which rules (`rules_accepted`).
    """
    if accept_all == bool(rule):
        raise InvalidInput("give --rule NAME (one or more) or --all, not both", field="rule")
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    result = datasets.accept_proposed_rules(catalog, project_id, dataset_id, actor=actor, names=rule or None)
    done = [f"  {line.status:<8} {line.name}  {line.change}" for line in result.accepted]
    kept = [f"  kept     {line.name}  {line.change}" for line in result.kept]
    head = f"accepted {len(result.accepted)} proposed rule(s)"
    if not done:
        head = "nothing to accept: the proposal changes no rule"
    emit(documents.rules_accepted_doc(result), "\n".join([head, *done, *kept]))


@rules_app.command("change")
def rules_change(
    project_id: str,
    dataset_id: str,
    number: Annotated[int, typer.Argument(help="The rule's number, as `rules list` shows it.")],
    severity: Annotated[str | None, typer.Option("--severity", help="critical, warning or info.")] = None,
    min_value: Annotated[float | None, typer.Option("--min", help="New lower bound of a range rule.")] = None,
    max_value: Annotated[float | None, typer.Option("--max", help="New upper bound of a range rule.")] = None,
    enabled: Annotated[bool | None, typer.Option("--enable/--disable", help="Turn the rule on or off.")] = None,
    as_user: AsUser = None,
) -> None:
    """Change one rule's severity, bounds, or on/off state (admins); the rule is then the steward's."""
    catalog = _catalog()
    change = rules.RuleChange(severity=severity, min_value=min_value, max_value=max_value, enabled=enabled)
    if change == rules.RuleChange():
        raise InvalidInput("nothing to change: give --severity, --min, --max, --enable or --disable", field="rule")
    actor = _actor(catalog, as_user)
    suite = datasets.change_dataset_rule(catalog, project_id, dataset_id, number, change, actor=actor)
    emit(suite, _rules_text(suite))


@rules_app.command("list")
def rules_list(project_id: str, dataset_id: str, as_user: AsUser = None) -> None:
    """The rules in plain words, numbered, with how often each failed in the last 20 validation runs."""
    catalog = _catalog()
    actor = _actor(catalog, as_user)
    suite = datasets.dataset_rules(catalog, project_id, dataset_id, actor=actor)
    failed = datasets.recent_rule_failures(catalog, project_id, dataset_id, actor=actor)
    listed = [
        {
            "number": number,
            "description": rules.describe(item),
            "type": item.get("type"),
            "column": (item.get("kwargs") or {}).get("column"),
            "severity": item.get("severity", "critical"),
            "inferred": rules.is_inferred(item),
            "enabled": not rules.is_disabled(item),
            "edited_by": rules.edited_by(item),
            "failed_runs": failed.of(item),
        }
        for number, item in enumerate(suite.get("expectations", []), start=1)
    ]
    emit(
        {"rules": listed, "runs_considered": failed.runs},
        _rules_text(suite) + f"\n(failures counted over the last {failed.runs} run(s))",
    )


# ---------------------------------------------------------------- history


@app.command("history")
def history_list(
    project_id: str,
    dataset_id: str,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many versions (default: all).")] = None,
    offset: Annotated[int, typer.Option("--offset", help="Skip this many of the newest versions.")] = 0,
    hide_maintenance: Annotated[
        bool, typer.Option("--hide-maintenance", help="Leave out OPTIMIZE, VACUUM and table property changes.")
    ] = False,
    as_user: AsUser = None,
) -> None:
    """List the versions of a dataset's main table, newest first."""
    from core import history

    catalog = _catalog()
    page = history.table_history(
        catalog, project_id, dataset_id, actor=_actor(catalog, as_user), limit=limit, offset=offset,
        hide_maintenance=hide_maintenance,
    )  # fmt: skip
    lines = [
        f"v{v.version:<5} {v.timestamp:%Y-%m-%d %H:%M:%S}  {v.operation:<24} {v.kind:<15} {v.actor or '':<12} "
        f"{v.cr_id or '':<20} {'restorable' if v.restorable else v.not_restorable_reason}"
        + (f"  restored to v{v.restored_to}: {v.reason}" if v.kind == "restore" else "")
        for v in page.versions
    ]
    emit(documents.history_doc(page), "\n".join(lines))


@app.command("diff")
def history_diff(
    project_id: str,
    dataset_id: str,
    from_version: Annotated[int, typer.Option("--from", help="The older version.")],
    to_version: Annotated[int, typer.Option("--to", help="The newer version.")],
    limit: Annotated[int, typer.Option("--limit", help="At most this many changes (and rows with --rows).")] = 100,
    offset: Annotated[int, typer.Option("--offset", help="Skip this many changes (and rows with --rows).")] = 0,
    rows: rows_cli.RowsOption = False,
    kind: rows_cli.KindOption = None,
    column: rows_cli.ColumnOption = None,
    export: rows_cli.ExportOption = None,
    as_user: AsUser = None,
) -> None:
    """Show the cell-level changes between two versions of a dataset (and with --rows, row by row)."""
    from core import history

    rows_cli.check_rows_options(rows, kind, column, export)
    catalog = _catalog()
    result = history.diff_versions(
        catalog,
        project_id,
        dataset_id,
        from_version,
        to_version,
        actor=_actor(catalog, as_user),
        limit=limit,
        offset=offset,
    )
    doc = documents.version_diff_doc(result)
    lines = [
        f"v{from_version} -> v{to_version}: {result.rows_inserted} inserted, {result.rows_updated} updated, "
        f"{result.rows_deleted} deleted row(s); {result.total} change(s)"
    ]
    lines += [
        f"  {c.change:<7} {c.row_id:<38} {c.column or '(row)':<20} {c.old!s} -> {c.new!s}" for c in result.changes
    ]
    if rows:
        actor = _actor(catalog, as_user)
        versions = (project_id, dataset_id, from_version, to_version)
        page = history.row_diff_versions(
            catalog, *versions, actor=actor, kinds=kind, columns=column, limit=limit, offset=offset
        )
        exported = None
        if export is not None:
            fmt = rows_cli.export_format(export)
            written = history.export_version_diff(
                catalog, *versions, export, actor=actor, fmt=fmt, kinds=kind, columns=column
            )
            exported = (export, written)
        doc.update(rows_cli.rows_doc(page, exported))
        lines += rows_cli.rows_lines(page, exported)
    emit(doc, "\n".join(_escape_controls(line) for line in lines))


def _escape_controls(text: str) -> str:
    """``text`` with control characters (CR, LF, ESC, ...) written as escapes, as the title's repr shows them.

    A comment or value could otherwise break a line or send terminal escape sequences.
    """
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


@app.command("restore")
def history_restore(
    project_id: str,
    dataset_id: str,
    version: Annotated[int, typer.Option("--version", help="The version to restore.")],
    as_user: Annotated[str, typer.Option("--as", help="The restoring admin.")],
    reason: Annotated[str | None, typer.Option("--reason", help="Why (kept in the commit and the audit log).")] = None,
) -> None:
    """Restore a dataset's main table to an earlier version (one new commit; admins only)."""
    from core import history

    catalog = _catalog()
    result = history.restore_version(
        catalog, project_id, dataset_id, version, actor=_actor(catalog, as_user), reason=reason or ""
    )
    emit(
        documents.restore_doc(result),
        f"{project_id}/{dataset_id} restored to version {result.restored_to} as version {result.version}",
    )


@app.command("export")
def history_export(
    project_id: str,
    dataset_id: str,
    out: Annotated[Path, typer.Option("--out", help="A .parquet or .csv file to write.")],
    version: Annotated[int | None, typer.Option("--version", help="Export this version (default: latest).")] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw", help="CSV: write text cells as they are (default: a leading ' before =, +, -, @, tab or CR)."
        ),
    ] = False,
    as_user: AsUser = None,
) -> None:
    """Write every column of a version (row_id included) to a Parquet or CSV file."""
    from core import history

    catalog = _catalog()
    result = history.export_version(
        catalog, project_id, dataset_id, out, actor=_actor(catalog, as_user), version=version, raw=raw
    )
    emit(
        {"path": result.path, "version": result.version, "rows": result.rows, "format": result.format},
        f"exported version {result.version} of {project_id}/{dataset_id}: {result.rows:,} rows to {result.path}",
    )


# ---------------------------------------------------------------- doctor


class _Unhealthy(typer.TyperException):
    """Ends ``oreo doctor`` with exit code 1 after its report (a ``typer.Exit`` would end it with 0)."""

    exit_code = 1

    def show(self) -> None:
        """Nothing to add: the report, with each failed check, is already on stdout."""


@app.command("doctor")
def doctor_cmd(project_id: str, dataset_id: str, as_user: AsUser = None) -> None:
    """Check a dataset's table (log, files, checkpoints) against the catalog; exit 1 if anything is wrong."""
    from core import doctor

    catalog = _catalog()
    diagnosis = doctor.diagnose(catalog, project_id, dataset_id, actor=_actor(catalog, as_user))
    lines = [f"{'ok  ' if c.ok else 'FAIL'}  {c.name:<16} {c.detail}" for c in diagnosis.checks]
    verdict = "healthy" if diagnosis.ok else "DAMAGED: see the failed checks above"
    emit(diagnosis.to_json(), "\n".join([*lines, f"{project_id}/{dataset_id}: {verdict}"]))
    if not diagnosis.ok:
        raise _Unhealthy("the table has problems")


# ---------------------------------------------------------------- maintenance


def _progress_to_stderr(message: str, fraction: float) -> None:
    """Progress lines go to stderr, so ``--json`` output stays one document."""
    if not state.json:
        sys.stderr.write(f"[{fraction:4.0%}] {message}\n")


@app.command("maintain")
def maintain_cmd(
    project_id: str,
    dataset_id: str,
    optimize: Annotated[bool, typer.Option("--optimize", help="Compact small files (OPTIMIZE).")] = False,
    zorder: Annotated[
        str | None, typer.Option("--zorder", help="COL[,COL...]: OPTIMIZE with ZORDER BY these columns.")
    ] = None,
    vacuum: Annotated[bool, typer.Option("--vacuum", help="Delete files no version in the retention uses.")] = False,
    retain_hours: Annotated[
        float | None, typer.Option("--retain-hours", help="VACUUM retention (default: the restore window).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Allow a retention shorter than the restore window.")] = False,
    checkpoint: Annotated[bool, typer.Option("--checkpoint", help="Write a Delta log checkpoint.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --vacuum alone: list the files VACUUM would delete, delete nothing.")
    ] = False,
    as_user: AsUser = None,
) -> None:
    """Run OPTIMIZE, VACUUM and/or a checkpoint on a dataset's main table; prints the run's report."""
    from core import maintenance

    if dry_run:
        if not vacuum or optimize or zorder is not None or checkpoint:
            raise InvalidInput("--dry-run goes with --vacuum alone", field="dry_run")
        catalog = _catalog()
        plan = maintenance.vacuum_dry_run(
            catalog, project_id, dataset_id, actor=_actor(catalog, as_user), retain_hours=retain_hours
        )
        lines = [f"  {f.path}  {f.size_bytes:,} bytes" for f in plan.files]
        risk = plan.unrestorable_versions
        lines.append(
            f"VACUUM retaining {plan.retain_hours:g} hours would delete {len(plan.files):,} file(s), "
            f"{plan.size_bytes:,} bytes"
            + (f"; versions {risk[0]}-{risk[1]} would stop being restorable" if risk else "")
            + " (dry run: nothing deleted)"
        )
        emit(plan.to_json(), "\n".join(lines))
        return
    columns = [c.strip() for c in zorder.split(",")] if zorder is not None else None
    if not (optimize or columns or vacuum or checkpoint):
        raise InvalidInput("nothing to do: choose at least one of --optimize, --zorder, --vacuum, --checkpoint")
    catalog = _catalog()
    report = maintenance.maintain(
        catalog,
        project_id,
        dataset_id,
        actor=_actor(catalog, as_user),
        optimize=optimize,
        zorder=columns,
        vacuum=vacuum,
        retain_hours=retain_hours,
        force=force,
        checkpoint=checkpoint,
        progress=_progress_to_stderr,
    )
    steps = report["steps"]
    lines = [f"maintenance {report['run_id']} of {project_id}/{dataset_id}"]
    if steps["retention"]["changed"]:
        lines.append(f"  retention: set {', '.join(steps['retention']['changed'])}")
    if "optimize" in steps:
        s = steps["optimize"]
        lines.append(f"  optimize: {s['before']['files']} -> {s['after']['files']} file(s)")
    if "vacuum" in steps:
        s = steps["vacuum"]
        lines.append(f"  vacuum: {s['files_deleted']} file(s) deleted, retaining {s['retain_hours']:g} h")
    if "checkpoint" in steps:
        s = steps["checkpoint"]
        lines.append(f"  checkpoint: version {s['version']}" + ("" if s["written"] else " (already there)"))
    lines.append("  nothing to do" if report["nothing_to_do"] else f"  versions created: {report['versions_created']}")
    lines.append(f"  report: {report['report']}")
    emit(report, "\n".join(lines))


@app.command("cleanup")
def cleanup_cmd(
    ttl_hours: Annotated[
        float | None, typer.Option("--ttl-hours", help="Replace the session and import TTLs for this run.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")] = False,
    as_user: AsUser = None,
) -> None:
    """Remove expired sessions, staging tables of closed change requests and orphan imports."""
    from core import maintenance

    catalog = _catalog()
    report = maintenance.cleanup(
        catalog, actor=_actor(catalog, as_user), ttl_hours=ttl_hours, dry_run=dry_run, progress=_progress_to_stderr
    )
    verb = "would remove" if dry_run else "removed"
    lines = [
        f"{verb} {len(report[key])} {label}" + (": " + ", ".join(report[key]) if report[key] else "")
        for key, label in (
            ("sessions_removed", "session(s)"),
            ("staging_removed", "staging table(s)"),
            ("imports_removed", "import(s)"),
        )
    ]
    if report["nothing_to_do"]:
        lines = ["nothing to clean up"]
    emit(report, "\n".join([*lines, f"report: {report['report']}"]))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``oreo`` console script.

    Library logging and warnings go to ``<data root>/logs/oreo.log`` and the Spark JVM's
    output to ``logs/spark.log``, so stderr holds nothing on success and one ``error:``
    line on failure; a failure's traceback is logged, and its line names the log.
    """
    try:
        log = logs.oreo_log()
    except OreoError as exc:  # a malformed setting: there is no data root to log into yet
        sys.stderr.write(f"error: {exc}\n")
        return 1
    with logs.library_logging_to_file(log):
        return _run_command(argv, log)


def _run_command(argv: list[str] | None, log: Path) -> int:
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="oreo", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        sys.stderr.write("error: aborted\n")
        return 1
    except typer.TyperException as exc:  # usage errors: unknown command, bad option...
        exc.show()
        return int(getattr(exc, "exit_code", 2) or 2)
    except OreoError as exc:
        message = str(exc)
        if isinstance(exc, EngineError) or "\n" in message:
            # Not the arguments: a --dsn may carry a password.
            _logger.error("the command failed", exc_info=exc)
            message = message.strip().splitlines()[0] if message.strip() else type(exc).__name__
            if "details in " not in message:
                message += f" (details in {log})"
        sys.stderr.write(f"error: {message}\n")
        return 1
    except Exception as exc:  # a bug or an untranslated library error: still one line, the rest logged
        _logger.error("the command failed", exc_info=exc)
        text = str(exc).strip()
        first = text.splitlines()[0] if text else ""
        sys.stderr.write(f"error: unexpected {type(exc).__name__}: {first} (details in {log})\n")
        return 1
    return 0


def run() -> None:
    """The console script: run ``main`` and leave with its exit code.

    delta-rs may abort the interpreter while it shuts down after a successful command
    ("terminate called without an active exception", delta-io/delta-rs#2184), which
    would turn a done job into exit code 134 for cron. So Spark is stopped, output is
    flushed, and the process ends right away with the command's own code.
    """
    code = main()
    try:
        engine.stop_spark()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    # ``python -m cli.main``: sub-apps import ``cli.main`` for its helpers and state; make
    # that this module, not a second copy whose ``--json`` flag was never set.
    sys.modules.setdefault("cli.main", sys.modules[__name__])
    run()
