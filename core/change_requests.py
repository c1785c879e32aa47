"""Change requests: a session's edits, staged as one Delta table, awaiting review.

Submitting turns a live-edit session into ``staging/<cr_id>`` - written by Spark, one
Delta table per change request - holding every touched row *as it would be after the
change*, plus two columns:

* ``_op``: ``update``, ``insert`` or ``delete``;
* ``_changed``: the columns the request changes in that row (all given columns for an
  insert, none for a delete), so a merge updates only those. An import's inserted rows
  have NULL here: they give every column they carry (``core.imports``).

Spark builds the staged rows itself: the session's edits (text) are pivoted per row,
cast to the main table's column types and laid over the row as of the session's base
version. Only the touched rows of that version are read, by DuckDB (a filtered scan that
skips files and row groups by their ``row_id`` statistics), and handed to Spark as a
local relation, so a small request costs Spark a write of a few rows, not a scan of
``main``. The catalog keeps the request's record and its state machine::

    open -> merged | rejected | withdrawn
    open -> changes_requested -> open (revised) | rejected | withdrawn

An approver asks for changes with a reason (a comment in the request's thread); the
author edits the request's own session again and revises: the request keeps its id and
thread and gains a revision (1, 2, ...). Each revision has its own staging table
(``staging_path``) and validation run, kept until the request closes. Comments can point
at one cell of the diff (row and column) and, like the audit log, are append-only.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit, bulk, diff, disk, engine, events, reads, sessions, storage, validation
from core.auth import Role, User, memberships, require_role
from core.catalog import AuditEventRow, Catalog, ChangeRequestRow, CommentRow, CRRevisionRow, DatasetRow, utcnow
from core.datasets import DatasetInfo, get_dataset, layout_for
from core.errors import ConflictError, EngineError, InvalidInput, NotFound, PermissionDenied, StaleRevision
from core.events import StageTiming as StageTiming
from core.layout import DatasetLayout, new_id, validate_id
from core.schema import SchemaChange
from core.sessions import CellEdit, effective_edits, find_session, mark_submitted
from core.storage import Location, location, remove_tree, spark_uri

OP_COLUMN = "_op"
CHANGED_COLUMN = "_changed"

# Called with a stage's name when that stage starts (submit: staging, checks;
# approve: conflicts, checks, merge, sync), so a page can show where a request is.
StageHook = Callable[[str], None]


class CRState(enum.StrEnum):
    OPEN = "open"
    MERGED = "merged"
    REJECTED = "rejected"
    WITHDRAWN = "withdrawn"
    CHANGES_REQUESTED = "changes_requested"


_TRANSITIONS: dict[CRState, set[CRState]] = {
    CRState.OPEN: {CRState.MERGED, CRState.REJECTED, CRState.WITHDRAWN, CRState.CHANGES_REQUESTED},
    CRState.CHANGES_REQUESTED: {CRState.OPEN, CRState.REJECTED, CRState.WITHDRAWN},
}
# Not closed yet: the staging tables and the session are kept.
IN_REVIEW = frozenset({CRState.OPEN, CRState.CHANGES_REQUESTED})


class Stopwatch:
    """Times the stages of one submit or approval and announces each to a ``StageHook``."""

    def __init__(self, action: Literal["submit", "approve"], hook: StageHook | None = None) -> None:
        self.action: Literal["submit", "approve"] = action
        self._hook = hook
        self._done: list[StageTiming] = []
        self._current: tuple[str, float] | None = None

    def start(self, stage: str) -> None:
        """End the running stage (if any) and start ``stage``."""
        self._close()
        if self._hook is not None:
            self._hook(stage)
        self._current = (stage, time.perf_counter())

    def timings(self) -> list[StageTiming]:
        """Every stage so far, the running one timed up to now (and ended)."""
        self._close()
        return list(self._done)

    def _close(self) -> None:
        if self._current is not None:
            stage, started = self._current
            self._done.append(StageTiming(self.action, stage, round(time.perf_counter() - started, 3)))
            self._current = None


def stages_json(stages: list[StageTiming]) -> str:
    return json.dumps([t.to_json() for t in stages])


@dataclass(frozen=True)
class ChangeRequest:
    id: str
    project_id: str
    dataset_id: str
    author: str
    title: str
    description: str
    state: CRState
    base_version: int
    session_id: str | None
    rows: int
    cells: int
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None
    closed_by: str | None
    close_reason: str | None
    merged_version: int | None
    validation_run_id: str | None = None
    validation_status: str | None = None
    kind: str = "edit"
    upload_id: str | None = None
    schema_changes: tuple[SchemaChange, ...] = ()
    stages: list[StageTiming] = field(default_factory=list)
    revision: int = 1
    # A digest of the current revision's staged content (``staging_digest``); None if staged before it was kept.
    digest: str | None = None
    # The current revision's bulk changes, one summary each (``bulk.BulkChange.to_json``), kept after its session.
    bulk_changes: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Comment:
    author: str
    ts: datetime
    body: str
    row_id: str | None = None  # set with ``column`` when the comment is on one cell of the diff
    column: str | None = None
    revision: int = 1  # the request's revision it was made on: a cell comment shows in that revision's diff

    def to_json(self) -> dict[str, Any]:
        return {
            "author": self.author,
            "ts": self.ts,
            "text": self.body,
            "row_id": self.row_id,
            "column": self.column,
            "revision": self.revision,
        }


@dataclass(frozen=True)
class Revision:
    """One staged revision of a change request (``cr_revisions``)."""

    number: int
    staged_at: datetime
    rows: int
    cells: int
    validation_run_id: str | None
    validation_status: str | None
    base_version: int
    digest: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "revision": self.number,
            "staged_at": self.staged_at,
            "rows": self.rows,
            "cells": self.cells,
            "validation_run_id": self.validation_run_id,
            "validation_status": self.validation_status,
            "base_version": self.base_version,
            "digest": self.digest,
        }


@dataclass(frozen=True)
class StateChange:
    """One step of a change request's state history (read from the audit log)."""

    at: datetime
    actor: str
    state: str
    revision: int | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "actor": self.actor, "state": self.state, "revision": self.revision, "note": self.note}


@dataclass(frozen=True, kw_only=True)
class ChangeRequestSubmitted(audit.AuditEvent):
    name = "cr_submitted"
    cr_id: str
    rows: int
    cells: int


