"""The warm engine: Spark started in the background once per process, from the offline jars.

The engine's state is per process, so each test runs a fresh Python process over a data
root of its own and reads what it printed: a test process that already started Spark
could not show the start itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from core import engine

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "app" / "main.py"


def run_python(code: str, data_root: Path, **env: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter over ``data_root``; its last stdout line as JSON."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OREO_")}
    full_env.pop("SPARK_REMOTE", None)
    full_env.update(
        DELTA_DATA_ROOT=str(data_root),
        OREO_DATABASE_URL=f"sqlite:///{data_root / 'catalog.db'}",
        PYTHONDONTWRITEBYTECODE="1",
        **env,
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-3000:]}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


BACKGROUND_START = """
    import json, threading
    from core import engine

    states = [engine.engine_status().state]
    results = []
    callers = [threading.Thread(target=lambda: results.append(engine.start_in_background())) for _ in range(8)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    states.append(engine.engine_status().state)
    status = engine.wait_for_engine(600)
    while status.state == "starting":
        status = engine.wait_for_engine(600)
    again = engine.start_in_background()
    first, second = engine.get_spark(), engine.get_spark()
    conf = first.sparkContext.getConf()
    from pyspark import SparkContext
    print(json.dumps({
        "started": results,
        "states": states,
        "final": status.to_json(),
        "again": again,
        "same_session": first is second,
        "same_context": SparkContext._active_spark_context is first.sparkContext,
        "jars": conf.get("spark.jars", ""),
        "packages": conf.get("spark.jars.packages", None),
        "expected_jars": ",".join(str(p) for p in engine.offline_jars()),
        "recorded": engine.last_start_seconds(),
    }))
"""


def test_one_background_start_per_process_from_the_offline_jars(tmp_path: Path) -> None:
    """Eight callers at once start one session; get_spark then returns it, started from the jar files."""
    seen = run_python(BACKGROUND_START, tmp_path, OREO_TEST_SLOW_ENGINE_START_S="1")
    assert sorted(seen["started"]) == [False] * 7 + [True], seen  # type: ignore[type-var]
    assert seen["states"] == ["idle", "starting"], seen
    final = seen["final"]
    assert isinstance(final, dict) and final["state"] == "ready" and final["error"] is None, seen
    assert final["elapsed_s"] >= 1.0, seen  # the slow-start hook ran inside the measured start
    assert seen["again"] is False, "a ready engine must not be started again"
    assert seen["same_session"] is True and seen["same_context"] is True, seen
    # The files `make jars` resolved, not Ivy coordinates: no resolution on a warm start.
    assert seen["expected_jars"] and seen["jars"] == seen["expected_jars"], seen
    assert seen["packages"] is None, seen
    spark_log = tmp_path / "logs" / "spark.log"
    assert ":: resolving dependencies ::" not in spark_log.read_text(errors="replace")
    recorded = seen["recorded"]
    assert isinstance(recorded, float) and recorded == pytest.approx(final["elapsed_s"], abs=0.01), seen
    assert json.loads((tmp_path / "logs" / "engine-start.json").read_text())["seconds"] == recorded


def test_a_failed_background_start_is_reported(tmp_path: Path) -> None:
    """A start that fails says so with its reason, and a later call may try again."""
    seen = run_python(
        """
        import json
        from core import engine
        assert engine.start_in_background()
        status = engine.wait_for_engine(60)
        print(json.dumps({**status.to_json(), "recorded": engine.last_start_seconds()}))
        """,
        tmp_path,
        OREO_TEST_SLOW_ENGINE_START_S="not a number",
    )
    assert seen["state"] == "failed", seen
    assert "not a number" in str(seen["error"]), seen
    assert seen["recorded"] is None, "a failed start must not be recorded as a start time"


def test_the_server_imports_main_as_an_asgi_app_whose_lifespan_warms_the_engine(tmp_path: Path) -> None:
    """`streamlit run app/main.py` finds the st.App, so its lifespan runs as the server starts.

    Imported the way the server imports it (module ``main``), the file builds the app and
    routes nobody. A fresh process, because an ``st.App`` pins process-wide Streamlit config.
    """
    seen = run_python(
        f"""
        import importlib.util, json
        from pathlib import Path
        import streamlit as st
        from streamlit.web.server.app_discovery import discover_asgi_app
        found = discover_asgi_app(Path({str(APP)!r}))
        spec = importlib.util.spec_from_file_location("main", {str(APP)!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        routes = [getattr(r, "path", None) for r in module.app._user_routes]
        print(json.dumps({{
            "asgi": found.is_asgi_app, "import": found.import_string,
            "is_app": isinstance(module.app, st.App), "routes": routes,
            "lifespan": module.app._user_lifespan is module._warm_engine,
        }}))
        """,
        tmp_path,
    )
    assert seen == {
        "asgi": True,
        "import": "main:app",
        "is_app": True,
        "routes": ["/oreo/engine"],
        "lifespan": True,
    }


def test_a_held_back_start_goes_on_once_its_gate_opens(tmp_path: Path) -> None:
    """The test hold: the full pause without a gate, and only until the gate file exists with one."""
    gate = tmp_path / "gate"
    opener = threading.Timer(0.3, gate.touch)
    opener.start()
    began = time.monotonic()
    engine.test_hold(60.0, str(gate))
    assert gate.exists()
    assert time.monotonic() - began < 30, "the hold outlasted its opened gate"
    began = time.monotonic()
    engine.test_hold(0.3, str(tmp_path / "never"))
    assert time.monotonic() - began >= 0.3
