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
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.config import get_settings
from core.errors import EngineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"

# Table properties every main table gets. Change Data Feed feeds conflict detection and
# version diffs. Deletion vectors make MERGE/DELETE cheap and DuckDB's delta_scan reads
# them; column mapping stays off because DuckDB mishandles it (see tests/test_reads.py).
MAIN_TABLE_PROPERTIES: dict[str, str] = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
}


def main_table_properties_sql() -> str:
    """``MAIN_TABLE_PROPERTIES`` as the body of a ``TBLPROPERTIES (...)`` clause."""
    return ", ".join(f"'{k}' = '{v}'" for k, v in MAIN_TABLE_PROPERTIES.items())


_lock = threading.Lock()
_commit_lock = threading.RLock()
_spark: SparkSession | None = None


def _build_session() -> SparkSession:
    from pyspark.sql import SparkSession

    settings = get_settings()
    if settings.spark_remote:
        return SparkSession.builder.remote(settings.spark_remote).getOrCreate()

    from delta import configure_spark_with_delta_pip

    builder = (
        SparkSession.builder.appName("oreo")
        .master(settings.spark_master)
        .config("spark.sql.extensions", DELTA_EXTENSION)
        .config("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(settings.spark_shuffle_partitions))
        .config("spark.default.parallelism", str(settings.spark_shuffle_partitions))
        .config("spark.driver.memory", settings.spark_driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # 8 MB row groups let DuckDB skip and parallelise within a file when paging.
        .config("spark.hadoop.parquet.block.size", str(8 << 20))
        # Stale-snapshot reads would let two approvals race on an old table state.
        .config("spark.databricks.delta.stalenessLimit", "0")
    )
    session = configure_spark_with_delta_pip(builder).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def get_spark() -> SparkSession:
    """The shared Spark session of this process, started on first use.

    Raises:
        EngineError: Spark could not start (no Java, jars unresolvable, remote unreachable).
    """
    global _spark
    if _spark is not None:
        return _spark
    with _lock:
        if _spark is None:
            try:
                with _jvm_output_to_stderr():
                    _spark = _build_session()
            except Exception as exc:  # JVM/gateway/gRPC failures have no common base class
                raise EngineError(f"could not start Spark: {exc}") from exc
    return _spark


@contextmanager
def _jvm_output_to_stderr() -> Iterator[None]:
    """Point fd 1 at stderr while the JVM starts, so it inherits that for good.

    Ivy's dependency report and JVM logging would otherwise land on stdout, where
    ``oreo --json`` promises exactly one JSON document.
    """
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def stop_spark() -> None:
    """Stop the shared session (tests and clean shutdown)."""
    global _spark
    with _lock:
        if _spark is not None:
            _spark.stop()
            _spark = None


def delta_ref(path: Path | str) -> str:
    """``delta.`path``` for Spark SQL, with backticks escaped."""
    return "delta.`" + str(path).replace("`", "``") + "`"


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


def history(path: Path, limit: int | None = None) -> list[CommitRecord]:
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


def version_of_commit(path: Path, commit_id: str, *, search_depth: int = 50) -> int:
    """The table version created by the Oreo commit ``commit_id``.

    Raises:
        EngineError: No commit with that id among the newest ``search_depth`` versions.
    """
    for record in history(path, limit=search_depth):
        if record.user_metadata.get("commit_id") == commit_id:
            return record.version
    raise EngineError(f"commit {commit_id} not found in the history of {path}")
