"""Change every matching row: one operation on one column of the rows a filter keeps.

The operations (``Operation``):

* ``SetValue`` - every matching cell becomes one typed value (None empties it);
* ``Replace`` - find and replace in the cell's text: the whole value, a substring, or a
  regular expression (Python's ``re``, checked before use), case-sensitive or not;
* ``Transform`` - ``trim``, ``collapse`` (each run of whitespace becomes one space),
  ``upper``, ``lower``, ``title`` (each word capitalized); ``round`` to N places for
  numbers; ``number`` and ``date`` to rewrite text holding numbers or dates with an
  explicit format into plain numbers and ISO dates.

The rows are the table as the session sees it: ``main`` at the session's base version
with its pending edits laid over it (``core.reads.matching_values``), filtered by the
filter bar's conditions in DuckDB. Each distinct current value is mapped once, in
Python, and every new value goes through ``core.values`` (the path a typed cell takes),
so the value typed is the value that lands. One value the column cannot hold refuses
the whole change, naming its first rows; nothing is saved.

``preview_bulk`` counts the matching and changing rows and shows a sample; ``apply_bulk``
stores the change in the session in one append (``core.sessions``: a ``__bulk__`` marker
describing it, recording the base version, and one ordinary cell update per changed
cell, tagged with the bulk's id), so diff, conflicts, validation and merge see ordinary
cell edits. ``undo_bulk`` restores the cells in one append. ``pending_view`` groups a
session's pending changes with each live bulk change as one line.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Literal, get_args

import pyarrow as pa
import pyarrow.compute as pc
import regex

from core import reads, sessions
from core.auth import User
from core.catalog import Catalog
from core.config import get_settings
from core.datasets import DatasetInfo, dataset_settings, get_dataset, layout_for
from core.duck import cursor
from core.errors import InvalidInput, NotFound
from core.filters import Condition, check_conditions, describe, from_param, to_param
from core.layout import DatasetLayout, new_id
from core.storage import location
from core.values import canonical_texts, check_value, type_family

Mode = Literal["whole", "substring", "regex"]
MODES: tuple[Mode, ...] = get_args(Mode)
TransformName = Literal["trim", "collapse", "upper", "lower", "title", "round", "number", "date"]
TRANSFORMS: tuple[TransformName, ...] = get_args(TransformName)
TEXT_TRANSFORMS = frozenset({"trim", "collapse", "upper", "lower", "title", "number", "date"})
SAMPLE_ROWS = 20
NAMED_ROWS = 3
_SCALAR = frozenset({"text", "integer", "decimal", "float", "boolean", "date", "timestamp", "timestamptz"})
_NUMERIC = frozenset({"integer", "decimal", "float"})


@dataclass(frozen=True)
class SetValue:
    """Every matching cell becomes ``value`` (None: empty)."""

    value: Any


@dataclass(frozen=True)
class Replace:
    """``find`` becomes ``replace``: as the whole value, within it, or as a regular expression."""

    find: str
    replace: str
    mode: Mode = "substring"
    ignore_case: bool = False


@dataclass(frozen=True)
class Transform:
    """A named transform; ``places`` for ``round``, ``fmt`` for ``number`` and ``date``."""

    name: TransformName
    places: int = 0
    fmt: str = ""


@dataclass(frozen=True)
class Recode:
    """Whole values replaced by others: a cell whose text is ``old`` in a pair ``(old, new)`` becomes ``new``.

    A cluster merge (``core.clusters``) is one: every value of each merged cluster becomes its chosen value.
    """

    pairs: tuple[tuple[str, str], ...]


Operation = SetValue | Replace | Transform | Recode


def parse_transform(spec: str) -> Transform:
    """``trim``, ``collapse``, ``upper``, ``lower``, ``title``, ``round:N``, ``number:SEP`` or ``date:FORMAT``.

    Raises:
        InvalidInput: Another name, or a missing or bad argument.
    """
    name, _, arg = spec.strip().partition(":")
    if name not in TRANSFORMS:
        raise InvalidInput(
            f"unknown transform {spec!r}; use {', '.join(TRANSFORMS[:5])}, round:N, number:SEP or date:FORMAT",
            field="transform",
        )
    if name == "round":
        try:
            return Transform("round", places=int(arg))
        except ValueError:
            raise InvalidInput(f"round needs a whole number of places, as round:2; got {spec!r}") from None
    if name in ("number", "date"):
        return Transform(name, fmt=arg)  # type: ignore[arg-type]
    if arg:
        raise InvalidInput(f"transform {name} takes no argument; got {spec!r}", field="transform")
    return Transform(name)  # type: ignore[arg-type]


def operation_json(operation: Operation) -> dict[str, Any]:
    """The operation as JSON (``kind`` and its fields)."""
    if isinstance(operation, SetValue):
        value = operation.value
        return {"kind": "set", "value": value if value is None or isinstance(value, str | bool | int) else str(value)}
    if isinstance(operation, Replace):
        return {"kind": "replace", "find": operation.find, "replace": operation.replace, "mode": operation.mode,
                "ignore_case": operation.ignore_case}  # fmt: skip
    if isinstance(operation, Recode):
        return {"kind": "recode", "pairs": [list(pair) for pair in operation.pairs]}
    return {"kind": "transform", "name": operation.name, "places": operation.places, "fmt": operation.fmt}


def _operation_from_json(doc: dict[str, Any]) -> Operation:
    if doc["kind"] == "set":
        return SetValue(doc["value"])
    if doc["kind"] == "replace":
        return Replace(doc["find"], doc["replace"], doc["mode"], bool(doc["ignore_case"]))
    if doc["kind"] == "recode":
        return Recode(tuple((str(old), str(new)) for old, new in doc["pairs"]))
    return Transform(doc["name"], int(doc["places"]), doc["fmt"])


def summary(column: str, operation: Operation, rows: int) -> str:
    """One line, as the pending list shows a bulk change: ``city: find 'N.Y.' → 'New York' in 1,204 rows``."""
    if isinstance(operation, SetValue):
        what = "set to ∅" if operation.value is None else f"set to {str(operation.value)!r}"
    elif isinstance(operation, Replace):
        kind = {"whole": "replace value", "substring": "find", "regex": "find regex"}[operation.mode]
        case = " (any case)" if operation.ignore_case else ""
        what = f"{kind} {operation.find!r} → {operation.replace!r}{case}"
    elif isinstance(operation, Recode):
        what = _recode_summary(operation)
    elif operation.name == "round":
        what = f"round to {operation.places} places"
    elif operation.name in ("number", "date"):
        what = f"{operation.name} from format {operation.fmt!r}"
    else:
        what = operation.name
    return f"{column}: {what} in {rows:,} row{'' if rows == 1 else 's'}"


def _recode_summary(operation: Recode) -> str:
    """``merge 'N.Y.', 'NY' → 'New York'`` (a few values shown, the rest counted)."""
    targets: dict[str, list[str]] = {}
    for old, new in operation.pairs:
        targets.setdefault(new, []).append(old)
    shown = []
    for new, olds in list(targets.items())[:2]:
        more = f" +{len(olds) - 3}" if len(olds) > 3 else ""
        shown.append(f"{', '.join(repr(o) for o in olds[:3])}{more} → {new!r}")
    rest = f"; and {len(targets) - 2} more clusters" if len(targets) > 2 else ""
    return f"merge {'; '.join(shown)}{rest}"


# ---------------------------------------------------------------- the value of one cell


class _Refused(Exception):
    """A current value an operation cannot turn into a new one (``why`` completes the message)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def value_function(operation: Replace | Transform | Recode, family: str) -> Callable[[str], str]:
    """The function from a cell's current text to its new text (None cells stay None).

    Raises:
        InvalidInput: A bad regular expression, an empty search, a transform the column's
            type does not take, or a bad format.
    """
    if isinstance(operation, Replace):
        return _replacer(operation)
    if isinstance(operation, Recode):
        table = dict(operation.pairs)
        if not table or len(table) != len(operation.pairs):
            raise InvalidInput("a recode needs each value to replace once, and at least one", field="pairs")
        return lambda text: table.get(text, text)
    name = operation.name
    if name in TEXT_TRANSFORMS and family != "text":
        raise InvalidInput(f"transform {name} applies to text columns; this one holds {family} values")
    if name == "round":
        if family not in _NUMERIC:
            raise InvalidInput(f"round applies to number columns; this one holds {family} values")
        if not -18 <= operation.places <= 18:
            raise InvalidInput(f"round takes -18 to 18 places, got {operation.places}", field="transform")
        step = Decimal(1).scaleb(-operation.places)
        return lambda text: _rounded(text, step)
    if name == "number":
        return _number_parser(operation.fmt)
    if name == "date":
        return _date_parser(operation.fmt)
    return _TEXT_FUNCTIONS[name]


