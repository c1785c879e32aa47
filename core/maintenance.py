"""Table maintenance (OPTIMIZE, VACUUM, checkpoints, stats) and cleanup of leftovers.

``maintain`` runs, in this order, the steps asked for on one dataset's ``main`` table:

1. **retention** (always): the table properties ``delta.logRetentionDuration`` and
   ``delta.deletedFileRetentionDuration`` are raised to the restore window
   (``OREO_RESTORE_WINDOW_DAYS``, default 90 days) when lower. Delta's defaults (30 and
   7 days) would otherwise drop the commits or files of versions inside the window. It
   commits only when a property is too low, so it is idempotent;
2. **optimize**: ``OPTIMIZE delta.`main``` (bin-packing small files), optionally
   ``ZORDER BY`` some columns; the data is unchanged, only its files. Files aim at
   ``engine.MAIN_FILE_BYTES``, so ``ZORDER BY row_id`` gives a table written before Oreo
   clustered main by ``row_id`` the layout new tables get, and small MERGEs skip files;
3. **vacuum**: ``VACUUM ... RETAIN <h> HOURS`` deletes files no version younger than
   the retention still uses. The default retention is the restore window
   (``vacuum_horizon_hours``); a shorter one is refused unless ``force`` says which
   versions stop being restorable. A ``DRY RUN`` first finds whether anything is
   deletable, so a vacuum with nothing to do creates no version;
4. **checkpoint**: a Delta log checkpoint, written by two table-property commits (see
   ``_checkpoint``; skipped when the last checkpoint is current).

Every input is checked before the first step (unknown dataset, role, zorder columns,
retention), so a refused run changes nothing and leaves no report. After the steps the
catalog is synced to the newest version (seed 002 section 8.D), a JSON report is written
to ``audit/maintenance/<run_id>.json`` of the dataset and a ``MaintenanceRun`` audit
event is recorded. A step that fails still leaves a report and an event (with
``error``) before the error is raised.

``cleanup`` removes what has expired (seed 002 section 8.C), across every dataset the
actor administers (all of them for a site admin or the command line's ``SYSTEM``):

* live-edit sessions: open sessions idle longer than the session TTL
  (``OREO_SESSION_TTL_HOURS``), submitted sessions whose change request is closed,
  and session folders without metadata older than the import TTL;
* ``staging/<cr_id>`` of merged, rejected or withdrawn requests, and staging folders
  with no catalog row once untouched for the import TTL (a submit writes its staging
  table before its catalog row, so a fresh one is never caught);
* ``imports/<upload_id>`` untouched for the import TTL (``OREO_IMPORT_TTL_HOURS``) that
  nothing uses. A dataset uses its source upload: the last upload made before the
  dataset was created (``core.datasets.create_dataset`` keeps it there); an open import
  change request uses its upload (``core.imports``).

``ttl_hours`` replaces both TTLs. A run spans datasets, so its report goes to
``$DELTA_DATA_ROOT/audit/cleanup/<run_id>.json``, with a ``CleanupRun`` audit event.
``dry_run`` lists what would go and deletes nothing (its report says so). Both
functions are safe from cron: a second run finds nothing to do, succeeds and says so.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import select

from core import audit, engine, reads, sessions
from core import metrics as oreo_metrics
from core.auth import Role, User, memberships, require_role
from core.catalog import Catalog, ChangeRequestRow, DatasetRow
from core.config import get_settings
from core.datasets import ROW_ID, get_dataset, layout_for, sync_dataset
from core.errors import ConflictError, EngineError, InvalidInput, NotFound, OreoError, PermissionDenied
from core.layout import ID_PATTERN, DatasetLayout, new_id, staging_owner
from core.sessions import SessionInfo
from core.storage import (
    Location,
    ObjectPath,
    is_object_uri,
    location,
    newest_mtime,
    object_files,
    remove_tree,
    sort_locations,
    storage_options_for,
    write_text_atomic,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Progress = Callable[[str, float], None]

LOG_RETENTION = "delta.logRetentionDuration"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"
# Delta collects min/max stats on the first 32 columns unless the table says otherwise;
# ZORDER BY a column without stats fails deep inside Spark.
_DEFAULT_INDEXED_COLUMNS = 32
_ZORDER_NOISE_CONF = "spark.databricks.io.skipping.mdc.addNoise"
# Delta's own defaults when a table does not set the properties.
_DELTA_DEFAULT_HOURS = {LOG_RETENTION: 30 * 24.0, DELETED_FILE_RETENTION: 7 * 24.0}
_UNIT_HOURS = {"second": 1 / 3600, "minute": 1 / 60, "hour": 1.0, "day": 24.0, "week": 168.0}
_INTERVAL_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(second|minute|hour|day|week)s?", re.IGNORECASE)


@dataclass(frozen=True)
class TableStats:
    """The current snapshot of a ``main`` table.

    ``small_files`` counts files under ``OREO_SMALL_FILE_MB`` (default 1 MiB, half
    of the 2 MiB files main is written in) when there are at least two of them: the ones
    OPTIMIZE would compact. A small table's one small file is not "small files": there is
    nothing to compact it with. ``versions`` is the newest version plus one.
    """

    files: int
    size_bytes: int
    small_files: int
    versions: int
    last_optimize: datetime | None
    last_vacuum: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "size_bytes": self.size_bytes,
            "small_files": self.small_files,
            "versions": self.versions,
            "last_optimize": _iso(self.last_optimize),
            "last_vacuum": _iso(self.last_vacuum),
        }


@dataclass(frozen=True, kw_only=True)
class MaintenanceRun(audit.AuditEvent):
    name: ClassVar[str] = "maintenance_run"
    run_id: str
    steps: list[str] = field(default_factory=list)
    versions_created: list[int] = field(default_factory=list)
    report: str = ""
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class CleanupRun(audit.AuditEvent):
    name: ClassVar[str] = "cleanup_run"
    run_id: str
    dry_run: bool
    sessions_removed: int
    staging_removed: int
    imports_removed: int
    report: str = ""


def vacuum_horizon_hours() -> float:
    """The default VACUUM retention: the restore window, in hours."""
    return float(get_settings().restore_window_days) * 24.0


def small_file_bytes() -> int:
    return get_settings().small_file_mb * 1024 * 1024


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _from_ms(ms: Any) -> datetime:
    return datetime.fromtimestamp(int(ms) / 1000, tz=UTC)


def _hours_text(hours: float) -> str:
    return f"{hours:g} h"


# ---------------------------------------------------------------- stats


def _delta_table(main: Location) -> Any:
    from deltalake import DeltaTable

    try:
        return DeltaTable(str(main), storage_options=storage_options_for(main))
    except Exception as exc:  # delta-rs raises TableNotFoundError, OSError... without a common base
        raise EngineError(f"could not read the Delta log of {main}: {str(exc).splitlines()[0]}") from exc


def _history(main: Location) -> list[dict[str, Any]]:
    """Commit infos of the table, newest first (delta-rs reads the log; no Spark)."""
    return list(_delta_table(main).history())


def _small_files(sizes: list[int], threshold: int) -> int:
    small = sum(1 for size in sizes if size < threshold)
    return small if small >= 2 else 0


def _stats(main: Location) -> TableStats:
    import pyarrow as pa

    table = _delta_table(main)
    adds = pa.table(table.get_add_actions(flatten=True))
    sizes = [int(s) for s in adds.column("size_bytes").to_pylist()] if adds.num_rows else []
    threshold = small_file_bytes()
    last: dict[str, datetime] = {}
    for commit in table.history():
        operation = str(commit.get("operation", ""))
        if operation in ("OPTIMIZE", "VACUUM END") and operation not in last and commit.get("timestamp"):
            last[operation] = _from_ms(commit["timestamp"])
    return TableStats(
        files=len(sizes),
        size_bytes=sum(sizes),
        small_files=_small_files(sizes, threshold),
        versions=int(table.version()) + 1,
        last_optimize=last.get("OPTIMIZE"),
        last_vacuum=last.get("VACUUM END"),
    )


def main_table_stats(main: Location) -> TableStats:
    """``table_stats`` of a ``main`` folder, with no permission check (``core.health``)."""
    return _stats(main)


def table_stats(catalog: Catalog, project_id: str, dataset_id: str, *, actor: User) -> TableStats:
    """Files, size, small files, versions and the last OPTIMIZE/VACUUM of a dataset's ``main``.

    Raises:
        NotFound: Unknown dataset.
        PermissionDenied: ``actor`` is not a member of the project.
    """
    info = get_dataset(catalog, project_id, dataset_id, actor=actor)
    return _stats(location(info.path))


def _size_doc(stats: TableStats) -> dict[str, int]:
    return {"files": stats.files, "size_bytes": stats.size_bytes, "small_files": stats.small_files}


def _data_files_on_disk(main: Location) -> int:
    """Files under ``main`` outside ``_delta_log`` (hidden checksum files left out)."""
    if isinstance(main, ObjectPath):
        objects = object_files(main)
        return sum(1 for p in objects if "_delta_log" not in p.key.split("/") and not p.name.startswith("."))
    count = 0
    for folder, dirs, files in os.walk(main):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        count += sum(1 for f in files if not f.startswith("."))
        del folder
    return count


# ---------------------------------------------------------------- checks


def _retention_hours(raw: str | None, prop: str) -> float | None:
    """Hours of a Delta ``interval ...`` property; None when unset or unreadable."""
    if raw is None:
        return _DELTA_DEFAULT_HOURS[prop]
    parts = _INTERVAL_PART.findall(raw)
    if not parts:
        return None
    return sum(float(n) * _UNIT_HOURS[unit.lower()] for n, unit in parts)


def _retention_changes(main: Location) -> dict[str, str]:
    """Retention properties below the restore window, with the value each should get."""
    config = dict(_delta_table(main).metadata().configuration)
    window_days = get_settings().restore_window_days
    wanted = f"interval {window_days} days"
    changes: dict[str, str] = {}
    for prop in (LOG_RETENTION, DELETED_FILE_RETENTION):
        hours = _retention_hours(config.get(prop), prop)
        if hours is None or hours < window_days * 24.0:
            changes[prop] = wanted
    return changes


def _check_zorder(main: Location, version: int | None, zorder: list[str]) -> list[str]:
    names = [c.name for c in reads.table_schema(main, version)]
    columns: list[str] = []
    for raw in zorder:
        column = str(raw).strip()
        if not column:
            raise InvalidInput("an empty column name in the ZORDER list", field="zorder")
        if column not in names:
            raise InvalidInput(
                f"cannot ZORDER BY unknown column {column!r}; columns are: {', '.join(names)}", field="zorder"
            )
        if column not in columns:
            columns.append(column)
    config = dict(_delta_table(main).metadata().configuration)
    if "delta.dataSkippingStatsColumns" not in config:
        indexed = int(config.get("delta.dataSkippingNumIndexedCols", _DEFAULT_INDEXED_COLUMNS))
        unindexed = [c for c in columns if indexed >= 0 and names.index(c) >= indexed]
        if unindexed:
            raise InvalidInput(
                f"cannot ZORDER BY column {unindexed[0]!r}: Delta keeps statistics only on the first {indexed} columns",
                field="zorder",
            )
    return columns


def _check_retain(retain_hours: float | None) -> float:
    if retain_hours is None:
        return vacuum_horizon_hours()
    try:
        hours = float(retain_hours)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"retention must be a number of hours, got {retain_hours!r}", field="retain_hours") from exc
    if math.isnan(hours) or math.isinf(hours) or hours < 0:
        raise InvalidInput(f"retention must be 0 hours or more, got {retain_hours!r}", field="retain_hours")
    return hours


def _unrestorable(main: Location, retain_hours: float) -> tuple[int, int, datetime] | None:
    """First and last version a VACUUM with this retention may break, and the cutoff.

    A version breaks when a later commit older than the cutoff removed one of its files;
    the newest commit older than the cutoff is still whole, so every version before it
    is at risk.
    """
    cutoff = _now() - timedelta(hours=retain_hours)
    history = _history(main)
    older = [int(c["version"]) for c in history if c.get("timestamp") and _from_ms(c["timestamp"]) < cutoff]
    if not older:
        return None
    first = min(int(c["version"]) for c in history)
    newest_old = max(older)
    if newest_old <= first:
        return None
    return first, newest_old - 1, cutoff


# How a caller says "do it anyway" for a short retention: the CLI's flag by default; a page
# passes its own words (its checkbox).
FORCE_HINT = "pass --force to do it anyway"


def _short_retention_message(
    project_id: str, dataset_id: str, main: Location, retain_hours: float, force_hint: str = FORCE_HINT
) -> str:
    window = get_settings().restore_window_days
    retain = _hours_text(retain_hours)
    at_risk = _unrestorable(main, retain_hours)
    if at_risk is None:
        return (
            f"retaining {retain} is shorter than the {window}-day restore window: versions of "
            f"{project_id}/{dataset_id} would stop being restorable {retain} after they are replaced; "
            f"{force_hint}"
        )
    first, last, cutoff = at_risk
    span = f"version {first}" if first == last else f"versions {first}–{last}"
    return (
        f"retaining {retain} would make {span} of {project_id}/{dataset_id} "
        f"(older than {cutoff:%Y-%m-%d %H:%M} UTC) unrestorable, inside the {window}-day restore window; "
        f"{force_hint}"
    )


# ---------------------------------------------------------------- steps


@contextmanager
def _spark_step(step: str, target: str) -> Iterator[None]:
    """Translate what Spark raises during ``step`` into Oreo's errors."""
    try:
        yield
    except OreoError:
        raise
    except engine.concurrency_exceptions() as exc:
        raise ConflictError(
            f"{step} of {target} collided with a concurrent commit and changed nothing; run it again"
        ) from exc
    except Exception as exc:  # py4j/gRPC errors share no base class
        raise EngineError(f"{step} of {target} failed: {str(exc).strip().splitlines()[0]}") from exc


