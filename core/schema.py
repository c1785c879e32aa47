"""Column types across Arrow, DuckDB and Delta, and what an import may do to a schema.

Types are named as Spark SQL names them (``int``, ``bigint``, ``double``,
``decimal(10,2)``, ``string``, ``timestamp``...), the names a Delta table's schema and
``CAST`` use. An imported file's column, compared with the table's column of that name
(matched case-insensitively, as Delta does), is one of:

* ``same`` - the same type;
* ``cast`` - a narrower type the table's type holds exactly (an ``int`` into a
  ``bigint``, an integer into a ``double``, anything into a ``string``), or a column the
  file leaves empty: written as the table's type, no schema change;
* ``widen`` - a wider type Delta can widen the table's column to in place (type
  widening: ``int`` to ``bigint``, ``float`` to ``double``...): a **schema change**;
* ``new`` - a column the table does not have: a **schema change** (added);
* ``absent`` - a table column the file lacks: left empty on inserted rows, unchanged on
  updated ones;
* ``incompatible`` - anything else, refused (e.g. text into a ``bigint`` column, or a
  ``double`` into a ``bigint`` one: Delta cannot widen ``bigint`` to ``double``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from core.errors import InvalidFile, InvalidInput

Status = Literal["same", "cast", "widen", "new", "absent", "incompatible"]
SchemaChangeKind = Literal["add", "widen"]

_INTEGERS = ("tinyint", "smallint", "int", "bigint")
INTEGER_TYPES = _INTEGERS
# Digits each integer type needs in a decimal.
_INTEGER_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
_DUCK_TO_SPARK = {
    "TINYINT": "tinyint",
    "SMALLINT": "smallint",
    "INTEGER": "int",
    "BIGINT": "bigint",
    "FLOAT": "float",
    "DOUBLE": "double",
    "BOOLEAN": "boolean",
    "VARCHAR": "string",
    "DATE": "date",
    "TIMESTAMP WITH TIME ZONE": "timestamp",
    "TIMESTAMP": "timestamp_ntz",
    "BLOB": "binary",
}


# Names Oreo gives columns of its own: staging's bookkeeping (``core.change_requests``),
# the editing grid's overlay (``core.sessions``) and Delta's change data feed. A data
# column of the same name (case-insensitively, as Delta matches names) would collide.
RESERVED_NAMES = ("_op", "_changed", "_change", "_edited", "_change_type", "_commit_version", "_commit_timestamp")
# The catalog keeps a key column's name in 200 characters.
MAX_NAME_LENGTH = 200


def check_column_name(name: str, *, source: str) -> None:
    """Refuse a column name Oreo reserves, one with a backtick, or one too long for the catalog.

    Raises:
        InvalidFile: Naming the column and what to do.
    """
    if name.lower() in RESERVED_NAMES:
        raise InvalidFile(
            f"column {name!r} in {source} has a name Oreo reserves for its own columns "
            f"({', '.join(RESERVED_NAMES)}); rename it"
        )
    if "`" in name:
        # Delta's MERGE with the change data feed on names columns unquoted
        # (packedCdc.<name>) and fails on a backtick, so such a table could never merge.
        raise InvalidFile(f"column {name!r} in {source} contains a backtick (`), which Delta cannot merge; rename it")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidFile(
            f"column {name[:40]!r}... in {source} has a {len(name)}-character name; "
            f"names are at most {MAX_NAME_LENGTH} characters"
        )


def check_column_types(arrow_schema: pa.Schema, *, source: str) -> None:
    """Refuse nested columns (struct, list, map) and types a Delta table cannot hold.

    Oreo edits, validates, stages and diffs a cell as one typed value; a nested value has
    no such single form (see "Column types" in docs/storage.md).

    Raises:
        InvalidFile: Naming the first such column and its type.
    """
    for field in arrow_schema:
        t = field.type
        if pa.types.is_nested(t):
            raise InvalidFile(
                f"column {field.name!r} in {source} is {t}, a nested type; Oreo keeps one value per cell - "
                "flatten it into columns or store it as JSON text"
            )
        if pa.types.is_time(t) or pa.types.is_duration(t) or pa.types.is_interval(t):
            raise InvalidFile(
                f"column {field.name!r} in {source} is {t}, which a Delta table cannot hold; "
                "store it as a timestamp, a number or text"
            )


@dataclass(frozen=True)
class SchemaChange:
    """A change an import makes to the table's schema, applied by the merge."""

    column: str
    change: SchemaChangeKind
    from_type: str | None
    to_type: str

    def to_json(self) -> dict[str, Any]:
        return {"column": self.column, "change": self.change, "from": self.from_type, "to": self.to_type}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SchemaChange:
        return cls(column=data["column"], change=data["change"], from_type=data.get("from"), to_type=data["to"])

    def describe(self) -> str:
        if self.change == "add":
            return f"new column {self.column} ({self.to_type})"
        return f"{self.column}: {self.from_type} → {self.to_type}"


