"""What happened in the domain, published at one low point; the reactions subscribe to it.

A change request submitted, revised, approved, closed, commented on or gone stale, and the
stage timings of a submit or an approval, are typed events (frozen dataclasses, as the
audit events are). The module that did the work publishes one after its change
committed; notifications, metrics and the SLA tallies subscribe to them at the
composition roots (``core.reactions.install``, called by the app, the API and the CLI at
their start), so no module low in the core calls one above it to say what it did.

A subscriber runs in the publisher's thread, after the change committed: it must not undo
or fail it, so what a subscriber raises is logged and never reaches the publisher.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from core.catalog import Catalog

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Event:
    """Something that happened and is committed."""


@dataclass(frozen=True, kw_only=True)
class RequestEvent(Event):
    """Something happened to a change request; ``actor`` did it (``system`` for Oreo itself)."""

    catalog: Catalog  # the catalog the action committed to
    project: str
    dataset: str | None
    cr_id: str
    actor: str


@dataclass(frozen=True, kw_only=True)
class Submitted(RequestEvent):
    """A change request was submitted (edits or an import) and is open for review."""


@dataclass(frozen=True, kw_only=True)
class Revised(RequestEvent):
    """The author re-staged an open request as ``revision``."""

    revision: int


@dataclass(frozen=True, kw_only=True)
class Approved(RequestEvent):
    """A request was approved and merged into main as ``version``."""

    version: int
    comment: str | None = None


@dataclass(frozen=True, kw_only=True)
class Closed(RequestEvent):
    """A request was rejected or withdrawn (``state``), with its ``reason``."""

    state: str
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class ChangesRequested(RequestEvent):
    """An approver asked the author for changes."""

    reason: str


@dataclass(frozen=True, kw_only=True)
class Commented(RequestEvent):
    """Someone commented on a request, on one of its cells (``row_id``, ``column``) or on the whole."""

    comment: str
    row_id: str | None = None
    column: str | None = None


@dataclass(frozen=True, kw_only=True)
class WentStale(RequestEvent):
    """``main`` moved under an open request and its cells now conflict with those versions."""

    conflict_versions: tuple[int, ...]


@dataclass(frozen=True)
class StageTiming:
    """How long one stage of a submit or an approval took."""

    action: Literal["submit", "approve"]
    stage: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "stage": self.stage, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageTiming:
        return cls(action=data["action"], stage=str(data["stage"]), seconds=float(data["seconds"]))


@dataclass(frozen=True, kw_only=True)
class StagesTimed(Event):
    """A submit or an approval finished (or failed) after these stages."""

    stages: Sequence[StageTiming] = field(default_factory=tuple)


E = TypeVar("E", bound=Event)
_lock = threading.Lock()
_subscribers: dict[type[Event], list[Callable[[Any], None]]] = {}


def subscribe(kind: type[E], handler: Callable[[E], None]) -> None:
    """Call ``handler`` with every published event of ``kind`` or a subclass; once per handler."""
    with _lock:
        handlers = _subscribers.setdefault(kind, [])
        if handler not in handlers:
            handlers.append(handler)


def unsubscribe(kind: type[E], handler: Callable[[E], None]) -> None:
    """Stop calling ``handler`` with events of ``kind`` (nothing happens if it was not subscribed)."""
    with _lock:
        handlers = _subscribers.get(kind, [])
        if handler in handlers:
            handlers.remove(handler)


def unsubscribe_all() -> None:
    """Forget every subscriber (a test that checks what an unwired process does)."""
    with _lock:
        _subscribers.clear()


def subscribed(kind: type[Event]) -> list[Callable[[Any], None]]:
    """The handlers an event of ``kind`` reaches, in the order they subscribed."""
    with _lock:
        return [h for k, handlers in _subscribers.items() if issubclass(kind, k) for h in handlers]


def publish(event: Event) -> None:
    """Tell every subscriber of ``event``'s kind; what one raises is logged, never raised here."""
    for handler in subscribed(type(event)):
        try:
            handler(event)
        except Exception:  # the action already happened: a failed reaction must not undo or fail it
            log.warning("a subscriber of %s failed", type(event).__name__, exc_info=True)
