"""Where diagnostics go: log files under the data root, so stderr keeps only ``error:`` lines.

    $DELTA_DATA_ROOT/logs/spark.log   the embedded Spark JVM's output: banners, log4j, Ivy
    $DELTA_DATA_ROOT/logs/oreo.log    Python logging (GX, py4j, pyspark, Oreo) and warnings,
                                      and the full traceback of each failed CLI command

Cron jobs append ``oreo --json ... 2>&1`` to one file that ``jq`` reads, so a successful
command writes nothing to stderr and a failed one writes exactly its ``error:`` line.
Both files are created only when something is written to them, and a file over
``_ROTATE_BYTES`` is renamed to ``<name>.1`` (replacing the older one) before it grows more.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

from core.config import get_settings
from core.storage import ObjectPath

LOG_FOLDER = "logs"
SPARK_LOG = "spark.log"
OREO_LOG = "oreo.log"
_ROTATE_BYTES = 10 << 20
_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"


def log_dir() -> Path:
    root = get_settings().data_root
    # The process's own log files stay on its disk when the data lives in an object store.
    return (Path("data").absolute() if isinstance(root, ObjectPath) else root) / LOG_FOLDER


def spark_log() -> Path:
    """The embedded Spark JVM's log file."""
    return log_dir() / SPARK_LOG


def oreo_log() -> Path:
    """The Python-side log file (library logging, warnings, failed commands)."""
    return log_dir() / OREO_LOG


def open_spark_log() -> int:
    """A file descriptor appending to ``spark.log`` (rotated first when large), for the JVM to inherit.

    Raises:
        OSError: The log folder cannot be created or written.
    """
    path = spark_log()
    path.parent.mkdir(parents=True, exist_ok=True)
    _rotate_if_large(path)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)


def size(path: Path) -> int:
    """The size of a log file now (0 when there is none), to read what is written after."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def tail(path: Path, lines: int = 30, *, since: int = 0) -> str:
    """The last ``lines`` lines of a log file written after offset ``since`` ("" when unreadable)."""
    try:
        with path.open("rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            fh.seek(max(since if since <= end else 0, end - 64 * 1024))  # rotated since: read it all
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _rotate_if_large(path: Path) -> None:
    try:
        if path.stat().st_size > _ROTATE_BYTES:
            path.replace(path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass


class _LazyFileHandler(RotatingFileHandler):
    """Creates the log folder and file on the first record only, so quiet runs leave no trace."""

    def _open(self):  # type: ignore[no-untyped-def]
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()

    def handleError(self, record: logging.LogRecord) -> None:
        # An unwritable log must never turn a command's output into a traceback on stderr.
        pass


def _log_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """A warning as a ``py.warnings`` log record (what ``logging.captureWarnings`` writes)."""
    logging.getLogger("py.warnings").warning("%s", warnings.formatwarning(message, category, filename, lineno, line))


@contextmanager
def library_logging_to_file(path: Path | None = None) -> Iterator[Path]:
    """Route Python logging and warnings to ``path`` (default ``oreo.log``) while the block runs.

    The root logger gets a file handler, so no record reaches Python's last-resort
    stderr handler; ``warnings`` are logged rather than printed. Everything is put
    back afterwards (the CLI runs commands in-process in tests).

    Yields:
        The log file's path.
    """
    path = oreo_log() if path is None else path
    handler = _LazyFileHandler(path, maxBytes=_ROTATE_BYTES, backupCount=1, delay=True, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    # Not logging.captureWarnings: it keeps its own global of what it replaced and does
    # nothing when that is already set, so a block that another thread or test left
    # open would let this one's warnings through; this block puts back exactly what it found.
    shown = warnings.showwarning
    warnings.showwarning = _log_warning
    try:
        yield path
    finally:
        warnings.showwarning = shown
        root.removeHandler(handler)
        with suppress(OSError):  # a full disk must not turn a clean error into a traceback
            handler.close()
