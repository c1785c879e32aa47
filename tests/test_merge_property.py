"""Merge property: any edit sequence, submitted and approved, leaves main equal to a pandas model."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core import change_requests, merge, sessions
from core.catalog import open_catalog
from core.datasets import get_dataset
from core.errors import InvalidInput
from core.sessions import AddRow, DeleteRow, SetCell, UndoCell
from tests import merge_support as ms

pytestmark = pytest.mark.spark

EDITABLE = ("name", "qty", "score")
NEW_KEYS = (100, 101, 102, 103)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "name": st.none() | st.text(max_size=12),
    "qty": st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "score": st.none() | st.floats(allow_nan=False, allow_infinity=False),
}


def _same(a: Any, b: Any) -> bool:
    """Equal as the stored text would be: -0.0 is not 0.0, and None only equals None."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return type(a) is type(b) and a == b


@dataclass
class Model:
    """The reference: what a session holds, and what main must look like after its merge."""

    edits: dict[tuple[str, str], Any] = field(default_factory=dict)  # cells of base rows
    deleted: set[str] = field(default_factory=set)
    inserted: dict[str, dict[str, Any]] = field(default_factory=dict)
    used_keys: set[int] = field(default_factory=set)

    def live_base(self) -> list[str]:
        return [r for r in sorted(ms.BASE_ROWS) if r not in self.deleted]

    def changed_cells(self) -> dict[tuple[str, str], Any]:
        return {k: v for k, v in self.edits.items() if not _same(v, ms.BASE_ROWS[k[0]][k[1]])}

    def changes(self) -> set[tuple[str, str, str | None]]:
        """(row_id, change, column) as the merged request's cell-level diff lists them."""
        updates = {(row, "update", column) for (row, column) in self.changed_cells() if row not in self.deleted}
        return updates | {(r, "delete", None) for r in self.deleted} | {(r, "insert", None) for r in self.inserted}

    def cells(self) -> int:
        """Changed cells of existing rows plus the given (non-null) cells of added rows."""
        updates = sum(1 for (_, change, _) in self.changes() if change == "update")
        return updates + sum(v is not None for row in self.inserted.values() for v in row.values())

    def effective_count(self) -> int:
        """What ``apply_edits`` reports: one per deleted or added row, plus ``cells``."""
        return len(self.deleted) + len(self.inserted) + self.cells()

    def touched_rows(self) -> set[str]:
        return {row for (row, _, _) in self.changes()}

    def expected(self) -> pd.DataFrame:
        rows = {r: dict(v) for r, v in ms.BASE_ROWS.items() if r not in self.deleted}
        for (row, column), value in self.edits.items():
            if row in rows:
                rows[row][column] = value
        rows.update({r: dict(v) for r, v in self.inserted.items()})
        return ms.frame_of(rows)


# An abstract operation picks its target by index among the rows it can apply to at that
# moment, so every drawn sequence is valid and shrinks well.
_set = st.sampled_from(EDITABLE).flatmap(lambda c: st.tuples(st.just("set"), st.integers(0, 15), st.just(c), VALUES[c]))
_revert = st.tuples(st.just("revert"), st.integers(0, 15), st.sampled_from(EDITABLE))
_undo = st.tuples(st.just("undo"), st.integers(0, 15), st.sampled_from(EDITABLE))
_add = st.tuples(st.just("add"), st.integers(0, 3), st.fixed_dictionaries({}, optional=VALUES))
_delete = st.tuples(st.just("delete"), st.integers(0, 15))
_undo_row = st.tuples(st.just("undo_row"), st.integers(0, 15))
OPS = st.one_of(_set, _revert, _undo, _add, _delete, _undo_row)
BATCHES = st.lists(st.lists(OPS, min_size=1, max_size=3), min_size=1, max_size=4)


def _pick(candidates: list[str], index: int) -> str | None:
    return candidates[index % len(candidates)] if candidates else None


