"""Browser test of the row-shaped diff: an editor submits an update, an insert and a delete; the approver reads them.

The Review page shows the request as a table of rows: the updated cell's old value struck
through and its new value highlighted, the inserted row whole and green, the deleted row
whole and red. After the merge, History's *Compare* and the restore preview show the same
rows. Screenshots (1400x1000) go to ``$OREO_SCREENSHOTS`` (else a temporary folder).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.test_edit_review import (  # the grid's selection and double-click edit, shared
    confirm_approval,
    select_cell,
    type_into_cell,
)

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = pytest.mark.e2e

SLOW_MS = 600_000
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
SHOT = {"width": 1400, "height": 1000}
NEW_ID = "999001"
GREEN = "rgb(218, 251, 225)"  # #dafbe1, app.diff_views
RED = "rgb(255, 235, 233)"  # #ffebe9


@pytest.fixture(scope="module")
def rows_server(start_oreo: Callable[..., OreoServer]) -> OreoServer:
    """A server of its own: this test's merge must not leak into other tests."""
    return start_oreo("review-rows")


# ---------------------------------------------------------------- helpers


def wait_idle(page: Page) -> None:
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def editor(page: Page) -> Locator:
    return page.locator("[class*='st-key-table_editor_'] [data-testid='stDataFrame']")


def column_index(grid: Locator, name: str) -> int:
    header = grid.locator("th[role='columnheader']", has_text=re.compile(f"^{re.escape(name)}( [▲▼])?$"))
    return int(header.get_attribute("aria-colindex") or 0)


def cell(grid: Locator, row: int, name: str) -> Locator:
    return grid.locator(f"tr[aria-rowindex='{row + 2}'] td[aria-colindex='{column_index(grid, name)}']")


def tick_delete(page: Page, row: int) -> None:
    """Tick a row's delete box with the keyboard (select the cell, press Space), as a person can."""
    wait_idle(page)
    select_cell(page, row, "delete")
    page.keyboard.press("Space")
    expect(cell(editor(page), row, "change")).to_have_text("✖ deleted", timeout=SLOW_MS)
    wait_idle(page)


def alert(page: Page, text: str) -> Locator:
    return page.get_by_test_id("stAlertContainer").filter(has_text=text)


def add_row(page: Page, customer_id: str, first_name: str) -> None:
    page.locator(".st-key-table_add").get_by_text("Add a row").click()
    form = page.locator(".st-key-table_add")
    form.locator(".st-key-table_add_customer_id input").press_sequentially(customer_id)
    form.locator(".st-key-table_add_first_name input").press_sequentially(first_name)
    form.get_by_role("button", name="Add row").click()
    expect(alert(page, f"Row {customer_id} added as one pending change")).to_be_visible()
    wait_idle(page)


def submit_request(page: Page, title: str) -> str:
    page.get_by_role("button", name="Submit change request").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(page)
    dialog.get_by_role("textbox", name="Title").press_sequentially(title)
    dialog.get_by_role("button", name="Submit", exact=True).click()
    done = alert(page, "Submitted change request")
    expect(done).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)
    found = re.search(r"cr_[0-9a-f]+", done.inner_text())
    assert found, done.inner_text()
    return found.group(0)


def shoot(page: Page, shots: Path, name: str, focus: Locator) -> None:
    """A 1400x1000 screenshot with ``focus`` scrolled into view."""
    wait_idle(page)
    page.set_viewport_size(SHOT)
    wait_idle(page)
    focus.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / f"{name}.png"))


def show(page: Page, section: str) -> None:
    """Switch the History page's view (Timeline, Version, Compare)."""
    choice = page.locator(".st-key-history_section").get_by_role("radio", name=section, exact=True)
    choice.click()
    expect(choice).to_have_attribute("aria-checked", "true")
    wait_idle(page)


def choose_version(page: Page, key: str, version: int) -> None:
    """Pick version ``version`` in the selectbox ``key``: type its start, click it."""
    combobox = page.locator(f".st-key-{key}").get_by_role("combobox")
    combobox.click()
    combobox.press_sequentially(f"v{version} ·")
    page.get_by_role("option", name=re.compile(rf"^v{version} · ")).click()
    wait_idle(page)


def diff_row(area: Locator, kind: str, row_id: str) -> Locator:
    return area.locator(f"tr[data-kind='{kind}'][data-row-id='{row_id}']")


def diff_cell(area: Locator, row_id: str, column: str) -> Locator:
    return area.locator(f"td[data-row-id='{row_id}'][data-column='{column}']")


def background(locator: Locator) -> str:
    return str(locator.evaluate("e => getComputedStyle(e).backgroundColor"))


# ---------------------------------------------------------------- the test


