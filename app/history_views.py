"""How a dataset's history is shown: the timeline table, the activity chart and version labels."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import altair as alt
import pandas as pd

from app.components import local_time
from core.diff import Change
from core.history import VersionDiff

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler

    from core.history import Version

TIMELINE_COLUMNS = [
    "version",
    "time",
    "kind",
    "actor",
    "title",
    "details",
    "inserted",
    "updated",
    "deleted",
    "operation",
    "change request",
    "restorable",
    "what happened",
]
# The grid shows these (a 1400 px grid draws only so many columns; "what happened" reads in the version picker).
TIMELINE_SHOWN = TIMELINE_COLUMNS[:-1]
_GREY = "color: #9a9a9a; background-color: #f3f3f3"
KINDS = ("change request", "import", "create", "restore", "maintenance", "other")


# Delta Lake's names for its commits (the "operation" column), in words for people.
OPERATION_WORDS = {
    "CREATE TABLE AS SELECT": "table created from the uploaded file",
    "CREATE TABLE": "table created",
    "CREATE OR REPLACE TABLE AS SELECT": "table replaced by an import",
    "REPLACE TABLE AS SELECT": "table replaced by an import",
    "WRITE": "rows added",
    "MERGE": "changes merged",
    "UPDATE": "cells changed",
    "DELETE": "rows deleted",
    "RESTORE": "table restored to an earlier version",
    "OPTIMIZE": "files compacted (no row changed)",
    "VACUUM START": "clean-up of old files started",
    "VACUUM END": "clean-up of old files finished",
    "SET TBLPROPERTIES": "table settings changed (no row changed)",
    "UNSET TBLPROPERTIES": "table settings changed (no row changed)",
    "ADD COLUMNS": "columns added",
    "CHANGE COLUMN": "a column's type widened",
}


def operation_words(operation: str) -> str:
    """A Delta operation name as people read it (``MERGE`` -> ``changes merged``); unknown ones in lower case."""
    return OPERATION_WORDS.get(operation.upper(), operation.lower())


def version_label(version: Version) -> str:
    """One line per version for pickers: number, what happened, time and request title when there is one."""
    title = f" · {version.cr_title}" if version.cr_title else ""
    return f"v{version.version} · {operation_words(version.operation)} · {local_time(version.timestamp)}{title}"


def version_details(version: Version) -> str:
    """What a version did beyond its row counts: a restore's target, reason and rows; a maintenance run."""
    if version.kind == "restore":
        parts = [f"restored to v{version.restored_to}" if version.restored_to is not None else "restore"]
        if version.reason:
            parts.append(f"reason: {version.reason}")
        added, removed = version.metrics.get("rows_added"), version.metrics.get("rows_removed")
        if added is not None and removed is not None:
            parts.append(f"{added:,} row(s) brought back, {removed:,} taken out")
        files = version.metrics.get("numRestoredFiles"), version.metrics.get("numRemovedFiles")
        if None not in files:
            parts.append(f"files: {files[0]:,} restored, {files[1]:,} removed")
        return " · ".join(parts)
    if version.kind == "maintenance":
        return f"maintenance ({version.operation.lower()}): no row changed"
    return version.reason or ""


def timeline_frame(versions: list[Version]) -> pd.DataFrame:
    """The timeline as a table, one row per version (newest first, as given)."""
    return pd.DataFrame(
        [
            {
                "version": v.version,
                "time": v.timestamp,
                "kind": v.kind,
                "what happened": operation_words(v.operation),
                "operation": v.operation,
                "actor": v.actor or "",
                "change request": v.cr_id or "",
                "title": v.cr_title or "",
                "inserted": int(v.metrics.get("rows_inserted", 0)),
                "updated": int(v.metrics.get("rows_updated", 0)),
                "deleted": int(v.metrics.get("rows_deleted", 0)),
                "details": version_details(v),
                "restorable": "yes" if v.restorable else f"no: {v.not_restorable_reason or 'not restorable'}",
            }
            for v in versions
        ],
        columns=TIMELINE_COLUMNS,
    )


def timeline_styled(frame: pd.DataFrame) -> Styler:
    """Grey out the versions that cannot be restored."""

    def style_row(row: pd.Series) -> list[str]:
        return [_GREY if str(row["restorable"]) != "yes" else "" for _ in row.index]

    return frame.style.apply(style_row, axis=1)


def activity_chart(versions: list[Version]) -> alt.Chart:
    """Commits per day on a real date axis, stacked by kind (change request, import, restore,
    maintenance, ...); the tooltip adds the rows they changed. Give it the versions the timeline shows."""
    metrics = ("rows_inserted", "rows_updated", "rows_deleted")
    frame = pd.DataFrame(
        [
            {
                "day": pd.Timestamp(v.timestamp.date()),
                "kind": v.kind,
                "rows changed": sum(int(v.metrics.get(k, 0)) for k in metrics),
            }
            for v in versions
        ],
        columns=["day", "kind", "rows changed"],
    )
    daily = frame.groupby(["day", "kind"], as_index=False).agg(
        commits=("kind", "size"), rows_changed=("rows changed", "sum")
    )
    # The days of the data, with a day either side so a young table's one day is a bar, not the whole width.
    last = daily["day"].max() if len(daily) else pd.Timestamp.now().normalize()
    first = daily["day"].min() if len(daily) else last
    domain = [(first - pd.Timedelta(days=1)).isoformat(), (last + pd.Timedelta(days=2)).isoformat()]
    return (
        alt.Chart(daily)
        .mark_bar()
        .encode(
            x=alt.X(
                "yearmonthdate(day):T",
                title="Day",
                scale=alt.Scale(domain=domain),
                axis=alt.Axis(format="%b %d", labelAngle=0, tickCount="day"),
            ),
            y=alt.Y("commits:Q", title="Commits", axis=alt.Axis(tickMinStep=1)),
            color=alt.Color("kind:N", title="Kind", sort=list(KINDS)),
            tooltip=[
                alt.Tooltip("yearmonthdate(day):T", title="Day"),
                alt.Tooltip("kind:N", title="Kind"),
                alt.Tooltip("commits:Q", title="Commits"),
                alt.Tooltip("rows_changed:Q", title="Rows changed"),
            ],
        )
    )


def export_bytes(export: Any, out_name: str) -> bytes:
    """Run ``export(out_path)`` (an ``export_version`` call) in a temporary folder and return the file's bytes."""
    with tempfile.TemporaryDirectory(prefix="oreo-export-") as folder:
        result = export(Path(folder) / out_name)
        return Path(result.path).read_bytes()


_OPPOSITE = {"insert": "delete", "delete": "insert", "update": "update"}


def reversed_diff(forward: VersionDiff) -> VersionDiff:
    """The diff from ``to`` back to ``from``: what restoring the older version does to the newer one."""
    return VersionDiff(
        changes=[
            Change(row_id=c.row_id, change=_OPPOSITE[c.change], column=c.column, old=c.new, new=c.old)  # type: ignore[arg-type]
            for c in forward.changes
        ],
        total=forward.total,
        rows_inserted=forward.rows_deleted,
        rows_updated=forward.rows_updated,
        rows_deleted=forward.rows_inserted,
        source=forward.source,
    )
