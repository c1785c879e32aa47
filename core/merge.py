"""Approving a change request: conflicts, re-validation, and one Spark Delta MERGE.

Approval runs, in order:

1. checks: the request is open (and at the revision the approver reviewed, when given:
   ``change_requests.check_reviewed``; checked again under the writer lease before the
   MERGE), the approver is an approver of the project and is not its author (four-eyes,
   whatever their role). The one exception is a project admin's
   import submitted with its review skipped (``core.imports.import_file(review=False)``),
   which ``merge_unreviewed_import`` merges at once with the admin as the merger; steps
   2 to 5 are the same;
2. **conflicts**: cells the request changes whose values a commit after its ``base_version``
   changed too (``core.conflicts``). Any conflict blocks approval until its author settles it;
3. **validation**: the GX suite against what ``main`` would become (``core.validation``);
   a critical failure blocks approval. The submit's run is reused when it judged the
   change against the current version with the current suite (same inputs, same verdict);
4. **one MERGE** of ``staging/<cr_id>`` into ``main`` on ``row_id``, in one commit whose
   userMetadata carries the ``cr_id``, the approver and the validation run id;
5. catalog sync, audit event, and removal of the staging table and the session.

Exactly once: before merging, the log is searched for a commit of this ``cr_id``, so a
retry (after a crash between the commit and the catalog update, or a double click) only
finishes the bookkeeping. The staging table is deleted only after the commit. The same
holds when the catalog is unreachable after the commit (``CatalogUnavailable``): approving
again once it is back finishes the bookkeeping. An approval records ``approval_started``
when it holds the writer lease; one that started but neither finished nor still runs (the
server was killed) is reported by ``approval_state``, so the pages can say so.

No unchecked overwrite: conflicts are checked right before every MERGE attempt, and the
MERGE carries Delta's idempotent transaction id (``txnAppId = oreo-merge``,
``txnVersion`` = the checked table version + 1). If another Oreo merge landed after the
check, Delta skips this MERGE (its snapshot has seen a newer txn version) or fails it
with ``ConcurrentTransactionException``; either way the attempt is retried with backoff
after a fresh conflict check, as are delta-spark's other optimistic-concurrency
exceptions. A concurrent change to the same cells therefore ends in a ``ConflictError``.
The check and the MERGE also hold the table's writer lease (``core.writer``), which
fences them against a restore: Delta's ``RESTORE`` ignores transaction ids.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import duckdb
from sqlalchemy import select
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from core import audit, disk, engine, events, metrics, reads
from core.auth import SYSTEM, Role, User, require_role
from core.catalog import AuditEventRow, Catalog, ChangeRequestRow, CommentRow, DatasetRow, utcnow
from core.change_requests import (
    CHANGED_COLUMN,
    MERGE_ACTION,
    OP_COLUMN,
    ApprovalStarted,
    ChangeRequest,
    CRState,
    StageHook,
    StageTiming,
    Stopwatch,
    check_reviewed,
    get_change_request,
    record_from_row,
    remove_leftovers,
    reusable_run,
    staged_columns,
    stages_json,
    staging_path,
    validate_change_request,
)
from core.change_requests import ApprovalState as ApprovalState
from core.change_requests import approval_state as approval_state
from core.change_requests import lease_name as _lease_name
from core.change_requests import merging_now as merging_now
from core.conflicts import Conflict as Conflict
from core.conflicts import conflicts_since as conflicts_since
from core.conflicts import find_conflicts as find_conflicts
from core.conflicts import staged_rows_moved
from core.datasets import DatasetInfo, get_dataset, layout_for, sync_dataset
from core.errors import (
    CatalogUnavailable,
    ConflictError,
    EngineError,
    NotFound,
    OreoError,
    PermissionDenied,
    ValidationFailed,
)
from core.storage import Location, location
from core.writer import release_leftovers, writing

if TYPE_CHECKING:
    from core.layout import DatasetLayout

log = logging.getLogger(__name__)

Progress = Callable[[float, str], None]
MAX_ATTEMPTS = 5
_SHOWN = 5


@dataclass(frozen=True, kw_only=True)
class ChangeRequestMerged(audit.AuditEvent):
    name = "cr_merged"
    cr_id: str
    version: int
    commit_id: str
    validation_run_id: str | None


# Test hook: seconds an approval waits after ``approval_started``, before its MERGE, so a
# browser test can kill the server mid-approval. Unset (0) everywhere but in that test.
PAUSE_BEFORE_MERGE_ENV = "OREO_TEST_PAUSE_BEFORE_MERGE_S"
MERGE_GATE_ENV = "OREO_TEST_MERGE_GATE"  # with the pause: the MERGE goes on once this file exists


def _retryable() -> tuple[type[BaseException], ...]:
    """What a MERGE attempt may raise that a fresh attempt can fix."""
    return (*engine.concurrency_exceptions(), _TableMoved)


# ---------------------------------------------------------------- conflicts


# Per process: the main version each open request was last checked against by sweep_stale.
_STALE_CHECKED: dict[str, int] = {}


def sweep_stale(catalog: Catalog) -> int:
    """Check every open request whose table moved past its base version for conflicts; tell
    the author of each that now conflicts (``events.WentStale``, told once per newest conflicting
    version). A request is checked again only when its table moves again, and only in full when
    the commits since its last check changed one of its staged rows (``staged_rows_moved``).

    Returns:
        How many requests were checked.
    """
    with catalog.session() as s:
        moved = list(
            s.execute(
                select(ChangeRequestRow.id, DatasetRow.delta_version)
                .join(
                    DatasetRow,
                    (DatasetRow.project_id == ChangeRequestRow.project_id)
                    & (DatasetRow.dataset_id == ChangeRequestRow.dataset_id),
                )
                .where(ChangeRequestRow.state == CRState.OPEN.value)
                .where(DatasetRow.delta_version > ChangeRequestRow.base_version)
            )
        )
    checked = 0
    for cr_id, version in moved:
        last = _STALE_CHECKED.get(cr_id)
        if version is None or last == version:
            continue
        try:
            if last is not None and not staged_rows_moved(catalog, cr_id, last, int(version), actor=SYSTEM):
                _STALE_CHECKED[cr_id] = int(version)  # no staged row changed since: its conflicts are as they were
                continue
            find_conflicts(catalog, cr_id, actor=SYSTEM)
        except OreoError:
            log.warning("checking change request %s for conflicts failed", cr_id, exc_info=True)
            continue
        _STALE_CHECKED[cr_id] = int(version)
        checked += 1
    return checked


# ---------------------------------------------------------------- merge


def _merge_sql(
    main: Location,
    staging: Location,
    columns: list[str],
    existing: set[str],
    ops: set[str],
    *,
    widen: bool = False,
    row_ids: list[str] | None = None,
    source: str | None = None,
) -> str:
    """The MERGE of a staging table's data ``columns`` into ``main``, whose columns are ``existing``.

    Only the clauses the staged ``ops`` need are written, so an import of new rows is an
    insert-only MERGE (which Delta runs as one anti-join). A staged column ``main`` lacks
    (an import's new column) is added by Delta schema evolution in the same commit, as is
    a widened type (type widening, ``widen``); both need ``WITH SCHEMA EVOLUTION``.

    ``row_ids``, every staged ``row_id`` of a small source, adds ``t.row_id IN (...)`` to
    the ON clause and broadcasts the source. A target-only conjunct of the ON clause is
    what Delta uses to skip files by their ``row_id`` min/max statistics, so the MERGE
    reads and rewrites only the files that can hold those rows. The matches are the same:
    a target row equal to some staged ``row_id`` is in the list by construction.

    ``source``, a temporary view of the staged rows, replaces the staging table as the
    MERGE's source (``_merge_once`` passes the rows of a small source in memory).
    """
    q, lit = engine.spark_ident, engine.spark_string
    data = [c for c in columns if c != "row_id"]
    # Target columns are named bare: a qualified ``t.c`` of a column being added would not resolve.
    updates = ", ".join(
        f"{q(c)} = CASE WHEN array_contains(s.{CHANGED_COLUMN}, {lit(c)}) THEN s.{q(c)} ELSE t.{q(c)} END"
        if c in existing
        else f"{q(c)} = s.{q(c)}"
        for c in data
    )
    names = ", ".join(q(c) for c in columns)
    values = ", ".join(f"s.{q(c)}" for c in columns)
    clauses = []
    if "delete" in ops:
        clauses.append(f"WHEN MATCHED AND s.{OP_COLUMN} = 'delete' THEN DELETE")
    if "update" in ops and data:
        clauses.append(f"WHEN MATCHED AND s.{OP_COLUMN} = 'update' THEN UPDATE SET {updates}")
    if "insert" in ops or not clauses:
        clauses.append(f"WHEN NOT MATCHED AND s.{OP_COLUMN} = 'insert' THEN INSERT ({names}) VALUES ({values})")
    evolve = "WITH SCHEMA EVOLUTION " if widen or set(columns) - existing else ""
    source, on = source or engine.delta_ref(staging), "t.row_id = s.row_id"
    if row_ids:
        source = f"(SELECT /*+ BROADCAST */ * FROM {source})"
        on += " AND t.row_id IN (" + ", ".join(lit(r) for r in sorted(row_ids)) + ")"
    return f"MERGE {evolve}INTO {engine.delta_ref(main)} AS t USING {source} AS s ON {on} " + " ".join(clauses)


# One Delta transaction id for every Oreo MERGE into a table; its version is the table
# version the conflict check saw, plus one. Delta skips a write whose txn version its
# snapshot has already seen, and fails one that races a commit with the same id, so a
# MERGE whose snapshot is newer than its check never commits unchecked.
TXN_APP_ID = "oreo-merge"


class _TableMoved(Exception):
    """Delta skipped the MERGE: another Oreo merge landed after the conflict check."""


# Up to this many staged rows, their row_ids go into the MERGE's ON clause (file skipping),
# and the rows themselves are the MERGE's source, in memory, broadcast; a bigger source (an
# import) is read from its staging table and scans main as before.
SMALL_SOURCE_ROWS = 1000
# A small MERGE's session runs without adaptive query execution: re-planning each of Delta's
# dozen tiny jobs cost more than it saved (profiled: 1.3 s with it off, 1.9 s on, same rows).
# Its shuffles hold at most the staged rows and the touched files' matches, so one partition
# each: four tiny tasks per stage queued behind each other on a busy machine (interleaved,
# 8 of 8 rounds faster with one; median 3.3 s against 8.3 s at load 11).
# Its source is a deterministic local relation (or the staging Delta table), so Delta's
# source materialization ("auto" caches any source that is not a plain Delta scan) only
# adds a job: 9 Spark jobs per 5-row MERGE with it, 8 without (profiled job by job).
SMALL_MERGE_CONFS = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.databricks.delta.merge.materializeSource": "none",
    # The in-memory source is one partition, so each broadcast of it is one task, not four.
    "spark.sql.leafNodeDefaultParallelism": "1",
    # Every approval first rebuilds the table's file list at the version before it ("Delta:
    # Compute snapshot for version N", from the checkpoint and the commits since), and MERGE
    # scans that list for the touched files. One partition holds the list of a table of
    # thousands of files; the session default split it into 6-7 tasks and the scan into 5-6.
    # Profiled job by job on the 100,000-row demo table (1 cell and 8 rows, interleaved, load
    # 35-50): 16-18 tasks per MERGE became 10-12, and the time in Spark jobs 12-40 s -> 4.5-15 s.
    engine.SNAPSHOT_PARTITIONS_CONF: "1",
    # Whole-stage code generation writes, formats and compiles Java for every plan of the
    # MERGE's dozen jobs, each run over a few thousand rows. A JFR profile of 6 warm approvals
    # on the 100,000-row demo put 31% of the JVM's CPU samples in code generation (10% in
    # CodeFormatter.stripExtraNewLinesAndComments alone). Interleaved A/B, 10 approvals each
    # (1 cell and 8 rows, load 6-11): 3.07 CPU-s per approval without it against 3.59, and a
    # median of 6.1 s against 8.0 s. Expression code generation stays on: interpreted, Delta's
    # per-row statistics tracker took 21% of the samples (NO_CODEGEN, profiled the same way).
    "spark.sql.codegen.wholeStage": "false",
}
# A small MERGE rewrites the files it touches instead of writing deletion vectors when they
# hold at most this many main files' worth of bytes (engine.MAIN_FILE_BYTES each), so a
# rewrite re-encodes a few MB at most; more (scattered rows, or the big files of a table
# written before main was clustered), and the vectors cost less. Profiled job by job on the
# 1M-row bench table (Oreo's layout): a 5-row update with vectors runs 12 Spark jobs (3 find
# the touched file, 2 write the updated rows, 7 write the vector and its index) and is busy
# only 0.5 s of its 1.5 s, the rest being the driver between jobs; rewriting runs 5.
# Interleaved on a quiet machine, same process: 1,147 ms rewriting against 1,619 ms with
# vectors (2 MiB files, medians of 12). Under a load of 12-30 the CPU-bound rewrite only drew
# level (5 of 10 pairs), which is why it is kept to few files. DuckDB finds the touched
# files (about 25 ms, by row_id statistics).
REWRITE_MAX_FILES = 2
DELETION_VECTORS_CONF = "spark.databricks.delta.merge.deletionVectors.persistent"


@dataclass(frozen=True)
class _Staged:
    """What the MERGE needs to know of a staging table before it runs."""

    ops: set[str]
    row_ids: list[str] | None = None  # every staged row_id of a small source
    rows: Any = None  # a small source's rows (a pyarrow Table), read by DuckDB


def _small_source(staging: Location) -> _Staged:
    """The staged ops, and for a source of at most ``SMALL_SOURCE_ROWS`` rows its rows and row_ids.

    Reading a few rows from the staging table in DuckDB and handing them to Spark as a
    local relation costs milliseconds; Spark reading the staging table as the MERGE's
    source cost about 1.5 s of snapshot, scan and source materialization (profiled).
    """
    rows = reads.cursor().execute(f"SELECT * FROM delta_scan(?) LIMIT {SMALL_SOURCE_ROWS + 1}", [str(staging)])
    table = rows.to_arrow_table()
    if table.num_rows <= SMALL_SOURCE_ROWS:
        ids = [str(r) for r in table.column("row_id").to_pylist()]
        return _Staged(ops={str(o) for o in table.column(OP_COLUMN).to_pylist()}, row_ids=ids, rows=table)
    query = f"SELECT DISTINCT {OP_COLUMN} FROM delta_scan(?)"
    return _Staged(ops={str(r[0]) for r in reads.cursor().execute(query, [str(staging)]).fetchall()})


def _touched_bytes(main: Location, version: int, row_ids: list[str], *, stop_above: int | None = None) -> int | None:
    """The size of ``main``'s files that hold any of ``row_ids`` (DuckDB skips the others by their statistics).

    With ``stop_above``, sizes stop being added (one request each on an object store) once
    the total passes it. None when DuckDB cannot read the table or a file's size: the
    MERGE then keeps its deletion vectors.
    """
    if not row_ids:
        return 0
    marks = ", ".join("?" for _ in row_ids)
    scan = "delta_scan(?, version => ?, filename => true)"
    sql = f"SELECT DISTINCT filename FROM {scan} WHERE row_id IN ({marks})"
    total = 0
    try:
        for (name,) in reads.cursor().execute(sql, [str(main), int(version), *row_ids]).fetchall():
            total += location(str(name)).stat().st_size
            if stop_above is not None and total > stop_above:
                break
    except (duckdb.Error, OSError):
        return None
    return total


def _merge_once(
    record: ChangeRequest,
    main: Location,
    staging: Location,
    commit: engine.CommitInfo,
    *,
    checked_version: int,
) -> None:
    """Run the MERGE; Delta skips it if a merge newer than ``checked_version`` landed meanwhile."""
    widened = {c.column for c in record.schema_changes if c.change == "widen"}
    if widened:
        _allow_type_widening(main, commit)
    merge_staged(main, staging, commit, txn=(TXN_APP_ID, checked_version + 1), widen=bool(widened))


def merge_staged(
    main: Location,
    staging: Location,
    commit: engine.CommitInfo,
    *,
    txn: tuple[str, int] | None = None,
    widen: bool = False,
) -> None:
    """The one MERGE statement of a staging table into ``main``, as an approval runs it (no checks)."""
    from pyspark.errors import PySparkException
    from pyspark.sql.pandas.types import from_arrow_schema

    columns = staged_columns(staging)
    version = engine.latest_version(main)
    existing = {c.name for c in reads.table_schema(main, version)}
    staged = _small_source(staging)
    small = staged.rows is not None
    confs = dict(SMALL_MERGE_CONFS) if small else None
    if confs is not None:
        limit = REWRITE_MAX_FILES * engine.MAIN_FILE_BYTES
        touched = _touched_bytes(main, version, staged.row_ids or [], stop_above=limit)
        if touched is not None and touched <= limit:
            confs[DELETION_VECTORS_CONF] = "false"
    with engine.dml_session(commit, txn=txn, confs=confs) as spark:
        view = None
        schema = None
        if small:
            # DuckDB reads a Delta timestamp as a zoned Arrow timestamp and a timestamp_ntz
            # as a naive one, so each maps back to its own Spark type. A type Spark cannot
            # take from Arrow leaves the staging table as the source.
            try:
                schema = from_arrow_schema(staged.rows.schema, prefer_timestamp_ntz=True)
            except (PySparkException, TypeError, ValueError):
                schema = None
        if schema is not None:
            view = f"oreo_staged_{uuid.uuid4().hex}"
            spark.createDataFrame(staged.rows, schema=schema).createOrReplaceTempView(view)
        sql = _merge_sql(main, staging, columns, existing, staged.ops, widen=widen, row_ids=staged.row_ids, source=view)
        try:
            spark.sql(sql).collect()
        finally:
            if view is not None:
                spark.catalog.dropTempView(view)


def _allow_type_widening(main: Location, commit: engine.CommitInfo) -> None:
    """Turn on Delta type widening for a table made before Oreo turned it on at creation.

    Tables Oreo creates have it from their first commit, so the widening lands in the
    MERGE commit itself; an older table gets this one property commit first.
    """
    spark = engine.get_spark()
    ref = engine.delta_ref(main)
    props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {ref}").collect()}
    if props.get(engine.TYPE_WIDENING_PROPERTY) == "true":
        return
    upgrade = engine.new_commit(commit.actor, "enable_type_widening", cr_id=commit.extra.get("cr_id"))
    with engine.commit_metadata(upgrade):
        spark.sql(f"ALTER TABLE {ref} SET TBLPROPERTIES ('{engine.TYPE_WIDENING_PROPERTY}' = 'true')").collect()


def _merge_with_retries(record: ChangeRequest, main: Location, staging: Location, commit: engine.CommitInfo) -> None:
    retryable = _retryable()
    for attempt in Retrying(
        retry=retry_if_exception_type(retryable),
        stop=stop_after_attempt(MAX_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.2, max=5),
        reraise=True,
    ):
        with attempt:
            if engine.find_commit(main, record.base_version, cr_id=record.id, action=MERGE_ACTION):
                return  # a concurrent approval of this request landed it
            # Checked right before every attempt: a commit may have landed since the first
            # check (during validation) or, on a retry, while the MERGE ran.
            checked = engine.latest_version(main)
            _raise_on_conflicts(record, main, staging)
            _merge_once(record, main, staging, commit, checked_version=checked)
            if engine.find_commit(main, checked, cr_id=record.id, action=MERGE_ACTION) is None:
                raise _TableMoved(f"{main} moved past version {checked} before the MERGE read it")


def _raise_on_conflicts(record: ChangeRequest, main: Location, staging: Location) -> None:
    conflicts = conflicts_since(main, staging, record.base_version)
    if conflicts:
        metrics.conflicts_found(len(conflicts))
        shown = ", ".join(f"{c.cell} (v{c.version})" for c in conflicts[:_SHOWN])
        more = f" and {len(conflicts) - _SHOWN} more" if len(conflicts) > _SHOWN else ""
        raise ConflictError(
            f"change request {record.id} conflicts with newer commits in {len(conflicts)} cell(s): {shown}{more}; "
            f"its author {record.author} keeps or drops each ({conflicts[0].command(record.id)}; "
            f"over the API: POST /api/v1/change-requests/{record.id}/resolve with row_id, column and choice)"
        )


@metrics.counts_approvals
def approve_change_request(
    catalog: Catalog,
    cr_id: str,
    *,
    actor: User,
    comment: str | None = None,
    progress: Progress | None = None,
    stage: StageHook | None = None,
    expected_revision: int | None = None,
    expected_digest: str | None = None,
) -> ChangeRequest:
    """Merge an open change request into ``main`` (see the module docstring).

    Args:
        catalog: The catalog.
        cr_id: An open change request.
        actor: An approver of the project who is not the request's author.
        comment: Stored as the closing comment.
        progress: Called with (fraction done, what is happening).
        stage: Called with ``conflicts``, ``checks``, ``merge`` and ``sync`` as each
            starts; their durations are appended to the request's ``stages``.
        expected_revision: The revision the approver reviewed (as GitHub's merge takes the
            head SHA it expects); None approves the current one, which the answer names.
        expected_digest: That revision's digest as shown (``ChangeRequest.digest``).

    Whatever revision is approved, it is checked again while the table's writer lease is
    held, right before the MERGE: a request revised meanwhile is not merged.

    Returns:
        The merged request, with ``merged_version`` and the ``revision`` that was merged.

    Raises:
        PermissionDenied: Not an approver, or the author.
        StaleRevision: The request is not at the expected revision (or digest) any more, or
            was revised while this approval ran.
        ConflictError: The request is not open, or conflicts with newer commits.
        ValidationFailed: A critical expectation fails on the merged result.
        EngineError: Spark failed; ``main`` is unchanged and staging kept for a retry.
    """
    record = get_change_request(catalog, cr_id, actor=actor)
    require_role(catalog, actor, record.project_id, Role.APPROVER, action="approve a change request")
    if record.author == actor.username:
        raise PermissionDenied(
            f"{actor.username!r} wrote change request {cr_id} and cannot approve it; another approver must",
            user=actor.username,
        )
    check_reviewed(record, expected_revision, expected_digest)
    if record.state == CRState.CHANGES_REQUESTED:
        raise ConflictError(
            f"changes were requested on change request {cr_id}; it can be approved once its author revises it"
        )
    if record.state != CRState.OPEN:
        raise ConflictError(f"change request {cr_id} is {record.state.value}; only open requests can be approved")
    return _merge_open_request(catalog, record, actor=actor, comment=comment, progress=progress, stage=stage)


# The audit event (``core.imports.ImportSubmitted``) of an import submitted with its review skipped.
_IMPORT_SUBMITTED = "import_submitted"


def merge_unreviewed_import(
    catalog: Catalog, cr_id: str, *, actor: User, note: str, progress: Progress | None = None
) -> ChangeRequest:
    """Merge an import a project admin submitted with its review skipped, the admin as the merger.

    Only ``core.imports.import_file(review=False)`` submits such a request, and it calls this
    right away: conflicts, validation, the MERGE and the bookkeeping are an approval's. Any
    other request - an admin's own reviewed import included - is refused: it needs another
    approver (``approve_change_request``).

    Raises:
        PermissionDenied: Not a project admin, not the request's author, or a request submitted for review.
        ConflictError: The request is not open, or conflicts with newer commits.
        ValidationFailed: A critical expectation fails on the merged result.
        EngineError: Spark failed; ``main`` is unchanged.
    """
    record = get_change_request(catalog, cr_id, actor=actor)
    require_role(catalog, actor, record.project_id, Role.ADMIN, action="commit an import without review")
    if record.kind != "import" or record.author != actor.username or not _review_skipped(catalog, record):
        raise PermissionDenied(
            f"change request {cr_id} was submitted for review; another approver must approve it",
            user=actor.username,
        )
    if record.state != CRState.OPEN:
        raise ConflictError(f"change request {cr_id} is {record.state.value}; only open requests can be merged")
    return _merge_open_request(catalog, record, actor=actor, comment=note, progress=progress)


def _review_skipped(catalog: Catalog, record: ChangeRequest) -> bool:
    """Whether ``record`` was submitted as a direct commit (its ``import_submitted`` event says ``reviewed: false``)."""
    with catalog.session() as s:
        events = s.scalars(
            select(AuditEventRow).where(
                AuditEventRow.name == _IMPORT_SUBMITTED,
                AuditEventRow.project_id == record.project_id,
                AuditEventRow.dataset_id == record.dataset_id,
                AuditEventRow.actor == record.author,
                AuditEventRow.ts >= record.created_at - timedelta(minutes=1),
            )
        ).all()
        return any(e.details.get("cr_id") == record.id and e.details.get("reviewed") is False for e in events)


def _merge_open_request(
    catalog: Catalog,
    record: ChangeRequest,
    *,
    actor: User,
    comment: str | None,
    progress: Progress | None = None,
    stage: StageHook | None = None,
) -> ChangeRequest:
    """Steps 2 to 5 of an approval (module docstring) for an open request its caller checked may be merged."""
    report = progress or (lambda fraction, message: None)
    clock = Stopwatch("approve", stage)
    dataset = get_dataset(catalog, record.project_id, record.dataset_id, actor=actor)
    layout = layout_for(record.project_id, record.dataset_id)
    main = layout.main

    # A lease an earlier attempt could not release (the catalog failed as it ended) goes now.
    release_leftovers(catalog, record.project_id, record.dataset_id)
    landed = engine.find_commit(main, record.base_version, cr_id=record.id, action=MERGE_ACTION)
    if landed is None:
        landed = _merge_now(catalog, record, actor=actor, dataset=dataset, layout=layout, clock=clock, report=report)
    version, meta = landed
    clock.start("sync")
    report(0.85, "Updating the catalog")
    merged, stages = _record_merged(catalog, record, actor, version, meta, comment, clock)
    _announce_merged(catalog, record, merged, actor=actor, version=version, stages=stages)
    report(1.0, f"Merged as version {version}")
    return merged


def _merge_now(
    catalog: Catalog,
    record: ChangeRequest,
    *,
    actor: User,
    dataset: DatasetInfo,
    layout: DatasetLayout,
    clock: Stopwatch,
    report: Progress,
) -> tuple[int, dict[str, Any]]:
    """Steps 2 to 4 for a request not merged yet: conflicts, checks, the MERGE; its version and commit info."""
    cr_id = record.id
    main, staging = layout.main, staging_path(layout, record)
    if not (staging / "_delta_log").is_dir():
        raise NotFound(f"the staging table of {cr_id} is missing; reject the request", kind="staging")
    clock.start("conflicts")
    report(0.05, "Looking for conflicts with newer commits")
    _raise_on_conflicts(record, main, staging)
    clock.start("checks")
    report(0.25, "Validating the merged result")
    run_id = _validate_merged_result(catalog, record, dataset=dataset, layout=layout, staging=staging)
    clock.start("merge")
    report(0.5, "Merging into main")
    _merge_under_lease(catalog, record, actor, main, staging, run_id)
    landed = engine.find_commit(main, record.base_version, cr_id=cr_id, action=MERGE_ACTION)
    if landed is None:
        raise EngineError(f"the merge of {cr_id} left no commit in {main}; staging is kept, try again")
    return landed


def _validate_merged_result(
    catalog: Catalog, record: ChangeRequest, *, dataset: DatasetInfo, layout: DatasetLayout, staging: Location
) -> str:
    """The id of a validation run of the merged result that no critical expectation fails."""
    current = engine.latest_version(layout.main)
    # Nothing committed since the submit's run and the same suite: its verdict stands.
    run = reusable_run(layout, dataset, record.validation_run_id, current)
    if run is None:
        run = validate_change_request(layout, dataset, staging, version=current)
        _store_validation(catalog, record.id, run.run_id, run.status)
    if run.blocking:
        failed = ", ".join(f"{f.expectation}({f.column or ''})" for f in run.failures if f.severity == "critical")
        raise ValidationFailed(
            f"change request {record.id} fails critical expectations on the merged result: {failed}",
            offending=tuple(f.expectation for f in run.failures if f.severity == "critical"),
        )
    return run.run_id


def _merge_under_lease(
    catalog: Catalog, record: ChangeRequest, actor: User, main: Location, staging: Location, run_id: str
) -> None:
    """The MERGE, with the table's writer lease held and the approval recorded as started."""
    cr_id = record.id
    commit = engine.new_commit(actor.username, MERGE_ACTION, cr_id=cr_id, validation_run_id=run_id)
    try:
        with writing(catalog, record.project_id, record.dataset_id, what=_lease_name(cr_id)):
            _record_approval_started(catalog, record, actor)
            with metrics.timed_operation("merge"):
                _merge_with_retries(record, main, staging, commit)
    except OreoError:  # conflicts, failed checks, an unreachable catalog: already one clean line
        raise
    except _retryable() as exc:
        raise ConflictError(
            f"change request {cr_id} kept colliding with concurrent commits ({type(exc).__name__}); try again"
        ) from exc
    except Exception as exc:
        if disk.is_out_of_space(exc):
            raise disk.out_of_space(f"the merge of {cr_id}", main) from exc
        raise EngineError(f"Spark could not merge {cr_id}: {str(exc).splitlines()[0]}") from exc


def _record_merged(
    catalog: Catalog,
    record: ChangeRequest,
    actor: User,
    version: int,
    meta: dict[str, Any],
    comment: str | None,
    clock: Stopwatch,
) -> tuple[ChangeRequest, list[StageTiming]]:
    """Step 5: sync the catalog to the merged version and mark the request merged; it and the stage timings."""
    cr_id = record.id
    commit = engine.CommitInfo(
        commit_id=str(meta["commit_id"]), actor=str(meta.get("actor")), action=MERGE_ACTION, extra={"cr_id": cr_id}
    )
    try:
        sync_dataset(catalog, record.project_id, record.dataset_id, commit, version=version)
        stages = clock.timings()
        run_id = meta.get("validation_run_id")
        merged = _mark_merged(catalog, record, actor, version, comment, commit.commit_id, run_id, stages)
    except CatalogUnavailable as exc:
        # The catalog's own hint says "nothing was saved": untrue once the MERGE committed.
        raise CatalogUnavailable(
            f"{cr_id} was merged as version {version} of {record.project_id}/{record.dataset_id}, "
            f"but recording it failed: {exc}",
            hint="the merge is saved in the table; approve the request again once the catalog is back to finish",
        ) from exc
    return merged, stages


def _announce_merged(
    catalog: Catalog,
    record: ChangeRequest,
    merged: ChangeRequest,
    *,
    actor: User,
    version: int,
    stages: list[StageTiming],
) -> None:
    """Publish the stage timings, remove the request's leftovers, then publish the approval."""
    events.publish(events.StagesTimed(stages=tuple(stages)))
    remove_leftovers(merged)
    # The request is merged and recorded; what a subscriber raises is logged, never raised here.
    events.publish(
        events.Approved(
            catalog=catalog, project=record.project_id, dataset=record.dataset_id, cr_id=record.id,
            actor=actor.username, version=version, comment=merged.close_reason,
        )
    )  # fmt: skip


def _store_validation(catalog: Catalog, cr_id: str, run_id: str, status: str) -> None:
    with catalog.session() as s:
        row = s.get(ChangeRequestRow, cr_id)
        if row is not None:
            row.validation_run_id = run_id
            row.validation_status = status
            row.updated_at = utcnow()


def _mark_merged(
    catalog: Catalog,
    record: ChangeRequest,
    actor: User,
    version: int,
    comment: str | None,
    commit_id: str,
    run_id: str | None,
    stages: list[StageTiming],
) -> ChangeRequest:
    with catalog.session() as s:
        row = s.get(ChangeRequestRow, record.id)
        if row is None:
            raise NotFound(f"unknown change request {record.id!r}", kind="change request", ident=record.id)
        if row.state == CRState.MERGED.value:
            return record_from_row(row)  # a concurrent retry finished first
        if row.state != CRState.OPEN.value:
            raise ConflictError(f"change request {record.id} became {row.state} while it was being merged")
        row.state = CRState.MERGED.value
        row.merged_version = version
        row.stages = stages_json(record_from_row(row).stages + stages)
        row.closed_at = row.updated_at = utcnow()
        row.closed_by = actor.username
        row.close_reason = comment.strip() if comment and comment.strip() else None
        if row.close_reason:
            s.add(CommentRow(cr_id=record.id, author=actor.username, body=row.close_reason, revision=row.revision))
        audit.record(
            s,
            ChangeRequestMerged(
                actor=actor.username,
                project_id=record.project_id,
                dataset_id=record.dataset_id,
                cr_id=record.id,
                version=version,
                commit_id=commit_id,
                validation_run_id=run_id,
            ),
        )
        return record_from_row(row)


# ---------------------------------------------------------------- interrupted approvals


def _record_approval_started(catalog: Catalog, record: ChangeRequest, actor: User) -> None:
    """Check, holding the writer lease, that the request is still open at the revision being merged, and say so.

    The row lock orders this against ``request_changes`` (which locks the row too, then
    refuses while this approval holds the lease), so no revision can start between here
    and the MERGE.
    """
    with catalog.session() as s:
        row = s.get(ChangeRequestRow, record.id, with_for_update=True)
        if row is None:
            raise NotFound(f"unknown change request {record.id!r}", kind="change request", ident=record.id)
        check_reviewed(record_from_row(row), record.revision, record.digest)
        audit.record(
            s,
            ApprovalStarted(
                actor=actor.username, project_id=record.project_id, dataset_id=record.dataset_id, cr_id=record.id
            ),
        )
    engine.test_hold(float(os.environ.get(PAUSE_BEFORE_MERGE_ENV) or 0), os.environ.get(MERGE_GATE_ENV))
