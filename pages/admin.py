"""Table maintenance for project admins: service levels, stats, OPTIMIZE (with ZORDER), VACUUM, checkpoints, cleanup,
notifications."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from app.components import (
    catalog,
    dataset_options,
    flash,
    local_time,
    oreo_errors,
    require_user,
    show_error,
    show_flash,
    split_dataset,
    wait_for_engine,
)
from core import auth, datasets, health, maintenance, notify
from core.config import get_settings
from core.errors import OreoError

REPORT_KEY = "admin_report"
PLAN_KEY = "admin_vacuum_plan"
# The page's words for forcing a short retention (the CLI's are "pass --force").
FORCE_HINT = "tick “Force a retention shorter than the safe horizon” to do it anyway"

user = require_user()
# st.navigation only lists this page to admins; a direct URL must not get further either.
admin_projects = sorted(
    project for project, role in auth.memberships(catalog(), user).items() if role.rank >= auth.Role.ADMIN.rank
)
if not admin_projects:
    st.error("Admins only: table maintenance needs the admin role in a project.", icon=":material/block:")
    st.stop()

st.title("Admin")
show_flash()


def when(value: Any) -> str:
    return "never" if value is None else local_time(value)


def size_text(size: int) -> str:
    amount = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if amount < 1024 or unit == "TB":
            return f"{amount:,.0f} {unit}" if unit == "B" else f"{amount:,.1f} {unit}"
        amount /= 1024
    return f"{size} B"


def report_frame(report: dict[str, Any]) -> pd.DataFrame:
    """A maintenance report as rows a person reads: step, what, before, after (no server paths)."""
    rows: list[dict[str, Any]] = []
    steps = report.get("steps", {})
    changed = (steps.get("retention") or {}).get("changed") or {}
    for key, value in changed.items():
        rows.append({"step": "retention", "what": key, "before": "", "after": str(value)})
    for name in ("optimize", "vacuum"):
        step = steps.get(name)
        if not step:
            continue
        before, after = step.get("before") or {}, step.get("after") or {}
        for what, label in (("files", "files"), ("size_bytes", "size"), ("small_files", "small files")):
            if what in before:
                show = size_text if what == "size_bytes" else (lambda n: f"{int(n):,}")
                rows.append({"step": name, "what": label, "before": show(before[what]), "after": show(after[what])})
        if name == "optimize" and step.get("zorder"):
            rows.append({"step": name, "what": "ZORDER BY", "before": "", "after": ", ".join(step["zorder"])})
        if name == "vacuum":
            rows.append({"step": name, "what": "files deleted", "before": "", "after": f"{step['files_deleted']:,}"})
            if step.get("unrestorable_versions"):
                first, last = step["unrestorable_versions"]
                rows.append({"step": name, "what": "no longer restorable", "before": "", "after": f"v{first}–v{last}"})
        if step.get("versions"):
            made = ", ".join(map(str, step["versions"]))
            rows.append({"step": name, "what": "versions made", "before": "", "after": made})
    checkpoint = steps.get("checkpoint")
    if checkpoint:
        written = "written" if checkpoint.get("written") else "already there"
        at = f"at version {checkpoint.get('version')}"
        rows.append({"step": "checkpoint", "what": at, "before": "", "after": written})
    if report.get("nothing_to_do"):
        rows.append({"step": "all", "what": "nothing to do", "before": "", "after": ""})
    return pd.DataFrame(rows, columns=["step", "what", "before", "after"])


def run_with_progress(title: str, project_id: str, dataset_id: str, **actions: Any) -> None:
    """Run ``maintain`` with a progress bar, keep its report for the next run, then rerun."""
    wait_for_engine()
    bar = st.progress(0.0, text=f"{title}: starting")

    def progress(message: str, fraction: float) -> None:
        bar.progress(min(max(float(fraction), 0.0), 1.0), text=f"{title}: {message}")

    try:
        report = maintenance.maintain(catalog(), project_id, dataset_id, actor=user, progress=progress, **actions)
    except OreoError as exc:
        # Shown where the button is; the rest of the page (the other steps) still draws.
        bar.empty()
        show_error(exc)
        return
    st.session_state[REPORT_KEY] = (title, report)
    flash(f"{title} finished.")
    st.rerun()


CLEANUP_KINDS = {"session": "editing session", "staging": "staged change request", "import": "uploaded file"}


def cleanup_frame(result: dict[str, Any]) -> pd.DataFrame:
    """A cleanup report as rows a person reads: what, of which dataset, which one, why (no server paths)."""
    rows = []
    for item in result.get("details", []):
        project, dataset, name = str(item["path"]).split("/", 2)  # project/dataset/id
        rows.append(
            {
                "what": CLEANUP_KINDS.get(item["kind"], item["kind"]),
                "dataset": f"{project}/{dataset}",
                "which": name,
                "why": item["reason"],
            }
        )
    return pd.DataFrame(rows, columns=["what", "dataset", "which", "why"])


# Words, not emoji: the grid draws on a canvas, whose fonts may have no emoji.
SLA_STATUS = {True: "ok", False: "OVER TARGET", None: "not judged"}


def sla_frame(figures: list[health.SlaFigure]) -> pd.DataFrame:
    """Seed 004's service levels as rows: figure, value, target, status, what it is about."""
    return pd.DataFrame(
        [
            {"figure": f.name, "last 24 h": f.text, "target": f.target, "status": SLA_STATUS[f.ok], "detail": f.detail}
            for f in figures
        ],
        columns=["figure", "last 24 h", "target", "status", "detail"],
    )


