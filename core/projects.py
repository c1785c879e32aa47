"""Projects: the unit of membership and the top folder of the storage layout."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from core import audit
from core.auth import SYSTEM, User, memberships
from core.catalog import Catalog, ProjectRow
from core.errors import AlreadyExists, InvalidInput, NotFound, PermissionDenied
from core.layout import validate_id

MAX_NAME_LENGTH = 100  # a name is shown in the sidebar, page titles and notification subjects
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Project:
    id: str
    name: str
    created_at: datetime


def create_project(catalog: Catalog, project_id: str, *, name: str | None = None, actor: User = SYSTEM) -> Project:
    """Register a project (site admins only). Its folder appears with its first dataset.

    Raises:
        InvalidInput: Bad project id, or a display name longer than ``MAX_NAME_LENGTH`` or holding
            a control character (a line break, a tab).
        AlreadyExists: The id is taken.
        PermissionDenied: ``actor`` is not a site admin.
    """
    validate_id(project_id, kind="project id")
    display = _display_name(name, project_id)
    if not actor.site_admin:
        raise PermissionDenied(
            f"only a site admin can create projects; {actor.username!r} is not one", user=actor.username
        )
    with catalog.session() as s:
        if s.get(ProjectRow, project_id) is not None:
            raise AlreadyExists(f"project {project_id!r} already exists", kind="project", ident=project_id)
        row = ProjectRow(id=project_id, name=display)
        s.add(row)
        s.flush()
        audit.record(s, audit.ProjectCreated(actor=actor.username, project_id=project_id, project_name=row.name))
        return Project(row.id, row.name, row.created_at)


def get_project(catalog: Catalog, project_id: str) -> Project:
    validate_id(project_id, kind="project id")
    with catalog.session() as s:
        row = s.get(ProjectRow, project_id)
        if row is None:
            raise NotFound(f"unknown project {project_id!r}", kind="project", ident=project_id)
        return Project(row.id, row.name, row.created_at)


def list_projects(catalog: Catalog, user: User) -> list[Project]:
    """Projects ``user`` may see: all for site admins, else those it is a member of."""
    visible = memberships(catalog, user)
    with catalog.session() as s:
        rows = s.scalars(select(ProjectRow).order_by(ProjectRow.id))
        return [Project(r.id, r.name, r.created_at) for r in rows if r.id in visible]


def _display_name(name: str | None, project_id: str) -> str:
    """The name shown for a project: ``name`` trimmed (the id when empty), refused when too long or not one line."""
    shown = (name or "").strip() or project_id
    if len(shown) > MAX_NAME_LENGTH:
        raise InvalidInput(
            f"project name has {len(shown)} characters; at most {MAX_NAME_LENGTH} are allowed", field="name"
        )
    if _CONTROL.search(shown):
        raise InvalidInput("project name must be one line of text, without control characters", field="name")
    return shown