def test_approver_reads_updates_inserts_and_deletes_as_rows(
    rows_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    # ---- the editor: one update, one delete, one insert
    page = new_page(rows_server.url)
    sign_in(page, "editor", demo_workspace.passwords["editor"], settle)
    page.get_by_role("link", name="Table").click()
    settle(page, page.get_by_test_id("stCaptionContainer").filter(has_text="Rows "), "Rows 1–50 of ")
    grid = editor(page)
    updated = cell(grid, 0, "customer_id").inner_text()
    old_city = cell(grid, 0, "city").inner_text()
    deleted = cell(grid, 1, "customer_id").inner_text()
    deleted_name = cell(grid, 1, "first_name").inner_text()
    assert old_city and old_city != "Lyon"
    type_into_cell(page, 0, "city", "Lyon")
    tick_delete(page, 1)
    add_row(page, NEW_ID, "Ada")
    cr_id = submit_request(page, "Move, drop and add customers")

    # ---- the approver
    page = new_page(rows_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
    page.get_by_role("link", name="Review").click()
    settle(page, page.get_by_role("heading", name="Move, drop and add customers"))
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text=cr_id)).to_contain_text("by editor")
    changes = page.locator(".st-key-review_changes")
    summary = changes.locator(".st-key-review_diff_summary")
    expect(summary.get_by_test_id("stMetric").filter(has_text="Rows updated")).to_contain_text("1")
    expect(summary.get_by_test_id("stMetric").filter(has_text="Rows inserted")).to_contain_text("1")
    expect(summary.get_by_test_id("stMetric").filter(has_text="Rows deleted")).to_contain_text("1")
    expect(summary).to_contain_text("city · 1")

    # The update: its key, its identifying columns, and the changed cell old (struck through) -> new (highlighted).
    update = diff_row(changes, "update", updated)
    expect(update).to_be_visible()
    changed = diff_cell(changes, updated, "city")
    expect(changed.locator("del")).to_have_text(old_city)
    expect(changed.locator("ins")).to_have_text("Lyon")
    assert changed.locator("del").evaluate("e => getComputedStyle(e).textDecorationLine") == "line-through"
    expect(diff_cell(changes, updated, "first_name")).not_to_have_text("")  # an identifying column, for context
    # The insert, whole and green; the delete, whole and red with its values.
    inserted = diff_row(changes, "insert", NEW_ID)
    expect(diff_cell(changes, NEW_ID, "first_name")).to_have_text("Ada")
    expect(diff_cell(changes, NEW_ID, "customer_id")).to_have_text(NEW_ID)
    assert background(inserted.locator("td").first) == GREEN
    removed = diff_row(changes, "delete", deleted)
    expect(diff_cell(changes, deleted, "first_name")).to_have_text(deleted_name)
    expect(diff_cell(changes, deleted, "city")).not_to_have_text("")
    assert background(removed.locator("td").first) == RED
    expect(changes.locator("tbody tr")).to_have_count(3)
    shoot(page, shots, "review-rows", changes)

    # Filter by kind: only the inserted row.
    changes.get_by_role("button", name="inserted").click()
    wait_idle(page)
    expect(changes.locator("tbody tr")).to_have_count(1)
    expect(diff_row(changes, "insert", NEW_ID)).to_be_visible()
    expect(changes.get_by_role("button", name="CSV (filtered)")).to_be_visible()
    changes.get_by_role("button", name="inserted").click()
    wait_idle(page)
    expect(changes.locator("tbody tr")).to_have_count(3)
    with page.expect_download() as download:
        changes.get_by_role("button", name="CSV", exact=True).click()
    text = Path(download.value.path()).read_text()
    assert text.splitlines()[0].startswith("row_id,kind,changed_columns,")
    assert len(text.splitlines()) == 4 and "Lyon" in text and "Ada" in text

    # ---- merge, then History's Compare shows the same rows
    page.set_viewport_size({"width": 1920, "height": 1200})
    page.get_by_role("button", name="Approve", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(page)
    confirm_approval(page)
    expect(alert(page, f"Merged {cr_id}")).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)

    page = new_page(rows_server.url)
    sign_in(page, "admin", demo_workspace.passwords["admin"], settle)
    page.get_by_role("link", name="History").click()
    settle(page, page.get_by_role("heading", name="History", exact=True))
    show(page, "Compare")
    compare = page.locator(".st-key-history_changes")
    expect(compare.locator("tbody tr")).to_have_count(3, timeout=SLOW_MS)
    expect(diff_cell(compare, updated, "city").locator("ins")).to_have_text("Lyon")
    expect(diff_cell(compare, NEW_ID, "first_name")).to_have_text("Ada")
    expect(diff_cell(compare, deleted, "first_name")).to_have_text(deleted_name)
    shoot(page, shots, "history-compare-rows", page.locator(".st-key-history_diff_summary"))

    # ---- the restore preview: from now back to version 0, the same rows the other way round
    page.set_viewport_size({"width": 1920, "height": 1200})
    show(page, "Version")
    choose_version(page, "history_version", 0)
    page.get_by_role("button", name="Restore to v0").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("1 row(s) inserted, 1 updated and 1 deleted", timeout=SLOW_MS)
    preview = dialog.locator(".st-key-restore_changes")
    changed = diff_cell(preview, updated, "city")
    expect(changed.locator("del")).to_have_text("Lyon")
    expect(changed.locator("ins")).to_have_text(old_city)
    assert background(diff_row(preview, "delete", NEW_ID).locator("td").first) == RED
    assert background(diff_row(preview, "insert", deleted).locator("td").first) == GREEN
    shoot(page, shots, "restore-preview-rows", preview)
