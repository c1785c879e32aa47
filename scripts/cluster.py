"""A loopback Spark cluster for Oreo: standalone master, two workers, Spark Connect, PostgreSQL.

Run through ``scripts/cluster.sh`` (``up [--s3]``, ``status``, ``down``). ``up`` starts

* a Spark standalone master and two small workers (``spark-class`` from the pip
  package, whose folder is ``SPARK_HOME``);
* a Spark Connect server (``spark-submit --class ...SparkConnectServer``) with
  ``--master spark://127.0.0.1:<port>``, the Delta jars ``make jars`` resolved
  (``.venv/oreo-jars``; ``scripts/fetch_jars.py`` resolves them first under its lock when
  the folder is incomplete, so no second Ivy resolution runs beside another) and the
  confs the embedded engine runs with (``core.engine.session_confs``);
* a PostgreSQL cluster for the catalog (the Debian server binaries, as the tests use them);
* with ``--s3``: an S3-compatible store (``moto_server`` from the venv, speaking HTTP) with
  a bucket; the Connect server then also gets Hadoop's s3a jars (``.venv/oreo-s3a-jars``,
  resolved by ``scripts/fetch_jars.py --s3a`` first when missing) and the s3a confs that
  ``core.engine.session_confs`` adds for an ``s3://`` data root, and ``up`` prints
  ``DELTA_DATA_ROOT=s3://<bucket>/<prefix>`` and the ``AWS_*`` variables too;

all bound to 127.0.0.1 on free ports, with their pids, logs and data under the state
folder ``$OREO_CLUSTER_DIR`` (default ``data/cluster``). On success stdout carries only
``export NAME=value`` lines (``eval "$(scripts/cluster.sh up)"``); progress and errors go
to stderr. ``up`` on a running cluster prints the same lines again. ``down`` stops what
``up`` started, by the pids it recorded, and removes the cluster's data (not its logs).
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STATE_FILE = "cluster.json"
START_TIMEOUT_S = 300
# Kept small: the cluster shares a laptop-sized host with the app and the tests.
WORKERS = 2
WORKER_CORES = 1
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "768m"
DAEMON_MEMORY = "256m"
DRIVER_MEMORY = "1536m"
SHUFFLE_PARTITIONS = 2
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# The S3 store of ``up --s3``: moto's server, in memory (its objects go with it at ``down``).
MOTO_MARKER = "moto_server"
S3_BUCKET = "oreo"
S3_PREFIX = "delta"
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class ClusterError(Exception):
    """A step of the cluster failed; the message is one line, for ``error: ...``."""


def _say(message: str) -> None:
    print(f"cluster: {message}", file=sys.stderr, flush=True)


def state_dir() -> Path:
    return Path(os.environ.get("OREO_CLUSTER_DIR") or REPO / "data" / "cluster").absolute()


def _state_path() -> Path:
    return state_dir() / STATE_FILE


def _load_state() -> dict[str, Any] | None:
    try:
        return dict(json.loads(_state_path().read_text()))
    except (OSError, ValueError):
        return None


def _save_state(state: dict[str, Any]) -> None:
    path = _state_path()
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(state, indent=2))
    temp.replace(path)


# Ports are picked below Linux's ephemeral range (32768-60999): a port the kernel hands to
# some process's outgoing or bind(0) socket between our check and the server's bind (Spark's
# own services bind ephemeral ports while the Connect server starts) would make it fail.
PORT_RANGE = (20000, 32767)


def _free_port() -> int:
    """A port on 127.0.0.1 nobody listens on now, outside the ephemeral range when one is free there."""
    import random

    for _ in range(100):
        port = random.randint(*PORT_RANGE)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_env(local_dirs: Path) -> dict[str, str]:
    """The environment a Spark process of the cluster starts with: the pip package as
    ``SPARK_HOME``, loopback, ``local_dirs`` for its scratch files and this interpreter for Python workers."""
    local_dirs.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "SPARK_HOME": str(_spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(local_dirs),
        "PYSPARK_PYTHON": sys.executable,
    }


# ---------------------------------------------------------------- processes


def _alive(pid: int, marker: str) -> bool:
    """``pid`` runs (not a zombie) and is still a process ``up`` started: its command line names
    ``marker``, or it is the ``spark-class`` script that is about to exec it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    if "\nState:\tZ" in status:
        return False
    # An empty command line is a process in the middle of an exec (spark-class becoming java).
    return not cmdline or marker in cmdline or "spark-class" in cmdline or "spark-submit" in cmdline


