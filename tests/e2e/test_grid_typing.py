"""Browser tests: what a person types into a typed grid cell is saved as core reads it, or refused with that text.

Each test signs in with its own demo account on the shared server (so its session is its
own), types each input in real keystrokes into the Table grid, presses Enter, and checks
the saved value (grid, pending list, the session through the CLI) or the refusal, which
quotes exactly what was typed and saves nothing. The first input of each test is refused,
and starts no session. The "Add a row" form is typed into the same way, field by field.
Screenshots (1400x1000 and 1024x768) land in ``$OREO_SCREENSHOTS``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.test_table_console import (
    _session_id,
    alert,
    cell,
    editor,
    open_cell_editor,
    open_table,
    oreo,
    pending_caption,
    sign_in,
    wait_quiet,
)

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = pytest.mark.e2e

SLOW_MS = 600_000
ROW_PX = 35
SIZES = {"1400x1000": {"width": 1400, "height": 1000}, "1024x768": {"width": 1024, "height": 768}}
WIDE = {"width": 1920, "height": 1200}
# Typed text, then the value saved (None: refused with a message quoting the text, nothing saved).
INTEGERS = [
    ("1.5", None, "is not a whole number; BIGINT would round it"),
    ("12abc", None, "is not a number (BIGINT)"),
    ("-0", "0", None),
    ("1e3", "1000", None),
    (" 7 ", "7", None),
]
DECIMALS = [
    ("1,5", None, "is not a number (DOUBLE)"),
    ("1.005", "1.005", None),
]
DATES = [
    ("31/02/2024", None, "is not a date (YYYY-MM-DD)"),
    ("2024-02-30", None, "is not a valid DATE value"),
    ("2024-02-29", "2024-02-29", None),
]


def _until(page: Page, condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``condition`` (every 250 ms) until it holds or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        page.wait_for_timeout(250)  # a poll interval, not a wait for an outcome
    return condition()


def type_cell(page: Page, row: int, column: str, typed: str, outcome: Callable[[], bool]) -> None:
    """Double-click a cell, select its text, type ``typed`` key by key, press Enter; wait for ``outcome``.

    On a loaded machine the grid has been seen to drop an edit typed right after a rerun (the
    cell shows its old value and nothing reaches the server): a person types it again, so does this.
    """
    for attempt in range(2):
        wait_quiet(page)
        field = open_cell_editor(page, row, column)
        page.keyboard.press("ControlOrMeta+a")
        page.keyboard.type(typed, delay=30)
        expect(field).to_have_value(typed)  # the editor holds every character typed
        page.keyboard.press("Enter")
        expect(field).to_have_count(0)
        shown = cell(editor(page), row, column)
        if attempt or _until(page, lambda c=shown: outcome() or c.inner_text().strip() == typed.strip(), 10):
            break
    assert _until(page, outcome, SLOW_MS / 1000), f"no outcome for {typed!r} in {column}"
    wait_quiet(page)


def pending_count(page: Page) -> int:
    found = re.search(r"(\d+) pending change", pending_caption(page).inner_text())
    assert found, pending_caption(page).inner_text()
    return int(found.group(1))


def shoot(page: Page, shots: Path, name: str, focus: Locator | None = None) -> None:
    """The page at both sizes, scrolled to ``focus``; then wide again."""
    for size, viewport in SIZES.items():
        page.set_viewport_size(viewport)
        wait_quiet(page)
        if focus is not None:
            focus.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"{name}-{size}.png"))
    page.set_viewport_size(WIDE)
    wait_quiet(page)


def shoot_editing(page: Page, shots: Path, name: str, column: str, typed: str | None) -> None:
    """At both sizes: open the first row's ``column`` cell, type ``typed`` (None: check it shows the cell's text)."""
    for size, viewport in SIZES.items():
        page.set_viewport_size(viewport)
        wait_quiet(page)
        grid = editor(page)
        grid.evaluate("grid => grid.scrollIntoView({block: 'start'})")  # its first row in view
        # Narrower than the table: scroll the grid sideways until the column is drawn (and in its text mirror).
        box = grid.locator("canvas").first.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 3 * ROW_PX)
        page.mouse.wheel(2000, 0)
        expect(grid.locator("th[role='columnheader']", has_text=re.compile(f"^{column}$"))).to_have_count(1)
        field = open_cell_editor(page, 0, column)  # the arrow keys scroll the grid to the column
        shown = cell(editor(page), 0, column).inner_text()  # the grid's text mirror holds the columns in view
        if typed is None:
            expect(field).to_have_value(shown)
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", shown), shown
        else:
            page.keyboard.press("ControlOrMeta+a")
            page.keyboard.type(typed, delay=30)
            expect(field).to_have_value(typed)
        page.screenshot(path=str(shots / f"{name}-{size}.png"))
        page.keyboard.press("Escape")
        expect(field).to_have_count(0)
    page.set_viewport_size(WIDE)
    wait_quiet(page)


def _type_each(
    page: Page,
    server: OreoServer,
    username: str,
    column: str,
    cases: list[tuple[str, str | None, str | None]],
    refused_shot: Callable[[], None] | None = None,
) -> None:
    """Type each case into its own row of ``column``; check the saved value or the refusal.

    ``refused_shot`` is called once the first refusal shows.
    """
    grid = editor(page)
    expect(pending_caption(page)).to_contain_text("No edits yet")
    used: set[int] = set()
    saved: dict[str, str] = {}
    for typed, value, why in cases:
        before = pending_count(page)
        # A row whose value differs from the one to save (saving the same value is no change).
        row = next(r for r in range(20) if r not in used and cell(grid, r, column).inner_text() != value)
        used.add(row)
        old = cell(grid, row, column).inner_text()
        customer = cell(grid, row, "customer_id").inner_text()
        if value is None:
            refused = alert(page, f"row '{customer}', column '{column}': {typed!r} {why}; nothing was saved")
            type_cell(page, row, column, typed, lambda r=refused: r.count() > 0)
            expect(cell(editor(page), row, column)).to_have_text(old)  # the grid shows the stored value again
            assert pending_count(page) == before
            if before == 0:  # a refused first edit starts no session
                expect(pending_caption(page)).to_contain_text("No edits yet")
            if refused_shot is not None:
                refused_shot()
                refused_shot = None
        else:
            type_cell(page, row, column, typed, lambda b=before: pending_count(page) == b + 1)
            expect(cell(editor(page), row, column)).to_have_text(value)  # not what was typed: what was saved
            expect(alert(page, "nothing was saved")).to_have_count(0)
            saved[customer] = value
        grid = editor(page)
    pending = page.locator(".st-key-table_pending")
    pending.get_by_text("Pending changes (").click()
    for customer, value in saved.items():
        expect(pending.get_by_text(f"row {customer} · {column}:")).to_contain_text(f"→ {value}")
    session = oreo(server, "session", "show", _session_id(server, username), "--as", username)
    assert {e["row_id"]: e["new_value"] for e in session["edits"] if e["column"] == column} == saved


def _sign_in_to_table(page: Page, username: str, demo_workspace: DemoWorkspace, settle: Settle) -> None:
    sign_in(page, username, demo_workspace.passwords[username], settle)
    open_table(page, settle)


def test_integers_are_saved_as_core_reads_them_or_refused(
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    page = new_page(oreo_server.url)
    _sign_in_to_table(page, "editor", demo_workspace, settle)

    # An integer cell being edited is a text field: it holds every character typed.
    shoot_editing(page, shots, "grid-typing-integer-editing", "orders", "1.5")

    def refused_shot() -> None:
        shoot(page, shots, "grid-typing-integer-refused", focus=alert(page, "nothing was saved"))

    _type_each(page, oreo_server, "editor", "orders", INTEGERS, refused_shot)


def test_decimals_are_saved_as_typed_or_refused(
    oreo_server: OreoServer, demo_workspace: DemoWorkspace, new_page: Callable[[str], Page], settle: Settle
) -> None:
    page = new_page(oreo_server.url)
    _sign_in_to_table(page, "approver", demo_workspace, settle)
    _type_each(page, oreo_server, "approver", "monthly_spend", DECIMALS)


def test_dates_are_typed_in_iso_and_an_impossible_one_is_refused_as_typed(
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    page = new_page(oreo_server.url)
    _sign_in_to_table(page, "admin", demo_workspace, settle)

    # The date editor shows and takes the grid's own form, ISO YYYY-MM-DD.
    shoot_editing(page, shots, "grid-typing-date-editing", "signup_date", None)

    _type_each(page, oreo_server, "admin", "signup_date", DATES)


# ---------------------------------------------------------------- the Table page's "Add a row" form


def add_row_field(form: Locator, column: str) -> Locator:
    """A field of the add-row form (its key gets a suffix once a row was saved)."""
    return form.locator(f"[class*='st-key-table_add_{column}'] input")


def type_field(field: Locator, typed: str) -> None:
    """Select the field's text and type ``typed`` key by key, as a person replaces a value."""
    field.click()
    field.press("ControlOrMeta+a")
    field.press_sequentially(typed, delay=30)
    expect(field).to_have_value(typed)  # the field holds every character typed


