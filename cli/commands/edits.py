"""Live edits: ``oreo edit`` saves cell edits, added and deleted rows to a session; ``oreo session`` shows one."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cli.context import AsUser, acting_user, check_session_on, command_catalog, emit
from core import datasets, sessions
from core.errors import InvalidInput
from core.values import load_json
from interface import documents

session_app = typer.Typer(no_args_is_help=True, help="Live-edit sessions.")

EDIT_HELP = """Save cell edits, added rows and deleted rows to a live-edit session.

Edit options, repeatable and applied in the order given:
--set ROW_ID COLUMN VALUE, --delete-row ROW_ID, --add-row JSON_OBJECT.
"""
# ``edit`` reads its repeatable 3-value options itself, in the order given (see _parse_edit_args).
EDIT_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


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
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    if session_id is None:  # a session is started only for values that fit: a refused edit leaves none
        info, count = sessions.save_edits(catalog, project_id, dataset_id, ops, actor=actor)
        session_id = info.session_id
    else:
        check_session_on(catalog, session_id, project_id, dataset_id, actor)
        count = sessions.apply_edits(catalog, session_id, ops, actor=actor)
    emit(documents.edit_doc(session_id, count), f"session {session_id}: {count} pending edit(s)")


@session_app.command("show")
def session_show(session_id: str, as_user: AsUser = None) -> None:
    """Show a session and its pending edits."""
    catalog = command_catalog()
    info = sessions.get_session(catalog, session_id, actor=acting_user(catalog, as_user))
    edits = sessions.effective_edits(datasets.layout_for(info.project_id, info.dataset_id), session_id)
    doc = documents.session_doc(info, edits)
    lines = [
        f"session {info.session_id} of {info.owner} on {info.project_id}/{info.dataset_id} (base v{info.base_version})"
    ]
    lines += [
        f"  {e.change:<7} {e.row_id:<38} {e.column or '(row)':<20} {e.old_value!s} -> {e.new_value!s}" for e in edits
    ]
    emit(doc, "\n".join(lines))
