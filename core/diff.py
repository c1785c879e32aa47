"""Cell-level diffs between two sets of rows keyed by ``row_id``, computed in DuckDB.

A diff compares a *before* and an *after* relation that share the table's columns:

* a row only in *after* is an **insert**: one entry, ``column`` None, ``new`` the row;
* a row only in *before* is a **delete**: one entry, ``column`` None, ``old`` the row;
* a row in both yields one **update** entry per column whose value differs.

Values are compared and reported as DuckDB's text form, so the diff reads the same for
every column type. Entries are ordered by ``row_id`` then column, and paged in DuckDB:
the first page of a diff of 100,000 cells never leaves the database whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from core import reads
from core.errors import EngineError, InvalidInput

ChangeKind = Literal["insert", "update", "delete"]


@dataclass(frozen=True)
class Change:
    row_id: str
    change: ChangeKind
    column: str | None
    old: Any
    new: Any

    def to_json(self) -> dict[str, Any]:
        return {"row_id": self.row_id, "change": self.change, "column": self.column, "old": self.old, "new": self.new}


@dataclass(frozen=True)
class DiffPage:
    changes: list[Change]
    total: int


@dataclass(frozen=True)
class Relation:
    """A SQL ``SELECT`` (with ``?`` parameters) producing ``row_id`` and the compared columns."""

    sql: str
    params: list[Any]


def select_list(columns: list[str], present: set[str]) -> str:
    """A ``SELECT`` list of ``columns``, with NULL for those a version lacks (added later)."""
    q = reads.quote_ident
    return ", ".join(q(c) if c in present else f"NULL AS {q(c)}" for c in columns)


def _changes_sql(before: Relation, after: Relation, columns: list[str]) -> tuple[str, list[Any]]:
    q, lit = reads.quote_ident, reads.quote_literal
    cols = [c for c in columns if c != "row_id"]
    text_b = ", ".join(f"CAST(b.{q(c)} AS VARCHAR) AS {q('b_' + str(i))}" for i, c in enumerate(cols))
    text_a = ", ".join(f"CAST(a.{q(c)} AS VARCHAR) AS {q('a_' + str(i))}" for i, c in enumerate(cols))
    row_b = "json_object(" + ", ".join(f"{lit(c)}, b.{q(c)}" for c in columns) + ")"
    row_a = "json_object(" + ", ".join(f"{lit(c)}, a.{q(c)}" for c in columns) + ")"
    differs = " OR ".join(f"{q('b_' + str(i))} IS DISTINCT FROM {q('a_' + str(i))}" for i in range(len(cols)))
    cells = ", ".join(
        f"{{'c': {lit(c)}, 'o': {q('b_' + str(i))}, 'n': {q('a_' + str(i))}}}" for i, c in enumerate(cols)
    )
    sql = f"""
        WITH b AS ({before.sql}), a AS ({after.sql}),
        j AS (
            SELECT coalesce(a.row_id, b.row_id) AS row_id,
                   a.row_id IS NULL AS is_delete, b.row_id IS NULL AS is_insert,
                   CASE WHEN a.row_id IS NULL THEN {row_b} END AS old_row,
                   CASE WHEN b.row_id IS NULL THEN {row_a} END AS new_row
                   {", " + text_b if cols else ""} {", " + text_a if cols else ""}
            FROM b FULL OUTER JOIN a ON a.row_id = b.row_id
        ),
        updates AS (
            SELECT row_id, unnest([{cells}]) AS cell FROM j
            WHERE NOT is_delete AND NOT is_insert AND ({differs or "false"})
        )
        SELECT row_id, 'update' AS change, cell.c AS col, cell.o AS old, cell.n AS new
        FROM updates WHERE cell.o IS DISTINCT FROM cell.n
        UNION ALL
        SELECT row_id, 'insert', NULL, NULL, CAST(new_row AS VARCHAR) FROM j WHERE is_insert
        UNION ALL
        SELECT row_id, 'delete', NULL, CAST(old_row AS VARCHAR), NULL FROM j WHERE is_delete
    """
    return sql, [*before.params, *after.params]


def diff(before: Relation, after: Relation, columns: list[str], *, limit: int = 100, offset: int = 0) -> DiffPage:
    """One page of the cell-level diff from ``before`` to ``after``.

    Args:
        before: The rows as they were.
        after: The rows as they are (or would be).
        columns: The columns to compare; both relations must have them and ``row_id``.
        limit: Page size, 1..10,000.
        offset: Entries to skip.

    Raises:
        InvalidInput: Bad limit or offset.
        EngineError: DuckDB could not read the tables.
    """
    if not 1 <= int(limit) <= 10_000:
        raise InvalidInput(f"limit must be between 1 and 10000, got {limit}", field="limit")
    if int(offset) < 0:
        raise InvalidInput(f"offset must be >= 0, got {offset}", field="offset")
    body, params = _changes_sql(before, after, columns)
    sql = f"SELECT *, count(*) OVER () AS total FROM ({body}) ORDER BY row_id, col NULLS FIRST LIMIT ? OFFSET ?"
    try:
        rows = reads.cursor().execute(sql, [*params, int(limit), int(offset)]).fetchall()
        if rows:
            total = int(rows[0][5])
        else:
            found = reads.cursor().execute(f"SELECT count(*) FROM ({body})", params).fetchone()
            total = int(found[0]) if found else 0
    except Exception as exc:  # duckdb.Error and its many subclasses
        raise EngineError(f"DuckDB could not compute the diff: {str(exc).splitlines()[0]}") from exc
    changes = [
        Change(
            row_id=r[0],
            change=r[1],
            column=r[2],
            old=json.loads(r[3]) if r[1] == "delete" else r[3],
            new=json.loads(r[4]) if r[1] == "insert" else r[4],
        )
        for r in rows
    ]
    return DiffPage(changes=changes, total=total)


@dataclass(frozen=True)
class RowCounts:
    """Rows a whole diff inserts, updates (one or more cells) and deletes."""

    inserted: int
    updated: int
    deleted: int


def counted_diff(
    before: Relation, after: Relation, columns: list[str], *, limit: int = 100, offset: int = 0
) -> tuple[DiffPage, RowCounts]:
    """One page of the diff (as ``diff``) and the row counts of the whole diff, in one query.

    The changes are materialised once, so the page, ``total`` and the counts all come
    from a single pass over ``before`` and ``after``.

    Raises:
        InvalidInput: Bad limit or offset.
        EngineError: DuckDB could not read the tables.
    """
    if not 1 <= int(limit) <= 10_000:
        raise InvalidInput(f"limit must be between 1 and 10000, got {limit}", field="limit")
    if int(offset) < 0:
        raise InvalidInput(f"offset must be >= 0, got {offset}", field="offset")
    body, params = _changes_sql(before, after, columns)
    sql = f"""
        WITH body AS MATERIALIZED ({body}),
        counts AS (
            SELECT count(*) AS total,
                   count(*) FILTER (WHERE change = 'insert') AS inserted,
                   count(DISTINCT row_id) FILTER (WHERE change = 'update') AS updated,
                   count(*) FILTER (WHERE change = 'delete') AS deleted
            FROM body
        ),
        page AS (SELECT * FROM body ORDER BY row_id, col NULLS FIRST LIMIT ? OFFSET ?)
        SELECT page.*, counts.* FROM counts LEFT JOIN page ON true ORDER BY page.row_id, page.col NULLS FIRST
    """
    try:
        rows = reads.cursor().execute(sql, [*params, int(limit), int(offset)]).fetchall()
    except Exception as exc:  # duckdb.Error and its many subclasses
        raise EngineError(f"DuckDB could not compute the diff: {str(exc).splitlines()[0]}") from exc
    total, inserted, updated, deleted = (int(v) for v in rows[0][5:9])
    changes = [
        Change(
            row_id=r[0],
            change=r[1],
            column=r[2],
            old=json.loads(r[3]) if r[1] == "delete" else r[3],
            new=json.loads(r[4]) if r[1] == "insert" else r[4],
        )
        for r in rows
        if r[0] is not None
    ]
    return DiffPage(changes=changes, total=total), RowCounts(inserted=inserted, updated=updated, deleted=deleted)
