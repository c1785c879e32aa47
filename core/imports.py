"""Imports: a CSV, Parquet or XLSX file appended, upserted or replacing a dataset's content, as a change request.

An import is three steps, so a screen can show each one:

1. ``store_upload`` reads the whole file strictly (``core.ingest``: encoding, ragged
   rows, corrupt Parquet, ambiguous XLSX sheet, size limit) and keeps it as
   ``imports/<upload_id>/raw.<ext>`` with ``converted.parquet`` beside it and an
   inferred-schema snapshot ``schema.json`` (seed 002 section 6). CSV columns the table
   keeps as text or decimals are parsed as such, so "00123" stays "00123".
2. ``plan_import`` compares the file's schema with the table's (``core.schema``: same,
   cast, **new**, **widen**, absent, incompatible) and checks the mode:

   * ``append`` - every row is new. Its ``row_id`` is the dataset's key value, or a UUID;
     a key that already exists is refused (use upsert);
   * ``upsert`` by a key column - rows whose key matches a row of the table update it
     (only the cells that differ), the others are inserted. The key is the dataset's key
     column, ``row_id`` (a re-imported export), or - in a dataset without a key column -
     any column whose values are unique in the table;
   * ``replace`` - the file becomes the table's whole content (seed 000's *overwrite*).
     With a key (the dataset's key column, or one given as for upsert) rows whose key is in
     the file and differ are updated, new keys are added, table rows whose key the file
     lacks are deleted, and identical rows are left out, so the diff and the MERGE stay the
     size of the change. Without any key every current row is deleted and every file row
     added. Every table column must be in the file (an empty one clears it).

   Keys must be present, non-empty and unique in the file.
3. ``submit_import`` has Spark write ``staging/<cr_id>`` from ``converted.parquet`` (the
   same ``_op``/``_changed`` layout as an edit request, see ``core.change_requests``;
   an inserted row's ``_changed`` is NULL: it gives every column it carries),
   validates it with GX and opens the change request (kind ``import``) with its schema
   changes. Review, conflicts and the MERGE are those of every change request; the
   MERGE adds new columns and widens types through Delta schema evolution in its commit.

Nothing is merged from ``imports/`` directly. A file that cannot be read leaves no
folder; a stored upload stays while its request is open (the UI keeps it while the user
picks options) and ``oreo cleanup`` removes it once it is older than the import TTL and
no open request uses it. ``import_file`` (the CLI's ``oreo append``) does all three and
removes the upload if any step fails.

A project admin may skip the review (``import_file(review=False)``, ``oreo append
--no-review``, seed 000's append with ``?review=false``): the file is staged and
validated as usual, a critical failure refuses it, and otherwise it is merged at once by
the approval's own path with the admin as the merger (``merge.merge_unreviewed_import``).
The request is recorded as merged with a note, and ``ImportCommittedWithoutReview`` is
audited. Nothing else reaches that path: ``cr approve`` keeps "no one approves their own
request" for every request.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import select

from core import audit, engine, merge, metrics, reads, schema, validation
from core.auth import Role, User, require_role
from core.catalog import AuditEventRow, Catalog, utcnow
from core.change_requests import (
    CHANGED_COLUMN,
    OP_COLUMN,
    ChangeRequest,
    get_change_request,
    record_change_request,
    remove_leftovers,
    save_staging,
    validate_change_request,
    withdraw_change_request,
)
from core.config import get_settings
from core.datasets import (
    ROW_ID,
    DatasetInfo,
    dataset_settings,
    get_dataset,
    layout_for,
    row_ids_for,
    time_ordered_id_sql,
)
from core.errors import (
    ConflictError,
    EngineError,
    InvalidFile,
    InvalidInput,
    NotFound,
    OreoError,
    PermissionDenied,
    ValidationFailed,
)
from core.import_values import check_file_values, refuse_csv_decimals
from core.ingest import csv_header_of, file_kind, parse_table, read_input_file, save_upload
from core.layout import DatasetLayout, new_id, validate_id
from core.schema import ColumnPlan, SchemaChange
from core.storage import Location, arrow_target, location, remove_tree, spark_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Mode = Literal["append", "upsert", "replace"]
MODES: tuple[Mode, ...] = ("append", "upsert", "replace")
_UNKNOWN_MODE = "unknown import mode {mode!r}; use append, upsert or replace"
Progress = Callable[[float, str], None]
_SHOWN = 5
_ROW_GROUP = 128 * 1024


@dataclass(frozen=True)
class Upload:
    """A stored file, read and converted, waiting to become a change request."""

    upload_id: str
    project_id: str
    dataset_id: str
    file_name: str
    kind: str
    sheet: str | None
    rows: int
    columns: list[tuple[str, str]]  # (name, Spark type) as inferred from the file
    uploaded_by: str
    uploaded_at: datetime
    folder: Location

    @property
    def converted(self) -> Location:
        return self.folder / "converted.parquet"

    def to_json(self) -> dict[str, Any]:
        return {
            "upload_id": self.upload_id,
            "project": self.project_id,
            "dataset": self.dataset_id,
            "file_name": self.file_name,
            "kind": self.kind,
            "sheet": self.sheet,
            "rows": self.rows,
            "columns": [{"name": n, "type": t} for n, t in self.columns],
            "uploaded_by": self.uploaded_by,
            "uploaded_at": self.uploaded_at.isoformat(),
        }


@dataclass(frozen=True)
class ImportPlan:
    """How an upload would change the table: checked, ready to submit."""

    upload: Upload
    mode: Mode
    key: str | None
    base_version: int
    columns: list[ColumnPlan]
    schema_changes: list[SchemaChange] = field(default_factory=list)
    deletes: int = 0  # a replace: the table's rows no file row matches, which it deletes

    def describe(self) -> str:
        """One sentence: what merging this plan does to the table."""
        rows = f"{self.upload.rows:,} row(s) of {self.upload.file_name}"
        if self.mode == "append":
            return f"{rows} will be added as new rows"
        if self.mode == "upsert":
            return f"{rows} will update the rows with the same {self.key}, or be added"
        if self.key is None:
            return (
                f"{rows} will replace the table's content: there is no key to match rows by, so every "
                "current row is deleted and every row of the file added"
            )
        return (
            f"{rows} will replace the table's content, matched by {self.key}: rows that differ are updated, "
            f"new {self.key}s added, rows whose {self.key} is not in the file deleted, identical rows left alone"
        )


@dataclass(frozen=True, kw_only=True)
class ImportSubmitted(audit.AuditEvent):
    name = "import_submitted"
    cr_id: str
    upload_id: str
    file_name: str
    mode: str
    key: str | None
    inserts: int
    updates: int
    schema_changes: list[dict[str, Any]]
    deletes: int = 0
    reviewed: bool = True  # False: an admin's direct commit (``import_file(review=False)``)


@dataclass(frozen=True, kw_only=True)
class ImportCommittedWithoutReview(audit.AuditEvent):
    """A project admin's import merged at once, its review skipped (``oreo append --no-review``)."""

    name = "import_committed_without_review"
    cr_id: str
    upload_id: str
    file_name: str
    mode: str
    key: str | None
    rows: int
    inserts: int
    updates: int
    deletes: int
    version: int


