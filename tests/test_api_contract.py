"""The HTTP API keeps the contract it publishes at /openapi.json (issue 25 §6): a bounded Schemathesis run.

Every operation is fuzzed in-process (the ASGI app, no server, no warm engine) with
Schemathesis's default checks: no 5xx, only documented status codes and headers, answers
that match their schemas, schema-valid requests accepted and invalid ones refused, 405
with ``Allow``. A few examples per operation keep the run to a few minutes on two cores.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings

from api.app import WARM_ENGINE_ENV, create_app
from core import auth, projects, tokens
from core.catalog import Catalog
from core.config import get_settings

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
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_every_operation_keeps_the_published_contract(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=dict(_bearer))


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


def test_a_405_names_every_method_the_path_answers(client: TestClient) -> None:
    refused = client.delete("/api/v1/projects", headers=_bearer)
    assert refused.status_code == 405 and refused.json()["error"]["type"] == "method_not_allowed"
    assert refused.headers["Allow"] == "GET, POST"


def test_authenticated_answers_are_not_stored_or_sniffed(client: TestClient) -> None:
    for answer in (client.get("/api/v1/projects", headers=_bearer), client.get("/api/v1/projects")):
        assert answer.headers["Cache-Control"] == "no-store"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_json_body_over_the_limit_is_refused_before_it_is_read(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, chunked: bool
) -> None:
    monkeypatch.setenv("OREO_MAX_JSON_MB", "1")
    get_settings.cache_clear()
    sent: list[int] = []

    def body() -> Iterator[bytes]:
        yield b'{"set": [{"row_id": "r", "column": "name", "value": "'
        for _ in range(100):  # 100 MiB, as the hostile run sent
            sent.append(1)
            yield b"x" * 2**20
        yield b'"}]}'

    content: Any = body() if chunked else b"x" * (2 * 2**20)
    refused = client.post(
        "/api/v1/projects/demo/datasets/people/edits",
        content=content,
        headers={**_bearer, "Content-Type": "application/json"},
    )
    assert refused.status_code == 413, refused.text
    assert refused.json()["error"]["type"] == "too_large" and "OREO_MAX_JSON_MB" in refused.json()["error"]["message"]
    assert len(sent) < 100


def test_an_upload_over_the_upload_limit_is_refused_with_413(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_MAX_UPLOAD_MB", "1")
    get_settings.cache_clear()
    refused = client.post(
        "/api/v1/projects/demo/datasets/people/imports",
        files={"file": ("big.csv", b"a\n" + b"1\n" * (3 * 2**19), "text/csv")},
        headers=_bearer,
    )
    assert refused.status_code == 413 and "OREO_MAX_UPLOAD_MB" in refused.json()["error"]["message"]


def test_an_unknown_dataset_is_named_before_its_parameters_and_a_project_alone_filters(client: TestClient) -> None:
    refused = client.get("/api/v1/projects/demo/datasets/nope/diff", params={"from": 0, "to": 0}, headers=_bearer)
    assert refused.status_code == 404, refused.text
    listed = client.get("/api/v1/change-requests", params={"project": "demo"}, headers=_bearer)
    assert listed.status_code == 200 and listed.json() == {"change_requests": []}
