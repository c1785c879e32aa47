"""Cell-level diffs between two sets of rows keyed by ``row_id``, computed in DuckDB.

A diff compares a *before* and an *after* relation that share the table's columns:

* a row only in *after* is an **insert**: one entry, ``column`` None, ``new`` the row;
* a row only in *before* is a **delete**: one entry, ``column`` None, ``old`` the row;
* a row in both yields one **update** entry per column whose value differs.

Values are compared and reported as DuckDB's text form, so the diff reads the same for
every column type. Entries are ordered by ``row_id`` then column, and paged in DuckDB:
the first page of a diff of 100,000 cells never leaves the database whole.

``row_diff`` shapes the same comparison as rows (what an approver reads): one entry per
changed row with its identifying columns (``label_columns``, a dataset setting), a
summary of the whole diff, filters by kind and column, and ``export_row_diff`` writes
the whole diff as CSV or Parquet. A ``DiffSource`` says what is compared; change
requests and History build theirs (``change_requests.diff_source``,
``history.version_diff_source``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from core import audit, datasets, reads, storage
from core.auth import Role, User, require_role
from core.catalog import Catalog, DatasetRow
from core.errors import EngineError, InvalidInput, NotFound

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
    # The total is a scalar subquery of the changes, not ``count(*) OVER ()``: DuckDB 1.5.5's
    # window races over input with an empty block, as the parts of this UNION ALL often are
    # (duckdb#22352), and its internal error invalidates the process's database (core.duck).
    sql = (
        f"WITH changes AS MATERIALIZED ({body}) SELECT *, (SELECT count(*) FROM changes) AS total "
        "FROM changes ORDER BY row_id, col NULLS FIRST LIMIT ? OFFSET ?"
    )
    try:
        try:
            rows = reads.cursor().execute(sql, [*params, int(limit), int(offset)]).fetchall()
        except Exception as exc:  # duckdb.Error and its many subclasses
            if not reads.recover(exc):
                raise
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
    try:
        kinds = _staged_kinds(staging)
        selects, params = _staged_selects(main, version, staging, columns, present, kinds)
        if not selects:
            return DiffPage(changes=[], total=0)
        rows = _staged_page(" UNION ALL ".join(selects), params, limit, offset)
    except Exception as exc:  # duckdb.Error and its many subclasses
        raise EngineError(f"DuckDB could not compute the diff: {str(exc).splitlines()[0]}") from exc
    return DiffPage(changes=[_change(r) for r in rows if r[0] is not None], total=int(rows[0][5]))


def _staged_kinds(staging: str) -> dict[str, list[str]]:
    """Each ``_op`` the staging table holds, with the columns its rows' ``_changed`` lists name."""
    return {
        str(op): [str(c) for c in changed if c is not None]
        for op, changed in reads.cursor()
        .execute(
            "SELECT _op, list(DISTINCT c) FROM (SELECT _op, unnest(list_append(coalesce(_changed, []), NULL)) "
            "AS c FROM delta_scan(?)) GROUP BY _op",
            [staging],
        )
        .fetchall()
    }


# A staged table is read once per use, so each use reads only the columns it needs.
_STAGED = "delta_scan(?)"
_MAIN_SCAN = "delta_scan(?, version => ?)"


def _json_row(alias: str, columns: list[str]) -> str:
    """SQL of the row ``alias`` as a JSON text of ``columns``."""
    q, lit = reads.quote_ident, reads.quote_literal
    return "CAST(json_object(" + ", ".join(f"{lit(c)}, {alias}.{q(c)}" for c in columns) + ") AS VARCHAR)"