@dataclass(frozen=True)
class ImportSummary:
    """How an import request changes its table, as counted when its file was staged."""

    cr_id: str
    file_name: str
    mode: str
    key: str | None
    added: int
    updated: int
    deleted: int
    reviewed: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "file_name": self.file_name,
            "mode": self.mode,
            "key": self.key,
            "added": self.added,
            "updated": self.updated,
            "deleted": self.deleted,
            "reviewed": self.reviewed,
        }


# ---------------------------------------------------------------- 1. upload


def store_upload(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    file: Path | str,
    *,
    actor: User,
    sheet: str | None = None,
    file_name: str | None = None,
    progress: Progress | None = None,
) -> Upload:
    """Read ``file`` strictly and keep it under ``imports/<upload_id>/``.

    Args:
        file: CSV, Parquet or XLSX; its suffix decides the format.
        sheet: The XLSX sheet; required when the workbook has several.
        file_name: The name the user knows the file by (default: ``file``'s own).

    Raises:
        InvalidFile: Unreadable, empty, too large, malformed, or an XLSX sheet not named.
        PermissionDenied: ``actor`` is not an editor of the project.
        NotFound: Unknown dataset.
    """
    report = progress or (lambda fraction, message: None)
    dataset = get_dataset(catalog, project_id, dataset_id, actor=actor)
    require_role(catalog, actor, project_id, Role.EDITOR, action="import a file")
    file = Path(file)
    kind = file_kind(file)
    settings = get_settings()
    report(0.05, f"Reading {file_name or file.name}")
    # Read once, bounded: the header, the decimals check and the kept copy all use these
    # bytes, so a file that changes or grows after the read is never read again.
    data = read_input_file(file, max_bytes=settings.max_upload_mb * 1024 * 1024)
    csv_types = _csv_types(data, dataset) if kind == "csv" else {}
    try:
        table = parse_table(data, file, sheet=sheet, csv_types=csv_types)
    except InvalidFile:
        _refuse_csv_decimals(data, csv_types, file_name or file.name)
        raise
    if not _decimals_valid(table, csv_types):
        _refuse_csv_decimals(data, csv_types, file_name or file.name)
        raise InvalidFile(f"{file_name or file.name} has a decimal too long for its column", path=str(file))
    if table.num_rows == 0:
        raise InvalidFile(f"{file_name or file.name} has a header but no rows", path=str(file))
    layout = layout_for(project_id, dataset_id)
    upload_id = new_id("up")
    folder = layout.upload(upload_id)
    upload = Upload(
        upload_id=upload_id,
        project_id=project_id,
        dataset_id=dataset_id,
        file_name=file_name or file.name,
        kind=kind,
        sheet=sheet,
        rows=table.num_rows,
        # ``read_table_file`` types a column with no values as text; it is ``null`` here, so
        # it fits whatever the table's column is.
        columns=[
            (f.name, "null" if table.column(i).null_count == table.num_rows else schema.from_arrow(f.type))
            for i, f in enumerate(table.schema)
        ],
        uploaded_by=actor.username,
        uploaded_at=utcnow(),
        folder=folder,
    )
    try:
        folder.mkdir(parents=True)
        report(0.5, "Keeping the original file")
        (folder / f"raw{file.suffix.lower()}").write_bytes(data)
        report(0.6, "Converting to Parquet")
        # Row groups of 128k rows let Spark read the file with every core.
        where, filesystem = arrow_target(upload.converted)
        pq.write_table(table, where, row_group_size=_ROW_GROUP, filesystem=filesystem)
        (folder / "schema.json").write_text(json.dumps(upload.to_json(), indent=2))
    except BaseException:
        remove_tree(folder)
        raise
    report(1.0, f"Read {table.num_rows:,} rows")
    return upload


def _csv_types(data: bytes, dataset: DatasetInfo) -> dict[str, pa.DataType]:
    """CSV columns (of the file's bytes) to parse as the table's text or decimal type rather than infer."""
    columns = reads.table_schema(location(dataset.path), dataset.version)
    table_types = {c.name.lower(): schema.from_duckdb(c.type) for c in columns}
    types: dict[str, pa.DataType] = {}
    for name in csv_header_of(data):
        arrow = schema.to_arrow(table_types.get(name.lower(), ""))
        if arrow is not None:
            types[name] = arrow
    return types


