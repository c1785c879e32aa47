"""Browser test of issue 24 §1: a link to one change request approves exactly that request.

Three requests are submitted through the real CLI on the shared server's workspace. The
approver follows ``/review?cr=<second newest>``, approves it through the dialog (which names
its id and revision), and exactly that request merges. A request revised behind the page's
back between "open" and "approve" is refused with a one-line message and nothing merges.
A link to a request that is no longer open says so and offers no decision. Screenshots at
1400x1000 and 1024x768 go to ``$OREO_SCREENSHOTS`` (else a temporary folder).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.test_edit_review import confirm_approval
from tests.in_process import oreo_json

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

Settle = Callable[..., None]

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]  # three submits and a revise start Spark in the CLI

REPO = Path(__file__).resolve().parents[2]
SLOW_MS = 900_000  # an approval's Spark MERGE on a busy 2-core machine
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
SIZES = {"wide": {"width": 1400, "height": 1000}, "small": {"width": 1024, "height": 768}}
# Demo customers (row ids) each request renames; none is touched by another test on this server.
RENAMED = {"older": ("100201", "Linkolder"), "linked": ("100202", "Linkfollowed"), "newest": ("100203", "Linknewest")}


def oreo(server: OreoServer, *args: str) -> Any:
    """The real CLI on the server's workspace, as an operator (or a second person) would run it (in this process)."""
    return oreo_json(server.data_root, *args)


@pytest.fixture(scope="module")
def requests(oreo_server: OreoServer) -> dict[str, str]:
    """Three open requests by the editor, oldest to newest: name -> id."""
    ids = {}
    server = oreo_server
    for name, (customer, first_name) in RENAMED.items():
        oreo(server, "edit", "demo", "customers", "--as", "editor", "--set", customer, "first_name", first_name)
        submitted = oreo(server, "cr", "submit", "demo", "customers", "--as", "editor", "--title", f"Rename {name}")
        ids[name] = str(submitted["cr_id"])
    return ids


def open_states(server: OreoServer) -> dict[str, tuple[str, int]]:
    """Every change request of the demo table: id -> (state, revision)."""
    listed = oreo(server, "cr", "list", "demo", "customers")["change_requests"]
    return {c["cr_id"]: (c["state"], c["revision"]) for c in listed}


def wait_idle(page: Page) -> None:
    expect(page.locator(APP_IDLE)).to_be_attached(timeout=SLOW_MS)


def sign_in(page: Page, password: str, settle: Settle) -> None:
    page.get_by_role("textbox", name="Username").press_sequentially("approver")
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))


def follow_link(page: Page, cr_id: str) -> None:
    """Open ``/review?cr=<cr_id>`` in the address bar, as a link in a message would."""
    page.goto(f"/review?cr={cr_id}")
    expect(page.get_by_role("heading", name="Review", exact=True)).to_be_visible()
    wait_idle(page)


def alert(page: Page, text: str) -> Locator:
    return page.get_by_test_id("stAlertContainer").filter(has_text=text)


def shoot(page: Page, shots: Path, name: str) -> None:
    """Screenshots at both sizes, then back to the size the test runs at."""
    viewport = page.viewport_size
    for size, box in SIZES.items():
        page.set_viewport_size(box)
        wait_idle(page)
        page.screenshot(path=str(shots / f"review_link_{name}_{size}.png"))
    if viewport is not None:
        page.set_viewport_size(viewport)


def test_a_link_approves_exactly_the_request_it_names(
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    requests: dict[str, str],
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    page = new_page(oreo_server.url)
    sign_in(page, demo_workspace.passwords["approver"], settle)
    linked = requests["linked"]  # the second newest: the old page opened the newest whatever the link said
    follow_link(page, linked)

    expect(page.get_by_role("heading", name="Rename linked")).to_be_visible()
    expect(page.get_by_role("heading", name="Rename newest")).to_have_count(0)
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text=linked)).to_contain_text("revision 1")
    expect(page).to_have_url(f"{oreo_server.url}/review?cr={linked}")
    expect(page.locator(".st-key-review_cr").get_by_role("combobox")).to_have_value(re.compile(f"{linked}$"))
    expect(page.locator(".st-key-review_changes [data-testid='stMetric']").first).to_be_visible()
    shoot(page, shots, "deep_link")

    page.get_by_role("button", name="Approve", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Merge Rename linked by editor into demo/customers")
    expect(dialog).to_contain_text(f"Change request {linked} · revision 1")
    wait_idle(page)
    shoot(page, shots, "approve_dialog")
    confirm_approval(page)
    expect(alert(page, f"Merged {linked}")).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)

    states = open_states(oreo_server)
    assert states[linked] == ("merged", 1)
    assert states[requests["older"]][0] == "open" and states[requests["newest"]][0] == "open"
    # The page stays on the request its address names: merged now, no longer open, no decision offered.
    expect(alert(page, f"Change request {linked} (Rename linked) is merged — it is no longer open.")).to_be_visible()
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    shoot(page, shots, "no_longer_open")

    follow_link(page, "cr_does_not_exist")
    expect(alert(page, "Change request cr_does_not_exist is not in your projects or does not exist")).to_be_visible()
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)


def test_a_request_revised_behind_the_page_is_not_approved(
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    requests: dict[str, str],
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    cr_id = requests["newest"]
    page = new_page(oreo_server.url)
    sign_in(page, demo_workspace.passwords["approver"], settle)
    follow_link(page, cr_id)
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text=cr_id)).to_contain_text("revision 1")

    # Behind the page's back: the admin sends it back and the editor revises it (revision 2).
    customer, _name = RENAMED["newest"]
    oreo(oreo_server, "cr", "request-changes", cr_id, "--as", "admin", "--reason", "spell it out")
    oreo(oreo_server, "edit", "demo", "customers", "--as", "editor", "--set", customer, "first_name", "Linkrevised")
    assert oreo(oreo_server, "cr", "revise", cr_id, "--as", "editor")["revision"] == 2

    page.get_by_role("button", name="Approve", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Change request {cr_id} · revision 1")
    wait_idle(page)
    confirm_approval(page)
    refused = f"change request {cr_id} is at revision 2 now, not revision 1 that you reviewed"
    expect(dialog.get_by_test_id("stAlertContainer").filter(has_text=refused)).to_be_visible(timeout=SLOW_MS)
    wait_idle(page)
    shoot(page, shots, "stale_refused")

    assert open_states(oreo_server)[cr_id] == ("open", 2)
