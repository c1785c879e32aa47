"""core.import_folders: which server files a remote user may name for an import (issue 25 §1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.auth import User
from core.config import Settings, get_settings
from core.errors import InvalidFile, InvalidInput, PermissionDenied
from core.import_folders import server_file

SITE_ADMIN = User(id=1, username="root", site_admin=True)
PROJECT_ADMIN = User(id=2, username="boss")
SECRET = "alice@example.com,Alice Secret"


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """An import folder with one CSV in it, and a folder outside it holding another project's file."""
    inside, outside = tmp_path / "imports", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    (inside / "new.csv").write_text("id,name\n1,a\n")
    (outside / "raw.csv").write_text(f"email,name\n{SECRET}\n")
    return inside, outside


def _settings(*folders: Path) -> Settings:
    return Settings(data_root=Path("/nowhere"), database_url="sqlite://", import_folders=folders)


def test_a_site_admin_names_a_file_inside_an_import_folder(folders: tuple[Path, Path]) -> None:
    inside, _ = folders
    assert server_file(str(inside / "new.csv"), actor=SITE_ADMIN, settings=_settings(inside)) == inside / "new.csv"
    sub = inside / "sub"
    sub.mkdir()
    assert server_file(f"{sub}/../new.csv", actor=SITE_ADMIN, settings=_settings(inside)) == inside / "new.csv"


def test_a_folder_reached_through_a_symlink_is_resolved_too(folders: tuple[Path, Path], tmp_path: Path) -> None:
    inside, _ = folders
    (tmp_path / "link-to-imports").symlink_to(inside)
    named = str(tmp_path / "link-to-imports" / "new.csv")
    assert server_file(named, actor=SITE_ADMIN, settings=_settings(tmp_path / "link-to-imports")) == inside / "new.csv"


def test_only_a_site_admin_may_name_a_server_file(folders: tuple[Path, Path]) -> None:
    inside, _ = folders
    with pytest.raises(PermissionDenied, match="only a site admin can; upload the file instead"):
        server_file(str(inside / "new.csv"), actor=PROJECT_ADMIN, settings=_settings(inside))


def test_without_import_folders_even_a_site_admin_is_refused(folders: tuple[Path, Path]) -> None:
    inside, _ = folders
    with pytest.raises(PermissionDenied, match="OREO_IMPORT_FOLDERS names no folder"):
        server_file(str(inside / "new.csv"), actor=SITE_ADMIN, settings=_settings())


@pytest.mark.parametrize("how", ["direct", "dot-dot", "symlink", "symlinked folder"])
def test_a_path_leading_outside_the_folders_is_refused_without_quoting_the_file(
    folders: tuple[Path, Path], how: str
) -> None:
    inside, outside = folders
    if how == "direct":
        named = str(outside / "raw.csv")
    elif how == "dot-dot":
        named = f"{inside}/../elsewhere/raw.csv"
    elif how == "symlink":
        (inside / "innocent.csv").symlink_to(outside / "raw.csv")
        named = str(inside / "innocent.csv")
    else:
        (inside / "sub").symlink_to(outside)
        named = str(inside / "sub" / "raw.csv")
    with pytest.raises(PermissionDenied, match="outside the import folders") as refused:
        server_file(named, actor=SITE_ADMIN, settings=_settings(inside))
    assert named in str(refused.value) and "Alice" not in str(refused.value)


def test_a_missing_path_outside_is_refused_like_one_that_exists(folders: tuple[Path, Path]) -> None:
    inside, outside = folders
    with pytest.raises(PermissionDenied, match="outside the import folders"):
        server_file(str(outside / "missing.csv"), actor=SITE_ADMIN, settings=_settings(inside))


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        ("missing.csv", InvalidFile, "no such file"),
        ("sub", InvalidFile, "not a regular file"),
        ("relative", InvalidInput, "not an absolute path"),
        ("nul", InvalidInput, "cannot be resolved"),
    ],
)
def test_a_path_inside_that_is_no_file_is_refused(
    folders: tuple[Path, Path], name: str, error: type[Exception], message: str
) -> None:
    inside, _ = folders
    (inside / "sub").mkdir()
    named = {"relative": "new.csv", "nul": f"{inside}/new\0.csv"}.get(name, str(inside / name))
    with pytest.raises(error, match=message):
        server_file(named, actor=SITE_ADMIN, settings=_settings(inside))


def test_the_setting_lists_absolute_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OREO_IMPORT_FOLDERS", "/srv/a:/srv/b, /srv/c")
    get_settings.cache_clear()
    assert get_settings().import_folders == (Path("/srv/a"), Path("/srv/b"), Path("/srv/c"))
    monkeypatch.setenv("OREO_IMPORT_FOLDERS", "")
    get_settings.cache_clear()
    assert get_settings().import_folders == ()
    monkeypatch.setenv("OREO_IMPORT_FOLDERS", "srv/a")
    get_settings.cache_clear()
    with pytest.raises(InvalidInput, match="OREO_IMPORT_FOLDERS must list absolute folders"):
        get_settings()