def _title(text: str) -> str:
    return re.sub(r"\S+", lambda m: m[0][:1].upper() + m[0][1:].lower(), text)


_TEXT_FUNCTIONS: dict[str, Callable[[str], str]] = {
    "trim": str.strip,
    "collapse": lambda text: re.sub(r"\s+", " ", text),
    "upper": str.upper,
    "lower": str.lower,
    "title": _title,
}


def compile_pattern(operation: Replace) -> regex.Pattern[str]:
    """The operation's search as a compiled pattern (a literal one unless ``mode`` is regex).

    Patterns use the ``regex`` module (Python's ``re`` syntax), whose matching takes a time
    limit: a pattern that backtracks without end is stopped (``_replacer``).

    Raises:
        InvalidInput: An empty search, or a regular expression that does not compile.
    """
    if operation.mode not in MODES:
        raise InvalidInput(f"unknown replace mode {operation.mode!r}; use {', '.join(MODES)}", field="mode")
    if operation.find == "" and operation.mode != "whole":
        raise InvalidInput("the text to find is empty; give the text (or pattern) to replace", field="find")
    flags = regex.IGNORECASE if operation.ignore_case else 0
    if operation.mode != "regex":
        return regex.compile(regex.escape(operation.find), flags)
    try:
        return regex.compile(operation.find, flags | regex.VERSION0)
    except regex.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise InvalidInput(
            f"bad regular expression {operation.find!r}: {exc.msg}{where}; nothing was saved", field="find"
        ) from exc


