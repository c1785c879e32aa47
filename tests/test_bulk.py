"""Bulk changes: every matching row at once, previewed, stored as one pending change, undone as one."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import deltalake
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.app import WARM_ENGINE_ENV, create_app
from cli import context
from cli import main as cli
from core import bulk, change_requests, merge, reads, sessions, tokens
from core.auth import Role, User, add_member, create_user, get_user
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.datasets import create_dataset, get_dataset, layout_for
from core.errors import ConflictError, InvalidInput, NotFound
from core.filters import Condition, parse_where
from core.projects import create_project
from core.sessions import DeleteRow, SetCell
from core.storage import location

pytestmark = pytest.mark.spark

# Cities with what stewards clean: spellings, stray whitespace, case, unicode and regex characters.
CITIES = ["N.Y.", "NY", "New York ", "  new   york", "Zürich", "a.b*c (x)", "", "straße", "ǅemal", "n.y.", "$1+[?]"]
ROWS = 33


@dataclass(frozen=True)
class World:
    env: dict[str, str]


def _switch(env: dict[str, str], mp: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        mp.setenv(name, value)
    get_settings.cache_clear()
    reset_catalogs()


def _city(i: int) -> str:
    return CITIES[i % len(CITIES)]


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory: pytest.TempPathFactory) -> World:  # type: ignore[no-untyped-def]
    """A keyed dataset with messy cities, numbers and dates held as text, created once (Spark commits cost seconds)."""
    base = tmp_path_factory.mktemp("bulk")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    people = base / "people.csv"
    lines = ["id,name,city,age,score,amount,signed"]
    for i in range(1, ROWS + 1):
        city = _city(i)
        lines.append(f'{i},name {i},"{city}",{20 + i},{i * 1.25},"{i},{i % 10}5",{i:02d}/03/2024')
    people.write_text("\n".join(lines) + "\n")
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
        create_dataset(catalog, "demo", "merged", people, key="id")  # the one test that merges changes it
        reset_catalogs()
    get_settings.cache_clear()
    return World(env=env)


@dataclass
class Ctx:
    catalog: Catalog
    ed: User
    al: User

    @property
    def layout(self):  # type: ignore[no-untyped-def]
        return layout_for("demo", "people")

    def session(self) -> sessions.SessionInfo | None:
        return sessions.current_session(self.catalog, "demo", "people", actor=self.ed)

    def stored(self, session_id: str) -> int:
        return sessions.read_events(self.layout, session_id).num_rows

    def edits(self, session_id: str) -> dict[tuple[str, str | None], sessions.CellEdit]:
        return {(e.row_id, e.column): e for e in sessions.effective_edits(self.layout, session_id)}


@pytest.fixture
def ctx(world: World, data_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ctx]:
    _switch(world.env, monkeypatch)
    catalog = open_catalog()
    yield Ctx(catalog, get_user(catalog, "ed"), get_user(catalog, "al"))
    metas = [*layout_for("demo", "people").live_edit_root.glob("*/metadata.json")]
    for meta in [*metas, *layout_for("demo", "merged").live_edit_root.glob("*/metadata.json")]:
        owner = get_user(catalog, json.loads(meta.read_text())["owner"])
        try:
            sessions.discard_session(catalog, meta.parent.name, actor=owner)
        except ConflictError:
            pass  # a submitted session goes with its request


def _base(column: str) -> dict[str, str | None]:
    """Each row's value of ``column`` at version 0, as DuckDB text."""
    dataset_path = location(layout_for("demo", "people").main)
    ids = [str(i) for i in range(1, ROWS + 1)]
    return {r: v[column] for r, v in reads.read_rows_as_text(dataset_path, 0, ids, [column]).items()}


# ---------------------------------------------------------------- preview


