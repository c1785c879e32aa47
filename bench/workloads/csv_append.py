"""Appending a 1,000,000-row CSV end to end, against a bare Spark CSV-to-Delta append.

Each round gets two fresh targets of 1,000 seed customers (untimed): an Oreo dataset
keyed by ``customer_id`` and a bare Delta table written from the same seed. Then:

* core: ``core.imports.import_file`` (strict UTF-8 and shape check, the raw file kept
  under ``imports/``, ``converted.parquet``, key checks, the Spark-written staging
  table, GX validation) and ``core.merge.approve_change_request`` (conflict search,
  validation reuse, the MERGE, catalog sync, cleanup) - upload to merged;
* bare Spark: ``spark.read.csv(header, inferSchema)`` then a Delta append of the same file.

Targets: core >= 100,000 rows/s (a median under 10 s for 1M rows) and <= 2x the bare time.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from bench._data import APPROVER, DATA_DIR, PROJECT, READER, ensure_approver
from bench._harness import BenchConfig, Timing, WorkloadResult, expect, time_call

NAME = "csv_append"
MAX_RATIO = 2.0
MIN_ROWS_PER_S = 100_000
SEED_ROWS = 1_000


def _csv(rows: int) -> Path:
    """The CSV of ``rows`` customers after the seed ones (written once, then reused)."""
    import pyarrow.compute as pc
    from pyarrow import csv

    from core.demo import customers_table

    path = DATA_DIR / f"append_{rows}.csv"
    if not path.is_file():
        table = customers_table(rows, seed=11)
        ids = pc.add(table.column("customer_id"), SEED_ROWS)  # clear of the seed's ids
        table = table.set_column(0, "customer_id", ids)
        tmp = path.with_suffix(".tmp")
        csv.write_csv(table, tmp)
        tmp.replace(path)
    return path


def run(config: BenchConfig) -> WorkloadResult:
    import pyarrow.parquet as pq
    from pyarrow import csv

    from core import auth, datasets, engine, imports, merge
    from core.catalog import open_catalog
    from core.demo import customers_table

    ensure_approver()
    catalog = open_catalog()
    editor, approver = auth.get_user(catalog, READER), auth.get_user(catalog, APPROVER)
    admin = auth.SYSTEM
    source = _csv(config.rows)
    spark = engine.get_spark()
    seed_dir = Path(tempfile.mkdtemp(prefix="oreo-bench-seed-"))
    seed = seed_dir / "seed.parquet"
    pq.write_table(customers_table(SEED_ROWS, seed=3), seed)
    seed_csv = seed_dir / "seed.csv"
    csv.write_csv(customers_table(SEED_ROWS, seed=3), seed_csv)
    rounds = iter(range(10**6))

    def fresh_dataset() -> str:
        dataset_id = f"append_{config.rows}_{next(rounds)}_{engine.new_commit('b', 'b').commit_id[:8]}"
        datasets.create_dataset(catalog, PROJECT, dataset_id, seed, key="customer_id", actor=admin)
        return dataset_id

    def fresh_bare() -> str:
        path = DATA_DIR / "bare_append" / f"t{next(rounds)}_{engine.new_commit('b', 'b').commit_id[:8]}"
        # Seeded the way the bare path reads its input, so the inferred types agree.
        spark.read.option("header", True).option("inferSchema", True).csv(str(seed_csv)).write.format("delta").save(
            str(path)
        )
        return str(path)

    def core_append(dataset_id: str) -> None:
        cr, _ = imports.import_file(catalog, PROJECT, dataset_id, source, actor=editor)
        merged = merge.approve_change_request(catalog, cr.id, actor=approver)
        expect(merged.merged_version == 1, f"merged as {merged.merged_version}")

    def bare_append(path: str) -> None:
        frame = spark.read.option("header", True).option("inferSchema", True).csv(str(source))
        frame.write.format("delta").mode("append").save(path)

    samples: dict[str, list[tuple[float, float]]] = {"core import + approve": [], "bare Spark read.csv -> Delta": []}
    targets = {"core import + approve": fresh_dataset, "bare Spark read.csv -> Delta": fresh_bare}
    calls = {"core import + approve": core_append, "bare Spark read.csv -> Delta": bare_append}
    repeats = max(1, min(config.spark_repeats, 3))
    for round_no in range(repeats + 1):  # round 0 warms both paths up
        order = list(samples)
        if round_no % 2:
            order.reverse()
        for label in order:
            target = targets[label]()
            print(f"[bench] csv_append round {round_no}: {label}", file=sys.stderr, flush=True)
            sample = time_call(lambda label=label, target=target: calls[label](target))  # type: ignore[misc]
            if round_no:
                samples[label].append(sample)
    core, bare = (
        Timing(label=label, samples_ms=tuple(w for w, _ in s), cpu_ms=tuple(c for _, c in s), warmup=1)
        for label, s in samples.items()
    )
    rate = config.rows / (core.median / 1000.0)
    return WorkloadResult(
        name=NAME,
        description=f"append a {config.rows:,}-row CSV ({source.stat().st_size / 2**20:.0f} MB) end to end",
        core=core,
        baselines=[bare],
        ratio_baseline=bare.label,
        max_ratio=MAX_RATIO,
        max_median_ms=config.rows / MIN_ROWS_PER_S * 1000.0,
        notes={
            "core rows/s": round(rate),
            "bare rows/s": round(config.rows / (bare.median / 1000.0)),
            "target rows": f"{SEED_ROWS:,} seed rows, keyed by customer_id (a fresh table each round)",
            "core includes": "UTF-8/shape checks, raw + converted.parquet kept, key checks, Spark staging, "
            "GX validation, conflict search, MERGE, catalog sync, cleanup",
        },
    )
