"""The Table page's column values: a facet (top values, counts, histogram) and the clusters of near-duplicates.

``facet_panel`` shows, for a chosen column under the filter bar's conditions (and the
user's pending edits), its most frequent values with their row counts, how many distinct
values there are and, for numbers and dates, an Altair histogram. Clicking a value returns
the condition that keeps it, for the page to add to the filter bar. Its "Clusters" view
groups a text column's values that probably mean the same thing (``core.clusters``); an
editor picks the value each cluster becomes, ticks the clusters to merge, previews the
change and applies it as one bulk change of their session (``core.bulk``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import altair as alt
import pandas as pd
import streamlit as st

from app.components import flash, oreo_errors
from app.formatting import EMPTY
from core import bulk, clusters, facets
from core.auth import User
from core.catalog import Catalog
from core.datasets import DatasetInfo
from core.filters import Condition
from core.reads import Column
from core.values import type_family

VALUES_SHOWN = 15
CLUSTERS_SHOWN = 40
METHODS = {"fingerprint": "Fingerprint", "ngram": "N-gram", "levenshtein": "Nearest neighbours"}
VIEWS = {"values": "Values", "clusters": "Clusters"}
MERGE_PREVIEW_KEY = "table_merge_kept"  # the last preview and what it was of
_DATES = {"date", "timestamp", "timestamptz"}


def facet_panel(
    catalog: Catalog,
    user: User,
    info: DatasetInfo,
    columns: Sequence[Column],
    conditions: list[Condition],
    session_id: str | None,
    *,
    can_merge: bool,
    on_merged: Callable[[], None],
) -> Condition | None:
    """The "Column values" expander; returns the condition of a value the user clicked (None otherwise)."""
    names = [c.name for c in columns if c.name != "row_id"]
    panel = st.expander(
        "Column values and clusters", icon=":material/bar_chart:", key="table_facets", on_change="rerun"
    )
    with panel:
        if not panel.open:
            return None  # nothing is read while the panel is closed
        left, right = st.columns([2, 1], vertical_alignment="bottom")
        name = left.selectbox("Column", names, key="table_facet_col")
        view = right.segmented_control(
            "Show", list(VIEWS), format_func=VIEWS.__getitem__, default="values", key="table_facet_view"
        )
        if name is None:
            return None
        column = next(c for c in columns if c.name == name)
        if view == "clusters":
            _cluster_view(catalog, user, info, column, conditions, session_id, can_merge=can_merge, on_merged=on_merged)
            return None
        with oreo_errors():
            facet = facets.dataset_facet(
                catalog, info.project_id, info.dataset_id, name, actor=user, conditions=conditions,
                session_id=session_id, limit=VALUES_SHOWN,
            )  # fmt: skip
            return _values_view(facet)
    return None


def _values_view(facet: facets.Facet) -> Condition | None:
    st.caption(
        f"Matching the filters: **{facet.rows:,}** · **{facet.distinct:,}** distinct values"
        + (f" · the {len(facet.values)} most frequent; click one to filter by it" if facet.values else "")
    )
    values, chart = st.columns([1, 1.3], gap="large")
    clicked = None
    with values.container(key="table_facet_values", gap="xsmall"):
        for i, item in enumerate(facet.values):
            part = item.rows / facet.rows if facet.rows else 0.0
            share = f" · {part:.0%}" if part >= 0.005 else " · <1%"
            label = EMPTY if item.value is None else _shown(item.value)
            button, count = st.columns([2, 1], vertical_alignment="center", gap="small")
            if button.button(
                label, key=f"table_facet_value_{i}", type="tertiary", help="Add this value to the filters"
            ):
                clicked = facets.value_condition(facet.column, item.value)
            count.markdown(f"`{item.rows:,}`{share}")
    with chart.container(key="table_facet_histogram" if facet.histogram else "table_facet_top"):
        if facet.values:
            st.altair_chart(histogram_chart(facet) if facet.histogram else top_values_chart(facet), width="stretch")
    return clicked


def top_values_chart(facet: facets.Facet) -> alt.Chart:
    """The most frequent values as horizontal bars, most first."""
    frame = pd.DataFrame([{"value": EMPTY if v.value is None else v.value, "rows": v.rows} for v in facet.values])
    return (
        alt.Chart(frame, height=max(160, 36 * len(frame)))
        .mark_bar(color="#4e79a7")
        .encode(
            x=alt.X("rows:Q", title="rows"),
            y=alt.Y("value:N", sort="-x", title=None),
            tooltip=["value:N", "rows:Q"],
        )
    )


def histogram_chart(facet: facets.Facet) -> alt.Chart:
    """The facet's histogram: one bar per bin, its rows on the y axis."""
    dates = facet.family in _DATES
    frame = pd.DataFrame(
        [{"low": b.low.isoformat() if dates else b.low, "high": b.high.isoformat() if dates else b.high,
          "rows": b.rows} for b in facet.histogram]
    )  # fmt: skip
    kind = "T" if dates else "Q"
    return (
        alt.Chart(frame, height=260)
        .mark_bar(color="#4e79a7")
        .encode(
            x=alt.X(f"low:{kind}", bin="binned", title=facet.column),
            x2=f"high:{kind}",
            y=alt.Y("rows:Q", title="rows"),
            tooltip=[alt.Tooltip(f"low:{kind}", title="from"), alt.Tooltip(f"high:{kind}", title="to"), "rows:Q"],
        )
    )


