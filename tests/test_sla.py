"""SLA tallies: every process's hourly files add up over the window, old hours drop out, quantiles as Prometheus."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from core import health, sla
from core.engine import EngineStatus


def _bucketed(*seconds: float) -> list[int]:
    buckets = [0] * (len(sla.READ_BUCKETS) + 1)
    for value in seconds:
        index = next((i for i, bound in enumerate(sla.READ_BUCKETS) if value <= bound), len(sla.READ_BUCKETS))
        buckets[index] += 1
    return buckets


@pytest.mark.parametrize(
    ("q", "reads", "expected"),
    [
        (0.95, [], None),
        (0.5, [0.2, 0.2], 0.1 + (0.25 - 0.1) * 1 / 2),  # rank 1 of 2 in the (0.1, 0.25] bucket
        (0.95, [0.2] * 18 + [7.0] * 2, 5.0 + 5.0 * (19 - 18) / 2),
        (0.95, [120.0] * 4, sla.READ_BUCKETS[-1]),  # past the last bound: its lower end, as histogram_quantile
    ],
)
def test_quantile_interpolates_within_the_bucket(q: float, reads: list[float], expected: float | None) -> None:
    assert sla.quantile(q, _bucketed(*reads)) == (None if expected is None else pytest.approx(expected))


def test_tallies_add_every_processs_files_of_the_window() -> None:
    sla.record_read(0.2)
    sla.record_read(3.0)
    sla.record_import(2000, 1.0)
    sla.record_approval("merged")
    now = datetime.now(UTC)
    folder = sla.sla_dir()
    folder.mkdir(parents=True, exist_ok=True)
    other = {"read_buckets": _bucketed(0.2), "read_seconds": 0.2, "import_rows": 1000, "import_seconds": 2.0,
             "approvals": {"failed": 1}}  # fmt: skip
    (folder / f"{(now - timedelta(hours=3)):%Y%m%d%H}-999-other.json").write_text(json.dumps(other))
    too_old = {**other, "approvals": {"failed": 50}}
    (folder / f"{(now - timedelta(hours=30)):%Y%m%d%H}-999-other.json").write_text(json.dumps(too_old))

    kept = sla.tallies(24)

    assert sum(kept.read_buckets) == 3
    assert kept.read_seconds == pytest.approx(3.4)
    assert (kept.import_rows, kept.import_seconds) == (3000, pytest.approx(3.0))
    assert kept.approvals == {"merged": 1, "failed": 1}
    assert sla.tallies(48).approvals == {"merged": 1, "failed": 51}


def test_a_flush_writes_this_processs_file_and_prunes_hours_past_two_days() -> None:
    folder = sla.sla_dir()
    folder.mkdir(parents=True, exist_ok=True)
    ancient = folder / f"{(datetime.now(UTC) - timedelta(hours=sla.KEEP_HOURS + 2)):%Y%m%d%H}-1-x.json"
    ancient.write_text("{}")

    sla.record_approval("conflict")
    sla.flush()

    written = [p for p in folder.glob("*.json") if p != ancient]
    assert len(written) == 1 and json.loads(written[0].read_text())["approvals"] == {"conflict": 1}
    assert not ancient.exists()


def test_an_unreadable_tally_file_is_skipped() -> None:
    folder = sla.sla_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{datetime.now(UTC):%Y%m%d%H}-1-broken.json").write_text("{not json")
    sla.record_approval("merged")

    assert sla.tallies(24).approvals == {"merged": 1}


@pytest.mark.parametrize(
    ("status", "ok", "detail"),
    [
        (EngineStatus("ready", 50.0, 48.0), True, ""),
        (EngineStatus("starting", 12.4, 48.0), None, "starting for 12 s (the last start took 48 s)"),
        (EngineStatus("failed", 3.0, None, "could not start Spark: no Java"), False, "could not start Spark: no Java"),
        (EngineStatus("idle", 0.0, None), None, "not started in this process"),
    ],
)
def test_the_engine_is_judged_once_it_started_or_failed(status: EngineStatus, ok: bool | None, detail: str) -> None:
    figure = health._engine_figure(status)
    assert (figure.text, figure.ok, figure.detail) == (status.state, ok, detail)
