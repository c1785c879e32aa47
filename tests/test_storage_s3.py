"""core.storage on local paths and on an S3-compatible server (moto_server over HTTP on loopback)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from core import reads, sessions, storage
from core.config import get_settings
from core.errors import EngineError, InvalidInput
from core.layout import dataset_layout
from core.storage import ObjectPath
from tests import s3_loop

MOTO_SERVER = Path(sys.executable).parent / "moto_server"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


MOTO_LOGS: dict[str, Path] = {}  # each moto server's request log, by endpoint


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).read()
    except urllib.error.HTTPError:
        return True  # an S3 error document is an answer
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real moto S3 server on a free loopback port, for this module's tests."""
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    MOTO_LOGS[url] = log
    deadline = time.monotonic() + 60
    while not _answers(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"moto_server did not start: {log.read_text()}")
        time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def s3_root(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ObjectPath]:
    """DELTA_DATA_ROOT on a fresh bucket of the moto server, with the AWS variables set."""
    bucket = f"oreo-{uuid.uuid4().hex[:12]}"
    urllib.request.urlopen(urllib.request.Request(f"{s3_endpoint}/{bucket}", method="PUT")).read()
    for name, value in {**CREDENTIALS, "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DELTA_DATA_ROOT", f"s3://{bucket}/data")
    get_settings.cache_clear()
    reads.close()  # the next cursor opens a database with httpfs and the store's secret
    root = get_settings().data_root
    assert isinstance(root, ObjectPath)
    yield root
    reads.close()
    get_settings.cache_clear()


# ---------------------------------------------------------------- locations without a store


def test_local_roots_stay_paths(tmp_path: Path) -> None:
    layout = dataset_layout(tmp_path, "proj", "ds")
    assert layout.main == tmp_path / "projects" / "proj" / "datasets" / "ds" / "main"
    assert isinstance(layout.live_edit("s_1"), Path)
    assert storage.location(str(tmp_path)) == tmp_path
    assert storage.spark_uri(layout.main) == str(layout.main)
    assert storage.storage_options_for(layout.main) is None


def test_object_layout_keeps_ids_and_checks() -> None:
    layout = dataset_layout("s3://bucket/prefix", "proj", "ds")
    assert str(layout.staging("cr_1", 2)) == "s3://bucket/prefix/projects/proj/datasets/ds/staging/cr_1--r2"
    assert str(layout.session_metadata("s_1")).endswith("/live_edit/s_1/metadata.json")
    assert layout.main.name == "main" and layout.main.parent == layout.root
    assert storage.spark_uri(layout.main) == "s3a://bucket/prefix/projects/proj/datasets/ds/main"
    with pytest.raises(InvalidInput, match="invalid session id"):
        layout.session_dir("../main")
    with pytest.raises(InvalidInput, match="invalid object key"):
        storage.location("s3://bucket/a/../b")
    with pytest.raises(EngineError, match="not available on object storage"):
        storage.local_path(layout.main, "the table checks")


