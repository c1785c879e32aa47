"""Approving a 5-cell change request on the 1,000,000-row table, warm.

Each round submits two fresh 5-cell requests (untimed; 5 consecutive customers' ``city``
each, on rows no other round touches) and times, interleaved:

* core: ``core.merge.approve_change_request`` on the bench table - checks, conflict
  search, validation (the submit's run reused when ``main`` has not moved), the MERGE
  with its idempotent transaction id, catalog sync, audit event, cleanup;
* bare delta-spark MERGE on **today's layout**: ``MERGE INTO copy USING staging ON row_id
  WHEN MATCHED THEN UPDATE`` of ``city`` (``approve.bare_merge``, Spark SQL so that it runs
  on Spark Connect too) of the other request's staged rows into a copy of the
  bench table written the way main tables were written before issue 12 (one plain Spark
  ``CREATE TABLE ... AS SELECT``, no sort; built once under ``bench/.data/small_approve``).
  That request is withdrawn afterwards.

Target: core median <= 1.3x the bare MERGE on today's layout, and <= 2.5 s.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from bench._data import APPROVER, DATA_DIR, PROJECT, ensure_approver, ensure_customers
from bench._harness import BenchConfig, Timing, WorkloadResult, expect, stage_breakdown, time_call
from bench.workloads.approve import bare_merge
from bench.workloads.small_submit import small_editor

if TYPE_CHECKING:
    from core.storage import Location

NAME = "small_approve"
ROWS = 5
COLUMN = "city"
MAX_RATIO = 1.3
MAX_MEDIAN_MS = 2500.0
FIRST_ID = 100_001
# The copy gains files with every MERGE; past this many versions it is written again.
REBUILD_AFTER_VERSIONS = 300

EDITOR = "bench_small_approve_editor"  # not small_submit's: the two may run at once

_CORE = "core approve_change_request"
_BARE = "bare delta-spark MERGE, today's layout"


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _today_copy(main: Location, rows: int) -> Path:
    """A copy of ``main`` written as one plain Spark CTAS (today's layout), built once."""
    import shutil

    from core import engine

    copy = DATA_DIR / NAME / f"today_layout_{rows}"
    if (copy / "_delta_log").is_dir() and engine.latest_version(copy) < REBUILD_AFTER_VERSIONS:
        return copy
    shutil.rmtree(copy, ignore_errors=True)
    copy.parent.mkdir(parents=True, exist_ok=True)
    _log(f"writing today's layout of {main.name} ({rows:,} rows) to {copy}; later runs reuse it")
    engine.get_spark().sql(
        f"CREATE TABLE {engine.delta_ref(copy)} USING DELTA TBLPROPERTIES ({engine.main_table_properties_sql()}) "
        f"AS SELECT * FROM {engine.delta_ref(main)}"
    ).collect()
    return copy


def run(config: BenchConfig) -> WorkloadResult:
    """Alternate core approvals and bare MERGEs of equally sized 5-row requests."""
    from core import auth, change_requests, engine, merge, sessions
    from core.catalog import open_catalog
    from core.datasets import layout_for

    table = ensure_customers(config.rows)
    ensure_approver()
    catalog = open_catalog()
    small_editor(table.dataset_id, EDITOR)
    editor, approver = auth.get_user(catalog, EDITOR), auth.get_user(catalog, APPROVER)
    layout = layout_for(PROJECT, table.dataset_id)
    spark = engine.get_spark()
    today = _today_copy(table.path, config.rows)
    block = iter(range(10**6))
    run_tag = uuid.uuid4().hex[:6]  # the tables persist between runs: new values every run
    offset = int(run_tag, 16) % 1000

    def stage() -> change_requests.ChangeRequest:
        n = next(block)
        start = ((offset + n) * 7919 * ROWS) % (config.rows - ROWS)
        ops: list[sessions.EditOp] = [
            sessions.SetCell(str(FIRST_ID + start + i), COLUMN, f"{COLUMN} {run_tag}-{n}") for i in range(ROWS)
        ]
        session = sessions.open_session(catalog, PROJECT, table.dataset_id, actor=editor)
        sessions.apply_edits(catalog, session.session_id, ops, actor=editor)
        cr = change_requests.submit_change_request(catalog, session.session_id, actor=editor, title="bench small")
        expect(cr.cells == ROWS, f"staged {cr.cells} cells")
        return cr

    def core_approve(cr: change_requests.ChangeRequest) -> change_requests.ChangeRequest:
        merged = merge.approve_change_request(catalog, cr.id, actor=approver)
        expect(merged.merged_version is not None, "not merged")
        return merged

    def bare_today(cr: change_requests.ChangeRequest) -> None:
        bare_merge(spark, today, layout.staging(cr.id), (COLUMN,))

    samples: dict[str, list[tuple[float, float]]] = {_CORE: [], _BARE: []}
    stages: list[tuple[str, float]] = []
    repeats = max(1, config.spark_repeats)
    for round_no in range(repeats + 1):  # round 0 warms both paths up
        order = [_CORE, _BARE] if round_no % 2 == 0 else [_BARE, _CORE]
        for label in order:
            cr = stage()
            _log(f"{NAME} round {round_no}: {label}")
            if label == _CORE:
                merged: list[change_requests.ChangeRequest] = []
                sample = time_call(lambda cr=cr, out=merged: out.append(core_approve(cr)))  # type: ignore[misc]
                if round_no:
                    stages += [(t.stage, t.seconds) for t in merged[0].stages if t.action == "approve"]
            else:
                sample = time_call(lambda cr=cr: bare_today(cr))  # type: ignore[misc]
                change_requests.withdraw_change_request(catalog, cr.id, actor=editor)  # its staging is spent
            print(f"[bench] {NAME} round {round_no}: {label} {sample[0]:.0f} ms", file=sys.stderr, flush=True)
            if round_no:
                samples[label].append(sample)
    core, bare = (
        Timing(label=label, samples_ms=tuple(w for w, _ in s), cpu_ms=tuple(c for _, c in s), warmup=1)
        for label, s in samples.items()
    )
    return WorkloadResult(
        name=NAME,
        description=f"approve a {ROWS}-cell change request ({ROWS} rows x 1 column) into a {config.rows:,}-row table",
        core=core,
        baselines=[bare],
        ratio_baseline=bare.label,
        max_ratio=MAX_RATIO,
        max_median_ms=MAX_MEDIAN_MS,
        breakdown=stage_breakdown(stages),
        notes={
            "change": f"{ROWS} consecutive customers' {COLUMN}, fresh rows each round",
            "core includes": "checks, conflict search, validation, MERGE, catalog sync, audit, cleanup",
            "today's layout copy": str(today),
            "main version after": engine.latest_version(table.path),
        },
    )
