"""The storage contract: where every Delta table and file of a dataset lives.

This module is the only place that turns ids into paths (seed 002, section 8.A)::

    $DELTA_DATA_ROOT/projects/<project_id>/datasets/<dataset_id>/
        main/                                   canonical Delta table
        staging/<change_request_id>/            one Delta table per change request
        staging/<change_request_id>--r<n>/      ... and per later revision n (2, 3, ...)
        live_edit/<session_id>/edits.delta/     changed cells of one session
        live_edit/<session_id>/metadata.json
        imports/<upload_id>/                    raw and converted uploads
        audit/validation_runs/<run_id>/         GX summary.json and full.json
        audit/snapshots/  audit/history/  audit/maintenance/

Every id is checked against ``ID_PATTERN`` before a path is built, so no user string
can climb out of the data root or create a folder by accident.

The data root is a local folder (every location is a ``pathlib.Path``) or
``s3://bucket/prefix`` (every location is a ``core.storage.ObjectPath``, with the same ids,
checks and relative layout).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from core.errors import InvalidInput
from core.storage import Location, ObjectPath, location

ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}", re.ASCII)
DATASET_SUBDIRS = ("main", "staging", "live_edit", "imports", "audit")
AUDIT_SUBDIRS = ("validation_runs", "snapshots", "history", "maintenance")
# Between a change request id and a revision number in a staging folder's name.
REVISION_SEPARATOR = "--r"


def validate_id(value: object, *, kind: str = "id") -> str:
    """Return ``value`` if it is a safe id, else raise ``InvalidInput`` naming the problem.

    Args:
        value: The candidate id.
        kind: What the id names ("project id", "dataset id"...), for the message.

    Raises:
        InvalidInput: The id is empty, too long, or has characters outside ``[a-z0-9_-]``.
    """
    if not isinstance(value, str) or value == "":
        raise InvalidInput(f"{kind} must not be empty", field=kind)
    if ID_PATTERN.fullmatch(value) is None:
        raise InvalidInput(
            f"invalid {kind} {value!r}: use 1-63 lowercase ASCII letters, digits, '_' or '-', "
            "starting with a letter or digit",
            field=kind,
        )
    return value


def new_id(prefix: str) -> str:
    """A fresh random id such as ``cr_3f9a0c1d2b7e4a11`` that passes ``validate_id``."""
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass(frozen=True)
class DatasetLayout:
    """Resolved paths of one dataset. Build it with ``dataset_layout``."""

    root: Location
    project_id: str
    dataset_id: str

    @property
    def main(self) -> Location:
        return self.root / "main"

    @property
    def staging_root(self) -> Location:
        return self.root / "staging"

    @property
    def live_edit_root(self) -> Location:
        return self.root / "live_edit"

    @property
    def imports_root(self) -> Location:
        return self.root / "imports"

    @property
    def audit(self) -> Location:
        return self.root / "audit"

    def staging(self, change_request_id: str, revision: int = 1) -> Location:
        """The staging table of one revision of a change request.

        Revision 1 lives at ``staging/<cr_id>`` (as before revisions existed); a later one
        at ``staging/<cr_id>--r<revision>`` (``staging_owner`` reads the id back).
        """
        name = validate_id(change_request_id, kind="change request id")
        if revision > 1:
            name = f"{name}{REVISION_SEPARATOR}{int(revision)}"
        return self.staging_root / name

    def session_dir(self, session_id: str) -> Location:
        return self.live_edit_root / validate_id(session_id, kind="session id")

    def live_edit(self, session_id: str) -> Location:
        return self.session_dir(session_id) / "edits.delta"

    def session_metadata(self, session_id: str) -> Location:
        return self.session_dir(session_id) / "metadata.json"

    def upload(self, upload_id: str) -> Location:
        return self.imports_root / validate_id(upload_id, kind="upload id")

    def validation_run(self, run_id: str) -> Location:
        return self.audit / "validation_runs" / validate_id(run_id, kind="validation run id")

    def maintenance_reports(self) -> Location:
        return self.audit / "maintenance"

    def exists(self) -> bool:
        return self.root.is_dir()

    def has_main_table(self) -> bool:
        return (self.main / "_delta_log").is_dir()

    def create(self) -> None:
        """Create the whole folder structure. Idempotent."""
        for sub in DATASET_SUBDIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for sub in AUDIT_SUBDIRS:
            (self.audit / sub).mkdir(parents=True, exist_ok=True)


def staging_owner(folder_name: str) -> str:
    """The change request id a staging folder belongs to (``cr_1--r2`` -> ``cr_1``)."""
    return folder_name.split(REVISION_SEPARATOR, 1)[0]


def project_root(data_root: Path | ObjectPath | str, project_id: str) -> Location:
    return location(data_root) / "projects" / validate_id(project_id, kind="project id")


def dataset_layout(data_root: Path | ObjectPath | str, project_id: str, dataset_id: str) -> DatasetLayout:
    """Resolve a dataset's paths after validating both ids. Creates nothing."""
    root = project_root(data_root, project_id) / "datasets" / validate_id(dataset_id, kind="dataset id")
    return DatasetLayout(root=root, project_id=project_id, dataset_id=dataset_id)
