"""The Spark session factory, commit metadata and Spark Connect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import engine, reads
from tests import cluster_support

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parent.parent


def test_session_is_shared_and_configured(spark) -> None:  # type: ignore[no-untyped-def]
    assert engine.get_spark() is spark
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.sql.extensions") == engine.DELTA_EXTENSION
    assert conf.get("spark.sql.catalog.spark_catalog") == engine.DELTA_CATALOG
    assert conf.get("spark.ui.enabled") == "false"
    # The Delta jars come from the folder `make jars` filled, never from Ivy at start.
    jars = engine.offline_jars()
    assert jars is not None, f"run `make jars`: no complete jar folder at {engine.jars_dir()}"
    assert [Path(j.removeprefix("file:")).name for j in conf.get("spark.jars").split(",")] == [j.name for j in jars]
    assert conf.get("spark.jars.packages", None) is None
    assert int(spark.conf.get("spark.sql.shuffle.partitions")) <= 4


def test_commit_metadata_lands_in_history(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t"
    commit = engine.new_commit("alice", "test_write", cr_id="cr_1")
    with engine.commit_metadata(commit):
        spark.range(5).write.format("delta").save(str(path))
    spark.range(5, 7).write.format("delta").mode("append").save(str(path))  # outside: no metadata

    records = engine.history(path)
    assert [r.version for r in records] == [1, 0]
    assert records[1].user_metadata == {
        "actor": "alice",
        "action": "test_write",
        "commit_id": commit.commit_id,
        "cr_id": "cr_1",
    }
    assert records[0].user_metadata == {}
    assert engine.version_of_commit(path, commit.commit_id) == 0
    with pytest.raises(engine.EngineError, match="not found in the history"):
        engine.version_of_commit(path, "no-such-commit")
    # The conf is cleared afterwards, so later commits carry no stale metadata.
    assert spark.conf.get(engine.USER_METADATA_CONF, None) in (None, "")


def test_dml_sessions_are_kept_and_carry_nothing_into_the_next_write(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t"
    spark.range(3).write.format("delta").save(str(path))
    first = engine.new_commit("alice", "first")
    with engine.dml_session(first, txn=("oreo-test", 1), confs={"spark.sql.shuffle.partitions": "1"}) as child:
        assert child is not spark and child.conf.get("spark.sql.shuffle.partitions") == "1"
        child.sql(f"UPDATE {engine.delta_ref(path)} SET id = id + 10 WHERE id = 0").collect()
    second = engine.new_commit("bob", "second")
    with engine.dml_session(second) as again:
        assert again is child  # the idle child is used again, not a new session
        # Nothing of the first block is left: no txn id (the write would be skipped), no conf.
        assert again.conf.get(engine.TXN_APP_ID_CONF, None) in (None, "")
        assert again.conf.get("spark.sql.shuffle.partitions") == spark.conf.get("spark.sql.shuffle.partitions")
        again.sql(f"UPDATE {engine.delta_ref(path)} SET id = id + 10 WHERE id = 1").collect()
    records = engine.history(path)
    assert [(r.version, r.user_metadata.get("actor")) for r in records[:2]] == [(2, "bob"), (1, "alice")]
    assert sorted(r.id for r in spark.read.format("delta").load(str(path)).collect()) == [2, 10, 11]

def test_a_stale_txn_id_on_a_session_is_unset_not_restored(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Over Spark Connect confs stay on the server-side session; a txn id left there (a write
    that failed before its unset) must not be put back after the next commit's block."""
    path = tmp_path / "t"
    spark.range(3).write.format("delta").save(str(path))
    session = spark.newSession()
    session.conf.set(engine.TXN_APP_ID_CONF, "stale")
    session.conf.set(engine.TXN_VERSION_CONF, "7")
    session.conf.set("spark.sql.shuffle.partitions", "3")
    confs = {engine.TXN_APP_ID_CONF: "oreo-test", engine.TXN_VERSION_CONF: "1", "spark.sql.shuffle.partitions": "1"}
    with engine._confs_set(session, confs):
        session.sql(f"UPDATE {engine.delta_ref(path)} SET id = id + 10 WHERE id = 0").collect()
    assert session.conf.get(engine.TXN_APP_ID_CONF, None) is None
    assert session.conf.get(engine.TXN_VERSION_CONF, None) is None
    assert session.conf.get("spark.sql.shuffle.partitions") == "3"  # an ordinary conf is put back
    session.sql(f"UPDATE {engine.delta_ref(path)} SET id = id + 10 WHERE id = 1").collect()  # not skipped
    assert sorted(r.id for r in spark.read.format("delta").load(str(path)).collect()) == [2, 10, 11]


def test_delta_ref_escapes_backticks() -> None:
    assert engine.delta_ref("/a/b`c") == "delta.`/a/b``c`"


cluster = cluster_support.cluster  # the session's loopback cluster (a master, 2 workers, Spark Connect)