@dataclass(frozen=True, kw_only=True)
class ChangeRequestClosed(audit.AuditEvent):
    name = "cr_closed"
    cr_id: str
    state: str
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class ChangesRequested(audit.AuditEvent):
    name = "cr_changes_requested"
    cr_id: str
    revision: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class ChangeRequestRevised(audit.AuditEvent):
    name = "cr_revised"
    cr_id: str
    revision: int
    rows: int
    cells: int


def record_from_row(row: ChangeRequestRow) -> ChangeRequest:
    return ChangeRequest(
        id=row.id,
        project_id=row.project_id,
        dataset_id=row.dataset_id,
        author=row.author,
        title=row.title,
        description=row.description,
        state=CRState(row.state),
        base_version=row.base_version,
        session_id=row.session_id,
        rows=row.rows,
        cells=row.cells,
        created_at=row.created_at,
        updated_at=row.updated_at,
        closed_at=row.closed_at,
        closed_by=row.closed_by,
        close_reason=row.close_reason,
        merged_version=row.merged_version,
        validation_run_id=row.validation_run_id,
        validation_status=row.validation_status,
        kind=row.kind or "edit",
        upload_id=row.upload_id,
        schema_changes=tuple(SchemaChange.from_json(c) for c in json.loads(row.schema_changes or "[]")),
        stages=[StageTiming.from_json(t) for t in json.loads(row.stages or "[]")],
        revision=row.revision or 1,
        digest=row.digest,
        bulk_changes=tuple(json.loads(row.bulk_changes or "[]")),
    )


def staging_path(layout: DatasetLayout, record: ChangeRequest) -> Location:
    """The staging table of a request's current revision: every reader of staged rows goes through here."""
    return layout.staging(record.id, record.revision)


def staging_digest(staging: Location) -> str:
    """A sha256 of a staging table's content: its Delta table id and the data files of its snapshot.

    Every Delta write names its files afresh (a UUID in each name) and every new table gets a
    new id, so restaging anything changes the digest. It reads only the table's JSON log (one
    small file for a staging table), so it costs milliseconds whatever the rows.
    """
    table_id = ""
    files: dict[str, int] = {}
    for commit in storage.glob(staging / "_delta_log", "*.json"):
        for line in storage.read_text(commit).splitlines():
            action = json.loads(line) if line.strip() else {}
            if "metaData" in action:
                table_id = str(action["metaData"].get("id", ""))
            elif "add" in action:
                files[action["add"]["path"]] = int(action["add"].get("size") or 0)
            elif "remove" in action:
                files.pop(action["remove"]["path"], None)
    text = table_id + "\n" + "".join(f"{path}\t{size}\n" for path, size in sorted(files.items()))
    return hashlib.sha256(text.encode()).hexdigest()


_WAITING = {CRState.CHANGES_REQUESTED: "waiting for its author's revision"}


def check_reviewed(
    record: ChangeRequest,
    revision: int | None,
    digest: str | None,
    *,
    states: frozenset[CRState] = frozenset({CRState.OPEN}),
) -> None:
    """Refuse a decision on a request that is no longer the revision its reviewer saw.

    Args:
        record: The request as it is now.
        revision: The revision the reviewer was shown; None checks none.
        digest: That revision's digest (``staging_digest``) as shown; None checks none. A request
            staged before digests were kept (``record.digest`` None) is matched by revision alone.
        states: The states the decision may be taken in.

    Raises:
        StaleRevision: The request was revised, re-staged, withdrawn or decided since.
    """
    if revision is None and digest is None:
        return
    seen = f"revision {revision}" if revision is not None else "the revision"
    moved = revision is not None and revision != record.revision
    if record.state not in states and not (moved and record.state in IN_REVIEW):
        state = _WAITING.get(record.state, record.state.value)
        raise StaleRevision(
            f"change request {record.id} is {state} now, not open as when you reviewed {seen}: reload it",
            cr_id=record.id, state=record.state.value, revision=record.revision, reviewed=revision,
        )  # fmt: skip
    if moved:
        raise StaleRevision(
            f"change request {record.id} is at revision {record.revision} now, not revision {revision} "
            "that you reviewed: reload it and review again",
            cr_id=record.id, state=record.state.value, revision=record.revision, reviewed=revision,
        )  # fmt: skip
    if digest is not None and record.digest is not None and digest != record.digest:
        raise StaleRevision(
            f"change request {record.id} revision {record.revision} was staged again since you reviewed it "
            f"(content {record.digest[:12]} now, not {digest[:12]}): reload it and review again",
            cr_id=record.id, state=record.state.value, revision=record.revision, reviewed=revision,
        )  # fmt: skip


def _write_staging(
    main: Location, staging: Location, base_version: int, edits: list[CellEdit], commit: engine.CommitInfo
) -> None:
    """Have Spark build and write the staged rows (see the module docstring).

    One local relation reaches Spark: per staged row, its ``op``, its base values
    (``b_<i>``, typed, NULL for an inserted row) and per column the edited text
    (``v_<i>``) and whether the column was edited (``s_<i>``). Spark casts the text to the
    column types and writes, in one stage with no shuffle.
    """
    import pyarrow as pa
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    spark = engine.get_spark()
    schema = spark.read.format("delta").option("versionAsOf", base_version).load(spark_uri(main)).schema
    fields = [f for f in schema.fields if f.name != "row_id"]
    ops = sorted({(e.row_id, e.change) for e in edits if e.column is None or e.change == "update"})
    given: dict[tuple[str, str], list[str]] = {}
    for e in edits:
        if e.column is not None:
            given.setdefault((e.row_id, e.column), [])
            if e.new_value is not None:
                given[(e.row_id, e.column)].append(e.new_value)
    # Several texts for one cell keep the greatest, as SQL's max() did; none is NULL.
    texts: dict[tuple[str, str], str | None] = {cell: max(v) if v else None for cell, v in given.items()}
    base = _base_rows(main, base_version, sorted({r for r, _ in ops}), schema.names)
    at = {row_id: i for i, row_id in enumerate(base.column("row_id").to_pylist())}
    picked = base.take(pa.array([at.get(r) for r, _ in ops], pa.int64()))
    arrays: dict[str, Any] = {"row_id": pa.array([r for r, _ in ops], pa.string()), "op": [o for _, o in ops]}
    local = [StructField("row_id", StringType()), StructField("op", StringType())]
    for i, f in enumerate(fields):
        arrays[f"b_{i}"] = picked.column(f.name)
        arrays[f"v_{i}"] = pa.array([texts.get((r, f.name)) for r, _ in ops], pa.string())
        arrays[f"s_{i}"] = pa.array([int((r, f.name) in texts) for r, _ in ops], pa.int32())
        local += [StructField(f"b_{i}", f.dataType), StructField(f"v_{i}", StringType())]
        local += [StructField(f"s_{i}", IntegerType())]
    view = f"oreo_stage_{commit.commit_id.replace('-', '')}"
    spark.createDataFrame(pa.table(arrays), StructType(local)).createOrReplaceTempView(view)
    values = ", ".join(
        f"CASE WHEN `s_{i}` = 1 THEN CAST(`v_{i}` AS {f.dataType.simpleString()}) ELSE `b_{i}` END "
        f"AS {engine.spark_ident(f.name)}"
        for i, f in enumerate(fields)
    )
    changed = (
        "filter(array("
        + ", ".join(f"CASE WHEN `s_{i}` = 1 THEN {engine.spark_string(f.name)} END" for i, f in enumerate(fields))
        + "), x -> x IS NOT NULL)"
    )
    sql = (
        f"SELECT row_id, {values}, op AS {OP_COLUMN}, "
        f"CASE WHEN op = 'delete' THEN array() ELSE {changed} END AS {CHANGED_COLUMN} FROM {view}"
    )
    save_staging(staging, sql, commit, views=[view])


