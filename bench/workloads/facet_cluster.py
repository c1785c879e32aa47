"""A facet and a fingerprint clustering on 1,000,000 rows (issue 28 §4), each beside bare DuckDB.

* ``facet_filter`` - core: ``core.facets.dataset_facet`` of ``city`` on the 1,000,000-row
  customers table under two conditions (``plan in (pro, enterprise)`` and ``monthly_spend
  >= 100``): the catalog and permission check, the conditions checked against the schema,
  and one DuckDB query counting each value with the distinct count and the total. Bare
  DuckDB: the same ``GROUP BY city ... ORDER BY count DESC LIMIT 20`` on ``delta_scan``.
  Targets: core median <= 1.3x the bare query and under 300 ms.
* ``cluster_fingerprint`` - core: ``core.clusters.dataset_clusters`` (fingerprint) of a
  column of 1,000,000 rows holding about 50,000 distinct values (12,500 company names,
  each also misspelt three ways: case, spacing, punctuation and word order). Bare DuckDB:
  the query that computes the same keys (lower, strip_accents, punctuation removed, tokens
  sorted and de-duplicated) over the distinct values and keeps the values whose key another
  value shares, with their counts, in key order. Targets: <= 2x the bare query, under 5 s.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench._data import PROJECT, READER, BenchTable, ensure_customers, ensure_reader
from bench._harness import BenchConfig, WorkloadResult, expect, measure_interleaved

FACET = "facet_filter"
CLUSTER = "cluster_fingerprint"
LIMIT = 20
NAMES = 12_500


def run_facet(config: BenchConfig) -> WorkloadResult:
    """Time the facet of ``city`` under two conditions against the same GROUP BY on bare DuckDB."""
    from core import auth, datasets, facets
    from core.catalog import open_catalog
    from core.filters import parse_where
    from core.reads import open_duckdb

    table: BenchTable = ensure_customers(config.rows)
    catalog = open_catalog()
    reader = auth.get_user(catalog, READER)
    path = str(table.path)
    bare = open_duckdb()
    wheres = ["plan in (pro,enterprise)", "monthly_spend >= 100"]
    conditions = [parse_where(w) for w in wheres]
    # The version the catalog serves (another benchmark may be committing to the table meanwhile).
    version = datasets.get_dataset(catalog, PROJECT, table.dataset_id, actor=reader).version
    sql = (
        "SELECT city, count(*) AS n FROM delta_scan(?, version => ?) WHERE plan IN (?, ?) AND monthly_spend >= ? "
        "GROUP BY city ORDER BY n DESC, city LIMIT ?"
    )
    params = [path, version, "pro", "enterprise", 100.0, LIMIT]

    def core_facet() -> object:
        return facets.dataset_facet(catalog, PROJECT, table.dataset_id, "city", actor=reader, conditions=conditions)

    def bare_facet() -> object:
        return bare.execute(sql, params).fetchall()

    found = core_facet()
    expected = bare_facet()
    expect([(v.value, v.rows) for v in found.values] == expected, "core and bare DuckDB disagree on the top values")  # type: ignore[attr-defined]
    timed = measure_interleaved(
        {"core dataset_facet": core_facet, "bare duckdb group by": bare_facet},
        warmup=config.warmup,
        repeats=config.repeats,
    )
    core, *baselines = timed.values()
    bare.close()
    return WorkloadResult(
        name=FACET,
        description=f"the top {LIMIT} values of city among {found.rows:,} of {config.rows:,} rows matching "  # type: ignore[attr-defined]
        "2 conditions, with the distinct count and the total",
        core=core,
        baselines=baselines,
        ratio_baseline="bare duckdb group by",
        max_ratio=1.3,
        max_median_ms=300.0,
        notes={"table": f"{table.project_id}/{table.dataset_id}", "filter": " AND ".join(wheres)},
    )


def _names_table(rows: int) -> object:
    """``rows`` rows of ``company``: 12,500 names, each also spelt three other ways (about 50,000 values)."""
    import numpy as np
    import pyarrow as pa
    from faker import Faker

    fake = Faker("en_US")
    Faker.seed(28)
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < NAMES:
        name = f"{fake.company()} {fake.city_suffix()}"
        if name not in seen:
            seen.add(name)
            names.append(name)
    spellings = []
    for name in names:
        words = name.split()
        spellings += [name, name.upper(), "  ".join(words) + ".", ", ".join(reversed(words)).lower()]
    rng = np.random.default_rng(28)
    values = np.array(spellings, dtype=object)[rng.integers(0, len(spellings), rows)]
    return pa.table({"id": pa.array(np.arange(rows), pa.int64()), "company": pa.array(values, pa.string())})


def ensure_names(rows: int) -> BenchTable:
    """The ``names_<rows>`` dataset (key ``id``), made once through ``create_dataset`` and reused."""
    import pyarrow.parquet as pq

    from core import datasets
    from core.catalog import DatasetRow, open_catalog

    ensure_reader()
    catalog = open_catalog()
    dataset_id = f"names_{rows}"
    layout = datasets.layout_for(PROJECT, dataset_id)
    with catalog.session() as s:
        known = s.get(DatasetRow, (PROJECT, dataset_id)) is not None
    if known and (layout.main / "_delta_log").is_dir():
        return BenchTable(PROJECT, dataset_id, rows, layout.main, None)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="oreo-bench-") as tmp:
        source = Path(tmp) / "names.parquet"
        pq.write_table(_names_table(rows), source)  # type: ignore[arg-type]
        datasets.create_dataset(catalog, PROJECT, dataset_id, source, key="id")
    return BenchTable(PROJECT, dataset_id, rows, layout.main, time.perf_counter() - start)


def run_cluster(config: BenchConfig) -> WorkloadResult:
    """Time fingerprint clustering of ``company`` against the same keys and groups on bare DuckDB."""
    from core import auth, clusters
    from core.catalog import open_catalog
    from core.reads import open_duckdb

    table = ensure_names(config.rows)
    catalog = open_catalog()
    reader = auth.get_user(catalog, READER)
    bare = open_duckdb()
    key = clusters.fingerprint_sql("value")
    # The keys of the distinct values, and those shared by two or more values, as core asks for them.
    # Without the unpartitioned count DuckDB plans the key expression into the scan (the keys of all
    # 1,000,000 rows, not of the 50,000 values: 3-5x slower here), so that would flatter core.
    sql = (
        "SELECT key, value, n FROM (SELECT key, value, n, count(*) OVER (PARTITION BY key) AS size, "
        f"count(*) OVER () AS total FROM (SELECT value, n, {key} AS key FROM (SELECT company AS value, count(*) AS n "
        "FROM delta_scan(?) WHERE company IS NOT NULL GROUP BY company))) WHERE size > 1 AND key <> '' "
        "ORDER BY key, n DESC, value"
    )

    def core_clusters() -> object:
        return clusters.dataset_clusters(catalog, PROJECT, table.dataset_id, "company", actor=reader)

    def bare_clusters() -> object:
        return bare.execute(sql, [str(table.path)]).fetchall()

    found = core_clusters()
    expected = bare_clusters()
    mine = {c.key: [v.value for v in c.values] for c in found.clusters}  # type: ignore[attr-defined]
    theirs: dict[str, list[str]] = {}
    for k, value, _n in expected:  # type: ignore[attr-defined]
        theirs.setdefault(k, []).append(value)
    expect(mine == theirs, "core and bare DuckDB disagree on the clusters")
    timed = measure_interleaved(
        {"core dataset_clusters": core_clusters, "bare duckdb keys and groups": bare_clusters},
        warmup=min(config.warmup, 1),
        repeats=max(3, config.repeats // 3),
    )
    core, *baselines = timed.values()
    bare.close()
    return WorkloadResult(
        name=CLUSTER,
        description=f"fingerprint clusters of company: {len(mine):,} clusters among "
        f"{found.distinct:,} distinct values of {config.rows:,} rows",  # type: ignore[attr-defined]
        core=core,
        baselines=baselines,
        ratio_baseline="bare duckdb keys and groups",
        max_ratio=2.0,
        max_median_ms=5000.0,
        notes={"table": f"{table.project_id}/{table.dataset_id}"},
    )
