"""Shared fixtures: one local Spark per test session, a fresh data root and catalog per test."""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.nodeid import coerce_node_id
from argon2 import PasswordHasher
from streamlit.components.v2 import manifest_scanner
from streamlit.runtime.scriptrunner.script_cache import ScriptCache
from streamlit.testing.v1 import app_test, local_script_runner

from core import auth, engine, reactions, tokens
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from tests import cluster_support, jvm_options

E2E = Path(__file__).parent / "e2e"

# Every short-lived JVM the suite starts runs with the client compiler only (tests/jvm_options.py);
# this process's own JVM and the servers' keep both (see _both_compilers_here and long_lived).
# Every one collects garbage with the serial collector (jvm_options.SERIAL_GC).
os.environ.setdefault(jvm_options.SUBMIT_OPTS, jvm_options.QUICK_JIT)  # spark-submit: the CLI's drivers
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", jvm_options.QUICK_JIT)  # the standalone master and workers
# Every embedded driver the suite starts (this process's, the CLI's, a server's) evaluates expressions interpreted.
os.environ.setdefault(jvm_options.PYSPARK_SUBMIT_ARGS, jvm_options.interpreted_submit_args())
# This process's Spark, whichever test starts it (a browser test's set-up runs the CLI here).
os.environ.setdefault("OREO_SPARK_SHUFFLE_PARTITIONS", "2")
# No warm-up MERGEs at an engine start, not the product's 3: the suite's servers share warm JVMs
# or are short-lived (a warm-up's scratch table and MERGE cost a Streamlit server on the browser
# tests' shared Connect server about 6 CPU-s of that JVM's). tests/test_warmup.py and the
# warm-engine browser tests set their own number.
os.environ.setdefault("OREO_WARM_UP_ROUNDS", "0")


@pytest.fixture(scope="session", autouse=True)
def _catalog_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A new SQLite catalog starts as a copy of one migrated once per session, then upgrades as usual.

    Migrating a new catalog through every Alembic revision took about 0.12 s, paid by
    nearly every test; opening the copy, already at head, takes 0.02-0.04 s. The copy is
    made only when a catalog is opened on a file that does not exist, so a test that keeps
    its folder empty still does, and one that prepares an older catalog gets its own.
    """
    template = tmp_path_factory.mktemp("catalog-template") / "catalog.db"
    made = Catalog(f"sqlite:///{template}")
    made.upgrade()
    made.engine.dispose()  # the last connection closing folds SQLite's WAL into the file
    real_upgrade = Catalog.upgrade

    def upgrade(self: Catalog) -> None:
        path = self.url.split("///", 1)[-1] if self.url.startswith("sqlite:///") else ""
        if path and path != ":memory:" and not os.path.exists(path):
            shutil.copyfile(template, path)
        real_upgrade(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Catalog, "upgrade", upgrade)
        yield


@pytest.fixture(scope="session", autouse=True)
def _both_compilers_here() -> Iterator[None]:
    """This process's JVM lives for the whole run, so it starts without the children's C1-only option.

    It keeps their serial collector (``jvm_options.LONG_LIVED``).
    """
    build = engine._build_session

    def build_session():  # type: ignore[no-untyped-def]
        saved = os.environ.pop(jvm_options.SUBMIT_OPTS, None)
        if saved == jvm_options.QUICK_JIT:  # the suite's own: the serial collector stays
            os.environ[jvm_options.SUBMIT_OPTS] = jvm_options.LONG_LIVED
        try:
            return build()
        finally:
            if saved is None:
                os.environ.pop(jvm_options.SUBMIT_OPTS, None)
            else:
                os.environ[jvm_options.SUBMIT_OPTS] = saved

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "_build_session", build_session)
        yield


# Argon2id as the product runs it, at its lowest work factor: the defaults (64 MiB, 3 passes)
# cost about 0.1 s per hash or check, which sign-ins and tokens in hundreds of tests paid.
# Child processes (the CLI, servers) keep the defaults; test_auth checks the stored hash.
CHEAP_HASHER = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


@pytest.fixture(scope="session", autouse=True)
def _wired() -> None:
    """This process reacts to the domain's events as the app, the API and the CLI do (their composition roots)."""
    reactions.install()


@pytest.fixture(scope="session", autouse=True)
def _cheap_password_hashes() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(auth, "_hasher", CHEAP_HASHER)
        patch.setattr(tokens, "_hasher", CHEAP_HASHER)
        yield


@pytest.fixture(scope="session", autouse=True)
def _app_tests_share_what_a_server_shares() -> Iterator[None]:
    """Page tests (Streamlit's AppTest) compile each script and find the installed components once, as a server does.

    A new AppTest scanned the metadata of every installed package for Streamlit components,
    and every run compiled ``app/main.py`` and the page anew (its own ``ScriptCache``). A
    running server does both once for all its sessions (``Runtime``). In a profile of four
    page-test modules (py-spy, one process) the scan took 15% of the samples and the
    compiling 11%. The scripts do not change during a run, and the installed packages neither.
    """
    scripts = ScriptCache()
    with pytest.MonkeyPatch.context() as patch:
        scan = functools.cache(manifest_scanner.scan_component_manifests)
        patch.setattr(manifest_scanner, "scan_component_manifests", scan)
        patch.setattr(app_test, "ScriptCache", lambda: scripts)
        patch.setattr(local_script_runner, "require_widgets_deltas", _wait_for_the_run)
        yield


