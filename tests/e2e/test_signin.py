"""Browser tests: a sign-in lasts through reloads, tabs and deep links; sign-out and revocation end it."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from oidc_provider_mock import User, run_server_in_thread
from playwright.sync_api import Browser, BrowserContext, Page, expect

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import DemoWorkspace, OreoServer

pytestmark = pytest.mark.e2e

Settle = Callable[..., None]
COOKIE = "oreo_session"
SHOTS = Path(__file__).resolve().parents[2] / "data" / "screenshots"
REPO = Path(__file__).resolve().parents[2]
THROTTLED = re.compile(r"too many failed sign-ins; wait \d+ seconds? and try again")
GROUP_ROLES = {"stewards": ["demo:approver"]}
IDENTITIES = [
    User(sub="stella", claims={"email": "stella@oreo.example", "name": "Stella Steward", "groups": ["stewards"]}),
    User(sub="victor", claims={"email": "victor@oreo.example", "name": "Victor Visitor", "groups": ["visitors"]}),
]
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.screenshot(path=str(SHOTS / f"signin-{name}.png"))


def open_context(browser: Browser, server: OreoServer) -> BrowserContext:
    context = browser.new_context(base_url=server.url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    return context


def goto(page: Page, path: str) -> None:
    page.goto(path)
    expect(page.locator(APP_IDLE)).to_be_attached()


def sign_in(page: Page, settle: Settle, username: str, password: str) -> None:
    """Type the credentials into the login form as a person would, and submit it."""
    settle(page, page.get_by_role("button", name="Sign in", exact=True))
    page.get_by_role("textbox", name="Username").press_sequentially(username)
    page.get_by_role("textbox", name="Password").press_sequentially(password)
    page.get_by_role("button", name="Sign in", exact=True).click()


def session_cookie(context: BrowserContext) -> str:
    """The session cookie's value, polled: the page writes it once the signed-in run has rendered."""
    found: list[str] = []

    def has_cookie() -> bool:
        found[:] = [c["value"] for c in context.cookies() if c["name"] == COOKIE and c["value"]]
        return bool(found)

    poll(has_cookie)
    return found[0]


def poll(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)  # poll interval, not a wait for an outcome


def expect_signed_in(page: Page, settle: Settle, heading: str, who: str) -> None:
    settle(page, page.get_by_role("heading", name=heading, exact=True))
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar).to_contain_text("Signed in as")
    expect(sidebar.get_by_text(f"{who} ·")).to_be_visible()  # the username, then the role
    expect(page.get_by_text("Page not found")).to_have_count(0)


def expect_login_form(page: Page, settle: Settle) -> None:
    settle(page, page.get_by_role("button", name="Sign in", exact=True))
    expect(page.get_by_text("Signed in as")).to_have_count(0)
    expect(page.get_by_text("Page not found")).to_have_count(0)


def test_sign_in_lasts_through_reload_new_tab_and_deep_link(
    oreo_server: OreoServer, demo_workspace: DemoWorkspace, browser: Browser, settle: Settle
) -> None:
    context = open_context(browser, oreo_server)
    page = context.new_page()
    goto(page, "/")
    password = demo_workspace.passwords["approver"]
    sign_in(page, settle, "approver", password)
    expect_signed_in(page, settle, "Datasets", "approver")

    token = session_cookie(context)
    assert token is not None and len(token) >= 40
    assert "approver" not in token and password not in token  # opaque: no name, no role, no password
    [cookie] = [c for c in context.cookies() if c["name"] == COOKIE]
    assert (cookie["path"], cookie["sameSite"]) == ("/", "Strict")
    assert cookie["expires"] > 0  # kept across browser restarts, until the absolute lifetime

    page.reload()
    expect_signed_in(page, settle, "Datasets", "approver")

    second = context.new_page()
    goto(second, "/")
    expect_signed_in(second, settle, "Datasets", "approver")

    third = context.new_page()
    goto(third, "/review")
    expect_signed_in(third, settle, "Review", "approver")
    assert third.url == f"{oreo_server.url}/review"
    shot(third, "deep-link-signed-in")
    context.close()


