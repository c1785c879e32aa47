"""Table history: the versions of ``main``, previews and diffs between them, restore and export.

Everything but restore reads without Spark:

* the version list comes straight from the JSON commits in ``_delta_log`` (1,000
  versions list in milliseconds), with each Oreo commit's userMetadata (actor, cr_id,
  reason) and Delta's operation metrics;
* whether a version can be restored comes from replaying the log's add/remove actions
  (JSON commits, or a Parquet checkpoint where older commits were cleaned up) and
  checking that every data file and deletion-vector file of its snapshot still exists.
  A version whose commit is gone, or whose files VACUUM deleted, is never offered;
* previews, diffs and exports read a version through DuckDB's ``delta_scan``.

A diff between versions compares the two snapshots on ``row_id`` (``core.diff``). When
the change data feed covers the whole range, only the rows it names as changed are
compared: the row_ids in the commits' ``_change_data`` files, or in the files a commit
without them added or removed. That set can only be larger than the rows that really
changed, so both ways give the same diff; the feed just makes it cheaper.

Restore is one Spark ``RESTORE TABLE`` commit by a project admin, with a reason, run
with Oreo's merge transaction id (``core.merge``) and checked afterwards: if its commit
is not in the log, the table moved and the caller is told to try again. Delta 4.4's
RESTORE does not record that transaction id in its commit, so against a concurrent
approval it relies on Delta's own conflict detection: a MERGE whose snapshot predates
the restore fails (the restore removed files it read) and is retried after a fresh
conflict check, which then compares values with the restored version. A MERGE that
checked before the restore but read its snapshot after it is not caught here; closing
that gap needs a check in ``core.merge``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import select

from core import audit, damage, diff, disk, engine, merge, metrics, reads
from core.auth import Role, User, require_role
from core.catalog import AuditEventRow, Catalog, ChangeRequestRow
from core.datasets import get_dataset, layout_for, stable_order, sync_dataset
from core.errors import ConflictError, EngineError, InvalidInput, NotFound, OreoError, TableDamaged
from core.storage import Location, ObjectPath, arrow_target, is_object_uri, local_file, location, object_files
from core.writer import writing

RESTORE_ACTION = "restore"
EXPORT_FORMATS: dict[str, Literal["parquet", "csv"]] = {".parquet": "parquet", ".csv": "csv"}
CURRENT = "the current version"
LOG_CLEANED = "its log was cleaned up"
VACUUMED = "its data files were vacuumed"

# Delta's per-operation metric names for the rows a commit inserted, updated and deleted.
_ROW_METRICS: dict[str, tuple[str, ...]] = {
    "rows_inserted": ("numTargetRowsInserted", "numOutputRows"),
    "rows_updated": ("numTargetRowsUpdated", "numUpdatedRows"),
    "rows_deleted": ("numTargetRowsDeleted", "numDeletedRows"),
}
_INSERTING_OPERATIONS = frozenset({"WRITE", "CREATE TABLE AS SELECT", "REPLACE TABLE AS SELECT", "STREAMING UPDATE"})


# What a commit was, as a user reads a table's history: a change request's MERGE (an edit
# or an import), the table's creation, a restore, or maintenance that changes no row.
VersionKind = Literal["change request", "import", "create", "restore", "maintenance", "other"]
MAINTENANCE_OPERATIONS = frozenset(
    {
        "OPTIMIZE",
        "VACUUM START",
        "VACUUM END",
        "SET TBLPROPERTIES",
        "UNSET TBLPROPERTIES",
        "UPGRADE PROTOCOL",
        "REORG",
        "ADD CONSTRAINT",
        "DROP CONSTRAINT",
        "CHANGE COLUMN",
        "ADD COLUMNS",
    }
)


@dataclass(frozen=True)
class Version:
    """One commit of a dataset's ``main`` table."""

    version: int
    timestamp: datetime
    operation: str
    actor: str | None
    cr_id: str | None
    cr_title: str | None
    reason: str | None
    metrics: dict[str, int]
    restorable: bool
    not_restorable_reason: str | None
    kind: VersionKind = "other"
    restored_to: int | None = None  # a restore's target version

    @property
    def maintenance(self) -> bool:
        return self.kind == "maintenance"

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "timestamp": self.timestamp.isoformat(),
            "operation": self.operation,
            "actor": self.actor,
            "cr_id": self.cr_id,
            "cr_title": self.cr_title,
            "reason": self.reason,
            "metrics": dict(self.metrics),
            "restorable": self.restorable,
            "not_restorable_reason": self.not_restorable_reason,
            "kind": self.kind,
            "restored_to": self.restored_to,
        }


@dataclass(frozen=True)
class HistoryPage:
    versions: list[Version]  # newest first
    total: int  # versions in the table log


@dataclass(frozen=True)
class VersionDiff:
    changes: list[diff.Change]
    total: int
    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    source: Literal["cdf", "snapshot"]


@dataclass(frozen=True)
class RestoreResult:
    version: int  # the version RESTORE made
    restored_to: int


