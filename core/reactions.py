"""What reacts to the domain's events in a running Oreo process, wired once at its start.

The composition roots call ``install()``: the Streamlit app as its script starts, the
API in ``create_app``, the CLI in ``main``. Until then ``core.events.publish`` reaches
nobody: a bare core (a script, a benchmark) changes tables and the catalog but tells no
one. ``install`` is idempotent, so a rerun or a second app in one process changes nothing.
"""

from __future__ import annotations

from core import health, metrics, notify


def install() -> None:
    """Notifications and metrics subscribe to the events; the catalog collector joins the Prometheus registry."""
    notify.subscribe()
    metrics.subscribe()
    health.register_collector()
