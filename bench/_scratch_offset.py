"""Scratch prototype (not a workload): a natural-order page without decoding the skipped rows.

``python -m bench._scratch_offset [DELTA_PATH ...]`` compares, on the bench table and on copies with smaller
row groups / several files, today's ``LIMIT ? OFFSET ?`` over ``delta_scan`` with a page
located through ``delta_list_files`` (per-file row counts) and read with a
``file_row_number`` range, which lets DuckDB skip whole row groups. It also checks that
both return the same rows. Needs the 1,000,000-row bench table (run ``python -m bench`` once).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from bench._data import DATA_DIR
from core.reads import extension_path

MAIN = DATA_DIR / "delta/projects/bench/datasets/customers_1000000/main"
COPIES = Path("/tmp/oreo-bench-scratch")
PAGE, OFFSET = 100, 500_000


def connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:", config={"allow_unsigned_extensions": "false"})
    con.execute(f"LOAD '{extension_path()}'")
    return con


def offset_page(con: duckdb.DuckDBPyConnection, path: str, limit: int, offset: int) -> pa.Table:
    """Today's read: decode every row up to ``offset`` (delta_scan has no late materialization)."""
    return con.execute("SELECT * FROM delta_scan(?) LIMIT ? OFFSET ?", [path, limit, offset]).to_arrow_table()


def located_page(con: duckdb.DuckDBPyConnection, path: str, limit: int, offset: int) -> tuple[pa.Table, int] | None:
    """The same page found through per-file row counts; None when a file has deletion vectors."""
    files = con.execute("SELECT data_file, cardinality, have_deletes FROM delta_list_files(?)", [path]).fetchall()
    if any(deletes for _, _, deletes in files):
        return None  # row positions no longer map to row numbers: fall back to LIMIT/OFFSET
    parts, params, start = [], [], 0
    for data_file, rows, _ in files:
        lo, hi = max(offset - start, 0), min(offset + limit - start, rows)
        if lo < hi:
            parts.append(
                "(SELECT * FROM delta_scan(?) WHERE filename = ? "
                "AND file_row_number >= ? AND file_row_number < ? ORDER BY file_row_number)"
            )
            params += [path, data_file, lo, hi]
        start += rows
    if not parts:
        return pa.table({}), start
    return con.execute(" UNION ALL ".join(parts), params).to_arrow_table(), start  # start == total rows


def make_copies() -> dict[str, str]:
    """The bench table, plus delta-rs copies with 122,880-row groups in one file and in 4 MB files."""
    from deltalake import WriterProperties, write_deltalake

    data = next(f for f in MAIN.glob("*.parquet") if pq.ParquetFile(f).metadata.num_rows)
    table = pq.read_table(data)
    small = WriterProperties(max_row_group_size=122_880)
    copies = {"spark layout (1 row group)": str(MAIN)}
    for name, target in (("122,880-row groups", None), ("4 MB files x 122,880-row groups", 4 * 1024 * 1024)):
        folder = COPIES / name.replace(" ", "_").replace(",", "")
        if not (folder / "_delta_log").is_dir():
            write_deltalake(folder, table, writer_properties=small, target_file_size=target)
        copies[name] = str(folder)
    return copies


def query(con: duckdb.DuckDBPyConnection, sql: str, path: str) -> list[tuple[object, ...]]:
    return con.execute(sql, [path]).fetchall()


def timed(fn: Callable[[], object], repeats: int = 20) -> str:
    """Median and minimum wall time of ``fn`` after two warmup calls."""
    for _ in range(2):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return f"median {statistics.median(samples):6.1f} ms  min {min(samples):6.1f} ms"


def main(extra: list[str]) -> None:
    """Compare the reads on the bench table, its copies and any Delta tables named in ``extra``."""
    con = connect()
    tables = {**make_copies(), **{p: p for p in extra}}
    for name, path in tables.items():
        files = con.execute("SELECT count(*) FROM delta_list_files(?)", [path]).fetchone()
        located = located_page(con, path, PAGE, OFFSET)
        same = located is not None and located[0].equals(offset_page(con, path, PAGE, OFFSET))
        print(f"{name} ({files[0] if files else '?'} data files): same rows as LIMIT/OFFSET: {same}")
        variants: dict[str, Callable[[], object]] = {
            "LIMIT/OFFSET over delta_scan": partial(offset_page, con, path, PAGE, OFFSET),
            "delta_list_files + file_row_number": partial(located_page, con, path, PAGE, OFFSET),
            "count(*) over delta_scan": partial(query, con, "SELECT count(*) FROM delta_scan(?)", path),
            "DESCRIBE over delta_scan": partial(query, con, "DESCRIBE SELECT * FROM delta_scan(?)", path),
        }
        for label, fn in variants.items():
            print(f"  {label:<36}{timed(fn)}")


if __name__ == "__main__":
    main(sys.argv[1:])
