"""The health of the tables and of the review loop, read from the catalog and the data root.

``table_health`` (each ``main`` table's files, its last VACUUM, its leftovers),
``open_request_ages`` and ``sla_figures`` (Seed 004's service levels, as the Admin page
shows them, over the hourly tallies of ``core.sla``) read datasets, maintenance runs and
the engine; so does the scrape-time collector that exports the same quantities to
Prometheus (``register_collector``, called by the API's and the app's start). It sits
above the modules it reads; ``core.metrics`` and ``core.sla`` below only count and time.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from core import auth, engine, maintenance
from core.auth import User
from core.catalog import AuditEventRow, Catalog, ChangeRequestRow, DatasetRow, OutboxRow, open_catalog
from core.change_requests import CRState
from core.config import get_settings
from core.datasets import layout_for
from core.errors import OreoError
from core.maintenance import MaintenanceRun
from core.sla import (
    IMPORT_MIN_ROWS_PER_S,
    OPEN_REQUEST_MAX_DAYS,
    READ_P95_MAX_S,
    SMALL_FILE_MIN_FILES,
    SMALL_FILE_RATIO_MAX,
    VACUUM_MAX_DAYS,
    _Tally,
    quantile,
    tallies,
)
from core.storage import Location, ObjectPath, tree_bytes

log = logging.getLogger(__name__)

CACHE_S = 5.0
_DAY = 86400.0
_OPEN_AGE_BUCKETS = (3600.0, _DAY, 3 * _DAY, 7 * _DAY, 14 * _DAY, 30 * _DAY)


# ---------------------------------------------------------------- tables


@dataclass(frozen=True)
class TableHealth:
    """What the alerts watch on one dataset: its ``main`` files, the last VACUUM, leftovers.

    ``last_vacuum`` is the later of the Delta log's last ``VACUUM END`` and the last
    successful ``maintain`` run with a VACUUM step (one that found nothing to delete
    commits nothing).
    """

    project_id: str
    dataset_id: str
    files: int
    small_files: int
    size_bytes: int
    last_vacuum: datetime | None
    created_at: datetime
    staging_bytes: int
    live_edit_bytes: int

    @property
    def vacuum_clock(self) -> datetime:
        """Since when the table waits for a VACUUM: the last one, or its creation when never vacuumed."""
        return self.last_vacuum or self.created_at

    @property
    def small_file_ratio(self) -> float:
        return self.small_files / self.files if self.files else 0.0


_stats_lock = threading.Lock()
_stats_cache: dict[tuple[str, int | None], Any] = {}  # (main path, catalog version) -> TableStats


def _folder_bytes(folder: Location) -> int:
    if isinstance(folder, ObjectPath):
        return tree_bytes(folder)
    total = 0
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(parent, name)).st_size
            except OSError:
                continue  # removed while walking
    return total


def _main_stats(path: Location, version: int | None) -> Any:
    """``maintenance.main_table_stats`` once per table version (the catalog's, bumped by every commit)."""
    key = (str(path), version)
    with _stats_lock:
        if key in _stats_cache:
            return _stats_cache[key]
    stats = maintenance.main_table_stats(path)
    with _stats_lock:
        for old in [k for k in _stats_cache if k[0] == key[0]]:
            del _stats_cache[old]
        _stats_cache[key] = stats
    return stats


def _vacuum_runs(catalog: Catalog, project_ids: list[str] | None) -> dict[tuple[str, str], datetime]:
    """When each dataset's last successful ``maintain`` run with a VACUUM step ended (the audit log)."""
    query = select(AuditEventRow.project_id, AuditEventRow.dataset_id, AuditEventRow.ts, AuditEventRow.details).where(
        AuditEventRow.name == MaintenanceRun.name
    )
    if project_ids is not None:
        query = query.where(AuditEventRow.project_id.in_(project_ids))
    last: dict[tuple[str, str], datetime] = {}
    with catalog.session() as s:
        for project_id, dataset_id, ts, details in s.execute(query):
            if "vacuum" not in (details or {}).get("steps", []) or (details or {}).get("error"):
                continue
            key = (str(project_id), str(dataset_id))
            if key not in last or ts > last[key]:
                last[key] = ts
    return last


def table_health(catalog: Catalog, project_ids: list[str] | None = None) -> list[TableHealth]:
    """Every dataset's health (or those of ``project_ids``); a table whose log cannot be read is left out."""
    with catalog.session() as s:
        query = select(DatasetRow).order_by(DatasetRow.project_id, DatasetRow.dataset_id)
        if project_ids is not None:
            query = query.where(DatasetRow.project_id.in_(project_ids))
        rows = [(r.project_id, r.dataset_id, r.delta_version, r.created_at) for r in s.scalars(query)]
    vacuum_runs = _vacuum_runs(catalog, project_ids)
    health: list[TableHealth] = []
    for project_id, dataset_id, version, created_at in rows:
        layout = layout_for(project_id, dataset_id)
        if not layout.has_main_table():
            continue
        try:
            stats = _main_stats(layout.main, version)
        except OreoError:
            continue
        health.append(
            TableHealth(
                project_id=project_id,
                dataset_id=dataset_id,
                files=stats.files,
                small_files=stats.small_files,
                size_bytes=stats.size_bytes,
                last_vacuum=max(
                    (t for t in (stats.last_vacuum, vacuum_runs.get((project_id, dataset_id))) if t is not None),
                    default=None,
                ),
                created_at=created_at,
                staging_bytes=_folder_bytes(layout.staging_root),
                live_edit_bytes=_folder_bytes(layout.live_edit_root),
            )
        )
    return health


def open_request_ages(catalog: Catalog, project_ids: list[str] | None = None) -> list[float]:
    """Seconds since each open (or changes-requested) request was submitted."""
    query = select(ChangeRequestRow.created_at).where(ChangeRequestRow.state.in_(("open", "changes_requested")))
    if project_ids is not None:
        query = query.where(ChangeRequestRow.project_id.in_(project_ids))
    now = datetime.now(UTC)
    with catalog.session() as s:
        return [max((now - created).total_seconds(), 0.0) for created in s.scalars(query)]


# ---------------------------------------------------------------- figures


@dataclass(frozen=True)
class SlaFigure:
    """One service level: its value over the window (None: nothing to judge), in words, and its target."""

    name: str
    value: float | None
    text: str
    target: str
    ok: bool | None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "text": self.text,
            "target": self.target,
            "ok": self.ok,
            "detail": self.detail,
        }


