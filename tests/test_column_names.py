"""Column names and types: odd names work end to end, names and types Oreo cannot carry are refused at every entry."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import change_requests, history, imports, merge, migrate, reads, sessions
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, DatasetRow, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, layout_for
from core.errors import InvalidInput
from core.projects import create_project
from core.schema import RESERVED_NAMES
from tests.merge_support import fresh_copy, switch

# Names every engine (Spark SQL, Delta, DuckDB, GX) handles once quoted.
ODD_NAMES = ['a"b', "a.b", "a'b", "ünïcödé", "select", "x" * 128, "a-b", "Straße€"]
REFUSED_NAMES = [
    *[(name, "reserves for its own columns") for name in RESERVED_NAMES],
    ("_OP", "reserves for its own columns"),  # Delta matches names case-insensitively
    ("a`b", "contains a backtick"),
    ("a b", "contains ' '"),
    ("a,b", "contains ','"),
    ("x" * 201, "201-character name"),
]
NESTED = [
    ("struct", pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))),
    ("list", pa.array([[1, 2]], pa.list_(pa.int64()))),
    ("map", pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64()))),
    ("list of structs", pa.array([[{"a": 1}]], pa.list_(pa.struct([("a", pa.int64())])))),
    ("decimal in a struct", pa.array([{"d": Decimal("1.50")}], pa.struct([("d", pa.decimal128(10, 2))]))),
]


def _parquet(path: Path, columns: dict[str, Any]) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def _nothing_created(catalog: Catalog, dataset_id: str) -> None:
    assert not layout_for("demo", dataset_id).root.exists()
    with catalog.session() as s:
        assert s.get(DatasetRow, ("demo", dataset_id)) is None


@pytest.fixture
def project(catalog: Catalog) -> Catalog:
    create_project(catalog, "demo")
    return catalog


# ---------------------------------------------------------------- refused at create and migrate (no Spark needed)


@pytest.mark.parametrize(("name", "why"), REFUSED_NAMES, ids=[n[:20] for n, _ in REFUSED_NAMES])
@pytest.mark.parametrize("entry", ["create csv", "create parquet", "migrate parquet"])
def test_a_name_oreo_cannot_carry_is_refused_naming_the_column(
    project: Catalog, tmp_path: Path, entry: str, name: str, why: str
) -> None:
    if entry == "create csv":
        source = tmp_path / "f.csv"
        with source.open("w", newline="") as fh:
            csv.writer(fh).writerows([["id", name], [1, "x"]])
    else:
        (tmp_path / "dir").mkdir()
        source = _parquet(tmp_path / "dir" / "f.parquet", {"id": [1], name: ["x"]})
    with pytest.raises(InvalidInput, match=why) as caught:
        if entry == "migrate parquet":
            migrate.migrate_parquet(project, tmp_path / "dir", "demo", "d", key="id")
        else:
            create_dataset(project, "demo", "d", source, key="id")
    assert repr(name[:40]) in str(caught.value)
    assert "\n" not in str(caught.value)
    _nothing_created(project, "d")


@pytest.mark.parametrize(("kind", "values"), NESTED, ids=[n for n, _ in NESTED])
def test_a_nested_column_is_refused_at_create_naming_the_column_and_its_type(
    project: Catalog, tmp_path: Path, kind: str, values: pa.Array
) -> None:
    source = _parquet(tmp_path / "nested.parquet", {"id": [1], "deep": values})
    with pytest.raises(InvalidInput, match=r"column 'deep' in nested.parquet is (struct|list|map)<.*>, a nested type"):
        create_dataset(project, "demo", "d", source, key="id")
    _nothing_created(project, "d")

    folder = tmp_path / "dir"
    folder.mkdir()
    _parquet(folder / "nested.parquet", {"id": [1], "deep": values})
    with pytest.raises(InvalidInput, match=r"column 'deep' has the Parquet type .* which oreo migrate cannot carry"):
        migrate.migrate_parquet(project, folder, "demo", "d", key="id")
    _nothing_created(project, "d")


# ---------------------------------------------------------------- through Spark


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """demo/odd: a key, one column per odd name, and a plain number column."""
    base = tmp_path_factory.mktemp("column_names")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    columns: dict[str, Any] = {"id": [1, 2], "n": [10, 20]}
    columns |= {name: [f"{i}-one", f"{i}-two"] for i, name in enumerate(ODD_NAMES)}
    _parquet(base / "odd.parquet", columns)
    with pytest.MonkeyPatch.context() as mp:
        switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER), ("ada", Role.ADMIN)):
            create_user(catalog, name, password=f"{name}-password-1")
            add_member(catalog, "demo", name, role)
        create_dataset(catalog, "demo", "odd", base / "odd.parquet", key="id")
        reset_catalogs()
    get_settings.cache_clear()
    return base


@pytest.fixture
def spark_catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    yield open_catalog()


def _edit_and_approve(catalog: Catalog, ops: list[sessions.EditOp]) -> None:
    ed = get_user(catalog, "ed")
    session = sessions.open_session(catalog, "demo", "odd", actor=ed)
    sessions.apply_edits(catalog, session.session_id, ops, actor=ed)
    cr = change_requests.submit_change_request(catalog, session.session_id, actor=ed)
    merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "al"))


def _rows() -> dict[str, dict[str, Any]]:
    cursor = reads.cursor().execute(
        "SELECT * FROM delta_scan(?) ORDER BY row_id", [str(layout_for("demo", "odd").main)]
    )
    names = [d[0] for d in cursor.description]
    return {r[0]: dict(zip(names, r, strict=True)) for r in cursor.fetchall()}


@pytest.mark.spark
def test_odd_names_survive_edit_submit_approve_append_and_export(spark_catalog: Catalog, tmp_path: Path) -> None:
    catalog = spark_catalog
    _edit_and_approve(catalog, [sessions.SetCell("1", name, f"new {name}") for name in ODD_NAMES])
    rows = _rows()
    assert all(rows["1"][name] == f"new {name}" for name in ODD_NAMES)
    assert all(rows["2"][name] == f"{i}-two" for i, name in enumerate(ODD_NAMES))
    changed = history.diff_versions(catalog, "demo", "odd", 0, 1, actor=get_user(catalog, "ed"))
    assert {(c.column, c.new) for c in changed.changes} == {(name, f"new {name}") for name in ODD_NAMES}

    # An append that adds a column of each odd name, then an ordinary edit: both merge.
    more = tmp_path / "more.csv"
    added = [f"{name[:100]}+" for name in ODD_NAMES]
    with more.open("w", newline="") as fh:
        csv.writer(fh).writerows([["id", "n", *added], [3, 30, *[f"v{i}" for i in range(len(added))]]])
    cr, plan = imports.import_file(catalog, "demo", "odd", more, actor=get_user(catalog, "ed"))
    assert sorted(c.column for c in plan.schema_changes) == sorted(added)
    merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "al"))
    _edit_and_approve(catalog, [sessions.SetCell("2", "n", "21"), sessions.SetCell("3", added[0], "edited")])
    rows = _rows()
    assert (rows["2"]["n"], rows["3"][added[0]], rows["3"][added[-1]]) == (21, "edited", f"v{len(added) - 1}")

    out = tmp_path / "odd.csv"
    history.export_version(catalog, "demo", "odd", out, actor=get_user(catalog, "ed"))
    with out.open(newline="") as fh:
        exported = list(csv.DictReader(fh))
    assert set(ODD_NAMES + added) <= set(exported[0])
    assert {r["row_id"]: r[ODD_NAMES[0]] for r in exported}["1"] == f"new {ODD_NAMES[0]}"


@pytest.mark.spark
@pytest.mark.parametrize(("name", "why"), [("_op", "reserves"), ("_Changed", "reserves"), ("a`b", "backtick")])
def test_an_append_adding_a_name_oreo_cannot_carry_is_refused(
    spark_catalog: Catalog, tmp_path: Path, name: str, why: str
) -> None:
    more = tmp_path / "more.csv"
    with more.open("w", newline="") as fh:
        csv.writer(fh).writerows([["id", "n", name], [3, 30, "x"]])
    with pytest.raises(InvalidInput, match=rf"column {name!r} in more.csv .*{why}"):
        imports.import_file(spark_catalog, "demo", "odd", more, actor=get_user(spark_catalog, "ed"))
    assert not any(p.name.startswith("up_") and (p / "schema.json").exists()
                   for p in layout_for("demo", "odd").imports_root.iterdir())  # fmt: skip


@pytest.mark.spark
def test_an_append_with_a_nested_column_is_refused(spark_catalog: Catalog, tmp_path: Path) -> None:
    source = _parquet(tmp_path / "more.parquet", {"id": [3], "n": [30], "deep": NESTED[0][1]})
    with pytest.raises(InvalidInput, match=r"column 'deep' in more.parquet is struct<a: int64>, a nested type"):
        imports.import_file(spark_catalog, "demo", "odd", source, actor=get_user(spark_catalog, "ed"))
