"""Page tests: the sign-in gate, the Datasets page and the Table page, run in-process with AppTest."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from streamlit.testing.v1 import AppTest

from core import auth, datasets, diff, projects
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from tests.page_support import signed_in, texts, user

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP = Path(__file__).resolve().parent.parent / "app" / "main.py"
TABLE_PAGE = "../pages/table.py"  # relative to app/main.py, as AppTest.switch_page wants
PASSWORD = "correct-horse-42"
ROWS = 120
PLANS = ("free", "pro", "enterprise", "starter")


def _plan(i: int) -> str:
    # Uneven on purpose, so a filter that ignored its value could not hit the same count.
    return PLANS[0] if i % 5 < 2 else PLANS[i % 3 + 1]


def _orders() -> list[dict[str, str]]:
    return [{"order_id": str(1000 + i), "plan": _plan(i), "amount": f"{i * 1.5:.2f}"} for i in range(ROWS)]


@pytest.fixture
def orders() -> list[dict[str, str]]:
    return _orders()


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seed once per module (Spark writes the table): project ``shop`` with dataset ``orders``.

    ``erin`` is the project's editor; ``olga`` is in no project. Each test gets a copy.
    """
    seed = tmp_path_factory.mktemp("pages-seed")
    source = seed / "orders.csv"
    rows = _orders()
    with source.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_DATA_ROOT", str(seed / "delta"))
        mp.setenv("OREO_DATABASE_URL", f"sqlite:///{seed / 'catalog.db'}")
        get_settings.cache_clear()
        reset_catalogs()
        catalog = open_catalog()
        projects.create_project(catalog, "shop", name="Shop project")
        auth.create_user(catalog, "erin", password=PASSWORD, display_name="Erin Editor")
        auth.add_member(catalog, "shop", "erin", auth.Role.EDITOR)
        auth.create_user(catalog, "olga", password=PASSWORD)
        datasets.create_dataset(catalog, "shop", "orders", source, key="order_id")
        reset_catalogs()
    get_settings.cache_clear()
    return seed


@pytest.fixture
def workspace(seeded: Path, data_root: Path) -> Catalog:
    """This test's own copy of the seeded data root and catalog, where conftest points the app."""
    shutil.copytree(seeded / "delta", data_root)
    for db in seeded.glob("catalog.db*"):
        shutil.copy2(db, data_root.parent / db.name)
    reset_catalogs()
    return open_catalog()


def _app() -> AppTest:
    return AppTest.from_file(str(APP), default_timeout=60)


def _signed_in(username: str) -> AppTest:
    at = _app()
    at.session_state["oreo_username"] = username
    return at.run(timeout=60)


def _sign_in(at: AppTest, username: str, password: str) -> AppTest:
    at.text_input(key="login_username").input(username)
    at.text_input(key="login_password").input(password)
    at.button(key="login_submit").click()
    return at.run(timeout=60)


def _texts(elements: Iterable[Any]) -> list[str]:
    return [e.value for e in elements]


def _table_caption(at: AppTest) -> str:
    captions = [c for c in _texts(at.caption) if c.startswith(("Rows ", "No rows "))]
    assert len(captions) == 1, _texts(at.caption)
    return captions[0]


def test_signed_out_only_the_login_page_renders(workspace: Catalog) -> None:
    at = _app().run(timeout=60)

    assert not at.exception
    assert _texts(at.title) == ["Oreo"]
    assert "Sign in" in _texts(at.header)
    assert at.text_input(key="login_username").value == ""
    assert at.text_input(key="login_password").value == ""
    assert not [m for m in _texts(at.sidebar.markdown) if "Signed in as" in m]
    # The router registers only the login page (under every page's address), so the Table page cannot be reached.
    with pytest.raises(ValueError, match=r"Known pages: \[('[^']*/pages/login\.py'(, )?)+\]\.$"):
        at.switch_page(TABLE_PAGE)