def test_preview_counts_matching_and_changing_rows_and_saves_nothing(ctx: Ctx) -> None:
    preview = bulk.preview_bulk(
        ctx.catalog, "demo", "people", "city", bulk.Replace("N.Y.", "New York"), actor=ctx.ed,
        conditions=[parse_where("age <= 45")],
    )  # fmt: skip
    expected = [str(i) for i in range(1, 26) if "N.Y." in (_city(i) or "")]
    assert preview.matched == 25 and preview.changed == len(expected) == 2 and preview.unchanged == 23
    assert sorted(s.row_id for s in preview.sample) == sorted(expected)
    first = preview.sample[0]
    assert (first.before, first.after) == ("N.Y.", "New York") and first.values["name"] == f"name {first.row_id}"
    assert preview.summary == f"city: find 'N.Y.' → 'New York' in {len(expected)} rows"
    assert ctx.session() is None  # no session was started, nothing was saved


def test_preview_over_the_session_sees_its_pending_edits_and_leaves_it_as_it_was(ctx: Ctx) -> None:
    info, _ = sessions.save_edits(
        ctx.catalog, "demo", "people", [SetCell("2", "city", "N.Y. city"), DeleteRow("12")], actor=ctx.ed
    )
    before = ctx.stored(info.session_id)
    preview = bulk.preview_bulk(ctx.catalog, "demo", "people", "city", bulk.Replace("N.Y.", "NYC"), actor=ctx.ed)
    changed = {s.row_id: (s.before, s.after) for s in preview.sample}
    assert changed["2"] == ("N.Y. city", "NYC city")  # the pending value, not main's
    assert "12" not in changed  # deleted in the session: not a matching row
    assert preview.matched == ROWS - 1
    assert ctx.stored(info.session_id) == before


# ---------------------------------------------------------------- apply and undo


def test_apply_is_one_pending_change_of_ordinary_cell_edits_in_one_commit(ctx: Ctx) -> None:
    change = bulk.apply_bulk(
        ctx.catalog, "demo", "people", "city", bulk.Replace("n.y.", "New York", "whole", ignore_case=True),
        actor=ctx.ed,
    )  # fmt: skip
    rows = [str(i) for i in range(1, ROWS + 1) if _city(i).lower() == "n.y."]
    assert change.changed == change.cells == len(rows) and change.matched == ROWS and change.base_version == 0
    edits = ctx.edits(change.session_id)
    assert {k[0] for k in edits} == set(rows)
    assert all(e.old_value in ("N.Y.", "n.y.") and e.new_value == "New York" for e in edits.values())
    path = ctx.layout.live_edit(change.session_id)
    assert deltalake.DeltaTable(str(path)).version() == 0  # the marker and every cell: one append
    own, bulks = bulk.pending_view(ctx.layout, change.session_id)
    assert own == [] and [b.bulk_id for b in bulks] == [change.bulk_id]
    assert bulks[0].summary == f"city: replace value 'n.y.' → 'New York' (any case) in {len(rows)} rows"
    marker = [e for e in sessions.read_events(ctx.layout, change.session_id).to_pylist() if e["column"] == "__bulk__"]
    assert json.loads(marker[0]["new_value"])["base_version"] == 0


def test_undo_restores_earlier_edits_and_keeps_later_ones(ctx: Ctx) -> None:
    info, _ = sessions.save_edits(ctx.catalog, "demo", "people", [SetCell("1", "city", "N.Y.!")], actor=ctx.ed)
    change = bulk.apply_bulk(ctx.catalog, "demo", "people", "city", bulk.Replace("N.Y.", "NYC"), actor=ctx.ed)
    assert change.session_id == info.session_id
    hit = sorted((r for r in ctx.edits(info.session_id) if r[0] != "1"), key=lambda k: int(k[0]))
    later = hit[0][0]
    sessions.apply_edits(ctx.catalog, info.session_id, [SetCell(later, "city", "edited after")], actor=ctx.ed)
    own, bulks = bulk.pending_view(ctx.layout, info.session_id)
    assert bulks[0].cells == change.changed - 1 and {c.row_id for c in own} == {later}
    assert bulk.undo_bulk(ctx.catalog, info.session_id, change.bulk_id, actor=ctx.ed) == change.changed - 1
    edits = ctx.edits(info.session_id)
    assert edits[("1", "city")].new_value == "N.Y.!"  # the edit before the bulk change is back
    assert edits[(later, "city")].new_value == "edited after"  # the edit after it stays
    assert len(edits) == 2
    assert bulk.pending_view(ctx.layout, info.session_id)[1] == []
    with pytest.raises(NotFound, match="no pending bulk change"):
        bulk.undo_bulk(ctx.catalog, info.session_id, change.bulk_id, actor=ctx.ed)


