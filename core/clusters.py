"""Clusters: groups of a text column's distinct values that probably mean the same thing.

The methods are OpenRefine's (https://openrefine.org/docs/technical-reference/clustering-in-depth):

- **fingerprint** (key collision): values whose keys are equal cluster. The key is the
  value lower-cased, its accents stripped (``é`` → ``e``), every punctuation mark and
  symbol (Unicode categories P and S) removed, then split into tokens at white space
  (and other separators and control characters), the tokens sorted, de-duplicated and
  joined by one space: ``"  New York, N.Y."``, ``"york new ny"`` and ``"NY New-York"``…
  have the keys ``new ny york``, ``new ny york`` and ``newyork ny``;
- **ngram** (key collision): the value lower-cased, accents stripped, and every
  punctuation mark, symbol, separator and control character removed; the key is its
  distinct character n-grams (2 by default), sorted and joined. A value shorter than n
  is its own n-gram;
- **levenshtein** (nearest neighbours): values within ``radius`` single-character edits
  (insertions, deletions, substitutions of code points) of each other cluster, and so do
  chains of them. It compares only the pairs that share a piece of a partition of the
  shorter value into ``radius + 1`` pieces, at most ``radius`` characters away from its
  place (two values within ``radius`` edits always do), so the cost follows the values
  that look alike instead of the square of the distinct values; the column may have at
  most ``OREO_CLUSTER_MAX_VALUES`` distinct values.

A value whose key is empty (only punctuation, say) never clusters. Keys are computed by
DuckDB on the distinct values of the rows a read sees (``core.reads.selection``), so a
column of a million rows costs one scan and a pass over its distinct values.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

import pyarrow as pa

from core import bulk, reads
from core.auth import User
from core.catalog import Catalog
from core.config import get_settings
from core.duck import cursor, quote_ident
from core.errors import InvalidInput
from core.facets import source_of
from core.filters import Condition
from core.storage import location
from core.values import type_family

Method = Literal["fingerprint", "ngram", "levenshtein"]
METHODS: tuple[Method, ...] = get_args(Method)
MAX_RADIUS = 3
MAX_NGRAM = 8
# Punctuation and symbols; separators (white space, other spaces, control characters). RE2 syntax.
_PUNCTUATION = r"[\pP\pS]"
_SEPARATORS = r"[\s\pZ\p{Cc}]"


class ClusterValue(NamedTuple):
    """One distinct value of a cluster and the rows holding it (a tuple: a column's clusters hold many)."""

    value: str
    rows: int


@dataclass(frozen=True)
class Cluster:
    """Values that probably mean the same thing, most rows first (ties in value order).

    ``key`` is their shared key (for levenshtein: the most frequent value).
    """

    key: str
    values: tuple[ClusterValue, ...]

    @property
    def rows(self) -> int:
        return sum(v.rows for v in self.values)

    @property
    def choice(self) -> str:
        """The value the cluster becomes unless someone picks another: its most frequent."""
        return self.values[0].value

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "choice": self.choice,
            "rows": self.rows,
            "values": [{"value": v.value, "rows": v.rows} for v in self.values],
        }


@dataclass(frozen=True)
class Clustering:
    """The clusters of one column by one method: the most values first, then the most rows.

    ``distinct`` counts the column's distinct values (other than NULL) among the rows read.
    """

    column: str
    method: Method
    distinct: int
    clusters: tuple[Cluster, ...]
    radius: int | None = None
    ngram_size: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "column": self.column,
            "method": self.method,
            "radius": self.radius,
            "ngram_size": self.ngram_size,
            "distinct": self.distinct,
            "clusters": [c.to_json() for c in self.clusters],
        }


# ---------------------------------------------------------------- keys, in SQL


def fingerprint_sql(expr: str) -> str:
    """DuckDB SQL for the fingerprint key of the text ``expr`` (an SQL expression)."""
    cleaned = f"regexp_replace(strip_accents(lower({expr})), '{_PUNCTUATION}', '', 'g')"
    tokens = f"list_filter(string_split_regex({cleaned}, '{_SEPARATORS}+'), lambda t: t <> '')"
    return f"array_to_string(list_sort(list_distinct({tokens})), ' ')"


