"""Clusters of near-duplicate values: fingerprint, n-gram and Levenshtein, against a plain Python reference."""

from __future__ import annotations

import itertools
import random
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import auth, bulk, clusters, facets, projects, sessions
from core.catalog import Catalog, DatasetRow
from core.config import get_settings
from core.datasets import layout_for
from core.demo import customers_table
from core.duck import cursor
from core.errors import InvalidInput
from core.filters import Condition

# ---------------------------------------------------------------- the reference


def _separator(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "Z" or unicodedata.category(ch) == "Cc"


def _folded(text: str) -> str:
    """Lower-cased, accents stripped (NFD without its combining marks)."""
    return "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")


def ref_fingerprint(text: str) -> str:
    cleaned = "".join(c for c in _folded(text) if unicodedata.category(c)[0] not in "PS")
    tokens, token = set(), ""
    for ch in cleaned + " ":
        if _separator(ch):
            if token:
                tokens.add(token)
            token = ""
        else:
            token += ch
    return " ".join(sorted(tokens))


def ref_ngram(text: str, n: int) -> str:
    s = "".join(c for c in _folded(text) if unicodedata.category(c)[0] not in "PS" and not _separator(c))
    grams = {s[i : i + n] for i in range(max(len(s) - n + 1, 1))}
    return "".join(sorted(grams))


def ref_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def ref_key_clusters(counts: Counter[str], key: Any) -> set[frozenset[tuple[str, int]]]:
    groups: dict[str, set[tuple[str, int]]] = {}
    for value, n in counts.items():
        k = key(value)
        if k:
            groups.setdefault(k, set()).add((value, n))
    return {frozenset(g) for g in groups.values() if len(g) > 1}


def ref_neighbour_clusters(counts: Counter[str], radius: int) -> set[frozenset[tuple[str, int]]]:
    values = list(counts)
    group = {v: {v} for v in values}
    for a, b in itertools.combinations(values, 2):
        if ref_distance(a, b) <= radius and group[a] is not group[b]:
            merged = group[a] | group[b]
            for v in merged:
                group[v] = merged
    return {frozenset((v, counts[v]) for v in g) for g in {id(g): g for g in group.values()}.values() if len(g) > 1}


def _as_sets(clustering: clusters.Clustering) -> set[frozenset[tuple[str, int]]]:
    return {frozenset((v.value, v.rows) for v in c.values) for c in clustering.clusters}


# Letters where DuckDB and Python agree on lower-casing and accents (all of Latin-1 and Latin
# Extended-A/B but 'İ', whose Python lower case is two characters), separators and symbols.
ALPHABET = st.one_of(
    st.characters(min_codepoint=0x20, max_codepoint=0x24F, exclude_characters="İ"),
    st.sampled_from(["\t", "\n", "\xa0", "\u2003", "€", "—", "“", " ", " ", ".", ","]),
)
TEXTS = st.text(ALPHABET, max_size=14)


def _keys_by_sql(sql_of: Any, texts: list[str]) -> list[str]:
    rows = cursor().execute(
        f"SELECT {sql_of('x')} FROM unnest(?::VARCHAR[]) WITH ORDINALITY t(x, i) ORDER BY i", [texts]
    )
    return [r[0] for r in rows.fetchall()]


# ---------------------------------------------------------------- keys


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("New York", "new york"),  # case
        ("Zürich", "Zurich"),  # accents
        ("São Paulo", "sao paulo"),
        ("N.Y.", "NY"),  # punctuation removed, not replaced by a space
        ("Smith, John", "John Smith"),  # token order
        ("  New   York ", "New York"),  # white space
        ("new new york", "New York"),  # duplicate tokens
        ("O'Brien & Sons", "obrien sons"),
    ],
)
def test_values_that_share_a_fingerprint(a: str, b: str) -> None:
    assert _keys_by_sql(clusters.fingerprint_sql, [a])[0] == _keys_by_sql(clusters.fingerprint_sql, [b])[0]
    assert ref_fingerprint(a) == ref_fingerprint(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("New York", "Newark"),
        ("Paris", "Paris, TX"),  # a token more
        ("New York", "NewYork"),  # two tokens are not one
        ("Ann", "Anne"),
        ("N.Y.", "N.J."),
        ("straße", "strasse"),  # ß is a letter, not an accent
    ],
)
def test_values_that_must_not_cluster_by_fingerprint(a: str, b: str) -> None:
    ka, kb = _keys_by_sql(clusters.fingerprint_sql, [a, b])
    assert ka != kb


