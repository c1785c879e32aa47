"""Rules a dataset's data keeps: inferred from its profile, described in plain words, edited.

A dataset's rules are its GX ExpectationSuite (``core.validation``). Besides the default
critical rules (``row_id`` present and unique, each column's type), Oreo proposes rules
from what the data looks like, each at severity ``warning`` so that an approver sees a
surprising value without it blocking anyone:

* not null, for a column with no nulls;
* a numeric range: the observed minimum and maximum widened by half their span (a column
  that never went below zero stays at or above zero);
* a value set, for text with few distinct values;
* uniqueness, for a column whose every value is distinct (an integer one gets no range:
  it is an identifier, and new rows bring new values);
* a regular expression, for text whose every value has one common shape (an email
  address, an upper-case ISO code).

An inferred rule carries ``meta.oreo.inferred``; proposing again replaces the inferred rules
and keeps every other rule. A rule can be turned off (``meta.oreo.disabled``): it stays in
the suite, and is not evaluated.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from core import reads
from core.errors import InvalidInput, NotFound
from core.layout import DatasetLayout
from core.storage import Location, glob

if TYPE_CHECKING:
    import duckdb

# A value set is proposed for text with at most this many distinct values, each seen at
# least twice on average (otherwise the set is just the rows seen so far).
VALUE_SET_MAX = 20
# A column is checked exactly for uniqueness when its approximate distinct count reaches
# this share of its values (the estimate can be some percent under the truth).
UNIQUE_GATE = 0.8
# Range margin: the observed span times this, on each side.
RANGE_MARGIN = 0.5
# Shapes a text column can all match, most specific first.
SHAPES: tuple[tuple[str, str], ...] = (
    ("an email address", r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$"),
    ("an upper-case code of 2 or 3 letters (ISO style)", r"^[A-Z]{2,3}$"),
)
_NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT")
_FLOATING = ("FLOAT", "DOUBLE", "REAL")


def _kind(duck_type: str) -> str | None:
    base = duck_type.upper().split("(")[0].strip()
    if base in _NUMERIC:
        return "integer"
    if base in _FLOATING or base == "DECIMAL":
        return "number"
    if base == "VARCHAR":
        return "text"
    return None


def _meta(item: dict[str, Any]) -> dict[str, Any]:
    meta = item.get("meta") or {}
    oreo = meta.get("oreo") if isinstance(meta, dict) else None
    return oreo if isinstance(oreo, dict) else {}


def is_inferred(item: dict[str, Any]) -> bool:
    return bool(_meta(item).get("inferred"))


def is_disabled(item: dict[str, Any]) -> bool:
    return bool(_meta(item).get("disabled"))


def active_suite(suite: dict[str, Any]) -> dict[str, Any]:
    """``suite`` without its turned-off rules: what a validation run evaluates."""
    return {**suite, "expectations": [e for e in suite.get("expectations", []) if not is_disabled(e)]}


def _number(value: Any) -> int | float:
    if isinstance(value, Decimal):
        return float(value)
    return value  # type: ignore[no-any-return]


def _widened(low: Any, high: Any, integer: bool) -> tuple[int | float, int | float]:
    low, high = _number(low), _number(high)
    pad = (high - low) * RANGE_MARGIN or max(abs(high) * RANGE_MARGIN, 1)
    lower, upper = low - pad, high + pad
    if low >= 0:
        lower = max(0, lower)
    if integer:
        return math.floor(lower), math.ceil(upper)
    return float(f"{lower:.6g}"), float(f"{upper:.6g}")


def _rule(kind: str, column: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "kwargs": {"column": column, **kwargs},
        "severity": "warning",
        "meta": {"oreo": {"inferred": True}},
    }


def infer_rules(path: Location, version: int | None, columns: list[reads.Column]) -> list[dict[str, Any]]:
    """Warning rules that every row of ``path`` at ``version`` keeps (one DuckDB pass, then one per text column).

    ``row_id`` gets none: the default suite already requires it present and unique.
    """
    scan, at = _scan(path, version)
    return infer_rules_over(scan, at, columns)


def infer_rules_over(
    scan: str, at: list[Any], columns: list[reads.Column], *, cur: duckdb.DuckDBPyConnection | None = None
) -> list[dict[str, Any]]:
    """As ``infer_rules``, over any DuckDB relation ``scan`` (with parameters ``at``) of those ``columns``.

    A migration infers them from its rows while Spark writes the same rows (``core.migrate``).
    """
    cur = cur or reads.cursor()
    profiled = [(c, _kind(c.type)) for c in columns if c.name != "row_id"]
    profiled = [(c, k) for c, k in profiled if k is not None]
    if not profiled:
        return []
    q = reads.quote_ident
    parts = ["count(*)"]
    for column, kind in profiled:
        name = q(column.name)
        parts.append(f"count({name})")
        if kind in ("integer", "number"):
            parts += [f"min({name})", f"max({name})"]
            if kind == "integer":
                parts.append(f"approx_count_distinct({name})")
        else:
            parts.append(f"approx_count_distinct({name})")
            parts += [f"count_if(regexp_full_match({name}, {reads.quote_literal(p)}))" for _, p in SHAPES]
    row = cur.execute(f"SELECT {', '.join(parts)} FROM {scan}", at).fetchone()
    assert row is not None  # an aggregate always returns one row
    rows, values = int(row[0]), list(row[1:])
    if rows == 0:
        return []
    found: list[dict[str, Any]] = []
    for column, kind in profiled:
        present = int(values.pop(0))
        if present == rows:
            found.append(_rule("expect_column_values_to_not_be_null", column.name))
        if kind in ("integer", "number"):
            low, high = values.pop(0), values.pop(0)
            distinct = int(values.pop(0) or 0) if kind == "integer" else 0
            if present > 1 and distinct >= present * UNIQUE_GATE and _all_distinct(cur, scan, at, column.name):
                # An identifier: unique, and new rows bring new values, so no range.
                found.append(_rule("expect_column_values_to_be_unique", column.name))
                continue
            if low is not None and high is not None and all(math.isfinite(_number(v)) for v in (low, high)):
                lower, upper = _widened(low, high, kind == "integer")
                found.append(_rule("expect_column_values_to_be_between", column.name, min_value=lower, max_value=upper))
            continue
        distinct = int(values.pop(0) or 0)
        shaped = [int(values.pop(0) or 0) for _ in SHAPES]  # count_if over only NULLs is NULL
        if present and distinct <= VALUE_SET_MAX and present >= 2 * distinct:
            seen = cur.execute(
                f"SELECT DISTINCT {q(column.name)} FROM {scan} WHERE {q(column.name)} IS NOT NULL ORDER BY 1", at
            )
            found.append(
                _rule("expect_column_values_to_be_in_set", column.name, value_set=[r[0] for r in seen.fetchall()])
            )
        elif present > 1 and distinct >= present * UNIQUE_GATE and _all_distinct(cur, scan, at, column.name):
            found.append(_rule("expect_column_values_to_be_unique", column.name))
        for (_, pattern), matched in zip(SHAPES, shaped, strict=True):
            if present and matched == present:
                found.append(_rule("expect_column_values_to_match_regex", column.name, regex=pattern))
                break
    return found


def _scan(path: Location, version: int | None) -> tuple[str, list[Any]]:
    if version is None:
        return "delta_scan(?)", [str(path)]
    return "delta_scan(?, version => ?)", [str(path), int(version)]


def _all_distinct(cur: duckdb.DuckDBPyConnection, scan: str, at: list[Any], column: str) -> bool:
    name = reads.quote_ident(column)
    row = cur.execute(f"SELECT count({name}) = count(DISTINCT {name}) FROM {scan}", at).fetchone()
    return bool(row and row[0])


def with_inferred(suite: dict[str, Any], inferred: list[dict[str, Any]]) -> dict[str, Any]:
    """``suite`` with its earlier inferred rules replaced by ``inferred``; every other rule is kept."""
    kept = [e for e in suite.get("expectations", []) if not is_inferred(e)]
    return {**suite, "expectations": kept + inferred}


# ---------------------------------------------------------------- plain words


def _values(items: list[Any], shown: int = 6) -> str:
    text = ", ".join(json.dumps(v) if isinstance(v, str) else str(v) for v in items[:shown])
    return text + (f" and {len(items) - shown} more" if len(items) > shown else "")


def _plain(number: Any) -> Any:
    """A whole float as an integer (GX keeps bounds as floats): 14.0 reads as 14."""
    return int(number) if isinstance(number, float) and number.is_integer() else number


def describe(item: dict[str, Any]) -> str:
    """One sentence a data steward reads: what the rule asks of the data."""
    kind = str(item.get("type") or item.get("expectation_type") or "")
    kwargs = item.get("kwargs") or {}
    column = kwargs.get("column")
    shape = next((label for label, pattern in SHAPES if pattern == kwargs.get("regex")), None)
    match kind:
        case "expect_column_values_to_not_be_null":
            return f"{column} is never empty"
        case "expect_column_values_to_be_unique":
            return f"each {column} appears once"
        case "expect_compound_columns_to_be_unique":
            return f"each {' + '.join(kwargs.get('column_list') or [])} appears once"
        case "expect_column_values_to_be_between":
            low, high = _plain(kwargs.get("min_value")), _plain(kwargs.get("max_value"))
            if low is not None and high is not None:
                return f"{column} is between {low} and {high}"
            return f"{column} is at least {low}" if low is not None else f"{column} is at most {high}"
        case "expect_column_values_to_be_in_set":
            return f"{column} is one of {_values(list(kwargs.get('value_set') or []))}"
        case "expect_column_values_to_match_regex":
            return f"{column} is {shape}" if shape else f"{column} matches {kwargs.get('regex')}"
        case "expect_column_values_to_be_in_type_list":
            return f"{column} holds values of its column type"
        case "expect_column_value_lengths_to_be_between":
            return f"{column} is {kwargs.get('min_value')} to {kwargs.get('max_value')} characters long"
    words = kind.removeprefix("expect_").replace("_", " ")
    return f"{column}: {words}" if column else words


# ---------------------------------------------------------------- editing


@dataclass(frozen=True)
class RuleChange:
    """What to change in one rule; ``None`` leaves a part as it is."""

    severity: str | None = None
    min_value: float | None = None
    max_value: float | None = None
    enabled: bool | None = None


def changed_rule(suite: dict[str, Any], number: int, change: RuleChange) -> dict[str, Any]:
    """``suite`` with rule ``number`` (1-based, in suite order) changed.

    Raises:
        NotFound: No rule with that number.
        InvalidInput: Bounds on a rule without bounds, or a minimum above the maximum.
    """
    items = list(suite.get("expectations", []))
    if not 1 <= number <= len(items):
        raise NotFound(f"no rule #{number}: the suite has {len(items)} rule(s)", kind="rule", ident=str(number))
    item = json.loads(json.dumps(items[number - 1], default=str))
    if change.severity is not None:
        item["severity"] = change.severity
    if change.min_value is not None or change.max_value is not None:
        kwargs = item.setdefault("kwargs", {})
        if "min_value" not in kwargs and "max_value" not in kwargs:
            raise InvalidInput(f"rule #{number} ({describe(item)}) has no bounds to change", field="bounds")
        if change.min_value is not None:
            kwargs["min_value"] = change.min_value
        if change.max_value is not None:
            kwargs["max_value"] = change.max_value
        low, high = kwargs.get("min_value"), kwargs.get("max_value")
        if low is not None and high is not None and low > high:
            raise InvalidInput(f"rule #{number}: the minimum {low} is above the maximum {high}", field="bounds")
    if change.enabled is not None:
        meta = item.setdefault("meta", {}) or {}
        item["meta"] = meta
        oreo = meta.setdefault("oreo", {})
        if change.enabled:
            oreo.pop("disabled", None)
        else:
            oreo["disabled"] = True
    items[number - 1] = item
    return {**suite, "expectations": items}


# ---------------------------------------------------------------- what failed lately


@dataclass(frozen=True)
class RecentFailures:
    """How many of the last ``runs`` validation runs failed each (expectation type, column)."""

    runs: int
    counts: dict[tuple[str, str | None], int]

    def of(self, item: dict[str, Any]) -> int:
        kind = str(item.get("type") or item.get("expectation_type") or "")
        return self.counts.get((kind, (item.get("kwargs") or {}).get("column")), 0)


def recent_failures(layout: DatasetLayout, runs: int = 20) -> RecentFailures:
    """The failures of the dataset's last ``runs`` validation runs, newest first by file time."""
    folder = layout.validation_run("x").parent
    summaries = sorted(glob(folder, "*/summary.json"), key=lambda p: p.stat().st_mtime, reverse=True)[:runs]
    counts: dict[tuple[str, str | None], int] = {}
    for path in summaries:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a run being written
        for failure in {(f["expectation"], f.get("column")) for f in data.get("failures", [])}:
            counts[failure] = counts.get(failure, 0) + 1
    return RecentFailures(runs=len(summaries), counts=counts)
