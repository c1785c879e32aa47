"""Approval: one Spark Delta MERGE, four-eyes, conflicts from the change data feed, GX on the merged result."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import change_requests as crs
from core import conflicts, datasets, engine, merge, reads, resubmit, sessions, warmup
from core.audit import list_events
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, layout_for
from core.errors import ConflictError, InvalidInput, NotFound, PermissionDenied, ValidationFailed
from core.projects import create_project
from core.sessions import AddRow, DeleteRow, SetCell
from tests.merge_support import fresh_copy, switch

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """A data root and catalog with demo/people (10 rows keyed by id), copied by every test."""
    base = tmp_path_factory.mktemp("merge")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    source = base / "people.csv"
    source.write_text("id,name,age\n" + "".join(f"{i},name {i},{20 + i}\n" for i in range(1, 11)))
    with pytest.MonkeyPatch.context() as mp:
        switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name, role in (("ed", Role.EDITOR), ("eve", Role.EDITOR), ("al", Role.APPROVER), ("ada", Role.ADMIN)):
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


def _submit(catalog: Catalog, ops: list[sessions.EditOp], author: str = "ed") -> crs.ChangeRequest:
    user = get_user(catalog, author)
    session = sessions.open_session(catalog, "demo", "people", actor=user)
    sessions.apply_edits(catalog, session.session_id, ops, actor=user)
    return crs.submit_change_request(catalog, session.session_id, actor=user, title="Fix people")


def _main() -> Path:
    return layout_for("demo", "people").main


def _table() -> dict[str, dict[str, object]]:
    rows = reads.read_page(_main(), order_by="row_id", limit=1000).rows.to_dict("records")
    return {str(r["row_id"]): r for r in rows}


def test_approve_merges_updates_inserts_and_deletes_in_one_commit(catalog: Catalog) -> None:
    cr = _submit(
        catalog,
        [SetCell("2", "age", "99"), SetCell("2", "name", "Two"), DeleteRow("3"), AddRow({"id": 50, "name": "new"})],
    )
    # The added row leaves age empty, which the rules inferred at creation flag.
    assert cr.validation_status == "warning"
    run = crs.validation_for(catalog, cr.id, actor=get_user(catalog, "al"))
    assert run is not None
    assert {(f.column, f.expectation, f.severity) for f in run.failures} == {
        ("age", "expect_column_values_to_not_be_null", "warning"),
    }
    layout = layout_for("demo", "people")
    steps: list[tuple[float, str]] = []
    merged = merge.approve_change_request(
        catalog, cr.id, actor=get_user(catalog, "al"), comment="looks right", progress=lambda f, m: steps.append((f, m))
    )
    assert (merged.state, merged.merged_version, merged.closed_by) == (crs.CRState.MERGED, 1, "al")
    assert [f for f, _ in steps] == sorted(f for f, _ in steps) and steps[-1][0] == 1.0

    table = _table()
    assert (table["2"]["age"], table["2"]["name"]) == (99, "Two")
    assert "3" not in table
    assert (table["50"]["id"], table["50"]["name"]) == (50, "new")
    assert (table["4"]["age"], table["4"]["name"]) == (24, "name 4")  # untouched rows keep their values
    assert len(table) == 10

    # One commit, carrying the request, the approver and the validation run.
    newest = engine.history(_main())
    assert [r.version for r in newest] == [1, 0] and newest[0].operation == "MERGE"
    meta = newest[0].user_metadata
    assert (meta["cr_id"], meta["actor"], meta["action"]) == (cr.id, "al", "merge_change_request")
    assert (layout.validation_run(meta["validation_run_id"]) / "summary.json").is_file()

    # Cleanup and catalog sync.
    assert not layout.staging(cr.id).exists()
    assert not layout.session_dir(cr.session_id or "").exists()
    info = datasets.get_dataset(catalog, "demo", "people", actor=get_user(catalog, "al"))
    assert (info.version, info.rows, info.last_commit_id) == (1, 10, meta["commit_id"])
    events = [e for e in list_events(catalog, project_id="demo") if e.name == "cr_merged"]
    assert len(events) == 1 and events[0].actor == "al"
    assert [c.body for c in crs.comments(catalog, cr.id, actor=get_user(catalog, "ed"))] == ["looks right"]

    # A merged request's diff is the diff of its commit.
    diff = crs.diff_change_request(catalog, cr.id, actor=get_user(catalog, "al"))
    assert {(c.row_id, c.change, c.column) for c in diff.changes} == {
        ("2", "update", "age"),
        ("2", "update", "name"),
        ("3", "delete", None),
        ("50", "insert", None),
    }


def test_only_the_changed_columns_are_written(catalog: Catalog) -> None:
    """A cell another commit changed in an untouched column of the same row survives the merge."""
    cr = _submit(catalog, [SetCell("5", "age", "55")])
    other = _submit(catalog, [SetCell("5", "name", "Five")], author="eve")
    merge.approve_change_request(catalog, other.id, actor=get_user(catalog, "al"))
    assert merge.find_conflicts(catalog, cr.id, actor=get_user(catalog, "al")) == []
    merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "al"))
    assert (_table()["5"]["age"], _table()["5"]["name"]) == (55, "Five")


def _row(row_id: str, id_: int, name: str, age: int | None) -> dict[str, object]:
    return {"row_id": row_id, "id": id_, "name": name, "age": age}


def test_diff_pages_cells_inserts_and_deletes(catalog: Catalog) -> None:
    cr = _submit(
        catalog,
        [SetCell("2", "age", "99"), SetCell("2", "name", "Two"), DeleteRow("3"), AddRow({"id": 50, "name": "new"})],
    )
    al = get_user(catalog, "al")
    whole = crs.diff_change_request(catalog, cr.id, actor=al)
    assert whole.total == 4
    assert [c.to_json() for c in whole.changes] == [
        {"row_id": "2", "change": "update", "column": "age", "old": "22", "new": "99"},
        {"row_id": "2", "change": "update", "column": "name", "old": "name 2", "new": "Two"},
        {"row_id": "3", "change": "delete", "column": None, "old": _row("3", 3, "name 3", 23), "new": None},
        {"row_id": "50", "change": "insert", "column": None, "old": None, "new": _row("50", 50, "new", None)},
    ]
    page = crs.diff_change_request(catalog, cr.id, actor=al, limit=2, offset=2)
    assert (page.total, [c.row_id for c in page.changes]) == (4, ["3", "50"])
    assert crs.diff_change_request(catalog, cr.id, actor=al, limit=2, offset=10).changes == []
    with pytest.raises(InvalidInput, match="limit"):
        crs.diff_change_request(catalog, cr.id, actor=al, limit=0)


def test_the_author_can_never_approve_whatever_their_role(catalog: Catalog) -> None:
    cr = _submit(catalog, [SetCell("2", "age", "1")], author="ada")  # an admin wrote it
    with pytest.raises(PermissionDenied, match=r"wrote change request .* cannot approve it"):
        merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "ada"))
    assert engine.latest_version(_main()) == 0
    assert crs.get_change_request(catalog, cr.id, actor=get_user(catalog, "ada")).state == crs.CRState.OPEN


def test_an_editor_cannot_approve(catalog: Catalog) -> None:
    cr = _submit(catalog, [SetCell("2", "age", "1")])
    with pytest.raises(PermissionDenied, match="approver"):
        merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "eve"))
    assert engine.latest_version(_main()) == 0
    assert layout_for("demo", "people").staging(cr.id).is_dir()


def test_only_open_requests_can_be_approved_and_never_twice(catalog: Catalog) -> None:
    al = get_user(catalog, "al")
    withdrawn = _submit(catalog, [SetCell("2", "age", "1")])
    crs.withdraw_change_request(catalog, withdrawn.id, actor=get_user(catalog, "ed"))
    with pytest.raises(ConflictError, match="is withdrawn; only open requests can be approved"):
        merge.approve_change_request(catalog, withdrawn.id, actor=al)
    cr = _submit(catalog, [SetCell("2", "age", "2")])
    merge.approve_change_request(catalog, cr.id, actor=al)
    with pytest.raises(ConflictError, match="is merged"):
        merge.approve_change_request(catalog, cr.id, actor=al)
    assert engine.latest_version(_main()) == 1
    with pytest.raises(NotFound, match="unknown change request"):
        merge.approve_change_request(catalog, "cr_missing", actor=al)


def test_overlapping_cells_conflict_and_block_approval(catalog: Catalog) -> None:
    al = get_user(catalog, "al")
    first = _submit(catalog, [SetCell("2", "age", "30"), SetCell("4", "name", "x")])
    second = _submit(catalog, [SetCell("2", "age", "31"), DeleteRow("4"), SetCell("6", "age", "1")], author="eve")
    merge.approve_change_request(catalog, first.id, actor=al)
    conflicts = merge.find_conflicts(catalog, second.id, actor=al)
    assert [(c.row_id, c.column, c.version) for c in conflicts] == [("2", "age", 1), ("4", None, 1)]
    with pytest.raises(ConflictError, match="conflicts with newer commits in 2 cell"):
        merge.approve_change_request(catalog, second.id, actor=al)
    assert engine.latest_version(_main()) == 1 and _table()["2"]["age"] == 30
    # The approver rejects; main stays as the first request left it.
    crs.reject_change_request(catalog, second.id, actor=al, reason="conflicts with the first")
    assert not layout_for("demo", "people").staging(second.id).exists()
    assert _table()["6"]["age"] == 26


def test_a_row_deleted_since_conflicts_with_its_update(catalog: Catalog) -> None:
    al = get_user(catalog, "al")
    first = _submit(catalog, [DeleteRow("7")])
    second = _submit(catalog, [SetCell("7", "age", "1")], author="eve")
    merge.approve_change_request(catalog, first.id, actor=al)
    assert [(c.row_id, c.column, c.reason) for c in merge.find_conflicts(catalog, second.id, actor=al)] == [
        ("7", None, "row deleted since")
    ]


def test_critical_uniqueness_is_judged_on_the_merged_result(catalog: Catalog, tmp_path: Path) -> None:
    ada, al = get_user(catalog, "ada"), get_user(catalog, "al")
    suite = {
        "name": "people",
        "expectations": [
            {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "name"}, "severity": "critical"},
            {
                "type": "expect_column_values_to_be_between",
                "kwargs": {"column": "age", "min_value": 0, "max_value": 120},
                "severity": "warning",
            },
        ],
    }
    datasets.set_dataset_rules(catalog, "demo", "people", suite, actor=ada)
    # "name 9" exists in a row the request does not touch: only the merged result shows the duplicate.
    dup = _submit(catalog, [SetCell("2", "name", "name 9")])
    assert dup.validation_status == "failed"
    run = crs.validation_for(catalog, dup.id, actor=al)
    assert run is not None
    assert [(f.expectation, f.column, f.severity) for f in run.failures] == [
        ("expect_column_values_to_be_unique", "name", "critical")
    ]
    with pytest.raises(ValidationFailed, match="fails critical expectations"):
        merge.approve_change_request(catalog, dup.id, actor=al)
    assert engine.latest_version(_main()) == 0

    # A warning is shown but does not block.
    crs.reject_change_request(catalog, dup.id, actor=al, reason="duplicate name")
    old = _submit(catalog, [SetCell("3", "age", "130")])
    assert old.validation_status == "warning"
    merged = merge.approve_change_request(catalog, old.id, actor=al)
    assert merged.validation_status == "warning" and _table()["3"]["age"] == 130


def test_rules_show_default_and_refuse_bad_suites(catalog: Catalog) -> None:
    ada, ed = get_user(catalog, "ada"), get_user(catalog, "ed")
    default = datasets.dataset_rules(catalog, "demo", "people", actor=ed)
    kinds = [(e["type"], e["kwargs"].get("column")) for e in default["expectations"]]
    assert kinds[:2] == [
        ("expect_column_values_to_not_be_null", "row_id"),
        ("expect_column_values_to_be_unique", "row_id"),
    ]
    assert ("expect_column_values_to_be_in_type_list", "age") in kinds
    path = layout_for("demo", "people").audit / "expectations" / "suite.json"
    before = path.read_text()
    with pytest.raises(PermissionDenied):
        datasets.set_dataset_rules(catalog, "demo", "people", default, actor=ed)
    bad = {"name": "x", "expectations": [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "nope"}}]}
    with pytest.raises(InvalidInput, match="unknown column 'nope'"):
        datasets.set_dataset_rules(catalog, "demo", "people", bad, actor=ada)
    not_null = {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "age"}, "severity": "fatal"}
    wrong = {"name": "x", "expectations": [not_null]}
    with pytest.raises(InvalidInput, match="severity 'fatal'"):
        datasets.set_dataset_rules(catalog, "demo", "people", wrong, actor=ada)
    assert path.read_text() == before
    assert json.loads(before)["name"] == "people"


def test_the_author_resubmits_against_the_current_version(catalog: Catalog) -> None:
    al, ed = get_user(catalog, "al"), get_user(catalog, "ed")
    first = _submit(catalog, [SetCell("2", "age", "30")], author="eve")
    stale = _submit(
        catalog, [SetCell("2", "age", "31"), SetCell("5", "name", "Five"), DeleteRow("8"), AddRow({"id": 60})]
    )
    merge.approve_change_request(catalog, first.id, actor=al)
    assert merge.find_conflicts(catalog, stale.id, actor=al)
    with pytest.raises(PermissionDenied, match="only the author"):
        resubmit.resubmit_change_request(catalog, stale.id, actor=al)
    fresh = resubmit.resubmit_change_request(catalog, stale.id, actor=ed)
    assert (fresh.base_version, fresh.title, fresh.state) == (1, stale.title, crs.CRState.OPEN)
    old = crs.get_change_request(catalog, stale.id, actor=ed)
    assert (old.state, old.close_reason) == (crs.CRState.WITHDRAWN, f"re-submitted as {fresh.id}")
    assert merge.find_conflicts(catalog, fresh.id, actor=al) == []
    changes = crs.diff_change_request(catalog, fresh.id, actor=al).changes
    assert [(c.row_id, c.change, c.column, c.old, c.new) for c in changes if c.change == "update"] == [
        ("2", "update", "age", "30", "31"),  # now judged against the merged 30
        ("5", "update", "name", "name 5", "Five"),
    ]
    assert {(c.row_id, c.change) for c in changes if c.column is None} == {("8", "delete"), ("60", "insert")}
    merge.approve_change_request(catalog, fresh.id, actor=al)
    assert (_table()["2"]["age"], "8" in _table(), "60" in _table()) == (31, False, True)
    with pytest.raises(ConflictError, match="only open requests can be re-submitted"):
        resubmit.resubmit_change_request(catalog, stale.id, actor=ed)


# ---------------------------------------------------------------- conflicts: base, theirs, mine; the author decides


def test_a_conflict_shows_base_theirs_mine_and_who_committed(catalog: Catalog) -> None:
    al = get_user(catalog, "al")
    first = _submit(catalog, [SetCell("2", "age", "30")])
    second = _submit(catalog, [SetCell("2", "age", "31"), SetCell("2", "name", "Deux")], author="eve")
    merge.approve_change_request(catalog, first.id, actor=al)
    [conflict] = merge.find_conflicts(catalog, second.id, actor=al)
    assert (conflict.cell, conflict.version, conflict.reason) == ("2.age", 1, "also changed")
    assert (conflict.base, conflict.theirs, conflict.mine, conflict.committed_by) == ("22", "30", "31", "al")
    assert conflict.to_json() == {
        "row_id": "2", "column": "age", "version": 1, "reason": "also changed",
        "base": "22", "theirs": "30", "mine": "31", "committed_by": "al",
    }  # fmt: skip
    with pytest.raises(ConflictError, match=rf"its author eve keeps or drops each \(oreo cr resolve {second.id} 2 age"):
        merge.approve_change_request(catalog, second.id, actor=al)


def test_a_value_changed_and_changed_back_is_no_conflict(catalog: Catalog) -> None:
    al = get_user(catalog, "al")
    there = _submit(catalog, [SetCell("2", "age", "30")])
    merge.approve_change_request(catalog, there.id, actor=al)
    mine = _submit(catalog, [SetCell("2", "age", "31")], author="eve")  # based on version 1
    back = _submit(catalog, [SetCell("2", "age", "99")])
    merge.approve_change_request(catalog, back.id, actor=al)
    again = _submit(catalog, [SetCell("2", "age", "30")])
    merge.approve_change_request(catalog, again.id, actor=al)
    assert merge.find_conflicts(catalog, mine.id, actor=al) == []  # 30 -> 99 -> 30: nothing to decide
    merge.approve_change_request(catalog, mine.id, actor=al)
    assert _table()["2"]["age"] == 31


def test_the_author_keeps_one_conflict_and_drops_another(catalog: Catalog) -> None:
    eve, al = get_user(catalog, "eve"), get_user(catalog, "al")
    first = _submit(catalog, [SetCell("2", "age", "30"), SetCell("3", "name", "Trois")])
    second = _submit(
        catalog, [SetCell("2", "age", "31"), SetCell("3", "name", "Tres"), SetCell("5", "age", "55")], author="eve"
    )
    merge.approve_change_request(catalog, first.id, actor=al)
    assert [c.cell for c in merge.find_conflicts(catalog, second.id, actor=al)] == ["2.age", "3.name"]
    with pytest.raises(PermissionDenied, match="only the author 'eve' decides the conflicts"):
        conflicts.resolve_conflict(catalog, second.id, "2", "age", "mine", actor=al)
    with pytest.raises(InvalidInput, match=r"has no conflict on 5\.age; its conflicts: 2\.age, 3\.name"):
        conflicts.resolve_conflict(catalog, second.id, "5", "age", "mine", actor=eve)

    kept = conflicts.resolve_conflict(catalog, second.id, "2", "age", "mine", actor=eve)
    assert (kept.state, kept.revision, kept.base_version, kept.cells) == (crs.CRState.OPEN, 2, 1, 3)
    # The undecided conflict stays, although the request is now based on version 1.
    left = merge.find_conflicts(catalog, second.id, actor=al)
    assert [(c.cell, c.version, c.base, c.theirs, c.mine) for c in left] == [("3.name", 1, "name 3", "Trois", "Tres")]
    with pytest.raises(ConflictError, match="conflicts with newer commits in 1 cell"):
        merge.approve_change_request(catalog, second.id, actor=al)
    taken = conflicts.resolve_conflict(catalog, second.id, "3", "name", "theirs", actor=eve)
    assert (taken.revision, taken.cells, taken.rows) == (3, 2, 2)
    assert merge.find_conflicts(catalog, second.id, actor=al) == []
    notes = [c.body for c in crs.comments(catalog, second.id, actor=al)]
    assert notes == [
        "Resolved the conflict on 2.age: kept my change (31) over version 1 by al (30).",
        "Resolved the conflict on 3.name: took version 1 by al (Trois); dropped mine.",
    ]
    # The approver sees the re-based diff: theirs -> mine for the kept cell, nothing for the dropped one.
    changes = crs.diff_change_request(catalog, second.id, actor=al).changes
    assert [(c.row_id, c.column, c.old, c.new) for c in changes] == [("2", "age", "30", "31"), ("5", "age", "25", "55")]
    merge.approve_change_request(catalog, second.id, actor=al)
    table = _table()
    assert (table["2"]["age"], table["3"]["name"], table["5"]["age"]) == (31, "Trois", 55)


def test_whole_row_conflicts_are_kept_or_dropped(catalog: Catalog) -> None:
    eve, al = get_user(catalog, "eve"), get_user(catalog, "al")
    first = _submit(catalog, [DeleteRow("7"), SetCell("8", "age", "80")])
    second = _submit(catalog, [SetCell("7", "age", "1"), DeleteRow("8")], author="eve")
    merge.approve_change_request(catalog, first.id, actor=al)
    found = merge.find_conflicts(catalog, second.id, actor=al)
    assert [(c.cell, c.reason, c.base, c.theirs, c.mine) for c in found] == [
        ("7.*", "row deleted since", "age = 27", "row deleted", "age = 1"),
        ("8.*", "row changed since; cannot delete", "age = 28", "age = 80", "deletes the row"),
    ]
    conflicts.resolve_conflict(catalog, second.id, "7", None, "mine", actor=eve)  # the edited row comes back
    conflicts.resolve_conflict(catalog, second.id, "8", "*", "theirs", actor=eve)  # row 8 stays as they left it
    assert merge.find_conflicts(catalog, second.id, actor=al) == []
    merge.approve_change_request(catalog, second.id, actor=al)
    table = _table()
    assert (table["7"]["name"], table["7"]["age"], table["8"]["age"]) == ("name 7", 1, 80)


def _cached_file_lists(spark) -> list[str]:  # type: ignore[no-untyped-def]
    """The names of the Delta file lists (snapshot states) Spark keeps cached right now."""
    return [str(info.name()) for info in spark.sparkContext._jsc.sc().getRDDStorageInfo()]


def test_a_tables_file_list_is_built_ahead_once_per_version(spark, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    """``engine.prepare_table`` leaves the newest version's list (with statistics) cached, then skips it."""
    main = _main()
    version = engine.latest_version(main)
    assert engine.prepare_table(main) is True
    assert engine.prepared_version(main) == version
    assert f"Delta Table State with Stats #{version} - {main.as_uri()}/_delta_log" in _cached_file_lists(spark)
    assert engine.prepare_table(main) is False  # this version's list is built already

    cr = _submit(catalog, [SetCell("3", "name", "Cy")])
    merged = merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "al"))
    assert merged.merged_version == version + 1
    assert engine.prepare_table(main) is True
    assert f"Delta Table State with Stats #{version + 1} - {main.as_uri()}/_delta_log" in _cached_file_lists(spark)
    assert _table()["3"]["name"] == "Cy"


