"""Table maintenance (OPTIMIZE, ZORDER, VACUUM, checkpoints, stats) and cleanup of leftovers."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cli import context
from core import audit, engine, maintenance, reads, sessions
from core.auth import SYSTEM, Role, add_member, create_user, get_user
from core.catalog import Catalog, ChangeRequestRow, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, get_dataset, layout_for, sync_dataset
from core.errors import InvalidInput, NotFound, PermissionDenied
from core.layout import DatasetLayout
from core.projects import create_project
from tests.merge_support import fresh_copy, switch
from tests.test_cli import assert_one_error_line, run

pytestmark = pytest.mark.spark

APPENDS = 4


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """``demo/people``: a CTAS plus ``APPENDS`` small appends, so ``main`` has many small files."""
    base = tmp_path_factory.mktemp("maintenance")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    source = base / "people.csv"
    source.write_text("id,name,age\n" + "".join(f"{i},name {i},{20 + i}\n" for i in range(1, 9)))
    with pytest.MonkeyPatch.context() as mp:
        switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        create_project(catalog, "other")
        for name, role in (("ed", Role.EDITOR), ("ada", Role.ADMIN)):
            create_user(catalog, name, password=f"{name}-password-1")
            add_member(catalog, "demo", name, role)
        create_dataset(catalog, "demo", "people", source, key="id")
        main = layout_for("demo", "people").main
        commit = engine.new_commit("system", "test_append")
        for n in range(APPENDS):
            rows = ", ".join(f"('{i}', {i}, 'name {i}', {20 + i})" for i in range(100 + 10 * n, 105 + 10 * n))
            with engine.commit_metadata(commit):
                spark.sql(f"INSERT INTO {engine.delta_ref(main)} VALUES {rows}")
        sync_dataset(catalog, "demo", "people", commit, version=engine.latest_version(main))
        reset_catalogs()
    get_settings.cache_clear()
    return base


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    context.state.json = False
    yield open_catalog()


def _layout() -> DatasetLayout:
    return layout_for("demo", "people")


def _checksum(version: int | None = None) -> tuple[int, int]:
    """Row count and an order-independent hash of every row of ``main``."""
    scan = "delta_scan(?)" if version is None else "delta_scan(?, version => ?)"
    params: list[Any] = [str(_layout().main)] + ([] if version is None else [version])
    row = reads.cursor().execute(f"SELECT count(*), bit_xor(hash(t)) FROM {scan} t", params).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _data_files() -> list[Path]:
    main = _layout().main
    return [p for p in main.rglob("*.parquet") if "_delta_log" not in p.parts]


def _reports() -> list[Path]:
    return sorted(_layout().maintenance_reports().glob("*.json"))


def _events(catalog: Catalog, name: str) -> list[audit.StoredEvent]:
    return audit.list_events(catalog, name=name)


# ---------------------------------------------------------------- stats


def test_stats_match_the_table(catalog: Catalog) -> None:
    stats = maintenance.table_stats(catalog, "demo", "people", actor=get_user(catalog, "ed"))
    assert stats.files == len(_data_files()) >= APPENDS + 1  # nothing was ever removed
    assert stats.size_bytes == sum(p.stat().st_size for p in _data_files())
    assert stats.small_files == stats.files  # a few rows per file
    assert stats.versions == engine.latest_version(_layout().main) + 1 == APPENDS + 1
    assert (stats.last_optimize, stats.last_vacuum) == (None, None)


@pytest.mark.parametrize(
    ("sizes", "small"),
    [([100], 0), ([100, 200], 2), ([100, 5 << 20], 0), ([100, 200, 5 << 20], 2), ([], 0)],
    ids=["one-small-file", "two", "one-small-beside-a-big-one", "two-beside-a-big-one", "empty"],
)
def test_small_files_are_the_ones_optimize_would_compact(sizes: list[int], small: int) -> None:
    assert maintenance._small_files(sizes, 1 << 20) == small


def test_stats_need_membership(catalog: Catalog) -> None:
    create_user(catalog, "out", password="out-password-1")
    with pytest.raises(PermissionDenied, match="not a member"):
        maintenance.table_stats(catalog, "demo", "people", actor=get_user(catalog, "out"))


def test_vacuum_horizon_is_the_restore_window(monkeypatch: pytest.MonkeyPatch) -> None:
    assert maintenance.vacuum_horizon_hours() == 90 * 24
    monkeypatch.setenv("OREO_RESTORE_WINDOW_DAYS", "7")
    get_settings.cache_clear()
    assert maintenance.vacuum_horizon_hours() == 7 * 24


# ---------------------------------------------------------------- optimize


def test_optimize_zorder_keeps_the_data_and_compacts(catalog: Catalog) -> None:
    main = _layout().main
    before = maintenance.table_stats(catalog, "demo", "people", actor=SYSTEM)
    checksum = _checksum()
    version_before = engine.latest_version(main)
    calls: list[tuple[str, float]] = []

    report = maintenance.maintain(
        catalog,
        "demo",
        "people",
        actor=get_user(catalog, "ada"),
        zorder=["age", "row_id"],
        progress=lambda message, fraction: calls.append((message, fraction)),
    )

    assert _checksum() == checksum
    after = maintenance.table_stats(catalog, "demo", "people", actor=SYSTEM)
    assert after.files < before.files
    assert after.last_optimize is not None and after.last_vacuum is None
    steps = report["steps"]
    assert list(steps) == ["retention", "optimize"]
    assert steps["optimize"]["zorder"] == ["age", "row_id"]
    assert steps["optimize"]["before"]["files"] == before.files
    assert steps["optimize"]["after"]["files"] == after.files
    # The retention properties were raised to the restore window in their own commit.
    assert set(steps["retention"]["changed"]) == {maintenance.LOG_RETENTION, maintenance.DELETED_FILE_RETENTION}
    latest = engine.latest_version(main)
    assert (
        report["versions_created"] == list(range(version_before + 1, latest + 1))
        and len(report["versions_created"]) == 2
    )
    operations = {c.version: c for c in engine.history(main, limit=2)}
    assert operations[latest].operation == "OPTIMIZE"
    assert operations[latest].user_metadata["action"] == "optimize"
    assert operations[latest].user_metadata["actor"] == "ada"
    # The catalog follows the new version, and the row count is unchanged.
    info = get_dataset(catalog, "demo", "people", actor=SYSTEM)
    assert (info.version, info.rows) == (latest, checksum[0])
    # Report on disk and audit event.
    assert [p.stem for p in _reports()] == [report["run_id"]]
    stored = json.loads(Path(report["report"]).read_text())
    assert stored["run_id"] == report["run_id"] and stored["actor"] == "ada" and stored["error"] is None
    assert stored["before"]["files"] == before.files and stored["after"]["files"] == after.files
    (event,) = _events(catalog, "maintenance_run")
    assert event.details["run_id"] == report["run_id"] and event.details["steps"] == ["retention", "optimize"]
    assert calls[-1][1] == 1.0 and all(0.0 <= f <= 1.0 for _, f in calls)
    assert [f for _, f in calls] == sorted(f for _, f in calls)

    # A second, plain OPTIMIZE has nothing left to do and creates no version.
    again = maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, optimize=True)
    assert again["nothing_to_do"] is True
    assert again["versions_created"] == [] and again["steps"]["retention"]["changed"] == {}
    assert engine.latest_version(main) == latest
    assert len(_reports()) == 2


# ---------------------------------------------------------------- vacuum


def test_vacuum_refuses_a_short_retention_unless_forced(catalog: Catalog) -> None:
    main = _layout().main
    version = engine.latest_version(main)
    with pytest.raises(
        InvalidInput, match=rf"retaining 0 h would make versions 0–{version - 1} of demo/people .*--force"
    ):
        maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, vacuum=True, retain_hours=0)
    # Every version is younger than an hour: none is at risk yet, but the window still holds.
    with pytest.raises(InvalidInput, match=r"retaining 1 h is shorter than the 90-day restore window.*--force"):
        maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, vacuum=True, retain_hours=1)
    assert engine.latest_version(main) == version
    assert _reports() == [] and _events(catalog, "maintenance_run") == []

    # The default retention (the restore window) deletes nothing recent.
    files = sorted(_data_files())
    kept = maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, vacuum=True)
    assert kept["steps"]["vacuum"]["retain_hours"] == maintenance.vacuum_horizon_hours()
    assert kept["steps"]["vacuum"]["files_deleted"] == 0
    assert sorted(_data_files()) == files
    assert _checksum(0)[0] == 8  # the first version still reads

    # Forced: OPTIMIZE replaces every file, and VACUUM 0 h deletes the replaced ones.
    checksum = _checksum()
    forced = maintenance.maintain(
        catalog, "demo", "people", actor=SYSTEM, optimize=True, vacuum=True, retain_hours=0, force=True
    )
    step = forced["steps"]["vacuum"]
    assert step["forced"] is True and step["files_deleted"] == len(files) and step["files_deleted"] > 0
    assert step["unrestorable_versions"][0] == 0
    assert step["versions"]  # VACUUM START and END
    stats = maintenance.table_stats(catalog, "demo", "people", actor=SYSTEM)
    assert stats.files == len(_data_files())  # only the current snapshot's files are left
    assert stats.last_vacuum is not None and stats.last_optimize is not None
    assert _checksum() == checksum
    with pytest.raises(Exception, match=r"(?i)no such file|not found|does not exist|IO Error"):
        _checksum(0)
    info = get_dataset(catalog, "demo", "people", actor=SYSTEM)
    assert info.version == engine.latest_version(main)


def test_a_vacuum_dry_run_lists_files_and_bytes_and_deletes_nothing(catalog: Catalog) -> None:
    main = _layout().main
    # OPTIMIZE replaces every file: each replaced one is what VACUUM 0 h would delete.
    maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, optimize=True)
    version, files = engine.latest_version(main), sorted(_data_files())
    current = set(_current_files(main))
    replaced = {p.name: p.stat().st_size for p in files if p.name not in current}
    assert replaced
    plan = maintenance.vacuum_dry_run(catalog, "demo", "people", actor=SYSTEM, retain_hours=0)
    assert {f.path: f.size_bytes for f in plan.files} == replaced  # paths inside the table, no server folders
    assert plan.size_bytes == sum(replaced.values())
    assert plan.unrestorable_versions is not None and plan.unrestorable_versions[0] == 0
    assert sorted(_data_files()) == files and engine.latest_version(main) == version  # nothing deleted or committed
    # At the safe horizon nothing recent goes.
    assert maintenance.vacuum_dry_run(catalog, "demo", "people", actor=SYSTEM).files == []
    with pytest.raises(PermissionDenied):
        maintenance.vacuum_dry_run(catalog, "demo", "people", actor=get_user(catalog, "ed"))
    with pytest.raises(InvalidInput, match="retention must be 0 hours or more"):
        maintenance.vacuum_dry_run(catalog, "demo", "people", actor=SYSTEM, retain_hours=-1)


def test_a_vacuum_dry_run_lists_exactly_what_the_run_deletes(catalog: Catalog) -> None:
    main = _layout().main
    # An UPDATE writes change data files (``_change_data``) beside the data file it replaces.
    commit = engine.new_commit("system", "test_update")
    with engine.commit_metadata(commit):
        engine.get_spark().sql(f"UPDATE {engine.delta_ref(main)} SET age = age + 1 WHERE id = 1").collect()
    sync_dataset(catalog, "demo", "people", commit, version=engine.latest_version(main))
    before = {p.relative_to(main).as_posix() for p in _data_files()}
    assert any(p.startswith("_change_data/") for p in before)

    plan = maintenance.vacuum_dry_run(catalog, "demo", "people", actor=SYSTEM, retain_hours=0)
    done = maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, vacuum=True, retain_hours=0, force=True)
    gone = before - {p.relative_to(main).as_posix() for p in _data_files()}
    assert sorted(f.path for f in plan.files) == sorted(gone)
    assert done["steps"]["vacuum"]["files_deleted"] == len(gone) > 0 and not done["nothing_to_do"]

    # The change files deleted, ``_change_data`` is an empty folder Delta's dry run still lists:
    # no file for the dry run, no VACUUM (and no version) for the run, and a report that agrees.
    assert (main / "_change_data").is_dir() and not any((main / "_change_data").iterdir())
    assert maintenance.vacuum_dry_run(catalog, "demo", "people", actor=SYSTEM, retain_hours=0).files == []
    version = engine.latest_version(main)
    again = maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, vacuum=True, retain_hours=0, force=True)
    assert engine.latest_version(main) == version
    assert again["versions_created"] == [] and again["steps"]["vacuum"]["versions"] == []
    assert again["nothing_to_do"] is True


def _current_files(main: Path) -> list[str]:
    from deltalake import DeltaTable

    return [Path(uri).name for uri in DeltaTable(str(main)).file_uris()]


def test_vacuum_keeps_the_restore_window_in_the_table_properties(catalog: Catalog) -> None:
    from deltalake import DeltaTable

    maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, checkpoint=True)
    config = DeltaTable(str(_layout().main)).metadata().configuration
    assert config[maintenance.LOG_RETENTION] == "interval 90 days"
    assert config[maintenance.DELETED_FILE_RETENTION] == "interval 90 days"


# ---------------------------------------------------------------- checkpoint


def test_checkpoint_writes_a_checkpoint_file_once(catalog: Catalog) -> None:
    from core import history

    main = _layout().main
    log = main / "_delta_log"
    assert not (log / "_last_checkpoint").exists()

    report = maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, checkpoint=True)

    # SQL alone (no JVM handle): the interval-1 property commit writes the checkpoint, the next puts it back.
    start = engine.latest_version(main) - 2  # after the retention step's commit
    version = start + 1
    assert report["steps"]["checkpoint"] == {"version": version, "written": True, "versions": [start + 1, start + 2]}
    assert (log / f"{version:020d}.checkpoint.parquet").is_file()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == version
    props = {r[0]: r[1] for r in engine.get_spark().sql(f"SHOW TBLPROPERTIES {engine.delta_ref(main)}").collect()}
    assert maintenance.CHECKPOINT_INTERVAL not in props  # the default again
    # History stays honest: two maintenance versions, tagged with the run and hidden with maintenance.
    page = history.table_history(catalog, "demo", "people", actor=SYSTEM, limit=2)
    assert [(v.version, v.kind, v.actor) for v in page.versions] == [
        (start + 2, "maintenance", "system"),
        (start + 1, "maintenance", "system"),
    ]
    assert get_dataset(catalog, "demo", "people", actor=SYSTEM).version == start + 2  # the catalog follows
    again = maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, checkpoint=True)
    assert again["steps"]["checkpoint"] == {"version": version, "written": False, "versions": []}
    assert again["nothing_to_do"] is True and again["versions_created"] == []


def test_checkpoint_puts_back_an_interval_the_table_had(catalog: Catalog) -> None:
    main = _layout().main
    ref = engine.delta_ref(main)
    engine.get_spark().sql(f"ALTER TABLE {ref} SET TBLPROPERTIES ('delta.checkpointInterval' = '25')").collect()

    report = maintenance.maintain(catalog, "demo", "people", actor=SYSTEM, checkpoint=True)

    assert report["steps"]["checkpoint"]["written"] is True
    props = {r[0]: r[1] for r in engine.get_spark().sql(f"SHOW TBLPROPERTIES {ref}").collect()}
    assert props[maintenance.CHECKPOINT_INTERVAL] == "25"


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("actor", "dataset", "options", "error", "message"),
    [
        ("system", "nope", {"optimize": True}, NotFound, "unknown dataset demo/nope"),
        ("ed", "people", {"optimize": True}, PermissionDenied, "needs the admin role"),
        ("ada", "people", {"zorder": ["age", "shoe_size"]}, InvalidInput, "unknown column 'shoe_size'"),
        ("ada", "people", {"vacuum": True, "retain_hours": -1}, InvalidInput, "0 hours or more"),
        ("ada", "people", {"vacuum": True, "retain_hours": float("nan")}, InvalidInput, "0 hours or more"),
        ("ada", "people", {}, InvalidInput, "nothing to do"),
        ("ada", "people", {"optimize": True, "retain_hours": 5}, InvalidInput, "only to vacuum"),
    ],
)
def test_bad_input_changes_nothing(
    catalog: Catalog, actor: str, dataset: str, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    main = _layout().main
    version = engine.latest_version(main)
    user = SYSTEM if actor == "system" else get_user(catalog, actor)
    with pytest.raises(error, match=message):
        maintenance.maintain(catalog, "demo", dataset, actor=user, **options)
    assert engine.latest_version(main) == version
    assert _reports() == [] and _events(catalog, "maintenance_run") == []


# ---------------------------------------------------------------- cleanup


def _age(path: Path, hours: float) -> None:
    """Make ``path`` and everything in it look ``hours`` old."""
    when = time.time() - hours * 3600
    for folder, _dirs, files in os.walk(path):
        for name in files:
            os.utime(Path(folder) / name, (when, when))
        os.utime(folder, (when, when))


def _session(catalog: Catalog, user: str, *, idle_hours: float, cr_id: str | None = None) -> str:
    info = sessions.open_session(catalog, "demo", "people", actor=get_user(catalog, user))
    layout = _layout()
    meta = json.loads(layout.session_metadata(info.session_id).read_text())
    meta["last_activity"] = (datetime.now(UTC) - timedelta(hours=idle_hours)).isoformat()
    if cr_id is not None:
        meta.update(state="submitted", cr_id=cr_id)
    layout.session_metadata(info.session_id).write_text(json.dumps(meta))
    return info.session_id


def _change_request(catalog: Catalog, cr_id: str, state: str, *, age_hours: float = 0) -> None:
    with catalog.session() as s:
        s.add(
            ChangeRequestRow(
                id=cr_id, project_id="demo", dataset_id="people", author="ed", title="t", state=state, base_version=0
            )
        )
    staging = _layout().staging(cr_id)
    (staging / "_delta_log").mkdir(parents=True)
    (staging / "part-0.parquet").write_bytes(b"x")
    _age(staging, age_hours)


def _upload(upload_id: str, age_hours: float) -> Path:
    folder = _layout().upload(upload_id)
    folder.mkdir(parents=True)
    (folder / "raw.csv").write_text("id\n1\n")
    _age(folder, age_hours)
    return folder


@pytest.fixture
def leftovers(catalog: Catalog) -> dict[str, Any]:
    """One of each: expired and fresh, closed and open, orphan and in use."""
    create_user(catalog, "ed2", password="ed2-password-1")
    create_user(catalog, "ed3", password="ed3-password-1")
    create_user(catalog, "ed4", password="ed4-password-1")
    for name in ("ed2", "ed3", "ed4"):
        add_member(catalog, "demo", name, Role.EDITOR)
    for cr_id, state in (("cr_open", "open"), ("cr_merged", "merged"), ("cr_rejected", "rejected")):
        _change_request(catalog, cr_id, state)
    (source,) = _children(_layout().imports_root)  # the dataset's own upload, which always stays
    return {
        "expired": _session(catalog, "ed", idle_hours=100),
        "fresh": _session(catalog, "ed2", idle_hours=1),
        "closed": _session(catalog, "ed3", idle_hours=1, cr_id="cr_merged"),
        "pending": _session(catalog, "ed4", idle_hours=100, cr_id="cr_open"),
        "orphan_staging_old": _change_staging_orphan("cr_gone", 100),
        "orphan_staging_new": _change_staging_orphan("cr_writing", 0),
        "old_import": _upload("up_old", 100).name,
        "new_import": _upload("up_new", 1).name,
        "source": source.name,
    }


def _children(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir())


def _change_staging_orphan(cr_id: str, age_hours: float) -> str:
    staging = _layout().staging(cr_id)
    staging.mkdir(parents=True)
    (staging / "part-0.parquet").write_bytes(b"x")
    _age(staging, age_hours)
    return cr_id


def _names(folder: Path) -> set[str]:
    return {p.name for p in _children(folder)}


def test_cleanup_removes_exactly_what_expired(catalog: Catalog, leftovers: dict[str, Any]) -> None:
    layout = _layout()
    everything = (_names(layout.live_edit_root), _names(layout.staging_root), _names(layout.imports_root))
    p = "demo/people/"
    expected = {
        "sessions_removed": sorted([p + leftovers["expired"], p + leftovers["closed"]]),
        "staging_removed": sorted([p + "cr_gone", p + "cr_merged", p + "cr_rejected"]),
        "imports_removed": [p + "up_old"],
    }

    dry = maintenance.cleanup(catalog, actor=SYSTEM, dry_run=True)
    assert {k: sorted(dry[k]) for k in expected} == expected
    assert dry["dry_run"] is True and dry["nothing_to_do"] is False
    assert (_names(layout.live_edit_root), _names(layout.staging_root), _names(layout.imports_root)) == everything

    done = maintenance.cleanup(catalog, actor=SYSTEM)
    assert {k: sorted(done[k]) for k in expected} == expected
    assert _names(layout.live_edit_root) == {leftovers["fresh"], leftovers["pending"]}
    assert _names(layout.staging_root) == {"cr_open", "cr_writing"}
    assert _names(layout.imports_root) == {leftovers["source"], "up_new"}
    assert {d["reason"] for d in done["details"] if d["kind"] == "session"} == {
        "expired",
        "change request cr_merged is closed",
    }
    discarded = {e.details["session_id"] for e in _events(catalog, "session_discarded")}
    assert discarded == {leftovers["expired"], leftovers["closed"]}

    again = maintenance.cleanup(catalog, actor=SYSTEM)
    assert again["nothing_to_do"] is True
    assert (again["sessions_removed"], again["staging_removed"], again["imports_removed"]) == ([], [], [])

    reports = sorted((get_settings().data_root / "audit" / "cleanup").glob("*.json"))
    assert {r.stem for r in reports} == {dry["run_id"], done["run_id"], again["run_id"]}
    assert json.loads(Path(done["report"]).read_text())["staging_removed"] == done["staging_removed"]
    events = {e.details["run_id"]: e for e in _events(catalog, "cleanup_run")}
    assert events[done["run_id"]].details["sessions_removed"] == 2
    assert events[dry["run_id"]].details["dry_run"] is True


def test_cleanup_ttl_override_reaches_fresh_leftovers_but_not_open_work(
    catalog: Catalog, leftovers: dict[str, Any]
) -> None:
    done = maintenance.cleanup(catalog, actor=SYSTEM, ttl_hours=0)
    p = "demo/people/"
    assert p + leftovers["fresh"] in done["sessions_removed"]
    assert p + "cr_writing" in done["staging_removed"] and p + "up_new" in done["imports_removed"]
    layout = _layout()
    assert _names(layout.live_edit_root) == {leftovers["pending"]}  # its request is still open
    assert _names(layout.staging_root) == {"cr_open"}
    assert _names(layout.imports_root) == {leftovers["source"]}


def test_cleanup_refusals_change_nothing(catalog: Catalog, leftovers: dict[str, Any]) -> None:
    layout = _layout()
    everything = (_names(layout.live_edit_root), _names(layout.staging_root), _names(layout.imports_root))
    with pytest.raises(PermissionDenied, match="cannot run cleanup"):
        maintenance.cleanup(catalog, actor=get_user(catalog, "ed"))
    with pytest.raises(InvalidInput, match="0 hours or more"):
        maintenance.cleanup(catalog, actor=SYSTEM, ttl_hours=-1)
    with pytest.raises(InvalidInput, match="at most 87,600 hours"):  # the fuzzer's 24e9 hours overflowed a date
        maintenance.cleanup(catalog, actor=SYSTEM, ttl_hours=24e9)
    assert (_names(layout.live_edit_root), _names(layout.staging_root), _names(layout.imports_root)) == everything
    assert _events(catalog, "cleanup_run") == []
    assert not (get_settings().data_root / "audit" / "cleanup").exists()


def test_a_project_admin_cleans_only_their_projects(catalog: Catalog, leftovers: dict[str, Any]) -> None:
    done = maintenance.cleanup(catalog, actor=get_user(catalog, "ada"), dry_run=True)
    assert done["datasets_checked"] == ["demo/people"]
    create_user(catalog, "olga", password="olga-password-1")
    add_member(catalog, "other", "olga", Role.ADMIN)
    assert maintenance.cleanup(catalog, actor=get_user(catalog, "olga"))["datasets_checked"] == []
    assert _names(_layout().imports_root) >= {"up_old"}


# ---------------------------------------------------------------- command line


def test_cli_maintain_json_and_refusals(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    result = run(capsys, "--json", "maintain", "demo", "people", "--checkpoint", "--as", "ada")
    assert result.code == 0, result.err
    doc = result.json()
    assert {"run_id", "actor", "started_at", "finished_at", "steps", "before", "after", "versions_created"} <= set(doc)
    assert doc["actor"] == "ada" and doc["steps"]["checkpoint"]["written"] is True
    assert Path(doc["report"]).is_file()

    assert_one_error_line(run(capsys, "maintain", "demo", "people"), "--optimize, --zorder, --vacuum, --checkpoint")
    assert_one_error_line(
        run(capsys, "--json", "maintain", "demo", "people", "--zorder", "age,nope"), "unknown column 'nope'"
    )
    assert_one_error_line(run(capsys, "maintain", "demo", "people", "--vacuum", "--retain-hours", "2"), "pass --force")


def test_cli_cleanup_json_and_refusal(capsys, catalog: Catalog, leftovers: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    result = run(capsys, "--json", "cleanup", "--dry-run")
    assert result.code == 0, result.err
    doc = result.json()
    assert {"sessions_removed", "staging_removed", "imports_removed"} <= set(doc)
    assert "demo/people/up_old" in doc["imports_removed"] and doc["dry_run"] is True
    assert "up_old" in _names(_layout().imports_root)

    assert_one_error_line(run(capsys, "cleanup", "--as", "ed"), "cannot run cleanup")