def ngram_sql(expr: str, size: int) -> str:
    """DuckDB SQL for the n-gram fingerprint key (n = ``size``) of the text ``expr``."""
    n = _ngram_size(size)
    s = f"regexp_replace(strip_accents(lower({expr})), '{_PUNCTUATION}|{_SEPARATORS}', '', 'g')"
    grams = f"list_transform(range(1, greatest(length(s) - {n} + 1, 1) + 1), lambda i: substring(s, i, {n}))"
    # ``s`` is bound once by a one-element list's lambda, so the cleaning runs once per value.
    return f"list_transform([{s}], lambda s: array_to_string(list_sort(list_distinct({grams})), ''))[1]"


def _ngram_size(size: int) -> int:
    if not 1 <= int(size) <= MAX_NGRAM:
        raise InvalidInput(f"ngram size must be between 1 and {MAX_NGRAM}, got {size}", field="ngram_size")
    return int(size)


# ---------------------------------------------------------------- clustering


def column_clusters(
    path: Any,
    column: str,
    *,
    method: Method = "fingerprint",
    version: int | None = None,
    conditions: list[Condition] | None = None,
    overlay: reads.Overlay | None = None,
    radius: int = 1,
    ngram_size: int = 2,
) -> Clustering:
    """The clusters of a text column's values among the rows of a Delta table that match ``conditions``.

    Args:
        path: The Delta table folder.
        column: A text column.
        method: ``fingerprint``, ``ngram`` or ``levenshtein`` (see the module's docstring).
        version: The table's version (latest when None).
        conditions: ``core.filters`` conditions, ANDed.
        overlay: Rows laid over the table (a session's edits, ``sessions.session_overlay``).
        radius: For levenshtein, the most edits between neighbours, 1..3.
        ngram_size: For ngram, the length of the n-grams, 1..8.

    Raises:
        InvalidInput: An unknown method or column, a column that is not text, a bad
            condition, radius or n-gram size, or (levenshtein) more distinct values than
            ``OREO_CLUSTER_MAX_VALUES``.
        NotFound: No table at ``path`` or no such version.
    """
    if method not in METHODS:
        raise InvalidInput(f"unknown clustering method {method!r}; use one of: {', '.join(METHODS)}", field="method")
    if method == "levenshtein" and not 1 <= int(radius) <= MAX_RADIUS:
        raise InvalidInput(f"radius must be between 1 and {MAX_RADIUS}, got {radius}", field="radius")
    size = _ngram_size(ngram_size) if method == "ngram" else None
    with reads.selection(location(path), version=version, conditions=conditions, overlay=overlay) as rows:
        _require_text(rows.columns, column)
        if method == "levenshtein":
            distinct, clusters = _neighbour_clusters(rows, column, int(radius))
            return Clustering(column, method, distinct, clusters, radius=int(radius))
        col = quote_ident(column)
        key = fingerprint_sql("value") if size is None else ngram_sql("value", size)
        distinct, clusters = _key_clusters(rows, col, key)
    return Clustering(column, method, distinct, clusters, ngram_size=size)


def dataset_clusters(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    column: str,
    *,
    actor: User,
    method: Method = "fingerprint",
    radius: int = 1,
    ngram_size: int = 2,
    conditions: list[Condition] | None = None,
    session_id: str | None = None,
) -> Clustering:
    """The clusters of a dataset's column at its latest version, or as ``session_id``'s edits leave it.

    Raises:
        InvalidInput: As ``column_clusters``; a session of another dataset.
        NotFound, PermissionDenied: No such dataset or session, or no access to it.
    """
    path, version, overlay = source_of(catalog, project_id, dataset_id, actor=actor, session_id=session_id)
    return column_clusters(
        path, column, method=method, version=version, conditions=conditions, overlay=overlay,
        radius=radius, ngram_size=ngram_size,
    )  # fmt: skip


def replacements(clusters: list[Cluster], choices: dict[str, str] | None = None) -> dict[str, str]:
    """Each value of ``clusters`` that changes, and the value it becomes (a whole-value replace).

    ``choices`` maps a cluster's key to the value it becomes (default: its ``choice``);
    the chosen value may be one of the cluster's or a new one.

    Raises:
        InvalidInput: Two clusters hold the same value and become different values.
    """
    chosen = choices or {}
    replace: dict[str, str] = {}
    for cluster in clusters:
        target = chosen.get(cluster.key, cluster.choice)
        for item in cluster.values:
            if replace.get(item.value, target) != target:
                raise InvalidInput(f"the value {item.value!r} is in two clusters that become different values")
            if item.value != target:
                replace[item.value] = target
    return replace


