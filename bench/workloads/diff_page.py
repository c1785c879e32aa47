"""The first page of the diff of a 100,000-cell change request on the 1,000,000-row table.

One change request of 50,000 rows x 2 columns is staged once (untimed), then:

* core: ``core.change_requests.diff_change_request(limit=100)`` - permission check,
  schemas, and ``core.diff.staged_diff`` in DuckDB (main read only for the columns the
  request changes), paged, with its total;
* bare duckdb: a hand-written DuckDB query doing the same join of the staged rows with
  ``main`` at the base version, unnesting the changed columns, first 100 entries.

Targets: core median < 1 s, and <= 2x the bare query (issue 12).
"""

from __future__ import annotations

from bench._data import APPROVER, PROJECT, READER, ensure_approver, ensure_customers
from bench._harness import BenchConfig, WorkloadResult, expect, measure_interleaved

NAME = "diff_page"
CELLS = 100_000
COLUMNS = ("city", "plan")
PAGE = 100
MAX_MEDIAN_MS = 1000.0
MAX_RATIO = 2.0
FIRST_ID = 100_001


def run(config: BenchConfig) -> WorkloadResult:
    from core import auth, change_requests, reads, sessions
    from core.catalog import open_catalog
    from core.datasets import layout_for

    table = ensure_customers(config.rows)
    ensure_approver()
    catalog = open_catalog()
    editor, approver = auth.get_user(catalog, READER), auth.get_user(catalog, APPROVER)
    rows = CELLS // len(COLUMNS)
    ids = [str(FIRST_ID + (config.rows - rows) // 2 + i) for i in range(rows)]
    session = sessions.open_session(catalog, PROJECT, table.dataset_id, actor=editor)
    sessions.apply_edits(
        catalog, session.session_id, [sessions.SetCell(r, c, f"{c} diff") for r in ids for c in COLUMNS], actor=editor
    )
    cr = change_requests.submit_change_request(catalog, session.session_id, actor=editor, title="bench diff")
    staging = str(layout_for(PROJECT, table.dataset_id).staging(cr.id))
    main = str(table.path)

    def core_page() -> object:
        page = change_requests.diff_change_request(catalog, cr.id, actor=approver, limit=PAGE)
        expect(len(page.changes) == PAGE and page.total == CELLS, f"core diff {len(page.changes)}/{page.total}")
        return page

    bare = reads.open_duckdb()
    unnest = ", ".join(f"{{'c': '{c}', 'o': CAST(b.{c} AS VARCHAR), 'n': CAST(s.{c} AS VARCHAR)}}" for c in COLUMNS)
    bare_sql = f"""
        WITH s AS (SELECT * FROM delta_scan(?)),
        b AS (SELECT * FROM delta_scan(?, version => ?) WHERE row_id IN (SELECT row_id FROM s)),
        cells AS (SELECT s.row_id, unnest([{unnest}]) AS cell FROM s JOIN b USING (row_id))
        SELECT row_id, cell.c, cell.o, cell.n FROM cells WHERE cell.o IS DISTINCT FROM cell.n
        ORDER BY row_id, cell.c LIMIT {PAGE}
    """

    def bare_page() -> object:
        found = bare.execute(bare_sql, [staging, main, cr.base_version]).fetchall()
        expect(len(found) == PAGE, f"bare diff returned {len(found)}")
        return found

    try:
        timed = measure_interleaved(
            {"core diff_change_request (page 1)": core_page, "bare duckdb diff page": bare_page},
            warmup=config.warmup,
            repeats=max(5, config.repeats // 2),
        )
    finally:
        change_requests.withdraw_change_request(catalog, cr.id, actor=editor)
        bare.close()
    core, baseline = timed.values()
    return WorkloadResult(
        name=NAME,
        description=f"first {PAGE} entries of the diff of a {CELLS:,}-cell change request ({config.rows:,}-row table)",
        core=core,
        baselines=[baseline],
        ratio_baseline=baseline.label,
        max_ratio=MAX_RATIO,
        max_median_ms=MAX_MEDIAN_MS,
        notes={"change": f"{rows:,} rows x {len(COLUMNS)} columns"},
    )
