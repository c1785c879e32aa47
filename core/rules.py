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

An inferred rule carries ``meta.oreo.inferred``. Inferring again makes a *proposal*
(``propose``): each proposed rule is new, changed (its current and proposed forms), the same,
or kept, and each current inferred rule the data no longer keeps is removed. Nothing changes
until a steward accepts some or all of it (``accepted``). The rules are the steward's: a rule
a person edited carries ``meta.oreo.edited_by`` and, like every rule a person wrote, is kept
as it is, even when the whole proposal is accepted. A rule can be turned off
(``meta.oreo.disabled``): it stays in the suite, and is not evaluated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

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
    """``suite`` with the whole proposal of ``inferred`` accepted: a rule a person wrote or edited is kept."""
    return accepted(suite, inferred)[0]


# ---------------------------------------------------------------- proposals

ProposalStatus = Literal["new", "changed", "same", "kept", "removed"]
# What accepting each status does to the suite; "same" and "kept" change nothing.
APPLIED: tuple[ProposalStatus, ...] = ("new", "changed", "removed")


def rule_name(item: dict[str, Any]) -> str:
    """A rule's name in a proposal, its column and what it asks: ``amount:be_between``, ``plan:be_in_set``."""
    kind = str(item.get("type") or item.get("expectation_type") or "")
    kwargs = item.get("kwargs") or {}
    column = kwargs.get("column") or "+".join(kwargs.get("column_list") or [])
    short = kind.removeprefix("expect_column_values_to_").removeprefix("expect_")
    return f"{column}:{short}" if column else short


def edited_by(item: dict[str, Any]) -> str | None:
    """Who edited the rule by hand, or None when no one did.

    A rule inferred before Oreo recorded the editor, yet no longer a plain warning that is on,
    was edited by someone: ``"a person"``.
    """
    meta = _meta(item)
    if meta.get("edited_by"):
        return str(meta["edited_by"])
    if meta.get("inferred") and (item.get("severity", "critical") != "warning" or meta.get("disabled")):
        return "a person"
    return None


def is_steward_owned(item: dict[str, Any]) -> bool:
    """A rule a person wrote or edited: no proposal changes or removes it."""
    return not is_inferred(item) or edited_by(item) is not None


def source(item: dict[str, Any]) -> str:
    """Where the rule comes from, in a word or three: ``inferred``, ``edited by ada`` or ``set``."""
    editor = edited_by(item)
    if editor is not None:
        return f"edited by {editor}"
    return "inferred" if is_inferred(item) else "set"


@dataclass(frozen=True)
class ProposedRule:
    """One line of a proposal: a proposed rule beside the current rule of the same name.

    ``current`` is None for a new rule, ``proposed`` None for a removed one; ``number`` is the
    current rule's 1-based place in the suite.
    """

    name: str
    status: ProposalStatus
    current: dict[str, Any] | None
    proposed: dict[str, Any] | None
    number: int | None = None

    @property
    def change(self) -> str:
        """What accepting this line would do, in plain words."""
        match self.status:
            case "new":
                return f"adds: {describe(self.proposed or {})}"
            case "removed":
                return "removes it: the data no longer keeps it"
            case "same":
                return "no change"
            case "kept":
                editor = edited_by(self.current or {})
                return f"kept: edited by {editor}" if editor else "kept: set by a person"
        return _difference(self.current or {}, self.proposed or {})

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "number": self.number,
            "current": describe(self.current) if self.current is not None else None,
            "proposed": describe(self.proposed) if self.proposed is not None else None,
            "change": self.change,
            "edited_by": edited_by(self.current) if self.current is not None else None,
            "current_rule": self.current,
            "proposed_rule": self.proposed,
        }


