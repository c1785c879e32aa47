"""Import a CSV, Parquet or XLSX file into a dataset as a change request: append its rows, upsert them by a
key, or replace the table's content with it.

The file is read once (``core.imports.store_upload``) and kept under ``imports/`` by its
upload id, which the session remembers, so reruns never read it again. Nothing reaches
the table before an approver merges the request.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st

from app.components import (
    DATASET_KEY,
    catalog,
    dataset_options,
    error_message,
    flash,
    oreo_errors,
    require_user,
    show_error,
    show_flash,
    split_dataset,
    status_badge,
    wait_for_engine,
)
from app.import_views import keep_upload, kept_upload, schema_frame, schema_styled, schema_summary
from core import auth, imports
from core.config import get_settings
from core.errors import NotFound, OreoError
from core.ingest import xlsx_sheets

if TYPE_CHECKING:
    from streamlit.runtime.uploaded_file_manager import UploadedFile

    from core.datasets import DatasetInfo
    from core.schema import ColumnPlan

PREVIEW_ROWS = 20
ROW_PX = 35
MODE_LABELS = {"append": "Append", "upsert": "Upsert", "replace": "Replace"}
MODE_CAPTIONS = {
    "append": "every row is new and gets its own row_id",
    "upsert": "rows whose key matches a row of the table update it; the others are added",
    "replace": "the file becomes the table's whole content: rows it lacks are deleted",
}
NO_KEY = "(no key: replace every row)"
FORM_KEYS = ("import_mode", "import_key", "import_title", "import_description", "import_sheet", "import_plan")
REQUESTS_PAGE = Path(__file__).resolve().parent / "requests.py"

user = require_user()
st.title("Import")
show_flash()
submitted = st.session_state.pop("import_submitted", None)
if submitted:
    st.page_link(REQUESTS_PAGE, label=f"Follow {submitted} on My requests", icon=":material/outbox:")
st.caption(
    "Add, update or replace rows from a CSV, Parquet or XLSX file. The import becomes a change request: "
    "an approver reviews it, and the table changes only when it is merged."
)


def forget_form() -> None:
    for key in FORM_KEYS:
        st.session_state.pop(key, None)


def sheets_of(uploaded: UploadedFile) -> list[str]:
    """The workbook's sheet names, listed once per uploaded file."""
    cached = st.session_state.get("import_sheets")
    if cached is None or cached[0] != uploaded.file_id:
        with imports.saved_upload(uploaded, uploaded.name) as path:
            cached = (uploaded.file_id, xlsx_sheets(path))
        st.session_state["import_sheets"] = cached
    return list(cached[1])


def read_file(uploaded: UploadedFile, sheet: str | None) -> None:
    """Have core read and keep the file; remember a failure so reruns do not read it again."""
    bar = st.progress(0.0, text=f"Reading {uploaded.name}")

    def progress(fraction: float, message: str) -> None:
        bar.progress(min(max(fraction, 0.0), 1.0), text=message)

    try:
        with imports.saved_upload(uploaded, uploaded.name) as path:
            upload = imports.store_upload(
                catalog(), project_id, dataset_id, path, actor=user, sheet=sheet, progress=progress
            )
    except OreoError as exc:
        bar.empty()
        message = error_message(exc)
        st.session_state["import_failed"] = (uploaded.file_id, sheet, message)
        st.error(message, icon=":material/error:")
        return
    st.session_state.pop("import_failed", None)
    forget_form()
    keep_upload(choice, upload.upload_id)
    st.rerun()


def choose_file() -> None:
    # The server refuses bodies over its own limit whatever the widget says, so show the smaller one.
    max_mb = min(get_settings().max_upload_mb, int(st.get_option("server.maxUploadSize")))
    uploaded = st.file_uploader(
        "File",
        type=["csv", "parquet", "xlsx"],
        key="import_file",
        max_upload_size=max_mb,
        help=f"CSV (UTF-8, with a header row), Parquet or XLSX, up to {max_mb} MB. "
        "XLSX formulas are read as the values Excel last saved, never evaluated.",
    )
    if uploaded is None:
        st.session_state.pop("import_failed", None)
        return
    sheet = None
    several = False
    if Path(uploaded.name).suffix.lower() == ".xlsx":
        sheets = sheets_of(uploaded)
        several = len(sheets) > 1
        if several:
            st.caption(f"This workbook has {len(sheets)} sheets: pick the one to import.")
            sheet = st.selectbox("Sheet", sheets, key="import_sheet")
    failed = st.session_state.get("import_failed")
    if failed is not None and failed[:2] == (uploaded.file_id, sheet):
        st.error(failed[2], icon=":material/error:")
        return
    if several and not st.button("Read sheet", key="import_read", type="primary", icon=":material/upload:"):
        return
    read_file(uploaded, sheet)


