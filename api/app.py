"""The FastAPI application: ``create_app()`` builds it, ``serve()`` runs it under uvicorn (``oreo api``).

Spark starts in the background when the server starts (core.engine's warm start), so
``/api/v1/health`` answers at once and tells whether the engine is up, starting or down.
Every response passes one middleware that times it into ``oreo_api_request_seconds``
(Prometheus, the default registry served at ``/metrics``) and, for a call made with a
token, audits an ``api_request`` event naming the token (written in batches, see
``_CallAudit``); the events that core records during the call carry the token id too
(``audit.tagged``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import prometheus_client
from fastapi import FastAPI, Response
from fastapi.openapi.utils import get_openapi
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import errors, live, routes
from core import audit, engine, reactions, warmup
from core.catalog import open_catalog
from core.config import get_settings

logger = logging.getLogger("oreo.api")

REQUEST_SECONDS = prometheus_client.Histogram(
    "oreo_api_request_seconds",
    "Time to answer an HTTP API request (until its headers), by route template, method and status.",
    ["route", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)


# "0": no warm start (Spark then starts on first use); the page-read benchmark needs only DuckDB.
WARM_ENGINE_ENV = "OREO_API_WARM_ENGINE"


class _CallAudit:
    """Every API call's ``api_request`` event, written in batches by one thread.

    One catalog transaction per call would serialize concurrent readers on the catalog's
    write lock (SQLite); batched, 50 concurrent readers cost one small write every
    ``FLUSH_S``. Whatever is pending is written when the server stops.
    """

    FLUSH_S = 0.5

    def __init__(self) -> None:
        self._pending: list[audit.ApiRequest] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, event: audit.ApiRequest) -> None:
        with self._lock:
            self._pending.append(event)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="oreo-api-audit", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.FLUSH_S):
            try:
                self.flush()
            except Exception:  # the catalog is down: keep the events and try again
                logger.warning("could not write the API's audit events yet", exc_info=True)

    def flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch:
            return
        try:
            with open_catalog().session() as s:
                for event in batch:
                    audit.record(s, event)
        except Exception:
            with self._lock:
                self._pending[:0] = batch
            raise


_call_audit = _CallAudit()


class _Observe:
    """Times every HTTP request into ``oreo_api_request_seconds`` and audits token calls.

    A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``) runs
    each call through an extra task and memory streams, which cost more server CPU than
    a page read's own bookkeeping (profiled under 50 concurrent clients).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tags: dict[str, str] = {}
        state = scope.setdefault("state", {})
        state["audit_tags"] = tags
        started = time.perf_counter()
        status: int | None = None

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                self._observe(scope, status, started)
            await send(message)

        try:
            with audit.tagged(tags):
                await self.app(scope, receive, send_observed)
        finally:
            if status is None:  # no response was started: the server answers 500
                status = 500
                self._observe(scope, status, started)
            if "token_id" in tags:
                params = scope.get("path_params") or {}
                _call_audit.add(
                    audit.ApiRequest(
                        actor=state.get("username") or "?",
                        project_id=params.get("project_id"),
                        dataset_id=params.get("dataset_id"),
                        method=scope["method"],
                        route=_template(scope),
                        status=status,
                        token_id=tags["token_id"],
                    )
                )

    @staticmethod
    def _observe(scope: Scope, status: int, started: float) -> None:
        REQUEST_SECONDS.labels(_template(scope), scope["method"], str(status)).observe(time.perf_counter() - started)


