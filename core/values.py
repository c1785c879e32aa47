"""Values people type, checked against a column's type: they fit exactly or are refused.

One rule for every path where text enters a typed column (grid edits, add-row, the CLI,
filters): a value lands exactly as typed or it is refused with a message naming the row,
the column and the value. Nothing is rounded, truncated, clamped or blanked:

- whole-number columns take only whole numbers in their range (``1.5`` is refused, not 2);
- decimals take at most the column's scale and precision;
- floating columns refuse overflow (``1e400``); NaN and ±Infinity only where allowed;
- dates refuse a time part; timestamps without a zone refuse a zone or offset;
- booleans take true/false (and t/f, yes/no, 1/0);
- dates and timestamps stay within the years 0001-9999 every reader supports, and a local
  time in a named zone's DST gap or repeated hour is refused (give an offset instead);
- text with a lone surrogate (no character, and no UTF-8 for it) is refused.

JSON that carries values (API bodies, ``--add-row``) is read with ``load_json``: numbers keep
their exact text (Python ints and Decimals, never floats), and the non-standard literals
``NaN`` and ``Infinity`` are refused.

``canonical_text`` returns the value as DuckDB prints it in the column's type, which is
how sessions store and compare cell values.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import zoneinfo
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from core import duck
from core.errors import InvalidInput

INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INTEGER": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "HUGEINT": (-(2**127), 2**127 - 1),
    "UTINYINT": (0, 2**8 - 1),
    "USMALLINT": (0, 2**16 - 1),
    "UINTEGER": (0, 2**32 - 1),
    "UBIGINT": (0, 2**64 - 1),
}
FLOAT_MAX = {"FLOAT": 3.4028234663852886e38, "REAL": 3.4028234663852886e38, "DOUBLE": 1.7976931348623157e308}
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")
_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}
_BOOLEANS = {"true": "true", "t": "true", "yes": "true", "y": "true", "1": "true",
             "false": "false", "f": "false", "no": "false", "n": "false", "0": "false"}  # fmt: skip
# ASCII digits only: Python's Decimal also takes "1_000" and other scripts' digits, DuckDB does not.
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
# A time of day after the date; hours, minutes and seconds in range (DuckDB would roll
# "24:00" over to the next day).
_NAIVE_TIME = re.compile(r"[ T](?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.(\d{1,9}))?)?", re.ASCII)
# A zone after the time: Z, +01, +01:00, +0100, or a named zone such as "Europe/Paris" or "UTC".
_ZONE = re.compile(r"(?:[zZ]|[+-]\d{2}(?::?\d{2})?|\s*[A-Za-z_]+(?:/[A-Za-z_]+)*)$")
_SURROGATE = re.compile("[\ud800-\udfff]")
# The years every reader (Python, pandas, Spark, Excel) can hold.
MIN_YEAR, MAX_YEAR = 1, 9999
# What DuckDB prints for a date or timestamp before year 1 ("0001-01-01 (BC)") or after 9999.
_OUT_OF_YEARS = re.compile(r"-|\d{5}|.*\(BC\)", re.ASCII)
# Fraction digits a timestamp type keeps; more would be cut off.
_TIMESTAMP_DIGITS = {"TIMESTAMP_S": 0, "TIMESTAMP_MS": 3, "TIMESTAMP_NS": 9}


def type_family(duck_type: str) -> str:
    """``integer``, ``decimal``, ``float``, ``boolean``, ``date``, ``timestamp``, ``timestamptz``,
    ``text``, ``nested`` or ``other``."""
    t = duck_type.upper().strip()
    if t in INTEGER_RANGES:
        return "integer"
    if t.startswith("DECIMAL"):
        return "decimal"
    if t in FLOAT_MAX:
        return "float"
    if t == "BOOLEAN":
        return "boolean"
    if t == "DATE":
        return "date"
    if t in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"):
        return "timestamptz"
    if t.startswith("TIMESTAMP"):
        return "timestamp"
    if t == "VARCHAR":
        return "text"
    if t.startswith(("STRUCT", "MAP")) or t.endswith("]"):
        return "nested"
    return "other"


def decimal_shape(duck_type: str) -> tuple[int, int] | None:
    """``(precision, scale)`` of a DECIMAL type, else None."""
    m = _DECIMAL.fullmatch(duck_type.upper().strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value)) if not math.isinf(value) else str(value)
    return str(value)


def _refuse(value: str, column: str, row_id: str | None, why: str) -> InvalidInput:
    where = f"row {row_id!r}, column {column!r}" if row_id is not None else f"column {column!r}"
    return InvalidInput(f"{where}: {value!r} {why}; nothing was saved", field=column)


def check_value(
    value: Any, *, column: str, duck_type: str, row_id: str | None = None, allow_non_finite: bool = False
) -> str | None:
    """Refuse ``value`` unless it fits ``duck_type`` exactly; return its stripped text (None stays None).

    Raises:
        InvalidInput: The value does not fit the column exactly; the message names the row,
            the column and the value.
    """
    if value is None:
        return None
    raw = _as_text(value)
    if _SURROGATE.search(raw):
        raise _refuse(raw, column, row_id, "holds a lone surrogate (\\ud800-\\udfff), which is no character")
    family = type_family(duck_type)
    if family in ("text", "nested", "other"):
        return raw
    text = raw.strip()
    if text == "":
        raise _refuse(raw, column, row_id, f"is not a {duck_type} value (empty a cell deliberately instead)")
    if family in ("integer", "decimal", "float") and not _NUMBER.fullmatch(text) and text.lower() not in _NON_FINITE:
        raise _refuse(raw, column, row_id, f"is not a number ({duck_type})")
    if family == "integer":
        number = _decimal(text)
        if number is None or not number.is_finite():
            raise _refuse(raw, column, row_id, f"is not a whole number ({duck_type})")
        low, high = INTEGER_RANGES[duck_type.upper().strip()]
        if number.adjusted() > 40:  # before int(): "1e999999999" would build a billion-digit int
            raise _refuse(raw, column, row_id, f"is out of range for {duck_type} ({low} to {high})")
        if number != number.to_integral_value():
            raise _refuse(raw, column, row_id, f"is not a whole number; {duck_type} would round it")
        if not low <= int(number) <= high:
            raise _refuse(raw, column, row_id, f"is out of range for {duck_type} ({low} to {high})")
        return str(int(number))
    if family == "decimal":
        number = _decimal(text)
        shape = decimal_shape(duck_type)
        if number is None or not number.is_finite():
            raise _refuse(raw, column, row_id, f"is not a number ({duck_type})")
        if shape is not None:
            precision, scale = shape
            if _fraction_digits(number) > scale:
                raise _refuse(raw, column, row_id, f"has more than {scale} decimal places ({duck_type})")
            if number.copy_abs() >= Decimal(10) ** (precision - scale):
                raise _refuse(raw, column, row_id, f"is too large for {duck_type}")
        return text
    if family == "float":
        if text.lower() in _NON_FINITE:
            if not allow_non_finite:
                raise _refuse(raw, column, row_id, "is not a finite number (NaN and Infinity are off for this dataset)")
            return text
        number = _decimal(text)
        if number is None:
            raise _refuse(raw, column, row_id, f"is not a number ({duck_type})")
        if number.copy_abs() > Decimal(FLOAT_MAX[duck_type.upper().strip()]):
            raise _refuse(raw, column, row_id, f"is out of range for {duck_type}")
        stored = _stored_float(number, duck_type)
        if Decimal(stored) != number:
            raise _refuse(raw, column, row_id, f"has more digits than {duck_type} holds; it would become {stored}")
        return text
    if family == "boolean":
        if text.lower() not in _BOOLEANS:
            raise _refuse(raw, column, row_id, "is not true or false")
        return _BOOLEANS[text.lower()]
    if family == "date":
        if not _DATE.fullmatch(text):
            why = "has a time part; a DATE holds only the day" if _DATE.match(text) else "is not a date (YYYY-MM-DD)"
            raise _refuse(raw, column, row_id, why)
        _check_year(text, raw, column, row_id)
        return text
    if family in ("timestamp", "timestamptz"):
        _check_timestamp(text, raw, column, row_id, duck_type.upper().strip(), zoned=family == "timestamptz")
    return text


def _check_timestamp(text: str, raw: str, column: str, row_id: str | None, duck_type: str, *, zoned: bool) -> None:
    """Refuse a malformed time of day, a fraction the type would cut, or a zone an NTZ column lacks."""
    shape = "YYYY-MM-DD HH:MM:SS[+HH:MM]" if zoned else "YYYY-MM-DD HH:MM:SS"
    if not _DATE.match(text):
        raise _refuse(raw, column, row_id, f"is not a timestamp ({shape})")
    rest = text[10:]
    time = _NAIVE_TIME.match(rest)
    zone = rest[time.end() :] if time else rest
    if zone and not zoned:
        why = "has a time zone, but the column's timestamps have none" if _ZONE.fullmatch(zone) else None
        raise _refuse(raw, column, row_id, why or f"is not a timestamp ({shape})")
    if zone and not _ZONE.fullmatch(zone):
        raise _refuse(raw, column, row_id, f"is not a timestamp ({shape})")
    _check_year(text, raw, column, row_id)
    if zone.strip() and zone.strip()[0].isalpha() and zone.strip().upper() not in ("Z", "UTC"):
        _check_local_time(text[:10] + rest[: time.end()] if time else text[:10], zone.strip(), raw, column, row_id)
    fraction = time.group(1) if time else None
    digits = _TIMESTAMP_DIGITS.get(duck_type, 6)
    if fraction and len(fraction.rstrip("0")) > digits:
        raise _refuse(raw, column, row_id, f"has more than {digits} fraction digits of a second ({duck_type})")


def _check_year(text: str, raw: str, column: str, row_id: str | None) -> None:
    if not MIN_YEAR <= int(text[:4]) <= MAX_YEAR:
        raise _refuse(raw, column, row_id, f"is before year {MIN_YEAR:04d}; dates run from 0001-01-01 to 9999-12-31")


def _check_local_time(local: str, zone: str, raw: str, column: str, row_id: str | None) -> None:
    """Refuse a local time its named zone skips (a DST gap) or shows twice (the hour clocks go back)."""
    try:
        tz = zoneinfo.ZoneInfo(zone)
        naive = dt.datetime.fromisoformat(local.replace(" ", "T"))
    except (ValueError, OSError, zoneinfo.ZoneInfoNotFoundError):
        return  # an unknown zone or a bad calendar day: DuckDB's cast refuses it
    earlier, later = naive.replace(tzinfo=tz, fold=0), naive.replace(tzinfo=tz, fold=1)
    if earlier.utcoffset() == later.utcoffset():
        return
    skipped = earlier.astimezone(dt.UTC).astimezone(tz).replace(tzinfo=None) != naive
    why = "never happens in" if skipped else "happens twice in"
    raise _refuse(raw, column, row_id, f"{why} {zone} (a daylight-saving change); give a UTC offset such as +01:00")


def _stored_float(number: Decimal, duck_type: str) -> str:
    """The shortest text of the float ``number`` becomes in ``duck_type`` (float32 for FLOAT/REAL)."""
    if duck_type.upper().strip() == "DOUBLE":
        return repr(float(number))
    import numpy as np

    return str(np.float32(float(number)))


def _fraction_digits(number: Decimal) -> int:
    """Digits after the point, trailing zeros aside (``normalize`` would round to 28 digits first)."""
    _, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite numbers only
    significant = "".join(map(str, digits)).rstrip("0")
    if not significant:
        return 0
    return max(0, -(exponent + len(digits) - len(significant)))


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text)
    except (InvalidOperation, ValueError):
        return None


def canonical_text(
    value: Any, *, column: str, duck_type: str, row_id: str | None = None, allow_non_finite: bool = False
) -> str | None:
    """``value`` as the text DuckDB prints for it in ``duck_type``, refused unless it fits exactly.

    Raises:
        InvalidInput: The value does not fit the column exactly.
    """
    text = check_value(value, column=column, duck_type=duck_type, row_id=row_id, allow_non_finite=allow_non_finite)
    if text is None:
        return None
    if type_family(duck_type) == "text":
        return text
    row = duck.cursor().execute(f"SELECT CAST(TRY_CAST(? AS {duck_type}) AS VARCHAR)", [text]).fetchone()
    return _shown(value, text, None if row is None else row[0], column, duck_type, row_id)


def canonical_texts(
    values: list[Any], *, column: str, duck_type: str, allow_non_finite: bool = False
) -> list[str | InvalidInput | None]:
    """``canonical_text`` of many values with one DuckDB cast; a refused value's slot holds its error.

    The same rules as ``canonical_text``, for a bulk change's new values (``core.bulk``).
    """
    out: list[str | InvalidInput | None] = []
    pending: list[tuple[int, Any, str]] = []
    for value in values:
        try:
            text = check_value(value, column=column, duck_type=duck_type, allow_non_finite=allow_non_finite)
        except InvalidInput as exc:
            out.append(exc)
            continue
        out.append(text)
        if text is not None and type_family(duck_type) != "text":
            pending.append((len(out) - 1, value, text))
    if pending:
        sql = (
            f"SELECT CAST(TRY_CAST(t AS {duck_type}) AS VARCHAR) "
            "FROM unnest(?::VARCHAR[]) WITH ORDINALITY AS u(t, i) ORDER BY i"
        )
        shown = [r[0] for r in duck.cursor().execute(sql, [[p[2] for p in pending]]).fetchall()]
        for (slot, value, text), printed in zip(pending, shown, strict=True):
            try:
                out[slot] = _shown(value, text, printed, column, duck_type, None)
            except InvalidInput as exc:
                out[slot] = exc
    return out


def _shown(value: Any, text: str, printed: Any, column: str, duck_type: str, row_id: str | None) -> str:
    """DuckDB's text ``printed`` for the checked ``text``, refused unless it is the value typed."""
    if printed is None:
        raise _refuse(_as_text(value), column, row_id, f"is not a valid {duck_type} value")
    shown = str(printed)
    if type_family(duck_type) in ("date", "timestamp", "timestamptz") and _OUT_OF_YEARS.match(shown):
        why = f"is {shown} in UTC, outside the years {MIN_YEAR:04d}-{MAX_YEAR}"
        raise _refuse(_as_text(value), column, row_id, why)
    # A float whose shortest text is the typed one may still print as another number
    # (FLOAT 34000010 is stored as 34000008, and DuckDB prints that): what is shown is what lands.
    if type_family(duck_type) == "float" and text.lower() not in _NON_FINITE and _decimal(shown) != _decimal(text):
        why = f"has more digits than {duck_type} holds; it would become {shown}"
        raise _refuse(_as_text(value), column, row_id, why)
    return shown


