"""Oreo's CLI and core run in the test process on another workspace (a browser test's server's).

Set-up that is not what a test is about (the requests a Review test opens, the version a
History test restores) used to run as ``oreo`` child processes, and every one that writes
started a JVM of its own: about 10 s and 15 CPU-seconds each on 2 cores. Here the same CLI
code (``cli.main.main``) runs in this process with its one warm Spark, pointed at the
server's data root and catalog for the length of the call, and then pointed back.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from cli import context
from cli import main as cli
from core.catalog import reset_catalogs
from core.config import get_settings


def catalog_url(data_root: Path) -> str:
    """The SQLite catalog beside a browser test's data root (``DemoWorkspace.copy_to``)."""
    return f"sqlite:///{data_root.parent / 'catalog.db'}"


@contextmanager
def on_workspace(data_root: Path, database_url: str | None = None, env: dict[str, str] | None = None) -> Iterator[None]:
    """Settings, catalog and data root of this process are those of ``data_root`` (and ``env``) until the block ends."""
    wanted = {"DELTA_DATA_ROOT": str(data_root), "OREO_DATABASE_URL": database_url or catalog_url(data_root)}
    wanted.update(env or {})
    saved = {name: os.environ.get(name) for name in (*wanted, "SPARK_REMOTE")}
    os.environ.update(wanted)
    os.environ.pop("SPARK_REMOTE", None)
    get_settings.cache_clear()
    reset_catalogs()
    try:
        yield
    finally:
        reset_catalogs()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        get_settings.cache_clear()


def run_cli(*args: str) -> tuple[int, Any, str]:
    """``oreo --json ARGS`` in this process, as the console script runs it: exit code, JSON (or None), stderr."""
    out, err = io.StringIO(), io.StringIO()
    context.state.json = False  # module state of the CLI; each invocation starts clean
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["--json", *args])
    return code, json.loads(out.getvalue()) if out.getvalue().strip() else None, err.getvalue()


def oreo_json(data_root: Path, *args: str, database_url: str | None = None, env: dict[str, str] | None = None) -> Any:
    """``oreo --json ARGS`` on the workspace of ``data_root``, in this process; its JSON document.

    The catalog is ``database_url``, else the one beside the data root; ``env`` adds settings.
    Fails the test, with the command's stderr, unless it exits 0.
    """
    with on_workspace(data_root, database_url, env):
        code, doc, err = run_cli(*args)
    assert code == 0, f"oreo {' '.join(args)} exited {code}:\n{err[-2000:]}"
    return doc
