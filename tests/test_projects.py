"""Projects: creation by site admins, visibility by membership, no duplicates."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from core import auth
from core.audit import list_events
from core.auth import SYSTEM, Role
from core.catalog import Catalog
from core.errors import AlreadyExists, InvalidInput, NotFound, PermissionDenied
from core.projects import Project, create_project, get_project, list_projects


def test_create_and_get_project(catalog: Catalog, data_root: Path) -> None:
    project = create_project(catalog, "demo", name="  Demo project  ")
    assert isinstance(project, Project)
    assert (project.id, project.name) == ("demo", "Demo project")
    assert project.created_at.utcoffset() == timedelta(0)
    assert get_project(catalog, "demo") == project
    assert create_project(catalog, "plain").name == "plain"  # the id is the default name
    assert not data_root.exists()  # the folder appears with the first dataset, not before
    [event] = list_events(catalog, name="project_created", project_id="demo")
    assert (event.actor, event.details["project_name"]) == ("system", "Demo project")


def test_site_admin_sees_every_project_members_only_theirs(catalog: Catalog) -> None:
    for project_id in ("zeta", "alpha", "mid"):
        create_project(catalog, project_id)
    root, _ = auth.create_user(catalog, "root", site_admin=True)
    member, _ = auth.create_user(catalog, "member")
    stranger, _ = auth.create_user(catalog, "stranger")
    auth.add_member(catalog, "zeta", "member", Role.EDITOR)
    auth.add_member(catalog, "alpha", "member", Role.ADMIN)

    assert [p.id for p in list_projects(catalog, root)] == ["alpha", "mid", "zeta"]
    assert [p.id for p in list_projects(catalog, SYSTEM)] == ["alpha", "mid", "zeta"]
    assert [p.id for p in list_projects(catalog, member)] == ["alpha", "zeta"]
    assert list_projects(catalog, stranger) == []


@pytest.mark.parametrize("role", list(Role))
def test_only_a_site_admin_creates_projects(catalog: Catalog, role: Role) -> None:
    create_project(catalog, "demo")
    user, _ = auth.create_user(catalog, "someone")
    auth.add_member(catalog, "demo", "someone", role)
    with pytest.raises(PermissionDenied, match="only a site admin can create projects; 'someone' is not one"):
        create_project(catalog, "other", actor=user)
    with pytest.raises(NotFound):
        get_project(catalog, "other")
    assert list_events(catalog, name="project_created", project_id="other") == []


def test_duplicate_project_is_refused(catalog: Catalog) -> None:
    create_project(catalog, "demo", name="First")
    with pytest.raises(AlreadyExists, match="project 'demo' already exists") as info:
        create_project(catalog, "demo", name="Second")
    assert (info.value.kind, info.value.ident) == ("project", "demo")
    assert get_project(catalog, "demo").name == "First"
    assert len(list_events(catalog, name="project_created")) == 1


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("x" * 101, "project name has 101 characters; at most 100"),
        ("Sales\nQ3", "one line of text"),
        ("a\tb", "one line"),
    ],
)
def test_a_long_or_multi_line_display_name_is_refused(catalog: Catalog, name: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        create_project(catalog, "demo", name=name)
    assert list_projects(catalog, SYSTEM) == []
    assert list_events(catalog, name="project_created") == []
    assert create_project(catalog, "demo", name="  " + "x" * 100 + "  ").name == "x" * 100


@pytest.mark.parametrize("project_id", ["", "Demo", "a/b", "..", "d\u0435mo", "x" * 64])
def test_bad_project_ids_are_refused(catalog: Catalog, project_id: str) -> None:
    with pytest.raises(InvalidInput, match="project id"):
        create_project(catalog, project_id)
    assert list_projects(catalog, SYSTEM) == []


def test_unknown_project_is_not_found(catalog: Catalog) -> None:
    with pytest.raises(NotFound, match="unknown project 'ghost'") as info:
        get_project(catalog, "ghost")
    assert (info.value.kind, info.value.ident) == ("project", "ghost")
