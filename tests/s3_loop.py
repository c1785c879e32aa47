"""The core loop on an s3:// data root, run as its own process by tests/test_storage_s3.py
(embedded Spark) and tests/test_cluster_s3.py (Spark Connect on ``scripts/cluster.sh up --s3``).

Its own process, because Spark must start with the s3a jars and confs, which the test
session's shared Spark does not have. Prints one JSON line with what it saw; ``run_loop``
runs it and ``check_loop`` holds what both tests expect of that line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from core import auth, engine, history, maintenance, merge, projects, reads, sessions, storage
from core.catalog import open_catalog
from core.change_requests import submit_change_request
from core.datasets import create_dataset, dataset_columns, get_dataset, layout_for


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
    print(
        json.dumps(
            {
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
        )
    )
    engine.get_spark().stop()


def run_loop(work: Path, env: dict[str, str]) -> dict[str, Any]:
    """This script in its own process with ``env``; the JSON it printed last."""
    script = Path(__file__)
    env = {**env, "PYTHONPATH": str(script.parent.parent)}
    done = subprocess.run(
        [sys.executable, str(script), str(work)], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
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


if __name__ == "__main__":
    main(Path(sys.argv[1]))