def _decimals_valid(table: pa.Table, csv_types: dict[str, pa.DataType]) -> bool:
    """False when pyarrow parsed a CSV decimal too long for its precision (it does not refuse those itself)."""
    for name, t in csv_types.items():
        if pa.types.is_decimal(t) and name in table.column_names:
            try:
                table.column(name).validate(full=True)
            except pa.ArrowInvalid:
                return False
    return True


def _refuse_csv_decimals(data: bytes, csv_types: dict[str, pa.DataType], file_name: str) -> None:
    """Name every CSV value a decimal column cannot hold exactly, up to a limit (pyarrow names neither row nor value).

    ``data`` is the file as read once, bounded, by ``store_upload``; the file is not read again.
    """
    from pyarrow import csv

    decimals = {name: t for name, t in csv_types.items() if pa.types.is_decimal(t)}
    if not decimals:
        return
    try:
        table = csv.read_csv(
            pa.BufferReader(data),
            parse_options=csv.ParseOptions(newlines_in_values=True),
            convert_options=csv.ConvertOptions(
                strings_can_be_null=True,
                include_columns=list(decimals),
                column_types=dict.fromkeys(decimals, pa.string()),
            ),
        )
    except pa.ArrowInvalid:
        return  # the file is broken some other way; the reader's own error says how
    refuse_csv_decimals(table, decimals, file_name)


def get_upload(catalog: Catalog, project_id: str, dataset_id: str, upload_id: str, *, actor: User) -> Upload:
    """A stored upload, for the user who made it.

    Raises:
        NotFound: No such upload (or it was cleaned up).
        PermissionDenied: Someone else's upload.
    """
    get_dataset(catalog, project_id, dataset_id, actor=actor)
    folder = layout_for(project_id, dataset_id).upload(upload_id)
    snapshot = folder / "schema.json"
    if not snapshot.is_file() or not (folder / "converted.parquet").is_file():
        raise NotFound(f"unknown upload {upload_id!r} in {project_id}/{dataset_id}", kind="upload", ident=upload_id)
    data = json.loads(snapshot.read_text())
    if data["uploaded_by"] != actor.username:
        raise PermissionDenied(f"upload {upload_id} belongs to {data['uploaded_by']!r}", user=actor.username)
    return Upload(
        upload_id=upload_id,
        project_id=project_id,
        dataset_id=dataset_id,
        file_name=data["file_name"],
        kind=data["kind"],
        sheet=data.get("sheet"),
        rows=int(data["rows"]),
        columns=[(c["name"], c["type"]) for c in data["columns"]],
        uploaded_by=data["uploaded_by"],
        uploaded_at=datetime.fromisoformat(data["uploaded_at"]),
        folder=folder,
    )


def discard_upload(upload: Upload) -> None:
    """Remove an upload that will not be submitted."""
    remove_tree(upload.folder)


def preview(upload: Upload, limit: int = 20) -> pa.Table:
    """The first ``limit`` rows of an upload, as converted."""
    where, filesystem = arrow_target(upload.converted)
    parquet = pq.ParquetFile(where, filesystem=filesystem)
    batches = parquet.iter_batches(batch_size=max(1, limit))
    first = next(batches, None)
    return pa.Table.from_batches([first]) if first is not None else parquet.schema_arrow.empty_table()


# ---------------------------------------------------------------- 2. plan


def compare_with_table(catalog: Catalog, upload: Upload, *, actor: User) -> tuple[DatasetInfo, list[ColumnPlan]]:
    """The dataset now, and each column of the upload compared with its table."""
    dataset = get_dataset(catalog, upload.project_id, upload.dataset_id, actor=actor)
    table = [(c.name, schema.from_duckdb(c.type)) for c in reads.table_schema(location(dataset.path), dataset.version)]
    return dataset, schema.compare(upload.columns, table)


def plan_import(
    catalog: Catalog, upload: Upload, *, actor: User, mode: str = "append", key: str | None = None
) -> ImportPlan:
    """Check that ``upload`` can go into its table in ``mode`` (see the module docstring).

    Raises:
        InvalidInput: Unknown mode; values the table's columns cannot hold (each named, with
            its data row: ``core.import_values``); an incompatible column type (named, with both types);
            a missing, unusable or ambiguous key; a reserved ``row_id`` column; (replace) a
            table column the file lacks.
        ValidationFailed: Empty or duplicate keys in the file, or (append) keys the table has.
    """
    if mode not in MODES:
        raise InvalidInput(_UNKNOWN_MODE.format(mode=mode), field="mode")
    dataset, columns = compare_with_table(catalog, upload, actor=actor)
    allow_non_finite = dataset_settings(upload.project_id, upload.dataset_id).allow_non_finite
    file_columns = [name for name, _ in upload.columns]
    columns = check_file_values(
        upload.converted, upload.file_name, file_columns, columns, allow_non_finite=allow_non_finite
    )
    schema.refuse_incompatible(columns, source=upload.file_name)
    file_names = {n.lower(): n for n, _ in upload.columns}
    dataset_key = dataset.key_column
    if key is not None and mode == "append":
        raise InvalidInput("a key is for upsert; an append adds every row as new, so leave the key out", field="key")
    if dataset_key is not None and dataset_key.lower() not in file_names:
        raise InvalidInput(
            f"{upload.file_name} has no column {dataset_key!r}, the dataset's key; every row needs one",
            field="file",
        )
    if mode == "replace":
        _refuse_absent_columns(upload, columns)
        key = key or dataset_key  # without either, every row is replaced
    if mode == "upsert" and not key:
        raise InvalidInput("an upsert needs a key column to match rows by", field="key")
    if mode != "append" and key:
        key = _plan_upsert_key(upload, dataset, columns, key, file_names, mode=mode)
    elif ROW_ID in file_names and dataset_key != ROW_ID:
        raise InvalidInput(
            f"{upload.file_name} has a 'row_id' column, which is Oreo's; to update those rows "
            f"use {'replace' if mode == 'replace' else 'upsert'} with the key row_id, or rename the column",
            field="file",
        )
    if dataset_key is not None and str(key).lower() != dataset_key.lower():  # else checked as the key
        _check_keys(upload, file_names[dataset_key.lower()])
    if mode == "append" and dataset_key is not None:
        _refuse_existing_keys(upload, dataset, file_names[dataset_key.lower()])
    return ImportPlan(
        upload=upload,
        mode=mode,  # type: ignore[arg-type]
        key=key,
        base_version=int(dataset.version or 0),
        columns=columns,
        schema_changes=schema.schema_changes(columns),
        deletes=_count_deletes(upload, dataset, key, file_names) if mode == "replace" else 0,
    )