def test_a_bulk_change_over_an_earlier_one_undoes_back_to_it(ctx: Ctx) -> None:
    first = bulk.apply_bulk(ctx.catalog, "demo", "people", "city", bulk.Transform("upper"), actor=ctx.ed)
    second = bulk.apply_bulk(ctx.catalog, "demo", "people", "city", bulk.Replace("N.Y.", "NYC"), actor=ctx.ed)
    _own, bulks = bulk.pending_view(ctx.layout, first.session_id)
    assert [b.bulk_id for b in bulks] == [first.bulk_id, second.bulk_id]
    assert bulks[1].cells == second.changed  # a cell both changed is the newer one's
    assert bulks[0].cells + bulks[1].cells == len(ctx.edits(first.session_id))
    bulk.undo_bulk(ctx.catalog, second.session_id, second.bulk_id, actor=ctx.ed)
    _own, bulks = bulk.pending_view(ctx.layout, first.session_id)
    assert [(b.bulk_id, b.cells) for b in bulks] == [(first.bulk_id, first.changed)]


def test_set_to_empty_and_an_added_row_takes_the_change(ctx: Ctx) -> None:
    sessions.save_edits(ctx.catalog, "demo", "people", [sessions.AddRow({"id": 900, "city": "Paris"})], actor=ctx.ed)
    change = bulk.apply_bulk(
        ctx.catalog, "demo", "people", "city", bulk.SetValue(None), actor=ctx.ed, conditions=[parse_where("id >= 30")]
    )
    edits = ctx.edits(change.session_id)
    assert ("900", "city") not in edits  # an added row's emptied cell is no cell of it
    assert all(edits[(str(i), "city")].new_value is None for i in range(30, ROWS + 1) if _city(i) != "")
    assert change.summary.startswith("city: set to ∅ in ")


# ---------------------------------------------------------------- refusals write nothing


@pytest.mark.parametrize(
    ("column", "operation", "message"),
    [
        ("age", bulk.SetValue("abc"), r"column 'age' cannot hold the new value \('abc' is not a number .*\) "
         r"in rows '\d+', '\d+', '\d+' and \d+ more; nothing was saved"),
        ("city", bulk.Replace("(N.Y.", "x", "regex"), r"bad regular expression '\(N\.Y\.': missing \)"),
        ("city", bulk.Replace(r"(N)\.Y\.", r"\2", "regex"), r"refers to group '2'"),
        ("city", bulk.Replace("", "x"), "the text to find is empty"),
        ("signed", bulk.Transform("date", fmt="%m/%d/%Y"), r"does not match the date format '%m/%d/%Y'\) in rows"),
        ("age", bulk.Transform("upper"), "applies to text columns"),
        ("city", bulk.Transform("round", places=2), "applies to number columns"),
        ("id", bulk.SetValue("7"), "identifies the row"),
        ("nope", bulk.SetValue("7"), "unknown column 'nope'"),
    ],
)  # fmt: skip
def test_a_refused_bulk_change_writes_nothing(ctx: Ctx, column: str, operation: bulk.Operation, message: str) -> None:
    info, _ = sessions.save_edits(ctx.catalog, "demo", "people", [SetCell("1", "name", "kept")], actor=ctx.ed)
    before = ctx.stored(info.session_id)
    with pytest.raises((InvalidInput, NotFound), match=message):
        bulk.apply_bulk(ctx.catalog, "demo", "people", column, operation, actor=ctx.ed)
    assert ctx.stored(info.session_id) == before
    assert "\n" not in message