@contextmanager
def _vacuum_session(commit: engine.CommitInfo, *, skip_check: bool) -> Iterator[SparkSession]:
    """A session for VACUUM; ``skip_check`` turns off Delta's retention check for it alone."""
    with engine.dml_session(commit) as spark:
        if not skip_check:
            yield spark
            return
        spark.conf.set(RETENTION_CHECK_CONF, "false")
        try:
            yield spark
        finally:
            spark.conf.unset(RETENTION_CHECK_CONF)


def _retain_sql(hours: float) -> str:
    return f"{hours:.6f}".rstrip("0").rstrip(".") or "0"


def _set_retention(main: Location, changes: dict[str, str], commit: engine.CommitInfo) -> None:
    props = ", ".join(f"{engine.spark_string(k)} = {engine.spark_string(v)}" for k, v in changes.items())
    with engine.commit_metadata(commit):
        engine.get_spark().sql(f"ALTER TABLE {engine.delta_ref(main)} SET TBLPROPERTIES ({props})")


def _optimize(main: Location, zorder: list[str], commit: engine.CommitInfo) -> dict[str, Any]:
    sql = f"OPTIMIZE {engine.delta_ref(main)}"
    if zorder:
        sql += " ZORDER BY (" + ", ".join(engine.spark_ident(c) for c in zorder) + ")"
    spark = engine.get_spark()
    # Files of main's target size, not OSS Delta's 1 GB: ZORDER BY row_id then leaves several
    # files of narrow row_id ranges, which a small MERGE skips (see engine.MAIN_FILE_BYTES).
    # Z-order adds a random byte to its sort key against skew; row_id is unique (no skew), and
    # the noise would let neighbouring files' row_id ranges overlap.
    confs = {engine.OPTIMIZE_MAX_FILE_CONF: str(engine.MAIN_FILE_BYTES)}
    if zorder == [ROW_ID]:
        confs[_ZORDER_NOISE_CONF] = "false"
    with engine.commit_metadata(commit):
        for key, value in confs.items():
            spark.conf.set(key, value)
        try:
            rows = spark.sql(sql).collect()
        finally:
            for key in confs:
                spark.conf.unset(key)
    metrics = rows[0]["metrics"].asDict() if rows and rows[0]["metrics"] is not None else {}
    return {
        "files_added": int(metrics.get("numFilesAdded") or 0),
        "files_removed": int(metrics.get("numFilesRemoved") or 0),
    }


