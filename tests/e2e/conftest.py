"""Browser-test fixtures: a seeded demo workspace, real `streamlit run` servers and headless Chromium."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, Playwright, expect, sync_playwright

from tests.cluster_support import local_connect, log_tail, stop_group
from tests.in_process import oreo_json
from tests.jvm_options import long_lived

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEMO_ROWS = 1200
# Chromium's headless shell (Debian's chromium-headless-shell, `make chromium`): the same
# Blink and V8 without the full browser's window code, and what Playwright itself runs for
# headless pages. Opening a Streamlit page, clicking a button and waiting for the rerun took
# 1.35-1.37 CPU-s of browser processes against 2.60-2.77 with /usr/bin/chromium (6 fresh
# contexts each, alternated three times, beside a running suite).
CHROMIUM = "/usr/bin/chromium-headless-shell"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
SERVER_START_TIMEOUT = 90.0
# Cold reads (DuckDB loading its Delta extension) can take several seconds on a busy machine.
UI_TIMEOUT_MS = 60_000
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
# Every page records when its script-run state last changed (see wait_quiet).
RUN_WATCH = """
new MutationObserver(() => { window.__oreoRunChange = performance.now(); }).observe(document, {
  subtree: true, attributes: true, attributeFilter: ["data-test-script-state"],
});
"""
expect.set_options(timeout=120_000)  # every expect() polls; a busy 2-core machine can need minutes


@dataclass(frozen=True)
class DemoWorkspace:
    """A data root and SQLite catalog seeded by `oreo demo`, with the passwords it printed."""

    root: Path
    passwords: dict[str, str]
    rows: int

    def copy_to(self, target: Path) -> tuple[Path, str]:
        """Give one server its own copy; returns its DELTA_DATA_ROOT and OREO_DATABASE_URL."""
        shutil.copytree(self.root / "delta", target / "delta")
        for db in self.root.glob("catalog.db*"):
            shutil.copy2(db, target / db.name)
        return target / "delta", f"sqlite:///{target / 'catalog.db'}"


@dataclass
class OreoServer:
    url: str
    data_root: Path
    process: subprocess.Popen[bytes]
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _base_env(data_root: Path, database_url: str) -> dict[str, str]:
    env = long_lived({k: v for k, v in os.environ.items() if not k.startswith(("OREO_", "STREAMLIT_"))})
    env.pop("SPARK_REMOTE", None)
    env.update(
        DELTA_DATA_ROOT=str(data_root),
        OREO_DATABASE_URL=database_url,
        OREO_DEMO_ROWS=str(DEMO_ROWS),
        OREO_WARM_UP_ROUNDS="0",  # the servers share one warm Connect server (SharedSpark)
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


@pytest.fixture(scope="package")
def demo_workspace(tmp_path_factory: pytest.TempPathFactory) -> DemoWorkspace:
    """Seed the demo once through the real CLI (in this process); each server gets a copy of the result."""
    root = tmp_path_factory.mktemp("e2e-demo")
    doc = oreo_json(root / "delta", "demo", env={"OREO_DEMO_ROWS": str(DEMO_ROWS)})
    assert doc["created"] is True and doc["rows"] == DEMO_ROWS, doc
    passwords = {a["username"]: a["password"] for a in doc["accounts"]}
    assert set(passwords) == {"editor", "approver", "admin"} and all(passwords.values()), doc
    return DemoWorkspace(root=root, passwords=passwords, rows=doc["rows"])


def _wait_healthy(server: OreoServer, port: int) -> bool:
    """Poll until this process serves /_stcore/health; False if another process holds the port."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        log = server.log.read_text(errors="replace")
        if server.process.poll() is not None:
            if f"Port {port} is not available" in log:
                return False
            raise AssertionError(f"streamlit exited with {server.process.returncode}:\n{log_tail(server.log)}")
        # The banner proves that this process, not a stranger that took the port, bound it.
        if f"localhost:{port}" in log:
            try:
                with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=2) as resp:
                    if resp.status == 200 and resp.read().strip() == b"ok":
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
        time.sleep(0.2)  # poll interval, not a wait for an outcome
    raise AssertionError(f"streamlit was not healthy within {SERVER_START_TIMEOUT}s:\n{log_tail(server.log)}")


def _stop(server: OreoServer) -> None:
    stop_group(server.process, grace_s=20)
    if server in _LIVE_SERVERS:
        _LIVE_SERVERS.remove(server)


