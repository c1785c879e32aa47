"""Faults survived: the catalog going down mid-approval, and a disk filling up under staging and exports."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli import context
from core import auth, change_requests, engine, history, merge, projects, sessions
from core.audit import list_events
from core.catalog import Catalog, ChangeRequestRow, open_catalog, reset_catalogs
from core.change_requests import CRState
from core.config import get_settings
from core.datasets import create_dataset, get_dataset
from core.errors import CatalogUnavailable, OutOfSpace
from core.sessions import DeleteRow, SetCell
from tests import merge_support as ms
from tests.pgserver import _as_postgres, _bin, postgres_cluster
from tests.test_cli import assert_one_error_line, run

pytestmark = pytest.mark.spark

OPS = [SetCell("2", "name", "renamed"), SetCell("3", "qty", "-1"), DeleteRow("6")]


# ---------------------------------------------------------------- the catalog goes down


@dataclass
class Postgres:
    """A PostgreSQL cluster of this module's own, which tests stop and start again."""

    base: Path
    port: int

    @property
    def data(self) -> Path:
        return self.base / "pgdata"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://oreo@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        name = f"oreo_{uuid.uuid4().hex[:12]}"
        subprocess.run(
            [_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "oreo", name],
            check=True,
            capture_output=True,
        )
        return name

    def stop(self) -> None:
        subprocess.run(
            _as_postgres([_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]),
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1"
        command = [_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.base / "server.log"), "-w", "-t", "60"]
        subprocess.run(_as_postgres([*command, "-o", options, "start"]), check=True, capture_output=True)

    def running(self) -> bool:
        ready = subprocess.run([_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True)
        return ready.returncode == 0


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    base = Path("/tmp") / f"oreo-pg-faults-{os.getpid()}"
    with postgres_cluster(base) as url:
        yield Postgres(base=base, port=int(url.rsplit(":", 1)[1].split("/", 1)[0]))
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def on_postgres(
    spark, postgres: Postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> Iterator[Catalog]:
    """demo/nums (8 rows) with a data root under tmp_path and its catalog in a fresh PostgreSQL database."""
    if not postgres.running():
        postgres.start()  # a failed test may have left it stopped
    ms.switch(
        {"DELTA_DATA_ROOT": str(tmp_path / "delta"), "OREO_DATABASE_URL": postgres.url(postgres.create_database())},
        monkeypatch,
    )
    catalog = open_catalog()
    projects.create_project(catalog, ms.PROJECT)
    for name in ("ed", "al"):
        auth.create_user(catalog, name, password=f"{name}-password-1")
        role = auth.Role.EDITOR if name == "ed" else auth.Role.APPROVER
        auth.add_member(catalog, ms.PROJECT, name, role)
    source = tmp_path / "nums.csv"
    rows = ["id,name,qty,score"] + [f"{r['id']},{r['name']},{r['qty']},{r['score']}" for r in ms.BASE_ROWS.values()]
    source.write_text("\n".join(rows) + "\n")
    create_dataset(catalog, ms.PROJECT, ms.DATASET, source, key="id")
    context.state.json = False
    yield catalog
    context.state.json = False
    if not postgres.running():
        postgres.start()
    reset_catalogs()


def _stop_at(postgres: Postgres, step: str) -> Callable[[float, str], None]:
    """A progress callback that stops PostgreSQL when the approval reaches ``step``."""

    def progress(fraction: float, message: str) -> None:
        if message.startswith(step) and postgres.running():
            postgres.stop()

    return progress


def test_catalog_down_after_the_merge_commit_then_a_retry_finishes_the_bookkeeping(
    capsys: pytest.CaptureFixture[str], on_postgres: Catalog, postgres: Postgres
) -> None:
    catalog = on_postgres
    cr = ms.submit(catalog, "ed", OPS)
    al = ms.user(catalog, "al")

    with pytest.raises(CatalogUnavailable, match=r"the catalog at postgresql\+psycopg://\*\*\*@127.0.0.1:\d+/\w+ is"):
        merge.approve_change_request(catalog, cr.id, actor=al, progress=_stop_at(postgres, "Updating the catalog"))

    assert not postgres.running()
    assert [c.version for c in ms.merge_commits(cr.id)] == [1]  # the commit landed, its bookkeeping did not
    assert (ms.layout().staging(cr.id) / "_delta_log").is_dir()
    # While the catalog is down the CLI says so in one line, without a traceback.
    down = run(capsys, "cr", "approve", cr.id, "--as", "al")
    assert_one_error_line(down, r"^error: the catalog at \S+ is unavailable: .*try again once it is back")

    postgres.start()
    assert merge.approval_state(catalog, cr.id, actor=al) == merge.ApprovalState("landed", 1)
    again = run(capsys, "--json", "cr", "approve", cr.id, "--as", "al")

    assert again.code == 0, again.err
    assert (again.json()["state"], again.json()["version"]) == ("merged", 1)
    assert [c.version for c in ms.merge_commits(cr.id)] == [1]  # exactly one MERGE for the cr_id
    assert ms.log_versions() == 1
    dataset = get_dataset(catalog, ms.PROJECT, ms.DATASET, actor=al)
    assert (dataset.version, dataset.rows) == (1, len(ms.BASE_ROWS) - 1)
    assert not ms.layout().staging(cr.id).exists()
    merged_events = [e for e in list_events(catalog, name="cr_merged") if e.details["cr_id"] == cr.id]
    assert len(merged_events) == 1


def test_catalog_down_before_the_conflict_check_changes_nothing(
    capsys: pytest.CaptureFixture[str], on_postgres: Catalog, postgres: Postgres
) -> None:
    catalog = on_postgres
    cr = ms.submit(catalog, "ed", OPS)
    al = ms.user(catalog, "al")
    before = ms.main_frame()

    with pytest.raises(CatalogUnavailable, match="is unavailable"):
        merge.approve_change_request(
            catalog, cr.id, actor=al, progress=_stop_at(postgres, "Looking for conflicts")
        )

    postgres.start()
    assert ms.log_versions() == 0
    ms.assert_frame_equal(ms.main_frame(), before)
    record = change_requests.get_change_request(catalog, cr.id, actor=al)
    assert (record.state, record.merged_version) == (CRState.OPEN, None)
    assert (ms.layout().staging(cr.id) / "_delta_log").is_dir()
    assert get_dataset(catalog, ms.PROJECT, ms.DATASET, actor=al).version == 0
    assert merge.approval_state(catalog, cr.id, actor=al) == merge.ApprovalState("none")

    merged = merge.approve_change_request(catalog, cr.id, actor=al)
    assert (merged.state, merged.merged_version) == (CRState.MERGED, 1)
    assert [c.version for c in ms.merge_commits(cr.id)] == [1]


# ---------------------------------------------------------------- the disk fills up


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return ms.make_pristine(tmp_path_factory.mktemp("faults") / "pristine")


@dataclass
class SmallDisk:
    """The data root on a small filesystem of its own (tmpfs), or None where mounting is not allowed."""

    mount: Path | None

    def fill(self) -> None:
        """Write a filler file until the filesystem is full."""
        assert self.mount is not None
        fd = os.open(self.mount / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for chunk in (1 << 20, 4096, 1):
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * chunk)
        finally:
            os.close(fd)

    def free(self) -> None:
        assert self.mount is not None
        (self.mount / "filler").unlink()


def _mount_tmpfs(target: Path) -> bool:
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(target)], capture_output=True)
    return done.returncode == 0