def _count_deletes(upload: Upload, dataset: DatasetInfo, key: str | None, file_names: dict[str, str]) -> int:
    """How many rows of the table a replace by ``key`` deletes: those whose key the file lacks (all, without a key)."""
    scan, params = "delta_scan(?, version => ?)", [dataset.path, int(dataset.version or 0)]
    if key is None:
        found = reads.cursor().execute(f"SELECT count(*) FROM {scan}", params).fetchone()
        return int(found[0]) if found else 0
    in_file = reads.quote_ident(file_names[key.lower()])
    if key in (ROW_ID, dataset.key_column):
        on = f"m.row_id = CAST(f.{in_file} AS VARCHAR)"
    else:
        table_type = next(c.type for c in reads.table_schema(location(dataset.path), dataset.version) if c.name == key)
        on = f"m.{reads.quote_ident(key)} = TRY_CAST(f.{in_file} AS {table_type})"
    found = (
        reads.cursor()
        .execute(f"SELECT count(*) FROM {scan} m ANTI JOIN read_parquet(?) f ON {on}", [*params, str(upload.converted)])
        .fetchone()
    )
    return int(found[0]) if found else 0


def _plan_upsert_key(
    upload: Upload,
    dataset: DatasetInfo,
    columns: list[ColumnPlan],
    key: str,
    file_names: dict[str, str],
    *,
    mode: str = "upsert",
) -> str:
    """The table column an upsert or a replace matches rows by (its name as the table spells it)."""
    if key.lower() not in file_names:
        raise InvalidInput(
            f"{mode} key {key!r} is not a column of {upload.file_name}; its columns are: "
            f"{', '.join(n for n, _ in upload.columns)}",
            field="key",
        )
    if key.lower() == ROW_ID:
        _check_keys(upload, file_names[ROW_ID])
        return ROW_ID
    plan = next((c for c in columns if c.name.lower() == key.lower()), None)
    if plan is None or plan.status == "new":
        raise InvalidInput(f"{mode} key {key!r} is not a column of the table, so no row can match", field="key")
    if dataset.key_column is not None and plan.name != dataset.key_column:
        raise InvalidInput(
            f"{dataset.project_id}/{dataset.dataset_id} is keyed by {dataset.key_column!r}; {mode} by that column",
            field="key",
        )
    _check_keys(upload, file_names[key.lower()])
    if dataset.key_column is None:
        q = reads.quote_ident(plan.name)
        dupes = (
            reads.cursor()
            .execute(
                f"SELECT CAST({q} AS VARCHAR) FROM delta_scan(?, version => ?) WHERE {q} IS NOT NULL "
                f"GROUP BY {q} HAVING count(*) > 1 LIMIT {_SHOWN}",
                [dataset.path, int(dataset.version or 0)],
            )
            .fetchall()
        )
        if dupes:
            raise InvalidInput(
                f"column {plan.name!r} is not unique in the table (e.g. {', '.join(str(d[0]) for d in dupes)}), "
                f"so it cannot match rows for {'a replace' if mode == 'replace' else 'an upsert'}",
                field="key",
            )
    return plan.name


def _refuse_absent_columns(upload: Upload, columns: list[ColumnPlan]) -> None:
    """A replace makes the file the whole table, so a table column it lacks would be lost without a word."""
    absent = [c.name for c in columns if c.status == "absent"]
    if absent:
        raise InvalidInput(
            f"{upload.file_name} has no column {', '.join(repr(n) for n in absent)} of the table; a replace makes "
            "the file the table's whole content, so add the column(s) (left empty to clear them)",
            field="file",
        )


def _check_keys(upload: Upload, column: str) -> None:
    """Refuse empty or duplicated keys in the file (the message shows the first ones)."""
    where, filesystem = arrow_target(upload.converted)
    values = pq.read_table(where, columns=[column], filesystem=filesystem)
    try:
        row_ids_for(values, column)
    except ValidationFailed as exc:
        raise ValidationFailed(f"{upload.file_name}: {exc}", offending=exc.offending) from exc


def _refuse_existing_keys(upload: Upload, dataset: DatasetInfo, column: str) -> None:
    q = reads.quote_ident(column)
    found = (
        reads.cursor()
        .execute(
            f"SELECT m.row_id FROM delta_scan(?, version => ?) m "
            f"SEMI JOIN read_parquet(?) f ON m.row_id = CAST(f.{q} AS VARCHAR) LIMIT {_SHOWN}",
            [dataset.path, int(dataset.version or 0), str(upload.converted)],
        )
        .fetchall()
    )
    if found:
        raise ValidationFailed(
            f"{upload.file_name} has keys the table already has ({', '.join(str(r[0]) for r in found)}); "
            "an append only adds new rows - use upsert to update them",
            offending=tuple(str(r[0]) for r in found),
        )


