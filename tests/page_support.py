"""Helpers shared by the editing, requests and review page tests (AppTest, in-process)."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core import auth, datasets, projects, sessions
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings

APP = Path(__file__).resolve().parent.parent / "app" / "main.py"
# Relative to app/main.py, as AppTest.switch_page wants.
TABLE_PAGE = "../pages/table.py"
REQUESTS_PAGE = "../pages/requests.py"
REVIEW_PAGE = "../pages/review.py"
PASSWORD = "correct-horse-42"
ROWS = 120
PLANS = ("free", "pro", "enterprise", "starter")


def order(i: int) -> dict[str, str]:
    return {"order_id": str(1000 + i), "plan": PLANS[i % 4], "amount": f"{i * 1.5:.2f}"}


def seed_workspace(folder: Path) -> Path:
    """Project ``shop`` with dataset ``orders`` (key ``order_id``).

    ``erin`` and ``eve`` are editors, ``ann`` and ``abe`` approvers, ``olga`` is in no project.
    """
    source = folder / "orders.csv"
    rows = [order(i) for i in range(ROWS)]
    with source.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_DATA_ROOT", str(folder / "delta"))
        mp.setenv("OREO_DATABASE_URL", f"sqlite:///{folder / 'catalog.db'}")
        get_settings.cache_clear()
        reset_catalogs()
        catalog = open_catalog()
        projects.create_project(catalog, "shop", name="Shop project")
        for name, role in (("erin", "editor"), ("eve", "editor"), ("ann", "approver"), ("abe", "approver")):
            auth.create_user(catalog, name, password=PASSWORD, display_name=name.title())
            auth.add_member(catalog, "shop", name, role)
        auth.create_user(catalog, "olga", password=PASSWORD)
        datasets.create_dataset(catalog, "shop", "orders", source, key="order_id")
        reset_catalogs()
    get_settings.cache_clear()
    return folder


def copy_workspace(seeded: Path, data_root: Path) -> Catalog:
    """The test's own copy of a seeded workspace, where tests/conftest.py points the app."""
    shutil.copytree(seeded / "delta", data_root)
    for db in seeded.glob("catalog.db*"):
        shutil.copy2(db, data_root.parent / db.name)
    reset_catalogs()
    return open_catalog()


def signed_in(username: str, page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.session_state["oreo_username"] = username
    at.run(timeout=120)
    if page is not None:
        at.switch_page(page).run(timeout=120)
    assert not at.exception, at.exception
    return at


def texts(elements: Iterable[Any]) -> list[str]:
    return [e.value for e in elements]


def has_text(elements: Iterable[Any], needle: str) -> bool:
    return any(needle in e.value for e in elements)


def user(catalog: Catalog, username: str) -> auth.User:
    return auth.get_user(catalog, username)


def edit(catalog: Catalog, username: str, *ops: sessions.EditOp) -> sessions.SessionInfo:
    """Save ``ops`` to the user's open session on shop/orders, as the Table page would."""
    actor = user(catalog, username)
    session = sessions.open_session(catalog, "shop", "orders", actor=actor)
    sessions.apply_edits(catalog, session.session_id, list(ops), actor=actor)
    return session


def pending(catalog: Catalog, username: str) -> list[sessions.CellEdit]:
    """The user's pending edits on shop/orders ([] without an open session)."""
    session = sessions.current_session(catalog, "shop", "orders", actor=user(catalog, username))
    if session is None:
        return []
    return sessions.effective_edits(datasets.layout_for("shop", "orders"), session.session_id)


def button_keys(at: AppTest) -> list[str]:
    return [b.key for b in at.button if b.key]


# Rules on shop/orders for the review tests: an unknown plan is a warning, a negative amount critical.
RULES = {
    "name": "orders",
    "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "row_id"}, "severity": "critical"},
        {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "row_id"}, "severity": "critical"},
        {
            "type": "expect_column_values_to_be_in_set",
            "kwargs": {"column": "plan", "value_set": list(PLANS)},
            "severity": "warning",
        },
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "amount", "min_value": 0},
            "severity": "critical",
        },
    ],
}


def submit(catalog: Catalog, username: str, title: str, *ops: sessions.EditOp) -> str:
    """Edit shop/orders as ``username`` and submit the edits; returns the change request id."""
    from core import change_requests

    session = edit(catalog, username, *ops)
    cr = change_requests.submit_change_request(catalog, session.session_id, actor=user(catalog, username), title=title)
    return cr.id


def seed_requests(folder: Path) -> dict[str, str]:
    """The workspace of ``seed_workspace`` with RULES and open change requests; returns name -> id.

    * ``warn``: erin sets order 1000's plan to "platinum" (a warning);
    * ``fail``: eve sets order 1002's amount to -5 (a critical failure);
    * ``mine``: eve sets order 1003's plan to "pro" (passes);
    * ``own``: ann, an approver, sets order 1003's plan to "enterprise" (passes; conflicts with ``mine``
      once one of them is merged).
    """
    from core import datasets

    seed_workspace(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_DATA_ROOT", str(folder / "delta"))
        mp.setenv("OREO_DATABASE_URL", f"sqlite:///{folder / 'catalog.db'}")
        get_settings.cache_clear()
        reset_catalogs()
        catalog = open_catalog()
        datasets.set_dataset_rules(catalog, "shop", "orders", RULES, actor=auth.SYSTEM)
        ids = {
            "warn": submit(catalog, "erin", "Platinum for 1000", sessions.SetCell("1000", "plan", "platinum")),
            "fail": submit(catalog, "eve", "Refund 1002", sessions.SetCell("1002", "amount", "-5")),
            "mine": submit(catalog, "eve", "Pro for 1003", sessions.SetCell("1003", "plan", "pro")),
            "own": submit(catalog, "ann", "Enterprise for 1003", sessions.SetCell("1003", "plan", "enterprise")),
        }
        reset_catalogs()
    get_settings.cache_clear()
    return ids


def record_timers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float | None]]:
    """From now on, each ``st.fragment(func, run_every=...)`` the pages make, as (function name, run_every)."""
    made: list[tuple[str, float | None]] = []
    real = st.fragment

    def fragment(func: Any = None, *, run_every: Any = None) -> Any:
        if func is not None:
            made.append((getattr(func, "__name__", ""), run_every))
        return real(func, run_every=run_every)

    monkeypatch.setattr(st, "fragment", fragment)
    return made
