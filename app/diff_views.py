"""The row-shaped diff an approver reads: a summary, kind and column filters, a paged table of rows, downloads.

One view serves a change request (Review, History's change-request panel), History's
*Compare* and the restore preview; each passes how to fetch a page and how to export.

The table is read-only HTML (``st.html``; ``st.data_editor`` cannot style a cell):

- an updated row shows its key, its identifying columns and each changed cell as the old
  value struck through (``<del>``) then the new one highlighted (``<ins>``);
- an inserted row shows whole, in green; a deleted row whole, in red.

Every value is escaped with ``html.escape``. Every cell carries a stable identity,
``data-row-id`` and ``data-column`` (and an ``id`` built from them). A cell someone
commented on (a change request's cell comments, ``notes``) is outlined (class
``oreo-commented``) and carries a small blue "comment" badge (``.oreo-note``; plain text:
``st.html`` drops inline SVG and an emoji needs a font) whose tooltip is the comments.
"""

from __future__ import annotations

import hashlib
import html
import math
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import streamlit as st

from app.bulk_views import bulk_summaries
from app.formatting import display_value
from core import change_requests, history
from core.auth import User
from core.catalog import Catalog
from core.diff import KINDS, ExportFormat, RowChange, RowDiffPage, SchemaDelta
from core.errors import InvalidInput

ROWS_PAGE = 50
KIND_LABELS = {"update": "updated", "insert": "inserted", "delete": "deleted"}
FORMATS: dict[str, ExportFormat] = {"CSV": "csv", "Parquet": "parquet"}
MIMES = {"csv": "text/csv", "parquet": "application/vnd.apache.parquet"}

# Comments on cells: (row_id, column) -> "author: text" lines.
Notes = Mapping[tuple[str, str], list[str]]

# Fetch one page: (kinds, columns, limit, offset) -> page. Export the whole diff: (out, format, kinds, columns) -> rows.
Fetch = Callable[[list[str] | None, list[str] | None, int, int], RowDiffPage]
Export = Callable[[Path, ExportFormat, list[str] | None, list[str] | None], int]

_STYLE = """
<style>
.oreo-diff-wrap { overflow-x: auto; max-height: 640px; overflow-y: auto; border: 1px solid #d0d7de;
  border-radius: 6px; }
table.oreo-diff { border-collapse: collapse; font-size: 14px; width: 100%; font-family: "Source Sans Pro",
  sans-serif; }
table.oreo-diff th { position: sticky; top: 0; background: #f6f8fa; text-align: left; padding: 6px 10px;
  border-bottom: 1px solid #d0d7de; white-space: nowrap; font-weight: 600; z-index: 1; }
table.oreo-diff td { padding: 5px 10px; border-bottom: 1px solid #eaeef2; vertical-align: middle;
  white-space: nowrap; }
table.oreo-diff td.oreo-key { font-family: "Source Code Pro", monospace; font-size: 13px; }
table.oreo-diff td.oreo-kind { font-size: 12px; font-weight: 600; }
table.oreo-diff tr.oreo-update td.oreo-kind { color: #7d4e00; }
table.oreo-diff tr.oreo-insert td { background: #dafbe1; color: #0f5323; }
table.oreo-diff tr.oreo-delete td { background: #ffebe9; color: #82071e; }
table.oreo-diff td.oreo-same { color: #57606a; }
table.oreo-diff td.oreo-blank { color: #afb8c1; }
table.oreo-diff del { background: #ffd7d5; color: #82071e; text-decoration: line-through; padding: 0 3px;
  border-radius: 3px; }
table.oreo-diff ins { background: #fff3b0; color: #3b2e00; text-decoration: none; font-weight: 600;
  padding: 0 3px; border-radius: 3px; }
table.oreo-diff .oreo-arrow { color: #57606a; padding: 0 4px; }
table.oreo-diff td.oreo-commented { outline: 2px solid #0969da; outline-offset: -2px; }
table.oreo-diff .oreo-note { cursor: help; margin-left: 8px; padding: 1px 7px; border-radius: 9px;
  background: #ddf4ff; color: #0969da; font-size: 11px; font-weight: 600; vertical-align: middle; }
</style>
"""


