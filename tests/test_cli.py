"""The ``oreo`` command line: one JSON document with --json, exit codes 0/1/2, one-line errors."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli import main as cli
from core import auth, engine, reads
from core.audit import list_events
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.errors import AuthenticationFailed

OREO = Path(sys.executable).parent / "oreo"
CITIES = ["Paris", "Oslo", "Lima"]


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)  # the whole of stdout must be one document


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """Run ``oreo ARGS`` in-process, as the console script would."""
    capsys.readouterr()
    cli.state.json = False  # the flag is module state; each invocation starts clean
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def assert_one_error_line(result: Result, message: str) -> None:
    assert result.code == 1
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: ")
    assert re.search(message, lines[0]), lines[0]


@pytest.fixture(autouse=True)
def _clean_cli_state() -> Iterator[None]:
    cli.state.json = False
    yield
    cli.state.json = False


# ---------------------------------------------------------------- users, projects, members


def test_user_add_json_prints_a_generated_password_that_signs_in(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    result = run(capsys, "--json", "user", "add", "alice", "--email", "Alice@Example.com")
    assert result.code == 0, result.err
    doc = result.json()
    assert set(doc) == {"username", "email", "site_admin", "password"}
    assert (doc["username"], doc["email"], doc["site_admin"]) == ("alice", "alice@example.com", False)
    assert len(doc["password"]) >= auth.MIN_PASSWORD_LENGTH

    user = auth.authenticate(catalog, "alice", doc["password"])
    assert user.username == "alice"
    with pytest.raises(AuthenticationFailed, match="invalid username or password"):
        auth.authenticate(catalog, "alice", doc["password"] + "x")
    with pytest.raises(AuthenticationFailed, match="invalid username or password"):
        auth.authenticate(catalog, "nobody", doc["password"])
    assert len(list_events(catalog, name="sign_in_failed")) == 2


def test_user_add_human_output_shows_the_password(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    result = run(capsys, "user", "add", "bob", "--site-admin")
    assert result.code == 0
    match = re.fullmatch(r"created user bob with password (\S+)\n", result.out)
    assert match, result.out
    assert auth.authenticate(catalog, "bob", match.group(1)).site_admin


def test_user_add_reads_the_password_from_stdin(capsys, catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sys, "stdin", io.StringIO("correct horse battery\nignored second line\n"))
    result = run(capsys, "--json", "user", "add", "carol", "--password-stdin")
    assert result.code == 0, result.err
    assert result.json() == {"username": "carol", "email": None, "site_admin": False}  # no password echoed
    assert "correct horse" not in result.out
    assert auth.authenticate(catalog, "carol", "correct horse battery").username == "carol"


@pytest.mark.parametrize(
    ("stdin", "message"),
    [("", "--password-stdin given but nothing was read"), ("short\n", "password must have at least 8 characters")],
)
def test_user_add_bad_stdin_password(
    capsys, catalog: Catalog, monkeypatch: pytest.MonkeyPatch, stdin: str, message: str
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert_one_error_line(run(capsys, "--json", "user", "add", "dave", "--password-stdin"), message)
    assert auth.list_users(catalog) == []


def test_user_password_and_list(capsys, catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "user", "add", "erin", "--email", "erin@example.com")
    changed = run(capsys, "--json", "user", "password", "erin")
    assert changed.code == 0
    new_password = changed.json()["password"]
    assert auth.authenticate(catalog, "erin", new_password).username == "erin"

    listed = run(capsys, "--json", "user", "list")
    assert listed.json() == {
        "users": [{"username": "erin", "email": "erin@example.com", "site_admin": False, "auth_source": "local"}]
    }
    assert_one_error_line(run(capsys, "user", "password", "ghost"), "unknown user 'ghost'")


def test_project_create_member_add_and_list(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    created = run(capsys, "--json", "project", "create", "demo", "--name", "Demo project")
    assert created.code == 0
    assert created.json() == {"project": "demo", "name": "Demo project"}
    run(capsys, "user", "add", "ed")

    added = run(capsys, "--json", "member", "add", "demo", "ed", "--role", "approver")
    assert added.code == 0
    assert added.json() == {"project": "demo", "username": "ed", "role": "approver"}
    assert auth.role_in(catalog, auth.get_user(catalog, "ed"), "demo") is auth.Role.APPROVER

    run(capsys, "project", "create", "hidden")
    assert run(capsys, "--json", "project", "list").json() == {
        "projects": [{"project": "demo", "name": "Demo project"}, {"project": "hidden", "name": "hidden"}]
    }
    assert run(capsys, "--json", "project", "list", "--as", "ed").json() == {
        "projects": [{"project": "demo", "name": "Demo project"}]
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["project", "create", "demo"], "project 'demo' already exists"),
        (["project", "create", "Bad/Id"], "invalid project id"),
        (["member", "add", "demo", "ghost", "--role", "editor"], "unknown user 'ghost'"),
        (["member", "add", "nope", "ed", "--role", "editor"], "unknown project 'nope'"),
        (["project", "list", "--as", "ghost"], "unknown user 'ghost'"),
        (["user", "add", "ed"], "user 'ed' already exists"),
        (["user", "add", "new", "--email", "not-an-email"], "invalid email address"),
        (["dataset", "show", "demo", "ghost"], "unknown dataset demo/ghost"),
        (["dataset", "create", "demo", "x", "--file", "missing.txt"], "unsupported file type '.txt'"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, list) else None,
)
@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["human", "json"])
def test_refusals_exit_1_with_one_error_line(
    capsys, catalog: Catalog, args: list[str], message: str, json_flag: list[str]
) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "project", "create", "demo")
    run(capsys, "user", "add", "ed")
    assert_one_error_line(run(capsys, *json_flag, *args), message)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuch"], "No such command 'nosuch'"),
        (["user", "nosuch"], "No such command 'nosuch'"),
        (["member", "add", "demo", "ed", "--role", "boss"], "Invalid value for --role"),
        (["member", "add", "demo", "ed"], "Missing option '--role'"),
        (["dataset", "create", "demo", "x"], "Missing option '--file'"),
        (["dataset", "rows", "demo", "x", "--limit", "many"], "Invalid value for '--limit'"),
        (["dataset", "rows", "demo", "x", "--filter", "no-equals-sign"], "must look like COLUMN=VALUE"),
        (["--bogus"], "No such option: --bogus"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, list) else None,
)
def test_usage_errors_exit_2(capsys, catalog: Catalog, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "project", "create", "demo")
    run(capsys, "user", "add", "ed")
    result = run(capsys, "--json", *args)
    assert result.code == 2
    assert result.out == ""
    assert message in result.err
    assert auth.role_in(catalog, auth.get_user(catalog, "ed"), "demo") is None  # nothing happened


def test_console_script_exit_codes(data_root: Path) -> None:
    """The installed ``oreo`` entry point maps main()'s return value to the process exit code."""
    env = {**os.environ}
    created = subprocess.run([OREO, "--json", "project", "create", "demo"], env=env, capture_output=True, text=True)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout) == {"project": "demo", "name": "demo"}

    again = subprocess.run([OREO, "--json", "project", "create", "demo"], env=env, capture_output=True, text=True)
    assert again.returncode == 1
    assert (again.stdout, again.stderr) == ("", "error: project 'demo' already exists\n")

    usage = subprocess.run([OREO, "nosuch"], env=env, capture_output=True, text=True)
    assert usage.returncode == 2
    assert usage.stdout == ""
    assert "No such command 'nosuch'" in usage.stderr


