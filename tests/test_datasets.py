"""Datasets: creation by Spark from CSV/Parquet/XLSX, the catalog sync, DuckDB browsing, and clean refusals."""

from __future__ import annotations

import csv
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openpyxl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select

from core import audit, datasets, engine, reads
from core.audit import list_events
from core.auth import SYSTEM, Role, User, add_member, create_user, get_user
from core.catalog import Catalog, DatasetRow, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import DatasetInfo, create_dataset, dataset_rows, get_dataset, list_datasets, sync_dataset
from core.errors import (
    AlreadyExists,
    EngineError,
    InvalidFile,
    InvalidInput,
    NotFound,
    PermissionDenied,
    ValidationFailed,
)
from core.projects import create_project
from core.reads import RowFilter

pytestmark = pytest.mark.spark

CITIES = ["Paris", "Oslo", "Lima", "Quito", "Accra"]
COLUMNS = ["id", "name", "city", "score", "joined"]


def people(n: int, *, micros: bool = True) -> list[dict[str, Any]]:
    """Deterministic source rows, with NULLs, quotes, commas and non-ASCII text."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(1, n + 1):
        name = {7: 'O\'Brien, "Pat"', 8: "Zo\u00eb \u00c5sa"}.get(i, f"person {i:03d}")
        rows.append(
            {
                "id": i,
                "name": name,
                "city": CITIES[i % len(CITIES)],
                "score": None if i % 11 == 0 else i * 1.5,
                "joined": start + timedelta(hours=i, microseconds=i if micros else 0),
            }
        )
    return rows


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for r in rows:
            joined = r["joined"].replace(tzinfo=None).isoformat(sep=" ")  # naive, as spreadsheets export
            writer.writerow([r["id"], r["name"], r["city"], "" if r["score"] is None else r["score"], joined])
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    table = pa.Table.from_pylist(
        [{**r, "joined": r["joined"].replace(tzinfo=None)} for r in rows],
        schema=pa.schema(
            [
                ("id", pa.int32()),
                ("name", pa.string()),
                ("city", pa.string()),
                ("score", pa.float64()),
                ("joined", pa.timestamp("ns")),
            ]
        ),
    )
    pq.write_table(table, path)
    return path


def write_xlsx(path: Path, rows: list[dict[str, Any]]) -> Path:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "people"
    sheet.append(COLUMNS)
    for r in rows:
        sheet.append([r["id"], r["name"], r["city"], r["score"], r["joined"].replace(tzinfo=None)])
    workbook.save(path)
    return path


WRITERS = {".csv": write_csv, ".parquet": write_parquet, ".xlsx": write_xlsx}


def records(frame: Any) -> list[dict[str, Any]]:
    """DataFrame rows as plain dicts with NULL as None, sorted by id."""
    clean = frame.astype(object).where(frame.notna(), None)
    return sorted(clean.to_dict("records"), key=lambda r: r["id"])


def with_key_ids(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"row_id": str(r["id"]), **r} for r in rows]


def catalog_row(catalog: Catalog, project_id: str, dataset_id: str) -> DatasetRow | None:
    with catalog.session() as s:
        return s.get(DatasetRow, (project_id, dataset_id))


def main_version(path: Path) -> int:
    return max(r.version for r in engine.history(path))


# ---------------------------------------------------------------- a shared, read-only dataset


@dataclass(frozen=True)
class Shared:
    env: dict[str, str]
    data_root: Path
    source: Path
    rows: list[dict[str, Any]]
    info: DatasetInfo


@dataclass(frozen=True)
class People:
    """The shared ``demo/people`` dataset (300 rows, key ``id``) and a catalog that knows it."""

    catalog: Catalog
    shared: Shared
    admin: User
    editor: User

    @property
    def info(self) -> DatasetInfo:
        return self.shared.info

    @property
    def main(self) -> Path:
        return Path(self.shared.info.path)


def _switch_to(env: dict[str, str], mp: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        mp.setenv(name, value)
    get_settings.cache_clear()
    reset_catalogs()


@pytest.fixture(scope="module")
def shared_people(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:  # type: ignore[no-untyped-def]
    """Created once per module: each Spark commit costs seconds, and these tests only read it."""
    base = tmp_path_factory.mktemp("people")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    rows = people(300)
    source = write_csv(base / "people.csv", rows)
    with pytest.MonkeyPatch.context() as mp:
        _switch_to(env, mp)
        try:
            catalog = open_catalog()
            create_project(catalog, "demo")
            create_user(catalog, "ann", password="ann-password")
            create_user(catalog, "ed", password="ed-password")
            create_user(catalog, "stranger", password="stranger-password")
            add_member(catalog, "demo", "ann", Role.ADMIN)
            add_member(catalog, "demo", "ed", Role.EDITOR)
            ann = get_user(catalog, "ann")
            info = create_dataset(catalog, "demo", "people", source, key="id", actor=ann)
        finally:
            reset_catalogs()
            get_settings.cache_clear()
    yield Shared(env=env, data_root=base / "delta", source=source, rows=rows, info=info)


@pytest.fixture
def shared(shared_people: Shared, data_root: Path, monkeypatch: pytest.MonkeyPatch) -> People:
    """Point this test's settings and catalog at the shared dataset's data root."""
    _switch_to(shared_people.env, monkeypatch)
    catalog = open_catalog()
    return People(
        catalog=catalog,
        shared=shared_people,
        admin=get_user(catalog, "ann"),
        editor=get_user(catalog, "ed"),
    )


def test_main_is_a_spark_written_delta_table_with_change_data_feed(shared: People, spark) -> None:  # type: ignore[no-untyped-def]
    ref = engine.delta_ref(shared.main)
    detail = spark.sql(f"DESCRIBE DETAIL {ref}").collect()[0]
    assert detail["format"] == "delta"
    assert detail["properties"]["delta.enableChangeDataFeed"] == "true"
    assert detail["properties"]["delta.enableDeletionVectors"] == "true"
    assert "columnMapping" not in (detail["tableFeatures"] or [])
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ref}").collect()}
    assert props["delta.enableChangeDataFeed"] == "true"

    first_commit = (shared.main / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    commit_info = next(json.loads(line)["commitInfo"] for line in first_commit if "commitInfo" in line)
    assert commit_info["engineInfo"].startswith("Apache-Spark")
    assert commit_info["operation"] == "CREATE TABLE AS SELECT"


def test_dataset_folders_and_the_kept_upload(shared: People) -> None:
    root = shared.shared.data_root / "projects" / "demo" / "datasets" / "people"
    assert shared.main == root / "main"
    assert {p.name for p in root.iterdir()} == {"main", "staging", "live_edit", "imports", "audit"}
    [upload] = list((root / "imports").iterdir())
    assert upload.name.startswith("up_")
    assert (upload / "raw.csv").read_bytes() == shared.shared.source.read_bytes()
    assert pq.read_table(upload / "converted.parquet").num_rows == 300


def test_commit_carries_user_metadata(shared: People) -> None:
    [commit] = engine.history(shared.main)
    assert commit.version == 0
    assert commit.user_metadata["actor"] == "ann"
    assert commit.user_metadata["action"] == "create_dataset"
    assert commit.user_metadata["dataset"] == "demo/people"
    assert uuid.UUID(commit.user_metadata["commit_id"])


def test_catalog_row_matches_the_table(shared: People) -> None:
    row = catalog_row(shared.catalog, "demo", "people")
    assert row is not None
    [commit] = engine.history(shared.main, limit=1)
    assert row.delta_version == main_version(shared.main) == commit.version
    assert row.last_commit_id == commit.user_metadata["commit_id"]
    assert row.row_count == reads.count_rows(shared.main) == len(shared.shared.rows) == 300
    assert (row.key_column, row.created_by) == ("id", "ann")
    assert row.last_commit_at is not None and row.last_commit_at.utcoffset() == timedelta(0)

    info = get_dataset(shared.catalog, "demo", "people", actor=shared.editor)
    assert info == shared.info
    assert (info.version, info.rows, info.last_commit_id) == (row.delta_version, 300, row.last_commit_id)

    [event] = list_events(shared.catalog, name="dataset_created")
    assert (event.actor, event.project_id, event.dataset_id) == ("ann", "demo", "people")
    assert event.details == {
        "source_file": "people.csv",
        "key_column": "id",
        "rows": 300,
        "version": 0,
        "commit_id": row.last_commit_id,
    }


def test_duckdb_reads_back_exactly_the_file(shared: People, spark) -> None:  # type: ignore[no-untyped-def]
    columns = datasets.dataset_columns(shared.info)
    assert [(c.name, c.type) for c in columns] == [
        ("row_id", "VARCHAR"),
        ("id", "BIGINT"),
        ("name", "VARCHAR"),
        ("city", "VARCHAR"),
        ("score", "DOUBLE"),
        ("joined", "TIMESTAMP WITH TIME ZONE"),
    ]
    page = reads.read_page(shared.main, limit=10_000)
    assert page.total == 300
    assert records(page.rows) == with_key_ids(shared.shared.rows)
    # Spark sees the same rows.
    spark_ids = sorted(
        r["row_id"] for r in spark.read.format("delta").load(str(shared.main)).select("row_id").collect()
    )
    assert spark_ids == sorted(str(r["id"]) for r in shared.shared.rows)


def test_rows_page_through_in_order_without_gaps(shared: People) -> None:
    seen: list[int] = []
    offset = 0
    while True:
        page = dataset_rows(
            shared.catalog, "demo", "people", actor=shared.editor, order_by="id", limit=70, offset=offset
        )
        assert page.total == 300
        if page.rows.empty:
            break
        assert len(page.rows) == min(70, 300 - offset)
        seen += [int(v) for v in page.rows["id"]]
        offset += 70
    assert seen == list(range(1, 301))

    desc = dataset_rows(
        shared.catalog, "demo", "people", actor=shared.editor, order_by="score", descending=True, limit=3
    )
    scores = sorted((r["score"] for r in shared.shared.rows if r["score"] is not None), reverse=True)
    assert list(desc.rows["score"]) == scores[:3]
    last = dataset_rows(shared.catalog, "demo", "people", actor=shared.editor, order_by="score", limit=300)
    assert last.rows["score"].isna().sum() == 300 // 11  # NULLs sort last
    assert last.rows["score"].isna().iloc[-(300 // 11) :].all()


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ([RowFilter("city", "Oslo")], lambda r: r["city"] == "Oslo"),
        ([RowFilter("id", "42")], lambda r: r["id"] == 42),
        ([RowFilter("name", 'O\'Brien, "Pat"')], lambda r: r["id"] == 7),
        ([RowFilter("name", "PERSON 1", "contains")], lambda r: "person 1" in r["name"]),
        ([RowFilter("name", "\u00e5sa", "contains")], lambda r: r["id"] == 8),
        (
            [RowFilter("city", "Lima"), RowFilter("name", "5", "contains")],
            lambda r: r["city"] == "Lima" and "5" in r["name"],
        ),
        ([RowFilter("city", "Atlantis")], lambda r: False),
    ],
    ids=["eq-text", "eq-number", "eq-quotes", "contains-case-insensitive", "contains-unicode", "and", "no-match"],
)
def test_rows_filters(shared: People, filters: list[RowFilter], expected) -> None:  # type: ignore[no-untyped-def]
    want = [r for r in shared.shared.rows if expected(r)]
    page = dataset_rows(
        shared.catalog, "demo", "people", actor=shared.editor, filters=filters, order_by="id", limit=500
    )
    assert page.total == len(want)
    assert records(page.rows) == with_key_ids(want)
    small = dataset_rows(shared.catalog, "demo", "people", actor=shared.editor, filters=filters, limit=2)
    assert small.total == len(want)  # total counts every match, not the page
    assert len(small.rows) == min(2, len(want))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"filters": [RowFilter("nope", "x")]}, InvalidInput, "unknown column 'nope'"),
        ({"filters": [RowFilter("city", "x", "like")]}, InvalidInput, "unknown filter operator 'like'"),  # type: ignore[arg-type]
        ({"order_by": "nope"}, InvalidInput, "cannot order by unknown column 'nope'"),
        ({"order_by": "id; DROP TABLE x"}, InvalidInput, "cannot order by unknown column"),
        ({"limit": 0}, InvalidInput, "limit must be between"),
        ({"offset": -5}, InvalidInput, "offset must be >= 0"),
        ({"version": 1}, NotFound, "has no version 1; the latest is 0"),
        ({"version": 99}, NotFound, "has no version 99"),
        ({"version": -1}, NotFound, "has no version -1"),
    ],
)
def test_bad_row_requests_are_refused(
    shared: People, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        dataset_rows(shared.catalog, "demo", "people", actor=shared.editor, **kwargs)


def test_only_members_read_and_list(shared: People) -> None:
    stranger = get_user(shared.catalog, "stranger")
    with pytest.raises(PermissionDenied, match="'stranger' cannot read this dataset"):
        get_dataset(shared.catalog, "demo", "people", actor=stranger)
    with pytest.raises(PermissionDenied):
        dataset_rows(shared.catalog, "demo", "people", actor=stranger)
    with pytest.raises(PermissionDenied, match="cannot list its datasets"):
        list_datasets(shared.catalog, actor=stranger, project_id="demo")
    assert list_datasets(shared.catalog, actor=stranger) == []
    assert list_datasets(shared.catalog, actor=shared.editor) == [shared.info]
    assert list_datasets(shared.catalog, actor=SYSTEM, project_id="demo") == [shared.info]
    with pytest.raises(NotFound, match="unknown dataset demo/ghost"):
        get_dataset(shared.catalog, "demo", "ghost", actor=shared.editor)


def test_existing_dataset_is_refused_and_untouched(shared: People, tmp_path: Path) -> None:
    other = write_csv(tmp_path / "other.csv", people(5))
    with pytest.raises(AlreadyExists, match="dataset demo/people already exists"):
        create_dataset(shared.catalog, "demo", "people", other, key="id", actor=shared.admin)
    assert [r.version for r in engine.history(shared.main)] == [0]
    assert reads.count_rows(shared.main) == 300
    assert len(list_events(shared.catalog, name="dataset_created")) == 1


def test_failed_create_beside_an_existing_dataset_keeps_the_project_folder(
    shared: People, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def half_written(layout, converted, commit) -> None:  # type: ignore[no-untyped-def]
        (layout.main / "_delta_log").mkdir(parents=True)
        raise EngineError("Spark could not write the main table: disk full")

    monkeypatch.setattr(datasets, "_write_main", half_written)
    source = write_csv(tmp_path / "more.csv", people(5))
    with pytest.raises(EngineError, match="disk full"):
        create_dataset(shared.catalog, "demo", "more", source, key="id", actor=shared.admin)
    project_dir = shared.shared.data_root / "projects" / "demo"
    assert [p.name for p in (project_dir / "datasets").iterdir()] == ["people"]
    assert catalog_row(shared.catalog, "demo", "more") is None
    assert reads.count_rows(shared.main) == 300


# ---------------------------------------------------------------- one dataset per test


@pytest.fixture
def demo(catalog: Catalog) -> Catalog:
    create_project(catalog, "demo")
    for name, role in (("ann", Role.ADMIN), ("apu", Role.APPROVER), ("ed", Role.EDITOR)):
        create_user(catalog, name, password=f"{name}-password")
        add_member(catalog, "demo", name, role)
    return catalog


@pytest.mark.parametrize(
    ("suffix", "key"),
    [(".csv", "id"), (".csv", None), (".parquet", None), (".parquet", "id"), (".xlsx", "id")],
    ids=["csv-key", "csv-uuid", "parquet-uuid", "parquet-key", "xlsx-key"],
)
def test_create_from_each_file_type(spark, demo: Catalog, tmp_path: Path, suffix: str, key: str | None) -> None:  # type: ignore[no-untyped-def]
    rows = people(40, micros=suffix != ".xlsx")  # Excel keeps milliseconds at best
    source = WRITERS[suffix](tmp_path / f"source{suffix}", rows)
    info = create_dataset(demo, "demo", "people", source, key=key)

    assert (info.project_id, info.dataset_id, info.key_column, info.version, info.rows) == (
        "demo",
        "people",
        key,
        0,
        40,
    )
    main = Path(info.path)
    assert main == get_settings().data_root / "projects" / "demo" / "datasets" / "people" / "main"
    assert (main / "_delta_log").is_dir()
    got = records(reads.read_page(main, limit=1000).rows)
    row_ids = [r.pop("row_id") for r in got]
    assert got == rows
    if key is None:
        assert all(str(uuid.UUID(v)) == v for v in row_ids)
        assert len(set(row_ids)) == 40
    else:
        assert row_ids == [str(r["id"]) for r in rows]
    [commit] = engine.history(main)
    assert commit.user_metadata["commit_id"] == info.last_commit_id
    assert commit.user_metadata["actor"] == "system"
    assert reads.count_rows(main) == info.rows == catalog_row(demo, "demo", "people").row_count


def test_key_named_row_id_is_used_as_is(spark, demo: Catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "ids.csv"
    source.write_text("row_id,name\nk-1,ada\nk-2,grace\n")
    info = create_dataset(demo, "demo", "ids", source, key="row_id")
    page = reads.read_page(Path(info.path), order_by="row_id")
    assert list(page.rows.columns) == ["row_id", "name"]
    assert list(page.rows["row_id"]) == ["k-1", "k-2"]


def test_duckdb_follows_spark_deletes_updates_and_time_travel(spark, demo: Catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rows = people(60)
    info = create_dataset(demo, "demo", "people", write_csv(tmp_path / "people.csv", rows), key="id")
    main = Path(info.path)
    ref = engine.delta_ref(main)

    deleted = engine.new_commit("ann", "test_delete")
    with engine.commit_metadata(deleted):
        spark.sql(f"DELETE FROM {ref} WHERE id % 4 = 0")
    after_delete = sync_dataset(demo, "demo", "people", deleted)
    assert (after_delete.version, after_delete.rows, after_delete.last_commit_id) == (1, 45, deleted.commit_id)
    assert any(f.name.startswith("deletion_vector") for f in main.iterdir()), "DELETE should write deletion vectors"

    updated = engine.new_commit("ann", "test_update")
    with engine.commit_metadata(updated):
        spark.sql(f"UPDATE {ref} SET name = upper(name), score = -1.0 WHERE id % 3 = 0")
    latest = sync_dataset(demo, "demo", "people", updated)
    assert (latest.version, latest.rows, latest.last_commit_id) == (2, 45, updated.commit_id)
    assert main_version(main) == 2

    kept = [r for r in rows if r["id"] % 4 != 0]
    changed = [{**r, "name": r["name"].upper(), "score": -1.0} if r["id"] % 3 == 0 else r for r in kept]
    page = dataset_rows(demo, "demo", "people", actor=SYSTEM, limit=1000)
    assert page.total == 45
    assert records(page.rows) == with_key_ids(changed)
    spark_rows = spark.read.format("delta").load(str(main)).select("row_id", "name", "score").collect()
    assert sorted((r["row_id"], r["name"], r["score"]) for r in spark_rows) == sorted(
        (str(r["id"]), r["name"], r["score"]) for r in changed
    )

    # Time travel through core.reads and dataset_rows.
    v0 = dataset_rows(demo, "demo", "people", actor=SYSTEM, version=0, limit=1000)
    assert v0.total == 60
    assert records(v0.rows) == with_key_ids(rows)
    v1 = reads.read_page(main, version=1, limit=1000)
    assert records(v1.rows) == with_key_ids(kept)
    assert reads.count_rows(main, version=0) == 60
    with pytest.raises(NotFound, match="has no version 3; the latest is 2"):
        dataset_rows(demo, "demo", "people", actor=SYSTEM, version=3)
    assert [r.user_metadata.get("commit_id") for r in engine.history(main)] == [
        updated.commit_id,
        deleted.commit_id,
        info.last_commit_id,
    ]


def test_failure_after_the_spark_commit_leaves_nothing_behind(
    spark,
    demo: Catalog,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    data_root: Path,  # type: ignore[no-untyped-def]
) -> None:
    def broken_event(**kwargs: Any) -> None:
        raise EngineError("audit log unavailable")

    monkeypatch.setattr(audit, "DatasetCreated", broken_event)
    with pytest.raises(EngineError, match="audit log unavailable"):
        create_dataset(demo, "demo", "people", write_csv(tmp_path / "people.csv", people(10)), key="id")
    _assert_nothing_created(demo, data_root, refused_before_writing=False)


# ---------------------------------------------------------------- refused creates leave nothing behind


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


BAD_CREATES = [
    pytest.param(
        lambda t: _bytes(t / "ragged.csv", b"id,name\n1,ada\n2\n"),
        {},
        InvalidFile,
        "different number of columns than its header",
        id="ragged-csv",
    ),
    pytest.param(
        lambda t: _bytes(t / "latin1.csv", b"id,name\n1,caf\xe9\n"), {}, InvalidFile, "not UTF-8 text", id="latin-1"
    ),
    pytest.param(lambda t: _bytes(t / "empty.csv", b""), {}, InvalidFile, r"is empty \(0 bytes\)", id="zero-bytes"),
    pytest.param(
        lambda t: _bytes(t / "data.txt", b"id\n1\n"), {}, InvalidFile, "unsupported file type '.txt'", id="txt"
    ),
    pytest.param(lambda t: _bytes(t / "data.json", b"[]"), {}, InvalidFile, "unsupported file type '.json'", id="json"),
    pytest.param(lambda t: t / "missing.csv", {}, InvalidFile, "file not found", id="missing-file"),
    pytest.param(
        lambda t: _bytes(t / "dup.csv", b"id,name\n1,a\n2,b\n1,c\n3,d\n2,e\n4,f\n"),
        {"key": "id"},
        ValidationFailed,
        r"key column 'id' has 2 duplicated value\(s\): 1, 2; keys must be unique",
        id="duplicate-key",
    ),
    pytest.param(
        lambda t: _bytes(t / "null.csv", b"code,name\na,x\n,y\nc,z\n,w\n"),
        {"key": "code"},
        ValidationFailed,
        r"key column 'code' has 2 empty value\(s\), first at data row\(s\) 2, 4",
        id="null-key",
    ),
    pytest.param(
        lambda t: _bytes(t / "ok.csv", b"id,name\n1,a\n"),
        {"key": "nope"},
        InvalidInput,
        "key column 'nope' is not in the file; columns are: id, name",
        id="key-missing",
    ),
    pytest.param(
        lambda t: _bytes(t / "ids.csv", b"row_id,name\n1,a\n"),
        {},
        InvalidInput,
        "column 'row_id' is reserved",
        id="reserved-row-id",
    ),
    pytest.param(
        lambda t: _bytes(t / "bad.csv", b"id,first name\n1,a\n"), {}, InvalidFile, "contains ' '", id="bad-column"
    ),
    pytest.param(
        lambda t: _two_sheets(write_xlsx(t / "two.xlsx", people(2))),
        {},
        InvalidFile,
        "has 2 sheets",
        id="xlsx-several-sheets",
    ),
    pytest.param(
        lambda t: _bytes(t / "ok.csv", b"id\n1\n"),
        {"dataset_id": "People"},
        InvalidInput,
        "invalid dataset id",
        id="bad-dataset-id",
    ),
    pytest.param(
        lambda t: _bytes(t / "ok.csv", b"id\n1\n"),
        {"dataset_id": "../escape"},
        InvalidInput,
        "invalid dataset id",
        id="climbing-dataset-id",
    ),
    pytest.param(
        lambda t: _bytes(t / "ok.csv", b"id\n1\n"),
        {"project_id": "a/b"},
        InvalidInput,
        "invalid project id",
        id="bad-project-id",
    ),
    pytest.param(
        lambda t: _bytes(t / "ok.csv", b"id\n1\n"),
        {"project_id": "ghost"},
        NotFound,
        "unknown project 'ghost'",
        id="unknown-project",
    ),
    pytest.param(
        lambda t: _bytes(t / "ok.csv", b"id\n1\n"),
        {"actor": "ed"},
        PermissionDenied,
        "'ed' cannot create a dataset: it needs the admin role in project 'demo' and 'ed' has the editor role",
        id="editor",
    ),
    pytest.param(
        lambda t: _bytes(t / "ok.csv", b"id\n1\n"),
        {"actor": "apu"},
        PermissionDenied,
        "needs the admin role",
        id="approver",
    ),
]


def _two_sheets(path: Path) -> Path:
    workbook = openpyxl.load_workbook(path)
    workbook.create_sheet("notes").append(["free text"])
    workbook.save(path)
    return path


@pytest.mark.parametrize(("make_file", "options", "error", "message"), BAD_CREATES)
def test_refused_create_leaves_nothing_behind(
    demo: Catalog,
    data_root: Path,
    tmp_path: Path,
    make_file,  # type: ignore[no-untyped-def]
    options: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    source = make_file(tmp_path)
    project_id = options.get("project_id", "demo")
    dataset_id = options.get("dataset_id", "people")
    actor = get_user(demo, options["actor"]) if "actor" in options else SYSTEM
    with pytest.raises(error, match=message):
        create_dataset(demo, project_id, dataset_id, source, key=options.get("key"), actor=actor)
    _assert_nothing_created(demo, data_root)


def test_file_over_the_upload_limit_is_refused(
    demo: Catalog, data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_MAX_UPLOAD_MB", "1")
    get_settings.cache_clear()
    big = tmp_path / "big.csv"
    with big.open("wb") as fh:
        fh.write(b"id\n")
        fh.truncate(1024 * 1024 + 1)
    with pytest.raises(InvalidFile, match="over the 1 MB upload limit"):
        create_dataset(demo, "demo", "people", big)
    _assert_nothing_created(demo, data_root)


def test_spark_failure_removes_every_folder_it_made(
    demo: Catalog, data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Path] = []

    def half_written(layout, converted, commit) -> None:  # type: ignore[no-untyped-def]
        (layout.main / "_delta_log").mkdir(parents=True)
        made.append(layout.root)
        raise EngineError("Spark could not write the main table: executor lost")

    monkeypatch.setattr(datasets, "_write_main", half_written)
    source = _bytes(tmp_path / "ok.csv", b"id,name\n1,a\n")
    with pytest.raises(EngineError, match="executor lost"):
        create_dataset(demo, "demo", "people", source, key="id")
    assert made and not made[0].exists()
    _assert_nothing_created(demo, data_root, refused_before_writing=False)


def test_a_failed_first_create_keeps_the_logs_written_meanwhile(
    demo: Catalog, data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first create of a data root starts Spark, whose log is under it; a failure keeps that log."""
    from core import logs

    def spark_started_then_failed(layout, converted, commit) -> None:  # type: ignore[no-untyped-def]
        os.write(fd := logs.open_spark_log(), b"ERROR executor lost\n")
        os.close(fd)
        (layout.main / "_delta_log").mkdir(parents=True)
        raise EngineError("Spark could not write the main table: executor lost")

    monkeypatch.setattr(datasets, "_write_main", spark_started_then_failed)
    assert not data_root.exists()
    source = _bytes(tmp_path / "ok.csv", b"id,name\n1,a\n")
    with pytest.raises(EngineError, match="executor lost"):
        create_dataset(demo, "demo", "people", source, key="id")

    assert (data_root / "logs" / "spark.log").read_text() == "ERROR executor lost\n"
    assert sorted(p.name for p in data_root.iterdir()) == ["logs"]
    _assert_nothing_created(demo, data_root, refused_before_writing=False)


def _assert_nothing_created(catalog: Catalog, data_root: Path, *, refused_before_writing: bool = True) -> None:
    assert not (data_root / "projects" / "demo" / "datasets" / "people").exists()
    assert not (data_root / "projects" / "demo").exists()
    if refused_before_writing:
        assert not data_root.exists()
    with catalog.session() as s:
        assert s.scalar(select(func.count()).select_from(DatasetRow)) == 0
    assert list_events(catalog, name="dataset_created") == []
