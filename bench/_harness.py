"""Timing helpers, workload results, the console report and the JSON dump.

A workload times the Oreo code path ("core") and the bare engine(s) doing the same work
("baselines") in one process and one run, so the ratio between them is meaningful even
on a noisy machine. Targets are checked here and shown as PASS/FAIL; nothing asserts.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"


@dataclass(frozen=True)
class BenchConfig:
    """Knobs shared by every workload (from the command line)."""

    rows: int = 1_000_000
    warmup: int = 3
    repeats: int = 25
    spark_warmup: int = 1
    spark_repeats: int = 5
    spark: bool = True


@dataclass(frozen=True)
class Timing:
    """Samples of one measured callable, in milliseconds.

    ``samples_ms`` is wall-clock time (what the targets use). ``cpu_ms`` is the CPU time
    of this process over the same calls, summed over its threads (DuckDB's included, a
    JVM's not): on a loaded machine it moves much less than wall time.
    """

    label: str
    samples_ms: tuple[float, ...]
    cpu_ms: tuple[float, ...] = ()
    warmup: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p95(self) -> float:
        """Nearest-rank 95th percentile (the maximum for fewer than 20 samples)."""
        ordered = sorted(self.samples_ms)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]

    @property
    def minimum(self) -> float:
        return min(self.samples_ms)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu_ms) if self.cpu_ms else None

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "median_ms": round(self.median, 3),
            "p95_ms": round(self.p95, 3),
            "min_ms": round(self.minimum, 3),
            "cpu_median_ms": _round(self.cpu_median),
            "repeats": len(self.samples_ms),
            "warmup": self.warmup,
            "samples_ms": [round(s, 3) for s in self.samples_ms],
            "cpu_ms": [round(s, 3) for s in self.cpu_ms],
        }


def time_call(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall and process CPU milliseconds of one call, the garbage collector collected first and paused."""
    gc.collect()
    gc.disable()
    try:
        cpu = time.process_time()
        start = time.perf_counter()
        fn()
        wall = time.perf_counter() - start
        return wall * 1000.0, (time.process_time() - cpu) * 1000.0
    finally:
        gc.enable()


# What "a quiet machine" means before a timed sample that shares the machine with servers
# (settle): at least this share of every core idle over one window.
QUIET_IDLE = 0.8
QUIET_WINDOW_S = 0.5
QUIET_TIMEOUT_S = 20.0


def _cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of all cores since boot, from ``/proc/stat``."""
    with open("/proc/stat") as stat:
        fields = [int(n) for n in stat.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)  # idle + iowait


def settle(idle: float = QUIET_IDLE, window_s: float = QUIET_WINDOW_S, timeout_s: float = QUIET_TIMEOUT_S) -> float:
    """Wait until the machine is quiet (``idle`` of its CPU time idle over ``window_s``); the last window's idle share.

    A server's work after a sample (a JVM still compiling, a file list built ahead, a
    browser drawing) otherwise lands in the next sample, which then measures two things at
    once. Gives up after ``timeout_s`` (a machine that never quiets down) and says so in
    the share it returns. Without ``/proc/stat`` (not Linux) it returns 1.0 at once.
    """
    if not os.path.exists("/proc/stat"):
        return 1.0
    deadline = time.monotonic() + timeout_s
    share = 0.0
    while True:
        idle_0, total_0 = _cpu_times()
        time.sleep(window_s)  # one measuring window, not a scripted wait
        idle_1, total_1 = _cpu_times()
        share = (idle_1 - idle_0) / max(1, total_1 - total_0)
        if share >= idle or time.monotonic() >= deadline:
            return share


def measure(label: str, fn: Callable[[], object], *, warmup: int = 3, repeats: int = 25) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times timed."""
    return measure_interleaved({label: fn}, warmup=warmup, repeats=repeats)[label]


