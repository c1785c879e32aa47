"""Warming the engine up: what the first approval after a start would otherwise pay once.

The first small MERGE in a fresh JVM took 13.9 s where later ones took 4-6 s (issue 24,
section 5): Spark loads and JIT-compiles Delta's MERGE, its snapshot and its Parquet
writer on first use, the approval's kept child session (``engine.dml_session``) builds its
analyzer and planner, and DuckDB reads its first Delta log. ``warm_up`` pays all of that
as the server starts, right after Spark is up (``engine.start_in_background(warm_up=...)``):
it approves, step for step as ``core.merge`` does, a small change into a scratch table
under ``<data root>/tmp/`` (outside every project, so no catalog, listing or doctor sees
it), then deletes the table. It also imports Great Expectations, which a submit's
validation would import first.
"""

from __future__ import annotations

import gc
import logging
import os
import queue
import socket
import threading
import time
import uuid

from sqlalchemy import func, select

from core import change_requests, engine, events, merge, reads, validation
from core.catalog import Catalog, ChangeRequestRow, DatasetRow, open_catalog
from core.change_requests import CHANGED_COLUMN, IN_REVIEW, OP_COLUMN, ChangeRequest, CRState
from core.config import get_settings
from core.datasets import layout_for
from core.errors import EngineError
from core.storage import Location, remove_tree

logger = logging.getLogger(__name__)

SCRATCH_FOLDER = "tmp"
PREFIX = "warm-up-"
# Enough rows for two files, so the MERGE skips one by its row_id statistics as on a real table.
ROWS = 2_000
# A scratch table older than this is a killed warm-up's leftover (a running one takes seconds).
LEFTOVER_AGE_S = 3600.0
WARM_UP_ACTOR = "oreo-warm-up"


# At most this many tables get their Delta snapshot loaded after the warm-up (warm_tables).
WARM_TABLES = 8


def scratch_root() -> Location:
    """Where warm-ups keep their scratch tables: ``<data root>/tmp``."""
    return get_settings().data_root / SCRATCH_FOLDER


def warm_up() -> None:
    """Run small approvals' Spark and DuckDB work on a scratch table (``OREO_WARM_UP_ROUNDS``), then delete the table.

    Raises whatever the work raises (the engine's start logs it); the table is deleted either way.
    """
    _remove_leftovers()
    started = time.monotonic()
    rounds = get_settings().warm_up_rounds
    if rounds:  # 0: the Spark it runs on is warm already (replicas sharing a Connect server)
        table = scratch_root() / f"{PREFIX}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            _approve_scratch(table / "main", table / "staging", rounds)
        finally:
            remove_tree(table)
    # GX takes seconds to import; a submit's validation would import it first.
    validation.import_gx()

    logger.info("engine warm-up (%d small MERGEs on a scratch table) took %.1f s", rounds, time.monotonic() - started)


def warm_server() -> None:
    """What a server pays before its first user: ``warm_up``, the tables under review (``warm_tables``), a frozen heap.

    By then Spark's client, pandas, DuckDB, Streamlit and Great Expectations are imported:
    hundreds of thousands of objects that live as long as the process. Left in the garbage
    collector's oldest generation, every full pass (set off by what a page run allocates)
    walks them all again; frozen (``gc.freeze``), a pass walks only what came later. With
    those modules loaded, a presence heartbeat took 2.0 CPU-ms against 2.4 (1,000 in a row).
    """
    warm_up()
    warm_tables(open_catalog())
    gc.collect()
    gc.freeze()


