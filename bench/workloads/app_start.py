"""App start to first possible submit: ``streamlit run app/main.py`` until its engine is warm.

Each round starts two fresh processes, one after the other (the order swaps every round):

* core: ``streamlit run app/main.py`` on a free loopback port over the bench workspace.
  The server starts Spark in the background as it starts; the clock runs from the
  process start until its ``/oreo/engine`` endpoint says ``ready``, which is when a
  submit can run without waiting for the JVM. Nobody opens a browser. The server's
  memory (its RSS plus its JVM child's) is read after its first-use warm-up (a first
  Spark job and the GX import, just after ``ready``), and it is stopped;
* bare: a fresh Python process running ``SparkSession.builder...getOrCreate()`` with
  the same Delta jar files, timed until it prints that the session is up.

Target: the core median <= 20 s on this machine (the ratio to the bare start is reported).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench._data import DATA_DIR, ensure_customers
from bench._harness import BenchConfig, Timing, WorkloadResult, expect

NAME = "app_start"
MAX_MEDIAN_MS = 20_000.0
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
START_TIMEOUT_S = 300.0
READY_MARK = "OREO_BARE_SPARK_READY"

# The bare start: the same builder confs as core.engine (master, Delta extension and
# catalog, the jar files, driver memory), nothing else; JVM output to /dev/null.
BARE_SCRIPT = f"""
import sys
from pyspark.sql import SparkSession
from core import engine
from core.config import get_settings
settings = get_settings()
jars = engine.offline_jars()
assert jars, "no Delta jar folder; run make jars"
spark = (
    SparkSession.builder.master(settings.spark_master)
    .config("spark.sql.extensions", engine.DELTA_EXTENSION)
    .config("spark.sql.catalog.spark_catalog", engine.DELTA_CATALOG)
    .config("spark.driver.memory", settings.spark_driver_memory)
    .config("spark.ui.enabled", "false")
    .config("spark.jars", ",".join(str(p) for p in jars))
    .getOrCreate()
)
print("{READY_MARK}", flush=True)
spark.stop()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    """This process's settings (``configure_environment`` pointed them at ``bench/.data``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    env.pop("SPARK_REMOTE", None)
    env.pop("OREO_TEST_SLOW_ENGINE_START_S", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _engine_status(port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/oreo/engine", timeout=2) as resp:
            return dict(json.loads(resp.read()))
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None


def warm(port: int, pid: int) -> bool:
    """Whether the app on ``port`` (process ``pid``) says its engine is ready and warmed up.

    Raises:
        RuntimeError: Its engine failed to start, or another process answers on the port.
    """
    status = _engine_status(port)
    if status is None:
        return False
    if status["state"] == "failed":
        raise RuntimeError(f"the app's engine did not start: {status['error']}")
    if status["pid"] != pid:
        raise RuntimeError("another process answered on the port")
    # ``warm`` (the MERGE warm-up); ``first_use_warmed`` on a server from before it.
    return bool(status["state"] == "ready" and status.get("warm", status["first_use_warmed"]))


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc; Linux only)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _is_java(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def start_app(log: Path) -> tuple[float, float, dict[str, Any]]:
    """Start the app once; (seconds to HTTP, seconds to a warm engine, facts) then stop it."""
    for _attempt in range(3):  # another process may take the free port first
        port = _free_port()
        command = [
            str(BIN / "streamlit"), "run", "app/main.py",
            "--server.port", str(port),
            "--server.address", "127.0.0.1",
            "--server.headless", "true",
            "--browser.gatherUsageStats", "false",
        ]  # fmt: skip
        with log.open("wb") as out:
            start = time.perf_counter()
            process = subprocess.Popen(
                command, cwd=REPO, env=_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            http_s: float | None = None
            while time.perf_counter() - start < START_TIMEOUT_S:
                if process.poll() is not None:
                    break
                status = _engine_status(port)
                if status is not None and http_s is None:
                    http_s = time.perf_counter() - start
                if status is not None and status["state"] in ("ready", "failed"):
                    ready_s = time.perf_counter() - start
                    expect(status["state"] == "ready", f"the engine did not start: {status['error']}")
                    expect(status["pid"] == process.pid, "another process answered on the port")
                    # Memory is read once the server also ran its first-use warm-up (a first
                    # Spark job, the GX import): what it holds while it waits for a submit.
                    while not status.get("first_use_warmed") and time.perf_counter() - start < START_TIMEOUT_S:
                        time.sleep(0.1)  # poll interval
                        status = _engine_status(port) or status
                    warmed_s = time.perf_counter() - start
                    children = _descendants(process.pid)
                    jvms = [pid for pid in children if _is_java(pid)]
                    expect(len(jvms) == 1, f"the server runs {len(jvms)} JVMs, not one")
                    facts = {
                        "server_rss_mb": _rss_mb(process.pid),
                        "jvm_rss_mb": sum(_rss_mb(pid) for pid in jvms),
                        "in_process_start_s": status["elapsed_s"],
                        "first_use_warmed_s": warmed_s,
                    }
                    return http_s if http_s is not None else ready_s, ready_s, facts
                time.sleep(0.1)  # poll interval
            if process.poll() is not None and "is not available" in log.read_text(errors="replace"):
                continue
            raise RuntimeError(f"the app's engine was not ready within {START_TIMEOUT_S:.0f} s; see {log}")
        finally:
            _stop(process)
    raise RuntimeError("no free port for the app after 3 attempts")


def start_bare() -> float:
    """Seconds from a fresh Python process's start to its bare Spark session being up."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", BARE_SCRIPT],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.decode(errors="replace").strip() == READY_MARK:
                return time.perf_counter() - start
        raise RuntimeError(f"the bare Spark start failed (exit {process.wait()})")
    finally:
        if process.stdout is not None:
            process.stdout.close()
        _stop(process)


