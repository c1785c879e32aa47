"""Browser tests of what a person sees at 1024x768, at a page they lack the role for, and in their time zone.

Buttons on Review, Inbox, My requests and Table keep their whole label at 1024 px (they
were cut to stubs such as "A…" or "R"); an editor opening ``/review`` is told the page
needs the approver role (it was "Page not found"). Screenshots at 1400x1000 and 1024x768
go to ``$OREO_SCREENSHOTS`` (else a temporary folder).

The requests are made by ``writer``, an editor of its own, so the demo accounts' sessions
and requests, which other tests on the shared server use, are untouched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from core import auth, change_requests, sessions
from core.catalog import open_catalog
from tests.in_process import on_workspace

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
SLOW_MS = 600_000
WRITER = ("writer", "writer-password-1")
NARROW = {"width": 1024, "height": 768}
WIDE = {"width": 1400, "height": 1000}


# Two requests by writer: "Asked to change" sent back by the approver, "Still open" waiting for review.
def seed_writer_requests() -> None:
    """Writer's two requests on the current workspace: one sent back for changes, one open."""
    catalog = open_catalog()
    auth.create_user(catalog, "writer", password="writer-password-1", display_name="Wren Writer")
    auth.add_member(catalog, "demo", "writer", "editor")
    writer, approver = auth.get_user(catalog, "writer"), auth.get_user(catalog, "approver")
    submitted = []
    for title, row_id in (("Asked to change", "100002"), ("Still open", "100003")):
        session = sessions.open_session(catalog, "demo", "customers", actor=writer)
        sessions.apply_edits(catalog, session.session_id, [sessions.SetCell(row_id, "city", "Lyon")], actor=writer)
        submitted.append(change_requests.submit_change_request(catalog, session.session_id, actor=writer, title=title))
    # Sent back once both are submitted: its session is then writer's open one (a revision's).
    change_requests.request_changes(catalog, submitted[0].id, "Use the customer's new city, please.", actor=approver)


@pytest.fixture(scope="module")
def writer_requests(oreo_server: OreoServer) -> OreoServer:
    """The shared server with writer's two requests (seeded through core, in this process)."""
    with on_workspace(oreo_server.data_root):
        seed_writer_requests()
    return oreo_server


def wait_idle(page: Page) -> None:
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def open_page(page: Page, path: str, heading: str, settle: Settle) -> None:
    page.goto(path)
    settle(page, page.get_by_role("heading", name=heading, exact=True))


def cut_labels(page: Page) -> list[str]:
    """Labels of the main area's visible buttons, checkboxes and toggles that are not shown whole.

    A label's text is laid out at its full width even where an ellipsis hides its end, so
    it is cut when that width passes the box that shows it.
    """
    cut: list[str] = page.evaluate(
        """() => [...document.querySelectorAll(
                "[data-testid='stMain'] :is(button, label) [data-testid='stMarkdownContainer']")]
            .filter(m => m.offsetParent !== null && m.innerText.trim())
            .filter(m => {
                const range = document.createRange();
                range.selectNodeContents(m);
                const text = range.getBoundingClientRect();
                const box = m.closest('button, label').getBoundingClientRect();
                const shown = m.getBoundingClientRect();
                return text.right > Math.min(box.right, shown.right) + 1 || m.scrollWidth > m.clientWidth + 1;
            })
            .map(m => m.innerText.trim())"""
    )
    return cut


def hidden_pills(page: Page) -> list[str]:
    """Pills of the main area (the Review diff's kinds, say) that their group's box cuts off.

    A pill is a whole button; when the group is narrower than its pills, the last ones are
    clipped by the group rather than shortened, so ``cut_labels`` does not see them.
    """
    hidden: list[str] = page.evaluate(
        """() => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stButtonGroup']")]
            .filter(g => g.offsetParent !== null)
            .flatMap(g => {
                const group = g.getBoundingClientRect();
                return [...g.querySelectorAll('button')]
                    .filter(b => b.getBoundingClientRect().right > group.right + 1)
                    .map(b => b.innerText.trim());
            })"""
    )
    return hidden


def button_labels(page: Page) -> list[str]:
    """The label texts of the main area's visible buttons (their icons left out)."""
    labels: list[str] = page.evaluate(
        """() => [...document.querySelectorAll("[data-testid='stMain'] button")]
            .filter(b => b.offsetParent !== null)
            .map(b => [...b.querySelectorAll("[data-testid='stMarkdownContainer']")].map(m => m.innerText.trim())
                      .join(" ").trim())
            .filter(t => t)"""
    )
    return labels


