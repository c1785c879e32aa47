"""A dataset's history: its versions over time, any version's rows, the diff between two versions,
a download of any version and, for the project's admins, a restore to an earlier version.
"""

from __future__ import annotations

import math

import streamlit as st

from app.change_views import schema_change_line
from app.components import (
    DATASET_KEY,
    catalog,
    close_dialog,
    dataset_options,
    dialog_value,
    flash,
    local_time,
    open_dialog,
    oreo_errors,
    require_user,
    show_flash,
    split_dataset,
    wait_for_engine,
)
from app.diff_views import change_request_rows, version_rows
from app.formatting import rows_span
from app.history_views import (
    TIMELINE_SHOWN,
    activity_chart,
    export_bytes,
    operation_words,
    timeline_frame,
    timeline_styled,
    version_label,
)
from core import auth, change_requests, datasets, history
from core.errors import OreoError
from core.history import Version
from core.reads import RowFilter

SECTIONS = ["Timeline", "Version", "Compare"]
TIMELINE_PAGE = 20
PREVIEW_PAGE = 50
NO_FILTER = "(no filter)"
NATURAL = "(table order)"
OPS = {"equals": "eq", "contains": "contains"}
FORMATS = {"Parquet": "parquet", "CSV": "csv"}
ROW_PX = 35
RESTORE_STEPS = 4

user = require_user()
st.title("History")
show_flash()

options = dataset_options(user)
if not options:
    st.info("No datasets to show.")
    st.stop()
if st.session_state.get(DATASET_KEY) not in options:
    st.session_state[DATASET_KEY] = options[0]
choice = st.selectbox("Dataset", options, key=DATASET_KEY)
project_id, dataset_id = split_dataset(choice)


def all_versions() -> list[Version]:
    """Every version, newest first, for the pickers and the chart (read from the Delta log, no Spark)."""
    return history.table_history(catalog(), project_id, dataset_id, actor=user).versions


def page_number(key: str, signature: object) -> int:
    """The page a paged view is on; a new query (another ``signature``) starts at page 1."""
    if st.session_state.get(f"{key}_for") != signature:
        st.session_state[f"{key}_for"] = signature
        st.session_state[key] = 1
    return int(st.session_state.get(key, 1))


def column_types() -> dict[str, str]:
    """The dataset's column types, so diffs show values as the Table page's grid does."""
    return {c.name: c.type for c in datasets.dataset_columns(info)}


@st.dialog("Restore version?", width="large", on_dismiss=lambda: close_dialog("restore"))
def restore_dialog(version: Version, current: int) -> None:
    st.write(
        f"Restore `{choice}` to **version {version.version}** ({operation_words(version.operation)}, "
        f"{local_time(version.timestamp)}). The restore is committed as a new version; "
        "the history until now stays and can itself be restored."
    )
    with oreo_errors():
        sentence = st.empty()
        with st.container(key="restore_changes"):
            # The diff from now to the restored version: exactly what the restore changes, row by row.
            preview = version_rows(
                catalog(), project_id, dataset_id, current, version.version, user, key="restore_diff",
                types=column_types(), file_stem=f"{project_id}-{dataset_id}-restore-v{current}-to-v{version.version}",
                key_column=info.key_column,
            )  # fmt: skip
        s = preview.summary
        sentence.markdown(
            f"Compared with the current version {current}, this will make "
            f"**{s.inserted:,}** row(s) inserted, **{s.updated:,}** updated and **{s.deleted:,}** deleted."
        )
        if s.schema:
            st.warning(
                "This restore also changes the table's columns: "
                + "; ".join(delta.describe() for delta in s.schema)
                + ". Pages, imports and pipelines that use those columns will see the change.",
                icon=":material/warning:",
            )
    reason = st.text_input("Reason (required, kept in the audit log)", key="restore_reason", max_chars=500)
    left, right = st.columns(2)
    if right.button("Cancel", key="restore_cancel", width="stretch"):
        close_dialog("restore")
        st.rerun()
    if left.button("Restore", key="restore_confirm", type="primary", width="stretch"):
        if not reason.strip():
            st.error("A reason is required to restore a version: say why, for the audit log.")
            return
        wait_for_engine()
        status = st.status(f"Restoring version {version.version}...", expanded=True)
        bar = status.progress(0.0, text="Starting")
        steps = [0]

        def progress(message: str) -> None:
            # Core reports steps, not fractions: checking, restoring (the long Spark part), catalog, done.
            steps[0] += 1
            bar.progress(min(steps[0] / RESTORE_STEPS, 1.0), text=message)

        with oreo_errors():
            try:
                restored = history.restore_version(
                    catalog(), project_id, dataset_id, version.version, actor=user, reason=reason.strip(),
                    progress=progress,
                )  # fmt: skip
            except OreoError:
                status.update(label="Not restored", state="error")
                raise
            status.update(label=f"Restored as version {restored.version}", state="complete")
            flash(f"Restored `{choice}` to version {restored.restored_to} as version {restored.version}.")
            close_dialog("restore")
            st.session_state.pop("restore_reason", None)
            st.rerun()


