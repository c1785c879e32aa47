"""Merge concurrency: disjoint requests approved at once all land; overlapping ones conflict."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from core import change_requests, engine, merge, sessions
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.change_requests import CRState
from core.datasets import get_dataset, sync_dataset
from core.errors import ConflictError
from core.sessions import AddRow, DeleteRow, SetCell
from tests import merge_support as ms

pytestmark = pytest.mark.spark

OREO = Path(sys.executable).parent / "oreo"
REPO = Path(__file__).resolve().parent.parent

# Three editors, three disjoint sets of rows, every kind of change.
DISJOINT: dict[str, list[sessions.EditOp]] = {
    "ed": [SetCell("1", "name", "one by ed"), AddRow({"id": 200, "name": "added by ed", "qty": 2})],
    "ed2": [SetCell("2", "qty", "-7"), DeleteRow("5")],
    "ed3": [SetCell("3", "score", "0.5"), SetCell("4", "name", None), SetCell("4", "qty", "44")],
}


def _after_disjoint() -> dict[str, dict[str, Any]]:
    rows = {r: dict(v) for r, v in ms.BASE_ROWS.items() if r != "5"}
    rows["1"]["name"] = "one by ed"
    rows["200"] = {"id": 200, "name": "added by ed", "qty": 2, "score": None}
    rows["2"]["qty"] = -7
    rows["3"]["score"] = 0.5
    rows["4"].update(name=None, qty=44)
    return rows


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return ms.make_pristine(tmp_path_factory.mktemp("merge-concurrency") / "pristine")


@pytest.fixture
def env(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = ms.fresh_copy(pristine, tmp_path)
    ms.switch(env, monkeypatch)
    return env


@pytest.fixture
def catalog(env: dict[str, str]) -> Iterator[Catalog]:
    yield open_catalog()


def _assert_all_landed(catalog: Catalog, merged: dict[str, int]) -> None:
    """Each request merged once, as its own version; the catalog names the newest one."""
    assert sorted(merged.values()) == [1, 2, 3]
    assert ms.log_versions() == 3
    for cr_id, version in merged.items():
        record = change_requests.get_change_request(catalog, cr_id, actor=ms.user(catalog, "al"))
        assert (record.state, record.merged_version) == (CRState.MERGED, version)
        assert [c.version for c in ms.merge_commits(cr_id)] == [version]
        assert not ms.layout().staging(cr_id).exists()
    dataset = get_dataset(catalog, ms.PROJECT, ms.DATASET, actor=ms.user(catalog, "al"))
    expected = ms.frame_of(_after_disjoint())
    assert (dataset.version, dataset.rows) == (3, len(expected))
    ms.assert_frame_equal(ms.main_frame(), expected)


# Timeouts: three approvals (and, below, three JVM start-ups) on a shared 2-core machine.
@pytest.mark.timeout(1800)
def test_disjoint_requests_approved_in_threads_all_land(catalog: Catalog) -> None:
    crs = [ms.submit(catalog, editor, ops) for editor, ops in DISJOINT.items()]
    start = threading.Barrier(len(crs))

    def approve(cr: change_requests.ChangeRequest, approver: str) -> change_requests.ChangeRequest:
        start.wait(timeout=60)
        return merge.approve_change_request(catalog, cr.id, actor=ms.user(catalog, approver))

    with ThreadPoolExecutor(len(crs)) as pool:
        futures = [pool.submit(approve, cr, ("al", "al2")[i % 2]) for i, cr in enumerate(crs)]
        results = [f.result(timeout=900) for f in futures]

    _assert_all_landed(catalog, {r.id: r.merged_version or 0 for r in results})


@pytest.mark.timeout(1800)
def test_disjoint_requests_approved_by_separate_cli_processes(
    catalog: Catalog, env: dict[str, str], tmp_path: Path
) -> None:
    crs = [ms.submit(catalog, editor, ops) for editor, ops in DISJOINT.items()]
    reset_catalogs()
    # Each process starts its own JVM; on a loaded machine the others' merges can hold the
    # table past the default 300 s wait, and this test is about every merge landing.
    child_env = {
        **os.environ,
        **env,
        "OREO_SPARK_SHUFFLE_PARTITIONS": "2",
        "OREO_SPARK_DRIVER_MEMORY": "1g",
        "OREO_WRITER_WAIT_S": "850",
    }
    procs = []
    for i, cr in enumerate(crs):
        # Files, not pipes: an undrained pipe would stall a process while the test waits on another.
        with (tmp_path / f"{cr.id}.out").open("w") as out, (tmp_path / f"{cr.id}.err").open("w") as err:
            procs.append(
                subprocess.Popen(
                    [str(OREO), "--json", "cr", "approve", cr.id, "--as", ("al", "al2")[i % 2]],
                    env=child_env,
                    cwd=REPO,
                    stdout=out,
                    stderr=err,
                )
            )
    for proc, cr in zip(procs, crs, strict=True):
        assert proc.wait(timeout=900) == 0, (tmp_path / f"{cr.id}.err").read_text()[-3000:]
    docs = [json.loads((tmp_path / f"{cr.id}.out").read_text()) for cr in crs]  # exactly one JSON document
    assert [(d["cr_id"], d["state"]) for d in docs] == [(cr.id, "merged") for cr in crs]

    _assert_all_landed(open_catalog(), {d["cr_id"]: d["version"] for d in docs})


# (what the first request does, what the second does, the conflict find_conflicts reports)
OVERLAPS = {
    "same-cell": (
        [SetCell("1", "name", "first")],
        [SetCell("1", "name", "second"), SetCell("2", "qty", "0")],
        merge.Conflict("1", "name", 1, "also changed"),
    ),
    "delete-after-update": (
        [SetCell("3", "qty", "1")],
        [DeleteRow("3")],
        merge.Conflict("3", None, 1, "row changed since; cannot delete"),
    ),
    "update-after-delete": (
        [DeleteRow("4")],
        [SetCell("4", "score", "9.5")],
        merge.Conflict("4", None, 1, "row deleted since"),
    ),
    "same-new-key": (
        [AddRow({"id": 300, "name": "first"})],
        [AddRow({"id": 300, "name": "second"})],
        merge.Conflict("300", None, 1, "row added since"),
    ),
}


@pytest.mark.parametrize("case", list(OVERLAPS))
def test_overlapping_request_conflicts_once_the_first_lands(catalog: Catalog, case: str) -> None:
    first_ops, second_ops, conflict = OVERLAPS[case]
    first = ms.submit(catalog, "ed", first_ops)
    second = ms.submit(catalog, "ed2", second_ops)
    assert first.base_version == second.base_version == 0
    al = ms.user(catalog, "al")
    assert merge.find_conflicts(catalog, second.id, actor=al) == []

    assert merge.approve_change_request(catalog, first.id, actor=al).merged_version == 1
    after_first = ms.main_frame()
    assert merge.find_conflicts(catalog, second.id, actor=al) == [conflict]
    assert merge.find_conflicts(catalog, first.id, actor=al) == []  # merged: nothing left to conflict

    with pytest.raises(ConflictError, match=rf"conflicts with newer commits in 1 cell\(s\): {conflict.row_id}\."):
        merge.approve_change_request(catalog, second.id, actor=ms.user(catalog, "al2"))
    assert ms.log_versions() == 1
    ms.assert_frame_equal(ms.main_frame(), after_first)
    still = change_requests.get_change_request(catalog, second.id, actor=al)
    assert (still.state, still.merged_version) == (CRState.OPEN, None)
    assert (ms.layout().staging(second.id) / "_delta_log").is_dir()  # kept: it can be inspected, then rejected


def test_a_request_landing_during_validation_is_not_overwritten(catalog: Catalog) -> None:
    first = ms.submit(catalog, "ed", [SetCell("1", "name", "first")])
    second = ms.submit(catalog, "ed2", [SetCell("1", "name", "second")])
    al = ms.user(catalog, "al")

    def land_first_meanwhile(fraction: float, message: str) -> None:
        # The second approval has checked for conflicts and validated; now the first one lands.
        if message == "Merging into main":
            merge.approve_change_request(catalog, first.id, actor=al)

    with pytest.raises(ConflictError):
        merge.approve_change_request(catalog, second.id, actor=ms.user(catalog, "al2"), progress=land_first_meanwhile)
    assert ms.main_frame().set_index("row_id").loc["1", "name"] == "first"


def test_a_request_landing_right_before_the_merge_is_not_overwritten(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = ms.submit(catalog, "ed", [SetCell("1", "name", "first")])
    second = ms.submit(catalog, "ed2", [SetCell("1", "name", "second")])
    al = ms.user(catalog, "al")
    merge_once = merge._merge_once

    def first_lands_just_before(record: change_requests.ChangeRequest, *args: Any, **kwargs: Any) -> None:
        # Another process's commit, landing after the second approval's last conflict check.
        if record.id == second.id and ms.log_versions() == 0:
            merge.approve_change_request(catalog, first.id, actor=al)
        merge_once(record, *args, **kwargs)

    monkeypatch.setattr(merge, "_merge_once", first_lands_just_before)
    # In one thread the nested approval would wait for the outer one's writer lease; across
    # processes the lease alone keeps this order out, so it is lifted to test the txn fence.
    monkeypatch.setattr(merge, "writing", lambda *args, **kwargs: contextlib.nullcontext())
    with pytest.raises(ConflictError):
        merge.approve_change_request(catalog, second.id, actor=ms.user(catalog, "al2"))
    assert ms.main_frame().set_index("row_id").loc["1", "name"] == "first"


def test_an_older_sync_finishing_last_does_not_move_the_catalog_back(catalog: Catalog) -> None:
    al = ms.user(catalog, "al")
    commits: list[engine.CommitInfo] = []
    for editor in ("ed", "ed2"):  # two real commits, v1 and v2, without their bookkeeping
        cr = ms.submit(catalog, editor, DISJOINT[editor])
        record = change_requests.get_change_request(catalog, cr.id, actor=al)
        commits.append(engine.new_commit("al", merge.MERGE_ACTION, cr_id=cr.id))
        merge._merge_once(
            record, ms.layout().main, ms.layout().staging(cr.id), commits[-1], checked_version=ms.log_versions()
        )
    assert ms.log_versions() == 2
    older_writing, newer_done = threading.Event(), threading.Event()

    def hold_the_older_write(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # The older sync is about to write its version; the newer one runs to the end meanwhile.
        if threading.current_thread().name.startswith("older") and statement.lstrip().startswith("UPDATE datasets"):
            older_writing.set()
            assert newer_done.wait(timeout=120)

    event.listen(catalog.engine, "before_cursor_execute", hold_the_older_write)
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="older") as pool:
            older = pool.submit(sync_dataset, catalog, ms.PROJECT, ms.DATASET, commits[0], version=1)
            assert older_writing.wait(timeout=120)
            sync_dataset(catalog, ms.PROJECT, ms.DATASET, commits[1], version=2)
            newer_done.set()
            older.result(timeout=120)
    finally:
        event.remove(catalog.engine, "before_cursor_execute", hold_the_older_write)
    dataset = get_dataset(catalog, ms.PROJECT, ms.DATASET, actor=al)
    assert (dataset.version, dataset.last_commit_id) == (2, commits[1].commit_id)
