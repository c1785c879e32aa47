"""Browser test of issue 24 §3: a conflict shows base, theirs and mine, and its author settles it on the page.

Two editors change the same cell through the real CLI on the shared server's workspace;
the second one's request is approved first, so the first one's request now collides with
a newer commit. The approver's Review page shows the three values, the version and who
committed it, and leaves the choice to the author. The author's My requests page offers
"Keep mine" and "Take theirs"; keeping hers stages the next revision,
which holds the author's value and has no conflict left. Screenshots at 1400x1000 and
1024x768 go to the ``shots`` folder.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.test_review_link import SIZES, oreo, wait_idle  # the real CLI on the shared server; idle

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]  # submits and an approval start Spark in the CLI

SLOW_MS = 900_000  # staging a revision on a busy 2-core machine
CUSTOMER = "100301"  # a demo customer no other test on this server touches
MINE, THEIRS = "Minakeeps", "Theotook"


@pytest.fixture(scope="module")
def collision(oreo_server: OreoServer) -> dict[str, str]:
    """Mina's open request, whose one cell Theo changed first (approved): names, ids and passwords."""
    server = oreo_server
    made: dict[str, str] = {}
    for name in ("mina", "theo"):
        made[f"{name}_password"] = oreo(server, "user", "add", name)["password"]
        oreo(server, "member", "add", "demo", name, "--role", "editor")
    made["original"] = oreo(server, "dataset", "rows", "demo", "customers", "--where", f"customer_id = {CUSTOMER}")[
        "rows"
    ][0]["first_name"]
    for name, value in (("mina", MINE), ("theo", THEIRS)):
        oreo(server, "edit", "demo", "customers", "--as", name, "--set", CUSTOMER, "first_name", value)
        submitted = oreo(server, "cr", "submit", "demo", "customers", "--as", name, "--title", f"{name} renames")
        made[name] = str(submitted["cr_id"])
    oreo(server, "cr", "approve", made["theo"], "--as", "approver")
    return made


def sign_in(page: Page, username: str, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def shoot(page: Page, shots: Path, name: str, focus: Locator) -> None:
    """Screenshots at both sizes, scrolled to ``focus``, then back to the size the test runs at."""
    viewport = page.viewport_size
    for size, box in SIZES.items():
        page.set_viewport_size(box)
        wait_idle(page)
        focus.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"conflict_{name}_{size}.png"))
    if viewport is not None:
        page.set_viewport_size(viewport)


def test_the_approver_sees_the_three_values_and_the_author_keeps_theirs(
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    collision: dict[str, str],
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    mina = collision["mina"]
    line = f"base {collision['original']} → theirs {THEIRS}"

    # The approver: the three values, who committed the newer one, and no choice to make.
    page = new_page(oreo_server.url)
    sign_in(page, "approver", demo_workspace.passwords["approver"], settle)
    page.goto(f"/review?cr={mina}")
    wait_idle(page)
    conflicts = page.locator(".st-key-review_conflicts")
    expect(conflicts).to_contain_text("1 change(s) collide with commits made after version")
    expect(conflicts).to_contain_text("mina, the author, decides each")
    entry = page.locator(".st-key-review_conflict_0")
    expect(entry).to_contain_text(f"{CUSTOMER} · first_name")
    expect(entry).to_contain_text(line)
    expect(entry).to_contain_text(re.compile(r"version \d+ by approver"))  # committed by the approver who merged it
    expect(entry).to_contain_text(f"mine {MINE}")
    expect(entry.get_by_role("button", name="Keep mine")).to_have_count(0)
    expect(page.get_by_role("button", name="Approve")).to_be_disabled()
    shoot(page, shots, "review", conflicts)

    # The author: the same values, and the two choices; keeping hers stages revision 2.
    page = new_page(oreo_server.url)
    sign_in(page, "mina", collision["mina_password"], settle)
    page.goto(f"/requests?cr={mina}")
    wait_idle(page)
    entry = page.locator(".st-key-requests_conflict_0")
    expect(entry).to_contain_text(line)
    expect(entry).to_contain_text(f"mine {MINE}")
    expect(entry.get_by_role("button", name="Take theirs")).to_be_visible()
    shoot(page, shots, "author", entry)
    entry.get_by_role("button", name="Keep mine").click()
    kept = page.get_by_text(f"Kept your change on {CUSTOMER} · first_name: revision 2 is open.")
    expect(kept).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)
    expect(page.locator(".st-key-requests_conflicts")).to_have_count(0)
    shoot(page, shots, "kept", page.locator(".st-key-requests_changes"))

    shown = oreo(oreo_server, "cr", "show", mina, "--as", "mina")
    assert shown["revision"] == 2
    assert shown["conflicts"] == []
    assert [(c["column"], c["new"]) for c in shown["changes"]] == [("first_name", MINE)]