def merge_operation(clusters: list[Cluster], choices: dict[str, str] | None = None) -> bulk.Recode:
    """The bulk change that merges ``clusters`` (see ``replacements``): one whole-value recode.

    Raises:
        InvalidInput: No value would change, or as ``replacements``.
    """
    pairs = replacements(clusters, choices)
    if not pairs:
        raise InvalidInput("no value would change: each chosen value is already the cluster's only value")
    return bulk.Recode(tuple(pairs.items()))


def merge_conditions(column: str, operation: bulk.Recode, conditions: list[Condition] | None = None) -> list[Condition]:
    """The filter's conditions and one keeping only the rows that hold a value the merge replaces."""
    return [*(conditions or []), Condition(column, "in", tuple(old for old, _new in operation.pairs))]


def preview_merge(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    column: str,
    clusters: list[Cluster],
    *,
    actor: User,
    choices: dict[str, str] | None = None,
    conditions: list[Condition] | None = None,
    session_id: str | None = None,
) -> bulk.BulkPreview:
    """What merging ``clusters`` of ``column`` (under the filter's ``conditions``) would do; nothing is saved.

    Raises:
        As ``bulk.preview_bulk`` and ``merge_operation``.
    """
    operation = merge_operation(clusters, choices)
    return bulk.preview_bulk(
        catalog, project_id, dataset_id, column, operation, actor=actor,
        conditions=merge_conditions(column, operation, conditions), session_id=session_id,
    )  # fmt: skip


def merge_clusters(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    column: str,
    clusters: list[Cluster],
    *,
    actor: User,
    choices: dict[str, str] | None = None,
    conditions: list[Condition] | None = None,
    session_id: str | None = None,
) -> bulk.BulkChange:
    """Merge ``clusters`` of ``column``: one bulk change of the session, each value becoming its cluster's choice.

    Raises:
        As ``bulk.apply_bulk`` and ``merge_operation``.
    """
    operation = merge_operation(clusters, choices)
    return bulk.apply_bulk(
        catalog, project_id, dataset_id, column, operation, actor=actor,
        conditions=merge_conditions(column, operation, conditions), session_id=session_id,
    )  # fmt: skip


def pick(found: Clustering, names: list[str] | None, into: str | None = None) -> tuple[list[Cluster], dict[str, str]]:
    """The clusters ``names`` names, each by its key or by one of its values (None: every cluster found).

    ``into``, for exactly one named cluster, is the value it becomes (default: its most frequent).
    Returns the clusters and the chosen values by key, as ``merge_clusters`` takes them.

    Raises:
        InvalidInput: No cluster found, a name no cluster has, or ``into`` for other than one cluster.
    """
    if not found.clusters:
        raise InvalidInput(f"{found.column!r} has no clusters by {found.method}; nothing to merge", field="clusters")
    if names is None:
        picked = list(found.clusters)
    else:
        by_key = {c.key: c for c in found.clusters}
        by_value = {v.value: c for c in found.clusters for v in c.values}
        picked = []
        for name in dict.fromkeys(names):
            cluster = by_key.get(name) or by_value.get(name)
            if cluster is None:
                raise InvalidInput(
                    f"no cluster of {found.column!r} by {found.method} has the key or value {name!r}", field="clusters"
                )
            if cluster not in picked:
                picked.append(cluster)
    if into is None:
        return picked, {}
    if len(picked) != 1:
        raise InvalidInput(f"a chosen value goes with exactly one cluster; {len(picked)} are named", field="into")
    return picked, {picked[0].key: into}


def merge_named(
    catalog: Catalog,
    project_id: str,
    dataset_id: str,
    column: str,
    names: list[str] | None,
    *,
    actor: User,
    into: str | None = None,
    preview: bool = False,
    method: Method = "fingerprint",
    radius: int = 1,
    ngram_size: int = 2,
    conditions: list[Condition] | None = None,
    session_id: str | None = None,
) -> bulk.BulkPreview | bulk.BulkChange:
    """Find the clusters of ``column`` as ``dataset_clusters`` does and merge those ``names`` names (see ``pick``).

    With ``preview`` nothing is saved; otherwise the merge is one bulk change of the session (``merge_clusters``).

    Raises:
        As ``dataset_clusters``, ``pick`` and ``merge_clusters``.
    """
    found = dataset_clusters(
        catalog, project_id, dataset_id, column, actor=actor, method=method, radius=radius, ngram_size=ngram_size,
        conditions=conditions, session_id=session_id,
    )  # fmt: skip
    picked, choices = pick(found, names, into)
    call = preview_merge if preview else merge_clusters
    return call(
        catalog, project_id, dataset_id, column, picked, actor=actor, choices=choices, conditions=conditions,
        session_id=session_id,
    )  # fmt: skip


