"""Review: ``oreo cr`` (submit, list, show, approve, reject, withdraw, resubmit, resolve, comment, revise)
and ``oreo append`` (a file imported as a change request).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli import rows as rows_cli
from cli.context import AsUser, acting_user, check_session_on, command_catalog, emit, escape_controls
from core import auth, change_requests, conflicts, datasets, diff, imports, merge, resubmit, sessions
from core.catalog import Catalog
from core.errors import InvalidInput
from interface import documents, views

cr_app = typer.Typer(no_args_is_help=True, help="Change requests: submit, review, approve, reject, withdraw.")


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
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    if session_id is None:
        found = sessions.current_session(catalog, project_id, dataset_id, actor=actor)
        if found is None:
            raise InvalidInput(
                f"{as_user} has no open session on {project_id}/{dataset_id}; make edits with `oreo edit` first",
                field="session",
            )
        session_id = found.session_id
    else:
        check_session_on(catalog, session_id, project_id, dataset_id, actor)
    cr = change_requests.submit_change_request(catalog, session_id, actor=actor, title=title, description=description)
    run = change_requests.validation_for(catalog, cr.id, actor=actor)
    doc = documents.submit_doc(cr, run)
    emit(
        doc,
        f"change request {cr.id} submitted ({cr.cells} cell(s), {cr.rows} row(s)); validation {cr.validation_status}",
    )


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
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
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
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    if project_id is not None and dataset_id is not None:
        datasets.get_dataset(catalog, project_id, dataset_id, actor=actor)  # names an unknown or unseen dataset
    found = change_requests.list_change_requests(
        catalog, actor=actor, project_id=project_id, dataset_id=dataset_id, state=state_filter
    )
    lines = [
        f"{c.id}  {c.state.value:<9} {c.project_id}/{c.dataset_id}  {c.author:<12} {c.cells:>6} cell(s)  {c.title}"
        for c in found
    ] or ["no change requests"]
    emit({"change_requests": [documents.cr_doc(c) for c in found]}, "\n".join(lines))


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
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    view = views.change_request_view(catalog, cr_id, actor=actor)
    changes = views.changes_page(catalog, cr_id, actor=actor, limit=limit, offset=offset)  # every one without --limit
    doc = views.show_document(view, changes)
    cr = view.request
    lines = _head_lines(cr, view.conflicts, view.imported)
    lines += [
        f"  {c.change:<7} {c.row_id:<38} {c.column or '(row)':<20} {c.old!s} -> {c.new!s}" for c in changes.changes
    ]
    lines += _conflict_lines(cr, view.conflicts)
    lines += _thread_lines(view.thread, view.revisions, view.states)
    if rows:
        page, exported = _row_diff(catalog, cr_id, actor, kind, column, export, limit, offset)
        doc.update(rows_cli.rows_doc(page, exported))
        lines += rows_cli.rows_lines(page, exported)
    emit(doc, "\n".join(escape_controls(line) for line in lines))


def _head_lines(
    cr: change_requests.ChangeRequest, found: list[conflicts.Conflict], summary: imports.ImportSummary | None
) -> list[str]:
    """What ``cr show`` says before the changes: state, title, validation, and an import's or a run's figures."""
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
    lines += [f"  bulk    {b['bulk_id']:<38} {b['summary']}" for b in cr.bulk_changes]
    if cr.stages:
        lines.append("  stages: " + ", ".join(f"{t.action} {t.stage} {t.seconds:.2f}s" for t in cr.stages))
    return lines


def _row_diff(
    catalog: Catalog,
    cr_id: str,
    actor: auth.User,
    kind: list[str] | None,
    column: list[str] | None,
    export: Path | None,
    limit: int | None,
    offset: int,
) -> tuple[diff.RowDiffPage, tuple[Path, int] | None]:
    """The request's row diff (``--rows``), and the file and row count ``--export`` wrote, if asked."""
    page = views.rows_page(catalog, cr_id, actor=actor, kinds=kind, columns=column, limit=limit, offset=offset)
    exported = None
    if export is not None:
        written = change_requests.export_change_request_diff(
            catalog, cr_id, export, actor=actor, fmt=rows_cli.export_format(export), kinds=kind, columns=column
        )
        exported = (export, written)
    return page, exported


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
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
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
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    cr = change_requests.reject_change_request(catalog, cr_id, actor=actor, reason=reason, expected_revision=revision)
    emit(documents.state_doc(cr), f"change request {cr.id} (revision {cr.revision}) rejected")


@cr_app.command("withdraw")
def cr_withdraw(cr_id: str, as_user: Annotated[str, typer.Option("--as", help="The author.")]) -> None:
    """Withdraw your own open change request; main is untouched."""
    catalog = command_catalog()
    cr = change_requests.withdraw_change_request(catalog, cr_id, actor=acting_user(catalog, as_user))
    emit(documents.state_doc(cr), f"change request {cr.id} withdrawn")


@cr_app.command("resubmit")
def cr_resubmit(cr_id: str, as_user: Annotated[str, typer.Option("--as", help="The author.")]) -> None:
    """Re-submit your open request against the current version (the old one is withdrawn)."""
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    cr = resubmit.resubmit_change_request(catalog, cr_id, actor=actor)
    run = change_requests.validation_for(catalog, cr.id, actor=actor)
    doc = {"cr_id": cr.id, "state": cr.state.value, "validation": documents.validation_doc(run), "replaces": cr_id}
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
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
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
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
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
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    cr = change_requests.request_changes(catalog, cr_id, reason, actor=actor, expected_revision=revision)
    emit(documents.changes_requested_doc(cr), f"changes requested on change request {cr.id} (revision {cr.revision})")


@cr_app.command("revise")
def cr_revise(cr_id: str, as_user: Annotated[str, typer.Option("--as", help="The author.")]) -> None:
    """Re-stage a change request from its edited session as its next revision (after changes were requested)."""
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    cr = change_requests.revise_change_request(catalog, cr_id, actor=actor)
    run = change_requests.validation_for(catalog, cr.id, actor=actor)
    doc = documents.revise_doc(cr, run)
    emit(
        doc,
        f"change request {cr.id} revised: revision {cr.revision} ({cr.cells} cell(s), {cr.rows} row(s)); "
        f"validation {cr.validation_status}",
    )
