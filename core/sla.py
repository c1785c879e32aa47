"""Hourly tallies of page reads, import writes and approval outcomes, kept across processes.

Prometheus histograms live in one process and start from zero at every restart, so the
Admin page's 24-hour figures (``core.health.sla_figures``) come from what outlives a
process: hourly tallies that every process keeps in memory and writes (at most every
``FLUSH_S`` seconds, and at exit) to ``$DELTA_DATA_ROOT/logs/sla/<hour>-<pid>-<token>.json``;
a figure sums the files of the hours asked for, over every process and restart. Tallies
older than two days are removed. Seed 004's targets (``TARGETS``) are here too:
``monitoring/prometheus/alerts/oreo.yml`` alerts on the same thresholds.

This module only counts (it sits at the bottom, beside ``core.metrics``); reading the
tables, the catalog and the engine for the figures is ``core.health``'s.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from core import logs

# Upper bounds (seconds) of the page-read latency buckets, shared with core.metrics.
READ_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FLUSH_S = 10.0
KEEP_HOURS = 48
SLA_FOLDER = "sla"
APPROVAL_OUTCOMES = ("merged", "conflict", "validation_failed", "refused", "failed")

# Seed 004's targets (the alert rules use the same numbers).
READ_P95_MAX_S = 5.0
IMPORT_MIN_ROWS_PER_S = 1000.0
VACUUM_MAX_DAYS = 8.0
SMALL_FILE_RATIO_MAX = 0.5
SMALL_FILE_MIN_FILES = 10  # a table of a few files has nothing worth compacting
OPEN_REQUEST_MAX_DAYS = 7


# ---------------------------------------------------------------- hourly tallies


@dataclass
class _Tally:
    read_buckets: list[int] = field(default_factory=lambda: [0] * (len(READ_BUCKETS) + 1))  # the last is +Inf
    read_seconds: float = 0.0
    import_rows: int = 0
    import_seconds: float = 0.0
    approvals: dict[str, int] = field(default_factory=dict)

    def add(self, other: dict[str, Any]) -> None:
        buckets = list(other.get("read_buckets") or [])
        if len(buckets) == len(self.read_buckets):
            self.read_buckets = [a + int(b) for a, b in zip(self.read_buckets, buckets, strict=True)]
        self.read_seconds += float(other.get("read_seconds") or 0)
        self.import_rows += int(other.get("import_rows") or 0)
        self.import_seconds += float(other.get("import_seconds") or 0)
        for outcome, count in (other.get("approvals") or {}).items():
            self.approvals[outcome] = self.approvals.get(outcome, 0) + int(count)

    def to_json(self) -> dict[str, Any]:
        return {
            "read_buckets": self.read_buckets,
            "read_seconds": self.read_seconds,
            "import_rows": self.import_rows,
            "import_seconds": self.import_seconds,
            "approvals": self.approvals,
        }


_TOKEN = secrets.token_hex(4)  # a pid can come back after a restart within the hour
_lock = threading.Lock()
_tallies: dict[tuple[Path, str], _Tally] = {}  # (sla folder, hour) -> this process's tally
_dirty: set[tuple[Path, str]] = set()
_last_flush = time.monotonic()


def _hour(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%d%H")


def sla_dir() -> Path:
    return logs.log_dir() / SLA_FOLDER


def _tally() -> tuple[_Tally, bool]:
    """This hour's tally of this process (the caller holds ``_lock``), and whether a flush is due."""
    key = (sla_dir(), _hour(datetime.now(UTC)))
    tally = _tallies.get(key)
    if tally is None:
        tally = _tallies[key] = _Tally()
    _dirty.add(key)
    return tally, time.monotonic() - _last_flush >= FLUSH_S


def record_read(seconds: float) -> None:
    """One page read that took ``seconds``."""
    with _lock:
        tally, due = _tally()
        index = next((i for i, bound in enumerate(READ_BUCKETS) if seconds <= bound), len(READ_BUCKETS))
        tally.read_buckets[index] += 1
        tally.read_seconds += seconds
    if due:
        flush()


def record_import(rows: int, seconds: float) -> None:
    """An import that wrote ``rows`` rows to its staging table in ``seconds``."""
    with _lock:
        tally, due = _tally()
        tally.import_rows += int(rows)
        tally.import_seconds += float(seconds)
    if due:
        flush()


def record_approval(outcome: str) -> None:
    """One approval that ended as ``outcome`` (one of ``APPROVAL_OUTCOMES``)."""
    with _lock:
        tally, due = _tally()
        tally.approvals[outcome] = tally.approvals.get(outcome, 0) + 1
    if due:
        flush()


def flush() -> None:
    """Write this process's changed tallies now (each to its own file, atomically); drop old hours."""
    global _last_flush
    with _lock:
        dirty = [(key, _tallies[key].to_json()) for key in _dirty]
        _dirty.clear()
        _last_flush = time.monotonic()
        current = _hour(datetime.now(UTC))
        for key in [k for k in _tallies if k[1] != current]:
            del _tallies[key]  # its last counts are in ``dirty`` or already written: a past hour gets no more
    for (folder, hour), doc in dirty:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{hour}-{os.getpid()}-{_TOKEN}.json"
            temp = path.with_name(f".{path.name}.tmp")
            temp.write_text(json.dumps(doc))
            temp.replace(path)
        except OSError:  # a full or read-only disk must not fail a page read
            continue
        _prune(folder)


def _prune(folder: Path) -> None:
    oldest = _hour(datetime.now(UTC) - timedelta(hours=KEEP_HOURS))
    for path in folder.glob("*.json"):
        if path.name[:10] < oldest:
            path.unlink(missing_ok=True)


atexit.register(flush)


def tallies(hours: int = 24, *, now: datetime | None = None) -> _Tally:
    """The sum of every process's tallies for the last ``hours`` hours (this hour included)."""
    flush()
    now = now or datetime.now(UTC)
    first = _hour(now - timedelta(hours=hours - 1))
    total = _Tally()
    folder = sla_dir()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if path.name[:10] < first:
            continue
        try:
            total.add(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a file another process is replacing right now
    return total


def quantile(q: float, buckets: list[int]) -> float | None:
    """The ``q`` quantile of bucketed counts, interpolated within its bucket as Prometheus does."""
    count = sum(buckets)
    if count == 0:
        return None
    rank = q * count
    seen = 0
    lower = 0.0
    for bound, n in zip((*READ_BUCKETS, math.inf), buckets, strict=True):
        if seen + n >= rank and n > 0:
            if math.isinf(bound):
                return READ_BUCKETS[-1]  # beyond the last bound: as histogram_quantile, its lower end
            return lower + (bound - lower) * (rank - seen) / n
        seen += n
        lower = bound
    return READ_BUCKETS[-1]