@dataclass(frozen=True)
class ExportResult:
    path: Location
    version: int
    rows: int
    format: Literal["parquet", "csv"]


@dataclass(frozen=True, kw_only=True)
class TableRestored(audit.AuditEvent):
    name = "table_restored"
    restored_to: int
    version: int
    reason: str
    commit_id: str


# ---------------------------------------------------------------- reading the log


@dataclass
class _Commit:
    version: int
    info: dict[str, Any]
    # Files whose rows the change data feed draws this commit's changes from.
    change_files: list[str] = field(default_factory=list)
    cdf_enabled: bool | None = None  # None: unknown (the table's metadata was never seen)
    # Rows in the files the commit added and removed (their statistics less their deletion
    # vectors); None when a file has no statistics.
    rows_added: int | None = None
    rows_removed: int | None = None


@dataclass
class _Log:
    """What one pass over a table's ``_delta_log`` found."""

    table: Location
    latest: int
    commits: dict[int, _Commit]  # versions whose JSON commit exists
    reasons: dict[int, str | None]  # version -> why it cannot be read (None: it can)
    exists: Callable[[str], bool]


_file_path = damage.action_path
_dv_path = damage.deletion_vector_path


def _file_key(action: dict[str, Any]) -> tuple[str, str]:
    """A file's identity in the log: its path and its deletion vector (Delta protocol)."""
    dv = action.get("deletionVector") or {}
    offset = "" if dv.get("offset") is None else str(dv["offset"])
    return action["path"], f"{dv.get('storageType') or ''}{dv.get('pathOrInlineDv') or ''}@{offset}"


def _commit_files(log: Location) -> tuple[dict[int, str], dict[int, list[str]]]:
    """JSON commits and complete classic Parquet checkpoints in ``log``, by version."""
    commits: dict[int, str] = {}
    parts: dict[tuple[int, int], list[str]] = {}
    entries = (
        [(p.name, str(p)) for p in log.iterdir()]
        if isinstance(log, ObjectPath)
        else [(e.name, e.path) for e in os.scandir(log)]
    )
    for name, entry_path in entries:
        if not name[:20].isdigit() or name[20:21] != ".":
            continue
        version = int(name[:20])
        if name.endswith(".json") and len(name) == 25:
            commits[version] = entry_path
        elif name.endswith(".parquet") and ".checkpoint." in name:
            pieces = name.split(".")
            # <v>.checkpoint.parquet, or <v>.checkpoint.<part>.<parts>.parquet
            count = int(pieces[3]) if len(pieces) == 5 and pieces[3].isdigit() else 1
            parts.setdefault((version, count), []).append(entry_path)
    checkpoints = {v: sorted(files) for (v, count), files in parts.items() if len(files) == count}
    return commits, checkpoints


