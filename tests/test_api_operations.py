"""Async API operations: their heartbeat, and a lost process's operation ending as failed."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from api import jobs
from core import auth
from core.catalog import Catalog, OperationRow, utcnow
from core.errors import NotFound


@pytest.fixture
def ed(catalog: Catalog) -> auth.User:
    user, _ = auth.create_user(catalog, "ed", password="password123")
    return user


def _running(catalog: Catalog, user: auth.User, *, beat_ago: timedelta | None) -> str:
    with catalog.session() as s:
        s.add(
            OperationRow(
                id="op1",
                kind="restore",
                token_id="-",
                username=user.username,
                state="running",
                created_at=utcnow() - timedelta(hours=1),
                heartbeat_at=None if beat_ago is None else utcnow() - beat_ago,
            )
        )
    return "op1"


def test_a_running_operation_with_a_fresh_heartbeat_stays_running(catalog: Catalog, ed: auth.User) -> None:
    op_id = _running(catalog, ed, beat_ago=timedelta(seconds=3))
    doc = jobs.operation_document(catalog, op_id, ed)
    assert doc["state"] == "running" and doc["status"] is None and "error" not in doc


@pytest.mark.parametrize("beat_ago", [timedelta(minutes=5), None], ids=["stale heartbeat", "never beat"])
def test_an_operation_whose_process_died_is_reported_failed(
    catalog: Catalog, ed: auth.User, beat_ago: timedelta | None
) -> None:
    op_id = _running(catalog, ed, beat_ago=beat_ago)
    doc = jobs.operation_document(catalog, op_id, ed)
    assert doc["state"] == "failed" and doc["status"] == 500
    assert doc["error"]["type"] == "operation_lost"
    assert "stopped before it finished" in doc["error"]["message"] and "retry" in doc["error"]["message"]
    assert jobs.operation_document(catalog, op_id, ed) == doc  # recorded, not recomputed differently
    with catalog.session() as s:
        row = s.get(OperationRow, op_id)
        assert row is not None and row.state == "failed" and row.finished_at is not None


def test_someone_else_cannot_see_the_operation(catalog: Catalog, ed: auth.User) -> None:
    op_id = _running(catalog, ed, beat_ago=timedelta(seconds=1))
    other, _ = auth.create_user(catalog, "ap", password="password123")
    with pytest.raises(NotFound, match="unknown operation"):
        jobs.operation_document(catalog, op_id, other)


def test_the_running_process_keeps_the_heartbeat_fresh(
    catalog: Catalog, ed: auth.User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "HEARTBEAT", timedelta(seconds=0.05))
    release = threading.Event()

    def work() -> tuple[int, dict[str, Any]]:
        release.wait(30)
        return 200, {"done": True}

    answer = jobs.start_operation(catalog, ed, "restore", work)
    op_id = answer.body["id"]
    with catalog.session() as s:
        row = s.get(OperationRow, op_id)
        assert row is not None and row.heartbeat_at is not None
        first = row.heartbeat_at
    deadline = time.monotonic() + 20
    beat = first
    while beat == first and time.monotonic() < deadline:
        time.sleep(0.1)
        with catalog.session() as s:
            row = s.get(OperationRow, op_id)
            assert row is not None
            beat = row.heartbeat_at
    assert beat is not None and beat > first
    release.set()
    while jobs.operation_document(catalog, op_id, ed)["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    doc = jobs.operation_document(catalog, op_id, ed)
    assert doc["state"] == "succeeded" and doc["result"] == {"done": True}
