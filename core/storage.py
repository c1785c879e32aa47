"""Where Oreo's files live: a local folder or an S3 bucket, behind one small interface.

``DELTA_DATA_ROOT`` is either a local folder or ``s3://bucket/prefix``. A location is then
either a ``pathlib.Path`` (local: every call does exactly what the ``Path`` call did) or an
``ObjectPath`` naming one key prefix in a bucket. ``ObjectPath`` offers the part of the
``Path`` surface the layout's callers use (``/``, ``name``, ``parent``, ``exists``,
``is_dir``, ``read_text``, ``write_text``...) over ``pyarrow.fs.S3FileSystem``, so the
ids and checks of ``core.layout`` are the same for both.

The store's endpoint, region and credentials come from the standard AWS variables
(``AWS_ENDPOINT_URL`` or ``AWS_ENDPOINT_URL_S3``, ``AWS_REGION`` or ``AWS_DEFAULT_REGION``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``). The three engines
get the same settings in their own words: ``delta_storage_options`` (delta-rs),
``duckdb_secret_sql`` (DuckDB's httpfs) and ``spark_confs`` (Hadoop's s3a).

Object stores have no folders: ``mkdir`` is a no-op there, a "folder" exists while a key
under it does, and ``remove_tree`` deletes every key under the prefix.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from core.errors import EngineError, InvalidInput

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

SCHEMES = ("s3://", "s3a://")


@dataclass(frozen=True)
class ObjectStat:
    """The part of ``os.stat_result`` callers read: size and modification time."""

    st_size: int
    st_mtime_ns: int

    @property
    def st_mtime(self) -> float:
        return self.st_mtime_ns / 1e9


@dataclass(frozen=True)
class ObjectPath:
    """One key (or key prefix) in an S3 bucket: ``s3://<bucket>/<key>``.

    Build it with ``location``; join with ``/`` like a ``Path``.
    """

    bucket: str
    key: str = ""

    def __post_init__(self) -> None:
        if not self.bucket or "/" in self.bucket:
            raise InvalidInput(f"invalid bucket name {self.bucket!r}", field="DELTA_DATA_ROOT")
        if any(part in ("", ".", "..") for part in self.key.split("/") if self.key):
            raise InvalidInput(f"invalid object key {self.key!r}", field="DELTA_DATA_ROOT")

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}" if self.key else f"s3://{self.bucket}"

    def __truediv__(self, part: str | os.PathLike[str]) -> ObjectPath:
        parts = [p for p in str(part).split("/") if p]
        key = "/".join([self.key, *parts] if self.key else parts)
        return ObjectPath(self.bucket, key)

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(self.bucket, self.key.rsplit("/", 1)[0] if "/" in self.key else "")

    @property
    def suffix(self) -> str:
        name = self.name
        return name[name.rfind(".") :] if "." in name.lstrip(".") else ""

    @property
    def _fs_path(self) -> str:
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    # ------------------------------------------------------------ the Path surface

    def _info(self) -> object:
        return _filesystem().get_file_info(self._fs_path)

    def exists(self) -> bool:
        from pyarrow.fs import FileType

        return self._info().type != FileType.NotFound  # type: ignore[attr-defined]

    def is_dir(self) -> bool:
        from pyarrow.fs import FileType

        return self._info().type == FileType.Directory  # type: ignore[attr-defined]

    def is_file(self) -> bool:
        from pyarrow.fs import FileType

        return self._info().type == FileType.File  # type: ignore[attr-defined]

    def stat(self) -> ObjectStat:
        from pyarrow.fs import FileType

        info = _filesystem().get_file_info(self._fs_path)
        if info.type == FileType.NotFound:
            raise FileNotFoundError(str(self))
        return ObjectStat(st_size=int(info.size or 0), st_mtime_ns=int(info.mtime_ns or 0))

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """A no-op: a prefix exists as soon as a key under it does."""

    def iterdir(self) -> Iterator[ObjectPath]:
        from pyarrow.fs import FileSelector

        selector = FileSelector(self._fs_path, allow_not_found=True, recursive=False)
        for info in _filesystem().get_file_info(selector):
            yield self / info.base_name

    def glob(self, pattern: str) -> Iterator[ObjectPath]:
        """Keys (and prefixes) below this one whose relative path matches ``pattern`` part by part.

        Only the levels with a wildcard are listed, one level at a time, and the literal
        tail is checked per candidate: finding a session's ``*/datasets/*/live_edit/<id>/
        metadata.json`` costs a listing per project plus one request per dataset, where a
        recursive listing read every object of every table.
        """
        from pyarrow.fs import FileSelector, FileType

        fs = _filesystem()
        parts = pattern.split("/")
        found = [self._fs_path]
        for depth, part in enumerate(parts):
            if not any(c in part for c in "*?["):
                found = [f"{prefix}/{part}" for prefix in found]
                continue
            last = depth == len(parts) - 1
            found = [
                info.path
                for prefix in found
                for info in fs.get_file_info(FileSelector(prefix, allow_not_found=True))
                if fnmatch.fnmatchcase(info.path.rsplit("/", 1)[-1], part)
                and (last or info.type == FileType.Directory)
            ]
        if found and not any(c in parts[-1] for c in "*?["):
            found = [info.path for info in fs.get_file_info(found) if info.type != FileType.NotFound]
        start = len(self._fs_path) + 1
        for path in found:
            yield self / path[start:]

    def read_bytes(self) -> bytes:
        try:
            with _filesystem().open_input_stream(self._fs_path) as stream:
                return bytes(stream.read())
        except OSError as exc:
            if not self.exists():
                raise FileNotFoundError(str(self)) from exc
            raise

    def read_text(self, encoding: str | None = None) -> str:
        return self.read_bytes().decode(encoding or "utf-8")

    def write_bytes(self, data: bytes) -> int:
        with _filesystem().open_output_stream(self._fs_path) as stream:
            stream.write(data)
        return len(data)

    def write_text(self, data: str, encoding: str | None = None) -> int:
        self.write_bytes(data.encode(encoding or "utf-8"))
        return len(data)

    def unlink(self, missing_ok: bool = False) -> None:
        if not missing_ok and not self.is_file():
            raise FileNotFoundError(str(self))
        if self.is_file():
            _filesystem().delete_file(self._fs_path)


# A table location or file: a local ``Path`` or an object in the store.
Location = Path | ObjectPath


def is_object_uri(raw: str | os.PathLike[str] | ObjectPath) -> bool:
    """Whether ``raw`` names an object in a store (``s3://`` or ``s3a://``) rather than a local path."""
    return isinstance(raw, ObjectPath) or str(raw).startswith(SCHEMES)


def local_file(raw: str | os.PathLike[str], *, field: str = "out") -> Path:
    """``raw`` as a local file to write, refused when it names object storage.

    A ``Path`` built from ``s3://bucket/key`` reads ``s3:/bucket/key``; both spellings are caught.

    Raises:
        InvalidInput: ``raw`` is an ``s3://`` (or ``s3a://``) URI.
    """
    text = str(raw)
    if text.startswith(SCHEMES) or text.startswith(tuple(s.replace("//", "/") for s in SCHEMES)):
        raise InvalidInput(
            f"{field} {text!r} is on object storage; exports are written to a local file (copy it up afterwards)",
            field=field,
        )
    return Path(raw)


def location(raw: str | os.PathLike[str] | ObjectPath) -> Location:
    """``raw`` as a location: an ``ObjectPath`` for ``s3://`` (or ``s3a://``) URIs, else ``Path(raw)``."""
    if isinstance(raw, (Path, ObjectPath)):
        return raw
    text = str(raw)
    if not text.startswith(SCHEMES):
        return Path(text)
    parts = urlsplit(text)
    if parts.query or parts.fragment:
        raise InvalidInput(f"object URI {text!r} must not have a query or fragment", field="DELTA_DATA_ROOT")
    return ObjectPath(parts.netloc, parts.path.strip("/"))


def uri(loc: Location | str) -> str:
    """The string every engine but Spark takes for ``loc`` (a local path, or ``s3://...``)."""
    return str(location(loc))


def spark_uri(loc: Location | str) -> str:
    """The path Spark reads and writes ``loc`` through: Hadoop's ``s3a://`` for objects, else ``str(loc)``."""
    text = str(loc)
    return "s3a://" + text.removeprefix("s3://") if text.startswith("s3://") else text


# ---------------------------------------------------------------- operations on either kind


def join(loc: Location, *parts: str) -> Location:
    """``loc / part / ...``; ``core.layout`` checks ids before they reach here."""
    for part in parts:
        loc = loc / part
    return loc


def exists(loc: Location) -> bool:
    return loc.exists()


def is_dir(loc: Location) -> bool:
    return loc.is_dir()


def list_dir(loc: Location) -> list[Location]:
    """The children of ``loc``, sorted by name; empty when ``loc`` does not exist."""
    if isinstance(loc, ObjectPath):
        return sorted(loc.iterdir(), key=lambda p: p.name)
    if not loc.is_dir():
        return []
    return sorted(loc.iterdir(), key=lambda p: p.name)


def sort_locations(items: list[Location]) -> list[Location]:
    """``items`` in ``sorted(paths)`` order (part by part), for either kind of location."""
    return sorted(items, key=lambda p: (p.bucket, *p.key.split("/")) if isinstance(p, ObjectPath) else p.parts)


def glob(loc: Location, pattern: str) -> list[Location]:
    """``sorted(loc.glob(pattern))``, for either kind of location."""
    return sort_locations(list(loc.glob(pattern)))


def object_files(loc: ObjectPath) -> list[ObjectPath]:
    """Every object (not prefix) under ``loc``, at any depth."""
    from pyarrow.fs import FileSelector, FileType

    selector = FileSelector(loc._fs_path, allow_not_found=True, recursive=True)
    infos = _filesystem().get_file_info(selector)
    return [ObjectPath(loc.bucket, i.path.split("/", 1)[1]) for i in infos if i.type == FileType.File]


def newest_mtime(loc: ObjectPath) -> float:
    """The newest modification time (seconds) of any object under ``loc``; 0 when there is none."""
    from pyarrow.fs import FileSelector

    selector = FileSelector(loc._fs_path, allow_not_found=True, recursive=True)
    return max((int(i.mtime_ns or 0) / 1e9 for i in _filesystem().get_file_info(selector)), default=0.0)


def local_path(loc: Location, what: str) -> Path:
    """``loc`` when it is local; on an object store, an ``EngineError`` naming ``what``."""
    if isinstance(loc, ObjectPath):
        raise EngineError(
            f"{what} is not available on object storage ({loc})", hint="use a local DELTA_DATA_ROOT for it"
        )
    return loc


def arrow_target(loc: Location) -> tuple[Path | str, S3FileSystem | None]:
    """``(where, filesystem)`` for pyarrow writers: ``(loc, None)`` locally, the store's filesystem for objects."""
    if isinstance(loc, ObjectPath):
        return loc._fs_path, _filesystem()
    return loc, None


def read_bytes(loc: Location) -> bytes:
    return loc.read_bytes()


def read_text(loc: Location) -> str:
    return loc.read_text(encoding="utf-8")


def write_bytes(loc: Location, data: bytes) -> None:
    """Write ``data`` to ``loc``, creating its local parent folders (object stores need none)."""
    loc.parent.mkdir(parents=True, exist_ok=True)
    loc.write_bytes(data)


def write_text(loc: Location, text: str) -> None:
    write_bytes(loc, text.encode("utf-8"))


def write_text_atomic(loc: Location, text: str) -> None:
    """Write ``text`` so that a reader never sees half of it.

    Locally through a ``.tmp`` sibling and a rename; an object PUT is atomic by itself.
    """
    if isinstance(loc, ObjectPath):
        loc.write_text(text)
        return
    tmp = loc.with_suffix(loc.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(loc)


def make_dirs(loc: Location) -> None:
    """``mkdir -p`` locally; nothing on an object store."""
    loc.mkdir(parents=True, exist_ok=True)


def remove_tree(loc: Location) -> None:
    """Delete ``loc`` and everything under it; no error when it is already gone."""
    if isinstance(loc, ObjectPath):
        from pyarrow.fs import FileType

        fs = _filesystem()
        info = fs.get_file_info(loc._fs_path)
        if info.type == FileType.Directory:
            fs.delete_dir(loc._fs_path)
        elif info.type == FileType.File:
            fs.delete_file(loc._fs_path)
        return
    shutil.rmtree(loc, ignore_errors=True)


def tree_bytes(loc: Location) -> int:
    """The bytes of every file under ``loc`` (0 when it does not exist)."""
    if isinstance(loc, ObjectPath):
        from pyarrow.fs import FileSelector, FileType

        selector = FileSelector(loc._fs_path, allow_not_found=True, recursive=True)
        return sum(int(i.size or 0) for i in _filesystem().get_file_info(selector) if i.type == FileType.File)
    if not loc.is_dir():
        return 0
    return sum(p.stat().st_size for p in loc.rglob("*") if p.is_file())


# ---------------------------------------------------------------- the store's settings


@dataclass(frozen=True)
class S3Settings:
    """The object store's endpoint, region and credentials, from the standard AWS variables."""

    endpoint_url: str | None
    region: str
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None

    @classmethod
    def from_env(cls) -> S3Settings:
        env = os.environ
        return cls(
            endpoint_url=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
        )

    @property
    def uses_http(self) -> bool:
        """An ``http://`` endpoint (a store on loopback, say): every engine must turn TLS off."""
        return bool(self.endpoint_url) and str(self.endpoint_url).startswith("http://")

    @property
    def endpoint_host(self) -> str | None:
        """``host:port`` of the endpoint, without its scheme (DuckDB and pyarrow want it so)."""
        if not self.endpoint_url:
            return None
        parts = urlsplit(self.endpoint_url)
        return parts.netloc or parts.path


def s3_settings() -> S3Settings:
    return S3Settings.from_env()


@lru_cache(maxsize=4)
def _filesystem_for(settings: S3Settings) -> S3FileSystem:
    from pyarrow.fs import S3FileSystem

    return S3FileSystem(
        access_key=settings.access_key_id,
        secret_key=settings.secret_access_key,
        session_token=settings.session_token,
        region=settings.region,
        scheme="http" if settings.uses_http else "https",
        endpoint_override=settings.endpoint_host,
        check_directory_existence_before_creation=False,
        # A small file (session metadata, settings, validation summaries) goes up in one
        # PutObject when its stream closes, not a multipart upload of three requests.
        allow_delayed_open=True,
    )


def _filesystem() -> S3FileSystem:
    return _filesystem_for(s3_settings())


def delta_storage_options() -> dict[str, str]:
    """delta-rs ``storage_options`` for the store.

    Commits use S3 conditional writes (``If-None-Match``): of two writers racing for one
    log entry, the second is refused and retries on the new version, so no commit is lost
    without a locking provider.
    """
    settings = s3_settings()
    options = {"AWS_REGION": settings.region, "AWS_CONDITIONAL_PUT": "etag"}
    if settings.endpoint_url:
        options["AWS_ENDPOINT_URL"] = settings.endpoint_url
    if settings.uses_http:
        options["AWS_ALLOW_HTTP"] = "true"
    if settings.access_key_id:
        options["AWS_ACCESS_KEY_ID"] = settings.access_key_id
    if settings.secret_access_key:
        options["AWS_SECRET_ACCESS_KEY"] = settings.secret_access_key
    if settings.session_token:
        options["AWS_SESSION_TOKEN"] = settings.session_token
    return options


def storage_options_for(loc: Location | str) -> dict[str, str] | None:
    """delta-rs ``storage_options`` for ``loc``: the store's for objects, ``None`` for local paths."""
    return delta_storage_options() if is_object_uri(loc) else None


def _sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def duckdb_secret_sql(name: str = "oreo_s3") -> str:
    """A ``CREATE OR REPLACE SECRET`` statement giving DuckDB's httpfs the store's settings."""
    settings = s3_settings()
    fields = [("TYPE", "S3"), ("REGION", _sql_literal(settings.region))]
    if settings.access_key_id:
        fields.append(("KEY_ID", _sql_literal(settings.access_key_id)))
    if settings.secret_access_key:
        fields.append(("SECRET", _sql_literal(settings.secret_access_key)))
    if settings.session_token:
        fields.append(("SESSION_TOKEN", _sql_literal(settings.session_token)))
    if settings.endpoint_host:
        fields.append(("ENDPOINT", _sql_literal(settings.endpoint_host)))
        fields.append(("URL_STYLE", "'path'"))
    if settings.uses_http:
        fields.append(("USE_SSL", "false"))
    body = ", ".join(f"{k} {v}" for k, v in fields)
    return f"CREATE OR REPLACE SECRET {name} ({body})"


def spark_confs() -> dict[str, str]:
    """Hadoop s3a confs for the store (endpoint, path-style access, TLS, static credentials)."""
    settings = s3_settings()
    confs = {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region": settings.region,
        "spark.hadoop.fs.s3a.path.style.access": "true",
    }
    if settings.endpoint_url:
        confs["spark.hadoop.fs.s3a.endpoint"] = settings.endpoint_url
    if settings.uses_http:
        confs["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false"
    if settings.access_key_id and settings.secret_access_key:
        provider = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        confs["spark.hadoop.fs.s3a.access.key"] = settings.access_key_id
        confs["spark.hadoop.fs.s3a.secret.key"] = settings.secret_access_key
        if settings.session_token:
            provider = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            confs["spark.hadoop.fs.s3a.session.token"] = settings.session_token
        confs["spark.hadoop.fs.s3a.aws.credentials.provider"] = provider
    return confs
