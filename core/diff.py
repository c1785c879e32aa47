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
from core.errors import EngineError

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
    reads.check_page(limit, offset)
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
    return DiffPage(changes=[_change(r) for r in rows], total=total)


def _change(r: tuple[Any, ...]) -> Change:
    """An entry from a diff query's row (row_id, change, column, old, new, ...)."""
    return Change(
        row_id=r[0],
        change=r[1],
        column=r[2],
        old=json.loads(r[3]) if r[1] == "delete" else r[3],
        new=json.loads(r[4]) if r[1] == "insert" else r[4],
    )


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
    reads.check_page(limit, offset)
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
    changes = [_change(r) for r in rows if r[0] is not None]
    return DiffPage(changes=changes, total=total), RowCounts(inserted=inserted, updated=updated, deleted=deleted)


def staged_diff(
    main: str,
    version: int,
    staging: str,
    columns: list[str],
    present: set[str],
    *,
    limit: int = 100,
    offset: int = 0,
) -> DiffPage:
    """One page of a staged change request's diff against ``main`` at its base ``version``.

    The entries are those of ``diff`` with *before* the ``main`` rows the request touches
    and *after* its staged rows, but ``main`` is read only where an entry can come from:

    * an ``update`` row is compared on the columns its request changes (the union of the
      staged ``_changed`` lists, plus the columns ``main`` lacks at ``version``): a staged
      row carries every other column as it was at the base version, and a merge applies
      only those columns, so the others can never differ;
    * a ``delete`` row's whole old row is read, from ``main`` filtered to the deleted ids;
    * an ``insert`` (or an ``update`` whose row ``main`` lacks) is the staged row alone.

    A first small query over the staging table finds which kinds of rows and which
    columns the request holds, so a branch with nothing to show never scans ``main``.

    Args:
        main: The main table's path.
        version: The request's base version.
        staging: The staging table's path (``row_id``, the data columns, ``_op``, ``_changed``).
        columns: The staged data columns, ``row_id`` first.
        present: The columns ``main`` has at ``version``.
        limit: Page size, 1..10,000.
        offset: Entries to skip.

    Raises:
        InvalidInput: Bad limit or offset.
        EngineError: DuckDB could not read the tables.
    """
    reads.check_page(limit, offset)
    q, lit = reads.quote_ident, reads.quote_literal
    try:
        kinds = {
            str(op): [str(c) for c in changed if c is not None]
            for op, changed in reads.cursor()
            .execute(
                "SELECT _op, list(DISTINCT c) FROM (SELECT _op, unnest(list_append(coalesce(_changed, []), NULL)) "
                "AS c FROM delta_scan(?)) GROUP BY _op",
                [staging],
            )
            .fetchall()
        }
        data = [c for c in columns if c != "row_id"]
        changed = set(kinds.get("update", []))
        compared = [c for c in data if c in changed or c not in present]
        staged = "delta_scan(?)"  # read once per use, so each use reads only the columns it needs
        main_scan = "delta_scan(?, version => ?)"
        new_row = "CAST(json_object(" + ", ".join(f"{lit(c)}, s.{q(c)}" for c in columns) + ") AS VARCHAR)"
        old_row = "CAST(json_object(" + ", ".join(f"{lit(c)}, b.{q(c)}" for c in columns) + ") AS VARCHAR)"
        selects: list[str] = []
        params: list[Any] = []
        if "update" in kinds:
            # One pass: a staged update yields its differing cells, or an insert when main lacks its row.
            cells = ", ".join(
                f"{{'k': 'update', 'c': {lit(c)}, 'o': CAST(b.{q(c)} AS VARCHAR), 'n': CAST(s.{q(c)} AS VARCHAR)}}"
                for c in compared
            )
            inserted = f"[{{'k': 'insert', 'c': NULL, 'o': NULL, 'n': {new_row}}}]"
            kept = "".join(", " + (q(c) if c in present else f"NULL AS {q(c)}") for c in compared)
            selects.append(f"""
                SELECT row_id, cell.k AS change, cell.c AS col, cell.o AS old, cell.n AS new FROM (
                    SELECT s.row_id,
                           unnest(CASE WHEN b.row_id IS NULL THEN {inserted} ELSE [{cells}] END) AS cell
                    FROM {staged} s LEFT JOIN (
                        SELECT row_id{kept}
                        FROM {main_scan} WHERE row_id IN (SELECT row_id FROM {staged} WHERE _op = 'update')
                    ) b ON b.row_id = s.row_id
                    WHERE s._op = 'update'
                ) WHERE cell.k = 'insert' OR cell.o IS DISTINCT FROM cell.n""")
            params += [staging, main, int(version), staging]
        if "insert" in kinds:
            selects.append(
                f"SELECT row_id, 'insert' AS change, NULL AS col, NULL AS old, {new_row} AS new "
                f"FROM {staged} s WHERE _op = 'insert'"
            )
            params += [staging]
        if "delete" in kinds:
            selects.append(
                f"SELECT row_id, 'delete' AS change, NULL AS col, {old_row} AS old, NULL AS new FROM "
                f"(SELECT {select_list(columns, present)} FROM {main_scan} "
                f"WHERE row_id IN (SELECT row_id FROM {staged} WHERE _op = 'delete')) b"
            )
            params += [main, int(version), staging]
        if not selects:
            return DiffPage(changes=[], total=0)
        body = " UNION ALL ".join(selects)
        sql = f"""
            WITH body AS MATERIALIZED ({body}),
            page AS (SELECT * FROM body ORDER BY row_id, col NULLS FIRST LIMIT ? OFFSET ?)
            SELECT page.*, counts.total FROM (SELECT count(*) AS total FROM body) AS counts
            LEFT JOIN page ON true ORDER BY page.row_id, page.col NULLS FIRST
        """
        rows = reads.cursor().execute(sql, [*params, int(limit), int(offset)]).fetchall()
    except Exception as exc:  # duckdb.Error and its many subclasses
        raise EngineError(f"DuckDB could not compute the diff: {str(exc).splitlines()[0]}") from exc
    return DiffPage(changes=[_change(r) for r in rows if r[0] is not None], total=int(rows[0][5]))
