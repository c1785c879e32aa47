"""``python -m bench --cluster``: the cluster/embedded comparison, its rule, its JSON, the cluster's lifetime.

The comparison tests feed ``bench._cluster.compare`` the JSON documents real
``WorkloadResult`` objects write. The lifetime tests put a stand-in ``cluster.sh`` in its
place that logs what it is asked. The ``cluster`` test runs the command on the loopback cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import _cluster
from bench._harness import BenchConfig, Timing, WorkloadResult, write_json
from tests import cluster_support

REPO = Path(__file__).resolve().parent.parent
cluster = cluster_support.cluster  # the session's loopback cluster (up when first asked for)


def _result(name: str, core_ms: float, steps: dict[str, float] | None = None) -> dict[str, Any]:
    """A workload's results document, as ``WorkloadResult.to_json`` writes it."""
    breakdown = [Timing(label=label, samples_ms=(ms, ms * 3, ms / 2)) for label, ms in (steps or {}).items()]
    result = WorkloadResult(
        name=name,
        description=name,
        core=Timing(label="core", samples_ms=(core_ms * 2, core_ms, core_ms / 4)),  # median core_ms
        breakdown=breakdown,
    )
    return result.to_json()


# ---------------------------------------------------------------- the comparison and its rule


def test_ratios_are_cluster_medians_over_embedded_medians_per_workload_and_step() -> None:
    embedded = [_result("page_read", 20.0, {"get_dataset": 2.0, "read_page": 10.0})]
    cluster_run = [_result("page_read", 30.0, {"get_dataset": 5.0, "read_page": 12.0, "cluster only": 1.0})]

    compared = _cluster.compare(embedded, cluster_run)

    (workload,) = compared.workloads
    assert (workload.total.label, workload.total.embedded_ms, workload.total.cluster_ms) == ("page_read", 20.0, 30.0)
    assert workload.total.ratio == pytest.approx(1.5)
    assert [(s.label, s.ratio) for s in workload.steps] == [
        ("get_dataset", pytest.approx(2.5)),
        ("read_page", pytest.approx(1.2)),
        ("cluster only", None),  # nothing to compare it with: no ratio, never named
    ]
    assert compared.named() == []


def test_a_step_is_named_when_its_ratio_is_twice_the_others_median_and_it_adds_enough_time() -> None:
    embedded = [_result("approve", 1000.0, {"checks": 100.0, "conflicts": 200.0, "merge": 600.0, "sync": 10.0})]
    # merge: 3x against the others' median 1.1x, +1200 ms: named; sync: 4x, +30 ms (>= 20 ms): named too;
    # checks 1.0x and conflicts 1.1x, against 3x: not named.
    cluster_run = [_result("approve", 2100.0, {"checks": 100.0, "conflicts": 220.0, "merge": 1800.0, "sync": 40.0})]

    compared = _cluster.compare(embedded, cluster_run)

    steps = {s.label: s for s in compared.workloads[0].steps}
    assert [label for label, s in steps.items() if s.grows] == ["merge", "sync"]
    assert steps["merge"].reference == pytest.approx(1.1)  # median of 1.0, 1.1 and 4.0
    assert compared.named() == ["approve / merge", "approve / sync"]


def test_a_high_ratio_that_adds_little_time_is_not_named() -> None:
    embedded = [_result("edit_save", 10.0, {"lookup": 1.0, "append": 5.0, "metadata": 4.0})]
    cluster_run = [_result("edit_save", 40.0, {"lookup": 10.0, "append": 5.0, "metadata": 4.0})]  # 10x, +9 ms

    steps = _cluster.compare(embedded, cluster_run).workloads[0].steps

    assert steps[0].ratio == pytest.approx(10.0)
    assert not any(s.grows for s in steps)


def test_the_rule_holds_at_the_workload_level_and_at_its_threshold() -> None:
    embedded = [_result("page_read", 100.0), _result("edit_save", 100.0), _result("approve", 1000.0)]
    # approve 2.0x against the others' median 1.0x: exactly at the factor, named; edit_save 1.0x is not.
    cluster_run = [_result("page_read", 100.0), _result("edit_save", 100.0), _result("approve", 2000.0)]

    compared = _cluster.compare(embedded, cluster_run)

    assert [w.total.grows for w in compared.workloads] == [False, False, True]
    assert compared.named() == ["approve"]
    cluster_run[2] = _result("approve", 1990.0)  # 1.99x: under the factor
    assert _cluster.compare(embedded, cluster_run).named() == []


