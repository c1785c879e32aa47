"""Facets: a column's values under the current filters, before anyone changes them.

A facet counts the rows of each value of one column among the rows a read sees (main
at the dataset's version, or overlaid with a live-edit session's edits, filtered by
``core.filters`` conditions): the most frequent values with their row counts, how many
distinct values there are, and for numbers and dates a histogram of equal-width bins.
Everything is counted by DuckDB in one scan (a second one for the histogram).

Each value is DuckDB's text for it, the form a filter condition takes, so a value read
from a facet becomes a condition (``value_condition``) that matches exactly its rows.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from core import reads, sessions
from core.auth import User
from core.catalog import Catalog
from core.datasets import get_dataset
from core.duck import quote_ident
from core.errors import InvalidInput
from core.filters import Condition
from core.storage import location
from core.values import type_family

DEFAULT_LIMIT = 20
MAX_LIMIT = 1000
DEFAULT_BINS = 20
_NUMBER_FAMILIES = frozenset({"integer", "decimal", "float"})
_DATE_FAMILIES = frozenset({"date", "timestamp", "timestamptz"})
_WHOLE_FAMILIES = frozenset({"integer", "date"})  # bins of whole units (one per value when few)


@dataclass(frozen=True)
class FacetValue:
    """One value of the column (DuckDB's text for it; None is NULL) and the rows holding it."""

    value: str | None
    rows: int


@dataclass(frozen=True)
class Bin:
    """Rows whose value is in ``[low, high)`` (the last bin holds ``high`` too).

    Numbers are floats; dates are ``datetime.date`` and timestamps ``datetime.datetime``.
    """

    low: Any
    high: Any
    rows: int


@dataclass(frozen=True)
class Facet:
    """A column's values among the rows a read sees.

    ``rows`` counts those rows, ``distinct`` their distinct values other than NULL, and
    ``values`` the most frequent (NULL included, as None) with their counts: most rows
    first, ties in value order. ``histogram`` is empty for columns that are neither
    numbers nor dates, and when no value is there to bin.
    """

    column: str
    type: str
    rows: int
    distinct: int
    values: tuple[FacetValue, ...]
    histogram: tuple[Bin, ...] = ()

    @property
    def family(self) -> str:
        return type_family(self.type)

    def to_json(self) -> dict[str, Any]:
        return {
            "column": self.column,
            "type": self.type,
            "rows": self.rows,
            "distinct": self.distinct,
            "values": [{"value": v.value, "rows": v.rows} for v in self.values],
            "histogram": [{"low": _json(b.low), "high": _json(b.high), "rows": b.rows} for b in self.histogram],
        }


def _json(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date) else value


def column_facet(
    path: Any,
    column: str,
    *,
    version: int | None = None,
    conditions: list[Condition] | None = None,
    overlay: reads.Overlay | None = None,
    limit: int = DEFAULT_LIMIT,
    bins: int = DEFAULT_BINS,
) -> Facet:
    """The facet of ``column`` among the rows of a Delta table that match ``conditions``.

    Args:
        path: The Delta table folder.
        column: The column to count the values of.
        version: The table's version (latest when None).
        conditions: ``core.filters`` conditions, ANDed.
        overlay: Rows laid over the table (a session's edits, ``sessions.session_overlay``).
        limit: How many of the most frequent values to return, 1..1000.
        bins: How many histogram bins at most (numbers and dates), 1..200.

    Raises:
        InvalidInput: An unknown column, a bad condition, or a limit out of range.
        NotFound: No table at ``path`` or no such version.
    """
    if not 1 <= int(limit) <= MAX_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}, got {limit}", field="limit")
    if not 1 <= int(bins) <= 200:
        raise InvalidInput(f"bins must be between 1 and 200, got {bins}", field="bins")
    with reads.selection(location(path), version=version, conditions=conditions, overlay=overlay) as rows:
        duck_type = _column_type(rows.columns, column)
        facet, low, high = _top_values(rows, column, duck_type, int(limit))
        family = type_family(duck_type)
        if low is None or high is None or family not in _NUMBER_FAMILIES | _DATE_FAMILIES:
            return facet
        histogram = _histogram(rows, column, family, _number(low, family), _number(high, family), int(bins))
    return Facet(facet.column, facet.type, facet.rows, facet.distinct, facet.values, histogram)


