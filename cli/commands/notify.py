"""``oreo webhook`` and ``oreo notify``: a project's webhooks, and sending what the outbox holds.

``oreo notify drain`` sends the deliveries that are due (for cron; the app server also
drains in the background) and prints what was sent, what failed and will be retried, and
what died.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli import context
from cli.context import AsUser, acting_user, command_catalog, emit
from core import background, notify
from core.errors import InvalidInput

webhook_app = typer.Typer(no_args_is_help=True, help="A project's webhooks: signed JSON POSTs of its review events.")
notify_app = typer.Typer(no_args_is_help=True, help="Notifications: send what the outbox holds.")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]


@webhook_app.command("add")
def webhook_add(
    project_id: str,
    url: str,
    secret_stdin: Annotated[
        bool, typer.Option("--secret-stdin", help="Read the signing secret from the first line of standard input.")
    ] = False,
    as_user: AsUser = None,
) -> None:
    """Register a webhook (project admins); prints its id. It must reach a public address, or a listed host.

    Hosts that are not public (loopback, private, link-local...) need OREO_WEBHOOK_ALLOWED_HOSTS.
    """
    if not secret_stdin:
        raise InvalidInput("pass the webhook's signing secret on standard input with --secret-stdin", field="secret")
    secret = sys.stdin.readline().rstrip("\r\n")
    catalog = command_catalog()
    hook = notify.add_webhook(catalog, project_id, url, secret, actor=acting_user(catalog, as_user))
    emit(hook.to_json(), hook.id)


@webhook_app.command("list")
def webhook_list(project_id: str, as_user: AsUser = None) -> None:
    """A project's webhooks with their state and last error (never their secrets)."""
    catalog = command_catalog()
    hooks = notify.list_webhooks(catalog, project_id, actor=acting_user(catalog, as_user))
    lines = []
    for hook in hooks:
        state = "FAILING" if hook.failing else "ok"
        line = f"{hook.id}  {state}  {hook.url}  pending={hook.pending} dead={hook.dead}"
        if hook.last_error:
            line += f"  last error ({hook.last_error_at:%Y-%m-%d %H:%M}): {hook.last_error}"
        lines.append(line)
    emit({"project": project_id, "webhooks": [h.to_json() for h in hooks]}, "\n".join(lines) or "no webhooks")


@webhook_app.command("remove")
def webhook_remove(project_id: str, webhook_id: str, as_user: AsUser = None) -> None:
    """Remove a webhook (project admins); its undelivered events are dropped."""
    catalog = command_catalog()
    hook = notify.remove_webhook(catalog, project_id, webhook_id, actor=acting_user(catalog, as_user))
    emit({"removed": hook.id, "project": project_id}, f"removed {hook.id}")


@notify_app.command("drain")
def notify_drain(
    limit: Annotated[int, typer.Option("--limit", min=1, help="Send at most this many deliveries.")] = 100,
    json_output: JsonFlag = False,
) -> None:
    """Send the notifications that are due, retrying failed ones on their backoff schedule."""
    context.state.json = context.state.json or json_output
    catalog = command_catalog()
    report = background.one_round(catalog, limit=limit)  # "stale" notices first, then the outbox
    lines = [f"sent {d.channel} {d.event} {d.cr_id or ''} -> {d.target}" for d in report.sent]
    lines += [
        f"failed {d.channel} {d.event} {d.cr_id or ''} -> {d.target} (attempt {d.attempts}, "
        f"next at {d.next_attempt_at:%Y-%m-%d %H:%M:%S}): {d.last_error}"
        for d in report.failed
    ]
    lines += [
        f"dead {d.channel} {d.event} {d.cr_id or ''} -> {d.target} after {d.attempts} attempts: {d.last_error}"
        for d in report.dead
    ]
    emit(report.to_json(), "\n".join(lines) or "nothing due")
