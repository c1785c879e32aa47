"""Presence: who else has a Table or Review page open, kept in the catalog and cleaned up by each beat."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from core import presence
from core.auth import Role, User, add_member, create_user, get_user
from core.catalog import Catalog, ChangeRequestRow, CommentRow, DatasetRow, PresenceRow, utcnow
from core.errors import InvalidInput, NotFound, PermissionDenied
from core.presence import RequestMark
from core.projects import create_project


@pytest.fixture
def people(catalog: Catalog) -> dict[str, User]:
    create_project(catalog, "demo")
    create_project(catalog, "other")
    for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER), ("bo", None)):
        create_user(catalog, name, password=f"{name}-password-1", display_name=name.title())
        if role is not None:
            add_member(catalog, "demo", name, role)
    add_member(catalog, "other", "bo", Role.EDITOR)
    with catalog.session() as s:
        s.add(DatasetRow(project_id="demo", dataset_id="people", created_by="ed", delta_version=3))
    return {name: get_user(catalog, name) for name in ("ed", "al", "bo")}


def _age(catalog: Catalog, username: str, seconds: float) -> None:
    with catalog.session() as s:
        s.execute(
            update(PresenceRow)
            .where(PresenceRow.username == username)
            .values(seen_at=utcnow() - timedelta(seconds=seconds), since=utcnow() - timedelta(seconds=seconds))
        )


def test_people_on_one_page_see_each_other_with_name_role_and_since(
    catalog: Catalog, people: dict[str, User]
) -> None:
    page = presence.table_page("demo", "people")
    first = presence.beat(catalog, page, actor=people["ed"])
    assert first.others == [] and first.version == 3
    seen = presence.beat(catalog, page, actor=people["al"])
    assert [(p.username, p.name, p.role) for p in seen.others] == [("ed", "Ed", "editor")]
    back = presence.beat(catalog, page, actor=people["ed"])
    assert [(p.username, p.role) for p in back.others] == [("al", "approver")]
    assert "Al (approver, for " in presence.describe(back.others)
    # Another page of the same project is another room.
    assert presence.beat(catalog, presence.table_page("demo", "orders"), actor=people["al"]).others == []


def test_a_beat_keeps_since_and_moves_seen_at(catalog: Catalog, people: dict[str, User]) -> None:
    page = presence.table_page("demo", "people")
    presence.beat(catalog, page, actor=people["ed"])
    _age(catalog, "ed", 30)
    presence.beat(catalog, page, actor=people["ed"])
    [row] = presence.present(catalog, page, actor=people["al"]).others
    assert utcnow() - row.since >= timedelta(seconds=29)
    assert utcnow() - row.seen_at < timedelta(seconds=5)
    assert presence.describe([row]).startswith("Ed (editor, for 3")


def test_someone_idle_past_the_setting_disappears_and_is_cleaned_up(
    catalog: Catalog, people: dict[str, User], monkeypatch: pytest.MonkeyPatch
) -> None:
    page = presence.table_page("demo", "people")
    presence.beat(catalog, page, actor=people["ed"])
    _age(catalog, "ed", 59)
    assert [p.username for p in presence.beat(catalog, page, actor=people["al"]).others] == ["ed"]
    _age(catalog, "ed", 61)
    assert presence.beat(catalog, page, actor=people["al"]).others == []  # hidden at once

    def stored() -> int:
        with catalog.session() as s:
            return s.scalar(select(func.count()).select_from(PresenceRow).where(PresenceRow.username == "ed")) or 0

    assert stored() == 1  # deleted by the next clean-up: a beat cleans up once per quarter of the idle time
    presence._cleaned[id(catalog)] -= timedelta(seconds=16)  # 16 s later
    assert presence.beat(catalog, page, actor=people["al"]).others == []
    assert stored() == 0  # the beat deleted the idle row, not only hid it
    monkeypatch.setenv("OREO_PRESENCE_IDLE_S", "5")
    presence.get_settings.cache_clear()
    presence.beat(catalog, page, actor=people["ed"])
    _age(catalog, "ed", 6)
    assert presence.present(catalog, page, actor=people["al"]).others == []


def test_no_presence_without_a_role_in_the_project(catalog: Catalog, people: dict[str, User]) -> None:
    page = presence.table_page("demo", "people")
    presence.beat(catalog, page, actor=people["ed"])
    with pytest.raises(PermissionDenied, match="'bo' has no role in project 'demo'"):
        presence.beat(catalog, page, actor=people["bo"])
    with pytest.raises(PermissionDenied, match="no role"):
        presence.present(catalog, page, actor=people["bo"])
    with catalog.session() as s:  # bo was not written
        assert s.get(PresenceRow, (page.key, "bo")) is None


def test_leaving_removes_the_person_at_once(catalog: Catalog, people: dict[str, User]) -> None:
    page = presence.table_page("demo", "people")
    presence.beat(catalog, page, actor=people["ed"])
    presence.leave(catalog, page, actor=people["ed"])
    assert presence.present(catalog, page, actor=people["al"]).others == []


def test_bad_pages_are_refused(catalog: Catalog, people: dict[str, User]) -> None:
    with pytest.raises(InvalidInput):
        presence.table_page("demo", "../etc")
    with pytest.raises(NotFound, match="unknown change request 'cr_nope'"):
        presence.review_page(catalog, "cr_nope")


def test_the_review_page_watches_its_request(catalog: Catalog, people: dict[str, User]) -> None:
    with catalog.session() as s:
        s.add(ChangeRequestRow(id="cr_1", project_id="demo", dataset_id="people", author="ed", title="t",
                               state="open", base_version=3))  # fmt: skip
    page = presence.review_page(catalog, "cr_1")
    assert page.key == "review/demo/cr_1"
    before = presence.beat(catalog, page, actor=people["al"]).request
    assert before == RequestMark("open", 1, 0, "ed", None, None)
    with catalog.session() as s:
        s.add(CommentRow(cr_id="cr_1", author="ed", body="please look"))
        row = s.get(ChangeRequestRow, "cr_1")
        assert row is not None
        row.revision = 2
    after = presence.beat(catalog, page, actor=people["al"]).request
    assert after is not None
    assert presence.request_news(before, after, me="al") == [
        "ed revised it: revision 2 is the one to review now",
        "ed commented",
    ]
    assert presence.request_news(before, after, me="ed") == []  # nothing is news to whoever did it


@pytest.mark.parametrize(
    ("state", "closed_by", "said"),
    [
        ("merged", "al", ["al changed its state to merged"]),
        ("rejected", "al", ["al changed its state to rejected"]),
        ("changes_requested", None, ["someone changed its state to changes requested"]),
        ("withdrawn", "ed", []),
    ],
)
def test_news_of_a_decision(state: str, closed_by: str | None, said: list[str]) -> None:
    before = RequestMark("open", 1, 0, "ed", None, None)
    after = RequestMark(state, 1, 0, "ed", closed_by, None)
    assert presence.request_news(before, after, me="ed") == said