@pytest.mark.cluster
def test_spark_remote_uses_spark_connect_with_the_same_code(cluster: dict[str, str], tmp_path: Path) -> None:
    """With SPARK_REMOTE set, the unchanged CLI creates a dataset through Spark Connect (with a SQLite catalog)."""
    csv = tmp_path / "people.csv"
    csv.write_text("id,name\n1,ada\n2,grace\n3,linus\n")
    env = {
        **os.environ,
        "SPARK_REMOTE": cluster["SPARK_REMOTE"],
        "DELTA_DATA_ROOT": str(tmp_path / "delta"),
        "OREO_DATABASE_URL": f"sqlite:///{tmp_path / 'cat.db'}",
    }
    probe = "from core.engine import get_spark; print(type(get_spark()).__module__)"
    kind = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert kind.stdout.strip().startswith("pyspark.sql.connect")

    oreo = [sys.executable, "-m", "cli.main", "--json"]
    subprocess.run([*oreo, "project", "create", "p1"], env=env, check=True, capture_output=True, cwd=REPO)
    created = subprocess.run(
        [*oreo, "dataset", "create", "p1", "people", "--file", str(csv), "--key", "id"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert created.returncode == 0, created.stderr
    doc = json.loads(created.stdout)
    assert doc["rows"] == 3 and doc["version"] == 0
    main = Path(doc["path"])
    assert sorted(reads.read_page(main, limit=10).rows["name"]) == ["ada", "grace", "linus"]
    meta = json.loads((main / "_delta_log" / "00000000000000000000.json").read_text().splitlines()[0])
    assert json.loads(meta["commitInfo"]["userMetadata"])["commit_id"] == doc["last_commit_id"]


# ---------------------------------------------------------------- the Delta jars, resolved once


def _jar_folder(folder: Path, packages: str | None = None) -> list[Path]:
    folder.mkdir()
    jars = [folder / "io.delta_delta-spark.jar", folder / "io.delta_delta-storage.jar"]
    for i, jar in enumerate(jars):
        jar.write_bytes(b"PK" * (i + 3))
    manifest = {
        "packages": packages or engine.delta_packages(),
        "jars": [{"name": j.name, "size": j.stat().st_size} for j in jars],
    }
    (folder / engine.JARS_MANIFEST).write_text(json.dumps(manifest))
    return jars


def test_a_complete_jar_folder_is_used_as_spark_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    jars = _jar_folder(tmp_path / "jars")
    monkeypatch.setenv("OREO_JARS_DIR", str(tmp_path / "jars"))

    options = engine.with_delta_jars(SparkSession.Builder())._options

    assert options["spark.jars"] == ",".join(map(str, jars))
    assert "spark.jars.packages" not in options


@pytest.mark.parametrize(
    "damage",
    [
        lambda folder: (folder / "io.delta_delta-storage.jar").unlink(),
        lambda folder: (folder / "io.delta_delta-spark.jar").write_bytes(b"PK"),  # cut short
        lambda folder: (folder / engine.JARS_MANIFEST).unlink(),
        lambda folder: (folder / engine.JARS_MANIFEST).write_text("{not json"),
    ],
    ids=["a jar missing", "a jar of another size", "no manifest", "a broken manifest"],
)
def test_an_incomplete_jar_folder_falls_back_to_ivy_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, damage
) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    _jar_folder(tmp_path / "jars")
    damage(tmp_path / "jars")
    monkeypatch.setenv("OREO_JARS_DIR", str(tmp_path / "jars"))

    with caplog.at_level("WARNING", logger="core.engine"):
        options = engine.with_delta_jars(SparkSession.Builder())._options

    assert options["spark.jars.packages"] == engine.delta_packages()
    assert "spark.jars" not in options
    assert "run `make jars` to start offline" in caplog.text


def test_jars_of_another_delta_version_are_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _jar_folder(tmp_path / "jars", packages="io.delta:delta-spark_4.0_2.13:4.0.0")
    monkeypatch.setenv("OREO_JARS_DIR", str(tmp_path / "jars"))

    assert engine.offline_jars() is None


def test_two_setups_at_once_resolve_the_jars_once_and_both_succeed(tmp_path: Path) -> None:
    """`make run` and `make test` side by side: the lock makes the second wait, then find the folder ready."""
    env = {**os.environ, "OREO_JARS_DIR": str(tmp_path / "oreo-jars"), "DELTA_DATA_ROOT": str(tmp_path / "delta")}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    script = [sys.executable, str(REPO / "scripts" / "fetch_jars.py")]
    first = subprocess.Popen(script, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(script, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = [p.communicate(timeout=900) for p in (first, second)]

    assert [p.returncode for p in (first, second)] == [0, 0], outputs
    said = sorted("found" if "already in place" in o else "resolved" if "jars ready in" in o else o for o, _ in outputs)
    assert said == ["found", "resolved"], outputs  # resolved by one, found complete by the other
    jars = engine.offline_jars(tmp_path / "oreo-jars")
    assert jars is not None and any(j.name.startswith("io.delta_delta-spark") for j in jars)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("oreo-jars.")] == []  # no staging left
