"""Imports in replace mode (seed 000's overwrite) and an admin's direct commit without review."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import audit, datasets, engine, imports, merge, reads, resubmit, sessions
from core import change_requests as crs
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, ChangeRequestRow, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, layout_for
from core.errors import ConflictError, InvalidFile, InvalidInput, PermissionDenied, ValidationFailed
from core.projects import create_project
from tests.merge_support import fresh_copy, switch

pytestmark = pytest.mark.spark

PEOPLE = "id,name,age\n" + "".join(f"{i},name {i},{20 + i}\n" for i in range(1, 7))


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """demo/people (6 rows keyed by id) and demo/events (3 rows, no key)."""
    base = tmp_path_factory.mktemp("replace")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    people = base / "people.csv"
    people.write_text(PEOPLE)
    events = base / "events.parquet"
    pq.write_table(pa.table({"code": pa.array([1, 2, 3], pa.int32()), "label": ["a", "b", "c"]}), events)
    with pytest.MonkeyPatch.context() as mp:
        switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER), ("ada", Role.ADMIN), ("adam", Role.ADMIN)):
            create_user(catalog, name, password=f"{name}-password-1")
            add_member(catalog, "demo", name, role)
        create_dataset(catalog, "demo", "people", people, key="id")
        create_dataset(catalog, "demo", "events", events)
        reset_catalogs()
    get_settings.cache_clear()
    return base


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    yield open_catalog()


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _rows(dataset: str) -> dict[str, dict[str, Any]]:
    cursor = reads.cursor().execute(
        "SELECT * FROM delta_scan(?) ORDER BY row_id", [str(layout_for("demo", dataset).main)]
    )
    names = [d[0] for d in cursor.description]
    return {r[0]: dict(zip(names, r, strict=True)) for r in cursor.fetchall()}


def _staged(cr: crs.ChangeRequest) -> dict[str, str]:
    """row_id -> op of a request's staging table."""
    staging = crs.staging_path(layout_for(cr.project_id, cr.dataset_id), cr)
    rows = reads.cursor().execute("SELECT row_id, _op FROM delta_scan(?)", [str(staging)]).fetchall()
    return {r[0]: r[1] for r in rows}


def _approve(catalog: Catalog, cr: crs.ChangeRequest) -> crs.ChangeRequest:
    return merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "al"))


def _commits(dataset: str) -> list[tuple[int, str]]:
    return sorted((c.version, c.operation) for c in engine.history(layout_for("demo", dataset).main))


def _assert_nothing_left(catalog: Catalog, dataset: str = "people") -> None:
    layout = layout_for("demo", dataset)
    with catalog.session() as s:
        assert s.query(ChangeRequestRow).count() == 0
    assert engine.latest_version(layout.main) == 0
    assert not layout.staging_root.exists() or not list(layout.staging_root.iterdir())
    uploads = [p for p in layout.imports_root.iterdir() if (p / "schema.json").exists()]
    assert uploads == []


# ---------------------------------------------------------------- replace