def sla_figures(
    catalog: Catalog, *, actor: User, hours: int = 24, open_days: int = OPEN_REQUEST_MAX_DAYS
) -> list[SlaFigure]:
    """Seed 004's service levels for the last ``hours`` hours, over the projects ``actor`` administers.

    Page reads, imports and approvals count every process of this data root (they are not
    per project); open requests and tables are those of ``actor``'s admin projects.
    """
    projects = sorted(p for p, role in auth.memberships(catalog, actor).items() if role.rank >= auth.Role.ADMIN.rank)
    kept = tallies(hours)
    figures = [_read_figure(kept), _import_figure(kept), _approval_figure(kept)]

    old = [age for age in open_request_ages(catalog, projects) if age > open_days * 86400]
    figures.append(
        SlaFigure(
            name=f"Requests open > {open_days} days",
            value=float(len(old)),
            text=f"{len(old):,}",
            target="0",
            ok=not old,
            detail=f"the oldest for {max(old) / 86400:.1f} days" if old else "",
        )
    )
    health = table_health(catalog, projects)
    now = datetime.now(UTC)
    if health:
        stale = max(health, key=lambda t: now - t.vacuum_clock)
        days = (now - stale.vacuum_clock).total_seconds() / 86400
        figures.append(
            SlaFigure(
                name="Days since VACUUM",
                value=days,
                text=f"{days:.1f}",
                target=f"≤ {VACUUM_MAX_DAYS:g}",
                ok=days <= VACUUM_MAX_DAYS,
                detail=f"{stale.project_id}/{stale.dataset_id}" + ("" if stale.last_vacuum else ", never vacuumed"),
            )
        )
        worst = max(health, key=lambda t: (t.files >= SMALL_FILE_MIN_FILES, t.small_file_ratio))
        figures.append(
            SlaFigure(
                name="Small-file ratio",
                value=worst.small_file_ratio,
                text=f"{worst.small_file_ratio:.0%}",
                target=f"≤ {SMALL_FILE_RATIO_MAX:.0%} (tables of {SMALL_FILE_MIN_FILES}+ files)",
                ok=worst.files < SMALL_FILE_MIN_FILES or worst.small_file_ratio <= SMALL_FILE_RATIO_MAX,
                detail=f"{worst.project_id}/{worst.dataset_id}: {worst.small_files:,} of {worst.files:,} files",
            )
        )
    figures.append(_engine_figure(engine.engine_status()))
    return figures