def test_engine_settings_come_from_the_aws_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**CREDENTIALS, "AWS_ENDPOINT_URL": "http://127.0.0.1:9999"}.items():
        monkeypatch.setenv(name, value)
    sql = storage.duckdb_secret_sql()
    assert "ENDPOINT '127.0.0.1:9999'" in sql and "URL_STYLE 'path'" in sql and "USE_SSL false" in sql
    confs = storage.spark_confs()
    assert confs["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9999"
    assert confs["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert confs["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert confs["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("SimpleAWSCredentialsProvider")
    options = storage.delta_storage_options()
    assert options["AWS_ALLOW_HTTP"] == "true" and options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9999"


# ---------------------------------------------------------------- on the store


def test_files_round_trip_on_the_bucket(s3_root: ObjectPath) -> None:
    layout = dataset_layout(s3_root, "proj", "ds")
    assert not layout.exists()
    layout.create()  # nothing to make: a prefix exists once a key under it does
    report = layout.maintenance_reports() / "run_1.json"
    storage.write_text_atomic(report, json.dumps({"ok": True}))
    storage.write_bytes(layout.upload("up_1") / "raw.csv", b"a,b\n1,2\n")
    assert layout.exists() and report.is_file() and not report.is_dir()
    assert json.loads(storage.read_text(report)) == {"ok": True}
    assert [p.name for p in storage.list_dir(layout.root)] == ["audit", "imports"]
    assert storage.glob(layout.imports_root, "*/raw.csv") == [layout.upload("up_1") / "raw.csv"]
    assert storage.tree_bytes(layout.imports_root) == 8
    assert report.stat().st_size == len('{"ok": true}')
    storage.remove_tree(layout.imports_root)
    assert not layout.upload("up_1").exists() and report.exists()
    storage.remove_tree(layout.imports_root)  # already gone: no error
    with pytest.raises(FileNotFoundError):
        storage.read_text(layout.audit / "missing.json")


def _table(values: list[int]) -> pa.Table:
    return pa.table({"row_id": [f"r{v}" for v in values], "value": values})


def test_delta_rs_writes_and_duckdb_reads_on_the_bucket(s3_root: ObjectPath) -> None:
    from deltalake import DeltaTable, write_deltalake

    table = s3_root / "projects" / "proj" / "datasets" / "ds" / "main"
    options = storage.delta_storage_options()
    write_deltalake(str(table), _table([1, 2, 3]), mode="append", storage_options=options)
    write_deltalake(str(table), _table([4]), mode="append", storage_options=options)
    assert DeltaTable(str(table), storage_options=options).version() == 1
    assert reads.count_rows(table) == 4
    assert reads.count_rows(table, 0) == 3
    assert [(c.name, c.type) for c in reads.table_schema(table, 1)] == [("row_id", "VARCHAR"), ("value", "BIGINT")]
    assert reads.read_rows_by_id(table, ["r2", "r4"])["value"].sort_values().tolist() == [2, 4]


def test_glob_lists_only_the_levels_it_must(s3_root: ObjectPath, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding a session reads no table's files: only wildcard levels are listed, the tail is checked."""
    projects = s3_root / "projects"
    keys = [
        "p1/datasets/d1/live_edit/s1/metadata.json",
        "p1/datasets/d1/live_edit/s1/edits.delta/part-1.parquet",
        "p2/datasets/d3/live_edit/s2/metadata.json",
        *(f"p1/datasets/d2/main/part-{n}.parquet" for n in range(5)),
    ]
    for key in keys:
        (projects / key).write_text("x")
    filesystem = storage._filesystem()
    seen: list[str] = []

    class Recording:
        """The store's filesystem, noting every path a listing or lookup answered with."""

        def get_file_info(self, what: Any) -> Any:
            infos = filesystem.get_file_info(what)
            seen.extend(i.path for i in infos)
            return infos

    monkeypatch.setattr(storage, "_filesystem", lambda: Recording())
    assert storage.glob(projects, "*/datasets/*/live_edit/s1/metadata.json") == [
        projects / "p1/datasets/d1/live_edit/s1/metadata.json"
    ]
    assert seen and not [path for path in seen if "/main/" in path or "edits.delta" in path], seen

    assert storage.glob(projects, "*/datasets/*/live_edit/*/metadata.json") == [
        projects / "p1/datasets/d1/live_edit/s1/metadata.json",
        projects / "p2/datasets/d3/live_edit/s2/metadata.json",
    ]
    assert storage.glob(projects, "*/datasets/*") == [
        projects / "p1/datasets/d1",
        projects / "p1/datasets/d2",
        projects / "p2/datasets/d3",
    ]
    assert storage.glob(projects, "p1/datasets/d2/main/part-[13].parquet") == [
        projects / "p1/datasets/d2/main/part-1.parquet",
        projects / "p1/datasets/d2/main/part-3.parquet",
    ]
    assert storage.glob(projects, "*/datasets/*/live_edit/nope/metadata.json") == []
    assert storage.glob(s3_root / "absent", "*/x") == []


def test_page_reads_do_not_ask_for_every_data_file_again(s3_root: ObjectPath, s3_endpoint: str) -> None:
    """Data files never change under their names: a second read of a page sends no HEAD for them."""
    from deltalake import write_deltalake

    table = s3_root / "many_files"
    for n in range(6):
        write_deltalake(str(table), _table([n]), mode="append", storage_options=storage.delta_storage_options())
    log = MOTO_LOGS[s3_endpoint]

    def data_requests() -> list[str]:
        return [line for line in log.read_text().splitlines() if "/many_files/part-" in line]

    assert reads.count_rows(table) == 6
    seen = len(data_requests())
    assert seen > 0  # the first read fetched the files
    assert reads.count_rows(table) == 6
    time.sleep(0.3)  # moto writes its log line after answering
    again = data_requests()[seen:]
    assert again == [], again
    write_deltalake(str(table), _table([6]), mode="append", storage_options=storage.delta_storage_options())
    assert reads.count_rows(table) == 7  # a new version is still seen


def test_live_edit_session_on_the_bucket(s3_root: ObjectPath) -> None:
    layout = dataset_layout(s3_root, "proj", "ds")
    now = datetime.now(UTC).isoformat()
    info = sessions.SessionInfo("s_1", "ed", "proj", "ds", 0, now, now)
    sessions._write_metadata(layout, info)

    def event(row_id: str, new: str) -> dict[str, object]:
        return {
            "edit_id": sessions._edit_id(),
            "session_id": "s_1",
            "row_id": row_id,
            "column": "value",
            "old_value": "0",
            "new_value": new,
            "user_id": "ed",
            "ts": datetime.now(UTC),
            "validation": "{}",
        }

    info, table = sessions._append(layout, info, [event("r1", "5")], None)
    info, table = sessions._append(layout, info, [event("r1", "6"), event("r2", "7")], table)
    assert (layout.live_edit("s_1") / "_delta_log").is_dir()
    assert [(e.row_id, e.new_value) for e in sessions.effective_edits(layout, "s_1")] == [("r1", "6"), ("r2", "7")]
    assert sessions._read_metadata(layout, "s_1").last_activity == info.last_activity
    assert sessions._session_bytes(layout, "s_1") > 0
    storage.remove_tree(layout.session_dir("s_1"))
    assert sessions.read_events(layout, "s_1").num_rows == 0


def _append_many(uri: str, writer: int, commits: int) -> None:
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    for n in range(commits):
        value = writer * 1000 + n
        # delta-rs retries a lost race a bounded number of times; on a loaded machine four
        # writers can exhaust that, and a writer told its commit failed tries again, as a
        # real one would. A failed commit must never count: the totals below check that.
        for attempt in range(20):
            try:
                write_deltalake(uri, _table([value]), mode="append", storage_options=storage.delta_storage_options())
                break
            except CommitFailedError:
                if attempt == 19:
                    raise
                time.sleep(0.2 * (attempt + 1))


def test_concurrent_writers_never_lose_a_commit(s3_root: ObjectPath) -> None:
    from deltalake import DeltaTable, write_deltalake

    table = str(s3_root / "concurrent")
    options = storage.delta_storage_options()
    write_deltalake(table, _table([0]), mode="append", storage_options=options)
    # Two handles at version 0: the second commit races for a log entry the first one took.
    first = DeltaTable(table, storage_options=options)
    second = DeltaTable(table, storage_options=options)
    write_deltalake(first, _table([1]), mode="append")
    write_deltalake(second, _table([2]), mode="append")

    writers, commits = 4, 5
    # Separate interpreters, not multiprocessing: a spawned child re-runs the parent's __main__,
    # which another test in the same pytest process (Streamlit's AppTest) may have replaced.
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    script = (
        "import sys; from tests.test_storage_s3 import _append_many; "
        "_append_many(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, table, str(w + 1), str(commits)],
            cwd=root,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    final = DeltaTable(table, storage_options=options)
    assert final.version() == 2 + writers * commits
    values = sorted(final.to_pyarrow_table()["value"].to_pylist())
    expected = sorted([0, 1, 2] + [(w + 1) * 1000 + n for w in range(writers) for n in range(commits)])
    assert values == expected
    assert reads.count_rows(s3_root / "concurrent") == len(expected)


def test_moto_server_is_a_separate_process(s3_endpoint: str) -> None:
    """The store is a real HTTP server: a raw request sees the S3 protocol, not a patched client."""
    with urllib.request.urlopen(s3_endpoint, timeout=5) as answer:
        assert b"ListAllMyBucketsResult" in answer.read()


def test_core_loop_on_the_bucket(s3_root: ObjectPath, s3_endpoint: str, tmp_path: Path, postgres_url: str) -> None:
    """Create, edit, submit, approve, read, history, OPTIMIZE and RESTORE with DELTA_DATA_ROOT on
    the bucket: Spark through s3a, delta-rs for the live edits, DuckDB through httpfs; then
    export, VACUUM, doctor and migrate (Parquet and PostgreSQL) onto the bucket
    (tests/s3_loop.py, in its own process)."""
    env = {
        **os.environ,
        "OREO_DATABASE_URL": f"sqlite:///{tmp_path / 'catalog.db'}",
        "OREO_S3_LOOP_PG": postgres_url.replace("postgresql+psycopg://", "postgresql://"),
    }
    seen = s3_loop.run_loop(tmp_path, env)
    assert seen["connect"] is False  # embedded Spark, in the loop's process
    s3_loop.check_loop(seen, s3_root, tmp_path)


def test_doctor_checks_find_damage_on_the_bucket(s3_root: ObjectPath) -> None:
    """`oreo doctor`'s log, file and checkpoint checks list and read the table through the store."""
    from deltalake import DeltaTable, write_deltalake

    from core import damage

    main = dataset_layout(s3_root, "proj", "ds").main
    assert isinstance(main, ObjectPath)
    options = storage.delta_storage_options()
    for values in ([1, 2], [3], [4]):
        write_deltalake(str(main), _table(values), mode="append", storage_options=options)
    DeltaTable(str(main), storage_options=options).create_checkpoint()  # of version 2
    write_deltalake(str(main), _table([5]), mode="append", storage_options=options)
    assert damage.check_log(main) == damage.check_files(main) == damage.check_checkpoints(main) == []

    added = [p for p in storage.object_files(main) if p.suffix == ".parquet" and "_delta_log" not in p.key]
    cut, lost = storage.sort_locations(list(added))[:2]
    logged = cut.stat().st_size
    storage.write_bytes(cut, b"cut")  # a data file of the current version, cut short
    lost.unlink()  # and one lost
    assert sorted(f.line() for f in damage.check_files(main)) == sorted(
        [
            f"{cut.name} has 3 bytes, the log says {logged} (version 3)",
            f"{lost.name} is missing (a data file of version 3)",
        ]
    )

    log = main / "_delta_log"
    storage.write_bytes(log / f"{1:020d}.json", b'{"commitInfo": {')  # before the checkpoint: a full check reads it
    storage.write_bytes(log / f"{2:020d}.checkpoint.parquet", b"junk")
    storage.write_bytes(log / f"{4:020d}.json", b"")  # and the newest commit left empty
    log_findings = [(f.file, f.problem) for f in damage.check_log(main)]
    assert [file for file, _ in log_findings] == [f"_delta_log/{1:020d}.json", f"_delta_log/{4:020d}.json"]
    assert log_findings[0][1].startswith("is not valid JSON at line 1") and log_findings[1][1] == "is empty"
    (log / f"{3:020d}.json").unlink()
    assert (
        damage.check_log(main)[-1].line()
        == f"_delta_log/{3:020d}.json missing: the log has a gap after the checkpoint of version 2"
    )
    (checkpoint,) = damage.check_checkpoints(main)
    assert checkpoint.file == f"_delta_log/{2:020d}.checkpoint.parquet"
    assert checkpoint.problem.startswith("is not a readable checkpoint")
    assert damage.find_damage(main) is None  # readers look at local tables only; doctor does the full check
