"""Helpers shared by the merge property, concurrency and crash tests.

Creating a dataset is a Spark CTAS of several seconds, so each test module creates one
*pristine* folder (data root and SQLite catalog side by side) once, and every test or
example works on a ``shutil.copytree`` of it: a fresh dataset in milliseconds.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from core import auth, change_requests, engine, projects, reads, sessions
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, layout_for
from core.layout import DatasetLayout

PROJECT = "demo"
DATASET = "nums"
EDITORS = ("ed", "ed2", "ed3")
APPROVERS = ("al", "al2")
# id is the key (so row_id is str(id)); one column each of BIGINT, VARCHAR and DOUBLE.
BASE_ROWS: dict[str, dict[str, Any]] = {
    str(i): {"id": i, "name": f"name {i}", "qty": 10 * i, "score": i + 0.25 * i} for i in range(1, 9)
}
COLUMNS = ("row_id", "id", "name", "qty", "score")
DUCK_TYPES = {"row_id": "VARCHAR", "id": "BIGINT", "name": "VARCHAR", "qty": "BIGINT", "score": "DOUBLE"}
PANDAS_TYPES = {"row_id": "string", "id": "Int64", "name": "string", "qty": "Int64", "score": "Float64"}
_copies = itertools.count()


def switch(env: dict[str, str], mp: pytest.MonkeyPatch) -> None:
    """Point settings and the catalog at another data root and catalog."""
    for name, value in env.items():
        mp.setenv(name, value)
    get_settings.cache_clear()
    reset_catalogs()


def env_for(folder: Path) -> dict[str, str]:
    return {"DELTA_DATA_ROOT": str(folder / "delta"), "OREO_DATABASE_URL": f"sqlite:///{folder / 'catalog.db'}"}


def make_pristine(folder: Path) -> Path:
    """Create users, the project and ``demo/nums`` (8 rows) under ``folder``; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "nums.csv"
    lines = ["id,name,qty,score"] + [f"{r['id']},{r['name']},{r['qty']},{r['score']}" for r in BASE_ROWS.values()]
    source.write_text("\n".join(lines) + "\n")
    with pytest.MonkeyPatch.context() as mp:
        switch(env_for(folder), mp)
        catalog = open_catalog()
        projects.create_project(catalog, PROJECT)
        for name in EDITORS + APPROVERS:
            auth.create_user(catalog, name, password=f"{name}-password-1")
            role = auth.Role.EDITOR if name in EDITORS else auth.Role.APPROVER
            auth.add_member(catalog, PROJECT, name, role)
        create_dataset(catalog, PROJECT, DATASET, source, key="id")
        reset_catalogs()  # closes SQLite, so the WAL is folded into catalog.db before copying
    get_settings.cache_clear()
    return folder


def fresh_copy(pristine: Path, parent: Path) -> dict[str, str]:
    """A copy of the pristine folder under ``parent``, as the env that points at it.

    Every copy gets a new path: Spark caches a Delta log per table path.
    """
    target = parent / f"copy-{os.getpid()}-{next(_copies)}"
    shutil.copytree(pristine, target)
    return env_for(target)


def layout() -> DatasetLayout:
    return layout_for(PROJECT, DATASET)


def user(catalog: Catalog, name: str) -> auth.User:
    return auth.get_user(catalog, name)


def submit(catalog: Catalog, editor: str, ops: list[sessions.EditOp]) -> change_requests.ChangeRequest:
    """``editor`` saves ``ops`` in a new session and submits it."""
    actor = user(catalog, editor)
    session = sessions.open_session(catalog, PROJECT, DATASET, actor=actor)
    sessions.apply_edits(catalog, session.session_id, ops, actor=actor)
    return change_requests.submit_change_request(catalog, session.session_id, actor=actor, title=f"{editor} edits")


def main_frame(version: int | None = None) -> pd.DataFrame:
    """``main`` read by DuckDB, sorted by row_id, with nullable dtypes (exact big ints)."""
    import pyarrow as pa

    path = layout().main
    scan = "delta_scan(?)" if version is None else "delta_scan(?, version => ?)"
    params: list[Any] = [str(path)] if version is None else [str(path), int(version)]
    table = reads.cursor().execute(f"SELECT * FROM {scan} ORDER BY row_id", params).to_arrow_table()
    mapping = {pa.int64(): pd.Int64Dtype(), pa.float64(): pd.Float64Dtype(), pa.string(): pd.StringDtype()}
    return table.to_pandas(types_mapper=mapping.get)


def main_schema() -> dict[str, str]:
    rows = reads.cursor().execute("DESCRIBE SELECT * FROM delta_scan(?)", [str(layout().main)]).fetchall()
    return {r[0]: str(r[1]) for r in rows}


def frame_of(rows: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Expected table contents (row_id -> values) as a frame shaped like ``main_frame``."""
    records = [{"row_id": rid, **values} for rid, values in sorted(rows.items())]
    # Column by column, straight into nullable arrays: a detour through float64 would round big ints.
    return pd.DataFrame({c: pd.array([r[c] for r in records], dtype=PANDAS_TYPES[c]) for c in COLUMNS})


def assert_frame_equal(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Same columns, dtypes and values, exactly (rows are already sorted by row_id)."""
    pd.testing.assert_frame_equal(actual.reset_index(drop=True), expected.reset_index(drop=True), check_exact=True)


def merge_commits(cr_id: str) -> list[engine.CommitRecord]:
    """The MERGE commits of ``main`` that carry ``cr_id`` in their userMetadata."""
    return [
        c for c in engine.history(layout().main) if c.operation == "MERGE" and c.user_metadata.get("cr_id") == cr_id
    ]


def log_versions() -> int:
    """The newest version of ``main`` straight from its log folder."""
    return engine.latest_version(layout().main)


def wait_for(condition: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSON-lines file another process may still be appending to."""
    if not path.is_file():
        return []
    *complete, _partial = path.read_text().split("\n")
    return [json.loads(line) for line in complete if line.strip()]
