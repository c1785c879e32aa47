"""One JSON error shape for every failure; a core error's status and type come from ``interface.errors``' table.

    {"error": {"status": 404, "type": "not_found", "message": "unknown dataset 'x'"}}

No traceback ever reaches a response: anything that is not an ``OreoError`` (a bug or an
untranslated library error) is logged and answered with a generic 500.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.routing import Match

from core.errors import OreoError
from interface import errors
from interface.errors import error_document

logger = logging.getLogger("oreo.api")

# The types of the errors Starlette and FastAPI raise themselves (a core error's come from the table).
_HTTP_TYPES = {
    400: "invalid_input",
    401: "unauthenticated",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
}


class ErrorDetail(BaseModel):
    status: int = Field(description="The HTTP status, repeated")
    type: str = Field(description="A stable name for the kind of failure, e.g. not_found")
    message: str = Field(description="One line saying what went wrong and what to do next")
    field: str | None = Field(default=None, description="The request field at fault, when one is")
    offending: list[Any] | None = Field(default=None, description="422: the values that broke a rule")


class ErrorBody(BaseModel):
    """The one error shape every failure is answered with."""

    error: ErrorDetail


def _documented(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


# Every status an ``/api/v1`` route may answer with besides its success, for the OpenAPI document.
RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _documented("Invalid input: a malformed request or a value core refuses (`field` names it)"),
    401: _documented("No token, or a token that is unknown, revoked or expired"),
    403: _documented("The token's user (or its scope) may not do this"),
    404: _documented("No such project, dataset, session, change request or operation"),
    409: _documented("Already exists, or the state moved on (another decision, a newer revision, a conflict)"),
    413: _documented("The request body is over OREO_MAX_JSON_MB (JSON) or OREO_MAX_UPLOAD_MB (uploads)"),
    422: _documented("The data breaks the dataset's rules (`offending` lists the values)"),
    500: _documented("A bug: the server's log has the details"),
    503: _documented("The engine (Spark, DuckDB) or the catalog is unavailable, or the table is damaged"),
}


def oreo_error_document(exc: OreoError) -> tuple[int, dict[str, Any]]:
    """The status and body an ``OreoError`` is answered with (engine errors say only their first line)."""
    status, body, logged = errors.oreo_error_document(exc)
    if logged:
        logger.error("request failed: %s", body["error"]["message"], exc_info=exc)
    return status, body


def error_response(status: int, body: dict[str, Any], headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The one error shape; a 401 asks for a bearer token, a 405 keeps its ``Allow``."""
    sent = dict(headers or {})
    if status == 401:
        sent["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, headers=sent or None)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route of this path answers (Starlette names only the first route's).

    The routes are the ones ``create_app`` lists in ``app.state.routes`` (FastAPI nests an
    included router's routes where ``app.routes`` does not show them).
    """
    methods: set[str] = set()
    for route in getattr(request.app.state, "routes", ()):
        if route.methods and route.matches(request.scope)[0] != Match.NONE:
            methods |= route.methods
    return sorted(methods)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into the one error shape."""

    @app.exception_handler(OreoError)
    async def _oreo(request: Request, exc: OreoError) -> JSONResponse:
        return error_response(*oreo_error_document(exc))

    @app.exception_handler(RequestValidationError)
    async def _request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg', 'invalid')}"
            for e in exc.errors()
        )
        return error_response(400, error_document(400, "invalid_input", f"invalid request: {problems}"))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        kind = _HTTP_TYPES.get(exc.status_code, "error")
        body = error_document(exc.status_code, kind, str(exc.detail))
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return error_response(exc.status_code, body, headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(500, error_document(500, "internal_error", "internal error; see the server's log"))
