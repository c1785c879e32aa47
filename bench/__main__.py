"""``python -m bench``: run the workloads, print each beside its bare engine(s), save JSON.

Examples::

    python -m bench                      # every workload, 1,000,000-row table
    python -m bench --only page_read     # one workload
    python -m bench --rows 100000 --no-spark
    python -m bench --cluster            # the five issue-14 workloads embedded, then on the loopback cluster
    python -m bench --cluster --s3       # ... with the cluster's tables in an S3 bucket (cluster.sh up --s3)

Exits 0 even when a target is missed (the report says FAIL); ``--strict`` exits 1 then.
``--cluster`` is described in ``bench/_cluster.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from bench import _cluster
from bench._data import DATA_DIR, configure_environment
from bench._harness import RESULTS_DIR, BenchConfig, WorkloadResult, report, write_json

WORKER = "--cluster-worker"


def _parser(names: list[str]) -> argparse.ArgumentParser:
    defaults = BenchConfig()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=names, help="run only this workload (repeatable)")
    parser.add_argument("--rows", type=int, default=defaults.rows, help="main table size (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=defaults.repeats, help="timed runs per path")
    parser.add_argument("--warmup", type=int, default=defaults.warmup, help="untimed runs before timing")
    parser.add_argument("--spark-repeats", type=int, default=defaults.spark_repeats, help="timed bare-Spark runs")
    parser.add_argument("--no-spark", action="store_true", help="skip the bare-Spark baselines")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a workload misses a target")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help=f"also run {', '.join(_cluster.WORKLOADS)} (or the --only ones) on the loopback cluster "
        "(scripts/cluster.sh; reused when up, else started and stopped) and report cluster/embedded ratios",
    )
    parser.add_argument(
        "--s3",
        action="store_true",
        help="with --cluster: the cluster run keeps its tables on S3 (scripts/cluster.sh up --s3)",
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS_DIR / "latest.json", help="where the JSON goes (default %(default)s)"
    )
    parser.add_argument(WORKER, type=Path, help=argparse.SUPPRESS)  # the child of --cluster: JSON to this path
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the selected workloads; return the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    worker = WORKER in argv
    if "--cluster" in argv and not worker:
        os.environ.pop("SPARK_REMOTE", None)  # the embedded half runs embedded, whatever the shell says
    configure_environment(cluster=worker)  # before anything reads core settings
    from bench.workloads import WORKLOADS

    args = _parser(list(WORKLOADS)).parse_args(argv)
    if args.rows < 2 or args.repeats < 1 or args.warmup < 0 or args.spark_repeats < 1:
        print("error: --rows must be >= 2, --repeats and --spark-repeats >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    names = args.only or list(_cluster.WORKLOADS if args.cluster else WORKLOADS)
    outside = [n for n in names if n not in _cluster.WORKLOADS]
    if args.s3 and not args.cluster:
        print("error: --s3 goes with --cluster", file=sys.stderr)
        return 2
    if args.cluster and outside:
        print(
            f"error: --cluster runs {', '.join(_cluster.WORKLOADS)}; not {', '.join(outside)}",
            file=sys.stderr,
        )
        return 2
    config = BenchConfig(
        rows=args.rows,
        warmup=args.warmup,
        repeats=args.repeats,
        spark_repeats=args.spark_repeats,
        spark=not args.no_spark,
    )
    if args.cluster:
        try:
            return _with_cluster(names, config, args.results, strict=args.strict, s3=args.s3)
        except _cluster.ClusterRunError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    results: list[WorkloadResult] = []
    where = " on the cluster" if args.cluster_worker else ""
    try:
        for name in names:
            print(f"[bench] running {name}{where}", file=sys.stderr, flush=True)
            results.append(WORKLOADS[name](config))
    finally:
        from core.engine import stop_spark

        stop_spark()
    print(report(results))
    if args.cluster_worker:
        write_json(results, config, path=args.cluster_worker)
        return 0
    path = write_json(results, config, path=args.results)
    print(f"results written to {path}")
    return 1 if args.strict and not all(r.passed for r in results) else 0


def _with_cluster(names: list[str], config: BenchConfig, out: Path, *, strict: bool, s3: bool = False) -> int:
    """Each workload embedded in this process, then at once on the cluster in a child process.

    Workload by workload, so load drift on the shared machine hits both sides of a ratio
    alike. Prints both reports and the comparison; the JSON gets a ``cluster`` section.
    """
    from bench.workloads import WORKLOADS
    from core.engine import stop_spark

    results: list[WorkloadResult] = []
    runs: list[dict[str, Any]] = []
    reports: list[str] = []
    with _cluster.loopback_cluster(s3) as cluster:
        try:
            for name in names:
                print(f"[bench] running {name} embedded", file=sys.stderr, flush=True)
                results.append(WORKLOADS[name](config))
                doc, text = _cluster.run_child(cluster, DATA_DIR / "cluster", [*_child_args(config), f"--only={name}"])
                runs.append(doc)
                reports.append(text)
        finally:
            stop_spark()
    on_cluster = [w for run in runs for w in run["workloads"]]
    print(report(results))
    print()
    print("== the same workloads on the cluster (each report from its child process)")
    print("\n\n".join(reports))
    comparison = _cluster.compare([r.to_json() for r in results], on_cluster)
    note = " (started by this run, stopped after)" if cluster.started else " (already running: reused, left up)"
    print()
    print(_cluster.render(comparison, cluster_note=note, s3=cluster.s3))
    child = {**runs[-1], "workloads": on_cluster}  # one document, as if one child had run them all
    path = write_json(results, config, path=out, extra={"cluster": _cluster.section(comparison, cluster, child)})
    print(f"results written to {path}")
    return 1 if strict and not all(r.passed for r in results) else 0


def _child_args(config: BenchConfig) -> list[str]:
    """The size and repeat options of this run, for the cluster run."""
    passed = [f"--rows={config.rows}", f"--repeats={config.repeats}", f"--warmup={config.warmup}"]
    passed.append(f"--spark-repeats={config.spark_repeats}")
    return passed if config.spark else [*passed, "--no-spark"]


if __name__ == "__main__":
    sys.exit(main())
