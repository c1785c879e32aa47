"""The projects and datasets the user may see; admins create datasets here."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from app.components import DATASET_KEY, catalog, flash, oreo_errors, require_user, show_flash
from core import auth, datasets, diff, history, projects
from core.errors import OreoError

user = require_user()
st.title("Datasets")
show_flash()


def last_change(info: datasets.DatasetInfo) -> dict[str, object]:
    """The newest data change of a dataset as a person reads it: what, by whom, when (maintenance skipped)."""
    try:
        page = history.table_history(
            catalog(), info.project_id, info.dataset_id, actor=user, limit=1, hide_maintenance=True
        )
    except OreoError:
        page = None  # a damaged table still lists; its own pages say what is wrong
    if page is None or not page.versions:
        return {"last change": "", "by": "", "last change at": info.last_commit_at}
    v = page.versions[0]
    if v.cr_title:
        what = f"v{v.version} · {v.cr_title}"
    elif v.kind == "restore":
        what = f"v{v.version} · restored to v{v.restored_to}" + (f": {v.reason}" if v.reason else "")
    else:
        what = f"v{v.version} · {'created' if v.kind == 'create' else v.operation.lower()}"
    return {"last change": what, "by": v.actor or "", "last change at": v.timestamp}


def label_settings(project_id: str, items: list[datasets.DatasetInfo]) -> None:
    """An admin names the columns diffs show beside each changed row's key (``oreo dataset label-columns``)."""
    chosen_id = st.selectbox(
        "Dataset", [d.dataset_id for d in items], key=f"labels_dataset_{project_id}", disabled=len(items) < 2
    )
    info = next(d for d in items if d.dataset_id == chosen_id)
    with oreo_errors():
        names = [c.name for c in datasets.dataset_columns(info) if c.name != "row_id"]
        current = diff.label_columns(catalog(), project_id, info.dataset_id, actor=user)
        key = f"labels_columns_{project_id}_{info.dataset_id}"
        picked = st.multiselect(
            "Identifying columns",
            names,
            default=[c for c in current if c in names],
            max_selections=diff.MAX_LABEL_COLUMNS,
            key=key,
            help=f"Up to {diff.MAX_LABEL_COLUMNS} columns that Review, My requests, History's Compare and the restore "
            "preview show beside each changed row's key. Default: the key plus the first two text columns.",
        )
        buttons = st.container(horizontal=True)
        if buttons.button("Save", key=f"labels_save_{project_id}", type="primary", disabled=picked == current):
            saved = diff.set_label_columns(catalog(), project_id, info.dataset_id, picked or None, actor=user)
            flash(f"{project_id}/{info.dataset_id}: diffs now show {', '.join(saved) or 'the key only'}.")
            st.session_state.pop(key, None)
            st.rerun()
        if buttons.button("Back to the default", key=f"labels_reset_{project_id}"):
            saved = diff.set_label_columns(catalog(), project_id, info.dataset_id, None, actor=user)
            flash(f"{project_id}/{info.dataset_id}: back to the default, {', '.join(saved) or 'the key only'}.")
            st.session_state.pop(key, None)
            st.rerun()


with oreo_errors():
    visible = projects.list_projects(catalog(), user)
    roles = auth.memberships(catalog(), user)
    if not visible:
        st.info("You are not a member of any project yet. Ask an admin to add you.")
    else:
        st.header("Your projects", anchor=False)  # each project's name is a heading below it, one level down
    for project in visible:
        role = roles.get(project.id)
        st.subheader(f"{project.name}", anchor=False)
        st.caption(f"project `{project.id}` · your role: **{role.value if role else '-'}**")
        items = datasets.list_datasets(catalog(), actor=user, project_id=project.id)
        if not items:
            st.write("No datasets yet.")
        else:
            frame = pd.DataFrame(
                [
                    {
                        "dataset": d.dataset_id,
                        "version": d.version,
                        "rows": d.rows,
                        "key": d.key_column or "(generated row_id)",
                        **last_change(d),
                    }
                    for d in items
                ]
            )
            st.dataframe(
                frame,
                hide_index=True,
                width="stretch",
                key=f"datasets_{project.id}",
                column_config={"last change at": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm")},
            )
            cols = st.columns(min(len(items), 6))
            for i, d in enumerate(items):
                if cols[i % len(cols)].button(
                    f"Open {d.dataset_id}", key=f"open_{project.id}_{d.dataset_id}", icon=":material/table:"
                ):
                    st.session_state[DATASET_KEY] = f"{d.project_id}/{d.dataset_id}"
                    st.switch_page(Path(__file__).parent / "table.py")

        if role == auth.Role.ADMIN and items:
            with st.expander("Dataset settings", icon=":material/settings:", key=f"settings_{project.id}"):
                label_settings(project.id, items)
        if role == auth.Role.ADMIN:
            with st.expander("Create a dataset", icon=":material/add:"):
                with st.form(f"create_{project.id}", clear_on_submit=False):
                    dataset_id = st.text_input("Dataset id", key=f"create_id_{project.id}", placeholder="e.g. orders")
                    upload = st.file_uploader(
                        "File (CSV, Parquet or XLSX)", type=["csv", "parquet", "xlsx"], key=f"create_file_{project.id}"
                    )
                    key = st.text_input("Key column (optional)", key=f"create_key_{project.id}")
                    sheet = st.text_input("XLSX sheet (if several)", key=f"create_sheet_{project.id}")
                    go = st.form_submit_button("Create dataset", type="primary")
                if go:
                    if upload is None:
                        st.error("Choose a file to upload.")
                    else:
                        with oreo_errors(), tempfile.TemporaryDirectory() as tmp:
                            path = Path(tmp) / Path(upload.name).name
                            path.write_bytes(upload.getbuffer())
                            with st.spinner("Writing the main table with Spark..."):
                                info = datasets.create_dataset(
                                    catalog(),
                                    project.id,
                                    dataset_id.strip(),
                                    path,
                                    key=key.strip() or None,
                                    sheet=sheet.strip() or None,
                                    actor=user,
                                )
                            st.success(f"Created {info.project_id}/{info.dataset_id} with {info.rows:,} rows.")
