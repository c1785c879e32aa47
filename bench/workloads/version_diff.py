"""The first page of the diff between two versions of the 1,000,000-row table that differ in 100,000 rows.

Setup (untimed, every run): one Spark ``UPDATE`` changes ``city`` in 100,000 rows, so
the versions before and after it differ in 100,000 cells. Then:

* core: ``core.history.diff_versions(limit=100)`` - permission and version checks, the
  change-data-feed or snapshot comparison in DuckDB, paged, with its total and row counts;
* bare duckdb: a hand-written full outer join of the two snapshots on ``row_id`` that
  unnests every column and returns the first 100 differing cells.

Target: core median < 2 s.
"""

from __future__ import annotations

from bench._data import PROJECT, READER, ensure_customers
from bench._harness import BenchConfig, WorkloadResult, expect, measure_interleaved

NAME = "version_diff"
ROWS_CHANGED = 100_000
PAGE = 100
MAX_MEDIAN_MS = 2000.0
FIRST_ID = 100_001


def run(config: BenchConfig) -> WorkloadResult:
    from core import auth, datasets, engine, history, reads
    from core.catalog import open_catalog

    table = ensure_customers(config.rows)
    catalog = open_catalog()
    reader = auth.get_user(catalog, READER)
    changed = min(ROWS_CHANGED, config.rows // 2)
    before = engine.latest_version(table.path)
    start = FIRST_ID + (config.rows - changed) // 3
    commit = engine.new_commit("bench", "update", note="bench version diff")
    with engine.dml_session(commit) as spark:
        spark.sql(
            f"UPDATE {engine.delta_ref(table.path)} SET city = concat(city, ' ~') "
            f"WHERE customer_id >= {start} AND customer_id < {start + changed}"
        ).collect()
    after = engine.latest_version(table.path)
    datasets.sync_dataset(catalog, PROJECT, table.dataset_id, commit, version=after)
    columns = [c.name for c in reads.table_schema(table.path, after) if c.name != "row_id"]

    def core_page() -> object:
        page = history.diff_versions(catalog, PROJECT, table.dataset_id, before, after, actor=reader, limit=PAGE)
        expect(len(page.changes) == PAGE and page.total == changed, f"core diff {len(page.changes)}/{page.total}")
        return page

    q = reads.quote_ident
    cells = ", ".join(
        f"{{'c': {reads.quote_literal(c)}, 'o': CAST(a.{q(c)} AS VARCHAR), 'n': CAST(b.{q(c)} AS VARCHAR)}}"
        for c in columns
    )
    bare_sql = f"""
        WITH a AS (SELECT * FROM delta_scan(?, version => ?)),
        b AS (SELECT * FROM delta_scan(?, version => ?)),
        cells AS (SELECT row_id, unnest([{cells}]) AS cell FROM a FULL OUTER JOIN b USING (row_id))
        SELECT row_id, cell.c, cell.o, cell.n FROM cells WHERE cell.o IS DISTINCT FROM cell.n
        ORDER BY row_id, cell.c LIMIT {PAGE}
    """
    bare = reads.open_duckdb()
    main = str(table.path)

    def bare_page() -> object:
        found = bare.execute(bare_sql, [main, before, main, after]).fetchall()
        expect(len(found) == PAGE, f"bare diff returned {len(found)}")
        return found

    try:
        timed = measure_interleaved(
            {"core diff_versions (page 1)": core_page, "bare duckdb snapshot diff page": bare_page},
            warmup=min(config.warmup, 2),
            repeats=max(5, config.repeats // 3),
        )
    finally:
        bare.close()
    core, baseline = timed.values()
    return WorkloadResult(
        name=NAME,
        description=f"first {PAGE} entries of the diff of two versions differing in {changed:,} rows "
        f"({config.rows:,}-row table)",
        core=core,
        baselines=[baseline],
        ratio_baseline=baseline.label,
        max_median_ms=MAX_MEDIAN_MS,
        notes={"versions": f"{before} -> {after}", "change": f"city in {changed:,} rows"},
    )
