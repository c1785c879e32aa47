"""Every error Oreo raises on purpose.

Callers catch ``OreoError`` to show a clean, one-line message; the families below let
them react by kind. How each family is shown (the CLI's exit code, the API's status and
type, how much of the message) is one table above core, ``interface/errors.py``.

    OreoError
    ├── NotFound                    a project, dataset, user, version... does not exist
    ├── AlreadyExists               creating something whose id is taken
    ├── PermissionDenied            the acting user lacks the role for the operation
    ├── AuthenticationFailed        wrong password, unknown user, disabled account
    ├── InvalidInput                bad ids, files, values, options
    │   └── InvalidFile             an uploaded/imported file cannot be read safely
    ├── ValidationFailed            data breaks a rule (duplicate keys, GX critical)
    ├── ConflictError               the operation collides with another change/state
    │   └── StaleRevision           a decision names a revision of a request that moved on
    └── EngineError                 Spark, Delta or DuckDB failed underneath us
        ├── CatalogUnavailable      the catalog database cannot be reached (down, restarting)
        ├── OutOfSpace              the data volume is full; nothing was left half-written
        └── TableDamaged            a Delta table's log or data files are missing or corrupt
"""

from __future__ import annotations


class OreoError(Exception):
    """Root of every error Oreo raises deliberately."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class NotFound(OreoError):
    """Something named by the caller does not exist."""

    def __init__(self, message: str, *, kind: str = "", ident: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.kind = kind
        self.ident = ident


class AlreadyExists(OreoError):
    """An id the caller wants to create is already taken."""

    def __init__(self, message: str, *, kind: str = "", ident: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.ident = ident


class PermissionDenied(OreoError):
    """The acting user does not hold the role the operation needs."""

    def __init__(self, message: str, *, user: str = "", project_id: str = "", required: str = "") -> None:
        super().__init__(message)
        self.user = user
        self.project_id = project_id
        self.required = required


class AuthenticationFailed(OreoError):
    """Sign-in failed. The message never says whether the user exists."""


class InvalidInput(OreoError):
    """The caller passed something Oreo cannot accept."""

    def __init__(self, message: str, *, field: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.field = field


class InvalidFile(InvalidInput):
    """A data file is unreadable, malformed, empty or of an unsupported type."""

    def __init__(self, message: str, *, path: str = "", hint: str | None = None) -> None:
        super().__init__(message, field="file", hint=hint)
        self.path = path


class ValidationFailed(OreoError):
    """Data breaks a rule that must hold before it may be committed."""

    def __init__(self, message: str, *, offending: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.offending = offending


class ConflictError(OreoError):
    """The operation collides with a concurrent change or the object's current state."""


class StaleRevision(ConflictError):
    """An approval, rejection or request for changes names a revision the request is no longer at.

    ``state`` and ``revision`` are the request's now, ``reviewed`` the revision the caller saw
    (None when only a digest was given).
    """

    def __init__(self, message: str, *, cr_id: str, state: str, revision: int | None, reviewed: int | None) -> None:
        super().__init__(message)
        self.cr_id = cr_id
        self.state = state
        self.revision = revision
        self.reviewed = reviewed


class EngineError(OreoError):
    """Spark, Delta or DuckDB failed in a way the user cannot fix by changing input."""


class CatalogUnavailable(EngineError):
    """The catalog database cannot be reached (down or restarting); retry once it is back."""


class OutOfSpace(EngineError):
    """A write ran out of disk space; what it had written is removed. Free space and retry."""

    def __init__(self, message: str, *, path: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path


class TableDamaged(EngineError):
    """A Delta table's log or data files are missing or corrupt; ``path`` names the damaged file."""

    def __init__(self, message: str, *, path: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path
