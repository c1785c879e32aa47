"""The FastAPI application: ``create_app()`` builds it, ``serve()`` runs it under uvicorn (``oreo api``).

Spark starts in the background when the server starts (core.engine's warm start), so
``/api/v1/health`` answers at once and tells whether the engine is up, starting or down.
Every response passes one middleware that times it into ``oreo_api_request_seconds``
(Prometheus, the default registry served at ``/metrics``) and, for a call made with a
token, writes an ``api_request`` audit event naming the token; the events that core
records during the call carry the token id too (``audit.tagged``).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import prometheus_client
from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from api import errors, routes
from core import audit, engine
from core.catalog import open_catalog

REQUEST_SECONDS = prometheus_client.Histogram(
    "oreo_api_request_seconds",
    "Time to answer an HTTP API request (until its headers), by route template, method and status.",
    ["route", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)


# "0": no warm start (Spark then starts on first use); the page-read benchmark needs only DuckDB.
WARM_ENGINE_ENV = "OREO_API_WARM_ENGINE"


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    if os.environ.get(WARM_ENGINE_ENV, "1") != "0":
        engine.start_in_background()
    yield


def create_app() -> FastAPI:
    """The API: ``/api/v1/...``, ``/metrics``, OpenAPI at ``/openapi.json`` and docs at ``/docs``."""
    app = FastAPI(
        title="Oreo API",
        version="1",
        summary="Review-first editing of Delta Lake tables: the same operations as the oreo CLI.",
        lifespan=_lifespan,
    )
    errors.install(app)
    app.include_router(routes.router)

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        """Prometheus text format of the default registry (core.metrics' domain metrics and the request latency)."""
        return Response(prometheus_client.generate_latest(), media_type=prometheus_client.CONTENT_TYPE_LATEST)

    @app.middleware("http")
    async def _observe(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        tags: dict[str, str] = {}
        request.state.audit_tags = tags
        started = time.perf_counter()
        status = 500
        try:
            with audit.tagged(tags):
                response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = request.scope.get("route")
            template = getattr(route, "path", None) or "-"
            REQUEST_SECONDS.labels(template, request.method, str(status)).observe(time.perf_counter() - started)
            if "token_id" in tags:
                await run_in_threadpool(_audit_call, request.method, template, status, tags["token_id"], request)

    return app


def _audit_call(method: str, route: str, status: int, token_id: str, request: Request) -> None:
    user = getattr(request.state, "username", None) or "?"
    params = request.path_params
    with open_catalog().session() as s:
        audit.record(
            s,
            audit.ApiRequest(
                actor=user,
                project_id=params.get("project_id"),
                dataset_id=params.get("dataset_id"),
                method=method,
                route=route,
                status=status,
                token_id=token_id,
            ),
        )


def serve(*, host: str = "127.0.0.1", port: int = 8600) -> None:
    """Run the API under uvicorn until interrupted."""
    import uvicorn

    open_catalog()  # a bad catalog URL fails here, before the server listens
    uvicorn.run(create_app(), host=host, port=port, log_level="info", access_log=False)
