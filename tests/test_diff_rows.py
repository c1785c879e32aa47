"""``core.diff.row_diff``: the row-shaped diff an approver reads, its summary, filters, paging and export."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from core import auth, diff, projects, reads
from core.catalog import Catalog, DatasetRow
from core.datasets import layout_for
from core.errors import EngineError, InvalidInput, PermissionDenied

COLUMNS = ["row_id", "name", "city", "n", "born"]


def _write_versions(path: Path) -> None:
    """Version 0, then version 1 with two updates (one to NULL), a delete and two inserts."""
    write_deltalake(
        path,
        pa.table(
            {
                "row_id": ["1", "2", "3", "4", "5"],
                "name": ["ann", "bob", "cy", None, "eve"],
                "city": ["Oslo", "Rome", "Lima", "Kiev", "Pune"],
                "n": pa.array([1, 2, 3, 4, 5], pa.int64()),
                "born": [date(2000, 1, d) for d in range(1, 6)],
            }
        ),
    )
    write_deltalake(
        path,
        pa.table(
            {
                # 1: name and n change; 2: unchanged; 3: deleted; 4: NULL name filled, city emptied;
                # 5: unchanged; 6 and 7: inserted (7 with a NULL).
                "row_id": ["1", "2", "4", "5", "6", "7"],
                "name": ["ann2", "bob", "dee", "eve", "fay", "gus"],
                "city": ["Oslo", "Rome", None, "Pune", "Nice", None],
                "n": pa.array([10, 2, 4, 5, 6, 7], pa.int64()),
                "born": [
                    date(2000, 1, 1),
                    date(2000, 1, 2),
                    date(2000, 1, 4),
                    date(2000, 1, 5),
                    None,
                    date(2001, 1, 1),
                ],
            }
        ),
        mode="overwrite",
    )


def _source(path: Path, before: int = 0, after: int = 1) -> diff.DiffSource:
    names = ", ".join(reads.quote_ident(c) for c in COLUMNS)
    scan = "FROM delta_scan(?, version => ?)"
    return diff.DiffSource(
        before=diff.Relation(f"SELECT {names} {scan}", [str(path), before]),
        after=diff.Relation(f"SELECT {names} {scan}", [str(path), after]),
        columns=COLUMNS,
    )


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "main"
    _write_versions(path)
    return path


def _shape(page: diff.RowDiffPage) -> list[tuple[str, str, list[tuple[str, str | None, str | None]]]]:
    return [(r.row_id, r.kind, [(c.column, c.old, c.new) for c in r.cells]) for r in page.rows]


def test_rows_carry_changed_cells_for_updates_and_whole_rows_for_inserts_and_deletes(table: Path) -> None:
    page = diff.row_diff(_source(table), label_columns=["name", "city"])
    assert _shape(page) == [
        ("1", "update", [("name", "ann", "ann2"), ("n", "1", "10")]),
        ("3", "delete", [("name", "cy", None), ("city", "Lima", None), ("n", "3", None), ("born", "2000-01-03", None)]),
        ("4", "update", [("name", None, "dee"), ("city", "Kiev", None)]),
        ("6", "insert", [("name", None, "fay"), ("city", None, "Nice"), ("n", None, "6"), ("born", None, None)]),
        ("7", "insert", [("name", None, "gus"), ("city", None, None), ("n", None, "7"), ("born", None, "2001-01-01")]),
    ]
    assert page.total == 5
    by_id = {r.row_id: r for r in page.rows}
    # Labels: the new values, the old ones for a deleted row.
    assert by_id["1"].labels == {"name": "ann2", "city": "Oslo"}
    assert by_id["3"].labels == {"name": "cy", "city": "Lima"}
    assert by_id["3"].row == {"name": "cy", "city": "Lima", "n": "3", "born": "2000-01-03"}
    assert by_id["6"].row == {"name": "fay", "city": "Nice", "n": "6", "born": None}
    assert by_id["1"].row is None
    assert by_id["1"].to_json()["cells"] == [
        {"column": "name", "old": "ann", "new": "ann2"},
        {"column": "n", "old": "1", "new": "10"},
    ]


def test_summary_counts_the_whole_diff_whatever_the_page_or_filter(table: Path) -> None:
    page = diff.row_diff(_source(table), spec=diff.RowFilterSpec(kinds=("insert",)), limit=1, offset=1)
    assert (page.summary.updated, page.summary.inserted, page.summary.deleted) == (2, 2, 1)
    assert page.summary.columns == {"name": 2, "city": 1, "n": 1}
    assert list(page.summary.columns) == ["name", "city", "n"]  # most changed first, then by name
    assert page.total == 2
    assert [r.row_id for r in page.rows] == ["7"]


@pytest.mark.parametrize(
    ("kinds", "columns", "expected"),
    [
        (["update"], None, ["1", "4"]),
        (["delete"], None, ["3"]),
        (["insert", "delete"], None, ["3", "6", "7"]),
        (None, ["n"], ["1", "3", "6", "7"]),  # inserts and deletes change a column they hold a value in
        (None, ["city"], ["3", "4", "6"]),
        (["update"], ["city"], ["4"]),
        (["insert"], ["born"], ["7"]),
        (None, ["city", "n"], ["1", "3", "4", "6", "7"]),
    ],
)
def test_filters_by_kind_and_column(
    table: Path, kinds: list[str] | None, columns: list[str] | None, expected: list[str]
) -> None:
    spec = diff.check_filters(kinds, columns, COLUMNS)
    page = diff.row_diff(_source(table), spec=spec)
    assert [r.row_id for r in page.rows] == expected
    assert page.total == len(expected)


def test_paging_walks_every_row_once_in_row_id_order(table: Path) -> None:
    seen: list[str] = []
    for offset in range(0, 6, 2):
        page = diff.row_diff(_source(table), limit=2, offset=offset)
        assert page.total == 5
        seen += [r.row_id for r in page.rows]
    assert seen == ["1", "3", "4", "6", "7"]
    past = diff.row_diff(_source(table), limit=2, offset=10)
    assert past.rows == [] and past.total == 5 and past.summary.deleted == 1


def test_no_change_has_an_empty_page_and_zero_counts(table: Path) -> None:
    page = diff.row_diff(_source(table, 1, 1))
    assert page.rows == [] and page.total == 0
    assert page.summary.to_json() == {
        "rows_updated": 0,
        "rows_inserted": 0,
        "rows_deleted": 0,
        "columns": {},
        "schema_changes": [],
    }


def test_reversed_source_swaps_inserts_and_deletes(table: Path) -> None:
    page = diff.row_diff(_source(table, 1, 0))
    kinds = {r.row_id: r.kind for r in page.rows}
    assert kinds == {"1": "update", "3": "insert", "4": "update", "6": "delete", "7": "delete"}
    first = page.rows[0]
    assert [(c.column, c.old, c.new) for c in first.cells] == [("name", "ann2", "ann"), ("n", "10", "1")]


@pytest.mark.parametrize(
    ("kinds", "columns", "match"),
    [
        (["upsert"], None, "unknown change kind 'upsert'"),
        (None, ["nope"], "the diff has no column 'nope'"),
        (None, ["row_id"], "the diff has no column 'row_id'"),
    ],
)
def test_bad_filters_are_refused(kinds: list[str] | None, columns: list[str] | None, match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        diff.check_filters(kinds, columns, COLUMNS)


def test_bad_page_is_refused(table: Path) -> None:
    with pytest.raises(InvalidInput, match="limit must be between 1 and 10000"):
        diff.row_diff(_source(table), limit=0)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_writes_the_whole_filtered_diff_and_reads_back_as_the_pages_show_it(
    table: Path, tmp_path: Path, fmt: diff.ExportFormat
) -> None:
    out = tmp_path / f"diff.{fmt}"
    written = diff.export_row_diff(_source(table), out, fmt=fmt)
    assert written == 5
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial file left
    reader = "read_csv(?, all_varchar = true)" if fmt == "csv" else "read_parquet(?)"
    con = duckdb.connect()
    back = con.execute(f"SELECT * FROM {reader} ORDER BY row_id", [str(out)]).fetchall()
    names = [d[0] for d in con.description]
    assert names == ["row_id", "kind", "changed_columns"] + [f"{s}.{c}" for c in COLUMNS[1:] for s in ("old", "new")]
    page = diff.row_diff(_source(table), limit=100)
    assert [r[0] for r in back] == [r.row_id for r in page.rows]
    for record, row in zip(back, page.rows, strict=True):
        values = dict(zip(names, record, strict=True))
        assert values["kind"] == row.kind
        changed = [c.column for c in row.cells if c.old != c.new]
        assert values["changed_columns"].split(",") == changed
        for cell in row.cells:
            old, new = values[f"old.{cell.column}"], values[f"new.{cell.column}"]
            assert (None if old is None else str(old), None if new is None else str(new)) == (cell.old, cell.new)
    if fmt == "parquet":  # the table's types survive
        types = {r[0]: r[1] for r in con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(out)]).fetchall()}
        assert types["new.n"] == "BIGINT" and types["old.born"] == "DATE"
    filtered = tmp_path / f"deletes.{fmt}"
    assert diff.export_row_diff(_source(table), filtered, fmt=fmt, spec=diff.RowFilterSpec(kinds=("delete",))) == 1


def test_export_failure_leaves_no_file(table: Path, tmp_path: Path) -> None:
    out = tmp_path / "diff.csv"
    broken = diff.DiffSource(
        before=diff.Relation("SELECT * FROM delta_scan(?)", [str(tmp_path / "missing")]),
        after=_source(table).after,
        columns=COLUMNS,
    )
    with pytest.raises(EngineError, match="could not export the diff"):
        diff.export_row_diff(broken, out, fmt="csv")
    assert list(tmp_path.glob("*diff.csv*")) == []


def test_schema_change_add_drop_retype_is_summarised_and_added_columns_compared(tmp_path: Path) -> None:
    path = tmp_path / "main"
    write_deltalake(path, pa.table({"row_id": ["1", "2"], "n": pa.array([1, 2], pa.int32()), "gone": ["a", "b"]}))
    write_deltalake(
        path,
        pa.table({"row_id": ["1", "2"], "n": pa.array([1, 5], pa.int64()), "extra": ["x", None]}),
        mode="overwrite",
        schema_mode="overwrite",
    )
    before, after = reads.table_schema(path, 0), reads.table_schema(path, 1)
    deltas = diff.schema_deltas(before, after)
    assert [d.to_json() for d in deltas] == [
        {"column": "n", "change": "retype", "from": "INTEGER", "to": "BIGINT"},
        {"column": "extra", "change": "add", "from": None, "to": "VARCHAR"},
        {"column": "gone", "change": "drop", "from": "VARCHAR", "to": None},
    ]
    columns = [c.name for c in after]
    present = {c.name for c in before}
    source = diff.DiffSource(
        before=diff.Relation(
            f"SELECT {diff.select_list(columns, present)} FROM delta_scan(?, version => 0)", [str(path)]
        ),
        after=diff.Relation("SELECT * FROM delta_scan(?, version => 1)", [str(path)]),
        columns=columns,
        schema=tuple(deltas),
    )
    page = diff.row_diff(source)
    assert _shape(page) == [("1", "update", [("extra", None, "x")]), ("2", "update", [("n", "2", "5")])]
    assert [d.describe() for d in page.summary.schema] == [
        "changes n: INTEGER → BIGINT",
        "adds column extra (VARCHAR)",
        "drops column gone (VARCHAR)",
    ]


# ---------------------------------------------------------------- identifying columns


@pytest.fixture
def dataset(catalog: Catalog) -> tuple[auth.User, auth.User]:
    """p/d: a delta-rs table registered in the catalog; an admin and an editor of p."""
    projects.create_project(catalog, "p")
    admin, _ = auth.create_user(catalog, "ada", password="correct horse battery")
    editor, _ = auth.create_user(catalog, "ed", password="correct horse battery")
    auth.add_member(catalog, "p", "ada", "admin")
    auth.add_member(catalog, "p", "ed", "editor")
    main = layout_for("p", "d").main
    write_deltalake(
        main,
        pa.table(
            {
                "row_id": ["1"],
                "code": ["A1"],
                "n": pa.array([1], pa.int64()),
                "name": ["ann"],
                "city": ["Oslo"],
                "note": ["x"],
            }
        ),
    )
    with catalog.session() as s:
        s.add(DatasetRow(project_id="p", dataset_id="d", key_column="code", delta_version=0, created_by="ada"))
    return admin, editor


def test_default_label_columns_are_the_key_and_the_first_two_text_columns(
    catalog: Catalog, dataset: tuple[auth.User, auth.User]
) -> None:
    _, editor = dataset
    assert diff.label_columns(catalog, "p", "d", actor=editor) == ["code", "name", "city"]
    cols = [reads.Column("row_id", "VARCHAR"), reads.Column("n", "BIGINT"), reads.Column("a", "VARCHAR")]
    assert diff.default_label_columns(None, cols) == ["a"]
    assert diff.default_label_columns("row_id", cols) == ["a"]


def test_setting_label_columns_is_kept_and_reset(catalog: Catalog, dataset: tuple[auth.User, auth.User]) -> None:
    admin, editor = dataset
    assert diff.set_label_columns(catalog, "p", "d", ["note", "n"], actor=admin) == ["note", "n"]
    assert diff.label_columns(catalog, "p", "d", actor=editor) == ["note", "n"]
    assert diff.set_label_columns(catalog, "p", "d", None, actor=admin) == ["code", "name", "city"]


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        (["nope"], "p/d has no column 'nope'; its columns are: code, n, name, city, note"),
        (["row_id"], "p/d has no column 'row_id'"),
        (["code", "n", "name", "city"], "at most 3 identifying columns, got 4"),
        (["n", "n"], "an identifying column is named twice"),
    ],
)
def test_bad_label_columns_are_refused_and_nothing_changes(
    catalog: Catalog, dataset: tuple[auth.User, auth.User], columns: list[str], match: str
) -> None:
    admin, _ = dataset
    with pytest.raises(InvalidInput, match=match):
        diff.set_label_columns(catalog, "p", "d", columns, actor=admin)
    assert diff.label_columns(catalog, "p", "d", actor=admin) == ["code", "name", "city"]


def test_only_admins_set_label_columns(catalog: Catalog, dataset: tuple[auth.User, auth.User]) -> None:
    _, editor = dataset
    with pytest.raises(PermissionDenied, match="needs the admin role"):
        diff.set_label_columns(catalog, "p", "d", ["n"], actor=editor)
