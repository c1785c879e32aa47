"""Restoring the 1,000,000-row table to the version before its last change.

Each round first changes one row with a Spark ``UPDATE`` (untimed), then restores the
table to the version before that change:

* core: ``core.history.restore_version`` - admin and reason checks, the restorable check
  (log replay and file existence), the Spark ``RESTORE`` with its userMetadata and
  transaction id, the commit check, catalog sync and the audit event;
* bare delta-spark: ``RESTORE TABLE delta.`main` TO VERSION AS OF n``.

The two alternate (and swap order every round) so load drift hits both alike.
Target: core median <= 1.2x the bare RESTORE.
"""

from __future__ import annotations

import sys

from bench._data import ADMIN, PROJECT, ensure_admin, ensure_customers
from bench._harness import BenchConfig, Timing, WorkloadResult, expect, time_call

NAME = "restore"
MAX_RATIO = 1.2
FIRST_ID = 100_001


def run(config: BenchConfig) -> WorkloadResult:
    from core import auth, datasets, engine, history
    from core.catalog import open_catalog

    table = ensure_customers(config.rows)
    ensure_admin()
    catalog = open_catalog()
    admin = auth.get_user(catalog, ADMIN)
    main = engine.delta_ref(table.path)
    counter = iter(range(10**6))

    def change_one_row() -> int:
        """Make a new version; returns the version before it (the restore target)."""
        before = engine.latest_version(table.path)
        commit = engine.new_commit("bench", "update", note="bench restore")
        with engine.dml_session(commit) as spark:
            spark.sql(f"UPDATE {main} SET plan = 'restore {next(counter)}' WHERE customer_id = {FIRST_ID}").collect()
        datasets.sync_dataset(catalog, PROJECT, table.dataset_id, commit, version=before + 1)
        return before

    def core_restore(target: int) -> None:
        result = history.restore_version(
            catalog, PROJECT, table.dataset_id, target, actor=admin, reason="benchmark restore"
        )
        expect(result.restored_to == target and result.version == target + 2, f"core restore {result}")

    def bare_restore(target: int) -> None:
        engine.get_spark().sql(f"RESTORE TABLE {main} TO VERSION AS OF {target}").collect()
        expect(engine.latest_version(table.path) == target + 2, "bare restore made no version")

    samples: dict[str, list[tuple[float, float]]] = {"core restore_version": [], "bare delta-spark RESTORE": []}
    repeats = max(1, config.spark_repeats)
    for round_no in range(repeats + 1):  # round 0 warms both paths up
        order = [("core restore_version", core_restore), ("bare delta-spark RESTORE", bare_restore)]
        if round_no % 2:
            order.reverse()
        for label, fn in order:
            target = change_one_row()
            print(f"[bench] restore round {round_no}: {label}", file=sys.stderr, flush=True)
            sample = time_call(lambda fn=fn, target=target: fn(target))  # type: ignore[misc]
            if round_no:
                samples[label].append(sample)
    core, bare = (
        Timing(label=label, samples_ms=tuple(w for w, _ in s), cpu_ms=tuple(c for _, c in s), warmup=1)
        for label, s in samples.items()
    )
    return WorkloadResult(
        name=NAME,
        description=f"restore the {config.rows:,}-row table to the version before its last change",
        core=core,
        baselines=[bare],
        ratio_baseline=bare.label,
        max_ratio=MAX_RATIO,
        notes={"main version after": engine.latest_version(table.path)},
    )
