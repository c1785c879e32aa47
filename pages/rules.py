"""A dataset's data checks for project admins: read them in plain words, tune, turn off, import and export.

Rules inferred from the data are a proposal, applied only as far as the admin accepts it.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import streamlit as st

from app.components import catalog, dataset_options, flash, oreo_errors, require_user, show_flash, split_dataset
from core import auth, datasets, rules
from core.errors import InvalidInput

ROW_PX = 35
PROPOSAL = "rules_proposal"  # session state: the proposal shown, a datasets.RuleProposal
TAKE = "rules_take_"  # session state: the checkbox of each proposed rule, by name
STATUS_ICONS = {"new": ":material/add:", "changed": ":material/edit:", "removed": ":material/remove:"}


def _forget_proposal() -> None:
    st.session_state.pop(PROPOSAL, None)
    for key in [k for k in st.session_state if str(k).startswith(TAKE)]:
        del st.session_state[key]


def _accept(proposal: datasets.RuleProposal, names: list[str] | None, actor: auth.User) -> None:
    result = datasets.accept_proposed_rules(
        catalog(), proposal.project_id, proposal.dataset_id, actor=actor, names=names, proposal=proposal
    )
    _forget_proposal()
    inferred = sum(rules.is_inferred(e) for e in result.suite.get("expectations", []))
    message = f"Accepted {len(result.accepted)} proposed rule(s)"
    message += f": {', '.join(line.name for line in result.accepted)}." if result.accepted else "."
    if result.kept:
        message += f" Kept as a person set them: {', '.join(line.name for line in result.kept)}."
    flash(f"{message} {inferred} inferred rule(s) now in the suite.")
    st.rerun()


def _show_proposal(proposal: datasets.RuleProposal, actor: auth.User) -> None:
    """The proposal beside the current rules: a checkbox for each line accepting would apply."""
    counts = ", ".join(f"{n} {status}" for status, n in proposal.counts().items() if n)
    st.subheader(f"Proposal from version {proposal.version}", anchor=False)
    st.caption(f"{counts or 'Nothing proposed'}. Nothing changes until you accept.")
    shown = [line for line in proposal.lines if line.status != "same"]
    with st.container(key="rules_proposal_table", border=True):
        widths = [1, 4, 5, 5, 5]
        headings = ["", "Rule", "Current", "Proposed", "What would change"]
        for column, heading in zip(st.columns(widths), headings, strict=True):
            column.markdown(f"**{heading}**" if heading else "")
        for line in shown:
            take, name, current, proposed, change = st.columns(widths, vertical_alignment="center")
            take.checkbox(
                line.name,  # its accessible name; the Rule cell shows it, free to wrap
                key=f"{TAKE}{line.name}",
                value=False,
                disabled=line.status not in rules.APPLIED,
                label_visibility="collapsed",
            )
            name.markdown(_md(line.name).replace(":", ":\u200b"))
            current.markdown(_cell(line.current))
            proposed.markdown(_cell(line.proposed))
            icon = STATUS_ICONS.get(line.status, ":material/lock:")
            change.markdown(f"{icon} {_md(line.change)}")
        if not shown:
            st.markdown("Every proposed rule is already in the suite as proposed.")
    same = [line for line in proposal.lines if line.status == "same"]
    if same:
        with st.expander(f"{len(same)} proposed rule(s) already in the suite as proposed"):
            st.markdown("\n".join(f"- {_md(rules.describe(line.proposed or {}))}" for line in same))
    applicable = [line.name for line in proposal.lines if line.status in rules.APPLIED]
    buttons = st.container(horizontal=True)
    if buttons.button(
        "Accept selected", key="rules_accept_selected", icon=":material/check:", type="primary", disabled=not applicable
    ):
        chosen = [name for name in applicable if st.session_state.get(f"{TAKE}{name}")]
        _accept(proposal, chosen, actor)
    if buttons.button("Accept all", key="rules_accept_all", icon=":material/done_all:"):
        _accept(proposal, None, actor)
    if buttons.button("Discard", key="rules_discard", icon=":material/close:"):
        _forget_proposal()
        flash("Proposal discarded: no rule changed.", kind="info")
        st.rerun()


def _cell(item: dict | None) -> str:  # type: ignore[type-arg]
    if item is None:
        return "—"
    return f"{_md(rules.describe(item))} · {item.get('severity', 'critical')}"


def _md(text: str) -> str:
    """``text`` shown as written: a regular expression or a value set may hold Markdown's marks."""
    return re.sub(r"([\\`*_{}\[\]()#+!|~<>$])", r"\\\1", text)


user = require_user()
admin_projects = sorted(
    project for project, role in auth.memberships(catalog(), user).items() if role.rank >= auth.Role.ADMIN.rank
)
if not admin_projects:
    st.error("Admins only: data checks are changed by a project's admins.", icon=":material/block:")
    st.stop()