def planned(upload: imports.Upload, mode: str, key: str | None, version: int | None) -> imports.ImportPlan:
    """The checked plan, remembered until an option or the table changes.

    Raises:
        OreoError: Why the file cannot be imported this way (kept for reruns too).
    """
    signature = (upload.upload_id, mode, key, version)
    cached = st.session_state.get("import_plan")
    if cached is None or cached[0] != signature:
        result: imports.ImportPlan | OreoError
        try:
            result = imports.plan_import(catalog(), upload, actor=user, mode=mode, key=key)
        except OreoError as exc:
            result = exc
        cached = (signature, result)
        st.session_state["import_plan"] = cached
    if isinstance(cached[1], OreoError):
        raise cached[1]
    plan: imports.ImportPlan = cached[1]
    return plan


def replace_key(upload: imports.Upload, dataset_key: str | None) -> str | None:
    """The column a replace matches rows by: the dataset's key, or one the user picks (or none)."""
    if dataset_key is not None:
        st.caption(f"Rows are matched by the dataset's key, **{dataset_key}**.")
        return dataset_key
    names = [NO_KEY, *(name for name, _ in upload.columns)]
    if st.session_state.get("import_key") not in names:
        st.session_state["import_key"] = NO_KEY
    picked = st.selectbox(
        "Key column",
        names,
        key="import_key",
        help="Matches the file's rows to the table's (a column unique in the table); without one, every row "
        "is deleted and every row of the file added",
    )
    return None if picked == NO_KEY else picked


def submit(plan: imports.ImportPlan, title: str, description: str) -> None:
    wait_for_engine()
    status = st.status("Submitting the import...", expanded=True)
    bar = status.progress(0.0, text="Starting")

    def progress(fraction: float, message: str) -> None:
        bar.progress(min(max(fraction, 0.0), 1.0), text=message)

    try:
        cr = imports.submit_import(
            catalog(), plan, actor=user, title=title.strip() or None, description=description.strip(), progress=progress
        )
    except OreoError as exc:
        status.update(label="Not submitted", state="error")
        show_error(exc)
        return
    status.update(label=f"Submitted {cr.id}", state="complete")
    keep_upload(choice, None)  # the request keeps the upload now
    forget_form()
    st.session_state["import_submitted"] = cr.id
    checks = cr.validation_status
    flash(
        f"Submitted change request `{cr.id}` ({cr.rows:,} row(s), {cr.cells:,} cell(s)) from "
        f"{plan.upload.file_name}. Data checks: {status_badge(checks)}. "
        "An approver reviews it before it reaches the table.",
        kind="warning" if checks in ("warning", "failed") else "success",
    )
    st.rerun()


def show_upload(upload: imports.Upload) -> None:
    """The kept upload: its preview and schema, how to import it, what that does, and the submit form."""
    _show_upload_bar(upload)
    _show_preview(upload)
    info, columns = imports.compare_with_table(catalog(), upload, actor=user)
    _show_schema(info, columns)
    mode, key = _choose_mode(upload, info)
    plan = None
    try:
        plan = planned(upload, mode, key, info.version)
    except OreoError as exc:
        show_error(exc)
    if plan is not None:
        _describe_plan(upload, plan)
    _show_submit_form(upload, plan)


def _show_upload_bar(upload: imports.Upload) -> None:
    """The upload's name, kind and size, with a button that discards it."""
    with st.container(border=True, key="import_upload"):
        text, action = st.columns([6, 1], vertical_alignment="center")
        sheet = f" · sheet **{upload.sheet}**" if upload.sheet else ""
        text.markdown(
            f":material/description: **{upload.file_name}** · {upload.kind.upper()}{sheet} · "
            f"{upload.rows:,} row(s) · {len(upload.columns)} column(s)"
        )
        if action.button("Discard", key="import_discard", icon=":material/delete:", width="stretch"):
            imports.discard_upload(upload)
            keep_upload(choice, None)
            forget_form()
            flash(f"Discarded {upload.file_name}; nothing was imported.", kind="info")
            st.rerun()


