"""How an import is shown: the file's schema against the table's, and the uploads kept in the session."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler

    from core.imports import ImportSummary
    from core.schema import ColumnPlan

SCHEMA_COLUMNS = ["column", "status", "in the file", "in the table", "after import"]
STATUS_LABELS = {
    "same": "matches",
    "cast": "fits",
    "widen": "widen type",
    "new": "new column",
    "absent": "not in file",
    "incompatible": "incompatible",
}
_STATUS_STYLE = {
    "new column": "background-color: #d8f5d0; color: #14501a",
    "widen type": "background-color: #fff3b0; color: #4a3b00",
    "incompatible": "background-color: #fbd5d5; color: #7a1010",
    "not in file": "color: #9a9a9a",
}
UPLOADS_KEY = "import_uploads"


def schema_frame(columns: list[ColumnPlan]) -> pd.DataFrame:
    """One row per column of the file or the table, with what the import does to it."""
    return pd.DataFrame(
        [
            {
                "column": c.name,
                "status": STATUS_LABELS[c.status],
                "in the file": c.file_type or "",
                "in the table": c.table_type or "",
                "after import": "" if c.status == "incompatible" else c.final_type,
            }
            for c in columns
        ],
        columns=SCHEMA_COLUMNS,
    )


def schema_styled(frame: pd.DataFrame) -> Styler:
    """Colour the rows that change the schema (green, yellow), cannot be imported (red) or are missing (grey)."""

    def style_row(row: pd.Series) -> list[str]:
        return [_STATUS_STYLE.get(str(row["status"]), "") for _ in row.index]

    return frame.style.apply(style_row, axis=1)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def schema_summary(columns: list[ColumnPlan]) -> list[str]:
    """Markdown lines, one per kind of difference, e.g. ``1 new column: email (string)``."""
    by_status: dict[str, list[ColumnPlan]] = {}
    for c in columns:
        by_status.setdefault(c.status, []).append(c)
    lines = []
    if new := by_status.get("new"):
        listed = ", ".join(f"**{c.name}** ({c.final_type})" for c in new)
        lines.append(f":green-badge[{_count(len(new), 'new column')}] {listed}")
    if widened := by_status.get("widen"):
        listed = ", ".join(f"**{c.name}**: {c.table_type} → {c.file_type}" for c in widened)
        lines.append(f":orange-badge[{_count(len(widened), 'widened type')}] {listed}")
    if bad := by_status.get("incompatible"):
        listed = ", ".join(f"**{c.name}** ({c.table_type} in the table, {c.file_type} in the file)" for c in bad)
        lines.append(f":red-badge[{_count(len(bad), 'incompatible column')}] {listed}")
    if absent := by_status.get("absent"):
        listed = ", ".join(f"**{c.name}**" for c in absent)
        lines.append(
            f":gray-badge[{_count(len(absent), 'table column')} not in the file] {listed}: "
            "left empty on new rows, unchanged on updated ones"
        )
    if not (new or widened or bad):
        lines.insert(0, ":blue-badge[schema unchanged] every column of the file fits the table")
    return lines


def kept_upload(dataset: str) -> str | None:
    """The id of the upload kept for ``dataset`` ("project/dataset") in this browser session."""
    uploads: dict[str, str] = st.session_state.get(UPLOADS_KEY, {})
    return uploads.get(dataset)


def keep_upload(dataset: str, upload_id: str | None) -> None:
    """Keep (or, with None, forget) the upload of ``dataset`` so reruns do not read the file again."""
    uploads: dict[str, str] = dict(st.session_state.get(UPLOADS_KEY, {}))
    if upload_id is None:
        uploads.pop(dataset, None)
    else:
        uploads[dataset] = upload_id
    st.session_state[UPLOADS_KEY] = uploads


def replace_banner_text(summary: ImportSummary) -> str:
    """The one line that says a replace request swaps the table's content, with its row counts."""
    return (
        f"Replaces the table's content: {summary.added:,} added, {summary.updated:,} updated, "
        f"{summary.deleted:,} deleted"
    )


def replace_banner(summary: ImportSummary | None, *, key: str) -> None:
    """For a replace request: the banner above its diff, and how its rows were matched."""
    if summary is None or summary.mode != "replace":
        return
    with st.container(key=key):
        st.warning(f"**{replace_banner_text(summary)}**", icon=":material/swap_horiz:")
        matched = (
            f"Rows are matched by **{summary.key}**: the file's rows update or add, the table's rows whose "
            f"{summary.key} is not in {summary.file_name} are deleted."
            if summary.key
            else f"There was no key to match rows by: every row of the table is deleted and every row of "
            f"{summary.file_name} added."
        )
        st.caption(matched)