def _vacuum(main: Location, retain_hours: float, skip_check: bool, commit: engine.CommitInfo) -> list[VacuumFile]:
    """VACUUM if its dry run lists a file to delete; returns the files it listed (none: no VACUUM, no version)."""
    with _vacuum_session(commit, skip_check=skip_check) as spark:
        files = _deletable_files(spark, main, retain_hours)
        if files:
            spark.sql(_vacuum_sql(main, retain_hours)).collect()
    return files


def _vacuum_sql(main: Location, retain_hours: float) -> str:
    return f"VACUUM {engine.delta_ref(main)} RETAIN {_retain_sql(retain_hours)} HOURS"


def _deletable_files(spark: SparkSession, main: Location, retain_hours: float) -> list[VacuumFile]:
    """The data files ``VACUUM ... RETAIN retain_hours HOURS`` would delete now, with their sizes.

    Delta's DRY RUN also lists folders it would remove because they are empty, such as
    ``_change_data`` once an earlier VACUUM deleted its change files. They hold no data:
    listed, a dry run showed a "file" the run then did not count as deleted, and a run with
    nothing else to delete committed VACUUM START and END for nothing. Both the dry run
    and the run go by this list, so they agree.
    """
    listed = [str(row[0]) for row in spark.sql(_vacuum_sql(main, retain_hours) + " DRY RUN").collect()]
    root = str(main).rstrip("/") + "/"
    files = []
    for listed_path in sorted(listed):
        local = _listed_location(listed_path)
        found = location(local)
        if found.is_dir():
            continue
        try:
            size = found.stat().st_size if is_object_uri(local) else os.path.getsize(local)
        except OSError:
            size = 0  # gone since the listing
        files.append(VacuumFile(path=local.removeprefix(root), size_bytes=size))
    return files