# Up to this many row ids are spelled as an ``IN`` list, which DuckDB pushes into the
# scan (file and row group skipping); more are joined from one list parameter.
_LISTED_IDS = 1000


def _base_rows(main: Location, version: int, row_ids: list[str], names: list[str]) -> Any:
    """The rows ``row_ids`` of ``main`` at ``version`` (those that exist), as an Arrow table.

    Raises:
        EngineError: DuckDB could not read them.
    """
    select = ", ".join(reads.quote_ident(n) for n in names)
    params: list[Any]
    if len(row_ids) <= _LISTED_IDS:
        where, params = f"row_id IN ({', '.join('?' * len(row_ids)) or 'NULL'})", list(row_ids)
    else:
        where, params = "row_id IN (SELECT unnest(?::VARCHAR[]))", [row_ids]
    sql = f"SELECT {select} FROM delta_scan(?, version => ?) WHERE {where}"
    try:
        return reads.cursor().execute(sql, [str(main), int(version), *params]).to_arrow_table()
    except Exception as exc:  # duckdb.Error and its subclasses
        raise EngineError(f"DuckDB could not read the edited rows of {main}: {str(exc).splitlines()[0]}") from exc


def save_staging(staging: Location, sql: str, commit: engine.CommitInfo, *, views: list[str]) -> None:
    """Have Spark write the rows ``sql`` selects as the staging table, then drop the temp ``views`` it read.

    Nothing filters a staging table by column, so it skips min/max statistics. On a
    failure nothing is left at ``staging``.

    Raises:
        EngineError: Spark could not write it.
    """
    spark = engine.get_spark()
    try:
        with engine.commit_metadata(commit):
            spark.sql(sql).write.format("delta").option("delta.dataSkippingNumIndexedCols", "0").save(
                spark_uri(staging)
            )
    except Exception as exc:
        remove_tree(staging)
        if disk.is_out_of_space(exc):
            raise disk.out_of_space("the staging table", staging) from exc
        raise EngineError(f"Spark could not write the staging table: {str(exc).splitlines()[0]}") from exc
    finally:
        for name in views:
            spark.catalog.dropTempView(name)


def submit_change_request(
    catalog: Catalog,
    session_id: str,
    *,
    actor: User,
    title: str | None = None,
    description: str = "",
    stage: StageHook | None = None,
) -> ChangeRequest:
    """Stage a session's edits as a change request for review.

    ``stage`` is called with ``staging`` before the Spark write and ``checks`` before the
    validation; their durations are stored with the request (``ChangeRequest.stages``).

    Raises:
        PermissionDenied: ``actor`` does not own the session or is not an editor.
        InvalidInput: The session has no edits, or the title is too long.
        ConflictError: The session was already submitted.
        EngineError: Spark could not write the staging table (nothing is kept).

    The session of a request whose changes were requested (``sessions.REVISING``) is
    submitted as that request's next revision (``revise_change_request``).
    """
    info, layout = find_session(catalog, session_id)
    if info.owner != actor.username:
        raise PermissionDenied(f"session {session_id} belongs to {info.owner!r}", user=actor.username)
    require_role(catalog, actor, info.project_id, Role.EDITOR, action="submit a change request")
    if info.state == sessions.REVISING and info.cr_id is not None:
        # The session of a request whose changes were requested: submitting it is revising that request.
        return revise_change_request(catalog, info.cr_id, actor=actor, stage=stage)
    if info.state != "open":
        raise ConflictError(f"session {session_id} was already submitted")
    edits = effective_edits(layout, session_id)
    if not edits:
        raise InvalidInput(f"session {session_id} has no edits to submit", field="session")
    title = (title or f"Changes to {info.project_id}/{info.dataset_id}").strip()
    if len(title) > 300:
        raise InvalidInput("the title must be at most 300 characters", field="title")
    dataset = get_dataset(catalog, info.project_id, info.dataset_id, actor=actor)
    cr_id = new_id("cr")
    staging = layout.staging(cr_id)
    commit = engine.new_commit(actor.username, "stage_change_request", cr_id=cr_id)
    clock = Stopwatch("submit", stage)
    clock.start("staging")
    _write_staging(location(dataset.path), staging, info.base_version, edits, commit)
    rows = len({e.row_id for e in edits})
    cells = sum(1 for e in edits if e.column is not None)
    record = record_change_request(
        catalog,
        layout,
        dataset,
        staging,
        cr_id=cr_id,
        author=actor.username,
        title=title,
        description=description,
        base_version=info.base_version,
        rows=rows,
        cells=cells,
        session_id=session_id,
        clock=clock,
        bulk_changes=_bulk_json(layout, session_id),
    )
    mark_submitted(layout, session_id, cr_id)
    return record


def _bulk_json(layout: DatasetLayout, session_id: str) -> str | None:
    """The session's pending bulk changes as the request keeps them (None when it has none)."""
    changes = bulk.session_bulks(layout, session_id)
    return json.dumps([c.to_json() for c in changes]) if changes else None


