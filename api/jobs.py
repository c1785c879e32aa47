"""How the API runs a state-changing call: at most once per ``Idempotency-Key``, now or in the background.

* ``Idempotency-Key``: the key row is inserted (primary key: token id + key) before the
  call acts, so a concurrent retry fails to insert and is told the first is still
  running; the first response (status, body, headers) is stored and every retry gets it.
  The same key with another method, path or body is refused. A 5xx answer is not kept,
  so a retry after the engine is back acts again. While the first call runs, its process
  refreshes the key's heartbeat; a retry that finds it older than ``LOST_AFTER`` (the
  process died mid-call) is told the first call was lost, since it may or may not have acted.
* ``Prefer: respond-async``: the call runs in a background thread of this process and
  answers 202 with ``Location: /api/v1/operations/{id}``; the operation's state and result
  live in the catalog, so any replica can answer a poll.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import secrets
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from api.errors import error_document, oreo_error_document
from core.auth import User
from core.catalog import Catalog, IdempotencyKeyRow, OperationRow, utcnow
from core.errors import ConflictError, NotFound, OreoError
from interface.documents import dumps, jsonable

logger = logging.getLogger("oreo.api")

Work = Callable[[], tuple[int, dict[str, Any]]]


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


def request_hash(method: str, path: str, body: Any) -> str:
    text = json.dumps([method, path, body], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _principal(user: User) -> str:
    return user.scope.token_id if user.scope is not None else f"user:{user.username}"


def claim_key(catalog: Catalog, user: User, key: str, fingerprint: str) -> Answer | None:
    """Reserve ``key`` for this call (None), or the stored answer of the call that reserved it first.

    Raises:
        ConflictError: The first call with this key is still running, or it was sent with
            another method, path or body.
    """
    principal = _principal(user)
    if not key or len(key) > 200:
        raise ConflictError("an Idempotency-Key must have 1 to 200 characters")
    try:
        with catalog.session() as s:
            s.add(_key_row(principal, key, fingerprint))
        return None
    except IntegrityError:
        pass
    with catalog.session() as s:
        row = s.get(IdempotencyKeyRow, (principal, key))
        if row is None:  # the first call failed with a 5xx and let the key go: act now
            s.add(_key_row(principal, key, fingerprint))
            return None
        if row.request_hash != fingerprint:
            raise ConflictError(
                f"Idempotency-Key {key!r} was already used for a different request; use a new key for a new request"
            )
        if row.status is None or row.body is None:
            last_sign = row.heartbeat_at or row.created_at
            if utcnow() - last_sign > LOST_AFTER:
                raise ConflictError(
                    f"the request with Idempotency-Key {key!r} stopped before it finished (its API process ended; "
                    f"no sign of it since {last_sign:%Y-%m-%d %H:%M:%S} UTC) and may or may not have acted; "
                    "check the table's history or the change request, then send a new key"
                )
            raise ConflictError(f"the request with Idempotency-Key {key!r} is still running; retry in a moment")
        return Answer(row.status, json.loads(row.body), json.loads(row.headers or "{}"))


def _key_row(principal: str, key: str, fingerprint: str) -> IdempotencyKeyRow:
    now = utcnow()
    return IdempotencyKeyRow(principal=principal, key=key, request_hash=fingerprint, created_at=now, heartbeat_at=now)


@contextmanager
def key_kept_alive(catalog: Catalog, user: User, key: str) -> Iterator[None]:
    """Refresh ``key``'s heartbeat every ``HEARTBEAT`` while the first call with it runs here."""
    principal = _principal(user)

    def touch(now: datetime) -> None:
        with catalog.session() as s:
            row = s.get(IdempotencyKeyRow, (principal, key))
            if row is not None and row.status is None:
                row.heartbeat_at = now

    with _heartbeat(touch, f"key {key!r}"):
        yield


def settle_key(catalog: Catalog, user: User, key: str, answer: Answer | None) -> None:
    """Store the first call's answer under its key, or (None: it failed on the server's side) let the key go."""
    principal = _principal(user)
    with catalog.session() as s:
        if answer is None:
            s.execute(
                delete(IdempotencyKeyRow).where(IdempotencyKeyRow.principal == principal, IdempotencyKeyRow.key == key)
            )
            return
        row = s.get(IdempotencyKeyRow, (principal, key))
        if row is not None:
            row.status = answer.status
            row.body = dumps(answer.body)
            row.headers = json.dumps(answer.headers)


