"""How a core error is shown: one table that the CLI, the HTTP API and the pages all render from.

One row per ``OreoError`` family, most specific first (the first class an error is an
instance of decides):

    error                   exit  HTTP  type                message
    AuthenticationFailed    1     401   unauthenticated     whole
    PermissionDenied        1     403   permission_denied   whole
    NotFound                1     404   not_found           whole
    AlreadyExists           1     409   already_exists      whole
    ConflictError           1     409   conflict            whole
    ValidationFailed        1     422   validation_failed   whole
    InvalidInput            1     400   invalid_input       whole
    EngineError             1     503   engine_unavailable  first line, the whole error logged
    OreoError (any other)   1     500   internal_error      first line, the whole error logged

*Whole*: the message as core wrote it (one line that says what to do next). Where a front
end has room for one line only (the CLI's ``error:`` line, the API's ``message``), a message
of several lines is cut to its first there all the same. *First line*: an engine failure's
first line says what failed; the rest (a JVM's stack, a driver's text) goes to the log, and
the CLI names the log file (``details in ...``). The front ends do their own logging: they
are told what to log (``Shown.logged``), not how.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from core.errors import (
    AlreadyExists,
    AuthenticationFailed,
    ConflictError,
    EngineError,
    InvalidInput,
    NotFound,
    OreoError,
    PermissionDenied,
    ValidationFailed,
)


class Message(StrEnum):
    """How much of an error's message a person is shown."""

    WHOLE = "whole"
    FIRST_LINE = "first line"


@dataclass(frozen=True)
class ErrorRule:
    """One row of the table: how errors of class ``error`` (and its subclasses) are shown."""

    error: type[OreoError]
    exit_code: int
    status: int
    type: str
    message: Message


ERRORS: tuple[ErrorRule, ...] = (
    ErrorRule(AuthenticationFailed, 1, 401, "unauthenticated", Message.WHOLE),
    ErrorRule(PermissionDenied, 1, 403, "permission_denied", Message.WHOLE),
    ErrorRule(NotFound, 1, 404, "not_found", Message.WHOLE),
    ErrorRule(AlreadyExists, 1, 409, "already_exists", Message.WHOLE),
    ErrorRule(ConflictError, 1, 409, "conflict", Message.WHOLE),
    ErrorRule(ValidationFailed, 1, 422, "validation_failed", Message.WHOLE),
    ErrorRule(InvalidInput, 1, 400, "invalid_input", Message.WHOLE),
    ErrorRule(EngineError, 1, 503, "engine_unavailable", Message.FIRST_LINE),
    # An error of no family above is a bug in the making: answered as one, and logged.
    ErrorRule(OreoError, 1, 500, "internal_error", Message.FIRST_LINE),
)


@dataclass(frozen=True)
class Shown:
    """An error as one front end shows it: its row of the table, the text, and whether to log it whole."""

    rule: ErrorRule
    text: str
    logged: bool


def rule_for(exc: OreoError) -> ErrorRule:
    """The table's row for ``exc``: the first class it is an instance of."""
    return next(rule for rule in ERRORS if isinstance(exc, rule.error))


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its class's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def on_a_page(exc: OreoError) -> Shown:
    """What a page shows of ``exc`` (a page has room for a message of several lines)."""
    rule = rule_for(exc)
    if rule.message is Message.FIRST_LINE:
        return Shown(rule, first_line(exc), logged=True)
    return Shown(rule, str(exc), logged=False)


def on_one_line(exc: OreoError, log: Path | None = None) -> Shown:
    """``exc`` as one line: the CLI's ``error:`` line (``log``: the file it names) or the API's ``message``.

    A first-line error, and a whole one of several lines, is cut to its first line and
    logged; with ``log``, the line says where (unless the message already names a file).
    """
    rule = rule_for(exc)
    message = str(exc)
    if rule.message is Message.FIRST_LINE or "\n" in message:
        text = first_line(exc)
        if log is not None and "details in " not in text:
            text += f" (details in {log})"
        return Shown(rule, text, logged=True)
    return Shown(rule, message, logged=False)


def error_document(status: int, kind: str, message: str, **extra: Any) -> dict[str, Any]:
    """The one error shape of the API: ``{"error": {"status": 404, "type": "not_found", "message": ...}}``."""
    return {"error": {"status": status, "type": kind, "message": message, **extra}}


def oreo_error_document(exc: OreoError) -> tuple[int, dict[str, Any], bool]:
    """The status and body ``exc`` is answered with over HTTP, and whether to log it whole.

    The body's ``message`` is always the first line; ``field`` names the input at fault and
    ``offending`` lists the values that broke a rule, when the error carries them.
    """
    rule = rule_for(exc)
    extra: dict[str, Any] = {}
    if isinstance(exc, ValidationFailed) and exc.offending:
        extra["offending"] = list(exc.offending)
    if isinstance(exc, InvalidInput) and exc.field:
        extra["field"] = exc.field
    logged = rule.message is Message.FIRST_LINE
    return rule.status, error_document(rule.status, rule.type, first_line(exc), **extra), logged