def _staged_selects(
    main: str, version: int, staging: str, columns: list[str], present: set[str], kinds: dict[str, list[str]]
) -> tuple[list[str], list[Any]]:
    """One SELECT of diff entries per kind of staged row, and their parameters in order."""
    selects: list[str] = []
    params: list[Any] = []
    if "update" in kinds:
        data = [c for c in columns if c != "row_id"]
        changed = set(kinds.get("update", []))
        compared = [c for c in data if c in changed or c not in present]
        selects.append(_updates_select(columns, compared, present))
        params += [staging, main, int(version), staging]
    if "insert" in kinds:
        selects.append(
            f"SELECT row_id, 'insert' AS change, NULL AS col, NULL AS old, {_json_row('s', columns)} AS new "
            f"FROM {_STAGED} s WHERE _op = 'insert'"
        )
        params += [staging]
    if "delete" in kinds:
        selects.append(
            f"SELECT row_id, 'delete' AS change, NULL AS col, {_json_row('b', columns)} AS old, NULL AS new FROM "
            f"(SELECT {select_list(columns, present)} FROM {_MAIN_SCAN} "
            f"WHERE row_id IN (SELECT row_id FROM {_STAGED} WHERE _op = 'delete')) b"
        )
        params += [main, int(version), staging]
    return selects, params


def _updates_select(columns: list[str], compared: list[str], present: set[str]) -> str:
    """The entries of staged updates, compared with ``main`` on the ``compared`` columns only.

    One pass: a staged update yields its differing cells, or an insert when main lacks its row.
    """
    q, lit = reads.quote_ident, reads.quote_literal
    cells = ", ".join(
        f"{{'k': 'update', 'c': {lit(c)}, 'o': CAST(b.{q(c)} AS VARCHAR), 'n': CAST(s.{q(c)} AS VARCHAR)}}"
        for c in compared
    )
    inserted = f"[{{'k': 'insert', 'c': NULL, 'o': NULL, 'n': {_json_row('s', columns)}}}]"
    kept = "".join(", " + (q(c) if c in present else f"NULL AS {q(c)}") for c in compared)
    return f"""
                SELECT row_id, cell.k AS change, cell.c AS col, cell.o AS old, cell.n AS new FROM (
                    SELECT s.row_id,
                           unnest(CASE WHEN b.row_id IS NULL THEN {inserted} ELSE [{cells}] END) AS cell
                    FROM {_STAGED} s LEFT JOIN (
                        SELECT row_id{kept}
                        FROM {_MAIN_SCAN} WHERE row_id IN (SELECT row_id FROM {_STAGED} WHERE _op = 'update')
                    ) b ON b.row_id = s.row_id
                    WHERE s._op = 'update'
                ) WHERE cell.k = 'insert' OR cell.o IS DISTINCT FROM cell.n"""


def _staged_page(body: str, params: list[Any], limit: int, offset: int) -> list[Any]:
    """One page of the entries of ``body`` (ordered by row and column), each row with the total."""
    sql = f"""
            WITH body AS MATERIALIZED ({body}),
            page AS (SELECT * FROM body ORDER BY row_id, col NULLS FIRST LIMIT ? OFFSET ?)
            SELECT page.*, counts.total FROM (SELECT count(*) AS total FROM body) AS counts
            LEFT JOIN page ON true ORDER BY page.row_id, page.col NULLS FIRST
        """
    return reads.cursor().execute(sql, [*params, int(limit), int(offset)]).fetchall()


# ---------------------------------------------------------------- the row-shaped diff
#
# What an approver reads: one entry per changed row, not per cell. An update carries its
# changed cells (old -> new), an insert its whole new row, a delete its whole old row; each
# row also carries the values of the dataset's identifying columns (``label_columns``).
# Rows are found, counted and paged in DuckDB; only one page of values leaves it.

SchemaDeltaKind = Literal["add", "drop", "retype"]
KINDS: tuple[ChangeKind, ...] = ("update", "insert", "delete")
MAX_LABEL_COLUMNS = 3


@dataclass(frozen=True)
class CellChange:
    """One cell of a changed row; ``(row_id, column)`` names it on every screen."""

    column: str
    old: str | None
    new: str | None

    def to_json(self) -> dict[str, Any]:
        return {"column": self.column, "old": self.old, "new": self.new}