def test_values_with_an_empty_key_never_cluster(tmp_path: Path) -> None:
    path = tmp_path / "t"
    values = ["---", "...", "", "?", "!!", "a", "A"]
    write_deltalake(path, pa.table({"row_id": [str(i) for i in range(len(values))], "v": values}))
    for method in ("fingerprint", "ngram"):
        found = clusters.column_clusters(path, "v", method=method)  # type: ignore[arg-type]
        assert [[v.value for v in c.values] for c in found.clusters] == [["A", "a"]]
        assert found.distinct == len(values)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(TEXTS, min_size=1, max_size=20), n=st.integers(1, 4))
def test_sql_keys_match_the_reference(texts: list[str], n: int) -> None:
    assert _keys_by_sql(clusters.fingerprint_sql, texts) == [ref_fingerprint(t) for t in texts]
    assert _keys_by_sql(lambda x: clusters.ngram_sql(x, n), texts) == [ref_ngram(t, n) for t in texts]


def test_ngram_keys_ignore_spaces_and_punctuation_inside_words() -> None:
    a, b, c = _keys_by_sql(lambda x: clusters.ngram_sql(x, 2), ["New York", "Ne-wyork", "Yorkshire"])
    assert a == b == "ewneorrkwyyo" and c != a


# ---------------------------------------------------------------- edit distance and neighbours


@settings(max_examples=400, deadline=None)
@given(a=st.text("abcé日 ", max_size=9), b=st.text("abcé日 ", max_size=9), limit=st.integers(0, 4))
def test_edit_distance_matches_the_reference(a: str, b: str, limit: int) -> None:
    exact = ref_distance(a, b)
    assert clusters.edit_distance(a, b) == exact
    assert clusters.edit_distance(a, b, limit) == min(exact, limit + 1)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(values=st.lists(st.text("abcdé ", max_size=8), unique=True, max_size=40), radius=st.integers(1, 3))
def test_the_blocking_finds_every_pair_within_the_radius(values: list[str], radius: int) -> None:
    found = [tuple(sorted(p)) for p in clusters.neighbour_pairs(values, radius)]
    expected = [
        (i, j) for i, j in itertools.combinations(range(len(values)), 2) if ref_distance(values[i], values[j]) <= radius
    ]
    assert sorted(found) == expected  # each pair once, none missed, none extra


def test_the_blocking_compares_far_fewer_pairs_than_all_of_them() -> None:
    rng = random.Random(5)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(6, 14))) for _ in range(3000)]
    compared = sum(1 for _ in clusters._candidate_pairs(words, 1))
    assert compared < len(words) * (len(words) - 1) / 2 / 100


# ---------------------------------------------------------------- clusters of a column


@pytest.fixture(scope="module")
def cities(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Counter[str]]:
    """A delta-rs table of city spellings (no Spark): near-duplicates, and values that must stay apart."""
    spellings = {
        "New York": 40, "new york": 9, "New York ": 4, "NEW YORK": 3, "York, New": 1, "New  York": 2,
        "N.Y.": 5, "NY": 6, "Newark": 7, "New Yrok": 2, "Zürich": 8, "Zurich": 5, "zurich!": 1,
        "São Paulo": 6, "Sao Paulo": 3, "Paris": 12,
        "Paris, TX": 2, "Lyon": 4, "Lyons": 1, "---": 2, "": 3, "Köln": 3, "Koln": 1, "Cologne": 2,
    }  # fmt: skip
    values = [v for v, n in spellings.items() for _ in range(n)] + [None] * 4
    random.Random(1).shuffle(values)
    path = tmp_path_factory.mktemp("clusters") / "t"
    write_deltalake(
        path,
        pa.table({"row_id": [f"{i:03d}" for i in range(len(values))], "city": pa.array(values, pa.string()),
                  "n": pa.array(range(len(values)), pa.int64())}),
    )  # fmt: skip
    return path, Counter(spellings)