def test_a_pattern_that_backtracks_without_end_is_stopped_and_writes_nothing(
    ctx: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_BULK_REGEX_S", "1")
    get_settings.cache_clear()
    info, _ = sessions.save_edits(ctx.catalog, "demo", "people", [SetCell("3", "city", "a" * 40 + "!")], actor=ctx.ed)
    before = ctx.stored(info.session_id)
    runaway = bulk.Replace(r"^(a|aa)+$", "x", "regex")  # about 1.6**40 steps on forty a's and a '!'
    for call in (bulk.preview_bulk, bulk.apply_bulk):
        with pytest.raises(InvalidInput) as refused:
            call(ctx.catalog, "demo", "people", "city", runaway, actor=ctx.ed)
        assert str(refused.value) == (
            "the search '^(a|aa)+$' took more than 1 s over the matching values (OREO_BULK_REGEX_S); "
            "simplify the pattern or narrow the rows; nothing was saved"
        )
    assert ctx.stored(info.session_id) == before
    # The same pattern over values it settles quickly is no problem.
    quick = bulk.preview_bulk(
        ctx.catalog, "demo", "people", "city", runaway, actor=ctx.ed, conditions=[parse_where("id = 4")]
    )
    assert quick.matched == 1


def test_a_refused_first_change_starts_no_session(ctx: Ctx) -> None:
    with pytest.raises(InvalidInput, match="cannot hold"):
        bulk.apply_bulk(ctx.catalog, "demo", "people", "score", bulk.SetValue("1e400"), actor=ctx.ed)
    assert ctx.session() is None


def test_a_value_the_column_cannot_hold_is_refused_even_when_no_row_matches(ctx: Ctx) -> None:
    with pytest.raises(InvalidInput) as refused:
        bulk.apply_bulk(
            ctx.catalog, "demo", "people", "age", bulk.SetValue("abc"), actor=ctx.ed,
            conditions=[parse_where("id > 100000")],
        )  # fmt: skip
    assert str(refused.value).startswith("column 'age' cannot hold the new value ('abc' is not a number")
    assert "in rows" not in str(refused.value)  # no empty list of rows
    assert ctx.session() is None


def test_over_the_cap_is_refused_with_the_count(ctx: Ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OREO_MAX_BULK_ROWS", "10")
    get_settings.cache_clear()
    with pytest.raises(InvalidInput, match=f"this change matches {ROWS} rows; one bulk change may change at most 10"):
        bulk.preview_bulk(ctx.catalog, "demo", "people", "city", bulk.Transform("trim"), actor=ctx.ed)
    preview = bulk.preview_bulk(
        ctx.catalog,
        "demo",
        "people",
        "city",
        bulk.Transform("trim"),
        actor=ctx.ed,
        conditions=[parse_where("id <= 10")],
    )
    assert preview.matched == 10


def test_nothing_to_change_is_refused(ctx: Ctx) -> None:
    with pytest.raises(InvalidInput, match="no row would change"):
        bulk.apply_bulk(ctx.catalog, "demo", "people", "city", bulk.Replace("no such text", "x"), actor=ctx.ed)
    assert ctx.session() is None


# ---------------------------------------------------------------- transforms


def test_number_and_date_text_convert_with_an_explicit_format(ctx: Ctx) -> None:
    amounts = bulk.preview_bulk(
        ctx.catalog, "demo", "people", "amount", bulk.parse_transform("number:,"), actor=ctx.ed,
        conditions=[parse_where("id <= 3")],
    )  # fmt: skip
    assert {s.row_id: s.after for s in amounts.sample} == {"1": "1.15", "2": "2.25", "3": "3.35"}
    dates = bulk.preview_bulk(
        ctx.catalog, "demo", "people", "signed", bulk.parse_transform("date:%d/%m/%Y"), actor=ctx.ed,
        conditions=[parse_where("id in (4, 25)")],
    )  # fmt: skip
    assert {s.row_id: s.after for s in dates.sample} == {"4": "2024-03-04", "25": "2024-03-25"}


def test_round_half_away_from_zero_in_the_column_s_type(ctx: Ctx) -> None:
    preview = bulk.preview_bulk(ctx.catalog, "demo", "people", "score", bulk.parse_transform("round:1"), actor=ctx.ed)
    base = _base("score")
    expected = {r: str(float(Decimal(v).quantize(Decimal("0.1"), ROUND_HALF_UP))) for r, v in base.items() if v}
    changed = {r: e for r, e in expected.items() if Decimal(e) != Decimal(base[r] or "0")}
    assert preview.changed == len(changed)
    assert {s.row_id: s.after for s in preview.sample} == {s.row_id: changed[s.row_id] for s in preview.sample}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("trim", bulk.Transform("trim")), ("round:-2", bulk.Transform("round", places=-2)),
     ("date:%Y%m%d", bulk.Transform("date", fmt="%Y%m%d")), ("number:.", bulk.Transform("number", fmt="."))],
)  # fmt: skip
def test_transform_specs(spec: str, expected: bulk.Transform) -> None:
    assert bulk.parse_transform(spec) == expected