def _read_checkpoint(files: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The add actions and the table metadata stored in a Parquet checkpoint."""
    import pyarrow.parquet as pq

    adds: list[dict[str, Any]] = []
    metadata: dict[str, Any] | None = None
    for file in files:
        where, filesystem = arrow_target(location(file))
        names = set(pq.read_schema(where, filesystem=filesystem).names)
        if "sidecar" in names:
            raise _Unreadable("v2 checkpoints with sidecars are not replayed")
        table = pq.read_table(where, columns=[c for c in ("add", "metaData") if c in names], filesystem=filesystem)
        if "add" in names:
            adds += [a for a in table.column("add").to_pylist() if a]
        if "metaData" in names:
            metadata = next((m for m in table.column("metaData").to_pylist() if m), metadata)
    return adds, metadata


class _Unreadable(Exception):
    """A checkpoint this module does not replay; versions it alone describes count as cleaned up."""


def _cdf_enabled(metadata: dict[str, Any]) -> bool:
    config = metadata.get("configuration") or {}
    if isinstance(config, list):  # Parquet checkpoints store maps as key/value pairs
        config = dict(config)
    return str(config.get("delta.enableChangeDataFeed", "false")).lower() == "true"


def _read_log(table: Location) -> _Log:
    """Replay ``table``'s log once: each version's commit, and whether its snapshot can be read.

    Raises:
        NotFound: ``table`` holds no Delta table.
        TableDamaged: The newest commit is empty or cut short.
    """
    log = table / "_delta_log"
    if not log.is_dir():
        raise NotFound(f"no Delta table at {table}", kind="table", ident=str(table))
    # A last commit cut at a line boundary parses; without this its version would be described
    # (and exported) as the version before.
    damage.raise_if_latest_commit_cut(table)
    jsons, checkpoints = _commit_files(log)
    root = str(table)
    if not jsons:
        raise NotFound(f"no Delta table at {table}", kind="table", ident=str(table))
    exists = _file_lookup(table)
    latest = max(max(jsons), max(checkpoints, default=-1))
    snapshot = _Snapshot(root=root, exists=exists, known=0 in jsons)
    commits: dict[int, _Commit] = {}
    reasons: dict[int, str | None] = {}
    for version in range(latest + 1):
        actions = list(_json_actions(jsons[version])) if version in jsons else None
        if actions is not None and snapshot.known:
            snapshot.apply(actions)
        elif version in checkpoints:
            snapshot.load_checkpoint(checkpoints[version])
        else:
            snapshot.known = False
        if actions is None:
            continue
        commits[version] = _commit(root, version, actions, snapshot.cdf if snapshot.known else None)
        reasons[version] = snapshot.unreadable_because()
    return _Log(table=table, latest=latest, commits=commits, reasons=reasons, exists=exists)


def _file_lookup(table: Location) -> Callable[[str], bool]:
    """Whether a file of ``table`` is there, each folder listed once."""
    listings: dict[str, set[str]] = {}
    # On a store, one listing of the table's objects answers every "is this file there?".
    stored = {str(p) for p in object_files(table)} if isinstance(table, ObjectPath) else None

    def exists(path: str) -> bool:
        if stored is not None:
            return path in stored
        folder, name = os.path.split(path)
        if folder not in listings:
            try:
                listings[folder] = set(os.listdir(folder))
            except OSError:
                listings[folder] = set()
        return name in listings[folder]

    return exists


@dataclass
class _Snapshot:
    """The snapshot of the version just replayed, as far as ``_read_log`` needs it."""

    root: str
    exists: Callable[[str], bool]
    known: bool  # whether ``missing`` describes the snapshot of the version just replayed
    # (data file, deletion vector) pairs of the snapshot whose data or deletion-vector file is gone
    missing: set[tuple[str, str]] = field(default_factory=set)
    cdf: bool | None = None

    def add(self, action: dict[str, Any]) -> None:
        key = _file_key(action)
        path, dv = _file_path(self.root, action["path"]), _dv_path(self.root, action.get("deletionVector"))
        if not self.exists(path) or (dv is not None and not self.exists(dv)):
            self.missing.add(key)

    def apply(self, actions: list[dict[str, Any]]) -> None:
        """Apply one JSON commit's actions."""
        for action in actions:
            if "add" in action:
                self.add(action["add"])
            elif "remove" in action:
                self.missing.discard(_file_key(action["remove"]))
            elif "metaData" in action:
                self.cdf = _cdf_enabled(action["metaData"])

    def load_checkpoint(self, files: list[str]) -> None:
        """Start again from a checkpoint; one this module does not replay leaves the snapshot unknown."""
        try:
            adds, metadata = _read_checkpoint(files)
        except _Unreadable:
            self.known = False
        else:
            self.missing.clear()
            for a in adds:
                self.add(a)
            self.cdf = _cdf_enabled(metadata) if metadata else None
            self.known = True

    def unreadable_because(self) -> str | None:
        """Why the snapshot cannot be read (None: it can)."""
        if not self.known:
            return LOG_CLEANED
        if self.missing:
            return VACUUMED
        return None


def _json_actions(path: str) -> Iterator[dict[str, Any]]:
    if is_object_uri(path):
        yield from _object_json_actions(path)
        return
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    table = Path(path).parent.parent
                    raise damage.find_damage(table) or TableDamaged(
                        f"{path} is not valid JSON: {exc.msg}", path=path
                    ) from exc


def _object_json_actions(path: str) -> Iterator[dict[str, Any]]:
    for line in location(path).read_text().splitlines():
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise TableDamaged(f"{path} is not valid JSON: {exc.msg}", path=path) from exc


def _live_rows(action: dict[str, Any]) -> int | None:
    """Rows a file holds for readers: its record count less its deletion vector's; None without statistics."""
    try:
        records = int(json.loads(action.get("stats") or "{}")["numRecords"])
    except (KeyError, TypeError, ValueError):
        return None
    return records - int((action.get("deletionVector") or {}).get("cardinality", 0))


def _commit(table: str, version: int, actions: list[dict[str, Any]], cdf: bool | None) -> _Commit:
    info: dict[str, Any] = {}
    cdc: list[str] = []
    data: list[str] = []
    added: list[int | None] = []
    removed: list[int | None] = []
    for action in actions:
        if "commitInfo" in action:
            info = action["commitInfo"]
        elif "cdc" in action:
            cdc.append(_file_path(table, action["cdc"]["path"]))
        elif "add" in action and action["add"].get("dataChange", True):
            data.append(_file_path(table, action["add"]["path"]))
            added.append(_live_rows(action["add"]))
        elif "remove" in action and action["remove"].get("dataChange", True):
            data.append(_file_path(table, action["remove"]["path"]))
            removed.append(_live_rows(action["remove"]))
        elif "metaData" in action:
            cdf = _cdf_enabled(action["metaData"])
    # Delta's change data feed reads a commit's cdc files when it has any, else its data changes.
    return _Commit(
        version=version,
        info=info,
        change_files=cdc or data,
        cdf_enabled=cdf,
        rows_added=None if None in added else sum(r for r in added if r is not None),
        rows_removed=None if None in removed else sum(r for r in removed if r is not None),
    )


def restorable_versions(path: Path) -> dict[int, str | None]:
    """Every version of the table at ``path`` with a commit in its log -> None if it can be
    restored, else why not (the current version, its log was cleaned up, its files vacuumed).

    Raises:
        NotFound: ``path`` holds no Delta table.
    """
    log = _read_log(location(path))
    return {v: _why_not_restorable(log, v) for v in log.commits}


def _why_not_restorable(log: _Log, version: int) -> str | None:
    if version == log.latest:
        return CURRENT
    return _with_vacuum_date(log, version, log.reasons.get(version, LOG_CLEANED))


def _no_such_version(log: _Log, name: str, version: int) -> NotFound:
    return NotFound(
        f"{name} has no version {version}; its versions are {min(log.commits)} to {log.latest}",
        kind="version",
        ident=str(version),
    )


def _with_vacuum_date(log: _Log, version: int, reason: str | None) -> str | None:
    if reason != VACUUMED:
        return reason
    for later in range(version + 1, log.latest + 1):
        commit = log.commits.get(later)
        if commit is not None and str(commit.info.get("operation", "")).startswith("VACUUM"):
            return f"{reason} (VACUUM on {_timestamp(commit.info):%Y-%m-%d %H:%M} UTC)"
    return reason


def _timestamp(info: dict[str, Any]) -> datetime:
    millis = info.get("inCommitTimestamp") or info.get("timestamp") or 0
    return datetime.fromtimestamp(int(millis) / 1000, tz=UTC)


# ---------------------------------------------------------------- history


def _metrics(operation: str, raw: dict[str, Any]) -> dict[str, int]:
    metrics: dict[str, int] = {}
    for key, value in raw.items():
        try:
            metrics[key] = int(value)
        except (TypeError, ValueError):
            continue  # a non-numeric metric
    for name, sources in _ROW_METRICS.items():
        found = [metrics[s] for s in sources if s in metrics]
        if name == "rows_inserted" and "numOutputRows" in metrics and operation not in _INSERTING_OPERATIONS:
            # numOutputRows of a MERGE/UPDATE counts rewritten rows, not inserted ones.
            found = [metrics[s] for s in sources if s in metrics and s != "numOutputRows"]
        metrics[name] = found[0] if found else 0
    return metrics


def _kind(operation: str, meta: dict[str, Any], cr_kind: str | None) -> VersionKind:
    if operation == "RESTORE" or meta.get("action") == RESTORE_ACTION:
        return "restore"
    if operation in MAINTENANCE_OPERATIONS:
        return "maintenance"
    if meta.get("cr_id"):
        return "import" if cr_kind == "import" else "change request"
    if meta.get("action") == "create_dataset" or operation in ("CREATE TABLE AS SELECT", "CREATE TABLE"):
        return "create"
    return "other"


def _version(log: _Log, version: int, titles: dict[str, str], cr_kinds: dict[str, str] | None = None) -> Version:
    commit = log.commits[version]
    info = commit.info
    meta = engine.parse_user_metadata(info.get("userMetadata"))
    operation = str(info.get("operation", "UNKNOWN"))
    reason = _why_not_restorable(log, version)
    cr_id = meta.get("cr_id")
    kind = _kind(operation, meta, (cr_kinds or {}).get(str(cr_id)) if cr_id else None)
    metrics = _metrics(operation, info.get("operationMetrics") or {})
    if kind == "restore":
        # RESTORE reports files, not rows: the rows come from the files' statistics.
        if commit.rows_added is not None:
            metrics["rows_added"] = commit.rows_added
        if commit.rows_removed is not None:
            metrics["rows_removed"] = commit.rows_removed
    restored_to = meta.get("restored_to")
    return Version(
        version=version,
        timestamp=_timestamp(info),
        operation=operation,
        actor=str(meta["actor"]) if meta.get("actor") else None,
        cr_id=str(cr_id) if cr_id else None,
        cr_title=titles.get(str(cr_id)) if cr_id else None,
        reason=str(meta["reason"]) if meta.get("reason") else None,
        metrics=metrics,
        restorable=reason is None,
        not_restorable_reason=reason,
        kind=kind,
        restored_to=int(restored_to) if kind == "restore" and restored_to is not None else None,
    )


def _check_paging(limit: int | None, offset: int) -> None:
    if limit is not None and int(limit) < 1:
        raise InvalidInput(f"limit must be at least 1, got {limit}", field="limit")
    if int(offset) < 0:
        raise InvalidInput(f"offset must be >= 0, got {offset}", field="offset")


def table_history(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    *,
    actor: User,
    limit: int | None = None,
    offset: int = 0,
    hide_maintenance: bool = False,
) -> HistoryPage:
    """A page of a dataset's versions, newest first, read from its Delta log (no Spark).

    Args:
        catalog: The catalog.
        project_id: The project.
        dataset_id: The dataset.
        actor: A member of the project.
        limit: At most this many versions (default: all).
        offset: Versions to skip, newest first.
        hide_maintenance: Leave out maintenance versions (OPTIMIZE, VACUUM, property changes)
            before paging, so they never push a data change off a page; ``total`` counts the rest.

    Raises:
        NotFound: Unknown dataset.
        PermissionDenied: ``actor`` is not a member of the project.
        InvalidInput: Bad limit or offset.
    """
    _check_paging(limit, offset)
    get_dataset(catalog, project_id, dataset_id, actor=actor)
    log = _read_log(layout_for(project_id, dataset_id).main)
    if log.reasons.get(log.latest) == VACUUMED:
        _raise_damage(log)
    newest = sorted(log.commits, reverse=True)
    if hide_maintenance:
        newest = [v for v in newest if str(log.commits[v].info.get("operation", "")) not in MAINTENANCE_OPERATIONS]
    shown = newest[int(offset) :] if limit is None else newest[int(offset) : int(offset) + int(limit)]
    cr_ids = {
        str(cr)
        for v in shown
        if (cr := engine.parse_user_metadata(log.commits[v].info.get("userMetadata")).get("cr_id"))
    }
    titles: dict[str, str] = {}
    kinds: dict[str, str] = {}
    if cr_ids:
        with catalog.session() as s:
            query = select(ChangeRequestRow.id, ChangeRequestRow.title, ChangeRequestRow.kind).where(
                ChangeRequestRow.id.in_(cr_ids)
            )
            for row in s.execute(query):
                titles[row.id], kinds[row.id] = row.title, row.kind
    return HistoryPage(versions=[_version(log, v, titles, kinds) for v in shown], total=len(newest))


# ---------------------------------------------------------------- reading a version


def _raise_damage(log: _Log) -> None:
    """The current version's files are gone (VACUUM never removes those): name what is missing."""
    damage.raise_if_damaged(log.table)
    raise TableDamaged(f"a file of the current version of {log.table} is missing", path=str(log.table))


def _readable(log: _Log, name: str, version: int) -> int:
    """``version``, if a snapshot of it can be read; else a one-line NotFound."""
    if not 0 <= version <= log.latest:
        raise _no_such_version(log, name, version)
    reason = log.reasons.get(version, LOG_CLEANED)
    if version == log.latest and reason == VACUUMED:
        _raise_damage(log)
    if reason is not None:
        raise NotFound(
            f"version {version} of {name} cannot be read: {_with_vacuum_date(log, version, reason)}",
            kind="version",
            ident=str(version),
        )
    return version


def preview_version(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    version: int,
    *,
    actor: User,
    offset: int = 0,
    limit: int = 50,
    filters: list[reads.RowFilter] | None = None,
    order_by: str | None = None,
    descending: bool = False,
) -> reads.Page:
    """A page of the table as of ``version``, filtered, sorted and paged as on the Table page.

    Raises:
        NotFound: Unknown dataset, or a version that does not exist or can no longer be read.
        PermissionDenied: ``actor`` is not a member of the project.
        InvalidInput: Unknown column, bad limit or offset.
    """
    info = get_dataset(catalog, project_id, dataset_id, actor=actor)
    main = layout_for(project_id, dataset_id).main
    _readable(_read_log(main), f"{project_id}/{dataset_id}", int(version))
    return reads.read_page(
        main,
        version=int(version),
        filters=filters,
        order_by=order_by,
        descending=descending,
        default_order=stable_order(info),
        limit=limit,
        offset=offset,
    )


# ---------------------------------------------------------------- diff between versions


def _changed_row_files(log: _Log, from_version: int, to_version: int) -> list[str] | None:
    """Files holding every row the change data feed says changed in (from, to]; None if it cannot tell."""
    files: list[str] = []
    for version in range(from_version + 1, to_version + 1):
        commit = log.commits.get(version)
        if commit is None or not commit.cdf_enabled:
            return None
        files += commit.change_files
    if not all(log.exists(f) for f in files):
        return None  # vacuumed change files: compare the snapshots whole
    return sorted(set(files))


def diff_versions(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    from_version: int,
    to_version: int,
    *,
    actor: User,
    limit: int = 100,
    offset: int = 0,
) -> VersionDiff:
    """One page of the cell-level diff from ``from_version`` to ``to_version`` (see the module docstring).

    Args:
        catalog: The catalog.
        project_id: The project.
        dataset_id: The dataset.
        from_version: The older version.
        to_version: The newer version.
        actor: A member of the project.
        limit: Page size, 1..10,000.
        offset: Entries to skip (ordered by row_id, then column).

    Raises:
        InvalidInput: ``from_version`` is not older than ``to_version``; bad limit or offset.
        NotFound: Unknown dataset, or either version does not exist or can no longer be read.
        PermissionDenied: ``actor`` is not a member of the project.
    """
    name = f"{project_id}/{dataset_id}"
    get_dataset(catalog, project_id, dataset_id, actor=actor)  # an unknown dataset is named before the versions
    if int(from_version) >= int(to_version):
        # Worded for every front end: the CLI's --from/--to and the API's from/to.
        raise InvalidInput(
            f"from ({from_version}) must be older than to ({to_version}) to diff {name}", field="from"
        )
    main = layout_for(project_id, dataset_id).main
    log = _read_log(main)
    before_v = _readable(log, name, int(from_version))
    after_v = _readable(log, name, int(to_version))
    columns = [c.name for c in reads.table_schema(main, after_v)]
    present = {c.name for c in reads.table_schema(main, before_v)}
    files = _changed_row_files(log, before_v, after_v)
    scan = "FROM delta_scan(?, version => ?)"
    if files is None:
        before = diff.Relation(f"SELECT {diff.select_list(columns, present)} {scan}", [str(main), before_v])
        after = diff.Relation(f"SELECT {diff.select_list(columns, set(columns))} {scan}", [str(main), after_v])
    else:
        ids = "WHERE row_id IN (SELECT row_id FROM read_parquet(?::VARCHAR[], union_by_name = true))"
        if not files:
            ids, files = "WHERE false", []
        params: list[Any] = [files] if ids != "WHERE false" else []
        before = diff.Relation(
            f"SELECT {diff.select_list(columns, present)} {scan} {ids}", [str(main), before_v, *params]
        )
        after = diff.Relation(
            f"SELECT {diff.select_list(columns, set(columns))} {scan} {ids}", [str(main), after_v, *params]
        )
    page, counts = diff.counted_diff(before, after, columns, limit=limit, offset=offset)
    return VersionDiff(
        changes=page.changes,
        total=page.total,
        rows_inserted=counts.inserted,
        rows_updated=counts.updated,
        rows_deleted=counts.deleted,
        source="snapshot" if files is None else "cdf",
    )


def version_diff_source(
    catalog: Catalog, project_id: str, dataset_id: str, before_version: int, after_version: int, *, actor: User
) -> diff.DiffSource:
    """What the row diff from ``before_version`` to ``after_version`` compares (core.diff.row_diff).

    Either may be the older: a restore preview compares the current version with the one
    it restores to. Rows come from the change data feed's files where every version
    between has one, else from the two snapshots whole.

    Raises:
        InvalidInput: The two versions are the same.
        NotFound: Unknown dataset, or either version does not exist or can no longer be read.
        PermissionDenied: ``actor`` is not a member of the project.
    """
    name = f"{project_id}/{dataset_id}"
    if int(before_version) == int(after_version):
        raise InvalidInput(f"pick two different versions of {name} to compare", field="from_version")
    get_dataset(catalog, project_id, dataset_id, actor=actor)
    main = layout_for(project_id, dataset_id).main
    log = _read_log(main)
    before_v = _readable(log, name, int(before_version))
    after_v = _readable(log, name, int(after_version))
    before_schema, after_schema = reads.table_schema(main, before_v), reads.table_schema(main, after_v)
    columns = [c.name for c in after_schema]
    present = {c.name for c in before_schema}
    files = _changed_row_files(log, min(before_v, after_v), max(before_v, after_v))
    scan = "FROM delta_scan(?, version => ?)"
    ids, extra = "", []  # no change feed: the snapshots whole
    if files:
        ids, extra = "WHERE row_id IN (SELECT row_id FROM read_parquet(?::VARCHAR[], union_by_name = true))", [files]
    elif files is not None:
        ids = "WHERE false"  # the change feed says no row changed
    return diff.DiffSource(
        before=diff.Relation(
            f"SELECT {diff.select_list(columns, present)} {scan} {ids}", [str(main), before_v, *extra]
        ),
        after=diff.Relation(
            f"SELECT {diff.select_list(columns, set(columns))} {scan} {ids}", [str(main), after_v, *extra]
        ),
        columns=columns,
        schema=tuple(diff.schema_deltas(before_schema, after_schema)),
    )


def row_diff_versions(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    before_version: int,
    after_version: int,
    *,
    actor: User,
    kinds: list[str] | None = None,
    columns: list[str] | None = None,
    limit: int = 50,
    offset: int = 0,
) -> diff.RowDiffPage:
    """One page of the row-shaped diff between two versions (see ``version_diff_source``).

    Raises:
        InvalidInput: The same version twice; an unknown kind or column; bad limit or offset.
        NotFound: Unknown dataset or version.
        PermissionDenied: ``actor`` is not a member of the project.
    """
    source = version_diff_source(catalog, project_id, dataset_id, before_version, after_version, actor=actor)
    spec = diff.check_filters(kinds, columns, source.columns)
    labels = diff.label_columns(catalog, project_id, dataset_id, actor=actor)
    return diff.row_diff(source, label_columns=labels, spec=spec, limit=limit, offset=offset)


def export_version_diff(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    before_version: int,
    after_version: int,
    out: Path,
    *,
    actor: User,
    fmt: diff.ExportFormat,
    kinds: list[str] | None = None,
    columns: list[str] | None = None,
) -> int:
    """Write the whole row diff between two versions (filtered) to ``out`` as CSV or Parquet; returns its rows."""
    source = version_diff_source(catalog, project_id, dataset_id, before_version, after_version, actor=actor)
    spec = diff.check_filters(kinds, columns, source.columns)
    return diff.export_row_diff(source, out, fmt=fmt, spec=spec)


# ---------------------------------------------------------------- restore


def _restored(main: Location, after_version: int, commit_id: str) -> int | None:
    found = engine.find_commit(main, after_version, commit_id=commit_id)
    return found[0] if found else None


def restore_version(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    version: int,
    *,
    actor: User,
    reason: str,
    progress: Callable[[str], None] | None = None,
) -> RestoreResult:
    """Make ``main`` what it was at ``version``, in one new Spark RESTORE commit.

    Exactly once: a restore commit of the same actor, version and reason that the
    catalog has not recorded yet (a crash after the commit) is only recorded, not redone.

    Args:
        catalog: The catalog.
        project_id: The project.
        dataset_id: The dataset.
        version: A restorable version (see ``restorable_versions``).
        actor: An admin of the project.
        reason: Why; stored in the commit and the audit log.
        progress: Called with what is happening.

    Returns:
        The new version and the version restored to.

    Raises:
        PermissionDenied: ``actor`` is not an admin of the project.
        InvalidInput: No reason, or a version that cannot be restored (and why).
        NotFound: Unknown dataset or version.
        ConflictError: The table changed while restoring.
        EngineError: Spark failed; the table is unchanged.
    """
    report = progress or (lambda message: None)
    info = get_dataset(catalog, project_id, dataset_id, actor=actor)
    require_role(catalog, actor, project_id, Role.ADMIN, action="restore a table version")
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("a reason is required to restore a table version; give one", field="reason")
    main = layout_for(project_id, dataset_id).main
    version = int(version)
    landed = _landed_restore(main, info.version, actor=actor, version=version, reason=reason)
    if landed is not None:
        commit, new_version = landed
    else:
        commit, new_version = _restore_now(
            catalog, project_id, dataset_id, main, version, actor=actor, reason=reason, report=report
        )
    report("Updating the catalog")
    sync_dataset(catalog, project_id, dataset_id, commit, version=new_version)
    _record_restored(
        catalog, project_id, dataset_id, commit, actor=actor, version=version, new_version=new_version, reason=reason
    )
    report(f"Restored version {version} as version {new_version}")
    return RestoreResult(version=new_version, restored_to=version)


def _landed_restore(
    main: Location, synced_version: int | None, *, actor: User, version: int, reason: str
) -> tuple[engine.CommitInfo, int] | None:
    """The commit and version of this very restore when it landed but the catalog has not recorded it."""
    synced = synced_version if synced_version is not None else -1
    landed = engine.find_commit(main, synced, action=RESTORE_ACTION, actor=actor.username, restored_to=version)
    if landed is not None and landed[1].get("reason") == reason:
        return engine.CommitInfo(str(landed[1]["commit_id"]), actor.username, RESTORE_ACTION, {}), landed[0]
    return None


def _restore_now(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    main: Location,
    version: int,
    *,
    actor: User,
    reason: str,
    report: Callable[[str], None],
) -> tuple[engine.CommitInfo, int]:
    """Check that ``version`` can be restored, then make the RESTORE commit; it and the new version."""
    name = f"{project_id}/{dataset_id}"
    report("Checking the version")
    log = _read_log(main)
    if not 0 <= version <= log.latest:
        raise _no_such_version(log, name, version)
    why = _why_not_restorable(log, version)
    if why is not None:
        raise InvalidInput(f"version {version} of {name} cannot be restored: {why}", field="version")
    # The writer lease keeps merges out between this check and the RESTORE commit.
    with writing(catalog, project_id, dataset_id, what=f"a restore by {actor.username}"):
        report(f"Restoring version {version}")
        checked = engine.latest_version(main)
        commit = engine.new_commit(actor.username, RESTORE_ACTION, reason=reason, restored_to=version)
        with metrics.timed_operation("restore"):
            new_version = _run_restore(main, name, version, commit, checked)
    return commit, new_version


def _record_restored(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    commit: engine.CommitInfo,
    *,
    actor: User,
    version: int,
    new_version: int,
    reason: str,
) -> None:
    """Audit the restore, unless an earlier attempt already did (the same commit)."""
    with catalog.session() as s:
        already = s.scalars(
            select(AuditEventRow).where(
                AuditEventRow.name == TableRestored.name,
                AuditEventRow.project_id == project_id,
                AuditEventRow.dataset_id == dataset_id,
            )
        )
        if not any(row.details.get("commit_id") == commit.commit_id for row in already):
            audit.record(
                s,
                TableRestored(
                    actor=actor.username,
                    project_id=project_id,
                    dataset_id=dataset_id,
                    restored_to=version,
                    version=new_version,
                    reason=reason,
                    commit_id=commit.commit_id,
                ),
            )


def _run_restore(main: Location, name: str, version: int, commit: engine.CommitInfo, checked: int) -> int:
    """One RESTORE commit made with Oreo's merge txn id; its version, or ConflictError if it did not land."""
    sql = f"RESTORE TABLE {engine.delta_ref(main)} TO VERSION AS OF {int(version)}"
    try:
        with engine.dml_session(commit, txn=(merge.TXN_APP_ID, checked + 1)) as spark:
            spark.sql(sql).collect()
    except OreoError:
        raise
    except engine.concurrency_exceptions() as exc:
        if _restored(main, checked, commit.commit_id) is None:
            raise ConflictError(f"{name} changed while restoring ({type(exc).__name__}); try again") from exc
    except Exception as exc:
        if _restored(main, checked, commit.commit_id) is None:
            raise EngineError(f"Spark could not restore {name}: {str(exc).splitlines()[0]}") from exc
    new_version = _restored(main, checked, commit.commit_id)
    if new_version is None:
        raise ConflictError(f"{name} changed while restoring; try again")
    return new_version


# ---------------------------------------------------------------- export


# What a spreadsheet reads as the start of a formula (OWASP's CSV injection list), as a DuckDB regex.
_FORMULA_START = "^[=+\\-@\t\r]"
# A plain number (``-5``, ``+1.5e3``) is no formula: a spreadsheet reads it as the number it is.
_PLAIN_NUMBER = "^[+-]?[0-9]+([.][0-9]+)?([eE][+-]?[0-9]+)?$"


def _spreadsheet_safe_columns(scan: str) -> str:
    """The select list that prefixes ``'`` to text cells starting like a formula (other types as they are)."""
    pattern, number = reads.quote_literal(_FORMULA_START), reads.quote_literal(_PLAIN_NUMBER)
    selected = []
    for name, column_type, *_ in reads.cursor().execute(f"DESCRIBE SELECT * FROM {scan}").fetchall():
        column = reads.quote_ident(name)
        if str(column_type).upper() == "VARCHAR":
            quote = reads.quote_literal("'")
            selected.append(
                f"CASE WHEN regexp_matches({column}, {pattern}) AND NOT regexp_matches({column}, {number}) "
                f"THEN {quote} || {column} ELSE {column} END AS {column}"
            )
        else:
            selected.append(column)
    return ", ".join(selected)


def export_version(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    out: Path,
    *,
    actor: User,
    version: int | None = None,
    raw: bool = False,
) -> ExportResult:
    """Write every column (``row_id`` included) of a version to ``out`` (.parquet or .csv).

    The file is written next to ``out`` under a temporary name and renamed, so a failure
    leaves nothing behind. In a CSV, a text cell that a spreadsheet would run as a formula
    (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a CR, and is not a plain number such
    as ``-5``) gets a leading ``'`` unless ``raw``; numbers, dates and booleans are written as
    they are.

    Raises:
        InvalidInput: An unsupported suffix, ``out`` is a folder, or its folder is missing.
        NotFound: Unknown dataset, or a version that does not exist or can no longer be read.
        PermissionDenied: ``actor`` is not a member of the project.
        EngineError: DuckDB could not write the file.
    """
    out = local_file(out)
    fmt = EXPORT_FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise InvalidInput(
            f"cannot export to {out.suffix or 'a file without a suffix'!r}; name the file .parquet or .csv", field="out"
        )
    if out.is_dir():
        raise InvalidInput(f"{out} is a folder; name a file to export to", field="out")
    if not out.parent.is_dir():
        raise InvalidInput(f"folder {out.parent} does not exist; create it first", field="out")
    get_dataset(catalog, project_id, dataset_id, actor=actor)
    main = layout_for(project_id, dataset_id).main
    log = _read_log(main)
    chosen = _readable(log, f"{project_id}/{dataset_id}", log.latest if version is None else int(version))
    temporary = out.parent / f".{out.name}.{uuid.uuid4().hex}.tmp"
    options = "FORMAT parquet" if fmt == "parquet" else "FORMAT csv, HEADER true"
    scan = f"delta_scan({reads.quote_literal(str(main))}, version => {chosen})"
    columns = "*" if fmt == "parquet" or raw else _spreadsheet_safe_columns(scan)
    sql = f"COPY (SELECT {columns} FROM {scan}) TO {reads.quote_literal(str(temporary))} ({options})"
    try:
        row = reads.cursor().execute(sql).fetchone()
        os.replace(temporary, out)
    except Exception as exc:  # duckdb.Error and OSError
        temporary.unlink(missing_ok=True)
        if disk.is_out_of_space(exc):
            raise disk.out_of_space(f"the export of {project_id}/{dataset_id}", out) from exc
        raise EngineError(f"could not export {project_id}/{dataset_id} to {out}: {str(exc).splitlines()[0]}") from exc
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return ExportResult(path=out, version=chosen, rows=int(row[0]) if row else 0, format=fmt)
