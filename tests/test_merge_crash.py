"""Merge crash safety: an approval killed at any point leaves main before or after, and a retry lands once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import change_requests, engine, events, merge, notify, writer
from core.catalog import Catalog, DatasetRow, open_catalog, reset_catalogs
from core.change_requests import CRState
from core.datasets import get_dataset
from core.errors import CatalogUnavailable
from core.sessions import AddRow, DeleteRow, SetCell
from tests import merge_support as ms

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parent.parent
OPS = [SetCell("2", "name", "renamed"), SetCell("3", "qty", "-1"), DeleteRow("6"), AddRow({"id": 77, "score": 7.5})]
# Approves one request, appending each progress step to a marker file; at the step named
# by the last argument it stops for good, so the test can kill it exactly there.
DRIVER = """
import json, sys, threading
from core import auth, merge
from core.catalog import open_catalog

cr_id, approver, marker, hold_at = sys.argv[1:5]

def progress(fraction, message):
    with open(marker, "a") as out:
        out.write(json.dumps({"fraction": fraction, "message": message}) + "\\n")
    if hold_at and message.startswith(hold_at):
        threading.Event().wait()

catalog = open_catalog()
merge.approve_change_request(catalog, cr_id, actor=auth.get_user(catalog, approver), progress=progress)
"""
SPARK_START_TIMEOUT = 600


def _expected_after() -> dict[str, dict[str, Any]]:
    rows = {r: dict(v) for r, v in ms.BASE_ROWS.items() if r != "6"}
    rows["2"]["name"] = "renamed"
    rows["3"]["qty"] = -1
    rows["77"] = {"id": 77, "name": None, "qty": None, "score": 7.5}
    return rows


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return ms.make_pristine(tmp_path_factory.mktemp("merge-crash") / "pristine")


@pytest.fixture
def env(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = ms.fresh_copy(pristine, tmp_path)
    ms.switch(env, monkeypatch)
    return env


@pytest.fixture
def catalog(env: dict[str, str]) -> Iterator[Catalog]:
    yield open_catalog()


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in process group ``pgid`` (the driver and its JVM)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _data_files(main: Path) -> set[Path]:
    return {p for p in main.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def _kill_approval(env: dict[str, str], cr_id: str, marker: Path, hold_at: str) -> list[str]:
    """Run the approval in a new process group and SIGKILL the whole group (driver and JVM).

    ``hold_at`` names the progress step where the driver stops and is killed; the empty
    string lets it run on, and it is killed as soon as the MERGE starts writing files.
    Returns the progress messages it reported.
    """
    main = ms.layout().main
    files_before = _data_files(main)
    version_before = ms.log_versions()
    child_env = {**os.environ, **env, "OREO_SPARK_SHUFFLE_PARTITIONS": "2", "OREO_SPARK_DRIVER_MEMORY": "1g"}
    log = marker.with_suffix(".stderr")
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, cr_id, "al", str(marker), hold_at],
            env=child_env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=err,  # a file, not a pipe: a full pipe would stall the JVM's logging
            start_new_session=True,
        )

    def messages() -> list[str]:
        return [m["message"] for m in ms.read_json_lines(marker)]

    try:

        def at_kill_point() -> bool:
            assert proc.poll() is None, f"the approval ended by itself: {log.read_text()[-3000:]}"
            if hold_at:
                return any(m.startswith(hold_at) for m in messages())
            # Mid-MERGE: Spark is writing data or deletion-vector files, or just committed.
            started = "Merging into main" in messages()
            return started and (_data_files(main) != files_before or ms.log_versions() > version_before)

        ms.wait_for(at_kill_point, timeout=SPARK_START_TIMEOUT, what=f"the approval to reach {hold_at or 'the MERGE'}")
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have died already
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        ms.wait_for(lambda: not _group_alive(proc.pid), timeout=60, what="the killed JVM to go away")
    assert proc.returncode == -signal.SIGKILL
    return messages()


@pytest.mark.parametrize(
    "hold_at",
    ["Validating the merged result", "Merging into main", "", "Updating the catalog"],
    ids=["during-validation", "before-merge", "mid-merge", "after-commit"],
)
def test_killed_approval_leaves_main_before_or_after_and_a_retry_lands_once(
    catalog: Catalog, env: dict[str, str], tmp_path: Path, hold_at: str
) -> None:
    cr = ms.submit(catalog, "ed", OPS)
    before, after = ms.main_frame(), ms.frame_of(_expected_after())
    reset_catalogs()  # let the child process have the SQLite catalog to itself

    reported = _kill_approval(env, cr.id, tmp_path / "progress.jsonl", hold_at)

    catalog = open_catalog()
    al = ms.user(catalog, "al")
    version = ms.log_versions()
    assert version in (0, 1), reported
    if hold_at == "Updating the catalog":
        assert version == 1  # the commit landed, the bookkeeping did not
    elif hold_at:
        assert version == 0
    ms.assert_frame_equal(ms.main_frame(), after if version == 1 else before)
    # Killed before the catalog step: the request is open, its staging table and session intact.
    record = change_requests.get_change_request(catalog, cr.id, actor=al)
    assert (record.state, record.merged_version) == (CRState.OPEN, None), reported
    assert (ms.layout().staging(cr.id) / "_delta_log").is_dir()
    assert ms.layout().session_dir(cr.session_id or "").is_dir()
    assert get_dataset(catalog, ms.PROJECT, ms.DATASET, actor=al).version == 0

    merged = merge.approve_change_request(catalog, cr.id, actor=al)

    assert (merged.state, merged.merged_version) == (CRState.MERGED, 1)
    assert ms.log_versions() == 1
    ms.assert_frame_equal(ms.main_frame(), after)
    commits = ms.merge_commits(cr.id)
    assert [c.version for c in commits] == [1]
    dataset = get_dataset(catalog, ms.PROJECT, ms.DATASET, actor=al)
    assert (dataset.version, dataset.rows, dataset.last_commit_id) == (
        1,
        len(after),
        commits[0].user_metadata["commit_id"],
    )
    assert not ms.layout().staging(cr.id).exists()
    assert not ms.layout().session_dir(cr.session_id or "").exists()


def test_a_commit_that_landed_without_its_bookkeeping_is_finished_not_repeated(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash after the commit, before the catalog update, simulated by merging directly."""
    cr = ms.submit(catalog, "ed", OPS)
    al = ms.user(catalog, "al")
    record = change_requests.get_change_request(catalog, cr.id, actor=al)
    main, staging = ms.layout().main, ms.layout().staging(cr.id)
    landed = engine.new_commit("al", merge.MERGE_ACTION, cr_id=cr.id)

    merge._merge_once(record, main, staging, landed, checked_version=0)
    assert ms.log_versions() == 1
    # A second MERGE with the same transaction id is skipped by Delta itself: no new commit.
    merge._merge_once(
        record, main, staging, engine.new_commit("al", merge.MERGE_ACTION, cr_id=cr.id), checked_version=0
    )
    assert ms.log_versions() == 1
    assert get_dataset(catalog, ms.PROJECT, ms.DATASET, actor=al).version == 0
    # Main moved under the still-open request only by its own MERGE: no conflict, and no one is told
    # it went stale (the background sweep once told its author so mid-approval, before it was marked merged).
    told: list[object] = []
    with monkeypatch.context() as patched:
        patched.setattr(events, "publish", told.append)
        assert merge.find_conflicts(catalog, cr.id, actor=al) == []
    assert told == []

    merged = merge.approve_change_request(catalog, cr.id, actor=al)

    assert (merged.state, merged.merged_version, merged.closed_by) == (CRState.MERGED, 1, "al")
    assert [c.version for c in ms.merge_commits(cr.id)] == [1]
    assert ms.log_versions() == 1
    ms.assert_frame_equal(ms.main_frame(), ms.frame_of(_expected_after()))
    dataset = get_dataset(catalog, ms.PROJECT, ms.DATASET, actor=al)
    assert (dataset.version, dataset.last_commit_id) == (1, landed.commit_id)
    assert not staging.exists()
    assert not ms.layout().session_dir(cr.session_id or "").exists()