@pytest.mark.parametrize("spec", ["shout", "round:x", "trim:2"])
def test_bad_transform_specs_are_named(spec: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(repr(spec))):
        bulk.parse_transform(spec)


# ---------------------------------------------------------------- against a plain Python reference


def _reference(operation: bulk.Operation, value: str | None) -> str | None:
    """The new text of one text cell, written plainly, apart from the module's own code."""
    if value is None:
        return operation.value if isinstance(operation, bulk.SetValue) else None
    if isinstance(operation, bulk.SetValue):
        return operation.value
    if isinstance(operation, bulk.Replace):
        flags = re.IGNORECASE if operation.ignore_case else 0
        if operation.mode == "whole":
            same = re.fullmatch(re.escape(operation.find), value, flags) if flags else value == operation.find
            return operation.replace if same else value
        if operation.mode == "substring":
            parts = re.split(re.escape(operation.find), value, flags=flags)
            return operation.replace.join(parts)
        return re.sub(operation.find, operation.replace, value, flags=flags)
    words = re.split(r"(\s+)", value)
    return {
        "trim": value.strip(),
        "collapse": "".join(" " if w.isspace() else w for w in words),
        "upper": value.upper(),
        "lower": value.lower(),
        "title": "".join(w if w.isspace() or not w else w[0].upper() + w[1:].lower() for w in words),
    }[operation.name]


_TEXT = st.text(st.sampled_from(list("aAßǅ .*+?()[]$^\\|{}\t\u00a0éÉ1N.Y")), max_size=8)
_OPERATIONS = st.one_of(
    st.builds(bulk.SetValue, st.one_of(st.none(), _TEXT)),
    st.builds(bulk.Replace, _TEXT.filter(bool), _TEXT, st.sampled_from(["whole", "substring"]), st.booleans()),
    st.builds(bulk.Replace, st.sampled_from([r"\.", r"(\w)\s+", r"[A-Z]+", r"^\s*|\s*$", r"(?i)y"]),
              st.sampled_from(["", "-", r"<\1>", r"\g<0>\g<0>"]).filter(lambda r: True), st.just("regex"),
              st.booleans()),
    st.builds(bulk.Transform, st.sampled_from(["trim", "collapse", "upper", "lower", "title"])),
)  # fmt: skip


