"""The JVM's class-data archive: ``make jars`` dumps it once, every local Spark start maps it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import SparkContext

from core import engine

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "jvm_archive.py"


def run_script(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_the_driver_is_given_the_archive_only_when_it_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "with space" / "oreo-spark.jsa"
    monkeypatch.setenv("OREO_JVM_ARCHIVE", str(archive))
    assert engine.driver_java_options() is None

    archive.parent.mkdir()
    archive.write_bytes(b"jsa")
    assert engine.driver_java_options() == f'-XX:SharedArchiveFile="{archive}"'


@pytest.mark.spark
def test_this_sessions_jvm_maps_the_archive_make_jars_made(spark) -> None:  # type: ignore[no-untyped-def]
    """The archive ``make test`` built is the one the running JVM mapped: valid, and used."""
    archive = engine.jvm_archive()
    assert archive.is_file(), f"{archive} is missing: `make jars` builds it"
    pid = SparkContext._gateway.proc.pid  # type: ignore[union-attr]  # spark-class execs java: the JVM's pid
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text()


def test_the_script_keeps_an_archive_that_matches_its_stamp_and_starts_no_jvm(tmp_path: Path) -> None:
    archive = tmp_path / "oreo-spark.jsa"
    archive.write_bytes(b"kept")
    env = {"PATH": "/usr/bin:/bin", "OREO_JVM_ARCHIVE": str(archive), "HOME": str(tmp_path)}
    stamp = subprocess.run(
        [sys.executable, "-c", "import json, jvm_archive; print(json.dumps(jvm_archive.stamp()))"],
        cwd=REPO / "scripts", env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    (tmp_path / "oreo-spark.jsa.json").write_text(stamp)

    done = run_script(env)

    assert done.returncode == 0, done.stderr
    assert "already in place" in done.stdout
    assert archive.read_bytes() == b"kept" and json.loads((tmp_path / "oreo-spark.jsa.json").read_text())


def test_the_script_refuses_without_the_jar_folder_and_writes_nothing(tmp_path: Path) -> None:
    archive = tmp_path / "out" / "oreo-spark.jsa"
    env = {"PATH": "/usr/bin:/bin", "OREO_JVM_ARCHIVE": str(archive), "OREO_JARS_DIR": str(tmp_path / "no-jars")}

    done = run_script(env)

    assert done.returncode == 1
    message = f"error: no complete jar folder at {tmp_path / 'no-jars'}; run `make jars` first"
    assert done.stderr.strip().splitlines() == [message]
    assert not (tmp_path / "out").exists()
