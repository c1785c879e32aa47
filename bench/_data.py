"""Benchmark data: a private data root and catalog under ``bench/.data/``, built once.

``configure_environment`` must run before anything reads ``core.config.get_settings``
(it points the settings at ``bench/.data`` and clears the cached ones), so a benchmark
never touches the workspace in ``data/``. Tables are created through the product
(``create_project`` + ``create_dataset``) and reused by later runs.

``OREO_BENCH_DATA`` moves that folder (the tests use a temporary one; ``--cluster``
gives its cluster run ``bench/.data/cluster``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.storage import Location

DATA_DIR = Path(os.environ.get("OREO_BENCH_DATA") or Path(__file__).resolve().parent / ".data").absolute()
PROJECT = "bench"
READER = "bench_reader"


def configure_environment(*, cluster: bool = False) -> None:
    """Point Oreo's settings at ``bench/.data`` (overriding any workspace settings).

    With ``cluster`` the catalog is the one ``OREO_DATABASE_URL`` names (the cluster's
    PostgreSQL) and Spark the one ``SPARK_REMOTE`` names; only the data root is the bench's.

    Raises:
        RuntimeError: ``cluster`` without ``SPARK_REMOTE`` and ``OREO_DATABASE_URL`` set.
    """
    # A cluster run on S3 (``--cluster --s3``) keeps its tables in the cluster's bucket.
    os.environ["DELTA_DATA_ROOT"] = os.environ.get("OREO_BENCH_DATA_ROOT") or str(DATA_DIR / "delta")
    if cluster:
        missing = [name for name in ("SPARK_REMOTE", "OREO_DATABASE_URL") if not os.environ.get(name)]
        if missing:
            raise RuntimeError(f"a cluster run needs {' and '.join(missing)} (from scripts/cluster.sh up)")
    else:
        os.environ["OREO_DATABASE_URL"] = f"sqlite:///{DATA_DIR / 'catalog.db'}"
    DATA_DIR.mkdir(parents=True, exist_ok=True)

    from core.catalog import reset_catalogs
    from core.config import get_settings

    get_settings.cache_clear()
    reset_catalogs()


@dataclass(frozen=True)
class BenchTable:
    """A main table made for the benchmark, and who reads it."""

    project_id: str
    dataset_id: str
    rows: int
    path: Location  # a Path, or an ObjectPath when the data root is s3://
    created_in_s: float | None  # None when an earlier run made it


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def ensure_reader() -> None:
    """An editor of the bench project without site-admin rights, so reads pay the real permission check."""
    from core import auth, projects
    from core.catalog import ProjectRow, open_catalog
    from core.errors import NotFound

    catalog = open_catalog()
    with catalog.session() as s:
        has_project = s.get(ProjectRow, PROJECT) is not None
    if not has_project:
        _forget_orphans()
        projects.create_project(catalog, PROJECT, name="Benchmarks")
    try:
        auth.get_user(catalog, READER)
    except NotFound:
        auth.create_user(catalog, READER, display_name="Benchmark reader")
    if auth.role_in(catalog, auth.get_user(catalog, READER), PROJECT) is None:
        auth.add_member(catalog, PROJECT, READER, auth.Role.EDITOR)


def _forget_orphans() -> None:
    """Remove the bench project's tables left by a catalog that is gone.

    A cluster started afresh has an empty PostgreSQL catalog, while its data root under
    ``bench/.data/cluster`` keeps the tables an earlier cluster's catalog listed; the
    bench builds them again rather than trip over folders no catalog knows.
    """
    import shutil

    from core.config import get_settings
    from core.layout import project_root

    project_dir = project_root(get_settings().data_root, PROJECT)
    # (Only on the local disk: a cluster's bucket starts empty and goes with its catalog.)
    if isinstance(project_dir, Path) and project_dir.is_dir() and DATA_DIR in project_dir.parents:
        _log(f"the catalog has no {PROJECT!r} project: removing its old tables under {project_dir}")
        shutil.rmtree(project_dir)


def ensure_customers(rows: int) -> BenchTable:
    """The ``customers_<rows>`` dataset (``core.demo.customers_table``, key ``customer_id``).

    Reused when the catalog has it and its ``_delta_log`` exists; otherwise written by
    Spark through ``core.datasets.create_dataset`` (starts Spark, ~1 min for 1M rows).

    Raises:
        RuntimeError: The catalog and the folders disagree (remove ``bench/.data``).
    """
    import pyarrow.parquet as pq

    from core import datasets
    from core.catalog import DatasetRow, open_catalog
    from core.demo import customers_table

    ensure_reader()
    catalog = open_catalog()
    dataset_id = f"customers_{rows}"
    layout = datasets.layout_for(PROJECT, dataset_id)
    with catalog.session() as s:
        known = s.get(DatasetRow, (PROJECT, dataset_id)) is not None
    if known:
        if not (layout.main / "_delta_log").is_dir():
            raise RuntimeError(f"the catalog lists {PROJECT}/{dataset_id} but {layout.main} is gone; rm -rf {DATA_DIR}")
        return BenchTable(PROJECT, dataset_id, rows, layout.main, None)

    _log(f"creating {PROJECT}/{dataset_id} ({rows:,} rows) under {DATA_DIR}; later runs reuse it")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="oreo-bench-") as tmp:
        source = Path(tmp) / "customers.parquet"
        pq.write_table(customers_table(rows), source)
        with _upload_limit_at_least(source.stat().st_size):
            info = datasets.create_dataset(catalog, PROJECT, dataset_id, source, key="customer_id")
    elapsed = time.perf_counter() - start
    _log(f"created {info.rows:,} rows at version {info.version} in {elapsed:.1f} s")
    return BenchTable(PROJECT, dataset_id, rows, layout.main, elapsed)


BIG_ROWS = 10_000_000


def ensure_big_customers() -> BenchTable:
    """The 10,000,000-row ``customers_10000000`` dataset, made like the 1M one (one Spark CTAS).

    The first run generates the rows with numpy/pyarrow (~1 min) and has Spark write them
    through ``create_dataset`` (several minutes on 2 cores); later runs reuse it (~1 GB).
    """
    return ensure_customers(BIG_ROWS)


@contextmanager
def _upload_limit_at_least(size_bytes: int) -> Iterator[None]:
    """Raise ``OREO_MAX_UPLOAD_MB`` to fit a generated bench file for one create, then restore it."""
    from core.config import get_settings

    needed_mb = size_bytes // (1024 * 1024) + 1
    if needed_mb <= get_settings().max_upload_mb:
        yield
        return
    before = os.environ.get("OREO_MAX_UPLOAD_MB")
    os.environ["OREO_MAX_UPLOAD_MB"] = str(needed_mb)
    get_settings.cache_clear()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OREO_MAX_UPLOAD_MB", None)
        else:
            os.environ["OREO_MAX_UPLOAD_MB"] = before
        get_settings.cache_clear()


APPROVER = "bench_approver"


def ensure_approver() -> None:
    """An approver of the bench project (the editor ``READER`` cannot approve its own requests)."""
    from core import auth
    from core.catalog import open_catalog
    from core.errors import NotFound

    ensure_reader()
    catalog = open_catalog()
    try:
        auth.get_user(catalog, APPROVER)
    except NotFound:
        auth.create_user(catalog, APPROVER, display_name="Benchmark approver")
    if auth.role_in(catalog, auth.get_user(catalog, APPROVER), PROJECT) is None:
        auth.add_member(catalog, PROJECT, APPROVER, auth.Role.APPROVER)


ADMIN = "bench_admin"


def ensure_admin() -> None:
    """An admin of the bench project (restores need the admin role)."""
    from core import auth
    from core.catalog import open_catalog
    from core.errors import NotFound

    ensure_reader()
    catalog = open_catalog()
    try:
        auth.get_user(catalog, ADMIN)
    except NotFound:
        auth.create_user(catalog, ADMIN, display_name="Benchmark admin")
    if auth.role_in(catalog, auth.get_user(catalog, ADMIN), PROJECT) is None:
        auth.add_member(catalog, PROJECT, ADMIN, auth.Role.ADMIN)
