"""Rules page: admins read the checks in plain words, change one, turn one off, and propose rules again."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from streamlit.testing.v1 import AppTest

from core import audit, auth, datasets, rules, validation
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from tests.page_support import PASSWORD, copy_workspace, seed_workspace, signed_in, texts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RULES_PAGE = "../pages/rules.py"


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``seed_workspace`` plus ``ada``, admin of shop."""
    folder = seed_workspace(tmp_path_factory.mktemp("pages-rules"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_DATA_ROOT", str(folder / "delta"))
        mp.setenv("OREO_DATABASE_URL", f"sqlite:///{folder / 'catalog.db'}")
        get_settings.cache_clear()
        reset_catalogs()
        catalog = open_catalog()
        auth.create_user(catalog, "ada", password=PASSWORD, display_name="Ada")
        auth.add_member(catalog, "shop", "ada", "admin")
        reset_catalogs()
    get_settings.cache_clear()
    return folder


@pytest.fixture
def workspace(seeded: Path, data_root: Path) -> Catalog:
    return copy_workspace(seeded, data_root)


def _suite(catalog: Catalog) -> list[dict]:  # type: ignore[type-arg]
    return list(datasets.dataset_rules(catalog, "shop", "orders", actor=auth.SYSTEM)["expectations"])


def _number(catalog: Catalog, text: str) -> int:
    return next(n for n, item in enumerate(_suite(catalog), start=1) if rules.describe(item) == text)


def test_admins_read_the_inferred_rules_in_plain_words(workspace: Catalog) -> None:
    at = signed_in("ada", RULES_PAGE)
    assert texts(at.title) == ["Rules"] and not at.error, texts(at.error)
    table = at.dataframe[0].value
    described = set(table["Rule"])
    # Inferred when the dataset was created: amounts 0..178.5, four plans, a unique order id.
    assert {"amount is never empty", "amount is between 0 and 267.75", "each order_id appears once"} <= described
    assert 'plan is one of "enterprise", "free", "pro", "starter"' in described
    assert set(table.loc[table["Rule"] == "amount is between 0 and 267.75", "Severity"]) == {"warning"}
    assert set(table.loc[table["Rule"] == "row_id is never empty", "Source"]) == {"set"}


def test_a_rule_is_tuned_and_turned_off_from_the_page(workspace: Catalog) -> None:
    number = _number(workspace, "amount is between 0 and 267.75")
    at = signed_in("ada", RULES_PAGE)
    at.selectbox(key="rules_pick").set_value(number).run()
    at.selectbox(key=f"rules_severity_{number}").set_value("critical")
    at.number_input(key=f"rules_max_{number}").set_value(500.0)
    at.toggle(key=f"rules_on_{number}").set_value(False)
    next(b for b in at.button if b.label == "Save rule").click().run()
    assert not at.exception and not at.error, texts(at.error)
    item = _suite(workspace)[number - 1]
    assert (item["severity"], item["kwargs"]["max_value"], rules.is_disabled(item)) == ("critical", 500.0, True)
    assert f"Rule #{number} saved." in [t for t in texts(at.success)]
    row = at.dataframe[0].value.set_index("#").loc[number]
    assert (row["Rule"], row["Severity"], bool(row["On"])) == ("amount is between 0 and 500", "critical", False)


def test_proposing_again_keeps_the_rules_an_admin_set(workspace: Catalog) -> None:
    before = _suite(workspace)
    set_by_admin = [e for e in before if not rules.is_inferred(e)]
    at = signed_in("ada", RULES_PAGE)
    at.button(key="rules_infer").click().run()
    assert not at.exception and not at.error, texts(at.error)
    at.button(key="rules_accept_all").click().run()  # a proposal is applied only when accepted
    assert not at.exception and not at.error, texts(at.error)
    after = _suite(workspace)

    def shape(items: list[dict]) -> list[tuple]:  # type: ignore[type-arg]
        return [(e["type"], e["kwargs"], e.get("severity")) for e in items]

    assert shape([e for e in after if not rules.is_inferred(e)]) == shape(set_by_admin)
    assert sorted(rules.describe(e) for e in after) == sorted(rules.describe(e) for e in before)
    assert any("inferred rule(s) now in the suite" in t for t in texts(at.success))


@pytest.mark.parametrize("username", ["erin", "abe"])
def test_the_page_refuses_non_admins(workspace: Catalog, username: str) -> None:
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "pages" / "rules.py"), default_timeout=300)
    at.session_state["oreo_username"] = username
    at.run()
    assert [e.value for e in at.error] == ["Admins only: data checks are changed by a project's admins."]
    assert not at.dataframe


