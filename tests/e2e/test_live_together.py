"""Editing together in three browsers: presence, others' pending cells, main moving, early conflicts, review news.

Editor A ("editor") and editor B ("admin") open the same Table page and see each other; B
edits a cell A has pending and is told so; an approver merges A's request while B still has
that cell pending; B's page says which version landed, who approved it and that it touched
B's cell, B decides the early conflict ("Keep mine") and submits, and the approval finds no
conflict. While the approver has B's request open, B comments and the approver is told.
Once A's browser is gone, A drops out of B's page after the (short) idle time.

One server of its own: it merges (other modules read version 0 of the shared one) and runs
with a short idle time and refresh (``OREO_PRESENCE_IDLE_S``, ``OREO_PRESENCE_REFRESH_S``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.test_edit_review import (
    SLOW_MS,
    alert,
    cell,
    cell_centre,
    choose,
    confirm_approval,
    editor,
    marker,
    open_table,
    sign_in,
    submit_request,
    wait_idle,
    wait_quiet,
)
from tests.in_process import oreo_json

if TYPE_CHECKING:
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = pytest.mark.e2e

IDLE_S = 6
REFRESH_S = 2
SHOT = {"width": 1400, "height": 1000}
LIVE_MS = 60_000  # a few refreshes, on a busy machine


@pytest.fixture(scope="module")
def live_server(start_oreo: Callable[..., OreoServer]) -> OreoServer:
    return start_oreo("live", env={"OREO_PRESENCE_IDLE_S": str(IDLE_S), "OREO_PRESENCE_REFRESH_S": str(REFRESH_S)})


def presence_line(page: Page) -> Locator:
    return page.locator(".st-key-table_presence")


def shoot(page: Page, shots: Path, name: str, target: Locator) -> None:
    size = page.viewport_size
    page.set_viewport_size(SHOT)
    target.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / f"{name}.png"))
    if size:
        page.set_viewport_size(size)


def type_over(page: Page, row: int, name: str, text: str) -> None:
    """Double-click a cell of the editor, type ``text`` and press Enter; wait until it is saved and marked edited.

    As ``test_edit_review.type_into_cell``, except that the row's mark may say more than "✎ edited".
    """
    wait_quiet(page)
    for attempt in range(3):
        x, y = cell_centre(page, row, name)
        page.mouse.dblclick(x, y)
        field = page.locator("[id^='gdg-overlay-']").locator("textarea, input")
        expect(field).to_be_focused()
        page.keyboard.press("ControlOrMeta+a")
        page.keyboard.type(text, delay=30)
        expect(field).to_have_value(text)
        page.keyboard.press("Enter")
        expect(field).to_have_count(0)
        try:
            expect(cell(editor(page), row, name)).to_have_text(text, timeout=10_000)
            break
        except AssertionError:
            if attempt == 2:
                raise
            wait_quiet(page, 2000)
    expect(marker(page, row)).to_contain_text("✎ edited", timeout=SLOW_MS)
    wait_quiet(page)


def open_sorted_table(page: Page, settle: Settle, rows: int) -> None:
    open_table(page, settle, rows)
    choose(page, "table_sort_col", "customer_id")  # a MERGE moves the rows it rewrites; the key order stays
    wait_idle(page)


def approve_shown(page: Page, cr_id: str, version: int) -> None:
    wait_quiet(page)
    page.get_by_role("button", name="Approve", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_quiet(page)
    confirm_approval(page)
    expect(alert(page, f"Merged {cr_id}")).to_contain_text(f"as version {version}", timeout=SLOW_MS)
    wait_idle(page)


def test_two_editors_and_an_approver_live_together(
    live_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    rows, passwords = demo_workspace.rows, demo_workspace.passwords
    a = new_page(live_server.url)
    sign_in(a, "editor", passwords["editor"], settle)
    open_sorted_table(a, settle, rows)
    b = new_page(live_server.url)
    sign_in(b, "admin", passwords["admin"], settle)
    open_sorted_table(b, settle, rows)

    # ---- A and B see each other, with role and time
    expect(presence_line(b)).to_contain_text(re.compile(r"Also here: Editor \(editor, for \d+ (s|min)\)"))
    admin_here = re.compile(r"Also here: Admin \(admin, for \d+ (s|min)\)")
    expect(presence_line(a)).to_contain_text(admin_here, timeout=LIVE_MS)
    shoot(b, shots, "live-presence", presence_line(b))

    # ---- B edits the cell A has pending: told, and saved
    old_name = cell(editor(a), 0, "first_name").inner_text()
    type_over(a, 0, "first_name", "Alpha")
    b.reload()  # B's grid marks what others have pending when it is drawn (the link keeps the sort)
    settle(b, b.get_by_test_id("stCaptionContainer").filter(has_text="Rows "), "sorted by customer_id")
    expect(marker(b, 0)).to_have_text("also pending: first_name · Editor (session)")
    listed = b.locator(".st-key-table_also_pending_rows")  # the narrow change column cuts it; said whole above
    expect(listed).to_contain_text("Others have changes pending on 1 row(s) of this page")
    expect(listed).to_contain_text("first_name · Editor (session)")
    shoot(b, shots, "live-also-pending-rows", listed)
    expect(cell(editor(b), 0, "first_name")).to_have_text(old_name)  # A's draft value is not shown
    type_over(b, 0, "first_name", "Bravo")
    told = b.locator(".st-key-table_also_pending")
    expect(told).to_contain_text("Editor (session) also has a pending change to this cell")
    expect(told).to_contain_text("first_name); yours is saved too")
    shoot(b, shots, "live-also-pending", told)

    # ---- A submits; the approver merges it while B still has the cell pending
    cr_a = submit_request(a, "Alpha for the first customer")
    approver = new_page(live_server.url)
    sign_in(approver, "approver", passwords["approver"], settle)
    approver.get_by_role("link", name="Review").click()
    settle(approver, approver.get_by_role("heading", name="Alpha for the first customer"))
    approve_shown(approver, cr_a, 1)

    # ---- B is told, without touching the page: which version, who approved it, what of B's it touched
    moved = b.locator(".st-key-table_main_moved")
    expect(moved).to_contain_text(
        f"Version 1 of main landed: “Alpha for the first customer” ({cr_a}), approved by approver; "
        "it touched 1 of your pending cell(s).",
        timeout=LIVE_MS,
    )
    expect(moved).to_contain_text("1 of your pending change(s) now conflict with it")
    expect(b.get_by_test_id("stCaptionContainer").filter(has_text="Rows ")).to_contain_text("version 0")
    shoot(b, shots, "live-main-moved", moved)

    # ---- B refreshes, sees base, mine and now, and keeps mine
    b.get_by_role("button", name="Refresh the table").click()
    panel = b.locator(".st-key-table_early_conflicts")
    settle(b, panel, "Main changed under 1 of your pending change(s)")
    expect(panel).to_contain_text(f"base {old_name} · mine Bravo · now Alpha")
    shoot(b, shots, "live-early-conflict", panel)
    wait_quiet(b)
    panel.get_by_role("button", name="Keep mine").click()
    settle(b, alert(b, "Keep mine on row"), "Your session now starts from version 1")
    expect(b.locator(".st-key-table_early_conflicts")).to_have_count(0)
    expect(cell(editor(b), 0, "first_name")).to_have_text("Bravo")
    cr_b = submit_request(b, "Bravo over Alpha")

    # ---- the approver opens B's request: no conflict; B comments meanwhile, and the approver is told
    approver.get_by_role("link", name="Review").click()
    settle(approver, approver.get_by_role("heading", name="Bravo over Alpha"))
    expect(approver.locator(".st-key-review_conflicts")).to_contain_text("No conflicts")
    expect(approver.locator(".st-key-review_presence")).to_contain_text("No one else has this page open")
    oreo_json(live_server.data_root, "cr", "comment", cr_b, "--as", "admin", "--text", "Bravo is what she asked for.")
    news = approver.locator(".st-key-review_news")
    expect(news).to_contain_text(f"While you had {cr_b} open: admin commented", timeout=LIVE_MS)
    shoot(approver, shots, "live-review-news", news)
    approver.get_by_role("button", name="Reload the request").click()
    settle(approver, approver.locator(".st-key-review_discussion"), "Bravo is what she asked for.")
    approve_shown(approver, cr_b, 2)

    # ---- A's browser is gone: A drops out of B's page after the idle time
    expect(presence_line(b)).to_contain_text("Editor (editor")
    a.context.close()
    expect(presence_line(b)).not_to_contain_text("Editor (editor", timeout=LIVE_MS)
    expect(presence_line(b)).to_contain_text("No one else has this page open")
