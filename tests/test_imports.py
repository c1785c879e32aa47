"""Imports: append and upsert round trips, schema evolution, and bad files refused cleanly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import change_requests as crs
from core import engine, imports, merge, reads, resubmit, sessions
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, ChangeRequestRow, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, get_dataset, layout_for
from core.errors import InvalidFile, InvalidInput, OreoError, PermissionDenied, ValidationFailed
from core.projects import create_project
from core.schema import SchemaChange
from core.sessions import SetCell
from tests.merge_support import fresh_copy, switch

pytestmark = pytest.mark.spark


def _zip(i: int) -> str:
    """Postcodes: text, with leading zeros (one is not a number, so the column is text)."""
    return "K1A0B1" if i == 10 else f"{i:05d}"


PEOPLE = "id,name,zip,age,score\n" + "".join(f"{i},name {i},{_zip(i)},{20 + i},{i}.5\n" for i in range(1, 11))


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """demo/people (10 rows keyed by id) and demo/events (4 rows, no key, int and float columns)."""
    base = tmp_path_factory.mktemp("imports")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    people = base / "people.csv"
    people.write_text(PEOPLE)
    events = base / "events.parquet"
    pq.write_table(
        pa.table(
            {
                "code": pa.array([1, 2, 3, 4], pa.int32()),
                "amount": pa.array([1.5, 2.5, 3.5, 4.5], pa.float32()),
                "label": ["a", "b", "c", "d"],
            }
        ),
        events,
    )
    with pytest.MonkeyPatch.context() as mp:
        switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name, role in (("ed", Role.EDITOR), ("eve", Role.EDITOR), ("al", Role.APPROVER), ("ada", Role.ADMIN)):
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


def _rows(dataset: str, version: int | None = None) -> dict[str, dict[str, Any]]:
    scan = "delta_scan(?)" if version is None else "delta_scan(?, version => ?)"
    params: list[Any] = [str(layout_for("demo", dataset).main)] + ([] if version is None else [version])
    cursor = reads.cursor().execute(f"SELECT * FROM {scan} ORDER BY row_id", params)
    names = [d[0] for d in cursor.description]
    return {r[0]: dict(zip(names, r, strict=True)) for r in cursor.fetchall()}


def _types(dataset: str) -> dict[str, str]:
    rows = reads.cursor().execute("DESCRIBE SELECT * FROM delta_scan(?)", [str(layout_for("demo", dataset).main)])
    return {r[0]: str(r[1]) for r in rows.fetchall()}


def _approve(catalog: Catalog, cr: crs.ChangeRequest) -> crs.ChangeRequest:
    return merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "al"))


def _people_before() -> dict[str, dict[str, Any]]:
    return {
        str(i): {"row_id": str(i), "id": i, "name": f"name {i}", "zip": _zip(i), "age": 20 + i, "score": i + 0.5}
        for i in range(1, 11)
    }


def test_append_round_trip_keeps_text_columns_as_text(catalog: Catalog, tmp_path: Path) -> None:
    ed = get_user(catalog, "ed")
    source = _file(tmp_path, "more.csv", "id,name,zip,age,score\n11,Zoë,00077,31,11.5\n12,Ann,01200,,12\n")

    cr, plan = imports.import_file(catalog, "demo", "people", source, actor=ed)

    assert (cr.kind, cr.state, cr.rows, cr.base_version, plan.schema_changes) == ("import", crs.CRState.OPEN, 2, 0, [])
    assert cr.upload_id is not None
    upload = layout_for("demo", "people").upload(cr.upload_id)
    assert sorted(p.name for p in upload.iterdir()) == ["converted.parquet", "raw.csv", "schema.json"]
    assert (upload / "raw.csv").read_bytes() == source.read_bytes()
    page = crs.diff_change_request(catalog, cr.id, actor=ed)
    assert [(c.row_id, c.change) for c in page.changes] == [("11", "insert"), ("12", "insert")]

    merged = _approve(catalog, cr)

    expected = _people_before()
    expected["11"] = {"row_id": "11", "id": 11, "name": "Zoë", "zip": "00077", "age": 31, "score": 11.5}
    expected["12"] = {"row_id": "12", "id": 12, "name": "Ann", "zip": "01200", "age": None, "score": 12.0}
    assert _rows("people") == expected
    assert merged.merged_version == 1
    assert not layout_for("demo", "people").staging(cr.id).exists()
    assert get_dataset(catalog, "demo", "people", actor=ed).rows == 12


def test_a_column_the_file_leaves_empty_fits_any_table_type(catalog: Catalog, tmp_path: Path) -> None:
    ed = get_user(catalog, "ed")
    source = _file(tmp_path, "no_ages.csv", "id,name,zip,age,score\n11,Zoë,00077,,11.5\n12,Ann,01200,,12\n")

    cr, plan = imports.import_file(catalog, "demo", "people", source, actor=ed)

    age = next(c for c in plan.columns if c.name == "age")
    assert (age.status, plan.schema_changes) == ("cast", [])
    _approve(catalog, cr)
    rows = _rows("people")
    assert (rows["11"]["age"], rows["12"]["age"], rows["12"]["name"]) == (None, None, "Ann")
    assert _types("people")["age"] == "BIGINT"


def test_upsert_updates_only_the_cells_that_differ_and_inserts_the_rest(catalog: Catalog, tmp_path: Path) -> None:
    ed = get_user(catalog, "ed")
    # id 2: new name; id 3: identical to the table; id 13: new. No age column: ages stay.
    source = _file(tmp_path, "fix.csv", "id,name,zip,score\n2,Bea,00002,2.5\n3,name 3,00003,3.5\n13,Cy,00013,13.5\n")

    cr, plan = imports.import_file(catalog, "demo", "people", source, actor=ed, mode="upsert", key="id")

    assert (plan.mode, plan.key, cr.rows) == ("upsert", "id", 2)
    changes = crs.diff_change_request(catalog, cr.id, actor=ed).changes
    assert [(c.row_id, c.change, c.column, c.old, c.new) for c in changes if c.change == "update"] == [
        ("2", "update", "name", "name 2", "Bea")
    ]
    assert [(c.row_id, c.change) for c in changes if c.change != "update"] == [("13", "insert")]

    _approve(catalog, cr)

    expected = _people_before()
    expected["2"]["name"] = "Bea"
    expected["13"] = {"row_id": "13", "id": 13, "name": "Cy", "zip": "00013", "age": None, "score": 13.5}
    assert _rows("people") == expected


def test_a_new_column_goes_through_review_and_one_merge_commit_and_duckdb_reads_it(
    catalog: Catalog, tmp_path: Path
) -> None:
    ed = get_user(catalog, "ed")
    source = _file(tmp_path, "emails.csv", "id,name,email\n4,name 4,d@example.com\n20,Dee,dee@example.com\n")

    cr, plan = imports.import_file(catalog, "demo", "people", source, actor=ed, mode="upsert", key="id")

    added = [SchemaChange("email", "add", None, "string")]
    assert plan.schema_changes == added
    assert crs.get_change_request(catalog, cr.id, actor=get_user(catalog, "al")).schema_changes == tuple(added)
    changes = crs.diff_change_request(catalog, cr.id, actor=ed).changes
    assert [(c.row_id, c.change, c.column) for c in changes] == [("20", "insert", None), ("4", "update", "email")]
    assert changes[0].new == {
        "row_id": "20",
        "id": 20,
        "name": "Dee",
        "zip": None,
        "age": None,
        "score": None,
        "email": "dee@example.com",
    }
    assert (changes[1].old, changes[1].new) == (None, "d@example.com")

    merged = _approve(catalog, cr)

    assert merged.merged_version == 1  # the column was added by the MERGE commit itself
    commits = sorted(engine.history(layout_for("demo", "people").main), key=lambda c: c.version)
    assert [(c.version, c.operation) for c in commits][1:] == [(1, "MERGE")]
    assert _types("people")["email"] == "VARCHAR"
    rows = _rows("people")
    assert (rows["4"]["email"], rows["20"]["email"], rows["5"]["email"]) == ("d@example.com", "dee@example.com", None)
    assert rows["4"]["age"] == 24  # untouched columns keep their values
    # The merged request's diff still reads (the version before has no email column).
    after = crs.diff_change_request(catalog, cr.id, actor=ed).changes
    assert ("4", "update", "email") in [(c.row_id, c.change, c.column) for c in after]


def test_a_widening_is_applied_by_the_merge_and_later_edits_still_merge(catalog: Catalog, tmp_path: Path) -> None:
    ed = get_user(catalog, "ed")
    before = _rows("events")
    session = sessions.open_session(catalog, "demo", "events", actor=ed)
    first = next(iter(before))
    sessions.apply_edits(catalog, session.session_id, [SetCell(first, "label", "edited")], actor=ed)
    edit = crs.submit_change_request(catalog, session.session_id, actor=ed, title="older edit")
    source = tmp_path / "big.parquet"
    pq.write_table(
        pa.table(
            {"code": pa.array([3_000_000_000], pa.int64()), "amount": pa.array([0.1], pa.float64()), "label": ["e"]}
        ),
        source,
    )

    cr, plan = imports.import_file(catalog, "demo", "events", source, actor=get_user(catalog, "eve"))

    assert plan.schema_changes == [
        SchemaChange("code", "widen", "int", "bigint"),
        SchemaChange("amount", "widen", "float", "double"),
    ]
    assert _types("events") == {"row_id": "VARCHAR", "code": "INTEGER", "amount": "FLOAT", "label": "VARCHAR"}
    _approve(catalog, cr)
    assert _types("events") == {"row_id": "VARCHAR", "code": "BIGINT", "amount": "DOUBLE", "label": "VARCHAR"}
    rows = _rows("events")
    assert sorted(r["code"] for r in rows.values()) == [1, 2, 3, 4, 3_000_000_000]
    assert [r["amount"] for r in rows.values() if r["label"] == "e"] == [0.1]

    # An edit based on the table before the widening: the change feed still reads across it.
    _approve(catalog, edit)
    assert _rows("events")[first]["label"] == "edited"


def test_an_incompatible_type_is_refused_naming_the_column_and_both_types(catalog: Catalog, tmp_path: Path) -> None:
    source = _file(tmp_path, "bad.csv", "id,name,age\n30,X,thirty\n")

    with pytest.raises(InvalidInput, match=r"column 'age' is bigint in the table but string in bad.csv"):
        imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"))

    _assert_nothing_left(catalog, "people")


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_a_fraction_into_a_bigint_column_is_refused_naming_row_column_and_value(
    catalog: Catalog, tmp_path: Path, mode: str
) -> None:
    source = _file(tmp_path, "bad.csv", "id,name,age\n30,X,30\n31,Y,1.5\n")
    options = {"key": "id"} if mode == "upsert" else {}

    with pytest.raises(InvalidInput, match=r"bad.csv data row 2, column 'age': '1.5' is not a whole number"):
        imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"), mode=mode, **options)

    _assert_nothing_left(catalog, "people")


def test_text_that_looks_like_a_null_marker_stays_text(catalog: Catalog, tmp_path: Path) -> None:
    source = _file(tmp_path, "na.csv", "id,name,zip,age,score\n40,NA,NULL,41,1.5\n41,nan,N/A,,\n")

    cr, _ = imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"))

    _approve(catalog, cr)
    rows = _rows("people")
    texts = (rows["40"]["name"], rows["40"]["zip"], rows["41"]["name"], rows["41"]["zip"])
    assert texts == ("NA", "NULL", "nan", "N/A")
    assert (rows["41"]["age"], rows["41"]["score"]) == (None, None)  # an empty field is NULL


def test_whole_numbers_written_as_floats_go_into_a_bigint_column_exactly(catalog: Catalog, tmp_path: Path) -> None:
    source = _file(tmp_path, "whole.csv", "id,name,age\n30,X,31.0\n31,Y,4e1\n")

    cr, plan = imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"))

    assert [c.status for c in plan.columns if c.name == "age"] == ["cast"]
    assert plan.schema_changes == []
    _approve(catalog, cr)
    rows = _rows("people")
    assert (rows["30"]["age"], rows["31"]["age"]) == (31, 40)
    assert _types("people")["age"] == "BIGINT"


def test_an_integer_a_double_cannot_hold_is_refused(catalog: Catalog, tmp_path: Path) -> None:
    source = _file(tmp_path, "big.csv", "id,name,score\n30,X,7\n31,Y,9007199254740993\n")

    with pytest.raises(InvalidInput, match=r"big.csv data row 2, column 'score': .*more digits than DOUBLE holds"):
        imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"))

    _assert_nothing_left(catalog, "people")


def test_non_finite_floats_are_refused_unless_the_dataset_allows_them(catalog: Catalog, tmp_path: Path) -> None:
    from core.datasets import set_dataset_settings

    source = _file(tmp_path, "inf.csv", "id,name,score\n30,X,1.5\n31,Y,-inf\n")
    with pytest.raises(InvalidInput, match=r"inf.csv data row 2, column 'score': -inf is not a finite number"):
        imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"))
    _assert_nothing_left(catalog, "people")

    set_dataset_settings(catalog, "demo", "people", actor=get_user(catalog, "ada"), allow_non_finite=True)
    cr, _ = imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"))
    _approve(catalog, cr)
    assert _rows("people")["31"]["score"] == float("-inf")


def test_typed_columns_refuse_values_they_would_alter(catalog: Catalog, tmp_path: Path) -> None:
    """A decimal with more scale than its column, a time part for a DATE, a zone for a timestamp without one."""
    import datetime as dt
    from decimal import Decimal

    typed = tmp_path / "typed.parquet"
    pq.write_table(
        pa.table(
            {
                "id": pa.array([1], pa.int64()),
                "cost": pa.array([Decimal("1.10")], pa.decimal128(10, 2)),
                "day": pa.array([dt.date(2024, 1, 1)], pa.date32()),
            }
        ),
        typed,
    )
    create_dataset(catalog, "demo", "typed", typed, key="id", actor=get_user(catalog, "ada"))
    ed = get_user(catalog, "ed")

    scale = _file(tmp_path, "scale.csv", "id,cost\n2,1.5\n3,1.005\n")
    with pytest.raises(InvalidInput, match=r"scale.csv data row 2, column 'cost': '1.005' has more than 2 decimal"):
        imports.import_file(catalog, "demo", "typed", scale, actor=ed)
    too_big = _file(tmp_path, "big.csv", "id,cost\n2,123456789.5\n")
    with pytest.raises(InvalidInput, match=r"big.csv data row 1, column 'cost': '123456789.5' is too large"):
        imports.import_file(catalog, "demo", "typed", too_big, actor=ed)
    timed = _file(tmp_path, "timed.csv", "id,day\n2,2024-01-02 10:00:00\n")
    with pytest.raises(InvalidInput, match=r"column 'day' is date in the table but timestamp in timed.csv"):
        imports.import_file(catalog, "demo", "typed", timed, actor=ed)
    _assert_nothing_left(catalog, "typed")

    exact = _file(tmp_path, "exact.csv", "id,cost,day\n2,2.5,2024-01-02\n")
    cr, _ = imports.import_file(catalog, "demo", "typed", exact, actor=ed)
    _approve(catalog, cr)
    assert _rows("typed")["2"]["cost"] == Decimal("2.50")


def _assert_nothing_left(catalog: Catalog, dataset: str = "people") -> None:
    layout = layout_for("demo", dataset)
    with catalog.session() as s:
        assert s.query(ChangeRequestRow).count() == 0
    assert engine.latest_version(layout.main) == 0
    assert not layout.imports_root.exists() or [p.name for p in layout.imports_root.iterdir()] == [
        p.name for p in layout.imports_root.iterdir() if p.name.startswith("up_") and _is_source(p)
    ]
    assert not layout.staging_root.exists() or not list(layout.staging_root.iterdir())


def _is_source(folder: Path) -> bool:
    """The dataset's own source upload, kept by create_dataset (it has no schema.json)."""
    return not (folder / "schema.json").exists()


