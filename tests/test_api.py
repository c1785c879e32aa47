"""The HTTP API (issue 15 §1, §3) through a real uvicorn server on loopback, with httpx as the client.

One ``oreo api`` server (and so one Spark) serves the whole module; the test process sets
up accounts and tokens in the same catalog through core, as an operator would with the CLI.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from sqlalchemy import update

from core import audit, auth, datasets, projects, rules, tokens
from core.catalog import ApiTokenRow, Catalog, reset_catalogs, utcnow
from core.config import get_settings
from core.layout import dataset_layout
from tests.jvm_options import long_lived

ROOT = Path(__file__).resolve().parent.parent
ROWS = 30
# The export test's table: its CSV body (about 48 MiB) is more than ten times the growth the
# test allows while it streams, which is the property; a million rows (120 MiB) proved the
# same in 2.5 times the time.
BIG_ROWS = 400_000


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    catalog: Catalog
    data_root: Path
    env: dict[str, str]
    tokens: dict[str, str]

    def client(self, who: str | None = None, **headers: str) -> httpx.Client:
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=600)

    def token(self, username: str, **scope: Any) -> str:
        return tokens.create_token(self.catalog, username, **scope).secret

    def rss_kib(self, field: str = "VmRSS") -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.process.pid}/status")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("api")
    data_root = base / "delta"
    url = f"sqlite:///{base / 'catalog.db'}"
    env = long_lived(  # the API server stays up for the module: both compilers (tests/jvm_options.py)
        {
            **os.environ,
            "DELTA_DATA_ROOT": str(data_root),
            "OREO_DATABASE_URL": url,
            "OREO_SPARK_SHUFFLE_PARTITIONS": "2",
            "OREO_MAX_UPLOAD_MB": "500",
            "OREO_IMPORT_FOLDERS": str(base / "server-files"),
            "PYTHONPATH": str(ROOT),
        }
    )
    (base / "server-files").mkdir()
    env.pop("SPARK_REMOTE", None)
    catalog = Catalog(url)
    catalog.upgrade()
    projects.create_project(catalog, "demo")
    projects.create_project(catalog, "other")
    for name, role in (("ed", "editor"), ("ap", "approver"), ("boss", "admin")):
        auth.create_user(catalog, name, password="not-a-common-password")
        auth.add_member(catalog, "demo", name, role)
    auth.add_member(catalog, "other", "ed", "editor")
    auth.create_user(catalog, "site", password="not-a-common-password", site_admin=True)
    minted = {name: tokens.create_token(catalog, name).secret for name in ("ed", "ap", "boss", "site")}
    port = _free_port()
    log = (base / "server.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "api", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Server(f"http://127.0.0.1:{port}", process, catalog, data_root, env, minted)
    try:
        _wait_until_up(server, base / "server.log")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        catalog.engine.dispose()


def _wait_until_up(server: Server, log: Path) -> None:
    """Poll health until the engine is up (Spark starts in the background at server start)."""
    deadline = time.monotonic() + 900
    seen: list[str] = []
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"the API server exited:\n{log.read_text()[-3000:]}")
        try:
            health = httpx.get(server.url + "/api/v1/health", timeout=5).json()
        except httpx.TransportError:
            time.sleep(0.5)
            continue
        seen.append(health["engine"])
        if health["engine"] == "up":
            assert "starting" in seen or len(seen) == 1
            return
        assert health["engine"] == "starting", health
        time.sleep(1)
    raise AssertionError("the engine did not come up")


def _csv(rows: int, *, duplicate: bool = False) -> bytes:
    ids = list(range(1, rows + 1))
    if duplicate:
        ids[-1] = 1
    table = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"name {i:03d}" for i in ids]),
            "score": pa.array([i % 7 + 0.5 for i in ids]),
        }
    )
    sink = io.BytesIO()
    pacsv.write_csv(table, sink)
    return sink.getvalue()


def _create(server: Server, dataset: str, data: bytes, *, who: str = "boss", name: str = "rows.csv") -> httpx.Response:
    with server.client(who) as c:
        return c.post(
            "/api/v1/projects/demo/datasets",
            data={"dataset_id": dataset, "key": "id"},
            files={"file": (name, data, "text/csv")},
        )


@pytest.fixture(scope="module")
def people(server: Server) -> str:
    """The ``people`` dataset, created through the API (ids 1..30, keyed by ``id``)."""
    created = _create(server, "people", _csv(ROWS))
    assert created.status_code == 201, created.text
    assert created.json()["rows"] == ROWS
    return "people"


def _merge_commits(server: Server, dataset: str, cr_id: str) -> int:
    with server.client("boss") as c:
        versions = c.get(f"/api/v1/projects/demo/datasets/{dataset}/history").json()["versions"]
    return sum(1 for v in versions if v.get("cr_id") == cr_id)


def _edit_and_submit(server: Server, dataset: str, edits: dict[str, Any], title: str) -> str:
    with server.client("ed") as c:
        saved = c.post(f"/api/v1/projects/demo/datasets/{dataset}/edits", json=edits)
        assert saved.status_code == 200, saved.text
        session_id = saved.json()["session_id"]
        submitted = c.post(
            f"/api/v1/projects/demo/datasets/{dataset}/change-requests", json={"session_id": session_id, "title": title}
        )
        assert submitted.status_code == 201, submitted.text
        assert submitted.json()["state"] == "open"
        return str(submitted.json()["cr_id"])


# ---------------------------------------------------------------- service


def test_health_openapi_docs_and_metrics(server: Server) -> None:
    assert httpx.get(server.url + "/api/v1/health").json() == {"status": "ok", "engine": "up"}
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    for kept in (
        "/api/v1/health",
        "/api/v1/projects/{project_id}/datasets/{dataset_id}/rows",
        "/api/v1/projects/{project_id}/datasets/{dataset_id}/edits",
        "/api/v1/projects/{project_id}/datasets/{dataset_id}/change-requests",
        "/api/v1/change-requests/{cr_id}",
        "/api/v1/change-requests/{cr_id}/approve",
        "/api/v1/change-requests/{cr_id}/reject",
        "/api/v1/projects/{project_id}/datasets/{dataset_id}/history",
        "/api/v1/projects/{project_id}/datasets/{dataset_id}/restore",
        "/api/v1/projects/{project_id}/datasets/{dataset_id}/export",
    ):
        assert kept in paths, kept
    assert "swagger" in httpx.get(server.url + "/docs").text.lower()
    before = _request_count(server, "GET", "/api/v1/projects", 200)
    refused = _request_count(server, "GET", "/api/v1/projects", 401)
    with server.client("ed") as c:
        assert [c.get("/api/v1/projects").status_code for _ in range(3)] == [200, 200, 200]
    assert httpx.get(server.url + "/api/v1/projects").status_code == 401
    assert _request_count(server, "GET", "/api/v1/projects", 200) == before + 3
    assert _request_count(server, "GET", "/api/v1/projects", 401) == refused + 1


def _request_count(server: Server, method: str, route: str, status: int) -> float:
    """``oreo_api_request_seconds_count`` of one route, method and status, from ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.url + "/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {"method": method, "route": route, "status": str(status)}
            if sample.name == "oreo_api_request_seconds_count" and sample.labels == labels:
                return sample.value
    return 0.0


