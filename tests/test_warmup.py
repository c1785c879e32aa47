"""core.warmup: the small MERGE the engine runs on a scratch table as it starts, leaving nothing behind."""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any

import pytest

from core import engine, merge, warmup
from core.auth import SYSTEM
from core.catalog import Catalog, ChangeRequestRow
from core.config import get_settings
from core.datasets import create_dataset, layout_for, list_datasets
from core.errors import InvalidInput
from core.projects import create_project
from core.storage import remove_tree
from tests.test_warm_engine import run_python


def test_the_warm_up_merges_into_a_scratch_table_then_deletes_it(
    spark: Any, data_root: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OREO_WARM_UP_ROUNDS`` real Delta MERGEs into one scratch table under <data root>/tmp, gone after."""
    monkeypatch.setenv("OREO_WARM_UP_ROUNDS", "2")
    get_settings.cache_clear()
    merged: list[tuple[Path, str]] = []
    real = merge.merge_staged

    def spy(main: Path, staging: Path, commit: engine.CommitInfo, **kwargs: Any) -> None:
        real(main, staging, commit, **kwargs)
        merged.append((main, engine.history(main, limit=1)[0].operation))

    monkeypatch.setattr(merge, "merge_staged", spy)
    warmup.warm_up()

    assert len(merged) == 2, merged
    (main, operation), (again, operation_again) = merged
    assert operation == operation_again == "MERGE"
    assert again == main  # the rounds merge into one scratch table
    assert (data_root / "tmp") in main.parents
    assert not main.exists()
    assert list((data_root / "tmp").iterdir()) == []
    assert not (data_root / "projects").exists()
    assert list_datasets(catalog, actor=SYSTEM) == []


def test_no_rounds_merge_nothing_and_still_import_great_expectations(
    spark: Any, data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OREO_WARM_UP_ROUNDS=0`` (a replica on a Connect server warmed already): no scratch table, GX imported."""
    monkeypatch.setenv("OREO_WARM_UP_ROUNDS", "0")
    get_settings.cache_clear()
    merged: list[Path] = []
    monkeypatch.setattr(merge, "merge_staged", lambda main, *_args, **_kwargs: merged.append(main))
    imported: list[bool] = []
    monkeypatch.setattr(warmup.validation, "import_gx", lambda: imported.append(True))

    warmup.warm_up()

    assert (merged, imported) == ([], [True])
    assert not (data_root / "tmp").exists() or list((data_root / "tmp").iterdir()) == []


def test_a_negative_number_of_rounds_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OREO_WARM_UP_ROUNDS", "-1")
    get_settings.cache_clear()
    with pytest.raises(InvalidInput, match="setting OREO_WARM_UP_ROUNDS must be between 0 and 20, got -1"):
        get_settings()
    get_settings.cache_clear()


def test_a_killed_warm_ups_old_scratch_table_is_removed(spark: Any, data_root: Path) -> None:
    """A scratch table older than an hour is a leftover; a fresh one (another server's warm-up) is kept."""
    old = data_root / "tmp" / f"{warmup.PREFIX}old"
    fresh = data_root / "tmp" / f"{warmup.PREFIX}running"
    for folder in (old, fresh):
        (folder / "main" / "_delta_log").mkdir(parents=True)
    hours_ago = time.time() - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))

    warmup.warm_up()

    assert not old.exists()
    assert fresh.is_dir()


def test_the_server_loads_the_tables_in_review_first_then_the_newest_and_skips_a_broken_one(
    spark: Any, data_root: Path, catalog: Catalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Tables with requests in review come first, then the most recently committed, at most ``limit``."""
    create_project(catalog, "shop")
    source = tmp_path / "rows.csv"
    source.write_text("id,name\n1,a\n2,b\n")
    for name in ("old", "reviewed", "middle", "broken", "newest"):
        create_dataset(catalog, "shop", name, source, key="id")
    with catalog.session() as s:
        s.add(ChangeRequestRow(id="cr_1", project_id="shop", dataset_id="reviewed", author="ann", title="t",
                               state="open", base_version=0))  # fmt: skip
        s.add(ChangeRequestRow(id="cr_2", project_id="shop", dataset_id="old", author="ann", title="t",
                               state="merged", base_version=0))  # fmt: skip
    remove_tree(layout_for("shop", "broken").main)

    assert warmup.warm_tables(catalog, limit=3) == ["shop/reviewed", "shop/newest"]  # "broken" took a place
    assert "warming shop/broken up failed" in caplog.text
    assert warmup.warm_tables(catalog, limit=1) == ["shop/reviewed"]
    assert warmup.warm_tables(catalog) == ["shop/reviewed", "shop/newest", "shop/middle", "shop/old"]


WARM_START = """
    import json, logging
    from core import engine, warmup

    logged = []

    class Keep(logging.Handler):
        def emit(self, record):
            logged.append(self.format(record))

    logging.getLogger("core.engine").addHandler(Keep())
    ran = []

    def warm_up():
        ran.append(engine.engine_status().state)  # the engine is ready before its warm-up runs
        warmup.warm_up()
        raise RuntimeError("the warm-up broke after its MERGE")

    assert engine.start_in_background(warm_up=warm_up)
    status = engine.wait_for_engine(600)
    while status.state == "starting":
        status = engine.wait_for_engine(600)
    warmed = engine.wait_until_warm(600)
    print(json.dumps({"ran": ran, "warmed": warmed, "status": engine.engine_status().to_json(), "logged": logged}))
"""


def test_the_background_start_warms_up_after_ready_and_a_failure_is_logged(tmp_path: Path) -> None:
    """``start_in_background(warm_up=...)`` runs it once Spark is up; its error is logged, ``warm`` turns true."""
    done = run_python(WARM_START, tmp_path)
    assert done["ran"] == ["ready"], done
    assert done["warmed"] is True, done
    status = done["status"]
    assert isinstance(status, dict) and status["state"] == "ready" and status["warm"] is True, done
    assert status["error"] is None, done
    assert any("the warm-up broke after its MERGE" in line for line in done["logged"]), done  # type: ignore[union-attr]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_server_warm_up_freezes_the_heap_it_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(warmup, "warm_up", lambda: calls.append("warm_up"))
    monkeypatch.setattr(warmup, "warm_tables", lambda catalog: calls.append("warm_tables") or [])
    monkeypatch.setattr(warmup, "open_catalog", lambda: None)
    gc.unfreeze()
    try:
        warmup.warm_server()
        assert calls == ["warm_up", "warm_tables"]
        # What was alive then is out of the collector's full passes; what comes later is not.
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()
