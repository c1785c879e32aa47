"""A 5-row MERGE on Oreo's main-table layout, as Oreo runs it, against the bare MERGE on today's layout.

Two copies of the same 1,000,000 customers (``core.demo.customers_table`` with their
``row_id``), built once under ``bench/.data/merge_layout/`` and reused:

* **Oreo's layout**: written by ``core.datasets.write_converted`` and ``_write_main``, as
  ``create_dataset`` writes main: sorted by ``row_id`` and split in order into files of about
  ``engine.MAIN_FILE_BYTES``, so each file's ``row_id`` min/max statistics cover a narrow range;
* **today's layout**: the same ``CREATE TABLE ... AS SELECT`` with the same table
  properties and no sort (what ``_write_main`` did before), i.e. a plain Spark write.

Every round stages 5 rows (untimed; a Delta table shaped like a change request's staging
table) and runs, interleaved, on each layout:

* the bare delta-spark MERGE a user would write: ``DeltaTable.forPath(main).merge(staging,
  "t.row_id = s.row_id").whenMatchedUpdate(city)``;
* Oreo's MERGE as ``approve_change_request`` runs it (``core.merge.merge_staged``): the
  staged rows read by DuckDB and handed to Spark in memory as a broadcast source,
  ``t.row_id IN (<staged ids>)`` in the ON clause (file skipping on ``row_id``), adaptive
  execution off for the small statement.

The 5 rows are 5 consecutive customers from a random start, fresh each MERGE, as in the
``approve`` workload: a small change request edits rows of the page its author looks at. 5
rows scattered over the whole table touch up to 5 files of Oreo's layout and gain less.

Target (issue 12): the small MERGE on Oreo's layout at least 2x faster than the bare MERGE
on today's layout (core = Oreo's MERGE on Oreo's layout, baseline = the bare MERGE on
today's layout, max ratio 0.5). The bare MERGE on Oreo's layout is shown too: a join with
no literal bound on ``row_id`` cannot skip files, so the layout alone gains it little.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

from bench._data import DATA_DIR
from bench._harness import BenchConfig, Timing, WorkloadResult, expect, time_call

NAME = "merge_layout"
ROWS_PER_MERGE = 5
MAX_RATIO = 0.5
WARMUP_ROUNDS = 2
MIN_REPEATS = 7
# The copies gain a few files per MERGE (deletion vectors, new rows); past this many
# versions they are rebuilt so a long series of runs keeps measuring the layouts as written.
REBUILD_AFTER_VERSIONS = 300

_BARE_OREO = "bare MERGE, Oreo's layout"
_BARE_TODAY = "bare MERGE, today's layout"
_OREO_OREO = "Oreo's MERGE, Oreo's layout"
_OREO_TODAY = "Oreo's MERGE, today's layout"


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _build(rows: int) -> tuple[Path, Path, list[str]]:
    """(Oreo's copy, today's copy, every row_id), built once per row count."""

    from core import datasets, engine
    from core.demo import customers_table
    from core.layout import dataset_layout

    root = DATA_DIR / "merge_layout" / str(rows)
    oreo = dataset_layout(root, "bench", "oreo_layout")
    today = root / "today_layout"
    ids_file = root / "row_ids.txt"
    fresh = all((p / "_delta_log").is_dir() for p in (oreo.main, today)) and ids_file.is_file()
    if fresh and max(engine.latest_version(oreo.main), engine.latest_version(today)) < REBUILD_AFTER_VERSIONS:
        return oreo.main, today, ids_file.read_text().split()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _log(f"building both layouts of {rows:,} rows under {root}; later runs reuse them")
    spark = engine.get_spark()
    with tempfile.TemporaryDirectory(prefix="oreo-bench-") as tmp:
        converted = Path(tmp) / "converted.parquet"
        table = datasets.with_row_ids(customers_table(rows), "customer_id")
        datasets.write_converted(table, converted)
        ids_file.write_text("\n".join(table.column("row_id").to_pylist()))
        datasets._write_main(oreo, converted, engine.new_commit("bench", "create_dataset"))
        view = f"bench_today_{uuid.uuid4().hex}"
        spark.read.parquet(str(converted)).createOrReplaceTempView(view)
        spark.sql(
            f"CREATE TABLE {engine.delta_ref(today)} USING DELTA "
            f"TBLPROPERTIES ({engine.main_table_properties_sql()}) AS SELECT * FROM {view}"
        ).collect()
        spark.catalog.dropTempView(view)
    return oreo.main, today, ids_file.read_text().split()


def _files(main: Path) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(str(main)).file_uris())


def run(config: BenchConfig) -> WorkloadResult:
    """Alternate the four MERGEs, each on freshly staged rows."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from core import engine, merge
    from core.change_requests import CHANGED_COLUMN, OP_COLUMN

    oreo_main, today_main, ids = _build(config.rows)
    ids = sorted(ids, key=lambda i: (len(i), i))  # customer_id order (row_id is its text)
    spark = engine.get_spark()
    rng = random.Random(12)
    stage_root = DATA_DIR / "merge_layout" / "staging"
    shutil.rmtree(stage_root, ignore_errors=True)
    run_tag = uuid.uuid4().hex[:6]
    counter = iter(range(10**6))

    def stage(main: Path) -> tuple[Path, list[str]]:
        """A staging table of 5 random rows of ``main`` with a new ``city``."""
        n = next(counter)
        start = rng.randrange(len(ids) - ROWS_PER_MERGE)
        picked = ids[start : start + ROWS_PER_MERGE]
        path = stage_root / f"s{n}"
        (
            spark.read.format("delta")
            .load(str(main))
            .where(F.col("row_id").isin(picked))
            .withColumn("city", F.lit(f"city {run_tag}-{n}"))
            .withColumn(OP_COLUMN, F.lit("update"))
            .withColumn(CHANGED_COLUMN, F.array(F.lit("city")))
            .write.format("delta")
            .save(str(path))
        )
        return path, picked

    def bare(main: Path, staging: Path, picked: list[str]) -> None:
        source = spark.read.format("delta").load(str(staging))
        (
            DeltaTable.forPath(spark, str(main))
            .alias("t")
            .merge(source.alias("s"), "t.row_id = s.row_id")
            .whenMatchedUpdate(set={"city": "s.city"})
            .execute()
        )

    def oreo(main: Path, staging: Path, picked: list[str]) -> None:
        merge.merge_staged(main, staging, engine.new_commit("bench", "merge_layout"))

    def updated(main: Path, staging: Path) -> int:
        want = spark.read.format("delta").load(str(staging)).select("row_id", "city")
        return spark.read.format("delta").load(str(main)).join(want, ["row_id", "city"], "left_semi").count()

    runs = {
        _BARE_OREO: (bare, oreo_main),
        _BARE_TODAY: (bare, today_main),
        _OREO_OREO: (oreo, oreo_main),
        _OREO_TODAY: (oreo, today_main),
    }
    files_before = {label: _files(main) for label, main in (("oreo", oreo_main), ("today", today_main))}
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in runs}
    labels = list(runs)
    # Each path's first MERGEs run its code cold (the JIT, Delta's caches, a child session);
    # an app approves warm, so two untimed rounds come first, and more timed rounds than
    # other Spark workloads steady the medians of these short statements.
    repeats = max(MIN_REPEATS, config.spark_repeats)
    for round_no in range(repeats + WARMUP_ROUNDS):
        shift = round_no % len(labels)
        for label in labels[shift:] + labels[:shift]:
            fn, main = runs[label]
            staging, picked = stage(main)
            _log(f"merge_layout round {round_no}: {label}")
            sample = time_call(lambda fn=fn, main=main, staging=staging, picked=picked: fn(main, staging, picked))  # type: ignore[misc]
            _log(f"merge_layout round {round_no}: {label}: {sample[0]:.0f} ms")
            expect(updated(main, staging) == ROWS_PER_MERGE, f"{label}: the staged rows did not land")
            shutil.rmtree(staging, ignore_errors=True)
            if round_no >= WARMUP_ROUNDS:
                samples[label].append(sample)
    timings = {
        label: Timing(
            label=label, samples_ms=tuple(w for w, _ in s), cpu_ms=tuple(c for _, c in s), warmup=WARMUP_ROUNDS
        )
        for label, s in samples.items()
    }
    notes: dict[str, object] = {
        "rows per MERGE": f"{ROWS_PER_MERGE} consecutive customers from a random start, fresh each MERGE",
        "files before (Oreo's / today's layout)": f"{files_before['oreo']} / {files_before['today']}",
        "main file target bytes": engine.MAIN_FILE_BYTES,
    }
    notes["bare MERGE: Oreo's layout / today's layout"] = round(
        timings[_BARE_OREO].median / timings[_BARE_TODAY].median, 2
    )
    notes["today's layout: bare / Oreo's MERGE"] = round(timings[_BARE_TODAY].median / timings[_OREO_TODAY].median, 2)
    notes["Oreo's layout: bare / Oreo's MERGE"] = round(timings[_BARE_OREO].median / timings[_OREO_OREO].median, 2)
    return WorkloadResult(
        name=NAME,
        description=(
            f"a {ROWS_PER_MERGE}-row MERGE into {config.rows:,} rows: Oreo's MERGE on Oreo's table layout "
            "(clustered by row_id) vs the bare delta-spark MERGE on today's layout"
        ),
        core=timings[_OREO_OREO],
        baselines=[timings[_BARE_TODAY], timings[_BARE_OREO], timings[_OREO_TODAY]],
        ratio_baseline=_BARE_TODAY,
        max_ratio=MAX_RATIO,
        notes=notes,
    )
