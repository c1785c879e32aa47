"""Approvals that run in the server process, not in a browser session.

A big approval takes longer than a person keeps a tab open. ``start_approval`` runs
``core.merge.approve_change_request`` in a daemon thread owned by the server process, so
closing the tab, reloading or signing out does not stop it. The registry is process-wide
(one per Streamlit server, shared by every browser session): any page of any session can
ask ``approval(cr_id)`` where it stands (the stage it is in, since when) and, once it
ended, for its outcome (the merged request or the one-line error), which is kept for
``KEEP_OUTCOME_S``. The approver's pages take the outcome once (``claim_outcomes``).

If the server itself stops mid-approval, the thread dies with it; ``core.merge``'s
exactly-once bookkeeping and ``approval_state`` take over from there ("interrupted").

This module holds no streamlit code: pages render what it reports (``app.approval_views``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, TextIO

from core import merge
from core.errors import OreoError
from interface import errors

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.auth import User
    from core.catalog import Catalog
    from core.change_requests import ChangeRequest

log = logging.getLogger(__name__)

# Finished approvals are reported for this long, so an approver who closed the tab sees the outcome when back.
KEEP_OUTCOME_S = 3600.0
# The stages ``approve_change_request`` reports, in order.
APPROVE_STAGES = ("conflicts", "checks", "merge", "sync")


@dataclass(frozen=True)
class StageRun:
    """One stage of a running approval; ``seconds`` is None while it runs."""

    stage: str
    started: float
    seconds: float | None = None


@dataclass(frozen=True)
class Approval:
    """Where a background approval stands: a snapshot, replaced (never mutated) as it moves on.

    Times are ``time.monotonic()`` readings of this process.
    """

    cr_id: str
    project_id: str
    dataset_id: str
    title: str
    approver: str
    started: float
    revision: int | None = None  # the revision the approver saw and asked to merge
    stages: tuple[StageRun, ...] = ()
    fraction: float = 0.0
    message: str = "Starting"
    outcome: Literal["running", "merged", "failed"] = "running"
    merged: ChangeRequest | None = None
    error: str | None = None
    finished: float | None = None
    shown: bool = False  # a page has shown its outcome to its approver (``claim_outcomes``)

    @property
    def running(self) -> bool:
        return self.outcome == "running"

    @property
    def stage(self) -> str:
        """The stage it is in (the last one reported), or ``starting``."""
        return self.stages[-1].stage if self.stages else "starting"

    def elapsed(self, now: float | None = None) -> float:
        """Seconds since it started, up to now or to its end."""
        end = self.finished if self.finished is not None else (time.monotonic() if now is None else now)
        return max(end - self.started, 0.0)


_lock = threading.Condition()
_approvals: dict[str, Approval] = {}


def approval(cr_id: str) -> Approval | None:
    """The approval of ``cr_id`` running here, or its outcome if it ended less than ``KEEP_OUTCOME_S`` ago."""
    with _lock:
        _forget_old()
        return _approvals.get(cr_id)


def approvals() -> list[Approval]:
    """Every approval running here or recently ended, oldest first."""
    with _lock:
        _forget_old()
        return sorted(_approvals.values(), key=lambda a: a.started)


def claim_outcomes(username: str) -> list[Approval]:
    """Ended approvals that ``username`` started and no page has shown yet, oldest first; each is returned once.

    The outcome is the approver's news: a page shows it to them once (it keeps it until
    they dismiss it), and not again on a reload or to other approvers.
    """
    with _lock:
        _forget_old()
        ended = [a for a in _approvals.values() if not a.running and not a.shown and a.approver == username]
        for job in ended:
            _approvals[job.cr_id] = replace(job, shown=True)
        return sorted(ended, key=lambda a: a.started)


def start_approval(
    catalog: Catalog,
    record: ChangeRequest,
    *,
    actor: User,
    comment: str | None = None,
    revision: int | None = None,
    digest: str | None = None,
) -> Approval:
    """Approve ``record`` in a server-owned thread; returns at once.

    ``revision`` and ``digest``: what the approver was shown (default: ``record``'s own);
    core refuses the approval if the request is not that revision any more. If an approval
    of the same request already runs in this process (a double click, a second tab, another
    approver), that one is returned and no second one starts. Core checks (role, four-eyes,
    state, revision) run in the thread; their refusal is the outcome.
    """
    if revision is None:
        revision = record.revision
        digest = record.digest if digest is None else digest
    with _lock:
        _forget_old()
        current = _approvals.get(record.id)
        if current is not None and current.running:
            return current
        job = Approval(
            cr_id=record.id,
            project_id=record.project_id,
            dataset_id=record.dataset_id,
            title=record.title,
            approver=actor.username,
            started=time.monotonic(),
            revision=revision,
        )
        _approvals[record.id] = job
    reviewed = (revision, digest)
    thread = threading.Thread(
        target=_run, args=(catalog, record.id, actor, comment, reviewed), name=f"oreo-approve-{record.id}", daemon=True
    )
    log.info("approval of %s (revision %s) by %s started", record.id, revision, actor.username)
    thread.start()
    return job


def log_approvals(stream: TextIO) -> None:
    """Write a line to ``stream`` (the server's log) as each approval starts, enters a stage and ends.

    Once per server process; a second call adds nothing.
    """
    if any(getattr(handler, "oreo_approvals", False) for handler in log.handlers):
        return
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s Oreo %(message)s"))
    handler.oreo_approvals = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def wait_for_change(cr_id: str, seen: Approval | None, *, timeout: float) -> Approval | None:
    """Block until the approval of ``cr_id`` differs from ``seen`` or ``timeout`` seconds passed."""
    with _lock:
        _lock.wait_for(lambda: _approvals.get(cr_id) is not seen, timeout=timeout)
        return _approvals.get(cr_id)


def _run(catalog: Catalog, cr_id: str, actor: User, comment: str | None, reviewed: tuple[int, str | None]) -> None:
    def stage(name: str) -> None:
        log.info("approval of %s: %s", cr_id, name)
        now = time.monotonic()
        _update(cr_id, lambda a: replace(a, stages=(*_closed(a.stages, now), StageRun(name, now))))

    def progress(fraction: float, message: str) -> None:
        _update(cr_id, lambda a: replace(a, fraction=min(max(fraction, 0.0), 1.0), message=message))

    try:
        merged = merge.approve_change_request(
            catalog,
            cr_id,
            actor=actor,
            comment=comment,
            stage=stage,
            progress=progress,
            expected_revision=reviewed[0],
            expected_digest=reviewed[1],
        )
    except OreoError as exc:
        shown = errors.on_a_page(exc)
        if shown.logged:
            log.error("the background approval of %s failed: %s", cr_id, shown.text, exc_info=exc)
        else:
            log.info("approval of %s refused: %s", cr_id, shown.text)
        _finish(cr_id, error=shown.text)
    except Exception as exc:  # the thread must always leave an outcome; the full trace goes to the log
        log.exception("the background approval of %s failed", cr_id)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _finish(cr_id, error=f"the approval of {cr_id} failed unexpectedly: {first}")
    else:
        _finish(cr_id, merged=merged)
        log.info("approval of %s merged as version %s", cr_id, merged.merged_version)


def _closed(stages: tuple[StageRun, ...], now: float) -> tuple[StageRun, ...]:
    """``stages`` with the running one (if any) ended at ``now``."""
    if stages and stages[-1].seconds is None:
        return (*stages[:-1], replace(stages[-1], seconds=now - stages[-1].started))
    return stages


def _finish(cr_id: str, *, merged: ChangeRequest | None = None, error: str | None = None) -> None:
    now = time.monotonic()
    _update(
        cr_id,
        lambda a: replace(
            a,
            stages=_closed(a.stages, now),
            outcome="merged" if error is None else "failed",
            merged=merged,
            error=error,
            fraction=1.0 if error is None else a.fraction,
            finished=now,
        ),
    )


def _update(cr_id: str, change: Callable[[Approval], Approval]) -> None:
    with _lock:
        current = _approvals.get(cr_id)
        if current is not None:
            _approvals[cr_id] = change(current)
            _lock.notify_all()


def _forget_old() -> None:
    """Drop outcomes older than ``KEEP_OUTCOME_S`` (the caller holds the lock)."""
    now = time.monotonic()
    for cr_id, job in list(_approvals.items()):
        if job.finished is not None and now - job.finished > KEEP_OUTCOME_S:
            del _approvals[cr_id]