def test_replace_by_the_dataset_key_updates_adds_deletes_and_leaves_identical_rows_out(
    catalog: Catalog, tmp_path: Path
) -> None:
    ed = get_user(catalog, "ed")
    # 1, 3, 6: identical; 2: renamed; 4: older; 5 missing (deleted); 7, 8 new.
    text = "id,name,age\n1,name 1,21\n2,Bea,22\n3,name 3,23\n4,name 4,40\n6,name 6,26\n7,Cy,27\n8,Di,\n"
    source = _file(tmp_path, "all.csv", text)

    cr, plan = imports.import_file(catalog, "demo", "people", source, actor=ed, mode="replace")

    assert (plan.mode, plan.key, plan.deletes, cr.kind, cr.rows) == ("replace", "id", 1, "import", 5)
    assert "rows whose id is not in the file deleted" in plan.describe()
    assert _staged(cr) == {"2": "update", "4": "update", "5": "delete", "7": "insert", "8": "insert"}
    summary = imports.import_summary(catalog, cr.id, actor=ed)
    assert summary is not None
    assert (summary.mode, summary.key, summary.added, summary.updated, summary.deleted) == ("replace", "id", 2, 2, 1)
    assert cr.cells == 2 + 2 * 3  # two changed cells, two inserted rows of three columns
    assert cr.title == "Replace the content of demo/people with all.csv"
    # The review's row diff: the deleted row whole, the updated cells, the added rows.
    page = crs.row_diff_change_request(catalog, cr.id, actor=get_user(catalog, "al"))
    assert (page.summary.updated, page.summary.inserted, page.summary.deleted) == (2, 2, 1)
    by_id = {r.row_id: r for r in page.rows}
    assert [(c.column, c.old, c.new) for c in by_id["2"].cells] == [("name", "name 2", "Bea")]
    assert [(c.column, c.old, c.new) for c in by_id["4"].cells] == [("age", "24", "40")]
    assert by_id["5"].kind == "delete" and {c.column: c.old for c in by_id["5"].cells}["name"] == "name 5"

    merged = _approve(catalog, cr)

    assert merged.merged_version == 1 and _commits("people")[1:] == [(1, "MERGE")]
    expected = {
        str(r["id"]): {"row_id": str(r["id"]), **r}
        for r in (
            {"id": 1, "name": "name 1", "age": 21},
            {"id": 2, "name": "Bea", "age": 22},
            {"id": 3, "name": "name 3", "age": 23},
            {"id": 4, "name": "name 4", "age": 40},
            {"id": 6, "name": "name 6", "age": 26},
            {"id": 7, "name": "Cy", "age": 27},
            {"id": 8, "name": "Di", "age": None},
        )
    }
    assert _rows("people") == expected
    # Counted at submit, they hold after the merge too.
    assert imports.import_summary(catalog, cr.id, actor=ed) == summary


def test_replace_without_any_key_deletes_every_row_and_adds_every_file_row(catalog: Catalog, tmp_path: Path) -> None:
    before = _rows("events")
    source = _file(tmp_path, "events.csv", "code,label\n2,b\n9,z\n")

    cr, plan = imports.import_file(catalog, "demo", "events", source, actor=get_user(catalog, "ed"), mode="replace")

    assert (plan.key, plan.deletes) == (None, 3)
    assert "every current row is deleted and every row of the file added" in plan.describe()
    assert sorted(_staged(cr).values()) == ["delete"] * 3 + ["insert"] * 2
    summary = imports.import_summary(catalog, cr.id, actor=get_user(catalog, "ed"))
    assert summary is not None and (summary.added, summary.updated, summary.deleted) == (2, 0, 3)
    _approve(catalog, cr)
    after = _rows("events")
    assert sorted((r["code"], r["label"]) for r in after.values()) == [(2, "b"), (9, "z")]
    assert not set(after) & set(before)  # every row is new, ids included


def test_replace_by_a_unique_column_of_a_table_without_key(catalog: Catalog, tmp_path: Path) -> None:
    before = _rows("events")
    source = _file(tmp_path, "labels.csv", "code,label\n1,a\n20,b\n4,d\n")

    cr, plan = imports.import_file(
        catalog, "demo", "events", source, actor=get_user(catalog, "ed"), mode="replace", key="label"
    )

    ids = {r["label"]: k for k, r in before.items()}
    assert (plan.key, plan.deletes) == ("label", 1)
    ops = _staged(cr)  # a: identical, left out; d: new
    assert (sorted(ops.values()), ops[ids["b"]], ops[ids["c"]]) == (["delete", "insert", "update"], "update", "delete")
    _approve(catalog, cr)
    after = _rows("events")
    assert sorted((r["label"], r["code"]) for r in after.values()) == [("a", 1), ("b", 20), ("d", 4)]
    assert after[ids["a"]] == before[ids["a"]] and after[ids["b"]]["code"] == 20


def test_replace_with_a_new_column_adds_it_in_the_merge_commit(catalog: Catalog, tmp_path: Path) -> None:
    text = "id,name,age,email\n" + "".join(f"{i},name {i},{20 + i},\n" for i in range(1, 6)) + "9,Ned,30,n@x.org\n"
    source = _file(tmp_path, "emails.csv", text)

    cr, plan = imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"), mode="replace")

    assert [(c.column, c.change) for c in plan.schema_changes] == [("email", "add")]
    assert _staged(cr) == {"6": "delete", "9": "insert"}  # an empty new column changes no row
    merged = _approve(catalog, cr)
    assert _commits("people")[1:] == [(1, "MERGE")] and merged.merged_version == 1
    rows = _rows("people")
    assert sorted(rows) == ["1", "2", "3", "4", "5", "9"]
    assert (rows["9"]["email"], rows["1"]["email"]) == ("n@x.org", None)