def test_fingerprint_clusters_match_the_reference(cities: tuple[Path, Counter[str]]) -> None:
    path, counts = cities
    found = clusters.column_clusters(path, "city")
    assert _as_sets(found) == ref_key_clusters(counts, ref_fingerprint)
    assert found.distinct == len(counts)
    first = found.clusters[0]
    assert [v.value for v in first.values] == [
        "New York",
        "new york",
        "New York ",
        "NEW YORK",
        "New  York",
        "York, New",
    ]
    assert (first.choice, first.rows) == ("New York", 59)
    assert ["N.Y.", "NY"] not in [[v.value for v in c.values] for c in found.clusters]  # NY (6) comes first
    assert [[v.value for v in c.values] for c in found.clusters if c.key == "ny"] == [["NY", "N.Y."]]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ngram_clusters_match_the_reference(cities: tuple[Path, Counter[str]], n: int) -> None:
    path, counts = cities
    found = clusters.column_clusters(path, "city", method="ngram", ngram_size=n)
    assert _as_sets(found) == ref_key_clusters(counts, lambda v: ref_ngram(v, n))
    assert found.ngram_size == n


@pytest.mark.parametrize("radius", [1, 2, 3])
def test_levenshtein_clusters_match_the_reference(cities: tuple[Path, Counter[str]], radius: int) -> None:
    path, counts = cities
    found = clusters.column_clusters(path, "city", method="levenshtein", radius=radius)
    assert _as_sets(found) == ref_neighbour_clusters(counts, radius)
    assert all(c.key == c.values[0].value for c in found.clusters)


def test_levenshtein_radius_one_keeps_apart_what_it_should(cities: tuple[Path, Counter[str]]) -> None:
    path, _ = cities
    clustering = clusters.column_clusters(path, "city", method="levenshtein")
    found = {frozenset(v.value for v in c.values) for c in clustering.clusters}
    assert frozenset({"Lyon", "Lyons"}) in found and frozenset({"Zürich", "Zurich"}) in found
    assert not any("Newark" in c or "Cologne" in c for c in found)


def test_filters_narrow_what_is_clustered(cities: tuple[Path, Counter[str]]) -> None:
    path, _ = cities
    found = clusters.column_clusters(path, "city", conditions=[Condition("city", "starts_with", ("z",))])
    assert [[v.value for v in c.values] for c in found.clusters] == [["Zürich", "Zurich", "zurich!"]]
    assert found.distinct == 3


def test_too_many_distinct_values_for_neighbours_are_refused(
    cities: tuple[Path, Counter[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, counts = cities
    monkeypatch.setenv("OREO_CLUSTER_MAX_VALUES", "10")
    get_settings.cache_clear()
    with pytest.raises(
        InvalidInput, match=rf"has {len(counts)} distinct values; .* at most 10 \(OREO_CLUSTER_MAX_VALUES\)"
    ):
        clusters.column_clusters(path, "city", method="levenshtein")
    assert clusters.column_clusters(path, "city").clusters  # key collision has no limit


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"column": "n"}, r"clusters are for text columns; 'n' holds BIGINT values"),
        ({"column": "nope"}, r"unknown column 'nope'"),
        ({"column": "city", "method": "soundex"}, r"unknown clustering method 'soundex'"),
        ({"column": "city", "method": "levenshtein", "radius": 0}, r"radius must be between 1 and 3"),
        ({"column": "city", "method": "ngram", "ngram_size": 9}, r"ngram size must be between 1 and 8"),
    ],
)
def test_bad_requests_are_refused(cities: tuple[Path, Counter[str]], kwargs: dict[str, Any], match: str) -> None:
    path, _ = cities
    with pytest.raises(InvalidInput, match=match):
        clusters.column_clusters(path, **kwargs)


