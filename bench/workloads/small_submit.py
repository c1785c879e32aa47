"""Submitting a 5-cell change request on the 1,000,000-row table, warm.

Each round opens a session and saves 5 edits (5 consecutive customers' ``city``; untimed,
through ``core.sessions.apply_edits``), then times, interleaved:

* core: ``core.change_requests.submit_change_request`` - permission checks, the staged
  rows built from the edits and the rows as of the session's base version, the Spark
  write of the staging table, GX validation of the merged result, the catalog row and
  its audit event;
* bare Spark write: ``spark.createDataFrame`` of the same 5 staged rows (with the staging
  table's schema) written as a Delta table to a fresh folder - the write alone.

Each core request is withdrawn afterwards (untimed), so ``main`` never changes.

Target: core median <= 1.5x the bare write, and <= 1.5 s.
"""

from __future__ import annotations

import shutil
import sys
import uuid

from bench._data import DATA_DIR, PROJECT, ensure_customers, ensure_reader
from bench._harness import BenchConfig, Timing, WorkloadResult, expect, stage_breakdown, time_call

NAME = "small_submit"
ROWS = 5
COLUMN = "city"
MAX_RATIO = 1.5
MAX_MEDIAN_MS = 1500.0
FIRST_ID = 100_001

EDITOR = "bench_small_editor"  # its own editor: other workloads' sessions never mix in

_CORE = "core submit_change_request"
_BARE = "bare Spark write of the staged rows"


def small_editor(dataset_id: str, name: str = EDITOR) -> object:
    """An editor ``name`` of the bench project with no pending session on ``dataset_id``."""
    from core import auth, sessions
    from core.catalog import open_catalog
    from core.errors import NotFound

    ensure_reader()  # the bench project
    catalog = open_catalog()
    try:
        user = auth.get_user(catalog, name)
    except NotFound:
        user = auth.create_user(catalog, name, display_name="Benchmark small-request editor")[0]
    if auth.role_in(catalog, user, PROJECT) is None:
        auth.add_member(catalog, PROJECT, name, auth.Role.EDITOR)
    left = sessions.current_session(catalog, PROJECT, dataset_id, actor=user)
    if left is not None:  # an interrupted earlier run
        sessions.discard_session(catalog, left.session_id, actor=user, reason="benchmark leftover")
    return user


def run(config: BenchConfig) -> WorkloadResult:
    """Alternate core submits and bare Spark writes of the same 5 staged rows."""
    from core import auth, change_requests, engine, reads, sessions, storage
    from core.catalog import open_catalog
    from core.datasets import layout_for

    table = ensure_customers(config.rows)
    catalog = open_catalog()
    small_editor(table.dataset_id)
    editor = auth.get_user(catalog, EDITOR)
    layout = layout_for(PROJECT, table.dataset_id)
    spark = engine.get_spark()
    scratch = DATA_DIR / NAME
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    block = iter(range(10**6))
    run_tag = uuid.uuid4().hex[:6]
    staged: dict[str, object] = {}  # the staged rows (Arrow) and their Spark schema, from the warm-up submit

    def edit_session() -> str:
        n = next(block)
        start = (n * 7919 * ROWS) % (config.rows - ROWS)
        ops: list[sessions.EditOp] = [
            sessions.SetCell(str(FIRST_ID + start + i), COLUMN, f"{COLUMN} {run_tag}-{n}") for i in range(ROWS)
        ]
        session = sessions.open_session(catalog, PROJECT, table.dataset_id, actor=editor)
        sessions.apply_edits(catalog, session.session_id, ops, actor=editor)
        return session.session_id

    def core_submit(session_id: str) -> change_requests.ChangeRequest:
        cr = change_requests.submit_change_request(catalog, session_id, actor=editor, title="bench small")
        expect(cr.cells == ROWS and cr.validation_status == "passed", f"{cr.cells} cells, {cr.validation_status}")
        return cr

    def bare_write(target: str) -> None:
        spark.createDataFrame(staged["rows"], staged["schema"]).write.format("delta").save(target)  # type: ignore[call-overload]

    samples: dict[str, list[tuple[float, float]]] = {_CORE: [], _BARE: []}
    stages: list[tuple[str, float]] = []
    repeats = max(1, config.spark_repeats)
    for round_no in range(repeats + 1):  # round 0 warms both paths up
        order = [_CORE, _BARE] if round_no % 2 == 0 else [_BARE, _CORE]
        if round_no == 0:
            order = [_CORE, _BARE]  # the bare write needs the warm-up submit's rows
        for label in order:
            print(f"[bench] {NAME} round {round_no}: {label}", file=sys.stderr, flush=True)
            if label == _CORE:
                session_id = edit_session()
                result: list[change_requests.ChangeRequest] = []
                sample = time_call(lambda out=result, sid=session_id: out.append(core_submit(sid)))  # type: ignore[misc]
                cr = result[0]
                if not staged:
                    path = str(layout.staging(cr.id))
                    staged["rows"] = reads.cursor().execute("SELECT * FROM delta_scan(?)", [path]).to_arrow_table()
                    staged["schema"] = spark.read.format("delta").load(storage.spark_uri(path)).schema
                stages += [(t.stage, t.seconds) for t in cr.stages]
                change_requests.withdraw_change_request(catalog, cr.id, actor=editor)
            else:
                target = scratch / f"w{next(block)}"
                sample = time_call(lambda target=target: bare_write(str(target)))  # type: ignore[misc]
                expect(reads.count_rows(target) == ROWS, "bare write lost rows")
                shutil.rmtree(target, ignore_errors=True)
            print(f"[bench] {NAME} round {round_no}: {label} {sample[0]:.0f} ms", file=sys.stderr, flush=True)
            if round_no:
                samples[label].append(sample)
    shutil.rmtree(scratch, ignore_errors=True)
    core, bare = (
        Timing(label=label, samples_ms=tuple(w for w, _ in s), cpu_ms=tuple(c for _, c in s), warmup=1)
        for label, s in samples.items()
    )
    return WorkloadResult(
        name=NAME,
        description=f"submit a {ROWS}-cell change request ({ROWS} rows x 1 column) on a {config.rows:,}-row table",
        core=core,
        baselines=[bare],
        ratio_baseline=bare.label,
        max_ratio=MAX_RATIO,
        max_median_ms=MAX_MEDIAN_MS,
        breakdown=stage_breakdown(stages[2:]),  # the warm-up submit's stages left out
        notes={
            "change": f"{ROWS} consecutive customers' {COLUMN}, fresh rows each round; withdrawn after",
            "core includes": "checks, staged rows from DuckDB + Spark write, GX validation, catalog row, audit",
            "main version": engine.latest_version(table.path),
        },
    )
