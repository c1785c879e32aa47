"""The row-shaped diff on the command line (``--rows`` of ``oreo cr show`` and ``oreo diff``).

Shared by both commands: the options, the filters they pass to core, the JSON they add
beside today's cell entries and the lines a person reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from core import diff
from core.errors import InvalidInput
from interface.documents import row_diff_doc

RowsOption = Annotated[
    bool, typer.Option("--rows", help="Also show the diff row by row (JSON: row_diff {rows, total, summary, ...}).")
]
KindOption = Annotated[
    list[str] | None,
    typer.Option("--kind", help="With --rows: only rows of this kind (update, insert, delete); repeatable."),
]
ColumnOption = Annotated[
    list[str] | None, typer.Option("--column", help="With --rows: only rows changing this column; repeatable.")
]
ExportOption = Annotated[
    Path | None,
    typer.Option(
        "--export",
        help="With --rows: write the whole row diff (filtered, every page) to this .csv or .parquet file.",
    ),
]


def export_format(path: Path) -> diff.ExportFormat:
    """The export format a file name asks for (``.csv`` or ``.parquet``)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix == ".parquet":
        return "parquet"
    raise InvalidInput(f"--export {path} must end in .csv or .parquet", field="export")


def check_rows_options(rows: bool, kinds: list[str] | None, columns: list[str] | None, export: Path | None) -> None:
    """Refuse row options given without ``--rows`` (a usage error, exit 2)."""
    if not rows and (kinds or columns or export):
        raise typer.BadParameter("--kind, --column and --export need --rows", param_hint="--rows")
    if export is not None:
        export_format(export)


def rows_doc(page: diff.RowDiffPage, exported: tuple[Path, int] | None) -> dict[str, Any]:
    """The key ``--rows`` adds to a command's JSON document: ``row_diff`` (its other keys stay as they are)."""
    return row_diff_doc(page, exported)


def rows_lines(page: diff.RowDiffPage, exported: tuple[Path, int] | None) -> list[str]:
    """The row diff as a person reads it: the summary, then one line per row."""
    s = page.summary
    lines = [f"rows: {s.updated} updated, {s.inserted} inserted, {s.deleted} deleted; {page.total} match the filters"]
    if s.columns:
        lines.append("columns: " + ", ".join(f"{c} ({n})" for c, n in s.columns.items()))
    lines += [f"schema: {d.describe()}" for d in s.schema]
    for row in page.rows:
        labels = ", ".join(f"{k}={v}" for k, v in row.labels.items())
        head = f"  {row.kind:<7} {row.row_id}" + (f" ({labels})" if labels else "")
        if row.kind == "update":
            body = "; ".join(f"{c.column}: {c.old} -> {c.new}" for c in row.cells)
        else:
            body = ", ".join(f"{k}={v}" for k, v in (row.row or {}).items())
        lines.append(f"{head}  {body}")
    if exported is not None:
        lines.append(f"exported {exported[1]:,} row(s) to {exported[0]}")
    return lines