def _engine_figure(status: Any) -> SlaFigure:
    """Ready is ok and failed is not; starting (or never started in this process) is not judged yet."""
    details = {
        "idle": "not started in this process",
        "starting": f"starting for {status.elapsed_s:.0f} s"
        + (f" (the last start took {status.expected_s:.0f} s)" if status.expected_s else ""),
        "failed": status.error or "",
    }
    return SlaFigure(
        name="Engine",
        value=1.0 if status.state == "ready" else 0.0,
        text=status.state,
        target="ready",
        ok={"ready": True, "failed": False}.get(status.state),
        detail=details.get(status.state, ""),
    )


def _read_figure(kept: _Tally) -> SlaFigure:
    p95 = quantile(0.95, kept.read_buckets)
    reads = sum(kept.read_buckets)
    return SlaFigure(
        name="Page read p95",
        value=p95,
        text="no reads" if p95 is None else f"{p95:.2f} s",
        target=f"< {READ_P95_MAX_S:g} s",
        ok=None if p95 is None else p95 < READ_P95_MAX_S,
        detail=f"{reads:,} page read{'' if reads == 1 else 's'}",
    )


def _import_figure(kept: _Tally) -> SlaFigure:
    if kept.import_seconds <= 0:
        return SlaFigure("Import throughput", None, "no imports", f"≥ {IMPORT_MIN_ROWS_PER_S:,.0f} rows/s", None)
    rate = kept.import_rows / kept.import_seconds
    return SlaFigure(
        name="Import throughput",
        value=rate,
        text=f"{rate:,.0f} rows/s",
        target=f"≥ {IMPORT_MIN_ROWS_PER_S:,.0f} rows/s",
        ok=rate >= IMPORT_MIN_ROWS_PER_S,
        detail=f"{kept.import_rows:,} rows in {kept.import_seconds:,.1f} s",
    )


def _approval_figure(kept: _Tally) -> SlaFigure:
    failed = kept.approvals.get("failed", 0)
    done = sum(kept.approvals.values())
    others = ", ".join(f"{n} {o.replace('_', ' ')}" for o, n in sorted(kept.approvals.items()) if o != "failed")
    return SlaFigure(
        name="Approval failures",
        value=float(failed),
        text=f"{failed:,}",
        target="0",
        ok=failed == 0,
        detail=(f"of {done:,} approval{'' if done == 1 else 's'}" if done else "no approvals")
        + (f" ({others})" if others else ""),
    )


# ---------------------------------------------------------------- scrape-time collector


