"""The shared JSON documents: rows as records, and the API's compact encoding of them."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import numpy as np
import pandas as pd

from interface import documents


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "n": [1, 2, 3],
            "x": [1.5, np.nan, np.inf],
            "s": [None, "a", "b"],
            "t": pd.to_datetime(["2024-01-01 10:00:00", None, "2024-03-01 00:00:00"]),
            "d": [Decimal("1.10"), None, Decimal("-2")],
            "k": pd.array([7, None, 9], dtype="Int64"),
            "day": [date(2020, 1, 2), None, date(2021, 5, 6)],
            "ok": [True, False, True],
        }
    )


def test_records_turn_missing_values_into_null_and_keep_the_rest() -> None:
    rows = documents.records(_frame())
    assert rows[0] == {
        "n": 1,
        "x": 1.5,
        "s": None,
        "t": pd.Timestamp("2024-01-01 10:00:00"),
        "d": Decimal("1.10"),
        "k": 7,
        "day": date(2020, 1, 2),
        "ok": True,
    }
    assert rows[1] == {"n": 2, "x": None, "s": "a", "t": None, "d": None, "k": None, "day": None, "ok": False}
    assert rows[2]["x"] == float("inf") and rows[2]["k"] == 9
    assert all(type(row["n"]) is int and type(row["ok"]) is bool for row in rows)  # plain Python values


def test_records_of_a_frame_without_columns_or_rows() -> None:
    assert documents.records(pd.DataFrame(index=range(2))) == [{}, {}]
    assert documents.records(_frame().iloc[0:0]) == []


def test_encode_is_dumps_in_compact_bytes() -> None:
    doc = {"rows": documents.records(_frame()), "total": np.int64(3), "at": datetime(2024, 1, 1, tzinfo=UTC)}
    encoded = documents.encode(doc)
    assert isinstance(encoded, bytes) and b", " not in encoded
    assert json.loads(encoded) == json.loads(documents.dumps(doc))
    parsed = json.loads(encoded)
    assert parsed["rows"][2]["x"] == "Infinity" and parsed["rows"][1]["x"] is None
    assert parsed["rows"][0]["t"] == "2024-01-01T10:00:00" and parsed["rows"][0]["d"] == "1.10"
    assert parsed["at"] == "2024-01-01T00:00:00+00:00" and parsed["total"] == 3


def test_encode_falls_back_for_integers_wider_than_64_bits() -> None:
    assert json.loads(documents.encode({"big": 2**70})) == {"big": 2**70}