@pytest.mark.parametrize(("path", "heading"), [("review", "Review"), ("history", "History")])
def test_a_deep_link_asks_for_sign_in_then_lands_on_the_page(
    oreo_server: OreoServer,
    demo_workspace: DemoWorkspace,
    browser: Browser,
    settle: Settle,
    path: str,
    heading: str,
) -> None:
    context = open_context(browser, oreo_server)
    page = context.new_page()
    goto(page, f"/{path}")
    expect_login_form(page, settle)
    if path == "review":
        shot(page, "deep-link-login")

    sign_in(page, settle, "admin", demo_workspace.passwords["admin"])

    expect_signed_in(page, settle, heading, "admin")
    assert page.url == f"{oreo_server.url}/{path}"
    session_cookie(context)  # written by this tab's signed-in run
    if path == "review":
        shot(page, "deep-link-after-sign-in")
    context.close()


def test_sign_out_revokes_the_cookie_server_side(
    oreo_server: OreoServer, demo_workspace: DemoWorkspace, browser: Browser, settle: Settle
) -> None:
    context = open_context(browser, oreo_server)
    page = context.new_page()
    goto(page, "/")
    sign_in(page, settle, "editor", demo_workspace.passwords["editor"])
    expect_signed_in(page, settle, "Datasets", "editor")
    token = session_cookie(context)
    page.reload()  # the cookie now comes from the browser, not from this tab's sign-in
    expect_signed_in(page, settle, "Datasets", "editor")

    page.get_by_role("button", name="Sign out").click()
    expect_login_form(page, settle)
    expect(page.get_by_test_id("stSidebar")).to_have_count(0)
    shot(page, "after-sign-out")
    poll(lambda: all(c["name"] != COOKIE or not c["value"] for c in context.cookies()))

    # Someone who copied the cookie before the sign-out gets nothing with it.
    thief = open_context(browser, oreo_server)
    thief.add_cookies([{"name": COOKIE, "value": token, "url": oreo_server.url}])
    stolen = thief.new_page()
    goto(stolen, "/datasets")
    expect_login_form(stolen, settle)
    expect(stolen.get_by_role("heading", name="Datasets", exact=True)).to_have_count(0)
    thief.close()
    context.close()