@dataclass(frozen=True)
class RowChange:
    """A changed row: an update's changed cells, or every cell of an inserted or deleted row.

    Values are DuckDB's text form, as in ``Change``; a cell absent on one side is None.
    """

    row_id: str
    kind: ChangeKind
    labels: dict[str, str | None]  # the identifying columns: the new value, or the old for a delete
    cells: tuple[CellChange, ...]

    @property
    def row(self) -> dict[str, str | None] | None:
        """The whole new row of an insert, the whole old row of a delete (None for an update)."""
        if self.kind == "update":
            return None
        return {c.column: c.new if self.kind == "insert" else c.old for c in self.cells}

    def to_json(self) -> dict[str, Any]:
        return {
            "row_id": self.row_id,
            "kind": self.kind,
            "labels": dict(self.labels),
            "cells": [c.to_json() for c in self.cells],
            "row": self.row,
        }


@dataclass(frozen=True)
class SchemaDelta:
    """A column the change adds, drops or gives another type."""

    column: str
    change: SchemaDeltaKind
    from_type: str | None
    to_type: str | None

    def to_json(self) -> dict[str, Any]:
        return {"column": self.column, "change": self.change, "from": self.from_type, "to": self.to_type}

    def describe(self) -> str:
        if self.change == "add":
            return f"adds column {self.column} ({self.to_type})"
        if self.change == "drop":
            return f"drops column {self.column} ({self.from_type})"
        return f"changes {self.column}: {self.from_type} → {self.to_type}"


def schema_deltas(before: list[reads.Column], after: list[reads.Column]) -> list[SchemaDelta]:
    """The columns ``after`` adds, drops or retypes compared with ``before`` (in ``after``'s order, drops last)."""
    old = {c.name: c.type for c in before}
    new = {c.name: c.type for c in after}
    found = [
        SchemaDelta(c.name, "retype" if c.name in old else "add", old.get(c.name), c.type)
        for c in after
        if old.get(c.name) != c.type
    ]
    return found + [SchemaDelta(c.name, "drop", c.type, None) for c in before if c.name not in new]


@dataclass(frozen=True)
class DiffSummary:
    """The whole diff at a glance: rows per kind, updated cells per column, schema changes."""

    updated: int
    inserted: int
    deleted: int
    columns: dict[str, int]  # column -> updated rows whose cell in it changed, most first
    schema: tuple[SchemaDelta, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "rows_updated": self.updated,
            "rows_inserted": self.inserted,
            "rows_deleted": self.deleted,
            "columns": dict(self.columns),
            "schema_changes": [s.to_json() for s in self.schema],
        }


@dataclass(frozen=True)
class RowDiffPage:
    rows: list[RowChange]
    total: int  # rows matching the filters
    summary: DiffSummary  # of the whole diff, whatever the filters
    label_columns: list[str]
    columns: list[str]  # the compared columns, row_id first

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": [r.to_json() for r in self.rows],
            "total": self.total,
            "summary": self.summary.to_json(),
            "label_columns": list(self.label_columns),
        }


@dataclass(frozen=True)
class DiffSource:
    """What a row diff compares: the rows before and after (both with ``columns``), and the schema change."""

    before: Relation
    after: Relation
    columns: list[str]  # row_id first
    schema: tuple[SchemaDelta, ...] = ()


# The source of a diff with nothing to show (a rejected or withdrawn request).
EMPTY_SOURCE = DiffSource(
    before=Relation("SELECT NULL::VARCHAR AS row_id WHERE false", []),
    after=Relation("SELECT NULL::VARCHAR AS row_id WHERE false", []),
    columns=["row_id"],
)


@dataclass(frozen=True)
class RowFilterSpec:
    """Which changed rows to show: of these kinds (None: all), changing any of these columns (None: any).

    A row changes a column when its value there differs, an absent row counting as all
    NULL: an update whose cell changed, an insert or a delete with a value in it.
    """

    kinds: tuple[ChangeKind, ...] | None = None
    columns: tuple[str, ...] | None = None


