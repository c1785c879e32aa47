"""History page: the timeline, any version's rows, diffs between versions, restore (admins only), download."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from app import history_views
from core import auth, datasets, history, maintenance, merge, sessions
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from tests.diff_support import diff_rows, html_bodies
from tests.page_support import (
    PASSWORD,
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

HISTORY_PAGE = "../pages/history.py"


def seed_history(folder: Path) -> dict[str, str]:
    """``seed_workspace`` plus ``ada``, admin of shop, and two merged requests (versions 1 and 2).

    * version 1, ``platinum``: erin sets order 1000's plan to "platinum", abe approves;
    * version 2, ``refund``: eve sets order 1002's amount to 99.00, ann approves.
    """
    seed_workspace(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_DATA_ROOT", str(folder / "delta"))
        mp.setenv("OREO_DATABASE_URL", f"sqlite:///{folder / 'catalog.db'}")
        get_settings.cache_clear()
        reset_catalogs()
        catalog = open_catalog()
        auth.create_user(catalog, "ada", password=PASSWORD, display_name="Ada")
        auth.add_member(catalog, "shop", "ada", "admin")
        ids = {"platinum": submit(catalog, "erin", "Platinum for 1000", sessions.SetCell("1000", "plan", "platinum"))}
        merge.approve_change_request(catalog, ids["platinum"], actor=user(catalog, "abe"))
        ids["refund"] = submit(catalog, "eve", "Refund 1002", sessions.SetCell("1002", "amount", "99.00"))
        merge.approve_change_request(catalog, ids["refund"], actor=user(catalog, "ann"))
        reset_catalogs()
    get_settings.cache_clear()
    return ids


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("pages-history")
    return folder, seed_history(folder)


@pytest.fixture
def ids(seeded: tuple[Path, dict[str, str]]) -> dict[str, str]:
    return seeded[1]


@pytest.fixture
def workspace(seeded: tuple[Path, dict[str, str]], data_root: Path) -> Catalog:
    return copy_workspace(seeded[0], data_root)


def _history(username: str, section: str | None = None) -> AppTest:
    at = signed_in(username, HISTORY_PAGE)
    assert texts(at.title) == ["History"]
    if section is not None:
        at.segmented_control(key="history_section").set_value(section).run(timeout=300)
    assert not at.exception, at.exception
    assert not at.error, texts(at.error)
    return at


# AppTest does not report a dataframe's key: each table is told apart by a column of its own.
TABLE_COLUMNS = {"history_timeline": "restorable", "history_preview": "amount", "history_diff_table": "change"}


def _frame(at: AppTest, key: str):  # type: ignore[no-untyped-def]
    return next(d for d in at.dataframe if TABLE_COLUMNS[key] in d.value.columns).value


def _preview(at: AppTest, version: int, order_id: str):  # type: ignore[no-untyped-def]
    """The Version view's rows of one order at ``version`` (filtered on the server)."""
    at.selectbox(key="history_version").select(version).run(timeout=300)
    at.selectbox(key="history_filter_col").select("order_id").run(timeout=300)
    at.text_input(key="history_filter_value").input(order_id).run(timeout=300)
    assert not at.exception and not at.error, texts(at.error)
    return _frame(at, "history_preview")


def test_timeline_lists_every_version_with_actor_and_request(workspace: Catalog, ids: dict[str, str]) -> None:
    at = _history("erin")

    timeline = _frame(at, "history_timeline")
    assert list(timeline["version"]) == [2, 1, 0]
    merged = timeline.set_index("version")
    assert merged.loc[1, "actor"] == "abe"  # a merge is committed by its approver
    assert merged.loc[1, "change request"] == ids["platinum"]
    assert merged.loc[1, "title"] == "Platinum for 1000"
    assert merged.loc[1, "updated"] == 1
    assert merged.loc[2, "actor"] == "ann"
    assert merged.loc[2, "change request"] == ids["refund"]
    assert merged.loc[0, "change request"] == ""
    assert list(merged["restorable"]) == ["no: the current version", "yes", "yes"]
    assert has_text(at.caption, "`shop/orders` is at version 2 · 3 version(s) in its history")
    chart = at.get("vega_lite_chart")
    assert len(chart) == 1
    spec = json.loads(chart[0].proto.spec)
    assert spec["mark"] in ("bar", {"type": "bar"})
    assert spec["encoding"]["color"]["field"] == "kind"
    assert spec["encoding"]["x"]["type"] == "temporal"
    assert list(merged["kind"]) == ["change request", "change request", "create"]