def test_two_steps_are_each_judged_against_the_other() -> None:
    compared = _cluster.compare(
        [_result("w", 100.0, {"a": 50.0, "b": 50.0})], [_result("w", 400.0, {"a": 50.0, "b": 350.0})]
    )
    assert compared.named() == ["w / b"]  # 7x against 1x


def test_a_workload_missing_from_the_cluster_run_gets_no_ratio() -> None:
    compared = _cluster.compare([_result("page_read", 20.0), _result("approve", 900.0)], [_result("page_read", 25.0)])
    assert [(w.total.label, w.total.cluster_ms, w.total.ratio) for w in compared.workloads] == [
        ("page_read", 25.0, pytest.approx(1.25)),
        ("approve", None, None),
    ]


def test_the_report_shows_the_table_the_rule_and_what_grows() -> None:
    embedded = [_result("approve", 1000.0, {"checks": 100.0, "merge": 600.0})]
    cluster_run = [_result("approve", 2000.0, {"checks": 100.0, "merge": 1800.0})]

    text = _cluster.render(_cluster.compare(embedded, cluster_run), cluster_note=" (reused)")

    lines = text.splitlines()
    assert lines[0].startswith("== cluster vs embedded")
    assert "S3:       not measured" in text
    assert any(line.split()[:4] == ["approve", "1000", "ms", "2000"] and line.endswith("2.00x") for line in lines)
    merge = next(line for line in lines if line.strip().startswith("merge"))
    assert merge.split()[1:6] == ["600", "ms", "1800", "ms", "3.00x"]
    assert "<- grows: 3.0x against 1.0x for the others, +1200 ms" in merge
    assert f"  rule: {_cluster.RULE}" in lines
    load = f"approve {embedded[0]['load_1min']:.1f}/{cluster_run[0]['load_1min']:.1f}"
    assert f"  machine load (1-min average) at the end of each, embedded/cluster: {load}" in lines
    assert lines[-1] == "  grows with the topology: approve / merge"

    quiet = _cluster.render(_cluster.compare(embedded, embedded))
    assert quiet.splitlines()[-1] == "  grows with the topology: nothing, by this rule"


def test_the_results_json_keeps_its_fields_and_adds_a_cluster_section(tmp_path: Path) -> None:
    embedded = [_result("page_read", 20.0, {"read_page": 10.0})]
    child = {"workloads": [_result("page_read", 60.0, {"read_page": 50.0})]}
    compared = _cluster.compare(embedded, child["workloads"])
    where = _cluster.Cluster({"SPARK_REMOTE": "sc://127.0.0.1:1", "OREO_DATABASE_URL": "postgresql://x"}, True, "s")
    result = WorkloadResult(name="page_read", description="d", core=Timing(label="core", samples_ms=(20.0,)))

    extra = {"cluster": _cluster.section(compared, where, child)}
    path = write_json([result], BenchConfig(rows=10), tmp_path / "out.json", extra=extra)

    doc = json.loads(path.read_text())
    assert {"generated_at", "config", "environment", "passed", "workloads"} <= set(doc)
    assert doc["workloads"][0]["name"] == "page_read" and doc["config"]["rows"] == 10
    section = doc["cluster"]
    assert section["started_by_bench"] is True and section["spark_remote"] == "sc://127.0.0.1:1"
    assert section["s3"].startswith("not measured") and section["rule"] == _cluster.RULE
    assert (section["factor"], section["min_added_ms"]) == (_cluster.FACTOR, _cluster.MIN_ADDED_MS)
    (workload,) = section["workloads"]
    assert (workload["name"], workload["embedded_median_ms"], workload["cluster_median_ms"]) == ("page_read", 20, 60)
    assert workload["ratio"] == 3.0
    loads = {"embedded": embedded[0]["load_1min"], "cluster": child["workloads"][0]["load_1min"]}
    assert workload["load_1min"] == loads
    assert workload["steps"] == [
        {
            "label": "read_page",
            "embedded_median_ms": 10.0,
            "cluster_median_ms": 50.0,
            "ratio": 5.0,
            "others_median_ratio": None,  # no other step to judge it against
            "grows": False,
        }
    ]
    assert section["grows"] == [] and section["run"] == child