def _cluster_view(
    catalog: Catalog,
    user: User,
    info: DatasetInfo,
    column: Column,
    conditions: list[Condition],
    session_id: str | None,
    *,
    can_merge: bool,
    on_merged: Callable[[], None],
) -> None:
    if type_family(column.type) != "text":
        st.info(f"Clusters are for text columns; **{column.name}** holds {column.type.lower()} values.")
        return
    method_col, radius_col, _ = st.columns([2, 1, 1], vertical_alignment="bottom")
    method = method_col.segmented_control(
        "Method", list(METHODS), format_func=METHODS.__getitem__, default="fingerprint", key="table_cluster_method",
        help="Fingerprint: same words once case, accents, punctuation and word order are set aside. N-gram: same "
        "letter pairs once spaces are removed too. Nearest neighbours: a few typed characters apart.",
    )  # fmt: skip
    radius = 1
    if method == "levenshtein":
        radius = int(radius_col.number_input("Radius", 1, clusters.MAX_RADIUS, 1, key="table_cluster_radius"))
    with oreo_errors():
        found = clusters.dataset_clusters(
            catalog, info.project_id, info.dataset_id, column.name, actor=user, method=method or "fingerprint",
            radius=radius, conditions=conditions, session_id=session_id,
        )  # fmt: skip
        _cluster_list(catalog, user, info, found, conditions, session_id, can_merge=can_merge, on_merged=on_merged)


def _cluster_key(found: clusters.Clustering, cluster: clusters.Cluster) -> str:
    """A widget key for one cluster, stable across runs while the cluster is there."""
    digest = hashlib.sha1(f"{found.column}\0{found.method}\0{cluster.key}".encode()).hexdigest()[:12]
    return f"table_cluster_{digest}"


