"""Great Expectations validation: suites in GX JSON, severities, and the audit files of a run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from core import validation
from core.errors import InvalidInput
from core.layout import dataset_layout

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def layout(data_root: Path):  # type: ignore[no-untyped-def]
    lay = dataset_layout(data_root, "demo", "people")
    lay.create()
    return lay


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"row_id": ["1", "2", "3"], "name": ["a", "b", "c"], "age": [30, 41, 200]})


def test_default_suite_passes_clean_data_and_blocks_duplicate_ids(layout) -> None:  # type: ignore[no-untyped-def]
    suite = validation.default_suite("people", [("row_id", "VARCHAR"), ("name", "VARCHAR"), ("age", "BIGINT")])
    ok = validation.validate_frame(_frame(), suite, layout)
    assert (ok.status, ok.failures) == ("passed", [])
    bad = _frame().assign(row_id=["1", "1", None])
    run = validation.validate_frame(bad, suite, layout)
    assert run.status == "failed" and run.blocking
    assert {(f.expectation, f.column, f.severity) for f in run.failures} == {
        ("expect_column_values_to_be_unique", "row_id", "critical"),
        ("expect_column_values_to_not_be_null", "row_id", "critical"),
    }
    folder = layout.validation_run(run.run_id)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rows"] == 3
    assert json.loads((folder / "full.json").read_text())["success"] is False


@pytest.mark.parametrize(
    ("severity", "status"),
    [("critical", "failed"), ("warning", "warning"), ("info", "passed")],
)
def test_severity_decides_the_status(layout, severity: str, status: str) -> None:  # type: ignore[no-untyped-def]
    suite = validation.parse_suite(
        {
            "name": "ages",
            "expectations": [
                {
                    "type": "expect_column_values_to_be_between",
                    "kwargs": {"column": "age", "min_value": 0, "max_value": 120},
                    "severity": severity,
                }
            ],
        }
    )
    run = validation.validate_frame(_frame(), suite, layout)
    assert run.status == status
    assert [(f.column, f.severity, f.unexpected_count) for f in run.failures] == [("age", severity, 1)]


def test_suite_round_trips_in_gx_json(layout) -> None:  # type: ignore[no-untyped-def]
    document = {
        "name": "s",
        "expectations": [
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "name"}, "severity": "warning"}
        ],
    }
    saved = validation.save_suite(layout, document)
    loaded = validation.load_suite(layout)
    assert loaded == json.loads(json.dumps(saved, default=str))
    assert loaded["expectations"][0]["severity"] == "warning" and loaded["expectations"][0]["meta"] == {}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "must be a JSON object"),
        ({"name": "x"}, "must be a JSON object"),
        ({"name": "x", "expectations": [{"kwargs": {}}]}, "needs a 'type'"),
        (
            {
                "name": "x",
                "expectations": [{"type": "expect_column_to_exist", "kwargs": {"column": "a"}, "severity": "fatal"}],
            },
            "severity 'fatal'",
        ),
        ({"name": "x", "expectations": [{"type": "expect_nothing_like_this", "kwargs": {}}]}, "not a valid GX suite"),
    ],
)
def test_bad_suites_are_refused_and_nothing_is_saved(layout, document: object, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidInput, match=message):
        validation.save_suite(layout, document)
    assert not validation.suite_path(layout).exists()


def test_default_suite_accepts_every_mapped_type_as_pandas_receives_it(layout) -> None:  # type: ignore[no-untyped-def]
    """DuckDB hands rows over through Arrow: dates and NULL-holding booleans arrive as objects, ints as floats."""
    import datetime

    import pyarrow as pa

    columns = [("row_id", "VARCHAR"), ("d", "DATE"), ("b", "BOOLEAN"), ("f", "DOUBLE"), ("n", "BIGINT")]
    frame = pa.table(
        {
            "row_id": ["1", "2"],
            "d": pa.array([datetime.date(2024, 1, 1), None], pa.date32()),
            "b": [True, None],
            "f": [1.5, None],
            "n": pa.array([1, None], pa.int64()),
        }
    ).to_pandas()
    run = validation.validate_frame(frame, validation.default_suite("t", columns), layout)
    assert (run.status, run.failures, run.evaluated) == ("passed", [], 7)  # 2 on row_id + 5 types


def test_a_change_is_judged_only_by_the_expectations_about_its_columns(layout) -> None:  # type: ignore[no-untyped-def]
    suite = validation.parse_suite(
        {
            "name": "people",
            "expectations": [
                {"type": "expect_column_values_to_be_between", "kwargs": {"column": "age", "max_value": 120}},
                {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "name"}},
                {"type": "expect_column_pair_values_to_be_equal", "kwargs": {"column_A": "name", "column_B": "age"}},
                {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
            ],
        }
    )
    everything = validation.validate_frame(_frame(), suite, layout)
    assert (everything.status, everything.evaluated, everything.skipped) == ("failed", 4, 0)
    # Only the name changed: the age rule (which main's 200 breaks) is not the change's verdict.
    names = validation.validate_frame(_frame(), suite, layout, columns={"name"})
    assert (names.evaluated, names.skipped) == (3, 1)
    assert "expect_column_values_to_be_between" not in {c.expectation for c in names.checks}
    assert {f.expectation for f in names.failures} == {"expect_column_pair_values_to_be_equal"}
    ages = validation.validate_frame(_frame(), suite, layout, columns={"age"})
    assert (ages.evaluated, ages.skipped) == (3, 1) and "expect_column_values_to_be_between" in {
        f.expectation for f in ages.failures
    }
    nothing = validation.validate_frame(_frame(), suite, layout, columns=set())
    assert [c.expectation for c in nothing.checks] == ["expect_table_row_count_to_be_between"]
    stored = validation.load_run(layout, names.run_id)
    assert (stored.evaluated, stored.skipped, stored.suite_digest) == (3, 1, everything.suite_digest)


@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [
        ("expect_column_values_to_be_between", {"column": "age", "min_value": 10, "max_value": 1}),
        ("expect_column_value_lengths_to_be_between", {"column": "name", "min_value": 5, "max_value": 2.5}),
    ],
)
def test_a_rule_whose_minimum_is_above_its_maximum_is_refused(kind: str, kwargs: dict) -> None:  # type: ignore[type-arg]
    document = {"name": "s", "expectations": [{"type": kind, "kwargs": kwargs}]}

    with pytest.raises(InvalidInput, match=rf"^expectation #1 \({kind}\) on column '{kwargs['column']}': the minimum"):
        validation.parse_suite(document)
    equal = {**kwargs, "max_value": kwargs["min_value"]}  # a single allowed value is a rule, not a mistake
    assert validation.parse_suite({"name": "s", "expectations": [{"type": kind, "kwargs": equal}]})["expectations"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"column": "name", "regex": "(unclosed"}, r"column 'name': the regex '\(unclosed' is invalid"),
        ({"column": "code", "regex_list": ["^A", "[z-a]"]}, r"column 'code': the regex '\[z-a\]' is invalid"),
        ({"column": "code", "regex": 7}, r"column 'code': the regex 7 is not text"),
    ],
)
def test_a_rule_with_a_regex_that_does_not_compile_is_refused(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    kind = "expect_column_values_to_match_regex" + ("_list" if "regex_list" in kwargs else "")
    document = {"name": "s", "expectations": [{"type": kind, "kwargs": kwargs}]}

    with pytest.raises(InvalidInput, match=rf"^expectation #1 \({kind}\) on {message}"):
        validation.parse_suite(document)


# Threads at once, in a process that has not imported GX yet: the warm-up's import and a
# first submit's validation (a server's start and its first user) must each get whole modules.
THREADS_AT_ONCE = """
import sys, threading
from pathlib import Path
import pandas as pd
from core import validation
from core.layout import dataset_layout

layout = dataset_layout(Path(sys.argv[1]), "demo", "people")
layout.create()
suite = validation.default_suite("people", [("id", "BIGINT"), ("name", "STRING")])
frame = pd.DataFrame({"row_id": ["1", "2"], "id": [1, 2], "name": ["a", "b"]})
works = [
    validation.import_gx,
    lambda: validation.validate_frame(frame, suite, layout),
    lambda: validation.parse_suite(suite),
]
barrier = threading.Barrier(len(works))
failures = []

def run(work):
    barrier.wait()
    try:
        work()
    except Exception as exc:
        failures.append(f"{type(exc).__name__}: {exc}")

threads = [threading.Thread(target=run, args=(work,)) for work in works]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("\\n".join(failures) or "ok")
"""


def test_gx_imported_by_threads_at_once_is_whole_in_each(tmp_path: Path) -> None:
    command = [sys.executable, "-c", THREADS_AT_ONCE, str(tmp_path)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok", done.stdout
