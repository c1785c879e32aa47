"""``oreo rules``: a dataset's validation rules (its GX ExpectationSuite): show, set, infer, propose, accept, change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.context import AsUser, acting_user, command_catalog, emit
from core import datasets, rules
from core.errors import InvalidInput
from interface import documents
from interface.documents import dumps

rules_app = typer.Typer(no_args_is_help=True, help="Validation rules (a GX ExpectationSuite per dataset).")


@rules_app.command("show")
def rules_show(project_id: str, dataset_id: str, as_user: AsUser = None) -> None:
    """Print the dataset's ExpectationSuite (GX JSON)."""
    catalog = command_catalog()
    suite = datasets.dataset_rules(catalog, project_id, dataset_id, actor=acting_user(catalog, as_user))
    emit(suite, dumps(suite, indent=2))


@rules_app.command("set")
def rules_set(
    project_id: str,
    dataset_id: str,
    file: Annotated[Path, typer.Option("--file", help="Suite JSON in GX's serialized form.")],
    as_user: AsUser = None,
) -> None:
    """Replace the dataset's ExpectationSuite with the one in FILE."""
    if not file.is_file():
        raise InvalidInput(f"no such file: {file}", field="file")
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{file} is not valid JSON: {exc}", field="file") from exc
    catalog = command_catalog()
    suite = datasets.set_dataset_rules(catalog, project_id, dataset_id, document, actor=acting_user(catalog, as_user))
    emit(suite, f"rules of {project_id}/{dataset_id}: {len(suite.get('expectations', []))} expectation(s)")


def _rules_text(suite: dict[str, Any]) -> str:
    lines = []
    for number, item in enumerate(suite.get("expectations", []), start=1):
        marks = [item.get("severity", "critical")]
        marks += [rules.source(item)] if rules.source(item) != "set" else []
        marks += ["off"] if rules.is_disabled(item) else []
        lines.append(f"{number:>3}. {rules.describe(item)} ({', '.join(marks)})")
    return "\n".join(lines) or "no rules"


@rules_app.command("infer")
def rules_infer(
    project_id: str,
    dataset_id: str,
    apply: Annotated[
        bool, typer.Option("--apply", help="Accept the whole proposal (admins), as `rules accept --all`.")
    ] = False,
    as_user: AsUser = None,
) -> None:
    """The suite as it would be with the rules inferred from the data's profile accepted.

    Rules a person wrote or edited are kept as they are. `rules propose` shows what would change,
    rule by rule; `rules accept` applies some or all of it.
    """
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    if apply:
        suite = datasets.infer_dataset_rules(catalog, project_id, dataset_id, actor=actor)
    else:
        suite = datasets.propose_rules(catalog, project_id, dataset_id, actor=actor)
    note = "" if apply else "\n(proposal only: `rules propose` shows what would change, `rules accept --all` stores it)"
    emit(suite, _rules_text(suite) + note)


def _proposal_text(proposal: datasets.RuleProposal) -> str:
    width = max((len(line.name) for line in proposal.lines), default=0)
    lines = [f"  {line.status:<8} {line.name:<{width}}  {line.change}" for line in proposal.lines]
    counts = ", ".join(f"{n} {status}" for status, n in proposal.counts().items() if n)
    return "\n".join(
        [
            f"rules proposed from {proposal.project_id}/{proposal.dataset_id} at version {proposal.version} "
            f"({counts or 'nothing'}); nothing is stored:",
            *lines,
            "accept with: oreo rules accept PROJECT DATASET --rule NAME ... | --all",
        ]
    )


@rules_app.command("propose")
def rules_propose(project_id: str, dataset_id: str, as_user: AsUser = None) -> None:
    """Rules inferred from the data, beside the current ones: new, changed, same, kept or removed. Stores nothing.

    A rule a person wrote or edited is kept ("kept: edited by USER"): no proposal changes it.
    """
    catalog = command_catalog()
    proposal = datasets.propose_dataset_rules(catalog, project_id, dataset_id, actor=acting_user(catalog, as_user))
    emit(documents.rule_proposal_doc(proposal), _proposal_text(proposal))


@rules_app.command("accept")
def rules_accept(
    project_id: str,
    dataset_id: str,
    rule: Annotated[
        list[str] | None, typer.Option("--rule", help="A proposed rule's name, as `rules propose` shows it.")
    ] = None,
    accept_all: Annotated[bool, typer.Option("--all", help="Accept every proposed change.")] = False,
    as_user: AsUser = None,
) -> None:
    """Accept proposed rules (admins): those named with --rule, or --all. A person's rules are kept.

    The audit log records who accepted which rules (`rules_accepted`).
    """
    if accept_all == bool(rule):
        raise InvalidInput("give --rule NAME (one or more) or --all, not both", field="rule")
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    result = datasets.accept_proposed_rules(catalog, project_id, dataset_id, actor=actor, names=rule or None)
    done = [f"  {line.status:<8} {line.name}  {line.change}" for line in result.accepted]
    kept = [f"  kept     {line.name}  {line.change}" for line in result.kept]
    head = f"accepted {len(result.accepted)} proposed rule(s)"
    if not done:
        head = "nothing to accept: the proposal changes no rule"
    emit(documents.rules_accepted_doc(result), "\n".join([head, *done, *kept]))


@rules_app.command("change")
def rules_change(
    project_id: str,
    dataset_id: str,
    number: Annotated[int, typer.Argument(help="The rule's number, as `rules list` shows it.")],
    severity: Annotated[str | None, typer.Option("--severity", help="critical, warning or info.")] = None,
    min_value: Annotated[float | None, typer.Option("--min", help="New lower bound of a range rule.")] = None,
    max_value: Annotated[float | None, typer.Option("--max", help="New upper bound of a range rule.")] = None,
    enabled: Annotated[bool | None, typer.Option("--enable/--disable", help="Turn the rule on or off.")] = None,
    as_user: AsUser = None,
) -> None:
    """Change one rule's severity, bounds, or on/off state (admins); the rule is then the steward's."""
    catalog = command_catalog()
    change = rules.RuleChange(severity=severity, min_value=min_value, max_value=max_value, enabled=enabled)
    if change == rules.RuleChange():
        raise InvalidInput("nothing to change: give --severity, --min, --max, --enable or --disable", field="rule")
    actor = acting_user(catalog, as_user)
    suite = datasets.change_dataset_rule(catalog, project_id, dataset_id, number, change, actor=actor)
    emit(suite, _rules_text(suite))


@rules_app.command("list")
def rules_list(project_id: str, dataset_id: str, as_user: AsUser = None) -> None:
    """The rules in plain words, numbered, with how often each failed in the last 20 validation runs."""
    catalog = command_catalog()
    actor = acting_user(catalog, as_user)
    suite = datasets.dataset_rules(catalog, project_id, dataset_id, actor=actor)
    failed = datasets.recent_rule_failures(catalog, project_id, dataset_id, actor=actor)
    listed = [
        {
            "number": number,
            "description": rules.describe(item),
            "type": item.get("type"),
            "column": (item.get("kwargs") or {}).get("column"),
            "severity": item.get("severity", "critical"),
            "inferred": rules.is_inferred(item),
            "enabled": not rules.is_disabled(item),
            "edited_by": rules.edited_by(item),
            "failed_runs": failed.of(item),
        }
        for number, item in enumerate(suite.get("expectations", []), start=1)
    ]
    emit(
        {"rules": listed, "runs_considered": failed.runs},
        _rules_text(suite) + f"\n(failures counted over the last {failed.runs} run(s))",
    )