def test_an_admin_revocation_signs_out_open_tabs(
    oreo_server: OreoServer, demo_workspace: DemoWorkspace, browser: Browser, settle: Settle
) -> None:
    context = open_context(browser, oreo_server)
    page = context.new_page()
    goto(page, "/")
    sign_in(page, settle, "approver", demo_workspace.passwords["approver"])
    expect_signed_in(page, settle, "Datasets", "approver")
    session_cookie(context)

    revoked = subprocess.run(
        [str(Path(sys.executable).parent / "oreo"), "--json", "user", "revoke", "approver"],
        cwd=REPO,
        env=oreo_server_env(oreo_server),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert revoked.returncode == 0, revoked.stderr
    assert '"revoked": ' in revoked.stdout and '"revoked": 0' not in revoked.stdout

    # The next click in the open tab finds the session gone.
    page.get_by_role("link", name="My requests").click()
    expect_login_form(page, settle)
    page.reload()
    expect_login_form(page, settle)
    context.close()


def oreo_server_env(server: OreoServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OREO_", "STREAMLIT_"))}
    env.update(
        DELTA_DATA_ROOT=str(server.data_root),
        OREO_DATABASE_URL=f"sqlite:///{server.data_root.parent / 'catalog.db'}",
    )
    return env


def test_failed_sign_ins_are_throttled_without_naming_users(
    start_oreo: Callable[..., OreoServer], demo_workspace: DemoWorkspace, browser: Browser, settle: Settle
) -> None:
    # Its own server: the browser's address (localhost) stays throttled for a while afterwards.
    server = start_oreo("throttle")
    context = open_context(browser, server)
    page = context.new_page()
    goto(page, "/")
    error = page.get_by_test_id("stAlertContentError")
    for attempt in range(5):
        page.reload()  # a fresh form each time, as a person retyping would get after a reload
        expect(page.locator(APP_IDLE)).to_be_attached()
        sign_in(page, settle, "editor", f"wrong-password-{attempt}")
        settle(page, error, "invalid username or password")

    page.reload()
    expect(page.locator(APP_IDLE)).to_be_attached()
    sign_in(page, settle, "editor", demo_workspace.passwords["editor"])
    settle(page, error, THROTTLED)
    expect(page.get_by_text("Signed in as")).to_have_count(0)
    shot(page, "throttled")

    # An unknown username gets the very same answer.
    page.reload()
    expect(page.locator(APP_IDLE)).to_be_attached()
    sign_in(page, settle, "nobody-here", "whatever-password")
    settle(page, error, THROTTLED)
    context.close()


# ---------------------------------------------------------------- single sign-on


@pytest.fixture(scope="module")
def identity_provider() -> Iterator[str]:
    """oidc-provider-mock on a free port; it accepts any client id and secret."""
    with run_server_in_thread(port=0, user_claims=IDENTITIES) as server:
        yield f"http://localhost:{server.server_port}"  # browser and app both say localhost


@pytest.fixture(scope="module")
def sso_server(start_oreo: Callable[..., OreoServer], identity_provider: str) -> OreoServer:
    def secrets_for(url: str) -> str:
        return "\n".join(
            [
                "[auth]",
                f'redirect_uri = "{url}/oauth2callback"',
                f'cookie_secret = "{secrets.token_urlsafe(32)}"',
                'client_id = "oreo-signin"',
                f'client_secret = "{secrets.token_urlsafe(16)}"',
                f'server_metadata_url = "{identity_provider}/.well-known/openid-configuration"',
                "",
            ]
        )

    return start_oreo("sso-signin", secrets_for=secrets_for, env={"OREO_OIDC_GROUP_ROLES": json.dumps(GROUP_ROLES)})


def sign_in_with_sso(page: Page, settle: Settle, subject: str) -> None:
    settle(page, page.get_by_role("button", name="Sign in with SSO"))
    page.get_by_role("button", name="Sign in with SSO").click()
    expect(page.get_by_role("heading", name="Authorize Client")).to_be_visible()
    page.get_by_placeholder("sub").fill(subject)
    page.get_by_role("button", name="Authorize", exact=True).click()


def test_sso_sign_in_lasts_and_keeps_the_deep_link(sso_server: OreoServer, browser: Browser, settle: Settle) -> None:
    context = open_context(browser, sso_server)
    page = context.new_page()
    goto(page, "/review")
    sign_in_with_sso(page, settle, "stella")

    # The provider returns to the root; the address asked for was kept for the round trip.
    expect_signed_in(page, settle, "Review", "stella")
    page.wait_for_url(f"{sso_server.url}/review")
    session_cookie(context)
    poll(lambda: all(c["name"] != "oreo_next" or not c["value"] for c in context.cookies()))

    page.reload()
    expect_signed_in(page, settle, "Review", "stella")
    second = context.new_page()
    goto(second, "/history")
    expect_signed_in(second, settle, "History", "stella")
    context.close()


def test_revoking_an_sso_session_ends_the_identity_too(
    sso_server: OreoServer, browser: Browser, settle: Settle
) -> None:
    context = open_context(browser, sso_server)
    page = context.new_page()
    goto(page, "/")
    sign_in_with_sso(page, settle, "victor")
    expect_signed_in(page, settle, "Datasets", "victor")
    session_cookie(context)

    revoked = subprocess.run(
        [str(Path(sys.executable).parent / "oreo"), "--json", "user", "revoke", "victor"],
        cwd=REPO,
        env=oreo_server_env(sso_server),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(revoked.stdout) == {"username": "victor", "revoked": 1}

    # The next click finds the session revoked, and st.logout ends the provider's sign-in as well.
    page.get_by_role("link", name="My requests").click()
    expect(page.get_by_role("heading", name="End Session")).to_be_visible()
    page.get_by_role("button", name="End session").click()
    page.wait_for_url(f"{sso_server.url}/**")
    expect_login_form(page, settle)
    page.reload()  # Streamlit's identity cookie is gone: nothing signs the user back in
    expect_login_form(page, settle)
    expect(page.get_by_role("button", name="Sign in with SSO")).to_be_visible()
    context.close()
