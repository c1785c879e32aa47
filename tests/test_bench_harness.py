"""``bench._harness.settle``: a timed sample that shares the machine starts when the machine is quiet."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench import _harness


def _stat(windows: list[float], jiffies: int = 200) -> Iterator[tuple[int, int]]:
    """``_cpu_times`` readings whose windows have these idle shares, ``jiffies`` each."""
    idle = total = 0
    yield idle, total
    for share in windows:
        idle, total = idle + round(share * jiffies), total + jiffies
        yield idle, total
        yield idle, total  # the next window starts where this one ended


def test_settle_waits_out_busy_windows_and_returns_the_first_quiet_ones_share(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = _stat([0.1, 0.5, 0.9, 0.95])
    monkeypatch.setattr(_harness, "_cpu_times", lambda: next(readings))

    share = _harness.settle(idle=0.8, window_s=0.001, timeout_s=60)

    assert share == pytest.approx(0.9)
    assert next(readings) == (round(0.1 * 200) + round(0.5 * 200) + round(0.9 * 200), 600)  # the 4th was not read


def test_settle_gives_up_on_a_machine_that_stays_busy_and_says_how_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = _stat([0.3] * 10_000)
    monkeypatch.setattr(_harness, "_cpu_times", lambda: next(readings))

    share = _harness.settle(idle=0.8, window_s=0.001, timeout_s=0.05)

    assert share == pytest.approx(0.3)


def test_settle_reads_this_machines_cpu_times() -> None:
    idle, total = _harness._cpu_times()
    assert 0 < idle < total

    share = _harness.settle(idle=0.0, window_s=0.05)  # any window is quiet enough: one window read

    assert 0.0 <= share <= 1.0