@dataclass(frozen=True)
class _Literal:
    """A non-standard JSON literal (``NaN``, ``Infinity``, ``-Infinity``), held until its place is known."""

    name: str


def load_json(text: str | bytes, *, field: str) -> Any:
    """JSON text as Python values with every number exact: ints stay ints, fractions become Decimals.

    Args:
        text: The JSON document.
        field: What the document is (``--add-row``, ``body``); a message names the place
            inside it too (``body.set[0].value``).

    Raises:
        json.JSONDecodeError: ``text`` is not JSON at all.
        InvalidInput: The non-standard literals ``NaN``, ``Infinity`` or ``-Infinity``, an
            integer too long to read, or a string with a lone surrogate.
    """
    try:
        document = json.loads(text, parse_float=Decimal, parse_constant=_Literal)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # an integer past Python's digit limit for text
        raise InvalidInput(f"{field}: {str(exc).splitlines()[0]}", field=field) from exc
    _refuse_non_standard(document, field)
    return document


def _refuse_non_standard(value: Any, where: str) -> None:
    if isinstance(value, _Literal):
        raise InvalidInput(
            f"{where}: {value.name} is not a JSON number; send a number, or the text {json.dumps(value.name)}",
            field=where,
        )
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise InvalidInput(f"{where} holds a lone surrogate (\\ud800-\\udfff), which is no character", field=where)
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_non_standard(key, where)
            _refuse_non_standard(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _refuse_non_standard(item, f"{where}[{i}]")
