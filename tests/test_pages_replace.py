"""Import page in replace mode (its explanation, key and deletion warning) and the Review page's replace banner."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from streamlit.testing.v1 import AppTest

from app.import_views import replace_banner_text
from core import change_requests, imports
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.change_requests import CRState
from core.config import get_settings
from tests.page_support import (
    REVIEW_PAGE,
    ROWS,
    copy_workspace,
    has_text,
    order,
    seed_workspace,
    signed_in,
    texts,
    user,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

IMPORT_PAGE = "../pages/imports.py"
REPLACE_TITLE = "Orders as the shop has them now"


def replacement() -> bytes:
    """Every order but the last two, order 1000 on another plan, and a new order 2000."""
    rows = [order(i) for i in range(ROWS - 2)]
    rows[0]["plan"] = "enterprise" if rows[0]["plan"] != "enterprise" else "pro"
    rows.append({"order_id": "2000", "plan": "pro", "amount": "9.00"})
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``seed_workspace`` plus erin's open replace request (1 added, 1 updated, 2 deleted)."""
    folder = tmp_path_factory.mktemp("pages-replace")
    seed_workspace(folder)
    source = folder / "orders-now.csv"
    source.write_bytes(replacement())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_DATA_ROOT", str(folder / "delta"))
        mp.setenv("OREO_DATABASE_URL", f"sqlite:///{folder / 'catalog.db'}")
        get_settings.cache_clear()
        reset_catalogs()
        catalog = open_catalog()
        record, _ = imports.import_file(
            catalog, "shop", "orders", source, actor=user(catalog, "erin"), mode="replace", title=REPLACE_TITLE
        )
        reset_catalogs()
    get_settings.cache_clear()
    return folder, record.id


@pytest.fixture
def workspace(seeded: tuple[Path, str], data_root: Path) -> Catalog:
    return copy_workspace(seeded[0], data_root)


def _upload_replacement(username: str = "erin") -> AppTest:
    at = signed_in(username, IMPORT_PAGE)
    at.file_uploader(key="import_file").set_value(("orders-now.csv", replacement(), "text/csv")).run(timeout=300)
    assert not at.exception, at.exception
    return at


def test_the_import_page_offers_replace_explains_it_and_warns_of_deletions(workspace: Catalog) -> None:
    at = _upload_replacement()
    mode = at.radio(key="import_mode")
    assert list(mode.options) == ["Append", "Upsert", "Replace"]
    assert list(mode.proto.captions)[2] == "the file becomes the table's whole content: rows it lacks are deleted"

    mode.set_value("replace").run(timeout=300)

    assert not at.error, texts(at.error)
    assert has_text(at.caption, "Rows are matched by the dataset's key, **order_id**.")
    assert has_text(at.caption, "will replace the table's content, matched by order_id")
    [warning] = [w.value for w in at.warning]
    assert warning.startswith("This replace deletes **2** row(s) of `shop/orders` whose **order_id** is not in")

    at.button(key="import_submit").click().run(timeout=600)

    assert not at.error, texts(at.error)
    mine = [
        c
        for c in change_requests.list_change_requests(workspace, actor=user(workspace, "abe"), state=CRState.OPEN)
        if c.title == "Replace the content of shop/orders with orders-now.csv"
    ]
    assert len(mine) == 1
    summary = imports.import_summary(workspace, mine[0].id, actor=user(workspace, "abe"))
    assert summary is not None and (summary.added, summary.updated, summary.deleted) == (1, 1, 2)
    assert has_text(at.success, f"Submitted change request `{mine[0].id}` (4 row(s), ")


def test_an_append_or_upsert_shows_no_deletion_warning(workspace: Catalog) -> None:
    at = _upload_replacement()
    at.radio(key="import_mode").set_value("upsert").run(timeout=300)

    assert not at.warning
    assert not has_text(at.caption, "will replace the table's content")
    assert not has_text(at.caption, "Rows are matched by the dataset's key")


def test_review_shows_the_replace_banner_over_the_deleted_updated_and_added_rows(
    workspace: Catalog, seeded: tuple[Path, str]
) -> None:
    cr_id = seeded[1]
    at = signed_in("abe", REVIEW_PAGE)
    at.selectbox(key="review_cr").select(cr_id).run(timeout=120)

    assert not at.exception
    assert REPLACE_TITLE in texts(at.subheader)
    banner = [w.value for w in at.warning]
    assert "**Replaces the table's content: 1 added, 1 updated, 2 deleted**" in banner
    assert has_text(at.caption, "Rows are matched by **order_id**")
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Rows updated"], metrics["Rows inserted"], metrics["Rows deleted"]) == ("1", "1", "2")
    table = "\n".join(h.proto.body for h in at.get("html"))
    assert table.count('data-kind="delete"') == 2
    assert 'data-row-id="1118" data-kind="delete"' in table and 'data-row-id="2000" data-kind="insert"' in table


def test_banner_text() -> None:
    summary = imports.ImportSummary("cr_x", "f.csv", "replace", "id", added=1200, updated=3, deleted=0)
    assert replace_banner_text(summary) == "Replaces the table's content: 1,200 added, 3 updated, 0 deleted"