def check_filters(kinds: list[str] | None, columns: list[str] | None, known: list[str] | None) -> RowFilterSpec:
    """A ``RowFilterSpec`` from user input, refusing an unknown kind or column (``InvalidInput``).

    ``known`` is the diff's columns (None: a diff with nothing to show, whose columns are not checked).
    """
    for kind in kinds or []:
        if kind not in KINDS:
            raise InvalidInput(f"unknown change kind {kind!r}; use one of: {', '.join(KINDS)}", field="kind")
    data = [c for c in known or [] if c != "row_id"]
    for column in columns or []:
        if known is not None and column not in data:
            raise InvalidInput(f"the diff has no column {column!r}; its columns are: {', '.join(data)}", field="column")
    return RowFilterSpec(
        kinds=tuple(dict.fromkeys(kinds)) if kinds else None,  # type: ignore[arg-type]
        columns=tuple(dict.fromkeys(columns)) if columns else None,
    )


def _text_cols(side: str, data: list[str]) -> list[str]:
    q = reads.quote_ident
    return [f"CAST({side}.{q(c)} AS VARCHAR)" for c in data]


def _found_sql(source: DiffSource) -> tuple[str, list[Any]]:
    """The CTEs ``b``, ``a`` and ``j`` (row_id, kind, changed columns) of every changed row."""
    lit = reads.quote_literal
    data = [c for c in source.columns if c != "row_id"]
    tb, ta = _text_cols("b", data), _text_cols("a", data)
    if data:
        flags = ", ".join(
            f"CASE WHEN {o} IS DISTINCT FROM {n} THEN {lit(c)} END" for c, o, n in zip(data, tb, ta, strict=True)
        )
        changed = f"list_filter([{flags}], x -> x IS NOT NULL)"
    else:
        changed = "[]::VARCHAR[]"
    sql = f"""
        b AS ({source.before.sql}), a AS ({source.after.sql}),
        j AS MATERIALIZED (
            SELECT * FROM (
                SELECT coalesce(a.row_id, b.row_id) AS row_id,
                       CASE WHEN b.row_id IS NULL THEN 'insert' WHEN a.row_id IS NULL THEN 'delete'
                            ELSE 'update' END AS kind,
                       {changed} AS changed
                FROM b FULL OUTER JOIN a ON a.row_id = b.row_id
            ) WHERE kind <> 'update' OR len(changed) > 0
        )"""
    return sql, [*source.before.params, *source.after.params]


def _where(spec: RowFilterSpec, of: str = "j") -> str:
    lit = reads.quote_literal
    parts = ["true"]
    if spec.kinds:
        parts.append(f"{of}.kind IN ({', '.join(lit(k) for k in spec.kinds)})")
    if spec.columns:
        parts.append(f"list_has_any({of}.changed, [{', '.join(lit(c) for c in spec.columns)}]::VARCHAR[])")
    return " AND ".join(parts)


