"""Revisions: a request's session can't be discarded under it, comments keep their revision, imports aren't revised."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.thread_views import cell_notes
from core import change_requests as crs
from core import imports, sessions
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog
from core.datasets import layout_for
from core.errors import ConflictError
from core.sessions import SetCell
from tests.test_cli import assert_one_error_line, run
from tests.test_cr_revisions import _close_all, _submit, catalog, env  # noqa: F401

pytestmark = pytest.mark.spark


def test_the_session_of_a_request_in_review_cannot_be_discarded(catalog: Catalog) -> None:  # noqa: F811
    ed, al = get_user(catalog, "ed"), get_user(catalog, "al")
    create_user(catalog, "root", password="root-password-1")
    add_member(catalog, "demo", "root", Role.ADMIN)
    root = get_user(catalog, "root")
    cr = _submit(catalog, [SetCell("2", "age", "200")])
    session_id = cr.session_id or ""
    layout = layout_for("demo", "people")

    with pytest.raises(ConflictError) as open_refusal:
        sessions.discard_session(catalog, session_id, actor=ed)
    assert str(open_refusal.value) == (
        f"session {session_id} belongs to change request {cr.id} in review; withdraw the request first"
    )
    crs.request_changes(catalog, cr.id, "age 200 is impossible", actor=al)
    sessions.apply_edits(catalog, session_id, [SetCell("2", "age", "32")], actor=ed)
    for who in (ed, root):  # the author, and an admin discarding someone else's session
        with pytest.raises(ConflictError) as refused:
            sessions.discard_session(catalog, session_id, actor=who)
        assert str(refused.value) == (
            f"session {session_id} belongs to change request {cr.id} awaiting revision; withdraw the request first"
        )
    assert layout.session_metadata(session_id).is_file()

    # Nothing was lost: the author revises from the same session.
    revised = crs.revise_change_request(catalog, cr.id, actor=ed)
    assert (revised.state, revised.revision) == (crs.CRState.OPEN, 2)

    # Once the request is closed, its session goes with it; a plain open session still discards.
    crs.withdraw_change_request(catalog, cr.id, actor=ed)
    assert not layout.session_dir(session_id).exists()
    fresh = sessions.open_session(catalog, "demo", "people", actor=ed)
    sessions.apply_edits(catalog, fresh.session_id, [SetCell("3", "age", "33")], actor=ed)
    sessions.discard_session(catalog, fresh.session_id, actor=ed)
    assert not layout.session_dir(fresh.session_id).exists()


def test_a_cell_comment_keeps_its_revision_and_shows_only_in_that_revisions_diff(
    catalog: Catalog,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    ed, al = get_user(catalog, "ed"), get_user(catalog, "al")
    cr = _submit(catalog, [SetCell("4", "age", "400")])
    first = crs.add_comment(catalog, cr.id, "400?", actor=al, row_id="4", column="age")
    assert first.revision == 1
    crs.request_changes(catalog, cr.id, "fix the age", actor=al)
    sessions.apply_edits(catalog, cr.session_id or "", [SetCell("4", "age", "40")], actor=ed)
    crs.revise_change_request(catalog, cr.id, actor=ed)
    second = crs.add_comment(catalog, cr.id, "40 is fine", actor=al, row_id="4", column="age")

    thread = crs.comments(catalog, cr.id, actor=ed)
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
    crs.reject_change_request(catalog, cr.id, actor=al, reason="not now")
    assert [(c.body, c.revision) for c in crs.comments(catalog, cr.id, actor=ed)][-1] == ("not now", 2)


def test_an_import_is_not_sent_back_for_changes_nor_revised(
    catalog: Catalog,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ed, al = get_user(catalog, "ed"), get_user(catalog, "al")
    extra = tmp_path / "more.csv"
    extra.write_text("id,name,age\n11,name 11,31\n")
    cr, _ = imports.import_file(catalog, "demo", "people", extra, actor=ed)
    assert cr.kind == "import"

    with pytest.raises(ConflictError) as asked:
        crs.request_changes(catalog, cr.id, "wrong file", actor=al)
    assert str(asked.value) == (
        f"import requests are revised by importing again: change request {cr.id} stages a file, not edits; "
        "reject it with a reason instead"
    )
    assert crs.get_change_request(catalog, cr.id, actor=al).state == crs.CRState.OPEN
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
    rejected = crs.reject_change_request(catalog, cr.id, actor=al, reason="wrong file: use the May export")
    assert rejected.state == crs.CRState.REJECTED
    assert [c.body for c in crs.comments(catalog, cr.id, actor=ed)] == ["wrong file: use the May export"]
