"""Change request threads and revisions: cell comments, request changes, revise, approve a later revision."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.thread_views import cell_notes
from core import change_requests as crs
from core import imports, maintenance, merge, reads, sessions
from core.auth import SYSTEM, Role, add_member, create_user, get_user
from core.catalog import Catalog, CommentRow, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, layout_for
from core.errors import ConflictError, EngineError, InvalidInput, PermissionDenied
from core.projects import create_project
from core.sessions import SetCell
from tests.test_cli import assert_one_error_line, run

pytestmark = pytest.mark.spark


def _switch(env: dict[str, str], mp: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        mp.setenv(name, value)
    get_settings.cache_clear()
    reset_catalogs()


def _seed(base: Path) -> dict[str, str]:
    """Project demo with editors ed and vi, approvers al and bo, and dataset people (10 rows) under ``base``."""
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    source = base / "people.csv"
    source.write_text("id,name,age\n" + "".join(f"{i},name {i},{20 + i}\n" for i in range(1, 11)))
    with pytest.MonkeyPatch.context() as mp:
        _switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER), ("bo", Role.APPROVER), ("vi", Role.EDITOR)):
            create_user(catalog, name, password=f"{name}-password-1")
            add_member(catalog, "demo", name, role)
        create_dataset(catalog, "demo", "people", source, key="id")
        reset_catalogs()
    get_settings.cache_clear()
    return env


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return _seed(tmp_path_factory.mktemp("revisions"))


@pytest.fixture
def catalog(env: dict[str, str], data_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    _switch(env, monkeypatch)
    yield open_catalog()


@pytest.fixture(scope="module")
def own_env(spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """A workspace of their own for the tests at the end, whose rows and sessions the tests above leave alone."""
    return _seed(tmp_path_factory.mktemp("revisions-own"))


@pytest.fixture
def own_catalog(own_env: dict[str, str], data_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    _switch(own_env, monkeypatch)
    yield open_catalog()


def _submit(catalog: Catalog, ops: list[sessions.EditOp]) -> crs.ChangeRequest:
    ed = get_user(catalog, "ed")
    session = sessions.open_session(catalog, "demo", "people", actor=ed)
    sessions.apply_edits(catalog, session.session_id, ops, actor=ed)
    return crs.submit_change_request(catalog, session.session_id, actor=ed, title="Fix ages")


def _staged(path: Path) -> dict[str, int]:
    rows = reads.cursor().execute("SELECT row_id, age FROM delta_scan(?) ORDER BY row_id", [str(path)]).fetchall()
    return {r[0]: r[1] for r in rows}


def _close_all(catalog: Catalog, *ids: str) -> None:
    ed = get_user(catalog, "ed")
    for cr_id in ids:
        if crs.get_change_request(catalog, cr_id, actor=ed).state in crs.IN_REVIEW:
            crs.withdraw_change_request(catalog, cr_id, actor=ed)


def test_request_changes_then_revise_keeps_id_and_thread_and_approves_revision_2(catalog: Catalog) -> None:
    ed, al = get_user(catalog, "ed"), get_user(catalog, "al")
    cr = _submit(catalog, [SetCell("2", "age", "200")])
    layout = layout_for("demo", "people")
    crs.add_comment(catalog, cr.id, "200 looks wrong", actor=al, row_id="2", column="age")

    asked = crs.request_changes(catalog, cr.id, "age 200 is impossible", actor=al)
    assert asked.state == crs.CRState.CHANGES_REQUESTED
    with pytest.raises(ConflictError, match="changes were requested"):
        merge.approve_change_request(catalog, cr.id, actor=al)

    # The author edits the same session again: it is their current one on the dataset.
    current = sessions.current_session(catalog, "demo", "people", actor=ed)
    assert current is not None and current.session_id == cr.session_id
    sessions.apply_edits(catalog, current.session_id, [SetCell("2", "age", "32")], actor=ed)
    revised = crs.revise_change_request(catalog, cr.id, actor=ed)

    assert (revised.id, revised.state, revised.revision) == (cr.id, crs.CRState.OPEN, 2)
    assert revised.validation_run_id != cr.validation_run_id
    thread = crs.comments(catalog, cr.id, actor=ed)
    assert [(c.author, c.body, c.row_id, c.column) for c in thread] == [
        ("al", "200 looks wrong", "2", "age"),
        ("al", "age 200 is impossible", None, None),
    ]
    revs = crs.revisions(catalog, cr.id, actor=ed)
    assert [(r.number, r.rows, r.cells, r.validation_run_id) for r in revs] == [
        (1, 1, 1, cr.validation_run_id),
        (2, 1, 1, revised.validation_run_id),
    ]
    # Both revisions' staging tables are kept while the request is open; readers use revision 2's.
    assert _staged(layout.staging(cr.id)) == {"2": 200}
    assert _staged(layout.staging(cr.id, 2)) == {"2": 32}
    assert crs.staging_path(layout, revised) == layout.staging(cr.id, 2)
    assert [(c.row_id, c.column, c.new) for c in crs.diff_change_request(catalog, cr.id, actor=al).changes] == [
        ("2", "age", "32")
    ]
    # The session is frozen again.
    with pytest.raises(ConflictError, match="was submitted"):
        sessions.apply_edits(catalog, current.session_id, [SetCell("2", "age", "33")], actor=ed)

    merged = merge.approve_change_request(catalog, cr.id, actor=al)
    assert merged.state == crs.CRState.MERGED
    page = reads.read_page(layout.main, order_by="row_id", limit=20).rows
    assert int(page.loc[page["row_id"] == "2", "age"].iloc[0]) == 32
    assert not layout.staging(cr.id).exists() and not layout.staging(cr.id, 2).exists()
    states = [(h.state, h.revision) for h in crs.state_history(catalog, cr.id, actor=ed)]
    assert states == [("open", 1), ("changes_requested", 1), ("open", 2), ("merged", None)]


def test_state_machine_refusals(catalog: Catalog) -> None:
    ed, al, vi = get_user(catalog, "ed"), get_user(catalog, "al"), get_user(catalog, "vi")
    cr = _submit(catalog, [SetCell("3", "age", "40")])
    with pytest.raises(PermissionDenied):
        crs.request_changes(catalog, cr.id, "not yours to ask", actor=vi)  # an editor, not an approver
    with pytest.raises(InvalidInput, match="reason"):
        crs.request_changes(catalog, cr.id, "  ", actor=al)
    with pytest.raises(ConflictError, match="only a request with changes requested"):
        crs.revise_change_request(catalog, cr.id, actor=ed)
    crs.request_changes(catalog, cr.id, "please check", actor=al)
    with pytest.raises(ConflictError, match="changes can only be requested on an open request"):
        crs.request_changes(catalog, cr.id, "again", actor=al)
    with pytest.raises(PermissionDenied, match="only the author"):
        crs.revise_change_request(catalog, cr.id, actor=vi)
    # A request with changes requested can still be rejected.
    rejected = crs.reject_change_request(catalog, cr.id, actor=al, reason="never mind")
    assert rejected.state == crs.CRState.REJECTED
    with pytest.raises(ConflictError):
        crs.revise_change_request(catalog, cr.id, actor=ed)


def test_author_cannot_request_changes_on_own_request(catalog: Catalog) -> None:
    al = get_user(catalog, "al")
    session = sessions.open_session(catalog, "demo", "people", actor=al)
    sessions.apply_edits(catalog, session.session_id, [SetCell("4", "age", "41")], actor=al)
    cr = crs.submit_change_request(catalog, session.session_id, actor=al)
    with pytest.raises(PermissionDenied, match="cannot request changes"):
        crs.request_changes(catalog, cr.id, "self review", actor=al)
    crs.withdraw_change_request(catalog, cr.id, actor=al)


def test_changes_requested_request_can_be_withdrawn_and_every_revision_is_removed(catalog: Catalog) -> None:
    ed, al = get_user(catalog, "ed"), get_user(catalog, "al")
    cr = _submit(catalog, [SetCell("5", "age", "50")])
    layout = layout_for("demo", "people")
    crs.request_changes(catalog, cr.id, "first", actor=al)
    sessions.apply_edits(catalog, cr.session_id or "", [SetCell("5", "age", "51")], actor=ed)
    crs.revise_change_request(catalog, cr.id, actor=ed)
    crs.request_changes(catalog, cr.id, "second", actor=al)
    sessions.apply_edits(catalog, cr.session_id or "", [SetCell("5", "age", "52")], actor=ed)
    third = crs.revise_change_request(catalog, cr.id, actor=ed)
    assert third.revision == 3
    assert all((layout.staging(cr.id, r) / "_delta_log").is_dir() for r in (1, 2, 3))
    # Cleanup keeps every revision's table of a request in review...
    report = maintenance.cleanup(catalog, actor=SYSTEM, ttl_hours=0, dry_run=True)
    assert not any(cr.id in label for label in report["staging_removed"] + report["sessions_removed"])
    crs.request_changes(catalog, cr.id, "third", actor=al)
    withdrawn = crs.withdraw_change_request(catalog, cr.id, actor=ed)
    assert withdrawn.state == crs.CRState.WITHDRAWN
    assert not any(layout.staging(cr.id, r).exists() for r in (1, 2, 3))
    assert not layout.session_dir(cr.session_id or "").exists()
    # A revision's table left behind (say, by a crash) is known as the closed request's and cleaned up.
    (layout.staging(cr.id, 2) / "_delta_log").mkdir(parents=True)
    done = maintenance.cleanup(catalog, actor=SYSTEM)
    assert f"demo/people/{cr.id}--r2" in done["staging_removed"]
    assert not layout.staging(cr.id, 2).exists()


def test_cell_comment_validation(catalog: Catalog) -> None:
    vi = get_user(catalog, "vi")
    cr = _submit(catalog, [SetCell("6", "age", "60")])
    comment = crs.add_comment(catalog, cr.id, "why 60?", actor=vi, row_id="6", column="age")
    assert (comment.author, comment.row_id, comment.column) == ("vi", "6", "age")
    with pytest.raises(InvalidInput, match="row '7' is not one of the rows"):
        crs.add_comment(catalog, cr.id, "x", actor=vi, row_id="7", column="age")
    with pytest.raises(InvalidInput, match="no column 'height'"):
        crs.add_comment(catalog, cr.id, "x", actor=vi, row_id="6", column="height")
    with pytest.raises(InvalidInput, match="both a row and a column"):
        crs.add_comment(catalog, cr.id, "x", actor=vi, row_id="6")
    with pytest.raises(InvalidInput, match="empty"):
        crs.add_comment(catalog, cr.id, " ", actor=vi, row_id="6", column="age")
    assert len(crs.comments(catalog, cr.id, actor=vi)) == 1
    _close_all(catalog, cr.id)


def test_comments_are_append_only_in_the_database(catalog: Catalog) -> None:
    cr = _submit(catalog, [SetCell("8", "age", "80")])
    crs.add_comment(catalog, cr.id, "keep me", actor=get_user(catalog, "vi"))
    with catalog.engine.connect() as connection, pytest.raises(DBAPIError, match="append-only"):
        connection.execute(text("UPDATE cr_comments SET body = 'changed' WHERE cr_id = :c"), {"c": cr.id})
    with catalog.engine.connect() as connection, pytest.raises(DBAPIError, match="append-only"):
        connection.execute(text("DELETE FROM cr_comments WHERE cr_id = :c"), {"c": cr.id})
    with pytest.raises(EngineError, match="append-only"), catalog.session() as s:
        row = s.query(CommentRow).filter(CommentRow.cr_id == cr.id).one()
        row.body = "changed through the ORM"
    assert [c.body for c in crs.comments(catalog, cr.id, actor=get_user(catalog, "vi"))] == ["keep me"]
    _close_all(catalog, cr.id)


def test_comments_are_append_only_on_postgres(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OREO_DATABASE_URL", postgres_url)
    get_settings.cache_clear()
    reset_catalogs()
    catalog = open_catalog()
    assert catalog.engine.dialect.name == "postgresql"
    with catalog.engine.begin() as conn:
        conn.execute(text("INSERT INTO projects (id, name, created_at) VALUES ('pgthread', 'x', now())"))
        conn.execute(
            text(
                "INSERT INTO datasets (project_id, dataset_id, created_by, created_at) "
                "VALUES ('pgthread', 'd', 'x', now())"
            )
        )
        conn.execute(
            text(
                "INSERT INTO change_requests (id, project_id, dataset_id, author, title, description, state, "
                "base_version, rows, cells, created_at, updated_at) "
                "VALUES ('cr_pgthread', 'pgthread', 'd', 'x', 't', '', 'open', 0, 0, 0, now(), now())"
            )
        )
        conn.execute(
            text(
                "INSERT INTO cr_comments (cr_id, author, ts, body, row_id, column_name) "
                "VALUES ('cr_pgthread', 'x', now(), 'kept', '1', 'age')"
            )
        )
    for statement in ("UPDATE cr_comments SET body = 'changed'", "DELETE FROM cr_comments"):
        with pytest.raises(DBAPIError, match="append-only"), catalog.engine.begin() as conn:
            conn.execute(text(f"{statement} WHERE cr_id = 'cr_pgthread'"))
    with catalog.engine.connect() as conn:
        assert conn.execute(text("SELECT body FROM cr_comments WHERE cr_id = 'cr_pgthread'")).scalar_one() == "kept"
        assert conn.execute(text("SELECT revision FROM change_requests WHERE id = 'cr_pgthread'")).scalar_one() == 1


# ---------------------------------------------------------------- a request's session, comments per revision, imports


def test_the_session_of_a_request_in_review_cannot_be_discarded(own_catalog: Catalog) -> None:
    ed, al = get_user(own_catalog, "ed"), get_user(own_catalog, "al")
    create_user(own_catalog, "root", password="root-password-1")
    add_member(own_catalog, "demo", "root", Role.ADMIN)
    root = get_user(own_catalog, "root")
    cr = _submit(own_catalog, [SetCell("2", "age", "200")])
    session_id = cr.session_id or ""
    layout = layout_for("demo", "people")

    with pytest.raises(ConflictError) as open_refusal:
        sessions.discard_session(own_catalog, session_id, actor=ed)
    assert str(open_refusal.value) == (
        f"session {session_id} belongs to change request {cr.id} in review; withdraw the request first"
    )
    crs.request_changes(own_catalog, cr.id, "age 200 is impossible", actor=al)
    sessions.apply_edits(own_catalog, session_id, [SetCell("2", "age", "32")], actor=ed)
    for who in (ed, root):  # the author, and an admin discarding someone else's session
        with pytest.raises(ConflictError) as refused:
            sessions.discard_session(own_catalog, session_id, actor=who)
        assert str(refused.value) == (
            f"session {session_id} belongs to change request {cr.id} awaiting revision; withdraw the request first"
        )
    assert layout.session_metadata(session_id).is_file()

    # Nothing was lost: the author revises from the same session.
    revised = crs.revise_change_request(own_catalog, cr.id, actor=ed)
    assert (revised.state, revised.revision) == (crs.CRState.OPEN, 2)

    # Once the request is closed, its session goes with it; a plain open session still discards.
    crs.withdraw_change_request(own_catalog, cr.id, actor=ed)
    assert not layout.session_dir(session_id).exists()
    fresh = sessions.open_session(own_catalog, "demo", "people", actor=ed)
    sessions.apply_edits(own_catalog, fresh.session_id, [SetCell("3", "age", "33")], actor=ed)
    sessions.discard_session(own_catalog, fresh.session_id, actor=ed)
    assert not layout.session_dir(fresh.session_id).exists()


def test_a_cell_comment_keeps_its_revision_and_shows_only_in_that_revisions_diff(
    own_catalog: Catalog,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ed, al = get_user(own_catalog, "ed"), get_user(own_catalog, "al")
    cr = _submit(own_catalog, [SetCell("4", "age", "400")])
    first = crs.add_comment(own_catalog, cr.id, "400?", actor=al, row_id="4", column="age")
    assert first.revision == 1
    crs.request_changes(own_catalog, cr.id, "fix the age", actor=al)
    sessions.apply_edits(own_catalog, cr.session_id or "", [SetCell("4", "age", "40")], actor=ed)
    crs.revise_change_request(own_catalog, cr.id, actor=ed)
    second = crs.add_comment(own_catalog, cr.id, "40 is fine", actor=al, row_id="4", column="age")

    thread = crs.comments(own_catalog, cr.id, actor=ed)
    assert [(c.body, c.row_id, c.revision) for c in thread] == [
        ("400?", "4", 1),
        ("fix the age", None, 1),
        ("40 is fine", "4", 2),
    ]
    assert second.revision == 2
    # Revision 2's diff shows only the comment made on it beside the cell; revision 1's, only the first.
    assert cell_notes(thread, 2) == {("4", "age"): ["al: 40 is fine"]}
    assert cell_notes(thread, 1) == {("4", "age"): ["al: 400?"]}

    shown = run(capsys, "--json", "cr", "show", cr.id)
    assert shown.code == 0, shown.err
    assert [(c["text"], c["revision"]) for c in shown.json()["thread"]] == [
        ("400?", 1),
        ("fix the age", 1),
        ("40 is fine", 2),
    ]
    human = run(capsys, "cr", "show", cr.id)
    assert "(revision 1) al on row 4 · age: 400?" in human.out
    assert "(revision 2) al on row 4 · age: 40 is fine" in human.out

    # A closing comment is on the revision the request ended at.
    crs.reject_change_request(own_catalog, cr.id, actor=al, reason="not now")
    assert [(c.body, c.revision) for c in crs.comments(own_catalog, cr.id, actor=ed)][-1] == ("not now", 2)


def test_an_import_is_not_sent_back_for_changes_nor_revised(
    own_catalog: Catalog,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ed, al = get_user(own_catalog, "ed"), get_user(own_catalog, "al")
    extra = tmp_path / "more.csv"
    extra.write_text("id,name,age\n11,name 11,31\n")
    cr, _ = imports.import_file(own_catalog, "demo", "people", extra, actor=ed)
    assert cr.kind == "import"

    with pytest.raises(ConflictError) as asked:
        crs.request_changes(own_catalog, cr.id, "wrong file", actor=al)
    assert str(asked.value) == (
        f"import requests are revised by importing again: change request {cr.id} stages a file, not edits; "
        "reject it with a reason instead"
    )
    assert crs.get_change_request(own_catalog, cr.id, actor=al).state == crs.CRState.OPEN
    assert_one_error_line(
        run(capsys, "cr", "request-changes", cr.id, "--as", "al", "--reason", "wrong file"),
        "import requests are revised by importing again: .* reject it with a reason instead$",
    )
    assert_one_error_line(
        run(capsys, "cr", "revise", cr.id, "--as", "ed"),
        f"import requests are revised by importing again: change request {cr.id} stages a file, not edits; "
        "withdraw it and import a corrected file$",
    )
    # What the approver does instead: reject with a reason, which reaches the author's thread.
    rejected = crs.reject_change_request(own_catalog, cr.id, actor=al, reason="wrong file: use the May export")
    assert rejected.state == crs.CRState.REJECTED
    assert [c.body for c in crs.comments(own_catalog, cr.id, actor=ed)] == ["wrong file: use the May export"]
