"""Import page: upload, preview, the file's schema against the table's, append or upsert, submit; its review."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest
from openpyxl import Workbook
from streamlit.testing.v1 import AppTest

from app.change_views import schema_change_line
from app.import_views import schema_frame, schema_summary
from core import change_requests, datasets, imports, sessions
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.change_requests import CRState
from core.config import get_settings
from core.schema import ColumnPlan, SchemaChange
from tests.page_support import (
    REVIEW_PAGE,
    button_keys,
    copy_workspace,
    has_text,
    seed_workspace,
    signed_in,
    submit,
    texts,
    user,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

IMPORT_PAGE = "../pages/imports.py"
# Two new orders and a column the table does not have.
NEW_ORDERS = b"order_id,plan,amount,email\n2000,pro,10.50,ann@example.com\n2001,free,3.00,bob@example.com\n"
REVIEW_TITLE = "Orders from the shop export"


def seed_import(folder: Path) -> str:
    """``seed_workspace`` plus an open import request by erin adding an ``email`` column; returns its id."""
    seed_workspace(folder)
    source = folder / "new-orders.csv"
    source.write_bytes(NEW_ORDERS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_DATA_ROOT", str(folder / "delta"))
        mp.setenv("OREO_DATABASE_URL", f"sqlite:///{folder / 'catalog.db'}")
        get_settings.cache_clear()
        reset_catalogs()
        catalog = open_catalog()
        record, _ = imports.import_file(
            catalog, "shop", "orders", source, actor=user(catalog, "erin"), title=REVIEW_TITLE
        )
        reset_catalogs()
    get_settings.cache_clear()
    return record.id


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("pages-import")
    return folder, seed_import(folder)


@pytest.fixture
def workspace(seeded: tuple[Path, str], data_root: Path) -> Catalog:
    return copy_workspace(seeded[0], data_root)


@pytest.fixture
def seeded_cr(seeded: tuple[Path, str]) -> str:
    return seeded[1]


@pytest.fixture
def reads_of_files(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every call the page makes to ``imports.store_upload`` (which reads the whole file), with its options."""
    calls: list[dict[str, Any]] = []
    store = imports.store_upload

    def counted(*args: Any, **kwargs: Any) -> imports.Upload:
        calls.append({**kwargs, "path_name": Path(args[3]).name})
        return store(*args, **kwargs)

    monkeypatch.setattr(imports, "store_upload", counted)
    return calls


def _page(username: str = "erin") -> AppTest:
    at = signed_in(username, IMPORT_PAGE)
    assert texts(at.title) == ["Import"]
    return at


def _upload(at: AppTest, name: str, data: bytes, mime: str = "text/csv") -> AppTest:
    at.file_uploader(key="import_file").set_value((name, data, mime)).run(timeout=300)
    assert not at.exception, at.exception
    return at


def _kept_ids(at: AppTest) -> dict[str, str]:
    """Dataset -> upload id, as the page keeps them in the session."""
    return dict(at.session_state["import_uploads"]) if "import_uploads" in at.session_state else {}


def _open_requests(catalog: Catalog) -> list[change_requests.ChangeRequest]:
    return change_requests.list_change_requests(catalog, actor=user(catalog, "abe"), state=CRState.OPEN)


def _kept(at: AppTest) -> imports.Upload:
    upload_id = at.session_state["import_uploads"]["shop/orders"]
    return imports.get_upload(open_catalog(), "shop", "orders", upload_id, actor=user(open_catalog(), "erin"))


def _uploads_on_disk() -> list[Path]:
    folder = datasets.layout_for("shop", "orders").upload("x").parent
    return sorted(folder.iterdir()) if folder.exists() else []


def _frame(at: AppTest, column: str) -> pd.DataFrame:
    """The first table on the page that has ``column``."""
    found = [d.value for d in at.dataframe if column in d.value.columns]
    assert found, [list(d.value.columns) for d in at.dataframe]
    frame: pd.DataFrame = found[0]
    return frame


def _markdown(at: AppTest) -> str:
    return "\n".join(texts(at.markdown))