def _lease_holder(catalog: Catalog) -> str | None:
    with catalog.session() as s:
        row = s.get(DatasetRow, (ms.PROJECT, ms.DATASET))
        assert row is not None
        return row.writer


# Each step of an approval that touches the catalog, as (module, function): taking the lease,
# recording the start, releasing the lease, syncing the dataset, marking the request merged.
CATALOG_STEPS = {
    "take-lease": (writer, "_try_take"),
    "approval-started": (merge, "_record_approval_started"),
    "release-lease": (writer, "_release"),
    "sync-dataset": (merge, "sync_dataset"),
    "mark-merged": (merge, "_mark_merged"),
}


@pytest.mark.parametrize("step", list(CATALOG_STEPS))
def test_the_catalog_failing_at_any_step_of_an_approval_leaves_no_lease_and_a_retry_merges(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The lease goes whatever fails after it is taken; an error after the MERGE does not say nothing was saved."""
    module, name = CATALOG_STEPS[step]
    original = getattr(module, name)
    calls = []

    def locked_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        if len(calls) == 1:
            raise CatalogUnavailable(
                "the catalog at sqlite:///catalog.db is unavailable: database is locked",
                hint="nothing was saved; try again once it is back",
            )
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, locked_once)
    monkeypatch.setattr(writer, "RELEASE_RETRY_MAX_S", 0.1)
    cr = ms.submit(catalog, "ed", OPS)
    al = ms.user(catalog, "al")

    try:
        merge.approve_change_request(catalog, cr.id, actor=al)
    except CatalogUnavailable as exc:
        committed = bool(ms.merge_commits(cr.id))
        assert ("nothing was saved" in (exc.hint or "")) is not committed, (str(exc), exc.hint)
        if committed:
            assert f"{cr.id} was merged as version 1" in str(exc)
            assert "saved in the table" in (exc.hint or "")

    ms.wait_for(lambda: _lease_holder(catalog) is None, timeout=30, what="the writer lease to be released")
    merged = change_requests.get_change_request(catalog, cr.id, actor=al)
    if merged.state != CRState.MERGED:  # the failure was the approval's: approving again finishes it
        merged = merge.approve_change_request(catalog, cr.id, actor=al)
    assert (merged.state, merged.merged_version) == (CRState.MERGED, 1)
    assert [c.version for c in ms.merge_commits(cr.id)] == [1]
    assert _lease_holder(catalog) is None
    assert calls, f"{name} was never called"


def test_a_catalog_failure_while_queueing_notifications_after_the_merge_still_reports_it_merged(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cr = ms.submit(catalog, "ed", OPS)
    al = ms.user(catalog, "al")

    def locked(*args: Any, **kwargs: Any) -> Any:
        raise CatalogUnavailable("the catalog is unavailable: database is locked", hint="nothing was saved")

    monkeypatch.setattr(notify, "emit", locked)
    merged = merge.approve_change_request(catalog, cr.id, actor=al)

    assert (merged.state, merged.merged_version) == (CRState.MERGED, 1)
    assert change_requests.get_change_request(catalog, cr.id, actor=al).state == CRState.MERGED
    assert f"{cr.id} merged as version 1, but its notifications could not be queued" in caplog.text
