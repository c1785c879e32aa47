"""50 concurrent readers of the 1,000,000-row table, against a bare DuckDB pool doing the same.

Each of 50 threads reads random pages, one after the other, for 30 s in all: a query
shape drawn from a fixed mix (no filter, one to three conditions; the stable order or a
sort on a column, ascending or descending) and a random page within the matching rows.

* core: ``core.datasets.dataset_rows``, as the Table page calls it (catalog lookup and
  permission check, the schema, the two-step ordered page, the count of a filtered read),
  on core's one DuckDB database with a cursor per thread;
* bare duckdb pool: one DuckDB database with the same delta extension, each thread with
  its own cursor, running the one-query page (``ORDER BY ... LIMIT ... OFFSET``) and a
  ``count(*)`` of a filtered read, with the same predicates (``core.filters.where_sql``).

The two paths alternate in 10-second rounds (core, bare, core, ...), so load drift on the
shared machine hits both. Before timing, core's and bare's pages of a few shapes are
compared row for row.

Targets: core >= 100 reads/s, core p95 < 1 s, and core at most 1.3x bare (reads/s of
bare over core, and the median latency ratio).
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench._data import PROJECT, READER, BenchTable, ensure_customers
from bench._harness import BenchConfig, Check, Timing, WorkloadResult, expect

NAME = "concurrent_readers"
THREADS = 50
SECONDS = 30.0  # per path
ROUNDS = 3
PAGE = 50  # the Table page's default page size
MIN_READS_PER_S = 100.0
MAX_P95_MS = 1000.0
MAX_RATIO = 1.3
SORTS = (None, "monthly_spend", "signup_date", "city", "orders")
BARE = "bare duckdb pool"


@dataclass(frozen=True)
class Shape:
    """A filter and a sort; ``matches`` rows pass the filter."""

    wheres: tuple[str, ...]
    order_by: str | None
    descending: bool
    matches: int


@dataclass
class _Run:
    """Latencies and reads of one path over its rounds."""

    latencies_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def reads_per_s(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0


@dataclass
class ConcurrencyResult(WorkloadResult):
    """A workload result with throughput targets besides the harness's latency ones."""

    extra_checks: list[Check] = field(default_factory=list)

    def checks(self) -> list[Check]:
        return [*super().checks(), *self.extra_checks]


def _percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (as ``Timing.p95``)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _filters(countries: list[str]) -> list[tuple[str, ...]]:
    listed = ", ".join('"' + c.replace('"', '""') + '"' for c in countries)
    return [
        (),
        ("monthly_spend >= 100",),
        (f"country in ({listed})",),
        ("plan = pro", "orders >= 5"),
        ("monthly_spend >= 100", f"country in ({listed})", "signup_date between 2020-01-01 and 2023-12-31"),
        ("city starts with B",),
    ]


def _run_threads(read: Callable[[random.Random], object], seconds: float, seed: int, into: _Run) -> None:
    """``THREADS`` threads call ``read`` back to back for ``seconds``; latencies go to ``into``."""
    deadline = time.perf_counter() + seconds
    lock = threading.Lock()
    start_gate = threading.Barrier(THREADS + 1)

    def worker(n: int) -> None:
        rng = random.Random(seed * 1000 + n)
        mine: list[float] = []
        start_gate.wait()
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                read(rng)
            except Exception as exc:  # counted and shown: a failed read is no read
                with lock:
                    into.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                continue
            mine.append((time.perf_counter() - t0) * 1000.0)
        with lock:
            into.latencies_ms.extend(mine)

    threads = [threading.Thread(target=worker, args=(n,), name=f"reader-{n}") for n in range(THREADS)]
    for t in threads:
        t.start()
    start_gate.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    into.seconds += time.perf_counter() - began


