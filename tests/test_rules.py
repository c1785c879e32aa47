"""Inferred rules: proposed from the data's profile, described in plain words, edited, turned off."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from core import audit, auth, datasets, reads, rules, validation
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.errors import InvalidInput, NotFound, PermissionDenied
from core.layout import dataset_layout
from tests.page_support import PASSWORD, copy_workspace, seed_workspace


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
    values = (
        reads.cursor()
        .execute("SELECT * EXCLUDE (row_id) FROM delta_scan(?) WHERE row_id = ?", [str(layout.main), second])
        .fetch_arrow_table()
        .to_pylist()[0]
    )
    values["customer_id"] = 10**6
    values["email"] = "new@example.com"
    sessions.apply_edits(catalog, session.session_id, [sessions.AddRow(values)], actor=editor)
    added = change_requests.submit_change_request(catalog, session.session_id, actor=editor, title="add")
    run = change_requests.validation_for(catalog, added.id, actor=editor)
    assert run is not None and run.skipped == 0


# ---------------------------------------------------------------- proposals


def _inferred(kind: str, column: str, **kwargs: object) -> dict:  # type: ignore[type-arg]
    return rules._rule(f"expect_column_values_to_{kind}", column, **kwargs)


def _steward_suite() -> dict:  # type: ignore[type-arg]
    """A stored suite (GX keeps bounds as floats): a person's rule, inferred ones, one a steward made critical."""
    edited = rules.changed_rule(
        {"expectations": [_inferred("be_between", "age", min_value=0.0, max_value=90.0)]},
        1,
        rules.RuleChange(severity="critical"),
        by="ada",
    )["expectations"][0]
    return {
        "name": "people",
        "expectations": [
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "row_id"}, "severity": "critical"},
            edited,
            _inferred("not_be_null", "age"),
            _inferred("be_in_set", "plan", value_set=["a", "b"]),
            _inferred("be_unique", "plan"),
        ],
    }


PROPOSED = [
    _inferred("be_between", "age", min_value=0, max_value=120),  # the steward's (critical, by ada): kept
    _inferred("not_be_null", "age"),  # the same
    _inferred("be_in_set", "plan", value_set=["a", "b", "c"]),  # changed
    _inferred("not_be_null", "plan"),  # new; plan:be_unique is no longer kept by the data: removed
]


def test_a_proposal_says_what_would_change_and_changes_nothing() -> None:
    suite = _steward_suite()
    before = json.dumps(suite)
    lines = {line.name: line for line in rules.propose(suite, PROPOSED)}
    assert json.dumps(suite) == before
    assert {name: line.status for name, line in lines.items()} == {
        "age:be_between": "kept",
        "age:not_be_null": "same",
        "plan:be_in_set": "changed",
        "plan:not_be_null": "new",
        "plan:be_unique": "removed",
    }
    assert lines["age:be_between"].change == "kept: edited by ada"
    assert lines["plan:be_in_set"].change == 'also allows "c"'
    assert (lines["plan:be_in_set"].number, lines["plan:be_unique"].number, lines["plan:not_be_null"].number) == (
        4,
        5,
        None,
    )
    assert lines["plan:not_be_null"].change == "adds: plan is never empty"
    assert lines["age:be_between"].to_json()["edited_by"] == "ada"


def test_accepting_applies_only_the_chosen_lines_and_never_a_stewards_rule() -> None:
    suite = _steward_suite()
    chosen, applied = rules.accepted(suite, PROPOSED, ["plan:be_in_set"])
    assert [line.name for line in applied] == ["plan:be_in_set"]
    assert chosen["expectations"][3]["kwargs"]["value_set"] == ["a", "b", "c"]  # replaced where it stood
    assert [rules.rule_name(e) for e in chosen["expectations"]] == [rules.rule_name(e) for e in suite["expectations"]]
    everything, applied = rules.accepted(suite, PROPOSED)
    assert sorted(line.name for line in applied) == ["plan:be_in_set", "plan:be_unique", "plan:not_be_null"]
    names = [rules.rule_name(e) for e in everything["expectations"]]
    assert names == ["row_id:not_be_null", "age:be_between", "age:not_be_null", "plan:be_in_set", "plan:not_be_null"]
    kept = everything["expectations"][1]
    assert (kept["severity"], kept["kwargs"]["max_value"], rules.edited_by(kept)) == ("critical", 90.0, "ada")
    with pytest.raises(InvalidInput, match=r"rule 'age:be_between' is the steward's \(kept: edited by ada\)"):
        rules.accepted(suite, PROPOSED, ["age:be_between"])
    with pytest.raises(InvalidInput, match="no proposed rule named 'nope'"):
        rules.accepted(suite, PROPOSED, ["nope"])


