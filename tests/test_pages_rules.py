"""Rules page: admins read the checks in plain words, change one, turn one off, and propose rules again."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from streamlit.testing.v1 import AppTest

from core import auth, datasets, rules
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
