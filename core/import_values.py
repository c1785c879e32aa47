"""The values of an import file that its table's columns cannot hold, reported all at once.

An import is refused when a value would land altered or not at all. The refusal names every
bad value (its data row, its column and the value as the file has it) up to ``SHOWN`` of them,
counts the rest, and names only the columns that hold one. The checks:

* a file column read as text where the table's column is typed (a CSV or XLSX column falls
  back to text when one of its values is not a number, a date...): each value must fit as a
  typed cell would (``core.values.check_value``) and cast in DuckDB (no 30 February);
* numbers whose type changes on the way in: a fraction or an out-of-range float into a
  whole-number column, an integer a float column cannot hold, NaN and ±Infinity where the
  dataset refuses them;
* a CSV column parsed as the table's decimal: more scale or precision than it holds
  (``refuse_csv_decimals``, while the upload is read).

A column whose type does not fit but whose every value does (a Parquet text column of
numbers) has no bad value: ``core.schema.refuse_incompatible`` refuses it by type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from core import reads, schema
from core.errors import InvalidInput
from core.schema import ColumnPlan
from core.storage import Location
from core.values import check_value, type_family

SHOWN = 20
_FLOATS = ("float", "double")
_WHOLE_LIMIT = {"double": 2**53, "float": 2**24}  # beyond these, not every integer has a float
_FETCH = 65_536
_NON_FINITE_HINT = "NaN and Infinity are off for this dataset: oreo dataset set --allow-non-finite true allows them"


@dataclass(frozen=True)
class BadValue:
    """One file value its table column cannot hold."""

    row: int  # the data row, from 1
    column: str
    shown: str  # the value as the message quotes it
    reason: str  # what is wrong with it, e.g. "is not a number (DOUBLE)"


@dataclass
class _Found:
    """The bad values seen: up to ``SHOWN`` of each column, and how many each column has."""

    values: list[BadValue] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    hints: list[str] = field(default_factory=list)

    def add(self, row: int, column: str, shown: str, reason: str) -> None:
        self.counts[column] = self.counts.get(column, 0) + 1
        if self.counts[column] <= SHOWN:
            self.values.append(BadValue(row, column, shown, reason))

    def add_counted(self, column: str, total: int) -> None:
        """Columns checked in SQL fetch only the first ``SHOWN`` rows; this records how many there were."""
        self.counts[column] = max(self.counts.get(column, 0), total)


def check_file_values(
    converted: Location,
    file_name: str,
    file_columns: list[str],
    columns: list[ColumnPlan],
    *,
    allow_non_finite: bool,
) -> list[ColumnPlan]:
    """Refuse the file if any value would not land exactly; ``columns`` as they may go in.

    Args:
        converted: The upload's ``converted.parquet``.
        file_name: The name the user knows the file by, for the message.
        file_columns: The file's column names as the file spells them.
        columns: The file's columns compared with the table's (``core.schema.compare``).
        allow_non_finite: The dataset takes NaN and ±Infinity in floating columns.

    Returns:
        ``columns``, with a floating file column of whole numbers for a whole-number table
        column turned from ``incompatible`` into a ``cast``.

    Raises:
        InvalidInput: Naming every bad value up to ``SHOWN``, and counting the others.
    """
    found = _Found()
    spelled = {name.lower(): name for name in file_columns}
    checked = []
    for c in columns:
        in_file = spelled.get(c.name.lower())
        if in_file is None or c.file_type is None:  # a table column the file lacks
            checked.append(c)
            continue
        if c.file_type in _FLOATS and c.table_type in schema.INTEGER_TYPES and c.status == "incompatible":
            # ``check_value`` refuses whole numbers beyond the float's exact range too: the
            # float the file was parsed into may already have rounded them.
            limit = _WHOLE_LIMIT[c.file_type]
            condition = f"v IS NOT NULL AND (NOT isfinite(v) OR v <> trunc(v) OR abs(v) > {limit})"
            _matching(converted, in_file, c, condition, found)
            c = ColumnPlan(c.name, "cast", c.file_type, c.table_type)
        elif c.file_type in schema.INTEGER_TYPES and c.table_type in _FLOATS and c.status == "cast":
            _matching(converted, in_file, c, f"abs(CAST(v AS HUGEINT)) > {_WHOLE_LIMIT[c.table_type]}", found)
        elif c.file_type == "string" and c.status == "incompatible":
            _text_values(converted, in_file, c, found, allow_non_finite=allow_non_finite)
        # A whole-number column's check above refuses NaN and ±Infinity already; a new column is checked too.
        whole = c.table_type in schema.INTEGER_TYPES
        if c.file_type in _FLOATS and c.status != "incompatible" and not whole and not allow_non_finite:
            _matching(converted, in_file, c, "NOT isfinite(v)", found, non_finite=True)
        checked.append(c)
    if found.counts:
        raise _refusal(found, file_name, columns)
    return checked


def refuse_csv_decimals(table: pa.Table, decimals: dict[str, pa.DataType], file_name: str) -> None:
    """Refuse every CSV value a decimal column cannot hold exactly (pyarrow's error names neither row nor value).

    Args:
        table: The CSV's decimal columns, read as text.
        decimals: Column name to the table's decimal type.
        file_name: The name the user knows the file by.

    Raises:
        InvalidInput: Naming every value that does not fit, up to ``SHOWN``.
    """
    found = _Found()
    for name, t in decimals.items():
        duck_type = f"DECIMAL({t.precision},{t.scale})"
        for row, value in enumerate(table.column(name).to_pylist(), start=1):
            reason = _unfit(value, name, duck_type)
            if reason is not None:
                found.add(row, name, repr(value), reason)
    if found.counts:
        raise _refusal(found, file_name, [])


def _unfit(value: str, column: str, duck_type: str, *, allow_non_finite: bool = False) -> str | None:
    """Why ``value`` does not fit ``duck_type`` ("is not a number (DOUBLE)"), or None when it fits."""
    try:
        check_value(value, column=column, duck_type=duck_type, allow_non_finite=allow_non_finite)
    except InvalidInput as exc:
        # check_value says "<where>: <the value quoted> <why>; nothing was saved".
        why = str(exc).split(": ", 1)[1].rsplit("; nothing was saved", 1)[0]
        return why.removeprefix(repr(value)).strip()
    return None


def _text_values(converted: Location, in_file: str, c: ColumnPlan, found: _Found, *, allow_non_finite: bool) -> None:
    """Check each text value of ``c`` as a cell of the table's type; DuckDB casts those that pass."""
    duck_type = schema.to_duckdb(str(c.table_type))
    family = type_family(duck_type)
    if family in ("text", "nested", "other"):
        return
    # check_value checks a date's or a timestamp's shape; the cast checks the calendar and the zone name.
    casts = family in ("date", "timestamp", "timestamptz")
    cast = f"TRY_CAST(trim(v) AS {duck_type}) IS NULL" if casts else "false"
    result = reads.cursor().execute(
        f"SELECT file_row_number, v, {cast} FROM (SELECT file_row_number, {reads.quote_ident(in_file)} AS v "
        "FROM read_parquet(?, file_row_number = true)) WHERE v IS NOT NULL ORDER BY file_row_number",
        [str(converted)],
    )
    while batch := result.fetchmany(_FETCH):
        for row, value, uncastable in batch:
            reason = _unfit(value, c.name, duck_type, allow_non_finite=allow_non_finite)
            if reason is None and uncastable:
                reason = f"is not a valid {duck_type}"
            if reason is not None:
                found.add(int(row) + 1, c.name, repr(value), reason)


def _matching(
    converted: Location, in_file: str, c: ColumnPlan, condition: str, found: _Found, *, non_finite: bool = False
) -> None:
    """Record the file's values of ``c`` matching ``condition`` (over ``v``): the first ``SHOWN``, and their count."""
    rows = (
        reads.cursor()
        .execute(
            f"SELECT file_row_number, CAST(v AS VARCHAR), count(*) OVER () FROM (SELECT file_row_number, "
            f"{reads.quote_ident(in_file)} AS v FROM read_parquet(?, file_row_number = true)) WHERE {condition} "
            f"ORDER BY file_row_number LIMIT {SHOWN}",
            [str(converted)],
        )
        .fetchall()
    )
    if not rows:
        return
    duck_type = schema.to_duckdb(str(c.table_type))
    for row, value, _ in rows:
        if non_finite:
            shown, reason = value, "is not a finite number"
            if _NON_FINITE_HINT not in found.hints:
                found.hints.append(_NON_FINITE_HINT)
        else:
            unfit = _unfit(value, c.name, duck_type)
            shown = value if unfit is None else repr(value)
            reason = unfit or f"does not fit {c.table_type} exactly (the file's {c.file_type} may have rounded it)"
        found.add(int(row) + 1, c.name, shown, reason)
    found.add_counted(c.name, int(rows[0][2]))


def _refusal(found: _Found, file_name: str, columns: list[ColumnPlan]) -> InvalidInput:
    """One line: the bad values (the first ``SHOWN`` in file order) by column and reason, how many more, the types."""
    total = sum(found.counts.values())
    order = {name: i for i, name in enumerate(found.counts)}
    shown = sorted(found.values, key=lambda b: (b.row, order[b.column]))[:SHOWN]
    if total == 1:
        [bad] = shown
        text = f"{file_name} data row {bad.row}, column {bad.column!r}: {bad.shown} {bad.reason}"
    else:
        names = list(found.counts)
        where = ""
        if len(names) > 1:
            where = " in columns " + ", ".join(f"{name!r} ({found.counts[name]:,})" for name in names)
        text = f"{file_name} has {total:,} values its table cannot hold{where}: {_grouped(shown, found.counts)}"
    typed = [c for c in columns if c.name in found.counts and c.status == "incompatible" and c.file_type == "string"]
    clauses = list(found.hints)
    if len(typed) == 1:
        clauses.insert(0, f"column {typed[0].name!r} is {typed[0].table_type} in the table but string in {file_name}")
    elif typed:
        listed_types = ", ".join(f"{c.name!r} {c.table_type}" for c in typed)
        clauses.insert(0, f"these columns are string in {file_name} but typed in the table: {listed_types}")
    if clauses:
        text += " (" + "; ".join(clauses) + ")"
    return InvalidInput(f"{text}; nothing was imported", field=next(iter(found.counts)))


def _grouped(shown: list[BadValue], counts: dict[str, int]) -> str:
    """``column 'a', not a number (DOUBLE): data rows 2 ('x'), 4 ('y') and 3 more; column 'b', ...``."""
    groups: dict[tuple[str, str], list[BadValue]] = {}
    for bad in sorted(shown, key=lambda b: list(counts).index(b.column)):
        groups.setdefault((bad.column, bad.reason), []).append(bad)
    last = {column: (column, reason) for column, reason in groups}  # a column's last group says how many more
    parts = []
    for (column, reason), values in groups.items():
        what = reason.removeprefix("is ")
        if "; " in what:  # "not a whole number; BIGINT would round it"
            what = what.replace("; ", " (", 1) + ")"
        rows = ", ".join(f"{b.row} ({b.shown})" for b in values)
        part = f"column {column!r}, {what}: data row{'s' if len(values) > 1 else ''} {rows}"
        if last[column] == (column, reason):
            more = counts[column] - sum(1 for b in shown if b.column == column)
            if more:
                part += f" and {more:,} more"
        parts.append(part)
    return "; ".join(parts)
