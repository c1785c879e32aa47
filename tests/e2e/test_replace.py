"""Browser test of a replace import: the editor replaces demo/customers with a file, the approver reads the banner
and the deletions, merges, and the table holds the file's rows."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from playwright.sync_api import Locator, Page, expect

from core import reads
from core.layout import dataset_layout
from tests.e2e.test_edit_review import confirm_approval

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

# Its own server, then Spark staging, GX and a Spark MERGE on a busy 2-core machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

SLOW_MS = 900_000
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
SHOT = {"width": 1400, "height": 1000}
TITLE = "Customers as the CRM has them today"


@pytest.fixture(scope="module")
def replace_server(start_oreo: Callable[..., OreoServer]) -> OreoServer:
    """A server of its own: its merge (rows deleted) must not leak into other modules."""
    return start_oreo("replace")


def replacement(server: OreoServer, path: Path) -> tuple[list[int], int, int]:
    """The table's rows as a Parquet file but the last two customers, the first on another plan, and a new one.

    Returns the ids left out, the id renamed and the id added.
    """
    main = dataset_layout(server.data_root, "demo", "customers").main
    table = (
        reads.cursor()
        .execute("SELECT * EXCLUDE (row_id) FROM delta_scan(?) ORDER BY customer_id", [str(main)])
        .to_arrow_table()
    )
    ids = table.column("customer_id").to_pylist()
    dropped, changed = ids[-2:], ids[0]
    kept = table.slice(0, table.num_rows - 2)
    plans = kept.column("plan").to_pylist()
    plans[0] = "enterprise" if plans[0] != "enterprise" else "pro"
    kept = kept.set_column(kept.schema.get_field_index("plan"), "plan", pa.array(plans, kept.schema.field("plan").type))
    new_id = max(ids) + 1
    extra = kept.slice(0, 1)
    extra = extra.set_column(
        extra.schema.get_field_index("customer_id"),
        "customer_id",
        pc.cast(pa.array([new_id]), extra.schema.field("customer_id").type),
    )
    pq.write_table(pa.concat_tables([kept, extra]), path)
    return dropped, changed, new_id


def wait_idle(page: Page) -> None:
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    # A sign-in right after a submit can wait on a busy machine past settle's 60 s.
    expect(page.get_by_role("heading", name="Datasets", exact=True)).to_be_visible(timeout=SLOW_MS)
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def choose(page: Page, key: str, option: str) -> None:
    combobox = page.locator(f".st-key-{key}").get_by_role("combobox")
    combobox.click()
    combobox.press_sequentially(option)
    page.get_by_role("option", name=option, exact=True).click()
    expect(combobox).to_have_value(option)
    wait_idle(page)


def alert(page: Page, text: str) -> Locator:
    return page.get_by_test_id("stAlertContainer").filter(has_text=text)


def caption(page: Page, text: str) -> Locator:
    return page.get_by_test_id("stCaptionContainer").filter(has_text=text)


def test_a_replace_is_explained_reviewed_with_its_deletions_and_merged(
    replace_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
    tmp_path: Path,
) -> None:
    source = tmp_path / "customers-today.parquet"
    dropped, changed, added = replacement(replace_server, source)

    # ---- the editor uploads the file and chooses Replace
    page = new_page(replace_server.url)
    sign_in(page, "editor", demo_workspace.passwords["editor"], settle)
    page.get_by_role("link", name="Import").click()
    settle(page, page.get_by_role("heading", name="Import", exact=True))
    choose(page, "oreo_dataset", "demo/customers")
    page.locator(".st-key-import_file input[type='file']").set_input_files(source)
    expect(page.locator(".st-key-import_upload")).to_contain_text(
        f"customers-today.parquet · PARQUET · {demo_workspace.rows - 1:,} row(s)", timeout=SLOW_MS
    )
    wait_idle(page)
    expect(page.get_by_text("the file becomes the table's whole content: rows it lacks are deleted")).to_be_visible()
    page.get_by_text("Replace", exact=True).click()
    warning = alert(page, "This replace deletes")
    expect(warning).to_contain_text(
        "This replace deletes 2 row(s) of demo/customers whose customer_id is not in the file"
    )
    wait_idle(page)
    expect(caption(page, "Rows are matched by the dataset's key")).to_contain_text("customer_id")
    expect(caption(page, "will replace the table's content")).to_be_visible()
    page.set_viewport_size(SHOT)
    warning.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "import-replace.png"))

    page.get_by_role("textbox", name="Title").press_sequentially(TITLE)
    wait_idle(page)
    page.get_by_role("button", name="Submit change request").click()
    done = alert(page, "Submitted change request")
    expect(done).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)
    found = re.search(r"cr_[0-9a-f]+", done.inner_text())
    assert found, done.inner_text()
    cr_id = found.group(0)
    expect(done).to_contain_text("4 row(s)")

    # ---- the approver reads the banner and the deleted, updated and added rows
    page = new_page(replace_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
    page.get_by_role("link", name="Review").click()
    settle(page, page.get_by_role("heading", name=TITLE))
    banner = page.locator(".st-key-review_replace_banner")
    expect(banner).to_contain_text("Replaces the table's content: 1 added, 1 updated, 2 deleted")
    expect(banner).to_contain_text("Rows are matched by customer_id")
    rows = page.locator(".st-key-review_diff_rows")
    for customer in dropped:
        expect(rows.locator(f"tr[data-row-id='{customer}']")).to_have_attribute("data-kind", "delete")
    expect(rows.locator(f"tr[data-row-id='{changed}']")).to_have_attribute("data-kind", "update")
    expect(rows.locator(f"tr[data-row-id='{changed}'] del")).to_have_count(1)
    expect(rows.locator(f"tr[data-row-id='{added}']")).to_have_attribute("data-kind", "insert")
    page.set_viewport_size(SHOT)
    banner.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "review-replace.png"))
    page.locator(".st-key-review_changes").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "review-replace-diff.png"))

    page.get_by_role("button", name="Approve", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(page)
    confirm_approval(page)
    expect(alert(page, f"Merged {cr_id}")).to_contain_text("into demo/customers as version 1", timeout=SLOW_MS)
    wait_idle(page)

    # ---- the table now holds the file's rows
    page.get_by_role("link", name="Table").click()
    settle(page, caption(page, "Rows "), "version 1")
    expect(caption(page, "Rows ")).to_contain_text(f"of {demo_workspace.rows - 1:,}")