def test_the_add_row_form_saves_typed_numbers_and_dates_as_core_reads_them_or_refuses_them(
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    # An editor of their own: the other tests' sessions are not theirs, so a refused first row starts none.
    password = oreo(oreo_server, "user", "add", "typist")["password"]
    oreo(oreo_server, "member", "add", "demo", "typist", "--role", "editor")
    page = new_page(oreo_server.url)
    sign_in(page, "typist", password, settle)
    open_table(page, settle)
    expect(pending_caption(page)).to_contain_text("No edits yet")

    form = page.locator(".st-key-table_add")
    form.get_by_text("Add a row").click()
    add = form.get_by_role("button", name="Add row")
    expect(add).to_be_visible()
    wait_quiet(page)
    typed = {"customer_id": "999101", "first_name": "Ada", "monthly_spend": "1,5", "signup_date": "2024-02-29"}
    typed["orders"] = "7"
    for column, text in typed.items():
        type_field(add_row_field(form, column), text)
    shoot(page, shots, "add-row-typing", focus=add)

    # Each refusal quotes the text as typed, names the column, and saves nothing; the form keeps the text.
    for column, text, why, fixed in (
        ("monthly_spend", "1,5", "is not a number (DOUBLE)", "12.50"),
        ("orders", "1.5", "is not a whole number; BIGINT would round it", "7"),
    ):
        type_field(add_row_field(form, column), text)
        add.click()
        refused = alert(page, f"row '(new row)', column '{column}': '{text}' {why}; nothing was saved")
        expect(refused).to_be_visible()
        wait_quiet(page)
        expect(pending_caption(page)).to_contain_text("No edits yet")  # no session was started
        expect(add_row_field(form, column)).to_have_value(text)
        if column == "orders":
            shoot(page, shots, "add-row-refused", focus=refused)
        type_field(add_row_field(form, column), fixed)

    add.click()
    expect(alert(page, "Row 999101 added as one pending change")).to_be_visible()
    wait_quiet(page)
    expect(pending_caption(page)).to_contain_text("1 pending change")
    expect(add_row_field(form, "orders")).to_have_value("")  # the form is empty again
    session = oreo(oreo_server, "session", "show", _session_id(oreo_server, "typist"), "--as", "typist")
    saved = {e["column"]: e["new_value"] for e in session["edits"] if e["row_id"] == "999101" and e["column"]}
    assert saved == {
        "customer_id": "999101",
        "first_name": "Ada",
        "monthly_spend": "12.5",
        "signup_date": "2024-02-29",
        "orders": "7",
        "active": "false",  # the box left unticked
    }