def record_change_request(
    catalog: Catalog,
    layout: DatasetLayout,
    dataset: DatasetInfo,
    staging: Location,
    *,
    cr_id: str,
    author: str,
    title: str,
    description: str,
    base_version: int,
    rows: int,
    cells: int,
    session_id: str | None = None,
    kind: str = "edit",
    upload_id: str | None = None,
    schema_changes: list[SchemaChange] | None = None,
    clock: Stopwatch | None = None,
    run: validation.ValidationRun | None = None,
    announce: bool = True,
    bulk_changes: str | None = None,
) -> ChangeRequest:
    """Validate a written staging table and store the open request with its audit event.

    The catalog row comes last; on any failure the staging table is removed, so a failed
    submit leaves no request and no staging folder behind. ``clock`` (the submit's
    stopwatch) gets the ``checks`` stage; its timings are stored with the row. ``run``:
    the staging table's validation, when the caller already ran it. ``announce=False``
    tells no one of a request to review (an admin's direct commit merges it at once).
    """
    clock = clock or Stopwatch("submit")
    try:
        clock.start("checks")
        if run is None:
            run = validate_change_request(layout, dataset, staging)
        digest = staging_digest(staging)
        stages = clock.timings()
        with catalog.session() as s:
            row = ChangeRequestRow(
                id=cr_id,
                project_id=dataset.project_id,
                dataset_id=dataset.dataset_id,
                author=author,
                title=title,
                description=description,
                state=CRState.OPEN.value,
                base_version=base_version,
                session_id=session_id,
                rows=rows,
                cells=cells,
                validation_run_id=run.run_id,
                validation_status=run.status,
                kind=kind,
                upload_id=upload_id,
                schema_changes=json.dumps([c.to_json() for c in schema_changes]) if schema_changes else None,
                stages=stages_json(stages),
                digest=digest,
                bulk_changes=bulk_changes,
            )
            s.add(row)
            s.flush()
            s.add(revision_row(cr_id, 1, rows, cells, run, base_version, digest))
            _audit_submitted(s, row)
            record = record_from_row(row)
    except BaseException:
        remove_tree(staging)
        raise
    _publish_submitted(catalog, record, stages, announce=announce)
    return record


def _audit_submitted(s: Session, row: ChangeRequestRow) -> None:
    audit.record(
        s,
        ChangeRequestSubmitted(
            actor=row.author,
            project_id=row.project_id,
            dataset_id=row.dataset_id,
            cr_id=row.id,
            rows=row.rows,
            cells=row.cells,
        ),
    )


def _publish_submitted(catalog: Catalog, record: ChangeRequest, stages: list[StageTiming], *, announce: bool) -> None:
    """Publish the submit's stage timings and, unless ``announce`` is off, that a request awaits review."""
    events.publish(events.StagesTimed(stages=tuple(stages)))
    if announce:
        events.publish(
            events.Submitted(
                catalog=catalog, project=record.project_id, dataset=record.dataset_id, cr_id=record.id,
                actor=record.author,
            )
        )  # fmt: skip


def revision_row(
    cr_id: str,
    revision: int,
    rows: int,
    cells: int,
    run: validation.ValidationRun,
    base_version: int,
    digest: str,
) -> CRRevisionRow:
    return CRRevisionRow(
        cr_id=cr_id,
        revision=revision,
        staged_at=utcnow(),
        rows=rows,
        cells=cells,
        validation_run_id=run.run_id,
        validation_status=run.status,
        base_version=base_version,
        digest=digest,
    )


def validate_change_request(
    layout: DatasetLayout, dataset: DatasetInfo, staging: Location, version: int | None = None
) -> validation.ValidationRun:
    """Run the dataset's GX suite on a staged change as merged into ``main`` at ``version``."""
    main = location(dataset.path)
    version = int(dataset.version or 0) if version is None else version
    columns = [(c.name, c.type) for c in reads.table_schema(main, version)]
    suite = validation.suite_for(layout, dataset.dataset_id, columns)
    # Only the expectations about what the change sets: the staged rows' other values are
    # main's, judged when they landed (a staging table never changes, so a rerun at approval
    # judges the same expectations and may reuse this run).
    touched = validation.touched_columns(staging)
    frame = validation.change_frame(main, version, staging, suite, touched)
    return validation.validate_frame(frame, suite, layout, version=version, columns=touched)


def reusable_run(
    layout: DatasetLayout, dataset: DatasetInfo, run_id: str | None, version: int
) -> validation.ValidationRun | None:
    """The stored run ``run_id`` if it judged the change against ``main`` at ``version`` with today's suite.

    Staging tables are never rewritten and a table version never changes, so such a run's
    verdict is the verdict a new run would reach.
    """
    if run_id is None:
        return None
    try:
        run = validation.load_run(layout, run_id)
    except NotFound:
        return None
    if run.version != version or run.suite_digest is None:
        return None
    columns = [(c.name, c.type) for c in reads.table_schema(location(dataset.path), version)]
    suite = validation.suite_for(layout, dataset.dataset_id, columns)
    return run if run.suite_digest == validation.suite_digest(suite) else None


def validation_for(catalog: Catalog, cr_id: str, *, actor: User) -> validation.ValidationRun | None:
    """The latest validation run of a change request (None if it has none)."""
    record = get_change_request(catalog, cr_id, actor=actor)
    if record.validation_run_id is None:
        return None
    return validation.load_run(layout_for(record.project_id, record.dataset_id), record.validation_run_id)


def diff_change_request(
    catalog: Catalog, cr_id: str, *, actor: User, limit: int = 100, offset: int = 0
) -> diff.DiffPage:
    """One page of a change request's cell-level diff (see ``core.diff``).

    An open request is compared with ``main`` at its base version; a merged one is the
    diff of the commit that merged it. A rejected or withdrawn request has no diff.
    """
    record = get_change_request(catalog, cr_id, actor=actor)
    layout = layout_for(record.project_id, record.dataset_id)
    main = str(layout.main)
    if record.state == CRState.MERGED and record.merged_version is not None:
        version = record.merged_version
        columns = [c.name for c in reads.table_schema(layout.main, version)]
        present = {c.name for c in reads.table_schema(layout.main, version - 1)}
        scan = "FROM delta_scan(?, version => ?)"
        before = diff.Relation(f"SELECT {diff.select_list(columns, present)} {scan}", [main, version - 1])
        after = diff.Relation(f"SELECT * {scan}", [main, version])
        return diff.diff(before, after, columns, limit=limit, offset=offset)
    staging = staging_path(layout, record)
    if record.state not in IN_REVIEW or not (staging / "_delta_log").is_dir():
        return diff.DiffPage(changes=[], total=0)
    # The staged columns: the table's at the base version, plus any the request adds.
    columns = staged_columns(staging)
    present = {c.name for c in reads.table_schema(layout.main, record.base_version)}
    # Reads from main only the columns the request changes (and deleted rows whole).
    return diff.staged_diff(main, record.base_version, str(staging), columns, present, limit=limit, offset=offset)


