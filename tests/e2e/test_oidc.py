"""Browser tests: single sign-on through a mock OIDC provider, with roles granted by identity-provider groups."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from oidc_provider_mock import User, run_server_in_thread
from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # conftest is pytest's to import; tests receive these through fixtures
    from tests.e2e.conftest import OreoServer

pytestmark = pytest.mark.e2e

Settle = Callable[..., None]
GROUP_ROLES = {"stewards": ["demo:approver"]}
IDENTITIES = [
    User(sub="stella", claims={"email": "stella@oreo.example", "name": "Stella Steward", "groups": ["stewards"]}),
    User(sub="victor", claims={"email": "victor@oreo.example", "name": "Victor Visitor", "groups": ["visitors"]}),
]


@pytest.fixture(scope="module")
def identity_provider() -> Iterator[str]:
    """oidc-provider-mock on a free port; it accepts any client id and secret."""
    with run_server_in_thread(port=0, user_claims=IDENTITIES) as server:
        # Browser and app both say "localhost", so the issuer and the cookies agree.
        yield f"http://localhost:{server.server_port}"


@pytest.fixture(scope="module")
def sso_server(start_oreo: Callable[..., OreoServer], identity_provider: str) -> OreoServer:
    """The app with an [auth] section pointing at the mock provider, and a group-to-role mapping."""

    def secrets_for(url: str) -> str:
        return "\n".join(
            [
                "[auth]",
                f'redirect_uri = "{url}/oauth2callback"',
                f'cookie_secret = "{secrets.token_urlsafe(32)}"',
                'client_id = "oreo-e2e"',
                f'client_secret = "{secrets.token_urlsafe(16)}"',
                f'server_metadata_url = "{identity_provider}/.well-known/openid-configuration"',
                "",
            ]
        )

    return start_oreo("sso", secrets_for=secrets_for, env={"OREO_OIDC_GROUP_ROLES": json.dumps(GROUP_ROLES)})


def sign_in_with_sso(page: Page, settle: Settle, subject: str) -> None:
    """Click "Sign in with SSO", then type the subject into the provider's login form."""
    settle(page, page.get_by_role("button", name="Sign in with SSO"))
    page.get_by_role("button", name="Sign in with SSO").click()
    expect(page.get_by_role("heading", name="Authorize Client")).to_be_visible()
    expect(page.get_by_text("oreo-e2e")).to_be_visible()  # the client id the app sent
    page.get_by_placeholder("sub").fill(subject)
    page.get_by_role("button", name="Authorize", exact=True).click()


def test_sso_group_grants_the_approver_role(
    sso_server: OreoServer, new_page: Callable[[str], Page], settle: Settle
) -> None:
    page = new_page(sso_server.url)
    sign_in_with_sso(page, settle, "stella")

    settle(page, page.get_by_role("heading", name="Datasets", exact=True))
    assert page.url.startswith(sso_server.url)
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar).to_contain_text("Signed in as Stella Steward")
    # The account is named after the email's local part; the role comes from the group.
    expect(sidebar).to_contain_text("stella · approver")
    expect(page.get_by_role("heading", name="Demo project")).to_be_visible()
    expect(page.get_by_test_id("stCaptionContainer").filter(has_text="project demo")).to_have_text(
        "project demo · your role: approver"
    )
    expect(page.get_by_role("button", name="Open customers")).to_be_visible()


def test_sso_without_a_mapped_group_gets_no_role(
    sso_server: OreoServer, new_page: Callable[[str], Page], settle: Settle
) -> None:
    page = new_page(sso_server.url)
    sign_in_with_sso(page, settle, "victor")

    settle(page, page.get_by_role("heading", name="Datasets", exact=True))
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar).to_contain_text("Signed in as Victor Visitor")
    expect(sidebar).to_contain_text("victor · no role yet")
    expect(page.get_by_text("You are not a member of any project yet.")).to_be_visible()
    expect(page.get_by_role("heading", name="Demo project")).to_have_count(0)


def test_sso_sign_out_ends_the_provider_session_and_returns_to_login(
    sso_server: OreoServer, new_page: Callable[[str], Page], settle: Settle
) -> None:
    page = new_page(sso_server.url)
    sign_in_with_sso(page, settle, "stella")
    settle(page, page.get_by_role("heading", name="Datasets", exact=True))

    page.get_by_role("button", name="Sign out").click()

    # st.logout sends the browser to the provider's end-session endpoint.
    expect(page.get_by_role("heading", name="End Session")).to_be_visible()
    page.get_by_role("button", name="End session").click()
    page.wait_for_url(f"{sso_server.url}/**")
    settle(page, page.get_by_role("button", name="Sign in with SSO"))
    expect(page.get_by_role("heading", name="Datasets", exact=True)).to_have_count(0)
    expect(page.get_by_text("Signed in as")).to_have_count(0)
    # The identity cookie is gone: a reload does not sign the user back in.
    page.reload()
    settle(page, page.get_by_role("button", name="Sign in with SSO"))
    expect(page.get_by_text("Signed in as")).to_have_count(0)
