"""Live-edit sessions: only changed cells stored in edits.delta, typed values, undo, TTL."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import deltalake
import pytest

from core import reads, sessions
from core.auth import Role, User, add_member, create_user, get_user
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, layout_for
from core.errors import ConflictError, InvalidInput, NotFound, OutOfSpace, PermissionDenied
from core.projects import create_project
from core.sessions import AddRow, DeleteRow, SetCell, UndoCell

pytestmark = pytest.mark.spark


@dataclass(frozen=True)
class World:
    env: dict[str, str]


def _switch(env: dict[str, str], mp: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        mp.setenv(name, value)
    get_settings.cache_clear()
    reset_catalogs()


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory: pytest.TempPathFactory) -> World:  # type: ignore[no-untyped-def]
    """A keyed and an unkeyed dataset, created once: Spark commits cost seconds."""
    base = tmp_path_factory.mktemp("sessions")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    people = base / "people.csv"
    people.write_text(
        "id,name,age,score,joined\n"
        + "".join(f"{i},name {i},{20 + i},{i * 1.5},2024-01-{i:02d}\n" for i in range(1, 21))
    )
    notes = base / "notes.csv"
    notes.write_text("title,body\nfirst,hello\nsecond,world\n")
    with pytest.MonkeyPatch.context() as mp:
        _switch(env, mp)
        catalog = open_catalog()
        create_project(catalog, "demo")
        for name in ("ed", "eve", "al"):
            create_user(catalog, name, password=f"{name}-password-1")
        add_member(catalog, "demo", "ed", Role.EDITOR)
        add_member(catalog, "demo", "eve", Role.EDITOR)
        add_member(catalog, "demo", "al", Role.APPROVER)
        create_dataset(catalog, "demo", "people", people, key="id")
        create_dataset(catalog, "demo", "notes", notes)
        reset_catalogs()
    get_settings.cache_clear()
    return World(env=env)


@dataclass
class Ctx:
    catalog: Catalog
    ed: User
    eve: User
    al: User
    session: sessions.SessionInfo

    def edits(self) -> list[sessions.CellEdit]:
        return sessions.effective_edits(layout_for("demo", "people"), self.session.session_id)


@pytest.fixture
def ctx(world: World, data_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ctx]:
    _switch(world.env, monkeypatch)
    catalog = open_catalog()
    ed = get_user(catalog, "ed")
    session = sessions.open_session(catalog, "demo", "people", actor=ed)
    yield Ctx(catalog, ed, get_user(catalog, "eve"), get_user(catalog, "al"), session)
    for meta in layout_for("demo", "people").live_edit_root.glob("*/metadata.json"):
        sessions.discard_session(
            catalog, meta.parent.name, actor=get_user(catalog, json.loads(meta.read_text())["owner"])
        )


def test_session_layout_and_metadata(ctx: Ctx) -> None:
    layout = layout_for("demo", "people")
    meta = json.loads(layout.session_metadata(ctx.session.session_id).read_text())
    assert meta["owner"] == "ed" and meta["base_version"] == 0 and meta["dataset_id"] == "people"
    # The same user gets the same open session back; another user gets their own.
    assert sessions.open_session(ctx.catalog, "demo", "people", actor=ctx.ed) == ctx.session
    other = sessions.open_session(ctx.catalog, "demo", "people", actor=ctx.eve)
    assert other.session_id != ctx.session.session_id


def test_only_changed_cells_are_stored_with_the_spec_schema(ctx: Ctx) -> None:
    sessions.apply_edits(ctx.catalog, ctx.session.session_id, [SetCell("3", "name", "Ada")], actor=ctx.ed)
    layout = layout_for("demo", "people")
    from deltalake import DeltaTable

    table = DeltaTable(str(layout.live_edit(ctx.session.session_id))).to_pyarrow_table()
    assert table.column_names == [
        "edit_id",
        "session_id",
        "row_id",
        "column",
        "old_value",
        "new_value",
        "user_id",
        "ts",
        "validation",
    ]
    [row] = table.to_pylist()
    assert (row["row_id"], row["column"], row["old_value"], row["new_value"], row["user_id"]) == (
        "3",
        "name",
        "name 3",
        "Ada",
        "ed",
    )
    assert ctx.edits() == [sessions.CellEdit("3", "name", "name 3", "Ada", "update")]


# Another app replica (another process on the same catalog and storage) saving to a session.
_SAVE_ELSEWHERE = """
import sys
from core import sessions
from core.auth import get_user
from core.catalog import open_catalog
catalog = open_catalog()
sessions.apply_edits(catalog, sys.argv[1], [sessions.SetCell("6", "name", "there")], actor=get_user(catalog, "ed"))
"""


def test_edits_saved_by_another_replica_are_never_hidden_by_this_ones_cache(ctx: Ctx, world: World) -> None:
    sid = ctx.session.session_id
    sessions.apply_edits(ctx.catalog, sid, [SetCell("5", "name", "here")], actor=ctx.ed)
    mine = sessions.CellEdit("5", "name", "name 5", "here", "update")
    assert ctx.edits() == [mine]
    assert ctx.edits() == [mine]  # from this process's cache now
    env = {**os.environ, **world.env}
    subprocess.run([sys.executable, "-c", _SAVE_ELSEWHERE, sid], env=env, check=True, timeout=300)
    assert ctx.edits() == [mine, sessions.CellEdit("6", "name", "name 6", "there", "update")]


def test_later_edit_supersedes_and_reverting_removes_it(ctx: Ctx) -> None:
    sid = ctx.session.session_id
    sessions.apply_edits(ctx.catalog, sid, [SetCell("2", "age", "30"), SetCell("2", "age", "31")], actor=ctx.ed)
    assert ctx.edits() == [sessions.CellEdit("2", "age", "22", "31", "update")]
    assert sessions.apply_edits(ctx.catalog, sid, [SetCell("2", "age", "22")], actor=ctx.ed) == 0
    assert ctx.edits() == []
    sessions.apply_edits(ctx.catalog, sid, [SetCell("4", "score", "9.25")], actor=ctx.ed)
    sessions.apply_edits(ctx.catalog, sid, [UndoCell("4", "score")], actor=ctx.ed)
    assert ctx.edits() == []


def test_insert_and_delete_rows(ctx: Ctx) -> None:
    sid = ctx.session.session_id
    sessions.apply_edits(
        ctx.catalog,
        sid,
        [AddRow({"id": 99, "name": "new", "age": "41"}), DeleteRow("5"), SetCell("6", "name", "x")],
        actor=ctx.ed,
    )
    assert sorted(ctx.edits(), key=lambda e: (e.row_id, e.column or "")) == [
        sessions.CellEdit("5", None, None, None, "delete"),
        sessions.CellEdit("6", "name", "name 6", "x", "update"),
        sessions.CellEdit("99", None, None, None, "insert"),
        sessions.CellEdit("99", "age", None, "41", "insert"),
        sessions.CellEdit("99", "id", None, "99", "insert"),
        sessions.CellEdit("99", "name", None, "new", "insert"),
    ]
    # Undoing the delete and the insert leaves only the cell update.
    sessions.apply_edits(ctx.catalog, sid, [UndoCell("5", None), DeleteRow("99")], actor=ctx.ed)
    assert ctx.edits() == [sessions.CellEdit("6", "name", "name 6", "x", "update")]


def test_unkeyed_dataset_rows_get_uuids(ctx: Ctx) -> None:
    notes = sessions.open_session(ctx.catalog, "demo", "notes", actor=ctx.ed)
    sessions.apply_edits(ctx.catalog, notes.session_id, [AddRow({"title": "third"})], actor=ctx.ed)
    [marker, cell] = sessions.effective_edits(layout_for("demo", "notes"), notes.session_id)
    assert len(marker.row_id) == 36 and marker.change == "insert" and cell.new_value == "third"
    sessions.discard_session(ctx.catalog, notes.session_id, actor=ctx.ed)


@pytest.mark.parametrize(
    ("op", "error", "message"),
    [
        (SetCell("nope", "name", "x"), NotFound, "unknown row 'nope'"),
        (SetCell("1", "nope", "x"), NotFound, "unknown column 'nope'"),
        (SetCell("1", "age", "abc"), InvalidInput, r"row '1', column 'age': 'abc' is not a number \(BIGINT\)"),
        (SetCell("1", "joined", "tomorrow"), InvalidInput, "'tomorrow' is not a date"),
        (SetCell("1", "id", "7"), InvalidInput, "identifies the row and cannot be edited"),
        (AddRow({"name": "no key"}), InvalidInput, "needs a value for the key column 'id'"),
        (AddRow({"id": 1}), InvalidInput, "a row with key '1' already exists"),
        (DeleteRow("nope"), NotFound, "unknown row"),
    ],
)
def test_bad_edits_are_refused_and_nothing_is_saved(ctx: Ctx, op: sessions.EditOp, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        sessions.apply_edits(ctx.catalog, ctx.session.session_id, [SetCell("2", "name", "ok"), op], actor=ctx.ed)
    assert ctx.edits() == []


def test_only_the_owner_edits(ctx: Ctx) -> None:
    with pytest.raises(PermissionDenied, match="belongs to 'ed'"):
        sessions.apply_edits(ctx.catalog, ctx.session.session_id, [SetCell("1", "name", "x")], actor=ctx.eve)


def test_expired_session_is_removed_and_the_owner_told(ctx: Ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = layout_for("demo", "people")
    old = (datetime.now(UTC) - timedelta(hours=get_settings().session_ttl_hours + 1)).isoformat()
    meta = layout.session_metadata(ctx.session.session_id)
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "last_activity": old}))
    with pytest.raises(ConflictError, match="expired"):
        sessions.apply_edits(ctx.catalog, ctx.session.session_id, [SetCell("1", "name", "x")], actor=ctx.ed)
    assert not layout.session_dir(ctx.session.session_id).exists()


def test_cli_edit_and_session_show(ctx: Ctx, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.context import state
    from cli.main import main

    state.json = False
    args = ["--json", "edit", "demo", "people", "--as", "ed", "--set", "7", "name", "Grace", "--delete-row", "8"]
    args += ["--add-row", '{"id": 77, "name": "Linus"}', "--set", "77", "age", "50"]
    assert main(args) == 0
    done = json.loads(capsys.readouterr().out)
    assert done == {"session_id": ctx.session.session_id, "edits": 6}
    assert main(["--json", "session", "show", done["session_id"], "--as", "ed"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["owner"], shown["project"], shown["dataset"], shown["base_version"]) == ("ed", "demo", "people", 0)
    assert {(e["row_id"], e["column"], e["old_value"], e["new_value"]) for e in shown["edits"]} == {
        ("7", "name", "name 7", "Grace"),
        ("8", None, None, None),
        ("77", None, None, None),
        ("77", "id", None, "77"),
        ("77", "name", None, "Linus"),
        ("77", "age", None, "50"),
    }


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--set", "1", "age", "old"], 1, "error: row '1', column 'age': 'old' is not a number"),
        (["--set", "1", "age"], 2, "--set needs ROW_ID COLUMN VALUE"),
        (["--add-row", "[1]"], 2, "must be a JSON object"),
        (["--bogus"], 2, "unexpected argument"),
    ],
)
def test_cli_edit_errors(
    ctx: Ctx, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    from cli.main import main

    assert main(["edit", "demo", "people", "--as", "ed", *args]) == code
    assert message in capsys.readouterr().err
    assert ctx.edits() == []


def test_overlay_applies_and_marks_edits_on_the_page(ctx: Ctx) -> None:
    sid = ctx.session.session_id
    sessions.apply_edits(
        ctx.catalog,
        sid,
        [SetCell("2", "age", "99"), DeleteRow("3"), AddRow({"id": 500, "name": "added", "joined": "2025-02-03"})],
        actor=ctx.ed,
    )
    page = sessions.overlay_page(ctx.catalog, sid, actor=ctx.ed, order_by="id", limit=5)
    assert page.total == 21
    rows = {r["row_id"]: r for r in page.rows.to_dict("records")}
    assert rows["2"]["age"] == 99 and rows["2"]["_change"] == "update" and rows["2"]["_edited"] == ["age"]
    assert rows["3"]["_change"] == "delete" and rows["3"]["name"] == "name 3"
    assert rows["1"]["_change"] == "" and rows["1"]["age"] == 21
    # The added row comes after the table's 20 rows, typed like its columns.
    last = sessions.overlay_page(ctx.catalog, sid, actor=ctx.ed, order_by="id", limit=5, offset=18)
    assert list(last.rows["row_id"]) == ["19", "20", "500"]
    added = last.rows.to_dict("records")[-1]
    assert added["_change"] == "insert" and added["name"] == "added" and str(added["joined"]) == "2025-02-03"
    # Filters apply to added rows too.
    only = sessions.overlay_page(
        ctx.catalog, sid, actor=ctx.ed, filters=[reads.RowFilter("name", "added", "contains")], limit=5
    )
    assert only.total == 1 and list(only.rows["row_id"]) == ["500"]


def test_cli_rows_with_session_overlay(ctx: Ctx, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    sessions.apply_edits(ctx.catalog, ctx.session.session_id, [SetCell("4", "name", "Dora")], actor=ctx.ed)
    args = ["--json", "dataset", "rows", "demo", "people", "--as", "ed", "--session", ctx.session.session_id]
    assert main([*args, "--filter", "row_id=4"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["total"] == 1 and doc["rows"][0]["name"] == "Dora" and doc["rows"][0]["_change"] == "update"


def test_session_start_and_discard_are_audited(ctx: Ctx) -> None:
    from core.audit import list_events

    sessions.discard_session(ctx.catalog, ctx.session.session_id, actor=ctx.ed, reason="changed my mind")
    events = [(e.name, e.details.get("session_id"), e.details.get("reason")) for e in list_events(ctx.catalog)]
    assert ("session_discarded", ctx.session.session_id, "changed my mind") in events
    assert ("session_started", ctx.session.session_id, None) in events
    assert not layout_for("demo", "people").session_dir(ctx.session.session_id).exists()


def test_a_second_edit_of_a_cell_reuses_its_base_value(ctx: Ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = ctx.session.session_id
    sessions.apply_edits(ctx.catalog, sid, [SetCell("2", "age", "30")], actor=ctx.ed)

    def no_lookup(*args: object) -> None:
        raise AssertionError("main was read again")

    # The session's own event holds the base value: neither an edit nor a delete reads main.
    monkeypatch.setattr(sessions, "_main_values", no_lookup)
    sessions.apply_edits(
        ctx.catalog, sid, [SetCell("2", "age", "31"), DeleteRow("2"), UndoCell("2", None)], actor=ctx.ed
    )
    assert ctx.edits() == [sessions.CellEdit("2", "age", "22", "31", "update")]
    with pytest.raises(AssertionError, match="main was read again"):
        sessions.apply_edits(ctx.catalog, sid, [SetCell("2", "name", "x")], actor=ctx.ed)


def test_a_save_reads_the_dataset_settings_once(ctx: Ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    # On an s3:// data root each read of the settings file is two requests; per value it
    # made a 10,000-cell save 20,000 requests (the --cluster --s3 bench's approve prep).
    reads_of_settings: list[str] = []
    real = sessions.dataset_settings

    def counted(project_id: str, dataset_id: str) -> object:
        reads_of_settings.append(dataset_id)
        return real(project_id, dataset_id)

    monkeypatch.setattr(sessions, "dataset_settings", counted)
    ops: list[sessions.EditOp] = [SetCell(str(i), c, "7") for i in range(1, 6) for c in ("age", "score")]
    ops += [AddRow({"id": "101", "name": "new", "age": "1"}), AddRow({"id": "102", "age": "2"})]
    sessions.apply_edits(ctx.catalog, ctx.session.session_id, ops, actor=ctx.ed)
    assert reads_of_settings == ["people"]
    assert sorted((e.row_id, e.column) for e in ctx.edits() if e.change == "update") == [
        (str(i), c) for i in range(1, 6) for c in ("age", "score")
    ]
    reads_of_settings.clear()
    sessions.apply_edits(ctx.catalog, ctx.session.session_id, [DeleteRow("6")], actor=ctx.ed)
    assert reads_of_settings == []  # nothing to convert, nothing read


def test_saves_from_two_processes_interleave(ctx: Ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process caches the session's events and open table; a save elsewhere invalidates them."""
    sid = ctx.session.session_id
    mine: dict[str, object] = {}
    theirs: dict[str, object] = {}
    for cache, op in [(mine, SetCell("1", "name", "a")), (theirs, SetCell("2", "name", "b")), (mine, DeleteRow("3"))]:
        monkeypatch.setattr(sessions, "_events_cache", cache)
        sessions.apply_edits(ctx.catalog, sid, [op], actor=ctx.ed)
    assert [(e.row_id, e.column, e.new_value) for e in ctx.edits()] == [
        ("1", "name", "a"),
        ("2", "name", "b"),
        ("3", None, None),
    ]


