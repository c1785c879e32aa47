"""``core.diff.staged_diff`` against the generic ``core.diff.diff`` over the same tables.

The tables are written by delta-rs (no Spark): a main table and a staging table in the
layout ``core.change_requests`` stages (``_op``, ``_changed``), holding every kind of
entry a request can show.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from core import diff, reads
from core.errors import InvalidInput

COLUMNS = ["row_id", "name", "n", "born", "extra"]  # extra: a column the request adds


@pytest.fixture
def tables(tmp_path: Path) -> tuple[str, str]:
    main, staging = tmp_path / "main", tmp_path / "staging"
    write_deltalake(
        main,
        pa.table(
            {
                "row_id": ["1", "2", "3", "4", "5"],
                "name": ["ann", "bob", "cy", None, "eve"],
                "n": pa.array([1, 2, 3, 4, 5], pa.int64()),
                "born": [date(2000, 1, d) for d in range(1, 6)],
            }
        ),
    )
    staged = {
        # row 1: name changed and the added column set; row 2: n "changed" to its own value;
        # row 4: a NULL filled in; row 3: deleted; row 9: inserted (an import's NULL _changed);
        # row 8: staged as an update of a row main lacks, shown as an insert.
        "row_id": ["1", "2", "3", "4", "8", "9"],
        "name": ["ann2", "bob", "cy", "dee", "hal", "ivy"],
        "n": pa.array([1, 2, 3, 4, 8, 9], pa.int64()),
        "born": [date(2000, 1, 1), date(2000, 1, 2), date(2000, 1, 3), date(2000, 1, 4), None, date(2001, 1, 1)],
        "extra": ["x", None, None, None, None, "y"],
        "_op": ["update", "update", "delete", "update", "update", "insert"],
        "_changed": pa.array([["name", "extra"], ["n"], [], ["name"], ["name"], None], pa.list_(pa.string())),
    }
    write_deltalake(staging, pa.table(staged))
    return str(main), str(staging)


def _generic(main: str, staging: str, *, limit: int = 100, offset: int = 0) -> diff.DiffPage:
    """The diff as ``core.diff.diff`` computes it, comparing every column of every row."""
    present = {c.name for c in reads.table_schema(Path(main), 0)}
    before = diff.Relation(
        f"SELECT {diff.select_list(COLUMNS, present)} FROM delta_scan(?, version => 0) "
        "WHERE row_id IN (SELECT row_id FROM delta_scan(?) WHERE _op <> 'insert')",
        [main, staging],
    )
    names = ", ".join(reads.quote_ident(c) for c in COLUMNS)
    after = diff.Relation(f"SELECT {names} FROM delta_scan(?) WHERE _op <> 'delete'", [staging])
    return diff.diff(before, after, COLUMNS, limit=limit, offset=offset)


def _staged(main: str, staging: str, *, limit: int = 100, offset: int = 0) -> diff.DiffPage:
    return diff.staged_diff(main, 0, staging, COLUMNS, {"row_id", "name", "n", "born"}, limit=limit, offset=offset)


def test_staged_diff_lists_every_kind_of_entry_like_the_generic_diff(tables: tuple[str, str]) -> None:
    main, staging = tables
    page = _staged(main, staging)
    assert [(c.row_id, c.change, c.column, c.old, c.new) for c in page.changes if c.change == "update"] == [
        ("1", "update", "extra", None, "x"),
        ("1", "update", "name", "ann", "ann2"),
        ("4", "update", "name", None, "dee"),
    ]
    deleted = next(c for c in page.changes if c.change == "delete")
    assert deleted.row_id == "3"
    assert deleted.old == {"row_id": "3", "name": "cy", "n": 3, "born": "2000-01-03", "extra": None}
    inserted = {c.row_id: c.new for c in page.changes if c.change == "insert"}
    assert inserted["9"] == {"row_id": "9", "name": "ivy", "n": 9, "born": "2001-01-01", "extra": "y"}
    assert inserted["8"]["name"] == "hal"
    assert page.total == 6
    assert page == _generic(main, staging)


@pytest.mark.parametrize(("limit", "offset"), [(2, 0), (2, 2), (4, 4), (3, 6), (1, 50)])
def test_staged_diff_pages_like_the_generic_diff(tables: tuple[str, str], limit: int, offset: int) -> None:
    main, staging = tables
    page = _staged(main, staging, limit=limit, offset=offset)
    assert page == _generic(main, staging, limit=limit, offset=offset)
    assert page.total == 6


def test_staged_diff_of_only_deletes_and_of_an_empty_request(tmp_path: Path, tables: tuple[str, str]) -> None:
    main, _ = tables
    only_deletes = tmp_path / "deletes"
    write_deltalake(
        only_deletes,
        pa.table(
            {
                "row_id": ["2", "5"],
                "name": ["bob", "eve"],
                "n": pa.array([2, 5], pa.int64()),
                "born": [date(2000, 1, 2), date(2000, 1, 5)],
                "extra": pa.array([None, None], pa.string()),
                "_op": ["delete", "delete"],
                "_changed": pa.array([[], []], pa.list_(pa.string())),
            }
        ),
    )
    page = _staged(main, str(only_deletes))
    assert [(c.row_id, c.change) for c in page.changes] == [("2", "delete"), ("5", "delete")]
    assert page == _generic(main, str(only_deletes))
    empty = tmp_path / "empty"
    write_deltalake(
        empty, pa.table({"row_id": pa.array([], pa.string()), "_op": pa.array([], pa.string()),
                         "_changed": pa.array([], pa.list_(pa.string()))})
    )
    assert diff.staged_diff(main, 0, str(empty), ["row_id"], {"row_id"}) == diff.DiffPage(changes=[], total=0)


def test_staged_diff_refuses_a_bad_page(tables: tuple[str, str]) -> None:
    main, staging = tables
    with pytest.raises(InvalidInput, match="limit"):
        _staged(main, staging, limit=0)
    with pytest.raises(InvalidInput, match="offset"):
        _staged(main, staging, offset=-1)