@dataclass(frozen=True)
class ColumnPlan:
    """One column of an import, compared with the table."""

    name: str  # the table's spelling when the table has it
    status: Status
    file_type: str | None
    table_type: str | None

    @property
    def final_type(self) -> str:
        """The column's type in the table after the import."""
        if self.status in ("widen", "new"):
            return str(self.file_type)
        return str(self.table_type if self.table_type is not None else self.file_type)

    def to_json(self) -> dict[str, Any]:
        return {"column": self.name, "status": self.status, "file_type": self.file_type, "table_type": self.table_type}


def from_duckdb(duck_type: str) -> str:
    """The Spark name of a DuckDB column type (as ``DESCRIBE`` prints it)."""
    upper = duck_type.upper()
    if upper.startswith("DECIMAL"):
        return duck_type.lower().replace(" ", "")
    if upper in _DUCK_TO_SPARK:
        return _DUCK_TO_SPARK[upper]
    return duck_type.lower()  # lists, structs...: compared as written


def to_duckdb(spark_type: str) -> str:
    """The DuckDB name of a column type named as Spark names it (``from_duckdb``'s inverse)."""
    match = _DECIMAL.fullmatch(spark_type)
    if match:
        return f"DECIMAL({match[1]},{match[2]})"
    return next((duck for duck, spark in _DUCK_TO_SPARK.items() if spark == spark_type), spark_type.upper())


def from_arrow(arrow_type: pa.DataType) -> str:
    """The Spark name of an Arrow type (``null`` for a column with no values at all)."""
    t = arrow_type
    simple = [
        (pa.types.is_null, "null"),
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_int8, "tinyint"),
        (pa.types.is_int16, "smallint"),
        (pa.types.is_int32, "int"),
        (pa.types.is_int64, "bigint"),
        (pa.types.is_float32, "float"),
        (pa.types.is_float64, "double"),
        (pa.types.is_string, "string"),
        (pa.types.is_large_string, "string"),
        (pa.types.is_date32, "date"),
        (pa.types.is_binary, "binary"),
    ]
    for check, name in simple:
        if check(t):
            return name
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz else "timestamp_ntz"
    return str(t)


def to_arrow(spark_type: str) -> pa.DataType | None:
    """The Arrow type a CSV column should be parsed as to land in ``spark_type`` exactly.

    Only for types inference would get wrong: text (leading zeros, "1e5") and decimals
    (inferred as double). None: let the reader infer the type.
    """
    if spark_type == "string":
        return pa.string()
    match = _DECIMAL.fullmatch(spark_type)
    if match:
        return pa.decimal128(int(match[1]), int(match[2]))
    return None


def _decimal(t: str) -> tuple[int, int] | None:
    match = _DECIMAL.fullmatch(t)
    return (int(match[1]), int(match[2])) if match else None