@pytest.mark.parametrize(
    ("dataset", "text", "options", "message"),
    [
        ("people", "id,name,age\n1,a,2\n", {"key": "name"}, "keyed by 'id'; replace by that column"),
        ("people", "id,name,age\n1,a,2\n", {"key": "nope"}, "replace key 'nope' is not a column of f.csv"),
        ("people", "id,name\n1,a\n", {}, r"f.csv has no column 'age' of the table; a replace makes the file"),
        ("people", "name,age\na,2\n", {}, "has no column 'id', the dataset's key"),
        ("people", "id,name,age\n1,a,2\n1,b,3\n", {}, "duplicated value"),
        ("events", "code,label\n1,a\n", {"key": "zzz"}, "replace key 'zzz' is not a column"),
    ],
    ids=["other key", "unknown key", "missing column", "no dataset key", "duplicate keys", "keyless unknown key"],
)
def test_bad_replace_is_refused_with_nothing_left_behind(
    catalog: Catalog, tmp_path: Path, dataset: str, text: str, options: dict[str, Any], message: str
) -> None:
    source = _file(tmp_path, "f.csv", text)

    with pytest.raises((InvalidInput, ValidationFailed), match=message):
        imports.import_file(catalog, "demo", dataset, source, actor=get_user(catalog, "ed"), mode="replace", **options)

    _assert_nothing_left(catalog, dataset)


def test_a_replace_that_would_empty_the_table_is_refused(catalog: Catalog, tmp_path: Path) -> None:
    # An empty file is refused as for every mode: emptying a table is not an import.
    source = _file(tmp_path, "empty.csv", "id,name,age\n")

    with pytest.raises(InvalidFile, match=r"empty.csv has a header but no rows"):
        imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"), mode="replace")

    _assert_nothing_left(catalog)


def test_a_replace_with_the_table_s_own_content_changes_nothing(catalog: Catalog, tmp_path: Path) -> None:
    source = _file(tmp_path, "same.csv", PEOPLE)

    with pytest.raises(InvalidInput, match=r"same.csv changes nothing: the table holds exactly its rows"):
        imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"), mode="replace")

    _assert_nothing_left(catalog)


def test_resubmit_of_a_replace_keeps_its_mode(catalog: Catalog, tmp_path: Path) -> None:
    ed = get_user(catalog, "ed")
    source = _file(tmp_path, "r.csv", "id,name,age\n1,name 1,21\n2,name 2,99\n")
    old, _ = imports.import_file(catalog, "demo", "people", source, actor=ed, mode="replace")
    adds = _file(tmp_path, "a.csv", "id,name,age\n50,X,1\n")
    _approve(catalog, imports.import_file(catalog, "demo", "people", adds, actor=get_user(catalog, "adam"))[0])

    fresh = resubmit.resubmit_change_request(catalog, old.id, actor=ed)

    summary = imports.import_summary(catalog, fresh.id, actor=ed)
    assert summary is not None and (summary.mode, summary.deleted, fresh.base_version) == ("replace", 5, 1)
    _approve(catalog, fresh)
    assert sorted(_rows("people")) == ["1", "2"]


# ---------------------------------------------------------------- direct commit without review


def _events(catalog: Catalog, name: str) -> list[audit.StoredEvent]:
    return audit.list_events(catalog, project_id="demo", name=name)


