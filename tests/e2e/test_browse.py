"""Browser tests: each demo role signs in with a password, pages through and filters the demo table."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable
from playwright.sync_api import Locator, Page, expect

from core.layout import dataset_layout

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = pytest.mark.e2e

PAGE_SIZE = 50  # the Table page's default "Rows/page"
CAPTION = re.compile(r"^Rows ([\d,]+)–([\d,]+) of ([\d,]+) · ")


def sign_in(page: Page, username: str, password: str) -> None:
    """Type the credentials into the login form as a person would, and submit it."""
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()


def table_caption(page: Page) -> Locator:
    return page.get_by_test_id("stCaptionContainer").filter(has_text="Rows ")


def caption_numbers(page: Page) -> tuple[int, int, int]:
    match = CAPTION.match(table_caption(page).inner_text())
    assert match, table_caption(page).inner_text()
    first, last, total = (int(g.replace(",", "")) for g in match.groups())
    return first, last, total


def grid(page: Page) -> Locator:
    """The accessible table that glide-data-grid keeps inside its canvas (visible cells only)."""
    return page.get_by_test_id("stDataFrame").locator("table[role='grid']")


def grid_column(page: Page, name: str) -> Locator:
    # The server's sort column carries ▲ or ▼ after its name.
    header = grid(page).locator("th[role='columnheader']", has_text=re.compile(f"^{re.escape(name)}( [▲▼])?$"))
    colindex = header.get_attribute("aria-colindex")
    return grid(page).locator(f"td[role='gridcell'][aria-colindex='{colindex}']")


def true_count(server: OreoServer, **equals: str) -> int:
    """Count matching rows in the table's Parquet files with pyarrow: neither the DuckDB reader nor Spark.

    delta-rs lists the live files (it reads the log of a table with type widening, though it
    cannot scan one); the demo table has no deletion vectors, so those files are the rows.
    """
    main = dataset_layout(server.data_root, "demo", "customers").main
    log = "".join(f.read_text() for f in (main / "_delta_log").glob("*.json"))
    assert '"deletionVector":{' not in log.replace(" ", "")
    rows = ds.dataset(DeltaTable(str(main)).file_uris(), format="parquet").to_table(columns=list(equals))
    matches = [pc.equal(rows[column], value) for column, value in equals.items()]
    return int(pc.sum(functools.reduce(pc.and_, matches)).as_py() or 0)


def choose(page: Page, key: str, option: str) -> None:
    """Pick an option in the selectbox with widget key ``key`` by typing it, as a person would."""
    combobox = page.locator(f".st-key-{key}").get_by_role("combobox")
    combobox.click()
    combobox.press_sequentially(option)
    page.get_by_role("option", name=option, exact=True).click()
    expect(combobox).to_have_value(option)


@pytest.mark.parametrize("role", ["editor", "approver", "admin"])
def test_demo_role_signs_in_pages_and_filters(
    role: str,
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
) -> None:
    page = new_page(oreo_server.url)
    sign_in(page, role, demo_workspace.passwords[role])

    settle(page, page.get_by_role("heading", name="Datasets", exact=True))
    expect(page.get_by_role("heading", name="Demo project")).to_be_visible()
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text="project demo")).to_have_text(
        f"project demo · your role: {role}"
    )
    expect(page.get_by_role("button", name="Open customers")).to_be_visible()
    expect(page.get_by_test_id("stSidebar")).to_contain_text(f"Signed in as {role.title()}")
    expect(page.get_by_test_id("stSidebar")).to_contain_text(f"{role} · {role}")
    # Only admins may create datasets.
    expect(page.get_by_text("Create a dataset")).to_have_count(1 if role == "admin" else 0)

    page.get_by_role("link", name="Table").click()
    settle(page, table_caption(page), "Rows 1–50 of 1,200")
    assert caption_numbers(page) == (1, PAGE_SIZE, demo_workspace.rows)
    expect(grid(page)).to_have_attribute("aria-rowcount", str(PAGE_SIZE + 1))  # + the header row
    first_page_ids = grid_column(page, "customer_id").all_inner_texts()
    assert first_page_ids

    page.get_by_role("button", name="Next page").click()
    settle(page, table_caption(page), "Rows 51–100 of 1,200")
    expect(page.get_by_role("button", name="Page 2", exact=True)).to_have_attribute("aria-current", "page")
    expect(grid_column(page, "customer_id").first).not_to_have_text(first_page_ids[0])
    second_page_ids = grid_column(page, "customer_id").all_inner_texts()
    assert second_page_ids and not set(first_page_ids) & set(second_page_ids)

    last_page = math.ceil(demo_workspace.rows / PAGE_SIZE)
    page.get_by_role("button", name=f"Page {last_page}", exact=True).click()
    settle(page, table_caption(page), "Rows 1,151–1,200 of 1,200")

    pro = true_count(oreo_server, plan="pro")
    assert 0 < pro < demo_workspace.rows
    choose(page, "table_filter_col", "plan")
    value = page.locator(".st-key-table_filter_value_plan_one input")
    settle(page, value)
    value.press_sequentially("pro")
    # Nothing is filtered until the filter is added; a new filter starts again at page 1.
    expect(table_caption(page)).to_contain_text("Rows 1,151–1,200 of 1,200")
    page.get_by_role("button", name="Add filter").click()
    settle(page, table_caption(page), f"of {pro:,}")
    expect(page.get_by_role("button", name="plan = pro")).to_be_visible()
    assert caption_numbers(page) == (1, min(PAGE_SIZE, pro), pro)
    expect(page.get_by_role("button", name=f"Page {math.ceil(pro / PAGE_SIZE)}", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name=f"Page {math.ceil(pro / PAGE_SIZE) + 1}", exact=True)).to_have_count(0)
    plans = grid_column(page, "plan")
    expect(plans.first).to_have_text("pro")
    assert set(plans.all_inner_texts()) == {"pro"}


def test_wrong_password_is_refused(
    oreo_server: OreoServer, demo_workspace: DemoWorkspace, new_page: Callable[[str], Page], settle: Settle
) -> None:
    page = new_page(oreo_server.url)
    sign_in(page, "editor", demo_workspace.passwords["editor"] + "x")

    settle(page, page.get_by_test_id("stAlertContentError"), "invalid username or password")
    expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    expect(page.get_by_role("heading", name="Datasets", exact=True)).to_have_count(0)
    expect(page.get_by_text("Signed in as")).to_have_count(0)


def test_sign_out_returns_to_the_login_page(
    oreo_server: OreoServer, demo_workspace: DemoWorkspace, new_page: Callable[[str], Page], settle: Settle
) -> None:
    page = new_page(oreo_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"])
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))

    page.get_by_role("button", name="Sign out").click()

    settle(page, page.get_by_role("button", name="Sign in", exact=True))
    expect(page.get_by_role("textbox", name="Username")).to_have_value("")
    expect(page.get_by_role("heading", name="Datasets", exact=True)).to_have_count(0)
    expect(page.get_by_role("link", name="Table")).to_have_count(0)
    # A reload keeps the user signed out: nothing of the old session survives.
    page.reload()
    settle(page, page.get_by_role("button", name="Sign in", exact=True))
    expect(page.get_by_role("heading", name="Datasets", exact=True)).to_have_count(0)
