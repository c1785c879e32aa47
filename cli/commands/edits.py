"""Live edits: ``oreo edit`` saves cell edits, added and deleted rows to a session; ``oreo session`` shows one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated

import typer

from cli.context import AsUser, acting_user, check_session_on, command_catalog, emit, escape_controls
from core import bulk, datasets, early_conflicts, overlaps, sessions
from core.errors import InvalidInput
from core.filters import parse_where
from core.values import load_json
from interface import documents

session_app = typer.Typer(no_args_is_help=True, help="Live-edit sessions.")

EDIT_HELP = """Save cell edits, added rows and deleted rows to a live-edit session.

Edit options, repeatable and applied in the order given:
--set ROW_ID COLUMN VALUE, --delete-row ROW_ID, --add-row JSON_OBJECT.

Or change every row matching --where COLUMN OP VALUE (repeatable, ANDed; none: every row)
at once, as one pending change: --set-all COLUMN VALUE, --replace COLUMN OLD NEW
[--whole | --regex] [--ignore-case], or --transform COLUMN trim|collapse|upper|lower|title|
round:N|number:SEP|date:FORMAT. --preview prints the counts and a sample and saves nothing;
--null with --set-all empties the cells. --undo-bulk BULK_ID takes a bulk change back.
"""
BULK_FLAGS = ("--where", "--set-all", "--replace", "--transform", "--preview", "--regex", "--whole",
              "--ignore-case", "--null", "--undo-bulk")  # fmt: skip


@dataclass(frozen=True)
class BulkArgs:
    """A bulk change as the command line gives it."""

    where: tuple[str, ...] = ()
    column: str | None = None
    operation: bulk.Operation | None = None
    preview: bool = False
    undo: str | None = None


def _take(args: list[str], i: int, count: int, usage: str) -> list[str]:
    if len(args) - i <= count:
        raise InvalidInput(f"{args[i]} needs {usage}", field="edit options")
    return args[i + 1 : i + 1 + count]


def _parse_bulk_args(args: list[str]) -> BulkArgs | None:
    """The bulk-change options (None when there are none); the cell-edit options are left to _parse_edit_args."""
    if not any(a in BULK_FLAGS for a in args):
        return None
    flags = {a for a in args if a in ("--preview", "--regex", "--whole", "--ignore-case", "--null")}
    where: list[str] = []
    chosen: list[tuple[str, list[str]]] = []
    undo = None
    i = 0
    while i < len(args):
        flag = args[i]
        if flag in flags:
            i += 1
            continue
        usage = {"--where": (1, "COLUMN OP VALUE"), "--set-all": (2, "COLUMN VALUE"), "--undo-bulk": (1, "BULK_ID"),
                 "--replace": (3, "COLUMN OLD NEW"), "--transform": (2, "COLUMN TRANSFORM")}.get(flag)  # fmt: skip
        if usage is None:
            raise InvalidInput(
                f"{flag!r} does not go with a bulk change; save cell edits separately", field="edit options"
            )
        if flag == "--set-all" and args[i + 2 : i + 3] == ["--null"]:  # ∅, given deliberately
            chosen.append((flag, [args[i + 1], None]))  # type: ignore[list-item]
            i += 3
            continue
        values = _take(args, i, usage[0], usage[1])
        if flag == "--where":
            where.append(values[0])
        elif flag == "--undo-bulk":
            undo = values[0]
        else:
            chosen.append((flag, values))
        i += 1 + usage[0]
    if len(chosen) + (undo is not None) != 1:
        raise InvalidInput("give one of --set-all, --replace, --transform or --undo-bulk", field="edit options")
    if undo is not None:
        return BulkArgs(undo=undo)
    flag, values = chosen[0]
    return BulkArgs(tuple(where), values[0], _operation(flag, values, flags), preview="--preview" in flags)


def _operation(flag: str, values: list[str], flags: set[str]) -> bulk.Operation:
    if flag == "--set-all":
        return bulk.SetValue(values[1])
    if flag == "--transform":
        return bulk.parse_transform(values[1])
    if "--regex" in flags and "--whole" in flags:
        raise InvalidInput("--regex and --whole do not go together", field="edit options")
    mode: bulk.Mode = "regex" if "--regex" in flags else "whole" if "--whole" in flags else "substring"
    return bulk.Replace(values[1], values[2], mode, ignore_case="--ignore-case" in flags)


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
    bulk_args = _parse_bulk_args(list(ctx.args))
    if bulk_args is not None:
        _bulk_edit(project_id, dataset_id, as_user, session_id, bulk_args)
        return
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
    doc, text = documents.edit_doc(session_id, count), f"session {session_id}: {count} pending edit(s)"
    cells = [(op.row_id, op.column) for op in ops if isinstance(op, sessions.SetCell)]
    also = overlaps.also_pending(catalog, project_id, dataset_id, cells, actor=actor)
    if also:  # said, not refused: a pending change elsewhere is no lock
        doc["also_pending"] = also
        text += "".join(f"\n  note: {escape_controls(line)}" for line in also)
    emit(doc, text)


def _bulk_edit(project_id: str, dataset_id: str, as_user: str, session_id: str | None, args: BulkArgs) -> None:
    """Preview, apply or undo one bulk change, and print what it did."""
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    if args.undo is not None:
        info = sessions.get_session(catalog, session_id, actor=actor) if session_id else None
        info = info or sessions.current_session(catalog, project_id, dataset_id, actor=actor)
        if info is None:
            raise InvalidInput(f"you have no open session on {project_id}/{dataset_id}", field="session")
        check_session_on(catalog, info.session_id, project_id, dataset_id, actor)
        cells = bulk.undo_bulk(catalog, info.session_id, args.undo, actor=actor)
        doc = {"session_id": info.session_id, "bulk_id": args.undo, "restored": cells}
        emit(doc, f"session {info.session_id}: bulk change {args.undo} undone ({cells:,} cell(s) restored)")
        return
    assert args.column is not None and args.operation is not None
    conditions = [parse_where(text) for text in args.where]
    call = bulk.preview_bulk if args.preview else bulk.apply_bulk
    result = call(catalog, project_id, dataset_id, args.column, args.operation, actor=actor, conditions=conditions,
                  session_id=session_id)  # fmt: skip
    emit_bulk(result)


def emit_bulk(result: bulk.BulkPreview | bulk.BulkChange) -> None:
    """Print a bulk change's preview, or the change saved."""
    if isinstance(result, bulk.BulkPreview):
        emit({**result.to_json(), "preview": True}, _preview_text(result))
        return
    doc = {**result.to_json(), "preview": False}
    emit(doc, f"session {result.session_id}: {result.summary} (bulk change {result.bulk_id}; "
              f"{result.matched:,} matching, {result.matched - result.changed:,} unchanged)")  # fmt: skip