def choose(version: Version) -> None:
    """Carry a version picked in the timeline over to the Version view, Compare and restore."""
    st.session_state["history_version"] = version.version
    st.session_state["history_to"] = version.version
    older = [v.version for v in all_versions() if v.version < version.version and readable(v)]
    if older:
        st.session_state["history_from"] = older[0]


def timeline(versions: list[Version], total_versions: int) -> None:
    hide = st.toggle(
        "Hide maintenance",
        value=True,
        key="history_hide_maintenance",
        help="OPTIMIZE, VACUUM and table property changes change no row; hidden, they never push a data "
        "change off the first page.",
    )
    page_no = page_number("history_timeline_page", (choice, total_versions, hide))
    page = history.table_history(
        catalog(), project_id, dataset_id, actor=user, limit=TIMELINE_PAGE, offset=(page_no - 1) * TIMELINE_PAGE,
        hide_maintenance=hide,
    )  # fmt: skip
    num_pages = max(1, math.ceil(page.total / TIMELINE_PAGE))
    first = (page_no - 1) * TIMELINE_PAGE + 1 if page.total else 0
    st.caption(
        f"Versions **{first:,}–{first + len(page.versions) - 1:,}** of **{page.total:,}**, newest first · "
        "greyed versions cannot be restored · select a version to see it, compare it or restore it"
        + (f" · {total_versions - page.total:,} maintenance version(s) hidden" if total_versions > page.total else "")
    )
    event = st.container(key="history_versions").dataframe(
        timeline_styled(timeline_frame(page.versions)),
        hide_index=True,
        width="stretch",
        key="history_timeline",
        on_select="rerun",
        selection_mode="single-row",
        column_order=TIMELINE_SHOWN,
        column_config={
            "time": st.column_config.DatetimeColumn("time (UTC)", format="YYYY-MM-DD HH:mm:ss"),
            "actor": st.column_config.TextColumn("actor", help="Who committed it; for a merge, the approver"),
            "change request": st.column_config.TextColumn(
                "change request", help="Select the version to open its change request below"
            ),
            "details": st.column_config.TextColumn("details", width="large"),
            "operation": st.column_config.TextColumn("operation", help="Delta Lake's name for the commit"),
        },
    )
    selected = [page.versions[i] for i in event.selection.rows if i < len(page.versions)]
    if selected:
        choose(selected[0])
        st.caption(
            f"Version {selected[0].version} is picked: the **Version** view previews it (and offers its restore), "
            "**Compare** compares it with the version before it."
        )
    if selected and selected[0].cr_id:
        change_request_panel(selected[0])
    elif selected:
        made = operation_words(selected[0].operation)
        st.caption(f"Version {selected[0].version} ({made}) was not made by a change request.")
    if num_pages > 1:
        st.pagination(num_pages, key="history_timeline_page", max_visible_pages=9)
    st.header("Activity", anchor=False)
    # The versions the timeline counts: hidden maintenance is not in the chart either.
    charted = [v for v in versions if not (hide and v.maintenance)]
    st.container(key="history_chart").altair_chart(activity_chart(charted), key="history_activity", width="stretch")