# ---------------------------------------------------------------- datasets (Spark)


def _write_people(path: Path, n: int) -> list[dict[str, Any]]:
    rows = [
        {"id": i, "name": f"person {i:02d}", "city": CITIES[i % 3], "score": None if i % 5 == 0 else i / 4}
        for i in range(1, n + 1)
    ]
    lines = ["id,name,city,score"]
    lines += [f"{r['id']},{r['name']},{r['city']},{'' if r['score'] is None else r['score']}" for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return rows


@dataclass(frozen=True)
class CliDataset:
    env: dict[str, str]
    rows: list[dict[str, Any]]
    created: dict[str, Any]


@pytest.fixture(scope="module")
def cli_dataset(spark, tmp_path_factory: pytest.TempPathFactory) -> CliDataset:  # type: ignore[no-untyped-def]
    """``demo/people`` created once through ``oreo --json dataset create`` (Spark commits cost seconds)."""
    base = tmp_path_factory.mktemp("cli")
    env = {"DELTA_DATA_ROOT": str(base / "delta"), "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}"}
    rows = _write_people(base / "people.csv", 25)
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        get_settings.cache_clear()
        reset_catalogs()
        try:
            setup = [
                ["project", "create", "demo"],
                ["user", "add", "ann"],
                ["user", "add", "ed"],
                ["user", "add", "stranger"],
                ["member", "add", "demo", "ann", "--role", "admin"],
                ["member", "add", "demo", "ed", "--role", "editor"],
            ]
            with contextlib.redirect_stdout(io.StringIO()):
                assert all(cli.main(args) == 0 for args in setup)
            cli.state.json = False
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(
                    [
                        "--json",
                        "dataset",
                        "create",
                        "demo",
                        "people",
                        "--file",
                        str(base / "people.csv"),
                        "--key",
                        "id",
                        "--as",
                        "ann",
                    ]
                )
            assert code == 0, err.getvalue()
        finally:
            cli.state.json = False
            reset_catalogs()
            get_settings.cache_clear()
    return CliDataset(env=env, rows=rows, created=json.loads(out.getvalue()))


@pytest.fixture
def shared(cli_dataset: CliDataset, data_root: Path, monkeypatch: pytest.MonkeyPatch) -> CliDataset:
    for name, value in cli_dataset.env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    reset_catalogs()
    return cli_dataset


def _expected_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"row_id": str(r["id"]), **r} for r in rows]


