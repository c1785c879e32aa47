"""Change requests: Spark-written staging tables, the state machine, withdraw and reject."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from core import change_requests as crs
from core import reads, sessions
from core.auth import Role, add_member, create_user, get_user
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, layout_for
from core.errors import ConflictError, InvalidInput, NotFound, PermissionDenied
from core.projects import create_project
from core.sessions import AddRow, DeleteRow, SetCell

pytestmark = pytest.mark.spark


def _switch(env: dict[str, str], mp: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        mp.setenv(name, value)
    get_settings.cache_clear()
    reset_catalogs()


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("crs")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    source = base / "people.csv"
    source.write_text(
        "id,name,age,joined\n" + "".join(f"{i},name {i},{20 + i},2024-01-{i:02d}\n" for i in range(1, 11))
    )
    with pytest.MonkeyPatch.context() as mp:
        _switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name, role in (("ed", Role.EDITOR), ("al", Role.APPROVER)):
            create_user(catalog, name, password=f"{name}-password-1")
            add_member(catalog, "demo", name, role)
        create_dataset(catalog, "demo", "people", source, key="id")
        reset_catalogs()
    get_settings.cache_clear()
    return env


@pytest.fixture
def catalog(env: dict[str, str], data_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    _switch(env, monkeypatch)
    yield open_catalog()


def _submit(catalog: Catalog, ops: list[sessions.EditOp]) -> crs.ChangeRequest:
    ed = get_user(catalog, "ed")
    session = sessions.open_session(catalog, "demo", "people", actor=ed)
    sessions.apply_edits(catalog, session.session_id, ops, actor=ed)
    return crs.submit_change_request(catalog, session.session_id, actor=ed, title="Fix people")


def test_submit_writes_one_staging_table_with_rows_as_they_will_be(catalog: Catalog, spark) -> None:  # type: ignore[no-untyped-def]
    cr = _submit(
        catalog,
        [SetCell("2", "age", "99"), SetCell("2", "name", "Two"), DeleteRow("3"), AddRow({"id": 50, "name": "new"})],
    )
    assert (cr.state, cr.author, cr.base_version, cr.rows, cr.cells) == (crs.CRState.OPEN, "ed", 0, 3, 4)
    staging = layout_for("demo", "people").staging(cr.id)
    assert (staging / "_delta_log").is_dir()
    history = spark.sql(f"DESCRIBE HISTORY delta.`{staging}`").collect()
    assert '"cr_id": "' + cr.id + '"' in history[0]["userMetadata"]
    rows = {r["row_id"]: r for r in reads.read_page(staging, limit=100).rows.to_dict("records")}
    assert set(rows) == {"2", "3", "50"}
    assert (rows["2"]["age"], rows["2"]["name"], rows["2"]["_op"], sorted(rows["2"]["_changed"])) == (
        99,
        "Two",
        "update",
        ["age", "name"],
    )
    assert str(rows["2"]["joined"]) == "2024-01-02"  # unchanged cells keep their base value
    assert (rows["3"]["_op"], list(rows["3"]["_changed"]), rows["3"]["name"]) == ("delete", [], "name 3")
    assert (rows["50"]["_op"], rows["50"]["id"], rows["50"]["name"]) == ("insert", 50, "new")
    assert pd.isna(rows["50"]["age"])
    # The session is frozen; new edits go to a new session.
    ed = get_user(catalog, "ed")
    with pytest.raises(ConflictError, match="was submitted"):
        sessions.apply_edits(catalog, cr.session_id or "", [SetCell("4", "age", "1")], actor=ed)
    assert sessions.open_session(catalog, "demo", "people", actor=ed).session_id != cr.session_id


def test_empty_session_cannot_be_submitted(catalog: Catalog) -> None:
    ed = get_user(catalog, "ed")
    session = sessions.open_session(catalog, "demo", "people", actor=ed)
    staging_root = layout_for("demo", "people").staging_root
    before = (sorted(p.name for p in staging_root.iterdir()), crs.list_change_requests(catalog, actor=ed))
    with pytest.raises(InvalidInput, match="has no edits to submit"):
        crs.submit_change_request(catalog, session.session_id, actor=ed)
    assert (sorted(p.name for p in staging_root.iterdir()), crs.list_change_requests(catalog, actor=ed)) == before


def test_withdraw_and_reject_delete_staging_and_close_for_good(catalog: Catalog) -> None:
    ed, al = get_user(catalog, "ed"), get_user(catalog, "al")
    first = _submit(catalog, [SetCell("5", "age", "1")])
    staging = layout_for("demo", "people").staging(first.id)
    with pytest.raises(PermissionDenied, match="only the author"):
        crs.withdraw_change_request(catalog, first.id, actor=al)
    done = crs.withdraw_change_request(catalog, first.id, actor=ed)
    assert done.state == crs.CRState.WITHDRAWN and not staging.exists()
    with pytest.raises(ConflictError, match="is withdrawn; it cannot become rejected"):
        crs.reject_change_request(catalog, first.id, actor=al, reason="late")

    second = _submit(catalog, [SetCell("6", "age", "2")])
    with pytest.raises(PermissionDenied, match="needs the approver role"):
        crs.reject_change_request(catalog, second.id, actor=ed, reason="mine")
    with pytest.raises(InvalidInput, match="a reason is required"):
        crs.reject_change_request(catalog, second.id, actor=al, reason="  ")
    rejected = crs.reject_change_request(catalog, second.id, actor=al, reason="ages are wrong")
    assert (rejected.state, rejected.closed_by, rejected.close_reason) == (crs.CRState.REJECTED, "al", "ages are wrong")
    assert [c.body for c in crs.comments(catalog, second.id, actor=ed)] == ["ages are wrong"]
    assert not layout_for("demo", "people").staging(second.id).exists()
    # main is untouched by both.
    assert reads.read_page(Path(layout_for("demo", "people").main), filters=[reads.RowFilter("id", "5")]).rows[
        "age"
    ].tolist() == [25]


def test_unknown_change_request(catalog: Catalog) -> None:
    with pytest.raises(NotFound, match="unknown change request"):
        crs.get_change_request(catalog, "cr_nope", actor=get_user(catalog, "ed"))


def test_a_request_of_only_deletes_stages_the_rows(catalog: Catalog) -> None:
    cr = _submit(catalog, [DeleteRow("7"), DeleteRow("8")])
    staged = reads.read_page(layout_for("demo", "people").staging(cr.id), order_by="row_id", limit=10).rows
    assert list(staged["row_id"]) == ["7", "8"] and set(staged["_op"]) == {"delete"}
    assert (cr.rows, cr.cells) == (2, 0)
