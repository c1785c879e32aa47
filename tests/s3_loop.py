"""The core loop on an s3:// data root, run as its own process by tests/test_storage_s3.py.

Its own process, because Spark must start with the s3a jars and confs, which the test
session's shared Spark does not have. Prints one JSON line with what it saw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

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


if __name__ == "__main__":
    main(Path(sys.argv[1]))
