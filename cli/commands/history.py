"""A dataset's versions: ``oreo history``, ``oreo diff``, ``oreo restore`` and ``oreo export``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli import rows as rows_cli
from cli.context import AsUser, acting_user, command_catalog, emit, escape_controls
from core import history
from interface import documents


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
    catalog = command_catalog()
    page = history.table_history(
        catalog, project_id, dataset_id, actor=acting_user(catalog, as_user), limit=limit, offset=offset,
        hide_maintenance=hide_maintenance,
    )  # fmt: skip
    lines = [
        f"v{v.version:<5} {v.timestamp:%Y-%m-%d %H:%M:%S}  {v.operation:<24} {v.kind:<15} {v.actor or '':<12} "
        f"{v.cr_id or '':<20} {'restorable' if v.restorable else v.not_restorable_reason}"
        + (f"  restored to v{v.restored_to}: {v.reason}" if v.kind == "restore" else "")
        for v in page.versions
    ]
    emit(documents.history_doc(page), "\n".join(lines))


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
    rows_cli.check_rows_options(rows, kind, column, export)
    catalog = command_catalog()
    result = history.diff_versions(
        catalog,
        project_id,
        dataset_id,
        from_version,
        to_version,
        actor=acting_user(catalog, as_user),
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
        actor = acting_user(catalog, as_user)
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
    emit(doc, "\n".join(escape_controls(line) for line in lines))


def history_restore(
    project_id: str,
    dataset_id: str,
    version: Annotated[int, typer.Option("--version", help="The version to restore.")],
    as_user: Annotated[str, typer.Option("--as", help="The restoring admin.")],
    reason: Annotated[str | None, typer.Option("--reason", help="Why (kept in the commit and the audit log).")] = None,
) -> None:
    """Restore a dataset's main table to an earlier version (one new commit; admins only)."""
    catalog = command_catalog()
    result = history.restore_version(
        catalog, project_id, dataset_id, version, actor=acting_user(catalog, as_user), reason=reason or ""
    )
    emit(
        documents.restore_doc(result),
        f"{project_id}/{dataset_id} restored to version {result.restored_to} as version {result.version}",
    )


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
    catalog = command_catalog()
    result = history.export_version(
        catalog, project_id, dataset_id, out, actor=acting_user(catalog, as_user), version=version, raw=raw
    )
    emit(
        {"path": result.path, "version": result.version, "rows": result.rows, "format": result.format},
        f"exported version {result.version} of {project_id}/{dataset_id}: {result.rows:,} rows to {result.path}",
    )
