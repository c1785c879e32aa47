"""Pages read by many threads at once, remembered orderings, and the cursors of finished threads."""

from __future__ import annotations

import random
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from core import duck, reads
from core.filters import parse_where

ROWS = 3_000
CITIES = ["Oslo", "Bergen", "Lyon", "Porto", "Graz", None]


def _rows(n: int, start: int = 0, seed: int = 3) -> pa.Table:
    rng = random.Random(seed)
    ids = list(range(start, start + n))
    rng.shuffle(ids)  # stored out of order
    return pa.table(
        {
            "row_id": [f"r{i:06d}" for i in ids],
            "k": pa.array(ids, pa.int64()),
            "spend": [None if i % 11 == 0 else round(rng.random() * 500, 2) for i in ids],
            "city": [CITIES[rng.randrange(len(CITIES))] for _ in ids],
        }
    )


@pytest.fixture(params=["held", "scanned"], autouse=True)
def read_cache(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test runs with versions held in memory (the default) and with the scan path only."""
    from core.config import get_settings

    monkeypatch.setenv("OREO_READ_CACHE_MB", "1024" if request.param == "held" else "0")
    get_settings.cache_clear()
    for kept in (reads._held, reads._held_seen, reads._held_refused, reads._orderings, reads._orderings_seen):
        kept.clear()
    yield request.param
    get_settings.cache_clear()


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "people"
    write_deltalake(str(path), _rows(ROWS))
    return path


def _bare_ids(
    path: Path, version: int, where: str, params: list[object], order: str, limit: int, offset: int
) -> tuple[list[str], int]:
    """The page's row ids and the matching count, by one plain query on a fresh DuckDB."""
    con = reads.open_duckdb()
    try:
        scan = "delta_scan(?, version => ?)"
        ids = con.execute(
            f"SELECT row_id FROM {scan}{where} ORDER BY {order} LIMIT ? OFFSET ?",
            [str(path), version, *params, limit, offset],
        ).fetchall()
        total = con.execute(f"SELECT count(*) FROM {scan}{where}", [str(path), version, *params]).fetchone()
        return [r[0] for r in ids], int(total[0]) if total else 0
    finally:
        con.close()


# (order_by, descending, where text or None, the same in SQL, its parameters, the full order in SQL)
SHAPES = [
    (None, False, None, "", [], "k ASC"),
    ("spend", True, None, "", [], "spend DESC NULLS LAST, k ASC"),
    ("city", False, "spend >= 100", " WHERE spend >= 100", [], "city ASC NULLS LAST, k ASC"),
    ("spend", False, "city = Oslo", " WHERE city = 'Oslo'", [], "spend ASC NULLS LAST, k ASC"),
]


def _read(path: Path, shape: tuple, offset: int, version: int = 0) -> reads.Page:
    order_by, descending, where, *_ = shape
    return reads.read_page(
        path,
        version=version,
        conditions=[parse_where(where)] if where else None,
        order_by=order_by,
        descending=descending,
        default_order=["k"],
        limit=25,
        offset=offset,
    )


def test_many_threads_read_the_same_pages_as_one_plain_query(table: Path) -> None:
    expected: dict[tuple[int, int], tuple[list[str], int]] = {}
    for s, shape in enumerate(SHAPES):
        for offset in (0, 25, 1000, 1500):
            expected[(s, offset)] = _bare_ids(table, 0, shape[3], shape[4], shape[5], 25, offset)
    problems: list[str] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(12):
            s, offset = rng.randrange(len(SHAPES)), rng.choice((0, 25, 1000, 1500))
            try:
                page = _read(table, SHAPES[s], offset)
                got = (list(page.rows["row_id"]), page.total)
            except Exception as exc:  # reported below, with the shape
                problems.append(f"{SHAPES[s]} @ {offset}: {type(exc).__name__}: {exc}")
                continue
            if got != expected[(s, offset)]:
                problems.append(f"{SHAPES[s]} @ {offset}: {got[0][:3]}.. total {got[1]}")

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == []


def test_a_kept_ordering_serves_later_pages_of_that_version_only(table: Path, read_cache: str) -> None:
    shape = SHAPES[2]
    for offset in (0, 40, 700):  # the second read of the view keeps its whole order
        page = _read(table, shape, offset)
        assert (list(page.rows["row_id"]), page.total) == _bare_ids(table, 0, shape[3], shape[4], shape[5], 25, offset)
    if read_cache == "held":  # the version itself is held, and the view's positions in it
        assert [key[:2] for key in reads._held] == [(str(table), 0)]
        assert any(key[0] == "held" for key in reads._orderings)
    else:
        assert any(key[0] == str(table) and key[1] == 0 for key in reads._orderings)
        assert not reads._held

    write_deltalake(str(table), _rows(500, start=ROWS, seed=9), mode="append")  # version 1
    for version in (1, 0, 1):
        for offset in (0, 1200):
            page = _read(table, shape, offset, version=version)
            bare = _bare_ids(table, version, shape[3], shape[4], shape[5], 25, offset)
            assert (list(page.rows["row_id"]), page.total) == bare
    assert _read(table, shape, 0, version=1).total > _read(table, shape, 0, version=0).total
    # Holding version 1 let version 0 go; reading 0 again (a History preview) keeps 1 held.
    assert sorted(key[1] for key in reads._held) == ([0, 1] if read_cache == "held" else [])


def test_a_table_replaced_under_the_same_path_is_read_anew(table: Path) -> None:
    shape = SHAPES[1]
    before = [list(_read(table, shape, 100).rows["row_id"]) for _ in range(3)]  # kept from the second read
    assert before[0] == before[1] == before[2]
    shutil.rmtree(table)
    write_deltalake(str(table), _rows(ROWS, seed=77))  # version 0 again, other values
    page = _read(table, shape, 100)
    assert list(page.rows["row_id"]) == _bare_ids(table, 0, "", [], shape[5], 25, 100)[0]
    assert list(page.rows["row_id"]) != before[0]


def test_a_finished_threads_cursor_is_closed_when_another_thread_needs_one() -> None:
    made: list[duckdb.DuckDBPyConnection] = []

    def use() -> None:
        cur = reads.cursor()
        cur.execute("SELECT 1").fetchone()
        made.append(cur)

    for _ in range(20):  # like Streamlit: every script run in a new thread
        t = threading.Thread(target=use)
        t.start()
        t.join()
    assert len(made) == 20 and len({id(c) for c in made}) == 20
    alive = {id(c) for _, c in duck._cursors}
    assert id(made[-1]) in alive and not any(id(c) in alive for c in made[:-1])
    with pytest.raises(duckdb.ConnectionException):
        made[0].execute("SELECT 1")
    assert reads.cursor().execute("SELECT 2").fetchone() == (2,)  # this thread's own cursor still works


def test_a_version_bigger_than_the_read_cache_is_paged_by_scans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.config import get_settings

    path = tmp_path / "wide"
    rows = _rows(ROWS)
    write_deltalake(str(path), rows.append_column("note", pa.array(["x" * 600] * ROWS)))  # ~2 MB in memory
    monkeypatch.setenv("OREO_READ_CACHE_MB", "1")
    get_settings.cache_clear()
    shape = SHAPES[1]
    for offset in (0, 50, 2000):
        page = _read(path, shape, offset)
        assert (list(page.rows["row_id"]), page.total) == _bare_ids(path, 0, "", [], shape[5], 25, offset)
    assert not reads._held and [key[:2] for key in reads._held_refused] == [(str(path), 0)]


def test_pages_with_pending_edits_show_the_edited_rows(table: Path, read_cache: str) -> None:
    """A session's overlay over the table (held in memory or scanned) reads as the edited rows would."""
    base = reads.cursor().execute("SELECT * FROM delta_scan(?)", [str(table)]).to_arrow_table().to_pandas()
    ids = sorted(base["row_id"])
    changed = {ids[5]: ("Zagreb", "999.5"), ids[10]: (None, "150.25"), ids[2000]: ("Aarhus", None)}
    added = {"r900001": (900001, "Aarhus", "1.5"), "r900002": (900002, None, "250")}
    rows: dict[str, dict[str, str | None]] = {}
    for row_id, (city, spend) in changed.items():
        k = int(base.loc[base["row_id"] == row_id, "k"].iloc[0])
        rows[row_id] = {"row_id": row_id, "k": str(k), "spend": spend, "city": city}
    for row_id, (k, city, spend) in added.items():
        rows[row_id] = {"row_id": row_id, "k": str(k), "spend": spend, "city": city}
    overlay = reads.Overlay(rows=rows, added=len(added))
    import pandas as pd

    new_rows = pd.DataFrame(list(rows.values())).astype({"k": "int64", "spend": "float64"})
    edited = pd.concat([base[~base["row_id"].isin(list(rows))], new_rows])
    masks = {
        None: lambda f: f,
        "spend >= 100": lambda f: f[f["spend"] >= 100],
        "city = Oslo": lambda f: f[f["city"] == "Oslo"],
    }
    for order_by, descending, where, *_ in SHAPES:
        matching = masks[where](edited)
        by = [order_by, "k"] if order_by else ["k"]
        expected = matching.sort_values(by, ascending=[not descending, True][: len(by)], na_position="last")
        for offset in (0, 1000, 0, 1000):  # the second read of the version holds it
            page = reads.read_page(
                table, version=0, conditions=[parse_where(where)] if where else None, order_by=order_by,
                descending=descending, default_order=["k"], limit=25, offset=offset, overlay=overlay,
            )  # fmt: skip
            assert list(page.rows["row_id"]) == list(expected["row_id"].iloc[offset : offset + 25]), (where, order_by)
            assert page.total == len(matching)
    assert bool(reads._held) == (read_cache == "held")  # the overlay was laid over the held version


def test_a_big_version_is_held_by_a_background_load_while_pages_are_scanned(
    table: Path, read_cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    monkeypatch.setattr(reads, "_HELD_NOW_BYTES", 0)  # every version counts as big
    shape = SHAPES[1]
    for offset in (0, 300):  # the second read starts the load and is itself scanned
        page = _read(table, shape, offset)
        assert (list(page.rows["row_id"]), page.total) == _bare_ids(table, 0, "", [], shape[5], 25, offset)
    deadline = time.monotonic() + 60
    while read_cache == "held" and not reads._held and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [key[:2] for key in reads._held] == ([(str(table), 0)] if read_cache == "held" else [])
    page = _read(table, shape, 2900)
    assert (list(page.rows["row_id"]), page.total) == _bare_ids(table, 0, "", [], shape[5], 25, 2900)
