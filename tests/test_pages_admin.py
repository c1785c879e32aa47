"""Admin page: listed and shown to admins only; table stats, maintenance runs with their report, cleanup."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from core import auth, maintenance, sessions, sla
from core.catalog import Catalog, ChangeRequestRow, open_catalog, reset_catalogs
from core.config import get_settings
from tests.page_support import (
    PASSWORD,
    button_keys,
    copy_workspace,
    edit,
    has_text,
    pending,
    seed_workspace,
    signed_in,
    submit,
    texts,
    user,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP_DIR = Path(__file__).resolve().parent.parent
ADMIN_PAGE = "../pages/admin.py"
HISTORY_PAGE = "../pages/history.py"


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``seed_workspace`` plus ``ada``, admin of shop."""
    folder = seed_workspace(tmp_path_factory.mktemp("pages-admin"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DELTA_DATA_ROOT", str(folder / "delta"))
        mp.setenv("OREO_DATABASE_URL", f"sqlite:///{folder / 'catalog.db'}")
        get_settings.cache_clear()
        reset_catalogs()
        catalog = open_catalog()
        auth.create_user(catalog, "ada", password=PASSWORD, display_name="Ada")
        auth.add_member(catalog, "shop", "ada", "admin")
        reset_catalogs()
    get_settings.cache_clear()
    return folder


@pytest.fixture
def workspace(seeded: Path, data_root: Path) -> Catalog:
    return copy_workspace(seeded, data_root)


def _admin() -> AppTest:
    at = signed_in("ada", ADMIN_PAGE)
    assert texts(at.title) == ["Admin"]
    assert not at.error, texts(at.error)
    return at


@pytest.mark.parametrize(("username", "listed"), [("erin", False), ("abe", False), ("olga", False), ("ada", True)])
def test_admin_page_is_listed_for_admins_only(workspace: Catalog, username: str, listed: bool) -> None:
    at = signed_in(username)
    if listed:
        at.switch_page(ADMIN_PAGE).run(timeout=300)
        assert texts(at.title) == ["Admin"]
    else:
        with pytest.raises(ValueError, match="Known pages"):
            at.switch_page(ADMIN_PAGE)
    # History is there for everyone signed in.
    at.switch_page(HISTORY_PAGE).run(timeout=300)
    assert texts(at.title) == ["History"]


@pytest.mark.parametrize("username", ["erin", "abe", "olga"])
def test_the_page_itself_refuses_non_admins(workspace: Catalog, username: str) -> None:
    """Run as its own script, past the router, the page still refuses and shows nothing of the admin's."""
    at = AppTest.from_file(str(APP_DIR / "pages" / "admin.py"), default_timeout=300)
    at.session_state["oreo_username"] = username
    at.run(timeout=300)

    assert not at.exception, at.exception
    assert texts(at.error) == ["Admins only: table maintenance needs the admin role in a project."]
    assert not at.title
    assert not at.metric
    assert not button_keys(at)


def test_admin_sees_the_table_stats(workspace: Catalog) -> None:
    at = _admin()

    assert at.selectbox(key="admin_dataset").value == "shop/orders"
    metrics = {m.label: m.value for m in at.metric}
    assert set(metrics) == {"Files", "Size", "Small files", "Versions", "Last optimize", "Last vacuum"}
    assert int(metrics["Files"]) >= 1
    assert metrics["Versions"] == "1"
    assert metrics["Last optimize"] == "never"
    assert metrics["Last vacuum"] == "never"
    assert {"admin_optimize", "admin_vacuum", "admin_checkpoint", "admin_cleanup"} <= set(button_keys(at))


def test_optimize_runs_and_shows_its_report(workspace: Catalog) -> None:
    at = _admin()

    at.multiselect(key="admin_zorder").select("plan").run(timeout=300)
    at.button(key="admin_optimize").click().run(timeout=900)

    assert not at.exception, at.exception
    assert not at.error, texts(at.error)
    assert has_text(at.success, "OPTIMIZE shop/orders finished.")
    report = _report(at)
    assert set(report["step"]) <= {"retention", "optimize"} and "optimize" in set(report["step"])
    files = report[report["what"] == "files"].iloc[0]
    assert int(files["before"]) >= 1 and int(files["after"]) >= 1
    assert list(report.loc[report["what"] == "ZORDER BY", "after"]) == ["plan"]
    assert not any("/" in str(v) for v in report.to_numpy().ravel())  # no server paths
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Last optimize"] != "never"


def test_checkpoint_runs_and_shows_its_report(workspace: Catalog) -> None:
    at = _admin()

    at.button(key="admin_checkpoint").click().run(timeout=900)

    assert not at.exception, at.exception
    assert not at.error, texts(at.error)
    assert has_text(at.success, "Checkpoint shop/orders finished.")
    report = _report(at)
    assert list(report.loc[report["step"] == "checkpoint", "after"]) == ["written"]


def _report(at: AppTest) -> pd.DataFrame:
    """The last maintenance run's report table."""
    return next(d.value for d in at.dataframe if list(d.value.columns) == ["step", "what", "before", "after"])


def test_a_short_vacuum_is_refused_in_the_pages_words(workspace: Catalog) -> None:
    at = _admin()
    at.number_input(key="admin_retain").set_value(0.0).run(timeout=300)
    at.button(key="admin_vacuum").click().run(timeout=300)
    assert any("tick “Force a retention shorter than the safe horizon” to do it anyway" in t for t in texts(at.error))
    assert not any("--force" in t for t in texts(at.error))


def test_a_vacuum_dry_run_lists_files_and_bytes(workspace: Catalog) -> None:
    ada = user(workspace, "ada")
    maintenance.maintain(workspace, "shop", "orders", actor=ada, optimize=True, zorder=["plan"])
    at = _admin()
    at.number_input(key="admin_retain").set_value(0.0).run(timeout=300)
    at.button(key="admin_vacuum_dry_run").click().run(timeout=900)
    assert not at.exception and not at.error, texts(at.error)
    plan = maintenance.vacuum_dry_run(workspace, "shop", "orders", actor=ada, retain_hours=0)
    assert plan.files
    assert has_text(at.markdown, f"it would delete **{len(plan.files):,}** file(s)")
    listed = next(d.value for d in at.dataframe if list(d.value.columns) == ["file", "size"])
    assert sorted(listed["file"]) == sorted(f.path for f in plan.files)
    assert len(maintenance.vacuum_dry_run(workspace, "shop", "orders", actor=ada, retain_hours=0).files) == len(
        plan.files
    )  # the page's dry run deleted nothing


def test_forcing_a_short_vacuum_warns_what_stops_being_restorable(workspace: Catalog) -> None:
    at = _admin()
    assert not has_text(at.warning, "stop being restorable")

    at.checkbox(key="admin_force").check().run(timeout=300)
    at.number_input(key="admin_retain").set_value(0.0).run(timeout=300)

    assert has_text(at.warning, "Versions older than 0 hours stop being restorable")


def test_cleanup_dry_run_lists_without_removing(workspace: Catalog) -> None:
    edit(workspace, "erin", sessions.SetCell("1000", "plan", "pro"))
    at = _admin()

    assert at.toggle(key="admin_dry_run").value is True
    at.number_input(key="admin_ttl").set_value(0.0).run(timeout=300)
    at.button(key="admin_cleanup").click().run(timeout=300)

    assert not at.exception, at.exception
    assert not at.error, texts(at.error)
    assert has_text(at.markdown, "Would remove **1** session(s)")
    assert len(pending(workspace, "erin")) == 1  # a dry run leaves it

    at.toggle(key="admin_dry_run").set_value(False).run(timeout=300)
    at.button(key="admin_cleanup").click().run(timeout=300)
    assert has_text(at.markdown, "Removed **1** session(s)")
    assert pending(workspace, "erin") == []


def test_admin_sees_the_service_levels_of_the_last_24_hours(workspace: Catalog) -> None:
    """Seed 004's figures from the tallies and the catalog: each breach is named, the rest are ok."""
    for seconds in [0.2] * 18 + [7.0] * 2:  # 20 reads; the 19th is in the (5, 10] bucket: p95 = 7.5 s
        sla.record_read(seconds)
    sla.record_import(3000, 6.0)  # 500 rows/s
    sla.record_approval("merged")
    sla.record_approval("failed")
    old = submit(workspace, "erin", "Old request", sessions.SetCell("1000", "plan", "pro"))
    with workspace.session() as s:
        row = s.get(ChangeRequestRow, old)
        assert row is not None
        row.created_at = datetime.now(UTC) - timedelta(days=10)

    at = _admin()

    table = next(d.value for d in at.dataframe if "figure" in d.value.columns).set_index("figure")
    assert list(table.columns) == ["last 24 h", "target", "status", "detail"]
    shown = {name: (row["last 24 h"], row["status"]) for name, row in table.iterrows()}
    assert shown == {
        "Page read p95": ("7.50 s", "OVER TARGET"),
        "Import throughput": ("500 rows/s", "OVER TARGET"),
        "Approval failures": ("1", "OVER TARGET"),
        "Requests open > 7 days": ("1", "OVER TARGET"),
        "Days since VACUUM": ("0.0", "ok"),
        "Small-file ratio": ("0%", "ok"),
        "Engine": ("ready", "ok"),
    }
    assert table.loc["Approval failures", "detail"] == "of 2 approvals (1 merged)"
    assert table.loc["Days since VACUUM", "detail"] == "shop/orders, never vacuumed"
    assert table.loc["Requests open > 7 days", "detail"] == "the oldest for 10.0 days"
    assert has_text(
        at.warning, "Over target: Page read p95, Import throughput, Approval failures, Requests open > 7 days."
    )


def test_a_quiet_workspace_shows_no_data_rather_than_a_breach(workspace: Catalog) -> None:
    at = _admin()

    table = next(d.value for d in at.dataframe if "figure" in d.value.columns).set_index("figure")
    assert table.loc["Page read p95", "status"] == "not judged"
    assert table.loc["Import throughput", "last 24 h"] == "no imports"
    assert table.loc["Approval failures", "last 24 h"] == "0"
    assert not has_text(at.warning, "Over target")


def test_a_refused_vacuum_leaves_the_rest_of_the_page(workspace: Catalog) -> None:
    at = _admin()
    at.number_input(key="admin_retain").set_value(0.0).run(timeout=300)
    at.button(key="admin_vacuum").click().run(timeout=300)

    assert has_text(at.error, "to do it anyway")
    # The dry run beside it, the checkpoint box after it and the cleanup below are still there.
    assert {"admin_vacuum_dry_run", "admin_checkpoint", "admin_optimize", "admin_cleanup"} <= set(button_keys(at))
    assert [c for c in at.checkbox if c.key == "admin_force"]


def test_the_cleanup_report_is_a_table_without_server_paths(workspace: Catalog, data_root: Path) -> None:
    edit(workspace, "erin", sessions.SetCell("1000", "plan", "pro"))
    at = _admin()
    at.number_input(key="admin_ttl").set_value(0.0).run(timeout=300)
    at.button(key="admin_cleanup").click().run(timeout=300)

    table = next(d.value for d in at.dataframe if list(d.value.columns) == ["what", "dataset", "which", "why"])
    assert list(table["what"]) == ["editing session"] and list(table["dataset"]) == ["shop/orders"]
    assert not at.json
    assert not any(str(data_root) in str(v) for v in table.to_numpy().ravel())


def test_the_service_levels_speak_to_people_not_developers(workspace: Catalog) -> None:
    at = _admin()
    words = " ".join(texts(at.caption))
    assert "Service levels" in " ".join(texts(at.subheader))
    assert "Seed 004" not in words and ".yml" not in words
