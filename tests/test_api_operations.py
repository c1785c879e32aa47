"""Async API operations and Idempotency-Keys: their heartbeats, and a lost process's call ending as failed."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from api import jobs
from core import auth
from core.catalog import Catalog, IdempotencyKeyRow, OperationRow, utcnow
from core.errors import ConflictError, NotFound


@pytest.fixture
def ed(catalog: Catalog) -> auth.User:
    user, _ = auth.create_user(catalog, "ed", password="not-a-common-password")
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
    other, _ = auth.create_user(catalog, "ap", password="not-a-common-password")
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


# ---------------------------------------------------------------- Idempotency-Key heartbeats


def _key_claimed(catalog: Catalog, user: auth.User, *, beat_ago: timedelta) -> str:
    fingerprint = jobs.request_hash("POST", "/api/v1/change-requests/cr1/approve", {})
    assert jobs.claim_key(catalog, user, "approve-cr1", fingerprint) is None
    with catalog.session() as s:
        row = s.get(IdempotencyKeyRow, (f"user:{user.username}", "approve-cr1"))
        assert row is not None and row.heartbeat_at is not None and row.status is None
        row.heartbeat_at = utcnow() - beat_ago
    return fingerprint


def test_a_retry_while_the_first_call_beats_is_told_it_is_still_running(catalog: Catalog, ed: auth.User) -> None:
    fingerprint = _key_claimed(catalog, ed, beat_ago=timedelta(seconds=3))
    with pytest.raises(ConflictError, match="still running"):
        jobs.claim_key(catalog, ed, "approve-cr1", fingerprint)


def test_a_retry_after_the_first_calls_process_died_is_told_it_was_lost(catalog: Catalog, ed: auth.User) -> None:
    fingerprint = _key_claimed(catalog, ed, beat_ago=timedelta(minutes=5))
    with pytest.raises(ConflictError, match="stopped before it finished") as lost:
        jobs.claim_key(catalog, ed, "approve-cr1", fingerprint)
    assert "may or may not have acted" in str(lost.value) and "new key" in str(lost.value)
    with pytest.raises(ConflictError, match="different request"):  # a reuse for another call is still refused
        jobs.claim_key(catalog, ed, "approve-cr1", jobs.request_hash("POST", "/other", {}))
    assert jobs.claim_key(catalog, ed, "approve-cr1-again", fingerprint) is None  # a new key acts


def test_the_first_call_keeps_its_keys_heartbeat_fresh(
    catalog: Catalog, ed: auth.User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "HEARTBEAT", timedelta(seconds=0.05))
    _key_claimed(catalog, ed, beat_ago=timedelta(minutes=5))  # as if it had been quiet for long
    key = (f"user:{ed.username}", "approve-cr1")
    deadline = time.monotonic() + 20
    with jobs.key_kept_alive(catalog, ed, "approve-cr1"):
        fresh = False
        while not fresh and time.monotonic() < deadline:
            time.sleep(0.05)
            with catalog.session() as s:
                row = s.get(IdempotencyKeyRow, key)
                assert row is not None and row.heartbeat_at is not None
                fresh = utcnow() - row.heartbeat_at < timedelta(seconds=10)
    assert fresh
    jobs.settle_key(catalog, ed, "approve-cr1", jobs.Answer(200, {"state": "merged"}, {}))
    with catalog.session() as s:
        settled = s.get(IdempotencyKeyRow, key)
        assert settled is not None
        beat = settled.heartbeat_at
    with jobs.key_kept_alive(catalog, ed, "approve-cr1"):  # a settled key is not touched again
        time.sleep(0.3)
    with catalog.session() as s:
        row = s.get(IdempotencyKeyRow, key)
        assert row is not None and row.heartbeat_at == beat
