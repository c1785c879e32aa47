"""Inbox page and sidebar badge; the Admin page's Notifications section (AppTest, in-process, no Spark)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from streamlit.testing.v1 import AppTest

from core import notify
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, ChangeRequestRow, DatasetRow, utcnow
from core.config import get_settings
from core.projects import create_project
from tests.page_support import signed_in, texts

INBOX_PAGE = "../pages/inbox.py"
ADMIN_PAGE = "../pages/admin.py"


@pytest.fixture
def workspace(catalog: Catalog) -> Catalog:
    """Project demo (no datasets): ed (editor), al (approver), ada (admin)."""
    create_project(catalog, "demo")
    for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER), ("ada", Role.ADMIN)):
        create_user(catalog, name, password=f"{name}-password-1")
        add_member(catalog, "demo", name, role)
    return catalog


def _event(catalog: Catalog, event: str, actor: str, **extra: object) -> None:
    assert notify.emit(catalog, event, project="demo", dataset="people", cr_id=None, actor=actor, extra=extra) > 0


def _badge(at: AppTest) -> str:
    [link] = [e for e in at.sidebar.get("page_link")]
    return str(link.proto.label)


def test_the_badge_counts_unread_events_and_the_inbox_lists_and_marks_them(workspace: Catalog) -> None:
    _event(workspace, "submitted", "ed")
    _event(workspace, "revised", "ed", revision=2)
    at = signed_in("al")
    assert _badge(at) == "Inbox :red-badge[2 unread]"
    at.switch_page(INBOX_PAGE).run()
    assert not at.exception, at.exception
    assert [m for m in texts(at.markdown) if "demo/people" in m] == [
        ":blue-badge[revised] **ed revised demo/people (revision 2)**",
        ":blue-badge[submitted] **ed submitted demo/people**",
    ]
    assert any("**2** unread of 2" in c for c in texts(at.caption))

    older = notify.inbox(workspace, get_user(workspace, "al"))[-1]
    at.button(key=f"inbox_read_{older.id}").click().run()
    assert _badge(at) == "Inbox :red-badge[1 unread]"
    assert ":blue-badge[submitted] ed submitted demo/people" in texts(at.markdown)  # read: no longer bold

    at.toggle(key="inbox_unread_only").set_value(True).run()
    assert [m for m in texts(at.markdown) if "demo/people" in m] == [
        ":blue-badge[revised] **ed revised demo/people (revision 2)**"
    ]
    at.button(key="inbox_mark_all").click().run()
    assert _badge(at) == "Inbox"
    assert notify.unread_count(workspace, get_user(workspace, "al")) == 0
    assert any("Nothing here yet" in i for i in texts(at.info))

    ed = signed_in("ed", INBOX_PAGE)  # the author was told nothing of their own submit
    assert _badge(ed) == "Inbox" and any("Nothing here yet" in i for i in texts(ed.info))


def test_admin_page_shows_failing_webhooks_and_dead_deliveries(
    workspace: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")  # webhooks reach only public hosts otherwise
    get_settings.cache_clear()
    ada = get_user(workspace, "ada")
    hook = notify.add_webhook(workspace, "demo", "http://127.0.0.1:9/refused", "s3cret-0123456789abcdef", actor=ada)
    _event(workspace, "submitted", "ed")
    at = signed_in("ada", ADMIN_PAGE)
    assert any("Every webhook is delivering" in s for s in texts(at.success))

    now = utcnow()
    for _ in range(notify.MAX_ATTEMPTS):
        notify.drain(workspace, now=now)
        now += timedelta(hours=2)
    at.run()
    assert not at.exception, at.exception
    assert any("1 webhook(s) failing" in e for e in texts(at.error))
    # no datasets here: the service levels, then the Notifications tables
    hooks, dead = (frame.value for frame in at.dataframe[-2:])
    assert hooks[["webhook", "state", "dead"]].values.tolist() == [[hook.id, "failing", 1]]
    assert "ConnectError" in hooks["last error"].iloc[0]
    assert dead[["event", "to", "attempts"]].values.tolist() == [["submitted", hook.id, notify.MAX_ATTEMPTS]]
    assert "s3cret-0123456789abcdef" not in hooks.to_string()


def test_open_request_goes_to_my_requests_for_the_author_and_explains_a_closed_one(workspace: Catalog) -> None:
    with workspace.session() as s:
        s.add(DatasetRow(project_id="demo", dataset_id="people", created_by="ada"))
        s.flush()
        s.add(
            ChangeRequestRow(
                id="cr_00000000000000aa", project_id="demo", dataset_id="people", author="ed", title="Old fix",
                state="rejected", base_version=0, rows=1, cells=1, closed_by="al",
            )
        )  # fmt: skip
    for event, actor in (("submitted", "ed"), ("rejected", "al")):
        notify.emit(workspace, event, project="demo", dataset="people", cr_id="cr_00000000000000aa", actor=actor)

    al = signed_in("al", INBOX_PAGE)
    [item] = notify.inbox(workspace, get_user(workspace, "al"))
    al.button(key=f"inbox_open_{item.id}").click().run()
    assert not al.exception, al.exception
    assert any("`cr_00000000000000aa` (Old fix) is rejected: it left the review queue" in i for i in texts(al.info))
    assert _badge(al) == "Inbox"  # opened: read

    ed = signed_in("ed", INBOX_PAGE)
    [item] = notify.inbox(workspace, get_user(workspace, "ed"))
    assert item.summary == "al rejected “Old fix” on demo/people"
    ed.button(key=f"inbox_open_{item.id}").click().run()
    assert not ed.exception, ed.exception
    assert any(t.value == "My requests" for t in ed.title)


def test_each_event_shows_its_request_as_it_is_now(workspace: Catalog) -> None:
    with workspace.session() as s:
        s.add(DatasetRow(project_id="demo", dataset_id="people", created_by="ada"))
        s.flush()
        for cr_id, state in (("cr_00000000000000bb", "withdrawn"), ("cr_00000000000000cc", "open")):
            s.add(
                ChangeRequestRow(
                    id=cr_id, project_id="demo", dataset_id="people", author="ed", title=f"Fix {state}",
                    state=state, base_version=0, rows=1, cells=1,
                )
            )  # fmt: skip
    for cr_id in ("cr_00000000000000bb", "cr_00000000000000cc"):
        notify.emit(workspace, "submitted", project="demo", dataset="people", cr_id=cr_id, actor="ed")

    al = signed_in("al", INBOX_PAGE)
    assert not al.exception, al.exception
    captions = {c for c in texts(al.caption) if "cr_" in c}
    # Both were "submitted"; one has been withdrawn since.
    assert any("`cr_00000000000000bb` · now :gray-badge[withdrawn]" in c for c in captions), captions
    assert any("`cr_00000000000000cc` · now :blue-badge[open]" in c for c in captions), captions