def _page_links(at: AppTest) -> list[str]:
    """The page's own links (the sidebar's Inbox link is the router's, on every page)."""
    return [e.proto.label for e in at.get("page_link") if e not in at.sidebar.get("page_link")]


# ---------------------------------------------------------------- upload, preview, schema


def test_a_csv_with_a_new_column_is_previewed_and_its_schema_compared(
    workspace: Catalog, reads_of_files: list[dict[str, Any]]
) -> None:
    at = _page()
    before = _uploads_on_disk()
    assert at.session_state["oreo_dataset"] == "shop/orders"
    assert "import_submit" not in button_keys(at)

    _upload(at, "new-orders.csv", NEW_ORDERS)

    assert not at.error, texts(at.error)
    upload = _kept(at)
    assert (upload.file_name, upload.kind, upload.rows) == ("new-orders.csv", "csv", 2)
    assert len(_uploads_on_disk()) == len(before) + 1
    assert has_text(at.markdown, "**new-orders.csv** · CSV · 2 row(s) · 4 column(s)")
    preview = _frame(at, "email")
    assert list(preview.columns) == ["order_id", "plan", "amount", "email"]
    assert list(preview["email"]) == ["ann@example.com", "bob@example.com"]
    assert "First 2 of 2 row(s), as read from the file" in texts(at.caption)

    schema = _frame(at, "status")
    assert schema.to_dict("records") == [
        {"column": "order_id", "status": "matches", "in the file": "bigint", "in the table": "bigint",
         "after import": "bigint"},
        {"column": "plan", "status": "matches", "in the file": "string", "in the table": "string",
         "after import": "string"},
        {"column": "amount", "status": "matches", "in the file": "double", "in the table": "double",
         "after import": "double"},
        {"column": "email", "status": "new column", "in the file": "string", "in the table": "",
         "after import": "string"},
    ]  # fmt: skip
    assert ":green-badge[1 new column] **email** (string)" in texts(at.markdown)
    # Append is the default, and this file can be appended as it is.
    assert at.radio(key="import_mode").value == "append"
    assert not at.button(key="import_submit").disabled
    assert has_text(at.caption, "It also changes the table's schema (1 change(s), listed above).")
    # The file was read once, with a progress callback, under the name the user knows it by.
    assert len(reads_of_files) == 1
    assert reads_of_files[0]["path_name"] == "new-orders.csv" and callable(reads_of_files[0]["progress"])


def test_reruns_use_the_kept_upload_without_reading_the_file_again(
    workspace: Catalog, reads_of_files: list[dict[str, Any]]
) -> None:
    at = _upload(_page(), "new-orders.csv", NEW_ORDERS)
    kept = at.session_state["import_uploads"]["shop/orders"]

    at.text_input(key="import_title").input("New orders").run(timeout=120)
    at.radio(key="import_mode").set_value("upsert").run(timeout=120)
    at.radio(key="import_mode").set_value("append").run(timeout=120)

    assert not at.exception
    assert len(reads_of_files) == 1
    assert at.session_state["import_uploads"]["shop/orders"] == kept
    assert at.text_input(key="import_title").value == "New orders"
    assert not at.file_uploader  # the kept file replaces the uploader until it is discarded or submitted


def test_discard_removes_the_upload(workspace: Catalog) -> None:
    at = _upload(_page(), "new-orders.csv", NEW_ORDERS)
    upload = _kept(at)
    assert upload.folder.is_dir()

    at.button(key="import_discard").click().run(timeout=120)

    assert not at.exception
    assert not upload.folder.exists()
    assert "shop/orders" not in _kept_ids(at)
    assert "Discarded new-orders.csv; nothing was imported." in texts(at.info)
    assert at.file_uploader(key="import_file").value is None
    assert "import_submit" not in button_keys(at)


