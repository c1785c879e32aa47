"""20 people paging the Table page of the 1,000,000-row table at once, in the real app.

Starts ``streamlit run app/main.py`` over the bench workspace (as ``tests/e2e`` does) and
drives it with headless Chromium (``/usr/bin/chromium-headless-shell``), one Playwright browser context
per person. Each person opens the Table page of the bench dataset by its link, signs in
with a password as an editor, and clicks the grid paginator's "Next page" again and again.

A page change is timed from the click until the caption shows the new rows ("Rows
51–100 of 1,000,000") and the script run that drew them has ended: what the person waits
for. Timed in one run:

* core: 20 concurrent sessions (their clicks overlap);
* baseline: one session alone doing the same paging, before the crowd arrives.

Reported per person (p50/p95) and overall. Target: overall p95 under 1 s (the readers'
target), informational beside the single session.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench._data import DATA_DIR, PROJECT, ensure_customers
from bench._harness import BenchConfig, Check, Timing, WorkloadResult, expect

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

NAME = "streamlit_sessions"
USERS = 20
PAGE_CHANGES = 8  # per person
PAGE_SIZE = 50  # the Table page's default "Rows/page"
ROWS = 1_000_000
BROWSER_USER = "bench_browser"
REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium-headless-shell"  # make chromium; half the CPU of the full browser (tests/e2e/conftest.py)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]  # fmt: skip
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
TIMEOUT_MS = 120_000
SERVER_START_S = 120.0
MAX_P95_MS = 1000.0


@dataclass
class SessionsResult(WorkloadResult):
    """A workload result with its own checks besides the harness's."""

    extra_checks: list[Check] = field(default_factory=list)

    def checks(self) -> list[Check]:
        return [*super().checks(), *self.extra_checks]


