"""Stage hooks and stage timings of a change request's submit and approval."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import update

from cli import context
from core import change_requests as crs
from core import merge, reads, sessions
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, ChangeRequestRow, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, layout_for
from core.projects import create_project
from core.sessions import SetCell
from tests.merge_support import fresh_copy, switch
from tests.test_cli import run

pytestmark = pytest.mark.spark


# A row of every scalar type, to check the staged rows carry the base values exactly.
TYPED = pa.table(
    {
        "id": pa.array([1, 2], pa.int64()),
        "i8": pa.array([-7, None], pa.int8()),
        "i16": pa.array([300, 1], pa.int16()),
        "f32": pa.array([1.25, None], pa.float32()),
        "f64": pa.array([0.1, 2.5], pa.float64()),
        "dec": pa.array([Decimal("12345678.1234567891"), None], pa.decimal128(38, 10)),
        "flag": pa.array([True, None], pa.bool_()),
        "day": pa.array([dt.date(1999, 12, 31), None], pa.date32()),
        "at": pa.array([dt.datetime(2024, 3, 1, 10, 30, 0, 123456, tzinfo=dt.UTC), None], pa.timestamp("us", "UTC")),
        "local": pa.array([dt.datetime(2024, 3, 1, 10, 30, 0, 654321), None], pa.timestamp("us")),
        "txt": pa.array(["a 'quote'", None], pa.string()),
    }
)


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("stages")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    source = base / "people.csv"
    source.write_text("id,name,age\n" + "".join(f"{i},name {i},{20 + i}\n" for i in range(1, 6)))
    with pytest.MonkeyPatch.context() as mp:
        switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER)):
            create_user(catalog, name, password=f"{name}-password-1")
            add_member(catalog, "demo", name, role)
        create_dataset(catalog, "demo", "people", source, key="id")
        pq.write_table(TYPED, base / "typed.parquet")
        create_dataset(catalog, "demo", "typed", base / "typed.parquet", key="id")
        reset_catalogs()
    get_settings.cache_clear()
    return base


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    context.state.json = False
    yield open_catalog()


def _submit(catalog: Catalog, heard: list[str]) -> crs.ChangeRequest:
    ed = get_user(catalog, "ed")
    session = sessions.open_session(catalog, "demo", "people", actor=ed)
    sessions.apply_edits(catalog, session.session_id, [SetCell("2", "age", "77")], actor=ed)
    return crs.submit_change_request(catalog, session.session_id, actor=ed, stage=heard.append)


def test_submit_and_approve_announce_and_record_their_stages(catalog: Catalog) -> None:
    heard: list[str] = []
    cr = _submit(catalog, heard)
    assert heard == ["staging", "checks"]
    assert [(t.action, t.stage) for t in cr.stages] == [("submit", "staging"), ("submit", "checks")]
    assert all(t.seconds > 0 for t in cr.stages)
    # Stored in the catalog, not only on the returned record.
    assert crs.get_change_request(catalog, cr.id, actor=get_user(catalog, "al")).stages == cr.stages

    heard.clear()
    steps: list[str] = []
    merged = merge.approve_change_request(
        catalog, cr.id, actor=get_user(catalog, "al"), stage=heard.append, progress=lambda f, m: steps.append(m)
    )
    assert heard == ["conflicts", "checks", "merge", "sync"]
    assert steps and steps[-1] == "Merged as version 1"  # progress still reported alongside
    expected = [("submit", "staging"), ("submit", "checks")] + [("approve", s) for s in heard]
    assert [(t.action, t.stage) for t in merged.stages] == expected
    assert merged.stages[:2] == cr.stages
    assert crs.get_change_request(catalog, cr.id, actor=get_user(catalog, "al")).stages == merged.stages


def test_a_request_without_recorded_stages_reads_as_none(catalog: Catalog) -> None:
    cr = _submit(catalog, [])
    with catalog.session() as s:  # as a request stored before stage timings existed
        s.execute(update(ChangeRequestRow).where(ChangeRequestRow.id == cr.id).values(stages=None))
    assert crs.get_change_request(catalog, cr.id, actor=get_user(catalog, "ed")).stages == []


def test_cr_show_prints_the_stages(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    cr = _submit(catalog, [])
    shown = run(capsys, "--json", "cr", "show", cr.id, "--as", "ed")
    assert shown.code == 0, shown.err
    stages = shown.json()["stages"]
    assert [(s["action"], s["stage"]) for s in stages] == [("submit", "staging"), ("submit", "checks")]
    assert all(isinstance(s["seconds"], float) and s["seconds"] > 0 for s in stages)
    text = run(capsys, "cr", "show", cr.id, "--as", "ed")
    assert text.code == 0, text.err
    line = next(x for x in text.out.splitlines() if x.strip().startswith("stages:"))
    assert "submit staging" in line and "submit checks" in line


def test_staged_rows_carry_every_base_value_exactly(catalog: Catalog) -> None:
    """Submit reads the edited rows of main outside Spark; every type must reach staging unchanged."""
    ed = get_user(catalog, "ed")
    session = sessions.open_session(catalog, "demo", "typed", actor=ed)
    sessions.apply_edits(
        catalog,
        session.session_id,
        [SetCell("1", "txt", "b"), SetCell("2", "i16", "2"), sessions.DeleteRow("2")],
        actor=ed,
    )
    cr = crs.submit_change_request(catalog, session.session_id, actor=ed)
    assert cr.validation_status == "passed"
    layout = layout_for("demo", "typed")
    columns = [c for c in TYPED.column_names]
    select = ", ".join(reads.quote_ident(c) for c in ["row_id", *columns])
    staged = (
        reads.cursor()
        .execute(f"SELECT {select}, _op, _changed FROM delta_scan(?) ORDER BY row_id", [str(layout.staging(cr.id))])
        .fetchall()
    )
    main = reads.cursor().execute(f"SELECT {select} FROM delta_scan(?) ORDER BY row_id", [str(layout.main)]).fetchall()
    txt = 1 + columns.index("txt")
    assert staged[0][: len(main[0])] == (*main[0][:txt], "b", *main[0][txt + 1 :])
    assert staged[0][-2:] == ("update", ["txt"])
    assert staged[1][: len(main[1])] == main[1] and staged[1][-2:] == ("delete", [])
    page = crs.diff_change_request(catalog, cr.id, actor=ed)
    assert [(c.row_id, c.change, c.column) for c in page.changes] == [("1", "update", "txt"), ("2", "delete", None)]


def _status_script() -> None:
    """An approval's status redrawn in one slot, running then failed, as ``follow_approval`` does."""
    import dataclasses
    import time

    import streamlit as st

    from app.approval_views import approval_status
    from app.background import Approval, StageRun

    now = time.monotonic()
    running = Approval(
        cr_id="cr_1", project_id="p", dataset_id="d", title="t", approver="al", started=now - 4,
        stages=(StageRun("conflicts", now - 4, 0.1), StageRun("merge", now - 3)), fraction=0.5, message="merge",
    )  # fmt: skip
    failed = dataclasses.replace(
        running,
        stages=(StageRun("conflicts", now - 4, 0.1), StageRun("merge", now - 3, 3.0)),
        outcome="failed",
        error="busy",
        finished=now,
    )
    slot = st.empty()
    with slot.container():
        approval_status(running)
    with slot.container():
        approval_status(failed)


def test_an_approval_status_redrawn_in_place_shows_only_its_final_stages() -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_status_script).run(timeout=60)
    assert not at.exception
    [box] = at.status
    assert box.label.startswith("Not merged after")
    lines = [m.value for m in box.markdown]
    assert len(lines) == 1, lines  # the running stage list is gone, not left below the final one
    assert "merge" in lines[0] and "sync" not in lines[0]