@dataclass(frozen=True)
class VacuumFile:
    """A data file VACUUM would delete: its path inside the table folder and its size."""

    path: str
    size_bytes: int


@dataclass(frozen=True)
class VacuumPlan:
    """What ``VACUUM ... RETAIN retain_hours HOURS`` would delete now; nothing is deleted."""

    retain_hours: float
    files: list[VacuumFile]
    unrestorable_versions: tuple[int, int] | None  # first and last version it would make unrestorable

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "retain_hours": self.retain_hours,
            "files": [{"path": f.path, "size_bytes": f.size_bytes} for f in self.files],
            "size_bytes": self.size_bytes,
            "unrestorable_versions": list(self.unrestorable_versions) if self.unrestorable_versions else [],
        }


def vacuum_dry_run(
    catalog: Catalog, project_id: str, dataset_id: str, *, actor: User, retain_hours: float | None = None
) -> VacuumPlan:
    """The files VACUUM would delete with ``retain_hours`` (default: the safe horizon), and their bytes.

    A dry run commits nothing and deletes nothing, so a short retention needs no force here;
    the plan says which versions it would make unrestorable.

    Raises:
        PermissionDenied: ``actor`` is not an admin of the project.
        InvalidInput: A negative or non-finite retention.
        EngineError: Spark or Delta failed.
    """
    require_role(catalog, actor, project_id, Role.ADMIN, action="maintain tables")
    info = get_dataset(catalog, project_id, dataset_id, actor=actor)
    main = location(info.path)
    hours = _check_retain(retain_hours)
    table_hours = _retention_hours(
        dict(_delta_table(main).metadata().configuration).get(DELETED_FILE_RETENTION), DELETED_FILE_RETENTION
    )
    commit = engine.new_commit(actor.username, "vacuum_dry_run")
    skip_check = table_hours is None or hours < table_hours
    step = _spark_step("VACUUM DRY RUN", f"{project_id}/{dataset_id}")
    with step, _vacuum_session(commit, skip_check=skip_check) as spark:
        files = _deletable_files(spark, main, hours)
    at_risk = _unrestorable(main, hours) if hours < vacuum_horizon_hours() else None
    return VacuumPlan(
        retain_hours=hours, files=files, unrestorable_versions=(at_risk[0], at_risk[1]) if at_risk else None
    )


def _listed_location(listed: str) -> str:
    """A path VACUUM listed, as ``str`` of its location: ``file:`` dropped, Spark's ``s3a://`` as ``s3://``."""
    if listed.startswith("s3a://"):
        return "s3://" + listed.removeprefix("s3a://")
    return listed.removeprefix("file:")


def _last_checkpoint(main: Location) -> int | None:
    marker = main / "_delta_log" / "_last_checkpoint"
    if not marker.is_file():
        return None
    try:
        return int(json.loads(marker.read_text())["version"])
    except (ValueError, KeyError, TypeError):
        return None


CHECKPOINT_INTERVAL = "delta.checkpointInterval"
CHECKPOINT_ACTION = "checkpoint"


def _checkpoint_is_current(main: Location) -> bool:
    """The last checkpoint is of the newest version, or of the one before it when the
    newest is the interval-restoring commit of an Oreo checkpoint (nothing to add)."""
    latest, existing = engine.latest_version(main), _last_checkpoint(main)
    if existing is None:
        return False
    if existing == latest:
        return True
    return existing == latest - 1 and engine.find_commit(main, existing, action=CHECKPOINT_ACTION) is not None


def _checkpoint(main: Location, commit: engine.CommitInfo) -> None:
    """A Delta log checkpoint, written with SQL alone, the same on embedded Spark and Spark Connect.

    Delta has no CHECKPOINT statement, and its ``DeltaLog`` API is a JVM handle that
    Spark Connect does not expose. A commit writes a checkpoint when its version is a
    multiple of the table's ``delta.checkpointInterval``, so the interval is set to 1
    (that property commit writes the checkpoint, synchronously), then put back: unset,
    or set to the value it had. Both commits change no row and carry ``commit``'s
    userMetadata (action ``checkpoint``); History lists them as maintenance. The
    checkpoint is therefore of the newest version but one.
    """
    spark = engine.get_spark()
    ref = engine.delta_ref(main)
    before = {str(r[0]): str(r[1]) for r in spark.sql(f"SHOW TBLPROPERTIES {ref}").collect()}.get(CHECKPOINT_INTERVAL)
    key = engine.spark_string(CHECKPOINT_INTERVAL)
    restore = (
        f"ALTER TABLE {ref} UNSET TBLPROPERTIES ({key})"
        if before is None
        else f"ALTER TABLE {ref} SET TBLPROPERTIES ({key} = {engine.spark_string(before)})"
    )
    with engine.commit_metadata(commit):
        spark.sql(f"ALTER TABLE {ref} SET TBLPROPERTIES ({key} = '1')").collect()
        spark.sql(restore).collect()