def _canonical(value: Any) -> Any:
    """``value`` as compared: GX stores whole bounds as floats (0 is kept as 0.0)."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return _plain(_number(value)) if isinstance(value, float | Decimal) else value


def _same(current: dict[str, Any], proposed: dict[str, Any]) -> bool:
    return (current.get("severity", "critical"), _canonical(current.get("kwargs") or {})) == (
        proposed.get("severity", "critical"),
        _canonical(proposed.get("kwargs") or {}),
    )


# How a changed argument reads: "maximum 500 → 22".
_ARGUMENTS = {"min_value": "minimum", "max_value": "maximum", "regex": "shape"}


def _difference(current: dict[str, Any], proposed: dict[str, Any]) -> str:
    """What differs between two rules of one name, in plain words: ``maximum 500 → 22``, ``also allows "c"``."""
    old, new = _canonical(current.get("kwargs") or {}), _canonical(proposed.get("kwargs") or {})
    parts: list[str] = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if isinstance(before, list) and isinstance(after, list):
            added, dropped = [v for v in after if v not in before], [v for v in before if v not in after]
            parts += [f"also allows {_values(added)}"] if added else []
            parts += [f"no longer allows {_values(dropped)}"] if dropped else []
            continue
        parts.append(f"{_ARGUMENTS.get(key, key)} {_shown(before)} → {_shown(after)}")
    severity = (current.get("severity", "critical"), proposed.get("severity", "critical"))
    if severity[0] != severity[1]:
        parts.append(f"severity {severity[0]} → {severity[1]}")
    return "; ".join(parts) or "no change"


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return _values(value) if isinstance(value, list) else str(value)


def propose(suite: dict[str, Any], inferred: list[dict[str, Any]]) -> tuple[ProposedRule, ...]:
    """``inferred`` as a proposal against ``suite``: each rule new, changed, the same or kept, plus removals.

    A rule a person wrote or edited (``is_steward_owned``) is kept as it is, never changed or removed.
    """
    items = list(suite.get("expectations", []))
    current: dict[str, int] = {}  # name -> index; a steward's rule wins over an inferred one of that name
    for index, item in enumerate(items):
        name = rule_name(item)
        if name not in current or (is_steward_owned(item) and not is_steward_owned(items[current[name]])):
            current[name] = index
    lines: list[ProposedRule] = []
    proposed_names: set[str] = set()
    for rule in inferred:
        name = rule_name(rule)
        if name in proposed_names:
            continue  # inference names each rule once; a repeat would only add a duplicate
        proposed_names.add(name)
        at = current.get(name)
        if at is None:
            lines.append(ProposedRule(name, "new", None, rule))
            continue
        item = items[at]
        status: ProposalStatus = "kept" if is_steward_owned(item) else "same" if _same(item, rule) else "changed"
        lines.append(ProposedRule(name, status, item, rule, at + 1))
    for index, item in enumerate(items):
        name = rule_name(item)
        if is_steward_owned(item) or (name in proposed_names and current[name] == index):
            continue
        lines.append(ProposedRule(name, "removed", item, None, index + 1))
    return tuple(lines)


def accepted(
    suite: dict[str, Any], inferred: list[dict[str, Any]], names: Collection[str] | None = None
) -> tuple[dict[str, Any], tuple[ProposedRule, ...]]:
    """``suite`` with the proposal of ``inferred`` accepted: the lines ``names``, or every line when None.

    A changed rule is replaced where it stands (rule numbers stay), a new one is added at the
    end, a removed one is dropped; a rule a person wrote or edited is never touched.

    Returns:
        The new suite, and the lines that changed it.

    Raises:
        InvalidInput: A name the proposal does not have, or one of a rule a person edited.
    """
    lines = propose(suite, inferred)
    by_name = {line.name: line for line in lines}
    if names is not None:
        unknown = [n for n in names if n not in by_name]
        if unknown:
            offered = ", ".join(line.name for line in lines if line.status in APPLIED) or "none"
            raise InvalidInput(f"no proposed rule named {unknown[0]!r}; the proposal changes: {offered}", field="rule")
        kept = [by_name[n] for n in names if by_name[n].status == "kept"]
        if kept:
            raise InvalidInput(
                f"rule {kept[0].name!r} is the steward's ({kept[0].change}); a proposal never changes it",
                field="rule",
            )
    chosen = [line for line in lines if line.status in APPLIED and (names is None or line.name in names)]
    items: list[dict[str, Any] | None] = list(suite.get("expectations", []))
    for line in chosen:
        if line.number is not None:  # changed or removed
            items[line.number - 1] = line.proposed
    items += [line.proposed for line in chosen if line.number is None]
    return {**suite, "expectations": [item for item in items if item is not None]}, tuple(chosen)


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


def changed_rule(suite: dict[str, Any], number: int, change: RuleChange, *, by: str | None = None) -> dict[str, Any]:
    """``suite`` with rule ``number`` (1-based, in suite order) changed, by the person ``by``.

    A rule that did change then carries ``meta.oreo.edited_by``: the steward's from now on, never
    changed by a proposal. (Saving a rule as it was marks nothing.)

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
    before = items[number - 1]
    if by is not None and (not _same(before, item) or is_disabled(before) != is_disabled(item)):
        meta = item.get("meta") or {}
        item["meta"] = meta
        meta.setdefault("oreo", {})["edited_by"] = by
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