with oreo_errors():
    # Headings go h1, h2, h3 with no level skipped (screen readers list them as the page's outline).
    st.header("Monitoring", anchor=False)
    st.subheader("Service levels, last 24 hours", anchor=False)
    figures = health.sla_figures(catalog(), actor=user)
    breached = [f.name for f in figures if f.ok is False]
    st.caption(
        "How fast and how reliably Oreo served people, against the targets the monitoring alerts watch. "
        "Reads, imports and approvals count every app and API process of this workspace."
    )
    with st.container(key="admin_sla"):
        st.dataframe(sla_frame(figures), hide_index=True, width="stretch", key="admin_sla_table")
        if breached:
            st.warning("Over target: " + ", ".join(breached) + ".", icon=":material/warning:")

options = [o for o in dataset_options(user) if split_dataset(o)[0] in admin_projects]
with oreo_errors():
    st.header("Table maintenance", anchor=False)
    if not options:
        st.info("No datasets in the projects you administer.")
    else:
        if st.session_state.get("admin_dataset") not in options:
            st.session_state["admin_dataset"] = options[0]
        choice = st.selectbox("Dataset", options, key="admin_dataset")
        project_id, dataset_id = split_dataset(choice)
        info = datasets.get_dataset(catalog(), project_id, dataset_id, actor=user)
        stats = maintenance.table_stats(catalog(), project_id, dataset_id, actor=user)
        with st.container(key="admin_stats", horizontal=True):
            st.metric("Files", f"{stats.files:,}", border=True)
            st.metric("Size", size_text(stats.size_bytes), border=True)
            st.metric("Small files", f"{stats.small_files:,}", border=True)
            st.metric("Versions", f"{stats.versions:,}", border=True)
            st.metric("Last optimize", when(stats.last_optimize), border=True)
            st.metric("Last vacuum", when(stats.last_vacuum), border=True)

        kept = st.session_state.get(REPORT_KEY)
        if kept is not None:
            title, report = kept
            with st.container(key="admin_report"):
                st.markdown(f"**Last run: {title}**")
                st.dataframe(report_frame(report), hide_index=True, width="stretch", key="admin_report_table")

        # One box under the other, each the page's width: three columns cut their labels at 1024 px
        # ("Write checkp…", "Force a retention s…"). The dry run's list follows its VACUUM box.
        with st.container(border=True, key="admin_optimize_box"):
            st.markdown("**OPTIMIZE**")
            st.caption("Compacts small files into larger ones; ZORDER also clusters rows by the chosen columns.")
            names = [c.name for c in datasets.dataset_columns(info) if c.name != "row_id"]
            zorder = st.multiselect("ZORDER BY (optional)", names, key="admin_zorder")
            if st.button("Run OPTIMIZE", key="admin_optimize", icon=":material/compress:"):
                run_with_progress(f"OPTIMIZE {choice}", project_id, dataset_id, optimize=True, zorder=zorder or None)
        with st.container(border=True, key="admin_vacuum_box"):
            horizon = maintenance.vacuum_horizon_hours()
            st.markdown("**VACUUM**")
            st.caption("Deletes data files that no version newer than the retention period still uses.")
            retain = st.number_input(
                "Retention (hours)", min_value=0.0, value=float(horizon), step=24.0, key="admin_retain"
            )
            force = st.checkbox("Force a retention shorter than the safe horizon", key="admin_force")
            if force or retain < horizon:
                st.warning(
                    f"Versions older than {retain:g} hours stop being restorable, previewable and "
                    f"diffable once their files are vacuumed (the safe horizon is {horizon:g} hours). "
                    "Readers and writers still using those files may fail.",
                    icon=":material/warning:",
                )
            run_col = dry_col = st.container(horizontal=True)  # buttons as wide as their labels
            if run_col.button("Run VACUUM", key="admin_vacuum", icon=":material/delete_sweep:"):
                run_with_progress(
                    f"VACUUM {choice}", project_id, dataset_id, vacuum=True, retain_hours=retain, force=force,
                    force_hint=FORCE_HINT,
                )  # fmt: skip
            if dry_col.button("Dry run", key="admin_vacuum_dry_run", icon=":material/plagiarism:"):
                wait_for_engine()
                with st.spinner("Listing what VACUUM would delete..."):
                    plan = maintenance.vacuum_dry_run(
                        catalog(), project_id, dataset_id, actor=user, retain_hours=retain
                    )
                st.session_state[PLAN_KEY] = (choice, plan)
        kept_plan = st.session_state.get(PLAN_KEY)
        if kept_plan is not None and kept_plan[0] == choice:
            plan = kept_plan[1]
            with st.container(key="admin_vacuum_plan", border=True):
                at_risk = plan.unrestorable_versions
                st.markdown(
                    f"**VACUUM dry run**, retaining {plan.retain_hours:g} hours: it would delete "
                    f"**{len(plan.files):,}** file(s), **{size_text(plan.size_bytes)}**"
                    + (f"; versions {at_risk[0]}–{at_risk[1]} would stop being restorable" if at_risk else "")
                    + ". Nothing was deleted."
                )
                if plan.files:
                    st.dataframe(
                        pd.DataFrame(
                            {
                                "file": [f.path for f in plan.files],
                                "size": [size_text(f.size_bytes) for f in plan.files],
                            }
                        ),
                        hide_index=True,
                        width="stretch",
                        key="admin_vacuum_plan_files",
                    )
        with st.container(border=True, key="admin_checkpoint_box"):
            st.markdown("**Checkpoint**")
            st.caption("Writes a Delta log checkpoint so readers replay fewer commit files.")
            if st.button("Write checkpoint", key="admin_checkpoint", icon=":material/flag:"):
                run_with_progress(f"Checkpoint {choice}", project_id, dataset_id, checkpoint=True)

