"""The rounds a server process runs in the background: stale requests told, the outbox sent.

Every ``interval`` seconds (``OREO_NOTIFY_INTERVAL_S``) one daemon thread checks the open
requests that ``main`` moved under (``core.merge.sweep_stale``: their authors are told
when they now conflict) and sends the notification outbox (``core.notify.drain``). The
app's server starts it; it sits above both modules, so neither calls the other.
"""

from __future__ import annotations

import logging
import threading

from core.catalog import Catalog, open_catalog
from core.config import get_settings
from core.merge import sweep_stale
from core.notify import DrainReport, drain

log = logging.getLogger(__name__)


def one_round(catalog: Catalog, *, limit: int = 100) -> DrainReport:
    """One round now (``oreo notify drain``): stale requests' authors told first, then the outbox sent."""
    sweep_stale(catalog)
    return drain(catalog, limit=limit)

_drainer: threading.Thread | None = None
_drainer_stop = threading.Event()
_drainer_lock = threading.Lock()


def start_background_drainer(catalog: Catalog | None, interval: float | None = None) -> threading.Thread:
    """Drain the outbox every ``interval`` seconds (``OREO_NOTIFY_INTERVAL_S``) in a daemon thread.

    ``catalog`` None: the configured catalog, opened by the thread (a server starts even
    while the catalog is unreachable). One per process: a second call returns the running thread.
    """
    global _drainer
    every = float(interval if interval is not None else get_settings().notify_interval_s)
    with _drainer_lock:
        if _drainer is not None and _drainer.is_alive():
            return _drainer
        _drainer_stop.clear()
        _drainer = threading.Thread(target=_drain_forever, args=(catalog, every), name="oreo-notify", daemon=True)
        _drainer.start()
        return _drainer


def stop_background_drainer(timeout: float = 30.0) -> None:
    """Stop the background drainer (tests, shutdown) and wait for it."""
    global _drainer
    with _drainer_lock:
        thread, _drainer = _drainer, None
    _drainer_stop.set()
    if thread is not None:
        thread.join(timeout)


def _drain_forever(catalog: Catalog | None, every: float) -> None:
    while not _drainer_stop.is_set():
        try:
            sweep_stale(catalog or open_catalog())
        except Exception:  # a table being rewritten, a catalog restarting: the next round checks again
            log.warning("checking open change requests for conflicts failed", exc_info=True)
        try:
            report = drain(catalog or open_catalog())
            if report.failed or report.dead:
                log.warning(
                    "notifications: %d sent, %d failed, %d dead", len(report.sent), len(report.failed), len(report.dead)
                )
        except Exception:  # the catalog may be restarting; the next round tries again
            log.warning("draining the notification outbox failed", exc_info=True)
        _drainer_stop.wait(every)
