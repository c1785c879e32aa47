"""Row filters: ``column · operator · value`` conditions, ANDed, checked against the schema.

One grammar for the CLI (``--where 'monthly_spend >= 100'``), one checked record
(``Condition``) for every reader, and one meaning everywhere:

- comparisons (``=``, ``≠``, ``<``, ``≤``, ``>``, ``≥``, between, in list) happen in the
  column's type: numbers numerically, dates as dates. Each value is checked with
  ``core.values.canonical_text`` first, so letters for a number or a date with a time part
  are refused with a message naming the column and the value;
- a row whose value is NULL never matches a comparison (SQL's rule, ``≠`` included);
- ``contains`` and ``starts with`` are case-insensitive on the value's text form;
- ``is empty`` is NULL (and, for text, ``''`` too); ``is not empty`` is its opposite.

Column names are checked against the table's schema and then quoted; every value is a
bound parameter, never SQL text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, get_args
from urllib.parse import quote, unquote

from core.duck import quote_ident
from core.errors import InvalidInput
from core.values import canonical_text, type_family

Op = Literal["eq", "ne", "lt", "le", "gt", "ge", "between", "contains", "starts_with", "is_empty", "is_not_empty", "in"]
OPS: tuple[Op, ...] = get_args(Op)
OP_LABELS: dict[Op, str] = {
    "eq": "=",
    "ne": "≠",
    "lt": "<",
    "le": "≤",
    "gt": ">",
    "ge": "≥",
    "between": "between",
    "contains": "contains",
    "starts_with": "starts with",
    "is_empty": "is empty",
    "is_not_empty": "is not empty",
    "in": "in list",
}
NO_VALUE_OPS: frozenset[Op] = frozenset({"is_empty", "is_not_empty"})
TEXT_OPS: frozenset[Op] = frozenset({"contains", "starts_with"})
_COMPARE_SQL: dict[Op, str] = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# Longest spellings first, so "<=" is not read as "<" followed by "=".
_SYMBOLS: tuple[tuple[str, Op], ...] = (
    ("!=", "ne"), ("<>", "ne"), ("<=", "le"), (">=", "ge"), ("≠", "ne"), ("≤", "le"), ("≥", "ge"),
    ("=", "eq"), ("<", "lt"), (">", "gt"),
)  # fmt: skip
_WORDS: tuple[tuple[str, Op], ...] = (
    ("is not empty", "is_not_empty"), ("is empty", "is_empty"), ("starts with", "starts_with"),
    ("contains", "contains"), ("between", "between"), ("in", "in"),
)  # fmt: skip
_BARE_NAME = re.compile(r"[^\s=!<>≠≤≥\"']+")
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)


@dataclass(frozen=True)
class Condition:
    """``column op values``: no values (is empty / is not empty), two (between), n >= 1 (in), else one."""

    column: str
    op: Op
    values: tuple[str, ...] = ()


# ---------------------------------------------------------------- the CLI grammar


def parse_where(text: str) -> Condition:
    """One condition from its typed form, e.g. ``country in (France,Germany)``.

    Operators: ``= != <> ≠ < <= ≤ > >= ≥``, ``between A and B``, ``contains``,
    ``starts with``, ``is empty``, ``is not empty``, ``in (a,b,...)``. A value may be
    quoted (``'a b'``, ``"a,b"``; a quote inside is doubled); a column name may be
    ``"double quoted"``. The result is not yet checked against a table (``check_conditions``).

    Raises:
        InvalidInput: The text is not ``column operator value``.
    """
    source = text
    text = text.strip()
    column, rest = _parse_column(text, source)
    rest = rest.lstrip()
    op, rest = _parse_op(rest, source, column)
    rest = rest.strip()
    if op in NO_VALUE_OPS:
        if rest:
            raise _bad(source, f"'{OP_LABELS[op]}' takes no value, found {rest!r}")
        return Condition(column, op)
    if op == "between":
        parts = _split_between(rest)
        if parts is None:
            raise _bad(source, "use 'COLUMN between LOW and HIGH'")
        return Condition(column, op, (_one_value(parts[0], source), _one_value(parts[1], source)))
    if op == "in":
        if rest.startswith("(") != rest.endswith(")"):
            raise _bad(source, "the list's parentheses do not match; write 'COLUMN in (a,b,...)'")
        if rest.startswith("("):
            rest = rest[1:-1]
        values = _split_list(rest, source)
        if not values:
            raise _bad(source, "'in' needs a list of values, e.g. 'country in (France,Germany)'")
        return Condition(column, op, tuple(values))
    return Condition(column, op, (_one_value(rest, source),))


def _bad(source: str, why: str) -> InvalidInput:
    return InvalidInput(f"cannot read the filter {source!r}: {why}", field="where")


def _parse_column(text: str, source: str) -> tuple[str, str]:
    if text.startswith('"'):
        end = 1
        name: list[str] = []
        while True:
            close = text.find('"', end)
            if close < 0:
                raise _bad(source, "the column name's closing \" is missing")
            name.append(text[end:close])
            if text[close + 1 : close + 2] == '"':  # a doubled quote inside the name
                name.append('"')
                end = close + 2
                continue
            if not "".join(name):
                raise _bad(source, "the column name is empty")
            return "".join(name), text[close + 1 :]
    m = _BARE_NAME.match(text)
    if m is None:
        raise _bad(source, 'it must start with a column name (write "my column" for a name with spaces)')
    return m.group(0), text[m.end() :]


def _parse_op(rest: str, source: str, column: str) -> tuple[Op, str]:
    for symbol, op in _SYMBOLS:
        if rest.startswith(symbol):
            return op, rest[len(symbol) :]
    lowered = rest.lower()
    for word, op in _WORDS:
        words = r"\s+".join(map(re.escape, word.split()))
        m = re.match(rf"{words}(?=\s|\(|$)", lowered)
        if m:
            return op, rest[m.end() :]
    found = rest.split()[0] if rest.split() else "nothing"
    raise _bad(
        source,
        f"after the column {column!r} comes an operator (= != < <= > >= between contains 'starts with' "
        f"'is empty' 'is not empty' in), found {found!r}",
    )


def _unquote(text: str) -> str | None:
    """The inside of a fully quoted value, or None when ``text`` is not one quoted value."""
    if len(text) >= 2 and text[0] in "'\"" and text[-1] == text[0]:
        quote_char = text[0]
        inner = text[1:-1]
        # Every quote inside must be doubled.
        if re.fullmatch(rf"(?:[^{quote_char}]|{quote_char}{quote_char})*", inner):
            return inner.replace(quote_char * 2, quote_char)
    return None


def _one_value(text: str, source: str) -> str:
    text = text.strip()
    if not text:
        raise _bad(source, "the value is missing (write '' for an empty text)")
    inner = _unquote(text)
    return inner if inner is not None else text


def _split_between(rest: str) -> tuple[str, str] | None:
    """``LOW and HIGH``, where either side may be quoted and hold the word 'and'."""
    for m in _AND.finditer(rest):
        low, high = rest[: m.start()].strip(), rest[m.end() :].strip()
        if low and high and _balanced(low) and _balanced(high):
            return low, high
    return None


def _balanced(text: str) -> bool:
    return text[0] not in "'\"" or _unquote(text) is not None


def _split_list(text: str, source: str) -> list[str]:
    """Comma-separated values; a value with a comma is quoted, e.g. ``"Paris, TX",Lyon``."""
    values: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] in "'\"":
            quote_char, j, chunk = text[i], i + 1, []
            while True:
                if j >= n:
                    raise _bad(source, f"a quoted value in the list is not closed: {text[i:]!r}")
                if text[j] == quote_char:
                    if text[j + 1 : j + 2] == quote_char:
                        chunk.append(quote_char)
                        j += 2
                        continue
                    break
                chunk.append(text[j])
                j += 1
            values.append("".join(chunk))
            i = j + 1
            while i < n and text[i].isspace():
                i += 1
            if i < n and text[i] != ",":
                raise _bad(source, f"expected a comma after the quoted value {values[-1]!r}")
        else:
            j = text.find(",", i)
            j = n if j < 0 else j
            value = text[i:j].strip()
            if not value:
                raise _bad(source, "the list has an empty value (quote it: '')")
            values.append(value)
            i = j
        i += 1  # past the comma
        if i == n and text.endswith(","):
            raise _bad(source, "the list ends with a comma")
    return values


# ---------------------------------------------------------------- checking against a table


def check_conditions(conditions: list[Condition], columns: dict[str, str]) -> list[Condition]:
    """The conditions with their columns checked and values checked (and normalised) for the column types.

    Args:
        conditions: Conditions to AND together.
        columns: The table's column names and DuckDB types.

    Raises:
        InvalidInput: An unknown column (the message lists the columns), an unknown
            operator, the wrong number of values, or a value that does not fit the column.
    """
    return [_check(c, columns) for c in conditions]


def _check(condition: Condition, columns: dict[str, str]) -> Condition:
    if condition.op not in OPS:
        raise InvalidInput(f"unknown filter operator {condition.op!r}; use one of: {', '.join(OPS)}", field="where")
    if condition.column not in columns:
        raise InvalidInput(
            f"cannot filter on unknown column {condition.column!r}; columns are: {', '.join(columns)}", field="where"
        )
    duck_type = columns[condition.column]
    family = type_family(duck_type)
    values = tuple(condition.values)
    expected = _arity(condition.op)
    if (expected == -1 and not values) or (expected >= 0 and len(values) != expected):
        need = "at least one value" if expected == -1 else f"{expected} value(s)"
        raise InvalidInput(
            f"filter on {condition.column!r}: '{OP_LABELS[condition.op]}' takes {need}, got {len(values)}",
            field=condition.column,
        )
    if any(not isinstance(v, str) for v in values):
        raise InvalidInput(f"filter on {condition.column!r}: values must be text", field=condition.column)
    if condition.op in TEXT_OPS or condition.op in NO_VALUE_OPS:
        return Condition(condition.column, condition.op, values)
    if family == "nested":
        raise InvalidInput(
            f"column {condition.column!r} holds nested values ({duck_type}); filter it with contains, "
            "starts with, is empty or is not empty",
            field=condition.column,
        )
    checked = tuple(_checked_value(v, condition, duck_type) for v in values)
    return Condition(condition.column, condition.op, checked)


def _arity(op: Op) -> int:
    """Values an operator takes; -1 for one or more."""
    if op in NO_VALUE_OPS:
        return 0
    if op == "between":
        return 2
    if op == "in":
        return -1
    return 1


def _checked_value(value: str, condition: Condition, duck_type: str) -> str:
    try:
        # canonical_text also has DuckDB cast the value, so what the checks let through
        # (a TIME, a UUID, "2024-01-01 99:99") is refused here, never by the page query.
        checked = canonical_text(value, column=condition.column, duck_type=duck_type)
    except InvalidInput as exc:
        why = str(exc).removesuffix("; nothing was saved")
        raise InvalidInput(f"filter '{describe(condition)}': {why}", field=condition.column) from exc
    return value if checked is None else checked


# ---------------------------------------------------------------- text forms


def describe(condition: Condition) -> str:
    """The condition as a person reads it: ``country = France``, ``age between 18 and 65``."""
    label = OP_LABELS.get(condition.op, condition.op)
    values = [_shown(v, in_list=condition.op == "in") for v in condition.values]
    if condition.op in NO_VALUE_OPS:
        return f"{condition.column} {label}"
    if condition.op == "between" and len(values) == 2:
        return f"{condition.column} between {values[0]} and {values[1]}"
    if condition.op == "in":
        return f"{condition.column} in ({', '.join(values)})"
    return f"{condition.column} {label} {' '.join(values)}"


def _shown(value: str, *, in_list: bool) -> str:
    """A value as ``describe`` writes it: quoted when empty, padded, or (in a list) holding a comma."""
    if value == "" or value != value.strip() or (in_list and "," in value):
        return '"' + value.replace('"', '""') + '"'
    return value


def to_param(condition: Condition) -> str:
    """A compact, URL-safe text form (for ``st.query_params``); ``from_param`` reads it back."""
    parts = [condition.column, condition.op, *condition.values]
    # "~" separates the parts, so inside one it is escaped too (quote leaves it alone).
    return "~".join(quote(p, safe="").replace("~", "%7E") for p in parts)


def from_param(text: str) -> Condition:
    """The condition written by ``to_param``.

    Raises:
        InvalidInput: ``text`` is not a ``to_param`` form.
    """
    if not isinstance(text, str) or "~" not in text:
        raise InvalidInput(f"not a filter: {text!r}", field="where")
    column, op, *values = (unquote(p) for p in text.split("~"))
    if op not in OPS or not column:
        raise InvalidInput(f"not a filter: {text!r}", field="where")
    expected = _arity(op)  # type: ignore[arg-type]
    if (expected == -1 and not values) or (expected >= 0 and len(values) != expected):
        raise InvalidInput(f"not a filter: {text!r}", field="where")
    return Condition(column, op, tuple(values))  # type: ignore[arg-type]


# ---------------------------------------------------------------- SQL


def where_sql(conditions: list[Condition], columns: dict[str, str]) -> tuple[str, list[Any]]:
    """``" WHERE ..."`` (or ``""``) and its parameters for checked conditions, ANDed.

    Column names are checked (again) against ``columns`` and quoted; values are bound
    parameters cast to the column's type, so comparisons happen in that type.

    Raises:
        InvalidInput: As ``check_conditions``.
    """
    clauses: list[str] = []
    params: list[Any] = []
    for c in check_conditions(conditions, columns):
        sql, values = condition_sql(c, columns[c.column])
        clauses.append(sql)
        params.extend(values)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def condition_sql(condition: Condition, duck_type: str) -> tuple[str, list[Any]]:
    """The SQL predicate of one checked condition and its parameters."""
    col = quote_ident(condition.column)
    is_text = type_family(duck_type) == "text"
    # The type comes from the table's schema (DESCRIBE), never from the user.
    typed = "?" if is_text else f"CAST(? AS {duck_type})"
    values = list(condition.values)
    op = condition.op
    if op in _COMPARE_SQL:
        return f"{col} {_COMPARE_SQL[op]} {typed}", values
    if op == "between":
        return f"{col} BETWEEN {typed} AND {typed}", values
    if op == "in":
        return f"{col} IN ({', '.join([typed] * len(values))})", values
    if op == "contains":
        return f"contains(lower(CAST({col} AS VARCHAR)), lower(?))", values
    if op == "starts_with":
        return f"starts_with(lower(CAST({col} AS VARCHAR)), lower(?))", values
    if op == "is_empty":
        return (f"({col} IS NULL OR {col} = '')" if is_text else f"{col} IS NULL"), []
    if op == "is_not_empty":
        return (f"({col} IS NOT NULL AND {col} <> '')" if is_text else f"{col} IS NOT NULL"), []
    raise InvalidInput(f"unknown filter operator {op!r}", field="where")
