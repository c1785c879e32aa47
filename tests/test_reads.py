"""DuckDB reads: the signed extension, per-thread cursors, bound parameters, table features."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import duckdb
import pytest

from core import duck, reads
from core.errors import InvalidInput, NotFound

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def people(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """A small Delta table written by Spark with Oreo's main-table properties."""
    from core.engine import delta_ref, main_table_properties_sql

    path = tmp_path_factory.mktemp("reads") / "people"
    rows = [(f"r{i:03d}", f"name {i}", i % 7, "x'y" if i == 3 else "plain") for i in range(120)]
    spark.createDataFrame(rows, "row_id string, name string, grp int, note string").createOrReplaceTempView("src")
    props = main_table_properties_sql()
    spark.sql(f"CREATE TABLE {delta_ref(path)} USING DELTA TBLPROPERTIES ({props}) AS SELECT * FROM src")
    return path


def test_extension_is_the_signed_one_from_the_wheel() -> None:
    import duckdb_extension_delta

    path = reads.extension_path()
    assert Path(duckdb_extension_delta.__file__).parent in path.parents
    cur = reads.cursor()
    loaded = cur.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'delta'").fetchone()
    assert loaded == (True,)
    assert cur.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone() == (False,)
    assert cur.execute("SELECT current_setting('autoinstall_known_extensions')").fetchone() == (False,)


def test_one_cursor_per_thread() -> None:
    seen: list[duckdb.DuckDBPyConnection] = []
    threads = [threading.Thread(target=lambda: seen.append(reads.cursor())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in seen}) == 3
    assert reads.cursor() is reads.cursor()


def test_page_filters_order_and_total(people: Path) -> None:
    page = reads.read_page(people, filters=[reads.RowFilter("grp", "3")], order_by="name", descending=True, limit=5)
    expected = sorted((f"name {i}" for i in range(120) if i % 7 == 3), reverse=True)
    assert page.total == len(expected)
    assert list(page.rows["name"]) == expected[:5]
    contains = reads.read_page(people, filters=[reads.RowFilter("name", "NAME 11", "contains")], limit=50)
    assert sorted(contains.rows["name"]) == sorted(f"name {i}" for i in range(120) if "11" in str(i))


@pytest.mark.parametrize(
    "value",
    ["' OR 1=1 --", "x'y'); DROP TABLE t; --", "%", "name 1' OR '1'='1"],
)
def test_user_values_are_bound_parameters(people: Path, value: str) -> None:
    page = reads.read_page(people, filters=[reads.RowFilter("name", value)], limit=10)
    assert page.total == 0
    # The table is still there and whole.
    assert reads.count_rows(people) == 120


def test_quote_in_data_matches_exactly(people: Path) -> None:
    assert reads.read_page(people, filters=[reads.RowFilter("note", "x'y")]).total == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"filters": [reads.RowFilter('name" = name OR "1', "a")]}, "unknown column"),
        ({"order_by": "name; DROP TABLE x"}, "cannot order by unknown column"),
        ({"limit": 0}, "limit must be between"),
        ({"offset": -1}, "offset must be >= 0"),
    ],
)
def test_bad_read_requests_are_refused(people: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        reads.read_page(people, **kwargs)


def test_missing_table_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="no Delta table"):
        reads.count_rows(tmp_path / "nothing")


def test_duckdb_reads_deletes_and_updates_by_spark(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Deletion vectors and CDF are on; DuckDB must still see exactly Spark's view of the table."""
    from core.engine import delta_ref, main_table_properties_sql

    path = tmp_path / "dv"
    spark.range(1000).selectExpr("cast(id as string) as row_id", "id").createOrReplaceTempView("dv_src")
    props = main_table_properties_sql()
    spark.sql(f"CREATE TABLE {delta_ref(path)} USING DELTA TBLPROPERTIES ({props}) AS SELECT * FROM dv_src")
    spark.sql(f"DELETE FROM {delta_ref(path)} WHERE id % 10 = 0")
    spark.sql(f"UPDATE {delta_ref(path)} SET id = -id WHERE id % 10 = 5")

    detail = spark.sql(f"DESCRIBE DETAIL {delta_ref(path)}").collect()[0]
    assert "deletionVectors" in detail["tableFeatures"]
    assert "columnMapping" not in detail["tableFeatures"]
    dv_files = [f for f in path.iterdir() if f.name.startswith("deletion_vector")]
    assert dv_files, "the DELETE should have written deletion vectors, not rewritten files"

    spark_rows = sorted(r["id"] for r in spark.read.format("delta").load(str(path)).collect())
    duck = reads.read_page(path, limit=10_000)
    assert duck.total == 900
    assert sorted(duck.rows["id"]) == spark_rows
    # Time travel: version 0 still has every row.
    assert reads.count_rows(path, version=0) == 1000
    with pytest.raises(NotFound):
        reads.count_rows(path, version=99)


# ---------------------------------------------------------------- ordered pages, overlays, the stable order


def _delta_rs_table(path: Path, rows: dict[str, list[object]]) -> Path:
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(path), pa.table(rows))
    return path


