"""The HTTP API keeps the contract it publishes at /openapi.json (issue 25 §6): a bounded Schemathesis run.

Every operation is fuzzed in-process (the ASGI app, no server, no warm engine) with
Schemathesis's default checks: no 5xx, only documented status codes and headers, answers
that match their schemas, schema-valid requests accepted and invalid ones refused, 405
with ``Allow``. A few examples per operation keep the run to a few minutes on two cores.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from starlette.types import Message

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
    auth.create_user(catalog, "site", password="not-a-common-password", site_admin=True)
    auth.create_user(catalog, "ed", password="not-a-common-password")
    auth.add_member(catalog, "demo", "ed", "editor")
    _bearer["Authorization"] = f"Bearer {tokens.create_token(catalog, 'site').secret}"
    yield
    _bearer.clear()


def _published_schema() -> schemathesis.BaseSchema:
    """The schema the app publishes; its calls go to the app in-process and read each test's catalog.

    Loading it runs the app's lifespan at collection time: without the warm-up setting off
    there, it would start the shared Spark engine (and a scratch MERGE) before any test set it up.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(WARM_ENGINE_ENV, "0")
        loaded = schemathesis.openapi.from_asgi("/openapi.json", create_app())
        loaded.raw_schema  # noqa: B018 - loaded now, while the warm-up is off
        return loaded


schema = _published_schema()


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


def test_a_json_body_over_the_limit_is_refused_by_its_length(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_MAX_JSON_MB", "1")
    get_settings.cache_clear()
    refused = client.post(
        "/api/v1/projects/demo/datasets/people/edits",
        content=b"x" * (2 * 2**20),
        headers={**_bearer, "Content-Type": "application/json"},
    )
    assert refused.status_code == 413, refused.text
    assert refused.json()["error"]["type"] == "too_large" and "OREO_MAX_JSON_MB" in refused.json()["error"]["message"]


def test_a_streamed_json_body_is_refused_once_it_passes_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunked 100 MiB edit (no Content-Length) is cut off after about 1 MiB, not read whole."""
    monkeypatch.setenv("OREO_MAX_JSON_MB", "1")
    get_settings.cache_clear()
    app = create_app()
    chunks_read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal chunks_read
        chunks_read += 1
        return {"type": "http.request", "body": b"x" * 2**18, "more_body": chunks_read < 400}  # 400 x 256 KiB

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/projects/demo/datasets/people/edits",
        "raw_path": b"/api/v1/projects/demo/datasets/people/edits",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"content-type", b"application/json"),
            (b"authorization", _bearer["Authorization"].encode()),
            (b"transfer-encoding", b"chunked"),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    # A thread of its own: a browser test earlier in the session may leave an event loop running in this one.
    runner = threading.Thread(target=asyncio.run, args=(app(scope, receive, send),))
    runner.start()
    runner.join(timeout=60)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 413
    assert chunks_read <= 5


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
