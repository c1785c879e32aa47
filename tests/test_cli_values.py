"""Values through the CLI: a value that does not fit its column is refused, and every --json document is strict."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli import context
from core import reads, sessions
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, dataset_settings, layout_for
from core.projects import create_project
from tests.merge_support import fresh_copy, switch
from tests.test_cli import assert_one_error_line, run

pytestmark = pytest.mark.spark


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: bare {name}")


def strict(text: str) -> Any:
    """Parse one JSON document, refusing NaN, Infinity and -Infinity as Python's json accepts them."""
    return json.loads(text, parse_constant=_refuse_constant)


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("cli_values")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "amount": pa.array([10, 20, 30], pa.int64()),
            "price": pa.array([1.5, 2.5, 3.5], pa.float64()),
            "cost": pa.array([Decimal("1.10"), Decimal("2.20"), None], pa.decimal128(10, 2)),
            "day": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2), None], pa.date32()),
            "small": pa.array([1, 2, 3], pa.int8()),
        }
    )
    pq.write_table(table, base / "typed.parquet")
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


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    context.state.json = False
    yield open_catalog()


def _pending(catalog: Catalog) -> int:
    session = sessions.open_session(catalog, "demo", "typed", actor=get_user(catalog, "ed"))
    return len(sessions.effective_edits(layout_for("demo", "typed"), session.session_id))


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("amount", "1.5", "not a whole number"),
        ("amount", "2.5", "not a whole number"),
        ("amount", "1.4e0", "not a whole number"),
        ("small", "128", "out of range for TINYINT"),
        ("price", "1e400", "out of range for DOUBLE"),
        ("price", "-1e400", "out of range for DOUBLE"),
        ("price", "nan", "NaN and Infinity are off"),
        ("cost", "1.005", "more than 2 decimal places"),
        ("day", "2024-01-01 10:00", "has a time part"),
    ],
)
def test_edit_set_refuses_a_value_that_does_not_fit(  # type: ignore[no-untyped-def]
    capsys, catalog: Catalog, column: str, value: str, why: str
) -> None:
    result = run(capsys, "--json", "edit", "demo", "typed", "--as", "ed", "--set", "1", column, value)
    assert_one_error_line(result, rf"row '1', column '{column}': {re.escape(repr(value))} .*{why}")
    assert _pending(catalog) == 0


def test_add_row_refuses_a_fraction_for_a_whole_number_column(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    result = run(capsys, "edit", "demo", "typed", "--as", "ed", "--add-row", '{"id": 9, "amount": 2.7}')
    assert_one_error_line(result, r"column 'amount': '2.7' is not a whole number")
    assert _pending(catalog) == 0


def test_a_fitting_edit_lands_exactly(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    assert run(capsys, "edit", "demo", "typed", "--as", "ed", "--set", "1", "amount", "2.0",
               "--set", "2", "cost", "7.5", "--add-row", '{"id": 9, "amount": 4e0}').code == 0  # fmt: skip
    cr_id = strict(run(capsys, "--json", "cr", "submit", "demo", "typed", "--as", "ed").out)["cr_id"]
    assert run(capsys, "cr", "approve", cr_id, "--as", "al").code == 0
    rows = {r["id"]: r for r in strict(run(capsys, "--json", "dataset", "rows", "demo", "typed").out)["rows"]}
    assert (rows[1]["amount"], rows[2]["cost"], rows[9]["amount"]) == (2, "7.50", 4)


def test_allow_non_finite_setting(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    assert_one_error_line(
        run(capsys, "dataset", "set", "demo", "typed", "--allow-non-finite", "true", "--as", "ed"), "admin"
    )
    usage = run(capsys, "dataset", "set", "demo", "typed", "--allow-non-finite", "maybe")
    assert usage.code == 2
    on = run(capsys, "--json", "dataset", "set", "demo", "typed", "--allow-non-finite", "true", "--as", "ada")
    assert on.code == 0, on.err
    assert strict(on.out) == {"project": "demo", "dataset": "typed", "allow_non_finite": True}
    assert dataset_settings("demo", "typed").allow_non_finite
    assert run(capsys, "edit", "demo", "typed", "--as", "ed", "--set", "1", "price", "inf").code == 0
    assert_one_error_line(
        run(capsys, "edit", "demo", "typed", "--as", "ed", "--set", "1", "price", "1e400"), "out of range for DOUBLE"
    )
    off = run(capsys, "--json", "dataset", "set", "demo", "typed", "--allow-non-finite", "false", "--as", "ada")
    assert strict(off.out)["allow_non_finite"] is False
    assert_one_error_line(
        run(capsys, "edit", "demo", "typed", "--as", "ed", "--set", "2", "price", "-inf"), "NaN and Infinity are off"
    )


def test_every_json_document_is_strict_over_non_finite_values(capsys, catalog: Catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "dataset", "set", "demo", "typed", "--allow-non-finite", "true", "--as", "ada")
    sets = ["--set", "1", "price", "inf", "--set", "2", "price", "-Infinity", "--set", "3", "price", "nan"]
    edited = run(capsys, "--json", "edit", "demo", "typed", "--as", "ed", *sets)
    assert edited.code == 0, edited.err
    session_id = strict(edited.out)["session_id"]
    documents = {
        "session show": run(capsys, "--json", "session", "show", session_id),
        "rows --session": run(
            capsys, "--json", "dataset", "rows", "demo", "typed", "--session", session_id, "--as", "ed"
        ),
    }
    submitted = run(capsys, "--json", "cr", "submit", "demo", "typed", "--as", "ed")
    cr_id = strict(submitted.out)["cr_id"]
    documents |= {
        "cr submit": submitted,
        "cr show": run(capsys, "--json", "cr", "show", cr_id),
        "cr list": run(capsys, "--json", "cr", "list", "demo", "typed"),
        "cr approve": run(capsys, "--json", "cr", "approve", cr_id, "--as", "al"),
    }
    documents |= {
        "dataset rows": run(capsys, "--json", "dataset", "rows", "demo", "typed"),
        "dataset rows v0": run(capsys, "--json", "dataset", "rows", "demo", "typed", "--version", "0"),
        "dataset show": run(capsys, "--json", "dataset", "show", "demo", "typed"),
        "history": run(capsys, "--json", "history", "demo", "typed"),
        "diff": run(capsys, "--json", "diff", "demo", "typed", "--from", "0", "--to", "1"),
        "export": run(capsys, "--json", "export", "demo", "typed", "--out", str(tmp_path / "out.csv")),
    }
    parsed = {}
    for name, result in documents.items():
        assert result.code == 0, (name, result.err)
        parsed[name] = strict(result.out)  # raises on a bare NaN or Infinity
    rows = {r["id"]: r["price"] for r in parsed["dataset rows"]["rows"]}
    assert rows[1] == "Infinity" and rows[2] == "-Infinity"
    assert rows[3] is None or rows[3] == "NaN"
    stored = reads.cursor().execute(
        "SELECT id, price FROM delta_scan(?) ORDER BY id", [str(layout_for("demo", "typed").main)]
    ).fetchall()
    assert stored[0][1] == math.inf and stored[1][1] == -math.inf and math.isnan(stored[2][1])


def test_strict_json_converts_non_finite_floats() -> None:
    import numpy as np

    doc = {"a": [math.inf, -math.inf, math.nan, np.float64("inf"), 1.5], "b": {"c": np.float32("nan")}}
    assert strict(context.dumps(doc)) == {"a": ["Infinity", "-Infinity", "NaN", "Infinity", 1.5], "b": {"c": "NaN"}}