def _replacer(operation: Replace) -> Callable[[str], str]:
    """The replace as a function of a value; all its calls share ``OREO_BULK_REGEX_S`` seconds of matching."""
    pattern = compile_pattern(operation)
    if operation.mode == "regex":
        _check_template(pattern, operation.replace)
    budget = float(get_settings().bulk_regex_s)
    deadline: list[float] = []

    def left() -> float:
        if not deadline:
            deadline.append(time.monotonic() + budget)
        return max(deadline[0] - time.monotonic(), 0.001)

    def replaced(text: str) -> str:
        try:
            if operation.mode == "whole":
                return operation.replace if pattern.fullmatch(text, timeout=left()) else text
            if operation.mode == "substring":
                return pattern.sub(lambda _m: operation.replace, text, timeout=left())
            return pattern.sub(operation.replace, text, timeout=left())
        except TimeoutError:
            raise InvalidInput(
                f"the search {operation.find!r} took more than {budget:g} s over the matching values "
                "(OREO_BULK_REGEX_S); simplify the pattern or narrow the rows; nothing was saved",
                field="find",
            ) from None

    return replaced


def _check_template(pattern: regex.Pattern[str], template: str) -> None:
    """Refuse a replacement whose ``\\1`` or ``\\g<name>`` names no group of ``pattern``."""
    groups = [None] * pattern.groups
    for ref in re.finditer(r"\\(?:g<([^>]*)>|(\d+))", template):
        name = ref.group(1) if ref.group(1) is not None else ref.group(2)
        known = name in pattern.groupindex or (name.isdigit() and int(name) <= len(groups))
        if not known:
            raise InvalidInput(
                f"the replacement {template!r} refers to group {name!r}, which the pattern does not have",
                field="replace",
            )


def _rounded(text: str, step: Decimal) -> str:
    try:
        number = Decimal(text)
    except InvalidOperation:
        return text
    if not number.is_finite():
        return text  # NaN and infinities have no places to round
    return format(number.quantize(step, rounding=ROUND_HALF_UP) if step < 1 else _round_whole(number, step), "f")


def _round_whole(number: Decimal, step: Decimal) -> Decimal:
    return (number / step).quantize(Decimal(1), rounding=ROUND_HALF_UP) * step


def _number_parser(separator: str) -> Callable[[str], str]:
    """Text such as ``1.234,5`` (separator ``,``) or ``1,234.5`` (``.``) to ``1234.5``."""
    if separator not in (".", ","):
        raise InvalidInput(
            f"number needs its decimal separator, number:. or number:, ; got {separator!r}", field="transform"
        )
    grouping = "," if separator == "." else "."
    plain = re.compile(r"[+-]?\d+(?:\.\d+)?", re.ASCII)

    def parse(text: str) -> str:
        cleaned = re.sub(r"[\s'_\u00a0\u202f]", "", text.strip()).replace(grouping, "")
        cleaned = cleaned.replace(separator, ".")
        if not plain.fullmatch(cleaned):
            raise _Refused(f"is not a number written with {separator!r} as its decimal separator")
        return cleaned

    return parse


