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
    assert message.startswith(
        "people.csv has 3 values its table cannot hold in columns 'spend' (1), 'born' (1), 'active' (1): "
        "column 'spend', not a number (DOUBLE): data row 3 ('lots'); "
        "column 'born', not a valid DATE: data row 3 ('2003-02-30'); "
        "column 'active', not true or false: data row 3 ('maybe') "
    )
    assert "'id'" not in message and "'name'" not in message
    assert message.endswith("; nothing was imported") and "\n" not in message


def test_every_bad_value_is_counted_and_the_first_ones_are_shown(tmp_path: Path) -> None:
    spend = [str(i) if i % 2 else f"n/a {i}" for i in range(50)]
    file = pa.table({"id": list(range(50)), "spend": spend})
    with pytest.raises(InvalidInput) as refused:
        _check(tmp_path, file)
    message = str(refused.value)
    shown = [f"{i + 1} ('n/a {i}')" for i in range(0, 50, 2)]
    assert message.startswith(
        "people.csv has 25 values its table cannot hold: column 'spend', not a number (DOUBLE): data rows "
        + ", ".join(shown[: import_values.SHOWN])
        + " and 5 more "
    )
    assert not any(s in message for s in shown[import_values.SHOWN :])


def test_fractions_for_a_whole_number_column_are_all_named(tmp_path: Path) -> None:
    file = pa.table({"id": [1.0, 2.5, 3.0, 4.25]})
    with pytest.raises(InvalidInput) as refused:
        _check(tmp_path, file)
    message = str(refused.value)
    assert "column 'id', not a whole number (BIGINT would round it): data rows 2 ('2.5'), 4 ('4.25');" in message


def test_non_finite_values_are_all_named_with_the_setting_once(tmp_path: Path) -> None:
    file = pa.table({"id": [1, 2, 3], "spend": [float("inf"), 1.0, float("nan")]})
    with pytest.raises(InvalidInput) as refused:
        _check(tmp_path, file)
    message = str(refused.value)
    assert "column 'spend', not a finite number: data rows 1 (inf), 3 (nan) (" in message
    assert message.count("--allow-non-finite") == 1
    allowed = _check(tmp_path, file, allow_non_finite=True)
    assert [(c.name, c.status) for c in allowed if c.file_type is not None] == [("id", "same"), ("spend", "same")]


def test_a_new_floating_column_refuses_non_finite_values_too(tmp_path: Path) -> None:
    file = pa.table({"id": [1, 2], "ratio": [0.5, float("-inf")]})
    with pytest.raises(InvalidInput, match=r"people.csv data row 2, column 'ratio': -inf is not a finite number"):
        _check(tmp_path, file)


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
    assert message == (
        "costs.csv has 3 values its table cannot hold: "
        "column 'cost', has more than 2 decimal places (DECIMAL(10,2)): data row 2 ('1.005'); "
        "column 'cost', too large for DECIMAL(10,2): data row 4 ('123456789.5'); "
        "column 'cost', not a number (DECIMAL(10,2)): data row 5 ('abc'); nothing was imported"
    )