def _valid_regex(operation: bulk.Operation) -> bool:
    if isinstance(operation, bulk.Replace) and operation.mode == "regex" and "\\1" in operation.replace:
        return re.compile(operation.find).groups >= 1
    return True


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    operation=_OPERATIONS.filter(_valid_regex),
    pending=st.dictionaries(st.integers(1, ROWS).map(str), st.one_of(st.none(), _TEXT), max_size=4),
    below=st.integers(1, ROWS + 1),
)
def test_every_operation_matches_a_plain_python_reference(
    ctx: Ctx, operation: bulk.Operation, pending: dict[str, str | None], below: int
) -> None:
    """Random pending edits make a random table as the session sees it; the change matches the reference."""
    base = _base("city")
    session = sessions.open_session(ctx.catalog, "demo", "people", actor=ctx.ed)
    try:
        if pending:
            ops = [SetCell(r, "city", v) for r, v in pending.items()]
            sessions.apply_edits(ctx.catalog, session.session_id, ops, actor=ctx.ed)
        current = {r: pending.get(r, v) for r, v in base.items()}
        matching = {r: v for r, v in current.items() if int(r) < below}
        expected = {r: _reference(operation, v) for r, v in matching.items()}
        changing = {r: n for r, n in expected.items() if n != matching[r]}
        conditions = [Condition("id", "lt", (str(below),))]
        preview = bulk.preview_bulk(
            ctx.catalog, "demo", "people", "city", operation, actor=ctx.ed, conditions=conditions
        )
        assert (preview.matched, preview.changed) == (len(matching), len(changing))
        if not changing:
            return
        change = bulk.apply_bulk(ctx.catalog, "demo", "people", "city", operation, actor=ctx.ed, conditions=conditions)
        edits = ctx.edits(session.session_id)
        after = {r: edits[(r, "city")].new_value if (r, "city") in edits else base[r] for r in base}
        assert after == {**current, **changing}
        assert all(e.old_value == base[r] for (r, _c), e in edits.items())
        bulk.undo_bulk(ctx.catalog, session.session_id, change.bulk_id, actor=ctx.ed)
        edits = ctx.edits(session.session_id)
        assert {r: e.new_value for (r, _c), e in edits.items()} == {r: v for r, v in pending.items() if v != base[r]}
    finally:
        sessions.discard_session(ctx.catalog, session.session_id, actor=ctx.ed)


# ---------------------------------------------------------------- downstream: submit and approve


def test_a_bulk_change_submits_as_cell_edits_and_merges(ctx: Ctx) -> None:
    change = bulk.apply_bulk(
        ctx.catalog, "demo", "merged", "city", bulk.Replace(r"(?i)^\s*n\.?\s*y\.?\s*$", "New York", "regex"),
        actor=ctx.ed,
    )  # fmt: skip
    cr = change_requests.submit_change_request(ctx.catalog, change.session_id, actor=ctx.ed, title="cities")
    assert cr.cells == change.changed
    listed = bulk.session_bulks(layout_for("demo", "merged"), change.session_id)
    assert [b.summary for b in listed] == [change.summary]  # what the request's diff shows above its rows
    assert [b["summary"] for b in cr.bulk_changes] == [change.summary]
    assert cr.bulk_changes[0]["bulk_id"] == change.bulk_id and cr.bulk_changes[0]["cells"] == change.changed
    merged = merge.approve_change_request(ctx.catalog, cr.id, actor=ctx.al)
    assert merged.merged_version == 1
    # The request keeps its summary once its session is gone (merged).
    assert not layout_for("demo", "merged").session_dir(change.session_id).exists()
    kept = change_requests.get_change_request(ctx.catalog, cr.id, actor=ctx.al)
    assert [b["summary"] for b in kept.bulk_changes] == [change.summary]
    dataset = get_dataset(ctx.catalog, "demo", "merged", actor=ctx.al)
    after = reads.read_rows_as_text(location(dataset.path), 1, [str(i) for i in range(1, ROWS + 1)], ["city"])
    for i in range(1, ROWS + 1):
        old = _city(i)
        new = "New York" if re.fullmatch(r"(?i)^\s*n\.?\s*y\.?\s*$", old) else (old or None)
        assert after[str(i)]["city"] == new, i


def test_date_text_converts_as_datetime_reads_it_and_bad_days_are_named(ctx: Ctx) -> None:
    refused = r"from '32/03/2024' \(does not match the date format '%d/%m/%Y'\) in rows '32'; nothing was saved$"
    with pytest.raises(InvalidInput, match=refused):
        bulk.preview_bulk(ctx.catalog, "demo", "people", "signed", bulk.parse_transform("date:%d/%m/%Y"), actor=ctx.ed)
    preview = bulk.preview_bulk(
        ctx.catalog, "demo", "people", "signed", bulk.parse_transform("date:%d/%m/%Y"), actor=ctx.ed,
        conditions=[parse_where("id <= 31")],
    )  # fmt: skip
    assert preview.changed == 31
    expected = {str(i): datetime.strptime(f"{i:02d}/03/2024", "%d/%m/%Y").date().isoformat() for i in range(1, 32)}
    assert {s.row_id: s.after for s in preview.sample} == {s.row_id: expected[s.row_id] for s in preview.sample}


