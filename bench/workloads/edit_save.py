"""Saving one cell edit to a live-edit session, on the 1,000,000-row table.

* core: ``core.sessions.apply_edits`` with one ``SetCell`` - ownership and role checks,
  the base value looked up in ``main`` (``core.reads.read_rows_as_text``), the value
  type-checked, one delta-rs append to ``edits.delta`` and the session metadata rewritten;
* bare delta-rs: ``write_deltalake`` appending the same one-row edit to a scratch table
  with the same schema (the storage work alone), on the same store as the session's
  ``edits.delta`` (a temporary folder, or beside the sessions in the bucket on S3).

The first lookup of a table version in a process scans ``main``; the second builds a
row locator for that version, and later ones read one row from one Parquet file. Both
one-off saves are timed on their own (notes) before the warm-up and the timed saves.
At the end the session is read back from disk: every save must be there.

Target: core p95 <= 50 ms.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from bench._data import PROJECT, READER, ensure_customers
from bench._harness import BenchConfig, WorkloadResult, expect, measure_interleaved

NAME = "edit_save"
MAX_P95_MS = 50.0
FIRST_ID = 100_001


def run(config: BenchConfig) -> WorkloadResult:
    """Time single-cell saves at random rows of the ``config.rows``-row table."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from core import auth, sessions
    from core.catalog import open_catalog
    from core.datasets import layout_for
    from core.storage import Location, ObjectPath, remove_tree, storage_options_for

    table = ensure_customers(config.rows)
    catalog = open_catalog()
    editor = auth.get_user(catalog, READER)
    session = sessions.open_session(catalog, PROJECT, table.dataset_id, actor=editor)
    layout = layout_for(PROJECT, table.dataset_id)
    stored_before = sessions.read_events(layout, session.session_id).num_rows
    rng = random.Random(5)
    counter = iter(range(10**9))

    def core_save() -> object:
        row_id = str(FIRST_ID + rng.randrange(config.rows))
        n = sessions.apply_edits(
            catalog, session.session_id, [sessions.SetCell(row_id, "city", f"City {next(counter)}")], actor=editor
        )
        expect(n >= 1, "the edit was not saved")
        return n

    first_saves_ms: list[float] = []
    for _ in range(2):  # a scan of main, then the row locator's build
        start = time.perf_counter()
        core_save()
        first_saves_ms.append((time.perf_counter() - start) * 1000.0)

    # On the session's store: on S3 a bare append to the local disk measured the disk, not S3.
    scratch_dir: Location
    if isinstance(layout.live_edit_root, ObjectPath):
        scratch_dir = layout.live_edit_root.parent / f"bench-scratch-{uuid.uuid4().hex[:8]}"
    else:
        scratch_dir = Path(tempfile.mkdtemp(prefix="oreo-bench-edits-"))
    scratch = scratch_dir / "edits.delta"
    options = storage_options_for(scratch)

    def bare_append() -> object:
        i = next(counter)
        row = {
            "edit_id": f"{i:020d}",
            "session_id": "bench",
            "row_id": str(FIRST_ID + rng.randrange(config.rows)),
            "column": "city",
            "old_value": "Old",
            "new_value": f"City {i}",
            "user_id": READER,
            "ts": datetime.now(UTC),
            "validation": "{}",
        }
        data = pa.Table.from_pylist([row], schema=sessions.EDITS_SCHEMA)
        target = scratch if isinstance(scratch, Path) else str(scratch)
        write_deltalake(target, data, mode="append", storage_options=options)
        return row

    repeats = max(config.repeats, 60)  # a p95 needs enough samples
    try:
        timed = measure_interleaved(
            {"core apply_edits (1 cell)": core_save, "bare delta-rs append": bare_append},
            warmup=config.warmup,
            repeats=repeats,
        )
        stored = sessions.read_events(layout, session.session_id).num_rows - stored_before
        saves = len(first_saves_ms) + config.warmup + repeats
        expect(stored == saves, f"{stored} edits on disk after {saves} saves")
    finally:
        sessions.discard_session(catalog, session.session_id, actor=editor)
        if isinstance(scratch_dir, Path):
            shutil.rmtree(scratch_dir, ignore_errors=True)
        else:
            remove_tree(scratch_dir)
    core, bare = timed.values()
    return WorkloadResult(
        name=NAME,
        description=f"save one cell edit to a live-edit session on a {config.rows:,}-row table",
        core=core,
        baselines=[bare],
        max_p95_ms=MAX_P95_MS,
        notes={
            "samples": f"{repeats} saves at random rows, each its own Delta commit",
            "first saves in the process": (
                f"{first_saves_ms[0]:.0f} ms (scans main), {first_saves_ms[1]:.0f} ms (builds the row locator)"
            ),
        },
    )
