"""Browser tests of History and Admin: an admin previews, diffs and restores a version; others cannot.

The server gets its own copy of the demo workspace, with one change request merged through
the real CLI before any browser opens it, so the table has a version 1 to go back from.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.in_process import oreo_json

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

# The first test also pays for the module's server: a demo seed and a merge through the CLI, each
# starting Spark, then a Spark RESTORE in the server; on a busy 2-core machine that is far past 900 s.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

REPO = Path(__file__).resolve().parents[2]
SLOW_MS = 900_000  # a Spark RESTORE (and the JVM it starts) on a busy 2-core machine
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
CUSTOMER = "100001"  # the demo's first customer
NEW_NAME = "Restorina"


def _cli(server: OreoServer, *args: str) -> dict[str, object]:
    """Run ``oreo --json ARGS`` on this server's copy of the workspace (in this process)."""
    doc: dict[str, object] = oreo_json(server.data_root, *args)
    return doc


@pytest.fixture(scope="module")
def history_server(start_oreo: Callable[..., OreoServer]) -> tuple[OreoServer, str]:
    """A server of its own (its restore must not leak into other modules) whose table is at version 1.

    Version 1 merges one change request: the editor renames customer 100001, the approver approves.
    Returns the server and the request's id.
    """
    server = start_oreo("history")
    _cli(server, "edit", "demo", "customers", "--as", "editor", "--set", CUSTOMER, "first_name", NEW_NAME)
    cr_id = str(_cli(server, "cr", "submit", "demo", "customers", "--as", "editor", "--title", "Rename one")["cr_id"])
    merged = _cli(server, "cr", "approve", cr_id, "--as", "approver", "--comment", "ok")
    assert (merged["state"], merged["version"]) == ("merged", 1), merged
    return server, cr_id


# ---------------------------------------------------------------- helpers


def wait_idle(page: Page) -> None:
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def open_history(page: Page, settle: Settle) -> None:
    page.get_by_role("link", name="History").click()
    settle(page, page.get_by_role("heading", name="History", exact=True))
    expect(grid(page, "history_versions")).to_be_visible()
    wait_idle(page)


def show(page: Page, section: str) -> None:
    """Switch the History page's view (Timeline, Version, Compare)."""
    choice = page.locator(".st-key-history_section").get_by_role("radio", name=section, exact=True)
    choice.click()
    expect(choice).to_have_attribute("aria-checked", "true")
    wait_idle(page)


def choose(page: Page, key: str, typed: str, option: str | re.Pattern[str]) -> None:
    """Pick an option in the selectbox with widget key ``key``: type part of it, click it."""
    combobox = page.locator(f".st-key-{key}").get_by_role("combobox")
    combobox.click()
    combobox.press_sequentially(typed)
    page.get_by_role("option", name=option).first.click()
    expect(combobox).to_have_value(option)
    wait_idle(page)


def choose_version(page: Page, key: str, version: int) -> None:
    choose(page, key, f"v{version} ·", re.compile(rf"^v{version} · "))


def filter_rows(page: Page, prefix: str, column: str, value: str) -> None:
    """Filter a paged table (``prefix`` "history" or "table") to ``column`` equal to ``value``."""
    choose(page, f"{prefix}_filter_col", column, column)
    if prefix == "table":  # the Table page's filter bar: column, operator (= by default), value, Add filter
        field = page.locator(f".st-key-table_filter_value_{column}_one input")
    else:
        field = page.locator(f".st-key-{prefix}_filter_value").get_by_role("textbox")
    field.fill("")
    field.press_sequentially(value)
    field.press("Enter")
    wait_idle(page)
    if prefix == "table":
        page.get_by_role("button", name="Add filter").click()
        wait_idle(page)


def column_index(grid: Locator, name: str) -> int:
    header = grid.locator("th[role='columnheader']", has_text=re.compile(f"^{re.escape(name)}( [▲▼])?$"))
    return int(header.get_attribute("aria-colindex") or 0)


def cell(grid: Locator, row: int, name: str) -> Locator:
    """A visible cell of a grid's accessible mirror, by 0-based data row and column name."""
    return grid.locator(f"tr[aria-rowindex='{row + 2}'] td[aria-colindex='{column_index(grid, name)}']")


def grid(page: Page, key: str) -> Locator:
    return page.locator(f".st-key-{key} [data-testid='stDataFrame']").first


def alert(page: Page, text: str) -> Locator:
    return page.get_by_test_id("stAlertContainer").filter(has_text=text)


def caption(page: Page, text: str) -> Locator:
    return page.get_by_test_id("stCaptionContainer").filter(has_text=text)


# ---------------------------------------------------------------- tests


