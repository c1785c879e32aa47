"""Browser test: an editor facets a column, clicks a value to filter by it, and merges two clusters of demo cities."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.test_edit_review import choose  # a list a rerun closed is opened again

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = pytest.mark.e2e

SHOT = {"width": 1400, "height": 1000}


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_test_id("stSidebar").get_by_text("Signed in as"))


def caption(page: Page) -> Locator:
    return page.get_by_test_id("stCaptionContainer").filter(has_text="Rows ")


def shoot(page: Page, shots: Path, name: str, target: Locator) -> None:
    page.set_viewport_size(SHOT)
    target.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / f"{name}.png"))


def test_facet_filter_and_merge_two_clusters(
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    quiet: Callable[..., None],
    shots: Path,
) -> None:
    page = new_page(oreo_server.url)
    page.set_viewport_size(SHOT)
    sign_in(page, "editor", demo_workspace.passwords["editor"], settle)
    page.get_by_role("link", name="Table").click()
    settle(page, caption(page), f"of {demo_workspace.rows:,}")

    # ---- the facet of plan: its values with their counts; a click filters by one
    panel = page.locator(".st-key-table_facets")
    panel.get_by_text("Column values and clusters").click()
    choose(page, "table_facet_col", "plan")
    values = page.locator(".st-key-table_facet_values")
    settle(page, values.get_by_role("button", name="pro", exact=True))
    expect(panel).to_contain_text(f"Matching the filters: {demo_workspace.rows:,} · 4 distinct values")
    row = values.get_by_test_id("stHorizontalBlock").filter(has=page.get_by_role("button", name="pro", exact=True))
    counted = re.search(r"([\d,]+)", row.inner_text().split("pro", 1)[1])
    assert counted is not None
    pro = int(counted.group(1).replace(",", ""))
    shoot(page, shots, "facet-values", panel)
    values.get_by_role("button", name="pro", exact=True).click()
    settle(page, page.get_by_role("button", name="plan = pro"))
    expect(caption(page)).to_contain_text(f"of {pro:,} ·")

    # ---- a number column has a histogram
    choose(page, "table_facet_col", "monthly_spend")
    settle(page, page.locator(".st-key-table_facet_histogram"))
    shoot(page, shots, "facet-histogram", panel)
    page.get_by_role("button", name="Clear filters").click()
    settle(page, caption(page), f"of {demo_workspace.rows:,}")

    # ---- clusters of city: tick two, preview, merge as one pending change
    choose(page, "table_facet_col", "city")
    panel.get_by_text("Clusters", exact=True).click()
    clusters = page.locator(".st-key-table_clusters")
    settle(page, clusters)
    boxes = clusters.get_by_test_id("stCheckbox")
    assert boxes.count() >= 2
    shoot(page, shots, "clusters-list", clusters)
    first_values = clusters.locator("[class*='st-key-table_cluster_']").nth(0).inner_text()
    for i in (0, 1):  # the box is drawn over the input: a person clicks what they see
        boxes.nth(i).locator("label").click()
        expect(boxes.nth(i).get_by_role("checkbox")).to_be_checked()
        quiet(page)
    preview = page.locator(".st-key-table_merge_preview button")
    expect(preview).to_contain_text("Preview merge (2)")
    preview.click()
    box = page.locator(".st-key-table_merge_preview_box")
    settle(page, box, "city: merge ")
    shoot(page, shots, "clusters-preview", clusters)
    page.locator(".st-key-table_merge_apply button").click()
    settle(page, page.get_by_text("saved as one pending change"))
    pending = page.locator(".st-key-table_pending")
    expect(pending).to_contain_text("Pending changes (1)")
    # The merged clusters are gone from the list (the session's edits are read with the table).
    expect(clusters).not_to_contain_text(first_values.splitlines()[-1])
    shoot(page, shots, "clusters-merged", clusters)

    # ---- leave the shared server as found: discard the session
    page.get_by_role("button", name="Discard session").click()
    page.get_by_role("button", name="Discard", exact=True).click()
    settle(page, page.get_by_text("Your pending edits were discarded."))
