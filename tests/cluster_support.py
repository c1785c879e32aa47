"""The loopback cluster of ``scripts/cluster.sh`` as a module-scoped pytest fixture.

A test module takes it with ``cluster = cluster_support.cluster`` (an import of the name
would trip ruff's F811 at every test that asks for it) and asks for ``cluster``: the
cluster starts for that module, and stops after it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "scripts" / "cluster.sh"


def _exports(text: str) -> dict[str, str]:
    """``export NAME=value`` lines as a dict; any other line fails the contract."""
    values = {}
    for line in text.splitlines():
        assert line.startswith("export ") and "=" in line, f"not an export line: {line!r}"
        name, value = line.removeprefix("export ").split("=", 1)
        values[name] = value
    return values


S3_EXPORTS = {"DELTA_DATA_ROOT", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}


def _cluster(state: Path, *, s3: bool) -> Iterator[dict[str, str]]:
    """``scripts/cluster.sh up [--s3]`` with ``state``, ``down`` after; nothing may be left running."""
    # The cluster runs with the tests' interpreter unless told otherwise (a worktree has no .venv).
    env = {"OREO_PYTHON": sys.executable, **os.environ, "OREO_CLUSTER_DIR": str(state)}
    started = time.monotonic()
    command = [str(CLUSTER), "up", *(["--s3"] if s3 else [])]
    up = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert up.returncode == 0, f"cluster.sh up failed:\n{up.stderr[-4000:]}"
    exports = _exports(up.stdout)
    assert set(exports) == {"SPARK_REMOTE", "OREO_DATABASE_URL", *(S3_EXPORTS if s3 else ())}
    print(f"cluster up in {time.monotonic() - started:.0f} s", file=sys.stderr)
    pids = {p.stem: int(p.read_text()) for p in state.glob("*.pid")}
    assert set(pids) == {"master", "worker1", "worker2", "connect", *(["moto"] if s3 else [])}
    try:
        yield {**exports, "OREO_CLUSTER_DIR": str(state)}
    finally:
        down = subprocess.run([str(CLUSTER), "down"], env=env, capture_output=True, text=True, timeout=300)
        assert down.returncode == 0, down.stderr
        for name, pid in pids.items():
            assert not Path(f"/proc/{pid}").exists() or "Z" in _proc_state(pid), f"{name} still runs after down"
        status = subprocess.run([str(CLUSTER), "status"], env=env, capture_output=True, text=True)
        assert status.returncode == 1 and "no cluster" in status.stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``scripts/cluster.sh up`` for this module, ``down`` right after it; nothing may be left running."""
    yield from _cluster(tmp_path_factory.mktemp("cluster"), s3=False)


@pytest.fixture(scope="module")
def cluster_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``scripts/cluster.sh up --s3`` for this module (the store and bucket too), ``down`` after it."""
    yield from _cluster(tmp_path_factory.mktemp("cluster-s3"), s3=True)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"
