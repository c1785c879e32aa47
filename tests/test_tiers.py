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
import pytest

from core import engine


@pytest.fixture
def spark():
    return "a stand-in: the marker is what is checked, not a JVM"


def test_unmarked_reaches_spark():
    engine.get_spark()


@pytest.mark.spark
def test_marked_sees_the_engine():
    assert engine.get_spark.__module__ == "core.engine"


def test_a_spark_fixture_marks_its_test(spark, request):
    assert request.node.get_closest_marker("spark") is not None
    assert engine.get_spark.__module__ == "core.engine"


def test_unmarked_without_spark():
    assert 1 + 1 == 2
"""


def test_an_unmarked_test_that_reaches_spark_fails_and_names_the_marker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "get_spark", REAL_GET_SPARK)  # the inner run's tests are the ones checked
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1, errors=0)
    result.stdout.fnmatch_lines(["*test_unmarked_reaches_spark reaches Spark but carries no spark marker*"])