def test_an_ordered_page_is_right_when_row_id_repeats(tmp_path: Path) -> None:
    # The two-step read looks rows up by row_id; where row_id is not unique it must fall back.
    path = _delta_rs_table(tmp_path / "dupes", {"row_id": ["a", "a", "b", "c"], "n": [4, 1, 2, 3]})
    page = reads.read_page(path, order_by="n", limit=2, offset=1)
    assert list(page.rows["n"]) == [2, 3]
    assert list(reads.read_page(path, order_by="n", descending=True, limit=10).rows["n"]) == [4, 3, 2, 1]


def test_ordered_pages_cover_the_table_once(tmp_path: Path) -> None:
    n = 250
    ids = [f"r{(i * 37) % n:04d}" for i in range(n)]  # stored out of order
    path = _delta_rs_table(
        tmp_path / "many",
        {
            "row_id": ids,
            "k": [int(i[1:]) % 17 for i in ids],
            "v": [None if int(i[1:]) % 9 == 0 else int(i[1:]) for i in ids],
        },
    )
    for order_by, descending in [("k", False), ("v", True), (None, False)]:
        got = [
            r
            for o in range(0, n, 40)
            for r in reads.read_page(
                path, order_by=order_by, descending=descending, default_order=["row_id"], limit=40, offset=o
            ).rows["row_id"]
        ]
        assert sorted(got) == sorted(ids) and len(set(got)) == n
        if order_by is None:
            assert got == sorted(ids)


def test_an_overlay_replaces_and_adds_rows_that_filter_and_sort_like_stored_ones(tmp_path: Path) -> None:
    from core.filters import parse_where

    path = _delta_rs_table(
        tmp_path / "base", {"row_id": ["1", "2", "3", "4"], "k": [1, 2, 3, 4], "name": ["a", "b", "c", "d"]}
    )
    rows = {"2": {"row_id": "2", "k": "2", "name": "zed"}, "9": {"row_id": "9", "k": "0", "name": "new"}}
    overlay = reads.Overlay(rows, added=1)
    for given in (overlay, reads.Overlay(rows, added=1, key="k")):  # replaced rows found by row_id, or by key
        page = reads.read_page(path, default_order=["k"], overlay=given, known_total=4)
        assert list(page.rows["row_id"]) == ["9", "1", "2", "3", "4"] and page.total == 5
        assert list(page.rows["name"]) == ["new", "a", "zed", "c", "d"]
        assert reads.read_page(path, default_order=["k"], overlay=given).total == 5  # counted
    assert page.rows["k"].dtype.kind == "i"  # cast back to the column's type
    hits = reads.read_page(path, conditions=[parse_where("name >= n")], order_by="name", overlay=overlay)
    assert list(hits.rows["row_id"]) == ["9", "2"] and hits.total == 2
    gone = [parse_where("name = b")]
    assert reads.read_page(path, conditions=gone, overlay=overlay).total == 0
    assert reads.first_emptying_condition(path, gone, overlay=overlay) == gone[0]
    assert reads.first_emptying_condition(path, gone) is None


def test_stable_order_is_the_key_else_row_id() -> None:
    from core.datasets import DatasetInfo, stable_order

    def info(key: str | None) -> DatasetInfo:
        return DatasetInfo("p", "d", key, 0, 0, None, None, "ann", "/nowhere")

    assert stable_order(info("customer_id")) == ["customer_id"]
    assert stable_order(info(None)) == ["row_id"]
    assert stable_order(info("row_id")) == ["row_id"]


