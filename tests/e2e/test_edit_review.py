"""Browser tests of the core loop: an editor edits grid cells and submits, an approver reviews and merges.

The data editor is a Glide data grid drawn on a canvas. Its accessible mirror (a hidden
``table[role='grid']``) says which cell is selected and what each visible cell holds, but
not where a cell is drawn; so a cell is found by selecting it with the keyboard and
opening Glide's editor overlay, which Glide places exactly over the cell. The test then
double-clicks that spot, types and presses Enter, as a person would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from core.duck import cursor

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
ROW_PX = 35  # the Table page's grid row height
SLOW_MS = 600_000  # staging with Spark, GX and a Spark MERGE on a busy 2-core machine
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
PLANS = ["free", "starter", "pro", "enterprise"]
# Replaces the demo's default suite: ids stay critical, and a plan outside the known ones is a warning.
# (A regex, not a value set: a column with a value set is a select box in the grid.)
RULES = {
    "name": "customers",
    "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "row_id"}, "severity": "critical"},
        {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "row_id"}, "severity": "critical"},
        {
            "type": "expect_column_values_to_match_regex",
            "kwargs": {"column": "plan", "regex": f"^({'|'.join(PLANS)})$"},
            "severity": "warning",
        },
    ],
}


@pytest.fixture(scope="module")
def review_server(start_oreo: Callable[..., OreoServer], tmp_path_factory: pytest.TempPathFactory) -> OreoServer:
    """A server of its own (its edits and merges must not leak into other tests), with RULES set.

    The rules are set through the real CLI on this server's copy of the workspace, before
    any browser opens it; the app reads the suite when a request is submitted.
    """
    server = start_oreo("edit-review")
    suite = tmp_path_factory.mktemp("rules") / "suite.json"
    suite.write_text(json.dumps(RULES))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OREO_", "STREAMLIT_"))}
    env.pop("SPARK_REMOTE", None)
    env.update(
        DELTA_DATA_ROOT=str(server.data_root),
        OREO_DATABASE_URL=f"sqlite:///{server.data_root.parent / 'catalog.db'}",
    )
    oreo = Path(sys.executable).parent / "oreo"
    done = subprocess.run(
        [str(oreo), "--json", "rules", "set", "demo", "customers", "--file", str(suite)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(json.loads(done.stdout)["expectations"]) == len(RULES["expectations"])
    return server


# ---------------------------------------------------------------- helpers


def wait_idle(page: Page) -> None:
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)


def wait_quiet(page: Page, quiet_ms: int = 1000) -> None:
    """Wait until no script run has started or ended for ``quiet_ms`` (conftest.RUN_WATCH records it).

    Right after the Table page loads, the data editor may send one more widget update of its
    own (it drops restored edits that the data now holds), and the rerun that follows
    replaces the grid under a cell being typed into: the edit is lost without a trace.
    """
    page.wait_for_function(
        "quiet => document.querySelector(\"[data-testid='stApp'][data-test-script-state='notRunning']\") !== null"
        " && performance.now() - (window.__oreoRunChange ?? 0) > quiet",
        arg=quiet_ms,
        timeout=SLOW_MS,
    )


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def open_table(page: Page, settle: Settle, total: int) -> None:
    page.get_by_role("link", name="Table").click()
    settle(page, page.get_by_test_id("stCaptionContainer").filter(has_text="Rows "), f"Rows 1–50 of {total:,}")


def choose(page: Page, key: str, option: str) -> None:
    """Pick an option in the selectbox with widget key ``key`` by typing it, as a person would.

    A rerun that lands while the list is open (the grid's own update after a filter, say)
    redraws the box and closes its list; a person whose list closed opens it again, and so
    does this.
    """
    combobox = page.locator(f".st-key-{key}").get_by_role("combobox")
    for attempt in range(2):
        wait_quiet(page)
        combobox.click()
        combobox.press_sequentially(option)
        try:
            page.get_by_role("option", name=option, exact=True).click(timeout=15_000)
            break
        except PlaywrightTimeoutError:
            if attempt:
                raise
            page.keyboard.press("Escape")
    expect(combobox).to_have_value(option)


def editor(page: Page) -> Locator:
    """The Table page's data editor (its key changes after every save)."""
    return page.locator("[class*='st-key-table_editor_'] [data-testid='stDataFrame']")


def column_index(grid: Locator, name: str) -> int:
    # The server's sort column carries ▲ or ▼ after its name.
    header = grid.locator("th[role='columnheader']", has_text=re.compile(f"^{re.escape(name)}( [▲▼])?$"))
    return int(header.get_attribute("aria-colindex") or 0)


def cell(grid: Locator, row: int, name: str) -> Locator:
    """A visible cell of a grid's accessible mirror, by 0-based data row and column name."""
    return grid.locator(f"tr[aria-rowindex='{row + 2}'] td[aria-colindex='{column_index(grid, name)}']")


def marker(page: Page, row: int) -> Locator:
    return cell(editor(page), row, "change")


def select_cell(page: Page, row: int, name: str) -> None:
    """Select a cell of the editor with the mouse on its first column, then the arrow keys.

    A click or a key the grid missed while a rerun redrew it is tried again, as a person would.
    A row scrolled off screen (a taller page above the grid, as with the line on others'
    pending rows) is scrolled into view first.
    """
    grid = editor(page)
    target = column_index(grid, name)
    selected = grid.locator("td[aria-selected='true']")
    for attempt in range(3):
        try:
            # Where the grid is now: a warning shown above it since the last look moves it down.
            box = grid.locator("canvas").first.bounding_box()
            assert box is not None
            y = box["y"] + ROW_PX * (row + 1) + ROW_PX / 2
            height = (page.viewport_size or {"height": 0})["height"]
            if not ROW_PX <= y <= height - ROW_PX:  # the row is off screen: scroll to it first, as a person does
                grid.evaluate("grid => grid.scrollIntoView({block: 'start'})")
                box = grid.locator("canvas").first.bounding_box()
                assert box is not None
                y = box["y"] + ROW_PX * (row + 1) + ROW_PX / 2
            page.mouse.click(box["x"] + 30, y)
            expect(selected).to_have_attribute("aria-colindex", "1", timeout=10_000)
            for _ in range(target - 1):
                page.keyboard.press("ArrowRight")
            expect(selected).to_have_attribute("aria-colindex", str(target), timeout=10_000)
            break
        except AssertionError:
            if attempt == 2:
                raise
            wait_quiet(page)
    expect(selected).to_have_attribute("id", re.compile(rf"-{row}$"))


def cell_centre(page: Page, row: int, name: str) -> tuple[float, float]:
    """Where Glide draws a cell of the editor: select it by keyboard, read its editor overlay, cancel."""
    select_cell(page, row, name)
    page.keyboard.press("Enter")
    overlay = page.locator("[id^='gdg-overlay-']")
    expect(overlay).to_be_visible()
    where = overlay.bounding_box()
    assert where is not None
    page.keyboard.press("Escape")
    expect(overlay).to_have_count(0)
    return where["x"] + where["width"] / 2, where["y"] + where["height"] / 2


def type_into_cell(page: Page, row: int, name: str, text: str) -> None:
    """Double-click a cell of the editor, replace its text and press Enter; wait until it is saved.

    The grid has been seen to drop an edit typed right after the page loaded: the cell shows
    its old value again as soon as Enter is pressed, and nothing reaches the server. Typing
    starts once the page has been quiet for a second; a person who still saw the old value
    would type it once more, and so does this (up to three times).
    """
    wait_quiet(page)
    page.evaluate("document.fonts.ready.then(() => true)")  # the grid measures its columns with the page fonts
    for attempt in range(3):
        x, y = cell_centre(page, row, name)
        page.mouse.dblclick(x, y)
        field = page.locator("[id^='gdg-overlay-']").locator("textarea, input")
        expect(field).to_be_focused()
        expect(field).to_have_value(re.compile(".*"))  # the editor holds the cell's text
        page.keyboard.press("ControlOrMeta+a")
        page.keyboard.type(text, delay=30)  # about a fast typist's pace
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
    # Saved: the page reran with a fresh editor that shows the stored edit, marked.
    expect(marker(page, row)).to_have_text("✎ edited", timeout=SLOW_MS)
    expect(cell(editor(page), row, name)).to_have_text(text)
    wait_quiet(page)  # the editor may rerun once more to drop its copy of the now-saved edit


def alert(page: Page, text: str) -> Locator:
    return page.get_by_test_id("stAlertContainer").filter(has_text=text)


# The open dialog has answered "Approve and merge": it says the page may be closed (the
# approval runs), shows an alert (a refusal), or has closed (the approval ended already).
_APPROVAL_ANSWERED = """() => {
  const dialog = document.querySelector("[role='dialog']");
  return !dialog || dialog.innerText.includes("You can close this page")
    || dialog.querySelector("[data-testid='stAlertContainer']") !== null;
}"""
APPROVAL_ANSWER_MS = 60_000


def confirm_approval(page: Page) -> None:
    """Click "Approve and merge" in the open approve dialog; a click the page did not answer is clicked again, once.

    A click landing as one of the page's timed reruns ends can go unanswered; a person who
    sees nothing happen clicks again, and so does this. A second click on an approval that
    did start is harmless: the dialog is gone or shows the same running approval.
    """
    dialog = page.get_by_role("dialog")
    wait_idle(page)
    for attempt in range(2):
        dialog.get_by_role("button", name="Approve and merge").click()
        try:
            page.wait_for_function(_APPROVAL_ANSWERED, timeout=APPROVAL_ANSWER_MS if attempt == 0 else SLOW_MS)
            return
        except PlaywrightTimeoutError:
            if attempt:
                raise


def submit_request(page: Page, title: str) -> str:
    """Submit the pending edits through the dialog; returns the new change request's id."""
    page.get_by_role("button", name="Submit change request").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(page)
    dialog.get_by_role("textbox", name="Title").press_sequentially(title)
    dialog.get_by_role("textbox", name="Description").press_sequentially("Checked with the customer.")
    dialog.get_by_role("button", name="Submit", exact=True).click()
    done = alert(page, "Submitted change request")
    expect(done).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)
    expect(dialog).to_have_count(0)
    found = re.search(r"cr_[0-9a-f]+", done.inner_text())
    assert found, done.inner_text()
    return found.group(0)


