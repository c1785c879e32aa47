"""The ``cluster`` tier on object storage: the core loop through Spark Connect with the data on S3.

``scripts/cluster.sh up --s3`` starts, once per session (its modules run last), the loopback cluster of
tests/test_cluster.py plus an S3-compatible server (``moto_server`` over HTTP on loopback)
with a bucket, and gives the Connect server Hadoop's s3a jars and confs. The client gets
only the exported variables: ``SPARK_REMOTE``, ``OREO_DATABASE_URL`` (PostgreSQL),
``DELTA_DATA_ROOT=s3://...`` and the ``AWS_*`` ones. The loop is tests/s3_loop.py, the one
tests/test_storage_s3.py runs on embedded Spark: create, edit, submit, approve (MERGE
exactly once), read, history, OPTIMIZE, RESTORE, then ``oreo export`` (CSV, Parquet),
``maintain --vacuum`` (dry run and run), ``doctor`` and ``migrate`` from Parquet and from
PostgreSQL (the cluster's own server holds the source table); then an import with a new column.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import reads
from core.config import get_settings
from core.storage import ObjectPath
from tests import cluster_support, s3_loop

cluster_s3 = cluster_support.cluster_s3  # up --s3 when first asked for (the plain cluster stopped first)

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parent.parent
OREO = str(Path(sys.executable).parent / "oreo")
CLIENT = ("SPARK_REMOTE", "OREO_DATABASE_URL", *sorted(cluster_support.S3_EXPORTS))


@pytest.fixture
def client(cluster_s3: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The cluster's exports in this process (for the checks on the store) and for the children."""
    for name in CLIENT:
        monkeypatch.setenv(name, cluster_s3[name])
    get_settings.cache_clear()
    reads.close()  # the next cursor opens a database with httpfs and the store's secret
    yield {**os.environ}
    reads.close()
    get_settings.cache_clear()


def oreo(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run([OREO, "--json", *args], env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, f"oreo {' '.join(args)} failed: {done.stderr[-3000:]}"
    return json.loads(done.stdout)


def test_the_core_loop_on_s3_through_spark_connect(
    cluster_s3: dict[str, str], client: dict[str, str], tmp_path: Path
) -> None:
    status = subprocess.run(
        [str(cluster_support.CLUSTER), "status"],
        env={"OREO_PYTHON": sys.executable, **os.environ, "OREO_CLUSTER_DIR": cluster_s3["OREO_CLUSTER_DIR"]},
        capture_output=True, text=True,
    )  # fmt: skip
    assert status.returncode == 0, status.stdout
    names = [line.split(":")[0] for line in status.stdout.splitlines()]
    assert names == ["master", "worker1", "worker2", "moto", "connect", "postgres"]
    assert f"running {cluster_s3['AWS_ENDPOINT_URL']} {cluster_s3['DELTA_DATA_ROOT']}" in status.stdout
    root = get_settings().data_root
    assert isinstance(root, ObjectPath) and str(root) == cluster_s3["DELTA_DATA_ROOT"]
    assert client["OREO_DATABASE_URL"].startswith("postgresql+psycopg://")

    source_db = client["OREO_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    seen = s3_loop.run_loop(tmp_path, {**client, "OREO_S3_LOOP_PG": source_db})

    assert seen["connect"] is True  # every Spark statement ran on the Connect server
    s3_loop.check_loop(seen, root, tmp_path)

    # An import with a new column: schema evolution through s3a on the Connect server.
    more = tmp_path / "more.csv"
    more.write_text("id,name,qty,unit\n4,four,40,kg\n")
    appended = oreo(client, "append", "demo", "nums", "--file", str(more), "--as", "ed")
    approved = oreo(client, "cr", "approve", appended["cr_id"], "--as", "al")
    assert approved["state"] == "merged"
    page = oreo(client, "dataset", "rows", "demo", "nums", "--limit", "100")
    now = {r["row_id"]: r for r in page["rows"]}
    assert sorted(now) == ["1", "2", "3", "4"]
    assert (now["4"]["unit"], now["4"]["qty"], now["2"]["unit"], now["2"]["qty"]) == ("kg", 40, None, 20)
    main = root / "projects" / "demo" / "datasets" / "nums" / "main"
    assert (main / "_delta_log" / f"{approved['version']:020d}.json").is_file()