# ---------------------------------------------------------------- maintain


def _write_report(folder: Location, run_id: str, report: dict[str, Any]) -> Location:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{run_id}.json"
    report["report"] = str(path)
    write_text_atomic(path, json.dumps(report, indent=2, default=str))  # a reader never sees half a report
    return path


@dataclass
class _MaintenanceState:
    """What one ``maintain`` run knows and has done so far, shared by its steps."""

    layout: DatasetLayout
    actor: User
    main: Location
    planned: list[str]
    report_progress: Progress
    run_id: str
    started: datetime
    before: TableStats
    version_before: int
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    last_commit: engine.CommitInfo | None = None

    @property
    def project_id(self) -> str:
        return self.layout.project_id

    @property
    def dataset_id(self) -> str:
        return self.layout.dataset_id

    @property
    def target(self) -> str:
        return f"{self.project_id}/{self.dataset_id}"

    def starting(self, message: str, name: str) -> None:
        self.report_progress(message, self.planned.index(name) / (len(self.planned) + 1))

    def done(self, label: str, name: str) -> None:
        self.report_progress(f"{label} done", (self.planned.index(name) + 1) / (len(self.planned) + 1))

    def committed(self, commit: engine.CommitInfo, start: int) -> int:
        """The newest version now; ``commit`` is the last one made when it added a version."""
        end = engine.latest_version(self.main)
        if end > start:
            self.last_commit = commit
        return end


def _check_maintenance(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    *,
    actor: User,
    optimize: bool,
    zorder: list[str] | None,
    vacuum: bool,
    retain_hours: float | None,
    force: bool,
    force_hint: str,
    checkpoint: bool,
) -> tuple[Location, list[str], float]:
    """The ``main`` folder, the checked zorder columns and the VACUUM retention, or why not."""
    require_role(catalog, actor, project_id, Role.ADMIN, action="maintain tables")
    info = get_dataset(catalog, project_id, dataset_id, actor=actor)
    main = location(info.path)
    if not (optimize or vacuum or checkpoint):
        raise InvalidInput(
            "nothing to do: choose at least one step (optimize, zorder, vacuum or checkpoint)", field="steps"
        )
    if not vacuum and (retain_hours is not None or force):
        raise InvalidInput("a retention and force apply only to vacuum", field="retain_hours")
    zorder_columns = _check_zorder(main, info.version, list(zorder or [])) if optimize and zorder else []
    hours = _check_retain(retain_hours) if vacuum else 0.0
    if vacuum and hours < vacuum_horizon_hours() and not force:
        message = _short_retention_message(project_id, dataset_id, main, hours, force_hint)
        raise InvalidInput(message, field="retain_hours")
    return main, zorder_columns, hours


def _retention_step(run: _MaintenanceState) -> None:
    """Raise the retention properties to the restore window where they are lower."""
    run.starting("checking retention properties", "retention")
    changes = _retention_changes(run.main)
    if changes:
        commit = engine.new_commit(run.actor.username, "set_retention", run_id=run.run_id)
        with _spark_step("setting the retention properties", run.target):
            _set_retention(run.main, changes, commit)
        run.last_commit = commit
    run.steps["retention"] = {"changed": changes, "window_days": get_settings().restore_window_days}
    run.done("retention", "retention")


def _optimize_step(run: _MaintenanceState, zorder_columns: list[str]) -> None:
    """OPTIMIZE ``main`` (ZORDER BY ``zorder_columns`` when there are some)."""
    run.starting("OPTIMIZE" + (f" ZORDER BY {', '.join(zorder_columns)}" if zorder_columns else ""), "optimize")
    start, first = engine.latest_version(run.main), _stats(run.main)
    commit = engine.new_commit(run.actor.username, "optimize", run_id=run.run_id, zorder=zorder_columns)
    with oreo_metrics.timed_operation("optimize"), _spark_step("OPTIMIZE", run.target):
        metrics = _optimize(run.main, zorder_columns, commit)
    end = run.committed(commit, start)
    run.steps["optimize"] = {
        "zorder": zorder_columns,
        **metrics,
        "before": _size_doc(first),
        "after": _size_doc(_stats(run.main)),
        "versions": list(range(start + 1, end + 1)),
    }
    run.done("OPTIMIZE", "optimize")


def _vacuum_step(run: _MaintenanceState, hours: float, force: bool) -> None:
    """VACUUM ``main`` retaining ``hours``, counting the files it deleted from disk."""
    main = run.main
    run.starting(f"VACUUM retaining {_hours_text(hours)}", "vacuum")
    start, first, on_disk = engine.latest_version(main), _stats(main), _data_files_on_disk(main)
    at_risk = _unrestorable(main, hours) if hours < vacuum_horizon_hours() else None
    table_hours = _retention_hours(
        dict(_delta_table(main).metadata().configuration).get(DELETED_FILE_RETENTION), DELETED_FILE_RETENTION
    )
    commit = engine.new_commit(run.actor.username, "vacuum", run_id=run.run_id, retain_hours=hours)
    with oreo_metrics.timed_operation("vacuum"), _spark_step("VACUUM", run.target):
        deletable = len(_vacuum(main, hours, table_hours is None or hours < table_hours, commit))
    end = run.committed(commit, start)
    run.steps["vacuum"] = {
        "retain_hours": hours,
        "forced": bool(force and hours < vacuum_horizon_hours()),
        "files_deleted": on_disk - _data_files_on_disk(main),
        "files_deletable": deletable,
        "unrestorable_versions": [at_risk[0], at_risk[1]] if at_risk else [],
        "before": {**_size_doc(first), "files_on_disk": on_disk},
        "after": {**_size_doc(_stats(main)), "files_on_disk": _data_files_on_disk(main)},
        "versions": list(range(start + 1, end + 1)),
    }
    run.done("VACUUM", "vacuum")