def _date_parser(fmt: str) -> Callable[[str], str]:
    """Text in the ``strptime`` format ``fmt`` to ``YYYY-MM-DD`` (with ``HH:MM:SS`` if it has a time)."""
    if "%" not in fmt:
        raise InvalidInput(f"date needs a strptime format, as date:%d/%m/%Y; got {fmt!r}", field="transform")
    timed = any(d in fmt for d in ("%H", "%I", "%M", "%S", "%p"))

    def parse(text: str) -> str:
        try:
            moment = datetime.strptime(text.strip(), fmt)
        except ValueError:
            raise _Refused(f"does not match the date format {fmt!r}") from None
        return moment.strftime("%Y-%m-%d %H:%M:%S" if timed else "%Y-%m-%d")

    return parse


# ---------------------------------------------------------------- computing a change


@dataclass(frozen=True)
class SampleRow:
    """One changing row: its cells (as text, pending edits applied) and the column before → after."""

    row_id: str
    before: str | None
    after: str | None
    values: dict[str, str | None]


@dataclass(frozen=True)
class BulkPreview:
    """What a bulk change would do; nothing is saved."""

    project_id: str
    dataset_id: str
    column: str
    operation: Operation
    conditions: tuple[Condition, ...]
    base_version: int
    matched: int
    changed: int
    sample: tuple[SampleRow, ...]
    session_id: str | None = None

    @property
    def unchanged(self) -> int:
        return self.matched - self.changed

    @property
    def summary(self) -> str:
        return summary(self.column, self.operation, self.changed)

    def to_json(self) -> dict[str, Any]:
        return {
            "project_id": self.project_id, "dataset_id": self.dataset_id, "session_id": self.session_id,
            "column": self.column, "operation": operation_json(self.operation),
            "where": [describe(c) for c in self.conditions], "base_version": self.base_version,
            "matched": self.matched, "changed": self.changed, "unchanged": self.unchanged, "summary": self.summary,
            "sample": [
                {"row_id": s.row_id, "before": s.before, "after": s.after, "row": s.values} for s in self.sample
            ],
        }  # fmt: skip


@dataclass(frozen=True)
class _Computed:
    preview: BulkPreview
    row_ids: pa.Array = field(repr=False)  # the changing rows, in table order
    old: pa.Array = field(repr=False)  # each cell's value at the base version (None for an added row)
    new: pa.Array = field(repr=False)


@dataclass(frozen=True)
class _Scope:
    """Where a change is computed: a dataset at a version, with a session's pending edits or none."""

    dataset: DatasetInfo
    version: int
    schema: dict[str, str]
    session: sessions.SessionInfo | None
    folded: pa.Table = field(repr=False)  # the session's net changes (``sessions.fold_events``)


def _scope(
    catalog: Catalog, project_id: str, dataset_id: str, session: sessions.SessionInfo | None, actor: User
) -> _Scope:
    dataset = get_dataset(catalog, project_id, dataset_id, actor=actor)
    version = session.base_version if session is not None else int(dataset.version or 0)
    schema = {c.name: c.type for c in reads.table_schema(location(dataset.path), version)}
    layout = layout_for(project_id, dataset_id)
    events = sessions.read_events(layout, session.session_id) if session else sessions.EDITS_SCHEMA.empty_table()
    return _Scope(dataset, version, schema, session, sessions.fold_events(events))


def _check_column(scope: _Scope, column: str) -> str:
    if column not in scope.schema:
        raise NotFound(f"unknown column {column!r}; columns are: {', '.join(scope.schema)}", kind="column")
    if column == "row_id" or column == scope.dataset.key_column:
        raise InvalidInput(f"column {column!r} identifies the row and cannot be changed", field="column")
    family = type_family(scope.schema[column])
    if family not in _SCALAR:
        raise InvalidInput(f"column {column!r} holds {scope.schema[column]} values; bulk changes take plain columns")
    return family