def test_an_unreadable_file_shows_one_line_and_keeps_nothing(
    workspace: Catalog, reads_of_files: list[dict[str, Any]]
) -> None:
    at = _page()
    before = _uploads_on_disk()

    _upload(at, "ragged.csv", b"order_id,plan,amount\n2000,pro\n2001,free,3.00,extra\n")

    assert len(at.error) == 1
    message = at.error[0].value
    assert message.startswith("ragged.csv has rows with a different number of columns than its header")
    assert "oreo-upload-" not in message and "\n" not in message
    assert _uploads_on_disk() == before
    assert _kept_ids(at) == {}
    # A rerun shows the same message without reading the file again; the page stays usable.
    at.run(timeout=120)
    assert texts(at.error) == [message]
    assert len(reads_of_files) == 1
    _upload(at, "new-orders.csv", NEW_ORDERS)
    assert not at.error, texts(at.error)
    assert _kept(at).file_name == "new-orders.csv"


def test_a_type_the_table_cannot_take_is_marked_and_blocks_submit(workspace: Catalog) -> None:
    at = _upload(_page(), "text-amounts.csv", b"order_id,plan,amount\n2000,pro,about ten\n")

    schema = _frame(at, "status").set_index("column")
    assert schema.loc["amount", "status"] == "incompatible"
    assert (schema.loc["amount", "in the file"], schema.loc["amount", "in the table"]) == ("string", "double")
    assert ":red-badge[1 incompatible column] **amount** (double in the table, string in the file)" in texts(
        at.markdown
    )
    assert len(at.error) == 1
    assert "column 'amount' is double in the table but string in text-amounts.csv" in at.error[0].value
    assert at.button(key="import_submit").disabled


def test_bad_values_are_each_named_and_block_submit(workspace: Catalog) -> None:
    """Issue 24 §6: the page shows the message the CLI prints, naming only the column that has bad values."""
    at = _upload(_page(), "bad-rows.csv", b"order_id,plan,amount\n2000,pro,1.5\n2001,free,about ten\n2002,pro,n/a\n")

    assert len(at.error) == 1
    message = at.error[0].value
    assert message.startswith(
        "bad-rows.csv has 2 values its table cannot hold: "
        "column 'amount', not a number (DOUBLE): data rows 2 ('about ten'), 3 ('n/a')"
    )
    assert "'plan'" not in message and "'order_id'" not in message
    assert at.button(key="import_submit").disabled


def test_xlsx_with_several_sheets_asks_which_one_before_reading(
    workspace: Catalog, reads_of_files: list[dict[str, Any]]
) -> None:
    book = Workbook()
    notes = book.active
    assert notes is not None
    notes.title = "Notes"
    notes.append(["note"])
    notes.append(["exported on Monday"])
    orders = book.create_sheet("Orders")
    orders.append(["order_id", "plan", "amount"])
    orders.append([3000, "pro", 12.5])
    orders.append([3001, "starter", 7.25])
    orders.append([3002, "free", 0])
    data = io.BytesIO()
    book.save(data)
    at = _upload(_page(), "export.xlsx", data.getvalue(), "application/vnd.ms-excel")

    assert at.selectbox(key="import_sheet").options == ["Notes", "Orders"]
    assert has_text(at.caption, "This workbook has 2 sheets: pick the one to import.")
    assert reads_of_files == []
    at.selectbox(key="import_sheet").select("Orders").run(timeout=120)
    assert reads_of_files == []

    at.button(key="import_read").click().run(timeout=300)

    assert not at.exception and not at.error, texts(at.error)
    assert [c["sheet"] for c in reads_of_files] == ["Orders"]
    upload = _kept(at)
    assert (upload.kind, upload.sheet, upload.rows) == ("xlsx", "Orders", 3)
    assert has_text(at.markdown, "**export.xlsx** · XLSX · sheet **Orders** · 3 row(s)")
    assert list(_frame(at, "order_id")["plan"]) == ["pro", "starter", "free"]


# ---------------------------------------------------------------- modes and submit