# ---------------------------------------------------------------- tests


def test_editor_edits_and_submits_then_an_approver_merges(
    review_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    page = new_page(review_server.url)
    sign_in(page, "editor", demo_workspace.passwords["editor"], settle)
    # Editors submit; only approvers review.
    expect(page.get_by_role("link", name="My requests")).to_be_visible()
    expect(page.get_by_role("link", name="Review")).to_have_count(0)
    open_table(page, settle, demo_workspace.rows)

    grid = editor(page)
    customer = cell(grid, 0, "customer_id").inner_text()
    old_plan = cell(grid, 0, "plan").inner_text()
    old_name = cell(grid, 2, "first_name").inner_text()
    assert old_plan in PLANS
    expect(marker(page, 0)).to_have_text("")
    expect(page.locator(".st-key-table_preview")).to_have_count(0)

    type_into_cell(page, 0, "plan", "platinum")
    type_into_cell(page, 2, "first_name", "Zoë")

    expect(marker(page, 1)).to_have_text("")
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text="pending change")).to_contain_text(
        "2 pending change(s)"
    )
    # The read-only preview repeats the two changed rows, highlighted.
    preview = page.locator(".st-key-table_preview [data-testid='stDataFrame']")
    expect(preview.locator("table[role='grid']")).to_have_attribute("aria-rowcount", "3")
    expect(cell(preview, 0, "plan")).to_have_text("platinum")
    expect(cell(preview, 1, "first_name")).to_have_text("Zoë")

    cr_id = submit_request(page, "Platinum for one customer")
    # GX ran at submit: the unknown plan is a warning.
    expect(alert(page, cr_id)).to_contain_text("warning")
    # Submitted edits leave the grid; main is unchanged until an approver merges.
    expect(marker(page, 0)).to_have_text("")
    expect(cell(editor(page), 0, "plan")).to_have_text(old_plan)
    expect(cell(editor(page), 2, "first_name")).to_have_text(old_name)

    page.get_by_role("link", name="My requests").click()
    settle(page, page.get_by_role("heading", name="My requests", exact=True))
    expect(page.locator(f".st-key-request_{cr_id}")).to_contain_text("Platinum for one customer")
    expect(page.get_by_role("button", name="Withdraw")).to_have_count(1)

    # ---- the approver
    page = new_page(review_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
    page.get_by_role("link", name="Review").click()
    settle(page, page.get_by_role("heading", name="Platinum for one customer"))
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text=cr_id)).to_contain_text("by editor")

    diff = page.locator(".st-key-review_changes")
    expect(diff.locator("tbody tr[data-kind='update']")).to_have_count(2)  # two updated rows, one cell each
    changed = diff.locator("td.oreo-changed")
    expect(changed).to_have_count(2)
    rows = {
        (c.get_attribute("data-column"), c.locator("del").inner_text(), c.locator("ins").inner_text())
        for c in changed.all()
    }
    assert rows == {("plan", old_plan, "platinum"), ("first_name", old_name, "Zoë")}
    checks = page.locator(".st-key-review_checks")
    expect(checks).to_contain_text(re.compile(r"Data checks: .*warning"))
    # Every check evaluated is listed, the failed one first, in plain words with its failing value.
    # The two rules about row_id, which the request does not change, are not run.
    expect(checks).to_contain_text(
        "1 expectation(s) evaluated · 1 failed · 2 about columns the request does not change not run"
    )
    failed = checks.locator("tr[aria-rowindex='2']")
    expect(failed).to_contain_text("failed")
    expect(failed).to_contain_text("plan matches ^(")
    expect(failed).to_contain_text('"platinum"')
    # Counts and values read as the grid shows them: whole numbers, ∅ for empty, never 1.000000, None or <NA>.
    for raw in ("1.000000", "None", "<NA>"):
        expect(checks).not_to_contain_text(raw)
    expect(page.locator(".st-key-review_conflicts")).to_contain_text("No conflicts")
    viewport = page.viewport_size
    page.set_viewport_size({"width": 1400, "height": 1000})
    checks.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "review_checks.png"))
    if viewport is not None:  # the Table page's grid below needs its columns on screen
        page.set_viewport_size(viewport)

    approve = page.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_enabled()
    approve.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(page)
    dialog.get_by_role("textbox", name="Comment (optional)").press_sequentially("Confirmed by phone.")
    confirm_approval(page)
    expect(alert(page, f"Merged {cr_id}")).to_contain_text("into demo/customers as version 1", timeout=SLOW_MS)
    wait_idle(page)
    expect(page.get_by_text("No open change requests to review.")).to_be_visible()
    # The news is given once, to the approver who acted: a reload does not bring it back.
    page.reload()
    settle(page, page.get_by_text("No open change requests to review."))
    expect(alert(page, f"Merged {cr_id}")).to_have_count(0)
    # The inbox says where the request stands now, not only what it was when the approver was told.
    page.get_by_test_id("stSidebar").get_by_role("link", name=re.compile(r"^Inbox")).click()  # "Inbox 1 unread"
    settle(page, page.get_by_role("heading", name="Inbox", exact=True, level=1))
    told = page.get_by_test_id("stCaptionContainer").filter(has_text=cr_id).first
    expect(told).to_contain_text("now merged")

    open_table(page, settle, demo_workspace.rows)
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text="Rows ")).to_contain_text("version 1")
    # A MERGE rewrites the rows it changes, so the natural order moved on; sorting by the key restores it.
    choose(page, "table_sort_col", "customer_id")
    wait_idle(page)
    grid = editor(page)
    expect(cell(grid, 0, "customer_id")).to_have_text(customer)
    expect(cell(grid, 0, "plan")).to_have_text("platinum")
    expect(cell(grid, 2, "first_name")).to_have_text("Zoë")
    expect(cell(grid, 1, "first_name")).not_to_have_text("Zoë")


