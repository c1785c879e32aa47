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

from cli import context
from cli import main as cli
from cli.commands import accounts
from core import auth, datasets, engine, reads, sessions, tokens
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
        # The whole of stdout must be one strict document: no bare NaN or Infinity.
        return json.loads(self.out, parse_constant=_not_strict_json)


def _not_strict_json(name: str) -> Any:
    raise ValueError(f"not strict JSON: bare {name}")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """Run ``oreo ARGS`` in-process, as the console script would."""
    capsys.readouterr()
    context.state.json = False  # the flag is module state; each invocation starts clean
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
    context.state.json = False
    yield
    context.state.json = False


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


def test_user_disable_enable_and_delete(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    password = run(capsys, "--json", "user", "add", "alice").json()["password"]
    run(capsys, "user", "add", "root", "--site-admin")
    token = tokens.create_token(catalog, "alice")

    disabled = run(capsys, "--json", "user", "disable", "alice", "--as", "root")
    assert disabled.code == 0, disabled.err
    assert disabled.json() == {"username": "alice", "disabled": True, "sessions_revoked": 0, "tokens_revoked": 1}
    with pytest.raises(AuthenticationFailed, match=r"^this account is disabled; ask a site admin to enable it$"):
        auth.authenticate(catalog, "alice", password)
    with pytest.raises(AuthenticationFailed, match="revoked"):
        tokens.authenticate_token(catalog, token.secret)
    assert_one_error_line(
        run(capsys, "user", "sessions", "alice", "--as", "alice"), "cannot act as 'alice': this account is disabled"
    )
    assert re.search(r"^alice .* disabled$", run(capsys, "user", "list").out, re.MULTILINE)

    enabled = run(capsys, "user", "enable", "alice")
    assert (enabled.code, enabled.out) == (0, "enabled alice\n")
    assert auth.authenticate(catalog, "alice", password).username == "alice"

    deleted = run(capsys, "--json", "user", "delete", "alice")
    assert deleted.json() == {"username": "alice", "deleted": True, "sessions_revoked": 0, "tokens_revoked": 0}
    assert [u.username for u in auth.list_users(catalog)] == ["root"]
    assert [e.target for e in list_events(catalog, name="user_deleted")] == ["user:alice"]


@pytest.mark.parametrize("command", ["disable", "delete"])
def test_the_last_site_admin_cannot_be_disabled_or_deleted(capsys, catalog: Catalog, command: str) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "user", "add", "root", "--site-admin")
    assert_one_error_line(run(capsys, "user", command, "root"), "'root': it is the last enabled site admin")
    assert_one_error_line(run(capsys, "user", command, "ghost"), "unknown user 'ghost'")
    run(capsys, "user", "add", "ed")
    assert_one_error_line(run(capsys, "user", command, "root", "--as", "ed"), "only a site admin can")
    assert not auth.get_user(catalog, "root").disabled


def test_user_revoke_and_password_also_revoke_api_tokens(capsys, catalog: Catalog) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "user", "add", "alice")
    first = tokens.create_token(catalog, "alice")
    revoked = run(capsys, "user", "revoke", "alice")
    assert (revoked.code, revoked.out) == (0, "revoked 0 session(s) and 1 API token(s) of alice\n")
    with pytest.raises(AuthenticationFailed, match="revoked"):
        tokens.authenticate_token(catalog, first.secret)
    second = tokens.create_token(catalog, "alice")
    assert run(capsys, "user", "password", "alice").code == 0
    with pytest.raises(AuthenticationFailed, match="revoked"):
        tokens.authenticate_token(catalog, second.secret)


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("password123\n", "one of the most common passwords"),
        ("            \n", "must not be only spaces"),
        ("x" * 1025 + "\n", "at most 1024 characters"),
    ],
)
def test_user_password_refuses_weak_passwords(  # type: ignore[no-untyped-def]
    capsys, catalog: Catalog, monkeypatch: pytest.MonkeyPatch, typed: str, message: str
) -> None:
    run(capsys, "user", "add", "alice")
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    assert_one_error_line(run(capsys, "user", "password", "alice", "--password-stdin"), message)


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
            context.state.json = False
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
            context.state.json = False
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