def staged_columns(staging: Location) -> list[str]:
    """The data columns of a staging table (``row_id`` first; not ``_op``/``_changed``)."""
    return [c.name for c in reads.table_schema(staging) if c.name not in (OP_COLUMN, CHANGED_COLUMN)]


# ---------------------------------------------------------------- the row-shaped diff (core.diff.row_diff)


def diff_source(catalog: Catalog, cr_id: str, *, actor: User) -> diff.DiffSource | None:
    """What a change request's row diff compares (None for a rejected or withdrawn request: no diff).

    An open request: ``main`` at its base version, read only for the rows it stages, against
    its staged rows (a staged row carries every column as of the base version, so only the
    cells it changed differ). A merged one: the commit that merged it against the one before.
    """
    record = get_change_request(catalog, cr_id, actor=actor)
    layout = layout_for(record.project_id, record.dataset_id)
    main = str(layout.main)
    scan = "FROM delta_scan(?, version => ?)"
    if record.state == CRState.MERGED and record.merged_version is not None:
        version = record.merged_version
        after_schema = reads.table_schema(layout.main, version)
        before_schema = reads.table_schema(layout.main, version - 1)
        columns = [c.name for c in after_schema]
        present = {c.name for c in before_schema}
        return diff.DiffSource(
            before=diff.Relation(f"SELECT {diff.select_list(columns, present)} {scan}", [main, version - 1]),
            after=diff.Relation(f"SELECT {diff.select_list(columns, set(columns))} {scan}", [main, version]),
            columns=columns,
            schema=tuple(diff.schema_deltas(before_schema, after_schema)),
        )
    staging = staging_path(layout, record)
    if record.state not in IN_REVIEW or not (staging / "_delta_log").is_dir():
        return None
    columns = staged_columns(staging)
    base_schema = reads.table_schema(layout.main, record.base_version)
    present = {c.name for c in base_schema}
    staged_ids = "WHERE row_id IN (SELECT row_id FROM delta_scan(?))"
    schema = [
        diff.SchemaDelta(c.column, "add" if c.change == "add" else "retype", c.from_type, c.to_type)
        for c in record.schema_changes
    ]
    known = {s.column for s in schema}
    staged_types = {c.name: c.type for c in reads.table_schema(staging)}
    schema += [diff.SchemaDelta(c, "add", None, staged_types[c]) for c in columns if c not in present | known]
    return diff.DiffSource(
        before=diff.Relation(
            f"SELECT {diff.select_list(columns, present)} {scan} {staged_ids}",
            [main, record.base_version, str(staging)],
        ),
        after=diff.Relation(
            f"SELECT {diff.select_list(columns, set(columns))} FROM delta_scan(?) WHERE {OP_COLUMN} <> 'delete'",
            [str(staging)],
        ),
        columns=columns,
        schema=tuple(schema),
    )


def row_diff_change_request(
    catalog: Catalog,
    cr_id: str,
    *,
    actor: User,
    kinds: list[str] | None = None,
    columns: list[str] | None = None,
    limit: int = 50,
    offset: int = 0,
) -> diff.RowDiffPage:
    """One page of a change request's row-shaped diff, with the dataset's identifying columns.

    Raises:
        InvalidInput: An unknown kind or column to filter by; bad limit or offset.
        NotFound: Unknown change request.
        PermissionDenied: ``actor`` is not a member of the project.
    """
    record = get_change_request(catalog, cr_id, actor=actor)
    labels = diff.label_columns(catalog, record.project_id, record.dataset_id, actor=actor)
    source = diff_source(catalog, cr_id, actor=actor)
    spec = diff.check_filters(kinds, columns, source.columns if source else None)
    return diff.row_diff(source or diff.EMPTY_SOURCE, label_columns=labels, spec=spec, limit=limit, offset=offset)


def export_change_request_diff(
    catalog: Catalog,
    cr_id: str,
    out: Path,
    *,
    actor: User,
    fmt: diff.ExportFormat,
    kinds: list[str] | None = None,
    columns: list[str] | None = None,
) -> int:
    """Write a change request's whole row diff (filtered) to ``out`` as CSV or Parquet; returns its rows."""
    source = diff_source(catalog, cr_id, actor=actor)
    spec = diff.check_filters(kinds, columns, source.columns if source else None)
    return diff.export_row_diff(source or diff.EMPTY_SOURCE, out, fmt=fmt, spec=spec)


def get_change_request(catalog: Catalog, cr_id: str, *, actor: User) -> ChangeRequest:
    """A change request, for members of its project."""
    validate_id(cr_id, kind="change request id")
    with catalog.session() as s:
        row = s.get(ChangeRequestRow, cr_id)
        if row is None:
            raise NotFound(f"unknown change request {cr_id!r}", kind="change request", ident=cr_id)
        record = record_from_row(row)
    require_role(catalog, actor, record.project_id, Role.EDITOR, action="view this change request")
    return record


def list_change_requests(
    catalog: Catalog,
    *,
    actor: User,
    project_id: str | None = None,
    dataset_id: str | None = None,
    state: CRState | None = None,
) -> list[ChangeRequest]:
    """Change requests visible to ``actor``, newest first."""
    visible = memberships(catalog, actor)
    query = select(ChangeRequestRow).order_by(ChangeRequestRow.created_at.desc())
    if project_id is not None:
        query = query.where(ChangeRequestRow.project_id == project_id)
    if dataset_id is not None:
        query = query.where(ChangeRequestRow.dataset_id == dataset_id)
    if state is not None:
        query = query.where(ChangeRequestRow.state == state.value)
    with catalog.session() as s:
        return [record_from_row(r) for r in s.scalars(query) if r.project_id in visible]


