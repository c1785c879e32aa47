"""``oreo migrate postgres|parquet``: the parity report as one JSON document, exit codes 0/1/3."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import datasets, migrate
from core.catalog import Catalog
from tests.test_cli import OREO, assert_one_error_line, run
from tests.test_migrate import REPORT_KEYS, make_table, small_table

PROJECT = "mig"


@pytest.fixture(scope="module")
def dsn(postgres_url: str) -> str:
    return postgres_url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture
def project(capsys: pytest.CaptureFixture[str], catalog: Catalog) -> Catalog:
    assert run(capsys, "project", "create", PROJECT).code == 0
    return catalog


def test_postgres_dry_run_prints_one_report(capsys: pytest.CaptureFixture[str], project: Catalog, dsn: str) -> None:
    table = small_table(dsn)
    result = run(capsys, "--json", "migrate", "postgres", "--dsn", dsn, "--table", table, PROJECT, "d", "--dry-run")
    assert result.code == 0, result.err
    doc = result.json()
    assert set(doc) == REPORT_KEYS
    assert (doc["source_rows"], doc["delta_rows"], doc["match"], doc["version"]) == (20, 20, True, None)
    assert [set(c) for c in doc["columns"]] == [{"name", "source_checksum", "delta_checksum"}] * 2
    assert result.err == ""  # progress is not printed with --json
    assert not datasets.layout_for(PROJECT, "d").root.exists()

    human = run(capsys, "migrate", "postgres", "--dsn", dsn, "--table", table, PROJECT, "d", "--dry-run", "--key", "id")
    assert human.code == 0, human.err
    lines = human.out.splitlines()
    assert lines[0] == f"dry run: PostgreSQL table {table} would become {PROJECT}/d with 20 rows; nothing was created"
    assert lines[1].startswith("parity: match (20 rows on both sides; 2 column checksum(s) and the table hash agree)")
    assert "[100%] dry run done" in human.err


def test_a_mismatch_prints_the_report_and_exits_3(
    capsys: pytest.CaptureFixture[str], project: Catalog, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = small_table(dsn)
    original = migrate._copy_to_arrow

    def lossy(*args, **kwargs):  # type: ignore[no-untyped-def]
        t = original(*args, **kwargs)
        return t.set_column(1, "name", pa.array(["changed", *t.column("name").to_pylist()[1:]]))

    monkeypatch.setattr(migrate, "_copy_to_arrow", lossy)
    result = run(capsys, "--json", "migrate", "postgres", "--dsn", dsn, "--table", table, PROJECT, "d", "--dry-run")
    assert result.code == 3
    doc = result.json()
    assert doc["match"] is False
    assert [c["name"] for c in doc["columns"] if c["source_checksum"] != c["delta_checksum"]] == ["name"]

    human = run(capsys, "migrate", "postgres", "--dsn", dsn, "--table", table, PROJECT, "d", "--dry-run")
    assert human.code == 3
    assert "parity: MISMATCH - column checksums differ for name; the table hash differs" in human.out
    assert [line.split()[-1] for line in human.out.splitlines()[2:4]] == ["ok", "DIFFERS"]


@pytest.mark.spark
def test_a_completed_migration_with_a_mismatch_keeps_the_dataset_and_exits_3(  # type: ignore[no-untyped-def]
    spark, capsys: pytest.CaptureFixture[str], project: Catalog, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(dsn, "id int, name text", [(i, f"n{i}") for i in range(1, 41)])
    original = migrate._copy_to_arrow
    monkeypatch.setattr(migrate, "_copy_to_arrow", lambda *a, **k: original(*a, **k).slice(0, 39))
    result = run(capsys, "--json", "migrate", "postgres", "--dsn", dsn, "--table", table, PROJECT, "d", "--key", "id")
    assert result.code == 3, result.err
    doc = result.json()
    assert (doc["source_rows"], doc["delta_rows"], doc["match"], doc["version"]) == (40, 39, False, 0)
    shown = run(capsys, "--json", "dataset", "show", PROJECT, "d").json()
    assert (shown["rows"], shown["version"]) == (39, 0)
    assert [c["name"] for c in shown["columns"]] == ["row_id", "id", "name"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--table", "t", PROJECT, "Bad"], r"^error: invalid dataset id 'Bad'"),
        (["--table", "public.nope", PROJECT, "d"], r"^error: PostgreSQL table 'public.nope' not found"),
        (["--table", "t", PROJECT, "d", "--as", "ghost"], r"^error: unknown user 'ghost'"),
    ],
)
def test_postgres_refusals_exit_1_with_one_line(
    capsys: pytest.CaptureFixture[str], project: Catalog, dsn: str, args: list[str], message: str
) -> None:
    assert_one_error_line(run(capsys, "--json", "migrate", "postgres", "--dsn", dsn, *args), message)
    assert not (datasets.layout_for(PROJECT, "d").root.exists())


def test_unreachable_server_exits_1(capsys: pytest.CaptureFixture[str], project: Catalog) -> None:
    result = run(
        capsys, "migrate", "postgres", "--dsn", "postgresql://oreo@127.0.0.1:1/oreo", "--table", "t", PROJECT, "d"
    )
    assert_one_error_line(result, r"^error: cannot connect to PostgreSQL: .* \(check the host, port")


def test_parquet_dry_run_and_refusals_through_the_console_script(project: Catalog, tmp_path: Path) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    for i in range(3):
        pq.write_table(
            pa.table({"id": [i * 10 + j for j in range(10)], "v": [f"é{j}" for j in range(10)]}),
            folder / f"{i}.parquet",
        )
    env = {**os.environ}
    ok = subprocess.run(
        [OREO, "--json", "migrate", "parquet", str(folder), PROJECT, "d", "--key", "id", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert (doc["source_rows"], doc["match"], doc["version"]) == (30, True, None)

    empty = tmp_path / "empty"
    empty.mkdir()
    refused = subprocess.run(
        [OREO, "migrate", "parquet", str(empty), PROJECT, "d"], env=env, capture_output=True, text=True
    )
    assert refused.returncode == 1
    assert (refused.stdout, refused.stderr) == ("", f"error: no *.parquet files under {empty}\n")
    assert not datasets.layout_for(PROJECT, "d").root.exists()