def test_an_admin_commits_directly_in_one_merge_commit_audited(catalog: Catalog, tmp_path: Path) -> None:
    ada = get_user(catalog, "ada")
    source = _file(tmp_path, "more.csv", "id,name,age\n30,Zed,40\n31,Yo,41\n")

    cr, _ = imports.import_file(catalog, "demo", "people", source, actor=ada, review=False)

    assert (cr.state, cr.merged_version, cr.closed_by, cr.author) == (crs.CRState.MERGED, 1, "ada", "ada")
    assert cr.close_reason is not None and "without review" in cr.close_reason
    assert _commits("people")[1:] == [(1, "MERGE")]
    meta = engine.find_commit(layout_for("demo", "people").main, 0, cr_id=cr.id, action=merge.MERGE_ACTION)
    assert meta is not None and meta[1]["actor"] == "ada"
    assert {"30", "31"} <= set(_rows("people"))
    [event] = _events(catalog, imports.ImportCommittedWithoutReview.name)
    assert event.actor == "ada"
    assert {k: event.details[k] for k in ("cr_id", "file_name", "rows", "inserts", "version", "mode")} == {
        "cr_id": cr.id,
        "file_name": "more.csv",
        "rows": 2,
        "inserts": 2,
        "version": 1,
        "mode": "append",
    }
    assert [e.details["cr_id"] for e in _events(catalog, "cr_merged")] == [cr.id]
    assert not layout_for("demo", "people").staging(cr.id).exists()
    summary = imports.import_summary(catalog, cr.id, actor=ada)
    assert summary is not None and summary.reviewed is False


def test_a_direct_replace_commits_the_whole_content(catalog: Catalog, tmp_path: Path) -> None:
    source = _file(tmp_path, "all.csv", "id,name,age\n1,name 1,21\n2,Two,22\n")

    cr, _ = imports.import_file(
        catalog, "demo", "people", source, actor=get_user(catalog, "ada"), mode="replace", review=False
    )

    assert cr.state == crs.CRState.MERGED
    assert {k: (r["name"], r["age"]) for k, r in _rows("people").items()} == {"1": ("name 1", 21), "2": ("Two", 22)}
    [event] = _events(catalog, imports.ImportCommittedWithoutReview.name)
    assert (event.details["deletes"], event.details["updates"], event.details["mode"]) == (4, 1, "replace")


@pytest.mark.parametrize("who", ["ed", "al"])
def test_only_a_project_admin_commits_without_review_and_nothing_is_written(
    catalog: Catalog, tmp_path: Path, who: str
) -> None:
    source = _file(tmp_path, "more.csv", "id,name,age\n30,Zed,40\n")

    with pytest.raises(PermissionDenied, match="cannot commit an import without review: it needs the admin role"):
        imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, who), review=False)

    _assert_nothing_left(catalog)


def test_a_critical_check_failure_refuses_a_direct_commit(catalog: Catalog, tmp_path: Path) -> None:
    ada = get_user(catalog, "ada")
    suite = {
        "name": "people",
        "expectations": [
            {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "name"}, "severity": "critical"}
        ],
    }
    datasets.set_dataset_rules(catalog, "demo", "people", suite, actor=ada)
    source = _file(tmp_path, "dup.csv", "id,name,age\n30,name 2,40\n")

    with pytest.raises(
        ValidationFailed, match=r"dup.csv fails critical data checks: expect_column_values_to_be_unique"
    ):
        imports.import_file(catalog, "demo", "people", source, actor=ada, review=False)

    _assert_nothing_left(catalog)
    assert _events(catalog, imports.ImportCommittedWithoutReview.name) == []


