"""What a page says about a change request's approval: running here, its outcome, or that it was interrupted.

Approvals run in the server process (``app.background``); these views show one while it
runs ("Merging… (merge, 12 s)", each stage with its time), then its outcome, to whoever
opens the request, in any tab, also after the approver closed theirs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import streamlit as st

from app import background
from core.merge import ApprovalState

if TYPE_CHECKING:
    from streamlit.delta_generator import DeltaGenerator

    from app.background import Approval
    from core.change_requests import ChangeRequest, StageTiming

INTERRUPTED = "This request's approval was interrupted; it is still open and its staging is intact."
SUBMIT_STAGES = ("staging", "checks")
# How often a page showing a running approval asks the registry again.
POLL_S = 1.0
# How often the approver's own dialog redraws a running approval's clock between its stage
# changes. Each redraw re-renders the whole Review page in the browser, and on 2 cores that
# CPU came out of the MERGE: redrawn every second, a warm 1-cell merge took 3.9-4.2 s in the
# server against 2.7 s in a quiet process (issue 24 section 5).
TICK_S = 5.0


def seconds(value: float) -> str:
    """A duration as people read it: ``0.4 s``, ``12 s``, ``2 min 05 s``."""
    if value < 10:
        return f"{value:.1f} s"
    if value < 60:
        return f"{value:.0f} s"
    return f"{int(value // 60)} min {int(value % 60):02d} s"


def stage_lines(
    done: Sequence[tuple[str, float]], running: tuple[str, float | None] | None, upcoming: Sequence[str]
) -> str:
    """A stage list as markdown: finished stages with their time, the running one, those still to come."""
    lines = [f":material/check_circle: **{name}** · {seconds(took)}" for name, took in done]
    if running is not None:
        so_far = "" if running[1] is None else f" · {seconds(running[1])}"
        lines.append(f":material/progress_activity: **{running[0]}**{so_far}…")
    lines += [f":material/radio_button_unchecked: {name}" for name in upcoming]
    return "  \n".join(lines)


class StageStatus:
    """An ``st.status`` listing the stages core reports through a ``StageHook`` (the status is the hook).

    For work that runs in the page's own run (a submit): each stage shows when it starts
    and its time once the next one starts.
    """

    def __init__(self, label: str, stages: Sequence[str]) -> None:
        self._label = label
        self._stages = list(stages)
        self._done: list[tuple[str, float]] = []
        self._current: tuple[str, float] | None = None
        self._box = st.status(label, expanded=True)
        self._lines = self._box.empty()
        self._show()

    def __call__(self, stage: str) -> None:
        self._close()
        self._current = (stage, time.perf_counter())
        self._box.update(label=f"{self._label} ({stage})", expanded=True)  # unset, the browser collapses it
        self._show()

    def finish(self, label: str, *, failed: bool = False) -> None:
        self._close()
        self._box.update(label=label, state="error" if failed else "complete", expanded=True)
        self._show()

    def _close(self) -> None:
        if self._current is not None:
            self._done.append((self._current[0], time.perf_counter() - self._current[1]))
            self._current = None

    def _show(self) -> None:
        seen = {name for name, _ in self._done} | ({self._current[0]} if self._current else set())
        running = (self._current[0], None) if self._current else None
        self._lines.markdown(stage_lines(self._done, running, [s for s in self._stages if s not in seen]))


def stage_summary(stages: Sequence[StageTiming]) -> str:
    """A request's recorded stage durations on one line: ``submit 2.0 s (staging 1.2 s · checks 0.8 s); approve …``."""
    parts = []
    for action in ("submit", "approve"):
        timed = [t for t in stages if t.action == action]
        if timed:
            total = seconds(sum(t.seconds for t in timed))
            steps = " · ".join(f"{t.stage} {seconds(t.seconds)}" for t in timed)
            parts.append(f"{action} {total} ({steps})")
    return "; ".join(parts)


def stage_timings(cr: ChangeRequest) -> None:
    """The request's recorded stage durations as a caption (nothing if none were recorded)."""
    summary = stage_summary(cr.stages)
    if summary:
        st.caption(f":material/timer: {summary}", help="How long each stage of the submit and approval took")