def row_diff(
    source: DiffSource,
    *,
    label_columns: list[str] | None = None,
    spec: RowFilterSpec | None = None,
    limit: int = 50,
    offset: int = 0,
) -> RowDiffPage:
    """One page of the row-shaped diff of ``source``, with the summary of the whole diff, in one query.

    Args:
        source: What to compare.
        label_columns: Identifying columns to carry with each row (those the diff lacks are left out).
        spec: Which rows to page through; the summary always counts the whole diff.
        limit: Rows per page, 1..10,000.
        offset: Rows to skip (ordered by ``row_id``).

    Raises:
        InvalidInput: Bad limit or offset.
        EngineError: DuckDB could not read the tables.
    """
    reads.check_page(limit, offset)
    spec = spec or RowFilterSpec()
    data = [c for c in source.columns if c != "row_id"]
    labels = [c for c in label_columns or [] if c in data]
    found, params = _found_sql(source)
    tb, ta = _text_cols("b", data), _text_cols("a", data)
    old = f"CASE WHEN b.row_id IS NULL THEN NULL ELSE [{', '.join(tb)}]::VARCHAR[] END"
    new = f"CASE WHEN a.row_id IS NULL THEN NULL ELSE [{', '.join(ta)}]::VARCHAR[] END"
    sql = f"""
        WITH {found},
        counts AS (
            SELECT count(*) FILTER (WHERE kind = 'update') AS updated,
                   count(*) FILTER (WHERE kind = 'insert') AS inserted,
                   count(*) FILTER (WHERE kind = 'delete') AS deleted
            FROM j
        ),
        per_column AS (
            SELECT list({{'c': c, 'n': n}} ORDER BY n DESC, c) AS per_column FROM (
                SELECT c, count(*) AS n FROM (SELECT unnest(changed) AS c FROM j WHERE kind = 'update') GROUP BY c
            )
        ),
        f AS (SELECT row_id, kind, changed FROM j WHERE {_where(spec)}),
        total AS (SELECT count(*) AS total FROM f),
        page AS (SELECT * FROM f ORDER BY row_id LIMIT ? OFFSET ?),
        shown AS (
            SELECT p.row_id, p.kind, p.changed, {old} AS old, {new} AS new
            FROM page p LEFT JOIN b ON b.row_id = p.row_id LEFT JOIN a ON a.row_id = p.row_id
        )
        SELECT shown.row_id, shown.kind, shown.changed, shown.old, shown.new,
               counts.updated, counts.inserted, counts.deleted, per_column.per_column, total.total
        FROM counts CROSS JOIN per_column CROSS JOIN total LEFT JOIN shown ON true
        ORDER BY shown.row_id
    """
    try:
        result = reads.cursor().execute(sql, [*params, int(limit), int(offset)]).fetchall()
    except Exception as exc:  # duckdb.Error and its many subclasses
        raise EngineError(f"DuckDB could not compute the diff: {str(exc).splitlines()[0]}") from exc
    first = result[0]
    summary = DiffSummary(
        updated=int(first[5]),
        inserted=int(first[6]),
        deleted=int(first[7]),
        columns={str(e["c"]): int(e["n"]) for e in first[8] or []},
        schema=tuple(source.schema),
    )
    rows = [_row_change(r, data, labels) for r in result if r[0] is not None]
    return RowDiffPage(
        rows=rows, total=int(first[9]), summary=summary, label_columns=labels, columns=list(source.columns)
    )


def _row_change(r: tuple[Any, ...], data: list[str], labels: list[str]) -> RowChange:
    row_id, kind, changed, old, new = r[:5]
    old_values = dict(zip(data, old, strict=True)) if old is not None else {}
    new_values = dict(zip(data, new, strict=True)) if new is not None else {}
    shown = [c for c in data if c in set(changed)] if kind == "update" else data
    cells = tuple(CellChange(c, old_values.get(c), new_values.get(c)) for c in shown)
    side = old_values if kind == "delete" else new_values
    return RowChange(row_id=str(row_id), kind=kind, labels={c: side.get(c) for c in labels}, cells=cells)


ExportFormat = Literal["csv", "parquet"]


def export_row_diff(source: DiffSource, out: Path, *, fmt: ExportFormat, spec: RowFilterSpec | None = None) -> int:
    """Write the whole row diff (every page, filtered by ``spec``) to ``out``; returns the rows written.

    One row per changed row: ``row_id``, ``kind``, ``changed_columns`` (comma-separated),
    then ``old.<column>`` and ``new.<column>`` for every column, with the table's types
    (NULL on the side where the row is absent). Written by DuckDB beside ``out`` and
    renamed into place, so a failed export leaves no file.

    Raises:
        InvalidInput: Unknown format, or ``out`` names object storage.
        EngineError: DuckDB could not read the tables or write the file.
    """
    out = storage.local_file(out)
    if fmt not in ("csv", "parquet"):
        raise InvalidInput(f"unknown export format {fmt!r}; use csv or parquet", field="format")
    q, lit = reads.quote_ident, reads.quote_literal
    spec = spec or RowFilterSpec()
    data = [c for c in source.columns if c != "row_id"]
    found, params = _found_sql(source)
    values = "".join(f", b.{q(c)} AS {q('old.' + c)}, a.{q(c)} AS {q('new.' + c)}" for c in data)
    partial = out.with_name(f".{out.name}.partial")
    options = "FORMAT parquet" if fmt == "parquet" else "FORMAT csv, HEADER true"
    sql = f"""
        COPY (
            WITH {found}
            SELECT j.row_id, j.kind, array_to_string(j.changed, ',') AS changed_columns{values}
            FROM j LEFT JOIN b ON b.row_id = j.row_id LEFT JOIN a ON a.row_id = j.row_id
            WHERE {_where(spec)}
            ORDER BY j.row_id
        ) TO {lit(str(partial))} ({options})
    """
    try:
        written = reads.cursor().execute(sql, params).fetchone()
        partial.replace(out)
    except Exception as exc:  # duckdb.Error and its many subclasses, or the rename
        partial.unlink(missing_ok=True)
        raise EngineError(f"DuckDB could not export the diff: {str(exc).splitlines()[0]}") from exc
    return int(written[0]) if written else 0