def _cluster_list(
    catalog: Catalog,
    user: User,
    info: DatasetInfo,
    found: clusters.Clustering,
    conditions: list[Condition],
    session_id: str | None,
    *,
    can_merge: bool,
    on_merged: Callable[[], None],
) -> None:
    shown = found.clusters[:CLUSTERS_SHOWN]
    values = sum(len(c.values) for c in found.clusters)
    st.caption(
        f"**{len(found.clusters):,}** cluster(s) of {values:,} values among {found.distinct:,} distinct values"
        + (f"; the {len(shown)} biggest shown" if len(shown) < len(found.clusters) else "")
        + (". Tick the clusters to merge and pick what each becomes." if shown and can_merge else ".")
    )
    picked: list[clusters.Cluster] = []
    choices: dict[str, str] = {}
    with st.container(key="table_clusters", height=480 if len(shown) > 4 else "content"):
        for cluster in shown:
            key = _cluster_key(found, cluster)
            with st.container(border=True, key=key):
                tick, choice, listing = st.columns([0.4, 2, 3], vertical_alignment="top")
                ticked = tick.checkbox(
                    "Merge", key=f"{key}_merge", label_visibility="collapsed", disabled=not can_merge
                )
                options = [v.value for v in cluster.values]
                chosen = choice.selectbox(
                    "Becomes", options, key=f"{key}_choice", accept_new_options=True,
                    help="The value every value of the cluster becomes (type another to use it)",
                )  # fmt: skip
                listing.markdown("  \n".join(f"`{_shown(v.value)}` · {_rows(v.rows)}" for v in cluster.values))
                if ticked:
                    picked.append(cluster)
                    choices[cluster.key] = chosen if chosen is not None else cluster.choice
    if can_merge:
        _merge_controls(catalog, user, info, found, picked, choices, conditions, session_id, on_merged)


def _rows(count: int) -> str:
    return f"{count:,} row{'' if count == 1 else 's'}"


def _shown(value: str) -> str:
    return repr(value) if value != value.strip() or not value else value


def _merge_controls(
    catalog: Catalog,
    user: User,
    info: DatasetInfo,
    found: clusters.Clustering,
    picked: list[clusters.Cluster],
    choices: dict[str, str],
    conditions: list[Condition],
    session_id: str | None,
    on_merged: Callable[[], None],
) -> None:
    """Preview, then apply, the merge of the ticked clusters: one bulk change of the column."""
    column = found.column
    signature = (info.project_id, info.dataset_id, info.version, column, tuple(c.key for c in picked),
                 tuple(sorted(choices.items())), tuple(conditions), session_id)  # fmt: skip
    kept = st.session_state.get(MERGE_PREVIEW_KEY)
    preview = kept[1] if kept is not None and kept[0] == signature else None
    buttons = st.container(horizontal=True, key="table_merge_buttons")
    if buttons.button(
        f"Preview merge ({len(picked)})", key="table_merge_preview", icon=":material/preview:", disabled=not picked
    ):
        with oreo_errors():
            preview = clusters.preview_merge(
                catalog, info.project_id, info.dataset_id, column, picked, actor=user, choices=choices,
                conditions=conditions, session_id=session_id,
            )  # fmt: skip
            st.session_state[MERGE_PREVIEW_KEY] = (signature, preview)
    apply = buttons.button(
        "Merge", key="table_merge_apply", type="primary", icon=":material/merge:",
        disabled=preview is None or not preview.changed,
    )  # fmt: skip
    if preview is not None:
        _show_merge_preview(preview)
    if apply and picked:
        with oreo_errors():
            change = clusters.merge_clusters(
                catalog, info.project_id, info.dataset_id, column, picked, actor=user, choices=choices,
                conditions=conditions, session_id=session_id,
            )  # fmt: skip
            st.session_state.pop(MERGE_PREVIEW_KEY, None)
            for cluster in picked:  # the merged clusters are gone; their ticks go with them
                st.session_state.pop(f"{_cluster_key(found, cluster)}_merge", None)
            flash(f"{change.summary}: saved as one pending change.", kind="success")
            on_merged()
            st.rerun()


def _show_merge_preview(preview: bulk.BulkPreview) -> None:
    with st.container(key="table_merge_preview_box"):
        m1, m2 = st.columns(2)
        m1.metric("Rows holding these values", f"{preview.matched:,}", border=True)
        m2.metric("Would change", f"{preview.changed:,}", border=True)
        st.markdown(f"**{preview.summary}**")
        if preview.sample:
            frame = pd.DataFrame(
                [{"row": s.row_id, "before": s.before, "after": s.after} for s in preview.sample]
            ).astype(object)
            st.dataframe(frame.where(frame.notna(), EMPTY), hide_index=True, width="stretch", key="table_merge_sample")
