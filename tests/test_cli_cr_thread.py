"""``oreo cr comment``, ``oreo cr request-changes``, ``oreo cr revise`` and the thread in ``oreo cr show``."""

from __future__ import annotations

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
    base = tmp_path_factory.mktemp("cli_cr_thread")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    source = base / "people.csv"
    source.write_text("id,name,age\n" + "".join(f"{i},name {i},{20 + i}\n" for i in range(1, 6)))
    with pytest.MonkeyPatch.context() as mp:
        switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER)):
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


def _submit(capsys, value: str) -> str:  # type: ignore[no-untyped-def]
    assert run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "2", "age", value).code == 0
    submitted = run(capsys, "--json", "cr", "submit", "demo", "people", "--as", "ed", "--title", "Ages")
    assert submitted.code == 0, submitted.err
    return str(submitted.json()["cr_id"])


def test_comment_request_changes_revise_show_approve(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    cr_id = _submit(capsys, "200")
    commented = run(
        capsys, "--json", "cr", "comment", cr_id, "--as", "al", "--text", "200?", "--row", "2", "--column", "age"
    )
    assert commented.code == 0, commented.err
    assert commented.json()["comment"]["row_id"] == "2" and commented.json()["comment"]["column"] == "age"
    asked = run(capsys, "--json", "cr", "request-changes", cr_id, "--as", "al", "--reason", "age is wrong")
    assert asked.code == 0, asked.err
    assert asked.json() == {"cr_id": cr_id, "state": "changes_requested", "revision": 1}
    assert_one_error_line(run(capsys, "cr", "approve", cr_id, "--as", "al"), "changes were requested")

    # The author fixes the cell in the same session and revises.
    assert run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "2", "age", "32").code == 0
    revised = run(capsys, "--json", "cr", "revise", cr_id, "--as", "ed")
    assert revised.code == 0, revised.err
    doc = revised.json()
    assert (doc["cr_id"], doc["state"], doc["revision"], doc["validation"]["status"]) == (cr_id, "open", 2, "passed")

    shown = run(capsys, "--json", "cr", "show", cr_id)
    assert shown.code == 0, shown.err
    show = shown.json()
    assert [(c["column"], c["new"]) for c in show["changes"]] == [("age", "32")]
    assert show["revision"] == 2
    assert [(c["author"], c["text"], c["row_id"], c["column"]) for c in show["thread"]] == [
        ("al", "200?", "2", "age"),
        ("al", "age is wrong", None, None),
    ]
    assert [r["revision"] for r in show["revisions"]] == [1, 2]
    assert [s["state"] for s in show["state_history"]] == ["open", "changes_requested", "open"]
    human = run(capsys, "cr", "show", cr_id)
    assert "al on row 2 · age: 200?" in human.out and "changes_requested" in human.out

    approved = run(capsys, "--json", "cr", "approve", cr_id, "--as", "al")
    assert approved.code == 0, approved.err
    rows = reads.read_page(layout_for("demo", "people").main, order_by="row_id", limit=10).rows
    assert int(rows.loc[rows["row_id"] == "2", "age"].iloc[0]) == 32


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cr", "comment", "{cr}", "--as", "al", "--text", "x", "--row", "4", "--column", "age"], "row '4' is not one"),
        (["cr", "comment", "{cr}", "--as", "al", "--text", "x", "--row", "2", "--column", "nope"], "no column 'nope'"),
        (["cr", "comment", "{cr}", "--as", "al", "--text", " "], "cannot be empty"),
        (["cr", "request-changes", "{cr}", "--as", "ed", "--reason", "x"], "approver"),
        (["cr", "request-changes", "{cr}", "--as", "al", "--reason", ""], "reason is required"),
        (["cr", "revise", "{cr}", "--as", "ed"], "only a request with changes requested"),
    ],
)
def test_refusals(capsys, catalog: Catalog, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    cr_id = _submit(capsys, "50")
    assert_one_error_line(run(capsys, *[a.replace("{cr}", cr_id) for a in args]), message)
    assert engine.latest_version(layout_for("demo", "people").main) == 0
    assert run(capsys, "--json", "cr", "show", cr_id).json()["state"] == "open"


def test_decisions_name_the_revision_reviewed(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    cr_id = _submit(capsys, "200")
    asked = run(capsys, "--json", "cr", "request-changes", cr_id, "--as", "al", "--reason", "no", "--revision", "1")
    assert asked.code == 0, asked.err
    assert run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "2", "age", "32").code == 0
    assert run(capsys, "--json", "cr", "revise", cr_id, "--as", "ed").json()["revision"] == 2

    stale = f"change request {cr_id} is at revision 2 now, not revision 1 that you reviewed: reload it and review again"
    for decision in (
        ["cr", "approve", cr_id, "--as", "al", "--revision", "1"],
        ["cr", "reject", cr_id, "--as", "al", "--reason", "no", "--revision", "1"],
        ["cr", "request-changes", cr_id, "--as", "al", "--reason", "again", "--revision", "1"],
    ):
        assert_one_error_line(run(capsys, *decision), stale)
    assert engine.latest_version(layout_for("demo", "people").main) == 0
    assert run(capsys, "--json", "cr", "show", cr_id).json()["state"] == "open"

    approved = run(capsys, "cr", "approve", cr_id, "--as", "al", "--revision", "2")
    assert approved.code == 0, approved.err
    assert f"change request {cr_id} (revision 2) merged as version 1" in approved.out


def test_show_escapes_control_characters_and_shows_the_description(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    """A comment, a value or a description cannot break a line or send terminal escapes (issue 25 §6)."""
    assert run(capsys, "edit", "demo", "people", "--as", "ed", "--set", "3", "name", "two\nlines\x1b[2J").code == 0
    submitted = run(
        capsys, "--json", "cr", "submit", "demo", "people", "--as", "ed", "--title", "Names",
        "--description", "why:\r\nbecause",
    )  # fmt: skip
    assert submitted.code == 0, submitted.err
    cr_id = str(submitted.json()["cr_id"])
    assert run(capsys, "cr", "comment", cr_id, "--as", "al", "--text", "see\x1b]0;owned\x07 here\nnext").code == 0
    shown = run(capsys, "cr", "show", cr_id, "--as", "al")
    assert shown.code == 0, shown.err
    assert "\x1b" not in shown.out and "\r" not in shown.out and "\x07" not in shown.out
    assert "two\\nlines\\x1b[2J" in shown.out
    assert "see\\x1b]0;owned\\x07 here\\nnext" in shown.out
    assert "description: why:\\r\\nbecause" in shown.out
    assert run(capsys, "--json", "cr", "show", cr_id, "--as", "al").json()["description"] == "why:\r\nbecause"