@pytest.mark.parametrize(
    ("username", "password"),
    [("erin", "wrong-password"), ("nobody", PASSWORD), ("erin", "")],
    ids=["wrong-password", "unknown-user", "empty-password"],
)
def test_failed_sign_in_shows_an_error_and_stays_signed_out(workspace: Catalog, username: str, password: str) -> None:
    at = _sign_in(_app().run(timeout=60), username, password)

    assert not at.exception
    assert _texts(at.error) == ["invalid username or password"]
    assert "oreo_username" not in at.session_state
    assert _texts(at.title) == ["Oreo"]


def test_a_disabled_account_is_told_so_at_sign_in(workspace: Catalog) -> None:
    auth.disable_user(workspace, "erin")
    at = _sign_in(_app().run(timeout=60), "erin", PASSWORD)

    assert not at.exception
    assert _texts(at.error) == ["this account is disabled; ask a site admin to enable it"]
    assert "oreo_username" not in at.session_state


def workspace_creator(catalog: Catalog) -> str:
    from core import auth, datasets

    return datasets.get_dataset(catalog, "shop", "orders", actor=auth.SYSTEM).created_by


def test_sign_in_shows_the_datasets_page(workspace: Catalog) -> None:
    at = _sign_in(_app().run(timeout=60), "erin", PASSWORD)

    assert not at.exception
    assert at.session_state["oreo_username"] == "erin"
    assert _texts(at.title) == ["Datasets"]
    assert "Shop project" in _texts(at.subheader)
    assert any("your role: **editor**" in c for c in _texts(at.caption))
    listing = at.dataframe[0].value
    assert list(listing["dataset"]) == ["orders"]
    assert list(listing["rows"]) == [ROWS]
    # The last change reads as a version, what it was and who made it, never a commit UUID.
    assert list(listing["last change"]) == ["v0 · created"]
    assert list(listing["by"]) == [workspace_creator(workspace)]
    assert "last commit" not in listing.columns
    sidebar = " ".join(_texts(at.sidebar.markdown))
    assert "Signed in as **Erin Editor**" in sidebar
    assert "`erin` · editor" in sidebar


def test_table_page_shows_the_first_page_and_the_total(workspace: Catalog, orders: list[dict[str, str]]) -> None:
    at = _signed_in("erin")
    at.switch_page(TABLE_PAGE).run(timeout=60)

    assert not at.exception
    assert _texts(at.title) == ["Table"]
    assert at.selectbox(key="oreo_dataset").value == "shop/orders"
    seen: list[str] = []
    for page_no, first, last in [(1, 1, 50), (2, 51, 100), (3, 101, ROWS)]:
        if page_no > 1:
            at.pagination(key="table_page").set_value(page_no).run(timeout=60)
        assert _table_caption(at).startswith(f"Rows **{first}–{last}** of **{ROWS}**")
        ids = list(at.dataframe[0].value["order_id"].astype(str))
        assert len(ids) == last - first + 1
        seen += ids
    # The pages neither overlap nor skip a row.
    assert sorted(seen) == sorted(o["order_id"] for o in orders)


@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
def test_table_sort_orders_every_page(workspace: Catalog, orders: list[dict[str, str]], descending: bool) -> None:
    by_amount = sorted(orders, key=lambda o: float(o["amount"]), reverse=descending)
    at = _signed_in("erin")
    at.switch_page(TABLE_PAGE).run(timeout=60)

    at.selectbox(key="table_sort_col").select("amount").run(timeout=60)
    at.toggle(key="table_sort_desc").set_value(descending).run(timeout=60)
    assert [str(i) for i in at.dataframe[0].value["order_id"]] == [o["order_id"] for o in by_amount[:50]]

    at.pagination(key="table_page").set_value(2).run(timeout=60)
    assert _table_caption(at).startswith(f"Rows **51–100** of **{ROWS}**")
    assert [str(i) for i in at.dataframe[0].value["order_id"]] == [o["order_id"] for o in by_amount[50:100]]