class _CatalogCollector(Collector):
    """Metrics read from the configured catalog and data root at scrape time, cached ``CACHE_S`` seconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: tuple[float, tuple[str, str], list[Metric]] | None = None

    def describe(self) -> list[Metric]:
        return []  # collected lazily: registering must not open the catalog

    def collect(self) -> list[Metric]:
        settings = get_settings()
        where = (settings.database_url, str(settings.data_root))
        with self._lock:
            cached = self._cached
            if cached is not None and cached[1] == where and time.monotonic() - cached[0] < CACHE_S:
                return cached[2]
            try:
                families = _engine_families() + _catalog_families()
            except Exception:  # a scrape must answer even when the catalog is down
                log.warning("metrics: could not read the catalog", exc_info=True)
                families = _engine_families()
            self._cached = (time.monotonic(), where, families)
            return families


def _engine_families() -> list[Metric]:
    status = engine.engine_status()
    up = GaugeMetricFamily("oreo_engine_up", "1 when this process's Spark session is up, else 0.")
    up.add_metric([], 1.0 if status.state == "ready" else 0.0)
    state = GaugeMetricFamily(
        "oreo_engine_state", "This process's Spark session: 1 for its current state.", labels=["state"]
    )
    for name in ("idle", "starting", "ready", "failed"):
        state.add_metric([name], 1.0 if status.state == name else 0.0)
    return [up, state]


def _catalog_families() -> list[Metric]:
    catalog = open_catalog()
    with catalog.session() as s:
        by_state = dict(s.execute(select(ChangeRequestRow.state, func.count()).group_by(ChangeRequestRow.state)).all())
        outbox = dict(s.execute(select(OutboxRow.state, func.count()).group_by(OutboxRow.state)).all())

    states = GaugeMetricFamily("oreo_change_requests", "Change requests by state.", labels=["state"])
    for state in CRState:
        states.add_metric([state.value], float(by_state.get(state.value, 0)))

    ages = open_request_ages(catalog)
    oldest = GaugeMetricFamily(
        "oreo_change_request_oldest_open_age_seconds", "Age of the oldest open (or changes-requested) request."
    )
    oldest.add_metric([], max(ages, default=0.0))
    histogram = HistogramMetricFamily(
        "oreo_change_request_open_age_seconds", "Ages of the open (or changes-requested) requests."
    )
    buckets = [(_le(bound), float(sum(1 for a in ages if a <= bound))) for bound in _OPEN_AGE_BUCKETS]
    histogram.add_metric([], [*buckets, ("+Inf", float(len(ages)))], sum_value=sum(ages))

    depth = GaugeMetricFamily("oreo_notify_outbox_depth", "Notifications waiting to be sent (pending).")
    depth.add_metric([], float(outbox.get("pending", 0)))
    dead = GaugeMetricFamily("oreo_notify_outbox_dead", "Notifications that ran out of attempts.")
    dead.add_metric([], float(outbox.get("dead", 0)))

    return [states, oldest, histogram, depth, dead, *_table_families(catalog)]


def _le(bound: float) -> str:
    return f"{bound:g}" if bound < 1e6 else f"{bound:.1f}"


def _table_families(catalog: Any) -> list[Metric]:
    labels = ["project", "dataset"]
    families = {
        "files": GaugeMetricFamily("oreo_table_files", "Data files of a dataset's main table.", labels=labels),
        "small": GaugeMetricFamily(
            "oreo_table_small_files",
            "Files of a main table under OREO_SMALL_FILE_MB, when at least two (what OPTIMIZE compacts).",
            labels=labels,
        ),
        "bytes": GaugeMetricFamily("oreo_table_bytes", "Bytes of a main table's current files.", labels=labels),
        "staging": GaugeMetricFamily(
            "oreo_staging_bytes", "Bytes under a dataset's staging/ (change requests' staged tables).", labels=labels
        ),
        "live": GaugeMetricFamily(
            "oreo_live_edit_bytes", "Bytes under a dataset's live_edit/ (editing sessions).", labels=labels
        ),
        "vacuum": GaugeMetricFamily(
            "oreo_last_vacuum_timestamp_seconds",
            "Unix time of a main table's last VACUUM (its Delta log, or a maintain run that found nothing to "
            "delete), or of its creation when never vacuumed.",
            labels=labels,
        ),
    }
    for table in table_health(catalog):
        key = [table.project_id, table.dataset_id]
        families["files"].add_metric(key, float(table.files))
        families["small"].add_metric(key, float(table.small_files))
        families["bytes"].add_metric(key, float(table.size_bytes))
        families["staging"].add_metric(key, float(table.staging_bytes))
        families["live"].add_metric(key, float(table.live_edit_bytes))
        families["vacuum"].add_metric(key, table.vacuum_clock.timestamp())
    return list(families.values())


_collector = _CatalogCollector()
_registered = False
_register_lock = threading.Lock()


def register_collector() -> None:
    """Add the catalog collector to prometheus_client's default registry, once per process.

    The composition roots (the API's and the app's start) call it: ``core.metrics`` below
    serves the registry, and this module reads the catalog and the tables for it.
    """
    global _registered
    with _register_lock:
        if not _registered:
            REGISTRY.register(_collector)
            _registered = True


def refresh() -> None:
    """Forget the collector's cached scrape (tests, and a page that just changed what it reports)."""
    with _collector._lock:
        _collector._cached = None