def _show_preview(upload: imports.Upload) -> None:
    with st.container(key="import_preview"):
        st.header("Preview", anchor=False)
        first = imports.preview(upload, PREVIEW_ROWS)
        st.caption(f"First {first.num_rows:,} of {upload.rows:,} row(s), as read from the file")
        st.dataframe(first.to_pandas(), hide_index=True, width="stretch", key="import_preview_table")


def _show_schema(info: DatasetInfo, columns: list[ColumnPlan]) -> None:
    """The file's columns against the table's."""
    with st.container(key="import_schema"):
        st.header("Schema", anchor=False)
        st.caption(f"The file's columns against `{choice}` at version {info.version}")
        for line in schema_summary(columns):
            st.markdown(line)
        st.dataframe(
            schema_styled(schema_frame(columns)),
            hide_index=True,
            width="stretch",
            height=min(ROW_PX * (len(columns) + 1) + 3, 600),
            row_height=ROW_PX,
            key="import_schema_table",
        )


def _choose_mode(upload: imports.Upload, info: DatasetInfo) -> tuple[str, str | None]:
    """The import mode the user picks and, for an upsert or a replace, the key column."""
    st.header("Import as", anchor=False)
    mode = st.radio(
        "Mode",
        imports.MODES,
        key="import_mode",
        horizontal=True,
        format_func=lambda m: MODE_LABELS[m],
        captions=[MODE_CAPTIONS[m] for m in imports.MODES],
    )
    key = None
    if mode == "upsert":
        names = [name for name, _ in upload.columns]
        by_lower = {n.lower(): n for n in names}
        default = by_lower.get((info.key_column or "").lower()) or by_lower.get("row_id") or names[0]
        if st.session_state.get("import_key") not in names:
            st.session_state["import_key"] = default
        key = st.selectbox("Key column", names, key="import_key", help="Matches the file's rows to the table's")
    elif mode == "replace":
        key = replace_key(upload, info.key_column)
    return mode, key


def _describe_plan(upload: imports.Upload, plan: imports.ImportPlan) -> None:
    """What the import will do once merged, and a warning when a replace deletes rows."""
    changes = ""
    if plan.schema_changes:
        changes = f" It also changes the table's schema ({len(plan.schema_changes)} change(s), listed above)."
    rows = f"{upload.rows:,} row(s) of {upload.file_name}"
    if plan.mode == "append":
        what = f"{rows} will be added to `{choice}` as new rows"
    elif plan.mode == "upsert":
        what = f"{rows} will update the rows of `{choice}` with the same **{plan.key}**, or be added"
    else:
        what = f"{plan.describe()},"
    st.caption(f"{what} once an approver merges the request.{changes}")
    if plan.mode == "replace" and plan.deletes:
        which = f"whose **{plan.key}** is not in the file" if plan.key else "(there is no key to match rows by)"
        with st.container(key="import_replace_warning"):
            st.warning(
                f"This replace deletes **{plan.deletes:,}** row(s) of `{choice}` {which}. "
                "The approver sees each of them in the review.",
                icon=":material/warning:",
            )


def _show_submit_form(upload: imports.Upload, plan: imports.ImportPlan | None) -> None:
    """Title, description and the submit button (disabled while there is no plan)."""
    title = st.text_input(
        "Title", key="import_title", placeholder=f"Import {upload.file_name} into {choice}", max_chars=300
    )
    description = st.text_area("Description", key="import_description", placeholder="Where the file comes from and why")
    if (
        st.button(
            "Submit change request", key="import_submit", type="primary", icon=":material/send:", disabled=plan is None
        )
        and plan is not None
    ):
        submit(plan, title, description)


with oreo_errors():
    roles = auth.memberships(catalog(), user)
    options = [
        o
        for o in dataset_options(user)
        if (role := roles.get(split_dataset(o)[0])) is not None and role.rank >= auth.Role.EDITOR.rank
    ]
    if not options:
        st.info("You can import into the datasets of projects where you are an editor, and you are not one yet.")
        st.stop()
    if st.session_state.get(DATASET_KEY) not in options:
        st.session_state[DATASET_KEY] = options[0]
    choice = st.selectbox("Dataset", options, key=DATASET_KEY)
    project_id, dataset_id = split_dataset(choice)

    upload = None
    upload_id = kept_upload(choice)
    if upload_id is not None:
        try:
            upload = imports.get_upload(catalog(), project_id, dataset_id, upload_id, actor=user)
        except NotFound:
            keep_upload(choice, None)
            st.warning("Your uploaded file is no longer kept (old uploads are cleaned up). Choose it again.")
    if upload is None:
        choose_file()
    else:
        show_upload(upload)
