"""``oreo dataset``: create, list, show and configure datasets, and read their rows."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.commands.edits import emit_bulk
from cli.context import AsUser, acting_user, check_session_on, command_catalog, emit
from core import clusters, datasets, diff, facets, sessions
from core.errors import InvalidInput
from core.filters import parse_where
from core.reads import RowFilter
from interface import documents

dataset_app = typer.Typer(no_args_is_help=True, help="Datasets: create, list, show, read rows.")


@dataset_app.command("create")
def dataset_create(
    project_id: str,
    dataset_id: str,
    file: Annotated[Path, typer.Option("--file", help="CSV, Parquet or XLSX file.")],
    key: Annotated[str | None, typer.Option("--key", help="Column whose values become row_id.")] = None,
    sheet: Annotated[str | None, typer.Option("--sheet", help="XLSX sheet to read.")] = None,
    as_user: AsUser = None,
) -> None:
    """Create a dataset from a file; Spark writes its main Delta table."""
    catalog = command_catalog()
    info = datasets.create_dataset(
        catalog, project_id, dataset_id, file, key=key, sheet=sheet, actor=acting_user(catalog, as_user)
    )
    emit(
        documents.dataset_doc(info),
        f"created {info.project_id}/{info.dataset_id}: {info.rows:,} rows, version {info.version}",
    )


@dataset_app.command("list")
def dataset_list(project_id: Annotated[str | None, typer.Argument()] = None, as_user: AsUser = None) -> None:
    """List datasets (of one project, or of every visible project)."""
    catalog = command_catalog()
    items = datasets.list_datasets(catalog, actor=acting_user(catalog, as_user), project_id=project_id)
    emit(
        {"datasets": [documents.dataset_doc(i) for i in items]},
        "\n".join(f"{i.project_id}/{i.dataset_id:<30} v{i.version}  {i.rows:,} rows" for i in items) or "no datasets",
    )


@dataset_app.command("show")
def dataset_show(project_id: str, dataset_id: str, as_user: AsUser = None) -> None:
    """Show a dataset's version, row count, columns and path."""
    catalog = command_catalog()
    info = datasets.get_dataset(catalog, project_id, dataset_id, actor=acting_user(catalog, as_user))
    doc = documents.dataset_show_doc(info, datasets.dataset_columns(info))
    columns = doc["columns"]
    human = "\n".join(
        [
            f"{info.project_id}/{info.dataset_id}  version {info.version}  {info.rows:,} rows",
            f"path: {info.path}",
            f"last commit: {info.last_commit_id}",
            "columns:",
            *[f"  {c['name']:<24} {c['type']}" for c in columns],
        ]
    )
    emit(doc, human)


@dataset_app.command("set")
def dataset_set(
    project_id: str,
    dataset_id: str,
    allow_non_finite: Annotated[
        str | None,
        typer.Option(
            "--allow-non-finite",
            help="true: edits and imports may store NaN and ±Infinity in float columns (default false).",
            metavar="true|false",
        ),
    ] = None,
    as_user: AsUser = None,
) -> None:
    """Change a dataset's settings (admins); prints all of them."""
    allow = None if allow_non_finite is None else _parse_bool(allow_non_finite, "--allow-non-finite")
    catalog = command_catalog()
    settings = datasets.set_dataset_settings(
        catalog, project_id, dataset_id, actor=acting_user(catalog, as_user), allow_non_finite=allow
    )
    doc = {"project": project_id, "dataset": dataset_id, **settings.to_json()}
    emit(doc, f"{project_id}/{dataset_id}: allow_non_finite={str(settings.allow_non_finite).lower()}")


@dataset_app.command("label-columns")
def dataset_label_columns(
    project_id: str,
    dataset_id: str,
    columns: Annotated[list[str] | None, typer.Argument(help="Up to 3 columns; none: show the current ones.")] = None,
    reset: Annotated[bool, typer.Option("--reset", help="Back to the default: key + first two text columns.")] = False,
    as_user: AsUser = None,
) -> None:
    """Show or set the identifying columns diffs show beside each row's key (setting: admins)."""
    if reset and columns:
        raise typer.BadParameter("give COLUMNS or --reset, not both", param_hint="--reset")
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    if columns or reset:
        chosen = diff.set_label_columns(catalog, project_id, dataset_id, columns or None, actor=actor)
    else:
        chosen = diff.label_columns(catalog, project_id, dataset_id, actor=actor)
    emit(
        {"project": project_id, "dataset": dataset_id, "label_columns": chosen},
        f"{project_id}/{dataset_id}: identifying columns {', '.join(chosen) or '(none)'}",
    )


