"""The core loop on an s3:// data root, run as its own process by tests/test_storage_s3.py
(embedded Spark) and tests/test_cluster_s3.py (Spark Connect on ``scripts/cluster.sh up --s3``).

Its own process, because Spark must start with the s3a jars and confs, which the test
session's shared Spark does not have. Prints one JSON line with what it saw; ``run_loop``
runs it and ``check_loop`` holds what both tests expect of that line.

After the loop, the same process runs ``oreo`` commands in-process (the one Spark serves
them all): ``export`` (CSV and Parquet), ``maintain --vacuum`` (dry run, then for real),
``doctor``, and ``migrate parquet`` (and ``migrate postgres`` when ``OREO_S3_LOOP_PG``
names a source database), each with its target on the store, and two refusals that must
leave nothing there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from core import auth, engine, history, maintenance, merge, projects, reads, sessions, storage
from core.catalog import open_catalog
from core.change_requests import submit_change_request
from core.datasets import create_dataset, dataset_columns, get_dataset, layout_for
from tests.in_process import run_cli


def main(work: Path) -> None:
    source = work / "nums.csv"
    source.write_text("id,name,qty\n1,one,10\n2,two,20\n3,three,30\n")
    catalog = open_catalog()
    projects.create_project(catalog, "demo")
    for name, role in (("ed", auth.Role.EDITOR), ("al", auth.Role.APPROVER)):
        auth.create_user(catalog, name, password=f"{name}-password-1")
        auth.add_member(catalog, "demo", name, role)
    created = create_dataset(catalog, "demo", "nums", source, key="id")
    editor, approver = auth.get_user(catalog, "ed"), auth.get_user(catalog, "al")
    session = sessions.open_session(catalog, "demo", "nums", actor=editor)
    sessions.apply_edits(catalog, session.session_id, [sessions.SetCell("2", "qty", "25")], actor=editor)
    edits = layout_for("demo", "nums").live_edit(session.session_id)
    edits_saved = (edits / "_delta_log").is_dir()
    cr = submit_change_request(catalog, session.session_id, actor=editor, title="qty of two")
    merge.approve_change_request(catalog, cr.id, actor=approver)
    main_table = layout_for("demo", "nums").main
    rows = reads.read_rows_by_id(main_table, ["1", "2", "3"])
    admin = auth.SYSTEM
    columns = [c.name for c in dataset_columns(get_dataset(catalog, "demo", "nums", actor=admin))]
    versions = history.table_history(catalog, "demo", "nums", actor=approver)
    report = maintenance.maintain(catalog, "demo", "nums", actor=admin, optimize=True)
    restored = history.restore_version(catalog, "demo", "nums", 0, actor=admin, reason="back to the upload")
    after = reads.read_rows_by_id(main_table, ["2"])
    seen = {
        "connect": engine.is_connect(engine.get_spark()),
        "path": created.path,
        "main": str(main_table),
        "version": engine.latest_version(main_table),
        "qty": dict(zip(rows["row_id"], rows["qty"].astype(int), strict=True)),
        "live_edit": str(edits),
        "edits_saved": edits_saved,
        "columns": columns,
        "history": sorted(v.version for v in versions.versions),
        "report_on_store": storage.location(str(report["report"])).is_file(),
        "restored_version": restored.version,
        "qty_after_restore": int(after["qty"].iloc[0]),
    }
    started = time.monotonic()
    seen.update(_commands(work, catalog))
    seen.update(_refusals(work))
    took = time.monotonic() - started
    print(f"{TIMING}export, vacuum, doctor, migrate took {took:.1f} s ({', '.join(_TOOK)})", file=sys.stderr)
    print(json.dumps(seen))
    engine.get_spark().stop()


TIMING = "s3 loop: "  # run_loop passes the loop's lines starting so on to the test's stderr


_oreo = run_cli  # ``oreo --json ARGS`` in this process: exit code, the JSON document (or None) and stderr


_TOOK: list[str] = []  # "<command> <seconds>" of each ``_ok`` call, for the timing line


def _ok(*args: str) -> Any:
    started = time.monotonic()
    code, doc, err = _oreo(*args)
    _TOOK.append(f"{' '.join(a for a in args[:3] if a.isidentifier())} {time.monotonic() - started:.0f}")
    assert code == 0, f"oreo {' '.join(args)} exited {code}: {err[-3000:]}"
    return doc


def _pg_source(dsn: str) -> str:
    """A small source table in the database ``dsn`` names; returns ``schema.table``."""
    import psycopg

    name = f"src.s3loop_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS src")
        conn.execute(f"CREATE TABLE {name} (id integer, name text, price numeric(8,2))")
        conn.execute(f"INSERT INTO {name} VALUES (1, 'one', 1.50), (2, 'two', NULL), (3, NULL, 3.25)")
    return name


def _commands(work: Path, catalog: Any) -> dict[str, Any]:
    """Export, VACUUM, doctor and migrate on the store, through the CLI."""
    seen: dict[str, Any] = {}
    seen["exported"] = [
        _ok("export", "demo", "nums", "--out", str(work / "v1.csv"), "--version", "1"),
        _ok("export", "demo", "nums", "--out", str(work / "latest.parquet")),
    ]
    seen["export_csv"] = (work / "v1.csv").read_text().splitlines()
    seen["export_parquet"] = pq.read_table(work / "latest.parquet").sort_by("row_id").to_pydict()
    seen["export_leftovers"] = sorted(p.name for p in work.iterdir() if p.name.endswith(".tmp"))

    plan = _ok("maintain", "demo", "nums", "--vacuum", "--dry-run", "--retain-hours", "0")
    seen["vacuum_plan"] = plan
    vacuumed = _ok("maintain", "demo", "nums", "--vacuum", "--retain-hours", "0", "--force")
    seen["vacuum"] = vacuumed["steps"]["vacuum"]
    seen["vacuum_report_on_store"] = storage.location(str(vacuumed["report"])).is_file()
    seen["vacuum_report"] = json.loads(storage.read_text(storage.location(str(vacuumed["report"]))))["run_id"]
    seen["vacuum_run"] = vacuumed["run_id"]
    seen["rows_after_vacuum"] = reads.count_rows(layout_for("demo", "nums").main)
    seen["doctor"] = _ok("doctor", "demo", "nums")

    source = work / "parquet_source"
    (source / "part").mkdir(parents=True)
    pq.write_table(pa.table({"id": [1, 2], "name": ["a", None]}), source / "one.parquet")
    pq.write_table(pa.table({"id": [3], "name": ["c"]}), source / "part" / "two.parquet")
    seen["migrate_parquet"] = _ok("migrate", "parquet", str(source), "demo", "mig", "--key", "id")
    mig = get_dataset(catalog, "demo", "mig", actor=auth.SYSTEM)
    seen["migrated_path"] = mig.path
    seen["migrated_rows"] = reads.count_rows(storage.location(mig.path))
    seen["doctor_migrated"] = _ok("doctor", "demo", "mig")["ok"]
    dsn = os.environ.get("OREO_S3_LOOP_PG")
    if dsn:
        table = _pg_source(dsn)
        seen["migrate_postgres"] = _ok("migrate", "postgres", "demo", "pgmig", "--dsn", dsn, "--table", table)
        seen["pg_path"] = get_dataset(catalog, "demo", "pgmig", actor=auth.SYSTEM).path
    return seen


def _refusals(work: Path) -> dict[str, Any]:
    """Bad input: one ``error:`` line, exit 1, and nothing written to the store."""
    seen: dict[str, Any] = {}
    bad = work / "bad_source"
    bad.mkdir()
    (bad / "broken.parquet").write_bytes(b"not parquet at all")
    code, doc, err = _oreo("migrate", "parquet", str(bad), "demo", "broken", "--key", "id")
    seen["bad_migrate"] = {"code": code, "doc": doc, "err": err.splitlines()}
    seen["bad_migrate_left"] = layout_for("demo", "broken").exists()
    code, doc, err = _oreo("migrate", "parquet", str(work / "parquet_source"), "demo", "mig", "--key", "id")
    seen["again_migrate"] = {"code": code, "doc": doc, "err": err.splitlines()}
    code, doc, err = _oreo("export", "demo", "nums", "--out", str(work / "nums.txt"))
    seen["bad_export"] = {"code": code, "doc": doc, "err": err.splitlines()}
    return seen


def run_loop(work: Path, env: dict[str, str]) -> dict[str, Any]:
    """This script in its own process with ``env``; the JSON it printed last."""
    script = Path(__file__)
    env = {**env, "PYTHONPATH": str(script.parent.parent)}
    done = subprocess.run(
        [sys.executable, str(script), str(work)], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for line in done.stderr.splitlines():
        if line.startswith(TIMING):
            print(line, file=sys.stderr)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def check_loop(seen: dict[str, Any], root: storage.ObjectPath, work: Path) -> None:
    """What the loop must have done on the bucket under ``root`` (the AWS variables set)."""
    main = root / "projects" / "demo" / "datasets" / "nums" / "main"
    assert seen["path"] == seen["main"] == str(main)
    assert seen["qty"] == {"1": 10, "2": 25, "3": 30}  # after the approval's MERGE
    assert seen["columns"] == ["row_id", "id", "name", "qty"]
    assert seen["history"] == [0, 1]  # the create and the merge: the MERGE landed exactly once
    assert seen["report_on_store"], "the maintenance report is on the store"
    # OPTIMIZE (and its checkpoint) came before the RESTORE, whose commit is the newest
    assert seen["restored_version"] == seen["version"] > 1
    assert seen["qty_after_restore"] == 20
    assert (main / "_delta_log" / f"{seen['version']:020d}.json").is_file()
    assert seen["edits_saved"] and seen["live_edit"].startswith(str(root))
    assert not storage.location(seen["live_edit"]).exists()  # the approval removed the session's folder
    audit = main.parent / "audit"
    assert storage.glob(audit, "validation_runs/*/summary.json"), "the validation run is on the store"
    assert not (work / "delta").exists() and not any(work.glob("**/_delta_log"))
    assert os.environ["DELTA_DATA_ROOT"].startswith("s3://")
    _check_commands(seen, root, work)


def _check_commands(seen: dict[str, Any], root: storage.ObjectPath, work: Path) -> None:
    """What ``_commands`` and ``_refusals`` must have seen."""
    datasets = root / "projects" / "demo" / "datasets"
    # export: a version of the table on the store, to a local file, with nothing left behind
    assert seen["exported"] == [
        {"path": str(work / "v1.csv"), "version": 1, "rows": 3, "format": "csv"},
        {"path": str(work / "latest.parquet"), "version": seen["version"], "rows": 3, "format": "parquet"},
    ]
    assert seen["export_csv"][0] == "row_id,id,name,qty"
    assert sorted(seen["export_csv"][1:]) == ["1,1,one,10", "2,2,two,25", "3,3,three,30"]
    assert seen["export_parquet"] == {
        "row_id": ["1", "2", "3"], "id": [1, 2, 3], "name": ["one", "two", "three"], "qty": [10, 20, 30]
    }  # fmt: skip
    assert seen["export_leftovers"] == []
    # VACUUM: the dry run names the files (inside the table, with their sizes); the run deletes them
    plan = seen["vacuum_plan"]
    assert plan["files"] and all(f["size_bytes"] > 0 for f in plan["files"]), plan
    assert not any("://" in f["path"] or f["path"].startswith("/") for f in plan["files"]), plan
    assert plan["size_bytes"] == sum(f["size_bytes"] for f in plan["files"])
    vacuum = seen["vacuum"]
    assert vacuum["files_deleted"] == vacuum["files_deletable"] == len(plan["files"])
    assert vacuum["after"]["files_on_disk"] == vacuum["after"]["files"] == 1
    assert seen["vacuum_report_on_store"] and seen["vacuum_report"] == seen["vacuum_run"]
    assert seen["rows_after_vacuum"] == 3
    # doctor: every check runs on the store, and passes
    assert seen["doctor"]["ok"] and [c["name"] for c in seen["doctor"]["checks"] if c["ok"]] == [
        "log", "files", "checkpoints", "catalog_version", "row_count"
    ]  # fmt: skip
    # migrate: from Parquet and from PostgreSQL, onto the store, with matching checksums
    for name, dataset, rows, columns in (("migrate_parquet", "mig", 3, 2), ("migrate_postgres", "pgmig", 3, 3)):
        report = seen[name]
        assert report["match"] and report["version"] == 0 and report["delta_rows"] == rows, report
        assert len(report["columns"]) == columns
        assert (datasets / dataset / "main" / "_delta_log" / f"{0:020d}.json").is_file()
    assert seen["migrated_path"] == str(datasets / "mig" / "main") and seen["migrated_rows"] == 3
    assert seen["pg_path"] == str(datasets / "pgmig" / "main")
    assert seen["doctor_migrated"] is True
    # bad input: one line, exit 1, nothing written
    for name, message in (
        ("bad_migrate", "error: broken.parquet is not a readable Parquet file"),
        ("again_migrate", "error: dataset demo/mig already exists"),
        ("bad_export", "error: cannot export to '.txt'"),
    ):
        refused = seen[name]
        assert refused["code"] == 1 and refused["doc"] is None, refused
        assert len(refused["err"]) == 1 and refused["err"][0].startswith(message), refused
    assert seen["bad_migrate_left"] is False and not (datasets / "broken").exists()
    assert not (work / "nums.txt").exists()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
