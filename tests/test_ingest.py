"""Strict reading of CSV, Parquet and XLSX files into Arrow, and every way a file is refused."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import Path

import openpyxl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import InvalidFile, InvalidInput
from core.ingest import file_kind, read_table_file, xlsx_sheets

ROWS = [(1, "ada", 36.5), (2, "grace", 85.0), (3, "linus", None)]


def _csv(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _xlsx(path: Path, sheets: dict[str, list[tuple]]) -> Path:
    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(list(row))
    workbook.save(path)
    return path


def _parquet(path: Path, table: pa.Table) -> Path:
    pq.write_table(table, path)
    return path


# ---------------------------------------------------------------- good files


def test_read_csv(tmp_path: Path) -> None:
    path = _csv(tmp_path / "people.csv", "id,name,score\n1,ada,36.5\n2,grace,85.0\n3,linus,\n")
    table = read_table_file(path)
    assert table.schema == pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
    assert table.to_pylist() == [dict(zip(("id", "name", "score"), r, strict=True)) for r in ROWS]


def test_read_csv_keeps_quoted_commas_and_newlines(tmp_path: Path) -> None:
    path = _csv(tmp_path / "quoted.csv", 'id,note\n1,"a, b"\n2,"two\nlines"\n3,caf\u00e9\n')
    assert read_table_file(path).column("note").to_pylist() == ["a, b", "two\nlines", "caf\u00e9"]


def test_read_parquet(tmp_path: Path) -> None:
    source = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.uint32()),
            "name": pa.array(["ada", "grace", "linus"], pa.large_string()),
            "score": [36.5, 85.0, None],
            "day": pa.array([date(2024, 1, 1), date(2024, 2, 29), None], pa.date32()),
        }
    )
    table = read_table_file(_parquet(tmp_path / "people.parquet", source))
    # Types Spark and DuckDB store the same way: unsigned -> int64, large_string -> string.
    assert table.schema == pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("day", pa.date32())]
    )
    assert table.to_pylist() == source.to_pylist()


@pytest.mark.parametrize("suffix", [".pq", ".PARQUET"])
def test_parquet_suffix_variants(tmp_path: Path, suffix: str) -> None:
    path = _parquet(tmp_path / f"people{suffix}", pa.table({"id": [1, 2]}))
    assert file_kind(path) == "parquet"
    assert read_table_file(path).column("id").to_pylist() == [1, 2]


def test_read_xlsx(tmp_path: Path) -> None:
    path = _xlsx(tmp_path / "people.xlsx", {"People": [("id", "name", "score"), *ROWS]})
    assert xlsx_sheets(path) == ["People"]
    table = read_table_file(path)
    assert table.column_names == ["id", "name", "score"]
    assert table.column("id").to_pylist() == [1, 2, 3]
    assert table.column("name").to_pylist() == ["ada", "grace", "linus"]
    assert table.column("score").to_pylist() == [36.5, 85.0, None]


def test_read_named_sheet_of_a_workbook(tmp_path: Path) -> None:
    path = _xlsx(tmp_path / "book.xlsx", {"first": [("a",), (1,)], "second": [("b",), (2,), (3,)]})
    assert xlsx_sheets(path) == ["first", "second"]
    assert read_table_file(path, sheet="second").to_pylist() == [{"b": 2}, {"b": 3}]


# ---------------------------------------------------------------- timestamps


UTC_US = pa.timestamp("us", tz="UTC")


def test_naive_csv_timestamps_become_utc_microseconds(tmp_path: Path) -> None:
    path = _csv(tmp_path / "ts.csv", "id,at\n1,2024-01-02 03:04:05\n2,2024-06-30T23:59:59.123456\n")
    column = read_table_file(path).column("at")
    assert column.type == UTC_US
    assert column.to_pylist() == [
        datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        datetime(2024, 6, 30, 23, 59, 59, 123456, tzinfo=UTC),
    ]


def test_offset_csv_timestamps_are_converted_to_utc(tmp_path: Path) -> None:
    path = _csv(tmp_path / "ts.csv", "id,at\n1,2024-01-02T05:04:05+02:00\n")
    column = read_table_file(path).column("at")
    assert column.type == UTC_US
    assert column.to_pylist() == [datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)]


@pytest.mark.parametrize(
    ("arrow_type", "raw", "expected"),
    [
        pytest.param(pa.timestamp("s"), 1_704_164_645, datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), id="naive-s"),
        pytest.param(
            pa.timestamp("ms"), 1_704_164_645_250, datetime(2024, 1, 2, 3, 4, 5, 250000, tzinfo=UTC), id="naive-ms"
        ),
        pytest.param(
            pa.timestamp("ns"),
            1_704_164_645_123_456_000,
            datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
            id="naive-ns",
        ),
        pytest.param(
            pa.timestamp("ns", tz="Europe/Paris"),
            1_704_164_645_123_456_000,
            datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
            id="paris-ns",
        ),
        pytest.param(
            pa.timestamp("us", tz="America/New_York"),
            1_704_164_645_000_000,
            datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
            id="new-york-us",
        ),
    ],
)
def test_parquet_timestamps_become_utc_microseconds(
    tmp_path: Path, arrow_type: pa.DataType, raw: int, expected: datetime
) -> None:
    source = pa.table({"at": pa.array([raw, None], pa.int64()).cast(arrow_type)})
    column = read_table_file(_parquet(tmp_path / "ts.parquet", source)).column("at")
    assert column.type == UTC_US
    assert column.to_pylist() == [expected, None]


@pytest.mark.parametrize("arrow_type", [pa.timestamp("ns"), pa.timestamp("ns", tz="Europe/Paris")])
def test_nanoseconds_that_would_be_cut_are_refused_naming_the_column(tmp_path: Path, arrow_type: pa.DataType) -> None:
    # pandas writes nanoseconds; Spark keeps microseconds, so 789 ns would be cut without a word.
    source = pa.table({"at": pa.array([1_704_164_645_123_456_789], pa.int64()).cast(arrow_type)})
    with pytest.raises(InvalidFile, match=r"column 'at' .* microseconds"):
        read_table_file(_parquet(tmp_path / "ts.parquet", source))


def test_xlsx_datetimes_become_utc_microseconds(tmp_path: Path) -> None:
    path = _xlsx(tmp_path / "ts.xlsx", {"s": [("id", "at"), (1, datetime(2024, 1, 2, 3, 4, 5))]})
    column = read_table_file(path).column("at")
    assert column.type == UTC_US
    assert column.to_pylist() == [datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)]


# ---------------------------------------------------------------- refused files


def _write(path: Path, content: bytes | pa.Table | dict[str, list[tuple]]) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, pa.Table):
        _parquet(path, content)
    else:
        _xlsx(path, content)
    return path


def _truncated_parquet(path: Path) -> Path:
    _parquet(path, pa.table({"id": list(range(1000))}))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _parquet_bad_footer(path: Path) -> Path:
    _parquet(path, pa.table({"id": list(range(1000))}))
    data = bytearray(path.read_bytes())
    data[-12:-4] = b"\xff" * 8  # garble the footer metadata, keep the magic bytes
    path.write_bytes(bytes(data))
    return path


BAD_FILES = [
    pytest.param(
        "ragged.csv", b"id,name\n1,ada\n2\n", "different number of columns than its header", id="ragged-short"
    ),
    pytest.param("ragged.csv", b"id,name\n1,ada\n2,grace,extra\n", "different number of columns", id="ragged-long"),
    pytest.param("latin1.csv", b"id,name\n1,caf\xe9\n", r"not UTF-8 text \(bad byte at offset 13\)", id="latin-1"),
    pytest.param("cut.csv", b"id,name\n1,caf\xc3", "not UTF-8 text", id="truncated-utf8"),
    pytest.param("empty.csv", b"", r"empty.csv is empty \(0 bytes\)", id="empty-csv"),
    pytest.param("empty.parquet", b"", r"is empty \(0 bytes\)", id="empty-parquet"),
    pytest.param("empty.xlsx", b"", r"is empty \(0 bytes\)", id="empty-xlsx"),
    pytest.param("blank.csv", b"\n", "has no header row", id="no-header"),
    pytest.param(
        "data.txt", b"id\n1\n", r"unsupported file type '.txt' for data.txt; use .csv, .parquet or .xlsx", id="txt"
    ),
    pytest.param("data.json", b'{"id": 1}', "unsupported file type '.json'", id="json"),
    pytest.param("data", b"id\n1\n", r"unsupported file type '\(none\)'", id="no-suffix"),
    pytest.param("garbage.parquet", b"PAR1 this is not parquet", "not a readable Parquet file", id="garbage-parquet"),
    pytest.param("fake.xlsx", b"id,name\n1,ada\n", "not a readable XLSX workbook", id="csv-named-xlsx"),
    pytest.param(
        "book.xlsx",
        {"one": [("a",), (1,)], "two": [("b",), (2,)]},
        r"book.xlsx has 2 sheets \(one, two\); name the one to read",
        id="xlsx-several-sheets",
    ),
    pytest.param("dup.csv", b"id,name,id\n1,ada,2\n", "has the column 'id' twice", id="duplicate-columns"),
    pytest.param("dupcase.csv", b"id,Name,NAME\n1,a,b\n", "has the column 'NAME' twice", id="duplicate-case"),
    pytest.param(
        "dup.xlsx",
        {"s": [("id", "name", "name"), (1, "a", "b")]},
        "has the column 'name' twice",
        id="duplicate-columns-xlsx",
    ),
    pytest.param(
        "dup.parquet",
        pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"]),
        "not a readable Parquet file",
        id="duplicate-columns-parquet",
    ),
    pytest.param("space.csv", b"id,first name\n1,ada\n", r"column name 'first name' .* contains ' '", id="space"),
    pytest.param("comma.csv", b'id,"a,b"\n1,2\n', r"column name 'a,b' .* contains ','", id="comma"),
    pytest.param("semi.csv", b"id,a;b\n1,2\n", "contains ';'", id="semicolon"),
    pytest.param("eq.csv", b"id,a=b\n1,2\n", "contains '='", id="equals"),
    pytest.param("paren.csv", b"id,f(x)\n1,2\n", r"contains '\(', '\)'", id="parentheses"),
    pytest.param("space.parquet", pa.table({"first name": [1]}), "contains ' '", id="space-parquet"),
    pytest.param("space.xlsx", {"s": [("first name",), (1,)]}, "contains ' '", id="space-xlsx"),
    pytest.param("noname.csv", b"id,,name\n1,2,3\n", "has a column without a name", id="blank-header"),
    pytest.param(
        "mixed.xlsx",
        {"s": [("id", "v"), (1, "text"), (2, 3.5)]},
        r"sheet 's' of mixed.xlsx mixes types",
        id="xlsx-mixed-types",
    ),
    pytest.param(
        "noname.xlsx", {"s": [("id", None, "name"), (1, 2, 3)]}, "has a column without a name", id="blank-header-xlsx"
    ),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_FILES)
def test_bad_files_are_refused_with_a_clear_message(
    tmp_path: Path, name: str, content: bytes | pa.Table | dict, message: str
) -> None:
    path = _write(tmp_path / name, content)
    with pytest.raises(InvalidFile, match=message) as info:
        read_table_file(path)
    assert isinstance(info.value, InvalidInput)
    assert info.value.field == "file"
    assert "\n" not in str(info.value).strip()  # one line, fit for the CLI's "error: ..."


@pytest.mark.parametrize("damage", [_truncated_parquet, _parquet_bad_footer], ids=["truncated", "bad-footer"])
def test_corrupt_parquet_is_refused(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    path = damage(tmp_path / "broken.parquet")
    with pytest.raises(InvalidFile, match=r"broken\.parquet is not a readable Parquet file"):
        read_table_file(path)


def test_unknown_sheet_is_refused(tmp_path: Path) -> None:
    path = _xlsx(tmp_path / "book.xlsx", {"one": [("a",), (1,)], "two": [("b",), (2,)]})
    with pytest.raises(InvalidFile, match=r"book.xlsx has no sheet 'three'; sheets are: one, two"):
        read_table_file(path, sheet="three")


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidFile, match="file not found"):
        read_table_file(tmp_path / "nowhere.csv")


def test_file_over_max_bytes_is_refused(tmp_path: Path) -> None:
    path = _csv(tmp_path / "big.csv", "id\n" + "1\n" * 100)
    with pytest.raises(InvalidFile, match=r"over the .* upload limit"):
        read_table_file(path, max_bytes=path.stat().st_size - 1)
    assert read_table_file(path, max_bytes=path.stat().st_size).num_rows == 100


def test_size_limit_message_uses_the_configured_megabytes(tmp_path: Path) -> None:
    path = tmp_path / "huge.csv"
    with path.open("wb") as fh:  # sparse: the size check must refuse it before reading a byte
        fh.truncate(3 * 1024 * 1024 + 1)
    with pytest.raises(InvalidFile, match=r"huge.csv is 3.0 MB, over the 2 MB upload limit"):
        read_table_file(path, max_bytes=2 * 1024 * 1024)


def test_row_id_column_is_read_as_is(tmp_path: Path) -> None:
    """``row_id`` is only refused when the dataset derives its own ids (see test_datasets)."""
    path = _csv(tmp_path / "ids.csv", "row_id,name\na,ada\n")
    assert read_table_file(path).column_names == ["row_id", "name"]


# ---------------------------------------------------------------- issue 25 §4: no silent NULL, no year 0


def test_xlsx_formulas_without_a_computed_value_are_refused_naming_the_cells(tmp_path: Path) -> None:
    # openpyxl saves formulas without their results, as any tool that does not compute them does.
    path = _xlsx(tmp_path / "f.xlsx", {"Prices": [("id", "net", "gross"), (1, 10, "=B2*1.2"), (2, 20, "=B3*1.2")]})
    with pytest.raises(InvalidFile, match=r"formula cells without a computed value \(Prices!C2, Prices!C3\)"):
        read_table_file(path)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("id,day\n1,2024-01-01\n2,0000-01-01\n", "'0000-01-01' (data row 2)"),
        ("id,at\n1,0000-03-01 10:00:00\n", "'0000-03-01 10:00:00.000000Z' (data row 1)"),
    ],
)
def test_dates_before_year_one_are_refused_naming_the_value(tmp_path: Path, text: str, shown: str) -> None:
    with pytest.raises(InvalidFile, match=re.escape(f"{shown}, outside the years 0001-9999")):
        read_table_file(_csv(tmp_path / "old.csv", text))


def test_a_parquet_date_before_year_one_is_refused(tmp_path: Path) -> None:
    days = pa.array([-719_162, -719_163], pa.int32()).cast(pa.date32())  # 0001-01-01 and the day before
    path = _parquet(tmp_path / "old.parquet", pa.table({"id": [1, 2], "day": days}))
    with pytest.raises(InvalidFile, match=r"column 'day' has '0000-12-31' \(data row 2\)"):
        read_table_file(path)