@pytest.mark.parametrize(
    ("op", "value", "matches"),
    [
        ("eq", "pro", lambda plan: plan == "pro"),
        ("eq", "PRO", lambda plan: False),
        ("contains", "ter", lambda plan: "ter" in plan),
        ("contains", "E", lambda plan: "e" in plan),
    ],
    ids=["equals", "equals-is-case-sensitive", "contains", "contains-ignores-case"],
)
def test_table_filter_narrows_the_total(
    workspace: Catalog, orders: list[dict[str, str]], op: str, value: str, matches: Callable[[str], bool]
) -> None:
    expected = [o for o in orders if matches(o["plan"])]
    at = _signed_in("erin")
    at.switch_page(TABLE_PAGE).run(timeout=60)

    at.selectbox(key="table_filter_col").select("plan").run(timeout=60)
    at.selectbox(key="table_filter_op_plan").select(op).run(timeout=60)
    at.text_input(key="table_filter_value_plan_one").input(value).run(timeout=60)
    at.button(key="table_filter_add").click().run(timeout=60)

    assert not at.exception
    assert len(expected) < ROWS
    last = min(50, len(expected))
    # An empty page says so (issue 24), not "Rows 0–0 of 0".
    shown = f"Rows **1–{last}** of **{len(expected)}**" if expected else "No rows · "
    assert _table_caption(at).startswith(shown)
    grid = at.dataframe[0].value
    assert len(grid) == last
    assert set(grid["order_id"].astype(str)) <= {o["order_id"] for o in expected}
    assert all(matches(plan) for plan in grid["plan"])


def test_user_without_membership_is_told_so(workspace: Catalog) -> None:
    at = _signed_in("olga")

    assert not at.exception
    assert _texts(at.title) == ["Datasets"]
    assert _texts(at.info) == ["You are not a member of any project yet. Ask an admin to add you."]
    assert not at.dataframe
    assert "`olga` · no role yet" in " ".join(_texts(at.sidebar.markdown))

    at.switch_page(TABLE_PAGE).run(timeout=60)
    assert _texts(at.info) == ["No datasets to show."]
    assert not at.caption


def test_sign_out_returns_to_the_login_page(workspace: Catalog) -> None:
    at = _sign_in(_app().run(timeout=60), "erin", PASSWORD)
    assert _texts(at.title) == ["Datasets"]

    at.sidebar.button(key="sign_out").click().run(timeout=60)

    assert not at.exception
    assert "oreo_username" not in at.session_state
    assert _texts(at.title) == ["Oreo"]
    assert at.text_input(key="login_username").value == ""


SSO_SECRETS = {
    "redirect_uri": "http://localhost:8501/oauth2callback",
    "cookie_secret": "page-tests-only",
    "client_id": "oreo",
    "client_secret": "unused",
    "server_metadata_url": "http://localhost:9/.well-known/openid-configuration",
}


@pytest.mark.parametrize("configured", [True, False], ids=["auth-section", "no-auth-section"])
def test_sso_button_only_when_oidc_is_configured(workspace: Catalog, configured: bool) -> None:
    at = _app()
    if configured:
        at.secrets["auth"] = SSO_SECRETS
    at.user = {"is_logged_in": False}
    at.run(timeout=60)

    assert not at.exception
    assert [b.key for b in at.button if b.key == "login_sso"] == (["login_sso"] if configured else [])


