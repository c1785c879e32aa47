"""Running and looking after the workspace: ``oreo demo``, ``api``, ``doctor``, ``maintain`` and ``cleanup``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.context import AsUser, acting_user, command_catalog, emit, progress_to_stderr
from core import doctor, maintenance
from core.catalog import Catalog
from core.demo import seed_demo
from core.errors import InvalidInput

# The API server is named for uvicorn, not imported: the front ends do not import each other
# (ARCHITECTURE.md), and every other command would pay for loading FastAPI.
API_FACTORY = "api.app:create_app"


def demo() -> None:
    """Seed the demo workspace (project demo, dataset customers, three accounts)."""
    result = seed_demo(command_catalog())
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


def api_cmd(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8600,
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs, metrics at /metrics)."""
    import uvicorn  # only this command serves HTTP; the others do not load the server

    command_catalog()  # a bad catalog URL fails here, before the server listens
    uvicorn.run(API_FACTORY, factory=True, host=host, port=port, log_level="info", access_log=False)


class _Unhealthy(typer.TyperException):
    """Ends ``oreo doctor`` with exit code 1 after its report (a ``typer.Exit`` would end it with 0)."""

    exit_code = 1

    def show(self) -> None:
        """Nothing to add: the report, with each failed check, is already on stdout."""


def doctor_cmd(project_id: str, dataset_id: str, as_user: AsUser = None) -> None:
    """Check a dataset's table (log, files, checkpoints) against the catalog; exit 1 if anything is wrong."""
    catalog = command_catalog()
    diagnosis = doctor.diagnose(catalog, project_id, dataset_id, actor=acting_user(catalog, as_user))
    lines = [f"{'ok  ' if c.ok else 'FAIL'}  {c.name:<16} {c.detail}" for c in diagnosis.checks]
    verdict = "healthy" if diagnosis.ok else "DAMAGED: see the failed checks above"
    emit(diagnosis.to_json(), "\n".join([*lines, f"{project_id}/{dataset_id}: {verdict}"]))
    if not diagnosis.ok:
        raise _Unhealthy("the table has problems")


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
    if dry_run:
        if not vacuum or optimize or zorder is not None or checkpoint:
            raise InvalidInput("--dry-run goes with --vacuum alone", field="dry_run")
        _vacuum_dry_run(command_catalog(), project_id, dataset_id, as_user, retain_hours)
        return
    columns = [c.strip() for c in zorder.split(",")] if zorder is not None else None
    if not (optimize or columns or vacuum or checkpoint):
        raise InvalidInput("nothing to do: choose at least one of --optimize, --zorder, --vacuum, --checkpoint")
    catalog = command_catalog()
    report = maintenance.maintain(
        catalog,
        project_id,
        dataset_id,
        actor=acting_user(catalog, as_user),
        optimize=optimize,
        zorder=columns,
        vacuum=vacuum,
        retain_hours=retain_hours,
        force=force,
        checkpoint=checkpoint,
        progress=progress_to_stderr,
    )
    emit(report, "\n".join(_maintenance_lines(report, project_id, dataset_id)))


def _vacuum_dry_run(
    catalog: Catalog, project_id: str, dataset_id: str, as_user: str | None, retain_hours: float | None
) -> None:
    """Print the files VACUUM would delete, and the versions that would stop being restorable."""
    plan = maintenance.vacuum_dry_run(
        catalog, project_id, dataset_id, actor=acting_user(catalog, as_user), retain_hours=retain_hours
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


def _maintenance_lines(report: dict[str, Any], project_id: str, dataset_id: str) -> list[str]:
    """A maintenance run's report as a person reads it: one line per step that ran."""
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
    return lines


def cleanup_cmd(
    ttl_hours: Annotated[
        float | None, typer.Option("--ttl-hours", help="Replace the session and import TTLs for this run.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")] = False,
    as_user: AsUser = None,
) -> None:
    """Remove expired sessions, staging tables of closed change requests and orphan imports."""
    catalog = command_catalog()
    report = maintenance.cleanup(
        catalog, actor=acting_user(catalog, as_user), ttl_hours=ttl_hours, dry_run=dry_run, progress=progress_to_stderr
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