def test_selecting_a_version_opens_its_change_request(workspace: Catalog, ids: dict[str, str]) -> None:
    at = _history("erin")
    # What the grid sends when the user ticks the row of version 1 (the second row).
    at.session_state["history_timeline"] = {"selection": {"rows": [1], "columns": [], "cells": []}}
    at.run(timeout=300)

    assert not at.exception, at.exception
    assert has_text(at.markdown, f"**Platinum for 1000** · `{ids['platinum']}` · merged")
    assert has_text(at.caption, "edit by **erin**")
    assert has_text(at.caption, "approved by **abe** · merged as v1")
    rows = [r for body in html_bodies(at) for r in diff_rows(body)]
    assert [(r["row_id"], r["kind"], r["cells"]["plan"]) for r in rows] == [("1000", "update", ("free", "platinum"))]

    at.session_state["history_timeline"] = {"selection": {"rows": [2], "columns": [], "cells": []}}
    at.run(timeout=300)
    assert has_text(at.caption, "was not made by a change request")
    assert not has_text(at.markdown, "**Platinum for 1000**")


def test_preview_shows_a_version_as_it_was(workspace: Catalog) -> None:
    at = _history("erin", "Version")

    assert at.selectbox(key="history_version").value == 2
    old = _preview(at, 0, "1000")
    assert list(old["plan"]) == ["free"]
    assert has_text(at.caption, "Rows **1–1** of **1** · as of version 0 (read-only)")
    newer = _preview(at, 1, "1000")
    assert list(newer["plan"]) == ["platinum"]
    # Unfiltered, a version shows all its rows, paged.
    at.selectbox(key="history_filter_col").select("(no filter)").run(timeout=300)
    assert has_text(at.caption, "Rows **1–50** of **120** · as of version 1 (read-only)")
    assert len(_frame(at, "history_preview")) == 50
    assert "history_download" in [b.key for b in at.download_button]


def test_compare_shows_the_cell_level_diff(workspace: Catalog) -> None:
    at = _history("erin", "Compare")

    assert (at.selectbox(key="history_from").value, at.selectbox(key="history_to").value) == (1, 2)
    at.selectbox(key="history_from").select(0).run(timeout=300)
    assert not at.exception and not at.error, texts(at.error)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"Rows inserted": "0", "Rows updated": "2", "Rows deleted": "0"}
    rows = [r for body in html_bodies(at) for r in diff_rows(body)]
    # Identifying columns (the key, the first text column), then the changed cells; numbers as the grid shows them.
    assert [(r["row_id"], r["kind"], r["cells"]) for r in rows] == [
        ("1000", "update", {"order_id": "1000", "plan": ("free", "platinum"), "amount": ""}),
        ("1002", "update", {"order_id": "1002", "plan": "enterprise", "amount": ("3", "99")}),
    ]


@pytest.mark.parametrize("username", ["erin", "abe"])
def test_editors_and_approvers_get_no_restore(workspace: Catalog, username: str) -> None:
    at = _history(username, "Version")
    at.selectbox(key="history_version").select(0).run(timeout=300)

    assert "history_restore" not in button_keys(at)
    assert "restore_confirm" not in button_keys(at)
    # Reading and downloading stay open to them.
    assert "history_download" in [b.key for b in at.download_button]


def test_restore_is_disabled_for_the_current_version(workspace: Catalog) -> None:
    at = _history("ada", "Version")

    assert at.selectbox(key="history_version").value == 2
    assert at.button(key="history_restore").disabled
    assert has_text(at.caption, "Version 2 is the current version.")
    at.selectbox(key="history_version").select(1).run(timeout=300)
    assert not at.button(key="history_restore").disabled