def test_append_submits_an_import_request_with_its_schema_change(workspace: Catalog) -> None:
    at = _upload(_page(), "new-orders.csv", NEW_ORDERS)
    upload = _kept(at)
    at.text_input(key="import_title").input("Two shop orders")
    at.text_area(key="import_description").input("From the shop export.")

    at.button(key="import_submit").click().run(timeout=600)

    assert not at.exception
    assert not at.error, texts(at.error)
    mine = [cr for cr in _open_requests(workspace) if cr.title == "Two shop orders"]
    assert len(mine) == 1
    cr = mine[0]
    assert (cr.kind, cr.upload_id, cr.rows, cr.description) == ("import", upload.upload_id, 2, "From the shop export.")
    assert cr.schema_changes == (SchemaChange("email", "add", None, "string"),)
    assert has_text(at.success, f"Submitted change request `{cr.id}` (2 row(s), ")
    assert _page_links(at) == [f"Follow {cr.id} on My requests"]
    # The request keeps the upload; the page is ready for the next file.
    assert upload.folder.is_dir()
    assert "shop/orders" not in _kept_ids(at)
    assert at.file_uploader(key="import_file").value is None
    # Main is unchanged until an approver merges.
    info = datasets.get_dataset(workspace, "shop", "orders", actor=user(workspace, "erin"))
    assert "email" not in [c.name for c in datasets.dataset_columns(info)]


def test_upsert_by_the_key_updates_rows_the_append_refuses(workspace: Catalog) -> None:
    changed = b"order_id,plan,amount\n1000,enterprise,0.00\n2500,pro,5.00\n"
    at = _upload(_page(), "changes.csv", changed)

    # Order 1000 exists: an append refuses it and says what to do.
    assert len(at.error) == 1
    assert "changes.csv has keys the table already has (1000)" in at.error[0].value
    assert "use upsert" in at.error[0].value
    assert at.button(key="import_submit").disabled

    at.radio(key="import_mode").set_value("upsert").run(timeout=120)

    assert not at.error, texts(at.error)
    assert at.selectbox(key="import_key").value == "order_id"  # the dataset's key column
    assert at.selectbox(key="import_key").options == ["order_id", "plan", "amount"]
    assert has_text(at.caption, "will update the rows of `shop/orders` with the same **order_id**, or be added")
    at.button(key="import_submit").click().run(timeout=600)

    assert not at.error, texts(at.error)
    cr = next(c for c in _open_requests(workspace) if c.title == "Import changes.csv into shop/orders")
    assert (cr.kind, cr.rows, cr.schema_changes) == ("import", 2, ())
    diff = change_requests.diff_change_request(workspace, cr.id, actor=user(workspace, "abe"), limit=10, offset=0)
    assert {(c.row_id, c.change, c.column) for c in diff.changes} >= {("1000", "update", "plan")}


def test_an_upsert_key_that_is_not_the_datasets_key_is_refused(workspace: Catalog) -> None:
    at = _upload(_page(), "changes.csv", b"order_id,plan,amount\n1000,enterprise,0.00\n")
    at.radio(key="import_mode").set_value("upsert").run(timeout=120)

    at.selectbox(key="import_key").select("plan").run(timeout=120)

    assert len(at.error) == 1
    assert "shop/orders is keyed by 'order_id'; upsert by that column" in at.error[0].value
    assert at.button(key="import_submit").disabled


def test_a_failed_submit_shows_the_message_and_keeps_the_page_usable(workspace: Catalog) -> None:
    same = b"order_id,plan,amount\n1000,free,0.00\n"  # order 1000 exactly as the table has it
    at = _upload(_page(), "same.csv", same)
    at.radio(key="import_mode").set_value("upsert").run(timeout=120)
    assert not at.error, texts(at.error)

    at.button(key="import_submit").click().run(timeout=600)

    assert not at.exception
    assert texts(at.error) == ["same.csv changes nothing: every row equals the table's"]
    assert [cr.title for cr in _open_requests(workspace)] == [REVIEW_TITLE]
    assert _kept(at).file_name == "same.csv"
    assert not at.button(key="import_submit").disabled
    assert "import_discard" in button_keys(at)


