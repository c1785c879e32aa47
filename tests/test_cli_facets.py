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