@pytest.mark.spark
def test_dataset_create_json(shared: CliDataset) -> None:
    doc = shared.created
    assert set(doc) == {"project", "dataset", "version", "rows", "key", "last_commit_id", "last_commit_at", "path"}
    assert (doc["project"], doc["dataset"], doc["version"], doc["rows"], doc["key"]) == ("demo", "people", 0, 25, "id")
    main = Path(doc["path"])
    assert main == Path(shared.env["DELTA_DATA_ROOT"]) / "projects" / "demo" / "datasets" / "people" / "main"
    [commit] = engine.history(main)
    assert commit.user_metadata["commit_id"] == doc["last_commit_id"]
    assert commit.user_metadata["actor"] == "ann"
    assert reads.count_rows(main) == 25


@pytest.mark.spark
def test_dataset_show_json_keys(capsys, shared: CliDataset) -> None:  # type: ignore[no-untyped-def]
    result = run(capsys, "--json", "dataset", "show", "demo", "people", "--as", "ed")
    assert result.code == 0, result.err
    doc = result.json()
    assert list(doc) == ["project", "dataset", "version", "rows", "columns", "last_commit_id", "path"]
    assert (doc["project"], doc["dataset"], doc["version"], doc["rows"]) == ("demo", "people", 0, 25)
    assert doc["last_commit_id"] == shared.created["last_commit_id"]
    assert doc["path"] == shared.created["path"]
    assert doc["columns"] == [
        {"name": "row_id", "type": "VARCHAR"},
        {"name": "id", "type": "BIGINT"},
        {"name": "name", "type": "VARCHAR"},
        {"name": "city", "type": "VARCHAR"},
        {"name": "score", "type": "DOUBLE"},
    ]


@pytest.mark.spark
def test_dataset_show_human(capsys, shared: CliDataset) -> None:  # type: ignore[no-untyped-def]
    result = run(capsys, "dataset", "show", "demo", "people")
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0] == "demo/people  version 0  25 rows"
    assert lines[1] == f"path: {shared.created['path']}"
    assert lines[2] == f"last commit: {shared.created['last_commit_id']}"
    assert [line.split()[0] for line in lines[4:]] == ["row_id", "id", "name", "city", "score"]


@pytest.mark.spark
def test_dataset_list_json(capsys, shared: CliDataset) -> None:  # type: ignore[no-untyped-def]
    everyone = run(capsys, "--json", "dataset", "list")
    assert everyone.code == 0
    assert everyone.json() == {"datasets": [shared.created]}
    assert run(capsys, "--json", "dataset", "list", "demo", "--as", "ed").json() == {"datasets": [shared.created]}
    assert run(capsys, "--json", "dataset", "list", "--as", "stranger").json() == {"datasets": []}
    assert_one_error_line(
        run(capsys, "--json", "dataset", "list", "demo", "--as", "stranger"), "cannot list its datasets"
    )