def cell_dom_id(row_id: str, column: str) -> str:
    """A stable DOM id for the cell ``(row_id, column)`` (a hash: any text is a valid id this way)."""
    return "oreo-cell-" + hashlib.sha1(f"{row_id}\x00{column}".encode()).hexdigest()[:16]


def _cell_attrs(row_id: str, column: str) -> str:
    """The identity of the cell ``(row_id, column)`` in the page: a DOM id and two data attributes."""
    return f'id="{cell_dom_id(row_id, column)}" data-row-id="{html.escape(row_id)}" data-column="{html.escape(column)}"'


def _value(value: str | None, column: str, types: Mapping[str, str]) -> str:
    return html.escape(display_value(value, types.get(column)))


def _note(row_id: str, column: str, notes: Notes) -> tuple[str, str]:
    """The extra class and the comment marker (its tooltip: every comment on the cell) of a commented cell."""
    lines = notes.get((row_id, column))
    if not lines:
        return "", ""
    title = html.escape("\n".join(lines), quote=True)
    label = "comment" if len(lines) == 1 else f"{len(lines)} comments"
    return " oreo-commented", f'<span class="oreo-note" title="{title}">{label}</span>'


def _cell(row: RowChange, column: str, types: Mapping[str, str], notes: Notes | None = None) -> str:
    """One ``<td>`` of ``row``: a changed cell old → new, a whole-row value, an identifying value, or blank."""
    attrs = _cell_attrs(row.row_id, column)
    cells = {c.column: c for c in row.cells}
    extra, marker = _note(row.row_id, column, notes or {})
    if row.kind == "insert":
        return f'<td {attrs} class="oreo-new{extra}">{_value(cells[column].new, column, types)}{marker}</td>'
    if row.kind == "delete":
        return f'<td {attrs} class="oreo-old{extra}">{_value(cells[column].old, column, types)}{marker}</td>'
    if column in cells:
        change = cells[column]
        return (
            f'<td {attrs} class="oreo-changed{extra}"><del>{_value(change.old, column, types)}</del>'
            f'<span class="oreo-arrow">→</span><ins>{_value(change.new, column, types)}</ins>{marker}</td>'
        )
    if column in row.labels:
        return f'<td {attrs} class="oreo-same{extra}">{_value(row.labels[column], column, types)}{marker}</td>'
    return f'<td {attrs} class="oreo-blank{extra}">{marker}</td>'


def shown_columns(page: RowDiffPage) -> list[str]:
    """The table's columns: the identifying ones, then every other column a row on this page changes, in table order."""
    touched = {c.column for row in page.rows for c in row.cells}
    rest = [c for c in page.columns if c != "row_id" and c in touched and c not in page.label_columns]
    return [*page.label_columns, *rest]


