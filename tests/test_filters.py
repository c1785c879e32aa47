"""Row filters: the --where grammar, checking against a schema, and their SQL (typed, bound, injection-proof)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from core import reads
from core.errors import InvalidInput
from core.filters import (
    OP_LABELS,
    OPS,
    Condition,
    check_conditions,
    describe,
    from_param,
    parse_where,
    to_param,
)

# ---------------------------------------------------------------- grammar


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("monthly_spend >= 100", Condition("monthly_spend", "ge", ("100",))),
        ("monthly_spend>=100", Condition("monthly_spend", "ge", ("100",))),
        ("country in (France,Germany)", Condition("country", "in", ("France", "Germany"))),
        ("country IN ( France , Germany )", Condition("country", "in", ("France", "Germany"))),
        ("country in France", Condition("country", "in", ("France",))),
        ("city in (\"Paris, TX\", Lyon, 'it''s')", Condition("city", "in", ("Paris, TX", "Lyon", "it's"))),
        ("age between 18 and 65", Condition("age", "between", ("18", "65"))),
        ("d BETWEEN '2024-01-01' AND '2024-12-31'", Condition("d", "between", ("2024-01-01", "2024-12-31"))),
        ('n between "a and b" and c', Condition("n", "between", ("a and b", "c"))),
        ("name contains ann", Condition("name", "contains", ("ann",))),
        ("name contains 'a b'", Condition("name", "contains", ("a b",))),
        ("name starts with An", Condition("name", "starts_with", ("An",))),
        ("name Starts  With An", Condition("name", "starts_with", ("An",))),
        ("email is empty", Condition("email", "is_empty")),
        ("email IS NOT EMPTY", Condition("email", "is_not_empty")),
        ("a = 1", Condition("a", "eq", ("1",))),
        ("a != 1", Condition("a", "ne", ("1",))),
        ("a <> 1", Condition("a", "ne", ("1",))),
        ("a ≠ 1", Condition("a", "ne", ("1",))),
        ("a < 1", Condition("a", "lt", ("1",))),
        ("a <= 1", Condition("a", "le", ("1",))),
        ("a ≤ 1", Condition("a", "le", ("1",))),
        ("a > 1", Condition("a", "gt", ("1",))),
        ("a ≥ 1", Condition("a", "ge", ("1",))),
        ("a = ''", Condition("a", "eq", ("",))),
        ("a = 'it''s'", Condition("a", "eq", ("it's",))),
        ("a = hello world", Condition("a", "eq", ("hello world",))),
        ('"my col" = x', Condition("my col", "eq", ("x",))),
        ('"we""ird" = x', Condition('we"ird', "eq", ("x",))),
        ("in in (1)", Condition("in", "in", ("1",))),
        ("between between 1 and 2", Condition("between", "between", ("1", "2"))),
        ("a = x' OR '1'='1", Condition("a", "eq", ("x' OR '1'='1",))),
    ],
)
def test_parse_where(text: str, expected: Condition) -> None:
    assert parse_where(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "must start with a column name"),
        ("spend", "comes an operator"),
        ("spend ~ 3", "comes an operator.*found '~"),
        ("spend like 3", "found 'like'"),
        ("spend =", "the value is missing"),
        ("spend >=   ", "the value is missing"),
        ("email is empty now", "takes no value"),
        ("age between 18", "between LOW and HIGH"),
        ("age between and 3", "between LOW and HIGH"),
        ("country in ()", "needs a list of values"),
        ("country in (a,,b)", "empty value"),
        ("country in (a,b,)", "ends with a comma"),
        ("country in ('a)", "not closed"),
        ("country in ('a", "parentheses do not match"),
        ("country in a,b)", "parentheses do not match"),
        ("country in ('a' b)", "expected a comma"),
        ('"spend = 3', 'closing " is missing'),
        ('"" = 3', "column name is empty"),
    ],
)
def test_parse_where_refuses_with_one_line(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as info:
        parse_where(text)
    assert "\n" not in str(info.value)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    "condition",
    [
        Condition("country", "eq", ("France",)),
        Condition("my col~x", "in", ("a,b", "c~d", "100%", "é ü", "")),
        Condition("d", "between", ("2024-01-01", "2024-02-01")),
        Condition("email", "is_not_empty"),
        Condition('q"uote', "contains", ("'; DROP TABLE x; --",)),
    ],
)
def test_param_form_round_trips_and_is_url_safe(condition: Condition) -> None:
    text = to_param(condition)
    assert from_param(text) == condition
    assert all(ch.isalnum() or ch in "-_.~%" for ch in text), text


@pytest.mark.parametrize("text", ["", "nonsense", "col~bogus~1", "~eq~1", "col~between~1", "col~is_empty~x"])
def test_from_param_refuses_garbage(text: str) -> None:
    with pytest.raises(InvalidInput, match="not a filter"):
        from_param(text)


def test_labels_and_descriptions() -> None:
    assert list(OP_LABELS) == list(OPS)
    labels = [OP_LABELS[o] for o in ("eq", "ne", "le", "ge", "starts_with", "in")]
    assert labels == ["=", "≠", "≤", "≥", "starts with", "in list"]
    assert describe(Condition("country", "eq", ("France",))) == "country = France"
    assert describe(Condition("monthly_spend", "between", ("10", "20"))) == "monthly_spend between 10 and 20"
    assert describe(Condition("email", "is_empty")) == "email is empty"
    assert describe(Condition("city", "in", ("Paris, TX", "Lyon"))) == 'city in ("Paris, TX", Lyon)'
    assert describe(Condition("name", "eq", ("",))) == 'name = ""'


# ---------------------------------------------------------------- checking against a schema

SCHEMA = {
    "row_id": "VARCHAR",
    "n": "BIGINT",
    "small": "INTEGER",
    "x": "DOUBLE",
    "amount": "DECIMAL(10,2)",
    "day": "DATE",
    "at": "TIMESTAMP",
    "name": "VARCHAR",
    "flag": "BOOLEAN",
    "tags": "VARCHAR[]",
    "t": "TIME",
}


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        (Condition("nope", "eq", ("1",)), "unknown column 'nope'; columns are: row_id, n, small"),
        (Condition('name" OR 1=1 --', "eq", ("1",)), "unknown column 'name\" OR 1=1 --'"),
        (Condition("name; DROP TABLE t", "is_empty"), "unknown column"),
        (Condition("n", "eq", ("abc",)), "column 'n': 'abc' is not a (whole )?number"),
        (Condition("n", "ge", ("1 OR 1=1",)), "column 'n': '1 OR 1=1' is not a (whole )?number"),
        (Condition("n", "eq", ("1.5",)), "would round it"),
        (Condition("small", "lt", ("3000000000",)), "out of range for INTEGER"),
        (Condition("x", "gt", ("ten",)), "'ten' is not a number"),
        (Condition("amount", "eq", ("1.234",)), "more than 2 decimal places"),
        (Condition("day", "eq", ("2024-01-02 10:00",)), "has a time part"),
        (Condition("day", "between", ("2024-01-01", "soon")), "'soon' is not a date"),
        (Condition("flag", "eq", ("maybe",)), "not true or false"),
        (Condition("n", "in", ("1", "two")), "'two' is not a (whole )?number"),
        (Condition("n", "between", ("1",)), "'between' takes 2 value"),
        (Condition("n", "eq", ()), "'=' takes 1 value"),
        (Condition("n", "in", ()), "takes at least one value"),
        (Condition("n", "is_empty", ("x",)), "'is empty' takes 0 value"),
        (Condition("n", "bogus", ("1",)), "unknown filter operator 'bogus'"),  # type: ignore[arg-type]
        (Condition("tags", "eq", ("a",)), "holds nested values"),
        (Condition("t", "lt", ("noon",)), "'noon' is not a valid TIME value"),
        (Condition("at", "ge", ("2024-01-01 99:99",)), "'2024-01-01 99:99' is not a (valid TIMESTAMP value|timestamp)"),
    ],
)
def test_check_conditions_refuses(condition: Condition, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as info:
        check_conditions([condition], SCHEMA)
    text = str(info.value)
    assert "\n" not in text and "nothing was saved" not in text


def test_check_conditions_normalises_typed_values() -> None:
    checked = check_conditions(
        [
            Condition("n", "ge", (" 100 ",)),
            Condition("flag", "eq", ("Yes",)),
            Condition("name", "contains", (" a ",)),
            Condition("tags", "contains", ("x",)),
        ],
        SCHEMA,
    )
    assert [c.values for c in checked] == [("100",), ("true",), (" a ",), ("x",)]


# ---------------------------------------------------------------- SQL semantics on a real table

ROWS: list[dict[str, Any]] = [
    {"row_id": "r1", "n": 5, "x": 1.5, "amount": Decimal("10.00"), "day": dt.date(2024, 1, 5),
     "at": dt.datetime(2024, 1, 5, 9, 30), "name": "Anna", "city": "Paris", "flag": True},
    {"row_id": "r2", "n": 40, "x": -2.0, "amount": Decimal("99.99"), "day": dt.date(2024, 3, 1),
     "at": dt.datetime(2024, 3, 1, 0, 0), "name": "annabel", "city": "Paris, TX", "flag": False},
    {"row_id": "r3", "n": None, "x": None, "amount": None, "day": None, "at": None, "name": None,
     "city": None, "flag": None},
    {"row_id": "r4", "n": 100, "x": 1e10, "amount": Decimal("100.00"), "day": dt.date(2023, 12, 31),
     "at": dt.datetime(2023, 12, 31, 23, 59), "name": "", "city": "Lyon", "flag": True},
    {"row_id": "r5", "n": 9, "x": 0.0, "amount": Decimal("-5.50"), "day": dt.date(2024, 10, 10),
     "at": dt.datetime(2024, 10, 10, 12, 0), "name": "Bob's", "city": "x' OR '1'='1", "flag": False},
    {"row_id": "r6", "n": 10, "x": 3.25, "amount": Decimal("0.01"), "day": dt.date(2024, 2, 29),
     "at": dt.datetime(2024, 2, 29, 8, 0), "name": "ZOË", "city": "Oslo", "flag": None},
]  # fmt: skip
ARROW_SCHEMA = pa.schema(
    [
        ("row_id", pa.string()),
        ("n", pa.int64()),
        ("x", pa.float64()),
        ("amount", pa.decimal128(10, 2)),
        ("day", pa.date32()),
        ("at", pa.timestamp("us")),
        ("name", pa.string()),
        ("city", pa.string()),
        ("flag", pa.bool_()),
    ]
)


@pytest.fixture(scope="module")
def typed_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Delta table (written by delta-rs) with a column of each family and NULLs."""
    from deltalake import write_deltalake

    path = tmp_path_factory.mktemp("filters") / "typed"
    write_deltalake(str(path), pa.Table.from_pylist(ROWS, schema=ARROW_SCHEMA))
    return path