def test_a_rule_saved_as_it_was_stays_inferred() -> None:
    suite = {"expectations": [_inferred("be_between", "age", min_value=0.0, max_value=90.0)]}
    same = rules.RuleChange(severity="warning", min_value=0, max_value=90, enabled=True)
    assert rules.edited_by(rules.changed_rule(suite, 1, same, by="ada")["expectations"][0]) is None
    wider = rules.RuleChange(severity="warning", max_value=95, enabled=True)
    assert rules.edited_by(rules.changed_rule(suite, 1, wider, by="ada")["expectations"][0]) == "ada"


def test_a_rule_a_person_set_is_never_replaced_by_an_inferred_one() -> None:
    mine = {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "a"}, "severity": "critical"}
    suite = {"name": "t", "expectations": [mine]}
    (line,) = rules.propose(suite, [_inferred("not_be_null", "a")])
    assert (line.status, line.change) == ("kept", "kept: set by a person")
    assert rules.with_inferred(suite, [_inferred("not_be_null", "a")])["expectations"] == [mine]


@pytest.mark.parametrize(
    ("current", "proposed", "change"),
    [
        (
            _inferred("be_between", "n", min_value=0.0, max_value=500.0),
            _inferred("be_between", "n", min_value=0, max_value=22),
            "maximum 500 → 22",
        ),
        (
            _inferred("be_in_set", "p", value_set=["a", "x"]),
            _inferred("be_in_set", "p", value_set=["a", "b"]),
            'also allows "b"; no longer allows "x"',
        ),
        (
            {**_inferred("not_be_null", "p"), "severity": "info"},
            _inferred("not_be_null", "p"),
            "severity info → warning",
        ),
    ],
)
def test_a_changed_rule_says_what_differs(current: dict, proposed: dict, change: str) -> None:  # type: ignore[type-arg]
    assert rules.ProposedRule("x", "changed", current, proposed, 1).change == change


@pytest.mark.parametrize(
    ("item", "editor"),
    [
        (_inferred("not_be_null", "a"), None),
        ({**_inferred("not_be_null", "a"), "severity": "critical"}, "a person"),  # edited before editors were kept
        ({**_inferred("not_be_null", "a"), "meta": {"oreo": {"inferred": True, "disabled": True}}}, "a person"),
        ({**_inferred("not_be_null", "a"), "meta": {"oreo": {"inferred": True, "edited_by": "bo"}}}, "bo"),
    ],
)
def test_who_edited_a_rule(item: dict, editor: str | None) -> None:  # type: ignore[type-arg]
    assert rules.edited_by(item) == editor
    assert rules.is_steward_owned(item) == (editor is not None)


# ---------------------------------------------------------------- proposals of a dataset


