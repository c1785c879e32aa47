"""Change request threads and revisions: cell comments, request changes, revise, approve a later revision."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from core import change_requests as crs
from core import maintenance, merge, reads, sessions
from core.auth import SYSTEM, Role, add_member, create_user, get_user
from core.catalog import Catalog, CommentRow, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, layout_for
from core.errors import ConflictError, EngineError, InvalidInput, PermissionDenied
from core.projects import create_project
from core.sessions import SetCell

pytestmark = pytest.mark.spark


def _switch(env: dict[str, str], mp: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        mp.setenv(name, value)
    get_settings.cache_clear()
    reset_catalogs()


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("revisions")
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


@pytest.fixture
def catalog(env: dict[str, str], data_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    _switch(env, monkeypatch)
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