def _ensure_browser_user() -> str:
    """An editor of the bench project with a fresh known password; returns the password."""
    from core import auth
    from core.catalog import open_catalog
    from core.errors import NotFound

    catalog = open_catalog()
    password = secrets.token_urlsafe(12)
    try:
        auth.get_user(catalog, BROWSER_USER)
        auth.set_password(catalog, BROWSER_USER, password)
    except NotFound:
        auth.create_user(catalog, BROWSER_USER, password=password, display_name="Benchmark browser")
    if auth.role_in(catalog, auth.get_user(catalog, BROWSER_USER), PROJECT) is None:
        auth.add_member(catalog, PROJECT, BROWSER_USER, auth.Role.EDITOR)
    return password


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(
    log: Path, extra_env: dict[str, str] | None = None, *, script: str = "app/main.py"
) -> tuple[subprocess.Popen[bytes], str]:
    """``streamlit run`` over the bench workspace on a free port (``extra_env``: more settings), healthy.

    ``script``: the app, relative to the repository (another one is a bare baseline beside Oreo's).
    """
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OREO_", "STREAMLIT_"))}
    env.pop("SPARK_REMOTE", None)
    env.update(
        DELTA_DATA_ROOT=str(DATA_DIR / "delta"),
        OREO_DATABASE_URL=f"sqlite:///{DATA_DIR / 'catalog.db'}",
        PYTHONDONTWRITEBYTECODE="1",
        **(extra_env or {}),
    )
    streamlit = Path(sys.executable).parent / "streamlit"
    # No file watcher: other people edit the tree meanwhile, and a module reloaded under a
    # running script fails it (KeyError: 'app'); a deployed server does not watch its files.
    command = [str(streamlit), "run", script, "--server.port", str(port), "--server.headless", "true",
               "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://localhost:{port}"
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited with {process.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return process, url
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)  # poll interval
    _stop_server(process)
    raise RuntimeError(f"streamlit was not healthy within {SERVER_START_S:.0f} s; see {log}")


def _stop_server(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@dataclass
class _Person:
    """What one person waited for, and what stopped them (None: they finished)."""

    waits_ms: list[float] = field(default_factory=list)
    failure: str | None = None


async def _person(browser: Browser, url: str, password: str, dataset: str, changes: int, n: int = 0) -> _Person:
    """One person: open the table's link, sign in, click "Next page" ``changes`` times; each wait in ms.

    A person who waits longer than ``TIMEOUT_MS`` for one step stops there; the failure is
    kept (with a screenshot under ``bench/.data``) and reported.
    """
    from playwright.async_api import Error as PlaywrightError

    context = await browser.new_context(base_url=url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    person = _Person()
    page: Page | None = None
    try:
        page = await context.new_page()
        await _page_through(page, password, dataset, changes, person.waits_ms)
    except (PlaywrightError, AssertionError) as exc:  # a wait past TIMEOUT_MS, or the app failed
        person.failure = f"after {len(person.waits_ms)} page change(s): {str(exc).splitlines()[0]}"
        if page is not None:
            shot = DATA_DIR / f"streamlit_sessions_failure_{n}.png"
            try:
                await page.screenshot(path=str(shot))
                person.failure += f" (screenshot {shot})"
            except PlaywrightError:
                pass
    finally:
        await context.close()
    return person


async def _page_through(page: Page, password: str, dataset: str, changes: int, waits: list[float]) -> None:
    """Open the table by its link, sign in, then click "Next page" ``changes`` times, timing each."""
    from playwright.async_api import expect as pw_expect

    await page.goto(f"/table?dataset={dataset}")
    await pw_expect(page.locator(APP_IDLE)).to_be_attached(timeout=TIMEOUT_MS)
    await page.get_by_role("textbox", name="Username").press_sequentially(BROWSER_USER)
    await page.get_by_role("textbox", name="Password").press_sequentially(password)
    await page.get_by_role("button", name="Sign in", exact=True).click()
    caption = page.get_by_test_id("stCaptionContainer").filter(has_text="Rows ")
    await pw_expect(caption).to_contain_text(f"Rows 1–{PAGE_SIZE} of {ROWS:,}", timeout=TIMEOUT_MS)
    await pw_expect(page.locator(APP_IDLE)).to_be_attached(timeout=TIMEOUT_MS)
    for n in range(1, changes + 1):
        first = n * PAGE_SIZE + 1
        start = time.perf_counter()
        await page.get_by_role("button", name="Next page").click()
        await pw_expect(caption).to_contain_text(f"Rows {first:,}–{first + PAGE_SIZE - 1:,} of", timeout=TIMEOUT_MS)
        await pw_expect(page.locator(APP_IDLE)).to_be_attached(timeout=TIMEOUT_MS)
        waits.append((time.perf_counter() - start) * 1000.0)


async def _drive(url: str, password: str, dataset: str) -> tuple[_Person, list[_Person], float]:
    """The single session alone, then ``USERS`` at once; their waits and the crowd's wall time."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            await _person(browser, url, password, dataset, 2)  # warms the server's reads and the browser
            print(f"[bench] {NAME}: one session alone", file=sys.stderr, flush=True)
            alone = await _person(browser, url, password, dataset, PAGE_CHANGES)
            print(f"[bench] {NAME}: {USERS} sessions at once", file=sys.stderr, flush=True)
            began = time.perf_counter()
            crowd = await asyncio.gather(
                *(_person(browser, url, password, dataset, PAGE_CHANGES, n) for n in range(USERS))
            )
            return alone, list(crowd), time.perf_counter() - began
        finally:
            await browser.close()


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


def run(config: BenchConfig) -> WorkloadResult:
    """Start the app, page through the Table page alone and with ``USERS`` people at once."""
    table = ensure_customers(ROWS)
    password = _ensure_browser_user()
    dataset = f"{PROJECT}/{table.dataset_id}"
    log = DATA_DIR / "streamlit_sessions.log"
    started = time.perf_counter()
    process, url = _start_server(log)
    start_s = time.perf_counter() - started
    try:
        alone, crowd, crowd_s = asyncio.run(_drive(url, password, dataset))
    finally:
        _stop_server(process)
    expect(alone.failure is None and bool(alone.waits_ms), f"the single session failed: {alone.failure}")
    everyone = [w for person in crowd for w in person.waits_ms]
    expect(bool(everyone), f"no page change of the crowd completed: {crowd[0].failure}")
    failures = [p.failure for p in crowd if p.failure is not None]
    core = Timing(label=f"{USERS} sessions at once, page change", samples_ms=tuple(everyone))
    single = Timing(label="one session alone, page change", samples_ms=tuple(alone.waits_ms))
    per_person = [
        f"{statistics.median(p.waits_ms):.0f}/{_p95(p.waits_ms):.0f}" + ("" if p.failure is None else " (stopped)")
        for p in sorted(crowd, key=lambda p: statistics.median(p.waits_ms) if p.waits_ms else float("inf"))
        if p.waits_ms
    ]
    notes = {
        "app": f"streamlit run app/main.py (file watcher off) over bench/.data, healthy in {start_s:.1f} s; "
        f"log {log}",
        "paging": f"{PAGE_CHANGES} clicks on 'Next page' per person, {PAGE_SIZE} rows/page, "
        f"{dataset} ({ROWS:,} rows), signed in as {BROWSER_USER!r} (editor)",
        "per person p50/p95 ms (sorted by p50)": ", ".join(per_person),
        "crowd": f"{USERS} people x {PAGE_CHANGES} page changes in {crowd_s:.1f} s (sign-in included)",
        "overall p50 / p95 / max": f"{core.median:.0f} / {core.p95:.0f} / {max(everyone):.0f} ms "
        f"(alone: {single.median:.0f} / {single.p95:.0f} / {max(alone.waits_ms):.0f} ms)",
        "completed page changes": f"{len(everyone)} of {USERS * PAGE_CHANGES}; {len(failures)} person(s) stopped",
    }
    if failures:
        notes["first failure"] = failures[0]
    return SessionsResult(
        name=NAME,
        description=f"{USERS} headless Chromium sessions paging the Table page of a {ROWS:,}-row table at once",
        core=core,
        baselines=[single],
        max_p95_ms=MAX_P95_MS,
        notes=notes,
        extra_checks=[Check("every page change completed", not failures, f"{len(failures)} of {USERS} stopped")],
    )
