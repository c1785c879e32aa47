"""The loopback cluster of ``scripts/cluster.sh`` as pytest fixtures, started once per session.

A test module takes one with ``cluster = cluster_support.cluster`` (an import of the name
would trip ruff's F811 at every test that asks for it) and asks for ``cluster`` (or
``cluster_s3``). The first module to ask starts it; later modules reuse it; it stops when a
module asks for the other kind (one cluster at a time: each is a master, two workers, a
Connect server and PostgreSQL) or when the session ends. ``tests/conftest.py`` runs the
``cluster`` tier as one run (after the browser tier), the S3 modules last in it, so each kind starts once.

Modules share the cluster's Spark, not its catalog: ``own_database`` gives a module a new
PostgreSQL database on the cluster's server, so one module's projects and users are not
another's.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from core.engine import driver_java_options
from tests.jvm_options import LONG_LIVED, SERIAL_GC, SUBMIT_OPTS, interpreted_args, long_lived

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "scripts" / "cluster.sh"
LOCAL_CONNECT_START_S = 300.0


def cluster_script() -> ModuleType:
    """``scripts/cluster.py`` as a module (scripts/ is not a package), loaded once."""
    name = "oreo_cluster_script"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "cluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _exports(text: str) -> dict[str, str]:
    """``export NAME=value`` lines as a dict; any other line fails the contract."""
    values = {}
    for line in text.splitlines():
        assert line.startswith("export ") and "=" in line, f"not an export line: {line!r}"
        name, value = line.removeprefix("export ").split("=", 1)
        values[name] = value
    return values


S3_EXPORTS = {"DELTA_DATA_ROOT", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}


@contextmanager
def _cluster(state: Path, *, s3: bool) -> Iterator[dict[str, str]]:
    """``scripts/cluster.sh up [--s3]`` with ``state``, ``down`` after; nothing may be left running."""
    # The cluster runs with the tests' interpreter unless told otherwise (a worktree has no .venv).
    # The Connect server lives for the session: both compilers (tests/jvm_options.py).
    env = long_lived({"OREO_PYTHON": sys.executable, **os.environ, "OREO_CLUSTER_DIR": str(state)})
    if env.get(SUBMIT_OPTS) == LONG_LIVED:  # the suite's: its executors collect as every JVM of the suite does
        env[SUBMIT_OPTS] = f"{LONG_LIVED} -Dspark.executor.extraJavaOptions={SERIAL_GC}"
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


class Clusters:
    """At most one loopback cluster at a time, up from the first module that asks until another kind is asked for."""

    def __init__(self) -> None:
        self._running: tuple[bool, dict[str, str], ExitStack] | None = None

    def get(self, factory: pytest.TempPathFactory, *, s3: bool) -> dict[str, str]:
        if self._running is not None and self._running[0] == s3:
            return self._running[1]
        self.stop()
        stack = ExitStack()
        exports = stack.enter_context(_cluster(factory.mktemp("cluster-s3" if s3 else "cluster"), s3=s3))
        self._running = (s3, exports, stack)
        return exports

    def stop(self) -> None:
        """``down`` the running cluster, checking that nothing it started still runs."""
        running, self._running = self._running, None
        if running is not None:
            running[2].close()


# The session's clusters; tests/conftest.py's session fixture ``clusters`` stops the last one.
CLUSTERS = Clusters()


@pytest.fixture(scope="module")
def cluster(clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``scripts/cluster.sh up``, or the one an earlier module started; ``down`` at the session's end."""
    return clusters.get(tmp_path_factory, s3=False)


@pytest.fixture(scope="module")
def cluster_s3(clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``scripts/cluster.sh up --s3`` (the store and bucket too); a running cluster without S3 is stopped first."""
    return clusters.get(tmp_path_factory, s3=True)


def own_database(url: str, name: str) -> str:
    """A new, empty database ``name`` on the PostgreSQL server of ``url`` (a SQLAlchemy URL); its URL."""
    base = make_url(url)
    with psycopg.connect(base.set(drivername="postgresql").render_as_string(hide_password=False), autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return base.set(database=name).render_as_string(hide_password=False)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


@contextmanager
def local_connect(state: Path, port: int) -> Iterator[str]:
    """A Spark Connect server running Spark in its own JVM (``local[2]``: no master, no workers).

    The command and confs are the loopback cluster's (``scripts/cluster.py``'s
    ``connect_command``), so its sessions run Oreo's statements as the embedded engine
    does; its JVM maps the class-data archive as every embedded start does. Yields its
    ``sc://`` address; stops it (and whatever it started) afterwards.
    """
    script = cluster_script()
    command = script.connect_command("local[2]", port)
    command[1:1] = interpreted_args()  # as the suite's embedded drivers (tests/jvm_options.py)
    options = driver_java_options()
    if options:
        command[1:1] = ["--driver-java-options", options]
    # It lives for the session: both compilers (tests/jvm_options.py).
    env = long_lived(script.spark_env(state / "local"))
    log = state / "connect.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + LOCAL_CONNECT_START_S
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            assert process.poll() is None, f"the Connect server exited with {process.returncode}:\n{log_tail(log)}"
            assert time.monotonic() < deadline, f"no Connect server in {LOCAL_CONNECT_START_S:.0f} s:\n{log_tail(log)}"
            time.sleep(0.2)  # poll interval, not a wait for an outcome
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop_group(process, grace_s=30)


def stop_group(process: subprocess.Popen[bytes], *, grace_s: float) -> None:
    """SIGTERM the process group ``process`` leads (it was started with ``start_new_session``),
    SIGKILL after ``grace_s``; returns once it is gone."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a process's log, for a failure message."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"