def test_an_admin_previews_diffs_and_restores_a_version(
    history_server: tuple[OreoServer, str],
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
) -> None:
    server, cr_id = history_server
    page = new_page(server.url)
    sign_in(page, "admin", demo_workspace.passwords["admin"], settle)
    open_history(page, settle)

    # The timeline: version 1 is the merge, committed by its approver, with its request.
    timeline = grid(page, "history_versions")
    expect(timeline.locator("table[role='grid']")).to_have_attribute("aria-rowcount", "3")
    expect(cell(timeline, 0, "version")).to_have_text("1")
    expect(cell(timeline, 0, "actor")).to_have_text("approver")
    expect(cell(timeline, 0, "change request")).to_have_text(cr_id)
    expect(cell(timeline, 0, "title")).to_have_text("Rename one")
    expect(cell(timeline, 0, "updated")).to_have_text("1")
    expect(cell(timeline, 0, "restorable")).to_have_text("no: the current version")
    expect(cell(timeline, 1, "restorable")).to_have_text("yes")
    expect(page.locator(".st-key-history_chart [data-testid='stVegaLiteChart']")).to_be_visible()

    # Version 0, as it was.
    show(page, "Version")
    choose_version(page, "history_version", 0)
    filter_rows(page, "history", "customer_id", CUSTOMER)
    expect(caption(page, "as of version 0")).to_contain_text("Rows 1–1 of 1")
    preview = grid(page, "history_rows")
    expect(cell(preview, 0, "customer_id")).to_have_text(CUSTOMER)
    old_name = cell(preview, 0, "first_name").inner_text()
    assert old_name and old_name != NEW_NAME
    choose_version(page, "history_version", 1)
    expect(caption(page, "as of version 1")).to_contain_text("Rows 1–1 of 1")
    expect(cell(grid(page, "history_rows"), 0, "first_name")).to_have_text(NEW_NAME)

    # The diff from version 0 to version 1.
    show(page, "Compare")
    expect(page.get_by_test_id("stMetric").filter(has_text="Rows updated")).to_contain_text("1")
    diff = page.locator(".st-key-history_changes")
    expect(diff.locator("tbody tr")).to_have_count(1)
    expect(diff.locator("tbody tr")).to_have_attribute("data-row-id", CUSTOMER)
    changed = diff.locator("td.oreo-changed")
    expect(changed).to_have_count(1)
    expect(changed).to_have_attribute("data-column", "first_name")
    expect(changed.locator("del")).to_have_text(old_name)
    expect(changed.locator("ins")).to_have_text(NEW_NAME)

    # Restore version 0: the current version offers none; the dialog wants a reason.
    show(page, "Version")
    expect(page.get_by_role("button", name="Restore to v1")).to_be_disabled()
    choose_version(page, "history_version", 0)
    restore = page.get_by_role("button", name="Restore to v0")
    expect(restore).to_be_enabled()
    restore.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("0 row(s) inserted, 1 updated and 0 deleted", timeout=SLOW_MS)
    wait_idle(page)
    dialog.get_by_role("button", name="Restore", exact=True).click()
    expect(dialog).to_contain_text("A reason is required to restore a version")
    wait_idle(page)
    dialog.get_by_role("textbox", name="Reason (required, kept in the audit log)").press_sequentially(
        "The rename was a mistake."
    )
    dialog.get_by_role("button", name="Restore", exact=True).click()
    expect(alert(page, "Restored demo/customers to version 0 as version 2")).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)
    expect(dialog).to_have_count(0)

    # The Table page shows the restored value, at the new version.
    page.get_by_role("link", name="Table").click()
    settle(page, caption(page, "Rows "), "version 2")
    filter_rows(page, "table", "customer_id", CUSTOMER)
    expect(caption(page, "Rows ")).to_contain_text("Rows 1–1 of 1")
    table = page.locator("[class*='st-key-table_editor_'] [data-testid='stDataFrame']")
    expect(cell(table, 0, "customer_id")).to_have_text(CUSTOMER)
    expect(cell(table, 0, "first_name")).to_have_text(old_name)

    # History lists the restore, by the admin.
    open_history(page, settle)
    timeline = grid(page, "history_versions")
    expect(cell(timeline, 0, "version")).to_have_text("2")
    expect(cell(timeline, 0, "operation")).to_have_text("RESTORE")
    expect(cell(timeline, 0, "actor")).to_have_text("admin")
    # It says why, to which version, and what it moved.
    expect(cell(timeline, 0, "kind")).to_have_text("restore")
    details = cell(timeline, 0, "details")
    expect(details).to_contain_text("restored to v0 · reason: The rename was a mistake.")
    expect(details).to_contain_text("row(s) brought back")
    shoot(page, "history-timeline-restore")