def _parse_bool(value: str, option: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise typer.BadParameter(f"must be true or false, got {value!r}", param_hint=option)
    return lowered == "true"


def _parse_filters(specs: list[str], op: str) -> list[RowFilter]:
    filters = []
    for spec in specs:
        column, sep, value = spec.partition("=")
        if not sep or not column:
            raise typer.BadParameter(
                f"{spec!r} must look like COLUMN=VALUE", param_hint=f"--{'filter' if op == 'eq' else 'contains'}"
            )
        filters.append(RowFilter(column=column, value=value, op=op))  # type: ignore[arg-type]
    return filters


@dataset_app.command("rows")
def dataset_rows(
    project_id: str,
    dataset_id: str,
    version: Annotated[int | None, typer.Option("--version", help="Read as of this version.")] = None,
    filter_: Annotated[list[str] | None, typer.Option("--filter", help="COLUMN=VALUE (exact), repeatable.")] = None,
    contains: Annotated[
        list[str] | None, typer.Option("--contains", help="COLUMN=TEXT (substring), repeatable.")
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            help="COLUMN OP VALUE, repeatable, ANDed; OP is = != < <= > >=, between A and B, contains, "
            "starts with, is empty, is not empty, in (A,B,...).",
        ),
    ] = None,
    order_by: Annotated[str | None, typer.Option("--order-by", help="Sort the whole table by this column.")] = None,
    desc: Annotated[bool, typer.Option("--desc", help="Sort descending.")] = False,
    limit: Annotated[int, typer.Option("--limit", help="Rows per page.")] = 50,
    offset: Annotated[int, typer.Option("--offset", help="Rows to skip.")] = 0,
    session_id: Annotated[str | None, typer.Option("--session", help="Apply this live-edit session's overlay.")] = None,
    as_user: AsUser = None,
) -> None:
    """Read a page of rows through DuckDB (optionally with a session's edits applied).

    Rows are in the dataset's stable order (its key, else the order they were added)
    unless --order-by sorts the whole table.
    """
    catalog = command_catalog()
    filters = _parse_filters(filter_ or [], "eq") + _parse_filters(contains or [], "contains")
    conditions = [parse_where(text) for text in where or []]
    if session_id is not None:
        if version is not None:
            raise typer.BadParameter("--session shows pending edits over the latest version; drop --version")
        actor = acting_user(catalog, as_user)
        check_session_on(catalog, session_id, project_id, dataset_id, actor)
        page = sessions.overlay_page(
            catalog,
            session_id,
            actor=actor,
            filters=filters,
            conditions=conditions,
            order_by=order_by,
            descending=desc,
            limit=limit,
            offset=offset,
        )
        emit(documents.rows_doc(page), page.rows.to_string(index=False))
        return
    page = datasets.dataset_rows(
        catalog,
        project_id,
        dataset_id,
        actor=acting_user(catalog, as_user),
        version=version,
        filters=filters,
        conditions=conditions,
        order_by=order_by,
        descending=desc,
        limit=limit,
        offset=offset,
    )
    doc = documents.rows_doc(page)
    human = page.rows.to_string(index=False) + f"\n({len(page.rows)} of {page.total} rows)"
    emit(doc, human)


Where = Annotated[
    list[str] | None,
    typer.Option("--where", help="COLUMN OP VALUE, repeatable, ANDed (the grammar of `dataset rows --where`)."),
]
SessionOption = Annotated[
    str | None, typer.Option("--session", help="Read the table as this live-edit session's edits leave it.")
]


