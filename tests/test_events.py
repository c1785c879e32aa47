"""The domain's events reach their subscribers, a failing subscriber never reaches the publisher,
and what a process reacts with is what its composition root installed (``core.reactions``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from core import events, reactions
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, ChangeRequestRow, DatasetRow
from core.notify import inbox
from core.projects import create_project

CR = "cr_00000000000000e1"


@pytest.fixture
def bare() -> Iterator[None]:
    """A process whose composition root installed nothing; wired again afterwards, as the suite runs."""
    events.unsubscribe_all()
    yield
    events.unsubscribe_all()
    reactions.install()


@pytest.fixture
def requested(catalog: Catalog) -> Catalog:
    """Project demo with ed (editor, the author), al (approver) and one open request of ed's."""
    create_project(catalog, "demo")
    for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER)):
        create_user(catalog, name, password=f"{name}-password-1")
        add_member(catalog, "demo", name, role)
    with catalog.session() as s:
        s.add(DatasetRow(project_id="demo", dataset_id="people", created_by="al", delta_version=0))
        s.flush()
        s.add(
            ChangeRequestRow(
                id=CR, project_id="demo", dataset_id="people", author="ed", title="Fix ages", state="open",
                base_version=0, rows=1, cells=1,
            )
        )  # fmt: skip
    return catalog


def _submitted(catalog: Catalog) -> events.Submitted:
    return events.Submitted(catalog=catalog, project="demo", dataset="people", cr_id=CR, actor="ed")


def test_an_event_reaches_the_subscribers_of_its_kind_and_of_its_base_kinds(bare: None) -> None:
    seen: list[tuple[str, events.Event]] = []
    events.subscribe(events.Revised, lambda e: seen.append(("revised", e)))
    events.subscribe(events.RequestEvent, lambda e: seen.append(("any request", e)))
    events.subscribe(events.StagesTimed, lambda e: seen.append(("stages", e)))
    revised = events.Revised(catalog=None, project="p", dataset="d", cr_id=CR, actor="ed", revision=2)  # type: ignore[arg-type]

    events.publish(revised)

    assert seen == [("revised", revised), ("any request", revised)]


def test_a_handler_subscribes_once(bare: None) -> None:
    seen: list[events.Event] = []

    def handler(event: events.Event) -> None:
        seen.append(event)

    events.subscribe(events.StagesTimed, handler)
    events.subscribe(events.StagesTimed, handler)
    events.publish(events.StagesTimed(stages=()))

    assert len(seen) == 1


def test_a_failing_subscriber_is_logged_and_the_others_still_run(bare: None, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def broken(_event: events.Event) -> None:
        raise RuntimeError("the outbox is full")

    events.subscribe(events.StagesTimed, broken)
    events.subscribe(events.StagesTimed, lambda _e: seen.append("after"))
    with caplog.at_level(logging.WARNING, logger="core.events"):
        events.publish(events.StagesTimed(stages=()))  # raises nothing

    assert seen == ["after"]
    assert "a subscriber of StagesTimed failed" in caplog.text
    assert "the outbox is full" in caplog.text


def test_a_bare_process_tells_no_one_and_an_installed_one_tells_the_approvers(bare: None, requested: Catalog) -> None:
    al = get_user(requested, "al")
    events.publish(_submitted(requested))
    assert inbox(requested, al) == []

    reactions.install()
    reactions.install()  # a rerun of the app's script: still one subscription each
    events.publish(_submitted(requested))

    [item] = inbox(requested, al)
    assert (item.event, item.cr_id) == ("submitted", CR)
    assert inbox(requested, get_user(requested, "ed")) == []  # the actor is not told of their own action


@pytest.mark.parametrize(
    "kind",
    [
        events.Submitted,
        events.Revised,
        events.Approved,
        events.Closed,
        events.ChangesRequested,
        events.Commented,
        events.WentStale,
        events.StagesTimed,
    ],
)
def test_install_subscribes_a_reaction_to_every_kind_of_event(kind: type[events.Event]) -> None:
    reactions.install()
    assert events.subscribed(kind), f"nothing reacts to {kind.__name__}"
