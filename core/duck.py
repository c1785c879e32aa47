"""This process's DuckDB: one in-memory database with the signed delta extension, one cursor per thread.

The extension binary is the signed one shipped in the ``duckdb-extension-delta`` wheel;
it is LOADed from the package folder, never INSTALLed from the network, and unsigned
extensions stay forbidden. DuckDB connections are not thread-safe, cursors on one
database are. ``core.reads`` reads tables through it; ``core.values`` asks it how a
value prints in a column's type.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import threading
import time
from pathlib import Path

import duckdb

from core.config import get_settings
from core.errors import EngineError
from core.storage import duckdb_secret_sql, is_object_uri

logger = logging.getLogger(__name__)

_db_lock = threading.Lock()
_db: duckdb.DuckDBPyConnection | None = None
_local = threading.local()
_cursors: list[tuple[threading.Thread, duckdb.DuckDBPyConnection]] = []  # each with the thread it serves
# A DuckDB internal error (an assertion inside DuckDB) invalidates the whole database: every
# later query of every cursor fails with "database has been invalidated". DuckDB 1.5.5 has one
# that a full test run met: a window (``count(*) OVER ()``) over input with an empty block
# races (duckdb#22352, fixed after 1.5.5). So the database is probed at most once per
# ``HEALTH_CHECK_S`` as cursors are asked for, and at once after such an error
# (``recover``), and a dead one is replaced: one read fails, not every read until a restart.
HEALTH_CHECK_S = 1.0
_generation = 0  # bumped when the database is replaced; a thread's cursor of an older one is dropped
_checked_at = 0.0


def extension_path(name: str = "delta") -> Path:
    """The signed ``name`` extension inside the installed ``duckdb-extension-<name>`` wheel."""
    try:
        package = importlib.import_module(f"duckdb_extension_{name}")
    except ImportError as exc:
        raise EngineError(
            f"the DuckDB {name} extension is not installed",
            hint=f"install duckdb-extension-{name} with the same version as duckdb",
        ) from exc
    folder = Path(str(package.__file__)).parent / "extensions" / f"v{duckdb.__version__}"
    path = folder / f"{name}.duckdb_extension"
    if not path.is_file():
        raise EngineError(
            f"DuckDB {name} extension for DuckDB {duckdb.__version__} not found at {path}",
            hint=f"install duckdb-extension-{name} with the same version as duckdb",
        )
    return path


def open_duckdb() -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB with the signed delta extension loaded and nothing fetched.

    With the data root on an object store, httpfs is loaded first (from its wheel, like
    delta) and a secret carries the store's endpoint and credentials (``core.storage``).
    """
    con = duckdb.connect(
        ":memory:",
        config={
            "allow_unsigned_extensions": "false",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        },
    )
    if is_object_uri(get_settings().data_root):
        con.execute(f"LOAD '{extension_path('httpfs')}'")
        con.execute(duckdb_secret_sql())
        # A Delta data file is never rewritten under its name, so its size and date can be
        # remembered: without this every page read sent one HEAD per data file of the table
        # (a read cost more the more files main had). The log itself is read by the delta
        # extension's own client, so new versions are still seen.
        con.execute("SET enable_http_metadata_cache = true")
    con.execute(f"LOAD '{extension_path()}'")
    # Text forms of timestamps (edits, JSON output) must not depend on the host's zone.
    con.execute("SET TimeZone = 'UTC'")
    return con


def _database() -> duckdb.DuckDBPyConnection:
    global _db
    if _db is None:
        with _db_lock:
            if _db is None:
                _db = open_duckdb()
                atexit.register(close)
    return _db


def _check_health(*, now: bool = False) -> None:
    """Replace the database if it no longer answers (checked at most once per ``HEALTH_CHECK_S``)."""
    global _db, _generation, _checked_at
    if _db is None or (not now and time.monotonic() - _checked_at < HEALTH_CHECK_S):
        return
    with _db_lock:
        if _db is None or (not now and time.monotonic() - _checked_at < HEALTH_CHECK_S):
            return
        _checked_at = time.monotonic()
        try:
            _db.execute("SELECT 1").fetchall()
            return
        except duckdb.Error as exc:
            logger.warning("DuckDB's database stopped answering (%s); opening a new one", str(exc).splitlines()[0])
        for _owner, cur in _cursors:
            try:
                cur.close()
            except duckdb.Error:
                pass
        _cursors.clear()
        try:
            _db.close()
        except duckdb.Error:
            pass
        _db = None
        _generation += 1


def recover(exc: BaseException) -> bool:
    """After ``exc`` from a query: if it is one that invalidates DuckDB's database, replace the database now.

    Returns whether ``exc`` was such an error (the query may then be run again once).
    """
    if not isinstance(exc, duckdb.InternalException | duckdb.FatalException):
        return False
    _check_health(now=True)
    return True


def close() -> None:
    """Close this process's DuckDB database and cursors.

    Runs at exit: DuckDB's C++ threads must stop before the interpreter tears down, or
    the process can abort ("terminate called without an active exception").
    """
    global _db, _generation
    with _db_lock:
        _generation += 1  # other threads' cursors were of this database
        for _owner, cur in list(_cursors):
            try:
                cur.close()
            except duckdb.Error:
                pass
        _cursors.clear()
        if _db is not None:
            _db.close()
            _db = None
        _local.__dict__.clear()


def cursor() -> duckdb.DuckDBPyConnection:
    """This thread's DuckDB cursor, with the delta extension loaded.

    The app runs every script run in a new thread, so a new cursor first closes the ones
    whose threads have ended (nothing else can be using them).
    """
    _check_health()
    cur = getattr(_local, "cursor", None)
    if cur is None or getattr(_local, "generation", None) != _generation:
        cur = _database().cursor()
        with _db_lock:
            for owner, old in list(_cursors):
                if not owner.is_alive():
                    _cursors.remove((owner, old))
                    old.close()
            _cursors.append((threading.current_thread(), cur))
        _local.cursor = cur
        _local.generation = _generation
    return cur


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """A DuckDB string literal, for names that must be spelled in SQL text (values are bound)."""
    return "'" + value.replace("'", "''") + "'"