def test_an_unexpected_error_is_one_line_naming_the_log_that_holds_its_traceback(
    capsys, catalog: Catalog, data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the library broke\nwith a second line")

    monkeypatch.setattr(accounts.projects, "list_projects", broken)

    result = run(capsys, "--json", "project", "list")

    log = data_root / "logs" / "oreo.log"
    expected = rf"^error: unexpected RuntimeError: the library broke \(details in {re.escape(str(log))}\)$"
    assert_one_error_line(result, expected)
    assert 'raise RuntimeError("the library broke' in log.read_text()


@pytest.mark.spark
def test_edit_without_edit_options_is_refused_and_creates_no_session(capsys, shared: CliDataset) -> None:  # type: ignore[no-untyped-def]
    """A refused command creates nothing: no session folder, no audit row for a later `cr submit` to pick up."""
    from core.datasets import layout_for

    live = layout_for("demo", "people").live_edit_root
    sessions_before = sorted(p.name for p in live.iterdir()) if live.exists() else []
    started_before = len(list_events(open_catalog(), name="session_started"))

    result = run(capsys, "--json", "edit", "demo", "people", "--as", "ed")

    assert_one_error_line(result, r"^error: no edits given; add --set ROW_ID COLUMN VALUE")
    assert (sorted(p.name for p in live.iterdir()) if live.exists() else []) == sessions_before
    assert len(list_events(open_catalog(), name="session_started")) == started_before
    submitted = run(capsys, "--json", "cr", "submit", "demo", "people", "--as", "ed")
    assert_one_error_line(submitted, "ed has no open session on demo/people")


@pytest.mark.spark
@pytest.mark.parametrize(
    ("edits", "message"),
    [
        (["--set", "3", "score", "1,5"], r"^error: row '3', column 'score': '1,5' is not a number \(DOUBLE\)"),
        (
            ["--add-row", '{"id": "1.5", "name": "new"}'],
            r"^error: row '\(new row\)', column 'id': '1\.5' is not a whole",
        ),
    ],
)
def test_a_refused_first_edit_creates_no_session(  # type: ignore[no-untyped-def]
    capsys, shared: CliDataset, edits: list[str], message: str
) -> None:
    """A value core refuses starts nothing: no session folder, no session_started row, no open session."""
    username = f"typo{len(edits[-1])}"  # an editor of their own, with no session yet
    assert run(capsys, "user", "add", username).code == 0
    assert run(capsys, "member", "add", "demo", username, "--role", "editor").code == 0
    live = datasets.layout_for("demo", "people").live_edit_root
    sessions_before = sorted(p.name for p in live.iterdir()) if live.exists() else []
    started_before = len(list_events(open_catalog(), name="session_started"))

    result = run(capsys, "--json", "edit", "demo", "people", "--as", username, *edits)

    assert_one_error_line(result, message)
    assert (sorted(p.name for p in live.iterdir()) if live.exists() else []) == sessions_before
    assert len(list_events(open_catalog(), name="session_started")) == started_before
    user = auth.get_user(open_catalog(), username)
    assert sessions.current_session(open_catalog(), "demo", "people", actor=user) is None
    # The same edit with a value that fits starts the session and saves it.
    fixed = [e.replace("1,5", "1.5").replace('"1.5"', '"9001"') for e in edits]
    saved = run(capsys, "--json", "edit", "demo", "people", "--as", username, *fixed)
    assert saved.code == 0, saved.err
    assert len(list_events(open_catalog(), name="session_started")) == started_before + 1
    started = sessions.current_session(open_catalog(), "demo", "people", actor=user)
    assert started is not None and saved.json()["session_id"] == started.session_id


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


# ---------------------------------------------------------------- dataset rows: --where, --order-by, stable order


def _pandas_page(
    rows: list[dict[str, Any]], keep: Any, order_by: str, descending: bool, limit: int, offset: int
) -> list[str]:
    """Row ids of one page computed by pandas alone: filter, sort (ties by the key ``id``), slice."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    frame = frame[keep(frame)]
    frame = frame.sort_values([order_by, "id"], ascending=[not descending, True], na_position="last", kind="stable")
    return [str(i) for i in frame["id"].iloc[offset : offset + limit]]


ROW_QUERIES = [
    (["score >= 2", "city in (Paris,Lima)"], lambda f: (f.score >= 2) & f.city.isin(["Paris", "Lima"]), "score", True),
    (
        ["name contains 'PERSON 1'", "score is not empty"],
        lambda f: f.name.str.contains("person 1") & f.score.notna(),
        "city",
        False,
    ),
    (
        ["id between 3 and 20", "city != Oslo", "score < 4.5"],
        lambda f: f.id.between(3, 20) & (f.city != "Oslo") & (f.score < 4.5),
        "name",
        True,
    ),
    (["score is empty"], lambda f: f.score.isna(), "city", True),
]


@pytest.mark.spark
@pytest.mark.parametrize(("wheres", "keep", "order_by", "descending"), ROW_QUERIES)
def test_rows_where_and_order_by_agree_with_read_page_and_pandas(  # type: ignore[no-untyped-def]
    capsys, shared: CliDataset, wheres: list[str], keep: Any, order_by: str, descending: bool
) -> None:
    import pandas as pd

    from core.filters import parse_where

    main = Path(shared.created["path"])
    expected_total = int(keep(pd.DataFrame(shared.rows)).sum())
    conditions = [parse_where(w) for w in wheres]
    for limit, offset in [(100, 0), (3, 0), (3, 2)]:
        args = [a for w in wheres for a in ("--where", w)] + ["--order-by", order_by, "--limit", str(limit)]
        args += ["--offset", str(offset)] + (["--desc"] if descending else [])
        result = run(capsys, "--json", "dataset", "rows", "demo", "people", *args)
        assert result.code == 0, result.err
        doc = result.json()
        page = reads.read_page(
            main, conditions=conditions, order_by=order_by, descending=descending, default_order=["id"],
            limit=limit, offset=offset,
        )  # fmt: skip
        expected = _pandas_page(shared.rows, keep, order_by, descending, limit, offset)
        assert [r["row_id"] for r in doc["rows"]] == list(page.rows["row_id"]) == expected
        assert doc["total"] == page.total == expected_total


@pytest.mark.spark
@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("score >= lots", r"filter 'score ≥ lots': column 'score': 'lots' is not a number"),
        ("id = 1.5", r"column 'id': '1.5' is not a whole number"),
        ('"name"" = 1 OR ""id" = x', r"unknown column 'name\" = 1 OR \"id'; columns are: row_id, id, name, city"),
        ('name" = 1 OR "id', "cannot read the filter"),
        ("city ~ Paris", "cannot read the filter 'city ~ Paris'"),
        ("city in (Paris", "parentheses do not match"),
    ],
)
def test_rows_where_refuses_with_one_line(capsys, shared: CliDataset, where: str, message: str) -> None:  # type: ignore[no-untyped-def]
    assert_one_error_line(run(capsys, "--json", "dataset", "rows", "demo", "people", "--where", where), message)


@pytest.mark.spark
def test_rows_where_values_are_bound_not_sql(capsys, shared: CliDataset) -> None:  # type: ignore[no-untyped-def]
    for where in ["city = Paris' OR '1'='1", "name contains %", "city in ('Paris'') OR 1=1 --', Lima)"]:
        result = run(capsys, "--json", "dataset", "rows", "demo", "people", "--where", where)
        assert result.code == 0, result.err
        assert result.json()["total"] == 0 or where.endswith("Lima)")
    lima = run(capsys, "--json", "dataset", "rows", "demo", "people", "--where", "city in ('Paris'') OR 1=1 --', Lima)")
    assert {r["city"] for r in lima.json()["rows"]} == {"Lima"}


@pytest.mark.spark
def test_the_default_order_survives_a_merge(capsys, data_root: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Page 1 in the default order is the same rows after edits to them are merged (keyed and keyless)."""
    order = [17, 3, 29, 8, 1, 24, 12, 5, 30, 2, 19, 11, 26, 6, 14, 22, 9, 27, 4, 15]
    order += [21, 10, 28, 7, 18, 13, 25, 16, 23, 20]
    keyed = tmp_path / "keyed.csv"
    keyed.write_text("id,name\n" + "".join(f"{i},n{i}\n" for i in order))
    keyless = tmp_path / "keyless.csv"
    keyless.write_text("title,body\n" + "".join(f"t{i},b{i}\n" for i in order))
    setup = [
        ["project", "create", "demo"],
        ["user", "add", "ed"],
        ["user", "add", "al"],
        ["member", "add", "demo", "ed", "--role", "editor"],
        ["member", "add", "demo", "al", "--role", "approver"],
        ["dataset", "create", "demo", "keyed", "--file", str(keyed), "--key", "id"],
        ["dataset", "create", "demo", "keyless", "--file", str(keyless)],
    ]
    for args in setup:
        assert run(capsys, *args).code == 0

    def page(dataset: str, limit: int = 10) -> list[dict[str, Any]]:
        result = run(capsys, "--json", "dataset", "rows", "demo", dataset, "--limit", str(limit))
        assert result.code == 0, result.err
        return result.json()["rows"]

    def merge(dataset: str, *edits: str) -> None:
        assert run(capsys, "edit", "demo", dataset, "--as", "ed", *edits).code == 0
        submitted = run(capsys, "--json", "cr", "submit", "demo", dataset, "--as", "ed")
        assert submitted.code == 0, submitted.err
        approved = run(capsys, "--json", "cr", "approve", submitted.json()["cr_id"], "--as", "al")
        assert approved.code == 0, approved.err

    # Keyed: the key's order, not the file's.
    before = page("keyed")
    assert [r["id"] for r in before] == list(range(1, 11))
    merge("keyed", "--set", "3", "name", "edited 3", "--set", "8", "name", "edited 8", "--set", "25", "name", "e25")
    after = page("keyed")
    assert [r["row_id"] for r in after] == [r["row_id"] for r in before]
    assert [r["name"] for r in after if r["id"] in (3, 8)] == ["edited 3", "edited 8"]

    # Keyless: the order rows were added (the file's order), then added rows last.
    before = page("keyless")
    assert [r["title"] for r in before] == [f"t{i}" for i in order[:10]]
    second, fifth = before[1]["row_id"], before[4]["row_id"]
    added = '{"title": "new"}'
    merge("keyless", "--set", second, "body", "edited", "--set", fifth, "body", "edited", "--add-row", added)
    after = page("keyless")
    assert [r["row_id"] for r in after] == [r["row_id"] for r in before]
    bodies = [f"b{i}" for i in order[:10]]
    bodies[1] = bodies[4] = "edited"
    assert [r["body"] for r in after] == bodies
    everything = page("keyless", 100)
    assert [r["title"] for r in everything] == [f"t{i}" for i in order] + ["new"]

    # Rows an import appends follow, in the file's order.
    more = tmp_path / "more.csv"
    more.write_text("title,body\nzz,1\naa,2\nmm,3\n")
    appended = run(capsys, "--json", "append", "demo", "keyless", "--file", str(more), "--as", "ed")
    assert appended.code == 0, appended.err
    assert run(capsys, "cr", "approve", appended.json()["cr_id"], "--as", "al").code == 0
    everything = page("keyless", 100)
    assert [r["title"] for r in everything] == [f"t{i}" for i in order] + ["new", "zz", "aa", "mm"]
    assert [r["row_id"] for r in everything][:10] == [r["row_id"] for r in before]

    # Pending edits are shown where the merge will put them, and filters see their new values.
    edits = ["--set", "3", "name", "zzz", "--add-row", '{"id": 0}']
    edit = run(capsys, "--json", "edit", "demo", "keyed", "--as", "ed", *edits)
    assert edit.code == 0, edit.err
    session = ["--as", "ed", "--session", edit.json()["session_id"]]

    def overlaid(*args: str) -> dict[str, Any]:
        result = run(capsys, "--json", "dataset", "rows", "demo", "keyed", *session, *args)
        assert result.code == 0, result.err
        return result.json()

    first = overlaid("--limit", "3")
    assert [(r["row_id"], r["_change"]) for r in first["rows"]] == [("0", "insert"), ("1", ""), ("2", "")]
    assert first["total"] == 31
    hit = overlaid("--where", "name starts with Z")
    assert [(r["row_id"], r["_change"], r["_edited"]) for r in hit["rows"]] == [("3", "update", ["name"])]
    assert hit["total"] == 1
    assert overlaid("--where", "name = edited 3")["total"] == 0
    assert [r["row_id"] for r in overlaid("--order-by", "name", "--desc", "--limit", "1")["rows"]] == ["3"]


@pytest.mark.spark
def test_the_cli_reads_local_files_outside_the_import_folders(  # type: ignore[no-untyped-def]
    capsys, data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 §1: OREO_IMPORT_FOLDERS confines remote callers; the operator's CLI reads its own files."""
    monkeypatch.setenv("OREO_IMPORT_FOLDERS", str(tmp_path / "import-folder"))
    get_settings.cache_clear()
    first, more = tmp_path / "first.csv", tmp_path / "more.csv"
    first.write_text("id,name\n1,a\n")
    more.write_text("id,name\n2,b\n")
    for setup in (
        ["project", "create", "demo"],
        ["user", "add", "ed"],
        ["member", "add", "demo", "ed", "--role", "editor"],
    ):
        assert run(capsys, *setup).code == 0
    created = run(capsys, "dataset", "create", "demo", "d", "--file", str(first), "--key", "id")
    assert created.code == 0, created.err
    appended = run(capsys, "--json", "append", "demo", "d", "--file", str(more), "--as", "ed")
    assert appended.code == 0, appended.err
    assert appended.json()["added"] == 1


def test_python_m_cli_main_keeps_json_for_sub_apps(tmp_path: Path) -> None:
    """``python -m cli.main --json`` reaches sub-apps (the flag is ``cli.context``'s) as JSON, not text."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OREO_")}
    env.pop("SPARK_REMOTE", None)
    env.update(DELTA_DATA_ROOT=str(tmp_path / "delta"), OREO_DATABASE_URL=f"sqlite:///{tmp_path / 'catalog.db'}")
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "--json", "notify", "drain"],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"sent": [], "failed": [], "dead": []}
