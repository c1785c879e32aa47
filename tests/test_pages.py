"""Page tests: the sign-in gate, the Datasets page and the Table page, run in-process with AppTest."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core import auth, datasets, projects
from core.catalog import Catalog

APP = Path(__file__).resolve().parent.parent / "app" / "main.py"
TABLE_PAGE = "../pages/table.py"  # relative to app/main.py, as AppTest.switch_page wants
PASSWORD = "correct-horse-42"
ROWS = 120
PLANS = ("free", "pro", "enterprise", "starter")


def _plan(i: int) -> str:
    # Uneven on purpose, so a filter that ignored its value could not hit the same count.
    return PLANS[0] if i % 5 < 2 else PLANS[i % 3 + 1]


@pytest.fixture
def orders() -> list[dict[str, str]]:
    return [{"order_id": str(1000 + i), "plan": _plan(i), "amount": f"{i * 1.5:.2f}"} for i in range(ROWS)]


@pytest.fixture
def workspace(catalog: Catalog, spark, tmp_path: Path, orders: list[dict[str, str]]) -> Catalog:  # type: ignore[no-untyped-def]
    """Project ``shop`` with dataset ``orders``; ``erin`` is its editor, ``olga`` is in no project."""
    source = tmp_path / "orders.csv"
    with source.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(orders[0]))
        writer.writeheader()
        writer.writerows(orders)
    projects.create_project(catalog, "shop", name="Shop project")
    auth.create_user(catalog, "erin", password=PASSWORD, display_name="Erin Editor")
    auth.add_member(catalog, "shop", "erin", auth.Role.EDITOR)
    auth.create_user(catalog, "olga", password=PASSWORD)
    datasets.create_dataset(catalog, "shop", "orders", source, key="order_id")
    return catalog


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


def _texts(elements) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.value for e in elements]


def _table_caption(at: AppTest) -> str:
    captions = [c for c in _texts(at.caption) if c.startswith("Rows ")]
    assert len(captions) == 1, _texts(at.caption)
    return captions[0]


def test_signed_out_only_the_login_page_renders(workspace: Catalog) -> None:
    at = _app().run(timeout=60)

    assert not at.exception
    assert _texts(at.title) == ["Oreo"]
    assert "Sign in" in _texts(at.subheader)
    assert at.text_input(key="login_username").value == ""
    assert at.text_input(key="login_password").value == ""
    assert not [m for m in _texts(at.sidebar.markdown) if "Signed in as" in m]
    # The router registers the login page only, so the Table page cannot be reached.
    with pytest.raises(ValueError, match=r"Known pages: \['[^']*/pages/login\.py'\]"):
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


def test_sign_in_shows_the_datasets_page(workspace: Catalog) -> None:
    at = _sign_in(_app().run(timeout=60), "erin", PASSWORD)

    assert not at.exception
    assert at.session_state["oreo_username"] == "erin"
    assert _texts(at.title) == ["Datasets"]
    assert "Shop project" in _texts(at.subheader)
    assert any("your role: **editor**" in c for c in _texts(at.caption))
    listing = at.dataframe(key="datasets_shop").value
    assert list(listing["dataset"]) == ["orders"]
    assert list(listing["rows"]) == [ROWS]
    sidebar = " ".join(_texts(at.sidebar.markdown))
    assert "Signed in as **Erin Editor**" in sidebar
    assert "`erin` · editor" in sidebar


def test_table_page_shows_the_first_page_and_the_total(workspace: Catalog, orders: list[dict[str, str]]) -> None:
    at = _signed_in("erin")
    at.switch_page(TABLE_PAGE).run(timeout=60)

    assert not at.exception
    assert _texts(at.title) == ["Table"]
    assert at.selectbox(key="oreo_dataset").value == "shop/orders"
    assert _table_caption(at).startswith(f"Rows **1–50** of **{ROWS}**")
    grid = at.dataframe(key="table_grid").value
    assert len(grid) == 50
    assert list(grid["order_id"].astype(str)) == [o["order_id"] for o in orders[:50]]

    at.pagination(key="table_page").set_value(2).run(timeout=60)
    assert _table_caption(at).startswith(f"Rows **51–100** of **{ROWS}**")
    grid = at.dataframe(key="table_grid").value
    assert list(grid["order_id"].astype(str)) == [o["order_id"] for o in orders[50:100]]


@pytest.mark.parametrize(
    ("op", "value", "matches"),
    [
        ("equals", "pro", lambda plan: plan == "pro"),
        ("equals", "PRO", lambda plan: False),
        ("contains", "ter", lambda plan: "ter" in plan),
        ("contains", "E", lambda plan: "e" in plan),
    ],
    ids=["equals", "equals-is-case-sensitive", "contains", "contains-ignores-case"],
)
def test_table_filter_narrows_the_total(
    workspace: Catalog, orders: list[dict[str, str]], op: str, value: str, matches
) -> None:  # type: ignore[no-untyped-def]
    expected = [o for o in orders if matches(o["plan"])]
    at = _signed_in("erin")
    at.switch_page(TABLE_PAGE).run(timeout=60)

    at.selectbox(key="table_filter_col").select("plan")
    at.selectbox(key="table_filter_op").select(op)
    at.text_input(key="table_filter_value").input(value)
    at.run(timeout=60)

    assert not at.exception
    assert len(expected) < ROWS
    last = min(50, len(expected))
    first = 1 if expected else 0
    assert _table_caption(at).startswith(f"Rows **{first}–{last}** of **{len(expected)}**")
    grid = at.dataframe(key="table_grid").value
    assert list(grid["order_id"].astype(str)) == [o["order_id"] for o in expected[:50]]


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
