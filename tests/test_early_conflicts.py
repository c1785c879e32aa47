"""Early conflicts: pending cells that main changed under a session, decided before review; others' pending cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import WARM_ENGINE_ENV, create_app
from cli import context
from cli import main as cli
from core import change_requests, conflicts, early_conflicts, merge, overlaps, presence, sessions, tokens
from core.catalog import Catalog, open_catalog
from core.errors import InvalidInput, PermissionDenied
from core.sessions import DeleteRow, SetCell
from tests import merge_support as ms

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return ms.make_pristine(tmp_path_factory.mktemp("early-pristine"))


@pytest.fixture
def catalog(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    ms.switch(ms.fresh_copy(pristine, tmp_path), monkeypatch)
    return open_catalog()


def _edit(catalog: Catalog, editor: str, ops: list[sessions.EditOp]) -> str:
    info, _count = sessions.save_edits(catalog, ms.PROJECT, ms.DATASET, ops, actor=ms.user(catalog, editor))
    return info.session_id


def _merge(catalog: Catalog, editor: str, ops: list[sessions.EditOp]) -> change_requests.ChangeRequest:
    cr = ms.submit(catalog, editor, ops)
    return merge.approve_change_request(catalog, cr.id, actor=ms.user(catalog, "al"))


def test_keep_mine_and_take_theirs_then_the_request_has_no_conflict_at_approval(catalog: Catalog) -> None:
    ed = ms.user(catalog, "ed")
    session = _edit(catalog, "ed", [SetCell("1", "name", "mine 1"), SetCell("2", "qty", "222"),
                                     SetCell("3", "name", "mine 3"), SetCell("4", "qty", "444")])  # fmt: skip
    assert early_conflicts.find_early_conflicts(catalog, session, actor=ed) == []
    merged = _merge(catalog, "ed2", [SetCell("1", "name", "theirs 1"), SetCell("2", "qty", "200"),
                                     SetCell("5", "name", "elsewhere")])  # fmt: skip
    moved = early_conflicts.main_moved(catalog, ms.PROJECT, ms.DATASET, 0, actor=ed, session_id=session)
    assert moved is not None
    assert (moved.version, moved.by, moved.title, moved.cr_id) == (1, "al", "ed2 edits", merged.id)
    assert (moved.touched, moved.conflicts) == (2, 2)
    assert moved.sentence() == (
        f"Version 1 of main landed: “ed2 edits” ({merged.id}), approved by al; it touched 2 of your pending cell(s)."
    )
    assert early_conflicts.main_moved(catalog, ms.PROJECT, ms.DATASET, 1, actor=ed, session_id=session) is None

    found = early_conflicts.find_early_conflicts(catalog, session, actor=ed)
    assert [(c.cell, c.reason, c.base, c.mine, c.now) for c in found] == [
        ("1.name", conflicts.ALSO_CHANGED, "name 1", "mine 1", "theirs 1"),
        ("2.qty", conflicts.ALSO_CHANGED, "20", "222", "200"),
    ]
    assert found[0].to_json()["choices"] == ["mine", "theirs"]

    with pytest.raises(InvalidInput, match=r"no early conflict on 3\.name; its conflicts: 1\.name, 2\.qty"):
        early_conflicts.resolve_early_conflict(catalog, session, "3", "name", "mine", actor=ed)
    with pytest.raises(InvalidInput, match="unknown choice 'both'"):
        early_conflicts.resolve_early_conflict(catalog, session, "1", "name", "both", actor=ed)  # type: ignore[arg-type]
    with pytest.raises(PermissionDenied, match="only its owner"):
        early_conflicts.resolve_early_conflict(catalog, session, "1", "name", "mine", actor=ms.user(catalog, "ed2"))

    first = early_conflicts.resolve_early_conflict(catalog, session, "1", "name", "mine", actor=ed)
    assert [c.cell for c in first.remaining] == ["2.qty"] and not first.rebased and first.base_version == 0
    last = early_conflicts.resolve_early_conflict(catalog, session, "2", "qty", "theirs", actor=ed)
    assert last.remaining == [] and last.rebased and last.base_version == 1
    info = sessions.get_session(catalog, session, actor=ed)
    assert info.base_version == 1
    edits = {(e.row_id, e.column): (e.old_value, e.new_value) for e in sessions.effective_edits(ms.layout(), session)}
    assert edits == {("1", "name"): ("theirs 1", "mine 1"), ("3", "name"): ("name 3", "mine 3"),
                     ("4", "qty"): ("40", "444")}  # fmt: skip

    cr = change_requests.submit_change_request(catalog, session, actor=ed, title="ed after deciding")
    assert cr.base_version == 1
    assert conflicts.find_conflicts(catalog, cr.id, actor=ed) == []
    merge.approve_change_request(catalog, cr.id, actor=ms.user(catalog, "al"))
    rows = ms.main_frame().set_index("row_id")
    assert rows.loc["1", "name"] == "mine 1" and rows.loc["2", "qty"] == 200 and rows.loc["5", "name"] == "elsewhere"
    assert rows.loc["4", "qty"] == 444


def test_row_conflicts_of_a_deleted_row(catalog: Catalog) -> None:
    ed = ms.user(catalog, "ed")
    session = _edit(catalog, "ed", [DeleteRow("6"), DeleteRow("7"), SetCell("8", "name", "mine 8")])
    _merge(catalog, "ed2", [SetCell("6", "qty", "606"), DeleteRow("8")])
    found = early_conflicts.find_early_conflicts(catalog, session, actor=ed)
    assert [(c.cell, c.reason, c.base, c.now, c.choices) for c in found] == [
        ("6.*", conflicts.ROW_CHANGED, "qty = 60", "qty = 606", ("mine", "theirs")),
        ("8.name", conflicts.ROW_DELETED, "name 8", None, ("mine", "theirs")),
    ]
    kept = early_conflicts.resolve_early_conflict(catalog, session, "6", "*", "mine", actor=ed)
    assert [c.cell for c in kept.remaining] == ["8.name"]  # the delete is pinned, the base is not moved yet
    assert json.loads((ms.layout().session_dir(session) / early_conflicts.PINS_FILE).read_text()) == {"pins": {"6": 1}}
    done = early_conflicts.resolve_early_conflict(catalog, session, "8", "name", "theirs", actor=ed)
    assert done.rebased and done.base_version == 1
    changes = {(e.row_id, e.change) for e in sessions.effective_edits(ms.layout(), session)}
    assert changes == {("6", "delete"), ("7", "delete")}
    cr = change_requests.submit_change_request(catalog, session, actor=ed)
    assert conflicts.find_conflicts(catalog, cr.id, actor=ed) == []


def test_keeping_mine_on_a_row_deleted_since_brings_it_back_as_the_session_has_it(catalog: Catalog) -> None:
    ed = ms.user(catalog, "ed")
    session = _edit(
        catalog, "ed", [SetCell("8", "name", "mine 8"), SetCell("8", "score", "8.5"), SetCell("3", "qty", "33")]
    )
    _merge(catalog, "ed2", [DeleteRow("8")])
    found = early_conflicts.find_early_conflicts(catalog, session, actor=ed)
    assert [(c.cell, c.reason, c.mine, c.choices) for c in found] == [
        ("8.name", conflicts.ROW_DELETED, "mine 8", ("mine", "theirs")),
        ("8.score", conflicts.ROW_DELETED, "8.5", ("mine", "theirs")),
    ]
    # One "keep mine" brings the whole row back, so both of its cells are decided.
    done = early_conflicts.resolve_early_conflict(catalog, session, "8", "score", "mine", actor=ed)
    assert done.remaining == [] and done.rebased and done.base_version == 1
    pending = {(e.row_id, e.column, e.new_value, e.change) for e in sessions.effective_edits(ms.layout(), session)}
    assert pending == {
        ("8", None, None, "insert"), ("8", "id", "8", "insert"), ("8", "name", "mine 8", "insert"),
        ("8", "qty", "80", "insert"), ("8", "score", "8.5", "insert"), ("3", "qty", "33", "update"),
    }  # fmt: skip
    cr = change_requests.submit_change_request(catalog, session, actor=ed)
    assert conflicts.find_conflicts(catalog, cr.id, actor=ed) == []
    merge.approve_change_request(catalog, cr.id, actor=ms.user(catalog, "al"))
    rows = ms.main_frame().set_index("row_id")
    assert (rows.loc["8", "id"], rows.loc["8", "name"], rows.loc["8", "qty"], rows.loc["8", "score"]) == (
        8,
        "mine 8",
        80,
        8.5,
    )
    assert rows.loc["3", "qty"] == 33 and len(rows) == 8


def test_taking_theirs_on_one_cell_of_a_deleted_row_leaves_that_cell_out_of_mine(catalog: Catalog) -> None:
    ed = ms.user(catalog, "ed")
    session = _edit(catalog, "ed", [SetCell("8", "name", "mine 8"), SetCell("8", "qty", "88")])
    _merge(catalog, "ed2", [DeleteRow("8")])
    left = early_conflicts.resolve_early_conflict(catalog, session, "8", "qty", "theirs", actor=ed)
    assert [c.cell for c in left.remaining] == ["8.name"]
    early_conflicts.resolve_early_conflict(catalog, session, "8", "name", "mine", actor=ed)
    values = {e.column: e.new_value for e in sessions.effective_edits(ms.layout(), session) if e.column}
    assert (values["name"], values["qty"]) == ("mine 8", "80")  # the row's base qty, not the dropped 88


def test_others_pending_cells_are_marked_without_their_values(catalog: Catalog) -> None:
    ed, ed2 = ms.user(catalog, "ed"), ms.user(catalog, "ed2")
    _edit(catalog, "ed2", [SetCell("1", "name", "secret draft"), DeleteRow("2")])
    found = overlaps.pending_elsewhere(catalog, ms.PROJECT, ms.DATASET, actor=ed)
    assert sorted((o.row_id, o.column, o.label) for o in found) == [("1", "name", "ed2 (session)"),
                                                                     ("2", None, "ed2 (session)")]  # fmt: skip
    assert "secret draft" not in json.dumps([o.to_json() for o in found])
    assert overlaps.pending_elsewhere(catalog, ms.PROJECT, ms.DATASET, actor=ed2) == []  # never one's own
    cells = [("1", "name"), ("1", "qty"), ("2", "qty")]
    assert overlaps.also_pending(catalog, ms.PROJECT, ms.DATASET, cells, actor=ed) == [
        "ed2 (session) also has a pending change to this cell (row 1, name); yours is saved too",
        "ed2 (session) also has a pending change to this cell (row 2, qty); yours is saved too",
    ]
    cr = ms.submit(catalog, "ed3", [SetCell("3", "qty", "33")])
    on_page = overlaps.pending_elsewhere(catalog, ms.PROJECT, ms.DATASET, actor=ed, row_ids=["3"])
    assert [(o.row_id, o.column, o.label) for o in on_page] == [("3", "qty", f"ed3 in request {cr.id}")]


def test_the_cli_and_the_api_list_and_decide_early_conflicts(
    catalog: Catalog, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _edit(catalog, "ed2", [SetCell("4", "name", "draft of ed2")])
    context.state.json = True
    assert cli.main(["--json", "edit", ms.PROJECT, ms.DATASET, "--as", "ed", "--set", "1", "name", "mine 1",
                     "--set", "2", "qty", "222", "--set", "4", "name", "mine 4"]) == 0  # fmt: skip
    saved = json.loads(capsys.readouterr().out)
    assert saved["also_pending"] == [
        "ed2 (session) also has a pending change to this cell (row 4, name); yours is saved too"
    ]
    session = saved["session_id"]
    _merge(catalog, "ed3", [SetCell("1", "name", "theirs 1"), SetCell("2", "qty", "200")])

    assert cli.main(["--json", "session", "conflicts", session, "--as", "ed"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["base_version"] == 0
    assert [(c["row_id"], c["column"], c["base"], c["mine"], c["now"]) for c in listed["conflicts"]] == [
        ("1", "name", "name 1", "mine 1", "theirs 1"), ("2", "qty", "20", "222", "200"),
    ]  # fmt: skip
    assert cli.main(["session", "resolve", session, "1", "name", "--as", "ed"]) == 2  # neither flag
    capsys.readouterr()
    assert cli.main(["--json", "session", "resolve", session, "1", "name", "--keep-mine", "--as", "ed"]) == 0
    assert json.loads(capsys.readouterr().out)["rebased"] is False
    assert cli.main(["session", "resolve", session, "9", "name", "--take-theirs", "--as", "ed"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no early conflict on 9.name; its conflicts: 2.qty" in err[0]
    context.state.json = False

    monkeypatch.setenv(WARM_ENGINE_ENV, "0")
    bearer = {"Authorization": f"Bearer {tokens.create_token(catalog, 'ed').secret}"}
    with TestClient(create_app(), headers=bearer) as api:
        left = api.get(f"/api/v1/sessions/{session}/conflicts")
        assert left.status_code == 200 and [c["column"] for c in left.json()["conflicts"]] == ["qty"]
        bad = api.post(f"/api/v1/sessions/{session}/conflicts/resolve", json={"row_id": "2", "choice": "both"})
        assert bad.status_code == 400 and "choice" in bad.text
        done = api.post(f"/api/v1/sessions/{session}/conflicts/resolve",
                        json={"row_id": "2", "column": "qty", "choice": "theirs"})  # fmt: skip
        assert done.status_code == 200, done.text
        assert done.json()["rebased"] is True and done.json()["base_version"] == 1
        marks = api.get(f"/api/v1/projects/{ms.PROJECT}/datasets/{ms.DATASET}/pending-elsewhere").json()
        assert [(c["row_id"], c["column"], c["username"], c["where"]) for c in marks["cells"]] == [
            ("4", "name", "ed2", "session")
        ]
        assert "draft of ed2" not in json.dumps(marks)
        beat = api.post(f"/api/v1/projects/{ms.PROJECT}/datasets/{ms.DATASET}/presence").json()
        assert beat["others"] == [] and beat["version"] == 1
    ed2 = ms.user(catalog, "ed2")
    others = presence.beat(catalog, presence.table_page(ms.PROJECT, ms.DATASET), actor=ed2).others
    assert [p.username for p in others] == ["ed"]
