"""The test tiers' markers are true: a test that reaches Spark without the ``spark`` marker fails."""

from __future__ import annotations

import pytest

from core import engine

pytest_plugins = ["pytester"]
# Taken at import: while this (unmarked) test runs, its own conftest holds a refusing stand-in.
REAL_GET_SPARK = engine.get_spark

CONFTEST = """
from tests.conftest import _spark_needs_its_marker, pytest_collection_modifyitems  # noqa: F401
"""

TESTS = """
import threading

import pytest

from core import engine


@pytest.fixture
def spark():
    return "a stand-in: the marker is what is checked, not a JVM"


def test_unmarked_reaches_spark():
    engine.get_spark()


def test_unmarked_reaches_spark_from_a_thread():
    def start():  # as a page's background engine start: whatever it raises stays in the thread
        try:
            engine.get_spark()
        except BaseException:
            pass

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()


@pytest.mark.spark
def test_marked_sees_the_engine():
    assert engine.get_spark.__module__ == "core.engine"


def test_a_spark_fixture_marks_its_test(spark, request):
    assert request.node.get_closest_marker("spark") is not None
    assert engine.get_spark.__module__ == "core.engine"


def test_unmarked_without_spark_passes_beside_the_stand_in():
    assert engine.get_spark.__module__ == "tests.conftest"  # refused if reached, harmless if not
"""


def test_an_unmarked_test_that_reaches_spark_fails_and_names_the_marker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "get_spark", REAL_GET_SPARK)  # the inner run's tests are the ones checked
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    # The thread's test passes its call and errors as it ends: the reach is not lost with the thread.
    result.assert_outcomes(passed=4, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            # pytest prints the teardown errors before the failures
            "*test_unmarked_reaches_spark_from_a_thread reaches Spark but carries no spark marker*",
            "*test_unmarked_reaches_spark reaches Spark but carries no spark marker*",
        ]
    )