def _compute(
    scope: _Scope, column: str, operation: Operation, conditions: list[Condition], *, sample: bool = True
) -> _Computed:
    """Match, map and check: the changing rows with their base and new values, and the preview.

    ``sample``: read the first changing rows whole for the preview (an apply shows none).
    """
    family = _check_column(scope, column)
    checked = check_conditions(list(conditions), scope.schema)
    mapping = None if isinstance(operation, SetValue) else value_function(operation, family)
    if isinstance(operation, Replace):
        check_value(operation.replace, column=column, duck_type="VARCHAR")  # no lone surrogate in what is typed
    # Built once: on a session holding a million-row bulk change it is seconds of reads and joins.
    overlay = sessions.overlay_of(scope.dataset, scope.folded, scope.version, leave_out_deleted=True)
    matched = _matching(scope, column, checked, overlay)
    cap = get_settings().max_bulk_rows
    if matched.num_rows > cap:
        raise InvalidInput(
            f"this change matches {matched.num_rows:,} rows; one bulk change may change at most {cap:,} "
            "(OREO_MAX_BULK_ROWS); narrow the filter",
            field="where",
        )
    current = matched.column("value").combine_chunks()
    row_ids = matched.column("row_id").combine_chunks()
    new = _new_values(scope, column, operation, mapping, row_ids, current)
    changing = pc.fill_null(pc.not_equal(current, new), True)
    changing = pc.and_not(changing, pc.and_(pc.is_null(current), pc.is_null(new)))
    ids, before, after = (pc.filter(a, changing) for a in (row_ids, current, new))
    preview = BulkPreview(
        project_id=scope.dataset.project_id,
        dataset_id=scope.dataset.dataset_id,
        column=column,
        operation=operation,
        conditions=tuple(checked),
        base_version=scope.version,
        matched=matched.num_rows,
        changed=len(ids),
        sample=_sample(scope, overlay, ids, before, after) if sample else (),
        session_id=scope.session.session_id if scope.session else None,
    )
    return _Computed(preview, ids, _base_values(scope, column, ids, before), after)


def _matching(scope: _Scope, column: str, conditions: list[Condition], overlay: reads.Overlay | None) -> pa.Table:
    """``row_id`` and the column's current text of the matching rows (a row deleted in the session is not one)."""
    matched = reads.matching_values(
        location(scope.dataset.path),
        scope.version,
        column,
        conditions=conditions,
        overlay=overlay,
        known_total=scope.dataset.rows if scope.version == scope.dataset.version else None,
    )
    if overlay is not None and overlay.removed:
        deleted = pa.array(sorted(overlay.removed), pa.string())
        matched = matched.filter(pc.invert(pc.is_in(matched.column("row_id"), value_set=deleted)))
    return matched


def _new_values(
    scope: _Scope,
    column: str,
    operation: Operation,
    mapping: Callable[[str], str] | None,
    row_ids: pa.Array,
    current: pa.Array,
) -> pa.Array:
    """Each matching row's new text, checked by ``core.values``; the first refused value names its rows."""
    allow = dataset_settings(scope.dataset.project_id, scope.dataset.dataset_id).allow_non_finite
    duck_type = scope.schema[column]
    if mapping is None:
        assert isinstance(operation, SetValue)
        distinct: list[str | None] = [None]
        proposed: list[Any] = [operation.value]
    else:
        distinct = pc.unique(current).to_pylist()
        proposed = []
        for value in distinct:
            try:
                proposed.append(None if value is None else mapping(value))
            except _Refused as exc:
                _refuse(column, value, exc.why, row_ids, current, set_all=False)
    checked = canonical_texts(proposed, column=column, duck_type=duck_type, allow_non_finite=allow)
    for value, result in zip(distinct, checked, strict=True):
        if isinstance(result, InvalidInput):
            why = str(result).removesuffix("; nothing was saved").split(": ", 1)[-1]
            _refuse(column, value, why, row_ids, current, set_all=mapping is None)
    if mapping is None:
        return pa.repeat(pa.scalar(checked[0], pa.string()), len(current))
    positions = pc.index_in(current, value_set=pa.array(distinct, pa.string()), skip_nulls=False)
    return pc.take(pa.array(checked, pa.string()), positions)


def _refuse(column: str, value: str | None, why: str, row_ids: pa.Array, current: pa.Array, *, set_all: bool) -> None:
    """Raise the one-line refusal of a value, naming the first rows it comes from."""
    if set_all:
        rows = row_ids
    elif value is None:
        rows = pc.filter(row_ids, pc.is_null(current))
    else:
        rows = pc.filter(row_ids, pc.fill_null(pc.equal(current, value), False))
    named = ", ".join(repr(r) for r in rows.slice(0, NAMED_ROWS).to_pylist())
    more = f" and {len(rows) - NAMED_ROWS:,} more" if len(rows) > NAMED_ROWS else ""
    source = "" if set_all else f"from {value!r} "
    where = f" in rows {named}{more}" if len(rows) else ""  # a set value is refused even when no row matches
    raise InvalidInput(
        f"column {column!r} cannot hold the new value {source}({why}){where}; nothing was saved",
        field=column,
    )


