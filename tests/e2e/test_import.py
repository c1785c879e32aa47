"""Browser test of an import: an editor uploads a CSV with a new column, an approver merges it, the table has it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.test_edit_review import confirm_approval

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

# The module's own server, then Spark staging, GX and a Spark MERGE with schema evolution on a busy
# 2-core machine: far past the default 900 s.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

SLOW_MS = 900_000
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
NEW_COLUMN = "loyalty_tier"
CUSTOMERS = [
    # Every column of the demo table, then one it does not have.
    "customer_id,first_name,last_name,email,city,country,plan,monthly_spend,signup_date,orders,active," + NEW_COLUMN,
    "900001,Ines,Importer,ines.importer@example.com,Lyon,France,pro,42.50,2024-05-01,3,true,gold",
    "900002,Otto,Uploader,otto.uploader@example.com,Graz,Austria,starter,12.00,2024-05-02,1,false,silver",
]


@pytest.fixture(scope="module")
def import_server(start_oreo: Callable[..., OreoServer]) -> OreoServer:
    """A server of its own: its merge (and the new column) must not leak into other modules."""
    return start_oreo("import")


@pytest.fixture
def new_customers(tmp_path: Path) -> Path:
    path = tmp_path / "new-customers.csv"
    path.write_text("\n".join(CUSTOMERS) + "\n")
    return path


# ---------------------------------------------------------------- helpers


def wait_idle(page: Page) -> None:
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def choose(page: Page, key: str, option: str) -> None:
    """Pick an option in the selectbox with widget key ``key`` by typing it, as a person would."""
    combobox = page.locator(f".st-key-{key}").get_by_role("combobox")
    combobox.click()
    combobox.press_sequentially(option)
    page.get_by_role("option", name=option, exact=True).click()
    expect(combobox).to_have_value(option)
    wait_idle(page)


def grid(page: Page, key: str) -> Locator:
    return page.locator(f".st-key-{key} [data-testid='stDataFrame']").first


def column_index(grid: Locator, name: str) -> int:
    header = grid.locator("th[role='columnheader']", has_text=re.compile(f"^{re.escape(name)}( [▲▼])?$"))
    expect(header).to_have_count(1)
    return int(header.get_attribute("aria-colindex") or 0)


def cell(grid: Locator, row: int, name: str) -> Locator:
    """A visible cell of a grid's accessible mirror, by 0-based data row and column name."""
    return grid.locator(f"tr[aria-rowindex='{row + 2}'] td[aria-colindex='{column_index(grid, name)}']")


def alert(page: Page, text: str) -> Locator:
    return page.get_by_test_id("stAlertContainer").filter(has_text=text)


def caption(page: Page, text: str) -> Locator:
    return page.get_by_test_id("stCaptionContainer").filter(has_text=text)


# ---------------------------------------------------------------- test


