"""Table history: versions from the Delta log, previews, diffs between versions, restore and export."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from cli import context
from core import datasets, engine, history, merge, reads
from core.audit import list_events
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.errors import InvalidInput, NotFound, PermissionDenied
from core.sessions import AddRow, DeleteRow, SetCell
from tests.merge_support import (
    DATASET,
    PROJECT,
    assert_frame_equal,
    env_for,
    fresh_copy,
    layout,
    log_versions,
    main_frame,
    make_pristine,
    submit,
    switch,
)
from tests.test_cli import assert_one_error_line, run

pytestmark = pytest.mark.spark

FIRST_EDITS = [
    SetCell("2", "qty", "99"),
    SetCell("2", "name", "Two"),
    DeleteRow("3"),
    AddRow({"id": 50, "name": "fifty", "qty": 5, "score": 1.5}),
]
SECOND_EDITS = [SetCell("4", "score", "0.5"), DeleteRow("5")]


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """demo/nums at version 2: v0 created, v1 and v2 two merged change requests; an admin ``ada``."""
    folder = make_pristine(tmp_path_factory.mktemp("history") / "pristine")
    with pytest.MonkeyPatch.context() as mp:
        switch(env_for(folder), mp)
        # Deletion vectors, which these tests are about: a small MERGE would rewrite the one file.
        mp.setattr(merge, "REWRITE_MAX_FILES", 0)
        catalog = open_catalog()
        create_user(catalog, "ada", password="ada-password-1")
        add_member(catalog, PROJECT, "ada", Role.ADMIN)
        first = submit(catalog, "ed", FIRST_EDITS)
        merge.approve_change_request(catalog, first.id, actor=get_user(catalog, "al"))
        second = submit(catalog, "ed2", SECOND_EDITS)
        merge.approve_change_request(catalog, second.id, actor=get_user(catalog, "al2"))
        reset_catalogs()
    get_settings.cache_clear()
    return folder


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    context.state.json = False
    yield open_catalog()
    context.state.json = False


def _main() -> Path:
    return layout().main


def _files() -> set[str]:
    root = Path(get_settings().data_root)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _state(catalog: Catalog) -> tuple[int, int, set[str]]:
    """What a refused call must leave alone: the table's version, the audit log, the files."""
    return log_versions(), len(list_events(catalog, limit=10_000)), _files()


def _vacuum(spark) -> None:  # type: ignore[no-untyped-def]
    conf = "spark.databricks.delta.retentionDurationCheck.enabled"
    spark.conf.set(conf, "false")
    try:
        spark.sql(f"VACUUM {engine.delta_ref(_main())} RETAIN 0 HOURS").collect()
    finally:
        spark.conf.unset(conf)


# ---------------------------------------------------------------- history


def test_history_lists_each_commit_with_its_actor_request_and_metrics(catalog: Catalog) -> None:
    ed = get_user(catalog, "ed")
    page = history.table_history(catalog, PROJECT, DATASET, actor=ed)
    assert page.total == 3
    assert [(v.version, v.operation) for v in page.versions] == [
        (2, "MERGE"),
        (1, "MERGE"),
        (0, "CREATE TABLE AS SELECT"),
    ]
    second, first, created = page.versions
    assert (first.actor, first.cr_title, first.reason) == ("al", "ed edits", None)
    assert first.cr_id is not None and first.cr_id.startswith("cr")
    assert (first.metrics["rows_inserted"], first.metrics["rows_updated"], first.metrics["rows_deleted"]) == (1, 1, 1)
    assert first.metrics["numTargetRowsUpdated"] == 1  # Delta's raw metrics ride along, as ints
    assert (second.actor, second.cr_title) == ("al2", "ed2 edits")
    assert (second.metrics["rows_updated"], second.metrics["rows_deleted"], second.metrics["rows_inserted"]) == (
        1,
        1,
        0,
    )
    assert (created.actor, created.cr_id, created.metrics["rows_inserted"]) == ("system", None, 8)
    assert all(v.timestamp.tzinfo is not None for v in page.versions)
    # The newest version is the table as it is: nothing to restore.
    assert [(v.restorable, v.not_restorable_reason) for v in page.versions] == [
        (False, "the current version"),
        (True, None),
        (True, None),
    ]

    paged = history.table_history(catalog, PROJECT, DATASET, actor=ed, limit=1, offset=1)
    assert ([v.version for v in paged.versions], paged.total) == ([1], 3)
    assert history.table_history(catalog, PROJECT, DATASET, actor=ed, offset=3).versions == []