def test_a_direct_commit_that_conflicts_is_withdrawn_with_nothing_merged(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ada, ed = get_user(catalog, "ada"), get_user(catalog, "ed")
    session = sessions.open_session(catalog, "demo", "people", actor=ed)
    sessions.apply_edits(catalog, session.session_id, [sessions.SetCell("2", "name", "by hand")], actor=ed)
    edit = crs.submit_change_request(catalog, session.session_id, actor=ed)
    direct = merge.merge_unreviewed_import

    def after_an_edit_lands(*args: Any, **kwargs: Any) -> crs.ChangeRequest:
        _approve(catalog, edit)  # lands between the direct commit's staging and its MERGE
        return direct(*args, **kwargs)

    monkeypatch.setattr(merge, "merge_unreviewed_import", after_an_edit_lands)
    source = _file(tmp_path, "fix.csv", "id,name,age\n2,from file,22\n")

    with pytest.raises(ConflictError, match=r"2\.name"):
        imports.import_file(catalog, "demo", "people", source, actor=ada, mode="upsert", key="id", review=False)

    assert _commits("people")[1:] == [(1, "MERGE")]  # the edit's only
    assert _rows("people")["2"]["name"] == "by hand"
    [record] = [c for c in crs.list_change_requests(catalog, actor=ada) if c.kind == "import"]
    assert (record.state, record.closed_by) == (crs.CRState.WITHDRAWN, "ada")
    assert not layout_for("demo", "people").staging(record.id).exists()
    assert not layout_for("demo", "people").upload(str(record.upload_id)).exists()
    assert _events(catalog, imports.ImportCommittedWithoutReview.name) == []


def test_the_direct_path_is_reachable_only_by_a_direct_commit(catalog: Catalog, tmp_path: Path) -> None:
    ada = get_user(catalog, "ada")
    source = _file(tmp_path, "more.csv", "id,name,age\n30,Zed,40\n")
    cr, _ = imports.import_file(catalog, "demo", "people", source, actor=ada)

    # An admin's own import submitted for review: neither approval nor the direct path merges it.
    with pytest.raises(PermissionDenied, match=r"wrote change request .* and cannot approve it"):
        merge.approve_change_request(catalog, cr.id, actor=ada)
    with pytest.raises(PermissionDenied, match="was submitted for review; another approver must approve it"):
        merge.merge_unreviewed_import(catalog, cr.id, actor=ada, note="sneaky")
    assert engine.latest_version(layout_for("demo", "people").main) == 0
    assert crs.get_change_request(catalog, cr.id, actor=ada).state == crs.CRState.OPEN
    assert _approve(catalog, cr).state == crs.CRState.MERGED


# ---------------------------------------------------------------- CLI


def test_cli_append_replace_prints_its_counts(
    catalog: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_cli import run

    source = _file(tmp_path, "all.csv", "id,name,age\n1,One,21\n2,name 2,22\n9,Nine,29\n")

    result = run(capsys, "--json", "append", "demo", "people", "--file", str(source), "--as", "ed", "--mode", "replace")

    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert {k: doc[k] for k in ("state", "mode", "key", "added", "updated", "deleted", "reviewed", "version")} == {
        "state": "open",
        "mode": "replace",
        "key": "id",
        "added": 1,
        "updated": 1,
        "deleted": 4,
        "reviewed": True,
        "version": None,
    }
    assert {"cr_id", "validation", "schema_changes"} <= set(doc)
    shown = json.loads(run(capsys, "--json", "cr", "show", doc["cr_id"], "--as", "al").out)
    assert shown["import"] == {
        "file_name": "all.csv",
        "mode": "replace",
        "key": "id",
        "added": 1,
        "updated": 1,
        "deleted": 4,
        "reviewed": True,
    }
    text = run(capsys, "append", "demo", "events", "--file", str(_file(tmp_path, "e.csv", "code,label\n7,q\n")),
               "--as", "ed", "--mode", "replace")  # fmt: skip
    assert text.code == 0, text.err
    assert "1 added, 0 updated, 3 deleted" in text.out


def test_cli_append_help_names_the_replace_mode_and_no_review(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_cli import run

    result = run(capsys, "append", "--help")

    assert result.code == 0
    flat = " ".join(result.out.replace("│", " ").split())  # the help's box, unwrapped
    assert "replace: the file becomes the table's whole content" in flat
    assert "--no-review" in flat and "Project admins only" in flat


def test_cli_append_no_review_commits_for_an_admin_and_refuses_an_editor(
    catalog: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_cli import assert_one_error_line, run

    source = _file(tmp_path, "more.csv", "id,name,age\n40,Forty,40\n")
    refused = run(capsys, "append", "demo", "people", "--file", str(source), "--as", "ed", "--no-review")
    assert_one_error_line(refused, r"'ed' cannot commit an import without review: it needs the admin role")
    _assert_nothing_left(catalog)

    result = run(capsys, "--json", "append", "demo", "people", "--file", str(source), "--as", "ada", "--no-review")

    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert (doc["reviewed"], doc["version"], doc["state"], doc["added"]) == (False, 1, "merged", 1)
    assert _rows("people")["40"]["name"] == "Forty"
    # Approving it again, or any admin's own request, goes through cr approve's four-eyes check.
    again = run(capsys, "cr", "approve", doc["cr_id"], "--as", "ada")
    assert_one_error_line(again, "cannot approve it; another approver must")
    text = run(capsys, "append", "demo", "people", "--file", str(_file(tmp_path, "m.csv", "id,name,age\n41,X,1\n")),
               "--as", "ada", "--no-review")  # fmt: skip
    assert text.code == 0, text.err
    assert text.out.startswith("committed m.csv without review as version 2 (1 added, 0 updated, 0 deleted;")
