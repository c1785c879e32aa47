"""Page reads through the HTTP API with 50 concurrent clients, against core's read path in the same run.

* API: an ``oreo api`` server on loopback (started here, its Spark warm start off: a page
  read needs only DuckDB); each of 50 threads has its own httpx client and a token, and
  reads random pages with ``GET /api/v1/projects/bench/datasets/customers_N/rows``.
* core: ``core.datasets.dataset_rows`` in this process from 50 threads, the same shapes.

The paths alternate in rounds (api, core, api, ...), so load drift hits both. Targets
(issue 15 §3): the API's median at most 1.2x core's, and its p95 under 1 s.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench._data import PROJECT, READER, BenchTable, ensure_customers
from bench._harness import BenchConfig, Timing, WorkloadResult, expect
from bench.workloads.concurrent_readers import THREADS, _Run, _run_threads

NAME = "api_page_read"
SECONDS = 30.0  # per path
ROUNDS = 3
PAGE = 50
MAX_RATIO = 1.2
MAX_P95_MS = 1000.0
SHAPES: tuple[tuple[tuple[str, ...], str | None, bool], ...] = (
    ((), None, False),
    ((), "monthly_spend", True),
    (("plan = pro",), None, False),
    (("monthly_spend >= 100",), "orders", False),
)
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OREO_API_WARM_ENGINE": "0", "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "api", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        expect(server.poll() is None, "the API server exited")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.2)
    server.kill()
    raise AssertionError("the API server did not answer within 120 s")


def run(config: BenchConfig) -> WorkloadResult:
    """50 threads reading random pages through the API, then through core, alternating."""
    import httpx

    from core import auth, datasets, tokens
    from core.catalog import open_catalog
    from core.filters import parse_where

    table: BenchTable = ensure_customers(config.rows)
    catalog = open_catalog()
    reader = auth.get_user(catalog, READER)
    token = tokens.create_token(catalog, READER, project_id=PROJECT, expires_days=1)
    totals: dict[tuple[str, ...], int] = {}
    for wheres, _, _ in SHAPES:
        page = datasets.dataset_rows(
            catalog, PROJECT, table.dataset_id, actor=reader, conditions=[parse_where(w) for w in wheres], limit=1
        )
        expect(page.total > PAGE, f"only {page.total} rows match {wheres}")
        totals[wheres] = page.total

    def pick(rng: random.Random) -> tuple[tuple[str, ...], str | None, bool, int]:
        wheres, order_by, desc = rng.choice(SHAPES)
        return wheres, order_by, desc, rng.randrange(0, totals[wheres] - PAGE + 1)

    def core_read(rng: random.Random) -> object:
        wheres, order_by, desc, offset = pick(rng)
        page = datasets.dataset_rows(
            catalog, PROJECT, table.dataset_id, actor=reader, conditions=[parse_where(w) for w in wheres],
            order_by=order_by, descending=desc, limit=PAGE, offset=offset,
        )  # fmt: skip
        expect(len(page.rows) == PAGE, f"core returned {len(page.rows)} rows")
        return page

    port = _free_port()
    server = _start_server(port)
    clients = threading.local()
    opened: list[httpx.Client] = []
    path = f"/api/v1/projects/{PROJECT}/datasets/{table.dataset_id}/rows"

    def api_read(rng: random.Random) -> object:
        client = getattr(clients, "client", None)
        if client is None:
            client = clients.client = httpx.Client(
                base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token.secret}"}, timeout=60
            )
            opened.append(client)
        wheres, order_by, desc, offset = pick(rng)
        params: list[tuple[str, str | int]] = [("limit", PAGE), ("offset", offset), ("desc", str(desc).lower())]
        params += [("where", w) for w in wheres] + ([("order_by", order_by)] if order_by else [])
        answer = client.get(path, params=params)
        expect(answer.status_code == 200 and len(answer.json()["rows"]) == PAGE, f"API answered {answer.text[:200]}")
        return answer

    label_api, label_core = "api rows (HTTP, 50 clients)", "core dataset_rows (50 threads)"
    runs = {label_api: _Run(), label_core: _Run()}
    paths: dict[str, Callable[[random.Random], object]] = {label_api: api_read, label_core: core_read}
    try:
        for _ in range(2):  # warm both: the server's DuckDB and caches, and ours
            api_read(random.Random(1))
            core_read(random.Random(1))
        for round_no in range(ROUNDS):
            order = list(paths) if round_no % 2 == 0 else list(reversed(paths))
            for label in order:
                print(f"[bench] {NAME} round {round_no + 1}/{ROUNDS}: {label}", file=sys.stderr, flush=True)
                _run_threads(paths[label], SECONDS / ROUNDS, seed=round_no, into=runs[label])
    finally:
        for client in opened:
            client.close()
        server.terminate()
        server.wait(timeout=30)
        tokens.revoke_token(catalog, token.token.id)
    for label, r in runs.items():
        expect(bool(r.latencies_ms), f"{label} completed no read")
        expect(not r.errors, f"{label}: {len(r.errors)} failed read(s), e.g. {r.errors[:1]}")
    return WorkloadResult(
        name=NAME,
        description=f"a {PAGE}-row page through the HTTP API with {THREADS} concurrent clients vs core in-process",
        core=Timing(label=label_api, samples_ms=tuple(runs[label_api].latencies_ms)),
        baselines=[Timing(label=label_core, samples_ms=tuple(runs[label_core].latencies_ms))],
        ratio_baseline=label_core,
        max_ratio=MAX_RATIO,
        max_p95_ms=MAX_P95_MS,
        notes={
            "table": f"{table.project_id}/{table.dataset_id}, {table.rows:,} rows",
            "api reads/s": f"{runs[label_api].reads_per_s:.1f}",
            "core reads/s": f"{runs[label_core].reads_per_s:.1f}",
        },
    )