def _python_value(column: str, text: str) -> Any:
    """The value a filter's text stands for, parsed independently of DuckDB."""
    kind = ARROW_SCHEMA.field(column).type
    if pa.types.is_integer(kind):
        return int(text)
    if pa.types.is_floating(kind):
        return float(text)
    if pa.types.is_decimal(kind):
        return Decimal(text)
    if pa.types.is_date(kind):
        return dt.date.fromisoformat(text)
    if pa.types.is_timestamp(kind):
        return dt.datetime.fromisoformat(text)
    if pa.types.is_boolean(kind):
        return text.lower() in ("true", "t", "yes", "y", "1")
    return text


def _text_form(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def _expected(conditions: list[Condition]) -> list[str]:
    """Row ids that pass ``conditions``, computed in plain Python over ``ROWS``."""
    kept = []
    for row in ROWS:
        ok = True
        for c in conditions:
            value = row[c.column]
            text_op = c.op in ("contains", "starts_with")
            typed = [] if text_op else [_python_value(c.column, v) for v in c.values]
            if c.op == "is_empty":
                ok &= value is None or value == ""
            elif c.op == "is_not_empty":
                ok &= value is not None and value != ""
            elif value is None:
                ok = False
            elif c.op == "contains":
                ok &= c.values[0].lower() in _text_form(value).lower()
            elif c.op == "starts_with":
                ok &= _text_form(value).lower().startswith(c.values[0].lower())
            elif c.op == "in":
                ok &= value in typed
            elif c.op == "between":
                ok &= typed[0] <= value <= typed[1]
            else:
                ok &= {
                    "eq": value == typed[0],
                    "ne": value != typed[0],
                    "lt": value < typed[0],
                    "le": value <= typed[0],
                    "gt": value > typed[0],
                    "ge": value >= typed[0],
                }[c.op]
        if ok:
            kept.append(row["row_id"])
    return kept


@pytest.mark.parametrize(
    "wheres",
    [
        ["n >= 10"],
        ["n > 9", "n < 100"],
        ["n = 40"],
        ["n != 40"],
        ["n between 9 and 40"],
        ["n in (5, 100, 7)"],
        ["x < 1.5"],
        ["x >= 1e3"],
        ["amount <= 10"],
        ["amount in (99.99, 0.01)"],
        ["day >= 2024-02-29"],
        ["day between 2024-01-01 and 2024-03-01"],
        ["day contains 2024-0"],
        ["at < '2024-03-01 00:00:00'"],
        ["at = 2024-03-01"],
        ["name contains ANN"],
        ["name starts with a"],
        ["name contains ë"],
        ["name is empty"],
        ["name is not empty", "flag = true"],
        ["flag is empty"],
        ["flag != yes"],
        ['city in ("Paris, TX", Lyon)'],
        ["city = x' OR '1'='1"],
        ["city = Paris' OR '1'='1"],
        ["name = Bob's"],
        ["name contains %"],
        ["name starts with _"],
        ["city contains '; DROP TABLE t; --"],
        ["n is not empty", "x > 0", "city starts with p"],
    ],
)
def test_conditions_match_an_independent_computation(typed_table: Path, wheres: list[str]) -> None:
    conditions = [parse_where(w) for w in wheres]
    page = reads.read_page(typed_table, conditions=conditions, order_by="row_id", limit=100)
    assert list(page.rows["row_id"]) == _expected(check_conditions(conditions, _duck_schema(typed_table)))
    assert page.total == len(page.rows)


def _duck_schema(path: Path) -> dict[str, str]:
    return {c.name: c.type for c in reads.table_schema(path)}


def test_null_never_matches_a_comparison(typed_table: Path) -> None:
    for op in ("eq", "ne", "lt", "le", "gt", "ge"):
        page = reads.read_page(typed_table, conditions=[Condition("n", op, ("40",))], limit=100)  # type: ignore[arg-type]
        assert "r3" not in set(page.rows["row_id"]), op
    not_40 = reads.read_page(typed_table, conditions=[parse_where("n != 40")], limit=100)
    assert sorted(not_40.rows["row_id"]) == ["r1", "r4", "r5", "r6"]


def test_numbers_compare_as_numbers_not_text(typed_table: Path) -> None:
    # As text, "9" > "10" and "100" < "40"; in the column's type they are not.
    page = reads.read_page(typed_table, conditions=[parse_where("n > 9")], order_by="n", limit=100)
    assert list(page.rows["n"]) == [10, 40, 100]


def test_injection_in_a_column_name_is_refused_before_any_sql(typed_table: Path) -> None:
    for name in ['n" > 0 OR "n', "n) OR (1=1", "n; DROP TABLE x"]:
        with pytest.raises(InvalidInput, match="unknown column"):
            reads.read_page(typed_table, conditions=[Condition(name, "is_not_empty")])
    with pytest.raises(InvalidInput, match="unknown column"):
        reads.read_page(typed_table, conditions=[parse_where('"n"" > 0 OR ""n" = 1')])
    assert reads.count_rows(typed_table) == len(ROWS)


def test_a_bad_value_is_refused_naming_column_and_value(typed_table: Path) -> None:
    refusal = r"filter 'day = 2024-01-05 10:00': column 'day': '2024-01-05 10:00' has a time part"
    with pytest.raises(InvalidInput, match=refusal):
        reads.read_page(typed_table, conditions=[parse_where("day = 2024-01-05 10:00")])
    with pytest.raises(InvalidInput, match=r"column 'n': 'lots' is not a (whole )?number"):
        reads.read_page(typed_table, conditions=[parse_where("n >= lots")])


def test_a_column_named_with_quotes_is_quoted(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    path = tmp_path / "odd"
    write_deltalake(str(path), pa.table({"row_id": ["a", "b"], 'we"ird col': [1, 2]}))
    page = reads.read_page(path, conditions=[parse_where('"we""ird col" > 1')])
    assert list(page.rows["row_id"]) == ["b"]


def test_first_emptying_condition_names_the_filter_that_removed_everything(typed_table: Path) -> None:
    paris, atlantis, big = parse_where("city starts with Paris"), parse_where("city = Atlantis"), parse_where("n > 5")
    assert reads.first_emptying_condition(typed_table, [paris, big]) is None
    assert reads.first_emptying_condition(typed_table, [paris, atlantis, big]) == atlantis
    assert reads.first_emptying_condition(typed_table, [big, paris, parse_where("n > 50")]) == parse_where("n > 50")
    assert reads.first_emptying_condition(typed_table, []) is None
    with pytest.raises(InvalidInput, match="unknown column 'nope'"):
        reads.first_emptying_condition(typed_table, [Condition("nope", "is_empty")])


def test_conditions_and_old_filters_and_together(typed_table: Path) -> None:
    page = reads.read_page(
        typed_table,
        filters=[reads.RowFilter("city", "par", "contains")],
        conditions=[parse_where("n > 5")],
        limit=100,
    )
    assert list(page.rows["row_id"]) == ["r2"]


def test_sorted_pages_agree_with_pandas_and_never_overlap(typed_table: Path) -> None:
    frame = pd.DataFrame(ROWS)
    for column, descending in [("n", False), ("n", True), ("name", False), ("day", True), ("x", False)]:
        pages = [
            reads.read_page(
                typed_table, order_by=column, descending=descending, default_order=["row_id"], limit=2, offset=o
            ).rows
            for o in range(0, len(ROWS), 2)
        ]
        got = [r for p in pages for r in p["row_id"]]
        expected = frame.sort_values(
            [column, "row_id"], ascending=[not descending, True], na_position="last", kind="stable"
        )["row_id"]
        assert got == list(expected), (column, descending)