def shoot(page: Page, name: str) -> None:
    """A 1400x1000 screenshot for people to look at (OREO_SCREENSHOTS names the folder)."""
    folder = os.environ.get("OREO_SCREENSHOTS")
    if not folder:
        return
    page.set_viewport_size({"width": 1400, "height": 1000})
    wait_idle(page)
    page.screenshot(path=str(Path(folder) / f"{name}.png"))
    page.set_viewport_size({"width": 1920, "height": 1200})


def test_an_admin_reads_and_tunes_the_rules(
    history_server: tuple[OreoServer, str],
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
) -> None:
    server, _ = history_server
    page = new_page(server.url)
    sign_in(page, "admin", demo_workspace.passwords["admin"], settle)
    page.get_by_role("link", name="Rules").click()
    settle(page, page.get_by_role("heading", name="Rules", exact=True))
    rules = grid(page, "rules_list")
    # The demo's rules, inferred when it was created, in plain words.
    expect(rules).to_contain_text("monthly_spend is never empty")
    expect(rules).to_contain_text("orders is between 0 and")
    shoot(page, "rules")

    choose(page, "rules_pick", "orders is between", re.compile(r"^#\d+ · orders is between"))
    # The form of the rule just chosen (its widgets are keyed by its number), not the one it replaces.
    picked = re.match(r"#(\d+)", page.locator(".st-key-rules_pick").get_by_role("combobox").input_value())
    assert picked is not None
    severity = page.locator(f".st-key-rules_severity_{picked[1]} [role='combobox']")
    severity.click()
    page.get_by_role("option", name="critical", exact=True).click()
    page.get_by_role("button", name="Save rule").click()
    expect(alert(page, "saved.")).to_be_visible()
    wait_idle(page)
    row = grid(page, "rules_list").locator("tr", has_text="orders is between")
    expect(row).to_contain_text("critical")


def _older_rules(server: OreoServer, folder: Path) -> str:
    """Store rules as an older proposal left them; return the name of one a steward then makes critical.

    Every inferred rule is as inferred (edits of earlier tests undone), but with a wider ``orders``
    range (changed) and without "monthly_spend is never empty" (new).
    """
    suite = _cli(server, "rules", "show", "demo", "customers")
    older = []
    for item in suite["expectations"]:
        if item.get("meta", {}).get("oreo", {}).get("inferred"):
            item = {**item, "severity": "warning", "meta": {"oreo": {"inferred": True}}}
        kwargs = item["kwargs"]
        if (item["type"], kwargs.get("column")) == ("expect_column_values_to_be_between", "orders"):
            kwargs["max_value"] = 500
        if (item["type"], kwargs.get("column")) != ("expect_column_values_to_not_be_null", "monthly_spend"):
            older.append(item)
    path = folder / "older.json"
    path.write_text(json.dumps({**suite, "expectations": older}))
    _cli(server, "rules", "set", "demo", "customers", "--file", str(path))
    number = next(
        n
        for n, item in enumerate(older, start=1)
        if (item["type"], item["kwargs"].get("column")) == ("expect_column_values_to_not_be_null", "email")
    )
    _cli(server, "rules", "change", "demo", "customers", str(number), "--severity", "critical", "--as", "admin")
    return "email:not_be_null"


def test_an_admin_reviews_a_rule_proposal_and_accepts_part_of_it(
    history_server: tuple[OreoServer, str],
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    tmp_path: Path,
) -> None:
    """Issue 24 §4: inferred rules are a proposal; nothing changes before Accept, and a steward's rule is kept."""
    server, _ = history_server
    kept = _older_rules(server, tmp_path)
    page = new_page(server.url)
    sign_in(page, "admin", demo_workspace.passwords["admin"], settle)
    page.get_by_role("link", name="Rules").click()
    settle(page, page.get_by_role("heading", name="Rules", exact=True))
    page.get_by_role("button", name="Propose rules").click()
    settle(page, page.get_by_role("heading", name=re.compile(r"^Proposal from version \d+$")))
    proposal = page.locator(".st-key-rules_proposal_table")
    expect(proposal).to_contain_text("kept: edited by admin")
    expect(proposal).to_contain_text("adds: monthly_spend is never empty")
    expect(proposal).to_contain_text("orders is between 0 and 500")
    expect(proposal.get_by_role("checkbox", name=kept)).to_be_disabled()
    # Headings go down one level at a time: the title, its sections, the proposal.
    levels = page.locator("[data-testid='stMain'] :is(h1, h2, h3, h4, h5, h6)").evaluate_all(
        "els => els.map(e => Number(e.tagName[1]))"
    )
    assert levels[0] == 1 and all(b - a <= 1 for a, b in itertools.pairwise(levels)), levels
    # Nothing is stored before Accept.
    proposed = _cli(server, "rules", "propose", "demo", "customers")
    changing = {line["name"]: line["status"] for line in proposed["rules"] if line["status"] in ("new", "changed")}
    assert changing == {"orders:be_between": "changed", "monthly_spend:not_be_null": "new"}, changing

    take = proposal.get_by_role("checkbox", name="orders:be_between")
    proposal.locator("label", has=page.get_by_role("checkbox", name="orders:be_between")).click()
    expect(take).to_be_checked()
    shoot_sizes(page, proposal, "rules-proposal")
    page.get_by_role("button", name="Accept selected").click()
    expect(alert(page, "Accepted 1 proposed rule(s): orders:be_between.")).to_be_visible()
    wait_idle(page)
    expect(page.locator(".st-key-rules_proposal_table")).to_have_count(0)
    row = grid(page, "rules_list").locator("tr", has_text="orders is between")
    expect(row).not_to_contain_text("and 500")
    after = _cli(server, "rules", "propose", "demo", "customers")
    left = {line["name"]: line["status"] for line in after["rules"] if line["status"] in ("new", "changed", "kept")}
    assert left == {"monthly_spend:not_be_null": "new", kept: "kept"}, left
    _cli(server, "rules", "accept", "demo", "customers", "--all")  # as the other tests of this module expect