def _base_values(scope: _Scope, column: str, row_ids: pa.Array, current: pa.Array) -> pa.Array:
    """Each changing cell's value at the base version: its pending edit's old value, None in an added row."""
    folded = scope.folded
    change = folded.column("change")
    mine = pc.and_(pc.equal(change, "update"), pc.fill_null(pc.equal(folded.column("column"), column), False))
    inserted = pc.equal(change, "insert")
    known = folded.filter(pc.or_(mine, inserted))
    if not known.num_rows or not len(row_ids):
        return current
    # An added row's cells are all None; its row_id may repeat (one per cell), which index_in allows.
    olds = pc.if_else(
        pc.equal(known.column("change"), "insert"), pa.scalar(None, pa.string()), known.column("old_value")
    )
    positions = pc.index_in(row_ids, value_set=known.column("row_id").combine_chunks())
    pending = pc.take(olds.combine_chunks() if isinstance(olds, pa.ChunkedArray) else olds, positions)
    return pc.if_else(pc.is_valid(positions), pending, current)


def _sample(
    scope: _Scope, overlay: reads.Overlay | None, ids: pa.Array, before: pa.Array, after: pa.Array
) -> tuple[SampleRow, ...]:
    """The first changing rows, whole (pending edits applied), with the column before → after."""
    first = ids.slice(0, SAMPLE_ROWS).to_pylist()
    if not first:
        return ()
    from_overlay = overlay.rows_of(first) if overlay is not None else {}
    stored = [r for r in first if r not in from_overlay]
    rows = {**reads.read_rows_as_text(location(scope.dataset.path), scope.version, stored), **from_overlay}
    olds, news = before.slice(0, SAMPLE_ROWS).to_pylist(), after.slice(0, SAMPLE_ROWS).to_pylist()
    return tuple(
        SampleRow(row_id, old, new, {c: rows.get(row_id, {}).get(c) for c in scope.schema})
        for row_id, old, new in zip(first, olds, news, strict=True)
    )


# ---------------------------------------------------------------- preview, apply, undo


def preview_bulk(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    column: str,
    operation: Operation,
    *,
    actor: User,
    conditions: list[Condition] | None = None,
    session_id: str | None = None,
) -> BulkPreview:
    """What changing ``column`` of every row matching ``conditions`` would do; nothing is saved.

    Computed over the actor's session (``session_id``, or their open one) as it sees the
    table, or over the latest version without one.

    Raises:
        NotFound: Unknown dataset, session or column.
        PermissionDenied: Not the session's owner, or not an editor.
        InvalidInput: A bad condition, regular expression or transform; more matching rows
            than ``OREO_MAX_BULK_ROWS``; a new value the column cannot hold (naming its rows).
    """
    session = _session(catalog, project_id, dataset_id, session_id, actor)
    scope = _scope(catalog, project_id, dataset_id, session, actor)
    return _compute(scope, column, operation, list(conditions or [])).preview


def _session(
    catalog: Catalog, project_id: str, dataset_id: str, session_id: str | None, actor: User
) -> sessions.SessionInfo | None:
    if session_id is None:
        current = sessions.current_session(catalog, project_id, dataset_id, actor=actor)
        if current is None:
            return None
        session_id = current.session_id
    info, _ = sessions.editable_session(catalog, session_id, actor=actor)  # its owner, still an editor
    if (info.project_id, info.dataset_id) != (project_id, dataset_id):
        raise InvalidInput(
            f"session {session_id} belongs to {info.project_id}/{info.dataset_id}, not {project_id}/{dataset_id}",
            field="session_id",
        )
    return info


@dataclass(frozen=True)
class BulkChange:
    """A bulk change stored in a session: one pending change, undone as one."""

    bulk_id: str
    session_id: str
    column: str
    operation: Operation
    conditions: tuple[Condition, ...]
    base_version: int
    matched: int
    changed: int
    cells: int  # its cells still pending (a cell edited again afterwards is no longer the bulk's)

    @property
    def summary(self) -> str:
        return summary(self.column, self.operation, self.cells)

    def to_json(self) -> dict[str, Any]:
        return {
            "bulk_id": self.bulk_id, "session_id": self.session_id, "column": self.column,
            "operation": operation_json(self.operation), "where": [describe(c) for c in self.conditions],
            "base_version": self.base_version, "matched": self.matched, "changed": self.changed,
            "cells": self.cells, "summary": self.summary,
        }  # fmt: skip


