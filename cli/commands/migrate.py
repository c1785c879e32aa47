"""``oreo migrate``: bring a PostgreSQL table or a folder of Parquet files into a new dataset.

Each command prints the parity report (one JSON document with ``--json``). Exit codes:
0 when both sides match, 3 when the migration finished but the report shows a mismatch
(so cron notices), 1 when it was refused or failed (nothing is created then).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.context import AsUser, acting_user, command_catalog, emit, progress_to_stderr
from core import migrate
from core.migrate import ParityReport

MISMATCH_EXIT_CODE = 3


class ParityMismatch(typer.TyperException):
    """Ends a migration whose report shows a mismatch with exit code 3, after the report.

    ``cli.context.run_command`` returns a ``TyperException``'s exit code after calling its ``show``,
    whereas a ``typer.Exit`` raised in a command would be swallowed as exit code 0.
    """

    exit_code = MISMATCH_EXIT_CODE

    def show(self) -> None:
        """Nothing to add: the report is already on stdout."""


migrate_app = typer.Typer(
    no_args_is_help=True, help="Migrate a PostgreSQL table or a Parquet folder into a new dataset (parity report)."
)

Key = Annotated[str | None, typer.Option("--key", help="Column whose values become row_id.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Read the source and report; create nothing.")]


@migrate_app.command("postgres")
def migrate_postgres_cmd(
    project_id: str,
    dataset_id: str,
    dsn: Annotated[str, typer.Option("--dsn", help="libpq DSN or postgresql:// URL of the source database.")],
    table: Annotated[str, typer.Option("--table", help="schema.table or table (case-sensitive).")],
    key: Key = None,
    dry_run: DryRun = False,
    as_user: AsUser = None,
) -> None:
    """Copy a PostgreSQL table into a new dataset and compare both sides."""
    catalog = command_catalog()
    report = migrate.migrate_postgres(
        catalog,
        project_id,
        dataset_id,
        dsn=dsn,
        table=table,
        key=key,
        dry_run=dry_run,
        actor=acting_user(catalog, as_user),
        progress=_progress,
    )
    _emit_report(report, source=f"PostgreSQL table {table}", target=f"{project_id}/{dataset_id}", dry_run=dry_run)


@migrate_app.command("parquet")
def migrate_parquet_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Folder of *.parquet files (searched recursively).")],
    project_id: str,
    dataset_id: str,
    key: Key = None,
    dry_run: DryRun = False,
    as_user: AsUser = None,
) -> None:
    """Copy every Parquet file of a folder (one schema) into a new dataset and compare both sides."""
    catalog = command_catalog()
    report = migrate.migrate_parquet(
        catalog,
        directory,
        project_id,
        dataset_id,
        key=key,
        dry_run=dry_run,
        actor=acting_user(catalog, as_user),
        progress=_progress,
    )
    _emit_report(report, source=f"Parquet folder {directory}", target=f"{project_id}/{dataset_id}", dry_run=dry_run)


def _progress(fraction: float, message: str) -> None:
    """core.migrate reports (fraction, message); the CLI's progress lines take them the other way round."""
    progress_to_stderr(message, fraction)


def _emit_report(report: ParityReport, *, source: str, target: str, dry_run: bool) -> None:
    """Print the report; leave with exit code 3 when the two sides differ."""
    if dry_run:
        lines = [f"dry run: {source} would become {target} with {report.source_rows:,} rows; nothing was created"]
    else:
        lines = [f"migrated {source} into {target}: {report.delta_rows:,} rows, version {report.version}"]
    if report.match:
        lines.append(
            f"parity: match ({report.source_rows:,} rows on both sides; {len(report.columns)} column checksum(s) "
            "and the table hash agree)"
        )
    else:
        problems = []
        if report.source_rows != report.delta_rows:
            problems.append(f"rows {report.source_rows:,} in the source vs {report.delta_rows:,} in Delta")
        if report.mismatched_columns:
            problems.append("column checksums differ for " + ", ".join(report.mismatched_columns))
        if report.table_hash_source != report.table_hash_delta:
            problems.append("the table hash differs")
        lines.append("parity: MISMATCH - " + "; ".join(problems))
    width = max(len(c.name) for c in report.columns)
    lines += [
        f"  {c.name:<{width}}  {c.source_checksum:>22}  {c.delta_checksum:>22}  {'ok' if c.match else 'DIFFERS'}"
        for c in report.columns
    ]
    written = "as it would be written" if dry_run else "in Delta"
    lines.append(f"  table hash: {report.table_hash_source} in the source, {report.table_hash_delta} {written}")
    emit(report.to_json(), "\n".join(lines))
    if not report.match:
        raise ParityMismatch("the source and the Delta table differ")