# ---------------------------------------------------------------- the whole loop


def test_rows_paging_filter_sort_and_version(server: Server, people: str) -> None:
    with server.client("ed") as c:
        first = c.get(f"/api/v1/projects/demo/datasets/{people}/rows", params={"limit": 10}).json()
        assert first["total"] == ROWS and [r["id"] for r in first["rows"]] == list(range(1, 11))
        second = c.get(f"/api/v1/projects/demo/datasets/{people}/rows", params={"limit": 10, "offset": 10}).json()
        assert [r["id"] for r in second["rows"]] == list(range(11, 21))
        ordered = c.get(
            f"/api/v1/projects/demo/datasets/{people}/rows", params={"order_by": "id", "desc": "true", "limit": 3}
        ).json()
        assert [r["id"] for r in ordered["rows"]] == [30, 29, 28]
        filtered = c.get(
            f"/api/v1/projects/demo/datasets/{people}/rows",
            params=[("where", "id > 25"), ("where", "score >= 3"), ("limit", "50")],
        ).json()
        expected = [i for i in range(26, 31) if i % 7 >= 3]
        assert [r["id"] for r in filtered["rows"]] == expected and filtered["total"] == len(expected)
        as_of = c.get(f"/api/v1/projects/demo/datasets/{people}/rows", params={"version": 0, "limit": 1}).json()
        assert as_of["total"] == ROWS


def test_whole_loop_edit_submit_comment_approve_history_restore_export(server: Server, people: str) -> None:
    row_ids = _row_ids(server, people)
    cr_id = _edit_and_submit(
        server,
        people,
        {
            "set": [{"row_id": row_ids[2], "column": "name", "value": "renamed"}],
            "delete_rows": [row_ids[3]],
            "add_rows": [{"id": 100, "name": "new one", "score": 1.5}],
        },
        "a bit of everything",
    )
    with server.client("ap") as c:
        commented = c.post(f"/api/v1/change-requests/{cr_id}/comments", json={"text": "looks right"})
        assert commented.status_code == 201, commented.text
        shown = c.get(f"/api/v1/change-requests/{cr_id}", params={"rows": "true"}).json()
        assert shown["thread"][0]["text"] == "looks right"
        summary = shown["row_diff"]["summary"]
        assert (summary["rows_inserted"], summary["rows_updated"], summary["rows_deleted"]) == (1, 1, 1)
        # The same Idempotency-Key twice: one merge, the same answer.
        approved = [
            c.post(f"/api/v1/change-requests/{cr_id}/approve", json={"comment": "ok"}, headers={"Idempotency-Key": key})
            for key in ("k1", "k1")
        ]
    assert [a.status_code for a in approved] == [200, 200]
    assert approved[0].json() == approved[1].json()
    assert approved[1].headers.get("Idempotent-Replayed") == "true"
    merged = approved[0].json()
    assert merged["state"] == "merged"
    assert _merge_commits(server, people, cr_id) == 1
    with server.client("ap") as c:
        again = c.post(
            f"/api/v1/change-requests/{cr_id}/approve", json={"comment": "other"}, headers={"Idempotency-Key": "k1"}
        )
    assert again.status_code == 409 and "different request" in again.json()["error"]["message"]

    with server.client("ed") as c:
        after = c.get(f"/api/v1/projects/demo/datasets/{people}/rows", params={"limit": 100}).json()
    names = {r["id"]: r["name"] for r in after["rows"]}
    assert names[3] == "renamed" and 4 not in names and names[100] == "new one" and after["total"] == ROWS
    with server.client("boss") as c:
        versions = c.get(f"/api/v1/projects/demo/datasets/{people}/history").json()["versions"]
        assert versions[0]["version"] == merged["version"] and versions[0]["cr_id"] == cr_id
        restored = c.post(
            f"/api/v1/projects/demo/datasets/{people}/restore", json={"version": 0, "reason": "undo the test"}
        )
        assert restored.status_code == 200, restored.text
        assert restored.json() == {"version": merged["version"] + 1, "restored_to": 0}
        for fmt in ("csv", "parquet"):
            with c.stream("GET", f"/api/v1/projects/demo/datasets/{people}/export", params={"format": fmt}) as r:
                assert r.status_code == 200, r.read()
                data = b"".join(r.iter_bytes())
            table = pacsv.read_csv(io.BytesIO(data)) if fmt == "csv" else pq.read_table(io.BytesIO(data))
            assert table.num_rows == ROWS and sorted(table.column("id").to_pylist()) == list(range(1, ROWS + 1))
            assert r.headers["X-Oreo-Version"] == str(merged["version"] + 1)
        old = c.get(
            f"/api/v1/projects/demo/datasets/{people}/export", params={"format": "csv", "version": merged["version"]}
        )
        assert 100 in pacsv.read_csv(io.BytesIO(old.content)).column("id").to_pylist()
    # Every call is audited with its token's id, and so is what core recorded during the call.
    token_ids = {t.username: t.id for t in tokens.list_tokens(server.catalog)}
    calls = [e for e in audit.list_events(server.catalog, name="api_request", limit=500) if e.actor == "ap"]
    assert calls and {e.details["token_id"] for e in calls} == {token_ids["ap"]}
    merges = [e for e in audit.list_events(server.catalog, project_id="demo", limit=500) if e.name != "api_request"]
    assert any(e.details.get("token_id") == token_ids["ap"] for e in merges), [e.name for e in merges]


def _row_ids(server: Server, dataset: str) -> list[str]:
    with server.client("ed") as c:
        page = c.get(f"/api/v1/projects/demo/datasets/{dataset}/rows", params={"limit": 1000}).json()
    return [r["row_id"] for r in sorted(page["rows"], key=lambda r: r["id"])]