def _prepared(main: Path, version: int, timeout: float = 120.0) -> bool:
    """Whether ``engine.prepared_version(main)`` reaches ``version`` within ``timeout`` s (a background thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine.prepared_version(main) == version:
            return True
        time.sleep(0.05)
    return False


def test_a_server_builds_the_file_list_for_the_next_approval(spark, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    """After each approval (``keep_prepared``) and when an approver opens an open request, in the background."""
    main = _main()
    first = _submit(catalog, [SetCell("4", "age", "40")])
    assert warmup.prepare_for_review(first, "al") is False  # not a server: nothing is built ahead
    warmup.keep_prepared()
    try:
        # Opened by its author, or once decided, nothing is queued; opened by an approver, it is.
        assert warmup.prepare_for_review(first, "ed") is False
        assert warmup.prepare_for_review(first, "al") is True
        assert _prepared(main, first.base_version)

        merged = merge.approve_change_request(catalog, first.id, actor=get_user(catalog, "al"))
        assert _prepared(main, merged.merged_version)  # the merged version's list, for the next approval
        assert warmup.prepare_for_review(merged, "al") is False
    finally:
        warmup.stop_preparing()
    second = _submit(catalog, [SetCell("5", "age", "50")])
    again = merge.approve_change_request(catalog, second.id, actor=get_user(catalog, "al"))
    assert again.merged_version == merged.merged_version + 1
    assert engine.prepared_version(main) == merged.merged_version  # unsubscribed: nothing built after it
