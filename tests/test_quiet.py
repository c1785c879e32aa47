"""Quiet, offline Spark starts: real ``oreo`` processes print nothing but their answer.

Every command runs as its own process, as cron runs it, with Ivy pointed at a
repository that cannot be reached: a start that resolves jars over the network fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from core import engine

pytestmark = pytest.mark.spark

OREO = Path(sys.executable).parent / "oreo"
# Port 9 (discard) on loopback refuses connections: any Ivy download fails at once.
UNREACHABLE_IVY = """<ivysettings>
  <settings defaultResolver="nowhere"/>
  <resolvers><ibiblio name="nowhere" m2compatible="true" root="http://127.0.0.1:9/maven2/"/></resolvers>
</ivysettings>
"""


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def json(self) -> dict[str, object]:
        return dict(json.loads(self.out))


@dataclass(frozen=True)
class Workspace:
    root: Path
    env: dict[str, str]
    runs: dict[str, Run]


def offline_env(base: Path) -> dict[str, str]:
    """The environment of an ``oreo`` process whose Ivy can reach no repository and has an empty cache."""
    settings = base / "ivysettings.xml"
    settings.write_text(UNREACHABLE_IVY)
    submit = f"--conf spark.jars.ivySettings={settings} --conf spark.jars.ivy={base / 'empty-ivy'} pyspark-shell"
    env = {
        **os.environ,
        "DELTA_DATA_ROOT": str(base / "delta"),
        "OREO_DATABASE_URL": f"sqlite:///{base / 'catalog.db'}",
        "OREO_SPARK_SHUFFLE_PARTITIONS": "2",
        "PYSPARK_SUBMIT_ARGS": submit,
    }
    env.pop("SPARK_REMOTE", None)
    return env


def oreo(env: dict[str, str], *args: str) -> Run:
    done = subprocess.run([str(OREO), *args], env=env, capture_output=True, text=True, timeout=900)
    return Run(tuple(args), done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A dataset created, edited, submitted and approved by separate offline ``oreo --json`` processes."""
    base = tmp_path_factory.mktemp("quiet")
    env = offline_env(base)
    (base / "people.csv").write_text("id,name\n1,ada\n2,grace\n")
    (base / "bad_suite.json").write_text(
        json.dumps({"name": "people", "expectations": [{"type": "expect_nonsense", "kwargs": {"column": "id"}}]})
    )
    runs: dict[str, Run] = {}
    steps = {
        "project": ["project", "create", "demo"],
        "ed": ["user", "add", "ed"],
        "al": ["user", "add", "al"],
        "ed member": ["member", "add", "demo", "ed", "--role", "editor"],
        "al member": ["member", "add", "demo", "al", "--role", "approver"],
        "create": ["dataset", "create", "demo", "people", "--file", str(base / "people.csv"), "--key", "id"],
        "no edits": ["edit", "demo", "people", "--as", "ed"],
        "nothing to submit": ["cr", "submit", "demo", "people", "--as", "ed"],
        "edit": ["edit", "demo", "people", "--as", "ed", "--set", "1", "name", "Ada"],
        "submit": ["cr", "submit", "demo", "people", "--as", "ed", "--title", "capital A"],
        "bad rules": ["rules", "set", "demo", "people", "--file", str(base / "bad_suite.json")],
    }
    for name, args in steps.items():
        runs[name] = oreo(env, "--json", *args)
        if name not in ("no edits", "nothing to submit", "bad rules"):
            assert runs[name].code == 0, (name, runs[name].err[-3000:])
    runs["approve"] = oreo(env, "--json", "cr", "approve", str(runs["submit"].json()["cr_id"]), "--as", "al")
    return Workspace(root=base / "delta", env=env, runs=runs)


@pytest.mark.parametrize("name", ["create", "edit", "submit", "approve"])
def test_a_successful_command_prints_one_json_document_and_nothing_on_stderr(workspace: Workspace, name: str) -> None:
    run = workspace.runs[name]

    assert run.code == 0, run.err[-3000:]
    assert run.err == ""
    assert run.out.count("\n") == 1 and isinstance(run.json(), dict)


def test_spark_starts_offline_from_the_jar_folder(workspace: Workspace) -> None:
    """Ivy could reach nothing, so the Spark starts above used the resolved jar files only."""
    assert workspace.runs["approve"].json()["state"] == "merged"
    jars = engine.offline_jars()
    assert jars is not None and any(p.name.startswith("io.delta_delta-spark") for p in jars)


def test_the_jvm_output_goes_to_the_log_under_the_data_root(workspace: Workspace) -> None:
    log = workspace.root / "logs" / "spark.log"

    text = log.read_text()

    assert "log4j" in text  # Spark's start-up banner, no longer on stderr
    assert ":: resolving dependencies ::" not in text  # no Ivy resolution at all


def test_a_refused_command_prints_exactly_one_error_line(workspace: Workspace) -> None:
    run = workspace.runs["bad rules"]

    assert (run.code, run.out) == (1, "")
    assert run.err.count("\n") == 1 and run.err.startswith("error: "), run.err
    assert "expect_nonsense" in run.err
    assert "expect_nonsense not found" in (workspace.root / "logs" / "oreo.log").read_text()  # GX's own logging


def test_an_edit_without_edits_is_refused_and_leaves_no_session_to_submit(workspace: Workspace) -> None:
    refused, submitted = workspace.runs["no edits"], workspace.runs["nothing to submit"]

    assert (refused.code, refused.out) == (1, "")
    assert refused.err.startswith("error: no edits given") and refused.err.count("\n") == 1, refused.err
    assert (submitted.code, submitted.out) == (1, "")
    assert submitted.err == "error: ed has no open session on demo/people; make edits with `oreo edit` first\n"


def test_library_logging_and_warnings_go_to_the_log_file_only_while_a_command_runs(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import logging
    import warnings

    from core import logs

    log = tmp_path / "logs" / "oreo.log"
    root_handlers = list(logging.getLogger().handlers)

    with logs.library_logging_to_file(log):
        logging.getLogger("great_expectations.core").error("Could not add expectation")
        warnings.warn("a library's FutureWarning", FutureWarning, stacklevel=1)

    assert capfd.readouterr().err == ""
    text = log.read_text()
    assert "ERROR great_expectations.core: Could not add expectation" in text
    assert "a library's FutureWarning" in text
    assert logging.getLogger().handlers == root_handlers  # put back for the next in-process command


def test_a_spark_that_cannot_start_is_one_error_line_naming_the_log(tmp_path: Path) -> None:
    env = {**offline_env(tmp_path), "OREO_SPARK_DRIVER_MEMORY": "not-a-size"}
    (tmp_path / "people.csv").write_text("id,name\n1,ada\n")
    assert oreo(env, "--json", "project", "create", "demo").code == 0

    run = oreo(env, "--json", "dataset", "create", "demo", "people", "--file", str(tmp_path / "people.csv"))

    # The failed create removed the data root it made; the log the line names was written after.
    log = tmp_path / "delta" / "logs" / "oreo.log"
    assert (run.code, run.out) == (1, "")
    assert run.err.count("\n") == 1 and run.err.startswith("error: could not start Spark"), run.err
    assert run.err.endswith(f"(details in {log})\n")
    assert "Invalid maximum heap size: -Xmxnot-a-size" in log.read_text()  # the JVM's own words
