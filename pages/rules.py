"""A dataset's data checks for project admins: read them in plain words, tune, turn off, infer, import and export."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from app.components import catalog, dataset_options, flash, oreo_errors, require_user, show_flash, split_dataset
from core import auth, datasets, rules
from core.errors import InvalidInput

ROW_PX = 35

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
                "Source": "inferred" if rules.is_inferred(item) else "set",
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

    st.subheader("Change a rule", anchor=False)
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

    st.subheader("Propose rules from the data", anchor=False)
    st.caption(
        "Looks at the table as it is now and proposes warnings: columns that are never empty, numeric ranges, "
        "value sets, unique columns and common shapes. It replaces earlier proposals and keeps every other rule."
    )
    if st.button("Propose rules", key="rules_infer", icon=":material/auto_awesome:"):
        with st.spinner("Profiling the table..."):
            suite = datasets.infer_dataset_rules(catalog(), project_id, dataset_id, actor=user)
        inferred = sum(rules.is_inferred(e) for e in suite.get("expectations", []))
        flash(f"{inferred} inferred rule(s) now in the suite.")
        st.rerun()

    st.subheader("GX JSON", anchor=False)
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
