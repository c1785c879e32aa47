"""Background approvals (app.background): run in the server, report their stages, keep their outcome."""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from app import background
from app.approval_views import running_label, stage_summary
from core import change_requests, merge
from core.catalog import Catalog
from core.change_requests import CRState
from tests.page_support import REVIEW_PAGE, copy_workspace, has_text, seed_requests, signed_in, texts, user

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark
SLOW_S = 600.0  # Spark, GX and a MERGE on a busy 2-core machine


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("background")
    return folder, seed_requests(folder)


@pytest.fixture
def ids(seeded: tuple[Path, dict[str, str]]) -> dict[str, str]:
    return seeded[1]


@pytest.fixture
def workspace(seeded: tuple[Path, dict[str, str]], data_root: Path) -> Iterator[Catalog]:
    catalog = copy_workspace(seeded[0], data_root)
    yield catalog
    # Every approval started here has ended (each test waits for it); forget them for the next test.
    with background._lock:
        background._approvals.clear()


def _poll(condition: Callable[[], Any], *, what: str, timeout: float = SLOW_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)  # poll interval, not a wait for an outcome


def _ended(cr_id: str) -> background.Approval:
    def done() -> background.Approval | None:
        job = background.approval(cr_id)
        return job if job is not None and not job.running else None

    return _poll(done, what=f"the approval of {cr_id} to end")


def test_an_approval_outlives_the_session_that_started_it_and_keeps_its_outcome(
    workspace: Catalog, ids: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=background.log.name)
    cr = change_requests.get_change_request(workspace, ids["warn"], actor=user(workspace, "abe"))
    started: list[background.Approval] = []
    # A browser session's script thread starts it and ends at once, as when the tab is closed.
    session = threading.Thread(
        target=lambda: started.append(background.start_approval(workspace, cr, actor=user(workspace, "abe")))
    )
    session.start()
    session.join()
    assert started[0].running and started[0].cr_id == cr.id and started[0].approver == "abe"

    job = _ended(cr.id)
    assert job.outcome == "merged", job.error
    assert job.error is None and job.merged is not None and job.merged.merged_version == 1
    assert [s.stage for s in job.stages] == ["conflicts", "checks", "merge", "sync"]
    assert all(s.seconds is not None and s.seconds >= 0 for s in job.stages)
    # The server's log follows it: started, each stage, merged.
    assert [r.getMessage() for r in caplog.records if r.name == background.log.name] == [
        f"approval of {cr.id} (revision {cr.revision}) by abe started",
        *(f"approval of {cr.id}: {stage}" for stage in background.APPROVE_STAGES),
        f"approval of {cr.id} merged as version 1",
    ]
    assert job.finished is not None and job.elapsed() >= sum(s.seconds or 0 for s in job.stages)

    # The catalog has it merged, with the submit's and the approval's stage durations.
    record = change_requests.get_change_request(workspace, cr.id, actor=user(workspace, "abe"))
    assert (record.state, record.merged_version, record.closed_by) == (CRState.MERGED, 1, "abe")
    assert [(t.action, t.stage) for t in record.stages] == [
        ("submit", "staging"),
        ("submit", "checks"),
        ("approve", "conflicts"),
        ("approve", "checks"),
        ("approve", "merge"),
        ("approve", "sync"),
    ]
    summary = stage_summary(record.stages)
    assert summary.startswith("submit ") and "(staging " in summary and "; approve " in summary, summary
    assert "merge " in summary and "sync " in summary, summary
    # Anyone asking later (another session, another tab) gets the outcome.
    assert background.approval(cr.id) is job
    assert job in background.approvals()


def test_a_refused_approval_ends_with_one_line_and_changes_nothing(workspace: Catalog, ids: dict[str, str]) -> None:
    server_log = io.StringIO()
    background.log_approvals(server_log)
    background.log_approvals(server_log)  # a second call adds no second handler
    try:
        # ann wrote "own": four-eyes refuses it in the background thread, as it would in the page.
        cr = change_requests.get_change_request(workspace, ids["own"], actor=user(workspace, "ann"))
        background.start_approval(workspace, cr, actor=user(workspace, "ann"))
        job = _ended(cr.id)
    finally:
        for handler in [h for h in background.log.handlers if getattr(h, "oreo_approvals", False)]:
            background.log.removeHandler(handler)

    assert job.outcome == "failed" and job.merged is None
    assert job.error is not None and "cannot approve it" in job.error and "\n" not in job.error
    assert change_requests.get_change_request(workspace, cr.id, actor=user(workspace, "ann")).state == CRState.OPEN
    # The server's log has a line for its start and one for its end, each once.
    lines = server_log.getvalue().splitlines()
    assert [line.split(" Oreo ", 1)[1] for line in lines if f"{cr.id} (revision" in line] == [
        f"approval of {cr.id} (revision 1) by ann started"
    ]
    assert [line for line in lines if "refused" in line] == [
        next(line for line in lines if line.endswith(f"approval of {cr.id} refused: {job.error}"))
    ]