def measure_interleaved(
    fns: dict[str, Callable[[], object]], *, warmup: int = 3, repeats: int = 25
) -> dict[str, Timing]:
    """Time several callables round-robin, so load drift on the machine hits them all alike.

    Each callable is warmed up ``warmup`` times, then every round calls each once (the
    starting callable rotates per round) until each has ``repeats`` samples.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    labels = list(fns)
    for label in labels:
        for _ in range(warmup):
            fns[label]()
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in labels}
    for round_no in range(repeats):
        shift = round_no % len(labels)
        for label in labels[shift:] + labels[:shift]:
            samples[label].append(time_call(fns[label]))
    return {
        label: Timing(
            label=label,
            samples_ms=tuple(wall for wall, _ in samples[label]),
            cpu_ms=tuple(cpu for _, cpu in samples[label]),
            warmup=warmup,
        )
        for label in labels
    }


def stage_breakdown(stages: list[tuple[str, float]]) -> list[Timing]:
    """One ``core stage: NAME`` timing per stage name, from ``(name, seconds)`` samples in run order."""
    by_stage: dict[str, list[float]] = {}
    for name, seconds in stages:
        by_stage.setdefault(name, []).append(seconds * 1000.0)
    return [Timing(label=f"core stage: {name}", samples_ms=tuple(ms)) for name, ms in by_stage.items()]


def expect(condition: bool, message: str) -> None:
    """Stop the run when a measured call returned the wrong answer (a fast wrong answer is no result)."""
    if not condition:
        raise RuntimeError(f"benchmark sanity check failed: {message}")


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (JVM children not included)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


@dataclass(frozen=True)
class Check:
    """One target and whether the measurement met it."""

    name: str
    ok: bool
    detail: str


@dataclass
class WorkloadResult:
    """Everything a workload measured.

    Args:
        name: The workload id (``--only`` value).
        description: One line saying what is measured.
        core: The Oreo code path.
        baselines: Bare engines doing the same work; the first whose label is
            ``ratio_baseline`` is the one the ratio target is checked against.
        ratio_baseline: Label of the baseline for ``max_ratio``.
        max_ratio: core median / baseline median must be <= this.
        max_median_ms: core median must be < this.
        max_p95_ms: core p95 must be <= this.
        breakdown: The core path's steps timed one by one (informational).
        notes: Free-form facts worth keeping (table size, engine start time...).
        more_checks: Targets the fields above cannot say (a ratio between two baselines),
            checked by the workload and reported with the rest.
    """

    name: str
    description: str
    core: Timing
    baselines: list[Timing] = field(default_factory=list)
    ratio_baseline: str | None = None
    max_ratio: float | None = None
    max_median_ms: float | None = None
    max_p95_ms: float | None = None
    breakdown: list[Timing] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    more_checks: list[Check] = field(default_factory=list)
    peak_rss_mb: float = field(default_factory=peak_rss_mb)
    load_1min: float = field(default_factory=lambda: os.getloadavg()[0])

    def baseline(self, label: str) -> Timing | None:
        return next((b for b in self.baselines if b.label == label), None)

    def ratio(self, label: str) -> float | None:
        base = self.baseline(label)
        if base is None or base.median <= 0:
            return None
        return self.core.median / base.median

    def checks(self) -> list[Check]:
        found: list[Check] = []
        if self.max_ratio is not None and self.ratio_baseline is not None:
            ratio = self.ratio(self.ratio_baseline)
            if ratio is not None:
                found.append(
                    Check(
                        f"ratio vs {self.ratio_baseline}",
                        ratio <= self.max_ratio,
                        f"{ratio:.2f}x (target <={self.max_ratio:g}x)",
                    )
                )
        if self.max_median_ms is not None:
            found.append(
                Check(
                    "core median",
                    self.core.median < self.max_median_ms,
                    f"{_ms(self.core.median)} (target <{self.max_median_ms:g} ms)",
                )
            )
        if self.max_p95_ms is not None:
            found.append(
                Check(
                    "core p95",
                    self.core.p95 <= self.max_p95_ms,
                    f"{_ms(self.core.p95)} (target <={self.max_p95_ms:g} ms)",
                )
            )
        return found + self.more_checks

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks())

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "core": self.core.to_json(),
            "baselines": [{**b.to_json(), "ratio": _round(self.ratio(b.label))} for b in self.baselines],
            "targets": {
                "ratio_baseline": self.ratio_baseline,
                "max_ratio": self.max_ratio,
                "max_median_ms": self.max_median_ms,
                "max_p95_ms": self.max_p95_ms,
            },
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks()],
            "passed": self.passed,
            "breakdown": [b.to_json() for b in self.breakdown],
            "notes": self.notes,
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "load_1min": round(self.load_1min, 2),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _ms(value: float) -> str:
    """Milliseconds with about three significant digits."""
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def headline(result: WorkloadResult) -> str:
    """One line: core beside each baseline, the ratio where a target exists, and the verdict."""
    parts = [f"core {_ms(result.core.median)}"]
    for base in result.baselines:
        text = f"{base.label} {_ms(base.median)}"
        ratio = result.ratio(base.label)
        if ratio is not None and base.label == result.ratio_baseline and result.max_ratio is not None:
            text += f" ({ratio:.2f}x, target <={result.max_ratio:g}x)"
        elif ratio is not None and ratio >= 0.1:
            text += f" ({ratio:.2f}x)"
        parts.append(text)
    if result.max_median_ms is not None:
        parts.append(f"median target <{result.max_median_ms:g} ms")
    if result.max_p95_ms is not None:
        parts.append(f"core p95 {_ms(result.core.p95)}, target <={result.max_p95_ms:g} ms")
    verdict = "PASS" if result.passed else "FAIL"
    return " | ".join(parts) + f" -> {verdict}"


def _table(rows: list[Timing], title: str) -> list[str]:
    width = max([len(title), *(len(t.label) for t in rows)])
    lines = [f"  {title:<{width}}  {'median':>10}  {'p95':>10}  {'min':>10}  {'cpu median':>10}  {'n':>3}"]
    for t in rows:
        cpu = _ms(t.cpu_median) if t.cpu_median is not None else "-"
        cells = f"{_ms(t.median):>10}  {_ms(t.p95):>10}  {_ms(t.minimum):>10}  {cpu:>10}  {len(t.samples_ms):>3}"
        lines.append(f"  {t.label:<{width}}  {cells}")
    return lines


def report(results: list[WorkloadResult]) -> str:
    """The console report: per workload a headline, the timing table, the breakdown and notes."""
    lines: list[str] = []
    for result in results:
        lines.append(f"== {result.name}: {result.description}")
        lines.append("  " + headline(result))
        lines.append("")
        lines.extend(_table([result.core, *result.baselines], "path"))
        if result.breakdown:
            lines.append("")
            lines.extend(_table(result.breakdown, "core path, step by step"))
        for check in result.checks():
            lines.append(f"  [{'PASS' if check.ok else 'FAIL'}] {check.name}: {check.detail}")
        for key, value in result.notes.items():
            lines.append(f"  {key}: {value}")
        lines.append(f"  peak RSS (python process): {result.peak_rss_mb:.0f} MB")
        cpus = os.cpu_count() or 1
        load = f"  machine load (1-min average) at the end: {result.load_1min:.1f} on {cpus} CPU(s)"
        if result.load_1min > cpus:
            load += " -- busy machine: wall times are inflated; compare ratios, minima and cpu medians"
        lines.append(load)
        lines.append("")
    if results:
        verdict = "PASS" if all(r.passed for r in results) else "FAIL"
        met = sum(r.passed for r in results)
        lines.append(f"overall: {verdict} ({met}/{len(results)} workloads met their targets)")
    return "\n".join(lines)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Machine and library versions, stored beside the figures."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "packages": {
            name: _version(name)
            for name in ("duckdb", "duckdb-extension-delta", "pyspark", "delta-spark", "pandas", "pyarrow")
        },
    }


def write_json(
    results: list[WorkloadResult], config: BenchConfig, path: Path | None = None, extra: dict[str, Any] | None = None
) -> Path:
    """Write the run to ``bench/results/latest.json`` (or ``path``) and return where.

    ``extra`` adds top-level sections (``--cluster`` adds ``cluster``) beside the usual ones.
    """
    path = path or RESULTS_DIR / "latest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": config.__dict__,
        "environment": environment(),
        "passed": all(r.passed for r in results),
        "workloads": [r.to_json() for r in results],
        **(extra or {}),
    }
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return path
