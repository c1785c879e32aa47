"""One Oreo writer at a time per main table: a lease held in the catalog.

A MERGE is fenced against other merges by Delta's idempotent transaction id, but Delta's
``RESTORE`` ignores transaction ids, so a restore landing between a merge's conflict
check and its commit would go unseen. Both therefore take the table's **writer lease**
for that span: a holder and an expiry on the dataset's catalog row, taken with one
conditional ``UPDATE`` (atomic in SQLite and PostgreSQL alike, so it also fences
processes on other hosts sharing the catalog). A holder that died on this host (its
process is gone) is recognised and replaced at once; one that died elsewhere lapses after
``OREO_WRITER_LEASE_S``. A writer waits up to ``OREO_WRITER_WAIT_S`` for a busy table,
then gives up with a ``ConflictError`` naming who holds it.

A lease this process could not release (the catalog was locked or down as the block
ended) is remembered: a background thread keeps trying to release it, and this process
releases it before it next takes a lease on that table (``release_leftovers``), so neither
a retry of the same operation nor any later writer waits for it to lapse.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import and_, or_, update
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

from core.catalog import Catalog, DatasetRow, utcnow
from core.config import get_settings
from core.errors import CatalogUnavailable, ConflictError


class _Busy(Exception):
    pass


def _holder(what: str) -> str:
    return f"{what} by {socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{uuid.uuid4().hex[:8]}"


def _dead_here(holder: str) -> bool:
    """Whether ``holder`` names a process of this host that no longer runs."""
    try:
        host, pid, _thread, _nonce = holder.rsplit(" by ", 1)[1].split(":")
        if host != socket.gethostname() or int(pid) == os.getpid():
            return False
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (ValueError, IndexError, PermissionError):
        return False  # not our format, or a live process of another user
    return False


# The longest pause between two attempts to release a leftover lease.
RELEASE_RETRY_MAX_S = 5.0

# Leases whose release failed: (catalog url, project, dataset, holder).
_unreleased: set[tuple[str, str, str, str]] = set()
_unreleased_lock = threading.Lock()


def _release(catalog: Catalog, project_id: str, dataset_id: str, holder: str) -> None:
    with catalog.session() as s:
        s.execute(
            update(DatasetRow)
            .where(DatasetRow.project_id == project_id, DatasetRow.dataset_id == dataset_id)
            .where(DatasetRow.writer == holder)
            .values(writer=None, writer_until=None)
            .execution_options(synchronize_session=False)
        )


def release_leftovers(catalog: Catalog, project_id: str, dataset_id: str) -> None:
    """Release this process's leases on the table that an earlier block could not (their blocks have ended).

    Raises:
        CatalogUnavailable: The catalog is still unreachable (the leases stay remembered).
    """
    with _unreleased_lock:
        leftovers = [k for k in _unreleased if k[:3] == (catalog.url, project_id, dataset_id)]
    for key in leftovers:
        _release(catalog, project_id, dataset_id, key[3])  # CatalogUnavailable: still down, keep it for next time
        with _unreleased_lock:
            _unreleased.discard(key)


def _try_take(catalog: Catalog, project_id: str, dataset_id: str, holder: str, lease_s: float) -> bool:
    now = utcnow()
    where = and_(DatasetRow.project_id == project_id, DatasetRow.dataset_id == dataset_id)
    with catalog.session() as s:
        row = s.get(DatasetRow, (project_id, dataset_id))
        free = or_(DatasetRow.writer.is_(None), DatasetRow.writer_until < now)
        if row is not None and row.writer and _dead_here(row.writer):
            free = or_(free, DatasetRow.writer == row.writer)  # still that dead holder: take it over
        taken = s.execute(
            update(DatasetRow)
            .where(where, free)
            .values(writer=holder, writer_until=now + timedelta(seconds=lease_s))
            .execution_options(synchronize_session=False)
        )
        return bool(taken.rowcount)  # type: ignore[attr-defined]


def _current(catalog: Catalog, project_id: str, dataset_id: str) -> str:
    with catalog.session() as s:
        row = s.get(DatasetRow, (project_id, dataset_id))
        return f"{row.writer} (until {row.writer_until:%H:%M:%S} UTC)" if row and row.writer else "another writer"


@contextmanager
def writing(catalog: Catalog, project_id: str, dataset_id: str, *, what: str) -> Iterator[None]:
    """Hold the table's writer lease inside the block.

    Raises:
        ConflictError: Another writer kept the table busy for ``OREO_WRITER_WAIT_S``.
    """
    settings = get_settings()
    holder = _holder(what)
    release_leftovers(catalog, project_id, dataset_id)
    try:
        for attempt in Retrying(
            retry=retry_if_exception_type(_Busy),
            stop=stop_after_delay(settings.writer_wait_s),
            wait=wait_random_exponential(multiplier=0.1, max=2),
            reraise=True,
        ):
            with attempt:
                if not _try_take(catalog, project_id, dataset_id, holder, settings.writer_lease_s):
                    raise _Busy
    except _Busy:
        raise ConflictError(
            f"{project_id}/{dataset_id} is busy: {_current(catalog, project_id, dataset_id)} is writing to it; "
            "try again shortly"
        ) from None
    try:
        yield
    finally:
        try:
            _release(catalog, project_id, dataset_id, holder)
        except CatalogUnavailable:
            # Whatever the block raised (or returned) stands; the lease goes at this process's next take.
            with _unreleased_lock:
                _unreleased.add((catalog.url, project_id, dataset_id, holder))
            threading.Thread(
                target=_keep_releasing,
                args=(catalog, project_id, dataset_id, settings.writer_lease_s),
                name=f"oreo-lease-release-{project_id}-{dataset_id}",
                daemon=True,
            ).start()


def _keep_releasing(catalog: Catalog, project_id: str, dataset_id: str, lease_s: float) -> None:
    """Retry ``release_leftovers`` until the catalog answers (or the lease would have lapsed anyway)."""
    try:
        for attempt in Retrying(
            retry=retry_if_exception_type(CatalogUnavailable),
            stop=stop_after_delay(lease_s),
            wait=wait_random_exponential(multiplier=0.5, max=RELEASE_RETRY_MAX_S),
            reraise=True,
        ):
            with attempt:
                release_leftovers(catalog, project_id, dataset_id)
    except CatalogUnavailable:
        pass  # the lease has lapsed by now
