"""What a person sees while waiting: submit and approve show their stages, and an approval outlives its tab.

The approval is held right before its MERGE by ``OREO_TEST_PAUSE_BEFORE_MERGE_S`` (a real
pause in ``core.merge``, set only on this test's server) until the test opens
``OREO_TEST_MERGE_GATE``, so the approver's tab is closed while the approval runs, every time.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.test_edit_review import (
    confirm_approval,
    select_cell,  # click the key cell, arrow right; retried like a person
)

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

ROW_PX = 35
SLOW_MS = 600_000  # Spark, GX and a MERGE on a busy 2-core machine
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
PAUSE_S = "900"  # an upper bound: the test opens the MERGE's gate once it came back and saw it merging
# A duration as the pages print it: "0.4 s", "12 s" or "2 min 05 s".
DUR = r"(?:\d+(?:\.\d)? s|\d+ min \d\d s)"
SUBMIT_TIMES = re.compile(rf"submit {DUR} \(staging {DUR} · checks {DUR}\)")
APPROVE_TIMES = re.compile(rf"approve {DUR} \(conflicts {DUR} · checks {DUR} · merge {DUR} · sync {DUR}\)")
SHOTS = Path(__file__).resolve().parents[2] / "data" / "screenshots" / "progress"


def wait_idle(page: Page) -> None:
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)


def shot(page: Page, name: str, tmp_path: Path) -> None:
    for folder in (tmp_path, SHOTS):
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"{name}.png"))


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def editor(page: Page) -> Locator:
    return page.locator("[class*='st-key-table_editor_'] [data-testid='stDataFrame']")


def cell(grid: Locator, row: int, name: str) -> Locator:
    header = grid.locator("th[role='columnheader']", has_text=re.compile(f"^{re.escape(name)}( [▲▼])?$"))
    index = int(header.get_attribute("aria-colindex") or 0)
    return grid.locator(f"tr[aria-rowindex='{row + 2}'] td[aria-colindex='{index}']")


def type_into_cell(page: Page, row: int, name: str, text: str) -> None:
    """Select the row's key cell, walk right to ``name`` with the keyboard, double-click where Glide draws it, type.

    On a loaded machine the grid has been seen to drop an edit typed right after a rerun
    (nothing reaches the server); a person would type it again, and so does this, once.
    """
    for attempt in range(2):
        _type_once(page, row, name, text)
        try:
            expect(cell(editor(page), row, "change")).to_have_text("✎ edited", timeout=15_000)
            break
        except AssertionError:
            if attempt:
                raise
    expect(cell(editor(page), row, "change")).to_have_text("✎ edited", timeout=SLOW_MS)
    wait_idle(page)


def _type_once(page: Page, row: int, name: str, text: str) -> None:
    wait_idle(page)
    page.evaluate("document.fonts.ready.then(() => true)")
    select_cell(page, row, name)
    page.keyboard.press("Enter")
    overlay = page.locator("[id^='gdg-overlay-']")
    expect(overlay).to_be_visible()
    where = overlay.bounding_box()
    assert where is not None
    page.keyboard.press("Escape")
    expect(overlay).to_have_count(0)
    page.mouse.dblclick(where["x"] + where["width"] / 2, where["y"] + where["height"] / 2)
    field = overlay.locator("textarea, input")
    expect(field).to_be_focused()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.type(text, delay=30)  # a fast typist's pace: the grid drops edits typed faster
    expect(field).to_have_value(text)
    page.keyboard.press("Enter")


def status(where: Page | Locator) -> Locator:
    """The ``st.status`` boxes (an expander with a state icon) in ``where``."""
    return where.get_by_test_id("stExpander")


def stored_stages(server: OreoServer, cr_id: str) -> list[tuple[str, str]]:
    with sqlite3.connect(server.data_root.parent / "catalog.db") as db:
        found = db.execute("SELECT stages FROM change_requests WHERE id = ?", (cr_id,)).fetchone()
    return [(t["action"], t["stage"]) for t in json.loads(found[0] or "[]")] if found else []


def test_submit_and_approve_show_their_stages_and_an_approval_outlives_its_tab(
    start_oreo: Callable[..., OreoServer],
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    tmp_path: Path,
) -> None:
    gate = tmp_path / "merge-may-go-on"
    server = start_oreo("progress", env={"OREO_TEST_PAUSE_BEFORE_MERGE_S": PAUSE_S, "OREO_TEST_MERGE_GATE": str(gate)})

    # ---- the editor edits one cell and submits: the dialog's status walks through staging and checks
    page = new_page(server.url)
    sign_in(page, "editor", demo_workspace.passwords["editor"], settle)
    page.get_by_role("link", name="Table").click()
    settle(page, page.get_by_test_id("stCaptionContainer").filter(has_text="Rows "), "Rows 1–50")
    type_into_cell(page, 0, "city", "Lyon")
    page.get_by_role("button", name="Submit change request").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(page)
    title = "Move a customer to Lyon"
    dialog.get_by_role("textbox", name="Title").press_sequentially(title)
    dialog.get_by_role("button", name="Submit", exact=True).click()
    submitting = status(dialog)
    expect(submitting).to_contain_text("Submitting… (")
    expect(submitting).to_contain_text("staging")
    expect(submitting).to_contain_text("checks")
    shot(page, "1-submit-status", tmp_path)
    done = page.get_by_test_id("stAlertContainer").filter(has_text="Submitted change request")
    expect(done).to_be_visible(timeout=SLOW_MS)
    # The flash carries the submit's stage durations, as recorded with the request.
    expect(done).to_contain_text(SUBMIT_TIMES)
    found = re.search(r"cr_[0-9a-f]+", done.inner_text())
    assert found, done.inner_text()
    cr_id = found.group(0)
    assert stored_stages(server, cr_id) == [("submit", "staging"), ("submit", "checks")]
    wait_idle(page)

    # ---- the approver approves: the dialog's status shows the approval's stages, live
    approver = new_page(server.url)
    sign_in(approver, "approver", demo_workspace.passwords["approver"], settle)
    approver.get_by_role("link", name="Review").click()
    settle(approver, approver.get_by_role("heading", name=title))
    expect(approver.get_by_test_id("stCaptionContainer").filter(has_text="submit ")).to_contain_text(SUBMIT_TIMES)
    approver.get_by_role("button", name="Approve", exact=True).click()
    dialog = approver.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(approver)
    confirm_approval(approver)
    approving = status(dialog)
    # Held before its MERGE: conflicts and checks are done, merge runs, sync is still to come.
    expect(approving).to_contain_text("Merging… (merge, ", timeout=SLOW_MS)
    expect(approving).to_contain_text("conflicts")
    expect(approving).to_contain_text("sync")
    expect(dialog).to_contain_text("You can close this page")
    shot(approver, "2-approve-status", tmp_path)

    # ---- the approver closes the tab mid-merge; the approval goes on in the server
    context = approver.context
    approver.close()
    back = context.new_page()
    back.set_viewport_size({"width": 1400, "height": 1000})
    back.goto("/review")  # the browser's session cookie signs them back in
    settle(back, back.get_by_role("heading", name=title))
    merging = back.locator(f".st-key-merging_{cr_id}")
    expect(status(merging)).to_contain_text("Merging… (merge, ")
    expect(back.get_by_test_id("stCaptionContainer").filter(has_text="is approving it now")).to_contain_text(
        "approver is approving it now."
    )
    expect(back.get_by_role("button", name="Approve", exact=True)).to_be_disabled()
    shot(back, "3-merging", tmp_path)
    gate.touch()  # the held MERGE goes on

    # ---- then the outcome, with every stage's duration, without a click
    merged = back.get_by_test_id("stAlertContainer").filter(has_text=f"Merged {cr_id}")
    expect(merged).to_contain_text("into demo/customers as version 1", timeout=SLOW_MS)
    timings = back.locator(f".st-key-review_outcome_{cr_id}").get_by_test_id("stCaptionContainer")
    expect(timings).to_contain_text(APPROVE_TIMES)
    expect(timings).to_contain_text(SUBMIT_TIMES)
    wait_idle(back)
    expect(back.get_by_text("No open change requests to review.")).to_be_visible()
    shot(back, "4-merged-with-stages", tmp_path)
    assert stored_stages(server, cr_id) == [
        ("submit", "staging"),
        ("submit", "checks"),
        ("approve", "conflicts"),
        ("approve", "checks"),
        ("approve", "merge"),
        ("approve", "sync"),
    ]

    # ---- the author sees the request merged, with its stage durations
    page.get_by_role("link", name="My requests").click()
    grid = page.get_by_test_id("stDataFrame").first.locator("table[role='grid']")  # the list, above the details
    expect(grid).to_contain_text(cr_id)
    expect(grid).to_contain_text("merged")
    expect(grid).to_contain_text(APPROVE_TIMES)
    wait_idle(page)
    shot(page, "5-my-requests", tmp_path)