def _approval_lines(job: Approval, now: float) -> str:
    done = [(s.stage, s.seconds) for s in job.stages if s.seconds is not None]
    current = job.stages[-1] if job.stages and job.stages[-1].seconds is None else None
    running = (current.stage, now - current.started) if current is not None else None
    seen = {s.stage for s in job.stages}
    upcoming = [s for s in background.APPROVE_STAGES if s not in seen] if job.running else []
    return stage_lines(done, running, upcoming)


def running_label(job: Approval, now: float | None = None) -> str:
    return f"Merging… ({job.stage}, {seconds(job.elapsed(now))})"


def approval_status(job: Approval, where: DeltaGenerator | None = None) -> None:
    """``st.status`` of a background approval: running with its stages, merged, or failed."""
    now = time.monotonic()
    target = where if where is not None else st
    if job.running:
        box = target.status(running_label(job, now), state="running", expanded=True)
        box.progress(job.fraction, text=job.message)
    else:
        if job.outcome == "merged" and job.merged is not None:
            label, state = f"Merged as version {job.merged.merged_version} in {seconds(job.elapsed())}", "complete"
        else:
            label, state = f"Not merged after {seconds(job.elapsed())}", "error"
        box = target.status(label, state=state, expanded=True)
        # Where the progress bar was: redrawn in place (follow_approval), the box would
        # otherwise keep the running stage list below the final one until the run ends.
        box.empty()
    box.markdown(_approval_lines(job, now))


def follow_approval(job: Approval, where: DeltaGenerator) -> Approval:
    """Show ``job``'s status in ``where`` until it ends (the page's own run waits; the approval does not need it).

    Redrawn when a stage starts or the progress moves, and every ``TICK_S`` seconds in between.
    """
    slot = where.empty()
    while True:
        with slot.container():
            approval_status(job)
        if not job.running:
            return job
        job = background.wait_for_change(job.cr_id, job, timeout=TICK_S) or job


def outcome_message(job: Approval) -> str:
    """The one line an ended approval leaves: merged as version N, or why not."""
    where = f"`{job.project_id}/{job.dataset_id}`"
    if job.outcome == "merged" and job.merged is not None:
        return f"Merged `{job.cr_id}` ({job.title}) into {where} as version {job.merged.merged_version}."
    return f"`{job.cr_id}` ({job.title}) was not merged: {job.error}"


def approval_outcome(job: Approval) -> None:
    """An ended background approval: the merged message and the request's stage durations, or the error."""
    if job.outcome == "merged" and job.merged is not None:
        st.success(outcome_message(job), icon=":material/check_circle:")
        stage_timings(job.merged)
    else:
        st.error(outcome_message(job), icon=":material/error:")


def _merging(cr_id: str) -> None:
    job = background.approval(cr_id)
    if job is None or not job.running:
        st.rerun(scope="app")  # the page shows the outcome (or the request as it now is)
        return
    approval_status(job)


def approval_note(cr_id: str, state: ApprovalState, *, author: bool = False, paused: bool = False) -> None:
    """Where the request's approval stands: merging here (polled until it ends), interrupted, or nothing.

    ``author``: the reader wrote the request, so an approver, not they, approves it again.
    ``paused``: a dialog of the page is open; a running approval is shown once, not polled (``dialogs_open``).
    """
    job = background.approval(cr_id)
    if job is not None and job.running:
        with st.container(key=f"merging_{cr_id}"):
            st.fragment(_merging, run_every=None if paused else POLL_S)(cr_id)
        return
    interrupted_approval_note(state, author=author)


def interrupted_approval_note(state: ApprovalState, *, author: bool = False) -> None:
    """A warning when the request's last approval was interrupted, a note while one runs; nothing otherwise.

    ``author``: the reader wrote the request, so an approver, not they, approves it again.
    """
    again = "An approver can approve it again" if author else "Approve it again"
    if state.state == "interrupted":
        st.warning(f"{INTERRUPTED} {again} to merge it.", icon=":material/restart_alt:")
    elif state.state == "landed":
        st.warning(
            f"This request was merged as version {state.version}, but its approval was interrupted before it "
            f"was recorded. {again} to finish; it will not be merged twice.",
            icon=":material/restart_alt:",
        )
    elif state.state == "running":
        st.info("An approval of this request is running (merging…).", icon=":material/hourglass_top:")
