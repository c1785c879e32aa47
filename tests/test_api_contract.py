"""The HTTP API keeps the contract it publishes at /openapi.json (issue 25 §6): a bounded Schemathesis run.

Every operation is fuzzed in-process (the ASGI app, no server, no warm engine) with
Schemathesis's default checks: no 5xx, only documented status codes and headers, answers
that match their schemas, schema-valid requests accepted and invalid ones refused, 405
with ``Allow``. A few examples per operation keep the run to a few minutes on two cores.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from api.app import WARM_ENGINE_ENV, create_app
from core import auth, projects, tokens
from core.catalog import Catalog

_bearer: dict[str, str] = {}


@pytest.fixture(autouse=True)
def workspace(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A small workspace: a project, an editor and a site admin, whose token every call carries."""
    monkeypatch.setenv(WARM_ENGINE_ENV, "0")
    projects.create_project(catalog, "demo")
    auth.create_user(catalog, "site", password="password123", site_admin=True)
    auth.create_user(catalog, "ed", password="password123")
    auth.add_member(catalog, "demo", "ed", "editor")
    _bearer["Authorization"] = f"Bearer {tokens.create_token(catalog, 'site').secret}"
    yield
    _bearer.clear()


# The schema the app publishes; its calls go to the app in-process and read this test's catalog.
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app())


@schema.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_every_operation_keeps_the_published_contract(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=dict(_bearer))