def shoot_sizes(page: Page, target: Locator, name: str) -> None:
    """Screenshots at 1400x1000 and 1024x768 with ``target`` in view (OREO_SCREENSHOTS names the folder)."""
    folder = os.environ.get("OREO_SCREENSHOTS")
    if not folder:
        return
    for width, height in ((1400, 1000), (1024, 768)):
        page.set_viewport_size({"width": width, "height": height})
        wait_idle(page)
        target.scroll_into_view_if_needed()
        page.screenshot(path=str(Path(folder) / f"{name}-{width}x{height}.png"))
    page.set_viewport_size({"width": 1920, "height": 1200})


@pytest.mark.parametrize("username", ["editor", "approver"])
def test_editors_and_approvers_see_no_restore_control(
    history_server: tuple[OreoServer, str],
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    username: str,
) -> None:
    server, _ = history_server
    page = new_page(server.url)
    sign_in(page, username, demo_workspace.passwords[username], settle)
    expect(page.get_by_role("link", name="Admin")).to_have_count(0)
    open_history(page, settle)

    show(page, "Version")
    choose_version(page, "history_version", 0)
    filter_rows(page, "history", "customer_id", CUSTOMER)
    expect(caption(page, "as of version 0")).to_contain_text("Rows 1–1 of 1")
    expect(cell(grid(page, "history_rows"), 0, "customer_id")).to_have_text(CUSTOMER)
    # They may read and download any version, but not restore one.
    expect(page.locator(".st-key-history_download").get_by_role("button", name="Download")).to_be_enabled()
    expect(page.get_by_role("button", name="Restore to v")).to_have_count(0)


@pytest.mark.parametrize("username", ["editor", "approver"])
def test_the_admin_url_is_refused_to_non_admins(
    history_server: tuple[OreoServer, str],
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    username: str,
) -> None:
    server, _ = history_server
    page = new_page(server.url)
    page.goto("/admin")
    wait_idle(page)
    # Signed out, the deep link asks for sign-in at that address (no "Page not found").
    expect(page.get_by_role("textbox", name="Username")).to_be_visible()
    expect(page.get_by_role("dialog").filter(has_text="Page not found")).to_have_count(0)

    # Signed in, the address says the page needs the admin role (issue 24: not "Page not found"), and shows none of it.
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(demo_workspace.passwords[username])
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_test_id("stAlertContainer").filter(has_text="needs the admin role"))
    expect(page.get_by_text("Page not found")).to_have_count(0)
    expect(page.get_by_role("link", name="Admin")).to_have_count(0)
    expect(page.get_by_role("heading", name="Admin", exact=True)).to_have_count(0)
    expect(page.get_by_role("button", name="Run OPTIMIZE")).to_have_count(0)
    expect(page.get_by_test_id("stMetric")).to_have_count(0)


def test_the_admin_reaches_the_admin_page(
    history_server: tuple[OreoServer, str],
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
) -> None:
    """The control for the refusals above: the same URL is the Admin page for an admin."""
    server, _ = history_server
    page = new_page(server.url)
    sign_in(page, "admin", demo_workspace.passwords["admin"], settle)
    page.get_by_role("link", name="Admin").click()
    settle(page, page.get_by_role("heading", name="Admin", exact=True))
    assert page.url.rstrip("/").endswith("/admin")
    expect(page.get_by_test_id("stMetric").filter(has_text="Versions")).to_be_visible()
    expect(page.get_by_role("button", name="Run OPTIMIZE")).to_be_visible()
