"""Resolve the Delta jars once and keep the files in ``.venv/oreo-jars``, so Spark starts offline.

1. Take a file lock in the Ivy cache folder: two setups running at once (``make run``
   in one terminal, ``make test`` in another, or two checkouts) take turns instead of
   resolving into the same cache together.
2. Stop if the folder already holds the jars of the installed delta-spark (its
   manifest names the same coordinates and every file is there).
3. Resolve: start Spark once with ``spark.jars.packages`` (Ivy, into ~/.ivy2.5.2). If
   Ivy cannot reach a repository, fetch the same coordinates with Maven into ~/.m2,
   which Spark's resolver searches first, and try again.
4. Copy the jar files Spark resolved into a new folder with ``manifest.json``, check
   that Spark starts from that folder and writes a Delta table with Ivy pointed at a
   repository that does not exist, then move the folder into place.

``core.engine`` starts Spark with ``spark.jars`` set to these files when the folder is
complete, and falls back to ``spark.jars.packages`` (logging it) when it is not. The
folder is ``OREO_JARS_DIR`` when set (the Docker image, tests).

``--s3a`` (``make jars-s3a``) does the same, under the same lock, for Hadoop's s3a
(``core.engine.S3A_PACKAGES``: hadoop-aws and the AWS SDK bundle of about 640 MB) into
``.venv/oreo-s3a-jars`` (``OREO_S3A_JARS_DIR``), which Spark adds for an ``s3://`` data root.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO
from urllib.parse import unquote, urlparse

from core.engine import JARS_MANIFEST, S3A_PACKAGES, delta_packages, jars_dir, offline_jars, s3a_jars, s3a_jars_dir

# Port 9 (discard) on loopback refuses every connection, so any download fails at once.
_UNREACHABLE_IVY = """<ivysettings>
  <settings defaultResolver="nowhere"/>
  <resolvers><ibiblio name="nowhere" m2compatible="true" root="http://127.0.0.1:9/maven2/"/></resolvers>
</ivysettings>
"""

# Runs in a child process: start a bare Delta-enabled Spark and write the jar files Ivy resolved.
_RESOLVE = """
import sys
from delta import configure_spark_with_delta_pip
from pyspark.sql import SparkSession

builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
spark = configure_spark_with_delta_pip(builder).getOrCreate()
with open(sys.argv[1], "w") as out:
    out.write(spark.sparkContext.getConf().get("spark.jars", ""))
spark.stop()
"""

# Runs in a child process: resolve the s3a packages alone and write the jar files Ivy resolved.
_RESOLVE_S3A = """
import sys
from pyspark.sql import SparkSession

builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
spark = builder.config("spark.jars.packages", sys.argv[2]).getOrCreate()
with open(sys.argv[1], "w") as out:
    out.write(spark.sparkContext.getConf().get("spark.jars", ""))