# ---------------------------------------------------------------- the CLI and the API call the same core


def _oreo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    context.state.json = False
    code = cli.main(list(args))
    out = capsys.readouterr()
    context.state.json = False
    return code, out.out, out.err


def test_cli_previews_applies_and_undoes_a_bulk_change(ctx: Ctx, capsys: pytest.CaptureFixture[str]) -> None:
    where = ("--where", "id <= 22")
    code, out, err = _oreo(capsys, "edit", "demo", "people", "--as", "ed", *where, "--replace", "city", "n.y.",
                           "New York", "--ignore-case", "--whole", "--preview")  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "city: replace value 'n.y.' → 'New York' (any case) in 4 rows - preview, nothing was saved"
    assert lines[1] == "  22 matching row(s): 4 would change, 18 unchanged"
    assert "  row 11: 'N.Y.' -> 'New York'" in lines
    assert ctx.session() is None
    code, out, err = _oreo(capsys, "--json", "edit", "demo", "people", "--as", "ed", *where, "--replace", "city",
                           "n.y.", "New York", "--ignore-case", "--whole")  # fmt: skip
    doc = json.loads(out)
    assert code == 0 and doc["changed"] == 4 and doc["preview"] is False and doc["where"] == ["id ≤ 22"]
    assert len(ctx.edits(doc["session_id"])) == 4
    code, out, err = _oreo(capsys, "edit", "demo", "people", "--as", "ed", "--undo-bulk", doc["bulk_id"])
    assert (
        code == 0
        and out.strip() == f"session {doc['session_id']}: bulk change {doc['bulk_id']} undone (4 cell(s) restored)"
    )
    assert ctx.edits(doc["session_id"]) == {}


