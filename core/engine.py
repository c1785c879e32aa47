"""The Spark engine: one lazily started session per process, classic or Spark Connect.

Every commit to ``main/`` and ``staging/`` goes through this session. With
``SPARK_REMOTE=sc://host:port`` the same ``get_spark()`` returns a Spark Connect session;
callers only use the DataFrame/SQL API common to both, so they never branch.

Commits carry ``userMetadata`` (JSON: actor, action, commit_id and, later, cr_id). The
``commit_id`` is a UUID Oreo generates, so the catalog can name the exact commit it synced
(seed 002 section 8.D ``last_commit_id``) and find its version in the history.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import logs, metrics
from core.config import get_settings
from core.errors import EngineError, NotFound
from core.storage import Location, is_object_uri, location, spark_confs, spark_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
# Delta's idempotent-write confs: a commit carrying an (appId, version) the table has
# already seen is skipped, so a retried MERGE can never apply twice.
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"

# Table properties every main table gets. Change Data Feed feeds conflict detection and
# version diffs. Deletion vectors make MERGE/DELETE cheap and DuckDB's delta_scan reads
# them; column mapping stays off because DuckDB mishandles it (see tests/test_reads.py).
# Type widening lets an import's MERGE widen a column (int to bigint...) in its own commit.
TYPE_WIDENING_PROPERTY = "delta.enableTypeWidening"
MAIN_TABLE_PROPERTIES: dict[str, str] = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
    TYPE_WIDENING_PROPERTY: "true",
}


def main_table_properties_sql() -> str:
    """``MAIN_TABLE_PROPERTIES`` as the body of a ``TBLPROPERTIES (...)`` clause."""
    return ", ".join(f"'{k}' = '{v}'" for k, v in MAIN_TABLE_PROPERTIES.items())


# ---------------------------------------------------------------- the layout of main's files

# Main's files are written range-partitioned and sorted by ``row_id``, about this big each,
# so every file covers a narrow ``row_id`` range in its min/max statistics (``row_id`` is the
# first column, always among the indexed ones). A MERGE whose ON clause bounds ``t.row_id``
# then reads and rewrites only the files that can hold the staged rows, and a matched update
# touches one small file instead of half the table. OPTIMIZE aims at the same size (OSS
# Delta takes its target from a session conf; ``delta.targetFileSize`` is Databricks-only).
# 2 MiB rather than 4: a small MERGE rewrites the file it touches (core.merge.REWRITE_MAX_FILES),
# and in one process on the 1M-row table a 5-row MERGE took 919 ms on 4 MiB files, 830 ms on
# 2 MiB and 754 ms on 1 MiB (medians of 9, interleaved), while DuckDB's page reads at offset
# 500,000 took the same (271-276 ms sorted, 56-62 ms unsorted). 1 MiB is OREO_SMALL_FILE_MB.
MAIN_FILE_BYTES = 2 << 20
OPTIMIZE_MAX_FILE_CONF = "spark.databricks.delta.optimize.maxFileSize"


def main_file_count(data_bytes: int) -> int:
    """How many files a main table holding ``data_bytes`` of Parquet is written as."""
    return max(1, -(-int(data_bytes) // MAIN_FILE_BYTES))


def clustered_by_row_id(frame: DataFrame, files: int) -> DataFrame:
    """``frame`` in ``files`` partitions of contiguous ``row_id`` ranges, each sorted by ``row_id``."""
    return frame.repartitionByRange(max(1, files), "row_id").sortWithinPartitions("row_id")


_lock = threading.Lock()
_commit_lock = threading.RLock()
_spark: SparkSession | None = None


def session_confs(shuffle_partitions: int) -> dict[str, str]:
    """The Spark confs Oreo's engine runs with, embedded or on a Spark Connect server.

    ``core.engine`` sets them on the embedded session; ``scripts/cluster.py`` passes them
    to the Connect server, so both topologies run Oreo's statements the same way. With the
    data root on an object store they carry Hadoop's s3a settings too (``core.storage``).
    """
    confs = {
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(shuffle_partitions),
        # Delta rebuilds a table's state (its file list) with this many tasks before a MERGE,
        # RESTORE or OPTIMIZE; its default of 50 costs seconds of task overhead on a small host.
        "spark.databricks.delta.snapshotPartitions": str(shuffle_partitions),
        # VACUUM lists the table's folders with this many tasks; its default of 10,000 made a
        # DRY RUN of a 10-file table take 60-105 s on a small host (3 s with 4).
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # 8 MB row groups let DuckDB skip and parallelise within a file when paging.
        "spark.hadoop.parquet.block.size": str(8 << 20),
        # Stale-snapshot reads would let two approvals race on an old table state.
        "spark.databricks.delta.stalenessLimit": "0",
    }
    if is_object_uri(get_settings().data_root):
        confs.update(spark_confs())
    return confs


def _build_session() -> SparkSession:
    from pyspark.sql import SparkSession

    settings = get_settings()
    if settings.spark_remote:
        # Delta's commit-conflict errors arrive as its own exception classes only once
        # their Spark Connect mapping is registered (``concurrency_exceptions`` names them).
        import delta.connect.exceptions  # noqa: F401

        return SparkSession.builder.remote(settings.spark_remote).getOrCreate()

    builder = SparkSession.builder.appName("oreo").master(settings.spark_master)
    for key, value in session_confs(settings.spark_shuffle_partitions).items():
        builder = builder.config(key, value)
    builder = builder.config("spark.driver.memory", settings.spark_driver_memory)
    options = driver_java_options()
    if options:
        builder = builder.config("spark.driver.extraJavaOptions", options)
    session = with_delta_jars(builder).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


# ---------------------------------------------------------------- the Delta jars, resolved once

JARS_MANIFEST = "manifest.json"
# Hadoop's s3a for an s3:// data root. Its version must be pyspark's Hadoop client's (3.4.2
# for pyspark 4.1); it pulls the AWS SDK bundle (about 640 MB), so only s3 roots load it.
S3A_PACKAGES = "org.apache.hadoop:hadoop-aws:3.4.2"


def with_delta_jars(builder: SparkSession.Builder) -> SparkSession.Builder:
    """``builder`` with the Delta jars: the files ``make jars`` resolved, else Ivy coordinates.

    With the files the start makes no network request; without them Spark resolves
    the jars with Ivy on every start, which needs Maven Central (or a warm
    ``~/.ivy2.5.2``) and seconds each time, so that fallback is logged.
    """
    s3a = is_object_uri(get_settings().data_root)
    jars = offline_jars()
    if jars is not None:
        if s3a:
            extra = s3a_jars()
            if extra is None:
                logger.warning("no s3a jars in %s; resolving %s with Ivy", s3a_jars_dir(), S3A_PACKAGES)
                builder = builder.config("spark.jars.packages", S3A_PACKAGES)
            jars = [*jars, *(extra or [])]
        return builder.config("spark.jars", ",".join(str(p) for p in jars))
    from delta import configure_spark_with_delta_pip

    logger.warning(
        "no complete Delta jar folder at %s; resolving %s with Ivy (run `make jars` to start offline)",
        jars_dir(),
        delta_packages(),
    )
    if s3a:
        return configure_spark_with_delta_pip(builder, extra_packages=[S3A_PACKAGES])
    return configure_spark_with_delta_pip(builder)


# ---------------------------------------------------------------- the JVM's class archive

# A JVM start loads and verifies about 20,000 classes of Spark and Delta. ``make jars`` dumps
# them once into a class-data archive (scripts/jvm_archive.py), which every later start maps
# instead: a 2-row ``oreo dataset create`` took 33-39 CPU-s without it and 21-26 with it
# (interleaved runs on 2 cores). The JVM checks the archive against its own version and
# class path and quietly ignores one that does not match, so a stale archive costs nothing.
JVM_ARCHIVE = "oreo-spark.jsa"


def jvm_archive() -> Path:
    """Where ``make jars`` keeps the class-data archive: ``oreo-spark.jsa`` by ``jars_dir()``.

    ``OREO_JVM_ARCHIVE`` overrides it.
    """
    return Path(os.environ.get("OREO_JVM_ARCHIVE") or jars_dir().parent / JVM_ARCHIVE)


def driver_java_options() -> str | None:
    """The driver JVM's extra options: the class-data archive when there is one, else None."""
    archive = jvm_archive()
    if not archive.is_file():
        return None
    path = f'"{archive}"' if " " in str(archive) else str(archive)  # Spark splits options on spaces
    return f"-XX:SharedArchiveFile={path}"