def test_restorable_versions_follow_the_files_on_disk_including_deletion_vectors(catalog: Catalog) -> None:
    main = _main()
    assert history.restorable_versions(main) == {0: None, 1: None, 2: "the current version"}
    # Main tables use deletion vectors: the merges mark removed rows in a .bin file.
    dvs = [f for f in os.listdir(main) if f.startswith("deletion_vector_") and f.endswith(".bin")]
    assert dvs
    for name in dvs:
        (main / name).unlink()
    reasons = history.restorable_versions(main)
    assert reasons[0] is None  # v0 has no deletion vectors
    assert reasons[1] == "its data files were vacuumed"


# ---------------------------------------------------------------- preview and diff


def test_preview_reads_a_version_with_filters_sorting_and_paging(catalog: Catalog) -> None:
    ed = get_user(catalog, "ed")
    page = history.preview_version(catalog, PROJECT, DATASET, 0, actor=ed, order_by="qty", descending=True, limit=3)
    assert (page.total, list(page.rows["row_id"])) == (8, ["8", "7", "6"])
    filtered = history.preview_version(catalog, PROJECT, DATASET, 1, actor=ed, filters=[reads.RowFilter("name", "Two")])
    assert (filtered.total, int(filtered.rows["qty"][0])) == (1, 99)
    with pytest.raises(NotFound, match=r"demo/nums has no version 7; its versions are 0 to 2"):
        history.preview_version(catalog, PROJECT, DATASET, 7, actor=ed)


def _whole(catalog: Catalog, a: int, b: int, *, limit: int) -> tuple[list[history.diff.Change], history.VersionDiff]:
    ed = get_user(catalog, "ed")
    first = history.diff_versions(catalog, PROJECT, DATASET, a, b, actor=ed, limit=limit)
    changes = list(first.changes)
    while len(changes) < first.total:
        page = history.diff_versions(catalog, PROJECT, DATASET, a, b, actor=ed, limit=limit, offset=len(changes))
        assert page.changes and page.total == first.total
        changes += page.changes
    return changes, first


@pytest.mark.parametrize(("a", "b"), [(0, 1), (1, 2), (0, 2)])
def test_the_change_data_feed_and_the_snapshots_give_the_same_diff(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, a: int, b: int
) -> None:
    via_feed, feed = _whole(catalog, a, b, limit=2)
    assert feed.source == "cdf"
    monkeypatch.setattr(history, "_changed_row_files", lambda log, a, b: None)
    via_snapshots, snapshots = _whole(catalog, a, b, limit=1000)
    assert snapshots.source == "snapshot"
    assert via_feed == via_snapshots
    assert (feed.total, feed.rows_inserted, feed.rows_updated, feed.rows_deleted) == (
        snapshots.total,
        snapshots.rows_inserted,
        snapshots.rows_updated,
        snapshots.rows_deleted,
    )


def test_diff_has_one_entry_per_changed_cell_and_per_inserted_or_deleted_row(catalog: Catalog) -> None:
    changes, result = _whole(catalog, 0, 2, limit=3)
    assert [(c.row_id, c.change, c.column, c.old, c.new) for c in changes] == [
        ("2", "update", "name", "name 2", "Two"),
        ("2", "update", "qty", "20", "99"),
        ("3", "delete", None, {"row_id": "3", "id": 3, "name": "name 3", "qty": 30, "score": 3.75}, None),
        ("4", "update", "score", "5.0", "0.5"),
        ("5", "delete", None, {"row_id": "5", "id": 5, "name": "name 5", "qty": 50, "score": 6.25}, None),
        ("50", "insert", None, None, {"row_id": "50", "id": 50, "name": "fifty", "qty": 5, "score": 1.5}),
    ]
    assert (result.total, result.rows_inserted, result.rows_updated, result.rows_deleted) == (6, 1, 2, 2)
    assert len(result.changes) == 3


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda c: history.restore_version(c, PROJECT, DATASET, 9, actor=get_user(c, "ada"), reason="oops"),
            NotFound,
            r"demo/nums has no version 9; its versions are 0 to 2",
        ),
        (
            lambda c: history.restore_version(c, PROJECT, DATASET, 0, actor=get_user(c, "al"), reason="oops"),
            PermissionDenied,
            r"'al' cannot restore a table version: it needs the admin role",
        ),
        (
            lambda c: history.restore_version(c, PROJECT, DATASET, 0, actor=get_user(c, "ada"), reason="  "),
            InvalidInput,
            r"a reason is required",
        ),
        (
            lambda c: history.restore_version(c, PROJECT, DATASET, 2, actor=get_user(c, "ada"), reason="x"),
            InvalidInput,
            r"version 2 of demo/nums cannot be restored: the current version",
        ),
        (
            lambda c: history.diff_versions(c, PROJECT, DATASET, 2, 1, actor=get_user(c, "ed")),
            InvalidInput,
            r"from \(2\) must be older than to \(1\)",
        ),
        (
            lambda c: history.diff_versions(c, PROJECT, DATASET, 1, 5, actor=get_user(c, "ed")),
            NotFound,
            r"no version 5",
        ),
        (
            lambda c: history.table_history(c, PROJECT, "nope", actor=get_user(c, "ed")),
            NotFound,
            r"unknown dataset demo/nope",
        ),
        (
            lambda c: history.restore_version(c, PROJECT, "nope", 0, actor=get_user(c, "ada"), reason="x"),
            NotFound,
            r"unknown dataset demo/nope",
        ),
    ],
    ids=["no-version", "not-admin", "no-reason", "current", "from-after-to", "diff-no-version", "unknown", "unknown-r"],
)
def test_bad_input_is_refused_and_changes_nothing(catalog: Catalog, call, error, message) -> None:  # type: ignore[no-untyped-def]
    before = _state(catalog)
    with pytest.raises(error, match=message) as caught:
        call(catalog)
    assert len(str(caught.value).splitlines()) == 1
    assert _state(catalog) == before


