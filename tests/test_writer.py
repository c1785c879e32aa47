"""The writer lease: a restore and a merge of one table never overlap."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from core import history, merge, writer
from core.catalog import Catalog, DatasetRow, open_catalog, utcnow
from core.config import get_settings
from core.errors import ConflictError
from core.sessions import SetCell
from tests import merge_support as ms

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return ms.make_pristine(tmp_path_factory.mktemp("writer") / "pristine")


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    ms.switch(ms.fresh_copy(pristine, tmp_path), monkeypatch)
    yield open_catalog()


def _short_wait(monkeypatch: pytest.MonkeyPatch, seconds: int = 1) -> None:
    monkeypatch.setenv("OREO_WRITER_WAIT_S", str(seconds))
    get_settings.cache_clear()


def _lease(catalog: Catalog) -> tuple[str | None, Any]:
    with catalog.session() as s:
        row = s.get(DatasetRow, (ms.PROJECT, ms.DATASET))
        assert row is not None
        return row.writer, row.writer_until


def test_a_restore_waits_for_a_running_merge_and_lands_after_it(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core import auth

    _make_admin(catalog)
    first = ms.submit(catalog, "ed", [SetCell("1", "name", "first")])
    merge.approve_change_request(catalog, first.id, actor=ms.user(catalog, "al"))  # v1
    second = ms.submit(catalog, "ed2", [SetCell("2", "name", "second")])
    restored: list[history.RestoreResult] = []

    def run_restore() -> None:
        c = open_catalog()
        restored.append(
            history.restore_version(c, ms.PROJECT, ms.DATASET, 0, actor=auth.get_user(c, "admin"), reason="undo")
        )

    worker = threading.Thread(target=run_restore)
    merge_once = merge._merge_once
    seen_during_merge: list[tuple[bool, int]] = []

    def restore_while_merging(*args: Any, **kwargs: Any) -> None:
        # An admin restores v0 while this MERGE holds the lease, between its check and commit.
        worker.start()
        worker.join(timeout=5)
        seen_during_merge.append((worker.is_alive(), ms.log_versions()))
        merge_once(*args, **kwargs)

    monkeypatch.setattr(merge, "_merge_once", restore_while_merging)
    merged = merge.approve_change_request(catalog, second.id, actor=ms.user(catalog, "al2"))
    worker.join(timeout=600)

    assert seen_during_merge == [(True, 1)]  # the restore was waiting, nothing committed
    assert merged.merged_version == 2
    assert [(r.restored_to, r.version) for r in restored] == [(0, 3)]
    assert ms.main_frame().set_index("row_id").loc["2", "name"] == "name 2"  # the restore came last
    assert _lease(catalog) == (None, None)


def _make_admin(catalog: Catalog) -> None:
    from core import auth

    auth.create_user(catalog, "admin", password="admin-password-1")
    auth.add_member(catalog, ms.PROJECT, "admin", auth.Role.ADMIN)


def test_a_busy_table_refuses_after_the_wait_naming_the_holder(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    _short_wait(monkeypatch)
    first = ms.submit(catalog, "ed", [SetCell("1", "name", "first")])
    merge.approve_change_request(catalog, first.id, actor=ms.user(catalog, "al"))  # v1: v0 is restorable
    cr = ms.submit(catalog, "ed2", [SetCell("2", "name", "blocked")])
    _make_admin(catalog)
    from core import auth

    with writer.writing(catalog, ms.PROJECT, ms.DATASET, what="a long job"):
        with pytest.raises(ConflictError, match=r"demo/nums is busy: a long job by .* is writing to it"):
            merge.approve_change_request(catalog, cr.id, actor=ms.user(catalog, "al"))
        with pytest.raises(ConflictError, match=r"demo/nums is busy: a long job by"):
            history.restore_version(
                catalog, ms.PROJECT, ms.DATASET, 0, actor=auth.get_user(catalog, "admin"), reason="x"
            )
        assert ms.log_versions() == 1

    assert _lease(catalog) == (None, None)
    assert merge.approve_change_request(catalog, cr.id, actor=ms.user(catalog, "al")).merged_version == 2


def test_a_crashed_holders_lease_lapses(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    _short_wait(monkeypatch)
    with catalog.session() as s:
        row = s.get(DatasetRow, (ms.PROJECT, ms.DATASET))
        assert row is not None
        row.writer, row.writer_until = "a merge by a dead process", utcnow() - timedelta(seconds=1)

    with writer.writing(catalog, ms.PROJECT, ms.DATASET, what="the next writer"):
        holder, _ = _lease(catalog)
        assert holder is not None and holder.startswith("the next writer by ")

    assert _lease(catalog) == (None, None)


def test_the_lease_is_released_when_the_work_fails(catalog: Catalog) -> None:
    with pytest.raises(RuntimeError, match="boom"), writer.writing(catalog, ms.PROJECT, ms.DATASET, what="x"):
        raise RuntimeError("boom")

    assert _lease(catalog) == (None, None)


def _hold(catalog: Catalog, holder: str) -> None:
    with catalog.session() as s:
        row = s.get(DatasetRow, (ms.PROJECT, ms.DATASET))
        assert row is not None
        row.writer, row.writer_until = holder, utcnow() + timedelta(hours=1)


def test_a_holder_that_died_on_this_host_is_replaced_at_once(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import subprocess
    import sys

    _short_wait(monkeypatch)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _hold(catalog, f"the merge of cr_1 by {socket.gethostname()}:{int(gone.stdout)}:1:abcd1234")

    with writer.writing(catalog, ms.PROJECT, ms.DATASET, what="the retry"):
        holder, _ = _lease(catalog)
        assert holder is not None and holder.startswith("the retry by ")
    assert _lease(catalog) == (None, None)


@pytest.mark.parametrize("where", ["a live process here", "another host"])
def test_a_live_or_remote_holder_keeps_its_lease(
    where: str, catalog: Catalog, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import socket
    import subprocess
    import sys

    _short_wait(monkeypatch)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        host = socket.gethostname() if where == "a live process here" else f"not-{socket.gethostname()}"
        holder = f"the merge of cr_1 by {host}:{sleeper.pid}:1:abcd1234"
        _hold(catalog, holder)
        busy = pytest.raises(ConflictError, match="is busy: the merge of cr_1 by")
        with busy, writer.writing(catalog, ms.PROJECT, ms.DATASET, what="the retry"):
            pass
        assert _lease(catalog)[0] == holder
    finally:
        sleeper.kill()
        sleeper.wait()