def run_now(work: Work) -> Answer:
    """Run ``work`` here: its answer, or an ``OreoError``'s error answer."""
    try:
        status, body = work()
        return Answer(status, jsonable(body), {})
    except OreoError as exc:
        status, body = oreo_error_document(exc)
        return Answer(status, body, {})


# ---------------------------------------------------------------- async operations

_executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="oreo-api-operation")
# The running process refreshes an operation's heartbeat this often; a poll that finds it
# older than LOST_AFTER (the process was killed or crashed) reports the operation failed.
HEARTBEAT = timedelta(seconds=5)
LOST_AFTER = timedelta(seconds=60)


def start_operation(catalog: Catalog, user: User, kind: str, work: Work) -> Answer:
    """Record an operation, run ``work`` in the background, and answer 202 with where to poll."""
    op_id = secrets.token_hex(12)
    with catalog.session() as s:
        s.add(
            OperationRow(
                id=op_id,
                kind=kind,
                token_id=_principal(user),
                username=user.username,
                state="running",
                created_at=utcnow(),
                heartbeat_at=utcnow(),
            )
        )
    context = contextvars.copy_context()  # the audit tags (token id) go along into the thread
    _executor.submit(context.run, _run_operation, catalog, op_id, work)
    location = f"/api/v1/operations/{op_id}"
    return Answer(202, {"id": op_id, "kind": kind, "state": "running"}, {"Location": location})


def _run_operation(catalog: Catalog, op_id: str, work: Work) -> None:
    def touch(now: datetime) -> None:
        with catalog.session() as s:
            row = s.get(OperationRow, op_id)
            if row is not None and row.state == "running":
                row.heartbeat_at = now

    try:
        with _heartbeat(touch, f"operation {op_id}"):
            answer = run_now(work)
    except Exception as exc:  # a bug: the operation still ends, with a generic error
        logger.error("operation %s failed", op_id, exc_info=exc)
        answer = Answer(500, error_document(500, "internal_error", "internal error; see the server's log"), {})
    with catalog.session() as s:
        row = s.get(OperationRow, op_id)
        if row is None:
            return
        row.finished_at = utcnow()
        row.status = answer.status
        if answer.status < 400:
            row.state, row.result = "succeeded", dumps(answer.body)
        else:
            row.state, row.error = "failed", dumps(answer.body["error"])


@contextmanager
def _heartbeat(touch: Callable[[datetime], None], what: str) -> Iterator[None]:
    """Call ``touch(now)`` every ``HEARTBEAT`` in a thread until the block ends."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(HEARTBEAT.total_seconds()):
            try:
                touch(utcnow())
            except Exception:  # the catalog is briefly unreachable: the next beat tries again
                logger.warning("could not refresh the heartbeat of %s", what, exc_info=True)

    beating = threading.Thread(target=beat, name="oreo-api-heartbeat")
    beating.start()
    try:
        yield
    finally:
        done.set()
        beating.join()


def operation_document(catalog: Catalog, op_id: str, user: User) -> dict[str, Any]:
    """An operation as polled: ``{"id", "kind", "state", "status", "result"?, "error"?}`` (its caller's only).

    A running operation whose heartbeat is older than ``LOST_AFTER`` lost its process (killed,
    crashed or redeployed): it is recorded as failed here, so no poll waits forever.
    """
    with catalog.session() as s:
        row = s.scalar(select(OperationRow).where(OperationRow.id == op_id))
        if row is None or (row.token_id != _principal(user) and row.username != user.username and not user.site_admin):
            raise NotFound(f"unknown operation {op_id!r}", kind="operation", ident=op_id)
        last_sign = row.heartbeat_at or row.created_at
        if row.state == "running" and utcnow() - last_sign > LOST_AFTER:
            row.state, row.status, row.finished_at = "failed", 500, utcnow()
            message = (
                f"the API process running this {row.kind} stopped before it finished (no sign of it since "
                f"{last_sign:%Y-%m-%d %H:%M:%S} UTC); check the table's history, then retry"
            )
            row.error = dumps(error_document(500, "operation_lost", message)["error"])
        doc: dict[str, Any] = {
            "id": row.id,
            "kind": row.kind,
            "state": row.state,
            "created_at": row.created_at,
            "finished_at": row.finished_at,
            "status": row.status,
        }
        if row.result is not None:
            doc["result"] = json.loads(row.result)
        if row.error is not None:
            doc["error"] = json.loads(row.error)
        return doc