def test_vacuumed_versions_are_greyed_and_never_offered_for_restore(workspace: Catalog) -> None:
    ada = user(workspace, "ada")
    maintenance.maintain(workspace, "shop", "orders", actor=ada, vacuum=True, retain_hours=0, force=True)
    # Which versions lost files depends on how the merges wrote them (deletion vectors or rewrites).
    gone = [
        v.version
        for v in history.table_history(workspace, "shop", "orders", actor=ada).versions
        if (v.not_restorable_reason or "").startswith(history.VACUUMED)
    ]
    assert gone, "VACUUM RETAIN 0 HOURS should have made an older version unrestorable"
    at = _history("ada")

    timeline = _frame(at, "history_timeline").set_index("version")
    for number in gone:
        assert str(timeline.loc[number, "restorable"]).startswith("no: its data files were vacuumed")

    at.segmented_control(key="history_section").set_value("Version").run(timeout=300)
    at.selectbox(key="history_version").select(gone[0]).run(timeout=300)
    assert not at.exception, at.exception
    assert at.button(key="history_restore").disabled
    assert has_text(at.caption, f"Version {gone[0]} cannot be restored: its data files were vacuumed")
    assert has_text(at.warning, f"Version {gone[0]} can no longer be read: its data files were vacuumed")
    assert at.download_button(key="history_download").disabled
    # Even a restore dialog left asked for (a stale session) is not opened for it.
    at.session_state["oreo_dialog_restore"] = gone[0]
    at.run(timeout=300)
    assert not at.exception, at.exception
    assert "restore_confirm" not in button_keys(at)


def test_restore_asks_for_a_reason_then_restores(workspace: Catalog) -> None:
    at = _history("ada", "Version")
    at.selectbox(key="history_version").select(0).run(timeout=300)

    at.button(key="history_restore").click().run(timeout=300)
    assert "restore_confirm" in button_keys(at)
    # The dialog says what the restore changes, from the current version back to version 0.
    assert has_text(at.markdown, "**0** row(s) inserted, **2** updated and **0** deleted")
    at.button(key="restore_confirm").click().run(timeout=300)
    assert has_text(at.error, "A reason is required to restore a version")
    assert datasets.get_dataset(workspace, "shop", "orders", actor=user(workspace, "ada")).version == 2

    at.text_input(key="restore_reason").input("The platinum plan was a mistake.")
    at.button(key="restore_confirm").click().run(timeout=900)

    assert not at.exception, at.exception
    assert not at.error, texts(at.error)
    assert has_text(at.success, "Restored `shop/orders` to version 0 as version 3.")
    assert "restore_confirm" not in button_keys(at)
    ada = user(workspace, "ada")
    assert datasets.get_dataset(workspace, "shop", "orders", actor=ada).version == 3
    rows = history.preview_version(workspace, "shop", "orders", 3, actor=ada, limit=200).rows.set_index("row_id")
    assert rows.loc["1000", "plan"] == "free"
    assert rows.loc["1002", "amount"] == 3.0
    newest = history.table_history(workspace, "shop", "orders", actor=ada, limit=1).versions[0]
    assert (newest.version, newest.actor, newest.reason) == (3, "ada", "The platinum plan was a mistake.")
    # The page now lists the new version.
    assert at.selectbox(key="history_version").options[0].startswith("v3 · ")
    # The timeline says what the restore was: its target, its reason and the rows it moved.
    at.segmented_control(key="history_section").set_value("Timeline").run(timeout=300)
    restored = _frame(at, "history_timeline").set_index("version").loc[3]
    assert (restored["kind"], restored["actor"]) == ("restore", "ada")
    details = str(restored["details"])
    assert details.startswith("restored to v0 · reason: The platinum plan was a mistake. · ")
    assert newest.metrics["rows_added"] >= 2 and "row(s) brought back" in details and "files: " in details


def test_maintenance_versions_are_hidden_until_asked_for(workspace: Catalog) -> None:
    ada = user(workspace, "ada")
    maintenance.maintain(workspace, "shop", "orders", actor=ada, optimize=True, zorder=["plan"])
    made = [v for v in history.table_history(workspace, "shop", "orders", actor=ada).versions if v.version > 2]
    assert made and {v.kind for v in made} == {"maintenance"} and "OPTIMIZE" in {v.operation for v in made}
    at = _history("ada")
    # Hidden by default, maintenance pushes no data change off the page.
    assert list(_frame(at, "history_timeline")["version"]) == [2, 1, 0]
    assert has_text(at.caption, f"{len(made)} maintenance version(s) hidden"), texts(at.caption)
    at.toggle(key="history_hide_maintenance").set_value(False).run(timeout=300)
    timeline = _frame(at, "history_timeline").set_index("version")
    assert list(timeline.index) == [*(v.version for v in made), 2, 1, 0]
    optimize = next(v.version for v in made if v.operation == "OPTIMIZE")
    assert timeline.loc[optimize, "kind"] == "maintenance"
    assert timeline.loc[optimize, "details"] == "maintenance (optimize): no row changed"