def _translate(model: Model, op: tuple[Any, ...]) -> sessions.EditOp | None:
    """The concrete edit for ``op`` (None if nothing fits), with the model updated."""
    kind = op[0]
    if kind == "set":
        _, index, column, value = op
        row = _pick(model.live_base() + sorted(model.inserted), index)
        if row is None:
            return None
        if row in model.inserted:
            model.inserted[row][column] = value
        else:
            model.edits[(row, column)] = value
        return SetCell(row, column, value)
    if kind == "revert":
        _, index, column = op
        row = _pick(model.live_base(), index)
        if row is None:
            return None
        model.edits.pop((row, column), None)
        return SetCell(row, column, ms.BASE_ROWS[row][column])
    if kind == "undo":
        _, index, column = op
        row = _pick(sorted(ms.BASE_ROWS) + sorted(model.inserted), index)
        if row is None:
            return None
        if row in model.inserted:
            model.inserted[row][column] = None  # an added row has no original: the cell empties
        else:
            model.edits.pop((row, column), None)
        return UndoCell(row, column)
    if kind == "add":
        _, index, values = op
        # Keys are not reused within a session; re-adding an undone key has its own test below.
        free = [k for k in NEW_KEYS if k not in model.used_keys]
        if not free:
            return None
        key = free[index % len(free)]
        model.used_keys.add(key)
        model.inserted[str(key)] = {"id": key, **dict.fromkeys(EDITABLE), **values}
        return AddRow({"id": key, **values})
    if kind == "delete":
        row = _pick(model.live_base() + sorted(model.inserted), op[1])
        if row is None:
            return None
        if row in model.inserted:
            del model.inserted[row]
        else:
            model.deleted.add(row)
        return DeleteRow(row)
    row = _pick(sorted(model.deleted) + sorted(model.inserted), op[1])  # undo_row
    if row is None:
        return None
    model.deleted.discard(row)
    model.inserted.pop(row, None)
    return UndoCell(row, None)


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return ms.make_pristine(tmp_path_factory.mktemp("merge-property") / "pristine")


# Each example that reaches Spark submits and approves (two Spark jobs, several seconds
# each), so the example count is small and the whole test gets a longer timeout.
@pytest.mark.timeout(2400)
@settings(
    max_examples=8,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batches=BATCHES)
# All reverted: a cell set and set back, a cell set and undone, a row added and removed.
@example(batches=[[("set", 0, "qty", 7), ("revert", 0, "qty")], [("set", 1, "name", "x")], [("undo", 1, "name")]])
@example(batches=[[("add", 0, {"name": "gone"}), ("delete", 8)], [("delete", 2), ("undo_row", 0)]])
# One of everything, over several saves.
@example(
    batches=[
        [("set", 0, "name", ""), ("set", 1, "qty", None), ("set", 2, "score", -0.0)],
        [("add", 0, {"qty": 2**63 - 1, "score": 1e-300}), ("set", 8, "name", "new row")],
        [("delete", 3), ("delete", 4), ("undo_row", 1)],
        [("set", 5, "name", "kept"), ("revert", 4, "score"), ("undo", 7, "qty")],
    ]
)
def test_approved_session_equals_the_model(
    pristine: Path, tmp_path: Path, batches: list[list[tuple[Any, ...]]]
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        ms.switch(ms.fresh_copy(pristine, tmp_path), mp)
        catalog = open_catalog()
        ed, al = ms.user(catalog, "ed"), ms.user(catalog, "al")
        before = ms.main_frame()
        session = sessions.open_session(catalog, ms.PROJECT, ms.DATASET, actor=ed)
        model = Model()
        for batch in batches:
            ops = [edit for edit in (_translate(model, op) for op in batch) if edit is not None]
            if ops:
                count = sessions.apply_edits(catalog, session.session_id, ops, actor=ed)
                assert count == model.effective_count(), ops

        if not model.touched_rows():
            with pytest.raises(InvalidInput, match="has no edits to submit"):
                change_requests.submit_change_request(catalog, session.session_id, actor=ed)
            assert ms.log_versions() == 0
            ms.assert_frame_equal(ms.main_frame(), before)
            return

        cr = change_requests.submit_change_request(catalog, session.session_id, actor=ed)
        assert (cr.rows, cr.cells) == (len(model.touched_rows()), model.cells())
        merged = merge.approve_change_request(catalog, cr.id, actor=al)

        assert (merged.state, merged.merged_version, merged.closed_by) == (change_requests.CRState.MERGED, 1, "al")
        assert ms.main_schema() == ms.DUCK_TYPES
        expected = model.expected()
        ms.assert_frame_equal(ms.main_frame(), expected)
        dataset = get_dataset(catalog, ms.PROJECT, ms.DATASET, actor=al)
        assert (dataset.version, dataset.rows) == (1, len(expected))
        assert not ms.layout().staging(cr.id).exists()
        assert not ms.layout().session_dir(session.session_id).exists()
        diff = change_requests.diff_change_request(catalog, cr.id, actor=al, limit=10_000)
        assert {(c.row_id, c.change, c.column) for c in diff.changes} == model.changes()
        assert diff.total == len(model.changes())


def test_re_adding_a_key_after_undoing_its_insert_starts_from_empty_cells(pristine: Path, tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        ms.switch(ms.fresh_copy(pristine, tmp_path), mp)
        catalog = open_catalog()
        ed = ms.user(catalog, "ed")
        session = sessions.open_session(catalog, ms.PROJECT, ms.DATASET, actor=ed)
        ops = [AddRow({"id": 100, "name": "first try"}), DeleteRow("100"), AddRow({"id": 100, "qty": 5})]
        sessions.apply_edits(catalog, session.session_id, ops, actor=ed)
        cells = {e.column: e.new_value for e in sessions.effective_edits(ms.layout(), session.session_id)}
        assert cells == {None: None, "id": "100", "qty": "5"}