@pytest.mark.spark
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ([], lambda r: True),
        (["--filter", "city=Oslo"], lambda r: r["city"] == "Oslo"),
        (["--filter", "id=7"], lambda r: r["id"] == 7),
        (["--contains", "name=SON 1"], lambda r: "son 1" in r["name"]),
        (["--filter", "city=Lima", "--contains", "name=2"], lambda r: r["city"] == "Lima" and "2" in r["name"]),
        (["--filter", "city=Nowhere"], lambda r: False),
    ],
    ids=["all", "eq", "eq-number", "contains", "both", "none"],
)
def test_dataset_rows_json(capsys, shared: CliDataset, options: list[str], expected) -> None:  # type: ignore[no-untyped-def]
    result = run(capsys, "--json", "dataset", "rows", "demo", "people", "--order-by", "id", "--limit", "100", *options)
    assert result.code == 0, result.err
    doc = result.json()
    assert set(doc) == {"rows", "total"}
    want = _expected_rows([r for r in shared.rows if expected(r)])
    assert doc["total"] == len(want)
    assert doc["rows"] == want


@pytest.mark.spark
def test_dataset_rows_paging_desc_and_version(capsys, shared: CliDataset) -> None:  # type: ignore[no-untyped-def]
    page = run(
        capsys,
        "--json",
        "dataset",
        "rows",
        "demo",
        "people",
        "--order-by",
        "id",
        "--desc",
        "--limit",
        "4",
        "--offset",
        "2",
        "--version",
        "0",
        "--as",
        "ed",
    ).json()
    assert page["total"] == 25
    assert [r["id"] for r in page["rows"]] == [23, 22, 21, 20]
    assert all(r["row_id"] == str(r["id"]) for r in page["rows"])


@pytest.mark.spark
def test_dataset_rows_human(capsys, shared: CliDataset) -> None:  # type: ignore[no-untyped-def]
    result = run(capsys, "dataset", "rows", "demo", "people", "--order-by", "id", "--limit", "3")
    assert result.code == 0
    assert result.out.rstrip().endswith("(3 of 25 rows)")
    assert "person 01" in result.out


@pytest.mark.spark
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--filter", "nope=1"], "unknown column 'nope'"),
        (["--order-by", "nope"], "cannot order by unknown column 'nope'"),
        (["--version", "5"], "has no version 5; the latest is 0"),
        (["--limit", "0"], "limit must be between 1 and 10000"),
        (["--as", "stranger"], "'stranger' cannot read this dataset"),
    ],
)
def test_dataset_rows_refusals(capsys, shared: CliDataset, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    assert_one_error_line(run(capsys, "--json", "dataset", "rows", "demo", "people", *args), message)


@pytest.mark.spark
def test_dataset_create_refusals_exit_1(capsys, shared: CliDataset, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("id,name\n1,a\n2\n")
    assert_one_error_line(
        run(capsys, "--json", "dataset", "create", "demo", "other", "--file", str(ragged)),
        "different number of columns",
    )
    assert_one_error_line(
        run(capsys, "dataset", "create", "demo", "people", "--file", str(ragged)), "dataset demo/people already exists"
    )
    assert_one_error_line(
        run(capsys, "dataset", "create", "demo", "other", "--file", str(ragged), "--as", "ed"),
        "'ed' cannot create a dataset",
    )
    assert run(capsys, "--json", "dataset", "list").json() == {"datasets": [shared.created]}


@pytest.mark.spark
def test_console_script_dataset_create_prints_only_json(data_root: Path, tmp_path: Path) -> None:
    """In a fresh process Spark starts inside the command; its JVM chatter must not reach stdout."""
    source = tmp_path / "people.csv"
    rows = _write_people(source, 12)
    env = {**os.environ}
    subprocess.run([OREO, "project", "create", "demo"], env=env, check=True, capture_output=True)
    created = subprocess.run(
        [OREO, "--json", "dataset", "create", "demo", "people", "--file", str(source)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert created.returncode == 0, created.stderr[-3000:]
    doc = json.loads(created.stdout)
    assert (doc["rows"], doc["version"], doc["key"]) == (len(rows), 0, None)
    assert created.stdout.count("\n") == 1
    catalog = open_catalog()
    assert [e.details["commit_id"] for e in list_events(catalog, name="dataset_created")] == [doc["last_commit_id"]]
