"""Browser test: an admin names a dataset's identifying columns on the Datasets page; Review's row diff shows them.

The admin opens *Dataset settings*, swaps the default identifying columns (the key plus the
first two text columns) for ``email`` and ``country``, and saves. An editor changes a city
and submits; the approver's diff shows each changed row with ``email`` and ``country`` beside
its key, and no longer the first and last names. Screenshots (1400x1000) go to
``$OREO_SCREENSHOTS`` (else a temporary folder).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.test_edit_review import type_into_cell  # the Table page's double-click edit, shared
from tests.e2e.test_review_rows import (
    SLOW_MS,
    alert,
    cell,
    diff_cell,
    editor,
    shoot,
    sign_in,
    submit_request,
    wait_idle,
)

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def labels_server(start_oreo: Callable[..., OreoServer]) -> OreoServer:
    """A server of its own: the setting and the request must not leak into other tests."""
    return start_oreo("label-columns")


def tags(chooser: Locator) -> Locator:
    """The chips of a multiselect, one per chosen value."""
    # CSS, not the "Selected values" role: the open dropdown hides the chips from the accessibility tree.
    return chooser.locator("[data-testid='stMultiSelectTagsContainer'] [data-tag]")


def chips(chooser: Locator) -> list[str]:
    """The values a multiselect holds, as its chips read."""
    return [t.strip() for t in tags(chooser).all_inner_texts()]


def test_admin_sets_identifying_columns_and_the_review_diff_shows_them(
    labels_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    # ---- the admin: Datasets -> Dataset settings -> identifying columns
    page = new_page(labels_server.url)
    sign_in(page, "admin", demo_workspace.passwords["admin"], settle)
    page.get_by_test_id("stExpander").filter(has_text="Dataset settings").get_by_text("Dataset settings").click()
    chooser = page.locator("[class*='st-key-labels_columns_']")
    expect(chooser).to_be_visible()
    expect(tags(chooser)).to_have_count(3)
    assert chips(chooser) == ["customer_id", "first_name", "last_name"]  # the default: key + two text columns
    save = page.locator("[class*='st-key-labels_save_']").get_by_role("button")
    expect(save).to_be_disabled()

    chooser.get_by_role("button", name="Clear all").click()
    expect(tags(chooser)).to_have_count(0)
    box = chooser.locator("input")
    for name in ("email", "country"):
        box.click()
        box.press_sequentially(name)
        page.get_by_role("option", name=name, exact=True).click()
        expect(tags(chooser).filter(has_text=name)).to_have_count(1)
    page.keyboard.press("Escape")
    expect(tags(chooser)).to_have_count(2)
    wait_idle(page)
    shoot(page, shots, "datasets-identifying-columns", chooser)
    save.click()
    expect(alert(page, "diffs now show email, country")).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)
    assert chips(page.locator("[class*='st-key-labels_columns_']")) == ["email", "country"]

    # ---- the editor changes a city and submits
    author = new_page(labels_server.url)
    sign_in(author, "editor", demo_workspace.passwords["editor"], settle)
    author.get_by_role("link", name="Table").click()
    settle(author, author.get_by_test_id("stCaptionContainer").filter(has_text="Rows "), "Rows 1–50 of ")
    grid = editor(author)
    key = cell(grid, 0, "customer_id").inner_text()
    email = cell(grid, 0, "email").inner_text()
    country = cell(grid, 0, "country").inner_text()
    type_into_cell(author, 0, "city", "Lyon")
    cr_id = submit_request(author, "Move a customer to Lyon")

    # ---- the approver reads the row with the chosen identifying columns beside its key
    page = new_page(labels_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
    page.get_by_role("link", name="Review").click()
    settle(page, page.get_by_role("heading", name="Move a customer to Lyon"))
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text=cr_id)).to_be_visible()
    changes = page.locator(".st-key-review_changes")
    headers = changes.locator("table.oreo-diff thead th")
    expect(headers).to_have_text(["change", "customer_id", "email", "country", "city"])
    expect(diff_cell(changes, key, "email")).to_have_text(email)
    expect(diff_cell(changes, key, "country")).to_have_text(country)
    expect(diff_cell(changes, key, "city").locator("ins")).to_have_text("Lyon")
    expect(changes.locator("td[data-column='first_name']")).to_have_count(0)
    shoot(page, shots, "review-identifying-columns", changes)

    # ---- changes requested: the author's session now holds the request's edits and cannot be discarded
    page.get_by_role("button", name="Request changes").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(page)
    dialog.get_by_role("textbox").press_sequentially("Lyon is the wrong city")
    dialog.get_by_role("button", name="Request changes").click()
    expect(alert(page, "Changes requested")).to_be_visible(timeout=SLOW_MS)
    thread = page.locator(".st-key-review_thread")
    expect(thread).to_contain_text("Lyon is the wrong city")
    expect(thread).to_contain_text("on revision 1")
    shoot(page, shots, "review-thread-on-revision", page.locator(".st-key-review_discussion"))

    author.get_by_role("link", name="My requests").click()
    settle(author, author.get_by_role("heading", name="Changes requested"))
    author.get_by_role("link", name="Table").click()
    settle(author, author.locator(".st-key-table_revising"), f"You are revising change request {cr_id}")
    expect(author.get_by_role("button", name="Discard session")).to_be_disabled()
    shoot(author, shots, "table-revising-no-discard", author.locator(".st-key-table_actions"))
