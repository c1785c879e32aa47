"""Prometheus metrics of Oreo's domain work, in prometheus_client's default registry.

Core code counts and times its work where it happens through the small functions below
(``page_read``, ``edit_saved``, ``stage_timings``, ``timed_operation``...). Quantities that
live in the catalog or on disk (change requests by state, open requests' ages, the outbox,
each table's files and leftovers, the engine) are read at scrape time by the collector of
``core.health``, which the API and the app register at their start, so every replica
reports the same numbers.

Two ways out: the API serves ``render()`` (or ``prometheus_client.make_asgi_app()``) at
``/metrics``; the Streamlit app, another process, calls ``serve()`` once per server
process, which answers on the side port ``OREO_METRICS_PORT`` (default 9464).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Literal, ParamSpec, TypeVar

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, generate_latest, start_http_server

from core import events, sla
from core.errors import ConflictError, InvalidInput, NotFound, PermissionDenied, ValidationFailed
from core.events import StagesTimed, StageTiming

log = logging.getLogger(__name__)

DEFAULT_PORT = 9464
_STAGE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_OPERATION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
Operation = Literal["merge", "restore", "optimize", "vacuum"]

PAGE_READ_SECONDS = Histogram(
    "oreo_page_read_seconds",
    "Time to read one page of a table (core.reads.read_page: filter, sort, count).",
    buckets=sla.READ_BUCKETS,
)
EDIT_SAVES = Counter("oreo_edit_saves", "Edit batches saved to a live-edit session (one Delta commit each).")
EDIT_OPERATIONS = Counter("oreo_edit_operations", "Cell sets, row adds, deletes and undos saved in edit batches.")
STAGE_SECONDS = Histogram(
    "oreo_stage_seconds",
    "Duration of one stage of a submit (staging, checks) or an approval (conflicts, checks, merge, sync).",
    ["action", "stage"],
    buckets=_STAGE_BUCKETS,
)
APPROVALS = Counter(
    "oreo_approvals",
    "Approvals by outcome: merged, conflict (newer commits changed its cells, or it is not open), "
    "validation_failed, refused (not allowed, unknown) or failed (the engine, the disk or the catalog failed).",
    ["outcome"],
)
VALIDATION_RUNS = Counter("oreo_validation_runs", "Great Expectations runs by status.", ["status"])
VALIDATION_CHECKS = Counter(
    "oreo_validation_checks",
    "Expectations evaluated, by severity and result (passed or failed).",
    ["severity", "result"],
)
CONFLICTS = Counter("oreo_conflicts", "Approvals refused because newer commits changed the same cells.")
CONFLICT_CELLS = Counter("oreo_conflict_cells", "Cells found in conflict with newer commits.")
OPERATION_SECONDS = Histogram(
    "oreo_operation_duration_seconds",
    "Duration of the Spark MERGE of an approval, a RESTORE, an OPTIMIZE or a VACUUM, by outcome (ok or failed).",
    ["operation", "outcome"],
    buckets=_OPERATION_BUCKETS,
)
IMPORT_ROWS = Counter("oreo_import_rows_written", "Rows of uploaded files written to staging tables.")
IMPORT_SECONDS = Counter("oreo_import_write_seconds", "Seconds spent writing uploaded rows to staging tables.")
NOTIFY_DELIVERIES = Counter(
    "oreo_notify_deliveries",
    "Notification delivery attempts by channel and outcome (sent, failed: retried later, dead: out of attempts).",
    ["channel", "outcome"],
)
ENGINE_START_SECONDS = Gauge("oreo_engine_start_seconds", "How long this process's Spark session took to start.")


# ---------------------------------------------------------------- recording


def page_read(seconds: float) -> None:
    """One page read that took ``seconds`` (also kept for the Admin page's 24-hour figures)."""
    PAGE_READ_SECONDS.observe(seconds)
    sla.record_read(seconds)


def edit_saved(operations: int) -> None:
    EDIT_SAVES.inc()
    EDIT_OPERATIONS.inc(operations)


def stage_timings(stages: Iterable[StageTiming]) -> None:
    """The stages of one finished submit or approval."""
    for timing in stages:
        STAGE_SECONDS.labels(timing.action, timing.stage).observe(timing.seconds)


def _on_stages_timed(event: StagesTimed) -> None:
    stage_timings(event.stages)


def subscribe() -> None:
    """Time the stages of every submit and approval this process publishes (``core.reactions``)."""
    events.subscribe(StagesTimed, _on_stages_timed)


def validation_run(status: str, checks: Iterable[tuple[str, bool]]) -> None:
    """A finished validation run: its status and each check's (severity, success)."""
    VALIDATION_RUNS.labels(status).inc()
    for severity, success in checks:
        VALIDATION_CHECKS.labels(severity, "passed" if success else "failed").inc()


def conflicts_found(cells: int) -> None:
    CONFLICTS.inc()
    CONFLICT_CELLS.inc(cells)


@contextmanager
def timed_operation(operation: Operation) -> Iterator[None]:
    """Time a MERGE, RESTORE, OPTIMIZE or VACUUM; ``outcome`` is ``failed`` when it raised."""
    started = time.perf_counter()
    outcome = "failed"
    try:
        yield
        outcome = "ok"
    finally:
        OPERATION_SECONDS.labels(operation, outcome).observe(time.perf_counter() - started)


@contextmanager
def timed_import_write(rows: int) -> Iterator[None]:
    """Time the staging write of an import of ``rows`` rows (counted only when it succeeds)."""
    started = time.perf_counter()
    yield
    seconds = time.perf_counter() - started
    IMPORT_ROWS.inc(rows)
    IMPORT_SECONDS.inc(seconds)
    sla.record_import(rows, seconds)


def approval_outcome(exc: BaseException | None) -> str:
    """How an approval ended, from what it raised (None: merged)."""
    if exc is None:
        return "merged"
    if isinstance(exc, ValidationFailed):
        return "validation_failed"
    if isinstance(exc, ConflictError):
        return "conflict"
    if isinstance(exc, (PermissionDenied, NotFound, InvalidInput)):
        return "refused"
    return "failed"


P = ParamSpec("P")
R = TypeVar("R")


def counts_approvals(approve: Callable[P, R]) -> Callable[P, R]:
    """Count every call of ``approve`` under ``oreo_approvals_total`` by its outcome."""

    @functools.wraps(approve)
    def counted(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            result = approve(*args, **kwargs)
        except BaseException as exc:
            _count_approval(approval_outcome(exc))
            raise
        _count_approval("merged")
        return result

    return counted


def _count_approval(outcome: str) -> None:
    APPROVALS.labels(outcome).inc()
    sla.record_approval(outcome)


def notification_attempt(channel: str, state: str) -> None:
    """One delivery attempt; ``state`` is the outbox row's after it (sent, pending or dead)."""
    NOTIFY_DELIVERIES.labels(channel, {"pending": "failed"}.get(state, state)).inc()


def engine_started(seconds: float) -> None:
    ENGINE_START_SECONDS.set(seconds)


# ---------------------------------------------------------------- exposition


def render() -> bytes:
    """Every metric of the default registry in Prometheus' text format."""
    return generate_latest(REGISTRY)


_serve_lock = threading.Lock()
_served: tuple[str, int] | None = None


def metrics_port() -> int:
    """``OREO_METRICS_PORT``: the app's side port (default 9464; 0 turns it off)."""
    raw = os.environ.get("OREO_METRICS_PORT", "").strip()
    if not raw:
        return DEFAULT_PORT
    try:
        return int(raw)
    except ValueError as exc:
        message = f"setting OREO_METRICS_PORT must be a port number, got {raw!r}"
        raise InvalidInput(message, field="OREO_METRICS_PORT") from exc


def serve(port: int | None = None, addr: str | None = None) -> tuple[str, int] | None:
    """Answer ``GET /metrics`` on ``addr:port`` from a daemon thread, once per process.

    Later calls return the address already served (a Streamlit rerun or a second lifespan
    starts nothing). Port 0 from ``OREO_METRICS_PORT`` turns the side port off; a port that
    is taken (another replica on the host) is logged and skipped, never fatal.
    """
    global _served
    with _serve_lock:
        if _served is not None:
            return _served
        port = metrics_port() if port is None else port
        if port <= 0:
            return None
        addr = addr or os.environ.get("OREO_METRICS_ADDR") or "0.0.0.0"
        try:
            server, _thread = start_http_server(port, addr=addr)
        except OSError as exc:
            log.warning("metrics: cannot listen on %s:%s (%s); set OREO_METRICS_PORT", addr, port, exc)
            return None
        _served = (addr, int(server.server_port))
        return _served