def run(config: BenchConfig) -> WorkloadResult:
    from core.config import get_settings

    ensure_customers(config.rows)  # the workspace the app opens is the bench one, table and all
    log_dir = DATA_DIR / "app_start"
    log_dir.mkdir(parents=True, exist_ok=True)
    core_s: list[float] = []
    bare_s: list[float] = []
    http_s: list[float] = []
    facts: list[dict[str, Any]] = []
    rounds = config.spark_warmup + config.spark_repeats
    for round_no in range(rounds):
        order = ["core", "bare"] if round_no % 2 == 0 else ["bare", "core"]
        for which in order:
            print(f"[bench] app_start round {round_no}: {which}", file=sys.stderr, flush=True)
            if which == "core":
                to_http, to_ready, seen = start_app(log_dir / f"streamlit-{round_no}.log")
                if round_no >= config.spark_warmup:
                    core_s.append(to_ready)
                    http_s.append(to_http)
                    facts.append(seen)
            else:
                seconds = start_bare()
                if round_no >= config.spark_warmup:
                    bare_s.append(seconds)

    def timing(label: str, seconds: list[float]) -> Timing:
        return Timing(label=label, samples_ms=tuple(s * 1000 for s in seconds), warmup=config.spark_warmup)

    core = timing("streamlit run app/main.py until its engine is ready", core_s)
    bare = timing("bare SparkSession getOrCreate in a fresh Python", bare_s)
    server_rss = statistics.median(f["server_rss_mb"] for f in facts)
    jvm_rss = statistics.median(f["jvm_rss_mb"] for f in facts)
    return WorkloadResult(
        name=NAME,
        description="app start (streamlit run) to a warm Spark engine, the first moment a submit can run",
        core=core,
        baselines=[bare],
        ratio_baseline=bare.label,
        max_median_ms=MAX_MEDIAN_MS,
        breakdown=[timing("streamlit run until its HTTP endpoint answers", http_s)],
        notes={
            "server_rss_mb_median": round(server_rss, 1),
            "jvm_rss_mb_median": round(jvm_rss, 1),
            "app_rss_mb_median": round(server_rss + jvm_rss, 1),
            "jvm_heap": f"-Xmx{get_settings().spark_driver_memory} (spark.driver.memory)",
            "in_process_start_s": [round(f["in_process_start_s"], 2) for f in facts],
            "first_use_warmed_s": [round(f["first_use_warmed_s"], 2) for f in facts],
            "logs": str(log_dir),
        },
    )
