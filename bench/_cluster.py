"""``python -m bench --cluster``: the workloads on the loopback cluster, beside the embedded run.

The loopback cluster of ``scripts/cluster.sh`` comes first (the one already running for
``$OREO_CLUSTER_DIR``, or one this run starts and stops). Then workload by workload (so
load drift on a shared machine hits both sides of a ratio alike): the embedded run in the
``python -m bench`` process as usual, then the same workload in a child ``python -m bench``
whose environment points at the cluster: ``SPARK_REMOTE``, ``OREO_DATABASE_URL`` and a data
root of its own (``bench/.data/cluster``). Oreo never branches on the topology, so that is
the only difference between the two runs. The child writes its results as JSON;
``compare`` puts each workload's and each step's medians side by side and names what
grows with the topology (``RULE``).

``--cluster --s3`` runs the cluster with ``scripts/cluster.sh up --s3``: the child's data root
is then ``<the cluster's DELTA_DATA_ROOT>/bench`` in its bucket (moto's S3 server on loopback,
reached through s3a by the Connect server, httpfs by DuckDB and delta-rs's object store), with
the ``AWS_*`` variables the script prints. The embedded run keeps its tables on the local disk.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLUSTER_SH = REPO / "scripts" / "cluster.sh"

# Page read, edit save, small-CR submit and approve, the 10,000-cell approval (issue 14, section 5).
WORKLOADS = ("page_read", "edit_save", "small_submit", "small_approve", "approve")

FACTOR = 2.0
MIN_ADDED_MS = 20.0
RULE = (
    f"a workload or step is named when its cluster/embedded ratio is at least {FACTOR:g}x the median ratio "
    f"of the others at its level (the other workloads; the other steps of its workload) and the cluster "
    f"adds at least {MIN_ADDED_MS:g} ms to it"
)
TOPOLOGY = (
    "Spark standalone master + 2 workers (1 core, 1 GB each) + Spark Connect server + PostgreSQL catalog, "
    "all on 127.0.0.1"
)
EMBEDDED = "local Spark in the bench process + SQLite catalog"
S3 = "not measured: both runs keep their tables on the local disk (--s3 puts the cluster run's on S3)"
S3_ON = (
    "the cluster run's tables in an S3 bucket (moto_server on loopback, over HTTP: s3a, httpfs, delta-rs); "
    "the embedded run's on the local disk"
)


class ClusterRunError(RuntimeError):
    """The cluster or the cluster run failed; the message is one line."""


# ---------------------------------------------------------------- the comparison


@dataclass(frozen=True)
class Row:
    """One workload or step: its embedded and cluster medians, their ratio and the verdict."""

    label: str
    embedded_ms: float | None
    cluster_ms: float | None
    reference: float | None = None  # the median ratio of the others at this level
    grows: bool = False

    @property
    def ratio(self) -> float | None:
        if self.embedded_ms is None or self.cluster_ms is None or self.embedded_ms <= 0:
            return None
        return self.cluster_ms / self.embedded_ms

    @property
    def added_ms(self) -> float | None:
        if self.embedded_ms is None or self.cluster_ms is None:
            return None
        return self.cluster_ms - self.embedded_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "embedded_median_ms": _round(self.embedded_ms),
            "cluster_median_ms": _round(self.cluster_ms),
            "ratio": _round(self.ratio),
            "others_median_ratio": _round(self.reference),
            "grows": self.grows,
        }


@dataclass(frozen=True)
class WorkloadComparison:
    total: Row  # the core path's median; ``label`` is the workload name
    steps: list[Row]
    load: tuple[float | None, float | None] = (None, None)  # 1-min load average at the end, embedded and cluster

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.total.label,
            **self.total.to_json(),
            "load_1min": {"embedded": self.load[0], "cluster": self.load[1]},
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass(frozen=True)
class Comparison:
    workloads: list[WorkloadComparison]

    def named(self) -> list[str]:
        """What grows with the topology: ``workload`` or ``workload / step``."""
        found = [w.total.label for w in self.workloads if w.total.grows]
        found += [f"{w.total.label} / {s.label}" for w in self.workloads for s in w.steps if s.grows]
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": RULE,
            "factor": FACTOR,
            "min_added_ms": MIN_ADDED_MS,
            "workloads": [w.to_json() for w in self.workloads],
            "grows": self.named(),
        }


def judge(rows: list[Row]) -> list[Row]:
    """``rows`` with ``reference`` and ``grows`` set by ``RULE`` (each row against the median of the others)."""
    judged = []
    for i, row in enumerate(rows):
        others = [r.ratio for j, r in enumerate(rows) if j != i and r.ratio is not None]
        reference = statistics.median(others) if others else None
        grows = (
            row.ratio is not None
            and reference is not None
            and row.ratio >= FACTOR * reference
            and (row.added_ms or 0.0) >= MIN_ADDED_MS
        )
        judged.append(Row(row.label, row.embedded_ms, row.cluster_ms, reference, grows))
    return judged


def _median(timing: dict[str, Any] | None) -> float | None:
    return None if timing is None else float(timing["median_ms"])


def compare(embedded: list[dict[str, Any]], cluster: list[dict[str, Any]]) -> Comparison:
    """Workloads (``WorkloadResult.to_json`` documents) of both runs, matched by name, steps by label.

    A workload or step missing from one run gets no ratio and is never named.
    """
    on_cluster = {w["name"]: w for w in cluster}
    names = [w["name"] for w in embedded] + [n for n in on_cluster if n not in {w["name"] for w in embedded}]
    by_name = {w["name"]: w for w in embedded}
    totals, step_lists, loads = [], [], []
    for name in names:
        here, there = by_name.get(name), on_cluster.get(name)
        loads.append(((here or {}).get("load_1min"), (there or {}).get("load_1min")))
        totals.append(Row(name, _median(here and here["core"]), _median(there and there["core"])))
        here_steps = {s["label"]: s for s in (here or {}).get("breakdown", [])}
        there_steps = {s["label"]: s for s in (there or {}).get("breakdown", [])}
        labels = list(here_steps) + [label for label in there_steps if label not in here_steps]
        step_lists.append(
            judge([Row(label, _median(here_steps.get(label)), _median(there_steps.get(label))) for label in labels])
        )
    return Comparison(
        [WorkloadComparison(t, s, load) for t, s, load in zip(judge(totals), step_lists, loads, strict=True)]
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def _load(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _line(row: Row, indent: str, width: int) -> str:
    ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
    label = f"{indent}{row.label}"
    text = f"{label:<{width}}  {_ms(row.embedded_ms):>10}  {_ms(row.cluster_ms):>10}  {ratio:>8}"
    if row.grows and row.reference is not None:
        text += f"  <- grows: {row.ratio:.1f}x against {row.reference:.1f}x for the others, +{_ms(row.added_ms)}"
    return text


def render(comparison: Comparison, *, cluster_note: str = "", s3: bool = False) -> str:
    """The console table: workload, embedded median, cluster median, ratio; steps indented below."""
    rows = [(w.total, "") for w in comparison.workloads]
    rows += [(s, "    ") for w in comparison.workloads for s in w.steps]
    width = max([len("workload / step"), *(len(indent) + len(r.label) for r, indent in rows)])
    lines = [
        "== cluster vs embedded (same run): median of the core path, cluster/embedded ratio",
        f"  embedded: {EMBEDDED}",
        f"  cluster:  {TOPOLOGY}{cluster_note}",
        f"  S3:       {S3_ON if s3 else S3}",
        "",
        f"  {'workload / step':<{width}}  {'embedded':>10}  {'cluster':>10}  {'ratio':>8}",
    ]
    for workload in comparison.workloads:
        lines.append("  " + _line(workload.total, "", width))
        lines.extend("  " + _line(step, "    ", width) for step in workload.steps)
    loads = [f"{w.total.label} {_load(w.load[0])}/{_load(w.load[1])}" for w in comparison.workloads]
    lines += ["", f"  machine load (1-min average) at the end of each, embedded/cluster: {', '.join(loads)}"]
    lines.append(f"  rule: {RULE}")
    named = comparison.named()
    lines.append(f"  grows with the topology: {'; '.join(named) if named else 'nothing, by this rule'}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the cluster and the child run


@dataclass(frozen=True)
class Cluster:
    exports: dict[str, str]  # SPARK_REMOTE, OREO_DATABASE_URL
    started: bool  # by this run (stopped at its end)
    state_dir: str
    s3: bool = False  # started with ``up --s3``: the exports carry DELTA_DATA_ROOT and the AWS variables


def parse_exports(text: str) -> dict[str, str]:
    """The ``export NAME=value`` lines ``scripts/cluster.sh up`` prints (values are shell-quoted)."""
    import shlex

    values = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            name, value = line.removeprefix("export ").split("=", 1)
            values[name] = shlex.split(value)[0] if value else ""
    return values


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _state_dir() -> str:
    """``$OREO_CLUSTER_DIR`` from where the bench was started (the script runs from the repo)."""
    return str(Path(os.environ.get("OREO_CLUSTER_DIR") or REPO / "data" / "cluster").absolute())


def _script(command: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    # The cluster runs with this interpreter (a worktree has no .venv of its own).
    python = os.environ.get("OREO_PYTHON") or sys.executable
    env = {**os.environ, "OREO_PYTHON": python, "OREO_CLUSTER_DIR": _state_dir()}
    return subprocess.run([str(CLUSTER_SH), command, *args], env=env, cwd=REPO, text=True, check=False, **kwargs)


@contextmanager
def loopback_cluster(s3: bool = False) -> Iterator[Cluster]:
    """The cluster of ``$OREO_CLUSTER_DIR``: reused and left running when it runs, else started
    here and stopped (``scripts/cluster.sh down``) on the way out, failures and Ctrl-C included.
    With ``s3`` it is ``up --s3`` (a running cluster without S3 makes ``up`` fail)."""
    state_dir = _state_dir()
    running = _script("status", capture_output=True).returncode == 0
    try:
        if running:
            _log(f"reusing the cluster running from {state_dir}; it stays up")
        else:
            up_cmd = "up --s3" if s3 else "up"
            _log(f"starting the loopback cluster in {state_dir} (scripts/cluster.sh {up_cmd}, a minute or two)")
        up = _script("up", *(["--s3"] if s3 else []), stdout=subprocess.PIPE)  # its progress goes to our stderr
        if up.returncode != 0:
            raise ClusterRunError(f"scripts/cluster.sh up failed (exit {up.returncode}); its messages are above")
        exports = parse_exports(up.stdout)
        if not {"SPARK_REMOTE", "OREO_DATABASE_URL"} <= set(exports):
            raise ClusterRunError(f"scripts/cluster.sh up printed no SPARK_REMOTE/OREO_DATABASE_URL: {up.stdout!r}")
        if s3 and not str(exports.get("DELTA_DATA_ROOT", "")).startswith("s3://"):
            raise ClusterRunError(f"scripts/cluster.sh up --s3 printed no s3:// DELTA_DATA_ROOT: {up.stdout!r}")
        yield Cluster(exports, started=not running, state_dir=state_dir, s3=s3)
    finally:
        if not running:
            _log("stopping the cluster this run started (scripts/cluster.sh down)")
            _script("down")  # it reports on stderr


def run_child(cluster: Cluster, data_dir: Path, args: list[str]) -> tuple[dict[str, Any], str]:
    """``python -m bench --cluster-worker OUT ARGS`` against ``cluster``: its JSON results and its report.

    Its progress goes to stderr as it runs; ``data_dir`` is its ``OREO_BENCH_DATA``.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    out = data_dir / "results.json"
    out.unlink(missing_ok=True)
    env = {**os.environ, **cluster.exports, "OREO_BENCH_DATA": str(data_dir)}
    env.pop("DELTA_DATA_ROOT", None)  # the child sets its own: under data_dir, or in the cluster's bucket
    env.pop("OREO_BENCH_DATA_ROOT", None)
    if cluster.s3:
        env["OREO_BENCH_DATA_ROOT"] = cluster.exports["DELTA_DATA_ROOT"].rstrip("/") + "/bench"
    _log(f"... and on the cluster, in a child process (SPARK_REMOTE={cluster.exports['SPARK_REMOTE']})")
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--cluster-worker", str(out), *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not out.is_file():
        sys.stderr.write(done.stdout)
        raise ClusterRunError(f"the cluster run failed (exit {done.returncode}); its messages are above")
    return dict(json.loads(out.read_text())), done.stdout.rstrip("\n")


def section(comparison: Comparison, cluster: Cluster, child: dict[str, Any]) -> dict[str, Any]:
    """The ``cluster`` section of the results JSON."""
    return {
        "topology": TOPOLOGY,
        "embedded": EMBEDDED,
        "s3": S3_ON if cluster.s3 else S3,
        "data_root": cluster.exports.get("DELTA_DATA_ROOT"),
        "spark_remote": cluster.exports["SPARK_REMOTE"],
        "catalog": cluster.exports["OREO_DATABASE_URL"],
        "started_by_bench": cluster.started,
        **comparison.to_json(),
        "run": child,  # the cluster run's own results document, as the embedded one is at the top level
    }