class _Guard:
    """Caps request bodies and marks every API answer as private and not to be sniffed.

    A body over its limit is refused with 413 before it is read whole: at once when its
    ``Content-Length`` says so, else as soon as the streamed (chunked) bytes pass it.
    Multipart uploads may be as large as ``OREO_MAX_UPLOAD_MB`` (plus room for the form's
    other fields); any other body, JSON, as ``OREO_MAX_JSON_MB``.
    """

    FORM_SLACK = 1 << 20

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        limit, setting = self._limit(headers)

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer = MutableHeaders(scope=message)
                answer.setdefault("Cache-Control", "no-store")
                answer["X-Content-Type-Options"] = "nosniff"
            await send(message)

        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await self._too_large(limit, setting)(scope, receive, send_guarded)
            return
        seen = 0

        async def receive_counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:  # FastAPI passes an HTTPException raised while reading the body on to its handler
                    raise HTTPException(413, _too_large_message(limit, setting))
            return message

        await self.app(scope, receive_counted, send_guarded)

    def _limit(self, headers: Headers) -> tuple[int, str]:
        settings = get_settings()
        if headers.get("content-type", "").lower().startswith("multipart/form-data"):
            return settings.max_upload_mb * 2**20 + self.FORM_SLACK, "OREO_MAX_UPLOAD_MB"
        return settings.max_json_mb * 2**20, "OREO_MAX_JSON_MB"

    @staticmethod
    def _too_large(limit: int, setting: str) -> ASGIApp:
        body = errors.error_document(413, "too_large", _too_large_message(limit, setting))
        return errors.error_response(413, body)


def _too_large_message(limit: int, setting: str) -> str:
    return f"the request body is larger than {limit // 2**20} MiB ({setting}); send less"


def _template(scope: Scope) -> str:
    """The matched route's path template (``/api/v1/change-requests/{cr_id}``), or "-"."""
    return getattr(scope.get("route"), "path", None) or "-"


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    if os.environ.get(WARM_ENGINE_ENV, "1") != "0":
        engine.start_in_background(warm_up=warmup.warm_up)
    warmup.keep_prepared()  # file lists built ahead while it serves (docs/running.md)
    _call_audit.start()
    try:
        yield
    finally:
        _call_audit.stop()
        warmup.stop_preparing()


def create_app() -> FastAPI:
    """The API: ``/api/v1/...``, ``/metrics``, OpenAPI at ``/openapi.json`` and docs at ``/docs``."""
    reactions.install()  # notifications and metrics follow the domain's events; the collector serves /metrics
    app = FastAPI(
        title="Oreo API",
        version="1",
        summary="Review-first editing of Delta Lake tables: the same operations as the oreo CLI.",
        lifespan=_lifespan,
    )
    errors.install(app)
    app.include_router(routes.router)
    app.include_router(live.router)

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        """Prometheus text format of the default registry (core.metrics' domain metrics and the request latency)."""
        return Response(prometheus_client.generate_latest(), media_type=prometheus_client.CONTENT_TYPE_LATEST)

    app.state.routes = [
        r for r in [*routes.router.routes, *live.router.routes, *app.router.routes] if isinstance(r, Route)
    ]
    app.openapi = lambda: _published_schema(app)  # type: ignore[method-assign]
    app.add_middleware(_Guard)
    app.add_middleware(_Observe)
    return app


def _published_schema(app: FastAPI) -> dict[str, Any]:
    """FastAPI's OpenAPI document, with form fields as a multipart body can send them.

    A form has no null: an optional field is one left out, so ``anyOf [X, null]`` becomes ``X``
    (else a client sends the text "null" and is refused).
    """
    if app.openapi_schema is None:
        document = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes, openapi_version="3.1.0"
        )
        forms = {
            operation["requestBody"]["content"]["multipart/form-data"]["schema"].get("$ref", "").rsplit("/", 1)[-1]
            for path in document.get("paths", {}).values()
            for operation in path.values()
            if "multipart/form-data" in operation.get("requestBody", {}).get("content", {})
        }
        for name, schema in document.get("components", {}).get("schemas", {}).items():
            if name in forms:
                for field in schema.get("properties", {}).values():
                    options = [o for o in field.get("anyOf", []) if o.get("type") != "null"]
                    if len(options) == 1 and len(field["anyOf"]) == 2:
                        del field["anyOf"]
                        field.update(options[0])
        app.openapi_schema = document
    return app.openapi_schema


def serve(*, host: str = "127.0.0.1", port: int = 8600) -> None:
    """Run the API under uvicorn until interrupted."""
    import uvicorn

    open_catalog()  # a bad catalog URL fails here, before the server listens
    uvicorn.run(create_app(), host=host, port=port, log_level="info", access_log=False)
