"""Prometheus metrics: a scripted core loop moves each counter by exactly its amount; the side port answers."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from core import (
    audit,
    change_requests,
    health,
    history,
    imports,
    maintenance,
    merge,
    metrics,
    notify,
    reads,
    sessions,
    sla,
)
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, OutboxRow, open_catalog, reset_catalogs
from core.config import get_settings
from core.errors import ConflictError, EngineError, PermissionDenied
from core.sessions import SetCell
from tests.merge_support import DATASET, PROJECT, env_for, fresh_copy, layout, make_pristine, submit, switch

pytestmark = pytest.mark.spark

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """demo/nums (8 rows) with editors, approvers and an admin ``ada``."""
    folder = make_pristine(tmp_path_factory.mktemp("metrics") / "pristine")
    with pytest.MonkeyPatch.context() as mp:
        switch(env_for(folder), mp)
        catalog = open_catalog()
        create_user(catalog, "ada", password="ada-password-1")
        add_member(catalog, PROJECT, "ada", Role.ADMIN)
        reset_catalogs()
    get_settings.cache_clear()
    return folder


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    yield open_catalog()


def scrape() -> Samples:
    """Every sample of ``render()``, parsed back, keyed by name and labels (the collector's cache dropped)."""
    health.refresh()
    samples: Samples = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_a_core_loop_moves_every_counter_by_its_amount(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")  # webhooks reach only public hosts otherwise
    get_settings.cache_clear()
    ada = get_user(catalog, "ada")
    # Port 9: nothing listens.
    notify.add_webhook(catalog, PROJECT, "http://127.0.0.1:9/hook", "s3cret-0123456789abcdef", actor=ada)
    start = scrape()
    assert value(start, "oreo_change_requests", state="open") == 0

    # Edits: two saves of 2 and 1 operations.
    ed = get_user(catalog, "ed")
    session = sessions.open_session(catalog, PROJECT, DATASET, actor=ed)
    sessions.apply_edits(catalog, session.session_id, [SetCell("2", "qty", "99"), SetCell("3", "name", "x")], actor=ed)
    sessions.apply_edits(catalog, session.session_id, [SetCell("4", "qty", "7")], actor=ed)
    after_edits = scrape()
    assert moved(start, after_edits, "oreo_edit_saves_total") == 2
    assert moved(start, after_edits, "oreo_edit_operations_total") == 3
    assert value(after_edits, "oreo_live_edit_bytes", project=PROJECT, dataset=DATASET) > 0

    # One page read.
    reads.read_page(layout().main, limit=5)
    after_read = scrape()
    assert moved(after_edits, after_read, "oreo_page_read_seconds_count") == 1
    assert moved(after_edits, after_read, "oreo_page_read_seconds_bucket", le="+Inf") == 1

    # Two submits, the second touching a cell of the first.
    first = change_requests.submit_change_request(catalog, session.session_id, actor=ed, title="first")
    second = submit(catalog, "ed2", [SetCell("2", "qty", "100")])
    submitted = scrape()
    for stage in ("staging", "checks"):
        assert moved(after_read, submitted, "oreo_stage_seconds_count", action="submit", stage=stage) == 2
    assert moved(after_read, submitted, "oreo_validation_runs_total", status="passed") == 2
    assert value(submitted, "oreo_change_requests", state="open") == 2
    assert value(submitted, "oreo_staging_bytes", project=PROJECT, dataset=DATASET) > 0
    assert value(submitted, "oreo_change_request_open_age_seconds_count") == 2
    assert 0 <= value(submitted, "oreo_change_request_oldest_open_age_seconds") < 3600

    # The author may not approve (refused); the first merges; the second then conflicts in one cell.
    with pytest.raises(PermissionDenied):
        merge.approve_change_request(catalog, first.id, actor=ed)
    merge.approve_change_request(catalog, first.id, actor=get_user(catalog, "al"))
    with pytest.raises(ConflictError):
        merge.approve_change_request(catalog, second.id, actor=get_user(catalog, "al"))
    approved = scrape()
    assert moved(submitted, approved, "oreo_approvals_total", outcome="refused") == 1
    assert moved(submitted, approved, "oreo_approvals_total", outcome="merged") == 1
    assert moved(submitted, approved, "oreo_approvals_total", outcome="conflict") == 1
    assert moved(submitted, approved, "oreo_approvals_total", outcome="failed") == 0
    assert moved(submitted, approved, "oreo_conflicts_total") == 1
    assert moved(submitted, approved, "oreo_conflict_cells_total") == 1
    assert moved(submitted, approved, "oreo_operation_duration_seconds_count", operation="merge", outcome="ok") == 1
    for stage in ("conflicts", "checks", "merge", "sync"):
        assert moved(submitted, approved, "oreo_stage_seconds_count", action="approve", stage=stage) == 1
    assert value(approved, "oreo_change_requests", state="merged") == 1
    assert value(approved, "oreo_change_requests", state="open") == 1

    # Restore, OPTIMIZE, VACUUM.
    history.restore_version(catalog, PROJECT, DATASET, 0, actor=ada, reason="metrics test")
    before_vacuum = datetime.now(UTC).timestamp()
    maintenance.maintain(catalog, PROJECT, DATASET, actor=ada, optimize=True, vacuum=True)
    maintained = scrape()
    runs = "oreo_operation_duration_seconds_count"
    for operation in ("restore", "optimize", "vacuum"):
        assert moved(approved, maintained, runs, operation=operation, outcome="ok") == 1
        assert moved(approved, maintained, runs, operation=operation, outcome="failed") == 0
    vacuumed = value(maintained, "oreo_last_vacuum_timestamp_seconds", project=PROJECT, dataset=DATASET)
    assert vacuumed >= before_vacuum - 1
    stats = maintenance.table_stats(catalog, PROJECT, DATASET, actor=ada)
    assert value(maintained, "oreo_table_files", project=PROJECT, dataset=DATASET) == stats.files
    assert value(maintained, "oreo_table_small_files", project=PROJECT, dataset=DATASET) == stats.small_files

    # An import of 3 rows.
    source = tmp_path / "more.csv"
    source.write_text("id,name,qty,score\n20,a,1,1.0\n21,b,2,2.0\n22,c,3,3.0\n")
    imports.import_file(catalog, PROJECT, DATASET, source, actor=ed)
    imported = scrape()
    assert moved(maintained, imported, "oreo_import_rows_written_total") == 3
    assert moved(maintained, imported, "oreo_import_write_seconds_total") > 0

    # The outbox: every queued webhook delivery fails (nothing listens), once each.
    with catalog.session() as s:
        pending = s.scalar(select(func.count()).select_from(OutboxRow).where(OutboxRow.state == "pending"))
    assert pending and value(imported, "oreo_notify_outbox_depth") == pending
    report = notify.drain(catalog)
    drained = scrape()
    assert len(report.failed) == pending
    assert moved(imported, drained, "oreo_notify_deliveries_total", channel="webhook", outcome="failed") == pending
    assert moved(imported, drained, "oreo_notify_deliveries_total", channel="webhook", outcome="sent") == 0


def test_a_failed_approval_and_a_failed_operation_are_counted_as_failed() -> None:
    before = scrape()

    @metrics.counts_approvals
    def approve() -> None:
        raise EngineError("Spark could not merge")

    with pytest.raises(EngineError):
        approve()
    with pytest.raises(EngineError), metrics.timed_operation("vacuum"):
        raise EngineError("VACUUM failed")
    after = scrape()
    assert moved(before, after, "oreo_approvals_total", outcome="failed") == 1
    assert moved(before, after, "oreo_operation_duration_seconds_count", operation="vacuum", outcome="failed") == 1
    assert moved(before, after, "oreo_operation_duration_seconds_count", operation="vacuum", outcome="ok") == 0
    assert sla.tallies(1).approvals == {"failed": 1}  # the Admin page's figure sees it too


def test_the_engine_gauges_say_up_once_spark_runs(spark) -> None:  # type: ignore[no-untyped-def]
    samples = scrape()
    assert value(samples, "oreo_engine_up") == 1
    assert value(samples, "oreo_engine_state", state="ready") == 1
    assert value(samples, "oreo_engine_state", state="failed") == 0


def test_the_side_port_answers_http_on_loopback() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served = metrics.serve(port=port, addr="127.0.0.1")
    assert served is not None
    assert metrics.serve(port=port, addr="127.0.0.1") == served  # once per process
    host, bound = served
    reads_before = value(scrape(), "oreo_page_read_seconds_sum")
    metrics.page_read(0.2)
    deadline = time.monotonic() + 10
    while True:
        response = httpx.get(f"http://{host}:{bound}/metrics", timeout=5)
        if response.status_code == 200 or time.monotonic() > deadline:
            break
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert "oreo_page_read_seconds" in families and "oreo_change_requests" in families
    served_sum = next(s.value for s in families["oreo_page_read_seconds"].samples if s.name.endswith("_sum"))
    assert served_sum == pytest.approx(reads_before + 0.2)


def test_a_bad_metrics_port_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OREO_METRICS_PORT", "ninety")
    with pytest.raises(Exception, match="OREO_METRICS_PORT must be a port number, got 'ninety'"):
        metrics.metrics_port()
    monkeypatch.setenv("OREO_METRICS_PORT", "0")
    assert metrics.metrics_port() == 0


def test_a_vacuum_run_that_deleted_nothing_still_counts_as_the_last_vacuum(catalog: Catalog) -> None:
    """Such a run commits nothing to the Delta log; its audit event says it ran (a failed one does not)."""
    created = value(scrape(), "oreo_last_vacuum_timestamp_seconds", project=PROJECT, dataset=DATASET)
    ran, later = datetime(2030, 1, 2, tzinfo=UTC), datetime(2030, 1, 3, tzinfo=UTC)

    def run(run_id: str, at: datetime, steps: list[str], error: str | None = None) -> None:
        with catalog.session() as s:
            event = maintenance.MaintenanceRun(
                actor="ada", project_id=PROJECT, dataset_id=DATASET, ts=at, run_id=run_id, steps=steps, error=error
            )
            audit.record(s, event)

    run("mnt_1", ran, ["retention", "vacuum"])
    run("mnt_2", later, ["retention", "vacuum"], error="catalog sync failed: the catalog is unavailable")
    run("mnt_3", later, ["retention", "optimize"])

    assert created < ran.timestamp()
    assert value(scrape(), "oreo_last_vacuum_timestamp_seconds", project=PROJECT, dataset=DATASET) == ran.timestamp()
