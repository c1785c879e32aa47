"""Browser test of the Admin page's 24-hour service levels, and the app server's Prometheus side port."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
UI_TIMEOUT_MS = 120_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def metrics_server(start_oreo: Callable[..., OreoServer]) -> tuple[OreoServer, int]:
    """An app server whose side port is a free loopback port."""
    port = _free_port()
    server = start_oreo("metrics", env={"OREO_METRICS_PORT": str(port), "OREO_METRICS_ADDR": "127.0.0.1"})
    return server, port


@pytest.fixture
def page_1400(browser: Browser, metrics_server: tuple[OreoServer, int]) -> Iterator[Page]:
    context = browser.new_context(base_url=metrics_server[0].url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    page.goto("/")
    expect(page.locator(APP_IDLE)).to_be_attached()
    yield page
    context.close()


def scrape(port: int) -> dict[str, float]:
    """The side port's samples by name and labels, polled until it answers."""
    deadline = time.monotonic() + 120
    while True:
        try:
            response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)  # the server binds its side port as it starts
    assert response.status_code == 200
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def column_index(grid: Locator, name: str) -> int:
    header = grid.locator("th[role='columnheader']", has_text=re.compile(f"^{re.escape(name)}( [▲▼])?$"))
    return int(header.get_attribute("aria-colindex") or 0)


def cell(grid: Locator, row: int, name: str) -> Locator:
    return grid.locator(f"tr[aria-rowindex='{row + 2}'] td[aria-colindex='{column_index(grid, name)}']")


def test_an_admin_reads_the_service_levels_and_the_side_port_counts_the_reads(
    metrics_server: tuple[OreoServer, int],
    demo_workspace: DemoWorkspace,
    page_1400: Page,
    settle: Settle,
    shots: Path,
) -> None:
    server, port = metrics_server
    page = page_1400
    before = scrape(port)
    assert before["oreo_table_files{dataset=customers,project=demo}"] >= 1
    assert "oreo_change_requests{state=open}" in before

    page.get_by_role("textbox", name="Username").press_sequentially("admin")
    page.get_by_role("textbox", name="Password").press_sequentially(demo_workspace.passwords["admin"])
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))
    # The Table page reads a page of the table: one read at least, counted in this server process.
    page.get_by_role("link", name="Table").click()
    settle(page, page.get_by_role("heading", name="Table", exact=True))
    expect(page.get_by_test_id("stDataFrame").first).to_be_visible()
    after = scrape(port)
    assert after["oreo_page_read_seconds_count{}"] > before.get("oreo_page_read_seconds_count{}", 0)

    page.get_by_role("link", name="Admin").click()
    settle(page, page.get_by_role("heading", name="Service levels, last 24 hours"))
    table = page.locator(".st-key-admin_sla [data-testid='stDataFrame']").first
    expect(table).to_be_visible()
    expect(cell(table, 0, "figure")).to_have_text("Page read p95")
    expect(cell(table, 0, "last 24 h")).to_have_text(re.compile(r"^\d+\.\d\d s$"))  # the reads above, not "no reads"
    expect(cell(table, 2, "figure")).to_have_text("Approval failures")
    expect(cell(table, 2, "last 24 h")).to_have_text("0")
    expect(cell(table, 6, "figure")).to_have_text("Engine")
    page.screenshot(path=str(shots / "admin_sla.png"))

    # Another process (an API server, say) tallied two failed approvals and an import at 400 rows/s this hour.
    folder = server.data_root / "logs" / "sla"
    folder.mkdir(parents=True, exist_ok=True)
    other = {"approvals": {"failed": 2, "merged": 3}, "import_rows": 4000, "import_seconds": 10.0}
    (folder / f"{datetime.now(UTC):%Y%m%d%H}-1-other.json").write_text(json.dumps(other))
    page.get_by_role("link", name="Datasets").click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))
    page.get_by_role("link", name="Admin").click()
    settle(page, page.get_by_role("heading", name="Service levels, last 24 hours"))
    expect(cell(table, 1, "last 24 h")).to_have_text("400 rows/s")
    expect(cell(table, 1, "status")).to_have_text("OVER TARGET")
    expect(cell(table, 2, "last 24 h")).to_have_text("2")
    expect(cell(table, 2, "detail")).to_have_text("of 5 approvals (3 merged)")
    alert = page.get_by_test_id("stAlertContainer").filter(has_text="Over target:")
    expect(alert).to_contain_text("Import throughput, Approval failures")
    page.screenshot(path=str(shots / "admin_sla_breached.png"))