def test_cli_session_show_lists_a_bulk_change_as_one_line(ctx: Ctx, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _oreo(capsys, "--json", "edit", "demo", "people", "--as", "ed", "--where", "id <= 22",
                           "--replace", "city", "N.Y.", "NYC")  # fmt: skip
    assert code == 0, err
    made = json.loads(out)
    assert _oreo(capsys, "edit", "demo", "people", "--as", "ed", "--set", "1", "name", "Solo")[0] == 0
    code, out, err = _oreo(capsys, "session", "show", made["session_id"], "--as", "ed")
    assert code == 0, err
    lines = out.splitlines()[1:]
    assert lines[0].split() == ["bulk", made["bulk_id"], *made["summary"].split()]
    assert [line.split()[:3] for line in lines[1:]] == [["update", "1", "name"]]  # the bulk's cells are not listed
    code, out, err = _oreo(capsys, "--json", "session", "show", made["session_id"], "--as", "ed")
    doc = json.loads(out)
    assert [b["bulk_id"] for b in doc["bulk_changes"]] == [made["bulk_id"]]
    assert len(doc["edits"]) == made["changed"] + 1  # the document still lists every pending cell


def test_cli_cr_show_lists_the_request_s_bulk_changes(ctx: Ctx, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _oreo(capsys, "--json", "edit", "demo", "people", "--as", "ed", "--where", "id <= 22",
                           "--transform", "city", "upper")  # fmt: skip
    assert code == 0, err
    made = json.loads(out)
    assert _oreo(capsys, "edit", "demo", "people", "--as", "ed", "--set", "1", "name", "Solo")[0] == 0
    cr = change_requests.submit_change_request(ctx.catalog, made["session_id"], actor=ctx.ed, title="upper")
    try:
        code, out, err = _oreo(capsys, "cr", "show", cr.id, "--as", "al")
        assert code == 0, err
        bulk_lines = [line.split() for line in out.splitlines() if line.startswith("  bulk ")]
        assert bulk_lines == [["bulk", made["bulk_id"], *made["summary"].split()]]
        code, out, err = _oreo(capsys, "--json", "cr", "show", cr.id, "--as", "al")
        doc = json.loads(out)
        assert [(b["bulk_id"], b["summary"], b["column"]) for b in doc["bulk_changes"]] == [
            (made["bulk_id"], made["summary"], "city")
        ]
    finally:
        change_requests.withdraw_change_request(ctx.catalog, cr.id, actor=ctx.ed)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--transform", "city", "shout"), "unknown transform 'shout'"),
        (("--replace", "city", "(", "x", "--regex"), r"bad regular expression '\('"),
        (("--set-all", "age", "x1"), r"column 'age' cannot hold the new value \('x1' is not a number"),
        (("--set-all", "city", "x", "--set", "1", "city", "y"), "'--set' does not go with a bulk change"),
        (("--set-all", "city", "x", "--transform", "city", "trim"), "give one of --set-all, --replace"),
    ],
)
def test_cli_refuses_a_bad_bulk_change_in_one_line_and_saves_nothing(
    ctx: Ctx, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, out, err = _oreo(capsys, "edit", "demo", "people", "--as", "ed", *args)
    assert code != 0 and out == "" and len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert ctx.session() is None


def test_cli_sets_every_matching_cell_to_empty(ctx: Ctx, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _oreo(capsys, "edit", "demo", "people", "--as", "ed", "--where", "id = 3", "--set-all", "city",
                           "--null")  # fmt: skip
    assert code == 0, err
    session = ctx.session()
    assert session is not None and [e.new_value for e in ctx.edits(session.session_id).values()] == [None]


def test_api_previews_applies_lists_and_undoes_a_bulk_change(ctx: Ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WARM_ENGINE_ENV, "0")
    token = tokens.create_token(ctx.catalog, "ed").secret
    body = {"column": "city", "where": ["id <= 22"], "replace": {"find": "N.Y.", "replace": "NYC"}}
    with TestClient(create_app(), headers={"Authorization": f"Bearer {token}"}) as client:
        base = "/api/v1/projects/demo/datasets/people/bulk-edits"
        preview = client.post(f"{base}/preview", json=body)
        assert preview.status_code == 200 and preview.json()["changed"] == 2 and ctx.session() is None
        assert preview.json()["sample"][0]["after"] == "NYC"
        bad = client.post(f"{base}/preview", json={**body, "replace": {"find": "[", "replace": "", "mode": "regex"}})
        assert bad.status_code == 400 and "bad regular expression '['" in bad.text
        two = client.post(base, json={**body, "transform": "trim"})
        assert two.status_code == 400 and "exactly one of set, replace or transform" in two.text
        applied = client.post(base, json=body)
        assert applied.status_code == 201, applied.text
        doc = applied.json()
        listed = client.get(f"/api/v1/sessions/{doc['session_id']}/bulk-edits").json()["bulk_edits"]
        assert [b["summary"] for b in listed] == ["city: find 'N.Y.' → 'NYC' in 2 rows"]
        undone = client.delete(f"/api/v1/sessions/{doc['session_id']}/bulk-edits/{doc['bulk_id']}")
        assert undone.status_code == 200 and undone.json()["restored"] == 2
        again = client.delete(f"/api/v1/sessions/{doc['session_id']}/bulk-edits/{doc['bulk_id']}")
        assert again.status_code == 404
        empty = client.post(base, json={"column": "age", "set": {"value": None}, "where": ["id = 1"]})
        assert empty.status_code == 201 and empty.json()["summary"] == "age: set to ∅ in 1 row"


def test_matching_rows_read_the_same_from_a_version_held_in_memory(ctx: Ctx) -> None:
    """A held version (from its second read) answers from memory with the rows and texts of a scan."""
    path = location(layout_for("demo", "people").main)
    conditions = [parse_where("age between 25 and 40"), parse_where("city is not empty")]
    scanned = reads.matching_values(path, 0, "city", conditions=conditions)
    reads.matching_values(path, 0, "name", conditions=conditions)  # the second read holds the version
    assert reads._held_version(path, 0, None) is not None
    held = reads.matching_values(path, 0, "city", conditions=conditions)
    assert held.to_pylist() == scanned.to_pylist() and held.num_rows > 5
