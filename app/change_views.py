"""How a change request is shown: its paged cell-level diff and its data-check findings."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import pandas as pd
import streamlit as st

from app.components import SEVERITY_BADGES, catalog, status_badge
from app.formatting import EMPTY, display_value
from core import change_requests

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pandas.io.formats.style import Styler

    from core.auth import User
    from core.diff import Change
    from core.schema import SchemaChange
    from core.validation import ValidationRun

DIFF_PAGE = 100
ROW_PX = 35
_KIND_STYLE = {
    "update": "background-color: #fff3b0; color: #4a3b00",
    "insert": "background-color: #d8f5d0; color: #14501a",
    "delete": "background-color: #fbd5d5; color: #7a1010",
}


def _text(value: Any, duck_type: str | None = None, types: Mapping[str, str] | None = None) -> str:
    """A diff value as every screen shows it (``app.formatting``): ∅ for empty, ISO dates, grid numbers.

    Diffs carry DuckDB's text form; ``duck_type`` (or, for a whole row, ``types``) reads it by type.
    """
    if isinstance(value, dict):
        # A whole inserted or deleted row.
        return ", ".join(f"{k}={display_value(v, (types or {}).get(k))}" for k, v in value.items() if k != "row_id")
    if isinstance(value, list | tuple):
        return json.dumps(value, default=str)
    return display_value(value, duck_type)


def _styled(frame: pd.DataFrame) -> Styler:
    def style_row(row: pd.Series) -> list[str]:
        colour = _KIND_STYLE.get(str(row["change"]), "")
        return [colour if c in ("change", "new" if row["change"] != "delete" else "old") else "" for c in row.index]

    return frame.style.apply(style_row, axis=1)


def diff_table(cr_id: str, user: User, *, key: str, types: Mapping[str, str] | None = None) -> None:
    """The request's cell-level diff, ``DIFF_PAGE`` entries per page, paged on the server."""
    page_key = f"{key}_page"
    if st.session_state.get(f"{key}_for") != cr_id:  # another request starts at page 1
        st.session_state[f"{key}_for"] = cr_id
        st.session_state[page_key] = 1
    page_no = int(st.session_state.get(page_key, 1))
    diff = change_requests.diff_change_request(
        catalog(), cr_id, actor=user, limit=DIFF_PAGE, offset=(page_no - 1) * DIFF_PAGE
    )
    changes_table(diff.changes, diff.total, page_no=page_no, key=key, types=types)


def changes_table(
    changes: list[Change],
    total: int,
    *,
    page_no: int,
    key: str,
    page_size: int = DIFF_PAGE,
    types: Mapping[str, str] | None = None,
) -> None:
    """One page of a cell-level diff (colour per change kind), with ``st.pagination`` keyed ``{key}_page``.

    ``types`` (column -> DuckDB type) formats values as the Table page's grid shows them.
    """
    types = types or {}
    if total == 0:
        st.write("No changes to show.")
        return
    num_pages = max(1, math.ceil(total / page_size))
    first = (page_no - 1) * page_size + 1
    st.caption(f"Changes **{first:,}–{first + len(changes) - 1:,}** of **{total:,}**")
    frame = pd.DataFrame(
        [
            {
                "row_id": c.row_id,
                "change": c.change,
                "column": c.column or "(whole row)",
                "old": _text(c.old, types.get(c.column or ""), types) if c.change != "insert" else "",
                "new": _text(c.new, types.get(c.column or ""), types) if c.change != "delete" else "",
            }
            for c in changes
        ],
        columns=["row_id", "change", "column", "old", "new"],
    )
    st.dataframe(
        _styled(frame),
        hide_index=True,
        width="stretch",
        height=min(ROW_PX * (len(frame) + 1) + 3, 600),
        row_height=ROW_PX,
        key=f"{key}_table",
    )
    if num_pages > 1:
        st.pagination(num_pages, key=f"{key}_page", max_visible_pages=9)


def findings(run: ValidationRun | None) -> None:
    """The data checks (Great Expectations) of a request: its status, then every expectation evaluated,
    failures first, with a sample of the values that failed."""
    if run is None:
        st.markdown(f"Data checks: {status_badge(None)}")
        return
    failed = sum(not c.success for c in run.checks) if run.checks else len(run.failures)
    skipped = (
        f" · {run.skipped} about columns the request does not change not run (their values are main's)"
        if run.skipped
        else ""
    )
    st.markdown(
        f"Data checks: {status_badge(run.status)} · {run.evaluated} expectation(s) evaluated · {failed} failed{skipped}"
    )
    order = {"critical": 0, "warning": 1, "info": 2}
    if not run.checks:  # a run from before every check was kept: its failures only
        if not run.failures:
            st.write("Every expectation passed.")
        for failure in sorted(run.failures, key=lambda f: order.get(f.severity, 3)):
            where = f" on **{failure.column}**" if failure.column else ""
            count = "" if failure.unexpected_count is None else f" · {failure.unexpected_count:,} unexpected value(s)"
            badge = SEVERITY_BADGES.get(failure.severity, failure.severity)
            st.markdown(f"{badge} `{failure.expectation}`{where}{count}")
        return
    checks = sorted(run.checks, key=lambda c: (c.success, order.get(c.severity, 3)))
    frame = pd.DataFrame(
        {
            "result": ["passed" if c.success else "failed" for c in checks],
            "severity": [c.severity for c in checks],
            "check": [c.description for c in checks],
            # Whole counts (a passed check has none failing); unknown is the grid's empty mark.
            "failing rows": pd.array(
                [c.unexpected_count if c.unexpected_count is not None else (0 if c.success else None) for c in checks],
                dtype="Int64",
            ),
            "failing values (sample)": [
                ", ".join(json.dumps(v) if isinstance(v, str) else display_value(v) for v in c.unexpected_sample)
                for c in checks
            ],
        }
    )

    def colour(row: pd.Series) -> list[str]:
        if row["result"] == "passed":
            return [""] * len(row)
        tint = {"critical": "#fde2e1", "warning": "#fff3cd"}.get(row["severity"], "#eef1f5")
        return [f"background-color: {tint}"] * len(row)

    st.dataframe(
        frame.style.apply(colour, axis=1).format(na_rep=EMPTY),
        hide_index=True,
        width="stretch",
        height=min(ROW_PX * (len(frame) + 1) + 3, 400),
        row_height=ROW_PX,
        key=f"findings_{run.run_id}",
    )


def schema_change_line(change: SchemaChange) -> str:
    """One schema change as markdown: ``add column email (string)`` or ``widen amount: int → bigint``."""
    if change.change == "add":
        return f":green-badge[add column] **{change.column}** ({change.to_type})"
    return f":orange-badge[widen type] **{change.column}**: {change.from_type} → {change.to_type}"


def schema_changes(changes: Sequence[SchemaChange]) -> None:
    """The schema changes of an import request, and what approving it does with them."""
    st.markdown("\n".join(f"- {schema_change_line(c)}" for c in changes))
    added = "; existing rows get an empty value in a new column" if any(c.change == "add" for c in changes) else ""
    st.caption(f"Approving applies these changes to the table in the same MERGE commit as the rows{added}.")