def _stored(catalog: Catalog) -> tuple[bytes, int]:
    suite = validation.suite_path(datasets.layout_for("shop", "orders")).read_bytes()
    return suite, len(audit.list_events(catalog, limit=10_000))


def _take(at: AppTest, name: str) -> Any:
    return next(c for c in at.checkbox if c.label == name)


def test_a_proposal_is_shown_beside_the_rules_and_keeps_a_stewards_edit(workspace: Catalog) -> None:
    """The issue's regression: "Propose rules" reset a rule set to critical, and applied the proposal at once."""
    number = _number(workspace, "amount is between 0 and 267.75")
    ada = auth.get_user(workspace, "ada")
    datasets.change_dataset_rule(workspace, "shop", "orders", number, rules.RuleChange(severity="critical"), actor=ada)
    before = _stored(workspace)
    at = signed_in("ada", RULES_PAGE)
    at.button(key="rules_infer").click().run()
    assert not at.exception and not at.error, texts(at.error)
    assert _stored(workspace) == before  # nothing changes before Accept
    assert texts(at.title) == ["Rules"] and "Proposal from version 0" in texts(at.subheader)
    kept = _take(at, "amount:be_between")
    assert kept.disabled and not kept.value
    assert any("kept: edited by ada" in t for t in texts(at.markdown))
    at.button(key="rules_accept_all").click().run()
    assert not at.exception and not at.error, texts(at.error)
    item = _suite(workspace)[number - 1]
    assert (item["severity"], rules.edited_by(item)) == ("critical", "ada")
    row = at.dataframe[0].value.set_index("#").loc[number]
    assert (row["Severity"], row["Source"]) == ("critical", "edited by ada")


def test_only_the_ticked_rules_are_accepted_and_a_discarded_proposal_changes_nothing(workspace: Catalog) -> None:
    ada = auth.get_user(workspace, "ada")
    older = [e for e in _suite(workspace) if rules.rule_name(e) != "plan:not_be_null"]
    next(e for e in older if rules.rule_name(e) == "amount:be_between")["kwargs"]["max_value"] = 999.0
    datasets.set_dataset_rules(workspace, "shop", "orders", {"name": "orders", "expectations": older}, actor=ada)
    before = _stored(workspace)
    at = signed_in("ada", RULES_PAGE)
    at.button(key="rules_infer").click().run()
    assert {c.label for c in at.checkbox if not c.disabled} == {"amount:be_between", "plan:not_be_null"}
    at.button(key="rules_discard").click().run()
    assert _stored(workspace) == before and not [c for c in at.checkbox if c.label == "plan:not_be_null"]
    assert "Proposal discarded: no rule changed." in texts(at.info)

    at.button(key="rules_infer").click().run()
    _take(at, "plan:not_be_null").check().run()
    at.button(key="rules_accept_selected").click().run()
    assert not at.exception and not at.error, texts(at.error)
    described = [rules.describe(e) for e in _suite(workspace)]
    assert "plan is never empty" in described and "amount is between 0 and 999" in described
    assert any("Accepted 1 proposed rule(s): plan:not_be_null." in t for t in texts(at.success))
    (event,) = audit.list_events(workspace, name="rules_accepted")
    assert (event.actor, [a["rule"] for a in event.details["accepted"]]) == ("ada", ["plan:not_be_null"])


def test_accepting_nothing_ticked_is_refused(workspace: Catalog) -> None:
    ada = auth.get_user(workspace, "ada")
    older = [e for e in _suite(workspace) if rules.rule_name(e) != "plan:not_be_null"]
    datasets.set_dataset_rules(workspace, "shop", "orders", {"name": "orders", "expectations": older}, actor=ada)
    before = _stored(workspace)
    at = signed_in("ada", RULES_PAGE)
    at.button(key="rules_infer").click().run()
    at.button(key="rules_accept_selected").click().run()
    assert any("no rules chosen" in t for t in texts(at.error))
    assert _stored(workspace) == before
