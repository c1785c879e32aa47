"""Resolve the Delta jars once so later Spark starts are offline and fast.

Spark resolves ``spark.jars.packages`` through Ivy into ~/.ivy2.5.2. If Ivy cannot
reach a repository, fetch the same coordinates with Maven into ~/.m2, which Spark's
resolver searches first, then try again.
"""

from __future__ import annotations

import shutil
import subprocess
import sys


def _start_spark() -> bool:
    code = "from core.engine import get_spark; get_spark().range(1).count()"
    return subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL).returncode == 0


def _coordinates() -> list[str]:
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    builder = configure_spark_with_delta_pip(SparkSession.builder)
    packages = builder._options.get("spark.jars.packages", "")
    return [p for p in packages.split(",") if p]


def main() -> int:
    if _start_spark():
        print("Delta jars ready (Ivy cache).")
        return 0
    mvn = shutil.which("mvn")
    if mvn is None:
        print("error: Spark could not resolve the Delta jars and Maven is not installed", file=sys.stderr)
        return 1
    for coordinate in _coordinates():
        print(f"fetching {coordinate} with Maven", file=sys.stderr)
        subprocess.run([mvn, "-q", "dependency:get", f"-Dartifact={coordinate}"], check=True)
    if _start_spark():
        print("Delta jars ready (Maven cache).")
        return 0
    print("error: Spark still cannot start with the Delta jars; see the messages above", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
