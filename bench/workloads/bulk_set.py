"""A bulk set of one column on 100,000 matching rows of the 1,000,000-row table (issue 28 §4).

Two workloads, each beside its bare engine in the same run:

* ``bulk_stage`` - core: ``core.bulk.apply_bulk`` (``SetValue`` on ``city`` where
  ``customer_id`` is in a block of 100,000): checks, the matching rows found by DuckDB
  over ``main`` at the session's base version, the value checked by ``core.values``, and
  one delta-rs append of the marker and the 100,000 cell events to a fresh session's
  ``edits.delta``. Bare delta-rs: ``write_deltalake`` appending the same 100,000 edit
  rows (read back from that session) to a scratch table of the same schema.
  Target: core median <= 1.5x the bare append.
* ``bulk_approve`` - core: ``core.merge.approve_change_request`` of a request submitted
  from such a bulk change (staged untimed). Bare delta-spark: ``MERGE INTO main USING
  staging`` of the same rows' ``city`` (``approve.bare_merge``), on the other request's
  staging table. Target: core median <= 1.5x the bare MERGE.

Each round uses a new block of rows and a new value, so every matching row changes.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
import uuid
from typing import TYPE_CHECKING, Any

from bench._data import APPROVER, PROJECT, READER, ensure_approver, ensure_customers
from bench._harness import BenchConfig, Timing, WorkloadResult, expect, stage_breakdown, time_call
from bench.workloads.approve import bare_merge

if TYPE_CHECKING:
    from core.auth import User
    from core.catalog import Catalog

STAGE = "bulk_stage"
APPROVE = "bulk_approve"
ROWS = 100_000
COLUMN = "city"
FIRST_ID = 100_001
MAX_RATIO = 1.5


class _Blocks:
    """Blocks of ``ROWS`` consecutive customer ids, a new one (and a new value) each call."""

    def __init__(self, rows: int) -> None:
        self.rows = min(ROWS, rows)
        self.table_rows = rows
        # Each run starts at a random block: a request of another run (or workload) still open on
        # the same rows would otherwise make this run's approvals conflict with it.
        self.count = random.randrange(max(1, rows // self.rows))
        self.tag = uuid.uuid4().hex[:6]  # the table persists between runs: new values every run

    def next(self) -> tuple[list[Any], str]:
        from core.filters import Condition

        start = FIRST_ID + (self.count * self.rows) % max(1, self.table_rows - self.rows + 1)
        self.count += 1
        where = [Condition("customer_id", "between", (str(start), str(start + self.rows - 1)))]
        return where, f"City {self.tag}-{self.count}"


def _apply(catalog: Catalog, editor: User, dataset_id: str, blocks: _Blocks) -> Any:
    """A fresh session with one bulk set of a new block: (the change, its session)."""
    from core import bulk, sessions

    session = sessions.open_session(catalog, PROJECT, dataset_id, actor=editor)
    where, value = blocks.next()
    holder: dict[str, Any] = {}

    def core_apply() -> None:
        holder["change"] = bulk.apply_bulk(
            catalog, PROJECT, dataset_id, COLUMN, bulk.SetValue(value), actor=editor, conditions=where,
            session_id=session.session_id,
        )  # fmt: skip

    return session, core_apply, holder


def run_stage(config: BenchConfig) -> WorkloadResult:
    """Alternate core bulk sets and bare appends of the same edit rows."""
    from deltalake import write_deltalake

    from core import auth, sessions
    from core.catalog import open_catalog
    from core.datasets import layout_for

    table = ensure_customers(config.rows)
    catalog = open_catalog()
    editor = auth.get_user(catalog, READER)
    layout = layout_for(PROJECT, table.dataset_id)
    blocks = _Blocks(config.rows)
    scratch = tempfile.mkdtemp(prefix="oreo-bench-bulk-")
    samples: dict[str, list[tuple[float, float]]] = {"core apply_bulk (set)": [], "bare delta-rs append": []}
    repeats = max(config.repeats // 3, 5)
    try:
        for round_no in range(config.warmup + repeats):
            session, core_apply, holder = _apply(catalog, editor, table.dataset_id, blocks)
            core = time_call(core_apply)
            events = sessions.read_events(layout, session.session_id)
            expect(events.num_rows == blocks.rows + 1, f"{events.num_rows} events for {blocks.rows:,} rows")
            expect(holder["change"].changed == blocks.rows, f"{holder['change'].changed} rows changed")
            cells = events.slice(1)  # the cell events, without the marker
            bare = time_call(lambda cells=cells: write_deltalake(scratch, cells, mode="append"))
            sessions.discard_session(catalog, session.session_id, actor=editor)
            if round_no >= config.warmup:
                samples["core apply_bulk (set)"].append(core)
                samples["bare delta-rs append"].append(bare)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    core_t, bare_t = (
        Timing(label=label, samples_ms=tuple(w for w, _ in s), cpu_ms=tuple(c for _, c in s), warmup=config.warmup)
        for label, s in samples.items()
    )
    return WorkloadResult(
        name=STAGE,
        description=f"stage a bulk set of {blocks.rows:,} matching rows of a {config.rows:,}-row table in a session",
        core=core_t,
        baselines=[bare_t],
        ratio_baseline=bare_t.label,
        max_ratio=MAX_RATIO,
        notes={"change": f"{COLUMN} set to a new value where customer_id is in a block of {blocks.rows:,}"},
    )


def run_approve(config: BenchConfig) -> WorkloadResult:
    """Alternate core approvals and bare MERGEs of requests made from equal bulk sets."""
    from core import auth, change_requests, engine, merge
    from core.catalog import open_catalog
    from core.datasets import layout_for

    table = ensure_customers(config.rows)
    ensure_approver()
    catalog = open_catalog()
    editor, approver = auth.get_user(catalog, READER), auth.get_user(catalog, APPROVER)
    layout = layout_for(PROJECT, table.dataset_id)
    spark = engine.get_spark()
    blocks = _Blocks(config.rows)

    def stage() -> change_requests.ChangeRequest:
        began = time.perf_counter()
        session, core_apply, _holder = _apply(catalog, editor, table.dataset_id, blocks)
        core_apply()
        cr = change_requests.submit_change_request(catalog, session.session_id, actor=editor, title="bench bulk")
        expect(cr.cells == blocks.rows, f"staged {cr.cells} cells")
        print(f"[bench] staged a bulk set of {cr.cells:,} cells in {time.perf_counter() - began:.1f} s",
              file=sys.stderr, flush=True)  # fmt: skip
        return cr

    stages: list[tuple[str, float]] = []

    def core_approve(cr: change_requests.ChangeRequest, timed: bool) -> None:
        merged = merge.approve_change_request(catalog, cr.id, actor=approver)
        expect(merged.merged_version is not None, "not merged")
        if timed:
            stages.extend((t.stage, t.seconds) for t in merged.stages if t.action == "approve")

    def bare_round(cr: change_requests.ChangeRequest, timed: bool) -> None:
        bare_merge(spark, table.path, layout.staging(cr.id), (COLUMN,))
        change_requests.withdraw_change_request(catalog, cr.id, actor=editor)  # its staging is spent

    samples: dict[str, list[tuple[float, float]]] = {"core approve_change_request": [], "bare delta-spark MERGE": []}
    for round_no in range(max(1, config.spark_repeats) + 1):  # round 0 warms both paths up
        order = [("core approve_change_request", core_approve), ("bare delta-spark MERGE", bare_round)]
        if round_no % 2:
            order.reverse()
        for label, fn in order:
            cr = stage()
            print(f"[bench] bulk approve round {round_no}: {label}", file=sys.stderr, flush=True)
            sample = time_call(lambda fn=fn, cr=cr, timed=bool(round_no): fn(cr, timed))  # type: ignore[misc]
            if round_no:
                samples[label].append(sample)
    core, bare = (
        Timing(label=label, samples_ms=tuple(w for w, _ in s), cpu_ms=tuple(c for _, c in s), warmup=1)
        for label, s in samples.items()
    )
    return WorkloadResult(
        name=APPROVE,
        description=f"approve a bulk set of {blocks.rows:,} rows into a {config.rows:,}-row table",
        core=core,
        baselines=[bare],
        ratio_baseline=bare.label,
        max_ratio=MAX_RATIO,
        breakdown=stage_breakdown(stages),
        notes={
            "change": f"{COLUMN} set to a new value where customer_id is in a new block of {blocks.rows:,} each round",
            "core includes": "checks, conflict search, GX validation of the merged result, MERGE, sync, cleanup",
        },
    )