def test_people_outside_every_project_cannot_import(workspace: Catalog) -> None:
    at = _page("olga")

    assert texts(at.info) == [
        "You can import into the datasets of projects where you are an editor, and you are not one yet."
    ]
    assert not at.file_uploader


# ---------------------------------------------------------------- review


def test_review_shows_an_import_requests_schema_change(workspace: Catalog, seeded_cr: str) -> None:
    at = signed_in("abe", REVIEW_PAGE)
    at.selectbox(key="review_cr").select(seeded_cr).run(timeout=120)

    assert not at.exception
    queue = at.dataframe[0].value.set_index("id")
    assert queue.loc[seeded_cr, "kind"] == "import"
    assert REVIEW_TITLE in texts(at.subheader)
    assert "Schema change" in texts(at.subheader)
    assert "- :green-badge[add column] **email** (string)" in texts(at.markdown)
    assert has_text(at.caption, "Approving applies these changes to the table in the same MERGE commit as the rows")
    assert has_text(at.caption, f"**import** · `{seeded_cr}`")

    at.button(key="review_approve").click().run(timeout=120)

    assert "approve_confirm" in button_keys(at)
    assert has_text(at.markdown, "It also changes the table's schema: :green-badge[add column] **email** (string).")


def test_edit_requests_show_no_schema_section(workspace: Catalog, seeded_cr: str) -> None:
    edit_id = submit(workspace, "eve", "Pro for 1003", sessions.SetCell("1003", "plan", "pro"))
    at = signed_in("abe", REVIEW_PAGE)
    at.selectbox(key="review_cr").select(edit_id).run(timeout=120)

    assert at.dataframe[0].value.set_index("id").loc[edit_id, "kind"] == "edit"
    assert "Schema change" not in texts(at.subheader)
    assert not has_text(at.caption, "**import**")


# ---------------------------------------------------------------- view helpers


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (SchemaChange("email", "add", None, "string"), ":green-badge[add column] **email** (string)"),
        (SchemaChange("qty", "widen", "int", "bigint"), ":orange-badge[widen type] **qty**: int → bigint"),
    ],
)
def test_schema_change_lines(change: SchemaChange, line: str) -> None:
    assert schema_change_line(change) == line


@pytest.mark.parametrize(
    ("columns", "lines"),
    [
        (
            [ColumnPlan("id", "same", "bigint", "bigint"), ColumnPlan("n", "cast", "int", "bigint")],
            [":blue-badge[schema unchanged] every column of the file fits the table"],
        ),
        (
            [
                ColumnPlan("qty", "widen", "bigint", "int"),
                ColumnPlan("a", "new", "string", None),
                ColumnPlan("b", "new", "date", None),
                ColumnPlan("note", "absent", None, "string"),
            ],
            [
                ":green-badge[2 new columns] **a** (string), **b** (date)",
                ":orange-badge[1 widened type] **qty**: int → bigint",
                ":gray-badge[1 table column not in the file] **note**: "
                "left empty on new rows, unchanged on updated ones",
            ],
        ),
        (
            [ColumnPlan("amount", "incompatible", "string", "double")],
            [":red-badge[1 incompatible column] **amount** (double in the table, string in the file)"],
        ),
    ],
    ids=["unchanged", "changes", "incompatible"],
)
def test_schema_summary(columns: list[ColumnPlan], lines: list[str]) -> None:
    assert schema_summary(columns) == lines


def test_schema_frame_names_each_status() -> None:
    frame = schema_frame(
        [
            ColumnPlan("qty", "widen", "bigint", "int"),
            ColumnPlan("amount", "incompatible", "string", "double"),
            ColumnPlan("note", "absent", None, "string"),
        ]
    )
    assert frame.to_dict("records") == [
        {"column": "qty", "status": "widen type", "in the file": "bigint", "in the table": "int",
         "after import": "bigint"},
        {"column": "amount", "status": "incompatible", "in the file": "string", "in the table": "double",
         "after import": ""},
        {"column": "note", "status": "not in file", "in the file": "", "in the table": "string",
         "after import": "string"},
    ]  # fmt: skip
