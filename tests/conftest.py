"""Shared fixtures: one local Spark per test session, a fresh data root and catalog per test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings


@pytest.fixture(autouse=True)
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own DELTA_DATA_ROOT and SQLite catalog under tmp_path."""
    root = tmp_path / "delta"
    monkeypatch.setenv("DELTA_DATA_ROOT", str(root))
    monkeypatch.setenv("OREO_DATABASE_URL", f"sqlite:///{tmp_path / 'catalog.db'}")
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    get_settings.cache_clear()
    reset_catalogs()
    yield root
    reset_catalogs()
    get_settings.cache_clear()


@pytest.fixture
def catalog(data_root: Path) -> Catalog:
    return open_catalog()


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """The process-wide local Spark session with the Delta extension (UI off, 2 shuffle partitions)."""
    import os

    os.environ.setdefault("OREO_SPARK_SHUFFLE_PARTITIONS", "2")
    from core.engine import get_spark, stop_spark

    get_settings.cache_clear()
    session = get_spark()
    yield session
    stop_spark()


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL server (Debian binaries) for the catalog, started once per session."""
    from tests.pgserver import postgres_cluster

    base = Path("/tmp") / f"oreo-pg-{os.getpid()}"
    with postgres_cluster(base) as url:
        yield url
    shutil.rmtree(base, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/e2e drives a browser: it carries the ``e2e`` marker (``make test-fast`` leaves it out)."""
    for item in items:
        if "e2e" in Path(str(item.path)).relative_to(Path(__file__).parent).parts[:1]:
            item.add_marker(pytest.mark.e2e)
