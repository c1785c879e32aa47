"""Browser tests of the warm engine: the server starts Spark as it starts, before any click.

A page that needs Spark while it is still starting says "Starting the engine…" with a
progress bar, then does its work. ``OREO_TEST_SLOW_ENGINE_START_S`` holds the start back
so a person's click can come first, until the test opens ``OREO_TEST_ENGINE_START_GATE``.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.conftest import DemoWorkspace, OreoServer, wait_idle

Settle = Callable[..., None]
SHOTS = Path(__file__).resolve().parents[2] / "data" / "screenshots" / "warm_engine"
ENGINE_TIMEOUT_S = 600.0
SLOW_START_S = 900  # an upper bound: the test opens the start's gate once it saw the click wait
SLOW_MS = 600_000


def engine_status(server: OreoServer) -> dict[str, object]:
    # The warm-up (a staged and approved scratch MERGE) shares the server process: allow a busy answer.
    with urllib.request.urlopen(f"{server.url}/oreo/engine", timeout=60) as resp:
        return dict(json.loads(resp.read()))


def wait_for_engine(server: OreoServer) -> dict[str, object]:
    """Poll the server's engine endpoint until its start ended (ready or failed)."""
    deadline = time.monotonic() + ENGINE_TIMEOUT_S
    while time.monotonic() < deadline:
        status = engine_status(server)
        if status["state"] in ("ready", "failed"):
            return status
        time.sleep(0.5)  # poll interval, not a wait for an outcome
    raise AssertionError(f"the engine was not ready within {ENGINE_TIMEOUT_S:.0f} s: {engine_status(server)}")


def java_children(pid: int) -> list[int]:
    """The JVMs below process ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    jvms = []
    for child in found:
        try:
            if (Path("/proc") / str(child) / "comm").read_text().strip() == "java":
                jvms.append(child)
        except OSError:
            continue
    return jvms


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def test_the_server_warms_the_engine_before_anyone_opens_it(start_oreo: Callable[..., OreoServer]) -> None:
    """No browser at all: the server process starts its one JVM on its own and says when it is ready."""
    server = start_oreo("warm-engine", embedded=True)
    status = wait_for_engine(server)
    assert status["state"] == "ready", status
    assert status["pid"] == server.process.pid, status
    assert len(java_children(server.process.pid)) == 1
    expect_log = "Oreo engine ready"
    deadline = time.monotonic() + 30
    while expect_log not in server.log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.2)  # poll interval: the line is printed just after the state changes
    assert expect_log in server.log.read_text(errors="replace")
    assert (server.data_root / "logs" / "engine-start.json").is_file()
    # Then it runs what a first submit would pay for once (a first Spark job, the GX import).
    while not engine_status(server)["first_use_warmed"] and time.monotonic() < deadline + ENGINE_TIMEOUT_S:
        time.sleep(0.5)  # poll interval
    assert engine_status(server)["first_use_warmed"] is True
    assert len(java_children(server.process.pid)) == 1


def test_a_click_before_the_engine_is_ready_says_it_is_starting(
    start_oreo: Callable[..., OreoServer],
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    tmp_path: Path,
) -> None:
    """An admin writes a checkpoint while the engine still starts: progress, then the result."""
    gate = tmp_path / "engine-may-start"
    server = start_oreo(
        "slow-engine",
        embedded=True,
        env={"OREO_TEST_SLOW_ENGINE_START_S": str(SLOW_START_S), "OREO_TEST_ENGINE_START_GATE": str(gate)},
    )
    page = new_page(server.url)
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, "admin", demo_workspace.passwords["admin"], settle)
    page.get_by_role("link", name="Admin").click()
    settle(page, page.get_by_role("heading", name="Admin", exact=True))
    button = page.get_by_role("button", name="Write checkpoint")
    expect(button).to_be_visible()
    assert engine_status(server)["state"] == "starting", "the engine must still be starting for this test"

    button.click()
    starting = page.get_by_test_id("stProgress").filter(has_text="Starting the engine…")
    expect(starting).to_be_visible(timeout=60_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    starting.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "warm_engine_starting.png"))
    # Progress moves with the seconds elapsed while the engine starts, and says so when the
    # start takes longer than the last one measured (none here: the first guess, 20 s).
    first = starting.inner_text()
    expect(starting).not_to_have_text(first, timeout=30_000)
    expect(starting).to_contain_text("slower than the usual 20 s", timeout=120_000)
    page.screenshot(path=str(SHOTS / "warm_engine_slower.png"))
    gate.touch()  # the engine may start now

    # Once the engine is up the click does its work, without another click.
    done = page.get_by_test_id("stAlertContainer").filter(has_text="finished")
    expect(done).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)
    expect(page.get_by_text("Starting the engine…")).to_have_count(0)
    assert engine_status(server)["state"] == "ready"
    assert len(java_children(server.process.pid)) == 1
    page.screenshot(path=str(SHOTS / "warm_engine_done.png"))
