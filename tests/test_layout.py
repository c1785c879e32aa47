"""The storage contract: id validation, every path of a dataset's folder layout, and main's file layout."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from core import change_requests, engine, maintenance, merge, reads, sessions
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog
from core.config import get_settings
from core.datasets import create_dataset, layout_for, sync_dataset
from core.errors import EngineError, InvalidInput
from core.layout import (
    AUDIT_SUBDIRS,
    DATASET_SUBDIRS,
    DatasetLayout,
    dataset_layout,
    new_id,
    project_root,
    validate_id,
)
from core.projects import create_project

BAD_IDS = [
    pytest.param("..", id="dotdot"),
    pytest.param(".", id="dot"),
    pytest.param("/", id="slash"),
    pytest.param("a/b", id="nested"),
    pytest.param("../etc", id="climb"),
    pytest.param("a\\b", id="backslash"),
    pytest.param("", id="empty"),
    pytest.param("A", id="upper-letter"),
    pytest.param("Demo", id="upper-case"),
    pytest.param("d\u0435mo", id="cyrillic-e"),
    pytest.param("\uff44\uff45\uff4d\uff4f", id="full-width"),
    pytest.param("caf\u00e9", id="accented"),
    pytest.param("abc\n", id="trailing-newline"),
    pytest.param("\nabc", id="leading-newline"),
    pytest.param("a" * 64, id="64-chars"),
    pytest.param("-abc", id="leading-dash"),
    pytest.param("_abc", id="leading-underscore"),
    pytest.param("a b", id="space"),
    pytest.param("a.b", id="dot-inside"),
    pytest.param("a\x00b", id="nul"),
    pytest.param(" abc", id="leading-space"),
]

GOOD_IDS = ["a", "0", "demo", "customers-2024", "a_b-c", "9lives", "a" * 63, "x" + "-" * 62]


@pytest.mark.parametrize("value", BAD_IDS)
def test_bad_ids_are_refused(value: str) -> None:
    with pytest.raises(InvalidInput, match="project id") as info:
        validate_id(value, kind="project id")
    assert info.value.field == "project id"


@pytest.mark.parametrize("value", [None, 42, b"demo"])
def test_non_string_ids_are_refused(value: object) -> None:
    with pytest.raises(InvalidInput, match="dataset id must not be empty"):
        validate_id(value, kind="dataset id")


def test_invalid_id_message_says_what_is_allowed() -> None:
    with pytest.raises(InvalidInput, match=r"invalid dataset id 'Sales': use 1-63 lowercase ASCII letters"):
        validate_id("Sales", kind="dataset id")


@pytest.mark.parametrize("value", GOOD_IDS)
def test_good_ids_pass_unchanged(value: str) -> None:
    assert validate_id(value) == value


def test_new_id_is_a_valid_unique_id() -> None:
    ids = {new_id("cr") for _ in range(50)}
    assert len(ids) == 50
    for value in ids:
        assert value.startswith("cr_")
        assert validate_id(value) == value


def test_every_path_of_the_spec(tmp_path: Path) -> None:
    layout = dataset_layout(tmp_path, "demo", "customers")
    root = tmp_path / "projects" / "demo" / "datasets" / "customers"
    assert layout == DatasetLayout(root=root, project_id="demo", dataset_id="customers")
    assert project_root(tmp_path, "demo") == tmp_path / "projects" / "demo"
    assert layout.main == root / "main"
    assert layout.staging_root == root / "staging"
    assert layout.staging("cr_1") == root / "staging" / "cr_1"
    assert layout.live_edit_root == root / "live_edit"
    assert layout.session_dir("s1") == root / "live_edit" / "s1"
    assert layout.live_edit("s1") == root / "live_edit" / "s1" / "edits.delta"
    assert layout.session_metadata("s1") == root / "live_edit" / "s1" / "metadata.json"
    assert layout.imports_root == root / "imports"
    assert layout.upload("up_1") == root / "imports" / "up_1"
    assert layout.audit == root / "audit"
    assert layout.validation_run("run_1") == root / "audit" / "validation_runs" / "run_1"
    assert layout.maintenance_reports() == root / "audit" / "maintenance"


def test_resolving_paths_creates_nothing(tmp_path: Path) -> None:
    layout = dataset_layout(tmp_path / "data", "demo", "customers")
    layout.staging("cr_1")
    layout.live_edit("s1")
    layout.upload("up_1")
    assert not (tmp_path / "data").exists()
    assert not layout.exists()
    assert not layout.has_main_table()


def test_create_makes_the_whole_tree_and_is_idempotent(tmp_path: Path) -> None:
    layout = dataset_layout(tmp_path, "demo", "customers")
    layout.create()
    expected = {"main", "staging", "live_edit", "imports", "audit"}
    assert set(DATASET_SUBDIRS) == expected
    assert {p.name for p in layout.root.iterdir()} == expected
    assert {p.name for p in layout.audit.iterdir()} == set(AUDIT_SUBDIRS)
    assert set(AUDIT_SUBDIRS) == {"validation_runs", "snapshots", "history", "maintenance"}
    assert layout.exists()
    assert not layout.has_main_table()

    marker = layout.main / "_delta_log"
    marker.mkdir()
    (marker / "00000000000000000000.json").write_text("{}")
    layout.create()  # again: nothing is lost, nothing is added
    assert {p.name for p in layout.root.iterdir()} == expected
    assert (marker / "00000000000000000000.json").read_text() == "{}"
    assert layout.has_main_table()


@pytest.mark.parametrize(
    ("project_id", "dataset_id"),
    [("..", "customers"), ("demo", ".."), ("demo", "a/b"), ("Demo", "customers"), ("demo", "abc\n"), ("", "x")],
)
def test_bad_ids_create_nothing_on_disk(tmp_path: Path, project_id: str, dataset_id: str) -> None:
    data_root = tmp_path / "data"
    with pytest.raises(InvalidInput):
        dataset_layout(data_root, project_id, dataset_id).create()
    assert not data_root.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "resolve",
    [
        pytest.param(lambda layout: layout.staging(".."), id="staging"),
        pytest.param(lambda layout: layout.session_dir("../../x"), id="session"),
        pytest.param(lambda layout: layout.live_edit("S1"), id="live-edit"),
        pytest.param(lambda layout: layout.session_metadata(""), id="metadata"),
        pytest.param(lambda layout: layout.upload("a/b"), id="upload"),
        pytest.param(lambda layout: layout.validation_run("run\n"), id="validation-run"),
    ],
)
def test_sub_ids_are_validated_too(tmp_path: Path, resolve) -> None:  # type: ignore[no-untyped-def]
    layout = dataset_layout(tmp_path / "data", "demo", "customers")
    with pytest.raises(InvalidInput, match="id"):
        resolve(layout)
    assert not (tmp_path / "data").exists()


# ---------------------------------------------------------------- the file layout of main (row_id ranges)


def _row_id_ranges(main: Path) -> list[tuple[str, str, int]]:
    """(min row_id, max row_id, rows) of each live data file of ``main``, as delta-rs sees the log."""
    import pyarrow as pa
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(str(main)).get_add_actions(flatten=True)).to_pydict()
    return sorted(zip(actions["min.row_id"], actions["max.row_id"], actions["num_records"], strict=True))


def _disjoint(ranges: list[tuple[str, str, int]]) -> bool:
    return all(a[1] < b[0] for a, b in itertools.pairwise(ranges))


def _people(tmp_path: Path, rows: int) -> Path:
    """A CSV of ``rows`` people whose ids come in shuffled order (the file is not sorted by key)."""
    ids = list(range(1, rows + 1))
    random.Random(5).shuffle(ids)
    source = tmp_path / "people.csv"
    source.write_text("id,name,age\n" + "".join(f"{i},name {i},{20 + i % 50}\n" for i in ids))
    return source


def _approve_edit(
    catalog: Catalog,
    row_ids: list[str],
    value: str,
    *,
    skippable_gone: pytest.MonkeyPatch | None = None,
) -> dict[str, str]:
    """Set ``name`` of ``row_ids`` through an approved change request; the MERGE commit's metrics.

    With ``skippable_gone``, the data files whose row_id range cannot hold ``row_ids`` are
    moved away for the MERGE alone (back before the catalog sync counts the rows): the
    MERGE then succeeds only if it skips them.
    """
    main = layout_for("demo", "people").main
    editor, approver = get_user(catalog, "ed"), get_user(catalog, "al")
    session = sessions.open_session(catalog, "demo", "people", actor=editor)
    sessions.apply_edits(
        catalog, session.session_id, [sessions.SetCell(r, "name", value) for r in row_ids], actor=editor
    )
    request = change_requests.submit_change_request(catalog, session.session_id, actor=editor, title="names")
    if skippable_gone is not None:
        gone = _files_outside(main, row_ids)
        assert gone
        aside = main.parent / "aside"
        aside.mkdir(exist_ok=True)
        for path in gone:
            path.rename(aside / path.name)
        merge_with_retries = merge._merge_with_retries

        def merge_without_them(*args, **kwargs):  # type: ignore[no-untyped-def]
            try:
                return merge_with_retries(*args, **kwargs)
            finally:
                for path in gone:
                    (aside / path.name).rename(path)

        skippable_gone.setattr(merge, "_merge_with_retries", merge_without_them)
    merge.approve_change_request(catalog, request.id, actor=approver)
    (last,) = engine.history(main, limit=1)
    assert last.operation == "MERGE"
    return last.operation_metrics


def _files_outside(main: Path, row_ids: list[str]) -> list[Path]:
    import pyarrow as pa
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(str(main)).get_add_actions(flatten=True)).to_pydict()
    return [
        main / path
        for path, low, high in zip(actions["path"], actions["min.row_id"], actions["max.row_id"], strict=True)
        if not any(low <= r <= high for r in row_ids)
    ]


def _names(main: Path, row_ids: list[str]) -> dict[str, str]:
    placeholders = ", ".join("?" for _ in row_ids)
    rows = reads.cursor().execute(
        f"SELECT row_id, name FROM delta_scan(?) WHERE row_id IN ({placeholders})", [str(main), *row_ids]
    )
    return dict(rows.fetchall())


@pytest.fixture
def people(spark, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # type: ignore[no-untyped-def]
    """``demo/people``: 3,000 rows written by ``create_dataset`` with a tiny target file size."""
    monkeypatch.setattr(engine, "MAIN_FILE_BYTES", 8 << 10)
    create_project(catalog, "demo")
    for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER), ("ada", Role.ADMIN)):
        create_user(catalog, name, password=f"{name}-password-1")
        add_member(catalog, "demo", name, role)
    create_dataset(catalog, "demo", "people", _people(tmp_path, 3000), key="id")
    return layout_for("demo", "people").main


@pytest.mark.spark
def test_main_is_written_in_sorted_row_id_ranges_that_every_reader_reads(people: Path) -> None:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    ranges = _row_id_ranges(people)
    assert len(ranges) >= 3, ranges
    assert _disjoint(ranges), ranges
    assert sum(r[2] for r in ranges) == 3000
    # A few read tasks roll over to a new file every so many rows: the files are main-sized,
    # more of them than the tasks that wrote them.
    (converted,) = people.parent.glob("imports/*/converted.parquet")
    files = engine.main_file_count(converted.stat().st_size)
    assert files > get_settings().spark_shuffle_partitions
    assert files <= len(ranges) <= files + get_settings().spark_shuffle_partitions, ranges
    assert max(r[2] for r in ranges) <= -(-3000 // files), ranges
    for uri in DeltaTable(str(people)).file_uris():
        ids = pq.read_table(uri.removeprefix("file://"), columns=["row_id"]).column("row_id").to_pylist()
        assert ids == sorted(ids)
    # No column mapping nor new table features: DuckDB's delta_scan (the app's reads) reads it
    # all, and delta-rs reads its log (the file ranges above). delta-rs 1.6 reads no main
    # table's data: deletion vectors and type widening, on since before, are reader features.
    duck = reads.cursor().execute("SELECT count(*), count(DISTINCT row_id) FROM delta_scan(?)", [str(people)])
    assert duck.fetchone() == (3000, 3000)


@pytest.mark.spark
def test_a_small_merge_reads_only_the_files_its_rows_can_be_in(
    people: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = _approve_edit(catalog, ["1", "2"], "renamed")
    assert int(metrics["numTargetRowsUpdated"]) == 2
    assert _names(people, ["1", "2", "3"]) == {"1": "renamed", "2": "renamed", "3": "name 3"}
    # The files that cannot hold the rows are not even opened: with them gone it still merges.
    metrics = _approve_edit(catalog, ["7"], "skipped the rest", skippable_gone=monkeypatch)
    assert int(metrics["numTargetRowsUpdated"]) == 1


@pytest.mark.spark
def test_a_source_over_the_small_size_scans_main_whole(
    people: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(merge, "SMALL_SOURCE_ROWS", 2)
    metrics = _approve_edit(catalog, ["4", "5", "6"], "again")
    assert int(metrics["numTargetRowsUpdated"]) == 3
    assert _names(people, ["4", "6", "7"]) == {"4": "again", "6": "again", "7": "name 7"}
    # Without the IN-list every file is read, so a missing one fails the MERGE.
    with pytest.raises(EngineError, match="Spark could not merge"):
        _approve_edit(catalog, ["8", "9", "10"], "never", skippable_gone=monkeypatch)


@pytest.mark.spark
def test_a_small_merge_runs_from_memory_and_leaves_the_session_as_it_was(
    spark, people: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    seen: list[str] = []
    original = spark.conf.get("spark.sql.adaptive.enabled")
    small_source = merge._small_source

    def watched(staging: Path) -> merge._Staged:
        staged = small_source(staging)
        seen.append(f"{staged.rows.num_rows} rows" if staged.rows is not None else "scan")
        return staged

    monkeypatch.setattr(merge, "_small_source", watched)
    metrics = _approve_edit(catalog, ["11", "12"], "from memory")
    assert seen == ["2 rows"] and int(metrics["numTargetRowsUpdated"]) == 2
    assert _names(people, ["11", "12", "13"]) == {"11": "from memory", "12": "from memory", "13": "name 13"}
    assert spark.conf.get("spark.sql.adaptive.enabled") == original
    assert not [t.name for t in spark.catalog.listTables() if t.name.startswith("oreo_staged_")]


@pytest.mark.spark
def test_a_merge_touching_few_files_rewrites_them_and_more_write_deletion_vectors(
    people: Path, catalog: Catalog
) -> None:
    ranges = _row_id_ranges(people)
    assert len(ranges) > merge.REWRITE_MAX_FILES + 1, ranges
    # Two rows of one file: that file is rewritten whole, no deletion vector.
    low, high, _ = ranges[1]
    one_file = sorted(r for r in map(str, range(1, 3001)) if low <= r <= high)[:2]
    file_bytes = merge._touched_bytes(people, engine.latest_version(people), one_file)
    assert file_bytes is not None and 0 < file_bytes <= engine.MAIN_FILE_BYTES
    metrics = _approve_edit(catalog, one_file, "rewritten")
    assert int(metrics["numTargetRowsUpdated"]) == 2
    assert int(metrics["numTargetDeletionVectorsAdded"]) == 0
    assert int(metrics["numTargetFilesRemoved"]) == 1
    # One row in each of more files than that: deletion vectors, each file left in place.
    spread = [low for low, _, _ in _row_id_ranges(people)[2 : merge.REWRITE_MAX_FILES + 4]]
    spread_bytes = merge._touched_bytes(people, engine.latest_version(people), spread)
    assert spread_bytes is not None and spread_bytes > merge.REWRITE_MAX_FILES * engine.MAIN_FILE_BYTES
    # Past its limit it stops asking for sizes (one request each on an object store).
    partial = merge._touched_bytes(people, engine.latest_version(people), spread, stop_above=1)
    assert partial is not None and 1 < partial < spread_bytes
    metrics = _approve_edit(catalog, spread, "vectors")
    assert int(metrics["numTargetRowsUpdated"]) == len(spread)
    assert int(metrics["numTargetDeletionVectorsAdded"]) == len(spread)
    assert _names(people, [*one_file, *spread]) == {
        **dict.fromkeys(one_file, "rewritten"),
        **dict.fromkeys(spread, "vectors"),
    }
    assert merge._touched_bytes(people, engine.latest_version(people), []) == 0
    # A table DuckDB cannot read: no size, so the MERGE keeps its deletion vectors.
    assert merge._touched_bytes(people.parent / "missing", 0, spread) is None


def test_the_in_list_is_only_for_small_sources(tmp_path: Path) -> None:
    main, staging = tmp_path / "main", tmp_path / "staging"
    small = merge._merge_sql(main, staging, ["row_id", "a"], {"row_id", "a"}, {"update"}, row_ids=["b'1", "a"])
    assert "ON t.row_id = s.row_id AND t.row_id IN ('a', 'b\\'1') WHEN MATCHED" in small
    assert "USING (SELECT /*+ BROADCAST */ * FROM delta.`" in small
    view = merge._merge_sql(main, staging, ["row_id", "a"], {"row_id", "a"}, {"update"}, row_ids=["a"], source="v1")
    assert "USING (SELECT /*+ BROADCAST */ * FROM v1) AS s ON t.row_id = s.row_id AND t.row_id IN ('a')" in view
    for row_ids in (None, []):
        big = merge._merge_sql(main, staging, ["row_id", "a"], {"row_id", "a"}, {"update"}, row_ids=row_ids)
        assert f"USING delta.`{staging}` AS s ON t.row_id = s.row_id WHEN MATCHED" in big


@pytest.mark.spark
def test_zorder_by_row_id_gives_an_old_table_the_new_layout(
    spark, people: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rewrite main as tables were written before: a plain Spark write, rows spread over files.
    old = engine.new_commit("system", "test_old_layout")
    frame = spark.read.format("delta").load(str(people)).repartition(4)
    with engine.commit_metadata(old):
        frame.write.format("delta").mode("overwrite").save(str(people))
    sync_dataset(catalog, "demo", "people", old, version=engine.latest_version(people))
    assert not _disjoint(_row_id_ranges(people))

    report = maintenance.maintain(catalog, "demo", "people", actor=get_user(catalog, "ada"), zorder=["row_id"])

    assert report["steps"]["optimize"]["zorder"] == ["row_id"]
    ranges = _row_id_ranges(people)
    assert len(ranges) >= 3 and _disjoint(ranges), ranges
    assert sum(r[2] for r in ranges) == 3000
    metrics = _approve_edit(catalog, ["10"], "after optimize", skippable_gone=monkeypatch)
    assert int(metrics["numTargetRowsUpdated"]) == 1