def _submit_as(server: Server, who: str, dataset: str, edits: dict[str, Any]) -> str:
    with server.client(who) as c:
        saved = c.post(f"/api/v1/projects/demo/datasets/{dataset}/edits", json=edits)
        assert saved.status_code == 200, saved.text
        body = {"session_id": saved.json()["session_id"], "title": f"{who} edits"}
        submitted = c.post(f"/api/v1/projects/demo/datasets/{dataset}/change-requests", json=body)
        assert submitted.status_code == 201, submitted.text
        return str(submitted.json()["cr_id"])


def test_a_conflict_shows_base_theirs_mine_and_its_author_resolves_it(server: Server, people: str) -> None:
    row = _row_ids(server, people)[5]
    with server.client("ed") as c:
        before = c.get(f"/api/v1/projects/demo/datasets/{people}/rows", params={"limit": 100}).json()
    base = next(r["name"] for r in before["rows"] if r["row_id"] == row)
    theirs = _submit_as(server, "ed", people, {"set": [{"row_id": row, "column": "name", "value": "theirs"}]})
    mine = _submit_as(
        server, "boss", people,
        {"set": [{"row_id": row, "column": "name", "value": "mine"}, {"row_id": row, "column": "score", "value": "9"}]},
    )  # fmt: skip
    with server.client("ap") as c:
        assert c.post(f"/api/v1/change-requests/{theirs}/approve", json={}).status_code == 200
        [conflict] = c.get(f"/api/v1/change-requests/{mine}").json()["conflicts"]
        assert {k: conflict[k] for k in ("row_id", "column", "reason", "base", "theirs", "mine", "committed_by")} == {
            "row_id": row, "column": "name", "reason": "also changed",
            "base": base, "theirs": "theirs", "mine": "mine", "committed_by": "ap",
        }  # fmt: skip
        assert conflict["resolve"].startswith(f"oreo cr resolve {mine} {row} name --keep-mine|--take-theirs")
        keep = {"row_id": row, "column": "name", "choice": "mine"}
        refused = c.post(f"/api/v1/change-requests/{mine}/resolve", json=keep)
        _assert_error(refused, 403, "permission_denied")
        blocked = c.post(f"/api/v1/change-requests/{mine}/approve", json={})
        _assert_error(blocked, 409, "conflict")
        assert f"POST /api/v1/change-requests/{mine}/resolve with row_id, column and choice" in blocked.text
    with server.client("boss") as c:
        resolved = c.post(f"/api/v1/change-requests/{mine}/resolve", json=keep)
        assert resolved.status_code == 200, resolved.text
        assert (resolved.json()["revision"], resolved.json()["conflicts"]) == (2, [])
    with server.client("ap") as c:
        assert c.get(f"/api/v1/change-requests/{mine}").json()["conflicts"] == []
        assert c.post(f"/api/v1/change-requests/{mine}/approve", json={}).status_code == 200
    with server.client("ed") as c:
        after = c.get(f"/api/v1/projects/demo/datasets/{people}/rows", params={"limit": 100}).json()
    assert next(r["name"] for r in after["rows"] if r["row_id"] == row) == "mine"


def test_async_approve_answers_202_and_the_operation_ends_with_the_sync_document(server: Server, people: str) -> None:
    row_ids = _row_ids(server, people)
    cr_id = _edit_and_submit(
        server, people, {"set": [{"row_id": row_ids[0], "column": "score", "value": "6.5"}]}, "async approval"
    )
    with server.client("ap", Prefer="respond-async") as c:
        started = c.post(f"/api/v1/change-requests/{cr_id}/approve", json={})
        assert started.status_code == 202, started.text
        location = started.headers["Location"]
        assert location == f"/api/v1/operations/{started.json()['id']}"
        deadline = time.monotonic() + 600
        while (polled := c.get(location).json())["state"] == "running":
            assert time.monotonic() < deadline, polled
            time.sleep(0.5)
        shown = c.get(f"/api/v1/change-requests/{cr_id}").json()
    assert polled["state"] == "succeeded", polled
    assert polled["result"] == {"cr_id": cr_id, "state": "merged", "version": shown["merged_version"], "revision": 1}
    with server.client("ed") as c:  # another caller cannot see the operation
        assert c.get(location).status_code == 404
    assert _merge_commits(server, people, cr_id) == 1