with oreo_errors():
    st.header("Cleanup", anchor=False)
    st.caption("Removes abandoned editing sessions, staged change requests and unfinished imports older than the TTL.")
    ttl_col, dry_col, run_col = st.columns([2, 1.5, 1.5], vertical_alignment="bottom")
    ttl = ttl_col.number_input(
        "TTL hours (empty: the configured default)", min_value=0.0, value=None, step=24.0, key="admin_ttl"
    )
    dry_run = dry_col.toggle("Dry run", value=True, key="admin_dry_run")
    if run_col.button("Run cleanup", key="admin_cleanup", icon=":material/cleaning_services:"):
        with st.spinner("Cleaning up..."):
            done = maintenance.cleanup(catalog(), actor=user, ttl_hours=ttl, dry_run=dry_run)
        st.session_state["admin_cleanup_result"] = (dry_run, done)
    kept_cleanup = st.session_state.get("admin_cleanup_result")
    if kept_cleanup is not None:
        was_dry, result = kept_cleanup
        verb = "Would remove" if was_dry else "Removed"
        with st.container(key="admin_cleanup_report"):
            found = False
            for label, field in (
                ("session(s)", "sessions_removed"),
                ("staged change request(s)", "staging_removed"),
                ("import(s)", "imports_removed"),
            ):
                items = list(result.get(field, []))
                if items:
                    found = True
                    st.markdown(f"{verb} **{len(items)}** {label}: " + ", ".join(f"`{i}`" for i in items))
            if not found:
                st.markdown("Nothing to remove." if was_dry else "Nothing was removed.")
            else:
                st.dataframe(cleanup_frame(result), hide_index=True, width="stretch", key="admin_cleanup_table")

with oreo_errors():
    st.header("Notifications", anchor=False)
    settings = get_settings()
    st.caption(
        f"Email goes out through `{settings.smtp_host}` ({settings.smtp_tls}); webhooks get every review event."
        if settings.smtp_host
        else "Email is off: no SMTP server is set (`OREO_SMTP_HOST`). Webhooks get every review event."
    )
    hooks = [hook for project in admin_projects for hook in notify.list_webhooks(catalog(), project, actor=user)]
    dead = notify.dead_deliveries(catalog(), admin_projects)
    failing = [hook for hook in hooks if hook.failing]
    with st.container(key="admin_notifications"):
        if failing:
            st.error(
                f"{len(failing)} webhook(s) failing: a delivery ran out of attempts. Fix the endpoint; "
                "the next delivery that gets through clears the mark.",
                icon=":material/error:",
            )
        elif not dead:
            st.success("Every webhook is delivering; no notification died.", icon=":material/check_circle:")
        if hooks:
            st.markdown("**Webhooks**")
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "project": hook.project_id,
                            "webhook": hook.id,
                            "url": hook.url,
                            "state": "failing" if hook.failing else "ok",
                            "waiting": hook.pending,
                            "dead": hook.dead,
                            "last error": hook.last_error or "",
                            "last error at": hook.last_error_at,
                            "last success at": hook.last_success_at,
                        }
                        for hook in hooks
                    ]
                ),
                hide_index=True,
                width="stretch",
                key="admin_webhooks",
            )
        else:
            st.caption("No webhooks. Add one with `oreo webhook add PROJECT URL --secret-stdin`.")
        if dead:
            st.markdown(f"**Dead deliveries** ({len(dead)}, newest first)")
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "queued": d.created_at,
                            "project": d.project_id,
                            "event": d.event,
                            "request": d.cr_id or "",
                            "to": d.target,
                            "channel": d.channel,
                            "attempts": d.attempts,
                            "last error": d.last_error or "",
                        }
                        for d in dead
                    ]
                ),
                hide_index=True,
                width="stretch",
                key="admin_dead_deliveries",
            )