def _fits(file_type: str, table_type: str) -> bool:
    """Values of ``file_type`` keep their value as ``table_type`` (no schema change)."""
    if file_type in ("null", table_type) or table_type == "string":
        return True
    if file_type in _INTEGERS and table_type in _INTEGERS:
        return _INTEGERS.index(file_type) <= _INTEGERS.index(table_type)
    if file_type in _INTEGERS and table_type in ("float", "double"):
        return True
    if file_type == "float" and table_type == "double":
        return True
    if file_type == "date" and table_type in ("timestamp", "timestamp_ntz"):
        return True
    target = _decimal(table_type)
    if target is not None:
        source = _decimal(file_type)
        if source is not None:
            return source[1] <= target[1] and source[0] - source[1] <= target[0] - target[1]
        if file_type in _INTEGERS:
            return _INTEGER_DIGITS[file_type] <= target[0] - target[1]
    return False


def _widens(table_type: str, file_type: str) -> bool:
    """Delta's type widening can change ``table_type`` to ``file_type`` in place."""
    if table_type in _INTEGERS and file_type in _INTEGERS:
        return _INTEGERS.index(table_type) < _INTEGERS.index(file_type)
    if table_type in ("tinyint", "smallint", "int") and file_type == "double":
        return True
    if table_type == "float" and file_type == "double":
        return True
    if table_type == "date" and file_type == "timestamp_ntz":
        return True
    target = _decimal(file_type)
    if target is not None:
        source = _decimal(table_type)
        if source is not None:
            return source != target and source[1] <= target[1] and source[0] - source[1] <= target[0] - target[1]
        if table_type in _INTEGERS:
            return _INTEGER_DIGITS[table_type] <= target[0] - target[1]
    return False


def compare(file_columns: list[tuple[str, str]], table_columns: list[tuple[str, str]]) -> list[ColumnPlan]:
    """Each file and table column's fate (see the module docstring), file columns first.

    ``row_id`` is Oreo's and never compared. Names match case-insensitively, as in Delta.
    """
    table = {name.lower(): (name, t) for name, t in table_columns if name != "row_id"}
    plans: list[ColumnPlan] = []
    seen: set[str] = set()
    for name, file_type in file_columns:
        if name == "row_id":
            continue
        found = table.get(name.lower())
        if found is None:
            plans.append(ColumnPlan(name, "new", "string" if file_type == "null" else file_type, None))
            continue
        table_name, table_type = found
        seen.add(table_name.lower())
        if file_type == table_type:
            status: Status = "same"
        elif _fits(file_type, table_type):
            status = "cast"
        elif _widens(table_type, file_type):
            status = "widen"
        else:
            status = "incompatible"
        plans.append(ColumnPlan(table_name, status, file_type, table_type))
    plans += [ColumnPlan(name, "absent", None, t) for key, (name, t) in table.items() if key not in seen]
    return plans


def schema_changes(plans: list[ColumnPlan]) -> list[SchemaChange]:
    """The schema changes among ``plans``: added columns and widened types."""
    changes = []
    for p in plans:
        if p.status == "new":
            changes.append(SchemaChange(p.name, "add", None, p.final_type))
        elif p.status == "widen":
            changes.append(SchemaChange(p.name, "widen", p.table_type, p.final_type))
    return changes


def refuse_incompatible(plans: list[ColumnPlan], *, source: str) -> None:
    """Raise for the first column whose type cannot go into the table.

    Raises:
        InvalidInput: Naming the column and both types.
    """
    bad = [p for p in plans if p.status == "incompatible"]
    if bad:
        p = bad[0]
        more = f" (and {len(bad) - 1} more column(s))" if len(bad) > 1 else ""
        raise InvalidInput(
            f"column {p.name!r} is {p.table_type} in the table but {p.file_type} in {source}; "
            f"{p.file_type} values cannot go into a {p.table_type} column and Delta cannot widen "
            f"{p.table_type} to {p.file_type}{more}",
            field="file",
        )