def change_request_panel(version: Version) -> None:
    """The change request behind a version: who asked, who approved, why, and what it changed."""
    with oreo_errors(), st.container(border=True, key="history_cr"):
        record = change_requests.get_change_request(catalog(), str(version.cr_id), actor=user)
        st.markdown(f"**{record.title}** · `{record.id}` · {record.state.value}")
        merged = f" · merged as v{record.merged_version}" if record.merged_version is not None else ""
        st.caption(
            f"{record.kind} by **{record.author}** on {local_time(record.created_at)} · "
            f"approved by **{record.closed_by or '-'}**{merged} · validation {record.validation_status or '-'}"
        )
        if record.description:
            st.markdown(record.description)
        if record.schema_changes:
            st.markdown("Schema changes:\n" + "\n".join(f"- {schema_change_line(c)}" for c in record.schema_changes))
        for comment in change_requests.comments(catalog(), record.id, actor=user):
            st.caption(f"{comment.author} · {local_time(comment.ts)}: {comment.body}")
        change_request_rows(
            record.id, user, catalog(), key="history_cr_diff", types=column_types(), key_column=info.key_column
        )


def readable(version: Version) -> bool:
    """Whether a version's rows can still be read (the current version, or one that can be restored)."""
    return version.restorable or version.not_restorable_reason == history.CURRENT


def preview_table(number: int, names: list[str]) -> None:
    """The table as of version ``number``, filtered, sorted and paged on the server like the Table page."""
    f1, f2, f3, s1, s2 = st.columns([2, 1.2, 2, 2, 1], vertical_alignment="bottom")
    filter_col = f1.selectbox("Filter column", [NO_FILTER, *names], key="history_filter_col")
    filter_op = f2.selectbox("Match", list(OPS), key="history_filter_op")
    filter_value = f3.text_input("Value", key="history_filter_value", placeholder="press Enter to apply")
    sort_col = s1.selectbox("Sort by", [NATURAL, *names], key="history_sort_col")
    descending = s2.toggle("Desc", key="history_sort_desc")
    filters = []
    if filter_col != NO_FILTER and filter_value != "":
        filters.append(RowFilter(column=filter_col, value=filter_value, op=OPS[filter_op]))  # type: ignore[arg-type]

    signature = (choice, number, filter_col, filter_op, filter_value, sort_col, descending)
    page_no = page_number("history_preview_page", signature)
    page = history.preview_version(
        catalog(), project_id, dataset_id, number, actor=user,
        offset=(page_no - 1) * PREVIEW_PAGE, limit=PREVIEW_PAGE, filters=filters,
        order_by=None if sort_col == NATURAL else sort_col, descending=descending,
    )  # fmt: skip
    num_pages = max(1, math.ceil(page.total / PREVIEW_PAGE))
    first = (page_no - 1) * PREVIEW_PAGE + 1 if page.total else 0
    last = min(page_no * PREVIEW_PAGE, page.total)
    st.caption(f"{rows_span(first, last, page.total)} · as of version {number} (read-only)")
    st.container(key="history_rows").dataframe(
        page.rows,
        hide_index=True,
        width="stretch",
        height=min(ROW_PX * (len(page.rows) + 1) + 3, 900),
        key="history_preview",
    )
    st.pagination(num_pages, key="history_preview_page", max_visible_pages=9)