# ---------------------------------------------------------------- restore


def test_restore_round_trip_and_open_requests_see_the_conflict(catalog: Catalog) -> None:
    ada, al = get_user(catalog, "ada"), get_user(catalog, "al")
    expected = main_frame(0)
    # An open request, based on v2, edits a cell the restore changes back.
    open_cr = submit(catalog, "ed3", [SetCell("2", "name", "Deux")])
    assert merge.find_conflicts(catalog, open_cr.id, actor=al) == []
    steps: list[str] = []

    result = history.restore_version(catalog, PROJECT, DATASET, 0, actor=ada, reason="bad batch", progress=steps.append)
    assert (result.version, result.restored_to) == (3, 0)
    assert steps and steps[-1] == "Restored version 0 as version 3"
    assert_frame_equal(main_frame(), expected)

    newest = history.table_history(catalog, PROJECT, DATASET, actor=ada, limit=1).versions[0]
    assert (newest.version, newest.operation, newest.actor, newest.reason) == (3, "RESTORE", "ada", "bad batch")
    assert history.restorable_versions(_main())[2] is None  # the old head can be restored back
    info = datasets.get_dataset(catalog, PROJECT, DATASET, actor=ada)
    assert (info.version, info.rows) == (3, 8)
    events = [e for e in list_events(catalog, project_id=PROJECT) if e.name == "table_restored"]
    assert [(e.actor, e.details["restored_to"], e.details["version"], e.details["reason"]) for e in events] == [
        ("ada", 0, 3, "bad batch")
    ]
    assert engine.find_commit(_main(), 2, commit_id=events[0].details["commit_id"]) is not None

    conflicts = merge.find_conflicts(catalog, open_cr.id, actor=al)
    assert "2" in {c.row_id for c in conflicts}

    # A retry after a crash between the commit and the catalog only finishes the bookkeeping.
    with catalog.session() as s:
        from core.catalog import DatasetRow

        row = s.get(DatasetRow, (PROJECT, DATASET))
        assert row is not None
        row.delta_version = 2
    again = history.restore_version(catalog, PROJECT, DATASET, 0, actor=ada, reason="bad batch")
    assert (again.version, log_versions()) == (3, 3)
    assert len([e for e in list_events(catalog, project_id=PROJECT) if e.name == "table_restored"]) == 1