# ---------------------------------------------------------------- 3. submit


def submit_import(
    catalog: Catalog,
    plan: ImportPlan,
    *,
    actor: User,
    title: str | None = None,
    description: str = "",
    progress: Progress | None = None,
    review: bool = True,
) -> ChangeRequest:
    """Stage ``plan``'s rows with Spark, validate them and open the change request.

    With ``review=False`` (a project admin's direct commit, see ``import_file``) a critical
    validation failure refuses the file before any request is recorded, and no one is
    told of a request to review.

    Raises:
        PermissionDenied: Not the uploader, or not an editor (an admin, without review).
        ConflictError: The table moved since the plan was made (plan again).
        InvalidInput: The file changes nothing; the title is too long.
        ValidationFailed: Without review, a critical expectation fails (nothing is kept).
        EngineError: Spark could not write the staging table (nothing is kept).
    """
    report = progress or (lambda fraction, message: None)
    upload = plan.upload
    plan, dataset = _check_submit(catalog, plan, actor=actor, review=review)
    title = _submit_title(title, plan)
    layout = layout_for(upload.project_id, upload.dataset_id)
    cr_id = new_id("cr")
    staging = layout.staging(cr_id)
    counts, run = _stage_import(layout, dataset, staging, plan, cr_id, actor=actor, review=review, report=report)
    if review:
        report(0.6, "Validating with Great Expectations")
    record = record_change_request(
        catalog,
        layout,
        dataset,
        staging,
        cr_id=cr_id,
        author=actor.username,
        title=title,
        description=description,
        base_version=plan.base_version,
        rows=counts.rows,
        cells=counts.cells,
        kind="import",
        upload_id=upload.upload_id,
        schema_changes=plan.schema_changes,
        run=run,
        announce=review,
    )
    _note_submitted(upload, record.id, plan)
    _record_import_submitted(catalog, plan, cr_id, counts, actor=actor, review=review)
    report(1.0, f"Change request {cr_id} submitted")
    return record


def _check_submit(catalog: Catalog, plan: ImportPlan, *, actor: User, review: bool) -> tuple[ImportPlan, DatasetInfo]:
    """Refuse a submit ``actor`` may not make; the plan, made again when the table moved, and its dataset."""
    upload = plan.upload
    if upload.uploaded_by != actor.username:
        raise PermissionDenied(f"upload {upload.upload_id} belongs to {upload.uploaded_by!r}", user=actor.username)
    require_role(catalog, actor, upload.project_id, Role.EDITOR, action="submit an import")
    if not review:
        require_role(catalog, actor, upload.project_id, Role.ADMIN, action=_NO_REVIEW_ACTION)
    dataset = get_dataset(catalog, upload.project_id, upload.dataset_id, actor=actor)
    if int(dataset.version or 0) != plan.base_version:
        plan = plan_import(catalog, upload, actor=actor, mode=plan.mode, key=plan.key)
    return plan, dataset


def _submit_title(title: str | None, plan: ImportPlan) -> str:
    title = (title or _default_title(plan)).strip()
    if len(title) > 300:
        raise InvalidInput("the title must be at most 300 characters", field="title")
    return title


def _stage_import(
    layout: DatasetLayout,
    dataset: DatasetInfo,
    staging: Location,
    plan: ImportPlan,
    cr_id: str,
    *,
    actor: User,
    review: bool,
    report: Progress,
) -> tuple[_Counts, validation.ValidationRun | None]:
    """Write the staging table and count it; without review, validate it too.

    A file that changes nothing, or fails a critical check without review, leaves no
    staging table behind.
    """
    upload = plan.upload
    commit = engine.new_commit(actor.username, "stage_import", cr_id=cr_id, upload_id=upload.upload_id)
    report(0.1, f"Staging {upload.rows:,} rows with Spark")
    with metrics.timed_import_write(upload.rows):
        _write_staging(location(dataset.path), staging, plan, dataset.key_column, commit)
    run: validation.ValidationRun | None = None
    try:
        given = sum(1 for c in plan.columns if c.status != "absent")
        counts = _staged_counts(staging, given)
        if counts.rows == 0:
            same = "the table holds exactly its rows" if plan.mode == "replace" else "every row equals the table's"
            raise InvalidInput(f"{upload.file_name} changes nothing: {same}", field="file")
        if not review:
            report(0.5, "Validating with Great Expectations")
            run = validate_change_request(layout, dataset, staging)
            _refuse_blocking(run, upload)
    except BaseException:
        remove_tree(staging)
        raise
    return counts, run


def _record_import_submitted(
    catalog: Catalog, plan: ImportPlan, cr_id: str, counts: _Counts, *, actor: User, review: bool
) -> None:
    upload = plan.upload
    with catalog.session() as s:
        audit.record(
            s,
            ImportSubmitted(
                actor=actor.username,
                project_id=upload.project_id,
                dataset_id=upload.dataset_id,
                cr_id=cr_id,
                upload_id=upload.upload_id,
                file_name=upload.file_name,
                mode=plan.mode,
                key=plan.key,
                inserts=counts.inserts,
                updates=counts.updates,
                deletes=counts.deletes,
                schema_changes=[c.to_json() for c in plan.schema_changes],
                reviewed=review,
            ),
        )


_NO_REVIEW_ACTION = "commit an import without review"


