"""The ``oreo`` command line: every operation, for scripts and cron.

Global rules: ``oreo [--json] COMMAND ...``. With ``--json`` each command prints exactly
one JSON document on stdout. Exit codes: 0 success, 1 refused or failed (one line
``error: ...`` on stderr), 2 usage error.

This module only composes the command families of ``cli/commands/`` into one app; what they
share (the ``--json`` state, output, the acting user, error rendering) is ``cli/context.py``.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from cli import context
from cli.commands import accounts, admin, datasets, edits, history, migrate, notify, review, rules
from core import engine, logs, reactions
from core.errors import OreoError
from interface import errors

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Oreo: review console for Delta Lake tables.")


@app.callback()
def _global(json_output: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False) -> None:
    context.state.json = json_output


# The top-level commands, in the order `oreo --help` lists them.
app.command()(admin.demo)
app.command("api")(admin.api_cmd)
app.command("edit", help=edits.EDIT_HELP, context_settings=edits.EDIT_SETTINGS)(edits.edit)
app.command("append")(review.append_cmd)
app.command("history")(history.history_list)
app.command("diff")(history.history_diff)
app.command("restore")(history.history_restore)
app.command("export")(history.history_export)
app.command("doctor")(admin.doctor_cmd)
app.command("maintain")(admin.maintain_cmd)
app.command("cleanup")(admin.cleanup_cmd)

# The command groups, listed after them in this order.
app.add_typer(accounts.user_app, name="user")
app.add_typer(accounts.project_app, name="project")
app.add_typer(accounts.member_app, name="member")
app.add_typer(datasets.dataset_app, name="dataset")
app.add_typer(edits.session_app, name="session")
app.add_typer(review.cr_app, name="cr")
app.add_typer(rules.rules_app, name="rules")
app.add_typer(migrate.migrate_app, name="migrate")
app.add_typer(notify.webhook_app, name="webhook")
app.add_typer(notify.notify_app, name="notify")
app.add_typer(accounts.token_app, name="token")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``oreo`` console script.

    Library logging and warnings go to ``<data root>/logs/oreo.log`` and the Spark JVM's
    output to ``logs/spark.log``, so stderr holds nothing on success and one ``error:``
    line on failure; a failure's traceback is logged, and its line names the log.
    """
    try:
        log = logs.oreo_log()
    except OreoError as exc:  # a malformed setting: there is no data root to log into yet
        shown = errors.on_one_line(exc)
        sys.stderr.write(f"error: {shown.text}\n")
        return shown.rule.exit_code
    reactions.install()  # notifications and metrics follow the domain's events, once per process
    with logs.library_logging_to_file(log):
        return context.run_command(app, argv, log)


def run() -> None:
    """The console script: run ``main`` and leave with its exit code.

    delta-rs may abort the interpreter while it shuts down after a successful command
    ("terminate called without an active exception", delta-io/delta-rs#2184), which
    would turn a done job into exit code 134 for cron. So Spark is stopped, output is
    flushed, and the process ends right away with the command's own code.
    """
    code = main()
    try:
        engine.stop_spark()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    run()
