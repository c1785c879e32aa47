"""What every command family of the ``oreo`` CLI shares: the ``--json`` state, output, the acting user, errors.

The lowest module of ``cli/``: the families in ``cli/commands/`` import it, it imports none of them,
and ``cli/main.py`` composes them. ``run_command`` is the one place a command's failure becomes an
exit code and one ``error: ...`` line on stderr, as ``interface.errors``' table says.
"""

from __future__ import annotations

import functools
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import click
import typer

from core.errors import OreoError
from interface import context as lookups
from interface import errors
from interface.documents import dumps

_logger = logging.getLogger("oreo.cli")


@dataclass
class _State:
    json: bool = False


# Set by the root app's ``--json`` (and ``notify drain --json``) before a command runs.
state = _State()

AsUser = Annotated[str | None, typer.Option("--as", help="Act as this user (default: the local operator).")]


def emit(document: dict[str, Any], human: str | None = None) -> None:
    """Print ``document`` as JSON with --json, else ``human`` (or an indented rendering)."""
    if state.json:
        sys.stdout.write(dumps(document) + "\n")
    else:
        sys.stdout.write((human if human is not None else dumps(document, indent=2)) + "\n")


def progress_to_stderr(message: str, fraction: float) -> None:
    """Progress lines go to stderr, so ``--json`` output stays one document."""
    if not state.json:
        sys.stderr.write(f"[{fraction:4.0%}] {message}\n")


def escape_controls(text: str) -> str:
    """``text`` with control characters (CR, LF, ESC, ...) written as escapes, as the title's repr shows them.

    A comment or value could otherwise break a line or send terminal escape sequences.
    """
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


# The look-ups every front end makes (``interface.context``), by the names the command families use:
# the configured catalog, the user ``--as`` names (the local operator without it), and a session
# refused if it belongs to another dataset than the one named.
command_catalog = lookups.catalog
acting_user = lookups.acting_user
check_session_on = lookups.session_on


@functools.cache
def _click_command(app: typer.Typer) -> click.Command:
    """``app`` as one click command, built once per process (60-120 ms for Oreo's: a process that
    runs many commands, such as the suite's in-process runs, paid it on each)."""
    return typer.main.get_command(app)


def run_command(app: typer.Typer, argv: list[str] | None, log: Path) -> int:
    """Run one command of ``app``; its exit code, with any failure as one ``error:`` line (details in ``log``)."""
    command = _click_command(app)
    try:
        command.main(args=argv, prog_name="oreo", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        sys.stderr.write("error: aborted\n")
        return 1
    except typer.TyperException as exc:  # usage errors: unknown command, bad option...
        exc.show()
        return int(getattr(exc, "exit_code", 2) or 2)
    except OreoError as exc:
        shown = errors.on_one_line(exc, log)
        if shown.logged:  # the error, not the arguments: a --dsn may carry a password
            _logger.error("the command failed", exc_info=exc)
        sys.stderr.write(f"error: {shown.text}\n")
        return shown.rule.exit_code
    except Exception as exc:  # a bug or an untranslated library error: still one line, the rest logged
        _logger.error("the command failed", exc_info=exc)
        text = str(exc).strip()
        first = text.splitlines()[0] if text else ""
        sys.stderr.write(f"error: unexpected {type(exc).__name__}: {first} (details in {log})\n")
        return 1
    return 0
