"""The ``cluster`` tier: Oreo's core loop on a loopback Spark cluster through Spark Connect.

``scripts/cluster.sh up`` starts, once per test session, a Spark standalone master, two
workers, a Spark Connect server on that master and a PostgreSQL catalog. Every step runs
in its own ``oreo`` process (or a small driver script), with only ``SPARK_REMOTE``,
``OREO_DATABASE_URL`` and ``DELTA_DATA_ROOT`` telling it where things are: the same code as
embedded, another topology. ``scripts/cluster.sh down`` stops it all afterwards.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import cluster_support
from tests import merge_support as ms
from tests.cluster_support import _exports

cluster = cluster_support.cluster  # the session's loopback cluster (up when first asked for)

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "scripts" / "cluster.sh"
# The console script, as cron and the deployment run it.
OREO = str(Path(sys.executable).parent / "oreo")
PEOPLE = "id,name,age\n" + "".join(f"{i},name {i},{20 + i}\n" for i in range(1, 21))


# ---------------------------------------------------------------- the cluster and the workspace


@pytest.fixture(scope="module")
def env(cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The client environment: the cluster's Spark, a catalog database and a data root of this module."""
    root = tmp_path_factory.mktemp("cluster-data")
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "OREO_DATABASE_URL")}
    env.update(
        SPARK_REMOTE=cluster["SPARK_REMOTE"],
        OREO_DATABASE_URL=cluster_support.own_database(cluster["OREO_DATABASE_URL"], "test_cluster"),
        DELTA_DATA_ROOT=str(root / "delta"),
    )
    people = root / "people.csv"
    people.write_text(PEOPLE)
    for args in (
        ["project", "create", "p"],
        ["user", "add", "ed"],
        ["user", "add", "eve"],
        ["user", "add", "al"],
        ["user", "add", "ann"],
        ["member", "add", "p", "ed", "--role", "editor"],
        ["member", "add", "p", "eve", "--role", "editor"],
        ["member", "add", "p", "al", "--role", "approver"],
        ["member", "add", "p", "ann", "--role", "admin"],
        ["dataset", "create", "p", "people", "--file", str(people), "--key", "id"],
    ):
        oreo(env, *args)
    return env