def _checkpoint_step(run: _MaintenanceState) -> None:
    """Write a log checkpoint unless the last one is current, and check that its file is there."""
    main = run.main
    run.starting("writing a checkpoint", "checkpoint")
    start = engine.latest_version(main)
    if _checkpoint_is_current(main):
        run.steps["checkpoint"] = {"version": _last_checkpoint(main), "written": False, "versions": []}
    else:
        commit = engine.new_commit(run.actor.username, CHECKPOINT_ACTION, run_id=run.run_id)
        with _spark_step("checkpoint", run.target):
            _checkpoint(main, commit)
        end = run.committed(commit, start)
        written = _last_checkpoint(main)
        if (
            written is None
            or written <= start
            or not any((main / "_delta_log").glob(f"{written:020d}.checkpoint*.parquet"))
        ):
            raise EngineError(f"checkpoint of {run.target} wrote no checkpoint file")
        run.steps["checkpoint"] = {"version": written, "written": True, "versions": list(range(start + 1, end + 1))}
    run.done("checkpoint", "checkpoint")


def _sync_after_maintenance(
    catalog: Catalog, run: _MaintenanceState, version_after: int, error: str | None
) -> str | None:
    """Sync the catalog to the newest version when a step committed; the run's error, or the sync's."""
    if run.last_commit is not None and version_after > run.version_before:
        try:
            sync_dataset(catalog, run.project_id, run.dataset_id, run.last_commit, version=version_after)
        except OreoError as exc:
            error = error or f"catalog sync failed: {exc}"
    return error


def _maintenance_report(run: _MaintenanceState, version_after: int, error: str | None) -> dict[str, Any]:
    steps = run.steps
    did_something = (
        bool(steps.get("retention", {}).get("changed"))
        or bool(steps.get("optimize", {}).get("files_removed"))
        or bool(steps.get("vacuum", {}).get("files_deleted"))
        or bool(steps.get("checkpoint", {}).get("written"))
    )
    return {
        "run_id": run.run_id,
        "kind": "maintenance",
        "project": run.project_id,
        "dataset": run.dataset_id,
        "actor": run.actor.username,
        "started_at": run.started.isoformat(),
        "finished_at": _now().isoformat(),
        "steps": steps,
        "before": run.before.to_json(),
        "after": _stats(run.main).to_json(),
        "version_before": run.version_before,
        "version_after": version_after,
        "versions_created": list(range(run.version_before + 1, version_after + 1)),
        # A step that committed a version did something, whatever it changed (no report says both).
        "nothing_to_do": error is None and not did_something and version_after == run.version_before,
        "error": error,
    }


def _finish_maintenance(catalog: Catalog, run: _MaintenanceState, error: str | None) -> dict[str, Any]:
    """Sync the catalog, write the report and record the ``MaintenanceRun`` event, whatever happened."""
    version_after = engine.latest_version(run.main)
    error = _sync_after_maintenance(catalog, run, version_after, error)
    report = _maintenance_report(run, version_after, error)
    path = _write_report(run.layout.maintenance_reports(), run.run_id, report)
    with catalog.session() as s:
        audit.record(
            s,
            MaintenanceRun(
                actor=run.actor.username,
                project_id=run.project_id,
                dataset_id=run.dataset_id,
                run_id=run.run_id,
                steps=list(run.steps),
                versions_created=report["versions_created"],
                report=str(path),
                error=error,
            ),
        )
    return report


