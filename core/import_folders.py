"""Files on the server's disk that a remote user may name for an import.

The CLI is run by the server's operator, with the operator's own file permissions, so
``oreo append --file`` and the rest read any local file they are given. A remote front
end (the HTTP API's ``path``) reads with the server's permissions on someone else's
behalf, so a path it is given is allowed only

* for a site admin,
* inside one of the folders ``OREO_IMPORT_FOLDERS`` names (empty by default: uploads only),
* once resolved with every symlink followed, so neither ``..`` nor a link inside a folder
  leads outside it.

Everything else is refused before the file is opened, and no error quotes a file's content.
"""

from __future__ import annotations

from pathlib import Path

from core.auth import User
from core.config import Settings, get_settings
from core.errors import InvalidFile, InvalidInput, PermissionDenied

_SHOWN_CHARS = 200


def server_file(path: str, *, actor: User, settings: Settings | None = None) -> Path:
    """The real path of a file on the server that ``actor`` names remotely, once it is allowed.

    Args:
        path: The path as the caller sent it; it must be absolute.
        actor: Who names it; only a site admin may.
        settings: The import folders to confine it to (default: this process's settings).

    Returns:
        The path with every symlink resolved, inside one of the import folders.

    Raises:
        PermissionDenied: ``actor`` is not a site admin, no import folder is configured, or the
            path resolves outside every import folder.
        InvalidInput: The path is not absolute or cannot be a path.
        InvalidFile: The path names nothing, or something other than a regular file.
    """
    shown = _shown(path)
    if not actor.site_admin:
        raise PermissionDenied(
            f"{actor.username!r} cannot import {shown} from the server's disk: only a site admin can; "
            "upload the file instead",
            user=actor.username,
            required="site admin",
        )
    folders = (settings or get_settings()).import_folders
    if not folders:
        raise PermissionDenied(
            f"cannot import {shown}: imports from the server's disk are off (OREO_IMPORT_FOLDERS names no folder); "
            "upload the file instead",
            user=actor.username,
        )
    requested = Path(path)
    if not requested.is_absolute():
        raise InvalidInput(f"{shown} is not an absolute path; name a file under {_listed(folders)}", field="path")
    real_folders = [_resolved(folder, folder_shown=True) for folder in folders]
    # Resolved before it must exist, so a path outside the folders is refused the same way whether it exists or not.
    target = _resolved(requested)
    if not any(target.is_relative_to(folder) for folder in real_folders):
        raise PermissionDenied(
            f"cannot import {shown}: it is outside the import folders ({_listed(folders)}), symlinks followed",
            user=actor.username,
        )
    try:
        real = requested.resolve(strict=True)
    except FileNotFoundError as exc:
        raise InvalidFile(f"cannot import {shown}: no such file", path=path) from exc
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python before 3.13)
        raise InvalidFile(f"cannot import {shown}: it cannot be resolved ({type(exc).__name__})", path=path) from exc
    # Checked again on the strict answer: a link may have changed between the two resolutions.
    if not any(real.is_relative_to(folder) for folder in real_folders):
        raise PermissionDenied(f"cannot import {shown}: it is outside the import folders", user=actor.username)
    if not real.is_file():
        raise InvalidFile(f"cannot import {shown}: it is not a regular file", path=path)
    return real


def _resolved(path: Path, *, folder_shown: bool = False) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # ValueError: an embedded NUL byte
        what = "import folder" if folder_shown else "path"
        raise InvalidInput(f"the {what} {_shown(str(path))} cannot be resolved", field="path") from exc


def _shown(path: str) -> str:
    """The path as quoted in an error: the caller's own text, cut short."""
    if len(path) > _SHOWN_CHARS:
        path = path[:_SHOWN_CHARS] + "..."
    return repr(path)


def _listed(folders: tuple[Path, ...]) -> str:
    return ", ".join(str(folder) for folder in folders)