spark.stop()
"""

# Runs in a child process against the new folder, with Ivy unable to reach anything.
_CHECK = """
import sys
from core.engine import get_spark
spark = get_spark()
spark.range(3).write.format("delta").save(sys.argv[1])
assert spark.read.format("delta").load(sys.argv[1]).count() == 3
"""


def ivy_dir() -> Path:
    """Spark's Ivy home (``spark.jars.ivy``'s default)."""
    return Path.home() / ".ivy2.5.2"


def main() -> int:
    s3a = "--s3a" in sys.argv[1:]
    target = s3a_jars_dir() if s3a else jars_dir()
    lock_path = ivy_dir() / "oreo-fetch-jars.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock:
        waited = _lock(lock)
        if s3a:
            return 0 if s3a_jars() is not None else _fetch_s3a(target)
        if offline_jars(target) is not None:
            after = " (after waiting for another setup)" if waited else ""
            print(f"Delta jars already in place in {target}{after}.")
            return 0
        return _fetch(target)


def _lock(lock_file: IO[str]) -> bool:
    """Take the exclusive lock; True when another process held it first."""
    fd = lock_file.fileno()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        print("waiting for another setup that is resolving the Delta jars...", file=sys.stderr)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True


def _fetch(target: Path) -> int:
    packages = delta_packages()
    with tempfile.TemporaryDirectory(prefix="oreo-jars-") as tmp:
        work = Path(tmp)
        jars = _resolve(work)
        if jars is None and shutil.which("mvn") is not None:
            for coordinate in packages.split(","):
                print(f"Ivy could not resolve the Delta jars; fetching {coordinate} with Maven", file=sys.stderr)
                subprocess.run(["mvn", "-q", "dependency:get", f"-Dartifact={coordinate}"], check=True)
            jars = _resolve(work)
        if jars is None:
            print(f"error: Spark could not resolve {packages} (no network, and no Maven?)", file=sys.stderr)
            _keep_log(work / "resolve.log")
            return 1
        if not _install(jars, target, packages, check=lambda staging: _starts_offline(staging, work)):
            print("error: Spark does not start from the resolved jars alone", file=sys.stderr)
            _keep_log(work / "check.log")
            return 1
    print(f"Delta jars ready in {target} ({len(jars)} files); Spark starts without the network.")
    return 0


def _fetch_s3a(target: Path) -> int:
    """Resolve ``S3A_PACKAGES`` and copy its jars into ``target`` (replaced whole, never half-written)."""
    with tempfile.TemporaryDirectory(prefix="oreo-s3a-jars-") as tmp:
        work = Path(tmp)
        jars = _resolve(work, _RESOLVE_S3A, S3A_PACKAGES)
        if jars is None:
            print(f"error: Spark could not resolve {S3A_PACKAGES}", file=sys.stderr)
            _keep_log(work / "resolve.log")
            return 1
        _install(jars, target, S3A_PACKAGES)
    print(f"s3a jars ready in {target} ({len(jars)} files).")
    return 0


def _resolve(work: Path, script: str = _RESOLVE, *args: str) -> list[Path] | None:
    """The local jar files Spark resolved for the packages, or None if it could not."""
    listing = work / "jars.txt"
    with (work / "resolve.log").open("a") as log:
        done = subprocess.run(
            [sys.executable, "-c", script, str(listing), *args], stdout=log, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0 or not listing.is_file():
        return None
    files = [Path(unquote(urlparse(u).path)) if "://" in u else Path(u) for u in listing.read_text().split(",") if u]
    return files if files and all(f.is_file() for f in files) else None


def _install(jars: list[Path], target: Path, packages: str, *, check: Callable[[Path], bool] | None = None) -> bool:
    """Copy ``jars`` into a staging folder beside ``target`` and swap it in whole, if ``check`` passes."""
    staging = target.with_name(f"{target.name}.new-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _copy(jars, staging, packages)
        if check is not None and not check(staging):
            return False
        _replace(staging, target)
        return True
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _copy(jars: list[Path], folder: Path, packages: str) -> None:
    folder.mkdir(parents=True)
    entries = []
    for jar in jars:
        shutil.copy2(jar, folder / jar.name)
        entries.append({"name": jar.name, "size": (folder / jar.name).stat().st_size})
    resolved_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    manifest = {"packages": packages, "jars": entries, "resolved_at": resolved_at}
    (folder / JARS_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def _starts_offline(folder: Path, work: Path) -> bool:
    settings = work / "unreachable-ivysettings.xml"
    settings.write_text(_UNREACHABLE_IVY)
    env = {
        **os.environ,
        "OREO_JARS_DIR": str(folder),
        "DELTA_DATA_ROOT": str(work / "delta"),
        "OREO_SPARK_MASTER": "local[1]",
        "PYSPARK_SUBMIT_ARGS": (
            f"--conf spark.jars.ivySettings={settings} --conf spark.jars.ivy={work / 'no-ivy'} pyspark-shell"
        ),
    }
    env.pop("SPARK_REMOTE", None)
    with (work / "check.log").open("a") as log:
        done = subprocess.run(
            [sys.executable, "-c", _CHECK, str(work / "table")], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    return done.returncode == 0


def _replace(staging: Path, target: Path) -> None:
    """Move the checked folder into place (the old one, if any, is removed first)."""
    old = target.with_name(f"{target.name}.old-{os.getpid()}")
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _keep_log(log: Path) -> None:
    """Copy a child's log out of the temporary folder and print its tail."""
    if not log.is_file():
        return
    kept = Path(tempfile.gettempdir()) / f"oreo-fetch-jars-{os.getpid()}-{log.name}"
    shutil.copyfile(log, kept)
    tail = log.read_text(errors="replace").splitlines()[-20:]
    print("\n".join(tail), file=sys.stderr)
    print(f"(the whole log: {kept})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
