"""A filtered, sorted page: three conditions and a header sort on the 1,000,000-row table.

The Table page and ``oreo dataset rows --where ... --order-by ...`` call
``core.datasets.dataset_rows`` with ``core.filters`` conditions; it checks them against
the schema, binds every value, sorts the whole table (ties by the dataset's stable
order) and counts the matching rows. Timed in one run against bare DuckDB running the
same SQL on ``delta_scan`` (the page query, and the page query plus the count):

    monthly_spend >= 100 AND country IN (3 countries) AND signup_date BETWEEN 2020-01-01 AND 2023-12-31
    ORDER BY monthly_spend DESC, customer_id LIMIT 100 OFFSET <half the matches>

Targets: core median within 1.3x of the bare page+count and under 250 ms.
"""

from __future__ import annotations

from bench._data import PROJECT, READER, BenchTable, ensure_customers
from bench._harness import BenchConfig, WorkloadResult, expect, measure_interleaved

NAME = "page_filter"
PAGE = 100
MAX_RATIO = 1.3
MAX_MEDIAN_MS = 250.0
BARE = "bare duckdb page+count"
ORDER_BY = "monthly_spend"


def run(config: BenchConfig) -> WorkloadResult:
    """Measure the filtered, sorted page on ``config.rows`` rows, half way through the matches."""
    from core import auth, datasets, reads
    from core.catalog import open_catalog
    from core.filters import parse_where
    from core.reads import open_duckdb

    table: BenchTable = ensure_customers(config.rows)
    catalog = open_catalog()
    reader = auth.get_user(catalog, READER)
    path = str(table.path)
    bare = open_duckdb()

    # Three countries that are in the data (Faker's picks depend on its version).
    countries = [r[0] for r in bare.execute(
        "SELECT country FROM delta_scan(?) GROUP BY country ORDER BY count(*) DESC, country LIMIT 3", [path]
    ).fetchall()]  # fmt: skip
    listed = ", ".join('"' + c.replace('"', '""') + '"' for c in countries)
    wheres = [
        "monthly_spend >= 100",
        f"country in ({listed})",
        "signup_date between 2020-01-01 and 2023-12-31",
    ]
    conditions = [parse_where(w) for w in wheres]
    where_sql = (
        "monthly_spend >= ? AND country IN (?, ?, ?) AND signup_date BETWEEN CAST(? AS DATE) AND CAST(? AS DATE)"
    )
    values = [100.0, *countries, "2020-01-01", "2023-12-31"]
    matches_row = bare.execute(f"SELECT count(*) FROM delta_scan(?) WHERE {where_sql}", [path, *values]).fetchone()
    matches = int(matches_row[0]) if matches_row else 0
    expect(matches > PAGE, f"only {matches} rows match the filter")
    offset = matches // 2
    page_sql = (
        f"SELECT * FROM delta_scan(?) WHERE {where_sql} "
        "ORDER BY monthly_spend DESC NULLS LAST, customer_id ASC NULLS LAST "
        f"LIMIT {PAGE} OFFSET {offset}"
    )
    count_sql = f"SELECT count(*) FROM delta_scan(?) WHERE {where_sql}"

    def core_page() -> object:
        page = datasets.dataset_rows(
            catalog, PROJECT, table.dataset_id, actor=reader, conditions=conditions,
            order_by=ORDER_BY, descending=True, limit=PAGE, offset=offset,
        )  # fmt: skip
        expect(len(page.rows) == PAGE and page.total == matches, f"core returned {len(page.rows)}/{page.total}")
        return page

    def bare_page() -> object:
        rows = bare.execute(page_sql, [path, *values]).to_arrow_table()
        expect(rows.num_rows == PAGE, f"duckdb returned {rows.num_rows} rows")
        return rows

    def bare_page_and_count() -> object:
        rows = bare.execute(page_sql, [path, *values]).to_arrow_table()
        total = bare.execute(count_sql, [path, *values]).fetchone()
        expect(total is not None and total[0] == matches, f"duckdb counted {total}")
        return rows

    # Same rows, same order: a fast wrong answer is no result.
    core_ids = list(core_page().rows["row_id"])  # type: ignore[attr-defined]
    bare_ids = bare.execute(page_sql, [path, *values]).to_arrow_table().column("row_id").to_pylist()
    expect(core_ids == bare_ids, "core and bare DuckDB disagree on the page's rows")

    timed = measure_interleaved(
        {"core dataset_rows": core_page, "bare duckdb page": bare_page, BARE: bare_page_and_count},
        warmup=config.warmup,
        repeats=config.repeats,
    )
    core, *baselines = timed.values()

    info = datasets.get_dataset(catalog, PROJECT, table.dataset_id, actor=reader)
    breakdown = list(
        measure_interleaved(
            {
                "get_dataset (catalog + permission)": lambda: datasets.get_dataset(
                    catalog, PROJECT, table.dataset_id, actor=reader
                ),
                "read_page (check + two-step page + count)": lambda: reads.read_page(
                    table.path,
                    version=info.version,
                    conditions=conditions,
                    order_by=ORDER_BY,
                    descending=True,
                    default_order=datasets.stable_order(info),
                    limit=PAGE,
                    offset=offset,
                ),
                "first_emptying_condition (one scan)": lambda: reads.first_emptying_condition(
                    table.path, conditions, version=info.version
                ),
            },
            warmup=config.warmup,
            repeats=config.repeats,
        ).values()
    )
    bare.close()
    return WorkloadResult(
        name=NAME,
        description=f"a page of {PAGE} rows at offset {offset:,} of {matches:,} rows matching 3 conditions, "
        f"sorted by {ORDER_BY} desc, on a {config.rows:,}-row main table",
        core=core,
        baselines=baselines,
        ratio_baseline=BARE,
        max_ratio=MAX_RATIO,
        max_median_ms=MAX_MEDIAN_MS,
        breakdown=breakdown,
        notes={
            "table": f"{table.project_id}/{table.dataset_id}, {table.rows:,} rows",
            "filter": " AND ".join(wheres),
            "sort": f"{ORDER_BY} desc, then the stable order (customer_id)",
        },
    )