def test_a_restore_conflicts_only_with_the_cells_it_changed(catalog: Catalog) -> None:
    """Restoring version 1 changes only row 4's score back (and re-adds row 5), yet re-adds whole files."""
    ada, al = get_user(catalog, "ada"), get_user(catalog, "al")
    elsewhere = submit(catalog, "ed3", [SetCell("6", "name", "Six"), SetCell("4", "qty", "41")])
    same_cell = submit(catalog, "ed", [SetCell("4", "score", "9.5")])
    deletes = submit(catalog, "ed2", [DeleteRow("4")])
    history.restore_version(catalog, PROJECT, DATASET, 1, actor=ada, reason="undo the second batch")
    diffed = history.diff_versions(catalog, PROJECT, DATASET, 2, 3, actor=ada)
    assert {c.row_id for c in diffed.changes} == {"4", "5"}

    # Another row, and another column of the same row: nothing to decide.
    assert merge.find_conflicts(catalog, elsewhere.id, actor=al) == []
    [cell] = merge.find_conflicts(catalog, same_cell.id, actor=al)
    assert (cell.cell, cell.version, cell.reason, cell.committed_by) == ("4.score", 3, "also changed", "ada")
    assert (cell.base, cell.theirs, cell.mine) == ("0.5", "5.0", "9.5")
    assert merge.find_conflicts(catalog, deletes.id, actor=al) == [
        merge.Conflict("4", None, 3, "row changed since; cannot delete")
    ]
    merge.approve_change_request(catalog, elsewhere.id, actor=al)
    row = main_frame().set_index("row_id").loc["4"]
    assert (row["qty"], row["score"]) == (41, 5.0)


def test_a_vacuumed_version_is_refused_before_spark_runs(catalog: Catalog, spark) -> None:  # type: ignore[no-untyped-def]
    ada = get_user(catalog, "ada")
    _vacuum(spark)
    reasons = history.restorable_versions(_main())
    # v0's only file is still live (v2 masks rows of it with a deletion vector); v1's
    # deletion vector was replaced by v2's, and VACUUM deleted it.
    assert reasons[0] is None
    assert reasons[1] is not None and reasons[1].startswith("its data files were vacuumed (VACUUM on ")
    before = _state(catalog)
    with pytest.raises(InvalidInput, match=r"version 1 of demo/nums cannot be restored: its data files were vacuumed"):
        history.restore_version(catalog, PROJECT, DATASET, 1, actor=ada, reason="undo")
    assert _state(catalog) == before
    flags = {v.version: v.restorable for v in history.table_history(catalog, PROJECT, DATASET, actor=ada).versions}
    assert (flags[0], flags[1]) == (True, False)
    # A vacuumed version can no longer be read either; the diff says so instead of failing in DuckDB.
    with pytest.raises(NotFound, match=r"version 1 of demo/nums cannot be read: its data files were vacuumed"):
        history.diff_versions(catalog, PROJECT, DATASET, 1, 2, actor=ada)

    # Cleaning up the log up to a checkpoint: versions before it lose their commit.
    spark.sql(f"ALTER TABLE {engine.delta_ref(_main())} SET TBLPROPERTIES ('delta.checkpointInterval' = '1')").collect()
    head = engine.latest_version(_main())
    log = _main() / "_delta_log"
    assert (log / f"{head:020d}.checkpoint.parquet").is_file()
    for version in range(head):
        (log / f"{version:020d}.json").unlink()
    assert history.restorable_versions(_main()) == {head: "the current version"}
    with pytest.raises(InvalidInput, match=r"version 1 of demo/nums cannot be restored: its log was cleaned up"):
        history.restore_version(catalog, PROJECT, DATASET, 1, actor=ada, reason="undo")


# ---------------------------------------------------------------- export


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_export_writes_every_column_of_a_version(catalog: Catalog, tmp_path: Path, suffix: str) -> None:
    ed = get_user(catalog, "ed")
    out = tmp_path / f"nums{suffix}"
    result = history.export_version(catalog, PROJECT, DATASET, out, actor=ed, version=1)
    assert (result.path, result.version, result.rows, result.format) == (out, 1, 8, suffix[1:])
    frame = pq.read_table(out).to_pandas() if suffix == ".parquet" else pd.read_csv(out, dtype={"row_id": str})
    assert list(frame.columns) == ["row_id", "id", "name", "qty", "score"]
    assert sorted(frame["row_id"]) == sorted(main_frame(1)["row_id"])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    latest = history.export_version(catalog, PROJECT, DATASET, tmp_path / f"latest{suffix}", actor=ed)
    assert (latest.version, latest.rows) == (2, 7)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nums.xlsx", r"cannot export to '.xlsx'; name the file .parquet or .csv"),
        ("missing/nums.csv", r"folder .*missing does not exist"),
        ("folder.csv", r"folder.csv is a folder"),
    ],
)
def test_export_refusals_leave_nothing(catalog: Catalog, tmp_path: Path, name: str, message: str) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "folder.csv").mkdir()
    with pytest.raises(InvalidInput, match=message):
        history.export_version(catalog, PROJECT, DATASET, target / name, actor=get_user(catalog, "ed"))
    assert sorted(p.name for p in target.iterdir()) == ["folder.csv"]