def version_view(versions: list[Version], info: datasets.DatasetInfo, can_restore: bool) -> None:
    current = info.version
    by_number = {v.version: v for v in versions}
    if st.session_state.get("history_version") not in by_number:
        st.session_state["history_version"] = versions[0].version
    number = st.selectbox(
        "Version", list(by_number), key="history_version", format_func=lambda n: version_label(by_number[n])
    )
    version = by_number[number]

    names = [c.name for c in datasets.dataset_columns(info)]
    if readable(version):
        with oreo_errors():
            preview_table(number, names)
    else:
        st.warning(f"Version {number} can no longer be read: {version.not_restorable_reason}.", icon=":material/block:")

    fmt_col, download_col, restore_col, note = st.columns([1.4, 1.4, 1.4, 4], vertical_alignment="bottom")
    fmt = fmt_col.selectbox("Format", list(FORMATS), key="history_download_format")
    extension = FORMATS[fmt]
    download_col.download_button(
        "Download",
        data=lambda: export_bytes(
            lambda out: history.export_version(catalog(), project_id, dataset_id, out, actor=user, version=number),
            f"{dataset_id}-v{number}.{extension}",
        ),
        file_name=f"{project_id}-{dataset_id}-v{number}.{extension}",
        mime="text/csv" if extension == "csv" else "application/vnd.apache.parquet",
        key="history_download",
        icon=":material/download:",
        disabled=not readable(version),
        width="stretch",
    )
    if not can_restore:
        return
    if number == current:
        why = f"Version {number} is the current version."
    elif not version.restorable:
        why = f"Version {number} cannot be restored: {version.not_restorable_reason or 'its files are gone'}."
    else:
        why = None
    if restore_col.button(
        f"Restore to v{number}",
        key="history_restore",
        type="primary",
        icon=":material/history:",
        disabled=why is not None,
        help=why,
        width="stretch",
    ):
        open_dialog("restore", number)
    if why is not None:
        note.caption(why)


def compare_view(versions: list[Version]) -> None:
    by_number = {v.version: v for v in versions if readable(v)}
    numbers = list(by_number)
    if len(numbers) < 2:
        st.info("Fewer than two versions of this table can still be read: there is nothing to compare.")
        return
    if st.session_state.get("history_to") not in by_number:
        st.session_state["history_to"] = numbers[0]
    if st.session_state.get("history_from") not in by_number:
        st.session_state["history_from"] = numbers[1] if len(numbers) > 1 else numbers[0]
    left, right = st.columns(2)
    old = left.selectbox("From version", numbers, key="history_from", format_func=lambda n: version_label(by_number[n]))
    new = right.selectbox("To version", numbers, key="history_to", format_func=lambda n: version_label(by_number[n]))
    if old >= new:
        st.info("Pick a **From** version older than the **To** version to see what changed between them.")
        return
    st.caption(f"From version {old} to version {new}, row by row.")
    with st.container(key="history_changes"):
        version_rows(
            catalog(), project_id, dataset_id, old, new, user, key="history_diff", types=column_types(),
            key_column=info.key_column,
        )  # fmt: skip


with oreo_errors():
    info = datasets.get_dataset(catalog(), project_id, dataset_id, actor=user)
    role = auth.role_in(catalog(), user, project_id)
    can_restore = role is not None and role.rank >= auth.Role.ADMIN.rank
    versions = all_versions()
    if not versions:
        st.info("This dataset has no versions yet.")
        st.stop()
    st.caption(f"`{choice}` is at version {info.version} · {len(versions):,} version(s) in its history")
    section = st.segmented_control("View", SECTIONS, default="Timeline", required=True, key="history_section")
    if section == "Timeline":
        timeline(versions, len(versions))
    elif section == "Version":
        version_view(versions, info, can_restore)
    else:
        compare_view(versions)

    target = dialog_value("restore")
    by_number = {v.version: v for v in versions}
    # Never offer a restore that would fail: only to admins, only to an earlier, restorable version.
    offered = target in by_number and target != info.version and by_number[target].restorable
    if can_restore and offered and info.version is not None:
        restore_dialog(by_number[target], info.version)