def _require_text(columns: dict[str, str], column: str) -> None:
    if column not in columns:
        raise InvalidInput(f"unknown column {column!r}; columns are: {', '.join(columns)}", field="column")
    if type_family(columns[column]) != "text":
        raise InvalidInput(f"clusters are for text columns; {column!r} holds {columns[column]} values", field="column")


def _key_clusters(rows: reads.Selection, col: str, key: str) -> tuple[int, tuple[Cluster, ...]]:
    """The column's distinct values and the clusters of those whose (non-empty) keys collide."""
    # The windows run over the distinct values; the first row stays to carry their count (and the
    # unpartitioned count keeps the key off the scan). DuckDB orders the clusters as ``_ordered``.
    query = (
        "SELECT key, value, n, size, total FROM ("
        "SELECT key, value, n, count(*) OVER w AS size, sum(n) OVER w AS held, count(*) OVER () AS total, "
        "row_number() OVER () AS rn "
        f"FROM (SELECT value, n, {key} AS key FROM "
        f"(SELECT {col} AS value, count(*) AS n FROM rows WHERE {col} IS NOT NULL GROUP BY {col})) "
        "WINDOW w AS (PARTITION BY key)"
        ") WHERE (size > 1 AND key <> '') OR rn = 1 ORDER BY size DESC, held DESC, key, n DESC, value"
    )
    found = rows.run(query).fetchall()
    clusters: list[tuple[str, list[ClusterValue]]] = []
    for k, value, n, size, _total in found:
        if size > 1 and k != "":
            if not clusters or clusters[-1][0] != k:
                clusters.append((k, []))
            clusters[-1][1].append(ClusterValue(value, n))
    distinct = int(found[0][4]) if found else 0
    return distinct, tuple(Cluster(k, tuple(values)) for k, values in clusters)


def _ordered(clusters: Iterator[Cluster] | list[Cluster]) -> tuple[Cluster, ...]:
    return tuple(sorted(clusters, key=lambda c: (-len(c.values), -c.rows, c.key)))