def _close(
    catalog: Catalog,
    cr_id: str,
    to: CRState,
    *,
    actor: User,
    reason: str | None,
    reviewed: tuple[int | None, str | None] = (None, None),
) -> ChangeRequest:
    """Move a request to a closed state; ``reviewed`` (revision, digest) is checked in the same transaction."""
    with catalog.session() as s:
        row = s.get(ChangeRequestRow, cr_id, with_for_update=True)
        if row is None:
            raise NotFound(f"unknown change request {cr_id!r}", kind="change request", ident=cr_id)
        check_reviewed(record_from_row(row), *reviewed, states=IN_REVIEW)
        current = CRState(row.state)
        if to not in _TRANSITIONS.get(current, set()):
            raise ConflictError(f"change request {cr_id} is {current.value}; it cannot become {to.value}")
        row.state = to.value
        row.closed_at = row.updated_at = utcnow()
        row.closed_by = actor.username
        row.close_reason = reason
        if reason:
            s.add(CommentRow(cr_id=cr_id, author=actor.username, body=reason, revision=row.revision))
        audit.record(
            s,
            ChangeRequestClosed(
                actor=actor.username,
                project_id=row.project_id,
                dataset_id=row.dataset_id,
                cr_id=cr_id,
                state=to.value,
                reason=reason,
            ),
        )
        record = record_from_row(row)
    events.publish(
        events.Closed(
            catalog=catalog, project=record.project_id, dataset=record.dataset_id, cr_id=cr_id, actor=actor.username,
            state=to.value, reason=reason,
        )
    )  # fmt: skip
    remove_leftovers(record)
    return record


def remove_leftovers(record: ChangeRequest) -> None:
    """Delete a closed request's staging tables (every revision's) and session (seed 002 section 8.C)."""
    layout = layout_for(record.project_id, record.dataset_id)
    for revision in range(1, record.revision + 1):
        remove_tree(layout.staging(record.id, revision))
    if record.session_id:
        remove_tree(layout.session_dir(record.session_id))


def withdraw_change_request(catalog: Catalog, cr_id: str, *, actor: User, reason: str | None = None) -> ChangeRequest:
    """The author takes back an open request; its staging table is deleted, ``main`` untouched.

    ``reason`` is kept as the closing comment (a re-submitted request names its successor).
    """
    record = get_change_request(catalog, cr_id, actor=actor)
    if record.author != actor.username:
        raise PermissionDenied(f"only the author {record.author!r} can withdraw {cr_id}", user=actor.username)
    return _close(catalog, cr_id, CRState.WITHDRAWN, actor=actor, reason=reason)


def reject_change_request(
    catalog: Catalog,
    cr_id: str,
    *,
    actor: User,
    reason: str,
    expected_revision: int | None = None,
    expected_digest: str | None = None,
) -> ChangeRequest:
    """An approver rejects a request in review; its staging tables are deleted, ``main`` untouched.

    Raises:
        PermissionDenied: ``actor`` is not an approver of the project.
        InvalidInput: No reason.
        StaleRevision: The request is not the revision (``expected_revision``, ``expected_digest``)
            the approver reviewed any more (``check_reviewed``).
        ConflictError: The request is closed.
    """
    record = get_change_request(catalog, cr_id, actor=actor)
    require_role(catalog, actor, record.project_id, Role.APPROVER, action="reject a change request")
    check_reviewed(record, expected_revision, expected_digest, states=IN_REVIEW)
    if not reason or not reason.strip():
        raise InvalidInput("a reason is required to reject a change request", field="reason")
    reviewed = (expected_revision, expected_digest)
    return _close(catalog, cr_id, CRState.REJECTED, actor=actor, reason=reason.strip(), reviewed=reviewed)


def add_comment(
    catalog: Catalog,
    cr_id: str,
    body: str,
    *,
    actor: User,
    row_id: str | None = None,
    column: str | None = None,
) -> Comment:
    """Comment on a change request (anyone who can read its dataset), on one cell with ``row_id`` and ``column``.

    Raises:
        InvalidInput: An empty comment; a row that is not one of the request's changed rows,
            or a column its staged rows do not have; only one of ``row_id`` and ``column``.
    """
    comment_on = get_change_request(catalog, cr_id, actor=actor)
    if not body.strip():
        raise InvalidInput("a comment cannot be empty", field="comment")
    if row_id is not None or column is not None:
        _check_cell(comment_on, row_id, column)
    with catalog.session() as s:
        row = CommentRow(
            cr_id=cr_id,
            author=actor.username,
            body=body.strip(),
            row_id=row_id,
            column_name=column,
            revision=comment_on.revision,
        )
        s.add(row)
        s.flush()
        comment = _comment(row)
    events.publish(
        events.Commented(
            catalog=catalog, project=comment_on.project_id, dataset=comment_on.dataset_id, cr_id=cr_id,
            actor=actor.username, comment=comment.body, row_id=row_id, column=column,
        )
    )  # fmt: skip
    return comment


def _check_cell(record: ChangeRequest, row_id: str | None, column: str | None) -> None:
    """Refuse a cell that is not in the request's current revision: its row must be staged, its column exist."""
    if row_id is None or column is None:
        missing = "row" if row_id is None else "column"
        raise InvalidInput("a comment on a cell needs both a row and a column", field=missing)
    staging = staging_path(layout_for(record.project_id, record.dataset_id), record)
    if record.state not in IN_REVIEW or not (staging / "_delta_log").is_dir():
        raise InvalidInput(
            f"change request {record.id} is {record.state.value}: its rows can no longer be commented on", field="row"
        )
    columns = staged_columns(staging)
    if column not in columns:
        raise InvalidInput(f"change request {record.id} has no column {column!r}", field="column")
    found = reads.cursor().execute("SELECT count(*) FROM delta_scan(?) WHERE row_id = ?", [str(staging), row_id])
    if not found.fetchone()[0]:  # type: ignore[index]
        raise InvalidInput(f"row {row_id!r} is not one of the rows change request {record.id} changes", field="row")


def _comment(row: CommentRow) -> Comment:
    return Comment(row.author, row.ts, row.body, row.row_id, row.column_name, row.revision or 1)


def comments(catalog: Catalog, cr_id: str, *, actor: User) -> list[Comment]:
    """A change request's thread, oldest first."""
    get_change_request(catalog, cr_id, actor=actor)
    with catalog.session() as s:
        rows = s.scalars(select(CommentRow).where(CommentRow.cr_id == cr_id).order_by(CommentRow.id))
        return [_comment(r) for r in rows]


def revisions(catalog: Catalog, cr_id: str, *, actor: User) -> list[Revision]:
    """A change request's revisions, first to current."""
    get_change_request(catalog, cr_id, actor=actor)
    with catalog.session() as s:
        rows = s.scalars(select(CRRevisionRow).where(CRRevisionRow.cr_id == cr_id).order_by(CRRevisionRow.revision))
        return [
            Revision(
                r.revision,
                r.staged_at,
                r.rows,
                r.cells,
                r.validation_run_id,
                r.validation_status,
                r.base_version,
                r.digest,
            )
            for r in rows
        ]