def test_a_save_is_on_disk_for_a_new_process(ctx: Ctx) -> None:
    import subprocess
    import sys

    sid = ctx.session.session_id
    for value in ("x", "y"):
        sessions.apply_edits(ctx.catalog, sid, [SetCell("5", "name", value)], actor=ctx.ed)
    path = layout_for("demo", "people").live_edit(sid)
    # Leaves through os._exit, as the oreo console script does: delta-rs can abort an
    # interpreter while it shuts down (delta-io/delta-rs#2184), which is not what this checks.
    code = (
        "import os, sys; from deltalake import DeltaTable; "
        "print(sorted(DeltaTable(sys.argv[1]).to_pyarrow_table()['new_value'].to_pylist()), flush=True); "
        "os._exit(0)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['x', 'y']"


def _text_rows(path: Path, version: int, row_ids: list[str]) -> dict[str, dict[str, str | None]]:
    """Rows by id through delta_scan: more ids than the point-read limit always scan."""
    padding = [f"no such row {i}" for i in range(reads._POINT_READ_MAX_IDS)]
    return reads.read_rows_as_text(path, version, row_ids + padding)


def test_row_locator_reads_what_delta_scan_reads(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    _switch(world.env, monkeypatch)
    path = layout_for("demo", "people").main
    ids = [str(i) for i in range(1, 21)]
    scanned = _text_rows(path, 0, ids)
    assert scanned["7"] == {
        "row_id": "7",
        "id": "7",
        "name": "name 7",
        "age": "27",
        "score": "10.5",
        "joined": "2024-01-07",
    }
    # The first point lookup of a version scans, the second builds its locator.
    for _ in range(2):
        assert reads.read_rows_as_text(path, 0, ["7", "nope"], ["age"]) == {"7": {"row_id": "7", "age": "27"}}
    assert reads._locators[reads._version_key(path, 0)] is not None
    for row_id in ids:
        assert reads.read_rows_as_text(path, 0, [row_id]) == {row_id: scanned[row_id]}
    assert reads.read_rows_as_text(path, 0, ["3", "nope"], []) == {"3": {"row_id": "3"}}
    with pytest.raises(InvalidInput, match="unknown column 'nope'"):
        reads.read_rows_as_text(path, 0, ["3"], ["nope"])


def test_row_locator_honours_deletion_vectors_and_versions(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from core.engine import delta_ref, main_table_properties_sql

    path = tmp_path / "dv"
    rows = spark.range(200).selectExpr("cast(id as string) as row_id", "id", "timestamp'2024-05-06 07:08:09' as at")
    rows.createOrReplaceTempView("dv_rows")
    props = main_table_properties_sql()
    spark.sql(f"CREATE TABLE {delta_ref(path)} USING DELTA TBLPROPERTIES ({props}) AS SELECT * FROM dv_rows")
    spark.sql(f"DELETE FROM {delta_ref(path)} WHERE id % 10 = 0")
    spark.sql(f"UPDATE {delta_ref(path)} SET id = -id WHERE id % 10 = 5")
    assert any(f.name.startswith("deletion_vector") for f in path.iterdir())
    ids = [str(i) for i in range(0, 200, 5)]
    for version in (0, 1, 2):
        scanned = _text_rows(path, version, ids)
        reads.read_rows_as_text(path, version, ["1"])  # first lookup of the version: a scan
        located = {r: row for r in ids for r, row in reads.read_rows_as_text(path, version, [r]).items()}
        assert reads._locators[reads._version_key(path, version)] is not None
        assert located == scanned
    assert "10" not in located and located["15"]["id"] == "-15"
    assert located["15"]["at"] == scanned["15"]["at"] == "2024-05-06 07:08:09+00"


def test_an_added_row_is_one_pending_change_with_one_undo(ctx: Ctx) -> None:
    sid = ctx.session.session_id
    sessions.apply_edits(
        ctx.catalog,
        sid,
        [AddRow({"id": 77, "name": "new", "age": "41", "joined": "2024-02-29"}), SetCell("2", "age", "30")],
        actor=ctx.ed,
    )
    # A cell typed into the new row later belongs to the same change.
    sessions.apply_edits(ctx.catalog, sid, [SetCell("77", "score", "2.5")], actor=ctx.ed)

    changes = sessions.pending_changes(ctx.edits())
    assert [(c.row_id, c.change, c.column) for c in changes] == [("2", "update", "age"), ("77", "insert", None)]
    (added,) = [c for c in changes if c.change == "insert"]
    assert dict(added.values) == {"id": "77", "name": "new", "age": "41", "joined": "2024-02-29", "score": "2.5"}

    sessions.apply_edits(ctx.catalog, sid, [added.undo], actor=ctx.ed)

    assert [(c.row_id, c.change) for c in sessions.pending_changes(ctx.edits())] == [("2", "update")]
    assert {e.row_id for e in ctx.edits()} == {"2"}


def _sessions_of(owner: str) -> list[str]:
    root = layout_for("demo", "people").live_edit_root
    return [m.parent.name for m in root.glob("*/metadata.json") if json.loads(m.read_text())["owner"] == owner] + [
        d.name for d in root.iterdir() if d.is_dir() and not (d / "metadata.json").exists()
    ]


def test_a_first_edit_refused_for_its_value_starts_no_session(ctx: Ctx) -> None:
    with pytest.raises(InvalidInput, match=r"'abc' is not a number"):
        sessions.save_edits(ctx.catalog, "demo", "people", [SetCell("1", "age", "abc")], actor=ctx.eve)

    assert _sessions_of("eve") == []
    assert sessions.current_session(ctx.catalog, "demo", "people", actor=ctx.eve) is None


def _disk_full(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("where", ["edits-table", "session-metadata"])
def test_a_full_disk_on_a_first_edit_says_so_and_leaves_no_session(
    ctx: Ctx, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    if where == "edits-table":
        monkeypatch.setattr(deltalake, "write_deltalake", _disk_full)
    else:
        monkeypatch.setattr(sessions, "_write_metadata", _disk_full)

    with pytest.raises(OutOfSpace, match=r"^the disk is full: no space left on the device holding \S+; "):
        sessions.save_edits(ctx.catalog, "demo", "people", [SetCell("1", "name", "x")], actor=ctx.eve)

    assert _sessions_of("eve") == []
    assert sessions.current_session(ctx.catalog, "demo", "people", actor=ctx.eve) is None


def test_a_full_disk_on_a_later_edit_keeps_the_earlier_ones(ctx: Ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions.save_edits(ctx.catalog, "demo", "people", [SetCell("1", "name", "kept")], actor=ctx.ed)
    monkeypatch.setattr(deltalake, "write_deltalake", _disk_full)

    with pytest.raises(OutOfSpace, match=r"^the disk is full: .*; these edits were not saved \(free some space"):
        sessions.save_edits(ctx.catalog, "demo", "people", [SetCell("2", "name", "lost")], actor=ctx.ed)

    assert [(e.row_id, e.new_value) for e in ctx.edits()] == [("1", "kept")]