def _xlsx(path: Path, sheets: list[str]) -> Path:
    from openpyxl import Workbook

    book = Workbook()
    for i, name in enumerate(sheets):
        sheet = book.active if i == 0 else book.create_sheet()
        assert sheet is not None
        sheet.title = name
        sheet.append(["id", "name"])
        sheet.append([40 + i, f"from {name}"])
    book.save(path)
    return path


BAD_FILES: list[tuple[str, str, bytes | None, dict[str, Any], type[OreoError], str]] = [
    ("ragged", "r.csv", b"id,name\n31,a\n32,b,extra\n", {}, InvalidFile, "different number of columns"),
    ("not utf-8", "l.csv", "id,name\n33,caf\xe9\n".encode("latin-1"), {}, InvalidFile, "not UTF-8"),
    ("empty", "e.csv", b"", {}, InvalidFile, r"empty \(0 bytes\)"),
    ("header only", "h.csv", b"id,name\n", {}, InvalidFile, "no rows"),
    ("corrupt parquet", "c.parquet", b"PAR1 this is not parquet", {}, InvalidFile, "not a readable Parquet"),
    ("xlsx, no sheet named", "two.xlsx", None, {}, InvalidFile, r"has 2 sheets \(one, two\); name the one"),
    (
        "key missing",
        "k.csv",
        b"id,name\n34,a\n",
        {"mode": "upsert", "key": "email"},
        InvalidInput,
        "upsert key 'email' is not a column of k.csv",
    ),
    (
        "duplicate keys",
        "d.csv",
        b"id,name\n35,a\n35,b\n",
        {"mode": "upsert", "key": "id"},
        ValidationFailed,
        "d.csv: key column 'id' has 1 duplicated value",
    ),
    (
        "existing keys on append",
        "x.csv",
        b"id,name\n1,a\n36,b\n",
        {},
        ValidationFailed,
        r"keys the table already has \(1\); an append only adds new rows",
    ),
    ("no dataset key", "n.csv", b"name\nnobody\n", {}, InvalidInput, "has no column 'id', the dataset's key"),
    ("unknown mode", "m.csv", b"id,name\n37,a\n", {"mode": "overwrite"}, InvalidInput, "unknown import mode"),
]