st.title("Rules")
st.caption(
    "The checks every change request's rows must pass. A **critical** failure blocks approval, a **warning** "
    "is shown to the approver, **info** is only recorded."
)
show_flash()

options = [o for o in dataset_options(user) if split_dataset(o)[0] in admin_projects]
if not options:
    st.info("No datasets in the projects you administer.")
    st.stop()
if st.session_state.get("rules_dataset") not in options:
    st.session_state["rules_dataset"] = options[0]
choice = st.selectbox("Dataset", options, key="rules_dataset")
project_id, dataset_id = split_dataset(choice)

with oreo_errors():
    suite = datasets.dataset_rules(catalog(), project_id, dataset_id, actor=user)
    failed = datasets.recent_rule_failures(catalog(), project_id, dataset_id, actor=user)
    items = list(suite.get("expectations", []))
    table = pd.DataFrame(
        [
            {
                "#": number,
                "Rule": rules.describe(item),
                "Severity": item.get("severity", "critical"),
                "On": not rules.is_disabled(item),
                "Source": rules.source(item),
                f"Failed (last {failed.runs} runs)": failed.of(item),
            }
            for number, item in enumerate(items, start=1)
        ]
    )
    st.container(key="rules_list").dataframe(
        table,
        hide_index=True,
        width="stretch",
        height=ROW_PX * (len(table) + 1) + 3,  # every rule at once: a suite is short
        row_height=ROW_PX,
        key="rules_table",
    )

    st.header("Change a rule", anchor=False)
    if items:
        labels = {n: f"#{n} · {rules.describe(item)}" for n, item in enumerate(items, start=1)}
        number = st.selectbox("Rule", list(labels), format_func=labels.__getitem__, key="rules_pick")
        item = items[number - 1]
        kwargs = item.get("kwargs") or {}
        bounded = "min_value" in kwargs or "max_value" in kwargs
        with st.form("rules_change", border=True):
            severity_col, on_col = st.columns([2, 1], vertical_alignment="bottom")
            severity = severity_col.selectbox(
                "Severity",
                ["critical", "warning", "info"],
                index=["critical", "warning", "info"].index(item.get("severity", "critical")),
                key=f"rules_severity_{number}",
            )
            enabled = on_col.toggle("On", value=not rules.is_disabled(item), key=f"rules_on_{number}")
            low = high = None
            if bounded:
                low_col, high_col = st.columns(2)
                low = low_col.number_input(
                    "Minimum", value=kwargs.get("min_value"), key=f"rules_min_{number}", format="%g"
                )
                high = high_col.number_input(
                    "Maximum", value=kwargs.get("max_value"), key=f"rules_max_{number}", format="%g"
                )
            if st.form_submit_button("Save rule", icon=":material/save:"):
                change = rules.RuleChange(
                    severity=severity,
                    enabled=enabled,
                    min_value=low if bounded and low is not None else None,
                    max_value=high if bounded and high is not None else None,
                )
                datasets.change_dataset_rule(catalog(), project_id, dataset_id, number, change, actor=user)
                flash(f"Rule #{number} saved.")
                st.rerun()

    st.header("Propose rules from the data", anchor=False)
    st.caption(
        "Looks at the table as it is now and proposes warnings: columns that are never empty, numeric ranges, "
        "value sets, unique columns and common shapes. Nothing changes until you accept, and a rule a person "
        "set or edited is kept as it is."
    )
    if st.button("Propose rules", key="rules_infer", icon=":material/auto_awesome:"):
        _forget_proposal()
        with st.spinner("Profiling the table..."):
            st.session_state[PROPOSAL] = datasets.propose_dataset_rules(catalog(), project_id, dataset_id, actor=user)
    proposal = st.session_state.get(PROPOSAL)
    if isinstance(proposal, datasets.RuleProposal):
        if (proposal.project_id, proposal.dataset_id) == (project_id, dataset_id):
            _show_proposal(proposal.against(suite), user)
        else:
            _forget_proposal()  # made for another dataset

    st.header("GX JSON", anchor=False)
    export_col, import_col = st.columns(2, border=True)
    with export_col:
        st.markdown("**Export**")
        st.download_button(
            "Download the suite",
            json.dumps(suite, indent=2, default=str),
            file_name=f"{project_id}-{dataset_id}-rules.json",
            mime="application/json",
            key="rules_export",
            icon=":material/download:",
        )
    with import_col:
        st.markdown("**Import**")
        upload = st.file_uploader("A GX ExpectationSuite (JSON)", type=["json"], key="rules_import_file")
        if upload is not None and st.button("Replace the suite", key="rules_import", icon=":material/upload:"):
            try:
                document = json.loads(upload.getvalue().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise InvalidInput(f"{upload.name} is not valid JSON: {exc}", field="file") from exc
            suite = datasets.set_dataset_rules(catalog(), project_id, dataset_id, document, actor=user)
            flash(f"Suite imported: {len(suite.get('expectations', []))} rule(s).")
            st.rerun()
