"""The ``oreo cr`` and ``oreo rules`` commands: the JSON contract, exit codes and refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli import context
from core import engine, reads
from core.auth import Role, add_member, create_user
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, layout_for
from core.projects import create_project
from tests.merge_support import fresh_copy, switch
from tests.test_cli import assert_one_error_line, run

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("cli_cr")
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
    context.state.json = False
    yield open_catalog()


def _main() -> Path:
    return layout_for("demo", "people").main


def test_edit_submit_show_approve_round_trip(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    edit = run(
        capsys, "--json", "edit", "demo", "people", "--as", "ed",
        "--set", "2", "age", "77", "--delete-row", "3", "--add-row", '{"id": 9, "name": "nine", "age": 9}',
    )  # fmt: skip
    assert edit.code == 0, edit.err
    submitted = run(capsys, "--json", "cr", "submit", "demo", "people", "--as", "ed", "--title", "Ages")
    assert submitted.code == 0, submitted.err
    doc = submitted.json()
    assert set(doc) == {"cr_id", "state", "validation"} and doc["state"] == "open"
    assert doc["validation"]["status"] == "passed" and doc["validation"]["failures"] == []
    cr_id = doc["cr_id"]

    shown = run(capsys, "--json", "cr", "show", cr_id)
    assert shown.code == 0, shown.err
    show = shown.json()
    assert {"cr_id", "state", "author", "base_version", "changes", "validation", "conflicts"} <= set(show)
    assert (show["author"], show["base_version"], show["conflicts"], show["total"]) == ("ed", 0, [], 3)
    assert [(c["row_id"], c["change"], c["column"], c["old"], c["new"]) for c in show["changes"]] == [
        ("2", "update", "age", "22", "77"),
        ("3", "delete", None, {"row_id": "3", "id": 3, "name": "name 3", "age": 23}, None),
        ("9", "insert", None, None, {"row_id": "9", "id": 9, "name": "nine", "age": 9}),
    ]
    paged = run(capsys, "--json", "cr", "show", cr_id, "--limit", "1", "--offset", "1").json()
    assert [c["row_id"] for c in paged["changes"]] == ["3"] and paged["total"] == 3

    listed = run(capsys, "--json", "cr", "list", "demo", "people", "--state", "open").json()
    assert [c["cr_id"] for c in listed["change_requests"]] == [cr_id]

    own = run(capsys, "--json", "cr", "approve", cr_id, "--as", "ed")
    assert_one_error_line(own, "approver")
    approved = run(capsys, "--json", "cr", "approve", cr_id, "--as", "al", "--comment", "fine")
    assert approved.code == 0, approved.err
    assert approved.json() == {"cr_id": cr_id, "state": "merged", "version": 1, "revision": 1}
    rows = reads.read_page(_main(), order_by="row_id", limit=10).rows
    assert list(rows["row_id"]) == ["1", "2", "4", "5", "9"] and int(rows["age"][1]) == 77
    assert_one_error_line(run(capsys, "--json", "cr", "approve", cr_id, "--as", "al"), "is merged")
    assert run(capsys, "--json", "cr", "list", "--state", "open").json() == {"change_requests": []}


def test_reject_and_withdraw(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    assert run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "1", "name", "x").code == 0
    first = run(capsys, "--json", "cr", "submit", "demo", "people", "--as", "ed").json()["cr_id"]
    assert_one_error_line(run(capsys, "cr", "reject", first, "--as", "al", "--reason", " "), "a reason is required")
    rejected = run(capsys, "--json", "cr", "reject", first, "--as", "al", "--reason", "no")
    assert rejected.json() == {"cr_id": first, "state": "rejected"}
    assert run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "1", "name", "y").code == 0
    second = run(capsys, "--json", "cr", "submit", "demo", "people", "--as", "ed").json()["cr_id"]
    assert_one_error_line(run(capsys, "cr", "withdraw", second, "--as", "al"), "only the author")
    assert run(capsys, "--json", "cr", "withdraw", second, "--as", "ed").json() == {
        "cr_id": second,
        "state": "withdrawn",
    }
    assert engine.latest_version(_main()) == 0
    assert not any(layout_for("demo", "people").staging_root.iterdir())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cr", "submit", "demo", "people", "--as", "ed"], "has no open session on demo/people"),
        (["cr", "show", "cr_nope"], "unknown change request 'cr_nope'"),
        (["cr", "show", "../x"], "change request id"),
        (["cr", "approve", "cr_nope", "--as", "al"], "unknown change request"),
        (["cr", "submit", "demo", "people", "--as", "nobody"], "nobody"),
        (["rules", "show", "demo", "nope"], "nope"),
        (["cr", "list", "nosuch", "people"], "nosuch"),
        (["cr", "list", "demo", "nope"], "nope"),
        (["cr", "list", "demo", "people", "--as", "nobody"], "nobody"),
    ],
)
def test_refusals(capsys, catalog: Catalog, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    assert_one_error_line(run(capsys, *args), message)
    assert engine.latest_version(_main()) == 0


def test_submitting_an_empty_session_is_refused_and_leaves_nothing(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    assert run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "1", "name", "x").code == 0
    assert run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "1", "name", "name 1").code == 0  # reverted
    assert_one_error_line(run(capsys, "cr", "submit", "demo", "people", "--as", "ed"), "has no edits to submit")
    assert run(capsys, "--json", "cr", "list").json() == {"change_requests": []}
    assert not any(layout_for("demo", "people").staging_root.iterdir())


def test_wrong_type_and_unknown_cells_are_refused(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    bad = run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "1", "age", "old")
    assert_one_error_line(bad, r"row '1', column 'age': 'old' is not a number \(BIGINT\)")
    assert_one_error_line(run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "99", "age", "1"), "unknown row")
    assert_one_error_line(
        run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "1", "nope", "1"), "unknown column"
    )


def test_rules_show_and_set(capsys, catalog: Catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shown = run(capsys, "--json", "rules", "show", "demo", "people")
    assert shown.code == 0 and shown.json()["expectations"][0]["type"] == "expect_column_values_to_not_be_null"
    suite = tmp_path / "suite.json"
    suite.write_text(
        json.dumps(
            {
                "name": "people rules",
                "expectations": [
                    {
                        "type": "expect_column_values_to_be_between",
                        "kwargs": {"column": "age", "min_value": 0, "max_value": 120},
                        "severity": "warning",
                    }
                ],
            }
        )
    )
    assert_one_error_line(run(capsys, "rules", "set", "demo", "people", "--file", str(suite), "--as", "ed"), "admin")
    done = run(capsys, "--json", "rules", "set", "demo", "people", "--file", str(suite), "--as", "ada")
    assert done.code == 0, done.err
    again = run(capsys, "--json", "rules", "show", "demo", "people").json()
    assert again["name"] == "people rules"
    assert [(e["type"], e["severity"]) for e in again["expectations"]] == [
        ("expect_column_values_to_be_between", "warning")
    ]
    suite.write_text("{not json")
    assert_one_error_line(run(capsys, "rules", "set", "demo", "people", "--file", str(suite)), "is not valid JSON")
    assert_one_error_line(
        run(capsys, "rules", "set", "demo", "people", "--file", str(tmp_path / "none.json")), "no such file"
    )

    # A warning rule now flags a submitted change; the approver sees it.
    assert run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "2", "age", "150").code == 0
    doc = run(capsys, "--json", "cr", "submit", "demo", "people", "--as", "ed").json()
    assert doc["validation"]["status"] == "warning"
    assert [(f["expectation"], f["severity"], f["column"]) for f in doc["validation"]["failures"]] == [
        ("expect_column_values_to_be_between", "warning", "age")
    ]


def test_rules_set_refuses_a_regex_that_does_not_compile(capsys, catalog: Catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    before = run(capsys, "--json", "rules", "show", "demo", "people").json()
    suite = tmp_path / "suite.json"
    rule = {"type": "expect_column_values_to_match_regex", "kwargs": {"column": "name", "regex": "(unclosed"}}
    suite.write_text(json.dumps({"name": "people rules", "expectations": [rule]}))

    result = run(capsys, "rules", "set", "demo", "people", "--file", str(suite), "--as", "ada")

    assert_one_error_line(result, r"on column 'name': the regex '\(unclosed' is invalid \(missing \), unterminated")
    assert run(capsys, "--json", "rules", "show", "demo", "people").json() == before
    assert run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "2", "name", "still fine").code == 0


def test_rules_propose_shows_a_proposal_and_accept_applies_the_chosen_rules(  # type: ignore[no-untyped-def]
    capsys, catalog: Catalog, tmp_path: Path
) -> None:
    listed = run(capsys, "--json", "rules", "list", "demo", "people").json()["rules"]
    not_null = "expect_column_values_to_not_be_null"
    age = next(r["number"] for r in listed if (r["type"], r["column"]) == (not_null, "age"))
    changed = run(capsys, "rules", "change", "demo", "people", str(age), "--severity", "critical", "--as", "ada")
    assert changed.code == 0 and "age is never empty (critical, edited by ada)" in changed.out, changed.err
    # Rules as an older proposal left them: without "name is never empty".
    suite = run(capsys, "--json", "rules", "show", "demo", "people").json()
    name_rule = (not_null, "name")
    suite["expectations"] = [e for e in suite["expectations"] if (e["type"], e["kwargs"].get("column")) != name_rule]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(suite))
    assert run(capsys, "rules", "set", "demo", "people", "--file", str(older), "--as", "ada").code == 0
    stored = run(capsys, "--json", "rules", "show", "demo", "people").json()

    proposal = run(capsys, "--json", "rules", "propose", "demo", "people", "--as", "ada").json()
    lines = {line["name"]: line for line in proposal["rules"]}
    assert (lines["age:not_be_null"]["status"], lines["age:not_be_null"]["change"]) == ("kept", "kept: edited by ada")
    assert lines["age:not_be_null"]["edited_by"] == "ada"
    assert (lines["name:not_be_null"]["status"], lines["name:not_be_null"]["current"]) == ("new", None)
    assert proposal["counts"]["new"] == 1 and proposal["version"] == 0
    text = run(capsys, "rules", "propose", "demo", "people").out
    assert "kept: edited by ada" in text and "adds: name is never empty" in text and "nothing is stored" in text
    assert run(capsys, "--json", "rules", "show", "demo", "people").json() == stored  # proposing stored nothing

    assert_one_error_line(run(capsys, "rules", "accept", "demo", "people", "--as", "ada"), "give --rule NAME")
    assert_one_error_line(
        run(capsys, "rules", "accept", "demo", "people", "--rule", "nope", "--as", "ada"),
        "no proposed rule named 'nope'; the proposal changes: name:not_be_null",
    )
    assert_one_error_line(
        run(capsys, "rules", "accept", "demo", "people", "--rule", "age:not_be_null", "--as", "ada"),
        "the steward's",
    )
    assert_one_error_line(run(capsys, "rules", "accept", "demo", "people", "--all", "--as", "ed"), "admin")
    assert run(capsys, "--json", "rules", "show", "demo", "people").json() == stored

    accepted = run(capsys, "--json", "rules", "accept", "demo", "people", "--rule", "name:not_be_null", "--as", "ada")
    assert accepted.code == 0, accepted.err
    doc = accepted.json()
    assert [(a["name"], a["status"]) for a in doc["accepted"]] == [("name:not_be_null", "new")]
    assert [k["name"] for k in doc["kept"]] == ["age:not_be_null"]
    assert doc["expectations"] == len(stored["expectations"]) + 1
    # Accepting the whole proposal (as `rules infer --apply` always did) still keeps the steward's rule.
    assert run(capsys, "rules", "accept", "demo", "people", "--all", "--as", "ada").out.startswith("nothing to accept")
    assert run(capsys, "--json", "rules", "infer", "demo", "people", "--apply", "--as", "ada").code == 0
    listed = run(capsys, "--json", "rules", "list", "demo", "people").json()["rules"]
    kept = next(r for r in listed if (r["type"], r["column"]) == (not_null, "age"))
    assert (kept["severity"], kept["edited_by"]) == ("critical", "ada")


def _edit_submit(capsys, who: str, *sets: str) -> str:  # type: ignore[no-untyped-def]
    edited = run(capsys, "edit", "demo", "people", "--as", who, *sets)
    assert edited.code == 0, edited.err
    submitted = run(capsys, "--json", "cr", "submit", "demo", "people", "--as", who)
    assert submitted.code == 0, submitted.err
    return str(submitted.json()["cr_id"])


def test_cr_show_lists_each_conflict_and_cr_resolve_settles_it(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    create_user(catalog, "eve", password="eve-password-1")
    add_member(catalog, "demo", "eve", Role.EDITOR)
    theirs = _edit_submit(capsys, "ed", "--set", "2", "age", "30")
    mine = _edit_submit(capsys, "eve", "--set", "2", "age", "31", "--set", "3", "name", "Tres")
    assert run(capsys, "cr", "approve", theirs, "--as", "al").code == 0

    shown = run(capsys, "cr", "show", mine, "--as", "al")
    assert shown.code == 0, shown.err
    assert "conflicts (the author eve keeps or drops each):" in shown.out
    block = shown.out.split("conflicts (the author eve keeps or drops each):\n")[1].splitlines()[:5]
    assert [line.strip() for line in block] == [
        "2 · age · v1 by al · also changed",
        "base:   22",
        "theirs: 30",
        "mine:   31",
        f"resolve: oreo cr resolve {mine} 2 age --keep-mine|--take-theirs --as AUTHOR",
    ]
    [conflict] = run(capsys, "--json", "cr", "show", mine, "--as", "al").json()["conflicts"]
    assert (conflict["base"], conflict["theirs"], conflict["mine"], conflict["version"]) == ("22", "30", "31", 1)

    neither = run(capsys, "cr", "resolve", mine, "2", "age", "--as", "eve")
    assert neither.code == 2 and "exactly one of --keep-mine and --take-theirs" in neither.err
    assert_one_error_line(
        run(capsys, "cr", "resolve", mine, "2", "age", "--keep-mine", "--as", "al"), "only the author 'eve' decides"
    )
    assert_one_error_line(
        run(capsys, "cr", "resolve", mine, "3", "name", "--keep-mine", "--as", "eve"), r"has no conflict on 3\.name"
    )
    resolved = run(capsys, "--json", "cr", "resolve", mine, "2", "age", "--take-theirs", "--as", "eve")
    assert resolved.code == 0, resolved.err
    assert (resolved.json()["revision"], resolved.json()["conflicts"]) == (2, [])
    assert run(capsys, "cr", "approve", mine, "--as", "al").code == 0
    ages = reads.cursor().execute("SELECT row_id, age, name FROM delta_scan(?) ORDER BY row_id", [str(_main())])
    assert [r for r in ages.fetchall() if r[0] in ("2", "3")] == [("2", 30, "name 2"), ("3", 23, "Tres")]