def _default_title(plan: ImportPlan) -> str:
    upload = plan.upload
    target = f"{upload.project_id}/{upload.dataset_id}"
    if plan.mode == "replace":
        return f"Replace the content of {target} with {upload.file_name}"
    return f"Import {upload.file_name} into {target}"


def _refuse_blocking(run: validation.ValidationRun, upload: Upload) -> None:
    """Refuse a direct commit whose staged rows fail a critical expectation."""
    if run.blocking:
        failed = ", ".join(f"{f.expectation}({f.column or ''})" for f in run.failures if f.severity == "critical")
        raise ValidationFailed(
            f"{upload.file_name} fails critical data checks: {failed}; nothing was committed - fix the file, "
            "or submit it for review to discuss the checks",
            offending=tuple(f.expectation for f in run.failures if f.severity == "critical"),
        )


def _note_submitted(upload: Upload, cr_id: str, plan: ImportPlan) -> None:
    """Record in the upload's snapshot which request it became, and how (for a re-submit)."""
    snapshot = upload.folder / "schema.json"
    data = json.loads(snapshot.read_text())
    data["submitted"] = {"cr_id": cr_id, "mode": plan.mode, "key": plan.key}
    snapshot.write_text(json.dumps(data, indent=2))


def resubmit_import(catalog: Catalog, record: ChangeRequest, *, actor: User) -> ChangeRequest:
    """Plan an open import request's upload again on the current version and submit it anew.

    The caller withdraws the old request.

    Raises:
        NotFound: The upload is gone.
        InvalidInput / ValidationFailed: The file no longer fits the table as it is now.
    """
    upload = get_upload(catalog, record.project_id, record.dataset_id, str(record.upload_id), actor=actor)
    how = json.loads((upload.folder / "schema.json").read_text()).get("submitted") or {}
    plan = plan_import(catalog, upload, actor=actor, mode=how.get("mode", "append"), key=how.get("key"))
    return submit_import(catalog, plan, actor=actor, title=record.title, description=record.description)


def _write_staging(
    main: Location, staging: Location, plan: ImportPlan, dataset_key: str | None, commit: engine.CommitInfo
) -> None:
    """Have Spark build the staged rows from ``converted.parquet`` and write them.

    Each row gets its ``row_id`` (the matched row's, the dataset key's value, or a UUID),
    its values cast to their type after the import, ``_op`` and ``_changed``: all the
    file's columns for an insert, the cells that differ for an update. Updates that
    change nothing are left out. A replace also stages, as deletes, the table's rows no
    file row matches (all of them without a key), with their values as they are.
    """
    spark = engine.get_spark()
    view = f"oreo_import_{commit.commit_id.replace('-', '')}"
    sql = _staging_sql(main, plan, dataset_key, view)
    views = _register_import_views(spark, main, plan, view)
    save_staging(staging, sql, commit, views=views)


@dataclass(frozen=True)
class _FileColumns:
    """The plan's columns in the order they are staged, and how the file spells each."""

    in_file: dict[str, str]  # a column's lower-case name -> its name in the file
    ordered: list[ColumnPlan]  # the table's columns in its own order, then the new ones

    @property
    def given(self) -> list[ColumnPlan]:
        return [c for c in self.ordered if c.status != "absent"]

    def value(self, c: ColumnPlan) -> str:
        """The file row's (alias ``f``) value of ``c``, cast to its type after the import."""
        return f"CAST(f.{engine.spark_ident(self.in_file[c.name.lower()])} AS {c.final_type})"


def _file_columns(main: Location, plan: ImportPlan) -> _FileColumns:
    in_file = {n.lower(): n for n, _ in plan.upload.columns}
    table_cols = [c for c in plan.columns if c.status != "new"]
    ordered = [c for c in _table_order(main, plan.base_version, table_cols)] + [
        c for c in plan.columns if c.status == "new"
    ]
    return _FileColumns(in_file=in_file, ordered=ordered)


# An inserted row gives every column it carries: NULL says so without a list per row.
_INSERTED = "CAST(NULL AS ARRAY<STRING>)"


def _staging_sql(main: Location, plan: ImportPlan, dataset_key: str | None, view: str) -> str:
    """The Spark SQL of the staged rows, over the file's view ``view`` and the table's ``{view}_main``."""
    columns = _file_columns(main, plan)
    fresh_id_sql = time_ordered_id_sql()  # rows added to a keyless dataset keep the file's order
    new_id_sql = (
        fresh_id_sql
        if dataset_key is None
        else f"CAST(f.{engine.spark_ident(columns.in_file[dataset_key.lower()])} AS STRING)"
    )
    on: str | None = None
    if plan.mode == "append" or plan.key is None:  # a replace without a key: every row is new
        sql = _inserts_sql(columns, new_id_sql, view)
    else:
        on, new_id_sql = _file_row_match(columns, str(plan.key), dataset_key, new_id_sql, fresh_id_sql)
        sql = _upserts_sql(columns, new_id_sql, on, view)
    if plan.mode == "replace":
        gone = f"{view}_main m" if on is None else f"{view}_main m LEFT ANTI JOIN {view} f ON {on}"
        sql = f"{sql} UNION ALL SELECT {', '.join(_deleted_select(columns.ordered))} FROM {gone}"
    return sql


def _inserts_sql(columns: _FileColumns, new_id_sql: str, view: str) -> str:
    """Every file row as an insert (an append, or a replace without a key)."""
    q = engine.spark_ident
    select = [f"{new_id_sql} AS row_id"]
    select += [
        (columns.value(c) if c.status != "absent" else f"CAST(NULL AS {c.final_type})") + f" AS {q(c.name)}"
        for c in columns.ordered
    ]
    select += [f"'insert' AS {OP_COLUMN}", f"{_INSERTED} AS {CHANGED_COLUMN}"]
    return f"SELECT {', '.join(select)} FROM {view} f"