def test_the_author_of_a_request_gets_no_approve_action(
    review_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
) -> None:
    page = new_page(review_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
    open_table(page, settle, demo_workspace.rows)
    type_into_cell(page, 4, "city", "Lyon")
    cr_id = submit_request(page, "Move one customer to Lyon")

    page.get_by_role("link", name="Review").click()
    settle(page, page.get_by_role("heading", name="Move one customer to Lyon"))
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text=cr_id)).to_contain_text("by approver")
    expect(page.get_by_text("authors cannot approve their own request")).to_be_visible()
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    expect(page.get_by_role("button", name="Approve and merge")).to_have_count(0)
    # The diff is still there to read.
    diff = page.locator(".st-key-review_changes td.oreo-changed[data-column='city']")
    expect(diff.locator("ins")).to_have_text("Lyon")


def _cities(main: Path) -> list[dict[str, str | None]]:
    """Every row's ``row_id`` and ``city`` in the latest version of ``main`` (DuckDB reads its Delta features)."""
    rows = cursor().execute("SELECT row_id, city FROM delta_scan(?)", [str(main)]).fetchall()
    return [{"row_id": r, "city": c} for r, c in rows]


def bulk_panel(page: Page) -> Locator:
    return page.locator(".st-key-table_bulk")


def bulk_preview(page: Page, settle: Settle) -> Locator:
    page.locator(".st-key-bulk_preview_button button").click()
    box = page.locator(".st-key-bulk_preview_box")
    settle(page, box)
    return box


