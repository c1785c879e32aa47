"""A page of 100 rows at offset 500,000 of a 1,000,000-row main table.

Timed in one run:

* core: ``core.datasets.dataset_rows`` as the table page and ``oreo dataset rows`` call
  it (catalog lookup + permission check + schema + page query + total count), in the
  dataset's stable order (its key, ``customer_id``): a merge never moves rows;
* bare duckdb: one ``delta_scan`` page query in the table's natural (file) order on a
  fresh DuckDB connection that loads the same signed extension file;
* bare duckdb, key order: the same page with ``ORDER BY customer_id``, one query;
* bare spark: ``spark.read.format("delta").load(path).offset(...).limit(100).collect()``.

Targets: core median within 1.3x of the bare natural-order page and under 150 ms.
Core reads the ordered page in two steps (sort only the key column, then read
the page's rows within its key range, which lets DuckDB skip files and row groups), so
the stable order costs less than the natural order's scan to the offset. The core path
is also timed step by step, to show where any overhead goes.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import duckdb

from bench._data import PROJECT, READER, BenchTable, ensure_customers
from bench._harness import BenchConfig, Timing, WorkloadResult, expect, measure, measure_interleaved

if TYPE_CHECKING:
    from core.storage import Location

NAME = "page_read"
PAGE = 100
MAX_RATIO = 1.3
MAX_MEDIAN_MS = 150.0
BARE_DUCKDB = "bare duckdb"


def _bare_duckdb() -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB with the wheel's signed delta extension, configured like core's."""
    from core.reads import open_duckdb

    return open_duckdb()


def _layout(path: Location) -> str:
    """Parquet files and row groups of the table (the page query's cost depends on them)."""
    import pyarrow.parquet as pq

    from core import storage

    files = storage.glob(path, "*.parquet")
    groups: list[int] = []
    for file in files:
        where, filesystem = storage.arrow_target(file)
        meta = pq.ParquetFile(str(where), filesystem=filesystem).metadata
        groups.extend(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    return f"{len(files)} parquet file(s), {len(groups)} row group(s), largest {max(groups, default=0):,} rows"


def _time_spark(config: BenchConfig, path: Location, offset: int) -> tuple[Timing, float]:
    """Bare Spark page read, and how long getting the session took (not in the timing)."""
    from core.engine import get_spark
    from core.storage import spark_uri

    print("[bench] getting the Spark session for the bare Spark baseline (~15 s to start)", file=sys.stderr, flush=True)
    start = time.perf_counter()
    spark = get_spark()
    started_s = time.perf_counter() - start

    def read() -> object:
        rows = spark.read.format("delta").load(spark_uri(path)).offset(offset).limit(PAGE).collect()
        expect(len(rows) == PAGE, f"spark returned {len(rows)} rows")
        return rows

    timing = measure("bare spark", read, warmup=config.spark_warmup, repeats=config.spark_repeats)
    return timing, started_s


def run(config: BenchConfig) -> WorkloadResult:
    """Measure the page read on ``config.rows`` rows, at offset ``rows // 2``."""
    from core import auth, datasets, reads
    from core.catalog import open_catalog

    table: BenchTable = ensure_customers(config.rows)
    offset = config.rows // 2
    catalog = open_catalog()
    reader = auth.get_user(catalog, READER)
    path = str(table.path)

    def core_page() -> object:
        page = datasets.dataset_rows(catalog, PROJECT, table.dataset_id, actor=reader, limit=PAGE, offset=offset)
        expect(len(page.rows) == PAGE and page.total == config.rows, f"core returned {len(page.rows)}/{page.total}")
        return page

    bare = _bare_duckdb()
    page_sql = f"SELECT * FROM delta_scan(?) LIMIT {PAGE} OFFSET {offset}"

    def bare_page() -> object:
        rows = bare.execute(page_sql, [path]).to_arrow_table()
        expect(rows.num_rows == PAGE, f"duckdb returned {rows.num_rows} rows")
        return rows

    ordered_sql = f"SELECT * FROM delta_scan(?) ORDER BY customer_id LIMIT {PAGE} OFFSET {offset}"

    def bare_ordered_page() -> object:
        rows = bare.execute(ordered_sql, [path]).to_arrow_table()
        expect(rows.num_rows == PAGE, f"duckdb returned {rows.num_rows} rows")
        return rows

    # Same rows, same order: a fast wrong answer is no result.
    core_ids = list(core_page().rows["row_id"])  # type: ignore[attr-defined]
    expected_ids = bare.execute(ordered_sql, [path]).to_arrow_table().column("row_id").to_pylist()
    expect(core_ids == expected_ids, "core's stable-order page differs from bare DuckDB's ORDER BY customer_id")

    def bare_page_and_count() -> object:
        rows = bare.execute(page_sql, [path]).to_arrow_table()
        total = bare.execute("SELECT count(*) FROM delta_scan(?)", [path]).fetchone()
        expect(total is not None and total[0] == config.rows, f"duckdb counted {total}")
        return rows

    warm, reps = config.warmup, config.repeats
    timed = measure_interleaved(
        {
            "core dataset_rows": core_page,
            BARE_DUCKDB: bare_page,
            "bare duckdb page+count": bare_page_and_count,
            "bare duckdb, key order (one query)": bare_ordered_page,
        },
        warmup=warm,
        repeats=reps,
    )
    core, *baselines = timed.values()

    # The core path one step at a time, on core's own cursor.
    info = datasets.get_dataset(catalog, PROJECT, table.dataset_id, actor=reader)
    breakdown = list(
        measure_interleaved(
            {
                "get_dataset (catalog + permission)": lambda: datasets.get_dataset(
                    catalog, PROJECT, table.dataset_id, actor=reader
                ),
                "DESCRIBE schema (delta_scan)": lambda: reads.table_schema(table.path),
                "read_page in stable order (two-step page)": lambda: reads.read_page(
                    table.path,
                    version=info.version,
                    default_order=datasets.stable_order(info),
                    limit=PAGE,
                    offset=offset,
                    known_total=info.rows,
                ),
                "read_page in stable order, offset 0": lambda: reads.read_page(
                    table.path,
                    version=info.version,
                    default_order=datasets.stable_order(info),
                    limit=PAGE,
                    known_total=info.rows,
                ),
                "count(*) query (delta_scan)": lambda: reads.count_rows(table.path),
            },
            warmup=warm,
            repeats=reps,
        ).values()
    )
    bare.close()

    notes: dict[str, object] = {
        "table": f"{table.project_id}/{table.dataset_id}, {table.rows:,} rows, {_layout(table.path)}",
        "page": f"{PAGE} rows at offset {offset:,} in key order, read as user {READER!r} (editor)",
    }
    if table.created_in_s is not None:
        notes["table created in"] = f"{table.created_in_s:.1f} s (this run)"
    if config.spark:
        spark_timing, started_s = _time_spark(config, table.path, offset)
        baselines.append(spark_timing)
        notes["spark session start"] = (
            f"{started_s:.1f} s (not in the timing)" if started_s > 1 else "already running (it wrote the table)"
        )

    return WorkloadResult(
        name=NAME,
        description=f"a page of {PAGE} rows at offset {offset:,} of a {config.rows:,}-row main table",
        core=core,
        baselines=baselines,
        ratio_baseline=BARE_DUCKDB,
        max_ratio=MAX_RATIO,
        max_median_ms=MAX_MEDIAN_MS,
        breakdown=breakdown,
        notes=notes,
    )