@pytest.mark.parametrize(
    ("name", "file_name", "content", "options", "error", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES]
)
def test_bad_input_is_refused_with_nothing_left_behind(
    catalog: Catalog,
    tmp_path: Path,
    name: str,
    file_name: str,
    content: bytes | None,
    options: dict[str, Any],
    error: type[OreoError],
    message: str,
) -> None:
    path = tmp_path / file_name
    if content is None:
        _xlsx(path, ["one", "two"])
    else:
        path.write_bytes(content)

    with pytest.raises(error, match=message):
        imports.import_file(catalog, "demo", "people", path, actor=get_user(catalog, "ed"), **options)

    _assert_nothing_left(catalog)


def test_a_file_over_the_size_limit_is_refused(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_MAX_UPLOAD_MB", "1")
    get_settings.cache_clear()
    big = tmp_path / "big.csv"
    big.write_text("id,name\n" + "".join(f"{i},{'x' * 100}\n" for i in range(100, 20_000)))

    with pytest.raises(InvalidFile, match=r"big.csv is 2.0 MB, over the 1 MB upload limit"):
        imports.import_file(catalog, "demo", "people", big, actor=get_user(catalog, "ed"))

    _assert_nothing_left(catalog)


def test_xlsx_sheet_is_picked_and_formulas_come_as_their_values(catalog: Catalog, tmp_path: Path) -> None:
    from openpyxl import Workbook

    book = Workbook()
    first = book.active
    assert first is not None
    first.title = "notes"
    first.append(["ignore me"])
    data = book.create_sheet("people")
    data.append(["id", "name", "age"])
    data.append([50, "Formula", "=20+31"])
    path = tmp_path / "book.xlsx"
    book.save(path)
    # The cached result disagrees with the formula: reading it proves nothing is evaluated.
    _cache_formula_result(path, "20+31", 50)

    cr, _ = imports.import_file(catalog, "demo", "people", path, actor=get_user(catalog, "ed"), sheet="people")
    _approve(catalog, cr)

    assert _rows("people")["50"]["age"] == 50


def _cache_formula_result(path: Path, formula: str, value: int) -> None:
    """Store ``value`` as the cached result of ``formula``, as a spreadsheet app would on save."""
    import re
    import zipfile

    with zipfile.ZipFile(path) as source:
        items = {i.filename: source.read(i.filename) for i in source.infolist()}
    tag = f"<f>{formula}</f>"
    names = [n for n, data in items.items() if n.startswith("xl/worksheets/") and tag.encode() in data]
    assert len(names) == 1
    xml = re.sub(re.escape(tag) + r"(<v>[^<]*</v>|<v\s*/>)?", tag + f"<v>{value}</v>", items[names[0]].decode())
    items[names[0]] = xml.encode()
    with zipfile.ZipFile(path, "w") as target:
        for item, data in items.items():
            target.writestr(item, data)


def test_upsert_by_a_unique_column_of_a_table_without_key(catalog: Catalog, tmp_path: Path) -> None:
    before = _rows("events")
    source = _file(tmp_path, "labels.csv", "label,amount\nb,9.5\nz,1.25\n")

    cr, _ = imports.import_file(
        catalog, "demo", "events", source, actor=get_user(catalog, "ed"), mode="upsert", key="label"
    )
    _approve(catalog, cr)

    after = _rows("events")
    b_id = next(k for k, r in before.items() if r["label"] == "b")
    assert after[b_id] == {**before[b_id], "amount": 9.5}
    new = [r for k, r in after.items() if k not in before]
    assert [(r["label"], r["amount"], r["code"]) for r in new] == [("z", 1.25, None)]
    assert {k: r for k, r in after.items() if k in before and k != b_id} == {
        k: r for k, r in before.items() if k != b_id
    }


def test_an_upsert_that_changes_nothing_is_refused(catalog: Catalog, tmp_path: Path) -> None:
    source = _file(tmp_path, "same.csv", "id,name\n1,name 1\n2,name 2\n")

    with pytest.raises(InvalidInput, match=r"same\.csv changes nothing"):
        imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"), mode="upsert", key="id")

    _assert_nothing_left(catalog)


def test_only_the_uploader_submits_an_upload_and_approvers_review_it(catalog: Catalog, tmp_path: Path) -> None:
    ed, eve = get_user(catalog, "ed"), get_user(catalog, "eve")
    upload = imports.store_upload(catalog, "demo", "people", _file(tmp_path, "n.csv", "id,name\n60,N\n"), actor=ed)

    with pytest.raises(PermissionDenied, match="belongs to 'ed'"):
        imports.get_upload(catalog, "demo", "people", upload.upload_id, actor=eve)
    plan = imports.plan_import(catalog, upload, actor=ed)
    with pytest.raises(PermissionDenied, match="belongs to 'ed'"):
        imports.submit_import(catalog, plan, actor=eve)
    assert [c.name for c in imports.preview(upload).schema] == ["id", "name"]

    cr = imports.submit_import(catalog, plan, actor=ed)
    assert _approve(catalog, cr).state == crs.CRState.MERGED
    assert _rows("people")["60"]["name"] == "N"


def test_an_import_conflicting_with_a_newer_edit_is_blocked(catalog: Catalog, tmp_path: Path) -> None:
    ed, eve = get_user(catalog, "ed"), get_user(catalog, "eve")
    source = _file(tmp_path, "fix.csv", "id,name\n5,from file\n")
    cr, _ = imports.import_file(catalog, "demo", "people", source, actor=ed, mode="upsert", key="id")
    session = sessions.open_session(catalog, "demo", "people", actor=eve)
    sessions.apply_edits(catalog, session.session_id, [SetCell("5", "name", "by hand")], actor=eve)
    _approve(catalog, crs.submit_change_request(catalog, session.session_id, actor=eve))

    from core.errors import ConflictError

    with pytest.raises(ConflictError, match=r"5.name"):
        _approve(catalog, cr)
    assert _rows("people")["5"]["name"] == "by hand"


def test_cli_append_prints_the_submit_document_with_schema_changes(
    catalog: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_cli import run

    source = _file(tmp_path, "more.csv", "id,name,email\n70,Al,al@example.com\n")

    result = run(capsys, "--json", "append", "demo", "people", "--file", str(source), "--as", "ed", "--title", "More")

    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert {"cr_id", "state", "validation", "schema_changes"} <= set(doc)
    assert {k: doc[k] for k in ("mode", "key", "added", "updated", "deleted", "reviewed", "version")} == {
        "mode": "append",
        "key": None,
        "added": 1,
        "updated": 0,
        "deleted": 0,
        "reviewed": True,
        "version": None,
    }
    # The new row leaves columns empty that the rules inferred at creation want filled: warnings only.
    assert (doc["state"], doc["validation"]["status"]) == ("open", "warning")
    assert {f["severity"] for f in doc["validation"]["failures"]} == {"warning"}
    assert doc["schema_changes"] == [{"column": "email", "change": "add", "from": None, "to": "string"}]
    shown = run(capsys, "--json", "cr", "show", doc["cr_id"], "--as", "al")
    assert json.loads(shown.out)["schema_changes"] == doc["schema_changes"]
    record = crs.get_change_request(catalog, doc["cr_id"], actor=get_user(catalog, "al"))
    assert (record.title, record.kind, record.rows) == ("More", "import", 1)


def test_cli_append_refuses_bad_input_with_one_error_line(
    catalog: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_cli import assert_one_error_line, run

    source = _file(tmp_path, "dupes.csv", "id,name\n80,a\n80,b\n")

    result = run(
        capsys, "append", "demo", "people", "--file", str(source), "--as", "ed", "--mode", "upsert", "--key", "id"
    )

    assert_one_error_line(result, r"dupes\.csv: key column 'id' has 1 duplicated value\(s\): 80")
    _assert_nothing_left(catalog)


def test_one_bad_row_names_each_bad_value_and_only_its_columns_in_core_and_the_cli(
    catalog: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 §6: each bad value with its row, column and value; the row's good columns are not named."""
    from tests.test_cli import assert_one_error_line, run

    source = _file(
        tmp_path, "row.csv", "id,name,zip,age,score\n30,a,00001,31,1.5\n31,b,00002,thirty,n/a\n32,c,00003,33,2.5\n"
    )
    values = (
        r"row\.csv has 2 values its table cannot hold in columns 'age' \(1\), 'score' \(1\): "
        r"column 'age', not a number \(BIGINT\): data row 2 \('thirty'\); "
        r"column 'score', not a number \(DOUBLE\): data row 2 \('n/a'\)"
    )

    with pytest.raises(InvalidInput, match=values) as refused:
        imports.import_file(catalog, "demo", "people", source, actor=get_user(catalog, "ed"))
    assert not any(f"'{other}'" in str(refused.value) for other in ("id", "name", "zip"))
    assert_one_error_line(run(capsys, "append", "demo", "people", "--file", str(source), "--as", "ed"), values)
    _assert_nothing_left(catalog)


def test_resubmit_plans_the_upload_again_on_the_current_version(catalog: Catalog, tmp_path: Path) -> None:
    ed, eve = get_user(catalog, "ed"), get_user(catalog, "eve")
    source = _file(tmp_path, "fix.csv", "id,name\n6,from file\n7,also from file\n")
    old, _ = imports.import_file(catalog, "demo", "people", source, actor=ed, mode="upsert", key="id")
    session = sessions.open_session(catalog, "demo", "people", actor=eve)
    sessions.apply_edits(catalog, session.session_id, [SetCell("6", "name", "by hand")], actor=eve)
    _approve(catalog, crs.submit_change_request(catalog, session.session_id, actor=eve))

    fresh = resubmit.resubmit_change_request(catalog, old.id, actor=ed)

    assert (fresh.kind, fresh.base_version, fresh.upload_id) == ("import", 1, old.upload_id)
    assert crs.get_change_request(catalog, old.id, actor=ed).state == crs.CRState.WITHDRAWN
    _approve(catalog, fresh)  # the author chose to overwrite the hand edit
    rows = _rows("people")
    assert (rows["6"]["name"], rows["7"]["name"]) == ("from file", "also from file")
