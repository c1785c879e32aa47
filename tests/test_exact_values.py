"""Numbers, dates and text stay exact in and out through the CLI's --json and the API (issue 25 §4).

The API runs in-process without its lifespan (no second Spark): rows are read by DuckDB and edits
are saved to a live-edit session, neither of which needs the engine.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from cli import context
from core import tokens
from core.auth import Role, add_member, create_user
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset
from core.projects import create_project
from tests.merge_support import fresh_copy, switch
from tests.test_cli import assert_one_error_line, run

pytestmark = pytest.mark.spark

BIG = 2**63 - 1
ROWS = "/api/v1/projects/demo/datasets/exact/rows"
EDITS = "/api/v1/projects/demo/datasets/exact/edits"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: bare {name}")


def strict(text: str | bytes) -> Any:
    """One strict JSON document, with fractions as Decimals so a test sees exactly what was printed."""
    return json.loads(text, parse_float=Decimal, parse_constant=_refuse_constant)


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("exact_values")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "big": pa.array([BIG, None], pa.int64()),
            "small": pa.array([127, None], pa.int8()),
            "f": pa.array([0.1, None], pa.float32()),
            "money": pa.array([Decimal("1.5"), None], pa.decimal128(38, 10)),
            "day": pa.array([dt.date(2024, 1, 1), None], pa.date32()),
            "at": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC), None], pa.timestamp("us", tz="UTC")),
            "name": pa.array(["one", None], pa.string()),
        }
    )
    pq.write_table(table, base / "exact.parquet")
    with pytest.MonkeyPatch.context() as mp:
        switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        create_user(catalog, "ed", password="ed-password-1")
        add_member(catalog, "demo", "ed", Role.EDITOR)
        create_dataset(catalog, "demo", "exact", base / "exact.parquet", key="id")
        reset_catalogs()
    get_settings.cache_clear()
    return base


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    context.state.json = False
    yield open_catalog()


@pytest.fixture
def api(catalog: Catalog) -> httpx.Client:
    token = tokens.create_token(catalog, "ed").secret
    return TestClient(create_app(), headers={"Authorization": f"Bearer {token}"})  # not entered: no Spark


def _first_row(text: str | bytes) -> dict[str, Any]:
    return {r["id"]: r for r in strict(text)["rows"]}[1]


# ---------------------------------------------------------------- out: whole numbers with NULLs, FLOAT


def _assert_exact_row(text: str | bytes) -> None:
    row = _first_row(text)
    assert row["big"] == BIG and isinstance(row["big"], int), row
    assert row["small"] == 127 and isinstance(row["small"], int), row
    assert row["f"] == Decimal("0.1"), row  # the float32's shortest text, not 0.10000000149011612
    assert row["money"] == "1.5000000000", row  # decimals as text: JSON numbers would round them


def test_cli_json_rows_keep_whole_numbers_with_nulls_and_float_text(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    result = run(capsys, "--json", "dataset", "rows", "demo", "exact")
    assert result.code == 0, result.err
    _assert_exact_row(result.out)


def test_api_rows_keep_whole_numbers_with_nulls_and_float_text(api: httpx.Client) -> None:
    answer = api.get(ROWS)
    assert answer.status_code == 200, answer.text
    _assert_exact_row(answer.content)
    assert b'"big":9223372036854775807' in answer.content and b'"small":127,' in answer.content


# ---------------------------------------------------------------- in: JSON numbers keep every digit


def test_cli_add_row_keeps_every_digit(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    added = '{"id": 9, "big": 9007199254740993.0, "money": 12345678901234567890.123}'
    edited = run(capsys, "--json", "edit", "demo", "exact", "--as", "ed", "--add-row", added)
    assert edited.code == 0, edited.err
    session_id = strict(edited.out)["session_id"]
    page = run(capsys, "--json", "dataset", "rows", "demo", "exact", "--session", session_id, "--as", "ed")
    row = {r["id"]: r for r in strict(page.out)["rows"]}[9]
    assert row["big"] == 9007199254740993
    assert row["money"] == "12345678901234567890.1230000000"


def test_api_edits_keep_every_digit(api: httpx.Client) -> None:
    body = (
        b'{"set": [{"row_id": "1", "column": "big", "value": 9007199254740993.0}],'
        b' "add_rows": [{"id": 9, "money": 12345678901234567890.123}]}'
    )
    saved = api.post(EDITS, content=body, headers={"Content-Type": "application/json"})
    assert saved.status_code == 200, saved.text
    page = api.get(ROWS, params={"session_id": saved.json()["session_id"]})
    assert page.status_code == 200, page.text
    rows = {r["id"]: r for r in strict(page.content)["rows"]}
    assert rows[1]["big"] == 9007199254740993
    assert rows[9]["money"] == "12345678901234567890.1230000000"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("NaN", r"^body\.set\[0\]\.value: NaN is not a JSON number"),
        ("-Infinity", r"^body\.set\[0\]\.value: -Infinity is not a JSON number"),
        ('"\\ud800"', r"^body\.set\[0\]\.value holds a lone surrogate"),
    ],
)
def test_api_refuses_non_standard_literals_and_surrogates_naming_the_field(
    api: httpx.Client, value: str, message: str
) -> None:
    body = f'{{"set": [{{"row_id": "1", "column": "name", "value": {value}}}]}}'
    refused = api.post(EDITS, content=body.encode(), headers={"Content-Type": "application/json"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["field"] == "body.set[0].value"
    assert re.search(message, refused.json()["error"]["message"]), refused.text


def test_api_refuses_1e400_as_out_of_range(api: httpx.Client) -> None:
    body = b'{"set": [{"row_id": "1", "column": "f", "value": 1e400}]}'
    refused = api.post(EDITS, content=body, headers={"Content-Type": "application/json"})
    assert refused.status_code == 400, refused.text
    assert "'1E+400' is out of range for FLOAT" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('{"id": 9, "name": NaN}', r"--add-row\.name: NaN is not a JSON number"),
        ('{"id": 9, "name": "a\\ud800"}', r"--add-row\.name holds a lone surrogate"),
    ],
)
def test_cli_add_row_refuses_non_standard_literals_and_surrogates(  # type: ignore[no-untyped-def]
    capsys, catalog: Catalog, row: str, message: str
) -> None:
    assert_one_error_line(run(capsys, "edit", "demo", "exact", "--as", "ed", "--add-row", row), message)


# ---------------------------------------------------------------- in: years and local times


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("day", "0000-01-01", "'0000-01-01' is before year 0001"),
        ("at", "0000-01-01 10:00:00+00:00", "is before year 0001"),
        ("at", "2026-03-29 02:30:00 Europe/Paris", "never happens in Europe/Paris"),
        ("name", "a\udcff", "lone surrogate"),
    ],
)
def test_cli_and_api_refuse_year_zero_shifted_local_times_and_surrogates(  # type: ignore[no-untyped-def]
    capsys, api: httpx.Client, column: str, value: str, message: str
) -> None:
    assert_one_error_line(run(capsys, "edit", "demo", "exact", "--as", "ed", "--set", "1", column, value), message)
    body = json.dumps({"set": [{"row_id": "1", "column": column, "value": value}]})  # a surrogate as \\udcff
    refused = api.post(EDITS, content=body.encode(), headers={"Content-Type": "application/json"})
    assert refused.status_code == 400, refused.text
    assert message in refused.json()["error"]["message"], refused.text
    # The API reads a surrogate in the body itself, so it names the place in the body.
    assert refused.json()["error"]["field"] == ("body.set[0].value" if column == "name" else column)
