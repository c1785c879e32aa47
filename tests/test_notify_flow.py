"""Notifications from real review actions: submit, comment, approve (a Spark MERGE), and a request gone stale."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core import change_requests as crs
from core import merge, notify, sessions
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset
from core.projects import create_project
from core.sessions import SetCell
from tests.merge_support import fresh_copy, switch
from tests.test_notify import SECRET, free_port

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """demo/people (5 rows keyed by id) with ed (editor), al (approver) and ada (admin)."""
    base = tmp_path_factory.mktemp("notify")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    source = base / "people.csv"
    source.write_text("id,name,age\n" + "".join(f"{i},name {i},{20 + i}\n" for i in range(1, 6)))
    with pytest.MonkeyPatch.context() as mp:
        switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER), ("ada", Role.ADMIN)):
            create_user(catalog, name, password=f"{name}-password-1")
            add_member(catalog, "demo", name, role)
        create_dataset(catalog, "demo", "people", source, key="id")
        reset_catalogs()
    get_settings.cache_clear()
    return base


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    yield open_catalog()


@pytest.fixture
def posts(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A loopback HTTP receiver, allowed as a webhook target: its URL and every POST it got (headers, raw body)."""
    monkeypatch.setenv("OREO_WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")
    get_settings.cache_clear()
    got: list[tuple[dict[str, str], bytes]] = []
    port = free_port()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{port}/oreo", got
    server.shutdown()
    server.server_close()


def _submit(catalog: Catalog, ops: list[sessions.EditOp], title: str) -> crs.ChangeRequest:
    ed = get_user(catalog, "ed")
    session = sessions.open_session(catalog, "demo", "people", actor=ed)
    sessions.apply_edits(catalog, session.session_id, ops, actor=ed)
    return crs.submit_change_request(catalog, session.session_id, actor=ed, title=title)


def test_submit_comment_approve_reach_the_webhook_in_order_signed(
    catalog: Catalog, posts: tuple[str, list[tuple[dict[str, str], bytes]]]
) -> None:
    url, got = posts
    notify.add_webhook(catalog, "demo", url, SECRET, actor=get_user(catalog, "ada"))
    cr = _submit(catalog, [SetCell("2", "age", "99")], "Fix Two's age")
    assert [i.event for i in notify.inbox(catalog, get_user(catalog, "al"))] == ["submitted"]
    crs.add_comment(catalog, cr.id, "Source?", actor=get_user(catalog, "al"))
    merged = merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "al"), comment="thanks")
    assert merged.state == crs.CRState.MERGED

    report = notify.drain(catalog)
    assert report.failed == [] and report.dead == []
    bodies = [json.loads(body) for _, body in got]
    assert [(b["event"], b["actor"], b["cr_id"]) for b in bodies] == [
        ("submitted", "ed", cr.id),
        ("commented", "al", cr.id),
        ("approved", "al", cr.id),
    ]
    assert bodies[2]["version"] == merged.merged_version and bodies[2]["comment"] == "thanks"
    for headers, body in got:
        assert headers["x-oreo-signature"] == notify.sign(SECRET, body)
    assert [i.event for i in notify.inbox(catalog, get_user(catalog, "ed"))] == ["approved", "commented"]


def test_a_request_that_main_moved_under_tells_its_author_once(catalog: Catalog) -> None:
    stale = _submit(catalog, [SetCell("3", "name", "Three")], "Rename three")
    rival = get_user(catalog, "ada")
    session = sessions.open_session(catalog, "demo", "people", actor=rival)
    sessions.apply_edits(catalog, session.session_id, [SetCell("3", "name", "Tri")], actor=rival)
    first = crs.submit_change_request(catalog, session.session_id, actor=rival, title="Rival rename")
    al = get_user(catalog, "al")
    assert merge.find_conflicts(catalog, stale.id, actor=al) == []
    assert [i.event for i in notify.inbox(catalog, get_user(catalog, "ed"))] == []

    merged = merge.approve_change_request(catalog, first.id, actor=al)
    conflicts = merge.find_conflicts(catalog, stale.id, actor=al)
    assert [(c.row_id, c.column) for c in conflicts] == [("3", "name")]
    merge.find_conflicts(catalog, stale.id, actor=al)  # looked at again: no second notice
    [notice] = [i for i in notify.inbox(catalog, get_user(catalog, "ed")) if i.event == "stale"]
    assert notice.cr_id == stale.id and f"(version {merged.merged_version})" in notice.summary
    assert [i.event for i in notify.inbox(catalog, al)] == ["submitted", "submitted"]


def test_the_sweep_tells_the_author_even_when_no_one_looks_at_the_request(catalog: Catalog) -> None:
    stale = _submit(catalog, [SetCell("4", "name", "Four")], "Rename four")
    untouched = _submit(catalog, [SetCell("5", "name", "Cinq")], "Rename five")
    rival = get_user(catalog, "ada")
    session = sessions.open_session(catalog, "demo", "people", actor=rival)
    sessions.apply_edits(catalog, session.session_id, [SetCell("4", "name", "Quatre")], actor=rival)
    first = crs.submit_change_request(catalog, session.session_id, actor=rival, title="Rival rename")
    assert merge.sweep_stale(catalog) == 0  # main has not moved: nothing to check
    merged = merge.approve_change_request(catalog, first.id, actor=get_user(catalog, "al"))

    # What the app's background drainer and `oreo notify drain` run before sending.
    assert merge.sweep_stale(catalog) == 2  # both open requests are behind main now
    assert merge.sweep_stale(catalog) == 0  # and are not checked again until main moves again
    notices = [i for i in notify.inbox(catalog, get_user(catalog, "ed")) if i.event == "stale"]
    assert [(n.cr_id, f"(version {merged.merged_version})" in n.summary) for n in notices] == [(stale.id, True)]
    assert untouched.id not in {n.cr_id for n in notices}  # behind main, but no conflict

    # Main moves again. Only a commit that changed a row a request stages makes the sweep find
    # that request's conflicts again (finding them reads every staged row: seconds for a big one).
    _rival_merge(catalog, "1", "Uno")
    assert merge.sweep_stale(catalog) == 0  # rows 4 and 5 are as they were: nothing is checked again
    _rival_merge(catalog, "5", "Fünf")
    assert merge.sweep_stale(catalog) == 1  # row 5 changed: only the request that stages it is checked again
    notices = [i for i in notify.inbox(catalog, get_user(catalog, "ed")) if i.event == "stale"]
    assert sorted(n.cr_id for n in notices) == sorted([stale.id, untouched.id])
    assert merge.sweep_stale(catalog) == 0


def _rival_merge(catalog: Catalog, row: str, name: str) -> None:
    """ada changes ``row``'s name and al merges it: a new version of main."""
    rival = get_user(catalog, "ada")
    session = sessions.open_session(catalog, "demo", "people", actor=rival)
    sessions.apply_edits(catalog, session.session_id, [SetCell(row, "name", name)], actor=rival)
    request = crs.submit_change_request(catalog, session.session_id, actor=rival, title=f"Rename {row}")
    merge.approve_change_request(catalog, request.id, actor=get_user(catalog, "al"))