def s3a_jars_dir() -> Path:
    """Where the resolved s3a jars are kept: ``OREO_S3A_JARS_DIR``, else ``oreo-s3a-jars`` by ``jars_dir()``."""
    return Path(os.environ.get("OREO_S3A_JARS_DIR") or jars_dir().parent / "oreo-s3a-jars")


def s3a_jars() -> list[Path] | None:
    """The s3a jar files in ``s3a_jars_dir()``, or None when ``hadoop-aws`` is not among them."""
    folder = s3a_jars_dir()
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    return jars if any("hadoop-aws-" in p.name for p in jars) else None


def jars_dir() -> Path:
    """Where ``make jars`` keeps the resolved Delta jar files: ``<venv>/oreo-jars``.

    ``OREO_JARS_DIR`` overrides it (tests, and images without a venv).
    """
    return Path(os.environ.get("OREO_JARS_DIR") or Path(sys.prefix) / "oreo-jars")


def delta_packages() -> str:
    """The Maven coordinates of the Delta jars the installed delta-spark needs."""
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    return str(configure_spark_with_delta_pip(SparkSession.Builder())._options["spark.jars.packages"])


def offline_jars(folder: Path | None = None) -> list[Path] | None:
    """The jar files in ``folder`` (default ``jars_dir()``), or None unless they are complete.

    Complete means the manifest written by ``scripts/fetch_jars.py`` names the
    coordinates the installed delta-spark needs, and every file it lists is there at
    its recorded size.
    """
    folder = jars_dir() if folder is None else folder
    try:
        manifest = json.loads((folder / JARS_MANIFEST).read_text())
        if manifest["packages"] != delta_packages():
            return None
        jars = [(folder / str(j["name"]), int(j["size"])) for j in manifest["jars"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not jars or any(not p.is_file() or p.stat().st_size != size for p, size in jars):
        return None
    return [p for p, _ in jars]


def get_spark() -> SparkSession:
    """The shared Spark session of this process, started on first use.

    The JVM's output (banners, log4j) goes to ``<data root>/logs/spark.log``; when the
    start fails, the error carries that log's last lines as a note.

    Raises:
        EngineError: Spark could not start (no Java, jars unresolvable, remote unreachable).
    """
    global _spark
    if _spark is not None:
        return _spark
    with _lock:
        if _spark is None:
            logged_before = logs.size(logs.spark_log())
            started = time.monotonic()
            try:
                with _jvm_output_to_log():
                    _spark = _build_session()
                metrics.engine_started(time.monotonic() - started)
            except Exception as exc:  # JVM/gateway/gRPC failures have no common base class
                text = str(exc).strip()
                error = EngineError(f"could not start Spark: {text.splitlines()[0] if text else type(exc).__name__}")
                # The JVM says why in its log; keep its last lines with the error, so the reason
                # travels with it (into oreo.log and to callers that show it).
                tail = logs.tail(logs.spark_log(), since=logged_before)
                if tail:
                    error.add_note(f"last lines of {logs.spark_log()}:\n{tail}")
                raise error from exc
    return _spark


@contextmanager
def _jvm_output_to_log() -> Iterator[None]:
    """Point fds 1 and 2 at ``spark.log`` while the JVM starts, so it inherits that for good.

    Ivy's report, Spark's banners and log4j would otherwise land on stdout, where
    ``oreo --json`` promises one JSON document, and on stderr, which cron appends to
    the log it reads with ``jq``. When the log cannot be opened, the JVM gets stderr.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        target = logs.open_spark_log()
    except OSError:
        logger.warning("cannot write %s; the JVM's output goes to stderr", logs.spark_log(), exc_info=True)
        target = os.dup(2)
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)


def stop_spark() -> None:
    """Stop the shared session (tests and clean shutdown)."""
    global _spark
    with _lock:
        if _spark is not None:
            _spark.stop()
            _spark = None


# ---------------------------------------------------------------- a warm engine for the app
#
# The app starts the shared session when its server starts (app/main.py's lifespan), in a
# daemon thread, so the JVM is warm before anyone clicks. Pages that need Spark ask
# ``engine_status()`` and wait on ``wait_for_engine()`` while it is still starting.

ENGINE_START_FILE = "engine-start.json"
# Tests make the start slower, to see the app while the engine is still starting.
SLOW_START_ENV = "OREO_TEST_SLOW_ENGINE_START_S"
# With it, the held-back start goes on as soon as this file exists (a test opens the gate
# once it has seen what it came to see, instead of sleeping a fixed time).
START_GATE_ENV = "OREO_TEST_ENGINE_START_GATE"


@dataclass(frozen=True)
class EngineStatus:
    """Where the shared session is: ``idle`` (not asked for), ``starting``, ``ready`` or ``failed``.

    ``elapsed_s`` is the time since the background start began (its full length once it
    ended); ``expected_s`` the last start measured on this data root, if any. ``warm``: the
    warm-up the start was given (``start_in_background(warm_up=...)``) ran after ``ready``
    and ended (a failed warm-up is logged and ends it too); False for a start given none.
    """

    state: str
    elapsed_s: float
    expected_s: float | None
    error: str | None = None
    warm: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "elapsed_s": round(self.elapsed_s, 3),
            "expected_s": None if self.expected_s is None else round(self.expected_s, 3),
            "error": self.error,
            "warm": self.warm,
            "pid": os.getpid(),
        }


_warm_lock = threading.Lock()
_warm_thread: threading.Thread | None = None
_warm_started_at: float | None = None
_warm_finished_at: float | None = None
_warm_error: str | None = None
_warm_done = threading.Event()
_warmed = threading.Event()


def start_in_background(*, warm_up: Callable[[], None] | None = None) -> bool:
    """Start the shared session in a daemon thread, unless it is up or already starting.

    Module state is process-wide, so however many browser sessions call this, one
    process starts one JVM. Returns True when this call started it.

    Args:
        warm_up: Run in the same thread once the session is up (the state is ``ready``
            by then): what a first use would otherwise pay once (``core.warmup``). Its
            failure is logged, never raised; ``EngineStatus.warm`` says when it ended.
    """
    global _warm_thread, _warm_started_at, _warm_finished_at, _warm_error
    with _warm_lock:
        if _spark is not None or (_warm_thread is not None and _warm_thread.is_alive()):
            return False
        _warm_started_at, _warm_finished_at, _warm_error = time.monotonic(), None, None
        _warm_done.clear()
        _warmed.clear()
        _warm_thread = threading.Thread(target=_start, args=(warm_up,), name="oreo-engine-start", daemon=True)
        _warm_thread.start()
    return True


def _start(warm_up: Callable[[], None] | None) -> None:
    _start_session()
    if _spark is None or warm_up is None:
        return
    try:
        warm_up()
    except Exception:  # a warm-up only: the real first use reports its own failure
        logger.warning("warming up the engine failed", exc_info=True)
    finally:
        _warmed.set()


def wait_until_warm(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the warm-up after a background start to end; whether it did."""
    return _warmed.wait(timeout)


def test_hold(pause: float, gate: str | None) -> None:
    """Hold a step that a test slows down ``pause`` seconds, or until the ``gate`` file exists, if sooner."""
    deadline = time.monotonic() + pause
    while time.monotonic() < deadline:
        if gate and Path(gate).exists():
            return
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _start_session() -> None:
    global _warm_finished_at, _warm_error
    try:
        test_hold(float(os.environ.get(SLOW_START_ENV) or 0), os.environ.get(START_GATE_ENV))
        get_spark()
    except Exception as exc:  # EngineError, or a bad SLOW_START_ENV value
        _warm_error = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        logger.error("the engine did not start: %s", _warm_error, exc_info=True)
    else:
        started = _warm_started_at if _warm_started_at is not None else time.monotonic()
        seconds = time.monotonic() - started
        logger.info("engine ready in %.1f s", seconds)
        _record_start_seconds(seconds)
    finally:
        _warm_finished_at = time.monotonic()
        _warm_done.set()


def engine_status() -> EngineStatus:
    """The shared session's state, for pages and the app's ``/oreo/engine`` endpoint."""
    started, finished, error = _warm_started_at, _warm_finished_at, _warm_error
    elapsed = 0.0 if started is None else (finished or time.monotonic()) - started
    expected = last_start_seconds()
    if _spark is not None:
        return EngineStatus("ready", elapsed, expected, warm=_warmed.is_set())
    if started is not None and finished is None:
        return EngineStatus("starting", elapsed, expected)
    if error is not None:
        return EngineStatus("failed", elapsed, expected, error)
    return EngineStatus("idle", elapsed, expected)


def wait_for_engine(timeout: float) -> EngineStatus:
    """Wait up to ``timeout`` seconds for a background start to end; the status then."""
    _warm_done.wait(timeout)
    return engine_status()


def _start_file() -> Path:
    return logs.log_dir() / ENGINE_START_FILE


def last_start_seconds() -> float | None:
    """How long the last background start on this data root took (None before the first)."""
    try:
        seconds = float(json.loads(_start_file().read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return seconds if seconds > 0 else None


def _record_start_seconds(seconds: float) -> None:
    path = _start_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}")
        temp.write_text(json.dumps({"seconds": round(seconds, 3), "pid": os.getpid()}))
        temp.replace(path)
    except OSError:
        logger.warning("cannot record the engine start time in %s", path, exc_info=True)


def spark_ident(name: str) -> str:
    """A column name quoted for Spark SQL (backticks escaped)."""
    return "`" + name.replace("`", "``") + "`"


def spark_string(value: str) -> str:
    """A string literal for Spark SQL (backslashes and quotes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def delta_ref(path: Location | str) -> str:
    """``delta.`path``` for Spark SQL, with backticks escaped."""
    return "delta." + spark_ident(spark_uri(path))


@dataclass(frozen=True)
class CommitInfo:
    """What Oreo records about a commit it made."""

    commit_id: str
    actor: str
    action: str
    extra: dict[str, Any]

    def user_metadata(self) -> str:
        return json.dumps(
            {"commit_id": self.commit_id, "actor": self.actor, "action": self.action, **self.extra},
            sort_keys=True,
        )


def new_commit(actor: str, action: str, **extra: Any) -> CommitInfo:
    """Describe a commit about to be made; its ``commit_id`` is a fresh UUID."""
    return CommitInfo(commit_id=str(uuid.uuid4()), actor=actor, action=action, extra=dict(extra))


@contextmanager
def commit_metadata(commit: CommitInfo) -> Iterator[None]:
    """Attach ``commit``'s userMetadata to the Delta commits made inside the block.

    DeltaTable operations (MERGE, RESTORE, OPTIMIZE) take userMetadata only from the
    session conf, which is shared by every thread, so commits are serialised here.
    """
    spark = get_spark()
    with _commit_lock:
        spark.conf.set(USER_METADATA_CONF, commit.user_metadata())
        try:
            yield
        finally:
            spark.conf.unset(USER_METADATA_CONF)


def is_connect(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


_children_lock = threading.Lock()
_idle_children: list[tuple[SparkSession, SparkSession]] = []  # (parent, child) kept by dml_session


def _idle_child(spark: SparkSession) -> SparkSession:
    """A kept child session of ``spark`` no one is using, or a new one."""
    with _children_lock:
        while _idle_children:
            parent, child = _idle_children.pop()
            if parent is spark:
                return child
    return spark.newSession()


@contextmanager
def dml_session(
    commit: CommitInfo, *, txn: tuple[str, int] | None = None, confs: dict[str, str] | None = None
) -> Iterator[SparkSession]:
    """A Spark session whose next commit carries ``commit``'s userMetadata and ``txn``,
    with the SQL ``confs`` set too.

    Classic Spark gets a child session (``newSession``: its own SQL conf, shared
    SparkContext), so concurrent approvals in one process do not wait for each other.
    Child sessions are kept for the next statement, with ``confs`` unset again: a fresh
    one builds its analyzer, optimizer and planner on first use, a cost a small approval
    would pay every time. Spark Connect has no child sessions; there the shared
    session's conf is set under the commit lock, as in ``commit_metadata``. Either way
    the userMetadata and txn id are unset after the block (see ``_ONE_COMMIT_CONFS``).
    """
    confs = {**(confs or {}), USER_METADATA_CONF: commit.user_metadata()}
    if txn is not None:
        confs[TXN_APP_ID_CONF] = txn[0]
        confs[TXN_VERSION_CONF] = str(int(txn[1]))
    with _configured_session(confs) as spark:
        yield spark


@contextmanager
def _configured_session(confs: dict[str, str]) -> Iterator[SparkSession]:
    """A session with the SQL ``confs`` set: a kept child session (classic), or the shared one under the commit lock."""
    spark = get_spark()
    if not is_connect(spark):
        child = _idle_child(spark)
        with _confs_set(child, confs):
            yield child
        with _children_lock:
            _idle_children.append((spark, child))
        return
    with _commit_lock, _confs_set(spark, confs):
        yield spark


# ---------------------------------------------------------------- a table's file list, built ahead
#
# A MERGE first builds the file list of the version it reads, with each file's statistics
# ("Delta: Compute snapshot for version N": the log replayed from the last checkpoint),
# unless the JVM holds it already; Delta keeps it with the table's newest snapshot. Profiled
# job by job (Spark's REST API) on the 100,000-row demo table, a warm process on a quiet
# machine: that job took 0.6-0.7 s of a 2.7-3.2 s 1-cell approval, and the MERGE planned
# 0.1-0.2 s longer around it. With the list built before, the same MERGEs took 1.75-2.05 s.
# ``prepare_table`` builds it by a query Delta answers from the statistics alone (row_id
# is never null, so every file is skipped), with the small MERGE's one partition for the
# list (``core.merge.SMALL_MERGE_CONFS``).
SNAPSHOT_PARTITIONS_CONF = "spark.databricks.delta.snapshotPartitions"
_prepared_lock = threading.Lock()
_prepared: dict[str, int] = {}  # table -> the newest version whose file list prepare_table built


def prepare_table(path: Location) -> bool:
    """Have Spark build and keep the file list of ``path``'s newest version, as a MERGE into it would first.

    Returns False without running anything when this process built that version's list
    already. Raises what Spark raises (a table that is gone, say).
    """
    key = str(path)
    version = latest_version(path)
    with _prepared_lock:
        if _prepared.get(key) == version:
            return False
    with _configured_session({SNAPSHOT_PARTITIONS_CONF: "1"}) as spark:
        spark.sql(f"SELECT count(*) FROM {delta_ref(path)} WHERE row_id IS NULL").collect()
    with _prepared_lock:
        _prepared[key] = max(version, _prepared.get(key, -1))
    return True


def prepared_version(path: Location) -> int | None:
    """The newest version of ``path`` whose file list ``prepare_table`` built in this process, if any."""
    with _prepared_lock:
        return _prepared.get(str(path))


# Confs that describe one commit. They are unset after the block whatever they were before:
# over Spark Connect a txn id left on the server-side session would make Delta skip every
# later write of that session as a duplicate, and restoring a stale value would keep it there.
_ONE_COMMIT_CONFS = frozenset({USER_METADATA_CONF, TXN_APP_ID_CONF, TXN_VERSION_CONF})


@contextmanager
def _confs_set(spark: SparkSession, confs: dict[str, str]) -> Iterator[None]:
    """``confs`` set on ``spark`` inside the block; afterwards each key as it was before,
    except the one-commit keys (userMetadata, txn id), which are always unset."""
    before: dict[str, str | None] = {
        key: None if key in _ONE_COMMIT_CONFS else spark.conf.get(key, None) for key in confs
    }
    try:
        for key, value in confs.items():
            spark.conf.set(key, value)
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def concurrency_exceptions() -> tuple[type[BaseException], ...]:
    """delta-spark's optimistic-concurrency exceptions, each named (they share no base we rely on)."""
    from delta.exceptions import (
        ConcurrentAppendException,
        ConcurrentDeleteDeleteException,
        ConcurrentDeleteReadException,
        ConcurrentTransactionException,
        ConcurrentWriteException,
        MetadataChangedException,
        ProtocolChangedException,
    )

    return (
        ConcurrentAppendException,
        ConcurrentDeleteReadException,
        ConcurrentDeleteDeleteException,
        ConcurrentTransactionException,
        ConcurrentWriteException,
        MetadataChangedException,
        ProtocolChangedException,
    )


def latest_version(path: Location) -> int:
    """The newest version of a Delta table, from its log folder (no Spark needed).

    Raises:
        NotFound: ``path`` holds no Delta table.
    """
    log = location(path) / "_delta_log"
    versions = [int(f.name[:20]) for f in log.glob("*.json") if f.name[:20].isdigit() and len(f.name) == 25]
    if not versions:
        raise NotFound(f"no Delta table at {path}", kind="table", ident=str(path))
    return max(versions)


def find_commit(path: Location, after_version: int, **match: Any) -> tuple[int, dict[str, Any]] | None:
    """The first version after ``after_version`` whose userMetadata has every ``match`` item.

    Reads the commits' JSON in ``_delta_log`` (read only; never written by hand).
    """
    log = location(path) / "_delta_log"
    for version in range(int(after_version) + 1, latest_version(path) + 1):
        file = log / f"{version:020d}.json"
        if not file.is_file():
            continue
        for line in file.read_text().splitlines():
            if line.strip():
                action = json.loads(line)
                if "commitInfo" not in action:
                    continue
                meta = parse_user_metadata(action["commitInfo"].get("userMetadata"))
                if all(meta.get(k) == v for k, v in match.items()):
                    return version, meta
    return None


def parse_user_metadata(raw: str | None) -> dict[str, Any]:
    """Decode a commit's userMetadata; commits made outside Oreo give ``{}``."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {"raw": raw}
    return value if isinstance(value, dict) else {"raw": raw}


@dataclass(frozen=True)
class CommitRecord:
    version: int
    timestamp: Any
    operation: str
    user_metadata: dict[str, Any]
    operation_metrics: dict[str, str]


def history(path: Location, limit: int | None = None) -> list[CommitRecord]:
    """The commit history of a Delta table, newest first."""
    sql = f"DESCRIBE HISTORY {delta_ref(path)}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    try:
        rows = (
            get_spark()
            .sql(sql)
            .select("version", "timestamp", "operation", "userMetadata", "operationMetrics")
            .collect()
        )
    except Exception as exc:
        raise EngineError(f"could not read the history of {path}: {exc}") from exc
    return [
        CommitRecord(
            version=int(r["version"]),
            timestamp=r["timestamp"],
            operation=str(r["operation"]),
            user_metadata=parse_user_metadata(r["userMetadata"]),
            operation_metrics=dict(r["operationMetrics"] or {}),
        )
        for r in rows
    ]


def version_of_commit(path: Location, commit_id: str, *, search_depth: int = 50) -> int:
    """The table version created by the Oreo commit ``commit_id``.

    Raises:
        EngineError: No commit with that id among the newest ``search_depth`` versions.
    """
    for record in history(path, limit=search_depth):
        if record.user_metadata.get("commit_id") == commit_id:
            return record.version
    raise EngineError(f"commit {commit_id} not found in the history of {path}")
