"""Pages: identifying columns on Datasets, no discard under a revision, comments per revision, imports not sent back."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from core import auth, change_requests, datasets, diff, imports, sessions
from core.catalog import Catalog
from tests.diff_support import html_bodies
from tests.page_support import (
    REVIEW_PAGE,
    TABLE_PAGE,
    copy_workspace,
    edit,
    has_text,
    seed_requests,
    signed_in,
    texts,
    user,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DATASETS_PAGE = "../pages/datasets.py"


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("pages-issue13-gaps")
    return folder, seed_requests(folder)


@pytest.fixture
def ids(seeded: tuple[Path, dict[str, str]]) -> dict[str, str]:
    return seeded[1]


@pytest.fixture
def workspace(seeded: tuple[Path, dict[str, str]], data_root: Path) -> Catalog:
    catalog = copy_workspace(seeded[0], data_root)
    auth.create_user(catalog, "adam", password="adam-password-1")
    auth.add_member(catalog, "shop", "adam", auth.Role.ADMIN)
    return catalog


def test_an_admin_sets_the_identifying_columns_on_the_datasets_page(workspace: Catalog) -> None:
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


def test_a_demoted_admin_loses_the_setting_before_it_saves(workspace: Catalog) -> None:
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


def test_the_table_page_will_not_discard_a_session_awaiting_its_revision(
    workspace: Catalog, ids: dict[str, str]
) -> None:
    cr_id = ids["warn"]
    change_requests.request_changes(workspace, cr_id, "use gold", actor=user(workspace, "abe"))
    cr = change_requests.get_change_request(workspace, cr_id, actor=user(workspace, "erin"))
    gold = [sessions.SetCell("1000", "plan", "gold")]
    sessions.apply_edits(workspace, cr.session_id or "", gold, actor=user(workspace, "erin"))
    at = signed_in("erin", TABLE_PAGE)
    discard = at.button(key="table_discard")
    assert discard.disabled
    assert cr_id in (discard.help or "") and "withdraw the request on My requests" in (discard.help or "")
    assert has_text(at.caption, f"You are revising change request `{cr_id}`")
    assert has_text(at.caption, "cannot be discarded while the request waits")
    # A plain session with pending edits, of another editor, still discards from the same page.
    edit(workspace, "eve", sessions.SetCell("1001", "amount", "99.25"))
    other = signed_in("eve", TABLE_PAGE)
    assert not other.button(key="table_discard").disabled
    assert not has_text(other.caption, "You are revising")


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


def test_the_review_page_offers_reject_not_request_changes_for_an_import(
    workspace: Catalog, tmp_path: Path
) -> None:
    more = tmp_path / "more.csv"
    more.write_text("order_id,plan,amount\n9001,pro,1.50\n")
    cr, _ = imports.import_file(workspace, "shop", "orders", more, actor=user(workspace, "erin"))
    at = signed_in("abe", REVIEW_PAGE)
    at.selectbox(key="review_cr").select(cr.id).run(timeout=120)
    assert not at.exception, at.exception
    asked = at.button(key="review_request_changes")
    assert asked.disabled and "Reject it with a reason" in (asked.help or "")
    assert has_text(at.caption, "An import can't be sent back for changes")
    assert not at.button(key="review_reject").disabled


def test_a_revision_submitted_on_the_table_page_names_its_request_and_keeps_its_title(
    workspace: Catalog, ids: dict[str, str]
) -> None:
    cr_id = ids["warn"]
    change_requests.request_changes(workspace, cr_id, "use gold", actor=user(workspace, "abe"))
    cr = change_requests.get_change_request(workspace, cr_id, actor=user(workspace, "erin"))
    sessions.apply_edits(
        workspace, cr.session_id or "", [sessions.SetCell("1000", "plan", "gold")], actor=user(workspace, "erin")
    )
    at = signed_in("erin", TABLE_PAGE)
    at.button(key="table_submit").click().run(timeout=120)
    assert has_text(at.markdown, f"as revision **2** of **{cr.title}** (`{cr_id}`)")
    assert not [t for t in at.text_input if t.key == "submit_title"]  # a revision keeps its title

    at.button(key="submit_confirm").click().run(timeout=900)
    assert not at.exception, at.exception
    revised = change_requests.get_change_request(workspace, cr_id, actor=user(workspace, "erin"))
    assert (revised.revision, revised.title) == (2, cr.title)
    said = texts(at.success) + texts(at.warning)
    assert any(f"Submitted revision 2 of change request `{cr_id}` ({cr.title})" in t for t in said), said


def test_the_table_page_names_the_session_in_words_not_by_its_id(workspace: Catalog) -> None:
    session = edit(workspace, "eve", sessions.SetCell("1001", "amount", "99.25"))
    at = signed_in("eve", TABLE_PAGE)
    assert has_text(at.caption, "Your editing session (from version 0) · **1** pending change(s)"), texts(at.caption)
    assert not has_text(at.caption, session.session_id)