def maintain(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    *,
    actor: User,
    optimize: bool = False,
    zorder: list[str] | None = None,
    vacuum: bool = False,
    retain_hours: float | None = None,
    force: bool = False,
    force_hint: str = FORCE_HINT,
    checkpoint: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run OPTIMIZE, VACUUM and/or a checkpoint on a dataset's ``main`` (see the module docstring).

    Args:
        catalog: The catalog.
        project_id: The project.
        dataset_id: The dataset.
        actor: Must be an admin of the project.
        optimize: Compact small files.
        zorder: Also cluster by these columns (implies ``optimize``).
        vacuum: Delete files older than the retention that no newer version uses.
        retain_hours: VACUUM retention; default ``vacuum_horizon_hours()``.
        force: Allow a retention shorter than the restore window.
        force_hint: How the refusal of a short retention tells the caller to force it.
        checkpoint: Write a Delta log checkpoint.
        progress: Called with a message and a fraction in [0, 1] between steps.

    Returns:
        The JSON report, also written to ``audit/maintenance/<run_id>.json``.

    Raises:
        InvalidInput: No step asked for, an unknown zorder column, a bad retention.
        PermissionDenied: ``actor`` is not an admin of the project.
        NotFound: Unknown dataset.
        ConflictError: A step collided with a concurrent commit (the run can be repeated).
        EngineError: Spark or Delta failed.
    """
    report_progress = progress or (lambda message, fraction: None)
    layout = layout_for(project_id, dataset_id)
    optimize = optimize or bool(zorder)
    main, zorder_columns, hours = _check_maintenance(
        catalog, project_id, dataset_id, actor=actor, optimize=optimize, zorder=zorder, vacuum=vacuum,
        retain_hours=retain_hours, force=force, force_hint=force_hint, checkpoint=checkpoint,
    )  # fmt: skip
    asked = (("optimize", optimize), ("vacuum", vacuum), ("checkpoint", checkpoint))
    planned = ["retention"] + [name for name, on in asked if on]
    run = _MaintenanceState(
        layout, actor, main, planned, report_progress,
        run_id=new_id("mnt"), started=_now(), before=_stats(main), version_before=engine.latest_version(main),
    )  # fmt: skip
    error: str | None = None
    try:
        _retention_step(run)
        if optimize:
            _optimize_step(run, zorder_columns)
        if vacuum:
            _vacuum_step(run, hours, force)
        if checkpoint:
            _checkpoint_step(run)
    except OreoError as exc:
        error = str(exc)
        raise
    finally:
        report = _finish_maintenance(catalog, run, error)
    report_progress("nothing to do" if report["nothing_to_do"] else "done", 1.0)
    return report


# ---------------------------------------------------------------- cleanup


@dataclass(frozen=True)
class _Removal:
    kind: str  # "session", "staging" or "import"
    layout: DatasetLayout
    ident: str
    reason: str

    @property
    def label(self) -> str:
        return f"{self.layout.project_id}/{self.layout.dataset_id}/{self.ident}"

    @property
    def path(self) -> Location:
        if self.kind == "session":
            return self.layout.session_dir(self.ident)
        if self.kind == "staging":
            return self.layout.staging_root / self.ident  # a request's or one of its revisions' folder
        return self.layout.upload(self.ident)


def _touched(path: Location) -> datetime:
    """When anything in ``path`` last changed (newest mtime of it and everything below)."""
    if isinstance(path, ObjectPath):
        return datetime.fromtimestamp(newest_mtime(path), tz=UTC)
    newest = path.stat().st_mtime
    for folder, _dirs, files in os.walk(path):
        newest = max(newest, Path(folder).stat().st_mtime)
        for name in files:
            try:
                newest = max(newest, (Path(folder) / name).stat().st_mtime)
            except FileNotFoundError:  # removed while we look
                continue
    return datetime.fromtimestamp(newest, tz=UTC)


def _children(folder: Location) -> list[Location]:
    """Sub-folders named like Oreo ids (anything else is not ours to judge)."""
    if not folder.is_dir():
        return []
    return sort_locations([p for p in folder.iterdir() if p.is_dir() and ID_PATTERN.fullmatch(p.name)])


def _expired_sessions(
    layout: DatasetLayout, cr_states: dict[str, str], now: datetime, session_ttl: timedelta, orphan_ttl: timedelta
) -> list[_Removal]:
    found: list[_Removal] = []
    for folder in _children(layout.live_edit_root):
        meta = folder / "metadata.json"
        try:
            info = SessionInfo(**json.loads(meta.read_text()))
        except (OSError, ValueError, TypeError):
            if now - _touched(folder) > orphan_ttl:
                found.append(_Removal("session", layout, folder.name, "no session metadata"))
            continue
        if info.state == "open":
            if now - datetime.fromisoformat(info.last_activity) > session_ttl:
                found.append(_Removal("session", layout, folder.name, "expired"))
        elif info.cr_id is None or cr_states.get(info.cr_id, "missing") not in _IN_REVIEW:
            found.append(_Removal("session", layout, folder.name, f"change request {info.cr_id} is closed"))
    return found


# Change request states whose staging tables and session are kept (core.change_requests.IN_REVIEW).
_IN_REVIEW = ("open", "changes_requested")


def _leftover_staging(
    layout: DatasetLayout, cr_states: dict[str, str], now: datetime, orphan_ttl: timedelta
) -> list[_Removal]:
    found: list[_Removal] = []
    for folder in _children(layout.staging_root):
        state = cr_states.get(staging_owner(folder.name))  # every revision's table belongs to its request
        if state is None:
            if now - _touched(folder) > orphan_ttl:
                found.append(_Removal("staging", layout, folder.name, "no change request"))
        elif state not in _IN_REVIEW:
            found.append(_Removal("staging", layout, folder.name, f"change request {state}"))
    return found


def _orphan_imports(
    layout: DatasetLayout, created_at: datetime, now: datetime, ttl: timedelta, in_review: set[str]
) -> list[_Removal]:
    uploads = [(folder, _touched(folder)) for folder in _children(layout.imports_root) if folder.name not in in_review]
    earlier = [(t, folder.name) for folder, t in uploads if t <= created_at]
    source = max(earlier)[1] if earlier else None
    return [
        _Removal("import", layout, folder.name, "orphan upload")
        for folder, touched in uploads
        if folder.name != source and now - touched > ttl
    ]


# The longest TTL a cleanup takes: ten years (a longer one would overflow a date).
MAX_TTL_HOURS = 24 * 365 * 10


def _check_ttl(ttl_hours: float | None) -> float | None:
    if ttl_hours is None:
        return None
    try:
        hours = float(ttl_hours)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"TTL must be a number of hours, got {ttl_hours!r}", field="ttl_hours") from exc
    if math.isnan(hours) or math.isinf(hours) or hours < 0:
        raise InvalidInput(f"TTL must be 0 hours or more, got {ttl_hours!r}", field="ttl_hours")
    if hours > MAX_TTL_HOURS:
        raise InvalidInput(
            f"TTL must be at most {MAX_TTL_HOURS:,} hours (ten years), got {ttl_hours!r}", field="ttl_hours"
        )
    return hours


def _cleanup_scope(catalog: Catalog, actor: User) -> list[DatasetRow]:
    """Datasets ``actor`` may clean: all for a site admin, else those of projects it administers."""
    admin_of = None if actor.site_admin else {p for p, r in memberships(catalog, actor).items() if r == Role.ADMIN}
    if admin_of is not None and not admin_of:
        raise PermissionDenied(
            f"{actor.username!r} cannot run cleanup: it needs to be a site admin or an admin of a project",
            user=actor.username,
            required=Role.ADMIN.value,
        )
    with catalog.session() as s:
        rows = list(s.scalars(select(DatasetRow).order_by(DatasetRow.project_id, DatasetRow.dataset_id)))
        s.expunge_all()
    return [r for r in rows if admin_of is None or r.project_id in admin_of]


def _requests_in_review(catalog: Catalog) -> tuple[dict[str, str], set[str]]:
    """The state of every change request, and the uploads of those in review."""
    with catalog.session() as s:
        requests = list(s.scalars(select(ChangeRequestRow)))
        cr_states = {r.id: r.state for r in requests}
        in_review = {r.upload_id for r in requests if r.upload_id and r.state in _IN_REVIEW}
    return cr_states, in_review


def _find_removals(
    catalog: Catalog,
    scope: list[DatasetRow],
    now: datetime,
    session_ttl: timedelta,
    import_ttl: timedelta,
    report_progress: Progress,
) -> list[_Removal]:
    """Expired sessions, leftover staging tables and orphan imports of each dataset in ``scope``."""
    cr_states, in_review = _requests_in_review(catalog)
    removals: list[_Removal] = []
    for i, row in enumerate(scope):
        report_progress(f"checking {row.project_id}/{row.dataset_id}", i / (len(scope) + 1))
        layout = layout_for(row.project_id, row.dataset_id)
        removals += _expired_sessions(layout, cr_states, now, session_ttl, import_ttl)
        removals += _leftover_staging(layout, cr_states, now, import_ttl)
        removals += _orphan_imports(layout, row.created_at, now, import_ttl, in_review)
    return removals


def _remove(catalog: Catalog, removals: list[_Removal], *, actor: User) -> list[_Removal]:
    """Delete each folder (a session through ``discard_session``); the removals that were done."""
    kept: list[Any] = []
    for item in removals:
        if item.kind == "session" and (item.path / "metadata.json").is_file():
            try:
                sessions.discard_session(catalog, item.ident, actor=actor, reason=item.reason)
            except NotFound:  # discarded meanwhile
                pass
            except ConflictError:  # submitted or reopened meanwhile: it is a request's now
                kept.append(item)
        else:
            remove_tree(item.path)
    return [item for item in removals if item not in kept]


def _cleanup_report(
    run_id: str,
    actor: User,
    dry_run: bool,
    started: datetime,
    ttls: tuple[timedelta, timedelta],
    scope: list[DatasetRow],
    removals: list[_Removal],
) -> dict[str, Any]:
    session_ttl, import_ttl = ttls

    def labels(kind: str) -> list[str]:
        return [r.label for r in removals if r.kind == kind]

    return {
        "run_id": run_id,
        "kind": "cleanup",
        "actor": actor.username,
        "dry_run": dry_run,
        "started_at": started.isoformat(),
        "finished_at": _now().isoformat(),
        "session_ttl_hours": session_ttl.total_seconds() / 3600,
        "import_ttl_hours": import_ttl.total_seconds() / 3600,
        "datasets_checked": [f"{r.project_id}/{r.dataset_id}" for r in scope],
        "sessions_removed": labels("session"),
        "staging_removed": labels("staging"),
        "imports_removed": labels("import"),
        "details": [{"kind": r.kind, "path": r.label, "reason": r.reason} for r in removals],
        "nothing_to_do": not removals,
    }


def _record_cleanup(catalog: Catalog, report: dict[str, Any], path: Location, *, actor: User) -> None:
    with catalog.session() as s:
        audit.record(
            s,
            CleanupRun(
                actor=actor.username,
                run_id=report["run_id"],
                dry_run=report["dry_run"],
                sessions_removed=len(report["sessions_removed"]),
                staging_removed=len(report["staging_removed"]),
                imports_removed=len(report["imports_removed"]),
                report=str(path),
            ),
        )


def cleanup(
    catalog: Catalog,
    *,
    actor: User,
    ttl_hours: float | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Remove expired sessions, closed requests' staging tables and orphan imports.

    Args:
        catalog: The catalog.
        actor: A site admin (``SYSTEM`` at the command line) cleans every dataset; an
            admin of some projects cleans only those.
        ttl_hours: Replaces the session TTL and the import TTL for this run.
        dry_run: List what would be removed; delete nothing.
        progress: Called with a message and a fraction in [0, 1] per dataset.

    Returns:
        The report: ``sessions_removed``, ``staging_removed``, ``imports_removed`` (as
        ``project/dataset/id``), ``details`` with a reason each, ``dry_run``,
        ``nothing_to_do``, ``run_id`` and the report path.

    Raises:
        InvalidInput: A negative TTL.
        PermissionDenied: ``actor`` administers no project.
    """
    report_progress = progress or (lambda message, fraction: None)
    ttl = _check_ttl(ttl_hours)
    scope = _cleanup_scope(catalog, actor)
    settings = get_settings()
    session_ttl = timedelta(hours=ttl if ttl is not None else settings.session_ttl_hours)
    import_ttl = timedelta(hours=ttl if ttl is not None else settings.import_ttl_hours)
    run_id = new_id("cln")
    started = now = _now()
    removals = _find_removals(catalog, scope, now, session_ttl, import_ttl, report_progress)
    if not dry_run:
        report_progress(f"removing {len(removals)} folder(s)", len(scope) / (len(scope) + 1))
        removals = _remove(catalog, removals, actor=actor)
    report = _cleanup_report(run_id, actor, dry_run, started, (session_ttl, import_ttl), scope, removals)
    path = _write_report(settings.data_root / "audit" / "cleanup", run_id, report)
    _record_cleanup(catalog, report, path, actor=actor)
    report_progress("nothing to do" if not removals else ("dry run done" if dry_run else "done"), 1.0)
    return report
