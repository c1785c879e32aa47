"""``oreo doctor``: check one dataset's table and its catalog entry, and say what is wrong.

Five checks, each reported with what it found:

* ``log``: every JSON commit in ``_delta_log`` parses, and the versions run without a
  gap from the newest checkpoint (or version 0) to the latest;
* ``files``: every data and deletion-vector file the current version references exists,
  with the size its add action records (the file list from delta-rs);
* ``checkpoints``: every checkpoint is readable, complete Parquet and ``_last_checkpoint``
  names one that exists;
* ``catalog_version``: the version the catalog recorded is the table's latest;
* ``row_count``: the row count the catalog recorded is what DuckDB counts now.

A check that cannot run because an earlier one failed (no count without the files) is
reported as failed with the reason, so ``ok`` is true only when all five passed.

The checks are the same on an ``s3://`` data root: the log and checkpoints are listed and
read through ``core.storage``, the file sizes come from the store's listing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core import damage, engine, reads
from core.auth import Role, User, require_role
from core.catalog import Catalog
from core.datasets import get_dataset
from core.errors import NotFound, OreoError
from core.storage import Location, location

_SHOWN = 5


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class Diagnosis:
    project_id: str
    dataset_id: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "project": self.project_id,
            "dataset": self.dataset_id,
            "ok": self.ok,
            "checks": [c.to_json() for c in self.checks],
        }


def _from_findings(name: str, findings: list[damage.Finding], healthy: str) -> Check:
    if not findings:
        return Check(name, True, healthy)
    shown = "; ".join(f.line() for f in findings[:_SHOWN])
    more = f"; and {len(findings) - _SHOWN} more" if len(findings) > _SHOWN else ""
    return Check(name, False, shown + more)


def diagnose(catalog: Catalog, project_id: str, dataset_id: str, *, actor: User) -> Diagnosis:
    """Run every check on a dataset (project admins); never raises for what it finds.

    Raises:
        NotFound: Unknown dataset.
        PermissionDenied: ``actor`` is not an admin of the project.
    """
    info = get_dataset(catalog, project_id, dataset_id, actor=actor)
    require_role(catalog, actor, project_id, Role.ADMIN, action="check a table")
    main = location(info.path)
    log_findings = damage.check_log(main)
    file_findings = damage.check_files(main)
    checks = [
        _from_findings("log", log_findings, "every commit parses; no versions missing"),
        _from_findings("files", file_findings, "every file of the current version is there, with its logged size"),
        _from_findings("checkpoints", damage.check_checkpoints(main), "every checkpoint is readable"),
    ]
    latest: int | None = None
    try:
        latest = engine.latest_version(main)
    except NotFound as exc:
        checks.append(Check("catalog_version", False, str(exc)))
    if latest is not None:
        same = info.version == latest
        detail = (
            f"catalog and table at version {latest}"
            if same
            else (f"the catalog records version {info.version}, the table is at version {latest}")
        )
        checks.append(Check("catalog_version", same, detail))
    checks.append(_row_count(main, info.rows, latest, readable=not log_findings and not file_findings))
    return Diagnosis(project_id, dataset_id, checks)


def _row_count(main: Location, recorded: int | None, latest: int | None, *, readable: bool) -> Check:
    if latest is None or not readable:
        return Check("row_count", False, "not counted: the table cannot be read (see above)")
    try:
        counted = reads.count_rows(main, latest)
    except OreoError as exc:
        return Check("row_count", False, f"DuckDB could not count the rows: {exc}")
    if counted == recorded:
        return Check("row_count", True, f"{counted} rows, as the catalog records")
    return Check(
        "row_count", False, f"the catalog records {recorded} rows, DuckDB counts {counted} at version {latest}"
    )