def apply_bulk(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    column: str,
    operation: Operation,
    *,
    actor: User,
    conditions: list[Condition] | None = None,
    session_id: str | None = None,
) -> BulkChange:
    """Change ``column`` of every row matching ``conditions``: one pending change of the session.

    Stored in one append (a marker describing it, then one cell update per changed cell),
    to the session given, the actor's open one, or one started for it (only once the
    change was computed and every value fits).

    Raises:
        As ``preview_bulk``; and InvalidInput when no row would change.
        ConflictError: The session expired, was submitted, or is over its size limit.
    """
    session = _session(catalog, project_id, dataset_id, session_id, actor)
    scope = _scope(catalog, project_id, dataset_id, session, actor)
    computed = _compute(scope, column, operation, list(conditions or []), sample=False)
    if not computed.preview.changed:
        raise InvalidInput(
            f"no row would change: {computed.preview.matched:,} row(s) match and already hold the new value; "
            "nothing was saved",
            field="where",
        )
    if session is None:
        session = sessions.open_session(catalog, project_id, dataset_id, actor=actor)
        if session.base_version != computed.preview.base_version:  # a merge landed in between: compute again
            scope = _scope(catalog, project_id, dataset_id, session, actor)
            computed = _compute(scope, column, operation, list(conditions or []), sample=False)
    bulk_id = new_id("bulk")
    sessions.append_events(layout_for(project_id, dataset_id), session, _events(session, actor, bulk_id, computed))
    p = computed.preview
    return BulkChange(bulk_id, session.session_id, column, operation, p.conditions, p.base_version, p.matched,
                      p.changed, p.changed)  # fmt: skip


def _events(info: sessions.SessionInfo, actor: User, bulk_id: str, computed: _Computed) -> pa.Table:
    """The marker and the cell events of one bulk change, as one Arrow table (``EDITS_SCHEMA``) of two chunks."""
    p = computed.preview
    description = {
        "column": p.column, "operation": operation_json(p.operation), "where": [to_param(c) for c in p.conditions],
        "base_version": p.base_version, "matched": p.matched, "changed": p.changed,
    }  # fmt: skip
    marker_id, cell_ids = sessions.bulk_edit_ids(computed.row_ids)
    now = pa.scalar(datetime.now(UTC), sessions.EDITS_SCHEMA.field("ts").type)
    tag = json.dumps({"bulk": bulk_id})

    def same(value: Any, count: int) -> pa.Array:
        return pa.repeat(value if isinstance(value, pa.Scalar) else pa.scalar(value, pa.string()), count)

    marker = pa.record_batch(
        [same(marker_id, 1), same(info.session_id, 1), same(bulk_id, 1), same(sessions.BULK_MARKER, 1),
         pa.nulls(1, pa.string()), same(json.dumps(description), 1), same(actor.username, 1), same(now, 1),
         same(tag, 1)],
        schema=sessions.EDITS_SCHEMA,
    )  # fmt: skip
    n = p.changed
    cells = pa.record_batch(
        [cell_ids, same(info.session_id, n), computed.row_ids, same(p.column, n), computed.old.cast(pa.string()),
         computed.new.cast(pa.string()), same(actor.username, n), same(now, n), same(tag, n)],
        schema=sessions.EDITS_SCHEMA,
    )  # fmt: skip
    return pa.Table.from_batches([marker, cells])


def undo_bulk(catalog: Catalog, session_id: str, bulk_id: str, *, actor: User) -> int:
    """Take a bulk change back in one append: each of its cells returns to its value before it.

    A cell edited again after the bulk change keeps that later edit. Returns the number
    of cells restored.

    Raises:
        NotFound: The session has no such bulk change, or it was undone already.
        PermissionDenied, ConflictError: As ``core.sessions.editable_session``.
    """
    info, layout = sessions.editable_session(catalog, session_id, actor=actor)
    events = sessions.read_events(layout, session_id)
    markers = events.filter(pc.equal(events.column("column"), sessions.BULK_MARKER)).to_pylist()
    marker = _live_markers(markers).get(bulk_id)
    if marker is None:
        raise NotFound(f"session {session_id} has no pending bulk change {bulk_id!r}", kind="bulk", ident=bulk_id)
    restored = _restoring(events, bulk_id, json.loads(marker["new_value"])["column"])
    rows = restored.column("row_id").combine_chunks()
    marker_id, cell_ids = sessions.bulk_edit_ids(rows)
    count = restored.num_rows + 1

    def column(name: str, marker: str | None) -> pa.Array:
        return pa.concat_arrays([pa.array([marker], pa.string()), restored.column(name).combine_chunks()])

    table = pa.table(
        {
            "edit_id": pa.concat_arrays([pa.array([marker_id]), cell_ids]),
            "session_id": pa.repeat(pa.scalar(session_id, pa.string()), count),
            "row_id": pa.concat_arrays([pa.array([bulk_id]), rows]),
            "column": column("column", sessions.BULK_MARKER),
            "old_value": column("old_value", None),
            "new_value": column("new_value", None),  # the marker's NULL: undone
            "user_id": pa.repeat(pa.scalar(actor.username, pa.string()), count),
            "ts": pa.repeat(pa.scalar(datetime.now(UTC), sessions.EDITS_SCHEMA.field("ts").type), count),
            "validation": column("validation", json.dumps({"bulk": bulk_id})),
        },
        schema=sessions.EDITS_SCHEMA,
    )
    sessions.append_events(layout, info, table)
    return restored.num_rows


