"""Browser test of a review thread: comment on a cell, request changes, revise, approve revision 2.

An editor submits a changed city; the approver reads the row diff (the old value struck
through), comments on the changed cell and requests changes; the editor reads the comment
on My requests, fixes the cell on the Table page (double-click, type, Enter) and submits
the revision; the approver approves revision 2. The server's background sender POSTs each
event to a loopback webhook receiver, signed, in order. Screenshots (1400x1000) of Review
with the thread and of My requests go to ``data/screenshots/review_thread``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.test_edit_review import (
    alert,
    choose,
    confirm_approval,
    open_table,
    sign_in,
    submit_request,
    type_into_cell,
    wait_idle,
)

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "data" / "screenshots" / "review_thread"
SLOW_MS = 600_000
SECRET = "e2e-thread-secret"
# The loopback receiver is not a public address: the server and the CLI are told to allow it.
ALLOW_LOOPBACK = {"OREO_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1"}
TITLE = "Move a customer"
NOTE = "Lyon is the old office; use the new one"
REASON = "Please use Paris, as the customer asked"


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback HTTP receiver for the server's webhook deliveries: its URL and the bodies it got (checked)."""
    got: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            signature = self.headers.get("X-Oreo-Signature", "")
            expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            got.append(body if hmac.compare_digest(signature, expected) else b"BAD SIGNATURE")
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
def thread_server(start_oreo: Callable[..., OreoServer], receiver: tuple[str, list[bytes]]) -> OreoServer:
    """A server of its own (this test merges) that drains its outbox every second, with a webhook."""
    server = start_oreo("review-thread", env={"OREO_NOTIFY_INTERVAL_S": "1", **ALLOW_LOOPBACK})
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


def shoot(page: Page, name: str, focus: Locator) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    wait_idle(page)
    expect(page.get_by_test_id("stSkeleton")).to_have_count(0)  # every element drawn
    focus.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def changed_cell(area: Locator, column: str) -> Locator:
    return area.locator(f"tr[data-kind='update'] td[data-column='{column}']")


def test_comment_request_changes_revise_and_approve_revision_2(
    thread_server: OreoServer,
    demo_workspace: DemoWorkspace,
    receiver: tuple[str, list[bytes]],
    new_page: Callable[[str], Page],
    settle: Settle,
) -> None:
    # ---- the editor submits
    author = new_page(thread_server.url)
    sign_in(author, "editor", demo_workspace.passwords["editor"], settle)
    open_table(author, settle, demo_workspace.rows)
    type_into_cell(author, 1, "city", "Lyon")
    cr_id = submit_request(author, TITLE)

    # ---- the approver reads the row diff, comments on the changed cell and requests changes
    page = new_page(thread_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
    page.get_by_role("link", name="Review").click()
    settle(page, page.get_by_role("heading", name=TITLE))
    changes = page.locator(".st-key-review_changes")
    city = changed_cell(changes, "city")
    expect(city.locator("ins")).to_have_text("Lyon")
    assert city.locator("del").evaluate("e => getComputedStyle(e).textDecorationLine") == "line-through"
    row_id = city.get_attribute("data-row-id")
    assert row_id

    page.locator(".st-key-review_comment_text textarea").press_sequentially(NOTE)
    choose(page, "review_comment_row", row_id)
    choose(page, "review_comment_column", "city")
    page.locator(".st-key-review_comment_submit").get_by_role("button", name="Comment").click()
    settle(page, page.locator(".st-key-review_thread"), NOTE)
    expect(page.locator(".st-key-review_thread")).to_contain_text(f"on row {row_id} · city")
    # The comment shows beside its cell: a 💬 marker whose tooltip is the comment.
    expect(city.locator(".oreo-note")).to_have_attribute("title", f"approver: {NOTE}")

    page.get_by_role("button", name="Request changes").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(page)
    dialog.get_by_role("textbox").press_sequentially(REASON)
    dialog.get_by_role("button", name="Request changes").click()
    settle(page, alert(page, "Changes requested"), REASON)
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_disabled()
    shoot(page, "review-diff-with-comment", page.locator(".st-key-review_diff_rows"))
    shoot(page, "review-thread", page.locator(".st-key-review_discussion"))

    # ---- the editor reads the comment, fixes the cell in the same session and revises
    author.get_by_role("link", name="My requests").click()
    settle(author, author.get_by_role("heading", name="Changes requested"))
    request = author.locator(f".st-key-request_{cr_id}")
    expect(request).to_contain_text(REASON)
    expect(request).to_contain_text(f"approver on row {row_id} · city: {NOTE}")
    shoot(author, "my-requests-changes-requested", request)
    request.get_by_role("button", name="Edit in Table").click()
    settle(author, author.get_by_test_id("stCaptionContainer").filter(has_text="Rows "), "Rows 1–50 of ")
    type_into_cell(author, 1, "city", "Paris")
    # Submitting from the Table page says which request this revises, and asks for no new title.
    author.get_by_role("button", name="Submit change request").click()
    dialog = author.get_by_role("dialog")
    expect(dialog).to_contain_text(f"as revision 2 of {TITLE} ({cr_id})")
    expect(dialog).to_contain_text("It keeps its title and description.")
    expect(dialog.get_by_role("textbox", name="Title")).to_have_count(0)
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    wait_idle(author)
    author.get_by_role("link", name="My requests").click()
    settle(author, author.get_by_role("heading", name="Changes requested"))
    author.locator(f".st-key-request_{cr_id}").get_by_role("button", name="Submit revision").click()
    expect(alert(author, f"Submitted revision 2 of {cr_id}")).to_be_visible(timeout=SLOW_MS)
    wait_idle(author)
    author.locator(".st-key-requests_cr").get_by_role("combobox").click()
    author.get_by_role("option", name=cr_id).click()
    wait_idle(author)
    expect(author.locator(".st-key-requests_discussion")).to_contain_text(NOTE)
    shoot(author, "my-requests-details", author.locator(".st-key-requests_discussion"))

    # ---- the approver approves revision 2
    page.set_viewport_size({"width": 1920, "height": 1200})
    page.get_by_role("link", name="Review").click()
    settle(page, page.get_by_role("heading", name=TITLE))
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text=cr_id)).to_contain_text("revision 2")
    city = changed_cell(page.locator(".st-key-review_changes"), "city")
    expect(city.locator("ins")).to_have_text("Paris")
    page.get_by_role("button", name="Approve", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(page)
    confirm_approval(page)
    expect(alert(page, f"Merged {cr_id}")).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)

    # ---- the webhook receiver got every event, signed, in order
    expected = ["submitted", "commented", "changes_requested", "revised", "approved"]
    deadline = time.monotonic() + 120
    while len(receiver[1]) < len(expected) and time.monotonic() < deadline:
        time.sleep(0.1)  # poll interval, not a wait for an outcome
    assert b"BAD SIGNATURE" not in receiver[1]
    events = [json.loads(body) for body in receiver[1]]
    assert [(e["event"], e["cr_id"]) for e in events] == [(name, cr_id) for name in expected]
    assert events[3]["revision"] == 2