_STATE_EVENTS = ("cr_submitted", ChangesRequested.name, ChangeRequestRevised.name, "cr_closed", "cr_merged")


def state_history(catalog: Catalog, cr_id: str, *, actor: User) -> list[StateChange]:
    """How a change request's state moved, oldest first, from the audit log."""
    record = get_change_request(catalog, cr_id, actor=actor)
    with catalog.session() as s:
        events = s.scalars(
            select(AuditEventRow)
            .where(
                AuditEventRow.name.in_(_STATE_EVENTS),
                AuditEventRow.project_id == record.project_id,
                AuditEventRow.dataset_id == record.dataset_id,
                AuditEventRow.ts >= record.created_at - timedelta(minutes=1),
            )
            .order_by(AuditEventRow.id)
        ).all()
        found = [(e.ts, e.actor, e.name, dict(e.details)) for e in events if e.details.get("cr_id") == cr_id]
    history = []
    for at, who, name, details in found:
        if name == "cr_submitted":
            history.append(StateChange(at, who, CRState.OPEN.value, 1))
        elif name == ChangesRequested.name:
            requested = CRState.CHANGES_REQUESTED.value
            history.append(StateChange(at, who, requested, details.get("revision"), details.get("reason")))
        elif name == ChangeRequestRevised.name:
            history.append(StateChange(at, who, CRState.OPEN.value, details.get("revision"), "revised"))
        elif name == "cr_merged":
            history.append(StateChange(at, who, CRState.MERGED.value, None, f"version {details.get('version')}"))
        else:
            history.append(StateChange(at, who, str(details.get("state")), None, details.get("reason")))
    return history


# An import's rows come from its file, not from a session its author could edit again.
IMPORT_NOT_REVISABLE = "import requests are revised by importing again: change request {cr_id} stages a file, not edits"


def request_changes(
    catalog: Catalog,
    cr_id: str,
    reason: str,
    *,
    actor: User,
    expected_revision: int | None = None,
    expected_digest: str | None = None,
) -> ChangeRequest:
    """An approver (not the author) sends an open request back to its author, with a reason.

    The reason goes into the thread; the request's session can be edited again (``revise``).
    ``expected_revision`` and ``expected_digest``: the revision the approver reviewed (see
    ``check_reviewed``); checked again in the transaction that changes the state.

    Raises:
        PermissionDenied: ``actor`` is not an approver of the project, or wrote the request.
        InvalidInput: No reason.
        StaleRevision: The request is not the revision the approver reviewed any more.
        ConflictError: The request is not open, or an approval of it is running or landed; an
            import request (it is revised by importing again: reject it with a reason).
    """
    record = get_change_request(catalog, cr_id, actor=actor)
    require_role(catalog, actor, record.project_id, Role.APPROVER, action="request changes on a change request")
    if record.author == actor.username:
        raise PermissionDenied(
            f"{actor.username!r} wrote change request {cr_id} and cannot request changes on it", user=actor.username
        )
    check_reviewed(record, expected_revision, expected_digest)
    if record.kind == "import":
        raise ConflictError(IMPORT_NOT_REVISABLE.format(cr_id=cr_id) + "; reject it with a reason instead")
    if not reason or not reason.strip():
        raise InvalidInput("a reason is required to request changes", field="reason")
    if record.state != CRState.OPEN:
        raise ConflictError(
            f"change request {cr_id} is {record.state.value}; changes can only be requested on an open request"
        )
    if approval_state(catalog, cr_id, actor=actor).state in ("running", "landed"):
        raise ConflictError(f"change request {cr_id} is being merged; changes can no longer be requested")
    reason = reason.strip()
    with catalog.session() as s:
        # The row lock orders this against an approval's check (``core.merge``), which runs
        # holding the table's writer lease: whichever locks second sees the other's outcome.
        row = s.get(ChangeRequestRow, cr_id, with_for_update=True)
        if row is None:
            raise ConflictError(f"change request {cr_id} is no longer open")
        check_reviewed(record_from_row(row), expected_revision, expected_digest)
        if row.state != CRState.OPEN.value or row.revision != record.revision:
            raise ConflictError(f"change request {cr_id} is no longer open")
        if merging_now(s, record):
            raise ConflictError(f"change request {cr_id} is being merged; changes can no longer be requested")
        row.state = CRState.CHANGES_REQUESTED.value
        row.updated_at = utcnow()
        s.add(CommentRow(cr_id=cr_id, author=actor.username, body=reason, revision=record.revision))
        audit.record(
            s,
            ChangesRequested(
                actor=actor.username,
                project_id=record.project_id,
                dataset_id=record.dataset_id,
                cr_id=cr_id,
                revision=record.revision,
                reason=reason,
            ),
        )
        updated = record_from_row(row)
    layout = layout_for(record.project_id, record.dataset_id)
    if record.session_id and layout.session_metadata(record.session_id).is_file():
        sessions.mark_revising(layout, record.session_id)
    events.publish(
        events.ChangesRequested(
            catalog=catalog, project=record.project_id, dataset=record.dataset_id, cr_id=cr_id,
            actor=actor.username, reason=reason,
        )
    )  # fmt: skip
    return updated


def revise_change_request(
    catalog: Catalog, cr_id: str, *, actor: User, stage: StageHook | None = None
) -> ChangeRequest:
    """The author re-submits a request whose changes were requested, from its (edited) session.

    The session's edits are staged again as the next revision (its own staging table) and
    validated; the request is open again with the same id and thread. Earlier revisions'
    staging tables stay until the request closes.

    Raises:
        PermissionDenied: ``actor`` is not the author.
        ConflictError: No changes were requested; an import request (revised by importing again).
        NotFound: The request's session is gone.
        InvalidInput: The session has no edits.
        EngineError: Spark could not write the staging table (nothing is kept).
    """
    record = _revisable_request(catalog, cr_id, actor=actor)
    info, layout, edits = _session_edits(catalog, record)
    dataset = get_dataset(catalog, record.project_id, record.dataset_id, actor=actor)
    revision = record.revision + 1
    staging = layout.staging(cr_id, revision)
    remove_tree(staging)  # a revise that died half-way
    commit = engine.new_commit(actor.username, "stage_change_request", cr_id=cr_id, revision=revision)
    clock = Stopwatch("submit", stage)
    rows = len({e.row_id for e in edits})
    cells = sum(1 for e in edits if e.column is not None)
    bulk_changes = _bulk_json(layout, info.session_id)
    try:
        clock.start("staging")
        _write_staging(location(dataset.path), staging, info.base_version, edits, commit)
        clock.start("checks")
        run = validate_change_request(layout, dataset, staging)
        digest = staging_digest(staging)
        stages = clock.timings()
        with catalog.session() as s:
            updated = _store_revision(
                s, record, actor=actor, revision=revision, rows=rows, cells=cells, base_version=info.base_version,
                run=run, stages=stages, digest=digest, bulk_changes=bulk_changes,
            )  # fmt: skip
    except BaseException:
        remove_tree(staging)
        raise
    events.publish(events.StagesTimed(stages=tuple(stages)))
    mark_submitted(layout, info.session_id, cr_id)
    events.publish(
        events.Revised(
            catalog=catalog, project=record.project_id, dataset=record.dataset_id, cr_id=cr_id,
            actor=actor.username, revision=revision,
        )
    )  # fmt: skip
    return updated