# What a failed browser test leaves in its report (``pytest_runtest_makereport``): the text of
# every page it had open and the last lines of every server still running, so a failure on CI
# names what the page said and what the server logged, not only the locator that timed out.
_LIVE_SERVERS: list[OreoServer] = []
_OPEN_PAGES: list[Page] = []
# What each open page's browser said: uncaught errors, console errors and warnings, a crash.
_BROWSER_SAID: dict[int, list[str]] = {}
REPORT_PAGE_CHARS = 4000
REPORT_LOG_LINES = 60
REPORT_BROWSER_LINES = 30


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.failed and call.when == "call":
        for number, page in enumerate(_OPEN_PAGES, start=1):
            said = _BROWSER_SAID.get(id(page), [])[-REPORT_BROWSER_LINES:]
            browser = "\n".join(["", "-- the browser said:", *said]) if said else ""
            report.sections.append((f"page {number} ({page.url})", _page_text(page) + browser))
        for server in _LIVE_SERVERS:
            report.sections.append((f"server {server.url} log", log_tail(server.log, REPORT_LOG_LINES)))
    return report


def _listen(page: Page) -> None:
    """Keep what ``page``'s browser reports (uncaught errors, console errors and warnings, a crash) for a failure."""
    said = _BROWSER_SAID.setdefault(id(page), [])
    stamp = time.strftime  # when, to line up with the server's log
    page.on("pageerror", lambda error: said.append(f"{stamp('%H:%M:%S')} uncaught: {error}"))
    page.on(
        "console",
        lambda message: said.append(f"{stamp('%H:%M:%S')} console.{message.type}: {message.text[:500]}")
        if message.type in ("error", "warning")
        else None,
    )
    page.on("crash", lambda _page: said.append(f"{stamp('%H:%M:%S')} the page crashed"))


def _page_text(page: Page) -> str:
    """What ``page`` shows, as text (its last part if long); a page that cannot answer says why."""
    try:
        text = str(page.evaluate("document.body.innerText"))
    except Exception as exc:  # a closed or hung page: the report says so instead of failing again
        return f"(the page did not answer: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    if not text.strip():  # a blank page: what its body holds says why
        try:
            html = str(page.evaluate("document.body.innerHTML"))
        except Exception as exc:  # as above
            return f"(no text, and the page did not give its HTML: {type(exc).__name__})"
        return f"(no text; the body's HTML, {len(html)} characters, begins)\n{html[:REPORT_PAGE_CHARS]}"
    return text if len(text) <= REPORT_PAGE_CHARS else "…" + text[-REPORT_PAGE_CHARS:]


class SharedSpark:
    """One Spark Connect server (``local[2]``, a JVM of its own) for the browser tests' servers.

    Each `streamlit run` used to start Spark in its own JVM: about 50 CPU-s of start,
    class loading and compiling per server on a 2-core machine, paid again by every module
    that needs a server of its own. Through ``SPARK_REMOTE`` they all share one JVM that
    stays warm, as the app's replicas share one Connect server in a deployment. It starts
    when the first server needs it and stops when the last browser test has run.
    """

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._remote: str | None = None

    def remote(self, factory: pytest.TempPathFactory) -> str:
        if self._remote is None:
            self._remote = self._stack.enter_context(local_connect(factory.mktemp("e2e-connect"), free_port()))
        return self._remote

    def stop(self) -> None:
        self._remote = None
        self._stack.close()


@pytest.fixture(scope="package")
def start_oreo(
    demo_workspace: DemoWorkspace, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., OreoServer]]:
    """Start `streamlit run app/main.py` on a free port over a fresh copy of the demo workspace.

    ``secrets_for(url)`` returns the text of the server's only secrets file (default empty:
    no SSO, whatever .streamlit/secrets.toml holds); ``env`` adds settings. A server is
    stopped at the end of the test module that started it (``_module_servers``), so idle
    servers do not pile up beside the rest of the suite; a ``shared`` one when the last browser test has run.

    Servers run their Spark statements on the browser tests' shared Connect server
    (``SharedSpark``) unless ``embedded``: then the server starts Spark in its own JVM, as
    ``make run`` does (the warm-engine tests watch that start). ``env`` may name another
    ``SPARK_REMOTE`` (the replicas' cluster).
    """
    started: list[OreoServer] = []
    spark = SharedSpark()

    def start(
        name: str,
        *,
        secrets_for: Callable[[str], str] | None = None,
        env: dict[str, str] | None = None,
        shared: bool = False,
        embedded: bool = False,
    ) -> OreoServer:
        home = tmp_path_factory.mktemp(f"e2e-{name}")
        settings = dict(env or {})
        if not embedded and "SPARK_REMOTE" not in settings:
            settings["SPARK_REMOTE"] = spark.remote(tmp_path_factory)
        if embedded:  # a JVM of its own warms up, as `make run`'s does (one round)
            settings.setdefault("OREO_WARM_UP_ROUNDS", "1")
        data_root, database_url = demo_workspace.copy_to(home)
        secrets_file = home / "secrets.toml"
        for _attempt in range(3):  # another process may take the free port before streamlit binds it
            port = free_port()
            url = f"http://localhost:{port}"
            secrets_file.write_text(secrets_for(url) if secrets_for else "")
            log = home / f"streamlit-{port}.log"
            command = [
                str(BIN / "streamlit"), "run", "app/main.py",
                "--server.port", str(port),
                "--server.headless", "true",
                "--browser.gatherUsageStats", "false",
                "--secrets.files", str(secrets_file),
            ]  # fmt: skip
            with log.open("wb") as out:
                process = subprocess.Popen(
                    command,
                    cwd=REPO,  # so .streamlit/config.toml applies
                    env={**_base_env(data_root, database_url), **settings},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group, stopped as one at teardown
                )
            server = OreoServer(url=url, data_root=data_root, process=process, log=log)
            started.append(server)
            _LIVE_SERVERS.append(server)
            if not shared:
                _MODULE_SERVERS.append(server)
            if _wait_healthy(server, port):
                return server
        raise AssertionError(f"no free port for the {name!r} server after 3 attempts")

    yield start
    for server in started:
        _stop(server)
    spark.stop()


