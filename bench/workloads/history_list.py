"""Listing the history of a table with 1,000 versions.

A small dataset (``history_1000_versions``) is written once by delta-rs with 1,000
one-row commits, each carrying Oreo-style userMetadata (untimed; reused by later runs).
Then:

* core: ``core.history.table_history`` - permission check, the log read, userMetadata
  and metrics of every version, change-request titles from the catalog, and the
  restorable flag of every version;
* bare delta-spark: ``DeltaTable.forPath(path).history().collect()`` - the engine's own
  history of the same table.

Target: core median < 1 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench._data import PROJECT, READER, ensure_reader
from bench._harness import BenchConfig, WorkloadResult, expect, measure_interleaved

NAME = "history"
VERSIONS = 1_000
MAX_MEDIAN_MS = 1000.0
DATASET = "history_1000_versions"


def _ensure_table() -> Path:
    """The dataset with ``VERSIONS`` versions, written once by delta-rs and reused.

    A thousand Spark commits take half an hour on a small machine, so the log is written
    by delta-rs (one commit per version, each with Oreo-style userMetadata) and the
    dataset is registered in the catalog as Oreo does after a commit. The timed paths
    only read the log, which is the same whichever writer made it.
    """
    import shutil

    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake

    from core import datasets, engine
    from core.catalog import DatasetRow, open_catalog

    ensure_reader()
    catalog = open_catalog()
    layout = datasets.layout_for(PROJECT, DATASET)
    with catalog.session() as s:
        known = s.get(DatasetRow, (PROJECT, DATASET)) is not None
    if known and (layout.main / "_delta_log").is_dir() and engine.latest_version(layout.main) + 1 >= VERSIONS:
        return layout.main
    if known:
        raise RuntimeError(f"{PROJECT}/{DATASET} is incomplete; rm -rf {layout.main.parent.parent.parent.parent}")
    print(f"[bench] writing {VERSIONS} versions of {DATASET} with delta-rs (once)", file=sys.stderr, flush=True)
    shutil.rmtree(layout.main, ignore_errors=True)
    for n in range(VERSIONS):
        commit = engine.new_commit("bench", "append", note=f"bench append {n}")
        write_deltalake(
            str(layout.main),
            pa.table({"row_id": [str(n)], "id": pa.array([n], pa.int64()), "note": [f"v{n}"]}),
            mode="append",
            commit_properties=CommitProperties(custom_metadata={"userMetadata": commit.user_metadata()}),
        )
    datasets.sync_dataset(catalog, PROJECT, DATASET, commit, key_column="id", created_by="bench", version=VERSIONS - 1)
    return layout.main


def run(config: BenchConfig) -> WorkloadResult:
    from delta.tables import DeltaTable

    from core import auth, engine, history
    from core.catalog import open_catalog

    path = _ensure_table()
    catalog = open_catalog()
    reader = auth.get_user(catalog, READER)
    spark = engine.get_spark()

    def core_history() -> object:
        page = history.table_history(catalog, PROJECT, DATASET, actor=reader)
        expect(len(page.versions) == VERSIONS and page.total == VERSIONS, f"core listed {len(page.versions)}")
        return page

    def bare_history() -> object:
        rows = DeltaTable.forPath(spark, str(path)).history().collect()
        expect(len(rows) == VERSIONS, f"bare listed {len(rows)}")
        return rows

    fns = {"core table_history (1,000 versions)": core_history}
    if config.spark:
        fns["bare delta-spark history()"] = bare_history
    timed = measure_interleaved(fns, warmup=min(config.warmup, 2), repeats=max(5, config.repeats // 3))
    core, *baselines = timed.values()
    return WorkloadResult(
        name=NAME,
        description=f"list the history of a table with {VERSIONS:,} versions",
        core=core,
        baselines=baselines,
        ratio_baseline=baselines[0].label if baselines else None,
        max_median_ms=MAX_MEDIAN_MS,
        notes={"versions": VERSIONS, "core includes": "metadata, metrics, CR titles, restorable flags"},
    )
