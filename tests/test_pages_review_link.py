"""The Review page opens the request its link names or says it is no longer open; decisions name their revision."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from streamlit.testing.v1 import AppTest

from core import change_requests, merge, sessions
from core.catalog import Catalog
from core.change_requests import CRState
from tests.page_support import (
    APP,
    REVIEW_PAGE,
    button_keys,
    copy_workspace,
    has_text,
    seed_requests,
    texts,
    user,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TITLES = {"warn": "Platinum for 1000", "fail": "Refund 1002", "mine": "Pro for 1003", "own": "Enterprise for 1003"}


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("pages-review-link")
    return folder, seed_requests(folder)


@pytest.fixture
def ids(seeded: tuple[Path, dict[str, str]]) -> dict[str, str]:
    return seeded[1]


@pytest.fixture
def workspace(seeded: tuple[Path, dict[str, str]], data_root: Path) -> Catalog:
    return copy_workspace(seeded[0], data_root)


def _linked(username: str, cr_id: str) -> AppTest:
    """``username`` follows a link to ``/review?cr=<cr_id>``."""
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.session_state["oreo_username"] = username
    at.run(timeout=120)
    at.switch_page(REVIEW_PAGE)
    at.query_params["cr"] = cr_id
    at.run(timeout=120)
    assert not at.exception, at.exception
    return at


def test_a_link_opens_the_request_it_names_not_the_newest(workspace: Catalog, ids: dict[str, str]) -> None:
    at = _linked("abe", ids["fail"])  # the queue's newest is "own"

    assert at.selectbox(key="review_cr").value == ids["fail"]
    assert TITLES["fail"] in texts(at.subheader)
    assert TITLES["own"] not in texts(at.subheader)

    # Picking another request keeps the address in step with what is shown.
    at.selectbox(key="review_cr").select(ids["warn"]).run(timeout=120)
    assert at.query_params["cr"] == ids["warn"]
    assert TITLES["warn"] in texts(at.subheader)


@pytest.mark.parametrize("how", ["merged", "withdrawn", "unknown"])
def test_a_link_to_a_request_no_longer_open_says_so_and_offers_no_decision(
    workspace: Catalog, ids: dict[str, str], how: str
) -> None:
    cr_id = ids["warn"]
    if how == "merged":
        merge.approve_change_request(workspace, cr_id, actor=user(workspace, "abe"))
    elif how == "withdrawn":
        change_requests.withdraw_change_request(workspace, cr_id, actor=user(workspace, "erin"))
    else:
        cr_id = "cr_no_such_request"

    at = _linked("abe", cr_id)

    if how == "unknown":
        assert has_text(at.warning, f"Change request `{cr_id}` is not in your projects or does not exist")
    else:
        assert has_text(at.warning, f"Change request `{cr_id}` ({TITLES['warn']}) is {how} — it is no longer open.")
    assert not {"review_approve", "review_reject", "review_request_changes"} & set(button_keys(at))
    assert not at.selectbox  # no picker falls back to another request
    assert not at.subheader  # nor shows one
    assert ids["fail"] in list(at.dataframe[0].value["id"])  # the open ones are still listed


def test_an_approval_of_a_revision_that_moved_on_is_refused(workspace: Catalog, ids: dict[str, str]) -> None:
    cr_id = ids["warn"]
    at = _linked("abe", cr_id)  # the page shows revision 1

    # Behind the page's back another approver sends it back and its author revises it.
    change_requests.request_changes(workspace, cr_id, "platinum is not a plan yet", actor=user(workspace, "ann"))
    shown = change_requests.get_change_request(workspace, cr_id, actor=user(workspace, "erin"))
    erin = user(workspace, "erin")
    sessions.apply_edits(workspace, str(shown.session_id), [sessions.SetCell("1000", "plan", "pro")], actor=erin)
    change_requests.revise_change_request(workspace, cr_id, actor=erin)

    at.button(key="review_approve").click().run(timeout=120)
    assert has_text(at.markdown, f"Change request `{cr_id}` · **revision 1**"), texts(at.markdown)
    at.button(key="approve_confirm").click().run(timeout=600)

    assert has_text(at.error, f"change request {cr_id} is at revision 2 now, not revision 1 that you reviewed")
    now = change_requests.get_change_request(workspace, cr_id, actor=user(workspace, "abe"))
    assert (now.state, now.revision, now.merged_version) == (CRState.OPEN, 2, None)


def test_a_rejection_of_a_revision_that_moved_on_is_refused(workspace: Catalog, ids: dict[str, str]) -> None:
    cr_id = ids["fail"]
    at = _linked("abe", cr_id)  # revision 1

    change_requests.request_changes(workspace, cr_id, "not negative", actor=user(workspace, "ann"))
    eve = user(workspace, "eve")
    shown = change_requests.get_change_request(workspace, cr_id, actor=eve)
    sessions.apply_edits(workspace, str(shown.session_id), [sessions.SetCell("1002", "amount", "5")], actor=eve)
    change_requests.revise_change_request(workspace, cr_id, actor=eve)
    at.button(key="review_reject").click().run(timeout=120)
    at.text_area(key="reject_reason").input("No refunds here.")
    at.button(key="reject_confirm").click().run(timeout=120)

    assert has_text(at.error, f"change request {cr_id} is at revision 2 now, not revision 1"), texts(at.error)
    assert change_requests.get_change_request(workspace, cr_id, actor=eve).state == CRState.OPEN
