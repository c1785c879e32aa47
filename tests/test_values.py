"""A typed value fits its column exactly or is refused (``core.values``): never rounded, clamped or cut."""

from __future__ import annotations

from decimal import Decimal

import pytest

from core.errors import InvalidInput
from core.values import canonical_text, check_value, decimal_shape, load_json, type_family

ACCEPTED = [
    ("BIGINT", "7", "7"),
    ("BIGINT", " 7 ", "7"),
    ("BIGINT", "1e3", "1000"),
    ("BIGINT", "-0", "0"),
    ("BIGINT", "2.0", "2"),
    ("BIGINT", str(2**63 - 1), str(2**63 - 1)),
    ("BIGINT", str(-(2**63)), str(-(2**63))),
    ("TINYINT", "127", "127"),
    ("TINYINT", "-128", "-128"),
    ("SMALLINT", "-32768", "-32768"),
    ("INTEGER", "2147483647", "2147483647"),
    ("DOUBLE", "1.5", "1.5"),
    ("DOUBLE", "1.4e0", "1.4"),
    ("DOUBLE", "0.1", "0.1"),
    ("DOUBLE", "1.7976931348623157e308", "1.7976931348623157e+308"),
    ("DOUBLE", "-0.0", "-0.0"),
    ("FLOAT", "0.1", "0.1"),
    ("FLOAT", "16777216", "16777216.0"),
    ("DECIMAL(10,2)", "1.5", "1.50"),
    ("DECIMAL(10,2)", "1.50", "1.50"),
    ("DECIMAL(10,2)", "1.500", "1.50"),
    ("DECIMAL(10,2)", "-99999999.99", "-99999999.99"),
    ("DECIMAL(10,2)", "1e2", "100.00"),
    ("DECIMAL(10,0)", "0.00", "0"),
    ("DECIMAL(38,10)", "10000000000000.0000000001", "10000000000000.0000000001"),
    ("BOOLEAN", "TRUE", "true"),
    ("BOOLEAN", "no", "false"),
    ("BOOLEAN", "1", "true"),
    ("DATE", "2024-02-29", "2024-02-29"),
    ("TIMESTAMP", "2024-01-01 10:00", "2024-01-01 10:00:00"),
    ("TIMESTAMP", "2024-01-01T10:00:00.123456", "2024-01-01 10:00:00.123456"),
    ("TIMESTAMP", "2024-01-01 10:00:00.1234560", "2024-01-01 10:00:00.123456"),
    ("TIMESTAMP WITH TIME ZONE", "2024-01-01T10:00:00+02:00", "2024-01-01 08:00:00+00"),
    ("TIMESTAMP WITH TIME ZONE", "2024-01-01 10:00:00Z", "2024-01-01 10:00:00+00"),
    ("VARCHAR", " spaces kept ", " spaces kept "),
    ("VARCHAR", "1.5", "1.5"),
]

