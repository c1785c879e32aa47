"""`oreo dataset facet` and `oreo dataset clusters`, and the API's facet and clusters routes, over one core."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from fastapi.testclient import TestClient

from api.app import WARM_ENGINE_ENV, create_app
from cli import context
from cli import main as cli
from core import auth, projects, sessions, tokens
from core.catalog import Catalog, DatasetRow
from core.datasets import layout_for

CITIES = ["New York", "new york", "N.Y.", "NY", "NY", "Paris", "paris", "Lyon", None, "New York", "Zürich", "Zurich"]


@pytest.fixture
def people(catalog: Catalog) -> Iterator[None]:
    """demo/people: a keyed delta-rs table in the catalog (no Spark); ed edits demo, sam is no member."""
    projects.create_project(catalog, "demo")
    auth.create_user(catalog, "ed", password="correct horse battery")
    auth.create_user(catalog, "sam", password="correct horse battery")
    auth.add_member(catalog, "demo", "ed", "editor")
    ids = [str(i) for i in range(1, len(CITIES) + 1)]
    write_deltalake(
        layout_for("demo", "people").main,
        pa.table({"row_id": ids, "id": pa.array(range(1, len(ids) + 1), pa.int64()), "city": CITIES}),
    )
    with catalog.session() as s:
        s.add(DatasetRow(project_id="demo", dataset_id="people", key_column="id", delta_version=0, created_by="ed"))
    context.state.json = False
    yield
    context.state.json = False


def oreo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    context.state.json = False
    code = cli.main(list(args))
    out = capsys.readouterr()
    context.state.json = False
    return code, out.out, out.err


@pytest.mark.usefixtures("people")
def test_cli_facet_counts_values_under_the_filter(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = oreo(capsys, "--json", "dataset", "facet", "demo", "people", "city", "--as", "ed", "--limit", "2")
    doc = json.loads(out)
    assert code == 0 and (doc["rows"], doc["distinct"]) == (12, 9)
    assert doc["values"] == [{"value": "NY", "rows": 2}, {"value": "New York", "rows": 2}]
    code, out, _ = oreo(
        capsys, "--json", "dataset", "facet", "demo", "people", "id", "--where", "id <= 4", "--as", "ed"
    )
    doc = json.loads(out)
    assert doc["rows"] == 4 and [b["rows"] for b in doc["histogram"]] == [1, 1, 1, 1]
    code, out, _ = oreo(capsys, "dataset", "facet", "demo", "people", "city", "--as", "ed")
    assert code == 0 and out.splitlines()[0] == "city (VARCHAR): 12 rows, 9 distinct values"
    assert "(empty)" in out


@pytest.mark.usefixtures("people")
def test_cli_clusters_by_each_method(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = oreo(capsys, "--json", "dataset", "clusters", "demo", "people", "city", "--as", "ed")
    doc = json.loads(out)
    assert code == 0 and doc["method"] == "fingerprint" and doc["distinct"] == 9
    assert [[v["value"] for v in c["values"]] for c in doc["clusters"]] == [
        ["New York", "new york"], ["NY", "N.Y."], ["Paris", "paris"], ["Zurich", "Zürich"]
    ]  # fmt: skip
    code, out, _ = oreo(
        capsys, "--json", "dataset", "clusters", "demo", "people", "city", "--method", "levenshtein", "--as", "ed"
    )
    assert code == 0 and [c["choice"] for c in json.loads(out)["clusters"]] == ["Paris", "Zurich"]
    code, out, _ = oreo(capsys, "dataset", "clusters", "demo", "people", "city", "--method", "ngram", "--as", "ed")
    assert code == 0 and "clusters of" in out.splitlines()[0] and "<- 2 values" in out


@pytest.mark.usefixtures("people")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["clusters", "demo", "people", "id"], "clusters are for text columns; 'id' holds BIGINT values"),
        (["clusters", "demo", "people", "city", "--method", "soundex"], "unknown clustering method 'soundex'"),
        (["clusters", "demo", "people", "city", "--method", "levenshtein", "--radius", "9"], "radius must be between"),
        (["facet", "demo", "people", "nope"], "unknown column 'nope'"),
        (["facet", "demo", "people", "city", "--where", "id = x"], "'x' is not"),
        (["facet", "demo", "people", "city", "--limit", "0"], "limit must be between 1 and 1000"),
    ],
)
def test_cli_refusals_are_one_line(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, out, err = oreo(capsys, "dataset", *args, "--as", "ed")
    assert code == 1 and out == "" and len(err.splitlines()) == 1 and message in err


@pytest.mark.usefixtures("people")
def test_api_facet_and_clusters_answer_the_cli_s_documents(
    catalog: Catalog, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WARM_ENGINE_ENV, "0")
    session, _ = sessions.save_edits(
        catalog, "demo", "people", [sessions.SetCell("2", "city", "New York")], actor=auth.get_user(catalog, "ed")
    )
    base = "/api/v1/projects/demo/datasets/people"
    with TestClient(
        create_app(), headers={"Authorization": f"Bearer {tokens.create_token(catalog, 'ed').secret}"}
    ) as c:
        facet = c.get(f"{base}/facet", params={"column": "city", "where": ["id <= 6"], "limit": 3})
        _, out, _ = oreo(capsys, "--json", "dataset", "facet", "demo", "people", "city", "--where", "id <= 6",
                         "--limit", "3", "--as", "ed")  # fmt: skip
        assert facet.status_code == 200 and facet.json() == json.loads(out)
        overlaid = c.get(f"{base}/facet", params={"column": "city", "session_id": session.session_id})
        assert overlaid.json()["values"][0] == {"value": "New York", "rows": 3}
        found = c.get(f"{base}/clusters", params={"column": "city", "method": "ngram", "ngram_size": 3})
        _, out, _ = oreo(capsys, "--json", "dataset", "clusters", "demo", "people", "city", "--method", "ngram",
                         "--ngram-size", "3", "--as", "ed")  # fmt: skip
        assert found.status_code == 200 and found.json() == json.loads(out)
        assert c.get(f"{base}/clusters", params={"column": "id"}).status_code == 400
        assert c.get(f"{base}/clusters", params={"column": "city", "radius": 7}).status_code == 400
        assert c.get("/api/v1/projects/demo/datasets/nope/facet", params={"column": "city"}).status_code == 404
    stranger = tokens.create_token(catalog, "sam").secret
    with TestClient(create_app(), headers={"Authorization": f"Bearer {stranger}"}) as c:
        assert c.get(f"{base}/facet", params={"column": "city"}).status_code in (403, 404)


def _pending(catalog: Catalog) -> dict[str, str | None]:
    info = sessions.current_session(catalog, "demo", "people", actor=auth.get_user(catalog, "ed"))
    assert info is not None
    return {e.row_id: e.new_value for e in sessions.effective_edits(layout_for("demo", "people"), info.session_id)}


@pytest.mark.usefixtures("people")
def test_cli_merges_clusters_named_by_key_or_value_as_one_bulk_change(
    catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("dataset", "clusters", "demo", "people", "city", "--as", "ed")
    code, out, _ = oreo(capsys, *args, "--merge", "new york", "--merge", "paris", "--preview")
    assert code == 0 and "nothing was saved" in out and "2 matching row(s): 2 would change" in out
    assert sessions.current_session(catalog, "demo", "people", actor=auth.get_user(catalog, "ed")) is None
    # "new york" is the first cluster's key; "paris" is a value of the third (its key too, so the key wins).
    code, out, _ = oreo(capsys, "--json", *args, "--merge", "new york", "--merge", "Paris")
    doc = json.loads(out)
    assert code == 0 and doc["preview"] is False and (doc["matched"], doc["changed"]) == (2, 2)
    assert doc["operation"]["kind"] == "recode" and _pending(catalog) == {"2": "New York", "7": "Paris"}
    # The clusters are found as the session leaves the table; a value names its cluster, --into picks the value.
    code, out, _ = oreo(capsys, *args, "--merge", "N.Y.", "--into", "New York")
    assert code == 0 and "bulk change" in out
    assert _pending(catalog) == {"2": "New York", "7": "Paris", "3": "New York", "4": "New York", "5": "New York"}
    code, out, _ = oreo(capsys, "--json", "dataset", "clusters", "demo", "people", "city", "--as", "ed",
                        "--session", _session_id(catalog))  # fmt: skip
    assert [c["key"] for c in json.loads(out)["clusters"]] == ["zurich"]  # the rest are one value now


def _session_id(catalog: Catalog) -> str:
    info = sessions.current_session(catalog, "demo", "people", actor=auth.get_user(catalog, "ed"))
    assert info is not None
    return info.session_id


@pytest.mark.usefixtures("people")
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--merge", "Tokyo"], "no cluster of 'city' by fingerprint has the key or value 'Tokyo'"),
        (["--merge-all", "--into", "X"], "a chosen value goes with exactly one cluster; 4 are named"),
        (["--into", "X"], "give --merge KEY_OR_VALUE (repeatable) or --merge-all"),
        (["--merge", "NY", "--merge-all"], "give --merge KEY_OR_VALUE (repeatable) or --merge-all"),
        (["--merge", "NY", "--method", "soundex"], "unknown clustering method 'soundex'"),
    ],
)
def test_cli_cluster_merge_refusals_are_one_line_and_save_nothing(
    catalog: Catalog, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    code, out, err = oreo(capsys, "dataset", "clusters", "demo", "people", "city", "--as", "ed", *extra)
    assert code == 1 and out == "" and len(err.splitlines()) == 1 and message in err
    assert sessions.current_session(catalog, "demo", "people", actor=auth.get_user(catalog, "ed")) is None


@pytest.mark.usefixtures("people")
def test_api_cluster_merges_answer_as_the_cli(
    catalog: Catalog, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WARM_ENGINE_ENV, "0")
    base = "/api/v1/projects/demo/datasets/people/cluster-merges"
    with TestClient(
        create_app(), headers={"Authorization": f"Bearer {tokens.create_token(catalog, 'ed').secret}"}
    ) as c:
        body = {"column": "city", "method": "levenshtein", "clusters": ["Zürich"], "into": "Zürich"}
        preview = c.post(f"{base}/preview", json=body)
        _, out, _ = oreo(capsys, "--json", "dataset", "clusters", "demo", "people", "city", "--as", "ed",
                         "--method", "levenshtein", "--merge", "Zürich", "--into", "Zürich", "--preview")  # fmt: skip
        assert preview.status_code == 200 and preview.json() == json.loads(out)
        assert preview.json()["changed"] == 1 and preview.json()["sample"][0]["after"] == "Zürich"
        assert c.post(base, json={**body, "clusters": ["Tokyo"]}).status_code == 400
        assert c.post(base, json={**body, "radius": 9}).status_code == 400
        assert sessions.current_session(catalog, "demo", "people", actor=auth.get_user(catalog, "ed")) is None
        merged = c.post(base, json={"column": "city", "where": ["id <= 6"]})
        assert merged.status_code == 201 and merged.json()["changed"] == 2 and merged.json()["cells"] == 2
        assert _pending(catalog) == {"2": "New York", "3": "NY"}
    stranger = tokens.create_token(catalog, "sam").secret
    with TestClient(create_app(), headers={"Authorization": f"Bearer {stranger}"}) as c:
        assert c.post(base, json={"column": "city"}).status_code in (403, 404)