def test_a_version_picked_in_the_timeline_carries_over(workspace: Catalog) -> None:
    at = _history("ada")
    at.session_state["history_timeline"] = {"selection": {"rows": [1], "columns": [], "cells": []}}  # version 1
    at.run(timeout=300)
    at.segmented_control(key="history_section").set_value("Version").run(timeout=300)
    assert at.selectbox(key="history_version").value == 1
    assert at.button(key="history_restore").label == "Restore to v1"
    at.segmented_control(key="history_section").set_value("Compare").run(timeout=300)
    assert (at.selectbox(key="history_from").value, at.selectbox(key="history_to").value) == (0, 1)


def test_export_bytes_hold_the_chosen_version(workspace: Catalog, tmp_path: Path) -> None:
    from app.history_views import export_bytes

    ada = user(workspace, "ada")
    data = export_bytes(
        lambda out: history.export_version(workspace, "shop", "orders", out, actor=ada, version=0), "orders-v0.csv"
    )
    text = data.decode()
    assert "order_id" in text.splitlines()[0]
    assert any(line.startswith("1000,") or ",1000," in line for line in text.splitlines()[1:])
    assert "platinum" not in text


def test_a_session_on_another_page_is_not_touched(workspace: Catalog) -> None:
    """Opening History as an editor with pending edits reads main, not the session overlay."""
    erin = user(workspace, "erin")
    session = sessions.open_session(workspace, "shop", "orders", actor=erin)
    sessions.apply_edits(workspace, session.session_id, [sessions.SetCell("1001", "plan", "gold")], actor=erin)
    at = _history("erin", "Version")
    rows = _preview(at, 2, "1001")
    assert list(rows["plan"]) == ["pro"]


def _chart(at: AppTest) -> tuple[dict[str, Any], pd.DataFrame]:
    """The Activity chart's spec and the rows it draws."""
    [chart] = at.get("vega_lite_chart")
    rows = pa.ipc.open_stream(chart.proto.datasets[0].data.data).read_all().to_pandas()
    return json.loads(chart.proto.spec), rows


def test_the_activity_chart_shows_what_the_timeline_shows_on_an_axis_that_fits(workspace: Catalog) -> None:
    ada = user(workspace, "ada")
    maintenance.maintain(workspace, "shop", "orders", actor=ada, optimize=True, zorder=["plan"])
    made = [v for v in history.table_history(workspace, "shop", "orders", actor=ada).versions if v.version > 2]
    at = _history("ada")

    spec, rows = _chart(at)
    assert int(rows["commits"].sum()) == 3 and "maintenance" not in set(rows["kind"])  # hidden, not counted
    first, last = (pd.Timestamp(day) for day in spec["encoding"]["x"]["scale"]["domain"])
    assert last - first <= pd.Timedelta(days=3)  # every version was made today: not two weeks of empty axis
    # The timeline says what each commit did in words; Delta's name for it stays beside them.
    timeline = _frame(at, "history_timeline").set_index("version")
    assert timeline.loc[0, "what happened"] == "table created from the uploaded file"
    assert timeline.loc[1, "what happened"] == "changes merged" and timeline.loc[1, "operation"] == "MERGE"

    at.toggle(key="history_hide_maintenance").set_value(False).run(timeout=300)
    _, rows = _chart(at)
    assert int(rows["commits"].sum()) == 3 + len(made)


@pytest.mark.parametrize(
    ("operation", "words"),
    [
        ("SET TBLPROPERTIES", "table settings changed (no row changed)"),
        ("OPTIMIZE", "files compacted (no row changed)"),
        ("RESTORE", "table restored to an earlier version"),
        ("CREATE OR REPLACE TABLE AS SELECT", "table replaced by an import"),
        ("SOMETHING NEW", "something new"),
    ],
)
def test_delta_operation_names_read_in_words(operation: str, words: str) -> None:
    assert history_views.operation_words(operation) == words


def test_a_filter_that_matches_nothing_says_no_rows(workspace: Catalog) -> None:
    at = _history("erin", "Version")
    assert _preview(at, 1, "no-such-order").empty
    assert has_text(at.caption, "No rows · as of version 1 (read-only)"), texts(at.caption)
    assert not has_text(at.caption, "0–0")