def warm_tables(catalog: Catalog, limit: int = WARM_TABLES) -> list[str]:
    """Build in Spark the file lists of the tables people work on: those with requests in review, then the newest.

    The first MERGE into a table after a start otherwise builds its file list (a log replay
    from the last checkpoint: about 2 s of the first approval on the 100,000-row demo table,
    issue 24 section 5); Delta keeps it in the JVM (``engine.prepare_table``), so the
    approval only checks for newer commits. At most ``limit`` tables: first those with
    requests in review (the most recently updated request first), then the most recently
    committed. Returns the ``project/dataset``
    names warmed; a table that fails to load is logged and skipped.
    """
    with catalog.session() as s:
        in_review = s.execute(
            select(ChangeRequestRow.project_id, ChangeRequestRow.dataset_id)
            .where(ChangeRequestRow.state.in_([state.value for state in IN_REVIEW]))
            .group_by(ChangeRequestRow.project_id, ChangeRequestRow.dataset_id)
            .order_by(func.max(ChangeRequestRow.updated_at).desc())
            .limit(limit)
        ).all()
        newest = s.execute(
            select(DatasetRow.project_id, DatasetRow.dataset_id)
            .order_by(DatasetRow.last_commit_at.desc().nulls_last())
            .limit(limit)
        ).all()
    tables = list(dict.fromkeys((p, d) for p, d in [*in_review, *newest]))[:limit]
    warmed = []
    for project_id, dataset_id in tables:
        try:
            engine.prepare_table(layout_for(project_id, dataset_id).main)
        except Exception:  # a warm-up only: the approval reports its own failure
            logger.warning("warming %s/%s up failed", project_id, dataset_id, exc_info=True)
            continue
        warmed.append(f"{project_id}/{dataset_id}")
    logger.info("engine warm-up: loaded the snapshots of %s", ", ".join(warmed) or "no table")
    return warmed


# ---------------------------------------------------------------- file lists kept ready in a server
#
# A server (``keep_prepared`` at its start) builds a table's file list in the background (one
# thread, never starting Spark for it) when an approver opens one of its open requests (the
# Review page, the API's GET), and after each approval it runs: the next approval of that
# table, in this process, then starts from the list instead of building it
# (``engine.prepare_table``). Other processes (the CLI, a script, a test) build none.

_to_prepare: queue.SimpleQueue[Location] = queue.SimpleQueue()
_queued: set[str] = set()
_queued_lock = threading.Lock()
_preparer: threading.Thread | None = None
_serving = threading.Event()


def prepare_soon(main: Location) -> bool:
    """Queue ``main`` for its file list to be built in the background; whether it was queued.

    Not queued when it is queued already, outside a server (``keep_prepared``), or when the
    engine is not up: a server's warm-up builds the lists of the tables in review, and no one
    waits for Spark to start for this.
    """
    global _preparer
    if not _serving.is_set() or engine.engine_status().state != "ready":
        return False
    with _queued_lock:
        if str(main) in _queued:
            return False
        _queued.add(str(main))
        if _preparer is None or not _preparer.is_alive():
            _preparer = threading.Thread(target=_prepare_queued, name="oreo-prepare-tables", daemon=True)
            _preparer.start()
    _to_prepare.put(main)
    return True


def _prepare_queued() -> None:
    while True:
        main = _to_prepare.get()
        try:
            if engine.prepare_table(main):
                logger.info("built the file list of %s at version %s", main, engine.prepared_version(main))
        except Exception:  # a head start only: the approval builds the list itself and reports its own failure
            logger.warning("building the file list of %s failed", main, exc_info=True)
        finally:
            with _queued_lock:
                _queued.discard(str(main))


def prepare_for_review(record: ChangeRequest, viewer: str) -> bool:
    """``prepare_soon`` for the main table of a request ``viewer`` has open and could approve now.

    That is an open request someone else wrote (what the viewer may do is the approval's
    own check); whether it was queued.
    """
    if record.state != CRState.OPEN or record.author == viewer:
        return False
    return prepare_soon(layout_for(record.project_id, record.dataset_id).main)


def _prepare_merged(event: events.Approved) -> None:
    if event.dataset is not None:
        prepare_soon(layout_for(event.project, event.dataset).main)


def keep_prepared() -> None:
    """Build file lists ahead in this process from now on: a server's start calls it (``prepare_soon``).

    Also, after each approval this process runs, the merged version's list.
    """
    _serving.set()
    events.subscribe(events.Approved, _prepare_merged)