@pytest.fixture(scope="module")
def seeded_orders(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """``tests.page_support.seed_workspace`` (shop/orders, rules inferred at creation) plus ``ada``, admin of shop."""
    folder = seed_workspace(tmp_path_factory.mktemp("rules-proposals"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_DATA_ROOT", str(folder / "delta"))
        mp.setenv("OREO_DATABASE_URL", f"sqlite:///{folder / 'catalog.db'}")
        get_settings.cache_clear()
        reset_catalogs()
        auth.create_user(open_catalog(), "ada", password=PASSWORD)
        auth.add_member(open_catalog(), "shop", "ada", "admin")
        reset_catalogs()
    get_settings.cache_clear()
    return folder


@pytest.fixture
def orders(seeded_orders: Path, data_root: Path) -> Catalog:
    return copy_workspace(seeded_orders, data_root)


def _orders_rules(catalog: Catalog) -> list[dict]:  # type: ignore[type-arg]
    return list(datasets.dataset_rules(catalog, "shop", "orders", actor=auth.SYSTEM)["expectations"])


def _stored(catalog: Catalog) -> tuple[bytes, int]:
    """The stored suite's bytes and the number of audit events: what proposing must leave alone."""
    suite = validation.suite_path(datasets.layout_for("shop", "orders")).read_bytes()
    return suite, len(audit.list_events(catalog, limit=10_000))


@pytest.mark.spark
def test_proposing_again_never_resets_a_stewards_edit(orders: Catalog) -> None:
    """The issue's regression: a rule set to critical went back to warning when rules were proposed."""
    ada = auth.get_user(orders, "ada")
    number = next(n for n, e in enumerate(_orders_rules(orders), 1) if rules.rule_name(e) == "amount:be_between")
    datasets.change_dataset_rule(orders, "shop", "orders", number, rules.RuleChange(severity="critical"), actor=ada)
    before = _stored(orders)
    proposal = datasets.propose_dataset_rules(orders, "shop", "orders", actor=ada)
    assert _stored(orders) == before  # a proposal writes nothing
    line = next(line for line in proposal.lines if line.name == "amount:be_between")
    assert (line.status, line.change, line.number) == ("kept", "kept: edited by ada", number)
    with pytest.raises(InvalidInput, match="edited by ada"):
        datasets.accept_proposed_rules(orders, "shop", "orders", actor=ada, names=["amount:be_between"])
    datasets.infer_dataset_rules(orders, "shop", "orders", actor=ada)  # the whole proposal, as `rules infer --apply`
    item = _orders_rules(orders)[number - 1]
    assert (rules.rule_name(item), item["severity"], rules.edited_by(item)) == ("amount:be_between", "critical", "ada")


@pytest.mark.spark
def test_accepting_applies_the_chosen_rules_and_records_who_accepted_what(orders: Catalog) -> None:
    ada = auth.get_user(orders, "ada")
    current = _orders_rules(orders)
    # Rules as an older proposal left them: wider bounds, no "plan is never empty", plan once unique.
    older = [e for e in current if rules.rule_name(e) != "plan:not_be_null"]
    amount = next(e for e in older if rules.rule_name(e) == "amount:be_between")
    amount["kwargs"]["max_value"] = 999.0
    older.append(rules._rule("expect_column_values_to_be_unique", "plan"))
    datasets.set_dataset_rules(orders, "shop", "orders", {"name": "orders", "expectations": older}, actor=ada)
    proposal = datasets.propose_dataset_rules(orders, "shop", "orders", actor=ada)
    changing = {line.name: line.status for line in proposal.lines if line.status in rules.APPLIED}
    assert changing == {"amount:be_between": "changed", "plan:not_be_null": "new", "plan:be_unique": "removed"}
    with pytest.raises(InvalidInput, match="no rules chosen"):
        datasets.accept_proposed_rules(orders, "shop", "orders", actor=ada, names=[], proposal=proposal)
    erin = auth.get_user(orders, "erin")
    with pytest.raises(PermissionDenied):
        datasets.accept_proposed_rules(orders, "shop", "orders", actor=erin, names=["amount:be_between"])

    result = datasets.accept_proposed_rules(
        orders, "shop", "orders", actor=ada, names=["amount:be_between", "plan:be_unique"], proposal=proposal
    )
    assert [(line.name, line.status) for line in result.accepted] == [
        ("amount:be_between", "changed"),
        ("plan:be_unique", "removed"),
    ]
    described = {rules.describe(e) for e in _orders_rules(orders)}
    assert "amount is between 0 and 267.75" in described and "each plan appears once" not in described
    assert "plan is never empty" not in described  # not chosen: still only proposed
    (event,) = audit.list_events(orders, name="rules_accepted")
    assert (event.actor, event.project_id, event.dataset_id) == ("ada", "shop", "orders")
    assert [(a["rule"], a["status"]) for a in event.details["accepted"]] == [
        ("amount:be_between", "changed"),
        ("plan:be_unique", "removed"),
    ]
    assert event.details["version"] == proposal.version
    again = datasets.propose_dataset_rules(orders, "shop", "orders", actor=ada)
    assert [(line.name, line.status) for line in again.lines if line.status in rules.APPLIED] == [
        ("plan:not_be_null", "new")
    ]