def test_concurrent_retries_with_one_key_merge_once(server: Server, people: str) -> None:
    row_ids = _row_ids(server, people)
    cr_id = _edit_and_submit(
        server, people, {"set": [{"row_id": row_ids[1], "column": "name", "value": "twice?"}]}, "concurrent retries"
    )
    answers: list[httpx.Response] = []

    def approve() -> None:
        with server.client("ap", **{"Idempotency-Key": "same-key"}) as c:
            answers.append(c.post(f"/api/v1/change-requests/{cr_id}/approve", json={}))

    racers = [threading.Thread(target=approve) for _ in range(3)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    # Each got the merge's answer or was told the first is still running; none merged again.
    assert sorted(a.status_code for a in answers)[0] == 200 and {a.status_code for a in answers} <= {200, 409}
    assert all("still running" in a.json()["error"]["message"] for a in answers if a.status_code == 409)
    with server.client("ap", **{"Idempotency-Key": "same-key"}) as c:
        replay = c.post(f"/api/v1/change-requests/{cr_id}/approve", json={})
    assert replay.status_code == 200 and replay.json()["state"] == "merged"
    assert _merge_commits(server, people, cr_id) == 1


def test_imports_upload_a_file_or_name_one_on_the_server_for_site_admins(server: Server, people: str) -> None:
    rows = b"id,name,score\n200,imported a,1.5\n201,imported b,2.5\n"
    imports = f"/api/v1/projects/demo/datasets/{people}/imports"
    with server.client("ed", **{"Idempotency-Key": "import-1"}) as c:
        answers = [
            c.post(imports, data={"title": "two rows"}, files={"file": ("two.csv", rows, "text/csv")}) for _ in "ab"
        ]
    assert [a.status_code for a in answers] == [201, 201], answers[0].text
    assert answers[0].json() == answers[1].json() and answers[0].json()["state"] == "open"
    assert set(answers[0].json()) == {
        *("cr_id", "state", "validation", "schema_changes"),
        *("mode", "key", "added", "updated", "deleted", "reviewed", "version"),
    }
    assert answers[0].json()["added"] == 2 and answers[0].json()["reviewed"] is True
    with server.client("ed") as c:
        listed = c.get("/api/v1/change-requests", params={"project": "demo", "dataset": people, "state": "open"})
    imported = [r["cr_id"] for r in listed.json()["change_requests"] if r["kind"] == "import"]
    assert imported == [answers[0].json()["cr_id"]]
    on_disk = Path(server.env["OREO_IMPORT_FOLDERS"]) / "two.csv"
    on_disk.write_bytes(rows)
    with server.client("ed") as c:
        _assert_error(c.post(imports, data={"path": str(on_disk)}), 403, "permission_denied")
        _assert_error(c.post(imports, data={"title": "nothing"}), 400, "invalid_input")
        c.post(f"/api/v1/change-requests/{answers[0].json()['cr_id']}/withdraw")
    with server.client("boss") as c:  # a project admin is not a site admin
        _assert_error(c.post(imports, data={"path": str(on_disk)}), 403, "permission_denied")
    with server.client("site", Prefer="respond-async") as c:
        started = c.post(imports, data={"path": str(on_disk), "title": "from the server"})
        assert started.status_code == 202, started.text
        deadline = time.monotonic() + 600
        while (polled := c.get(started.headers["Location"]).json())["state"] == "running":
            assert time.monotonic() < deadline, polled
            time.sleep(0.5)
    assert polled["state"] == "succeeded", polled
    assert polled["result"]["state"] == "open"
    with server.client("site") as c:
        c.post(f"/api/v1/change-requests/{polled['result']['cr_id']}/withdraw")


def _staged_and_uploaded(server: Server, project: str, dataset: str) -> list[str]:
    root = server.data_root / "projects" / project / "datasets" / dataset
    return sorted(str(p.relative_to(root)) for sub in ("staging", "imports") for p in (root / sub).glob("*"))


def test_nobody_imports_a_server_file_outside_the_import_folders(server: Server) -> None:
    """Issue 25 §1: p2's admin named demo's kept upload by path and read demo's rows back."""
    projects.create_project(server.catalog, "p2")
    auth.create_user(server.catalog, "p2boss", password="not-a-common-password")
    auth.add_member(server.catalog, "p2", "p2boss", "admin")
    server.tokens["p2boss"] = server.token("p2boss")
    files = []
    for ids in ([1, 2], [3, 4]):
        sink = io.BytesIO()
        emails = [f"alice{i}@example.com" for i in ids]
        pq.write_table(pa.table({"id": ids, "email": emails, "name": ["Alice"] * 2}), sink)
        files.append(sink.getvalue())
    with server.client("boss") as c:
        made = c.post(
            "/api/v1/projects/demo/datasets", data={"dataset_id": "customers2", "key": "id"},
            files={"file": ("c.parquet", files[0], "application/vnd.apache.parquet")},
        )  # fmt: skip
        assert made.status_code == 201, made.text
        kept = c.post(
            "/api/v1/projects/demo/datasets/customers2/imports",
            files={"file": ("more.parquet", files[1], "application/vnd.apache.parquet")},
        )
        assert kept.status_code == 201, kept.text  # an open request keeps demo's upload on disk
    with server.client("p2boss") as c:
        made = c.post(
            "/api/v1/projects/p2/datasets", data={"dataset_id": "secret", "key": "id"},
            files={"file": ("s.csv", b"id,email,name\n9,x@example.com,X\n", "text/csv")},
        )  # fmt: skip
        assert made.status_code == 201, made.text
    raw = sorted((server.data_root / "projects/demo/datasets/customers2/imports").glob("*/raw.parquet"))[-1]
    folder = Path(server.env["OREO_IMPORT_FOLDERS"])
    (folder / "innocent.parquet").symlink_to(raw)
    before = _staged_and_uploaded(server, "p2", "secret")
    imports = "/api/v1/projects/p2/datasets/secret/imports"
    attempts = {
        "p2boss": [str(raw), str(folder / "innocent.parquet")],
        "site": [str(raw), f"{folder}/../delta/{raw.relative_to(server.data_root)}", str(folder / "innocent.parquet")],
    }
    for who, paths in attempts.items():
        for named in paths:
            for prefer in ("", "respond-async"):
                with server.client(who, Prefer=prefer) as c:
                    refused = c.post(imports, data={"path": named, "title": "theirs"})
                _assert_error(refused, 403, "permission_denied")
                message = refused.json()["error"]["message"]
                assert named in message and "alice" not in message.lower(), message
    assert _staged_and_uploaded(server, "p2", "secret") == before
    with server.client("p2boss") as c:
        listed = c.get("/api/v1/change-requests", params={"project": "p2", "dataset": "secret"}).json()
        rows = c.get("/api/v1/projects/p2/datasets/secret/rows").json()["rows"]
    assert listed["change_requests"] == []
    assert [r["email"] for r in rows] == ["x@example.com"]
    with server.client("boss") as c:
        c.post(f"/api/v1/change-requests/{kept.json()['cr_id']}/withdraw")


def test_an_import_with_bad_values_names_each_of_them(server: Server, people: str) -> None:
    """Issue 24 §6: the API answers with the message the CLI prints: every bad value, its row and column."""
    bad = b"id,name,score\n300,a,1.5\n301,b,lots\n302,c,n/a\n"
    with server.client("ed") as c:
        upload = {"file": ("bad.csv", bad, "text/csv")}
        refused = c.post(f"/api/v1/projects/demo/datasets/{people}/imports", files=upload)
    _assert_error(refused, 400, "invalid_input")
    assert refused.json()["error"]["message"].startswith(
        "bad.csv has 2 values its table cannot hold: "
        "column 'score', not a number (DOUBLE): data rows 2 ('lots'), 3 ('n/a')"
    )


def test_overwrite_is_a_replace_import_and_an_admin_may_commit_it_without_review(server: Server) -> None:
    """Seed 000's overwrite: ``mode=replace`` is reviewed like any import; ``?review=false`` is admins' only."""
    assert _create(server, "swap", _csv(5)).status_code == 201
    imports = "/api/v1/projects/demo/datasets/swap/imports"
    # ids 1-3 stay (2 renamed), 4 and 5 go, 9 is new
    new = b"id,name,score\n1,name 001,1.5\n2,renamed,2.5\n3,name 003,3.5\n9,nine,1.5\n"
    upload = {"file": ("new.csv", new, "text/csv")}
    with server.client("ed") as c:
        refused = c.post(imports, params={"review": "false"}, data={"mode": "replace"}, files=upload)
        _assert_error(refused, 403, "permission_denied")
        reviewed = c.post(imports, data={"mode": "replace", "title": "overwrite"}, files=upload)
        assert reviewed.status_code == 201, reviewed.text
        doc = reviewed.json()
        assert (doc["state"], doc["mode"], doc["reviewed"], doc["version"]) == ("open", "replace", True, None)
        assert (doc["added"], doc["updated"], doc["deleted"]) == (1, 1, 2)
        shown = c.get(f"/api/v1/change-requests/{doc['cr_id']}").json()
        assert shown["import"]["mode"] == "replace" and shown["import"]["deleted"] == 2
        c.post(f"/api/v1/change-requests/{doc['cr_id']}/withdraw")
    with server.client("boss") as c:
        direct = c.post(imports, params={"review": "false"}, data={"mode": "replace"}, files=upload)
        assert direct.status_code == 201, direct.text
        doc = direct.json()
        assert (doc["state"], doc["reviewed"], doc["deleted"]) == ("merged", False, 2) and doc["version"] >= 1
        rows = c.get("/api/v1/projects/demo/datasets/swap/rows", params={"order_by": "id", "limit": 10}).json()
    expected = [(1, "name 001"), (2, "renamed"), (3, "name 003"), (9, "nine")]
    assert [(r["id"], r["name"]) for r in rows["rows"]] == expected
    assert _merge_commits(server, "swap", doc["cr_id"]) == 1


# ---------------------------------------------------------------- tokens


def test_token_scopes_narrow_and_never_raise(server: Server, people: str) -> None:
    rows = f"/api/v1/projects/demo/datasets/{people}/rows"
    only_other = server.token("ed", project_id="other")
    assert _get(server, only_other, rows).status_code == 403
    assert _get(server, server.tokens["ed"], rows).status_code == 200
    assert [p["project"] for p in _get(server, only_other, "/api/v1/projects").json()["projects"]] == ["other"]
    # An approver's token capped at editor cannot approve; an editor's capped at admin cannot restore.
    row_ids = _row_ids(server, people)
    cr_id = _edit_and_submit(server, people, {"set": [{"row_id": row_ids[5], "column": "name", "value": "x"}]}, "t")
    capped = server.token("ap", role="editor")
    refused = httpx.post(f"{server.url}/api/v1/change-requests/{cr_id}/approve", headers=_bearer(capped), json={})
    assert refused.status_code == 403 and "approver" in refused.json()["error"]["message"]
    raised = server.token("ed", role="admin")
    restore = httpx.post(
        f"{server.url}/api/v1/projects/demo/datasets/{people}/restore",
        headers=_bearer(raised),
        json={"version": 0, "reason": "no"},
    )
    assert restore.status_code == 403
    assert _get(server, server.tokens["ap"], f"/api/v1/change-requests/{cr_id}").json()["state"] == "open"
    with server.client("ed") as c:
        assert c.post(f"/api/v1/change-requests/{cr_id}/withdraw").json()["state"] == "withdrawn"


def test_a_site_admin_creates_a_project_and_nobody_else_can(server: Server) -> None:
    auth.create_user(server.catalog, "root", password="not-a-common-password", site_admin=True)
    root = server.token("root")
    made = httpx.post(f"{server.url}/api/v1/projects", headers=_bearer(root), json={"id": "sales", "name": "Sales"})
    assert made.status_code == 201, made.text
    assert made.json() == {"project": "sales", "name": "Sales"}
    again = httpx.post(f"{server.url}/api/v1/projects", headers=_bearer(root), json={"id": "sales"})
    assert again.status_code == 409 and "already exists" in again.json()["error"]["message"]
    bad = httpx.post(f"{server.url}/api/v1/projects", headers=_bearer(root), json={"id": "no such/id"})
    assert bad.status_code == 400 and "project id" in bad.json()["error"]["message"]
    refused = httpx.post(f"{server.url}/api/v1/projects", headers=_bearer(server.tokens["boss"]), json={"id": "mine"})
    assert refused.status_code == 403 and "site admin" in refused.json()["error"]["message"]
    assert {p.id for p in projects.list_projects(server.catalog, auth.get_user(server.catalog, "root"))} >= {"sales"}
    assert "mine" not in {p.id for p in projects.list_projects(server.catalog, auth.get_user(server.catalog, "root"))}


def test_expired_revoked_garbled_and_missing_tokens_get_401(server: Server) -> None:
    expiring = tokens.create_token(server.catalog, "ed", expires_days=1)
    assert _get(server, expiring.secret, "/api/v1/projects").status_code == 200
    with server.catalog.session() as s:
        s.execute(
            update(ApiTokenRow).where(ApiTokenRow.id == expiring.token.id).values(expires_at=utcnow() - timedelta(1))
        )
    expired = _get(server, expiring.secret, "/api/v1/projects")
    assert expired.status_code == 401 and "expired" in expired.json()["error"]["message"]
    revoked = tokens.create_token(server.catalog, "ed")
    tokens.revoke_token(server.catalog, revoked.token.id)
    assert _get(server, revoked.secret, "/api/v1/projects").status_code == 401
    wrong_secret = revoked.secret[:-4] + "AAAA"
    assert _get(server, wrong_secret, "/api/v1/projects").status_code == 401
    assert _get(server, "oreo_garbled", "/api/v1/projects").status_code == 401
    missing = httpx.get(server.url + "/api/v1/projects")
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
    assert missing.json()["error"]["type"] == "unauthenticated"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _get(server: Server, token: str, path: str) -> httpx.Response:
    return httpx.get(server.url + path, headers=_bearer(token), timeout=600)


# ---------------------------------------------------------------- errors


def _assert_error(response: httpx.Response, status: int, kind: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["status"] == status and body["error"]["type"] == kind
    assert "Traceback" not in response.text


def test_every_error_status_has_the_one_shape(server: Server, people: str) -> None:
    rows = f"/api/v1/projects/demo/datasets/{people}/rows"
    with server.client("ed") as c:
        _assert_error(c.get(rows, params={"where": "id ~ 3"}), 400, "invalid_input")
        _assert_error(c.post(f"/api/v1/projects/demo/datasets/{people}/edits", json={"set": "x"}), 400, "invalid_input")
        _assert_error(c.get("/api/v1/projects/demo/datasets/nope/rows"), 404, "not_found")
        _assert_error(c.get("/api/v1/change-requests/cr-nope"), 404, "not_found")
        _assert_error(
            c.post(f"/api/v1/projects/demo/datasets/{people}/restore", json={"version": 0, "reason": "x"}),
            403,
            "permission_denied",
        )
    _assert_error(httpx.get(server.url + rows), 401, "unauthenticated")
    # 409: rejecting a request that was withdrawn; 409 too: a dataset id that is taken.
    row_ids = _row_ids(server, people)
    cr_id = _edit_and_submit(server, people, {"set": [{"row_id": row_ids[7], "column": "name", "value": "y"}]}, "w")
    with server.client("ed") as c:
        c.post(f"/api/v1/change-requests/{cr_id}/withdraw")
    with server.client("ap") as c:
        _assert_error(c.post(f"/api/v1/change-requests/{cr_id}/reject", json={"reason": "late"}), 409, "conflict")
    _assert_error(_create(server, people, _csv(3)), 409, "already_exists")
    # 422: duplicate keys break the key rule.
    _assert_error(_create(server, "dupes", _csv(5, duplicate=True)), 422, "validation_failed")
    # 503: a table whose data file is gone fails in the engine (DuckDB), named as damage.
    assert _create(server, "broken", _csv(5)).status_code == 201
    main = dataset_layout(server.data_root, "demo", "broken").main
    for data_file in main.rglob("*.parquet"):
        data_file.unlink()
    with server.client("ed") as c:
        _assert_error(c.get("/api/v1/projects/demo/datasets/broken/rows"), 503, "engine_unavailable")


def test_a_refused_first_edit_creates_no_session(server: Server, people: str) -> None:
    """A value core refuses answers 400 naming it and starts nothing: no session folder, no catalog row."""
    auth.create_user(server.catalog, "typo", password="not-a-common-password")  # an editor with no session yet
    auth.add_member(server.catalog, "demo", "typo", "editor")
    token = server.token("typo")
    live = dataset_layout(server.data_root, "demo", people).live_edit_root

    def session_folders() -> list[str]:
        return sorted(p.name for p in live.iterdir()) if live.exists() else []

    folders = session_folders()
    started = len(audit.list_events(server.catalog, name="session_started"))
    row_id = _row_ids(server, people)[4]
    edits = f"/api/v1/projects/demo/datasets/{people}/edits"
    with httpx.Client(base_url=server.url, headers=_bearer(token), timeout=600) as c:
        for body, message in (
            ({"set": [{"row_id": row_id, "column": "score", "value": "1,5"}]}, "'1,5' is not a number (DOUBLE)"),
            ({"add_rows": [{"id": "1.5", "name": "new"}]}, "column 'id': '1.5' is not a whole number"),
        ):
            refused = c.post(edits, json=body)
            _assert_error(refused, 400, "invalid_input")
            assert message in refused.json()["error"]["message"], refused.text
        assert session_folders() == folders
        assert len(audit.list_events(server.catalog, name="session_started")) == started
        # A value that fits starts the session.
        saved = c.post(edits, json={"set": [{"row_id": row_id, "column": "score", "value": "1.5"}]})
        assert saved.status_code == 200, saved.text
    assert session_folders() == sorted([*folders, saved.json()["session_id"]])
    assert len(audit.list_events(server.catalog, name="session_started")) == started + 1


# ---------------------------------------------------------------- the 400,000-row export


def test_export_of_a_big_table_streams_in_constant_memory(server: Server) -> None:
    from core.demo import customers_table

    sink = io.BytesIO()
    pq.write_table(customers_table(BIG_ROWS), sink)
    with server.client("boss") as c:
        created = c.post(
            "/api/v1/projects/demo/datasets",
            data={"dataset_id": "big", "key": "customer_id"},
            files={"file": ("customers.parquet", sink.getvalue(), "application/octet-stream")},
        )
    assert created.status_code == 201, created.text
    del sink
    with server.client("ed") as c:
        first = _sampled_export(server, c, "big")
        second = _sampled_export(server, c, "big")
    for run in (first, second):
        assert run.lines == BIG_ROWS + 1  # the header, then one line per row
    body_mib = second.received / 2**20
    print(
        f"export of {BIG_ROWS:,} rows as CSV: {body_mib:.0f} MiB streamed; server RSS grew at most "
        f"{first.growth_mib:.1f} MiB on the first export (DuckDB's COPY buffers), {second.growth_mib:.1f} MiB "
        f"on the second, {second.streaming_growth_mib:.1f} MiB while the body was sent"
    )
    # The body is never held in memory: sending it does not grow the server. The whole export's growth is
    # DuckDB's COPY to a temporary file (its buffer pool: 14-184 MiB from run to run, under load too), printed.
    assert body_mib > 40, body_mib
    assert max(first.streaming_growth_mib, second.streaming_growth_mib) < body_mib / 10, (first, second, body_mib)


@dataclass
class _Export:
    received: int = 0
    lines: int = 0
    growth_mib: float = 0.0
    streaming_growth_mib: float = 0.0


def _sampled_export(server: Server, client: httpx.Client, dataset: str) -> _Export:
    """Download a CSV export while sampling the server's resident memory every 50 ms."""
    before = server.rss_kib()
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(server.rss_kib())
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = _Export()
    try:
        with client.stream("GET", f"/api/v1/projects/demo/datasets/{dataset}/export", params={"format": "csv"}) as r:
            assert r.status_code == 200 and r.headers["X-Oreo-Rows"] == str(BIG_ROWS)
            at_headers, mark = server.rss_kib(), len(samples)  # the file is written; now it is sent
            for chunk in r.iter_bytes():
                out.received += len(chunk)
                out.lines += chunk.count(b"\n")
    finally:
        done.set()
        sampler.join()
    out.growth_mib = (max(samples, default=before) - before) / 1024
    out.streaming_growth_mib = max(0.0, (max(samples[mark:], default=at_headers) - at_headers) / 1024)
    return out


def test_idempotent_restore_acts_once(server: Server, people: str) -> None:
    with server.client("boss", **{"Idempotency-Key": "restore-1"}) as c:
        first = c.post(f"/api/v1/projects/demo/datasets/{people}/restore", json={"version": 1, "reason": "redo"})
        second = c.post(f"/api/v1/projects/demo/datasets/{people}/restore", json={"version": 1, "reason": "redo"})
        versions = c.get(f"/api/v1/projects/demo/datasets/{people}/history").json()["versions"]
    assert first.status_code == 200, first.text
    assert first.json() == second.json()
    restores = [v for v in versions if v["version"] >= first.json()["version"]]
    assert len(restores) == 1, [json.dumps(v, default=str) for v in restores]


# ---------------------------------------------------------------- the contract with the CLI


def _same_shape(cli_doc: Any, api_doc: Any, where: str) -> None:
    """The same fields at every level (lists: compared through their first items)."""
    if isinstance(cli_doc, dict):
        assert isinstance(api_doc, dict) and set(cli_doc) == set(api_doc), (where, set(cli_doc) ^ set(api_doc))
        for key in cli_doc:
            _same_shape(cli_doc[key], api_doc[key], f"{where}.{key}")
    elif isinstance(cli_doc, list) and cli_doc and isinstance(api_doc, list) and api_doc:
        _same_shape(cli_doc[0], api_doc[0], f"{where}[0]")


def test_every_cli_json_document_and_its_api_twin_have_the_same_fields(
    server: Server, people: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import context
    from cli import main as cli
    from core.catalog import reset_catalogs
    from core.config import get_settings

    for name in ("DELTA_DATA_ROOT", "OREO_DATABASE_URL"):
        monkeypatch.setenv(name, server.env[name])
    get_settings.cache_clear()
    reset_catalogs()
    row_ids = _row_ids(server, people)
    cr_id = _edit_and_submit(server, people, {"set": [{"row_id": row_ids[10], "column": "name", "value": "z"}]}, "c")
    with server.client("ed") as c:
        session_id = c.post(
            f"/api/v1/projects/demo/datasets/{people}/edits",
            json={"set": [{"row_id": row_ids[9], "column": "name", "value": "contract"}]},
        ).json()["session_id"]
    d = f"/api/v1/projects/demo/datasets/{people}"
    twins = [
        (["project", "list", "--as", "ed"], "/api/v1/projects"),
        (["dataset", "list", "demo", "--as", "ed"], "/api/v1/projects/demo/datasets"),
        (["dataset", "show", "demo", people, "--as", "ed"], d),
        (["dataset", "rows", "demo", people, "--as", "ed", "--limit", "5"], f"{d}/rows?limit=5"),
        (["rules", "show", "demo", people, "--as", "ed"], f"{d}/rules"),
        (["rules", "propose", "demo", people, "--as", "ed"], f"{d}/rules/proposal"),
        (["history", "demo", people, "--as", "ed"], f"{d}/history"),
        (["diff", "demo", people, "--from", "0", "--to", "1", "--as", "ed"], f"{d}/diff?from=0&to=1"),
        (["cr", "show", cr_id, "--as", "ed"], f"/api/v1/change-requests/{cr_id}"),
        (["cr", "show", cr_id, "--rows", "--as", "ed"], f"/api/v1/change-requests/{cr_id}?rows=true"),
        (["cr", "list", "--as", "ed"], "/api/v1/change-requests"),
        (["session", "show", session_id, "--as", "ed"], f"/api/v1/sessions/{session_id}"),
    ]
    with server.client("ed") as c:
        for args, path in twins:
            capsys.readouterr()
            context.state.json = False
            assert cli.main(["--json", *args]) == 0, capsys.readouterr().err
            cli_doc = json.loads(capsys.readouterr().out)
            if isinstance(cli_doc, dict) and args[:2] in (["dataset", "list"], ["dataset", "show"]):
                # The CLI shows its operator the dataset's folder; the API never shows server paths (issue 25 §6).
                docs = cli_doc.get("datasets", [cli_doc])
                for doc in docs:
                    doc.pop("path")
            answer = c.get(path)
            assert answer.status_code == 200, (path, answer.text)
            _same_shape(cli_doc, answer.json(), " ".join(args))
        # The state-changing twins: a comment, a withdrawal.
        capsys.readouterr()
        assert cli.main(["--json", "cr", "comment", cr_id, "--as", "ed", "--text", "from the CLI"]) == 0
        cli_comment = json.loads(capsys.readouterr().out)
        api_comment = c.post(f"/api/v1/change-requests/{cr_id}/comments", json={"text": "api"}).json()
        _same_shape(cli_comment, api_comment, "comment")
        api_withdraw = c.post(f"/api/v1/change-requests/{cr_id}/withdraw").json()
    assert set(api_withdraw) == {"cr_id", "state"}


def test_decisions_name_the_revision_reviewed_and_a_stale_one_is_409(server: Server, people: str) -> None:
    """An approval, rejection or request for changes of a revision that moved on answers 409; nothing merges."""
    row_ids = _row_ids(server, people)
    cr_id = _edit_and_submit(
        server, people, {"set": [{"row_id": row_ids[2], "column": "score", "value": "1.5"}]}, "revision check"
    )
    with server.client("ap") as c:
        first = c.get(f"/api/v1/change-requests/{cr_id}").json()
        assert first["revision"] == 1 and len(first["digest"]) == 64
        asked = c.post(
            f"/api/v1/change-requests/{cr_id}/request-changes",
            json={"reason": "one more", "revision": 1, "digest": first["digest"]},
        )
        assert asked.status_code == 200, asked.text
    with server.client("ed") as c:  # the author edits the request's session again and revises
        edited = c.post(
            f"/api/v1/projects/demo/datasets/{people}/edits",
            json={"set": [{"row_id": row_ids[2], "column": "score", "value": "2.5"}]},
        )
        assert edited.status_code == 200, edited.text
        revised = c.post(f"/api/v1/change-requests/{cr_id}/revise")
        assert revised.status_code == 200 and revised.json()["revision"] == 2, revised.text
    with server.client("ap") as c:
        second = c.get(f"/api/v1/change-requests/{cr_id}").json()
        assert second["digest"] != first["digest"]
        stale = f"change request {cr_id} is at revision 2 now, not revision 1 that you reviewed"
        for path, body in (
            ("approve", {"revision": 1}),
            ("reject", {"reason": "no", "revision": 1}),
            ("request-changes", {"reason": "again", "revision": 1}),
        ):
            refused = c.post(f"/api/v1/change-requests/{cr_id}/{path}", json=body)
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"]["type"] == "conflict"
            assert refused.json()["error"]["message"].startswith(stale), refused.text
        wrong = c.post(f"/api/v1/change-requests/{cr_id}/approve", json={"revision": 2, "digest": first["digest"]})
        assert wrong.status_code == 409 and "staged again" in wrong.json()["error"]["message"], wrong.text
        assert _merge_commits(server, people, cr_id) == 0
        approved = c.post(f"/api/v1/change-requests/{cr_id}/approve", json={"revision": 2, "digest": second["digest"]})
    assert approved.status_code == 200, approved.text
    assert (approved.json()["state"], approved.json()["revision"]) == ("merged", 2)
    assert _merge_commits(server, people, cr_id) == 1


# ---------------------------------------------------------------- rules


def test_rules_are_proposed_and_accepted_and_a_stewards_rule_is_kept(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _create(server, "ruled", _csv(8)).status_code == 201
    for name in ("DELTA_DATA_ROOT", "OREO_DATABASE_URL"):
        monkeypatch.setenv(name, server.env[name])
    get_settings.cache_clear()
    reset_catalogs()
    boss = auth.get_user(server.catalog, "boss")
    suite = datasets.dataset_rules(server.catalog, "demo", "ruled", actor=boss)
    number = next(n for n, e in enumerate(suite["expectations"], 1) if rules.rule_name(e) == "score:be_between")
    change = rules.RuleChange(severity="critical")
    suite = datasets.change_dataset_rule(server.catalog, "demo", "ruled", number, change, actor=boss)
    older = [e for e in suite["expectations"] if rules.rule_name(e) != "name:not_be_null"]
    datasets.set_dataset_rules(server.catalog, "demo", "ruled", {**suite, "expectations": older}, actor=boss)
    d = "/api/v1/projects/demo/datasets/ruled/rules"
    with server.client("ed") as c:
        proposal = c.get(f"{d}/proposal")
        assert proposal.status_code == 200, proposal.text
        _assert_error(c.post(f"{d}/accept", json={"all": True}), 403, "permission_denied")
    lines = {line["name"]: line for line in proposal.json()["rules"]}
    assert (lines["score:be_between"]["status"], lines["score:be_between"]["change"]) == (
        "kept",
        "kept: edited by boss",
    )
    assert lines["name:not_be_null"]["status"] == "new"
    with server.client("boss") as c:
        _assert_error(c.post(f"{d}/accept", json={}), 400, "invalid_input")
        _assert_error(c.post(f"{d}/accept", json={"rules": ["score:be_between"]}), 400, "invalid_input")
        done = c.post(f"{d}/accept", json={"all": True})
        assert done.status_code == 200, done.text
        assert [(a["name"], a["status"]) for a in done.json()["accepted"]] == [("name:not_be_null", "new")]
        assert [k["name"] for k in done.json()["kept"]] == ["score:be_between"]
        stored = c.get(d).json()["expectations"]
    score = next(e for e in stored if rules.rule_name(e) == "score:be_between")
    assert (score["severity"], rules.edited_by(score)) == ("critical", "boss")
    (event,) = audit.list_events(server.catalog, name="rules_accepted")
    assert (event.actor, event.dataset_id, event.details["kept"]) == ("boss", "ruled", ["score:be_between"])


# ---------------------------------------------------------------- issue 25 §6: what the API shows


def test_api_bodies_hold_no_server_paths_and_a_request_shows_its_description(server: Server, people: str) -> None:
    with server.client("boss") as c:
        listed = c.get("/api/v1/projects/demo/datasets").json()["datasets"]
        shown = c.get(f"/api/v1/projects/demo/datasets/{people}").json()
        cleaned = c.post("/api/v1/cleanup", json={"dry_run": True}).json()
    for doc in (*listed, shown, cleaned):
        assert "path" not in doc and "report" not in doc, doc
        assert str(server.data_root) not in json.dumps(doc), doc
    row_ids = _row_ids(server, people)
    with server.client("ed") as c:
        saved = c.post(
            f"/api/v1/projects/demo/datasets/{people}/edits",
            json={"set": [{"row_id": row_ids[11], "column": "name", "value": "described"}]},
        )
        submitted = c.post(
            f"/api/v1/projects/demo/datasets/{people}/change-requests",
            json={"session_id": saved.json()["session_id"], "title": "d", "description": "why:\nline two"},
        )
        assert submitted.status_code == 201, submitted.text
        cr_id = submitted.json()["cr_id"]
        assert c.get(f"/api/v1/change-requests/{cr_id}").json()["description"] == "why:\nline two"
        c.post(f"/api/v1/change-requests/{cr_id}/withdraw")


def test_a_refused_diff_names_the_api_parameters(server: Server, people: str) -> None:
    with server.client("ed") as c:
        refused = c.get(f"/api/v1/projects/demo/datasets/{people}/diff", params={"from": 1, "to": 1})
    _assert_error(refused, 400, "invalid_input")
    error = refused.json()["error"]
    assert error["field"] == "from" and "from (1)" in error["message"] and "to (1)" in error["message"]
    assert "--" not in error["message"]


def test_a_csv_export_neutralises_formula_text_unless_raw(server: Server) -> None:
    """Text a spreadsheet would run (=, +, -, @ first) gets a leading '; numbers stay numbers; raw=true opts out."""
    names = ["=1+1", "+SUM(A1)", "-x", "@cmd", "plain", "a=b", "-5"]  # "-5" is a plain number, no formula
    table = pa.table({"id": pa.array(range(1, 8), pa.int64()), "name": pa.array(names), "score": pa.array([-1.5] * 7)})
    sink = io.BytesIO()
    pacsv.write_csv(table, sink)
    assert _create(server, "formulas", sink.getvalue()).status_code == 201
    export = "/api/v1/projects/demo/datasets/formulas/export"
    with server.client("ed") as c:
        safe = pacsv.read_csv(io.BytesIO(c.get(export, params={"format": "csv"}).content)).to_pydict()
        raw = pacsv.read_csv(io.BytesIO(c.get(export, params={"format": "csv", "raw": "true"}).content)).to_pydict()
    by_id = dict(zip(safe["id"], safe["name"], strict=True))
    assert [by_id[i] for i in range(1, 8)] == ["'=1+1", "'+SUM(A1)", "'-x", "'@cmd", "plain", "a=b", "-5"]
    assert set(safe["score"]) == {-1.5}
    assert dict(zip(raw["id"], raw["name"], strict=True)) == dict(zip(range(1, 8), names, strict=True))


def test_a_short_retention_is_refused_in_the_apis_own_words(server: Server, people: str) -> None:
    """The refusal names the body's ``force`` field, not the CLI's ``--force``; nothing is vacuumed."""
    with server.client("boss") as c:
        refused = c.post(
            f"/api/v1/projects/demo/datasets/{people}/maintenance", json={"vacuum": True, "retain_hours": 2}
        )
    _assert_error(refused, 400, "invalid_input")
    message = refused.json()["error"]["message"]
    assert "set force to true to do it anyway" in message and "--" not in message, message