@dataset_app.command("facet")
def dataset_facet(
    project_id: str,
    dataset_id: str,
    column: str,
    where: Where = None,
    limit: Annotated[int, typer.Option("--limit", help="How many of the most frequent values (1-1000).")] = 20,
    session_id: SessionOption = None,
    as_user: AsUser = None,
) -> None:
    """A column's most frequent values with their row counts, its distinct values, and (numbers, dates) a histogram."""
    catalog = command_catalog()
    facet = facets.dataset_facet(
        catalog, project_id, dataset_id, column, actor=acting_user(catalog, as_user),
        conditions=[parse_where(text) for text in where or []], session_id=session_id, limit=limit,
    )  # fmt: skip
    width = max([len(_shown(v.value)) for v in facet.values] + [5])
    lines = [f"{column} ({facet.type}): {facet.rows:,} rows, {facet.distinct:,} distinct values"]
    lines += [f"  {_shown(v.value):<{width}}  {v.rows:>9,}" for v in facet.values]
    if facet.histogram:
        most = max(b.rows for b in facet.histogram) or 1
        lines.append("histogram:")
        lines += [f"  {b.low!s:>26} .. {b.high!s:<26} {'#' * round(20 * b.rows / most):<20} {b.rows:,}"
                  for b in facet.histogram]  # fmt: skip
    emit({"project": project_id, "dataset": dataset_id, **facet.to_json()}, "\n".join(lines))


def _shown(value: str | None) -> str:
    return "(empty)" if value is None else repr(value) if value != value.strip() or not value else value


@dataset_app.command("clusters")
def dataset_clusters(
    project_id: str,
    dataset_id: str,
    column: str,
    method: Annotated[
        str, typer.Option("--method", help="How values are compared.", metavar="fingerprint|ngram|levenshtein")
    ] = "fingerprint",
    radius: Annotated[int, typer.Option("--radius", help="levenshtein: the most edits between neighbours (1-3).")] = 1,
    ngram_size: Annotated[int, typer.Option("--ngram-size", help="ngram: the n-grams' length (1-8).")] = 2,
    where: Where = None,
    session_id: SessionOption = None,
    as_user: AsUser = None,
    merge: Annotated[
        list[str] | None,
        typer.Option(
            "--merge",
            help="Merge the cluster with this key or value (repeatable): one bulk change.",
            metavar="KEY_OR_VALUE",
        ),
    ] = None,
    merge_all: Annotated[bool, typer.Option("--merge-all", help="Merge every cluster found.")] = False,
    into: Annotated[
        str | None, typer.Option("--into", help="With one --merge: the value it becomes (default: its most frequent).")
    ] = None,
    preview: Annotated[
        bool, typer.Option("--preview", help="With --merge: show what it would do; save nothing.")
    ] = False,
) -> None:
    """Groups of a text column's values that probably mean the same thing, each with its values' row counts.

    With --merge or --merge-all, the clusters named become their chosen values in your live-edit session,
    as one pending change (--preview: nothing is saved).
    """
    catalog = command_catalog()
    conditions = [parse_where(text) for text in where or []]
    if merge or merge_all or into is not None or preview:
        if bool(merge) == merge_all:
            raise InvalidInput("give --merge KEY_OR_VALUE (repeatable) or --merge-all", field="merge")
        result = clusters.merge_named(
            catalog, project_id, dataset_id, column, None if merge_all else list(merge or []),
            actor=acting_user(catalog, as_user), into=into, preview=preview,
            method=method,  # type: ignore[arg-type]  # core refuses another name
            radius=radius, ngram_size=ngram_size, conditions=conditions, session_id=session_id,
        )  # fmt: skip
        emit_bulk(result)
        return
    found = clusters.dataset_clusters(
        catalog, project_id, dataset_id, column, actor=acting_user(catalog, as_user),
        method=method,  # type: ignore[arg-type]  # core refuses another name
        radius=radius, ngram_size=ngram_size, conditions=conditions, session_id=session_id,
    )  # fmt: skip
    values = sum(len(c.values) for c in found.clusters)
    lines = [f"{column}: {len(found.clusters):,} clusters of {values:,} values by {found.method} "
             f"({found.distinct:,} distinct values)"]  # fmt: skip
    for cluster in found.clusters:
        lines.append(f"  {_shown(cluster.choice)}  <- {len(cluster.values)} values, {cluster.rows:,} rows")
        lines += [f"    {v.rows:>9,}  {_shown(v.value)}" for v in cluster.values]
    emit({"project": project_id, "dataset": dataset_id, **found.to_json()}, "\n".join(lines))
