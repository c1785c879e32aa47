"""How a cell value reads on every screen: the grid, the preview, the pending list, the diff and history.

One rule, so a value never looks different from one screen to the next:

- an empty value (NULL, NaN, NaT) is ``∅``;
- dates are ISO (``2024-05-01``), timestamps ISO with a space (``2024-05-01 10:30:00``);
- whole numbers have no thousands separators; floating numbers show as the grid shows them
  (at most four decimals, trailing zeros dropped); decimals keep their scale;
- booleans are ``true`` / ``false``.

Values arrive either typed (pandas/DuckDB objects in a page) or as the text sessions and
diffs store (DuckDB's text form); ``duck_type`` says how to read the text.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

from core.values import type_family

EMPTY = "∅"
LONG_TEXT = 60  # longer values get a shortened form where a line must stay short


def is_empty(value: Any) -> bool:
    """NULL, NaN, NaT and pandas' NA all count as empty."""
    if value is None:
        return True
    try:
        import pandas as pd

        result = pd.isna(value)
    except (TypeError, ValueError):
        return False
    return result is True or (isinstance(result, bool) and result)


def float_text(number: float) -> str:
    """A float as the grid's number column draws it by default (numbro, four decimals, trimmed)."""
    if math.isnan(number):
        return EMPTY
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    # numbro's default: four decimals, more for tiny numbers so they do not read as 0.
    decimals = 4 if number == 0 or abs(number) >= 1e-4 else abs(int(f"{number:e}".split("e")[1]))
    text = f"{number:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _timestamp_text(value: dt.datetime) -> str:
    text = value.isoformat(sep=" ")
    return text.replace(".000000", "") if value.microsecond == 0 else text


def display_value(value: Any, duck_type: str | None = None) -> str:
    """``value`` as every screen shows it (``∅`` when empty).

    Args:
        value: A typed value, or the text a session or diff stores for a ``duck_type`` column.
        duck_type: The column's DuckDB type, when known; reads text values by type.
    """
    if is_empty(value):
        return EMPTY
    family = type_family(duck_type) if duck_type else None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return _timestamp_text(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "to_pydatetime"):  # pandas.Timestamp
        return _timestamp_text(value.to_pydatetime())
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if family == "integer" and value.is_integer():
            return str(int(value))
        return float_text(value)
    if hasattr(value, "item") and not isinstance(value, str):  # numpy scalars
        return display_value(value.item(), duck_type)
    text = str(value)
    if family == "float":
        try:
            return float_text(float(text))
        except ValueError:
            return text
    if family == "timestamp" and "T" in text:
        return text.replace("T", " ", 1)
    return text


def rows_span(first: int, last: int, total: int) -> str:
    """Which rows a page shows, as markdown: ``Rows **1–50** of **1,000**``, or ``No rows`` (not ``0–0 of 0``)."""
    return "No rows" if total == 0 else f"Rows **{first:,}–{last:,}** of **{total:,}**"


def shortened(text: str, limit: int = LONG_TEXT) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis; callers keep the full text in a tooltip."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
