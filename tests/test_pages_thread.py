"""Review and My requests: the thread, cell comments beside their cells, request changes and revisions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from core import change_requests, sessions
from core.catalog import Catalog
from core.change_requests import CRState
from tests.diff_support import html_bodies
from tests.page_support import (
    REQUESTS_PAGE,
    REVIEW_PAGE,
    button_keys,
    copy_workspace,
    edit,
    has_text,
    seed_requests,
    signed_in,
    user,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("pages-thread")
    return folder, seed_requests(folder)


@pytest.fixture
def ids(seeded: tuple[Path, dict[str, str]]) -> dict[str, str]:
    return seeded[1]


@pytest.fixture
def workspace(seeded: tuple[Path, dict[str, str]], data_root: Path) -> Catalog:
    return copy_workspace(seeded[0], data_root)


def _review(username: str, cr_id: str) -> AppTest:
    at = signed_in(username, REVIEW_PAGE)
    at.selectbox(key="review_cr").select(cr_id).run(timeout=120)
    assert not at.exception, at.exception
    return at


def _table(at: AppTest, column: str) -> pd.DataFrame:
    """The first data frame drawn with ``column`` (revisions: "staged"; state history: "by")."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def _form_button(at: AppTest, label: str):  # type: ignore[no-untyped-def]
    return next(b for b in at.button if b.label == label)


def test_cell_comment_shows_beside_its_cell_and_in_the_thread(workspace: Catalog, ids: dict[str, str]) -> None:
    at = _review("abe", ids["warn"])
    at.text_area(key="review_comment_text").input("platinum is not a plan")
    at.selectbox(key="review_comment_row").select("1000")
    at.selectbox(key="review_comment_column").select("plan")
    _form_button(at, "Comment").click().run(timeout=120)
    assert not at.exception, at.exception

    thread = change_requests.comments(workspace, ids["warn"], actor=user(workspace, "abe"))
    assert [(c.author, c.body, c.row_id, c.column) for c in thread] == [
        ("abe", "platinum is not a plan", "1000", "plan")
    ]
    markup = "\n".join(html_bodies(at))
    # The comment marker sits in the cell of row 1000, column plan, with the comment as its tooltip.
    cell = markup.split('data-row-id="1000" data-column="plan"', 1)[1].split("</td>", 1)[0]
    assert "oreo-commented" in cell and 'class="oreo-note" title="abe: platinum is not a plan"' in cell
    assert has_text(at.markdown, "on row 1000 · plan")


def test_request_changes_blocks_approval_then_the_author_revises(workspace: Catalog, ids: dict[str, str]) -> None:
    cr_id = ids["warn"]
    at = _review("abe", cr_id)
    at.button(key="review_request_changes").click().run(timeout=120)
    at.text_area(key="request_changes_reason").input("use gold, not platinum")
    at.button(key="request_changes_confirm").click().run(timeout=120)
    assert not at.exception, at.exception
    assert change_requests.get_change_request(workspace, cr_id, actor=user(workspace, "abe")).state == (
        CRState.CHANGES_REQUESTED
    )
    at = _review("abe", cr_id)
    assert at.button(key="review_approve").disabled
    assert has_text(at.warning, "use gold, not platinum")

    # The author sees the reason on My requests, fixes the cell in the same session and submits the revision.
    mine = signed_in("erin", REQUESTS_PAGE)
    assert has_text(mine.warning, "use gold, not platinum")
    assert f"revise_{cr_id}" in button_keys(mine) and f"edit_{cr_id}" in button_keys(mine)
    session = edit(workspace, "erin", sessions.SetCell("1000", "plan", "pro"))
    assert session.session_id == change_requests.get_change_request(
        workspace, cr_id, actor=user(workspace, "erin")
    ).session_id
    mine.button(key=f"revise_{cr_id}").click().run(timeout=120)
    assert not mine.exception, mine.exception
    revised = change_requests.get_change_request(workspace, cr_id, actor=user(workspace, "erin"))
    assert (revised.state, revised.revision) == (CRState.OPEN, 2)

    at = _review("abe", cr_id)
    assert not at.button(key="review_approve").disabled
    markup = "\n".join(html_bodies(at))
    assert "pro" in markup.split('data-row-id="1000" data-column="plan"', 1)[1].split("</td>", 1)[0]
    revisions = _table(at, "staged")
    assert list(revisions["revision"]) == [1, 2]
    # People read each revision's checks as a verdict; the validation run's internal id stays out of sight.
    assert not revisions.astype(str).apply(lambda column: column.str.contains(r"\brun_")).any().any(), revisions
    assert list(_table(at, "by")["state"]) == ["open", "changes_requested", "open"]


def test_my_requests_opens_a_request_with_its_thread_and_history(workspace: Catalog, ids: dict[str, str]) -> None:
    change_requests.add_comment(workspace, ids["mine"], "looks fine", actor=user(workspace, "ann"))
    at = signed_in("eve", REQUESTS_PAGE)
    at.selectbox(key="requests_cr").select(ids["mine"]).run(timeout=120)
    assert not at.exception, at.exception
    assert has_text(at.markdown, "**ann**")
    assert any("looks fine" in t.value for t in at.text)
    assert list(_table(at, "by")["state"]) == ["open"]
    assert html_bodies(at), "the request's row diff is drawn"


# ---------------------------------------------------------------- a cell comment stays with its revision


def test_a_cell_comment_shows_beside_its_cell_only_on_its_revision(workspace: Catalog, ids: dict[str, str]) -> None:
    cr_id = ids["warn"]
    abe, erin = user(workspace, "abe"), user(workspace, "erin")
    change_requests.add_comment(workspace, cr_id, "platinum?", actor=abe, row_id="1000", column="plan")
    change_requests.request_changes(workspace, cr_id, "use gold", actor=abe)
    session_id = change_requests.get_change_request(workspace, cr_id, actor=erin).session_id or ""
    sessions.apply_edits(workspace, session_id, [sessions.SetCell("1000", "plan", "gold")], actor=erin)
    change_requests.revise_change_request(workspace, cr_id, actor=erin)

    at = signed_in("abe", REVIEW_PAGE)
    at.selectbox(key="review_cr").select(cr_id).run(timeout=120)
    assert not at.exception, at.exception

    def plan_cell() -> str:
        markup = "\n".join(html_bodies(at))
        return markup.split('data-row-id="1000" data-column="plan"', 1)[1].split("</td>", 1)[0]

    assert "oreo-note" not in plan_cell()  # revision 1's comment is not beside revision 2's cell
    assert has_text(at.markdown, "on revision 1") and has_text(at.markdown, "on row 1000 · plan")

    change_requests.add_comment(workspace, cr_id, "gold is right", actor=abe, row_id="1000", column="plan")
    at.run(timeout=120)
    assert 'class="oreo-note" title="abe: gold is right"' in plan_cell()
    assert has_text(at.markdown, "on revision 2")