def _wait_for_the_run(runner: local_script_runner.LocalScriptRunner, timeout: float = 3) -> None:
    """AppTest's wait for a script run, on the run's thread instead of a 1 ms poll.

    Streamlit's own (``require_widgets_deltas``) wakes every millisecond to look for the
    run's end, and each wake takes the GIL from the thread that runs the page (7% of a page
    test's samples sat in that loop). The run's thread ends right after it: join it, and
    on a timeout stop the run and raise as Streamlit does.
    """
    thread = runner._script_thread
    if thread is None:  # not started: Streamlit's own wait
        return _require_widgets_deltas(runner, timeout)
    thread.join(timeout)
    if thread.is_alive():
        runner.request_stop()
        runner.join()
        raise RuntimeError(f"AppTest script run timed out after {timeout}(s)")
    return None


_require_widgets_deltas = local_script_runner.require_widgets_deltas


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


@pytest.fixture(scope="session")
def clusters() -> Iterator[cluster_support.Clusters]:
    """The loopback clusters of the session (``cluster_support``): the one still up is stopped at its end."""
    yield cluster_support.CLUSTERS
    cluster_support.CLUSTERS.stop()


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers that are true, the long tiers first, and the units two workers share out.

    A test under tests/e2e carries ``e2e``; one that uses the ``spark`` fixture, ``spark``.
    The browser tier runs first, then the tests that use the loopback cluster (those on S3
    last among them, so the session starts each kind of cluster once: ``cluster_support``),
    then everything else.

    Under ``pytest -n 2 --dist loadgroup`` (``make test``) a worker takes one unit at a
    time, in that order: the whole browser tier is one (one demo workspace, one shared
    server and one Connect server for all of it), the whole cluster tier another (one
    cluster at a time), and every other module is one of its own, so its module fixtures
    are built once. The two long units go first, one to each worker, and the many short
    ones fill in after them, so neither worker waits alone at the end.
    """
    for item in items:
        if Path(str(item.path)).is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
        if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
            item._id = coerce_node_id(_grouped_id(item))
    items.sort(key=_tier_order)  # stable: the order within each group is pytest's


# The tiers of ``_tier_order`` that run on the loopback cluster (plain, then S3): one unit of work.
CLUSTER_TIERS = (1, 2)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Stop the loopback cluster once this process has run the last test that uses one.

    The cluster tier is one unit of work, so its tests run in a row; the cluster (a master,
    two workers with an executor each, a Connect server: about 3 GB) used to stay up, idle,
    beside every test the worker ran after it, until the session ended.
    """
    yield
    if _tier_order(item) in CLUSTER_TIERS and (nextitem is None or _tier_order(nextitem) not in CLUSTER_TIERS):
        cluster_support.CLUSTERS.stop()


def _grouped_id(item: pytest.Item) -> str:
    """``item``'s node id with its unit after an ``@``, which is how xdist's loadgroup reads a group.

    xdist 3.8 writes the ``xdist_group`` marker's suffix into ``Item._nodeid``, which pytest 9
    no longer reads (its node id lives in ``_id``), so every test became a unit of its own;
    the suffix is set here instead. Schemathesis gives each API operation's item
    (``test_x[GET /path]``) the test function's node id; the id is made from the item's
    name, or xdist, which keys work by node id, would run only one of them.
    """
    base = item.nodeid if item.nodeid.endswith(f"::{item.name}") else f"{item.nodeid.rsplit('::', 1)[0]}::{item.name}"
    return f"{base}@{_work_unit(item)}"


def _work_unit(item: pytest.Item) -> str:
    tier = _tier_order(item)
    return "e2e" if tier == 0 else "cluster" if tier in CLUSTER_TIERS else Path(str(item.path)).stem


def _tier_order(item: pytest.Item) -> int:
    """0: the browser tier; 1: the loopback cluster; 2: the cluster on S3; 3: the rest."""
    fixtures = getattr(item, "fixturenames", ())
    if "cluster_s3" in fixtures:
        return 2
    if "cluster" in fixtures:
        return 1
    return 0 if item.get_closest_marker("e2e") is not None else 3


@pytest.fixture(autouse=True)
def _spark_needs_its_marker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test without the ``spark`` marker that reaches this process's Spark engine fails, naming the marker.

    The tiers (``make test-fast`` and ``-m "not spark"``) are only as true as the markers; the
    engine is reached through ``core.engine.get_spark``, so that is where an unmarked test is
    caught: at once (pytest's failure is no ``Exception`` that code under test could swallow),
    or when it ends if a background thread (a page's engine start) reached it.
    """
    if request.node.get_closest_marker("spark") is not None or request.node.get_closest_marker("e2e") is not None:
        yield
        return
    message = f"{request.node.nodeid} reaches Spark but carries no spark marker: mark it pytest.mark.spark"
    test_thread = threading.get_ident()
    reached_elsewhere = threading.Event()

    def refused() -> None:
        if threading.get_ident() != test_thread:
            reached_elsewhere.set()
        pytest.fail(message, pytrace=False)

    monkeypatch.setattr(engine, "get_spark", refused)
    yield
    if reached_elsewhere.is_set():
        pytest.fail(message, pytrace=False)
