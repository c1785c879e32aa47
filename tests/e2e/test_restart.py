"""Restart safety: the server dies mid-approval; after a restart the page says where the request stands.

The approval is held right before its MERGE by ``OREO_TEST_PAUSE_BEFORE_MERGE_S`` (a
real pause in ``core.merge``, set only here), so the kill lands mid-approval every time.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.test_edit_review import confirm_approval
from tests.in_process import oreo_json
from tests.jvm_options import long_lived

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]  # two servers each start Spark

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SLOW_MS = 600_000  # Spark starting, GX and a MERGE on a busy 2-core machine
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
INTERRUPTED = "This request's approval was interrupted; it is still open and its staging is intact."


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class Workspace:
    home: Path
    data_root: Path
    database: Path

    @property
    def env(self) -> dict[str, str]:
        env = long_lived({k: v for k, v in os.environ.items() if not k.startswith(("OREO_", "STREAMLIT_"))})
        env.pop("SPARK_REMOTE", None)
        env.update(
            DELTA_DATA_ROOT=str(self.data_root),
            OREO_DATABASE_URL=f"sqlite:///{self.database}",
            PYTHONDONTWRITEBYTECODE="1",
        )
        return env

    @property
    def main(self) -> Path:
        return self.data_root / "projects" / "demo" / "datasets" / "customers" / "main"

    def oreo(self, *args: str) -> Any:
        """The real CLI on this workspace, in this process (its warm Spark)."""
        return oreo_json(self.data_root, *args, database_url=f"sqlite:///{self.database}")

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.database) as db:
            return db.execute(sql, params).fetchall()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _poll(condition: Callable[[], Any], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)  # poll interval, not a wait for an outcome


def _healthy(server: Server, port: int) -> bool:
    if server.process.poll() is not None:
        raise AssertionError(f"streamlit exited: {server.log.read_text(errors='replace')[-3000:]}")
    if f"localhost:{port}" not in server.log.read_text(errors="replace"):
        return False
    try:
        with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _group_alive(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@pytest.fixture
def launch(workspace: Workspace) -> Iterator[Callable[..., Server]]:
    """Start `streamlit run app/main.py` on the workspace; every server started is stopped at the end."""
    started: list[Server] = []

    def start(**env: str) -> Server:
        port = _free_port()
        secrets = workspace.home / "secrets.toml"
        secrets.write_text("")
        log = workspace.home / f"streamlit-{port}.log"
        command = [
            str(BIN / "streamlit"), "run", "app/main.py",
            "--server.port", str(port),
            "--server.headless", "true",
            "--browser.gatherUsageStats", "false",
            "--secrets.files", str(secrets),
        ]  # fmt: skip
        with log.open("wb") as out:
            process = subprocess.Popen(
                command,
                cwd=REPO,
                env={**workspace.env, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the server and its JVM die together
            )
        server = Server(url=f"http://localhost:{port}", process=process, log=log)
        started.append(server)
        _poll(lambda: _healthy(server, port), timeout=90, what="streamlit to serve")
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=30)


@pytest.fixture
def workspace(demo_workspace: DemoWorkspace, tmp_path: Path) -> Workspace:
    data_root, _url = demo_workspace.copy_to(tmp_path)
    return Workspace(home=tmp_path, data_root=data_root, database=tmp_path / "catalog.db")


def _kill(server: Server) -> None:
    os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=60)
    _poll(lambda: not _group_alive(server.process.pid), timeout=60, what="the killed server and its JVM to go away")


def _sign_in(page: Page, username: str, password: str) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.get_by_role("heading", name="Datasets", exact=True)).to_be_visible()
    expect(page.locator(APP_IDLE)).to_be_attached()


def _open_review(page: Page, title: str) -> None:
    page.get_by_role("link", name="Review").click()
    expect(page.get_by_role("heading", name=title)).to_be_visible(timeout=SLOW_MS)
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)


def _click_approve(page: Page) -> None:
    """Open the approve dialog and confirm (a confirmation the page did not answer is clicked again)."""
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_role("dialog")).to_be_visible()
    confirm_approval(page)


def _expect_merged(page: Page, server: Server, cr_id: str) -> None:
    """Wait for the page's outcome of the approval: it must be the merge, else the failure shows what it said."""
    merged = page.get_by_test_id("stAlertContainer").filter(has_text=f"Merged {cr_id}")
    outcome = merged.or_(page.get_by_test_id("stAlertContentError"))
    try:
        expect(outcome.first).to_be_visible(timeout=SLOW_MS)
        expect(outcome.first).to_contain_text("into demo/customers as version 1")
    except AssertionError as failed:
        tail = "\n".join(server.log.read_text(errors="replace").splitlines()[-40:])
        raise AssertionError(f"{failed}\n--- the server's log, last lines ---\n{tail}") from None