def test_a_second_start_while_one_runs_joins_it(
    workspace: Catalog, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Held before its MERGE (core's test hook) until the gate opens, so the second click lands while it runs.
    gate = tmp_path / "merge-gate"
    monkeypatch.setenv(merge.PAUSE_BEFORE_MERGE_ENV, "600")
    monkeypatch.setenv(merge.MERGE_GATE_ENV, str(gate))
    cr = change_requests.get_change_request(workspace, ids["mine"], actor=user(workspace, "abe"))
    first = background.start_approval(workspace, cr, actor=user(workspace, "abe"))
    at_merge = _poll(
        lambda: (job := background.approval(cr.id)) is not None and job.stage == "merge" and job.running and job,
        what="the approval to reach its merge stage",
    )
    assert running_label(at_merge).startswith("Merging… (merge, ")
    assert [s.seconds is not None for s in at_merge.stages] == [True, True, False]
    # The merge stage starts before the writer lease is taken; core says "running" once it holds it.
    _poll(
        lambda: merge.approval_state(workspace, cr.id, actor=user(workspace, "abe")).state == "running",
        what="core to report the approval as running",
    )

    again = background.start_approval(workspace, cr, actor=user(workspace, "ann"))
    assert again.started == first.started and again.approver == "abe"
    assert [t.name for t in threading.enumerate()].count(f"oreo-approve-{cr.id}") == 1

    gate.touch()
    job = _ended(cr.id)
    assert job.outcome == "merged", job.error
    assert job.merged is not None and job.merged.merged_version == 1


def test_outcomes_are_forgotten_after_a_while(
    workspace: Catalog, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cr = change_requests.get_change_request(workspace, ids["own"], actor=user(workspace, "ann"))
    background.start_approval(workspace, cr, actor=user(workspace, "ann"))  # refused at once: four-eyes
    _ended(cr.id)
    monkeypatch.setattr(background, "KEEP_OUTCOME_S", 0.0)
    _poll(lambda: background.approval(cr.id) is None, what="the outcome to be forgotten", timeout=10)
    assert background.approvals() == []


def test_the_review_page_shows_merging_then_the_outcome_to_another_session(
    workspace: Catalog, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gate = tmp_path / "merge-gate"
    monkeypatch.setenv(merge.PAUSE_BEFORE_MERGE_ENV, "600")
    monkeypatch.setenv(merge.MERGE_GATE_ENV, str(gate))
    cr = change_requests.get_change_request(workspace, ids["warn"], actor=user(workspace, "abe"))
    background.start_approval(workspace, cr, actor=user(workspace, "abe"))
    _poll(
        lambda: (job := background.approval(cr.id)) is not None and job.stage == "merge",
        what="the approval to reach its merge stage",
    )

    # abe comes back in a new session: the page opens on the request being approved and says so.
    at = signed_in("abe", REVIEW_PAGE)
    assert at.selectbox(key="review_cr").value == cr.id
    labels = [s.label for s in at.status]
    assert any(label.startswith("Merging… (merge, ") for label in labels), labels
    assert at.button(key="review_approve").disabled
    assert has_text(at.caption, "abe is approving it now.")
    assert "merging…" in list(at.dataframe[0].value["approval"])

    gate.touch()
    _ended(cr.id)
    at.run(timeout=120)
    assert not at.exception
    assert has_text(at.success, f"Merged `{cr.id}` (Platinum for 1000) into `shop/orders` as version 1."), texts(
        at.success
    )
    assert any("approve " in c and "merge " in c for c in texts(at.caption)), texts(at.caption)
    assert cr.id not in list(at.dataframe[0].value["id"])

    # Dismissed, it is gone; the outcome is abe's news, not every approver's (issue 24).
    at.button(key=f"review_dismiss_{cr.id}").click().run(timeout=120)
    assert not has_text(at.success, f"Merged `{cr.id}`")
    assert not has_text(signed_in("ann", REVIEW_PAGE).success, f"Merged `{cr.id}`")


def test_an_outcome_is_shown_once_and_only_to_its_approver(workspace: Catalog, ids: dict[str, str]) -> None:
    cr = change_requests.get_change_request(workspace, ids["warn"], actor=user(workspace, "abe"))
    background.start_approval(workspace, cr, actor=user(workspace, "abe"))
    assert _ended(cr.id).outcome == "merged"

    assert not has_text(signed_in("ann", REVIEW_PAGE).success, f"Merged `{cr.id}`")  # another approver
    at = signed_in("abe", REVIEW_PAGE)
    assert has_text(at.success, f"Merged `{cr.id}`")
    at.run(timeout=120)  # this session keeps it until dismissed
    assert has_text(at.success, f"Merged `{cr.id}`")
    # A reload is a new session: the news was given, it does not come back.
    assert not has_text(signed_in("abe", REVIEW_PAGE).success, f"Merged `{cr.id}`")
