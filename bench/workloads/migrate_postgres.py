"""Migrating a 1,000,000-row PostgreSQL table into a new dataset, in rows per second.

A throwaway PostgreSQL cluster (``tests/pgserver.py``, Debian binaries) gets one table
of mixed types filled by ``generate_series`` (bigint key, integer, numeric(12,2), an
unconstrained numeric, double, boolean, text, varchar, date, timestamp with time zone,
NULLs every few rows). Each round migrates it once per path:

* core: ``core.migrate.migrate_postgres`` with ``--key id`` - target checks, the type
  profile, ``COPY ... TO STDOUT`` into pyarrow, the source checksums in PostgreSQL,
  ``create_dataset_from_table`` (row ids, the rows sorted by them and kept as the
  upload's Parquet copy, Spark CTAS, catalog sync, default rules, audit) and the Delta
  checksums in DuckDB;
* bare psycopg COPY -> pyarrow -> Spark Delta write: the same COPY parsed by pyarrow
  with the same schema, written to a Parquet file and saved by Spark as a Delta table -
  the engine work alone, no checks and no parity report;
* the same bare pipeline writing Oreo's main-table layout: a ``row_id`` column (the
  key as text) and the table range-partitioned and sorted by it
  (``engine.clustered_by_row_id``, as ``create_dataset`` writes ``main``). Shown for
  reference: the ratio target is checked against the plain bare pipeline.

The paths rotate (their order changes every round). Each created dataset is removed
after its round (untimed). The breakdown splits the core path by its progress steps.
Target (issue 12): core <= 1.5x the bare pipeline; rows per second are shown too.
While the rows are read and Spark writes them, PostgreSQL computes the row count and
table hash (a second connection in the reading one's snapshot) and DuckDB the
checksums of the rows handed to Spark (md5 only for the row texts and the text columns;
typed columns are summed) and infers the default rules from them; one cheap DuckDB read
of the stored table (inside the write step, before the rules are saved) compares its
fingerprint with those rows.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections import defaultdict
from functools import partial
from pathlib import Path

from bench._data import ADMIN, PROJECT, ensure_admin
from bench._harness import BenchConfig, Timing, WorkloadResult, expect, time_call

NAME = "migrate_postgres"
TABLE = "public.customers"

_DDL = """
CREATE TABLE customers (
    id bigint PRIMARY KEY,
    visits integer,
    balance numeric(12,2),
    ratio numeric,
    score double precision,
    active boolean,
    name text,
    code varchar(12),
    born date,
    seen timestamptz
)
"""
_FILL = """
INSERT INTO customers
SELECT i,
       (i * 7) % 1000,
       CASE WHEN i % 13 = 0 THEN NULL ELSE round((i % 100000) * 1.37, 2) END,
       round(i / 7.0, (i % 5)),
       CASE WHEN i % 17 = 0 THEN NULL ELSE sin(i) * 1000 END,
       CASE WHEN i % 11 = 0 THEN NULL ELSE i % 2 = 0 END,
       'customer ' || i || CASE WHEN i % 3 = 0 THEN ' Zoë Åsa' ELSE '' END,
       'C' || lpad((i % 100000)::text, 6, '0'),
       DATE '1950-01-01' + (i % 20000),
       TIMESTAMPTZ '2020-01-01 00:00:00+00' + i * INTERVAL '1 second 7 microseconds'
