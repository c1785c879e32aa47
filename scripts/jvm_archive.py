"""Dump the classes a Spark start loads into a class-data archive, once, so later starts map them.

``make jars`` runs this after ``fetch_jars.py``. Steps:

1. Take a file lock beside the archive: two setups at once take turns.
2. Stop if the archive is there and its stamp (``oreo-spark.jsa.json``) names the same
   Java, pyspark and jar folder as now.
3. Start Spark in a child process as ``core.engine`` starts it (same confs and jars),
   with ``-XX:ArchiveClassesAtExit``, and run the Delta work Oreo does (create, insert,
   MERGE, update, delete, the change feed, history, restore, OPTIMIZE ZORDER, VACUUM).
   The JVM writes the classes it loaded when it exits.
4. Move the archive into place whole, then write its stamp.

``core.engine.driver_java_options`` passes ``-XX:SharedArchiveFile`` to every local start
when the file exists; the JVM ignores an archive that does not match its version and class
path. Nothing here is needed for Spark to start: it only makes each start cheaper.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

from core.engine import JARS_MANIFEST, jars_dir, jvm_archive, offline_jars

# Runs in a child process, whose JVM dumps its classes when it exits.
_WORKLOAD = """
import sys
from pyspark import SparkContext
from core import engine

spark = engine.get_spark()
table = sys.argv[1]
spark.sql(f"CREATE TABLE delta.`{table}` (row_id BIGINT, name STRING, amount DECIMAL(12, 2), day DATE) "
          f"USING delta TBLPROPERTIES ({engine.main_table_properties_sql()})")
rows = [(1, "a", 1.5, None), (2, "b", 2.5, None)]
spark.createDataFrame(rows, "row_id long, name string, amount double, day date") \\
    .selectExpr("row_id", "name", "CAST(amount AS DECIMAL(12, 2)) AS amount", "day") \\
    .write.format("delta").mode("append").save(table)
spark.sql(f"UPDATE delta.`{table}` SET name = 'c' WHERE row_id = 1")
spark.sql(f"MERGE INTO delta.`{table}` t USING (SELECT 2L AS row_id, 'd' AS name UNION ALL SELECT 3L, 'e') s "
          "ON t.row_id = s.row_id WHEN MATCHED THEN UPDATE SET t.name = s.name "
          "WHEN NOT MATCHED THEN INSERT (row_id, name) VALUES (s.row_id, s.name)")
spark.sql(f"DELETE FROM delta.`{table}` WHERE row_id = 3")
spark.sql(f"SELECT * FROM table_changes_by_path('{table}', 1)").collect()
spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()
spark.read.format("delta").option("versionAsOf", 1).load(table).toPandas()
spark.sql(f"RESTORE TABLE delta.`{table}` TO VERSION AS OF 1")
spark.sql(f"OPTIMIZE delta.`{table}` ZORDER BY (name)")
spark.sql(f"VACUUM delta.`{table}`")
gateway = SparkContext._gateway
process = gateway.proc
spark.stop()
try:
    gateway.jvm.java.lang.System.exit(0)  # a normal exit is when the JVM writes the archive
except Exception:
    pass  # the JVM went away mid-call, as it should
sys.exit(process.wait())
"""


def stamp() -> dict[str, object]:
    """What the archive was made from: the Java, pyspark and the jar folder's manifest."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr.strip()
    manifest = json.loads((jars_dir() / JARS_MANIFEST).read_text())
    return {"java": java, "pyspark": pyspark.__version__, "jars": manifest}


def main() -> int:
    archive = jvm_archive()
    if offline_jars() is None:
        print(f"error: no complete jar folder at {jars_dir()}; run `make jars` first", file=sys.stderr)
        return 1
    archive.parent.mkdir(parents=True, exist_ok=True)
    stamp_file = archive.with_name(archive.name + ".json")
    with archive.with_name(archive.name + ".lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        wanted = stamp()
        if archive.is_file() and stamp_file.is_file() and json.loads(stamp_file.read_text()) == wanted:
            print(f"JVM class archive already in place at {archive}.")
            return 0
        with tempfile.TemporaryDirectory(prefix="oreo-jvm-archive-") as tmp:
            made = _dump(Path(tmp))
            if made is None:
                return 1
            stamp_file.unlink(missing_ok=True)
            os.replace(made, archive)  # same folder as the archive: a rename, never half a file
        stamp_file.write_text(json.dumps(wanted, indent=2) + "\n")
    print(f"JVM class archive ready at {archive} ({archive.stat().st_size >> 20} MB).")
    return 0


def _dump(work: Path) -> Path | None:
    """Run the workload with the dump on; the new archive (beside the final one), or None."""
    made = jvm_archive().with_name(f"{jvm_archive().name}.new-{os.getpid()}")
    env = {
        **os.environ,
        "DELTA_DATA_ROOT": str(work / "delta"),
        "OREO_DATABASE_URL": f"sqlite:///{work / 'catalog.db'}",
        "OREO_JVM_ARCHIVE": str(work / "none.jsa"),  # the dump starts from the JDK's own archive
        "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={made}",
    }
    env.pop("SPARK_REMOTE", None)
    log = work / "dump.log"
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-c", _WORKLOAD, str(work / "table")], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    if done.returncode != 0 or not made.is_file() or made.stat().st_size == 0:
        made.unlink(missing_ok=True)
        for source in (log, work / "delta" / "logs" / "spark.log"):  # the JVM writes to the latter
            if source.is_file():
                print("\n".join(source.read_text(errors="replace").splitlines()[-20:]), file=sys.stderr)
        print(f"error: the JVM wrote no class archive (exit {done.returncode})", file=sys.stderr)
        return None
    return made


if __name__ == "__main__":
    sys.exit(main())
