"""Great Expectations (GX Core 1.x) validation of staged and merged data.

Each dataset has one ExpectationSuite, kept in GX's own JSON form at
``audit/expectations/suite.json``. Every expectation carries GX's ``severity``:

* ``critical`` - a failure is fatal and blocks approval;
* ``warning`` - shown to the approver;
* ``info`` - recorded only.

A run validates a pandas frame in an ephemeral GX context and writes
``audit/validation_runs/<run_id>/summary.json`` and ``full.json`` (seed 002 section 7).
GX is imported lazily: it takes seconds to import and most commands never need it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from core.catalog import utcnow
from core.errors import InvalidInput
from core.layout import DatasetLayout, new_id

if TYPE_CHECKING:
    import pandas as pd

Severity = Literal["critical", "warning", "info"]
Status = Literal["passed", "warning", "failed"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")

# pandas dtypes a DuckDB column type may arrive as (NULLs turn integers into floats).
_PANDAS_TYPES: dict[str, list[str]] = {
    "BIGINT": ["int64", "Int64", "float64"],
    "INTEGER": ["int32", "int64", "Int32", "Int64", "float64"],
    "DOUBLE": ["float64", "Float64"],
    "FLOAT": ["float32", "float64"],
    "BOOLEAN": ["bool", "boolean", "object"],
    "VARCHAR": ["object", "str", "string"],
    "DATE": ["object", "datetime64[ns]", "datetime64[us]", "datetime64[ms]"],
}


@dataclass(frozen=True)
class Failure:
    expectation: str
    severity: Severity
    column: str | None
    unexpected_count: int | None = None


@dataclass(frozen=True)
class ValidationRun:
    run_id: str
    status: Status
    failures: list[Failure] = field(default_factory=list)
    evaluated: int = 0

    @property
    def blocking(self) -> bool:
        return self.status == "failed"

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "evaluated": self.evaluated,
            "failures": [asdict(f) for f in self.failures],
        }


def suite_path(layout: DatasetLayout) -> Path:
    return layout.audit / "expectations" / "suite.json"


def default_suite(name: str, columns: list[tuple[str, str]]) -> dict[str, Any]:
    """``row_id`` not null and unique, plus each column's type, all critical."""
    expectations: list[dict[str, Any]] = [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "row_id"}, "severity": "critical"},
        {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "row_id"}, "severity": "critical"},
    ]
    for column, duck_type in columns:
        base = duck_type.split("(")[0].split(" ")[0]
        types = _PANDAS_TYPES.get(base)
        if types is None:
            continue
        expectations.append(
            {
                "type": "expect_column_values_to_be_in_type_list",
                "kwargs": {"column": column, "type_list": types},
                "severity": "critical",
            }
        )
    return {"name": name, "expectations": expectations}


def parse_suite(document: Any) -> dict[str, Any]:
    """Check a suite in GX's serialized form and return it normalised by GX itself.

    Raises:
        InvalidInput: Not an object with ``name`` and ``expectations``, an unknown
            expectation type, bad kwargs, or a severity other than critical/warning/info.
    """
    if not isinstance(document, dict) or "name" not in document or not isinstance(document.get("expectations"), list):
        raise InvalidInput('a suite must be a JSON object like {"name": ..., "expectations": [...]}', field="suite")
    for i, item in enumerate(document["expectations"]):
        if not isinstance(item, dict) or "type" not in item:
            raise InvalidInput(f"expectation #{i + 1} needs a 'type'", field="suite")
        severity = item.get("severity", "critical")
        if severity not in SEVERITIES:
            raise InvalidInput(
                f"expectation #{i + 1} ({item['type']}) has severity {severity!r}; use critical, warning or info",
                field="suite",
            )
    from great_expectations.core import ExpectationSuite

    try:
        suite = ExpectationSuite(**document)
    except Exception as exc:  # GX raises many unrelated types for a bad configuration
        raise InvalidInput(f"not a valid GX suite: {str(exc).splitlines()[0]}", field="suite") from exc
    # GX logs and drops expectations it cannot build instead of raising.
    kept = [e.expectation_type for e in suite.expectations]
    dropped = [item["type"] for item in document["expectations"] if item["type"] not in kept]
    if len(kept) != len(document["expectations"]) or dropped:
        raise InvalidInput(
            f"not a valid GX suite: unknown expectation type or bad kwargs in {', '.join(dropped) or 'the suite'}",
            field="suite",
        )
    return dict(suite.to_json_dict())


def save_suite(layout: DatasetLayout, document: Any) -> dict[str, Any]:
    suite = parse_suite(document)
    path = suite_path(layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(suite, indent=2, default=str))
    tmp.replace(path)
    return suite


def load_suite(layout: DatasetLayout) -> dict[str, Any]:
    return dict(json.loads(suite_path(layout).read_text()))


def validate_frame(frame: pd.DataFrame, suite: dict[str, Any], layout: DatasetLayout) -> ValidationRun:
    """Run ``suite`` on ``frame`` and store summary.json and full.json under audit/.

    Status is ``failed`` if any critical expectation fails, else ``warning`` if any
    warning fails, else ``passed``.
    """
    import great_expectations as gx
    from great_expectations.core import ExpectationSuite

    run_id = new_id("run")
    context = gx.get_context(mode="ephemeral")
    batch = (
        context.data_sources.add_pandas("oreo").add_dataframe_asset("frame").add_batch_definition_whole_dataframe("all")
    )
    gx_suite = context.suites.add(ExpectationSuite(**{k: v for k, v in suite.items() if k != "id"}))
    definition = gx.ValidationDefinition(data=batch, suite=gx_suite, name=run_id)
    result = definition.run(batch_parameters={"dataframe": frame})

    failures: list[Failure] = []
    for r in result.results:
        config = r.expectation_config
        if r.success or config is None:
            continue
        severity = str(getattr(config.severity, "value", config.severity) or "critical")
        failures.append(
            Failure(
                expectation=config.type,
                severity=severity,  # type: ignore[arg-type]
                column=config.kwargs.get("column"),
                unexpected_count=(r.result or {}).get("unexpected_count"),
            )
        )
    severities = {f.severity for f in failures}
    status: Status = "failed" if "critical" in severities else "warning" if "warning" in severities else "passed"
    run = ValidationRun(run_id=run_id, status=status, failures=failures, evaluated=len(result.results))

    folder = layout.validation_run(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(
        json.dumps({**run.summary(), "rows": len(frame), "at": utcnow().isoformat()}, indent=2)
    )
    (folder / "full.json").write_text(json.dumps(result.to_json_dict(), indent=2, default=str))
    return run
