"""Browser accessibility audit: axe-core checks every page, as the role that uses it, on the shared server.

Each role passes the sign-in page, signs in once and opens its pages from the sidebar, as a
person would; once a page has drawn its last section, axe-core (the copy
``axe-playwright-python`` ships) audits the whole document. Any serious or critical
violation fails the test, and so does a skipped heading level (axe rates it moderate, but
screen-reader users move through a page by its heading outline). The pages are only
looked at: nothing is written, so the other modules' server stays as seeded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Locator, Page

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

# The first test also pays for the session server's start (a demo seed and a JVM) on a busy machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

FAILING_IMPACTS = {"serious", "critical"}
ALSO_FAILING = {"heading-order"}


@dataclass(frozen=True)
class Screen:
    """A page as the sidebar names it, and what it draws last (so the audit sees the whole page)."""

    title: str
    last: Callable[[Page], Locator]


def heading(name: str) -> Callable[[Page], Locator]:
    return lambda page: page.get_by_role("heading", name=name, exact=True)


def keyed(key: str) -> Callable[[Page], Locator]:
    return lambda page: page.locator(f".st-key-{key}")


def either(text: str, key: str) -> Callable[[Page], Locator]:
    """A page that says it has nothing yet, or (after other modules wrote) shows what it has."""
    return lambda page: page.get_by_text(text).or_(page.locator(f"[class*='st-key-{key}']"))


ROLE_SCREENS = {
    "editor": [
        Screen("Datasets", heading("Demo project")),
        Screen("Table", keyed("table_grid")),
        Screen("Import", lambda page: page.get_by_test_id("stFileUploaderDropzone")),
        Screen("History", keyed("history_chart")),
        Screen("My requests", either("You have not submitted any change requests yet", "requests_table")),
        Screen("Inbox", either("Nothing here yet", "inbox_item_")),
    ],
    "approver": [Screen("Review", either("No open change requests to review", "review_queue"))],
    "admin": [Screen("Admin", heading("Notifications")), Screen("Rules", heading("GX JSON"))],
}


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def open_screen(page: Page, screen: Screen, settle: Settle) -> None:
    """Click the page's sidebar link (the Inbox's is the badge link below the pages) and wait until it is drawn."""
    page.get_by_test_id("stSidebar").get_by_role("link", name=screen.title, exact=True).click()
    settle(page, page.get_by_role("heading", name=screen.title, exact=True, level=1))
    settle(page, screen.last(page).first)


def failures(results: dict[str, Any]) -> list[str]:
    """One line per failing node: the rule, its impact, the element and what axe says about it."""
    lines = []
    for violation in results["violations"]:
        if violation["impact"] not in FAILING_IMPACTS and violation["id"] not in ALSO_FAILING:
            continue
        for node in violation["nodes"]:
            checks = node.get("any", []) + node.get("all", []) + node.get("none", [])
            why = "; ".join(c["message"] for c in checks) or violation["help"]
            html = re.sub(r"\s+", " ", node["html"])[:160]
            lines.append(f"{violation['id']} ({violation['impact']}) {' '.join(node['target'])}: {html} — {why}")
    return lines


@pytest.mark.parametrize("role", list(ROLE_SCREENS))
def test_every_page_passes_an_accessibility_audit_as_the_role_that_uses_it(
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    new_page: Callable[[str], Page],
    settle: Settle,
    quiet: Callable[[Page], None],
    shots: Path,
    role: str,
) -> None:
    page = new_page(oreo_server.url)
    axe = Axe()

    def audit() -> list[str]:
        # Audit what a person reads once the page is still: a run that is still drawing (the
        # first load may run the script twice) can show a caption before its style arrives.
        quiet(page)
        return failures(axe.run(page).response)

    found: dict[str, list[str]] = {}
    settle(page, page.get_by_role("button", name="Sign in", exact=True))  # the sign-in page comes first
    problems = audit()
    if problems:
        found["Sign in"] = problems
    sign_in(page, role, demo_workspace.passwords[role], settle)
    for screen in ROLE_SCREENS[role]:
        open_screen(page, screen, settle)
        page.screenshot(path=shots / f"a11y-{role}-{screen.title.lower().replace(' ', '-')}.png", full_page=True)
        problems = audit()
        if problems:
            found[screen.title] = problems
    report = "\n".join(f"{title}:\n  " + "\n  ".join(lines) for title, lines in found.items())
    assert not found, f"accessibility violations as {role}:\n{report}"
