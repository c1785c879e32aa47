"""Approving a change request of 10,000 changed cells into the 1,000,000-row table.

Each round builds two fresh change requests (untimed: edits saved through
``core.sessions.apply_edits``, then ``submit_change_request`` writes staging with Spark
and validates it), each on rows no other round touches:

* core: ``core.merge.approve_change_request`` - checks, conflict search, GX validation
  of the merged result, the MERGE with its idempotent transaction id, catalog sync,
  audit event, and removal of staging and session;
* bare delta-spark MERGE: ``MERGE INTO main USING staging ON row_id WHEN MATCHED THEN
  UPDATE`` of the same two columns - the engine work alone - on the other request's
  staging table (Spark SQL, as core's MERGE: the ``DeltaTable`` Python API needs the Delta
  Connect plugin, which a Spark Connect server does not have, so ``--cluster`` could not
  run it).

Target: core median <= 1.5x the bare MERGE, validation included. The core approvals'
stages (``ChangeRequest.stages``) are the step-by-step breakdown.
"""

from __future__ import annotations

import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

from bench._data import APPROVER, PROJECT, READER, ensure_approver, ensure_customers
from bench._harness import BenchConfig, Timing, WorkloadResult, expect, stage_breakdown, time_call

if TYPE_CHECKING:
    from core.storage import Location

NAME = "approve"
CELLS = 10_000
# Columns whose inferred rules (not null) the new values meet: ``plan`` has a value-set rule,
# and once "plan <tag>" values were merged every later submit on the table validated as
# "warning", so small_submit's sanity check failed on any run after this one.
COLUMNS = ("city", "last_name")
MAX_RATIO = 1.5
FIRST_ID = 100_001


def bare_merge(spark: Any, target: Location, staging: Location, columns: tuple[str, ...]) -> None:
    """The bare MERGE of the staged rows' ``columns`` into ``target``, matched on ``row_id``."""
    from core.engine import delta_ref, spark_ident

    sets = ", ".join(f"t.{spark_ident(c)} = s.{spark_ident(c)}" for c in columns)
    spark.sql(
        f"MERGE INTO {delta_ref(target)} AS t USING {delta_ref(staging)} AS s ON t.row_id = s.row_id "
        f"WHEN MATCHED THEN UPDATE SET {sets}"
    ).collect()


def run(config: BenchConfig) -> WorkloadResult:
    """Alternate core approvals and bare MERGEs of equally sized staged changes."""
    from core import auth, change_requests, engine, merge, sessions
    from core.catalog import open_catalog
    from core.datasets import layout_for

    table = ensure_customers(config.rows)
    ensure_approver()
    catalog = open_catalog()
    editor, approver = auth.get_user(catalog, READER), auth.get_user(catalog, APPROVER)
    rows_per_cr = CELLS // len(COLUMNS)
    layout = layout_for(PROJECT, table.dataset_id)
    spark = engine.get_spark()
    block = iter(range(10**6))
    run_tag = uuid.uuid4().hex[:6]  # the table persists between runs: new values every run

    def stage() -> change_requests.ChangeRequest:
        began = time.perf_counter()
        start = next(block) * rows_per_cr % (config.rows - rows_per_cr)
        ids = [str(FIRST_ID + start + i) for i in range(rows_per_cr)]
        tag = f"{run_tag}-{next(block)}"
        ops: list[sessions.EditOp] = [sessions.SetCell(r, c, f"{c} {tag}") for r in ids for c in COLUMNS]
        session = sessions.open_session(catalog, PROJECT, table.dataset_id, actor=editor)
        opened = time.perf_counter()
        sessions.apply_edits(catalog, session.session_id, ops, actor=editor)
        edited = time.perf_counter()
        cr = change_requests.submit_change_request(catalog, session.session_id, actor=editor, title="bench")
        expect(cr.cells == CELLS, f"staged {cr.cells} cells")
        print(
            f"[bench] staged {CELLS:,} cells in {time.perf_counter() - began:.1f} s (open {opened - began:.1f} s, "
            f"edits {edited - opened:.1f} s, submit {time.perf_counter() - edited:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
        return cr

    stages: list[tuple[str, float]] = []

    def core_approve(cr: change_requests.ChangeRequest, timed: bool) -> None:
        merged = merge.approve_change_request(catalog, cr.id, actor=approver)
        expect(merged.merged_version is not None, "not merged")
        if timed:
            stages.extend((t.stage, t.seconds) for t in merged.stages if t.action == "approve")

    def bare_round(cr: change_requests.ChangeRequest, timed: bool) -> None:
        bare_merge(spark, table.path, layout.staging(cr.id), COLUMNS)
        change_requests.withdraw_change_request(catalog, cr.id, actor=editor)  # its staging is spent

    samples: dict[str, list[tuple[float, float]]] = {"core approve_change_request": [], "bare delta-spark MERGE": []}
    repeats = max(1, config.spark_repeats)
    for round_no in range(repeats + 1):  # round 0 warms both paths up
        order = [("core approve_change_request", core_approve), ("bare delta-spark MERGE", bare_round)]
        if round_no % 2:
            order.reverse()
        for label, fn in order:
            cr = stage()
            print(f"[bench] approve round {round_no}: {label}", file=sys.stderr, flush=True)
            sample = time_call(lambda fn=fn, cr=cr, timed=bool(round_no): fn(cr, timed))  # type: ignore[misc]
            if round_no:
                samples[label].append(sample)
    core, bare = (
        Timing(label=label, samples_ms=tuple(w for w, _ in s), cpu_ms=tuple(c for _, c in s), warmup=1)
        for label, s in samples.items()
    )
    return WorkloadResult(
        name=NAME,
        description=f"approve a change request of {CELLS:,} changed cells into a {config.rows:,}-row table",
        core=core,
        baselines=[bare],
        ratio_baseline=bare.label,
        max_ratio=MAX_RATIO,
        breakdown=stage_breakdown(stages),
        notes={
            "change": f"{rows_per_cr:,} rows x {len(COLUMNS)} columns ({', '.join(COLUMNS)}), fresh rows each round",
            "core includes": "checks, conflict search, GX validation of the merged result, MERGE, sync, cleanup",
            "main version after": engine.latest_version(table.path),
        },
    )