def test_new_row_ids_are_uuid7_in_the_order_they_were_made() -> None:
    import uuid

    from core.datasets import time_ordered_ids

    first = time_ordered_ids(1000)
    later = time_ordered_ids(3)
    ids = first + later
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {uuid.UUID(i).version for i in ids} == {7}
    assert all(str(uuid.UUID(i)) == i for i in ids)


# A table replaced at the same path by another process (another app replica) at the same version.
_REPLACE = """
import shutil, sys
import pyarrow as pa
from deltalake import write_deltalake
shutil.rmtree(sys.argv[1])
write_deltalake(sys.argv[1], pa.table({"row_id": ["a", "b"], "city": ["Oslo", "Lyon"], "n": [7, 8]}))
"""


def test_a_table_replaced_by_another_process_is_never_served_from_this_ones_caches(tmp_path: Path) -> None:
    import subprocess
    import sys

    import pyarrow as pa
    from deltalake import write_deltalake

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"row_id": ["a", "b"], "name": ["Ada", "Bo"]}))
    for _ in range(3):  # the schema is remembered, and from the second lookup a row locator is kept
        assert [c.name for c in reads.table_schema(path, 0)] == ["row_id", "name"]
        assert reads.read_rows_as_text(path, 0, ["a"]) == {"a": {"row_id": "a", "name": "Ada"}}
        assert list(reads.read_page(path, version=0, order_by="row_id").rows["name"]) == ["Ada", "Bo"]
    subprocess.run([sys.executable, "-c", _REPLACE, str(path)], check=True)
    assert [c.name for c in reads.table_schema(path, 0)] == ["row_id", "city", "n"]
    for _ in range(2):
        assert reads.read_rows_as_text(path, 0, ["a"]) == {"a": {"row_id": "a", "city": "Oslo", "n": "7"}}
        assert list(reads.read_page(path, version=0, order_by="row_id").rows["city"]) == ["Oslo", "Lyon"]


# DuckDB 1.5.5's window races over input with an empty block (duckdb#22352, fixed after 1.5.5):
# run often enough, this query raises an internal error, which invalidates the whole database.
WINDOW_RACE = """
WITH cols AS (SELECT i AS x FROM range(1) t(i)),
     people AS (SELECT * FROM cols WHERE x >= 5000
                UNION ALL SELECT * FROM cols WHERE NOT EXISTS (SELECT 1 FROM cols WHERE x >= 5000))
SELECT x, count() OVER () AS full_count FROM people ORDER BY x DESC LIMIT 5
"""


def _invalidate_duckdb() -> duckdb.Error:
    """Run ``WINDOW_RACE`` on this thread's cursor until DuckDB's internal error; that error."""
    cur = reads.cursor()
    for _ in range(20_000):
        try:
            cur.execute(WINDOW_RACE).fetchall()
        except duckdb.InternalException as exc:
            return exc
    raise AssertionError("DuckDB's window race (duckdb#22352) did not show in 20,000 runs; is it fixed?")


def test_a_database_an_internal_error_invalidated_is_replaced(people: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One read fails; the next ones, on any thread, run on a new database instead of failing until a restart."""
    monkeypatch.setattr(duck, "HEALTH_CHECK_S", 3600.0)  # only ``recover`` replaces it here
    monkeypatch.setattr(duck, "_checked_at", time.monotonic())
    error = _invalidate_duckdb()
    with pytest.raises(duckdb.FatalException, match="invalidated"):
        reads.cursor().execute("SELECT 42").fetchall()

    assert reads.recover(error) is True
    assert reads.recover(ValueError("not DuckDB's")) is False
    assert reads.cursor().execute("SELECT 42").fetchall() == [(42,)]
    assert reads.read_page(people, order_by="row_id", limit=3).rows["row_id"].tolist() == ["r000", "r001", "r002"]
    seen: list[object] = []
    other = threading.Thread(target=lambda: seen.append(reads.cursor().execute("SELECT 7").fetchall()))
    other.start()
    other.join()
    assert seen == [[(7,)]]


def test_reads_replace_a_dead_database_by_themselves(people: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that meets the invalidated database replaces it and runs again; so does the periodic check."""
    _invalidate_duckdb()
    assert reads.read_page(people, order_by="row_id", limit=2).rows["row_id"].tolist() == ["r000", "r001"]

    _invalidate_duckdb()
    monkeypatch.setattr(duck, "HEALTH_CHECK_S", 0.0)  # the next cursor asked for checks the database
    assert reads.cursor().execute("SELECT 42").fetchall() == [(42,)]