def run(config: BenchConfig) -> WorkloadResult:
    """50 threads reading random filtered, sorted pages through core, then through a bare pool, alternating."""
    from core import auth, datasets
    from core.catalog import open_catalog
    from core.filters import parse_where, where_sql
    from core.reads import open_duckdb, quote_ident

    table: BenchTable = ensure_customers(config.rows)
    catalog = open_catalog()
    reader = auth.get_user(catalog, READER)
    info = datasets.get_dataset(catalog, PROJECT, table.dataset_id, actor=reader)
    types = {c.name: c.type for c in datasets.dataset_columns(info)}
    stable = datasets.stable_order(info)
    path = str(table.path)
    bare_db = open_duckdb()
    scan = "delta_scan(?, version => ?)"
    scan_params = [path, info.version]

    countries = [r[0] for r in bare_db.execute(
        f"SELECT country FROM {scan} GROUP BY country ORDER BY count(*) DESC, country LIMIT 3", scan_params
    ).fetchall()]  # fmt: skip
    shapes: list[Shape] = []
    for wheres in _filters(countries):
        sql, params = where_sql([parse_where(w) for w in wheres], types)
        row = bare_db.execute(f"SELECT count(*) FROM {scan}{sql}", [*scan_params, *params]).fetchone()
        matches = int(row[0]) if row else 0
        expect(matches > PAGE, f"only {matches} rows match {wheres}")
        for order_by in SORTS:
            for descending in (False, True) if order_by else (False,):
                shapes.append(Shape(wheres, order_by, descending, matches))

    def bare_sql(shape: Shape) -> tuple[str, str, list[object]]:
        where, params = where_sql([parse_where(w) for w in shape.wheres], types)
        keys = [f"{quote_ident(shape.order_by)} {'DESC' if shape.descending else 'ASC'} NULLS LAST"] if (
            shape.order_by
        ) else []
        keys += [f"{quote_ident(c)} ASC NULLS LAST" for c in stable if c != shape.order_by]
        page = f"SELECT * FROM {scan}{where} ORDER BY {', '.join(keys)} LIMIT ? OFFSET ?"
        return page, f"SELECT count(*) FROM {scan}{where}", [*scan_params, *params]

    prepared = {shape: bare_sql(shape) for shape in shapes}
    parsed = {shape: [parse_where(w) for w in shape.wheres] for shape in shapes}

    def pick(rng: random.Random) -> tuple[Shape, int]:
        shape = rng.choice(shapes)
        return shape, rng.randrange(0, shape.matches - PAGE + 1)

    def core_read(shape: Shape, offset: int) -> object:
        page = datasets.dataset_rows(
            catalog, PROJECT, table.dataset_id, actor=reader, conditions=parsed[shape],
            order_by=shape.order_by, descending=shape.descending, limit=PAGE, offset=offset,
        )  # fmt: skip
        expect(len(page.rows) == PAGE and page.total == shape.matches, f"core returned {len(page.rows)}/{page.total}")
        return page

    bare_local = threading.local()
    bare_cursors = []

    def bare_read(shape: Shape, offset: int) -> object:
        cur = getattr(bare_local, "cursor", None)
        if cur is None:
            cur = bare_local.cursor = bare_db.cursor()
            bare_cursors.append(cur)
        page_sql, count_sql, params = prepared[shape]
        rows = cur.execute(page_sql, [*params, PAGE, offset]).to_arrow_table()
        expect(rows.num_rows == PAGE, f"duckdb returned {rows.num_rows} rows")
        if shape.wheres:  # an unfiltered total is the catalog's row count, in both paths
            total = cur.execute(count_sql, params).fetchone()
            expect(total is not None and total[0] == shape.matches, f"duckdb counted {total}")
        return rows

    # Same rows, same order, for a sample of shapes: a fast wrong answer is no result.
    check_rng = random.Random(11)
    for shape in check_rng.sample(shapes, 6):
        offset = check_rng.randrange(0, shape.matches - PAGE + 1)
        core_ids = list(core_read(shape, offset).rows["row_id"])  # type: ignore[attr-defined]
        bare_ids = bare_read(shape, offset).column("row_id").to_pylist()  # type: ignore[attr-defined]
        expect(core_ids == bare_ids, f"core and bare DuckDB disagree on a page of {shape}")

    runs = {"core dataset_rows": _Run(), BARE: _Run()}
    paths: dict[str, Callable[[random.Random], object]] = {
        "core dataset_rows": lambda rng: core_read(*pick(rng)),
        BARE: lambda rng: bare_read(*pick(rng)),
    }
    rounds = max(1, ROUNDS)
    for round_no in range(rounds):
        order = list(paths) if round_no % 2 == 0 else list(reversed(paths))
        for label in order:
            print(f"[bench] {NAME} round {round_no + 1}/{rounds}: {label}", file=sys.stderr, flush=True)
            _run_threads(paths[label], SECONDS / rounds, seed=round_no, into=runs[label])
    for cur in bare_cursors:
        cur.close()
    bare_db.close()

    timings = {label: Timing(label=label, samples_ms=tuple(r.latencies_ms)) for label, r in runs.items()}
    core_run, bare_run = runs["core dataset_rows"], runs[BARE]
    expect(bool(core_run.latencies_ms and bare_run.latencies_ms), "a path completed no read")

    def summary(r: _Run) -> str:
        lat = r.latencies_ms
        return (
            f"{r.reads_per_s:.1f} reads/s ({len(lat)} reads in {r.seconds:.1f} s), "
            f"p50 {statistics.median(lat):.0f} ms, p95 {_percentile(lat, 0.95):.0f} ms, "
            f"p99 {_percentile(lat, 0.99):.0f} ms, {len(r.errors)} error(s)"
        )

    def p99(r: _Run) -> float:
        return _percentile(r.latencies_ms, 0.99)

    throughput_ratio = bare_run.reads_per_s / core_run.reads_per_s if core_run.reads_per_s else float("inf")
    checks = [
        Check(
            "core reads/s",
            core_run.reads_per_s >= MIN_READS_PER_S,
            f"{core_run.reads_per_s:.1f}/s (target >={MIN_READS_PER_S:g}/s)",
        ),
        Check(
            "throughput vs bare pool",
            throughput_ratio <= MAX_RATIO,
            f"bare/core reads/s = {throughput_ratio:.2f}x (target <={MAX_RATIO:g}x)",
        ),
        Check("no failed reads", not core_run.errors, f"{len(core_run.errors)} failed core read(s)"),
    ]
    notes: dict[str, object] = {
        "table": f"{table.project_id}/{table.dataset_id}, {table.rows:,} rows, version {info.version}",
        "mix": f"{len(shapes)} query shapes: {len(_filters(countries))} filters x stable order or a sort on "
        f"{', '.join(s for s in SORTS if s)} (asc/desc); a random page of {PAGE} rows within the matches",
        "core": summary(core_run),
        "bare duckdb pool": summary(bare_run),
        "p99 ratio core/bare": f"{p99(core_run) / p99(bare_run):.2f}x",
        "schedule": f"{THREADS} threads, {rounds} alternating rounds of {SECONDS / rounds:.0f} s per path",
    }
    if core_run.errors:
        notes["first core error"] = core_run.errors[0]
    if bare_run.errors:
        notes["first bare error"] = bare_run.errors[0]
    return ConcurrencyResult(
        name=NAME,
        description=f"{THREADS} threads reading random filtered, sorted pages of a {config.rows:,}-row table "
        f"for {SECONDS:.0f} s per path",
        core=timings["core dataset_rows"],
        baselines=[timings[BARE]],
        ratio_baseline=BARE,
        max_ratio=MAX_RATIO,
        max_p95_ms=MAX_P95_MS,
        notes=notes,
        extra_checks=checks,
    )
