"""Projects: the unit of membership and the top folder of the storage layout."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from core import audit
from core.auth import SYSTEM, User, memberships
from core.catalog import Catalog, ProjectRow
from core.errors import AlreadyExists, NotFound, PermissionDenied
from core.layout import validate_id


@dataclass(frozen=True)
class Project:
    id: str
    name: str
    created_at: datetime


def create_project(catalog: Catalog, project_id: str, *, name: str | None = None, actor: User = SYSTEM) -> Project:
    """Register a project (site admins only). Its folder appears with its first dataset.

    Raises:
        InvalidInput: Bad project id.
        AlreadyExists: The id is taken.
        PermissionDenied: ``actor`` is not a site admin.
    """
    validate_id(project_id, kind="project id")
    if not actor.site_admin:
        raise PermissionDenied(
            f"only a site admin can create projects; {actor.username!r} is not one", user=actor.username
        )
    with catalog.session() as s:
        if s.get(ProjectRow, project_id) is not None:
            raise AlreadyExists(f"project {project_id!r} already exists", kind="project", ident=project_id)
        row = ProjectRow(id=project_id, name=(name or project_id).strip() or project_id)
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
