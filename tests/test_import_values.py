"""core.import_values: every value of an import file its table cannot hold, named at once (issue 24 §6)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import import_values, schema
from core.errors import InvalidInput
from core.import_values import check_file_values, refuse_csv_decimals

TABLE = [("id", "bigint"), ("name", "string"), ("spend", "double"), ("born", "date"), ("active", "boolean")]


def _check(tmp_path: Path, file: pa.Table, *, allow_non_finite: bool = False) -> list[schema.ColumnPlan]:
    converted = tmp_path / "converted.parquet"
    pq.write_table(file, converted)
    columns = schema.compare([(f.name, schema.from_arrow(f.type)) for f in file.schema], TABLE)
    return check_file_values(converted, "people.csv", file.column_names, columns, allow_non_finite=allow_non_finite)


def test_one_bad_row_names_each_bad_value_and_only_its_columns(tmp_path: Path) -> None:
    # As a CSV reader types the file: a column with one bad value is read as text.
    file = pa.table(
        {
            "id": [1, 2, 3, 4],
            "name": ["a", "b", "c", "d"],
            "spend": ["1.5", "2.5", "lots", "4.5"],
            "born": ["2001-01-01", "2002-02-02", "2003-02-30", "2004-04-04"],
            "active": ["true", "false", "maybe", "true"],
        }
    )
    with pytest.raises(InvalidInput) as refused:
        _check(tmp_path, file)
    message = str(refused.value)
    assert message.startswith("people.csv has 3 values its table cannot hold, in columns 'spend' (1), 'born' (1)")
    assert "data row 3, column 'spend': 'lots' is not a number (DOUBLE)" in message
    assert "data row 3, column 'born': '2003-02-30' is not a valid DATE" in message
    assert "data row 3, column 'active': 'maybe' is not true or false" in message
    assert "'id'" not in message and "'name'" not in message
    assert message.endswith("; nothing was imported") and "\n" not in message


def test_every_bad_value_is_counted_and_the_first_ones_are_shown(tmp_path: Path) -> None:
    spend = [str(i) if i % 2 else f"n/a {i}" for i in range(50)]
    file = pa.table({"id": list(range(50)), "spend": spend})
    with pytest.raises(InvalidInput) as refused:
        _check(tmp_path, file)
    message = str(refused.value)
    assert message.startswith("people.csv has 25 values its table cannot hold, in column 'spend': data row 1,")
    shown = [f"data row {i + 1}, column 'spend': 'n/a {i}'" for i in range(0, 50, 2)]
    assert all(s in message for s in shown[: import_values.SHOWN])
    assert not any(s in message for s in shown[import_values.SHOWN :])
    assert "; and 5 more" in message


def test_fractions_for_a_whole_number_column_are_all_named(tmp_path: Path) -> None:
    file = pa.table({"id": [1.0, 2.5, 3.0, 4.25]})
    with pytest.raises(InvalidInput) as refused:
        _check(tmp_path, file)
    message = str(refused.value)
    assert "data row 2, column 'id': '2.5' is not a whole number" in message
    assert "data row 4, column 'id': '4.25' is not a whole number" in message


def test_non_finite_values_are_all_named_with_the_setting_once(tmp_path: Path) -> None:
    file = pa.table({"id": [1, 2, 3], "spend": [float("inf"), 1.0, float("nan")]})
    with pytest.raises(InvalidInput) as refused:
        _check(tmp_path, file)
    message = str(refused.value)
    assert "data row 1, column 'spend': inf is not a finite number" in message
    assert "data row 3, column 'spend': nan is not a finite number" in message
    assert message.count("--allow-non-finite") == 1
    allowed = _check(tmp_path, file, allow_non_finite=True)
    assert [(c.name, c.status) for c in allowed if c.file_type is not None] == [("id", "same"), ("spend", "same")]


def test_a_text_column_whose_values_all_fit_is_left_to_the_type_check(tmp_path: Path) -> None:
    """A Parquet column typed as text, of numbers: no bad value, so the column is refused by type, not by value."""
    columns = _check(tmp_path, pa.table({"id": ["1", "2"], "spend": [" 3.5", "4"]}))
    in_file = [(c.name, c.status) for c in columns if c.file_type is not None]
    assert in_file == [("id", "incompatible"), ("spend", "incompatible")]


def test_csv_decimals_are_all_named(tmp_path: Path) -> None:
    read = pa.table({"cost": ["1.5", "1.005", None, "123456789.5", "abc"]})
    with pytest.raises(InvalidInput) as refused:
        refuse_csv_decimals(read, {"cost": pa.decimal128(10, 2)}, "costs.csv")
    message = str(refused.value)
    assert message.startswith("costs.csv has 3 values its table cannot hold, in column 'cost'")
    assert "data row 2, column 'cost': '1.005' has more than 2 decimal places" in message
    assert "data row 4, column 'cost': '123456789.5' is too large" in message
    assert "data row 5, column 'cost': 'abc' is not a number" in message