FROM generate_series(1, %s) AS i
"""
# Progress messages that open each step of the core path (see core.migrate).
_STEPS = (
    ("read (PostgreSQL hashes meanwhile, on a second connection)", "reading "),
    ("Delta types", "read "),
    ("write (create_dataset_from_table, Spark; PostgreSQL and DuckDB hash meanwhile)", "writing the Delta table"),
    ("check of the Delta table (DuckDB)", "checking the Delta table"),
)
MAX_RATIO = 1.5


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def run(config: BenchConfig) -> WorkloadResult:
    from tests.pgserver import postgres_cluster

    base = Path(tempfile.mkdtemp(prefix="oreo-bench-pg-"))
    try:
        with postgres_cluster(base) as url:
            return _run(config, url.replace("postgresql+psycopg://", "postgresql://"))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run(config: BenchConfig, dsn: str) -> WorkloadResult:
    import psycopg

    from core import auth, engine, migrate
    from core.catalog import DatasetRow, open_catalog
    from core.datasets import layout_for

    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_DDL)
        conn.execute(_FILL.replace("%s", str(int(config.rows))))
        conn.execute("VACUUM ANALYZE customers")
        size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('customers'))").fetchone()
        server = conn.execute("SHOW server_version").fetchone()
    _log(f"loaded {config.rows:,} rows into PostgreSQL in {time.perf_counter() - start:.1f} s")

    ensure_admin()
    catalog = open_catalog()
    admin = auth.get_user(catalog, ADMIN)
    spark = engine.get_spark()
    counter = iter(range(10**6))
    steps: dict[str, list[float]] = defaultdict(list)
    reports: list[migrate.ParityReport] = []

    def core_migrate(created: list[str]) -> None:
        dataset_id = f"migrated_{next(counter)}_{int(time.time())}"
        marks: list[tuple[float, str]] = []
        report = migrate.migrate_postgres(
            catalog,
            PROJECT,
            dataset_id,
            dsn=dsn,
            table=TABLE,
            key="id",
            actor=admin,
            progress=lambda fraction, message: marks.append((time.perf_counter(), message)),
        )
        expect(report.match and report.delta_rows == config.rows, f"core migration report {report.to_json()}")
        reports.append(report)
        marks.append((time.perf_counter(), "end"))
        for label, ms in _step_durations(marks).items():
            steps[label].append(ms)
        created.append(dataset_id)

    def drop(dataset_id: str) -> None:
        shutil.rmtree(layout_for(PROJECT, dataset_id).root, ignore_errors=True)
        with catalog.session() as s:
            row = s.get(DatasetRow, (PROJECT, dataset_id))
            if row is not None:
                s.delete(row)

    def bare_pipeline(clustered: bool) -> None:
        from psycopg import sql
        from pyarrow import csv

        with tempfile.TemporaryDirectory(prefix="oreo-bench-bare-") as tmp:
            folder = Path(tmp)
            with psycopg.connect(dsn) as conn:
                query = sql.SQL(
                    "COPY (SELECT id, visits, balance, ratio::numeric(38,4), score, active, name, code, "
                    "born - DATE '1970-01-01', "
                    "(date_part('epoch', date_trunc('second', seen))::bigint * 1000000"
                    " + date_part('microseconds', seen)::bigint % 1000000) FROM customers) TO STDOUT (FORMAT csv)"
                )
                with (folder / "copy.csv").open("wb") as out, conn.cursor().copy(query) as copy:
                    for chunk in copy:
                        out.write(chunk)
            import pyarrow as pa
            import pyarrow.parquet as pq

            names = ["id", "visits", "balance", "ratio", "score", "active", "name", "code", "born", "seen"]
            types = [
                pa.int64(),
                pa.int32(),
                pa.decimal128(12, 2),
                pa.decimal128(38, 4),
                pa.float64(),
                pa.bool_(),
                pa.string(),
                pa.string(),
                pa.int32(),
                pa.int64(),
            ]
            table = csv.read_csv(
                folder / "copy.csv",
                read_options=csv.ReadOptions(column_names=names, block_size=16 << 20),
                parse_options=csv.ParseOptions(newlines_in_values=True),
                convert_options=csv.ConvertOptions(
                    column_types=dict(zip(names, types, strict=True)),
                    null_values=[""],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=False,
                    true_values=["t"],
                    false_values=["f"],
                ),
            )
            table = table.set_column(8, "born", table.column("born").cast(pa.date32()))
            table = table.set_column(9, "seen", table.column("seen").cast(pa.timestamp("us", tz="UTC")))
            if clustered:
                table = table.add_column(0, "row_id", table.column("id").cast(pa.string()))
            path = folder / "rows.parquet"
            pq.write_table(table, path)
            frame = spark.read.parquet(str(path))
            if clustered:
                frame = engine.clustered_by_row_id(frame, engine.main_file_count(path.stat().st_size))
            frame.write.format("delta").save(str(folder / "delta"))
            expect(table.num_rows == config.rows, f"bare pipeline read {table.num_rows} rows")

    paths = {
        "core migrate_postgres": core_migrate,
        "bare COPY -> pyarrow -> Spark": lambda created: bare_pipeline(clustered=False),
        "bare, clustered by row_id (main's layout)": lambda created: bare_pipeline(clustered=True),
    }
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in paths}
    repeats = max(1, config.spark_repeats)
    for round_no in range(repeats + 1):  # round 0 warms every path up
        labels = list(paths)
        order = labels[round_no % len(labels) :] + labels[: round_no % len(labels)]
        for label in order:
            _log(f"migrate_postgres round {round_no}: {label}")
            created: list[str] = []
            sample = time_call(partial(paths[label], created))
            for dataset_id in created:
                drop(dataset_id)
            if round_no:
                samples[label].append(sample)
            elif paths[label] is core_migrate:
                for values in steps.values():
                    values.clear()  # the warm-up round's steps are not kept
    core, bare, clustered = (
        Timing(label=label, samples_ms=tuple(w for w, _ in s), cpu_ms=tuple(c for _, c in s), warmup=1)
        for label, s in samples.items()
    )
    breakdown = [Timing(label=label, samples_ms=tuple(values)) for label, values in steps.items()]
    last = reports[-1]
    return WorkloadResult(
        name=NAME,
        description=f"migrate a {config.rows:,}-row PostgreSQL table (10 mixed-type columns) into a new dataset",
        core=core,
        baselines=[bare, clustered],
        ratio_baseline=bare.label,
        max_ratio=MAX_RATIO,
        breakdown=breakdown,
        notes={
            "core rows/s (median)": round(config.rows / (core.median / 1000.0)),
            "bare rows/s (median)": round(config.rows / (bare.median / 1000.0)),
            "core rows/s (best)": round(config.rows / (core.minimum / 1000.0)),
            "bare rows/s (best)": round(config.rows / (bare.minimum / 1000.0)),
            "parity": f"match={last.match}, {last.source_rows:,} rows, {len(last.columns)} column checksums",
            "source": f"PostgreSQL {server[0] if server else '?'}, table {size[0] if size else '?'} on disk",
        },
    )


def _step_durations(marks: list[tuple[float, str]]) -> dict[str, float]:
    """Milliseconds from each step's first progress mark to the mark after it."""
    found = {}
    for label, prefix in _STEPS:
        index = next(i for i, (_, message) in enumerate(marks) if message.startswith(prefix))
        found[label] = (marks[index + 1][0] - marks[index][0]) * 1000.0
    return found
