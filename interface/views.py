"""The change-request view: what ``oreo cr show``, ``GET /api/v1/change-requests/{id}`` and the Review page show.

Each front end used to assemble it from the same core calls, and the copies drifted. Here
it is built once: the request, its data checks, its conflicts, its thread, revisions and
state history, and an import's counts (``change_request_view``); and, paged by one rule,
its cell changes (``changes_page``) and its rows (``rows_page``).

The paging rule: a page holds ``limit`` items from ``offset`` and ``total`` counts them
all, so a caller knows more follow while ``offset + len(page) < total``. Without a limit a
page holds every item from ``offset``, read ``PAGE_MAX`` at a time. The CLI reads without a
limit unless ``--limit`` is given (``oreo cr show`` lists every change); an API answer holds
at most ``PAGE_MAX`` (its default page); the Review page shows its own small pages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from core import auth, change_requests, conflicts, diff, imports, validation
from core.catalog import Catalog
from core.change_requests import ChangeRequest
from interface import documents

PAGE_MAX = 10_000
"""The most items one read returns: an API answer's largest (and default) page, the CLI's reads of every item."""

_Page = TypeVar("_Page", diff.DiffPage, diff.RowDiffPage)


@dataclass(frozen=True)
class ChangeRequestView:
    """One change request as every front end shows it (its changes are paged apart: ``changes_page``)."""

    request: ChangeRequest
    validation: validation.ValidationRun | None
    conflicts: list[conflicts.Conflict]
    thread: list[change_requests.Comment]
    revisions: list[change_requests.Revision]
    states: list[change_requests.StateChange]
    imported: imports.ImportSummary | None  # an import: its mode and row counts


def change_request_view(
    catalog: Catalog,
    cr_id: str,
    *,
    actor: auth.User,
    find_conflicts: Callable[[ChangeRequest], list[conflicts.Conflict]] | None = None,
) -> ChangeRequestView:
    """The change request ``cr_id`` with its checks, conflicts, thread, revisions, state history and import counts.

    Args:
        find_conflicts: How its conflicts are found (default: ``core.conflicts.find_conflicts``
            now); a page passes one that remembers them while neither ``main`` nor the request moves.

    Raises:
        NotFound: No such change request.
        PermissionDenied: ``actor`` may not see it.
    """
    record = change_requests.get_change_request(catalog, cr_id, actor=actor)
    found = (
        find_conflicts(record) if find_conflicts is not None else conflicts.find_conflicts(catalog, cr_id, actor=actor)
    )
    return ChangeRequestView(
        request=record,
        validation=change_requests.validation_for(catalog, cr_id, actor=actor),
        conflicts=found,
        thread=change_requests.comments(catalog, cr_id, actor=actor),
        revisions=change_requests.revisions(catalog, cr_id, actor=actor),
        states=change_requests.state_history(catalog, cr_id, actor=actor),
        imported=imports.import_summary(catalog, cr_id, actor=actor),
    )


def every_page(fetch: Callable[[int, int], _Page], limit: int | None, offset: int) -> tuple[_Page, list[Any]]:
    """The paging rule: ``fetch(limit, offset)`` once, or without a limit every page from ``offset``.

    Returns the last page read (its ``total`` and, for rows, its summary) and every item read.
    """
    if limit is not None:
        page = fetch(limit, offset)
        return page, list(_items(page))
    page = fetch(PAGE_MAX, offset)
    items = list(_items(page))
    while _items(page) and offset + len(items) < page.total:
        page = fetch(PAGE_MAX, offset + len(items))
        items += _items(page)
    return page, items


def _items(page: diff.DiffPage | diff.RowDiffPage) -> list[Any]:
    return page.changes if isinstance(page, diff.DiffPage) else page.rows


def changes_page(
    catalog: Catalog, cr_id: str, *, actor: auth.User, limit: int | None = None, offset: int = 0
) -> diff.DiffPage:
    """The request's cell changes from ``offset``: ``limit`` of them, or every one (the paging rule)."""
    page, changes = every_page(
        lambda size, skip: change_requests.diff_change_request(catalog, cr_id, actor=actor, limit=size, offset=skip),
        limit,
        offset,
    )
    return diff.DiffPage(changes=changes, total=page.total)


def rows_page(
    catalog: Catalog,
    cr_id: str,
    *,
    actor: auth.User,
    kinds: list[str] | None = None,
    columns: list[str] | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> diff.RowDiffPage:
    """The request's changed rows (of ``kinds``, changing ``columns``) from ``offset``, paged by the same rule."""
    return rows_by_the_rule(
        lambda size, skip: change_requests.row_diff_change_request(
            catalog, cr_id, actor=actor, kinds=kinds, columns=columns, limit=size, offset=skip
        ),
        limit,
        offset,
    )


def rows_by_the_rule(fetch: Callable[[int, int], diff.RowDiffPage], limit: int | None, offset: int) -> diff.RowDiffPage:
    """Rows of any row diff (a request's, two versions') from ``offset``, paged by the rule."""
    page, rows = every_page(fetch, limit, offset)
    return diff.RowDiffPage(
        rows=rows, total=page.total, summary=page.summary, label_columns=page.label_columns, columns=page.columns
    )


def show_document(view: ChangeRequestView, changes: diff.DiffPage) -> dict[str, Any]:
    """The JSON of ``oreo cr show`` and of ``GET /api/v1/change-requests/{id}`` (without ``--rows``)."""
    return documents.cr_show_doc(
        view.request, changes=changes.changes, total=changes.total, run=view.validation,
        conflicts=view.conflicts, thread=view.thread, revisions=view.revisions, states=view.states,
        imported=view.imported,
    )  # fmt: skip