def rows_html(
    page: RowDiffPage, types: Mapping[str, str], *, key_name: str = "row_id", notes: Notes | None = None
) -> str:
    """One page of the row diff as an HTML table (every value escaped).

    The key column is headed ``key_name`` (the dataset's key column, whose values are the
    row ids, is shown once, as the key). ``notes``: comments shown beside their cells.
    """
    notes = notes or {}
    columns = [c for c in shown_columns(page) if c != key_name]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["change", key_name, *columns])
    body = []
    for row in page.rows:
        cells = "".join(_cell(row, c, types, notes) for c in columns)
        rid = html.escape(row.row_id)
        extra, marker = _note(row.row_id, key_name, notes)
        body.append(
            f'<tr class="oreo-{row.kind}" data-row-id="{rid}" data-kind="{row.kind}">'
            f'<td class="oreo-kind">{KIND_LABELS[row.kind]}</td>'
            f'<td {_cell_attrs(row.row_id, key_name)} class="oreo-key{extra}">{rid}{marker}</td>{cells}</tr>'
        )
    return (
        f'{_STYLE}<div class="oreo-diff-wrap"><table class="oreo-diff"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def schema_line(delta: SchemaDelta) -> str:
    """One schema change as markdown, e.g. ``:green-badge[add column] **email** (VARCHAR)``."""
    if delta.change == "add":
        return f":green-badge[add column] **{delta.column}** ({delta.to_type})"
    if delta.change == "drop":
        return f":red-badge[drop column] **{delta.column}** ({delta.from_type})"
    return f":orange-badge[change type] **{delta.column}**: {delta.from_type} → {delta.to_type}"


def summary_header(page: RowDiffPage, *, key: str) -> None:
    """Rows updated, inserted and deleted; the columns touched with a count each; the schema changes."""
    s = page.summary
    with st.container(key=f"{key}_summary"):
        m1, m2, m3 = st.columns(3)
        m1.metric("Rows updated", f"{s.updated:,}", border=True)
        m2.metric("Rows inserted", f"{s.inserted:,}", border=True)
        m3.metric("Rows deleted", f"{s.deleted:,}", border=True)
        if s.columns:
            st.markdown(
                "Columns updated: " + " ".join(f":blue-badge[{c} · {n:,}]" for c, n in s.columns.items()),
                help="How many updated rows changed each column",
            )
        if s.schema:
            st.markdown("Schema changes: " + " · ".join(schema_line(d) for d in s.schema))


def _export_bytes(export: Export, fmt: ExportFormat, kinds: list[str] | None, columns: list[str] | None) -> bytes:
    with tempfile.TemporaryDirectory(prefix="oreo-diff-") as folder:
        out = Path(folder) / f"diff.{fmt}"
        export(out, fmt, kinds, columns)
        return out.read_bytes()


def row_diff_view(
    fetch: Fetch,
    export: Export,
    *,
    key: str,
    signature: object,
    file_stem: str,
    types: Mapping[str, str] | None = None,
    key_name: str = "row_id",
    page_size: int = ROWS_PAGE,
    notes: Notes | None = None,
) -> RowDiffPage:
    """The whole view: summary, filters, a page of rows, paging and downloads. Returns the page shown.

    ``signature`` names what is compared; another one starts again at page 1 with no filter.
    Widget keys all start with ``key``. ``notes``: cell comments shown beside their cells.
    """
    types = types or {}
    kinds_key, columns_key, page_key = f"{key}_kinds", f"{key}_columns", f"{key}_page"
    if st.session_state.get(f"{key}_for") != signature:
        st.session_state[f"{key}_for"] = signature
        for stale in (kinds_key, columns_key):
            st.session_state.pop(stale, None)
        st.session_state[page_key] = 1
    # The filters are read before the page is fetched; their widgets are drawn once its columns are known.
    kinds = [k for k in st.session_state.get(kinds_key) or [] if k in KINDS] or None
    chosen = list(st.session_state.get(columns_key) or []) or None
    filters = (kinds, chosen)
    if st.session_state.get(f"{key}_filters") != filters:
        st.session_state[f"{key}_filters"] = filters
        st.session_state[page_key] = 1
    page_no = int(st.session_state.get(page_key, 1))
    try:
        page = fetch(kinds, chosen, page_size, (page_no - 1) * page_size)
    except InvalidInput:
        # A column filter the diff no longer has (its table changed since): start again unfiltered.
        st.session_state.pop(columns_key, None)
        chosen = None
        st.session_state[f"{key}_filters"] = (kinds, chosen)
        st.session_state[page_key] = page_no = 1
        page = fetch(kinds, chosen, page_size, 0)
    summary_header(page, key=key)
    if page.summary.updated + page.summary.inserted + page.summary.deleted == 0:
        st.write("No changes to show.")
        return page

    # One row when it fits; on a narrow window the column picker moves under the kinds, whole.
    filters_row = st.container(horizontal=True, wrap=True, gap="medium", key=f"{key}_filter_row")
    filters_row.pills(
        "Kind",
        list(KINDS),
        selection_mode="multi",
        key=kinds_key,
        format_func=lambda k: KIND_LABELS[k],
        width="content",
    )
    filters_row.multiselect(
        "Columns",
        [c for c in page.columns if c != "row_id"],
        key=columns_key,
        placeholder="Any column",
        help="Only rows whose value changes in one of these columns",
        width=360,
    )
    _table(page, page_no, page_size, types, key=key, key_name=key_name, notes=notes)
    _downloads(export, kinds, chosen, key=key, file_stem=file_stem)
    return page


def _table(
    page: RowDiffPage,
    page_no: int,
    page_size: int,
    types: Mapping[str, str],
    *,
    key: str,
    key_name: str,
    notes: Notes | None = None,
) -> None:
    if page.total == 0:
        st.info("No changed row matches these filters.", icon=":material/filter_alt_off:")
        return
    num_pages = max(1, math.ceil(page.total / page_size))
    first = (page_no - 1) * page_size + 1
    st.caption(f"Rows **{first:,}–{first + len(page.rows) - 1:,}** of **{page.total:,}** changed row(s)")
    with st.container(key=f"{key}_rows"):
        st.html(rows_html(page, types, key_name=key_name, notes=notes))
    if num_pages > 1:
        st.pagination(num_pages, key=f"{key}_page", max_visible_pages=9)


def _downloads(export: Export, kinds: list[str] | None, columns: list[str] | None, *, key: str, file_stem: str) -> None:
    filtered = " (filtered)" if kinds or columns else ""
    buttons = st.container(horizontal=True, key=f"{key}_downloads")  # each as wide as its label
    for label, fmt in FORMATS.items():
        buttons.download_button(
            f"{label}{filtered}",
            data=lambda fmt=fmt: _export_bytes(export, fmt, kinds, columns),
            file_name=f"{file_stem}.{fmt}",
            mime=MIMES[fmt],
            key=f"{key}_download_{fmt}",
            icon=":material/download:",
            help=f"The whole diff{filtered}, every page, as {label}",
        )


# ---------------------------------------------------------------- the three uses


def change_request_rows(
    cr_id: str,
    user: User,
    catalog: Catalog,
    *,
    key: str,
    types: Mapping[str, str] | None = None,
    key_column: str | None = None,
    notes: Notes | None = None,
    revision: int = 1,
) -> RowDiffPage:
    """A change request's row diff (Review, History's change-request panel); ``key_column``: the dataset's key.

    ``notes``: its cell comments, shown beside their cells; ``revision``: the one shown (a new
    revision starts again at page 1). The current revision's bulk changes come first, one line each.
    """

    cr = change_requests.get_change_request(catalog, cr_id, actor=user)
    if revision == cr.revision:  # the request keeps the summaries of its current revision only
        bulk_summaries(cr.bulk_changes, key=key)

    def fetch(kinds: list[str] | None, columns: list[str] | None, limit: int, offset: int) -> RowDiffPage:
        return change_requests.row_diff_change_request(
            catalog, cr_id, actor=user, kinds=kinds, columns=columns, limit=limit, offset=offset
        )

    def export(out: Path, fmt: ExportFormat, kinds: list[str] | None, columns: list[str] | None) -> int:
        return change_requests.export_change_request_diff(
            catalog, cr_id, out, actor=user, fmt=fmt, kinds=kinds, columns=columns
        )

    return row_diff_view(
        fetch, export, key=key, signature=(cr_id, revision), file_stem=f"change-request-{cr_id}", types=types,
        key_name=key_column or "row_id", notes=notes,
    )  # fmt: skip


def version_rows(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    before: int,
    after: int,
    user: User,
    *,
    key: str,
    types: Mapping[str, str] | None = None,
    file_stem: str | None = None,
    key_column: str | None = None,
) -> RowDiffPage:
    """The row diff from version ``before`` to ``after`` (Compare; the restore preview passes current, target)."""
    versions = (project_id, dataset_id, before, after)

    def fetch(kinds: list[str] | None, columns: list[str] | None, limit: int, offset: int) -> RowDiffPage:
        return history.row_diff_versions(
            catalog, *versions, actor=user, kinds=kinds, columns=columns, limit=limit, offset=offset
        )

    def export(out: Path, fmt: ExportFormat, kinds: list[str] | None, columns: list[str] | None) -> int:
        return history.export_version_diff(catalog, *versions, out, actor=user, fmt=fmt, kinds=kinds, columns=columns)

    stem = file_stem or f"{project_id}-{dataset_id}-v{before}-to-v{after}"
    return row_diff_view(
        fetch, export, key=key, signature=versions, file_stem=stem, types=types, key_name=key_column or "row_id"
    )
