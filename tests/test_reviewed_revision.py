"""A decision names the revision it reviewed (issue 24 §1): approve, reject and request changes refuse a stale one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from core import change_requests as crs
from core import engine, merge, sessions, writer
from core.catalog import Catalog, ChangeRequestRow, open_catalog
from core.change_requests import CRState
from core.errors import ConflictError, StaleRevision
from core.sessions import SetCell
from tests.merge_support import fresh_copy, layout, make_pristine, merge_commits, submit, switch, user

pytestmark = pytest.mark.spark

HEX64 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return make_pristine(tmp_path_factory.mktemp("reviewed"))


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    yield open_catalog()


def _revised(catalog: Catalog) -> crs.ChangeRequest:
    """A request ed submitted (revision 1), al sent back, and ed revised: open at revision 2."""
    first = submit(catalog, "ed", [SetCell("2", "name", "two")])
    crs.request_changes(catalog, first.id, "say it in capitals", actor=user(catalog, "al"))
    sessions.apply_edits(catalog, str(first.session_id), [SetCell("2", "name", "TWO")], actor=user(catalog, "ed"))
    revised = crs.revise_change_request(catalog, first.id, actor=user(catalog, "ed"))
    assert (revised.state, revised.revision) == (CRState.OPEN, 2)
    return revised


def test_every_staged_revision_gets_its_own_digest(catalog: Catalog) -> None:
    first = submit(catalog, "ed", [SetCell("2", "name", "two")])
    assert first.digest is not None and HEX64.match(first.digest)
    # The digest is of the staged content: computing it again gives the same one.
    assert crs.staging_digest(layout().staging(first.id, 1)) == first.digest

    revised = _revised(catalog)
    history = crs.revisions(catalog, revised.id, actor=user(catalog, "al"))
    digests = [r.digest for r in history]
    assert [r.number for r in history] == [1, 2]
    assert digests[1] == revised.digest != digests[0]
    assert crs.staging_digest(layout().staging(revised.id, 2)) == revised.digest


def test_approve_without_a_revision_merges_the_current_one_and_names_it(catalog: Catalog) -> None:
    revised = _revised(catalog)

    merged = merge.approve_change_request(catalog, revised.id, actor=user(catalog, "al2"))

    assert (merged.state, merged.revision, merged.digest) == (CRState.MERGED, 2, revised.digest)
    assert len(merge_commits(revised.id)) == 1


def test_approve_of_a_revision_that_moved_on_is_refused_and_nothing_merges(catalog: Catalog) -> None:
    revised = _revised(catalog)
    before = engine.latest_version(layout().main)
    al2 = user(catalog, "al2")

    with pytest.raises(StaleRevision, match=f"^change request {revised.id} is at revision 2 now, not revision 1 "
                       "that you reviewed: reload it and review again$"):  # fmt: skip
        merge.approve_change_request(catalog, revised.id, actor=al2, expected_revision=1)
    with pytest.raises(StaleRevision, match="was staged again since you reviewed it"):
        merge.approve_change_request(catalog, revised.id, actor=al2, expected_revision=2, expected_digest="0" * 64)

    assert engine.latest_version(layout().main) == before and merge_commits(revised.id) == []
    assert crs.get_change_request(catalog, revised.id, actor=al2).state == CRState.OPEN
    merged = merge.approve_change_request(
        catalog, revised.id, actor=al2, expected_revision=2, expected_digest=revised.digest
    )
    assert (merged.state, merged.revision) == (CRState.MERGED, 2)


def test_a_decided_request_is_refused_by_state(catalog: Catalog) -> None:
    cr = submit(catalog, "ed", [SetCell("3", "name", "three")])
    crs.withdraw_change_request(catalog, cr.id, actor=user(catalog, "ed"))

    with pytest.raises(StaleRevision, match=f"change request {cr.id} is withdrawn now, not open as when you reviewed"):
        merge.approve_change_request(catalog, cr.id, actor=user(catalog, "al"), expected_revision=1)
    assert merge_commits(cr.id) == []


def test_reject_and_request_changes_refuse_a_stale_revision(catalog: Catalog) -> None:
    revised = _revised(catalog)
    al2 = user(catalog, "al2")

    with pytest.raises(StaleRevision, match="is at revision 2 now, not revision 1"):
        crs.reject_change_request(catalog, revised.id, actor=al2, reason="no", expected_revision=1)
    with pytest.raises(StaleRevision, match="is at revision 2 now, not revision 1"):
        crs.request_changes(catalog, revised.id, "again", actor=al2, expected_revision=1)
    with pytest.raises(StaleRevision, match="was staged again"):
        crs.reject_change_request(catalog, revised.id, actor=al2, reason="no", expected_digest="f" * 64)
    assert crs.get_change_request(catalog, revised.id, actor=al2).state == CRState.OPEN

    asked = crs.request_changes(
        catalog, revised.id, "again", actor=al2, expected_revision=2, expected_digest=revised.digest
    )
    assert (asked.state, asked.revision) == (CRState.CHANGES_REQUESTED, 2)
    # A request waiting for its author's revision can still be rejected at the revision reviewed.
    rejected = crs.reject_change_request(catalog, revised.id, actor=al2, reason="no", expected_revision=2)
    assert rejected.state == CRState.REJECTED


def test_a_revision_during_the_approval_is_caught_under_the_writer_lease(catalog: Catalog) -> None:
    """The request is sent back and revised after the approval's first check, before its MERGE (no revision given)."""
    cr = submit(catalog, "ed", [SetCell("4", "name", "four")])
    before = engine.latest_version(layout().main)

    def behind_its_back(stage: str) -> None:
        if stage == "merge":
            crs.request_changes(catalog, cr.id, "one more", actor=user(catalog, "al2"))
            sessions.apply_edits(catalog, str(cr.session_id), [SetCell("4", "name", "FOUR")], actor=user(catalog, "ed"))
            crs.revise_change_request(catalog, cr.id, actor=user(catalog, "ed"))

    with pytest.raises(StaleRevision, match=f"change request {cr.id} is at revision 2 now, not revision 1"):
        merge.approve_change_request(catalog, cr.id, actor=user(catalog, "al"), stage=behind_its_back)

    assert engine.latest_version(layout().main) == before and merge_commits(cr.id) == []
    now = crs.get_change_request(catalog, cr.id, actor=user(catalog, "al"))
    assert (now.state, now.revision) == (CRState.OPEN, 2)


def test_request_changes_is_refused_while_an_approval_holds_the_lease(catalog: Catalog) -> None:
    """Checked in the transaction that sends the request back, not only before it (the approval's row lock)."""
    cr = submit(catalog, "ed", [SetCell("5", "name", "five")])

    holding = writer.writing(catalog, "demo", "nums", what=merge._lease_name(cr.id))  # as an approval of it does
    with holding, pytest.raises(ConflictError, match=f"change request {cr.id} is being merged"):
        crs.request_changes(catalog, cr.id, "wait", actor=user(catalog, "al"))

    assert crs.get_change_request(catalog, cr.id, actor=user(catalog, "al")).state == CRState.OPEN


def test_a_request_staged_before_digests_approves_by_revision_alone(catalog: Catalog) -> None:
    cr = submit(catalog, "ed", [SetCell("6", "name", "six")])
    with catalog.session() as s:
        s.execute(update(ChangeRequestRow).where(ChangeRequestRow.id == cr.id).values(digest=None))

    merged = merge.approve_change_request(
        catalog, cr.id, actor=user(catalog, "al"), expected_revision=1, expected_digest="whatever the page showed"
    )

    assert (merged.state, merged.revision, merged.digest) == (CRState.MERGED, 1, None)