def _restoring(events: pa.Table, bulk_id: str, column: str) -> pa.Table:
    """The events that put each cell whose newest event is the bulk's back to its event before."""
    view = f"oreo_events_{new_id('v')}"
    cursor().register(view, events)
    try:
        sql = f"""
            WITH cells AS (
                SELECT row_id, "column", old_value, new_value, validation,
                       row_number() OVER (PARTITION BY row_id, "column" ORDER BY edit_id DESC) AS rank
                FROM {view} WHERE "column" = ?)
            SELECT l.row_id, l."column", l.old_value,
                   CASE WHEN p.rank IS NULL THEN l.old_value ELSE p.new_value END AS new_value,
                   CASE WHEN p.rank IS NULL THEN '{{}}' ELSE p.validation END AS validation
            FROM cells l LEFT JOIN cells p ON p.row_id = l.row_id AND p."column" = l."column" AND p.rank = 2
            WHERE l.rank = 1 AND l.validation = ?"""
        params = [column, json.dumps({"bulk": bulk_id})]
        return cursor().execute(sql, params).to_arrow_table()
    finally:
        cursor().unregister(view)


def _live_markers(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each bulk change of the events not undone: its id and its marker event, oldest first."""
    latest: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["column"] == sessions.BULK_MARKER:
            latest.pop(e["row_id"], None)
            latest[e["row_id"]] = e
    return {bulk_id: e for bulk_id, e in latest.items() if e["new_value"] is not None}


def _bulk_of(validation: str | None, known: dict[str, str | None]) -> str | None:
    if validation is None or not validation.startswith('{"bulk"'):
        return None
    if validation not in known:
        known[validation] = json.loads(validation).get("bulk")
    return known[validation]


def pending_view(layout: DatasetLayout, session_id: str) -> tuple[list[sessions.PendingChange], list[BulkChange]]:
    """A session's pending changes as the pending list shows them: each live bulk change as one.

    Returns the changes that belong to no bulk change (``sessions.pending_changes``) and
    the bulk changes with at least one cell still theirs, oldest first. A cell is a bulk
    change's while its newest event is one of the change's cells.
    """
    events = sessions.read_events(layout, session_id)
    markers = _live_markers(events.filter(pc.equal(events.column("column"), sessions.BULK_MARKER)).to_pylist())
    folded = sessions.fold_events(events)
    known: dict[str, str | None] = {}
    tags = {
        tag: bulk_id
        for tag in pc.unique(folded.column("validation")).to_pylist()
        if (bulk_id := _bulk_of(tag, known)) in markers
    }
    theirs = pc.and_(
        pc.equal(folded.column("change"), "update"),
        pc.is_in(folded.column("validation"), pa.array(list(tags), pa.string())),
    )
    theirs = pc.fill_null(theirs, False)
    counted: dict[str, int] = {}
    for row in pc.value_counts(folded.filter(theirs).column("validation")).to_pylist():
        counted[tags[row["values"]]] = counted.get(tags[row["values"]], 0) + row["counts"]
    own = sessions.cell_edits(folded.filter(pc.invert(theirs)))
    bulks = [
        _bulk_change(session_id, bulk_id, marker, counted[bulk_id])
        for bulk_id, marker in markers.items()
        if counted.get(bulk_id)
    ]
    return sessions.pending_changes(own), bulks


def session_bulks(layout: DatasetLayout, session_id: str) -> list[BulkChange]:
    """The bulk changes pending in a session (none once it is gone), as a change request's diff lists them."""
    return pending_view(layout, session_id)[1]


def _bulk_change(session_id: str, bulk_id: str, marker: dict[str, Any], cells: int) -> BulkChange:
    doc = json.loads(marker["new_value"])
    return BulkChange(
        bulk_id=bulk_id,
        session_id=session_id,
        column=doc["column"],
        operation=_operation_from_json(doc["operation"]),
        conditions=tuple(from_param(w) for w in doc["where"]),
        base_version=int(doc["base_version"]),
        matched=int(doc["matched"]),
        changed=int(doc["changed"]),
        cells=cells,
    )
