"""The change-request view: ``oreo cr show --json``, ``GET /api/v1/change-requests/{id}`` and the Review page agree."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi.testclient import TestClient

from api.app import create_app
from app.components import status_badge
from core import auth, change_requests, datasets, projects, sessions, tokens
from core.catalog import Catalog
from interface import views
from tests.diff_support import html_bodies
from tests.in_process import run_cli
from tests.page_support import REVIEW_PAGE, signed_in, texts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# One more page of changes than the API answers at once, and some: each row gets one changed cell.
ROWS = views.PAGE_MAX + 50


def _big_request(catalog: Catalog, folder: Path) -> str:
    """``ed`` renames every row of shop/people (ROWS cell changes); ``ann``, an approver, comments on it."""
    source = folder / "people.csv"
    source.write_text("id,name\n" + "".join(f"{i},person {i}\n" for i in range(ROWS)))
    projects.create_project(catalog, "shop")
    for name, role in (("ed", auth.Role.EDITOR), ("ann", auth.Role.APPROVER)):
        auth.create_user(catalog, name, password=f"{name}-password-1")
        auth.add_member(catalog, "shop", name, role)
    datasets.create_dataset(catalog, "shop", "people", source, key="id")
    ed, ann = auth.get_user(catalog, "ed"), auth.get_user(catalog, "ann")
    session = sessions.open_session(catalog, "shop", "people", actor=ed)
    renames: list[sessions.EditOp] = [sessions.SetCell(str(i), "name", f"renamed {i}") for i in range(ROWS)]
    sessions.apply_edits(catalog, session.session_id, renames, actor=ed)
    cr = change_requests.submit_change_request(catalog, session.session_id, actor=ed, title="Rename everyone")
    change_requests.add_comment(catalog, cr.id, "all of them?", actor=ann)
    return cr.id


def _facts(doc: dict[str, Any]) -> dict[str, Any]:
    """What a person reviewing the request learns from a ``cr show`` document, its changes aside."""
    return {
        "id": doc["cr_id"], "title": doc["title"], "author": doc["author"], "state": doc["state"],
        "revision": doc["revision"], "base_version": doc["base_version"], "rows": doc["rows"], "cells": doc["cells"],
        "total": doc["total"],
        "validation": doc["validation"]["status"] if doc["validation"] else None,
        "conflicts": len(doc["conflicts"]),
        "thread": [(c["author"], c["text"]) for c in doc["thread"]],
        "revisions": len(doc["revisions"]), "states": [s["state"] for s in doc["state_history"]],
    }  # fmt: skip


def test_the_cli_the_api_and_the_review_page_give_the_same_facts_of_a_request_over_10000_changes(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    cr_id = _big_request(catalog, tmp_path)

    # The CLI lists every change (no --limit), reading them a page of the rule at a time.
    code, cli_doc, err = run_cli("cr", "show", cr_id, "--as", "ann")
    assert code == 0, err
    assert cli_doc["total"] == ROWS and len(cli_doc["changes"]) == ROWS

    # The API answers a page of at most PAGE_MAX; the next page starts where it ends.
    api = TestClient(create_app(), headers={"Authorization": f"Bearer {tokens.create_token(catalog, 'ann').secret}"})
    first = api.get(f"/api/v1/change-requests/{cr_id}")
    rest = api.get(f"/api/v1/change-requests/{cr_id}", params={"offset": views.PAGE_MAX})
    assert (first.status_code, rest.status_code) == (200, 200), (first.text[:500], rest.text[:500])
    first_doc, rest_doc = first.json(), rest.json()
    assert len(first_doc["changes"]) == views.PAGE_MAX and len(rest_doc["changes"]) == ROWS - views.PAGE_MAX
    assert first_doc["changes"] + rest_doc["changes"] == cli_doc["changes"]
    assert _facts(first_doc) == _facts(rest_doc) == _facts(cli_doc)
    # The same page asked of both is the same document.
    code, cli_page, err = run_cli("cr", "show", cr_id, "--as", "ann", "--limit", str(views.PAGE_MAX))
    assert code == 0, err
    assert cli_page == first_doc

    facts = _facts(cli_doc)
    assert facts["thread"] == [("ann", "all of them?")] and facts["conflicts"] == 0 and facts["state"] == "open"

    # The Review page shows the same request: its header, checks, conflicts, changed rows and thread.
    at = signed_in("ann", REVIEW_PAGE)
    assert not at.exception and not at.error, texts(at.error)
    assert at.selectbox(key="review_cr").value == cr_id
    assert texts(at.subheader)[0] == facts["title"]
    caption = next(t for t in texts(at.caption) if f"`{cr_id}`" in t)
    assert f"by **{facts['author']}**" in caption and f"from version {facts['base_version']}" in caption
    assert f"{facts['rows']} row(s), {facts['cells']} cell(s) · revision {facts['revision']}" in caption
    markdown = "\n".join(texts(at.markdown))
    assert f"Data checks: {status_badge(facts['validation'])}" in markdown
    assert f"No conflicts with commits after version {facts['base_version']}." in markdown
    shown = next(t for t in texts(at.caption) if "changed row(s)" in t)
    assert re.search(rf"of \*\*{facts['total']:,}\*\* changed row\(s\)", shown), shown
    assert html_bodies(at)  # the first page of those rows
    assert [t for t in texts(at.text) if t == "all of them?"] == ["all of them?"]
    assert f"**{facts['thread'][0][0]}**" in markdown
