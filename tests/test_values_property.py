"""Property: a random string typed into a column of any type lands exactly as typed or is refused."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.errors import InvalidInput
from core.values import INTEGER_RANGES, canonical_text

TYPES = [
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "FLOAT",
    "DOUBLE",
    "DECIMAL(10,2)",
    "DECIMAL(38,10)",
    "BOOLEAN",
    "DATE",
    "TIMESTAMP",
    "TIMESTAMP WITH TIME ZONE",
    "VARCHAR",
]

_digits = st.text("0123456789", min_size=1, max_size=22)
NUMBERS = st.builds(
    lambda sign, whole, frac, exp: f"{sign}{whole}{frac}{exp}",
    st.sampled_from(["", "-", "+"]),
    _digits,
    st.sampled_from([""]) | _digits.map(lambda d: "." + d),
    st.sampled_from(["", "e999999999", "E-999999999"]) | st.integers(-420, 420).map(lambda e: f"e{e}"),
)
DATES = st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)).map(lambda d: f"{d.year:04d}-{d.month:02d}-{d.day:02d}")
TIMES = st.builds(
    lambda h, m, s, f, z: f"{h:02d}:{m:02d}:{s:02d}{f}{z}",
    st.integers(0, 25),
    st.integers(0, 61),
    st.integers(0, 61),
    st.sampled_from(["", ".5", ".123456", ".1234567"]),
    st.sampled_from(["", "Z", "+02:00", "-0130", " UTC"]),
)
TIMESTAMPS = st.builds(lambda d, sep, t: f"{d}{sep}{t}", DATES, st.sampled_from([" ", "T"]), TIMES)
TEXTS = (
    NUMBERS
    | DATES
    | TIMESTAMPS
    | st.sampled_from(["nan", "inf", "-Infinity", "true", "no", "1e400", "", " 7 ", "0x10", "1_000"])
    | st.text(max_size=12)
)


def _value(duck_type: str, text: str) -> Any:
    """What ``text`` means in ``duck_type``, computed without DuckDB: the oracle."""
    t = text.strip()
    if duck_type in INTEGER_RANGES:
        return int(Decimal(t))
    if duck_type.startswith("DECIMAL") or duck_type in ("FLOAT", "DOUBLE"):
        return Decimal(t)
    if duck_type == "BOOLEAN":
        return t.lower() in ("true", "t", "yes", "y", "1")
    if duck_type == "DATE":
        return dt.date.fromisoformat(t)
    if duck_type == "TIMESTAMP":
        return dt.datetime.fromisoformat(t)
    if duck_type == "TIMESTAMP WITH TIME ZONE":
        parsed = dt.datetime.fromisoformat(t.replace(" UTC", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    return text


def _stored(duck_type: str, canonical: str) -> Any:
    if duck_type == "TIMESTAMP WITH TIME ZONE":
        return dt.datetime.fromisoformat(canonical + ":00" if canonical[-3] in "+-" else canonical)
    return _value(duck_type, canonical)


@pytest.mark.parametrize("duck_type", TYPES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS)
@example(text="1.5")
@example(text="2.5")
@example(text="1.4e0")
@example(text="1e400")
@example(text="2024-01-01 10:00")
@example(text="2024-01-01T10:00:00+02:00")
@example(text="1.005")
@example(text="34000010")  # FLOAT: numpy's shortest text, but stored (and printed) as 34000008
def test_a_typed_string_round_trips_exactly_or_is_refused(duck_type: str, text: str) -> None:
    try:
        canonical = canonical_text(text, column="c", duck_type=duck_type)
    except InvalidInput as exc:
        assert "\n" not in str(exc) and repr(text) in str(exc)
        return
    assert canonical is not None
    assert _stored(duck_type, canonical) == _value(duck_type, text), (text, canonical)


# ---------------------------------------------------------------- end to end, through Spark

E2E_TYPES = {
    "i8": ("TINYINT", pa.int8()),
    "i64": ("BIGINT", pa.int64()),
    "f32": ("FLOAT", pa.float32()),
    "f64": ("DOUBLE", pa.float64()),
    "dec": ("DECIMAL(10,2)", pa.decimal128(10, 2)),
    "flag": ("BOOLEAN", pa.bool_()),
    "day": ("DATE", pa.date32()),
    "at": ("TIMESTAMP WITH TIME ZONE", pa.timestamp("us", tz="UTC")),
    "txt": ("VARCHAR", pa.string()),
}


@pytest.fixture(scope="module")
def typed_pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    from core.auth import Role, add_member, create_user
    from core.catalog import open_catalog, reset_catalogs
    from core.config import get_settings
    from core.datasets import create_dataset
    from core.projects import create_project
    from tests.merge_support import switch

    base = tmp_path_factory.mktemp("values_property")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    columns: dict[str, pa.Array] = {"id": pa.array([1], pa.int64())}
    columns |= {name: pa.nulls(1, arrow) for name, (_, arrow) in E2E_TYPES.items()}
    pq.write_table(pa.table(columns), base / "typed.parquet")
    with pytest.MonkeyPatch.context() as mp:
        switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER), ("ada", Role.ADMIN)):
            create_user(catalog, name, password=f"{name}-password-1")
            add_member(catalog, "demo", name, role)
        create_dataset(catalog, "demo", "typed", base / "typed.parquet", key="id")
        reset_catalogs()
    get_settings.cache_clear()
    return base


@pytest.mark.spark
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.fixed_dictionaries({name: TEXTS for name in E2E_TYPES}))
@example(texts=dict.fromkeys(E2E_TYPES, "1.5"))
def test_edit_submit_approve_read_export_round_trip(
    typed_pristine: Path, tmp_path_factory: pytest.TempPathFactory, texts: dict[str, str]
) -> None:
    import csv

    from core import change_requests, history, merge, reads, sessions
    from core.auth import get_user
    from core.catalog import open_catalog
    from core.datasets import layout_for
    from tests.merge_support import fresh_copy, switch

    with pytest.MonkeyPatch.context() as mp:
        switch(fresh_copy(typed_pristine, tmp_path_factory.mktemp("copy")), mp)
        catalog = open_catalog()
        ed = get_user(catalog, "ed")
        session = sessions.open_session(catalog, "demo", "typed", actor=ed)
        expected: dict[str, Any] = {}
        for name, text in texts.items():
            duck_type = E2E_TYPES[name][0]
            try:
                sessions.apply_edits(catalog, session.session_id, [sessions.SetCell("1", name, text)], actor=ed)
            except InvalidInput:
                with pytest.raises(InvalidInput):
                    canonical_text(text, column=name, duck_type=duck_type)
                continue
            expected[name] = _value(duck_type, text)
        if not expected:
            return
        cr = change_requests.submit_change_request(catalog, session.session_id, actor=ed)
        merge.approve_change_request(catalog, cr.id, actor=get_user(catalog, "al"))

        main = layout_for("demo", "typed").main
        select = ", ".join(f"CAST({reads.quote_ident(n)} AS VARCHAR)" for n in expected)
        row = reads.cursor().execute(f"SELECT {select} FROM delta_scan(?)", [str(main)]).fetchone()
        assert row is not None
        read = {n: _stored(E2E_TYPES[n][0], str(v)) for n, v in zip(expected, row, strict=True)}
        assert read == expected

        out = tmp_path_factory.mktemp("export") / "typed.csv"
        history.export_version(catalog, "demo", "typed", out, actor=ed, raw=True)
        with out.open(newline="") as fh:
            exported = next(csv.DictReader(fh))
        for name, value in expected.items():
            assert _stored(E2E_TYPES[name][0], exported[name]) == value, (name, exported[name])