def oreo(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """``oreo --json ARGS`` in its own process; with ``ok`` it must succeed."""
    done = subprocess.run([OREO, "--json", *args], env=env, cwd=REPO, capture_output=True, text=True)
    if ok:
        assert done.returncode == 0, f"oreo {' '.join(args)} failed: {done.stderr}"
    return done


def doc(env: dict[str, str], *args: str) -> Any:
    return json.loads(oreo(env, *args).stdout)


def python(env: dict[str, str], script: str, *args: str) -> Any:
    """Run ``script`` in one Python process (one Spark Connect session); the JSON it prints last."""
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def main_path(env: dict[str, str], dataset: str = "people") -> Path:
    return Path(env["DELTA_DATA_ROOT"]) / "projects" / "p" / "datasets" / dataset / "main"


def rows(env: dict[str, str], dataset: str = "people") -> dict[str, dict[str, Any]]:
    page = doc(env, "dataset", "rows", "p", dataset, "--limit", "1000")
    return {r["row_id"]: r for r in page["rows"]}


def commits_of(env: dict[str, str], cr_id: str, dataset: str = "people") -> list[int]:
    """The versions whose commit carries ``cr_id`` (read from the Delta log)."""
    log = main_path(env, dataset) / "_delta_log"
    found = []
    for file in sorted(log.glob("*.json")):
        for line in file.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and json.loads(info.get("userMetadata") or "{}").get("cr_id") == cr_id:
                found.append(int(file.name[:20]))
    return found


def edit_and_submit(env: dict[str, str], editor: str, *edits: str, dataset: str = "people") -> str:
    oreo(env, "edit", "p", dataset, "--as", editor, *edits)
    submitted = doc(env, "cr", "submit", "p", dataset, "--as", editor)
    assert submitted["state"] == "open" and submitted["validation"]["status"] == "passed", submitted
    return str(submitted["cr_id"])


# ---------------------------------------------------------------- the topology


def test_the_cluster_runs_and_clients_reach_it_through_spark_connect(
    cluster: dict[str, str], env: dict[str, str]
) -> None:
    status = subprocess.run(
        [str(CLUSTER), "status"], env={**os.environ, "OREO_CLUSTER_DIR": cluster["OREO_CLUSTER_DIR"]},
        capture_output=True, text=True,
    )  # fmt: skip
    assert status.returncode == 0, status.stdout
    assert [line.split(":")[0] for line in status.stdout.splitlines()] == [
        "master", "worker1", "worker2", "connect", "postgres",
    ]  # fmt: skip
    assert all(": running" in line for line in status.stdout.splitlines())
    again = subprocess.run(
        [str(CLUSTER), "up"], env={**os.environ, "OREO_CLUSTER_DIR": cluster["OREO_CLUSTER_DIR"]},
        capture_output=True, text=True,
    )  # fmt: skip
    assert again.returncode == 0 and "already up" in again.stderr  # nothing started twice
    assert _exports(again.stdout) == {k: cluster[k] for k in ("SPARK_REMOTE", "OREO_DATABASE_URL")}
    probe = """
import json
from core.engine import get_spark, is_connect
spark = get_spark()
print(json.dumps({"connect": is_connect(spark), "master": spark.conf.get("spark.master"),
                  "extensions": spark.conf.get("spark.sql.extensions")}))
"""
    seen = python(env, probe)
    assert seen["connect"] is True
    assert seen["master"].startswith("spark://127.0.0.1:")  # the standalone master, not local[*]
    assert seen["extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert env["OREO_DATABASE_URL"].startswith("postgresql+psycopg://")


def test_the_script_refuses_what_it_does_not_do_and_starts_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "OREO_CLUSTER_DIR": str(tmp_path / "state")}
    for args in (["start"], ["up", "--s4"], ["status", "--s3"]):
        bad = subprocess.run([str(CLUSTER), *args], env=env, capture_output=True, text=True)
        assert (bad.returncode, bad.stdout) == (2, ""), args
        assert "usage: scripts/cluster.sh up [--s3] | status | down" in bad.stderr
    assert not (tmp_path / "state").exists()


def test_up_refuses_to_switch_a_running_cluster_to_s3(cluster: dict[str, str]) -> None:
    env = {"OREO_PYTHON": sys.executable, **os.environ, "OREO_CLUSTER_DIR": cluster["OREO_CLUSTER_DIR"]}
    s3 = subprocess.run([str(CLUSTER), "up", "--s3"], env=env, capture_output=True, text=True)
    assert (s3.returncode, s3.stdout) == (1, "")
    assert s3.stderr.splitlines()[-1] == (
        f"error: a cluster without S3 runs from {cluster['OREO_CLUSTER_DIR']}; `scripts/cluster.sh down` it first"
    )
    assert subprocess.run([str(CLUSTER), "status"], env=env, capture_output=True).returncode == 0  # still up


# ---------------------------------------------------------------- the core loop


def test_edit_submit_validate_conflict_and_approve_exactly_once(env: dict[str, str]) -> None:
    first = edit_and_submit(env, "ed", "--set", "1", "name", "ed's 1", "--delete-row", "20")
    second = edit_and_submit(env, "eve", "--set", "1", "name", "eve's 1", "--set", "2", "age", "99")

    approved = doc(env, "cr", "approve", first, "--as", "al")
    assert approved["state"] == "merged"
    again = oreo(env, "cr", "approve", first, "--as", "al", ok=False)
    assert again.returncode == 1 and "is merged" in again.stderr
    assert commits_of(env, first) == [approved["version"]]  # exactly once

    # eve's request changed the same cell since its base version: a conflict, nothing merged.
    assert [c["column"] for c in doc(env, "cr", "show", second)["conflicts"]] == ["name"]
    refused = oreo(env, "cr", "approve", second, "--as", "al", ok=False)
    assert refused.returncode == 1 and "conflicts with newer commits" in refused.stderr
    assert commits_of(env, second) == []
    now = rows(env)
    assert now["1"]["name"] == "ed's 1" and "20" not in now and now["2"]["age"] == 22
    doc(env, "cr", "reject", second, "--as", "al", "--reason", "conflict")


TWO_IN_ONE_SESSION = """
import json, sys
from core import auth, engine, merge
from core.catalog import open_catalog

catalog = open_catalog()
approver = auth.get_user(catalog, "al")
main = sys.argv[3]
spark = engine.get_spark()
versions = []
for cr_id in sys.argv[1:3]:
    versions.append(merge.approve_change_request(catalog, cr_id, actor=approver).merged_version)
# Nothing of the approvals' txn id is left on the server-side session.
left = [spark.conf.get(k, None) for k in (engine.TXN_APP_ID_CONF, engine.TXN_VERSION_CONF)]
# A replay of the last MERGE's txn id is skipped as a duplicate: no new version.
latest = engine.latest_version(main)
replay = engine.new_commit("al", "replay")
with engine.dml_session(replay, txn=(merge.TXN_APP_ID, latest)) as session:
    session.sql(f"DELETE FROM {engine.delta_ref(main)} WHERE row_id = '5'").collect()
after_replay = engine.latest_version(main)
print(json.dumps({"connect": engine.is_connect(spark), "versions": versions, "left": left,
                  "latest": latest, "after_replay": after_replay}))
"""


def test_two_approvals_in_a_row_through_one_connect_session_both_land(env: dict[str, str]) -> None:
    first = edit_and_submit(env, "ed", "--set", "3", "name", "three")
    second = edit_and_submit(env, "eve", "--set", "4", "name", "four")

    seen = python(env, TWO_IN_ONE_SESSION, first, second, str(main_path(env)))

    assert seen["connect"] is True
    assert seen["left"] == [None, None]
    a, b = seen["versions"]
    assert b == a + 1 and commits_of(env, first) == [a] and commits_of(env, second) == [b]
    assert seen["after_replay"] == seen["latest"]  # skipped, not applied
    now = rows(env)
    assert (now["3"]["name"], now["4"]["name"]) == ("three", "four") and "5" in now


def test_concurrent_approvals_of_one_cell_one_wins_the_other_is_refused(env: dict[str, str]) -> None:
    crs = [
        edit_and_submit(env, "ed", "--set", "6", "name", "from ed"),
        edit_and_submit(env, "eve", "--set", "6", "name", "from eve"),
    ]
    approve = [OREO, "--json", "cr", "approve"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    procs = [subprocess.Popen([*approve, cr, "--as", "al"], env=env, cwd=REPO, **pipes) for cr in crs]
    outcomes = [p.communicate(timeout=900) for p in procs]
    codes = [p.returncode for p in procs]

    assert sorted(codes) == [0, 1], outcomes
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    assert "conflict" in outcomes[loser][1]
    assert len(commits_of(env, crs[winner])) == 1 and commits_of(env, crs[loser]) == []
    assert rows(env)["6"]["name"] == ("from ed", "from eve")[winner]
    doc(env, "cr", "reject", crs[loser], "--as", "al", "--reason", "lost the race")


KILLABLE = """
import json, sys, threading
from core import auth, merge
from core.catalog import open_catalog

cr_id, marker, hold = sys.argv[1:4]

def progress(fraction, message):
    with open(marker, "a") as out:
        out.write(json.dumps({"message": message}) + "\\n")
    if hold == "hold" and message.startswith("Merging into main"):
        threading.Event().wait()

catalog = open_catalog()
merge.approve_change_request(catalog, cr_id, actor=auth.get_user(catalog, "al"), progress=progress)
"""


@pytest.mark.parametrize("hold", ["hold", "mid-merge"])
def test_a_killed_approval_is_retried_and_lands_once(env: dict[str, str], tmp_path: Path, hold: str) -> None:
    """SIGKILL the approving client before its MERGE, or while the server runs it; the retry lands once.

    Over Spark Connect the MERGE runs on the server: a client killed mid-MERGE may still
    see its MERGE commit after it died. The retry finds that commit (or, racing it, the
    shared txn id makes one of the two a no-op), so the request lands exactly once.
    """
    value = f"killed {hold}"
    cr_id = edit_and_submit(env, "ed", "--set", "7", "name", value)
    marker = tmp_path / "progress.jsonl"
    with (tmp_path / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLABLE, cr_id, str(marker), hold],
            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )  # fmt: skip
    try:

        def merging() -> bool:
            assert proc.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
            return any(m["message"].startswith("Merging into main") for m in ms.read_json_lines(marker))

        ms.wait_for(merging, timeout=600, what="the approval to start its MERGE")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    retried = doc(env, "cr", "approve", cr_id, "--as", "al")

    assert retried["state"] == "merged"
    assert commits_of(env, cr_id) == [retried["version"]]
    assert rows(env)["7"]["name"] == value


# ---------------------------------------------------------------- restore, maintenance, import, migrate, export


def test_restore_brings_back_an_old_version(env: dict[str, str]) -> None:
    history = doc(env, "history", "p", "people")["versions"]
    target = min(v["version"] for v in history)  # the creation
    restored = doc(env, "restore", "p", "people", "--version", str(target), "--as", "ann", "--reason", "cluster test")
    assert restored["version"] > target
    now = rows(env)
    assert len(now) == 20 and now["1"]["name"] == "name 1" and now["7"]["name"] == "name 7"
    newest = doc(env, "history", "p", "people", "--limit", "1")["versions"][0]
    assert (newest["kind"], newest["restored_to"]) == ("restore", target)


def test_maintenance_optimize_zorder_vacuum_and_checkpoint(env: dict[str, str]) -> None:
    report = doc(env, "maintain", "p", "people", "--zorder", "row_id", "--vacuum", "--checkpoint", "--as", "ann")

    assert report["error"] is None
    assert report["steps"]["optimize"]["zorder"] == ["row_id"]
    assert report["steps"]["optimize"]["after"]["files"] <= report["steps"]["optimize"]["before"]["files"]
    assert "files_deleted" in report["steps"]["vacuum"]
    checkpoint = report["steps"]["checkpoint"]
    assert checkpoint["written"] is True
    log = main_path(env) / "_delta_log"
    assert (log / f"{checkpoint['version']:020d}.checkpoint.parquet").is_file()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == checkpoint["version"]
    newest = doc(env, "history", "p", "people", "--limit", "2")["versions"]
    assert [v["kind"] for v in newest] == ["maintenance", "maintenance"]  # the checkpoint's two commits
    plain = doc(env, "history", "p", "people", "--hide-maintenance", "--limit", "1")["versions"][0]
    assert plain["kind"] == "restore"
    assert len(rows(env)) == 20  # no row changed
    again = doc(env, "maintain", "p", "people", "--checkpoint", "--as", "ann")
    assert again["steps"]["checkpoint"]["written"] is False and again["versions_created"] == []


def test_an_import_with_a_new_column_evolves_the_schema(env: dict[str, str], tmp_path: Path) -> None:
    more = tmp_path / "more.csv"
    more.write_text("id,name,age,city\n101,new one,30,Oslo\n102,new two,31,Lima\n")
    appended = doc(env, "append", "p", "people", "--file", str(more), "--as", "ed")
    approved = doc(env, "cr", "approve", appended["cr_id"], "--as", "al")
    assert approved["state"] == "merged"
    now = rows(env)
    assert len(now) == 22
    added = [r for r in now.values() if r["id"] in (101, 102)]
    assert sorted(r["city"] for r in added) == ["Lima", "Oslo"]
    assert now["1"]["city"] is None  # the old rows get the new column empty


def test_migrate_from_postgresql_and_parquet(env: dict[str, str], tmp_path: Path) -> None:
    import psycopg

    dsn = env["OREO_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE legacy_cities (code integer PRIMARY KEY, city text, pop bigint)")
        conn.execute("INSERT INTO legacy_cities VALUES (1, 'Paris', 2100000), (2, 'Oslo', 700000), (3, 'Lima', NULL)")
    migrated = doc(env, "migrate", "postgres", "p", "cities", "--dsn", dsn, "--table", "legacy_cities", "--key", "code")
    assert (migrated["match"], migrated["source_rows"], migrated["delta_rows"]) == (True, 3, 3)
    cities = rows(env, "cities")
    assert sorted((r["code"], r["city"], r["pop"]) for r in cities.values()) == [
        (1, "Paris", 2100000), (2, "Oslo", 700000), (3, "Lima", None),
    ]  # fmt: skip

    folder = tmp_path / "lake"
    folder.mkdir()
    pq.write_table(pa.table({"sku": [1, 2], "price": [1.5, 2.5]}), folder / "a.parquet")
    pq.write_table(pa.table({"sku": [3], "price": [3.5]}), folder / "b.parquet")
    assert doc(env, "migrate", "parquet", str(folder), "p", "prices", "--key", "sku")["match"] is True
    assert sorted((r["sku"], r["price"]) for r in rows(env, "prices").values()) == [(1, 1.5), (2, 2.5), (3, 3.5)]


def test_export_writes_the_table_as_it_is(env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "people.csv"
    doc(env, "export", "p", "people", "--out", str(out))
    with out.open() as handle:
        exported = {r["id"]: r for r in csv.DictReader(handle)}
    current = rows(env)
    assert len(exported) == len(current)
    assert {r["name"] for r in exported.values()} == {r["name"] for r in current.values()}
    parquet = tmp_path / "people.parquet"
    doc(env, "export", "p", "people", "--out", str(parquet))
    assert pq.read_table(parquet).num_rows == len(current)