def _file_row_match(
    columns: _FileColumns, key: str, dataset_key: str | None, new_id_sql: str, fresh_id_sql: str
) -> tuple[str, str]:
    """How a file row (``f``) finds its table row (``m``) by ``key``, and the row_id a new row gets."""
    q = engine.spark_ident
    if key == ROW_ID:
        on = f"m.row_id = CAST(f.{q(columns.in_file[ROW_ID])} AS STRING)"
        if dataset_key is None:
            new_id_sql = f"coalesce(CAST(f.{q(columns.in_file[ROW_ID])} AS STRING), {fresh_id_sql})"
    elif key == dataset_key:
        on = f"m.row_id = {new_id_sql}"
    else:
        key_plan = next(c for c in columns.ordered if c.name == key)
        on = f"m.{q(key)} = {columns.value(key_plan)}"
    return on, new_id_sql


def _upserts_sql(columns: _FileColumns, new_id_sql: str, on: str, view: str) -> str:
    """A file row as an insert, or as an update of the cells that differ; updates that change nothing left out."""
    q, lit = engine.spark_ident, engine.spark_string
    select = [f"coalesce(m.row_id, {new_id_sql}) AS row_id"]
    for c in columns.ordered:
        if c.status == "absent":
            kept = f"CASE WHEN m.row_id IS NULL THEN CAST(NULL AS {c.final_type}) ELSE m.{q(c.name)} END"
            select.append(f"{kept} AS {q(c.name)}")
        else:
            select.append(f"{columns.value(c)} AS {q(c.name)}")
    differs = ", ".join(
        f"CASE WHEN {columns.value(c)} IS NOT NULL THEN {lit(c.name)} END"
        if c.status == "new"
        else f"CASE WHEN NOT ({columns.value(c)} <=> m.{q(c.name)}) THEN {lit(c.name)} END"
        for c in columns.given
    )
    select += [
        f"CASE WHEN m.row_id IS NULL THEN 'insert' ELSE 'update' END AS {OP_COLUMN}",
        f"CASE WHEN m.row_id IS NULL THEN {_INSERTED} ELSE filter(array({differs}), x -> x IS NOT NULL) END "
        f"AS {CHANGED_COLUMN}",
    ]
    return (
        f"SELECT * FROM (SELECT {', '.join(select)} FROM {view} f LEFT JOIN {view}_main m ON {on}) "
        f"WHERE {OP_COLUMN} = 'insert' OR size({CHANGED_COLUMN}) > 0"
    )


def _deleted_select(ordered: list[ColumnPlan]) -> list[str]:
    """A replaced table row (``m``) staged as a delete."""
    q = engine.spark_ident
    # A deleted row is staged as it is, so the review shows it whole; a new column is NULL in it.
    return [
        "m.row_id AS row_id",
        *(
            f"CAST({'NULL' if c.status == 'new' else 'm.' + q(c.name)} AS {c.final_type}) AS {q(c.name)}"
            for c in ordered
        ),
        f"'delete' AS {OP_COLUMN}",
        f"CAST(array() AS ARRAY<STRING>) AS {CHANGED_COLUMN}",
    ]


def _register_import_views(spark: SparkSession, main: Location, plan: ImportPlan, view: str) -> list[str]:
    """Spark's temporary views of the file and (unless an append) of the table at the base version."""
    upload = plan.upload
    views = [view]
    try:
        spark.read.parquet(spark_uri(upload.converted)).createOrReplaceTempView(view)
        if plan.mode != "append":
            views.append(f"{view}_main")
            spark.read.format("delta").option("versionAsOf", plan.base_version).load(
                spark_uri(main)
            ).createOrReplaceTempView(f"{view}_main")
    except Exception as exc:
        for name in views:
            spark.catalog.dropTempView(name)
        raise EngineError(f"Spark could not read {upload.file_name} for staging: {str(exc).splitlines()[0]}") from exc
    return views


def _table_order(main: Location, version: int, columns: list[ColumnPlan]) -> list[ColumnPlan]:
    """``columns`` in the table's own column order."""
    position = {c.name: i for i, c in enumerate(reads.table_schema(main, version))}
    return sorted(columns, key=lambda c: position.get(c.name, len(position)))


@dataclass(frozen=True)
class _Counts:
    """What a staging table does: rows inserted, updated and deleted, and cells set."""

    inserts: int
    updates: int
    deletes: int
    cells: int

    @property
    def rows(self) -> int:
        return self.inserts + self.updates + self.deletes


def _staged_counts(staging: Location, given: int) -> _Counts:
    """The counts of a staging table; an insert sets ``given`` cells, a delete none (as an edit's)."""
    row = (
        reads.cursor()
        .execute(
            f"SELECT count(*) FILTER (WHERE {OP_COLUMN} = 'insert'), count(*) FILTER (WHERE {OP_COLUMN} = 'update'), "
            f"count(*) FILTER (WHERE {OP_COLUMN} = 'delete'), "
            f"coalesce(sum(len({CHANGED_COLUMN})) FILTER (WHERE {OP_COLUMN} = 'update'), 0) FROM delta_scan(?)",
            [str(staging)],
        )
        .fetchone()
    )
    if not row:
        return _Counts(0, 0, 0, 0)
    inserts, updates, deletes, changed = (int(v) for v in row)
    return _Counts(inserts, updates, deletes, changed + inserts * given)


# ---------------------------------------------------------------- all at once