# ---------------------------------------------------------------- identifying columns


@dataclass(frozen=True, kw_only=True)
class LabelColumnsChanged(audit.AuditEvent):
    name = "dataset_label_columns_changed"
    label_columns: list[str] | None  # None: back to the default


def default_label_columns(key_column: str | None, columns: list[reads.Column]) -> list[str]:
    """The key (if the dataset has one besides ``row_id``) plus the first two text columns."""
    chosen = [key_column] if key_column and key_column != "row_id" and key_column in {c.name for c in columns} else []
    texts = [c.name for c in columns if c.type == "VARCHAR" and c.name != "row_id" and c.name not in chosen]
    return (chosen + texts[:2])[:MAX_LABEL_COLUMNS]


def label_columns(catalog: Catalog, project_id: str, dataset_id: str, *, actor: User) -> list[str]:
    """The identifying columns of a dataset's diffs: its setting (columns it still has), else the default.

    Raises:
        NotFound: Unknown dataset.
        PermissionDenied: ``actor`` is not a member of the project.
    """
    info = datasets.get_dataset(catalog, project_id, dataset_id, actor=actor)
    columns = datasets.dataset_columns(info)
    with catalog.session() as s:
        row = s.get(DatasetRow, (project_id, dataset_id))
        stored = row.label_columns if row is not None else None
    if stored is None:
        return default_label_columns(info.key_column, columns)
    names = {c.name for c in columns}
    return [c for c in json.loads(stored) if c in names]


def set_label_columns(
    catalog: Catalog, project_id: str, dataset_id: str, columns: list[str] | None, *, actor: User
) -> list[str]:
    """Name a dataset's identifying columns (admins); None or [] restores the default. Returns them.

    Raises:
        InvalidInput: More than three columns, a repeated column, or one the table lacks.
        NotFound: Unknown dataset.
        PermissionDenied: ``actor`` is not an admin of the project.
    """
    info = datasets.get_dataset(catalog, project_id, dataset_id, actor=actor)
    require_role(catalog, actor, project_id, Role.ADMIN, action="change a dataset's identifying columns")
    chosen = list(columns or [])
    if len(chosen) > MAX_LABEL_COLUMNS:
        raise InvalidInput(
            f"at most {MAX_LABEL_COLUMNS} identifying columns, got {len(chosen)}: {', '.join(chosen)}",
            field="label_columns",
        )
    if len(set(chosen)) != len(chosen):
        raise InvalidInput(f"an identifying column is named twice: {', '.join(chosen)}", field="label_columns")
    names = [c.name for c in datasets.dataset_columns(info) if c.name != "row_id"]
    unknown = [c for c in chosen if c not in names]
    if unknown:
        raise InvalidInput(
            f"{project_id}/{dataset_id} has no column {unknown[0]!r}; its columns are: {', '.join(names)}",
            field="label_columns",
        )
    with catalog.session() as s:
        row = s.get(DatasetRow, (project_id, dataset_id))
        if row is None:
            raise NotFound(f"unknown dataset {project_id}/{dataset_id}", kind="dataset", ident=dataset_id)
        row.label_columns = json.dumps(chosen) if chosen else None
        audit.record(
            s,
            LabelColumnsChanged(
                actor=actor.username, project_id=project_id, dataset_id=dataset_id, label_columns=chosen or None
            ),
        )
    return label_columns(catalog, project_id, dataset_id, actor=actor)