def _merge_commits(main: Path, cr_id: str) -> list[int]:
    """Versions of ``main`` whose commit is an Oreo MERGE of ``cr_id``."""
    found = []
    for file in sorted((main / "_delta_log").glob("*.json")):
        for line in file.read_text().splitlines():
            info = json.loads(line).get("commitInfo") if line.strip() else None
            if info and info.get("operation") == "MERGE":
                meta = json.loads(info.get("userMetadata") or "{}")
                if meta.get("cr_id") == cr_id:
                    found.append(int(file.name[:20]))
    return found


def test_a_server_killed_mid_approval_leaves_the_request_open_and_says_so_after_a_restart(
    workspace: Workspace,
    launch: Callable[..., Server],
    new_page: Callable[[str], Page],
    demo_workspace: DemoWorkspace,
    tmp_path: Path,
) -> None:
    # An editor's request, made through the CLI; the browser part is the approver's.
    row_id = workspace.oreo("dataset", "rows", "demo", "customers", "--limit", "1")["rows"][0]["row_id"]
    edited = workspace.oreo("edit", "demo", "customers", "--as", "editor", "--set", row_id, "first_name", "Zoë")
    title = "Rename one customer"
    cr_id = workspace.oreo(
        "cr", "submit", "demo", "customers", "--as", "editor", "--session", edited["session_id"], "--title", title
    )["cr_id"]
    staging = workspace.data_root / "projects" / "demo" / "datasets" / "customers" / "staging" / cr_id

    server = launch(OREO_TEST_PAUSE_BEFORE_MERGE_S="3600")
    page = new_page(server.url)
    _sign_in(page, "approver", demo_workspace.passwords["approver"])
    _open_review(page, title)
    _click_approve(page)

    def approval_started() -> bool:
        rows = workspace.query("SELECT details FROM audit_events WHERE name = 'approval_started'")
        return any(json.loads(r[0]).get("cr_id") == cr_id for r in rows)

    _poll(approval_started, timeout=SLOW_MS / 1000, what="the approval to reach its MERGE")
    page.screenshot(path=str(tmp_path / "restart-1-approving.png"))
    _kill(server)

    # Killed before its MERGE: the request is open, its staging intact, main untouched.
    assert workspace.query("SELECT state FROM change_requests WHERE id = ?", cr_id) == [("open",)]
    assert (staging / "_delta_log").is_dir()
    assert _merge_commits(workspace.main, cr_id) == []

    restarted = launch()
    # The author's page says it too.
    author = new_page(restarted.url)
    author.set_viewport_size({"width": 1400, "height": 1000})
    _sign_in(author, "editor", demo_workspace.passwords["editor"])
    author.get_by_role("link", name="My requests").click()
    mine = author.locator(f".st-key-request_{cr_id}")
    expect(mine).to_contain_text(INTERRUPTED, timeout=SLOW_MS)
    expect(mine).to_contain_text("An approver can approve it again to merge it.")
    author.screenshot(path=str(tmp_path / "restart-2-my-requests.png"), full_page=True)

    page = new_page(restarted.url)
    page.set_viewport_size({"width": 1400, "height": 1000})
    _sign_in(page, "approver", demo_workspace.passwords["approver"])
    _open_review(page, title)
    note = page.get_by_test_id("stAlertContentWarning").filter(has_text="approval was interrupted")
    expect(note).to_contain_text(INTERRUPTED)
    expect(note).to_contain_text("Approve it again to merge it.")
    page.screenshot(path=str(tmp_path / "restart-2-interrupted.png"), full_page=True)

    _click_approve(page)
    _expect_merged(page, restarted, cr_id)
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)
    page.screenshot(path=str(tmp_path / "restart-3-merged.png"), full_page=True)

    assert workspace.query("SELECT state, merged_version FROM change_requests WHERE id = ?", cr_id) == [("merged", 1)]
    assert _merge_commits(workspace.main, cr_id) == [1]  # exactly one MERGE for the cr_id
    assert not staging.exists()
    assert workspace.oreo("dataset", "show", "demo", "customers")["version"] == 1

    # The author's page says merged too, and no longer that anything was interrupted.
    author.get_by_role("link", name="Datasets").click()
    expect(author.get_by_role("heading", name="Datasets", exact=True)).to_be_visible()
    author.get_by_role("link", name="My requests").click()
    grid = author.get_by_test_id("stDataFrame").first.locator("table[role='grid']")  # the list, above the details
    expect(grid).to_contain_text(cr_id)
    expect(grid).to_contain_text("merged")
    expect(author.get_by_text(INTERRUPTED)).to_have_count(0)
    author.screenshot(path=str(tmp_path / "restart-4-my-requests-merged.png"), full_page=True)