REFUSED = [
    ("BIGINT", "1.5", "not a whole number"),
    ("BIGINT", "2.5", "not a whole number"),
    ("BIGINT", "1.4e0", "not a whole number"),
    ("BIGINT", "2.7", "not a whole number"),
    ("BIGINT", str(2**63), "out of range for BIGINT"),
    ("BIGINT", "1_000", "not a number"),
    ("BIGINT", "1e999999999", "out of range for BIGINT"),
    ("BIGINT", "1e-999999999", "not a whole number"),
    ("DOUBLE", "1e-999999999", "more digits than DOUBLE holds"),
    ("DECIMAL(10,2)", "1e999999999", "too large"),
    ("INTEGER", "\u0663", "not a number"),  # an Arabic-Indic digit three
    ("BIGINT", "nan", "not a whole number"),
    ("BIGINT", "", "is not a BIGINT value"),
    ("BIGINT", "abc", "not a number"),
    ("TINYINT", "128", "out of range for TINYINT"),
    ("TINYINT", "-129", "out of range for TINYINT"),
    ("SMALLINT", "32768", "out of range for SMALLINT"),
    ("INTEGER", "-2147483649", "out of range for INTEGER"),
    ("DOUBLE", "1e400", "out of range for DOUBLE"),
    ("DOUBLE", "-1e400", "out of range for DOUBLE"),
    ("DOUBLE", "1e-400", "more digits than DOUBLE holds"),
    ("DOUBLE", "0.30000000000000001", "more digits than DOUBLE holds; it would become 0.3"),
    ("DOUBLE", "9007199254740993", "more digits than DOUBLE holds"),
    ("DOUBLE", "nan", "NaN and Infinity are off"),
    ("DOUBLE", "inf", "NaN and Infinity are off"),
    ("DOUBLE", "-Infinity", "NaN and Infinity are off"),
    ("DOUBLE", "0x10", "not a number"),
    ("FLOAT", "1e39", "out of range for FLOAT"),
    ("FLOAT", "16777217", "more digits than FLOAT holds"),
    ("DECIMAL(10,2)", "1.005", "more than 2 decimal places"),
    ("DECIMAL(10,2)", "123456789", "too large for DECIMAL"),
    ("DECIMAL(10,2)", "nan", "not a number"),
    ("DECIMAL(38,10)", "10000000000000.000000000000001", "more than 10 decimal places"),
    ("BOOLEAN", "2", "not true or false"),
    ("BOOLEAN", "maybe", "not true or false"),
    ("DATE", "2024-01-01 10:00", "has a time part"),
    ("DATE", "2024-01-01 00:00:00", "has a time part"),
    ("DATE", "2024-02-30", "not a valid DATE"),
    ("DATE", "01/02/2024", "not a date"),
    ("TIMESTAMP", "2024-01-01T10:00:00+02:00", "has a time zone"),
    ("TIMESTAMP", "2024-01-01 10:00:00Z", "has a time zone"),
    ("TIMESTAMP", "2024-01-01 10:00:00 Europe/Paris", "has a time zone"),
    ("TIMESTAMP", "2024-01-01 10:00:00.1234567", "more than 6 fraction digits"),
    ("TIMESTAMP", "2024-01-01 24:00:00", "not a timestamp"),
    ("TIMESTAMP", "2024-01-01 10:61", "not a timestamp"),
    ("TIMESTAMP WITH TIME ZONE", "2024-01-01 10:00:00.1234567+00", "more than 6 fraction digits"),
    ("TIMESTAMP WITH TIME ZONE", "yesterday", "not a timestamp"),
]


@pytest.mark.parametrize(("duck_type", "text", "expected"), ACCEPTED)
def test_a_value_that_fits_keeps_its_value(duck_type: str, text: str, expected: str) -> None:
    assert canonical_text(text, column="c", duck_type=duck_type) == expected


@pytest.mark.parametrize(("duck_type", "text", "why"), REFUSED)
def test_a_value_that_does_not_fit_is_refused_naming_row_column_and_value(duck_type: str, text: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why) as caught:
        canonical_text(text, column="amount", duck_type=duck_type, row_id="r1")
    message = str(caught.value)
    assert message.startswith("row 'r1', column 'amount': ")
    assert repr(text) in message
    assert "\n" not in message


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity"])
def test_non_finite_floats_only_where_the_dataset_allows_them(text: str) -> None:
    with pytest.raises(InvalidInput, match="NaN and Infinity are off"):
        check_value(text, column="x", duck_type="DOUBLE")
    stored = canonical_text(text, column="x", duck_type="DOUBLE", allow_non_finite=True)
    assert stored is not None and stored.lstrip("-") in ("nan", "inf")
    assert stored.startswith("-") == text.startswith("-")
    with pytest.raises(InvalidInput, match="out of range"):  # overflow is refused even then
        check_value("1e400", column="x", duck_type="DOUBLE", allow_non_finite=True)


@pytest.mark.parametrize(
    ("value", "duck_type", "expected"),
    [
        (None, "BIGINT", None),
        (True, "BOOLEAN", "true"),
        (3, "BIGINT", "3"),
        (2.0, "BIGINT", "2"),
        (2.5, "DOUBLE", "2.5"),
    ],
)
def test_python_values_are_checked_as_their_text(value: object, duck_type: str, expected: str | None) -> None:
    assert canonical_text(value, column="c", duck_type=duck_type) == expected


def test_python_float_with_a_fraction_is_refused_for_an_integer_column() -> None:
    with pytest.raises(InvalidInput, match="not a whole number"):
        check_value(2.7, column="n", duck_type="BIGINT", row_id="(new row)")


