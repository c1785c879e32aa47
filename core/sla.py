"""Seed 004's service levels over the last 24 hours, as the Admin page shows them.

Prometheus histograms live in one process and start from zero at every restart, so the
figures here come from what outlives a process:

* page reads, import writes and approval outcomes: hourly tallies that every process
  keeps in memory and writes (at most every ``FLUSH_S`` seconds, and at exit) to
  ``$DELTA_DATA_ROOT/logs/sla/<hour>-<pid>-<token>.json``; a figure sums the files of the
  hours asked for, over every process and restart. Tallies older than two days are removed;
* open requests' ages: the catalog;
* days since the last VACUUM and the small-file ratio: each ``main`` table's Delta log,
  read once per table version, and the audit log's maintenance runs (a VACUUM that found
  nothing to delete commits nothing, but it ran: ``table_health``);
* the engine's state: this process's shared session (``core.engine.engine_status``).

``core.metrics`` exports the same quantities to Prometheus; ``monitoring/prometheus/alerts/
oreo.yml`` alerts on the same thresholds (``TARGETS``).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import logs
from core.storage import Location, ObjectPath, tree_bytes

if TYPE_CHECKING:
    from core.auth import User
    from core.catalog import Catalog

# Upper bounds (seconds) of the page-read latency buckets, shared with core.metrics.
READ_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FLUSH_S = 10.0
KEEP_HOURS = 48
SLA_FOLDER = "sla"
APPROVAL_OUTCOMES = ("merged", "conflict", "validation_failed", "refused", "failed")

# Seed 004's targets (the alert rules use the same numbers).
READ_P95_MAX_S = 5.0
IMPORT_MIN_ROWS_PER_S = 1000.0
VACUUM_MAX_DAYS = 8.0
SMALL_FILE_RATIO_MAX = 0.5
SMALL_FILE_MIN_FILES = 10  # a table of a few files has nothing worth compacting
OPEN_REQUEST_MAX_DAYS = 7


# ---------------------------------------------------------------- hourly tallies


@dataclass
class _Tally:
    read_buckets: list[int] = field(default_factory=lambda: [0] * (len(READ_BUCKETS) + 1))  # the last is +Inf
    read_seconds: float = 0.0
    import_rows: int = 0
    import_seconds: float = 0.0
    approvals: dict[str, int] = field(default_factory=dict)

    def add(self, other: dict[str, Any]) -> None:
        buckets = list(other.get("read_buckets") or [])
        if len(buckets) == len(self.read_buckets):
            self.read_buckets = [a + int(b) for a, b in zip(self.read_buckets, buckets, strict=True)]
        self.read_seconds += float(other.get("read_seconds") or 0)
        self.import_rows += int(other.get("import_rows") or 0)
        self.import_seconds += float(other.get("import_seconds") or 0)
        for outcome, count in (other.get("approvals") or {}).items():
            self.approvals[outcome] = self.approvals.get(outcome, 0) + int(count)

    def to_json(self) -> dict[str, Any]:
        return {
            "read_buckets": self.read_buckets,
            "read_seconds": self.read_seconds,
            "import_rows": self.import_rows,
            "import_seconds": self.import_seconds,
            "approvals": self.approvals,
        }


_TOKEN = secrets.token_hex(4)  # a pid can come back after a restart within the hour
_lock = threading.Lock()
_tallies: dict[tuple[Path, str], _Tally] = {}  # (sla folder, hour) -> this process's tally
_dirty: set[tuple[Path, str]] = set()
_last_flush = time.monotonic()


def _hour(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%d%H")


def sla_dir() -> Path:
    return logs.log_dir() / SLA_FOLDER


def _tally() -> tuple[_Tally, bool]:
    """This hour's tally of this process (the caller holds ``_lock``), and whether a flush is due."""
    key = (sla_dir(), _hour(datetime.now(UTC)))
    tally = _tallies.get(key)
    if tally is None:
        tally = _tallies[key] = _Tally()
    _dirty.add(key)
    return tally, time.monotonic() - _last_flush >= FLUSH_S


def record_read(seconds: float) -> None:
    """One page read that took ``seconds``."""
    with _lock:
        tally, due = _tally()
        index = next((i for i, bound in enumerate(READ_BUCKETS) if seconds <= bound), len(READ_BUCKETS))
        tally.read_buckets[index] += 1
        tally.read_seconds += seconds
    if due:
        flush()


def record_import(rows: int, seconds: float) -> None:
    """An import that wrote ``rows`` rows to its staging table in ``seconds``."""
    with _lock:
        tally, due = _tally()
        tally.import_rows += int(rows)
        tally.import_seconds += float(seconds)
    if due:
        flush()


def record_approval(outcome: str) -> None:
    """One approval that ended as ``outcome`` (one of ``APPROVAL_OUTCOMES``)."""
    with _lock:
        tally, due = _tally()
        tally.approvals[outcome] = tally.approvals.get(outcome, 0) + 1
    if due:
        flush()


def flush() -> None:
    """Write this process's changed tallies now (each to its own file, atomically); drop old hours."""
    global _last_flush
    with _lock:
        dirty = [(key, _tallies[key].to_json()) for key in _dirty]
        _dirty.clear()
        _last_flush = time.monotonic()
        current = _hour(datetime.now(UTC))
        for key in [k for k in _tallies if k[1] != current]:
            del _tallies[key]  # its last counts are in ``dirty`` or already written: a past hour gets no more
    for (folder, hour), doc in dirty:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{hour}-{os.getpid()}-{_TOKEN}.json"
            temp = path.with_name(f".{path.name}.tmp")
            temp.write_text(json.dumps(doc))
            temp.replace(path)
        except OSError:  # a full or read-only disk must not fail a page read
            continue
        _prune(folder)


def _prune(folder: Path) -> None:
    oldest = _hour(datetime.now(UTC) - timedelta(hours=KEEP_HOURS))
    for path in folder.glob("*.json"):
        if path.name[:10] < oldest:
            path.unlink(missing_ok=True)


atexit.register(flush)


def tallies(hours: int = 24, *, now: datetime | None = None) -> _Tally:
    """The sum of every process's tallies for the last ``hours`` hours (this hour included)."""
    flush()
    now = now or datetime.now(UTC)
    first = _hour(now - timedelta(hours=hours - 1))
    total = _Tally()
    folder = sla_dir()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if path.name[:10] < first:
            continue
        try:
            total.add(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a file another process is replacing right now
    return total


def quantile(q: float, buckets: list[int]) -> float | None:
    """The ``q`` quantile of bucketed counts, interpolated within its bucket as Prometheus does."""
    count = sum(buckets)
    if count == 0:
        return None
    rank = q * count
    seen = 0
    lower = 0.0
    for bound, n in zip((*READ_BUCKETS, math.inf), buckets, strict=True):
        if seen + n >= rank and n > 0:
            if math.isinf(bound):
                return READ_BUCKETS[-1]  # beyond the last bound: as histogram_quantile, its lower end
            return lower + (bound - lower) * (rank - seen) / n
        seen += n
        lower = bound
    return READ_BUCKETS[-1]


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
    from core import maintenance

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
    from sqlalchemy import select

    from core.catalog import AuditEventRow
    from core.maintenance import MaintenanceRun

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
    from sqlalchemy import select

    from core.catalog import DatasetRow
    from core.datasets import layout_for
    from core.errors import OreoError

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
    from sqlalchemy import select

    from core.catalog import ChangeRequestRow

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
    from core import auth, engine

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