def _spawn(name: str, cmd: list[str], env: dict[str, str], logs: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own process group, its output in ``logs/<name>.log``."""
    log = logs / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    (state_dir() / f"{name}.pid").write_text(str(proc.pid))
    return proc


def _wait_for_line(name: str, proc: subprocess.Popen[bytes], log: Path, text: str) -> None:
    """Wait until ``log`` says ``text``; fail when ``proc`` exits first (its exit status, not
    its command line, which reads empty for an instant while spark-class execs java)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            if text in log.read_text(errors="replace"):
                return
        except OSError:
            pass
        if proc.poll() is not None:
            raise ClusterError(f"{name} exited while starting (status {proc.returncode}); see {log}")
        if time.monotonic() > deadline:
            raise ClusterError(f"{name} did not start in {START_TIMEOUT_S} s; see {log}")
        time.sleep(0.5)


def _stop_pid(name: str, pid: int, marker: str) -> None:
    """SIGTERM the process group ``pid`` leads (a worker's executors too), then SIGKILL after 30 s."""
    if not _alive(pid, marker):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while _alive(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid, marker):
        _say(f"{name} ignored SIGTERM; killing it")
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------- PostgreSQL


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise ClusterError(f"PostgreSQL {name} not found; run scripts/install_postgres.sh (make test does)")
    return found[-1]


def _as_postgres(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; drop to the package's postgres user when we are root.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _postgres_dir(root: Path) -> Path:
    """Where PostgreSQL keeps its data: under ``root``, unless the ``postgres`` user (we run
    as root) cannot reach it there (pytest's 0700 temp folders), then a folder in /tmp."""
    here = root / "postgres"
    if os.geteuid() != 0 or subprocess.run(_as_postgres(["test", "-x", str(root)])).returncode == 0:
        return here
    import tempfile

    return Path(tempfile.mkdtemp(prefix="oreo-cluster-pg-"))


def _pg(name: str, *args: str, as_postgres: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [_pg_bin(name), *args]
    return subprocess.run(_as_postgres(cmd) if as_postgres else cmd, capture_output=True, text=True)


def _start_postgres(base: Path, port: int) -> str:
    base.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    data = str(base / "pgdata")
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1"
    steps: list[tuple[tuple[str, ...], bool]] = [
        (("initdb", "-D", data, "-U", "oreo", "--auth=trust", "-E", "UTF8"), True),
        (("pg_ctl", "-D", data, "-l", str(base / "server.log"), "-w", "-t", "60", "-o", options, "start"), True),
        (("createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "oreo", "oreo"), False),
    ]
    for args, as_postgres in steps:  # in order; the first failure stops
        done = _pg(*args, as_postgres=as_postgres)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise ClusterError(f"PostgreSQL did not start: {detail[-1] if detail else done.args}")
    return f"postgresql+psycopg://oreo@127.0.0.1:{port}/oreo"


def _postgres_running(base: Path) -> bool:
    data = base / "pgdata"
    return data.is_dir() and _pg("pg_ctl", "-D", str(data), "status").returncode == 0


def _stop_postgres(base: Path) -> None:
    data = base / "pgdata"
    if data.is_dir():
        _pg("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")


# ---------------------------------------------------------------- Spark


def _delta_jars() -> list[Path]:
    """The Delta jar files; resolved first (under fetch_jars' lock) when the folder is incomplete."""
    from core.engine import offline_jars

    jars = offline_jars()
    if jars is None:
        _say("the Delta jar folder is incomplete; resolving it (scripts/fetch_jars.py)")
        done = subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_jars.py")], stdout=sys.stderr)
        jars = offline_jars() if done.returncode == 0 else None
    if jars is None:
        raise ClusterError("could not resolve the Delta jars; run `make jars`")
    return jars


def _s3a_jars() -> list[Path]:
    """Hadoop's s3a jar files; resolved first (``fetch_jars.py --s3a``, under its lock) when missing."""
    from core.engine import s3a_jars, s3a_jars_dir

    jars = s3a_jars()
    if jars is None:
        _say(f"no s3a jars in {s3a_jars_dir()}; resolving them (scripts/fetch_jars.py --s3a, ~640 MB once)")
        script = [sys.executable, str(REPO / "scripts" / "fetch_jars.py"), "--s3a"]
        done = subprocess.run(script, stdout=sys.stderr)
        jars = s3a_jars() if done.returncode == 0 else None
    if jars is None:
        raise ClusterError("could not resolve the s3a jars; run `make jars-s3a`")
    return jars


def s3_environment(state: dict[str, Any]) -> dict[str, str]:
    """The client variables of the store ``up --s3`` started (empty without one)."""
    s3 = state.get("s3")
    if not s3:
        return {}
    return {
        "DELTA_DATA_ROOT": f"s3://{s3['bucket']}/{s3['prefix']}",
        "AWS_ENDPOINT_URL": s3["endpoint"],
        **S3_CREDENTIALS,
    }


def connect_confs(port: int, s3: dict[str, str] | None = None) -> dict[str, str]:
    """The confs of the Spark Connect server: the embedded engine's, its address and executor sizes.

    With ``s3`` (``s3_environment``: the data root and the ``AWS_*`` variables) they are the
    confs the engine has for that ``s3://`` root: ``core.engine.session_confs`` reads them
    from the settings, so they are set for that one call.

    ``deploy/spark-connect`` starts its server with the same list (``tests/test_deploy.py``
    compares them); only the addresses differ there.
    """
    from core.config import get_settings
    from core.engine import session_confs

    saved = {name: os.environ.get(name) for name in s3 or {}}
    os.environ.update(s3 or {})
    get_settings.cache_clear()
    try:
        engine_confs = session_confs(SHUFFLE_PARTITIONS)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        get_settings.cache_clear()
    return {
        **engine_confs,
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.executor.cores": str(WORKER_CORES),
        "spark.cores.max": str(WORKERS * WORKER_CORES),
    }


def connect_command(master: str, port: int, s3: dict[str, str] | None = None) -> list[str]:
    """The ``spark-submit`` command of the Spark Connect server on ``master`` (``s3``: see ``connect_confs``)."""
    confs = connect_confs(port, s3)
    jars = [*_delta_jars(), *(_s3a_jars() if s3 else [])]
    return [
        str(_spark_home() / "bin" / "spark-submit"),
        "--master",
        master,
        "--class",
        CONNECT_CLASS,
        "--name",
        "oreo-connect",
        "--driver-memory",
        DRIVER_MEMORY,
        "--jars",
        ",".join(str(j) for j in jars),
        *[arg for key, value in confs.items() for arg in ("--conf", f"{key}={value}")],
        "spark-internal",
    ]


# ---------------------------------------------------------------- the S3 store


def _s3_answers(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=2).read()
    except urllib.error.HTTPError:
        return True  # an S3 error document is an answer
    except OSError:
        return False
    return True


def _start_moto(logs: Path, state: dict[str, Any]) -> None:
    """moto's S3 server on a free loopback port, and the bucket; recorded in ``state["s3"]``."""
    import urllib.request

    server = Path(sys.executable).parent / MOTO_MARKER
    if not server.is_file():
        raise ClusterError(f"{server} not found; install requirements-test.txt (moto[server])")
    port = _free_port()
    proc = _spawn("moto", [str(server), "-H", "127.0.0.1", "-p", str(port)], dict(os.environ), logs)
    state["pids"]["moto"] = [proc.pid, MOTO_MARKER]
    _save_state(state)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not _s3_answers(endpoint):
        if proc.poll() is not None:
            raise ClusterError(f"moto_server exited while starting (status {proc.returncode}); see {logs}/moto.log")
        if time.monotonic() > deadline:
            raise ClusterError(f"moto_server did not answer in 60 s; see {logs}/moto.log")
        time.sleep(0.2)
    try:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{S3_BUCKET}", method="PUT"), timeout=30).read()
    except OSError as exc:
        raise ClusterError(f"could not create the bucket {S3_BUCKET!r} on {endpoint}: {exc}") from exc
    state["s3"] = {"endpoint": endpoint, "bucket": S3_BUCKET, "prefix": S3_PREFIX}
    _save_state(state)
    _say(f"S3 (moto) at {endpoint}, bucket {S3_BUCKET}")


# ---------------------------------------------------------------- commands


def _exports(state: dict[str, Any]) -> str:
    values = {"SPARK_REMOTE": state["spark_remote"], "OREO_DATABASE_URL": state["database_url"]}
    values.update(s3_environment(state))
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in values.items())


def _components(state: dict[str, Any]) -> list[tuple[str, int, str]]:
    """(name, pid, command-line marker) of each Spark process ``up`` recorded, in start order."""
    return [(name, int(pid), marker) for name, (pid, marker) in state.get("pids", {}).items()]


def _running(state: dict[str, Any]) -> dict[str, bool]:
    status = {name: _alive(pid, marker) for name, pid, marker in _components(state)}
    status["postgres"] = _postgres_running(Path(state["postgres_dir"]))
    return status


def up(s3: bool) -> int:
    state = _load_state()
    if state is not None:
        running = _running(state)
        if all(running.values()) and bool(state.get("s3")) != s3:
            has = "with" if state.get("s3") else "without"
            raise ClusterError(f"a cluster {has} S3 runs from {state_dir()}; `scripts/cluster.sh down` it first")
        if all(running.values()):
            _say(f"already up (state in {state_dir()})")
            sys.stdout.write(_exports(state))
            return 0
        _say("a previous cluster is partly down; stopping what is left of it first")
        down()
    root = state_dir()
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    state = {"pids": {}, "postgres_dir": str(_postgres_dir(root))}
    _save_state(state)  # from here on, `down` can stop whatever got started
    try:
        _start_all(root, logs, state, s3)
    except BaseException:
        _say("start failed; stopping what started")
        down()
        raise
    sys.stdout.write(_exports(state))
    return 0


def _start_all(root: Path, logs: Path, state: dict[str, Any], s3: bool) -> None:
    jars = _delta_jars()  # before anything starts: a resolution may take minutes
    _say(f"Delta jars: {len(jars)} files from {jars[0].parent}")
    if s3:
        extra = _s3a_jars()
        _say(f"s3a jars: {len(extra)} files from {extra[0].parent}")
    env = spark_env(root / "local")
    # The master's and workers' own heap; not the Connect server's (spark-submit reads this
    # variable for server classes and would then ignore --driver-memory).
    daemon_env = {**env, "SPARK_DAEMON_MEMORY": DAEMON_MEMORY}
    spark_class = str(_spark_home() / "bin" / "spark-class")

    master_port, master_ui = _free_port(), _free_port()
    master = f"spark://127.0.0.1:{master_port}"
    cmd = [spark_class, MASTER_CLASS, "--host", "127.0.0.1", "--port", str(master_port), "--webui-port", str(master_ui)]
    proc = _spawn("master", cmd, daemon_env, logs)
    state["pids"]["master"] = [proc.pid, MASTER_CLASS]
    state["master"] = master
    _save_state(state)
    _wait_for_line("the master", proc, logs / "master.log", "I have been elected leader")
    _say(f"master at {master}")

    workers: dict[str, subprocess.Popen[bytes]] = {}
    for index in range(1, WORKERS + 1):
        name = f"worker{index}"
        work = root / name
        work.mkdir(exist_ok=True)
        cmd = [
            spark_class, WORKER_CLASS, "--host", "127.0.0.1", "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
            "--webui-port", str(_free_port()), "--work-dir", str(work), master,
        ]  # fmt: skip
        workers[name] = _spawn(name, cmd, daemon_env, logs)
        state["pids"][name] = [workers[name].pid, WORKER_CLASS]
        _save_state(state)
    for name, worker in workers.items():
        _wait_for_line(name, worker, logs / f"{name}.log", "Successfully registered with master")
    _say(f"{WORKERS} workers registered ({WORKER_CORES} core, {WORKER_MEMORY} each)")

    if s3:
        _start_moto(logs, state)

    port = _free_port()
    connect = _spawn("connect", connect_command(master, port, s3_environment(state)), env, logs)
    state["pids"]["connect"] = [connect.pid, CONNECT_CLASS]
    state["spark_remote"] = f"sc://127.0.0.1:{port}"
    _save_state(state)

    state["database_url"] = _start_postgres(Path(state["postgres_dir"]), _free_port())
    _save_state(state)
    _say("PostgreSQL up")

    _wait_for_line("the Spark Connect server", connect, logs / "connect.log", "Spark Connect server started")
    _say(f"Spark Connect at {state['spark_remote']}")


def status() -> int:
    state = _load_state()
    if state is None:
        print("no cluster (nothing started from this state folder)")
        return 1
    running = _running(state)
    where = {
        "master": state.get("master"),
        "connect": state.get("spark_remote"),
        "postgres": state.get("database_url"),
        "moto": s3_environment(state).get("DELTA_DATA_ROOT"),
    }
    if state.get("s3"):
        where["moto"] = f"{state['s3']['endpoint']} {where['moto']}"
    for name, up_now in running.items():
        detail = f" {where[name]}" if where.get(name) else ""
        print(f"{name}: {'running' if up_now else 'stopped'}{detail}")
    return 0 if all(running.values()) else 1


def down() -> int:
    state = _load_state()
    if state is None:
        _say("nothing to stop")
        return 0
    for name, pid, marker in reversed(_components(state)):
        _stop_pid(name, pid, marker)
        (state_dir() / f"{name}.pid").unlink(missing_ok=True)
    _stop_postgres(Path(state["postgres_dir"]))
    shutil.rmtree(state["postgres_dir"], ignore_errors=True)
    root = state_dir()
    for leftover in ("local", *(f"worker{i}" for i in range(1, WORKERS + 1))):
        shutil.rmtree(root / leftover, ignore_errors=True)
    _state_path().unlink(missing_ok=True)
    _say("down")
    return 0


USAGE = "usage: scripts/cluster.sh up [--s3] | status | down"


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(REPO))
    try:
        if argv[:1] == ["up"] and set(argv[1:]) <= {"--s3"}:
            return up("--s3" in argv[1:])
        if argv == ["status"]:
            return status()
        if argv == ["down"]:
            return down()
        print(f"error: {USAGE}", file=sys.stderr)
        return 2
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