def dataset_facet(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    column: str,
    *,
    actor: User,
    conditions: list[Condition] | None = None,
    session_id: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Facet:
    """The facet of a dataset's column at its latest version, or as ``session_id``'s edits leave it.

    Raises:
        InvalidInput: As ``column_facet``; a session of another dataset.
        NotFound, PermissionDenied: No such dataset or session, or no access to it.
    """
    path, version, overlay = source_of(catalog, project_id, dataset_id, actor=actor, session_id=session_id)
    return column_facet(path, column, version=version, conditions=conditions, overlay=overlay, limit=limit)


def source_of(
    catalog: Catalog, project_id: str, dataset_id: str, *, actor: User, session_id: str | None = None
) -> tuple[Any, int | None, reads.Overlay | None]:
    """The table, version and overlay a read of a dataset (as a session sees it, with ``session_id``) uses.

    Raises:
        InvalidInput: ``session_id`` is a session of another dataset.
        NotFound, PermissionDenied: No such dataset or session, or no access to it.
    """
    if session_id is None:
        info = get_dataset(catalog, project_id, dataset_id, actor=actor)
        return info.path, info.version, None
    info, overlay = sessions.session_overlay(catalog, session_id, actor=actor)
    if (info.project_id, info.dataset_id) != (project_id, dataset_id):
        raise InvalidInput(
            f"session {session_id} edits {info.project_id}/{info.dataset_id}, not {project_id}/{dataset_id}",
            field="session_id",
        )
    return info.path, info.version, overlay


def value_condition(column: str, value: str | None) -> Condition:
    """The filter condition that keeps the rows holding ``value`` (None: the empty ones)."""
    if value is None:
        return Condition(column, "is_empty")
    return Condition(column, "eq", (value,))


def _column_type(columns: dict[str, str], column: str) -> str:
    if column not in columns:
        raise InvalidInput(f"unknown column {column!r}; columns are: {', '.join(columns)}", field="column")
    return columns[column]


def _top_values(rows: reads.Selection, column: str, duck_type: str, limit: int) -> tuple[Facet, Any, Any]:
    """The facet without its histogram, and the column's smallest and largest value."""
    col = quote_ident(column)
    # The windows run over the groups (one row per distinct value), before the LIMIT.
    query = (
        f"SELECT CAST(v AS VARCHAR), n, count(v) OVER (), sum(n) OVER (), min(v) OVER (), max(v) OVER () "
        f"FROM (SELECT {col} AS v, count(*) AS n FROM rows GROUP BY {col}) "
        "ORDER BY n DESC, v ASC NULLS LAST LIMIT ?"
    )
    found = rows.run(query, [limit]).fetchall()
    values = tuple(FacetValue(r[0], int(r[1])) for r in found)
    first = found[0] if found else (None, 0, 0, 0, None, None)
    facet = Facet(column, duck_type, int(first[3] or 0), int(first[2] or 0), values)
    return facet, first[4], first[5]


def _number(value: Any, family: str) -> float:
    """A value of a number or date column on the histogram's axis (days, or seconds)."""
    if family == "date":
        return float((value - dt.date(1970, 1, 1)).days)
    if family in ("timestamp", "timestamptz"):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.timestamp()
    return float(value)


def _axis_sql(column: str, family: str) -> str:
    """SQL for ``column`` on the histogram's axis, as ``_number`` computes it."""
    col = quote_ident(column)
    if family == "date":
        return f"CAST(date_diff('day', DATE '1970-01-01', {col}) AS DOUBLE)"
    if family in ("timestamp", "timestamptz"):
        return f"epoch({col})"
    return f"CAST({col} AS DOUBLE)"


def _histogram(rows: reads.Selection, column: str, family: str, low: float, high: float, bins: int) -> tuple[Bin, ...]:
    if not (math.isfinite(low) and math.isfinite(high)):
        return ()  # +-Infinity in a float column: no finite range to cut
    span = high - low
    if family in _WHOLE_FAMILIES:
        width = float(math.ceil((span + 1) / bins))
        count = math.ceil((span + 1) / width)
    else:
        count = bins if span > 0 else 1
        width = span / count if span > 0 else 1.0
    x = _axis_sql(column, family)
    query = (
        f"SELECT least(CAST(floor(({x} - ?) / ?) AS BIGINT), ?) AS bin, count(*) FROM rows "
        f"WHERE {x} IS NOT NULL AND isfinite({x}) GROUP BY bin"
    )
    counts = dict(rows.run(query, [low, width, count - 1]).fetchall())
    edges = [low + i * width for i in range(count + 1)]
    if family not in _WHOLE_FAMILIES:
        edges[-1] = high
    return tuple(
        Bin(_from_axis(edges[i], family), _from_axis(edges[i + 1], family), int(counts.get(i, 0))) for i in range(count)
    )


def _from_axis(value: float, family: str) -> Any:
    if family == "date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=int(value))
    if family == "timestamp":
        return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=value)
    if family == "timestamptz":
        return dt.datetime.fromtimestamp(value, dt.UTC)
    return value