@pytest.fixture
def small_disk(
    pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[SmallDisk, Catalog]]:
    """demo/nums copied onto a 96 MB tmpfs as the data root (the catalog stays off it)."""
    target = tmp_path / "small"
    mounted = _mount_tmpfs(target)
    shutil.copytree(pristine / "delta", target / "delta")
    shutil.copy2(pristine / "catalog.db", tmp_path / "catalog.db")
    ms.switch(
        {"DELTA_DATA_ROOT": str(target / "delta"), "OREO_DATABASE_URL": f"sqlite:///{tmp_path / 'catalog.db'}"},
        monkeypatch,
    )
    yield SmallDisk(target if mounted else None), open_catalog()
    reset_catalogs()
    get_settings.cache_clear()
    if mounted:
        subprocess.run(["umount", "-l", str(target)], check=True)


def _simulate_full_disk_in_spark_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no filesystem can be mounted: every Spark save writes its files, then fails as a full disk would."""
    from pyspark.sql.readwriter import DataFrameWriter

    real_save = DataFrameWriter.save

    def save(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        real_save(self, *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DataFrameWriter, "save", save)


def test_a_submit_that_runs_out_of_space_leaves_nothing_and_can_be_retried(
    small_disk: tuple[SmallDisk, Catalog], monkeypatch: pytest.MonkeyPatch
) -> None:
    disk, catalog = small_disk
    ed = ms.user(catalog, "ed")
    session = sessions.open_session(catalog, ms.PROJECT, ms.DATASET, actor=ed)
    sessions.apply_edits(catalog, session.session_id, OPS, actor=ed)
    before, version_before = ms.main_frame(), ms.log_versions()
    if disk.mount is not None:
        disk.fill()
    else:
        _simulate_full_disk_in_spark_writes(monkeypatch)

    with pytest.raises(OutOfSpace, match=r"^no space left on the device holding \S+/staging/cr_\w+ while writing the"):
        change_requests.submit_change_request(catalog, session.session_id, actor=ed, title="too big")

    staging = ms.layout().root / "staging"
    assert not staging.exists() or not any(staging.iterdir())
    with catalog.session() as s:
        assert s.query(ChangeRequestRow).count() == 0
    assert ms.log_versions() == version_before
    ms.assert_frame_equal(ms.main_frame(), before)
    assert sessions.get_session(catalog, session.session_id, actor=ed).state == "open"

    if disk.mount is not None:
        disk.free()
    else:
        monkeypatch.undo()
    cr = change_requests.submit_change_request(catalog, session.session_id, actor=ed, title="fits now")
    assert (ms.layout().staging(cr.id) / "_delta_log").is_dir()


def test_an_export_that_runs_out_of_space_leaves_no_file(
    small_disk: tuple[SmallDisk, Catalog], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    disk, catalog = small_disk
    folder = (disk.mount or ms.layout().root.parent) / "exports"
    folder.mkdir()
    out = folder / "nums.csv"
    if disk.mount is not None:
        disk.fill()
    else:

        def replace(source: str, target: str) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(history.os, "replace", replace)

    with pytest.raises(OutOfSpace, match=r"^no space left on the device holding \S+nums.csv while writing the export"):
        history.export_version(catalog, ms.PROJECT, ms.DATASET, out, actor=auth.SYSTEM)
    assert list(folder.iterdir()) == []

    result = run(capsys, "export", ms.PROJECT, ms.DATASET, "--out", str(out))
    assert_one_error_line(result, r"^error: no space left on the device holding .*free some space")
    assert list(folder.iterdir()) == []
    assert ms.log_versions() == 0
    assert engine.latest_version(ms.layout().main) == 0