def look(page: Page, shots: Path, name: str, focus: Locator | None = None) -> list[str]:
    """Screenshots at 1400x1000 and 1024x768 (of ``focus`` scrolled into view); returns the labels cut at 1024 px."""
    for size, suffix in ((WIDE, "1400"), (NARROW, "1024")):
        page.set_viewport_size(size)
        wait_idle(page)
        page.wait_for_timeout(300)  # the layout reflows after the resize; nothing to poll for
        if focus is not None:
            focus.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"{name}-{suffix}.png"))
    return cut_labels(page)


def test_buttons_keep_their_labels_at_1024_px(
    writer_requests: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    approver = new_page(writer_requests.url)
    sign_in(approver, "approver", demo_workspace.passwords["approver"], settle)
    open_page(approver, "/review", "Review", settle)
    expect(approver.get_by_role("button", name="Request changes")).to_be_visible()
    kinds = approver.get_by_test_id("stButtonGroup").filter(has_text="deleted")
    expect(kinds).to_be_visible()  # the diff's kind filter: updated, inserted, deleted
    assert look(approver, shots, "review") == []
    assert look(approver, shots, "review-diff", kinds) == [] and hidden_pills(approver) == []
    open_page(approver, "/inbox", "Inbox", settle)
    expect(approver.get_by_role("button", name="Open request").first).to_be_visible()
    assert look(approver, shots, "inbox") == []

    writer = new_page(writer_requests.url)
    sign_in(writer, *WRITER, settle)
    open_page(writer, "/requests", "My requests", settle)
    expect(writer.get_by_role("button", name="Submit revision")).to_be_visible()
    assert {"Edit in Table", "Submit revision", "Withdraw"} <= set(button_labels(writer))
    assert look(writer, shots, "requests", writer.get_by_role("heading", name="Changes requested")) == []
    open_page(writer, "/table", "Table", settle)
    expect(writer.get_by_role("button", name="Submit change request")).to_be_visible()
    assert look(writer, shots, "table") == []


def test_admin_and_history_keep_their_labels_at_1024_px(
    writer_requests: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    page = new_page(writer_requests.url)
    sign_in(page, "admin", demo_workspace.passwords["admin"], settle)
    open_page(page, "/admin", "Admin", settle)
    expect(page.get_by_role("button", name="Run VACUUM")).to_be_visible()
    assert look(page, shots, "admin", page.get_by_role("button", name="Run VACUUM")) == []
    # A VACUUM refused for its short retention says why in place; the rest of the page is still drawn.
    retention = page.get_by_role("spinbutton", name="Retention (hours)")
    retention.fill("0")
    retention.press("Enter")
    wait_idle(page)
    page.get_by_role("button", name="Run VACUUM").click()
    settle(page, page.get_by_test_id("stAlertContainer").filter(has_text="to do it anyway"))
    for label in ("Dry run", "Write checkpoint"):
        expect(page.get_by_role("button", name=label)).to_be_visible()
    refusal = page.get_by_test_id("stAlertContainer").filter(has_text="to do it anyway")
    assert look(page, shots, "admin-vacuum-refused", refusal) == []
    open_page(page, "/history", "History", settle)
    expect(page.get_by_role("heading", name="Activity")).to_be_visible()
    assert look(page, shots, "history", page.get_by_role("heading", name="Activity")) == []


def test_an_editor_at_the_review_address_is_told_the_role_it_needs(
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    page = new_page(oreo_server.url)
    sign_in(page, "editor", demo_workspace.passwords["editor"], settle)
    page.goto("/review")
    settle(page, page.get_by_test_id("stAlertContainer").filter(has_text="needs the approver role"))
    expect(page.get_by_text("Review needs the approver role in a project.")).to_be_visible()
    expect(page.get_by_text("Page not found")).to_have_count(0)
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    look(page, shots, "review-editor")


def test_times_read_in_the_browsers_zone(
    writer_requests: OreoServer, demo_workspace: DemoWorkspace, browser: Browser, settle: Settle
) -> None:
    context = browser.new_context(base_url=writer_requests.url, viewport=WIDE, timezone_id="Europe/Paris")
    try:
        page = context.new_page()
        page.goto("/")
        wait_idle(page)
        sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
        open_page(page, "/inbox", "Inbox", settle)
        item = page.locator("[class*='st-key-inbox_item_']").first
        # November in Paris: CET, an hour ahead of the UTC the catalog stores.
        expect(item.get_by_test_id("stCaptionContainer")).to_contain_text(re.compile(r"\d{2}:\d{2} CET · "))
    finally:
        context.close()