def _neighbour_clusters(rows: reads.Selection, column: str, radius: int) -> tuple[int, tuple[Cluster, ...]]:
    """The column's distinct values and the clusters of those linked by neighbours within ``radius``."""
    cap = get_settings().cluster_max_values
    col = quote_ident(column)
    query = (
        "SELECT value, n, count(*) OVER () FROM "
        f"(SELECT {col} AS value, count(*) AS n FROM rows WHERE {col} IS NOT NULL GROUP BY {col}) "
        "ORDER BY n DESC, value LIMIT ?"
    )
    found = rows.run(query, [cap + 1]).fetchall()
    distinct = int(found[0][2]) if found else 0
    if distinct > cap:
        raise InvalidInput(
            f"column {column!r} has {distinct:,} distinct values; nearest-neighbour clustering takes at most "
            f"{cap:,} (OREO_CLUSTER_MAX_VALUES): filter the rows first, or use the fingerprint or ngram method",
            field="method",
        )
    values = [str(r[0]) for r in found]
    parent = list(range(len(values)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in neighbour_pairs(values, radius):
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)  # the root stays the most frequent value (rows are in that order)
    groups: dict[int, list[ClusterValue]] = {}
    for i, row in enumerate(found):
        groups.setdefault(root(i), []).append(ClusterValue(values[i], int(row[1])))
    return distinct, _ordered([Cluster(v[0].value, tuple(v)) for v in groups.values() if len(v) > 1])


# ---------------------------------------------------------------- nearest neighbours


def neighbour_pairs(values: list[str], radius: int) -> list[tuple[int, int]]:
    """Each pair ``(i, j)`` of ``values`` (by position, ``i != j``) within ``radius`` edits, once.

    Partition blocking (Pass-Join, Li et al., VLDB 2012): a value longer than ``radius`` is
    cut into ``radius + 1`` pieces; a value within ``radius`` edits of it holds at least one
    piece unchanged, a few characters from the piece's place. Values are taken shortest
    first, and each looks up its substrings at those places among the pieces of the values
    before it; only the pairs found (and those with a value of at most ``radius``
    characters) are compared, pairs of ASCII values by DuckDB (whose ``levenshtein``
    counts bytes, which are their characters), the others here.
    """
    plain: list[tuple[int, int]] = []
    found: list[tuple[int, int]] = []
    for j, i in _candidate_pairs(values, radius):
        if values[i].isascii() and values[j].isascii():
            plain.append((j, i))
        elif edit_distance(values[j], values[i], radius) <= radius:
            found.append((j, i))
    if plain:
        pairs = pa.table({"a": [values[j] for j, _ in plain], "b": [values[i] for _, i in plain]})
        view = f"oreo_pairs_{uuid.uuid4().hex}"
        cursor().register(view, pairs)
        try:
            sql = f"SELECT k - 1 FROM (SELECT row_number() OVER () AS k, a, b FROM {view}) WHERE levenshtein(a, b) <= ?"
            found += [plain[row[0]] for row in cursor().execute(sql, [radius]).fetchall()]
        finally:
            cursor().unregister(view)
    return found


def _candidate_pairs(values: list[str], radius: int) -> Iterator[tuple[int, int]]:
    """The pairs the partition blocking leaves to compare (each once): a superset of the neighbours."""
    index: dict[tuple[int, int, str], list[int]] = {}
    short: list[int] = []  # values too short to cut into radius + 1 pieces
    for i in sorted(range(len(values)), key=lambda k: len(values[k])):
        text = values[i]
        candidates = {j for j in short if len(text) - len(values[j]) <= radius}
        for length in range(max(radius + 1, len(text) - radius), len(text) + 1):
            for piece, (start, size) in enumerate(_pieces(length, radius)):
                for at in _places(start, piece, len(text) - length, radius):
                    candidates.update(index.get((length, piece, text[at : at + size]), ()))
        for j in candidates:
            yield j, i
        if len(text) <= radius:
            short.append(i)
        else:
            for piece, (start, size) in enumerate(_pieces(len(text), radius)):
                index.setdefault((len(text), piece, text[start : start + size]), []).append(i)


def _pieces(length: int, radius: int) -> list[tuple[int, int]]:
    """(start, size) of the ``radius + 1`` pieces of a text of ``length`` characters (the last ones longer)."""
    count = radius + 1
    small, longer = divmod(length, count)
    pieces, start = [], 0
    for k in range(count):
        size = small + (1 if k >= count - longer else 0)
        pieces.append((start, size))
        start += size
    return pieces


def _places(start: int, piece: int, longer_by: int, radius: int) -> range:
    """Where piece number ``piece`` (at ``start``) of a value can be in one ``longer_by`` characters longer.

    The edits before the piece move it by at most ``piece`` places, and those after it
    leave at most ``radius - piece`` for the rest of the length difference.
    """
    low = max(start - piece, start + longer_by - (radius - piece))
    high = min(start + piece, start + longer_by + (radius - piece))
    return range(max(low, 0), high + 1)


def edit_distance(a: str, b: str, limit: int | None = None) -> int:
    """Levenshtein distance between ``a`` and ``b`` in code points; past ``limit``, ``limit + 1``."""
    same = 0
    while same < min(len(a), len(b)) and a[same] == b[same]:
        same += 1
    a, b = a[same:], b[same:]
    same = 0
    while same < min(len(a), len(b)) and a[-1 - same] == b[-1 - same]:
        same += 1
    a, b = a[: len(a) - same], b[: len(b) - same]
    if len(a) > len(b):
        a, b = b, a
    bound = len(b) if limit is None else min(int(limit), len(b))
    if len(b) - len(a) > bound:
        return bound + 1
    far = bound + 1
    previous = [j if j <= bound else far for j in range(len(a) + 1)]
    for row, cb in enumerate(b, 1):
        # Only cells within ``bound`` of the diagonal can stay within ``bound``.
        current = [row if row <= bound else far] + [far] * len(a)
        for col in range(max(1, row - bound), min(len(a), row + bound) + 1):
            current[col] = min(previous[col] + 1, current[col - 1] + 1, previous[col - 1] + (a[col - 1] != cb))
        if min(current) > bound:
            return far
        previous = current
    return min(previous[-1], far)