def test_an_imported_new_column_is_reviewed_merged_and_shown(
    import_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_customers: Path,
    new_page: Callable[[str], Page],
    settle: Settle,
) -> None:
    # ---- the editor uploads the file
    page = new_page(import_server.url)
    sign_in(page, "editor", demo_workspace.passwords["editor"], settle)
    page.get_by_role("link", name="Import").click()
    settle(page, page.get_by_role("heading", name="Import", exact=True))
    choose(page, "oreo_dataset", "demo/customers")
    # A file with bad values first: each is named with its data row, only its column is blamed, nothing is kept.
    bad = new_customers.with_name("bad-customers.csv")
    first, second = CUSTOMERS[1].replace(",3,true,", ",three,true,"), CUSTOMERS[2].replace(",1,false,", ",one,false,")
    rows = [CUSTOMERS[0], first, second]
    bad.write_text("\n".join(rows) + "\n")
    page.locator(".st-key-import_file input[type='file']").set_input_files(bad)
    refused = page.get_by_test_id("stAlertContainer").filter(has_text="bad-customers.csv has 2 values")
    expect(refused).to_contain_text(
        "column 'orders', not a number (BIGINT): data rows 1 ('three'), 2 ('one')", timeout=SLOW_MS
    )
    for unrelated in ("'customer_id'", "'monthly_spend'", "'signup_date'", "'active'"):
        expect(refused).not_to_contain_text(unrelated)
    # As a person would: discard the refused file, then choose the right one.
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)  # a click during a run can be lost
    page.locator(".st-key-import_upload").get_by_role("button", name="Discard").click()
    expect(page.get_by_test_id("stAlertContainer").filter(has_text="Discarded bad-customers.csv")).to_be_visible()
    expect(refused).to_have_count(0)
    expect(page.locator(".st-key-import_file input[type='file']")).to_be_attached()
    page.locator(".st-key-import_file input[type='file']").set_input_files(new_customers)

    kept = page.locator(".st-key-import_upload")
    expect(kept).to_contain_text("new-customers.csv · CSV · 2 row(s) · 12 column(s)", timeout=SLOW_MS)
    wait_idle(page)
    expect(cell(grid(page, "import_preview"), 0, "customer_id")).to_have_text("900001")
    expect(cell(grid(page, "import_preview"), 1, "first_name")).to_have_text("Otto")

    # The new column is called out above the comparison, and marked in it.
    schema = page.locator(".st-key-import_schema")
    expect(schema).to_contain_text(f"1 new column {NEW_COLUMN} (string)")
    columns = grid(page, "import_schema")
    expect(columns.locator("table[role='grid']")).to_have_attribute("aria-rowcount", "13")  # 12 columns + header
    expect(cell(columns, 11, "column")).to_have_text(NEW_COLUMN)
    expect(cell(columns, 11, "status")).to_have_text("new column")
    expect(cell(columns, 0, "column")).to_have_text("customer_id")
    expect(cell(columns, 0, "status")).to_have_text("matches")
    expect(page.get_by_role("radio", name="Append")).to_be_checked()

    page.get_by_role("textbox", name="Title").press_sequentially("Customers from the fair")
    page.get_by_role("textbox", name="Description").press_sequentially("Signed up at the stand.")
    wait_idle(page)
    page.get_by_role("button", name="Submit change request").click()
    done = alert(page, "Submitted change request")
    expect(done).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)
    found = re.search(r"cr_[0-9a-f]+", done.inner_text())
    assert found, done.inner_text()
    cr_id = found.group(0)
    expect(done).to_contain_text("2 row(s)")
    expect(page.get_by_role("link", name=f"Follow {cr_id} on My requests")).to_be_visible()
    # Ready for the next file; the table is unchanged until an approver merges.
    expect(page.locator(".st-key-import_file input[type='file']")).to_be_attached()
    expect(kept).to_have_count(0)

    # ---- the approver sees the schema change and merges
    page = new_page(import_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
    page.get_by_role("link", name="Review").click()
    settle(page, page.get_by_role("heading", name="Customers from the fair"))
    expect(caption(page, cr_id)).to_contain_text("import")
    expect(caption(page, cr_id)).to_contain_text("by editor")
    section = page.locator(".st-key-review_schema")
    expect(section.get_by_role("heading", name="Schema change")).to_be_visible()
    expect(section).to_contain_text(f"add column {NEW_COLUMN} (string)")
    expect(section).to_contain_text("Approving applies these changes to the table in the same MERGE commit")

    approve = page.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_enabled()
    approve.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(f"It also changes the table's schema: add column {NEW_COLUMN} (string).")
    wait_idle(page)
    confirm_approval(page)
    expect(alert(page, f"Merged {cr_id}")).to_contain_text("into demo/customers as version 1", timeout=SLOW_MS)
    wait_idle(page)
    expect(dialog).to_have_count(0)

    # ---- the Table page shows the new column and its value
    page.get_by_role("link", name="Table").click()
    settle(page, caption(page, "Rows "), "version 1")
    expect(caption(page, "Rows ")).to_contain_text(f"of {demo_workspace.rows + 2:,}")
    choose(page, "table_filter_col", "customer_id")
    value = page.locator(".st-key-table_filter_value_customer_id_one input")
    value.press_sequentially("900001")
    value.press("Enter")
    wait_idle(page)
    page.get_by_role("button", name="Add filter").click()
    expect(caption(page, "Rows ")).to_contain_text("Rows 1–1 of 1", timeout=SLOW_MS)
    wait_idle(page)
    table = page.locator("[class*='st-key-table_editor_'] [data-testid='stDataFrame']")
    expect(cell(table, 0, "customer_id")).to_have_text("900001")
    expect(cell(table, 0, NEW_COLUMN)).to_have_text("gold")