def test_export_lines_are_read_with_their_shell_quoting() -> None:
    text = "export SPARK_REMOTE=sc://127.0.0.1:4\nexport OREO_DATABASE_URL='postgresql+psycopg://o@h:5/o?a=b c'\n"
    assert _cluster.parse_exports(text) == {
        "SPARK_REMOTE": "sc://127.0.0.1:4",
        "OREO_DATABASE_URL": "postgresql+psycopg://o@h:5/o?a=b c",
    }


# ---------------------------------------------------------------- the cluster's lifetime


FAKE_CLUSTER_SH = """#!/bin/sh
echo "$@" >> "$CALLS"
echo "$OREO_CLUSTER_DIR" > "$CALLS.dir"
case "$1" in
  status) exit "$STATUS" ;;
  up) echo "export SPARK_REMOTE=sc://127.0.0.1:15002"
      echo "export OREO_DATABASE_URL=postgresql+psycopg://o@127.0.0.1:5/o"
      exit "$UP" ;;
  down) exit 0 ;;
esac
exit 2
"""


@pytest.fixture
def fake_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for scripts/cluster.sh; returns the file its calls are logged to."""
    script = tmp_path / "cluster.sh"
    script.write_text(FAKE_CLUSTER_SH)
    script.chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setattr(_cluster, "CLUSTER_SH", script)
    monkeypatch.setenv("CALLS", str(calls))
    monkeypatch.setenv("UP", "0")
    return calls


def _calls(path: Path) -> list[str]:
    return path.read_text().split()


def test_a_running_cluster_is_reused_and_left_up(
    fake_cluster: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STATUS", "0")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OREO_CLUSTER_DIR", "state")  # relative to where the bench starts, not to the repo
    with _cluster.loopback_cluster() as running:
        assert running.started is False
        assert running.exports["SPARK_REMOTE"] == "sc://127.0.0.1:15002"
        assert running.state_dir == str(tmp_path / "state")
    assert _calls(fake_cluster) == ["status", "up"]
    assert Path(f"{fake_cluster}.dir").read_text().strip() == str(tmp_path / "state")


def test_a_cluster_the_bench_started_is_stopped_also_when_the_run_fails(
    fake_cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATUS", "1")
    with _cluster.loopback_cluster() as running:
        assert running.started is True
    assert _calls(fake_cluster) == ["status", "up", "down"]

    fake_cluster.unlink()
    with pytest.raises(KeyboardInterrupt), _cluster.loopback_cluster():
        raise KeyboardInterrupt  # Ctrl-C during the cluster run
    assert _calls(fake_cluster) == ["status", "up", "down"]

    fake_cluster.unlink()
    monkeypatch.setenv("UP", "1")
    failed = pytest.raises(_cluster.ClusterRunError, match=r"scripts/cluster.sh up failed \(exit 1\)")
    with failed, _cluster.loopback_cluster():
        pytest.fail("no cluster, no run")
    assert _calls(fake_cluster) == ["status", "up", "down"]


def test_s3_asks_for_up_s3_and_an_s3_data_root(fake_cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATUS", "1")
    # The stand-in prints no DELTA_DATA_ROOT: an `up --s3` without a bucket is no S3 run.
    failed = pytest.raises(_cluster.ClusterRunError, match=r"up --s3 printed no s3:// DELTA_DATA_ROOT")
    with failed, _cluster.loopback_cluster(s3=True):
        pytest.fail("no bucket, no run")
    assert _calls(fake_cluster) == ["status", "up", "--s3", "down"]


def test_the_report_and_the_json_say_where_the_cluster_run_kept_its_tables() -> None:
    compared = _cluster.compare([_result("page_read", 20.0)], [_result("page_read", 40.0)])
    assert f"  S3:       {_cluster.S3_ON}" in _cluster.render(compared, s3=True).splitlines()
    exports = {"SPARK_REMOTE": "sc://127.0.0.1:1", "OREO_DATABASE_URL": "postgresql://x", "DELTA_DATA_ROOT": "s3://b/p"}
    section = _cluster.section(compared, _cluster.Cluster(exports, False, "s", s3=True), {"workloads": []})
    assert (section["s3"], section["data_root"]) == (_cluster.S3_ON, "s3://b/p")


def test_s3_without_cluster_is_refused(tmp_path: Path) -> None:
    env = {**os.environ, "OREO_BENCH_DATA": str(tmp_path / "bench")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--s3", "--only", "page_read"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == "error: --s3 goes with --cluster"
    assert not (tmp_path / "bench" / "delta").exists()


def test_cluster_refuses_workloads_outside_the_five_before_starting_anything(tmp_path: Path) -> None:
    env = {**os.environ, "OREO_BENCH_DATA": str(tmp_path / "bench"), "OREO_CLUSTER_DIR": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--cluster", "--only", "page_read", "--only", "diff_page"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "error: --cluster runs page_read, edit_save, small_submit, small_approve, approve; not diff_page"
    )
    assert not (tmp_path / "state").exists() and not (tmp_path / "bench" / "delta").exists()


# ---------------------------------------------------------------- on the loopback cluster


@pytest.mark.cluster
def test_bench_cluster_runs_page_read_embedded_and_on_the_cluster(cluster: dict[str, str], tmp_path: Path) -> None:
    data, out = tmp_path / "bench", tmp_path / "latest.json"
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "OREO_DATABASE_URL", "DELTA_DATA_ROOT")}
    env.update(OREO_CLUSTER_DIR=cluster["OREO_CLUSTER_DIR"], OREO_BENCH_DATA=str(data), OREO_PYTHON=sys.executable)
    command = ["--only", "page_read", "--rows", "2000", "--repeats", "3", "--warmup", "0", "--no-spark"]

    done = subprocess.run(
        [sys.executable, "-m", "bench", "--cluster", *command, "--results", str(out)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-4000:]
    doc = json.loads(out.read_text())
    embedded, section = doc["workloads"][0], doc["cluster"]
    on_cluster = section["run"]["workloads"][0]
    assert embedded["name"] == on_cluster["name"] == "page_read"
    assert "2,000-row" in embedded["description"] and "2,000-row" in on_cluster["description"]
    assert section["started_by_bench"] is False  # the fixture's cluster: reused...
    status = subprocess.run(
        [str(cluster_support.CLUSTER), "status"], env=env, capture_output=True, text=True, timeout=120
    )
    assert status.returncode == 0, status.stdout  # ...and left running
    assert (section["spark_remote"], section["catalog"]) == (cluster["SPARK_REMOTE"], cluster["OREO_DATABASE_URL"])

    (row,) = section["workloads"]
    assert row["embedded_median_ms"] == embedded["core"]["median_ms"]
    assert row["cluster_median_ms"] == on_cluster["core"]["median_ms"]
    assert row["ratio"] == pytest.approx(on_cluster["core"]["median_ms"] / embedded["core"]["median_ms"], abs=1e-3)
    labels = [b["label"] for b in embedded["breakdown"]]
    assert [s["label"] for s in row["steps"]] == labels == [b["label"] for b in on_cluster["breakdown"]]
    named = ["page_read"] if row["grows"] else []
    assert section["grows"] == named + [f"page_read / {s['label']}" for s in row["steps"] if s["grows"]]

    # Each run read its own table: the embedded one on SQLite, the cluster one in PostgreSQL.
    main = Path("projects/bench/datasets/customers_2000/main/_delta_log")
    assert (data / "delta" / main).is_dir() and (data / "cluster" / "delta" / main).is_dir()
    import psycopg

    dsn = cluster["OREO_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        listed = conn.execute("SELECT dataset_id FROM datasets WHERE project_id = 'bench'").fetchall()
    assert listed == [("customers_2000",)]
    lines = done.stdout.splitlines()
    head = lines.index("== cluster vs embedded (same run): median of the core path, cluster/embedded ratio")
    table = lines[head:]
    assert any(line.split()[:1] == ["page_read"] and line.split()[5].endswith("x") for line in table)
    assert "(already running: reused, left up)" in table[2]
    grows = next(line for line in table if line.startswith("  grows with the topology: "))
    assert grows.removeprefix("  grows with the topology: ") == ("; ".join(section["grows"]) or "nothing, by this rule")