def _preview_text(preview: bulk.BulkPreview) -> str:
    lines = [
        f"{preview.summary} - preview, nothing was saved",
        f"  {preview.matched:,} matching row(s): {preview.changed:,} would change, {preview.unchanged:,} unchanged",
    ]
    lines += [f"  row {s.row_id}: {s.before!r} -> {s.after!r}" for s in preview.sample]
    return "\n".join(escape_controls(line) for line in lines)


@session_app.command("show")
def session_show(session_id: str, as_user: AsUser = None) -> None:
    """Show a session and its pending edits."""
    catalog = command_catalog()
    info = sessions.get_session(catalog, session_id, actor=acting_user(catalog, as_user))
    layout = datasets.layout_for(info.project_id, info.dataset_id)
    edits = sessions.effective_edits(layout, session_id)
    own, bulks = bulk.pending_view(layout, session_id)
    # Each bulk change is one line, as in the Table page's pending list; its cells are not listed one by one.
    if bulks:
        own_cells = {(p.row_id, p.column) for p in own if p.change == "update"}
        shown = [e for e in edits if e.change != "update" or (e.row_id, e.column) in own_cells]
    else:
        shown = edits
    doc = documents.session_doc(info, edits, bulks)
    lines = [
        f"session {info.session_id} of {info.owner} on {info.project_id}/{info.dataset_id} (base v{info.base_version})"
    ]
    lines += [escape_controls(f"  bulk    {b.bulk_id:<38} {b.summary}") for b in bulks]
    lines += [
        f"  {e.change:<7} {e.row_id:<38} {e.column or '(row)':<20} {e.old_value!s} -> {e.new_value!s}" for e in shown
    ]
    emit(doc, "\n".join(lines))


@session_app.command("conflicts")
def session_conflicts(session_id: str, as_user: AsUser = None) -> None:
    """List the early conflicts of a session: each pending change main changed since its base (base, mine, now)."""
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    found = early_conflicts.find_early_conflicts(catalog, session_id, actor=actor)
    info = sessions.get_session(catalog, session_id, actor=actor)
    doc = {"session_id": session_id, "base_version": info.base_version, "conflicts": [c.to_json() for c in found]}
    lines = [f"session {session_id} (base v{info.base_version}): {len(found)} early conflict(s)"]
    lines += [
        escape_controls(f"  {c.row_id} {c.column or '*'}: {c.reason} in v{c.version}; base {c.base!s}, "
                        f"mine {c.mine!s}, now {c.now!s}")
        for c in found
    ]  # fmt: skip
    if found:
        lines.append(f"  decide each: oreo session resolve {session_id} ROW COLUMN --keep-mine|--take-theirs")
    emit(doc, "\n".join(lines))


@session_app.command("resolve")
def session_resolve(
    session_id: str,
    row: Annotated[str, typer.Argument(help="The conflicting row: its ROW_ID, as `oreo edit --set` names it.")],
    column: Annotated[str, typer.Argument(help="The conflicting column, or * for a whole-row conflict.")],
    as_user: AsUser = None,
    keep_mine: Annotated[
        bool, typer.Option("--keep-mine", help="Your pending value stands, re-based onto main now.")
    ] = False,
    take_theirs: Annotated[
        bool, typer.Option("--take-theirs", help="Main's value stays; your pending change is dropped.")
    ] = False,
) -> None:
    """Decide one early conflict of your session; once none is left the session moves to main's version now."""
    if keep_mine == take_theirs:
        raise typer.BadParameter("give exactly one of --keep-mine and --take-theirs", param_hint="--keep-mine")
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    choice: early_conflicts.Choice = "mine" if keep_mine else "theirs"
    done = early_conflicts.resolve_early_conflict(catalog, session_id, row, column, choice, actor=actor)
    doc = {"session_id": session_id, "row_id": row, "column": None if column in ("", "*") else column,
           "choice": choice, "base_version": done.base_version, "rebased": done.rebased,
           "conflicts": [c.to_json() for c in done.remaining]}  # fmt: skip
    kept = "kept your change" if keep_mine else "took main's value"
    moved = f"; the session now starts from v{done.base_version}" if done.rebased else ""
    emit(doc, escape_controls(f"session {session_id}: {kept} on {row}.{column}; "
                              f"{len(done.remaining)} conflict(s) left{moved}"))  # fmt: skip
