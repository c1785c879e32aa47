"""Browser test of notifications: an editor submits, the approver's sidebar badge counts it, the Inbox lists it
and opens it on the Review page; the server's background sender POSTs the signed webhook meanwhile."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.test_edit_review import open_table, sign_in, submit_request, type_into_cell, wait_idle

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "data" / "screenshots" / "notifications"
SECRET = "e2e-webhook-secret"
# The loopback receiver is not a public address: the server and the CLI are told to allow it.
ALLOW_LOOPBACK = {"OREO_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1"}
TITLE = "Tell the approver"


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A loopback HTTP receiver for the server's webhook deliveries: its URL and what it got."""
    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/oreo-events", got
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def notify_server(
    start_oreo: Callable[..., OreoServer], receiver: tuple[str, list[tuple[dict[str, str], bytes]]]
) -> OreoServer:
    """A server of its own that drains its outbox every second, with a webhook added through the real CLI."""
    server = start_oreo("notify", env={"OREO_NOTIFY_INTERVAL_S": "1", **ALLOW_LOOPBACK})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OREO_", "STREAMLIT_"))}
    env.pop("SPARK_REMOTE", None)
    env.update(
        DELTA_DATA_ROOT=str(server.data_root),
        OREO_DATABASE_URL=f"sqlite:///{server.data_root.parent / 'catalog.db'}",
        **ALLOW_LOOPBACK,
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "oreo"), "webhook", "add", "demo", receiver[0], "--secret-stdin"],
        cwd=REPO,
        env=env,
        input=SECRET + "\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.startswith("wh_"), done.stderr[-2000:]
    return server


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_the_approver_is_told_of_a_submitted_request(
    notify_server: OreoServer,
    demo_workspace: DemoWorkspace,
    receiver: tuple[str, list[tuple[dict[str, str], bytes]]],
    new_page: Callable[[str], Page],
    settle: Settle,
) -> None:
    page = new_page(notify_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
    badge = page.locator(".st-key-inbox_badge")
    expect(badge.get_by_role("link")).to_have_accessible_name("Inbox")  # nothing unread yet

    author = new_page(notify_server.url)
    sign_in(author, "editor", demo_workspace.passwords["editor"], settle)
    open_table(author, settle, demo_workspace.rows)
    type_into_cell(author, 1, "city", "Lyon")
    cr_id = submit_request(author, TITLE)

    # The approver's next click shows the count: here, opening the Datasets page again.
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.get_by_role("link", name="Datasets").click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))
    expect(badge).to_contain_text("1 unread")
    shot(page, "1-badge")

    badge.get_by_role("link").click()
    settle(page, page.get_by_role("heading", name="Inbox", exact=True))
    entry = page.locator("[class*='st-key-inbox_item_']")
    expect(entry).to_have_count(1)
    expect(entry).to_contain_text(f"editor submitted “{TITLE}” on demo/customers")
    expect(entry).to_contain_text(cr_id)
    expect(entry).to_contain_text("unread")
    shot(page, "2-inbox")

    entry.get_by_role("button", name="Open request").click()
    settle(page, page.get_by_role("heading", name="Review", exact=True))
    expect(page.get_by_role("heading", name=TITLE)).to_be_visible()
    wait_idle(page)
    expect(badge.get_by_role("link")).to_have_accessible_name("Inbox")  # opened: read
    shot(page, "3-review")

    # The server's background sender delivered the signed webhook on its own.
    deadline = time.monotonic() + 120
    while not receiver[1] and time.monotonic() < deadline:
        time.sleep(0.1)  # poll interval, not a wait for an outcome
    assert receiver[1], "no webhook delivery arrived within 120 s"
    headers, body = receiver[1][0]
    assert headers["x-oreo-signature"] == "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    event = json.loads(body)
    assert (event["event"], event["cr_id"], event["actor"], event["title"]) == ("submitted", cr_id, "editor", TITLE)


def test_the_admin_page_shows_a_dead_webhook_with_its_last_error(
    notify_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A webhook whose endpoint refuses every attempt dies; the server's Admin page shows it."""
    from core import notify
    from core.auth import get_user
    from core.catalog import open_catalog, reset_catalogs, utcnow
    from core.config import get_settings

    # This process works on the server's catalog, with its own clock: six attempts, hours apart.
    monkeypatch.setenv("DELTA_DATA_ROOT", str(notify_server.data_root))
    monkeypatch.setenv("OREO_DATABASE_URL", f"sqlite:///{notify_server.data_root.parent / 'catalog.db'}")
    monkeypatch.setenv("OREO_WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")
    get_settings.cache_clear()
    reset_catalogs()
    try:
        catalog = open_catalog()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            refused = f"http://127.0.0.1:{s.getsockname()[1]}/gone"  # nothing listens once closed
        hook = notify.add_webhook(catalog, "demo", refused, "another-secret-01234", actor=get_user(catalog, "admin"))
        notify.emit(catalog, "commented", project="demo", dataset="customers", cr_id=None, actor="editor")
        now = utcnow()
        for _ in range(notify.MAX_ATTEMPTS):
            notify.drain(catalog, now=now)
            now += timedelta(hours=2)
        assert [d.target for d in notify.dead_deliveries(catalog, ["demo"])] == [hook.id]
    finally:
        reset_catalogs()
        get_settings.cache_clear()

    page = new_page(notify_server.url)
    page.set_viewport_size({"width": 1400, "height": 1000})
    sign_in(page, "admin", demo_workspace.passwords["admin"], settle)
    page.get_by_role("link", name="Admin").click()
    settle(page, page.get_by_role("heading", name="Notifications", exact=True))
    section = page.locator(".st-key-admin_notifications")
    expect(section).to_contain_text("1 webhook(s) failing")
    expect(section).to_contain_text("Dead deliveries (1, newest first)")
    section.scroll_into_view_if_needed()
    expect(section.locator("[data-testid='stDataFrame']").first).to_contain_text(hook.id)
    expect(section.locator("[data-testid='stDataFrame']").first).to_contain_text("ConnectError")
    shot(page, "4-admin")
    section.screenshot(path=str(SHOTS / "5-admin-notifications.png"))
