"""Alert rules and dashboard: promtool checks and unit-tests the rules; every expression names defined metrics."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from core import metrics

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "monitoring" / "prometheus" / "alerts"
RULES = ALERTS / "oreo.yml"
RULE_TESTS = ALERTS / "oreo_test.yml"
DASHBOARD = ROOT / "monitoring" / "grafana" / "oreo.json"
METRIC_NAME = re.compile(r"\boreo_[a-z0-9_]+\b")
SERIES_SUFFIXES = ("", "_total", "_created", "_bucket", "_count", "_sum")


def promtool() -> str:
    """The venv's promtool (``make test`` runs scripts/install_promtool.sh), else one on PATH."""
    beside = Path(sys.executable).parent / "promtool"
    found = str(beside) if beside.exists() else shutil.which("promtool")
    assert found, "promtool is missing: run scripts/install_promtool.sh .venv/bin (make test does)"
    return found


def run_promtool(*args: str, cwd: Path = ALERTS) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    document = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in document["panels"] for t in p.get("targets", [])]


def defined_series() -> set[str]:
    """Every series name core.metrics exposes: each family's name with its sample suffixes."""
    names: set[str] = set()
    for family in text_string_to_metric_families(metrics.render().decode()):
        names.update(family.name + suffix for suffix in SERIES_SUFFIXES)
    return names


def unknown_metrics(exprs: list[str], known: set[str]) -> set[str]:
    return {name for expr in exprs for name in METRIC_NAME.findall(expr) if name not in known}


def test_promtool_checks_the_rules() -> None:
    checked = run_promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout


def test_seed_004s_slas_are_all_alerts() -> None:
    assert {r["alert"] for r in rules()} == {
        "OreoPageReadSlow",
        "OreoImportThroughputLow",
        "OreoApprovalFailures",
        "OreoRequestOpenTooLong",
        "OreoVacuumOverdue",
        "OreoSmallFilesHigh",
        "OreoEngineDown",
    }


def test_promtool_unit_tests_fire_every_alert_and_keep_each_quiet_once() -> None:
    tested = run_promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    for rule in rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{rule['alert']} is never expected to fire"
        assert any(not case["exp_alerts"] for case in mine), f"{rule['alert']} is never expected to stay quiet"


def test_rules_that_never_fire_fail_their_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: with every expression made false, each alert's firing case fails."""
    document = yaml.safe_load(RULES.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            rule["expr"] = "vector(0) > 1"
    (tmp_path / RULES.name).write_text(yaml.safe_dump(document))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)

    tested = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)

    assert tested.returncode != 0
    for rule in rules():
        assert f"alertname: {rule['alert']}," in tested.stdout + tested.stderr


def test_every_metric_the_rules_and_the_dashboard_name_is_defined() -> None:
    known = defined_series()
    assert {"oreo_page_read_seconds_bucket", "oreo_approvals_total", "oreo_engine_up"} <= known
    assert unknown_metrics([r["expr"] for r in rules()], known) == set()
    assert unknown_metrics(dashboard_exprs(), known) == set()
    # The check itself catches a name core.metrics does not define.
    assert unknown_metrics(["sum(rate(oreo_page_reads_totl[5m]))"], known) == {"oreo_page_reads_totl"}


def test_the_dashboard_is_grafana_json_with_valid_promql(tmp_path: Path) -> None:
    document = json.loads(DASHBOARD.read_text())
    assert document["uid"] == "oreo-sla" and document["title"] == "Oreo"
    assert isinstance(document["schemaVersion"], int)
    panels = document["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["type"] == "prometheus", panel["title"]
            assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
    # Each expression as a recording rule: promtool parses it as PromQL.
    exprs = [e.replace("$__rate_interval", "5m") for e in dashboard_exprs()]
    records = [{"record": f"oreo:dashboard:expr{n}", "expr": e} for n, e in enumerate(exprs)]
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    checked = run_promtool("check", "rules", "dashboard.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in checked.stdout