def stop_preparing() -> None:
    """Undo ``keep_prepared`` (what is queued still gets built)."""
    _serving.clear()
    events.unsubscribe(events.Approved, _prepare_merged)


def _approve_scratch(main: Location, staging: Location, rounds: int) -> None:
    """Create ``main``, then approve ``rounds`` staged changes of a few rows into it as an approval does.

    One MERGE loads and interprets Delta's code; the JIT compiles its hot paths only after
    several: in the ``app_approve`` benchmark a server's approvals went from 5.4 s to 2.6 s
    over its first ten, so each round here is one an approver no longer waits for.
    """
    spark = engine.get_spark()
    commit = engine.new_commit(WARM_UP_ACTOR, "warm_up")
    # A checkpoint at every commit: the MERGE's commit then writes one, as every tenth
    # approval's does, and the reads after it start from it, as a real table's do.
    properties = f"{engine.main_table_properties_sql()}, 'delta.checkpointInterval' = '1'"
    with engine.commit_metadata(commit):
        spark.sql(
            f"CREATE TABLE {engine.delta_ref(main)} USING DELTA TBLPROPERTIES ({properties}) AS "
            "SELECT /*+ REPARTITION_BY_RANGE(2, id) */ CAST(id AS STRING) AS row_id, id AS number, "
            "concat('name ', id) AS name, CAST(id * 1.5 AS DOUBLE) AS amount, CAST(id AS DECIMAL(12, 2)) AS price, "
            "date_add(DATE'2020-01-01', CAST(id % 365 AS INT)) AS day, id % 2 = 0 AS flag, "
            f"TIMESTAMP'2020-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS at FROM range({ROWS})"
        ).collect()
    for round_no in range(rounds):
        _merge_round(main, staging / f"round-{round_no}", first_id=7 + 3 * round_no)


def _merge_round(main: Location, staging: Location, first_id: int) -> None:
    """Stage a change of three rows from ``first_id`` on, then check and MERGE it as an approval does."""
    base = engine.latest_version(main)
    changed, kept, deleted = (f"'{first_id + n}'" for n in range(3))
    # What a submit stages: one changed cell, and a few whole rows (an update and a delete).
    staged = (
        f"SELECT row_id, number, CASE WHEN row_id = {changed} THEN 'changed' ELSE name END AS name, amount, price, "
        f"day, flag, at, CASE WHEN row_id = {deleted} THEN 'delete' ELSE 'update' END AS {OP_COLUMN}, "
        f"CASE WHEN row_id = {deleted} THEN array() ELSE array('name') END AS {CHANGED_COLUMN} "
        f"FROM {engine.delta_ref(main)} WHERE row_id IN ({changed}, {kept}, {deleted})"
    )
    change_requests.save_staging(staging, staged, engine.new_commit(WARM_UP_ACTOR, "warm_up"), views=[])
    merge.conflicts_since(main, staging, base)  # main has not moved: the approval's first check reads nothing
    change_requests.staged_columns(staging)
    reads.table_schema(main, base)
    commit = engine.new_commit(WARM_UP_ACTOR, merge.MERGE_ACTION, cr_id="warm-up")
    merge.merge_staged(main, staging, commit, txn=(merge.TXN_APP_ID, base + 1))
    landed = engine.find_commit(main, base, cr_id="warm-up", action=merge.MERGE_ACTION)
    if landed is None:
        raise EngineError(f"the warm-up MERGE left no commit in {main}")
    # After a merge: the catalog's row count, and the conflict check's change data feed read
    # (a request whose table moved since it was submitted).
    reads.count_rows(main, landed[0])
    merge.conflicts_since(main, staging, base)


def _remove_leftovers() -> None:
    """Delete scratch tables of warm-ups killed before they cleaned up (local data roots only)."""
    root = scratch_root()
    if not isinstance(root, os.PathLike) or not os.path.isdir(root):
        return
    now = time.time()
    for entry in os.scandir(root):
        try:
            old = now - entry.stat().st_mtime > LEFTOVER_AGE_S
        except OSError:
            continue
        if entry.name.startswith(PREFIX) and old:
            remove_tree(root / entry.name)
