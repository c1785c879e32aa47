"""``python -m bench``: run the workloads, print each beside its bare engine(s), save JSON.

Examples::

    python -m bench                      # every workload, 1,000,000-row table
    python -m bench --only page_read     # one workload
    python -m bench --rows 100000 --no-spark

Exits 0 even when a target is missed (the report says FAIL); ``--strict`` exits 1 then.
"""

from __future__ import annotations

import argparse
import sys

from bench._data import configure_environment
from bench._harness import BenchConfig, WorkloadResult, report, write_json


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
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the selected workloads; return the exit code."""
    configure_environment()  # before anything reads core settings
    from bench.workloads import WORKLOADS

    args = _parser(list(WORKLOADS)).parse_args(argv)
    if args.rows < 2 or args.repeats < 1 or args.warmup < 0 or args.spark_repeats < 1:
        print("error: --rows must be >= 2, --repeats and --spark-repeats >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    config = BenchConfig(
        rows=args.rows,
        warmup=args.warmup,
        repeats=args.repeats,
        spark_repeats=args.spark_repeats,
        spark=not args.no_spark,
    )
    results: list[WorkloadResult] = []
    try:
        for name in args.only or list(WORKLOADS):
            print(f"[bench] running {name}", file=sys.stderr, flush=True)
            results.append(WORKLOADS[name](config))
    finally:
        from core.engine import stop_spark

        stop_spark()
    print(report(results))
    path = write_json(results, config)
    print(f"results written to {path}")
    return 1 if args.strict and not all(r.passed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