def import_file(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    file: Path | str,
    *,
    actor: User,
    mode: str = "append",
    key: str | None = None,
    sheet: str | None = None,
    title: str | None = None,
    description: str = "",
    file_name: str | None = None,
    progress: Progress | None = None,
    review: bool = True,
) -> tuple[ChangeRequest, ImportPlan]:
    """Upload, plan and submit in one go (``oreo append``); a failure removes the upload.

    With ``review=False`` a project admin commits the file at once (seed 000's append with
    ``?review=false``): it is staged and validated as usual, then merged by the approval's
    path with the admin as the merger; the returned request is merged, with a note that
    its review was skipped, and ``ImportCommittedWithoutReview`` is audited.

    Raises:
        PermissionDenied: Without review, ``actor`` is not a project admin (nothing is written).
        ValidationFailed: Without review, a critical expectation fails (nothing is merged or kept).
        ConflictError: Without review, the table changed the same rows meanwhile (nothing is merged).
    """
    if mode not in MODES:
        raise InvalidInput(_UNKNOWN_MODE.format(mode=mode), field="mode")
    validate_id(project_id, kind="project id")
    validate_id(dataset_id, kind="dataset id")
    if not review:
        get_dataset(catalog, project_id, dataset_id, actor=actor)
        require_role(catalog, actor, project_id, Role.ADMIN, action=_NO_REVIEW_ACTION)
    upload = store_upload(
        catalog, project_id, dataset_id, file, actor=actor, sheet=sheet, file_name=file_name, progress=progress
    )
    try:
        plan = plan_import(catalog, upload, actor=actor, mode=mode, key=key)
        record = submit_import(
            catalog, plan, actor=actor, title=title, description=description, progress=progress, review=review
        )
    except BaseException:
        discard_upload(upload)
        raise
    if not review:
        record = _commit_without_review(catalog, record, plan, actor=actor, progress=progress)
    return record, plan


def _commit_without_review(
    catalog: Catalog, record: ChangeRequest, plan: ImportPlan, *, actor: User, progress: Progress | None
) -> ChangeRequest:
    """Merge a just-submitted direct commit and audit it; if it cannot merge, withdraw it and re-raise."""
    upload = plan.upload
    note = f"Committed directly by {actor.username} without review ({upload.file_name}, {plan.mode})."
    try:
        merged = merge.merge_unreviewed_import(catalog, record.id, actor=actor, note=note, progress=progress)
    except OreoError:
        main = layout_for(record.project_id, record.dataset_id).main
        if engine.find_commit(main, record.base_version, cr_id=record.id, action=merge.MERGE_ACTION) is None:
            _withdraw_failed(catalog, record, actor=actor)
            discard_upload(upload)
        raise
    summary = import_summary(catalog, merged.id, actor=actor)
    with catalog.session() as s:
        audit.record(
            s,
            ImportCommittedWithoutReview(
                actor=actor.username,
                project_id=merged.project_id,
                dataset_id=merged.dataset_id,
                cr_id=merged.id,
                upload_id=upload.upload_id,
                file_name=upload.file_name,
                mode=plan.mode,
                key=plan.key,
                rows=merged.rows,
                inserts=summary.added if summary else 0,
                updates=summary.updated if summary else 0,
                deletes=summary.deleted if summary else 0,
                version=int(merged.merged_version or 0),
            ),
        )
    return merged


def _withdraw_failed(catalog: Catalog, record: ChangeRequest, *, actor: User) -> None:
    """Close a direct commit that did not merge, so no request of it stays open."""
    try:
        withdraw_change_request(catalog, record.id, actor=actor)
    except (ConflictError, NotFound):  # it closed meanwhile
        remove_leftovers(get_change_request(catalog, record.id, actor=actor))


def import_summary(catalog: Catalog, cr_id: str, *, actor: User) -> ImportSummary | None:
    """How an import request changes its table: its mode and rows added, updated, deleted (None: not an import).

    Read from the request's ``import_submitted`` audit event, so it holds after the request closed.
    """
    record = get_change_request(catalog, cr_id, actor=actor)
    if record.kind != "import":
        return None
    with catalog.session() as s:
        events = s.scalars(
            select(AuditEventRow)
            .where(
                AuditEventRow.name == ImportSubmitted.name,
                AuditEventRow.project_id == record.project_id,
                AuditEventRow.dataset_id == record.dataset_id,
                AuditEventRow.ts >= record.created_at - timedelta(minutes=1),
            )
            .order_by(AuditEventRow.id)
        ).all()
        found = [dict(e.details) for e in events if e.details.get("cr_id") == cr_id]
    if not found:
        return None
    d = found[-1]
    return ImportSummary(
        cr_id=cr_id,
        file_name=str(d.get("file_name")),
        mode=str(d.get("mode")),
        key=d.get("key"),
        added=int(d.get("inserts") or 0),
        updated=int(d.get("updates") or 0),
        deleted=int(d.get("deletes") or 0),
        reviewed=d.get("reviewed") is not False,
    )


@contextmanager
def saved_upload(data: bytes | BinaryIO, file_name: str) -> Iterator[Path]:
    """An uploaded file's bytes as a private temporary file of the same name, removed after.

    Keeping the name means the reader's messages name the file the user knows. A body
    over ``OREO_MAX_UPLOAD_MB`` is refused before anything is written.
    """
    name = Path(file_name).name
    if name in ("", ".", ".."):
        name = "upload"
    folder = Path(tempfile.mkdtemp(prefix="oreo-upload-"))
    try:
        path = folder / name
        save_upload(data, path, max_bytes=get_settings().max_upload_mb * 1024 * 1024)
        yield path
    finally:
        remove_tree(folder)
