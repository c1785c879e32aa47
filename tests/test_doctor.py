"""Damaged tables: reads, `dataset show` and `history` name the damaged file; `oreo doctor` checks a table."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from cli import context
from core import auth, damage, engine, merge
from core.catalog import Catalog, DatasetRow, open_catalog, reset_catalogs
from core.sessions import DeleteRow, SetCell
from tests import merge_support as ms
from tests.test_cli import Result, assert_one_error_line, run

pytestmark = pytest.mark.spark

CHECKS = ["log", "files", "checkpoints", "catalog_version", "row_count"]


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """demo/nums at version 1: a MERGE that rewrote a row (a new data file) and deleted one (a deletion vector)."""
    folder = ms.make_pristine(tmp_path_factory.mktemp("doctor") / "pristine")
    with pytest.MonkeyPatch.context() as mp:
        ms.switch(ms.env_for(folder), mp)
        # Deletion vectors, which these tests are about: a small MERGE would rewrite the one file.
        mp.setattr(merge, "REWRITE_MAX_FILES", 0)
        catalog = open_catalog()
        cr = ms.submit(catalog, "ed", [SetCell("2", "name", "renamed"), DeleteRow("3")])
        merge.approve_change_request(catalog, cr.id, actor=ms.user(catalog, "al"))
        reset_catalogs()
    return folder


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    ms.switch(ms.fresh_copy(pristine, tmp_path), monkeypatch)
    context.state.json = False
    yield open_catalog()
    context.state.json = False


def _actions(version: int) -> list[dict]:  # type: ignore[type-arg]
    log = ms.layout().main / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _new_data_file() -> str:
    """The data file version 1 added (the rewritten row), relative to the table."""
    before = {a["add"]["path"] for a in _actions(0) if "add" in a}
    return next(a["add"]["path"] for a in _actions(1) if "add" in a and a["add"]["path"] not in before)


def _deletion_vector_file() -> str:
    return next(p.name for p in ms.layout().main.glob("deletion_vector_*.bin"))


def _doctor(capsys: pytest.CaptureFixture[str]) -> tuple[Result, dict]:  # type: ignore[type-arg]
    result = run(capsys, "--json", "doctor", ms.PROJECT, ms.DATASET)
    doc = json.loads(result.out)  # exactly one JSON document, healthy or not
    assert set(doc) == {"project", "dataset", "ok", "checks"}
    assert [c["name"] for c in doc["checks"]] == CHECKS
    assert all(set(c) == {"name", "ok", "detail"} for c in doc["checks"])
    return result, doc


def _failed(doc: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {c["name"]: c["detail"] for c in doc["checks"] if not c["ok"]}


def test_a_healthy_table_passes_every_check(capsys: pytest.CaptureFixture[str], catalog: Catalog) -> None:
    result, doc = _doctor(capsys)

    assert result.code == 0, result.err
    assert (doc["project"], doc["dataset"], doc["ok"]) == (ms.PROJECT, ms.DATASET, True)
    assert _failed(doc) == {}
    human = run(capsys, "doctor", ms.PROJECT, ms.DATASET)
    assert human.code == 0
    assert human.out.splitlines()[-1] == f"{ms.PROJECT}/{ms.DATASET}: healthy"


def _delete_data_file() -> str:
    name = _new_data_file()
    (ms.layout().main / name).unlink()
    return name


def _delete_deletion_vector() -> str:
    name = _deletion_vector_file()
    (ms.layout().main / name).unlink()
    return name


def _truncate_last_commit() -> str:
    last = ms.layout().main / "_delta_log" / f"{engine.latest_version(ms.layout().main):020d}.json"
    text = last.read_bytes()
    last.write_bytes(text[: len(text) // 2])
    return f"_delta_log/{last.name}"


def _last_commit() -> Path:
    return ms.layout().main / "_delta_log" / f"{engine.latest_version(ms.layout().main):020d}.json"


def _cut_last_commit_at_a_line() -> str:
    """Keep the commitInfo and txn lines, lose the add and remove actions: the rest still parses."""
    last = _last_commit()
    lines = last.read_text().splitlines(keepends=True)
    assert any('"add"' in line for line in lines[2:])
    last.write_text("".join(lines[:2]))
    return f"_delta_log/{last.name}"


def _empty_last_commit() -> str:
    last = _last_commit()
    last.write_bytes(b"")
    return f"_delta_log/{last.name}"


def _drop_commit_info() -> str:
    last = _last_commit()
    lines = last.read_text().splitlines(keepends=True)
    last.write_text("".join(line for line in lines if '"commitInfo"' not in line))
    return f"_delta_log/{last.name}"


DAMAGE = {
    "deleted-data-file": (_delete_data_file, "files", "is missing"),
    "deleted-deletion-vector": (_delete_deletion_vector, "files", "is missing"),
    "truncated-last-commit": (_truncate_last_commit, "log", "is not valid JSON"),
    "last-commit-cut-at-a-line": (
        _cut_last_commit_at_a_line, "log", "adds files holding 0 of the 1 rows its commitInfo wrote"
    ),
    "emptied-last-commit": (_empty_last_commit, "log", "is empty"),
    "last-commit-without-commit-info": (_drop_commit_info, "log", "has no commitInfo"),
}


@pytest.mark.parametrize("case", ["last-commit-cut-at-a-line", "emptied-last-commit"])
def test_a_last_commit_that_parses_but_lost_its_actions_is_refused_by_export(
    capsys: pytest.CaptureFixture[str], catalog: Catalog, tmp_path: Path, case: str
) -> None:
    """The version before is not served (or exported) as the current one."""
    damage_it, _check, problem = DAMAGE[case]
    name = damage_it()
    out = tmp_path / "out.csv"

    result = run(capsys, "export", ms.PROJECT, ms.DATASET, "--out", str(out))

    assert_one_error_line(result, rf"is damaged: {re.escape(name)} {problem}")
    assert not out.exists()


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damage_is_named_by_reads_show_history_and_doctor(
    capsys: pytest.CaptureFixture[str], catalog: Catalog, case: str
) -> None:
    damage_it, check, problem = DAMAGE[case]
    name = damage_it()
    pattern = rf"{ms.PROJECT}/{ms.DATASET} is damaged: {re.escape(name)} {problem}.*oreo doctor {ms.PROJECT}"

    for command in (["dataset", "rows"], ["dataset", "show"], ["history"]):
        result = run(capsys, *command, ms.PROJECT, ms.DATASET)
        assert_one_error_line(result, pattern)

    result, doc = _doctor(capsys)
    assert result.code == 1
    assert doc["ok"] is False
    failed = _failed(doc)
    assert check in failed and name in failed[check], failed
    assert "row_count" in failed  # nothing can be counted from a damaged table
    human = run(capsys, "doctor", ms.PROJECT, ms.DATASET)
    assert human.code == 1
    assert any(line.startswith("FAIL") and check in line and name in line for line in human.out.splitlines())
    assert human.out.splitlines()[-1].startswith(f"{ms.PROJECT}/{ms.DATASET}: DAMAGED")


def test_a_lost_data_file_is_repaired_by_restoring_the_version_before(
    capsys: pytest.CaptureFixture[str], catalog: Catalog
) -> None:
    """The damage message is not a dead end: restoring a version whose files exist heals the table."""
    _delete_data_file()
    auth.create_user(catalog, "ad", password="ad-password-1")
    auth.add_member(catalog, ms.PROJECT, "ad", auth.Role.ADMIN)

    restored = run(
        capsys, "--json", "restore", ms.PROJECT, ms.DATASET, "--version", "0", "--as", "ad", "--reason", "lost file"
    )

    assert restored.code == 0, restored.err
    assert restored.json() == {"version": 2, "restored_to": 0}
    result, doc = _doctor(capsys)
    assert (result.code, doc["ok"]) == (0, True), doc
    rows = run(capsys, "--json", "dataset", "rows", ms.PROJECT, ms.DATASET)
    assert rows.json()["total"] == len(ms.BASE_ROWS)


def test_catalog_out_of_step_with_the_table_fails_its_checks(
    capsys: pytest.CaptureFixture[str], catalog: Catalog
) -> None:
    with catalog.session() as s:
        s.execute(
            update(DatasetRow)
            .where(DatasetRow.project_id == ms.PROJECT, DatasetRow.dataset_id == ms.DATASET)
            .values(delta_version=0, row_count=99)
        )

    result, doc = _doctor(capsys)

    assert result.code == 1
    failed = _failed(doc)
    assert set(failed) == {"catalog_version", "row_count"}
    assert failed["catalog_version"] == "the catalog records version 0, the table is at version 1"
    assert failed["row_count"] == "the catalog records 99 rows, DuckDB counts 7 at version 1"


def test_a_gap_in_the_log_and_a_corrupt_checkpoint_are_found(
    capsys: pytest.CaptureFixture[str], catalog: Catalog
) -> None:
    log = ms.layout().main / "_delta_log"
    first = log / f"{0:020d}.json"
    saved = first.read_bytes()
    first.unlink()

    result, doc = _doctor(capsys)
    assert result.code == 1
    assert f"_delta_log/{0:020d}.json missing" in _failed(doc)["log"]

    first.write_bytes(saved)
    done = run(capsys, "--json", "maintain", ms.PROJECT, ms.DATASET, "--checkpoint")
    assert done.code == 0, done.err
    checkpoint = next(log.glob("*.checkpoint.parquet"))
    checkpoint.write_bytes(checkpoint.read_bytes()[:100])

    result, doc = _doctor(capsys)
    assert result.code == 1
    assert f"_delta_log/{checkpoint.name} is not a readable checkpoint" in _failed(doc)["checkpoints"]


def test_a_write_whose_tasks_left_a_file_empty_is_not_damaged(tmp_path: Path) -> None:
    """Spark counts a file a task opened and left empty (numFiles 2, one add): the rows decide, not the files."""
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    info = {"operation": "CREATE TABLE AS SELECT", "operationMetrics": {"numFiles": "2", "numOutputRows": "1200"}}
    add = {"path": "part-00001.parquet", "size": 1, "dataChange": True, "stats": json.dumps({"numRecords": 1200})}
    lines = [{"commitInfo": info}, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, {"add": add}]
    (log / f"{0:020d}.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert damage.check_log(tmp_path / "t") == []

    add["stats"] = json.dumps({"numRecords": 1100})  # rows lost with a cut add
    (log / f"{0:020d}.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [f.problem for f in damage.check_log(tmp_path / "t")] == [
        "adds files holding 1,100 of the 1,200 rows its commitInfo wrote: truncated"
    ]
