"""Datasets: creation from a file, the catalog sync after each commit, and browsing.

Creating a dataset validates the whole file first (``core.ingest``), derives ``row_id``
(the key column's values as strings, or a UUID per row), then lays out the dataset's
folders, keeps the upload under ``imports/<upload_id>/`` and has Spark write ``main/`` in
one CTAS commit carrying the table properties and the commit's userMetadata. Any failure
removes every folder it made, and the catalog row is written last, so a failed create
leaves nothing behind.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, get_args

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import or_, select, update

from core import audit, damage, engine, reads, rules, validation
from core.auth import SYSTEM, Role, User, memberships, require_role
from core.catalog import Catalog, DatasetRow, ProjectRow, utcnow
from core.config import get_settings
from core.errors import AlreadyExists, EngineError, InvalidInput, NotFound, OreoError, ValidationFailed
from core.filters import Condition
from core.ingest import RESERVED_COLUMNS, file_kind, parse_table, read_input_file
from core.layout import DatasetLayout, dataset_layout, new_id, validate_id
from core.storage import Location, ObjectPath, arrow_target, location, remove_tree, spark_uri, write_text_atomic

ROW_ID = "row_id"
_SHOWN_OFFENDERS = 10
# The inferred warning rules of a new main table, from its path, version and schema.
InferRules = Callable[[Location, int | None, list[reads.Column]], list[dict[str, Any]]]


@dataclass(frozen=True)
class DatasetInfo:
    project_id: str
    dataset_id: str
    key_column: str | None
    version: int | None
    rows: int | None
    last_commit_id: str | None
    last_commit_at: datetime | None
    created_by: str
    path: str


def _info(row: DatasetRow) -> DatasetInfo:
    layout = dataset_layout(get_settings().data_root, row.project_id, row.dataset_id)
    return DatasetInfo(
        project_id=row.project_id,
        dataset_id=row.dataset_id,
        key_column=row.key_column,
        version=row.delta_version,
        rows=row.row_count,
        last_commit_id=row.last_commit_id,
        last_commit_at=row.last_commit_at,
        created_by=row.created_by,
        path=str(layout.main),
    )


def layout_for(project_id: str, dataset_id: str) -> DatasetLayout:
    return dataset_layout(get_settings().data_root, project_id, dataset_id)


# ---------------------------------------------------------------- row ids and the stable order

# A keyless dataset keeps the order rows were added in its row_ids: each is a UUIDv7
# (RFC 9562), whose text sorts by creation time. Within one millisecond a 42-bit counter
# (RFC 9562 6.2, method 1: rand_a and the top 30 bits of rand_b) keeps rows made in one
# call, and calls in one process, in order; the counter starts at a random point in its
# lower half and the last 32 bits are random, so two processes rarely collide.
_COUNTER_BITS = 42
_id_lock = threading.Lock()
_last_ms = 0
_next_counter = 0


def time_ordered_ids(count: int) -> list[str]:
    """``count`` fresh UUIDv7 texts, each sorting after every id made before it in this process."""
    global _last_ms, _next_counter
    with _id_lock:
        now = time.time_ns() // 1_000_000
        if now > _last_ms or _next_counter + count >= 1 << _COUNTER_BITS:
            _last_ms = max(now, _last_ms + 1) if now <= _last_ms else now
            _next_counter = secrets.randbits(_COUNTER_BITS - 1)
        ms, first = _last_ms, _next_counter
        _next_counter += count
    tail = secrets.randbits(32)
    ids: list[str] = []
    for counter in range(first, first + count):
        value = (ms << 80) | (7 << 76) | ((counter >> 30) << 64) | (2 << 62) | ((counter & 0x3FFFFFFF) << 32) | tail
        h = f"{value:032x}"
        ids.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return ids


def time_ordered_id_sql() -> str:
    """A Spark SQL expression giving each row of one query a fresh UUIDv7 text, in scan order.

    The millisecond is this call's; the 62 bits after it hold
    ``monotonically_increasing_id()`` (ordered by partition, then by row in it), so the
    rows of one file keep their order and sort after every row added before.
    """
    ms = max(time.time_ns() // 1_000_000, _last_ms + 1)
    ts = f"{ms:012x}"
    seq = "monotonically_increasing_id()"
    rand_a = f"lpad(lower(hex(shiftright({seq}, 50))), 3, '0')"
    variant = f"lower(hex(8 | (shiftright({seq}, 48) & 3)))"
    rest = f"lpad(lower(hex(shiftleft({seq} & {(1 << 48) - 1}, 12) | {secrets.randbits(12)})), 15, '0')"
    return f"concat('{ts[:8]}-{ts[8:]}-7', {rand_a}, '-', {variant}, substr({rest}, 1, 3), '-', substr({rest}, 4, 12))"


def stable_order(info: DatasetInfo) -> list[str]:
    """The columns a dataset's rows are shown in when no sort is chosen: its key, else ``row_id``.

    ``row_id`` is a UUIDv7 for rows added to a keyless dataset, so this is the order they
    were added (older datasets' random UUIDs just sort by ``row_id``). A merge rewrites
    rows into new files but never changes this order.
    """
    return [info.key_column] if info.key_column and info.key_column != ROW_ID else [ROW_ID]


def row_ids_for(table: pa.Table, key: str | None) -> pa.Array:
    """``row_id`` values for ``table``: the key column as strings, or fresh time-ordered UUIDs.

    Raises:
        InvalidInput: ``key`` is not a column.
        ValidationFailed: The key has NULLs or duplicates; the message lists the first ones.
    """
    if key is None:
        return pa.array(time_ordered_ids(table.num_rows), type=pa.string())
    if key not in table.column_names:
        raise InvalidInput(
            f"key column {key!r} is not in the file; columns are: {', '.join(table.column_names)}", field="key"
        )
    values = table.column(key)
    if values.null_count:
        positions = pc.indices_nonzero(pc.is_null(values)).to_pylist()[:_SHOWN_OFFENDERS]
        rows = ", ".join(str(p + 1) for p in positions)
        raise ValidationFailed(
            f"key column {key!r} has {values.null_count} empty value(s), first at data row(s) {rows}; "
            "every row needs a key",
            offending=tuple(str(p + 1) for p in positions),
        )
    as_text = values.cast(pa.string()) if values.type != pa.string() else values
    counts = pc.value_counts(as_text)
    duplicated = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
    if len(duplicated):
        shown = duplicated.to_pylist()[:_SHOWN_OFFENDERS]
        raise ValidationFailed(
            f"key column {key!r} has {len(duplicated)} duplicated value(s): {', '.join(map(str, shown))}; "
            "keys must be unique",
            offending=tuple(map(str, shown)),
        )
    return as_text.combine_chunks() if isinstance(as_text, pa.ChunkedArray) else as_text


def with_row_ids(table: pa.Table, key: str | None) -> pa.Table:
    """``table`` with ``row_id`` as its first column (the key itself stays a column)."""
    if key is None:
        reserved = RESERVED_COLUMNS & set(table.column_names)
        if reserved:
            raise InvalidInput(
                f"column {sorted(reserved)[0]!r} is reserved for Oreo's row ids; rename it or use it as the key",
                field="file",
            )
    ids = row_ids_for(table, key)
    if key == ROW_ID:
        table = table.drop_columns([ROW_ID])
    return table.add_column(0, pa.field(ROW_ID, pa.string(), nullable=False), ids)


def create_dataset(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    file: Path | str,
    *,
    key: str | None = None,
    sheet: str | None = None,
    actor: User = SYSTEM,
) -> DatasetInfo:
    """Create a dataset whose ``main`` table holds the rows of ``file``.

    Args:
        catalog: The catalog.
        project_id: An existing project.
        dataset_id: A new dataset id.
        file: CSV, Parquet or XLSX.
        key: Column whose values become ``row_id``; unique, non-null. None: UUIDs.
        sheet: XLSX sheet to read.
        actor: Must be admin in the project.

    Raises:
        InvalidInput / InvalidFile: Bad ids, file or key.
        ValidationFailed: Duplicate or NULL keys.
        AlreadyExists: The dataset exists.
        PermissionDenied: ``actor`` is not an admin of the project.
        EngineError: Spark failed; nothing is left behind.
    """
    layout = layout_for(project_id, dataset_id)
    file = Path(file)
    file_kind(file)
    _check_new_dataset(catalog, project_id, dataset_id, layout, actor)
    settings = get_settings()
    # Read once, bounded; the bytes parsed are the bytes kept, so a file that grows after
    # the read is never copied past the limit.
    data = read_input_file(file, max_bytes=settings.max_upload_mb * 1024 * 1024)
    table = with_row_ids(parse_table(data, file, sheet=sheet), key)
    return _create(catalog, layout, project_id, dataset_id, table, key=key, actor=actor, source=file.name, raw=data)


def create_dataset_from_table(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    table: pa.Table,
    *,
    key: str | None = None,
    actor: User = SYSTEM,
    source: str,
    infer: InferRules | None = None,
) -> DatasetInfo:
    """Create a dataset whose ``main`` table holds the rows of an Arrow table (a migration's rows).

    As ``create_dataset`` without a file to read and parse again: the rows get their
    ``row_id`` and are kept as the upload's ``converted.parquet`` only (there is no raw
    file), which counts against ``OREO_MAX_UPLOAD_MB`` like an upload.

    Args:
        catalog: The catalog.
        project_id: An existing project.
        dataset_id: A new dataset id.
        table: The rows, in Delta-ready types (see ``core.ingest.normalise_types``).
        key: Column whose values become ``row_id``; unique, non-null. None: UUIDs.
        actor: Must be admin in the project.
        source: Where the rows came from, for the audit log.
        infer: Gives the inferred warning rules of the written ``main`` (its path, version and
            schema); None: ``rules.infer_rules`` reads them from the stored table. A migration
            passes rules it inferred from the rows while Spark wrote them.

    Raises:
        As ``create_dataset``; InvalidInput also when the rows are over the dataset limit.
    """
    layout = layout_for(project_id, dataset_id)
    _check_new_dataset(catalog, project_id, dataset_id, layout, actor)
    rows = with_row_ids(table, key)
    return _create(
        catalog, layout, project_id, dataset_id, rows, key=key, actor=actor, source=source, raw=None, infer=infer
    )


def _check_new_dataset(catalog: Catalog, project_id: str, dataset_id: str, layout: DatasetLayout, actor: User) -> None:
    require_role(catalog, actor, project_id, Role.ADMIN, action="create a dataset")
    with catalog.session() as s:
        if s.get(ProjectRow, project_id) is None:
            raise NotFound(f"unknown project {project_id!r}", kind="project", ident=project_id)
        if s.get(DatasetRow, (project_id, dataset_id)) is not None:
            raise AlreadyExists(f"dataset {project_id}/{dataset_id} already exists", kind="dataset", ident=dataset_id)
    if layout.exists():
        raise AlreadyExists(
            f"folder {layout.root} already exists but is not in the catalog; move it away first",
            kind="dataset",
            ident=dataset_id,
        )


def _create(
    catalog: Catalog,
    layout: DatasetLayout,
    project_id: str,
    dataset_id: str,
    table: pa.Table,
    *,
    key: str | None,
    actor: User,
    source: str,
    raw: bytes | None,
    infer: InferRules | None = None,
) -> DatasetInfo:
    """Lay out the dataset, keep the upload, write ``main`` from ``table`` (``row_id`` set), record it.

    ``raw`` is the uploaded file's bytes, kept as ``raw.<ext>`` of ``source``; None: no file
    was uploaded, and the converted rows must fit the dataset limit.
    """
    # The highest folder this call creates: on failure the dataset's folder goes, then each
    # parent up to this one while it is empty (``logs/`` the engine wrote meanwhile stays).
    created_top = layout.root
    while not created_top.parent.exists():
        created_top = created_top.parent
    commit = engine.new_commit(actor.username, "create_dataset", dataset=f"{project_id}/{dataset_id}")
    try:
        layout.create()
        upload_id = new_id("up")
        upload = layout.upload(upload_id)
        upload.mkdir(parents=True)
        if raw is not None:
            (upload / f"raw{Path(source).suffix.lower()}").write_bytes(raw)
        converted = upload / "converted.parquet"
        write_converted(table, converted)
        if raw is None:
            check_dataset_size(converted.stat().st_size)
        _write_main(layout, converted, commit)
        info = sync_dataset(catalog, project_id, dataset_id, commit, key_column=key, created_by=actor.username)
        schema = reads.table_schema(layout.main, info.version)
        columns = [(c.name, c.type) for c in schema]
        # The default critical rules, and warnings inferred from what the data looks like.
        inferred = (infer or rules.infer_rules)(layout.main, info.version, schema)
        validation.write_default_suite(layout, dataset_id, columns, inferred=inferred)
        with catalog.session() as s:
            audit.record(
                s,
                audit.DatasetCreated(
                    actor=actor.username,
                    project_id=project_id,
                    dataset_id=dataset_id,
                    source_file=source,
                    key_column=key,
                    rows=info.rows or 0,
                    version=info.version or 0,
                    commit_id=commit.commit_id,
                ),
            )
        return info
    except BaseException:
        _remove_created(layout.root, created_top)
        with catalog.session() as s:
            row = s.get(DatasetRow, (project_id, dataset_id))
            if row is not None:
                s.delete(row)
        raise


def check_dataset_size(parquet_bytes: int) -> None:
    """Refuse rows that are over the dataset limit as Parquet (a file upload is bounded when read)."""
    limit_mb = get_settings().max_upload_mb
    size_mb = parquet_bytes / 2**20
    if size_mb > limit_mb:
        raise InvalidInput(
            f"the data is {size_mb:.1f} MB as Parquet, over the {limit_mb} MB dataset limit",
            field="file",
            hint=f"raise OREO_MAX_UPLOAD_MB for this run, e.g. OREO_MAX_UPLOAD_MB={int(size_mb * 1.2) + 1}",
        )


def _remove_created(root: Location, created_top: Location) -> None:
    """Remove a failed create's dataset folder, then its parents up to ``created_top`` while empty.

    Only what the create made goes: a parent that now holds something else (Spark's and
    Oreo's ``logs/`` under a data root made by this create, another dataset created
    meanwhile) stays.
    """
    remove_tree(root)
    if isinstance(root, ObjectPath) or isinstance(created_top, ObjectPath):
        return  # an object store has no empty folders to tidy
    folder = root.parent
    while folder.is_relative_to(created_top):
        try:
            folder.rmdir()
        except OSError:  # not empty, or already gone
            if folder.exists():
                return
        folder = folder.parent


def write_converted(table: pa.Table, path: Location) -> None:
    """Write the rows to be created (``row_id`` set) as Parquet, sorted by ``row_id``.

    Sorted here, where the rows already are, ``_write_main`` gets main's layout by splitting
    the file in order instead of a range shuffle and a sort in Spark (profiled on 1M rows:
    5.0 s against 7.4 s, the same 8 files of disjoint row_id ranges).
    """
    # Row groups are the grain at which Spark splits the file into write tasks: about a
    # quarter of a main file each (in memory, so smaller still as Parquet).
    per_row = table.nbytes / table.num_rows if table.num_rows else 1.0
    rows = max(1, int(engine.MAIN_FILE_BYTES / 4 / max(per_row, 1.0)))
    where, filesystem = arrow_target(path)
    pq.write_table(table.sort_by(ROW_ID), where, row_group_size=rows, filesystem=filesystem)


def _write_main(layout: DatasetLayout, converted: Location, commit: engine.CommitInfo) -> None:
    """Create ``main`` from ``converted`` (written by ``write_converted``, so sorted by row_id)."""
    view = f"oreo_create_{uuid.uuid4().hex}"
    props = engine.main_table_properties_sql()
    # Written clustered by row_id, in files of about engine.MAIN_FILE_BYTES: a small MERGE then
    # skips every file whose row_id range cannot hold its rows. The file is split in order into
    # a few read tasks (as many as the engine runs at once), each rolling over to a new main
    # file every so many rows, so each file holds a contiguous row_id range. One task per file
    # cost more: 1M rows in 30 files took 4.9-5.7 s that way, 3.4-4.8 s from 4 tasks.
    size = converted.stat().st_size
    files = engine.main_file_count(size)
    tasks = max(1, min(files, get_settings().spark_shuffle_partitions))
    where, filesystem = arrow_target(converted)
    rows = pq.read_metadata(where, filesystem=filesystem).num_rows
    confs = {
        "spark.sql.files.maxPartitionBytes": str(max(1, -(-size // tasks))),
        "spark.sql.files.openCostInBytes": "0",
        "spark.sql.files.maxRecordsPerFile": str(max(1, -(-rows // files))),
    }
    try:
        with engine.dml_session(commit, confs=confs) as spark:
            spark.read.parquet(spark_uri(converted)).createOrReplaceTempView(view)
            try:
                spark.sql(
                    f"CREATE TABLE {engine.delta_ref(layout.main)} USING DELTA "
                    f"TBLPROPERTIES ({props}) AS SELECT * FROM {view}"
                )
            finally:
                spark.catalog.dropTempView(view)
    except OreoError:
        raise
    except Exception as exc:
        raise EngineError(f"Spark could not write the main table: {str(exc).splitlines()[0]}") from exc


def sync_dataset(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    commit: engine.CommitInfo,
    *,
    key_column: str | None = None,
    created_by: str | None = None,
    version: int | None = None,
) -> DatasetInfo:
    """Record the state after an Oreo commit (seed 002 section 8.D).

    Stores the version that ``commit`` created (found in the history unless the caller
    knows it), its id and time, and the row count counted by DuckDB. Creates the
    catalog row when ``created_by`` is given.
    """
    layout = layout_for(project_id, dataset_id)
    if version is None:
        version = engine.version_of_commit(layout.main, commit.commit_id)
    rows = reads.count_rows(layout.main, version)
    with catalog.session() as s:
        row = s.get(DatasetRow, (project_id, dataset_id))
        if row is None:
            if created_by is None:
                raise NotFound(f"unknown dataset {project_id}/{dataset_id}", kind="dataset")
            row = DatasetRow(project_id=project_id, dataset_id=dataset_id, key_column=key_column, created_by=created_by)
            s.add(row)
            s.flush()
        # Commits from concurrent processes may be synced out of order; the database
        # compares and writes in one statement, so the recorded version never goes back.
        s.execute(
            update(DatasetRow)
            .where(
                DatasetRow.project_id == project_id,
                DatasetRow.dataset_id == dataset_id,
                or_(DatasetRow.delta_version.is_(None), DatasetRow.delta_version <= version),
            )
            .values(delta_version=version, last_commit_id=commit.commit_id, last_commit_at=utcnow(), row_count=rows)
            .execution_options(synchronize_session=False)
        )
        s.flush()
        s.refresh(row)
        return _info(row)


def get_dataset(catalog: Catalog, project_id: str, dataset_id: str, *, actor: User) -> DatasetInfo:
    """A dataset's catalog entry, for a member of its project.

    Raises:
        NotFound: Unknown dataset.
        PermissionDenied: ``actor`` is not a member of the project.
    """
    validate_id(project_id, kind="project id")
    validate_id(dataset_id, kind="dataset id")
    require_role(catalog, actor, project_id, Role.EDITOR, action="read this dataset")
    with catalog.session() as s:
        row = s.get(DatasetRow, (project_id, dataset_id))
        if row is None:
            raise NotFound(f"unknown dataset {project_id}/{dataset_id}", kind="dataset", ident=dataset_id)
        return _info(row)


def list_datasets(catalog: Catalog, *, actor: User, project_id: str | None = None) -> list[DatasetInfo]:
    """Datasets of the projects ``actor`` may see, optionally one project only."""
    visible = memberships(catalog, actor)
    if project_id is not None:
        validate_id(project_id, kind="project id")
        require_role(catalog, actor, project_id, Role.EDITOR, action="list its datasets")
    query = select(DatasetRow).order_by(DatasetRow.project_id, DatasetRow.dataset_id)
    if project_id is not None:
        query = query.where(DatasetRow.project_id == project_id)
    with catalog.session() as s:
        return [_info(r) for r in s.scalars(query) if r.project_id in visible]


def dataset_columns(info: DatasetInfo, version: int | None = None) -> list[reads.Column]:
    """Columns of the main table at ``version`` (default: the catalog's version).

    Raises:
        TableDamaged: The table's log or current files are damaged (the message names the file).
    """
    damage.raise_if_damaged(location(info.path), f"{info.project_id}/{info.dataset_id}")
    return reads.table_schema(location(info.path), version if version is not None else info.version)


def dataset_rows(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    *,
    actor: User,
    version: int | None = None,
    filters: list[reads.RowFilter] | None = None,
    conditions: list[Condition] | None = None,
    order_by: str | None = None,
    descending: bool = False,
    limit: int = 50,
    offset: int = 0,
) -> reads.Page:
    """A page of the main table (optionally as of ``version``), read through DuckDB.

    Without ``version`` it reads the version the catalog last synced, so the page, the
    schema and the total all describe one snapshot, and an unfiltered total comes from
    the catalog's row count instead of a second scan. Rows are in the dataset's
    ``stable_order`` unless ``order_by`` sorts the whole table (the stable order then
    breaks ties); ``conditions`` are ``core.filters`` conditions, ANDed.
    """
    info = get_dataset(catalog, project_id, dataset_id, actor=actor)
    if version is not None and (version < 0 or (info.version is not None and version > info.version)):
        raise NotFound(
            f"dataset {project_id}/{dataset_id} has no version {version}; the latest is {info.version}",
            kind="version",
        )
    snapshot = version if version is not None else info.version
    return reads.read_page(
        location(info.path),
        version=snapshot,
        filters=filters,
        conditions=conditions,
        order_by=order_by,
        descending=descending,
        default_order=stable_order(info),
        limit=limit,
        offset=offset,
        known_total=info.rows if snapshot == info.version else None,
    )


@dataclass(frozen=True, kw_only=True)
class RulesChanged(audit.AuditEvent):
    name = "rules_changed"
    expectations: int


def dataset_rules(catalog: Catalog, project_id: str, dataset_id: str, *, actor: User) -> dict[str, Any]:
    """The dataset's GX ExpectationSuite, in GX's JSON form (the default one if never set)."""
    info = get_dataset(catalog, project_id, dataset_id, actor=actor)
    columns = [(c.name, c.type) for c in dataset_columns(info)]
    return validation.suite_for(layout_for(project_id, dataset_id), dataset_id, columns)


def set_dataset_rules(
    catalog: Catalog, project_id: str, dataset_id: str, document: Any, *, actor: User
) -> dict[str, Any]:
    """Replace the dataset's suite (admins); the document is checked by GX first.

    Raises:
        PermissionDenied: ``actor`` is not an admin of the project.
        InvalidInput: Not a valid GX suite, a bad severity, or a column the table lacks.
    """
    return _store_rules(catalog, project_id, dataset_id, document, actor=actor)


def _store_rules(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    document: Any,
    *,
    actor: User,
    event: Callable[[dict[str, Any]], audit.AuditEvent] | None = None,
) -> dict[str, Any]:
    """Check and store a suite (admins), recording ``RulesChanged`` and the ``event`` made from the stored suite."""
    info = get_dataset(catalog, project_id, dataset_id, actor=actor)
    require_role(catalog, actor, project_id, Role.ADMIN, action="change validation rules")
    columns = {c.name for c in dataset_columns(info)}
    if isinstance(document, dict):
        for i, item in enumerate(document.get("expectations") or []):
            kwargs = item.get("kwargs") if isinstance(item, dict) else None
            named = [kwargs["column"]] if isinstance(kwargs, dict) and isinstance(kwargs.get("column"), str) else []
            named += list(kwargs.get("column_list") or []) if isinstance(kwargs, dict) else []
            missing = [c for c in named if c not in columns]
            if missing:
                raise InvalidInput(
                    f"expectation #{i + 1} names unknown column {missing[0]!r}; "
                    f"columns are: {', '.join(sorted(columns))}",
                    field="suite",
                )
    suite = validation.save_suite(layout_for(project_id, dataset_id), document)
    with catalog.session() as s:
        audit.record(
            s,
            RulesChanged(
                actor=actor.username,
                project_id=project_id,
                dataset_id=dataset_id,
                expectations=len(suite.get("expectations", [])),
            ),
        )
        if event is not None:
            audit.record(s, event(suite))
    return suite


@dataclass(frozen=True)
class RuleProposal:
    """Rules inferred from a dataset at ``version``, as a proposal against its current rules (nothing stored).

    ``inferred`` are the rules as inferred; ``lines`` say, for each, what accepting it would do.
    """

    project_id: str
    dataset_id: str
    version: int | None
    inferred: tuple[dict[str, Any], ...]
    lines: tuple[rules.ProposedRule, ...]

    def counts(self) -> dict[str, int]:
        return {status: sum(line.status == status for line in self.lines) for status in get_args(rules.ProposalStatus)}

    def against(self, suite: dict[str, Any]) -> RuleProposal:
        """The same inferred rules weighed against ``suite``: the rules as they are now, edits since included."""
        return replace(self, lines=rules.propose(suite, list(self.inferred)))


@dataclass(frozen=True, kw_only=True)
class RulesAccepted(audit.AuditEvent):
    """A steward accepted proposed rules: each one by name, with what it did."""

    name = "rules_accepted"
    version: int | None
    accepted: list[dict[str, Any]]
    kept: list[str]


@dataclass(frozen=True)
class AcceptedRules:
    """What accepting a proposal did: the lines applied, the steward's rules it kept, the stored suite."""

    accepted: tuple[rules.ProposedRule, ...]
    kept: tuple[rules.ProposedRule, ...]
    suite: dict[str, Any]


def propose_dataset_rules(catalog: Catalog, project_id: str, dataset_id: str, *, actor: User) -> RuleProposal:
    """Infer rules from the dataset's current data, as a proposal against its rules; nothing is stored.

    Raises:
        NotFound: Unknown dataset, or one ``actor`` cannot read.
    """
    info = get_dataset(catalog, project_id, dataset_id, actor=actor)
    suite = dataset_rules(catalog, project_id, dataset_id, actor=actor)
    inferred = rules.infer_rules(location(info.path), info.version, dataset_columns(info))
    return RuleProposal(project_id, dataset_id, info.version, tuple(inferred), rules.propose(suite, inferred))


def accept_proposed_rules(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    *,
    actor: User,
    names: Collection[str] | None = None,
    proposal: RuleProposal | None = None,
) -> AcceptedRules:
    """Apply the proposal's lines ``names`` (every line when None) and record who accepted what (admins).

    ``proposal`` is the one the steward read (a fresh one when None). It is weighed against the
    rules as they are now, so a rule a person edited since is kept too. Nothing to apply stores nothing.

    Raises:
        PermissionDenied: ``actor`` is not an admin of the project.
        InvalidInput: No names given, a name the proposal lacks, or a rule a person edited.
    """
    require_role(catalog, actor, project_id, Role.ADMIN, action="change validation rules")
    if names is not None and not names:
        raise InvalidInput("no rules chosen: name the proposed rules to accept, or accept them all", field="rule")
    if proposal is None:
        proposal = propose_dataset_rules(catalog, project_id, dataset_id, actor=actor)
    elif (proposal.project_id, proposal.dataset_id) != (project_id, dataset_id):
        raise InvalidInput(f"that proposal is for {proposal.project_id}/{proposal.dataset_id}", field="proposal")
    suite = dataset_rules(catalog, project_id, dataset_id, actor=actor)
    inferred = list(proposal.inferred)
    changed, applied = rules.accepted(suite, inferred, names)
    kept = tuple(line for line in rules.propose(suite, inferred) if line.status == "kept")
    if not applied:
        return AcceptedRules((), kept, suite)

    def event(stored: dict[str, Any]) -> audit.AuditEvent:
        return RulesAccepted(
            actor=actor.username,
            project_id=project_id,
            dataset_id=dataset_id,
            version=proposal.version,
            accepted=[{"rule": line.name, "status": line.status, "change": line.change} for line in applied],
            kept=[line.name for line in kept],
        )

    stored = _store_rules(catalog, project_id, dataset_id, changed, actor=actor, event=event)
    return AcceptedRules(applied, kept, stored)


def propose_rules(catalog: Catalog, project_id: str, dataset_id: str, *, actor: User) -> dict[str, Any]:
    """The dataset's suite as it would be with the whole proposal accepted (nothing stored)."""
    proposal = propose_dataset_rules(catalog, project_id, dataset_id, actor=actor)
    suite = dataset_rules(catalog, project_id, dataset_id, actor=actor)
    return rules.with_inferred(suite, list(proposal.inferred))


def infer_dataset_rules(catalog: Catalog, project_id: str, dataset_id: str, *, actor: User) -> dict[str, Any]:
    """Accept the whole proposal inferred from the current data (admins); a steward's rules are kept.

    Raises:
        PermissionDenied: ``actor`` is not an admin of the project.
    """
    return accept_proposed_rules(catalog, project_id, dataset_id, actor=actor).suite


def change_dataset_rule(
    catalog: Catalog, project_id: str, dataset_id: str, number: int, change: rules.RuleChange, *, actor: User
) -> dict[str, Any]:
    """Change one rule's severity, bounds or on/off state (admins); ``number`` is 1-based.

    The rule is marked edited by ``actor``: no proposal changes it afterwards.

    Raises:
        PermissionDenied: ``actor`` is not an admin of the project.
        NotFound: No rule with that number.
        InvalidInput: A bad severity, bounds on a rule without bounds, or a minimum above the maximum.
    """
    require_role(catalog, actor, project_id, Role.ADMIN, action="change validation rules")
    if change.severity is not None and change.severity not in validation.SEVERITIES:
        raise InvalidInput(f"severity {change.severity!r}: use critical, warning or info", field="severity")
    suite = dataset_rules(catalog, project_id, dataset_id, actor=actor)
    changed = rules.changed_rule(suite, number, change, by=actor.username)
    return set_dataset_rules(catalog, project_id, dataset_id, changed, actor=actor)


def recent_rule_failures(
    catalog: Catalog, project_id: str, dataset_id: str, *, actor: User, runs: int = 20
) -> rules.RecentFailures:
    """How often each rule failed in the dataset's last ``runs`` validation runs."""
    get_dataset(catalog, project_id, dataset_id, actor=actor)
    return rules.recent_failures(layout_for(project_id, dataset_id), runs)


# ---------------------------------------------------------------- settings


@dataclass(frozen=True)
class DatasetSettings:
    """Per-dataset switches, kept in ``audit/settings.json`` beside the rules.

    ``allow_non_finite``: edits, added rows and imports may put NaN, Infinity and
    -Infinity into floating-point columns. Off by default: such a value is refused.
    """

    allow_non_finite: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"allow_non_finite": self.allow_non_finite}


@dataclass(frozen=True, kw_only=True)
class SettingsChanged(audit.AuditEvent):
    name = "dataset_settings_changed"
    settings: dict[str, Any]


def _settings_path(layout: DatasetLayout) -> Location:
    return layout.audit / "settings.json"


def dataset_settings(project_id: str, dataset_id: str) -> DatasetSettings:
    """A dataset's settings (the defaults when never set)."""
    path = _settings_path(layout_for(project_id, dataset_id))
    if not path.is_file():
        return DatasetSettings()
    data = json.loads(path.read_text(encoding="utf-8"))
    return DatasetSettings(allow_non_finite=bool(data.get("allow_non_finite", False)))


def set_dataset_settings(
    catalog: Catalog, project_id: str, dataset_id: str, *, actor: User, allow_non_finite: bool | None = None
) -> DatasetSettings:
    """Change a dataset's settings (admins); options left None keep their value.

    Raises:
        PermissionDenied: ``actor`` is not an admin of the project.
        NotFound: Unknown dataset.
    """
    get_dataset(catalog, project_id, dataset_id, actor=actor)
    require_role(catalog, actor, project_id, Role.ADMIN, action="change dataset settings")
    current = dataset_settings(project_id, dataset_id)
    settings = DatasetSettings(
        allow_non_finite=current.allow_non_finite if allow_non_finite is None else allow_non_finite
    )
    path = _settings_path(layout_for(project_id, dataset_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(settings.to_json(), indent=2))  # readers see the old file or the new one
    with catalog.session() as s:
        audit.record(
            s,
            SettingsChanged(
                actor=actor.username, project_id=project_id, dataset_id=dataset_id, settings=settings.to_json()
            ),
        )
    return settings