def _revisable_request(catalog: Catalog, cr_id: str, *, actor: User) -> ChangeRequest:
    """The edit request with changes requested that its author ``actor`` revises, or why not."""
    record = get_change_request(catalog, cr_id, actor=actor)
    if record.author != actor.username:
        raise PermissionDenied(f"only the author {record.author!r} can revise {cr_id}", user=actor.username)
    require_role(catalog, actor, record.project_id, Role.EDITOR, action="revise a change request")
    if record.kind == "import" or record.session_id is None:
        raise ConflictError(IMPORT_NOT_REVISABLE.format(cr_id=cr_id) + "; withdraw it and import a corrected file")
    if record.state != CRState.CHANGES_REQUESTED:
        raise ConflictError(
            f"change request {cr_id} is {record.state.value}; only a request with changes requested can be revised"
        )
    return record


def _session_edits(
    catalog: Catalog, record: ChangeRequest
) -> tuple[sessions.SessionInfo, DatasetLayout, list[CellEdit]]:
    """The request's session, its dataset's layout and its edits (there must be some)."""
    info, layout = sessions.find_session(catalog, str(record.session_id))
    edits = effective_edits(layout, info.session_id)
    if not edits:
        raise InvalidInput(f"session {info.session_id} has no edits to submit", field="session")
    return info, layout, edits


def _store_revision(
    s: Session,
    record: ChangeRequest,
    *,
    actor: User,
    revision: int,
    rows: int,
    cells: int,
    base_version: int,
    run: validation.ValidationRun,
    stages: list[StageTiming],
    digest: str,
    bulk_changes: str | None,
) -> ChangeRequest:
    """Open the request again at ``revision`` in session ``s``, with its revision row and audit event."""
    cr_id = record.id
    row = s.get(ChangeRequestRow, cr_id)
    if row is None or row.state != CRState.CHANGES_REQUESTED.value:
        raise ConflictError(f"change request {cr_id} changed state while it was being revised")
    row.state = CRState.OPEN.value
    row.revision = revision
    row.rows, row.cells, row.base_version = rows, cells, base_version
    row.validation_run_id, row.validation_status = run.run_id, run.status
    row.stages = stages_json(stages)
    row.digest = digest
    row.bulk_changes = bulk_changes
    row.updated_at = utcnow()
    s.add(revision_row(cr_id, revision, rows, cells, run, base_version, digest))
    audit.record(
        s,
        ChangeRequestRevised(
            actor=actor.username,
            project_id=record.project_id,
            dataset_id=record.dataset_id,
            cr_id=cr_id,
            revision=revision,
            rows=rows,
            cells=cells,
        ),
    )
    return record_from_row(row)


# ---------------------------------------------------------------- approvals in flight


MERGE_ACTION = "merge_change_request"


@dataclass(frozen=True, kw_only=True)
class ApprovalStarted(audit.AuditEvent):
    """An approval took the table's writer lease and is about to MERGE; ``cr_merged`` ends it."""

    name = "approval_started"
    cr_id: str


def lease_name(cr_id: str) -> str:
    return f"the merge of {cr_id}"


def merging_now(s: Session, record: ChangeRequest) -> bool:
    """Whether an approval of ``record`` holds its table's writer lease, read in the caller's transaction ``s``."""
    dataset = s.get(DatasetRow, (record.project_id, record.dataset_id))
    if dataset is None or not dataset.writer or dataset.writer_until is None:
        return False
    return dataset.writer.startswith(lease_name(record.id) + " by ") and dataset.writer_until > utcnow()


@dataclass(frozen=True)
class ApprovalState:
    """Where the last approval of an open change request stands.

    ``interrupted``: it started (``approval_started``) but neither finished nor still runs;
    ``landed``: its MERGE commit is ``version`` but the catalog was not updated yet.
    Either way, approving again finishes it (never merging twice).
    """

    state: Literal["none", "running", "interrupted", "landed"]
    version: int | None = None


def approval_state(catalog: Catalog, cr_id: str, *, actor: User) -> ApprovalState:
    """Whether an open request's approval was interrupted (a crash, a restart, the catalog down)."""
    record = get_change_request(catalog, cr_id, actor=actor)
    if record.state != CRState.OPEN:
        return ApprovalState("none")
    main = layout_for(record.project_id, record.dataset_id).main
    landed = engine.find_commit(main, record.base_version, cr_id=cr_id, action=MERGE_ACTION)
    if landed is not None:
        return ApprovalState("landed", landed[0])
    with catalog.session() as s:
        events = s.scalars(
            select(AuditEventRow).where(
                AuditEventRow.name == ApprovalStarted.name,
                AuditEventRow.project_id == record.project_id,
                AuditEventRow.dataset_id == record.dataset_id,
                AuditEventRow.ts >= record.created_at,
            )
        ).all()
        if not any(e.details.get("cr_id") == cr_id for e in events):
            return ApprovalState("none")
        dataset = s.get(DatasetRow, (record.project_id, record.dataset_id))
        holder, until = (dataset.writer, dataset.writer_until) if dataset is not None else (None, None)
    if holder and holder.startswith(lease_name(cr_id) + " by ") and until and until > utcnow() and _alive(holder):
        return ApprovalState("running")
    return ApprovalState("interrupted")


def _alive(holder: str) -> bool:
    """Whether a lease holder's process may still run: it runs on this host, or on another one."""
    try:
        host, pid = holder.rsplit(" by ", 1)[1].split(":")[:2]
        if host == socket.gethostname():
            os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (ValueError, IndexError, PermissionError):
        pass
    return True
