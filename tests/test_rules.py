"""Inferred rules: proposed from the data's profile, described in plain words, edited, turned off."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from core import reads, rules, validation
from core.errors import InvalidInput, NotFound
from core.layout import dataset_layout


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """40 customers: every column has one shape the rules can pick up, or deliberately none."""
    path = tmp_path / "customers"
    n = 40
    write_deltalake(
        str(path),
        pa.table(
            {
                "row_id": [str(i) for i in range(n)],
                "email": [f"user{i}@example.com" for i in range(n)],
                "country": ["DE", "FR", "GB", "US"] * (n // 4),
                "plan": ["free", "pro"] * (n // 2),
                "name": [f"name {i}" for i in range(n)],  # unique, no common shape
                "note": [None if i % 5 == 0 else "x" for i in range(n)],  # has nulls
                "orders": pa.array([i % 10 for i in range(n)], pa.int64()),  # 0..9
                "customer_id": pa.array([1000 + i for i in range(n)], pa.int64()),  # an identifier
                "spend": pa.array([10.0 + i for i in range(n)], pa.float64()),  # 10..49
                "joined": pa.array([None] * n, pa.date32()),
            }
        ),
    )
    return path


def _by_column(found: list[dict]) -> dict[str, set[str]]:  # type: ignore[type-arg]
    out: dict[str, set[str]] = {}
    for item in found:
        out.setdefault(item["kwargs"]["column"], set()).add(item["type"].removeprefix("expect_column_values_to_"))
    return out


def test_rules_are_inferred_from_the_profile(table: Path) -> None:
    found = rules.infer_rules(table, None, reads.table_schema(table))
    assert all(item["severity"] == "warning" and rules.is_inferred(item) for item in found)
    assert _by_column(found) == {
        "email": {"not_be_null", "be_unique", "match_regex"},
        "country": {"not_be_null", "be_in_set", "match_regex"},
        "plan": {"not_be_null", "be_in_set"},
        "name": {"not_be_null", "be_unique"},
        "note": {"be_in_set"},
        "orders": {"not_be_null", "be_between"},
        "customer_id": {"not_be_null", "be_unique"},
        "spend": {"not_be_null", "be_between"},
    }
    kwargs = {(i["type"], i["kwargs"]["column"]): i["kwargs"] for i in found}
    # The observed span widened by half of it on each side, never below zero for a non-negative column.
    orders = kwargs[("expect_column_values_to_be_between", "orders")]
    assert orders == {"column": "orders", "min_value": 0, "max_value": 14}
    assert kwargs[("expect_column_values_to_be_between", "spend")] == {
        "column": "spend",
        "min_value": 0.0,
        "max_value": 68.5,
    }
    assert kwargs[("expect_column_values_to_be_in_set", "country")]["value_set"] == ["DE", "FR", "GB", "US"]
    assert kwargs[("expect_column_values_to_match_regex", "email")]["regex"] == rules.SHAPES[0][1]


def test_an_inferred_suite_flags_an_emptied_cell_and_an_outlier_as_warnings(table: Path, data_root: Path) -> None:
    layout = dataset_layout(data_root, "demo", "customers")
    layout.create()
    schema = reads.table_schema(table)
    suite = validation.write_default_suite(
        layout, "customers", [(c.name, c.type) for c in schema], inferred=rules.infer_rules(table, None, schema)
    )
    assert validation.parse_suite(suite)["expectations"]  # GX takes the suite as written
    frame = validation.to_frame(reads.read_page(table, limit=100).rows.pipe(pa.Table.from_pandas))
    clean = validation.validate_frame(frame, suite, layout)
    assert (clean.status, clean.failures) == ("passed", [])
    changed = frame.copy()
    changed.loc[3, "spend"] = None
    changed.loc[4, "orders"] = 99_999_999_999
    run = validation.validate_frame(changed, suite, layout)
    assert run.status == "warning" and not run.blocking
    assert {(f.column, f.expectation) for f in run.failures} == {
        ("spend", "expect_column_values_to_not_be_null"),
        ("orders", "expect_column_values_to_be_between"),
    }
    # Every expectation evaluated is listed, with the failing values of the failed ones.
    assert len(run.checks) == run.evaluated == len(suite["expectations"])
    outlier = next(c for c in run.checks if c.column == "orders" and not c.success)
    assert (outlier.unexpected_count, outlier.unexpected_sample) == (1, [99_999_999_999])
    assert outlier.description == "orders is between 0 and 14"
    stored = validation.load_run(layout, run.run_id)
    assert stored.checks == run.checks
    failed = rules.recent_failures(layout)
    assert failed.runs == 2
    assert failed.of({"type": "expect_column_values_to_be_between", "kwargs": {"column": "orders"}}) == 1


def test_proposing_again_replaces_only_the_inferred_rules() -> None:
    mine = {"type": "expect_column_values_to_be_between", "kwargs": {"column": "a", "min_value": 1}}
    old = rules._rule("expect_column_values_to_not_be_null", "a")
    new = rules._rule("expect_column_values_to_be_unique", "a")
    suite = rules.with_inferred({"name": "t", "expectations": [mine, old]}, [new])
    assert suite["expectations"] == [mine, new]


def test_a_rule_is_changed_and_turned_off(data_root: Path) -> None:
    layout = dataset_layout(data_root, "demo", "ages")
    layout.create()
    suite = {
        "name": "ages",
        "expectations": [
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "age"}, "severity": "warning"},
            rules._rule("expect_column_values_to_be_between", "age", min_value=0, max_value=120),
        ],
    }
    frame = pd.DataFrame({"row_id": ["1", "2"], "age": [30, 130]})
    assert validation.validate_frame(frame, suite, layout).status == "warning"
    wider = rules.changed_rule(suite, 2, rules.RuleChange(max_value=150, severity="critical"))
    assert wider["expectations"][2 - 1]["kwargs"]["max_value"] == 150
    assert wider["expectations"][1]["severity"] == "critical"
    assert suite["expectations"][1]["kwargs"]["max_value"] == 120  # the input is not changed
    assert validation.validate_frame(frame, wider, layout).status == "passed"
    strict = rules.changed_rule(suite, 2, rules.RuleChange(severity="critical"))
    assert validation.validate_frame(frame, strict, layout).status == "failed"
    off = rules.changed_rule(strict, 2, rules.RuleChange(enabled=False))
    assert rules.is_disabled(off["expectations"][1])
    run = validation.validate_frame(frame, off, layout)
    assert (run.status, run.evaluated) == ("passed", 1)
    assert not rules.is_disabled(rules.changed_rule(off, 2, rules.RuleChange(enabled=True))["expectations"][1])
    with pytest.raises(InvalidInput, match="has no bounds"):
        rules.changed_rule(suite, 1, rules.RuleChange(min_value=1))
    with pytest.raises(InvalidInput, match="above the maximum"):
        rules.changed_rule(suite, 2, rules.RuleChange(min_value=200))
    with pytest.raises(NotFound, match="no rule #3"):
        rules.changed_rule(suite, 3, rules.RuleChange(severity="info"))


@pytest.mark.parametrize(
    ("item", "text"),
    [
        ({"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "email"}}, "email is never empty"),
        ({"type": "expect_column_values_to_be_unique", "kwargs": {"column": "email"}}, "each email appears once"),
        (
            {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": "plan", "value_set": ["a", "b"]}},
            'plan is one of "a", "b"',
        ),
        (
            {"type": "expect_column_values_to_match_regex", "kwargs": {"column": "e", "regex": rules.SHAPES[0][1]}},
            "e is an email address",
        ),
        (
            {"type": "expect_column_values_to_be_between", "kwargs": {"column": "n", "min_value": 0}},
            "n is at least 0",
        ),
        ({"type": "expect_table_row_count_to_be_between", "kwargs": {}}, "table row count to be between"),
    ],
)
def test_rules_read_as_plain_words(item: dict, text: str) -> None:  # type: ignore[type-arg]
    assert rules.describe(item) == text


def test_an_all_empty_text_column_proposes_nothing_for_it(tmp_path: Path) -> None:
    path = tmp_path / "blank"
    write_deltalake(str(path), pa.table({"row_id": ["1", "2"], "note": pa.array([None, None], pa.string())}))
    assert rules.infer_rules(path, None, reads.table_schema(path)) == []


def test_an_empty_table_proposes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    write_deltalake(str(path), pa.table({"row_id": pa.array([], pa.string()), "n": pa.array([], pa.int64())}))
    assert rules.infer_rules(path, None, reads.table_schema(path)) == []
    assert json.dumps(rules.active_suite({"name": "x", "expectations": []})) == '{"name": "x", "expectations": []}'


@pytest.mark.spark
def test_a_fresh_demo_flags_an_emptied_spend_and_absurd_orders_as_warnings(catalog, spark) -> None:  # type: ignore[no-untyped-def]
    from core import change_requests, demo, sessions
    from core.auth import get_user

    demo.seed_demo(catalog, rows=300)
    editor = get_user(catalog, "editor")
    page = reads.read_page(dataset_layout_main(), limit=2).rows
    first, second = (str(r) for r in page["row_id"])
    session = sessions.open_session(catalog, demo.DEMO_PROJECT, demo.DEMO_DATASET, actor=editor)
    sessions.apply_edits(
        catalog,
        session.session_id,
        [sessions.SetCell(first, "monthly_spend", None), sessions.SetCell(second, "orders", "99999999999")],
        actor=editor,
    )
    cr = change_requests.submit_change_request(catalog, session.session_id, actor=editor, title="Oops")
    run = change_requests.validation_for(catalog, cr.id, actor=editor)
    assert run is not None and (cr.validation_status, run.status) == ("warning", "warning")
    assert {(f.column, f.expectation, f.severity) for f in run.failures} == {
        ("monthly_spend", "expect_column_values_to_not_be_null", "warning"),
        ("orders", "expect_column_values_to_be_between", "warning"),
    }
    outlier = next(c for c in run.checks if c.column == "orders" and not c.success)
    assert outlier.unexpected_sample == [99999999999]


def dataset_layout_main() -> Path:
    from core import demo
    from core.datasets import layout_for

    return layout_for(demo.DEMO_PROJECT, demo.DEMO_DATASET).main


def test_a_request_is_judged_by_the_rules_about_what_it_changes(catalog, spark) -> None:  # type: ignore[no-untyped-def]
    """A rule that main already breaks on a column a request leaves alone is not that request's verdict."""
    from core import change_requests, demo, merge, sessions
    from core.auth import get_user
    from core.datasets import layout_for

    demo.seed_demo(catalog, rows=300)
    editor, approver = get_user(catalog, "editor"), get_user(catalog, "approver")
    layout = layout_for(demo.DEMO_PROJECT, demo.DEMO_DATASET)
    suite = validation.load_suite(layout)
    strict = {
        "type": "expect_column_values_to_be_between",
        "kwargs": {"column": "orders", "max_value": 0},
        "severity": "critical",
    }
    validation.save_suite(layout, {**suite, "expectations": [*suite["expectations"], strict]})
    main = str(layout.main)
    broken = reads.cursor().execute("SELECT count(*) FROM delta_scan(?) WHERE orders > 0", [main]).fetchone()
    assert broken is not None and broken[0] > 0  # main breaks the new rule already
    first, second = (str(r) for r in reads.read_page(layout.main, limit=2).rows["row_id"])

    def submit(column: str, value: str) -> change_requests.ChangeRequest:
        session = sessions.open_session(catalog, demo.DEMO_PROJECT, demo.DEMO_DATASET, actor=editor)
        sessions.apply_edits(catalog, session.session_id, [sessions.SetCell(first, column, value)], actor=editor)
        return change_requests.submit_change_request(catalog, session.session_id, actor=editor, title=column)

    # A new city: the orders rule, and every other rule about columns it keeps, is not run.
    cr = submit("city", "Nowhere")
    run = change_requests.validation_for(catalog, cr.id, actor=editor)
    assert run is not None and (cr.validation_status, run.status) == ("passed", "passed")
    assert {c.column for c in run.checks} <= {"city", None, "row_id"} and run.skipped > 0
    assert run.evaluated + run.skipped == len(rules.active_suite(validation.load_suite(layout))["expectations"])
    merged = merge.approve_change_request(catalog, cr.id, actor=approver)
    assert merged.validation_run_id == run.run_id  # the approval's same question had the same answer
    # New orders: the rule judges them, and blocks.
    cr = submit("orders", "5")
    run = change_requests.validation_for(catalog, cr.id, actor=editor)
    assert run is not None and cr.validation_status == "failed"
    assert ("orders", "expect_column_values_to_be_between", "critical") in {
        (f.column, f.expectation, f.severity) for f in run.failures
    }
    # An added row carries every column: every rule judges it.
    session = sessions.open_session(catalog, demo.DEMO_PROJECT, demo.DEMO_DATASET, actor=editor)
    values = reads.cursor().execute(
        "SELECT * EXCLUDE (row_id) FROM delta_scan(?) WHERE row_id = ?", [str(layout.main), second]
    ).fetch_arrow_table().to_pylist()[0]
    values["customer_id"] = 10**6
    values["email"] = "new@example.com"
    sessions.apply_edits(catalog, session.session_id, [sessions.AddRow(values)], actor=editor)
    added = change_requests.submit_change_request(catalog, session.session_id, actor=editor, title="add")
    run = change_requests.validation_for(catalog, added.id, actor=editor)
    assert run is not None and run.skipped == 0
