"""``oreo cr show --rows``, ``oreo diff --rows`` and ``oreo dataset label-columns``: the row-shaped diff."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from cli import context
from core.auth import Role, add_member, create_user
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset
from core.projects import create_project
from tests.merge_support import fresh_copy, switch
from tests.test_cli import assert_one_error_line, run

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("cli_rows")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    source = base / "people.csv"
    source.write_text("id,name,city,age\n" + "".join(f"{i},name {i},city {i},{20 + i}\n" for i in range(1, 6)))
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


def _submit(capsys) -> str:  # type: ignore[no-untyped-def]
    edit = run(
        capsys, "--json", "edit", "demo", "people", "--as", "ed",
        "--set", "2", "age", "77", "--set", "2", "city", "Rome", "--delete-row", "3",
        "--add-row", '{"id": 9, "name": "nine", "city": "Nice", "age": 9}',
    )  # fmt: skip
    assert edit.code == 0, edit.err
    submitted = run(capsys, "--json", "cr", "submit", "demo", "people", "--as", "ed", "--title", "Ages")
    assert submitted.code == 0, submitted.err
    return str(submitted.json()["cr_id"])


EXPECTED_ROWS = [
    {
        "row_id": "2",
        "kind": "update",
        "labels": {"id": "2", "name": "name 2", "city": "Rome"},
        "cells": [{"column": "city", "old": "city 2", "new": "Rome"}, {"column": "age", "old": "22", "new": "77"}],
        "row": None,
    },
    {
        "row_id": "3",
        "kind": "delete",
        "labels": {"id": "3", "name": "name 3", "city": "city 3"},
        "cells": [
            {"column": "id", "old": "3", "new": None},
            {"column": "name", "old": "name 3", "new": None},
            {"column": "city", "old": "city 3", "new": None},
            {"column": "age", "old": "23", "new": None},
        ],
        "row": {"id": "3", "name": "name 3", "city": "city 3", "age": "23"},
    },
    {
        "row_id": "9",
        "kind": "insert",
        "labels": {"id": "9", "name": "nine", "city": "Nice"},
        "cells": [
            {"column": "id", "old": None, "new": "9"},
            {"column": "name", "old": None, "new": "nine"},
            {"column": "city", "old": None, "new": "Nice"},
            {"column": "age", "old": None, "new": "9"},
        ],
        "row": {"id": "9", "name": "nine", "city": "Nice", "age": "9"},
    },
]
EXPECTED_SUMMARY = {
    "rows_updated": 1,
    "rows_inserted": 1,
    "rows_deleted": 1,
    "columns": {"age": 1, "city": 1},
    "schema_changes": [],
}


def test_cr_show_rows_adds_the_row_shape_beside_the_unchanged_cell_entries(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    cr_id = _submit(capsys)
    plain = run(capsys, "--json", "cr", "show", cr_id).json()
    shown = run(capsys, "--json", "cr", "show", cr_id, "--rows")
    assert shown.code == 0, shown.err
    doc = shown.json()
    rows = doc.pop("row_diff")
    assert doc == plain  # today's keys, cell entries included, exactly as without --rows
    assert set(rows) == {"rows", "total", "summary", "label_columns"}
    assert rows["rows"] == EXPECTED_ROWS
    assert (rows["total"], rows["summary"], rows["label_columns"]) == (3, EXPECTED_SUMMARY, ["id", "name", "city"])

    inserts = run(capsys, "--json", "cr", "show", cr_id, "--rows", "--kind", "insert").json()
    assert [r["row_id"] for r in inserts["row_diff"]["rows"]] == ["9"] and inserts["row_diff"]["total"] == 1
    assert inserts["row_diff"]["summary"] == EXPECTED_SUMMARY and inserts["changes"] == plain["changes"]
    by_age = run(capsys, "--json", "cr", "show", cr_id, "--rows", "--column", "age", "--kind", "update").json()
    assert [r["row_id"] for r in by_age["row_diff"]["rows"]] == ["2"]
    paged = run(capsys, "--json", "cr", "show", cr_id, "--rows", "--limit", "1", "--offset", "1").json()
    assert [r["row_id"] for r in paged["row_diff"]["rows"]] == ["3"] and paged["row_diff"]["total"] == 3

    human = run(capsys, "cr", "show", cr_id, "--rows")
    assert "rows: 1 updated, 1 inserted, 1 deleted; 3 match the filters" in human.out
    assert "  update  2 (id=2, name=name 2, city=Rome)  city: city 2 -> Rome; age: 22 -> 77" in human.out


def test_cr_show_rows_exports_the_whole_diff(capsys, catalog: Catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cr_id = _submit(capsys)
    out = tmp_path / "cr.parquet"
    doc = run(capsys, "--json", "cr", "show", cr_id, "--rows", "--limit", "1", "--export", str(out)).json()
    assert doc["row_diff"]["export"] == {"path": str(out), "rows": 3}
    assert len(doc["row_diff"]["rows"]) == 1
    back = duckdb.connect().execute(
        'SELECT row_id, kind, changed_columns, "old.age", "new.age" FROM read_parquet(?) ORDER BY row_id', [str(out)]
    ).fetchall()
    assert back == [("2", "update", "city,age", 22, 77), ("3", "delete", "id,name,city,age", 23, None),
                    ("9", "insert", "id,name,city,age", None, 9)]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--rows", "--column", "nope"], 1, "the diff has no column 'nope'"),
        (["--rows", "--kind", "upsert"], 1, "unknown change kind 'upsert'"),
        (["--rows", "--export", "x.json"], 1, "must end in .csv or .parquet"),
        (["--kind", "insert"], 2, "need --rows"),
    ],
)
def test_cr_show_rows_refusals(capsys, catalog: Catalog, args: list[str], code: int, message: str) -> None:  # type: ignore[no-untyped-def]
    cr_id = _submit(capsys)
    result = run(capsys, "--json", "cr", "show", cr_id, *args)
    if code == 1:
        assert_one_error_line(result, message)
    else:
        assert result.code == 2 and message in result.err and result.out == ""


def test_diff_rows_between_versions_and_after_the_merge(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    cr_id = _submit(capsys)
    approved = run(capsys, "--json", "cr", "approve", cr_id, "--as", "al")
    assert approved.code == 0, approved.err
    plain = run(capsys, "--json", "diff", "demo", "people", "--from", "0", "--to", "1").json()
    doc = run(capsys, "--json", "diff", "demo", "people", "--from", "0", "--to", "1", "--rows").json()
    rows = doc.pop("row_diff")
    assert doc == plain
    assert rows["rows"] == EXPECTED_ROWS and rows["summary"] == EXPECTED_SUMMARY
    merged = run(capsys, "--json", "cr", "show", cr_id, "--rows").json()
    assert merged["row_diff"]["rows"] == EXPECTED_ROWS


def test_label_columns_show_set_reset_and_refuse(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    shown = run(capsys, "--json", "dataset", "label-columns", "demo", "people", "--as", "ed").json()
    assert shown == {"project": "demo", "dataset": "people", "label_columns": ["id", "name", "city"]}
    assert_one_error_line(
        run(capsys, "--json", "dataset", "label-columns", "demo", "people", "age", "--as", "ed"), "needs the admin role"
    )
    assert_one_error_line(
        run(capsys, "--json", "dataset", "label-columns", "demo", "people", "nope", "--as", "ada"),
        "demo/people has no column 'nope'",
    )
    assert_one_error_line(
        run(capsys, "--json", "dataset", "label-columns", "demo", "people", "id", "name", "city", "age", "--as", "ada"),
        "at most 3 identifying columns",
    )
    chosen = run(capsys, "--json", "dataset", "label-columns", "demo", "people", "city", "age", "--as", "ada").json()
    assert chosen["label_columns"] == ["city", "age"]
    cr_id = _submit(capsys)
    doc = run(capsys, "--json", "cr", "show", cr_id, "--rows", "--kind", "update").json()
    assert doc["row_diff"]["rows"][0]["labels"] == {"city": "Rome", "age": "77"}
    reset = run(capsys, "--json", "dataset", "label-columns", "demo", "people", "--reset", "--as", "ada").json()
    assert reset["label_columns"] == ["id", "name", "city"]


def test_a_rejected_request_has_an_empty_row_diff(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    cr_id = _submit(capsys)
    assert run(capsys, "--json", "cr", "reject", cr_id, "--as", "al", "--reason", "no").code == 0
    doc = run(capsys, "--json", "cr", "show", cr_id, "--rows", "--column", "age").json()
    assert doc["row_diff"]["rows"] == [] and doc["row_diff"]["total"] == 0
    assert doc["row_diff"]["summary"]["rows_updated"] == 0 and doc["changes"] == []