@pytest.mark.parametrize(
    ("duck_type", "family"),
    [
        ("BIGINT", "integer"),
        ("UTINYINT", "integer"),
        ("DECIMAL(38,10)", "decimal"),
        ("DOUBLE", "float"),
        ("FLOAT", "float"),
        ("BOOLEAN", "boolean"),
        ("DATE", "date"),
        ("TIMESTAMP", "timestamp"),
        ("TIMESTAMP_NS", "timestamp"),
        ("TIMESTAMP WITH TIME ZONE", "timestamptz"),
        ("VARCHAR", "text"),
        ("STRUCT(a INTEGER)", "nested"),
        ("INTEGER[]", "nested"),
        ("MAP(VARCHAR, INTEGER)", "nested"),
        ("BLOB", "other"),
    ],
)
def test_type_family(duck_type: str, family: str) -> None:
    assert type_family(duck_type) == family


def test_decimal_shape() -> None:
    assert decimal_shape("DECIMAL(10, 2)") == (10, 2)
    assert decimal_shape("DOUBLE") is None


# ---------------------------------------------------------------- issue 25 §4: years, local times, surrogates, JSON


@pytest.mark.parametrize(
    ("duck_type", "value", "message"),
    [
        ("DATE", "0000-01-01", "before year 0001"),
        ("TIMESTAMP", "0000-12-31 23:00:00", "before year 0001"),
        ("TIMESTAMP WITH TIME ZONE", "0000-06-01 00:00:00+00:00", "before year 0001"),
        # Valid as typed, but outside the years once in UTC:
        ("TIMESTAMP WITH TIME ZONE", "0001-01-01 00:00:00+01:00", r"\(BC\).*outside the years 0001-9999"),
        ("TIMESTAMP WITH TIME ZONE", "9999-12-31 23:30:00-01:00", "10000-01-01.*outside the years 0001-9999"),
        ("TIMESTAMP WITH TIME ZONE", "2026-03-29 02:30:00 Europe/Paris", "never happens in Europe/Paris"),
        ("TIMESTAMP WITH TIME ZONE", "2026-10-25 02:30:00 Europe/Paris", "happens twice in Europe/Paris"),
        ("VARCHAR", "a\ud800b", "lone surrogate"),
        ("BIGINT", "\udcff", "lone surrogate"),
    ],
)
def test_dates_outside_the_years_shifted_local_times_and_surrogates_are_refused(
    duck_type: str, value: str, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message) as caught:
        canonical_text(value, column="c", duck_type=duck_type, row_id="1")
    assert "row '1', column 'c'" in str(caught.value)


@pytest.mark.parametrize(
    ("duck_type", "value", "shown"),
    [
        ("DATE", "0001-01-01", "0001-01-01"),
        ("DATE", "9999-12-31", "9999-12-31"),
        ("TIMESTAMP WITH TIME ZONE", "2026-03-29 03:30:00 Europe/Paris", "2026-03-29 01:30:00+00"),
        ("TIMESTAMP WITH TIME ZONE", "2026-10-25 02:30:00+01:00", "2026-10-25 01:30:00+00"),
        ("TIMESTAMP WITH TIME ZONE", "2026-10-25 02:30:00 UTC", "2026-10-25 02:30:00+00"),
    ],
)
def test_the_edges_of_the_years_and_unambiguous_local_times_land(duck_type: str, value: str, shown: str) -> None:
    assert canonical_text(value, column="c", duck_type=duck_type) == shown


def test_load_json_keeps_every_digit() -> None:
    text = '{"big": 9007199254740993.0, "money": 12345678901234567890.123, "n": 7, "e": 1e400}'
    document = load_json(text, field="b")
    assert document == {
        "big": Decimal("9007199254740993.0"),
        "money": Decimal("12345678901234567890.123"),
        "n": 7,
        "e": Decimal("1e400"),
    }
    assert canonical_text(document["big"], column="big", duck_type="BIGINT") == "9007199254740993"
    money = canonical_text(document["money"], column="m", duck_type="DECIMAL(38,10)")
    assert money == "12345678901234567890.1230000000"
    with pytest.raises(InvalidInput, match="out of range for DOUBLE"):
        canonical_text(document["e"], column="e", duck_type="DOUBLE")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"set": [{"value": NaN}]}', r"^body\.set\[0\]\.value: NaN is not a JSON number"),
        ("[1, -Infinity]", r"^body\[1\]: -Infinity is not a JSON number"),
        ('{"a": Infinity}', r"^body\.a: Infinity is not a JSON number"),
        ('{"a": {"b": "x\\ud800"}}', r"^body\.a\.b holds a lone surrogate"),
        ('{"\\udfff": 1}', r"^body holds a lone surrogate"),
        ("1" * 5000, "^body: Exceeds the limit"),
    ],
)
def test_load_json_refuses_non_standard_literals_and_surrogates_naming_the_place(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        load_json(text, field="body")