def test_replacements_use_the_choice_and_refuse_a_value_going_two_ways() -> None:
    a = clusters.Cluster("ny", (clusters.ClusterValue("NY", 6), clusters.ClusterValue("N.Y.", 5)))
    b = clusters.Cluster("new york", (clusters.ClusterValue("New York", 9), clusters.ClusterValue("new york", 2)))
    assert clusters.replacements([a, b]) == {"N.Y.": "NY", "new york": "New York"}
    assert clusters.replacements([a, b], {"ny": "New York"}) == {
        "NY": "New York",
        "N.Y.": "New York",
        "new york": "New York",
    }
    clash = clusters.Cluster("x", (clusters.ClusterValue("N.Y.", 5), clusters.ClusterValue("Nueva York", 1)))
    with pytest.raises(InvalidInput, match=r"'N.Y.' is in two clusters"):
        clusters.replacements([a, clash])
    with pytest.raises(InvalidInput, match=r"no value would change"):
        clusters.merge_operation([clusters.Cluster("k", (clusters.ClusterValue("a", 1),))])


# ---------------------------------------------------------------- merging: one bulk change of the session


@pytest.fixture
def dataset(catalog: Catalog) -> auth.User:
    """p/d: a keyed delta-rs table in the catalog, and an editor of p."""
    projects.create_project(catalog, "p")
    editor, _ = auth.create_user(catalog, "ed", password="correct horse battery")
    auth.add_member(catalog, "p", "ed", "editor")
    cities = ["New York", "new york", "N.Y.", "NY", "NY", "Paris", "paris", "Lyon", None, "New York"]
    ids = [str(i) for i in range(1, len(cities) + 1)]
    write_deltalake(
        layout_for("p", "d").main, pa.table({"row_id": ids, "code": ids, "city": pa.array(cities, pa.string())})
    )
    with catalog.session() as s:
        s.add(DatasetRow(project_id="p", dataset_id="d", key_column="code", delta_version=0, created_by="ed",
                         row_count=len(cities)))  # fmt: skip
    return editor


def test_merging_clusters_is_one_bulk_change_with_a_preview(catalog: Catalog, dataset: auth.User) -> None:
    editor = dataset
    found = clusters.dataset_clusters(catalog, "p", "d", "city", actor=editor)
    by_key = {c.key: c for c in found.clusters}
    assert set(by_key) == {"new york", "ny", "paris"}
    chosen = [by_key["ny"], by_key["paris"]]
    preview = clusters.preview_merge(catalog, "p", "d", "city", chosen, actor=editor, choices={"ny": "New York"})
    assert (preview.matched, preview.changed) == (4, 4)  # NY, NY, N.Y. → New York; paris → Paris
    assert sessions.current_session(catalog, "p", "d", actor=editor) is None  # a preview saves nothing

    change = clusters.merge_clusters(catalog, "p", "d", "city", chosen, actor=editor, choices={"ny": "New York"})
    assert isinstance(change.operation, bulk.Recode) and change.changed == 4
    assert change.summary.startswith("city: merge ")
    pending, bulks = bulk.pending_view(layout_for("p", "d"), change.session_id)
    assert [b.bulk_id for b in bulks] == [change.bulk_id] and pending == []  # one line in the pending list
    after = facets.dataset_facet(catalog, "p", "d", "city", actor=editor, session_id=change.session_id)
    assert {v.value: v.rows for v in after.values} == {"New York": 5, "new york": 1, "Paris": 2, "Lyon": 1, None: 1}
    again = clusters.dataset_clusters(catalog, "p", "d", "city", actor=editor, session_id=change.session_id)
    assert [[v.value for v in c.values] for c in again.clusters] == [["New York", "new york"]]


def test_the_demo_s_cities_have_near_duplicates_to_cluster(tmp_path: Path) -> None:
    table = customers_table(1200)
    path = tmp_path / "customers"
    write_deltalake(path, table.select(["customer_id", "city"]))
    found = clusters.column_clusters(path, "city")
    assert len(found.clusters) >= 10
    spelt = {v.value for c in found.clusters for v in c.values[1:]}
    assert any(v != v.strip() for v in spelt) and any(v.islower() for v in spelt) and any(v.isupper() for v in spelt)
    assert clusters.column_clusters(path, "city", method="levenshtein").clusters  # typos too
    assert table.column("plan").to_pylist() == customers_table(1200).column("plan").to_pylist()  # seeded: the same