# Servers the current test module started (not the shared one): stopped when the module ends.
_MODULE_SERVERS: list[OreoServer] = []


@pytest.fixture(scope="module", autouse=True)
def _module_servers() -> Iterator[None]:
    """Stop the servers a module started once its last test ran (each holds a JVM and about 700 MB)."""
    yield
    while _MODULE_SERVERS:
        _stop(_MODULE_SERVERS.pop())


@pytest.fixture(scope="package")
def oreo_server(start_oreo: Callable[..., OreoServer]) -> OreoServer:
    """The app with local accounts only, shared by the modules that only read or use rows of their own."""
    return start_oreo("local", shared=True)


@pytest.fixture(scope="package")
def playwright_instance() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="package")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    browser = playwright_instance.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    browser.close()


@pytest.fixture
def new_page(browser: Browser) -> Iterator[Callable[[str], Page]]:
    """Open a page on a server in a fresh browser context (no cookies, no session)."""
    contexts = []

    def open_page(base_url: str) -> Page:
        context = browser.new_context(base_url=base_url, viewport={"width": 1920, "height": 1200})
        context.set_default_timeout(UI_TIMEOUT_MS)
        contexts.append(context)
        context.add_init_script(RUN_WATCH)
        page = context.new_page()
        _OPEN_PAGES.append(page)
        _listen(page)
        page.goto("/")
        wait_idle(page)
        return page

    yield open_page
    _OPEN_PAGES.clear()
    _BROWSER_SAID.clear()
    for context in contexts:
        context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where a module's screenshots go: ``$OREO_SCREENSHOTS``, or a tmp folder of its own."""
    folder = os.environ.get("OREO_SCREENSHOTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def settle() -> Callable[..., None]:
    """The ``settle(page, expected, text=None)`` helper (test modules do not import conftest)."""
    return _settle


@pytest.fixture
def quiet() -> Callable[..., None]:
    """The ``wait_quiet(page, quiet_ms=1000)`` helper (test modules do not import conftest)."""
    return wait_quiet


def wait_idle(page: Page) -> None:
    """Wait until no script run is in progress."""
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=UI_TIMEOUT_MS)


def wait_quiet(page: Page, quiet_ms: int = 1000) -> None:
    """Wait until no script run has started or ended for ``quiet_ms``.

    Right after a page loads, the data editor may still send one more widget update of its
    own (it drops restored edits that the data now already holds), and the rerun that follows
    replaces the grid under a cell being typed into. A person would not start typing in that
    instant; the test waits for it to pass.
    """
    page.wait_for_function(
        "quiet => document.querySelector(\"[data-testid='stApp'][data-test-script-state='notRunning']\") !== null"
        " && performance.now() - (window.__oreoRunChange ?? 0) > quiet",
        arg=quiet_ms,
        timeout=UI_TIMEOUT_MS,
    )


def _settle(page: Page, expected: Locator, text: str | None = None) -> None:
    """Wait for what the last action should produce, then for the run that produced it to end.

    Right after a click the app may still report ``notRunning`` from the previous run, so
    waiting on that state alone could return before the new run even started; the expected
    element (or text) only appears once the new run rendered it.
    """
    # While a run is in progress Streamlit keeps the previous run's elements on the page beside
    # the new ones, so the expected element may briefly match twice; wait on the first match and
    # let the end of the run remove the stale one.
    if text is None:
        expect(expected.first).to_be_visible(timeout=UI_TIMEOUT_MS)
    else:
        expect(expected.first).to_contain_text(text, timeout=UI_TIMEOUT_MS)
    wait_idle(page)