def test_changing_every_matching_row_is_one_pending_change_reviewed_and_merged(
    review_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    """Filter → change matching rows (find and replace) → preview → apply → one line → undo → apply → submit → merge."""
    main = review_server.data_root / "projects" / "demo" / "datasets" / "customers" / "main"
    before = _cities(main)
    page = new_page(review_server.url)
    sign_in(page, "editor", demo_workspace.passwords["editor"], settle)
    open_table(page, settle, demo_workspace.rows)
    city = cell(editor(page), 0, "city").inner_text()
    matching = sorted(r["row_id"] for r in before if r["city"] == city)
    new_city = f"{city} (verified)"
    choose(page, "table_filter_col", "city")
    value = page.locator("[class*='st-key-table_filter_value_city_one'] input")
    value.press_sequentially(city)
    value.press("Enter")
    page.get_by_role("button", name="Add filter").click()
    settle(page, page.get_by_role("button", name=f"city = {city}"))
    shown = len(matching)
    caption = page.get_by_test_id("stCaptionContainer").filter(has_text="Rows ")
    expect(caption).to_contain_text(f"of {shown:,}")

    panel = bulk_panel(page)
    panel.get_by_text("Change matching rows").first.click()
    expect(panel).to_contain_text(f"city = {city}")
    choose(page, "bulk_column", "city")
    panel.get_by_text("Find and replace").click()
    find = page.locator(".st-key-bulk_find input")
    settle(page, find)
    find.press_sequentially(city)
    find.press("Enter")
    wait_idle(page)
    replace = page.locator(".st-key-bulk_replace input")
    replace.press_sequentially(new_city)
    replace.press("Enter")
    wait_idle(page)
    box = bulk_preview(page, settle)
    expect(box).to_contain_text(f"city: find '{city}' → '{new_city}' in {shown} row")
    expect(box.get_by_test_id("stMetric").filter(has_text="Matching rows")).to_contain_text(str(shown))
    expect(box.get_by_test_id("stMetric").filter(has_text="Would change")).to_contain_text(str(shown))
    page.set_viewport_size({"width": 1400, "height": 1000})
    box.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "bulk_preview.png"))

    page.locator(".st-key-bulk_apply button").click()
    # Not the caption a rerun is replacing (kept, stale, until the run ends).
    fresh = page.locator("[data-testid='stElementContainer'][data-stale='false'] [data-testid='stCaptionContainer']")
    # A rerun may show the old and the new caption side by side for a moment (the full suite
    # once met two, which a strict locator refuses): wait for one that says the count.
    def pending_caption(count: int) -> Locator:
        return fresh.filter(has_text=f"{count} pending change(s), saved as you type").first

    settle(page, pending_caption(1))
    expect(alert(page, "saved as one pending change")).to_be_visible()
    pending = page.locator(".st-key-table_pending")
    pending.get_by_text("Pending changes (1)").click()
    line = pending.get_by_text(f"city: find '{city}' → '{new_city}' in {shown} row")
    expect(line).to_be_visible()
    pending.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "bulk_pending_line.png"))
    pending.get_by_role("button", name="Undo").click()
    settle(page, pending_caption(0))

    box = bulk_preview(page, settle)  # the inputs are kept: preview and apply again
    expect(box.get_by_test_id("stMetric").filter(has_text="Would change")).to_contain_text(str(shown))
    page.locator(".st-key-bulk_apply button").click()
    settle(page, pending_caption(1))
    cr_id = submit_request(page, "Verified city")

    # ---- the approver sees the bulk change's summary above its rows, and merges it
    page = new_page(review_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
    page.goto(f"/review?cr={cr_id}")
    settle(page, page.get_by_role("heading", name="Verified city"))
    summary = page.locator(".st-key-review_diff_bulk")
    expect(summary).to_contain_text(f"Bulk change · city: find '{city}' → '{new_city}' in {shown} row")
    diff = page.locator(".st-key-review_changes")
    expect(diff.locator("tbody tr[data-kind='update']")).to_have_count(min(shown, 50))
    expect(diff.locator("td.oreo-changed[data-column='city'] ins").first).to_have_text(new_city)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.locator(".st-key-review_changes").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "bulk_review.png"))
    page.get_by_role("button", name="Approve", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_idle(page)
    confirm_approval(page)
    expect(alert(page, f"Merged {cr_id}")).to_be_visible(timeout=SLOW_MS)

    after = {r["row_id"]: r["city"] for r in _cities(main)}
    assert {r for r, c in after.items() if c == new_city} == set(matching)
    assert {r: c for r, c in after.items() if r not in matching} == {
        r["row_id"]: r["city"] for r in before if r["row_id"] not in matching
    }