@pytest.mark.parametrize(
    ("groups", "role"),
    [(["stewards"], "approver"), (["visitors"], None), ("stewards", "approver")],
    ids=["mapped-group", "unmapped-group", "single-group-as-string"],
)
def test_sso_identity_gets_the_role_its_group_grants(
    workspace: Catalog, monkeypatch: pytest.MonkeyPatch, groups: list[str] | str, role: str | None
) -> None:
    monkeypatch.setenv("OREO_OIDC_GROUP_ROLES", '{"stewards": ["shop:approver"]}')
    get_settings.cache_clear()
    at = _app()
    at.secrets["auth"] = SSO_SECRETS
    at.user = {"is_logged_in": True, "email": "Stella@Oreo.example", "name": "Stella Steward", "groups": groups}
    at.run(timeout=60)

    assert not at.exception
    assert at.session_state["oreo_username"] == "stella"
    assert at.session_state["oreo_auth_method"] == "oidc"
    sidebar = " ".join(_texts(at.sidebar.markdown))
    assert "Signed in as **Stella Steward**" in sidebar
    assert f"`stella` · {role or 'no role yet'}" in sidebar
    user = auth.get_user(workspace, "stella")
    assert (user.email, user.auth_source) == ("stella@oreo.example", "oidc")
    assert auth.role_in(workspace, user, "shop") == (auth.Role(role) if role else None)

    at.sidebar.button(key="sign_out").click().run(timeout=60)
    assert at.user == {"is_logged_in": False}
    assert "oreo_username" not in at.session_state
    # In a browser st.logout now redirects through the provider; the next run is signed out.
    at.run(timeout=60)
    assert _texts(at.title) == ["Oreo"]
    assert "oreo_username" not in at.session_state


# ---------------------------------------------------------------- the Datasets page's settings (admins only)


DATASETS_PAGE = "../pages/datasets.py"


@pytest.fixture
def adam(workspace: Catalog) -> auth.User:
    """``adam``, an admin of shop: dataset settings are for admins."""
    user, _ = auth.create_user(workspace, "adam", password="adam-password-1")
    auth.add_member(workspace, "shop", "adam", auth.Role.ADMIN)
    return user


def test_an_admin_sets_the_identifying_columns_on_the_datasets_page(workspace: Catalog, adam: auth.User) -> None:
    at = signed_in("adam", DATASETS_PAGE)
    assert "Dataset settings" in [e.label for e in at.expander]
    chooser = at.multiselect(key="labels_columns_shop_orders")
    assert chooser.value == diff.label_columns(workspace, "shop", "orders", actor=user(workspace, "adam"))
    assert chooser.max_selections == 3
    assert at.button(key="labels_save_shop").disabled  # nothing changed yet

    chooser.set_value(["amount", "plan"]).run(timeout=120)
    at.button(key="labels_save_shop").click().run(timeout=120)
    assert not at.exception, at.exception
    assert diff.label_columns(workspace, "shop", "orders", actor=user(workspace, "erin")) == ["amount", "plan"]
    assert "shop/orders: diffs now show amount, plan." in texts(at.success)
    assert at.multiselect(key="labels_columns_shop_orders").value == ["amount", "plan"]

    at.button(key="labels_reset_shop").click().run(timeout=120)
    info = datasets.get_dataset(workspace, "shop", "orders", actor=user(workspace, "adam"))
    default = diff.default_label_columns("order_id", datasets.dataset_columns(info))
    assert diff.label_columns(workspace, "shop", "orders", actor=user(workspace, "adam")) == default


def test_a_demoted_admin_loses_the_setting_before_it_saves(workspace: Catalog, adam: auth.User) -> None:
    at = signed_in("adam", DATASETS_PAGE)
    before = diff.label_columns(workspace, "shop", "orders", actor=user(workspace, "adam"))
    at.multiselect(key="labels_columns_shop_orders").set_value(["plan"]).run(timeout=120)
    # Demoted while the page was open: the next run re-reads the role, offers no settings and saves nothing.
    auth.add_member(workspace, "shop", "adam", auth.Role.EDITOR)
    at.button(key="labels_save_shop").click().run(timeout=120)
    assert not at.exception, at.exception
    assert "Dataset settings" not in [e.label for e in at.expander]
    assert diff.label_columns(workspace, "shop", "orders", actor=user(workspace, "adam")) == before


def test_editors_do_not_see_dataset_settings(workspace: Catalog) -> None:
    at = signed_in("erin", DATASETS_PAGE)
    assert "Dataset settings" not in [e.label for e in at.expander]
    assert not [m for m in at.multiselect if str(m.key).startswith("labels_columns_")]