@pytest.mark.parametrize("out", ["s3://bucket/nums.csv", Path("s3://bucket/nums.csv"), "s3a://bucket/x.parquet"])
def test_export_to_object_storage_is_refused_by_name(catalog: Catalog, out: str | Path) -> None:
    """Exports write a local file; an s3:// target (even as a Path, which reads s3:/...) is named, not 'missing'."""
    with pytest.raises(InvalidInput, match=r"is on object storage; exports are written to a local file") as refused:
        history.export_version(catalog, PROJECT, DATASET, out, actor=get_user(catalog, "ed"))  # type: ignore[arg-type]
    assert "does not exist" not in str(refused.value)
    with pytest.raises(InvalidInput, match=r"is on object storage"):
        history.export_version_diff(
            catalog, PROJECT, DATASET, 1, 2, out, actor=get_user(catalog, "ed"), fmt="csv"  # type: ignore[arg-type]
        )


def test_cli_export_neutralises_formula_text_unless_raw(capsys, catalog: Catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Text starting with =, tab or CR gets a leading ' in a CSV; a plain number such as -5 does not; --raw opts out."""
    texts = {"1": "=HYPERLINK(1)", "4": "\tTAB", "6": "\rCR", "7": "-5"}
    cr = submit(catalog, "ed", [SetCell(row, "name", text) for row, text in texts.items()])
    merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "al"))
    shown = {}
    for flags in ((), ("--raw",)):
        out = tmp_path / f"names{len(flags)}.csv"
        exported = run(capsys, "export", PROJECT, DATASET, "--out", str(out), *flags)
        assert exported.code == 0, exported.err
        with out.open(newline="") as fh:
            shown[flags] = {r["row_id"]: r["name"] for r in csv.DictReader(fh) if r["row_id"] in texts}
    assert shown[()] == {"1": "'=HYPERLINK(1)", "4": "'\tTAB", "6": "'\rCR", "7": "-5"}
    assert shown[("--raw",)] == texts


# ---------------------------------------------------------------- CLI


def test_cli_history_diff_export_and_restore(capsys, catalog: Catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    listed = run(capsys, "--json", "history", PROJECT, DATASET, "--limit", "2")
    assert listed.code == 0, listed.err
    versions = listed.json()["versions"]
    assert [v["version"] for v in versions] == [2, 1]
    assert {"version", "timestamp", "operation", "actor", "cr_id", "metrics", "restorable"} <= set(versions[0])
    assert (versions[1]["operation"], versions[1]["actor"], versions[1]["restorable"]) == ("MERGE", "al", True)
    assert versions[1]["metrics"]["rows_updated"] == 1 and versions[0]["restorable"] is False
    assert_one_error_line(run(capsys, "--json", "history", PROJECT, "nope"), "unknown dataset demo/nope")

    diffed = run(
        capsys, "--json", "diff", PROJECT, DATASET, "--from", "1", "--to", "2", "--limit", "1", "--offset", "1"
    )
    assert diffed.code == 0, diffed.err
    doc = diffed.json()
    assert doc["total"] == 2
    assert doc["changes"] == [
        {
            "row_id": "5",
            "change": "delete",
            "column": None,
            "old": {"row_id": "5", "id": 5, "name": "name 5", "qty": 50, "score": 6.25},
            "new": None,
        }
    ]
    assert_one_error_line(run(capsys, "diff", PROJECT, DATASET, "--from", "2", "--to", "2"), "must be older")

    out = tmp_path / "v0.parquet"
    exported = run(capsys, "--json", "export", PROJECT, DATASET, "--version", "0", "--out", str(out))
    assert exported.code == 0, exported.err
    assert exported.json() == {"path": str(out), "version": 0, "rows": 8, "format": "parquet"}
    assert pq.read_table(out).num_rows == 8
    assert_one_error_line(run(capsys, "export", PROJECT, DATASET, "--out", str(tmp_path / "x.txt")), "'.txt'")
    assert not (tmp_path / "x.txt").exists()

    assert_one_error_line(
        run(capsys, "--json", "restore", PROJECT, DATASET, "--version", "0", "--as", "ada"), "reason is required"
    )
    assert log_versions() == 2
    restored = run(capsys, "--json", "restore", PROJECT, DATASET, "--version", "1", "--as", "ada", "--reason", "undo")
    assert restored.code == 0, restored.err
    assert restored.json() == {"version": 3, "restored_to": 1}
    assert (
        json.loads(run(capsys, "--json", "history", PROJECT, DATASET, "--limit", "1").out)["versions"][0]["operation"]
        == "RESTORE"
    )
