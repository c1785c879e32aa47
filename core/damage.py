"""Finding damage in a Delta table: an unreadable log, missing or cut data files, bad checkpoints.

Readers (``core.reads``, ``core.history``, ``core.datasets``) ask ``find_damage`` when a
read fails or before they describe a table, so the user gets one line naming the damaged
file instead of whatever DuckDB, delta-rs or Spark happened to say; ``core.doctor`` runs
every check and reports each finding.

The log is read without any engine (a truncated commit makes them all fail alike); the
files of the current version come from delta-rs, and their deletion vectors from the log.
The checks run on local tables and on tables in an object store (through ``core.storage``);
``find_damage``, which readers call on their way, looks at local tables only.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from core import storage
from core.errors import TableDamaged
from core.storage import Location, ObjectPath

LOG = "_delta_log"


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a table, naming the file (relative to the table) it concerns."""

    file: str
    problem: str
    # False when an engine could not tell (delta-rs failed on a log that parses): ``doctor``
    # reports it, but readers are not blocked on it.
    certain: bool = True

    def line(self) -> str:
        return f"{self.file} {self.problem}"


@dataclass(frozen=True)
class _LogFiles:
    commits: dict[int, Location]  # version -> JSON commit
    checkpoints: dict[int, list[Location]]  # version -> the parts of a checkpoint (maybe incomplete)
    parts_expected: dict[int, int]


def _log_entries(log: Location) -> list[tuple[str, Location]]:
    """``(name, location)`` of every entry of a ``_delta_log`` folder."""
    if isinstance(log, ObjectPath):
        return [(p.name, p) for p in storage.list_dir(log)]
    return [(entry.name, Path(entry.path)) for entry in os.scandir(log)]


def _log_files(table: Location) -> _LogFiles:
    commits: dict[int, Location] = {}
    checkpoints: dict[int, list[Location]] = {}
    expected: dict[int, int] = {}
    for name, entry in _log_entries(table / LOG):
        if not name[:20].isdigit() or name[20:21] != ".":
            continue
        version = int(name[:20])
        if name.endswith(".json") and len(name) == 25:
            commits[version] = entry
        elif name.endswith(".parquet") and ".checkpoint." in name:
            pieces = name.split(".")
            # <v>.checkpoint.parquet, or <v>.checkpoint.<part>.<parts>.parquet
            expected[version] = int(pieces[3]) if len(pieces) == 5 and pieces[3].isdigit() else 1
            checkpoints.setdefault(version, []).append(entry)
    return _LogFiles(commits, checkpoints, expected)


def _relative(table: Location, path: Location | str) -> str:
    if isinstance(table, ObjectPath):
        prefix = str(table) + "/"
        return str(path).removeprefix(prefix)
    try:
        return str(Path(str(path)).relative_to(table))
    except ValueError:
        return str(path)


def _lines(path: Location) -> Iterator[str]:
    """The lines of a text file; an object is fetched whole (it is one GET either way)."""
    if isinstance(path, ObjectPath):
        yield from path.read_bytes().decode("utf-8").splitlines()
        return
    with path.open(encoding="utf-8") as handle:
        yield from handle


def _read_commit(path: Location) -> list[dict[str, Any]]:
    """The actions of one JSON commit; ValueError (with the line) when it does not parse."""
    actions = []
    for number, line in enumerate(_lines(path), start=1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except json.JSONDecodeError as exc:
            where = f"line {number}, column {exc.colno}"
            raise ValueError(f"is not valid JSON at {where}: truncated or corrupt") from exc
        if not isinstance(action, dict):
            raise ValueError(f"line {number} is not a Delta action")
        actions.append(action)
    if not actions:
        raise ValueError("is empty")
    missing = _missing_actions(actions)
    if missing:
        raise ValueError(missing)
    return actions


# ``operationMetrics`` keys that count a commit's remove actions (Spark and delta-rs
# spellings). A commit can hold more removes than counted, never fewer. File counts of
# added files are not used: Spark counts a file a task opened and left empty (1,200 rows
# in 2 tasks: ``numFiles`` 2, one ``add``), so adds are checked by their rows instead.
_COUNTED_REMOVES = ("numRemovedFiles", "numTargetFilesRemoved", "num_removed_files")
# Rows a commit wrote into new files: its adds' ``numRecords`` sum to at least this (an add
# that only gives an existing file a deletion vector re-counts that file's rows).
_WRITTEN_ROWS = ("numOutputRows",)


def _count(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _records(add: dict[str, Any]) -> int | None:
    """An add action's row count from its statistics, or None when it has none."""
    try:
        return int(json.loads(add.get("stats") or "null")["numRecords"])
    except (TypeError, ValueError, KeyError):
        return None


def _missing_actions(actions: list[dict[str, Any]]) -> str | None:
    """Why a commit that parses is still cut short, or None.

    Every commit Oreo's writers (Spark and delta-rs) make carries a ``commitInfo`` whose
    metrics count the files it removes and the rows it writes; a commit cut at a line
    boundary parses but lacks the ``commitInfo`` or some of the actions it counts.
    """
    infos = [a["commitInfo"] for a in actions if isinstance(a.get("commitInfo"), dict)]
    if not infos:
        return "has no commitInfo: truncated or corrupt"
    metrics = infos[0].get("operationMetrics") or {}
    if not isinstance(metrics, dict):
        return None
    counted = max((_count(metrics.get(key)) for key in _COUNTED_REMOVES), default=0)
    present = sum(1 for action in actions if "remove" in action)
    if present < counted:
        return f"holds {present} of the {counted} 'remove' actions its commitInfo counts: truncated"
    written = max((_count(metrics.get(key)) for key in _WRITTEN_ROWS), default=0)
    records = [_records(a["add"]) for a in actions if isinstance(a.get("add"), dict)]
    held = sum(r or 0 for r in records)
    if written and None not in records and held < written:
        return f"adds files holding {held:,} of the {written:,} rows its commitInfo wrote: truncated"
    return None


def _newest_checkpoint(files: _LogFiles) -> int | None:
    complete = [v for v, parts in files.checkpoints.items() if len(parts) == files.parts_expected[v]]
    return max(complete, default=None)


def check_log(table: Location, *, every_commit: bool = True) -> list[Finding]:
    """Every JSON commit parses, and the versions are contiguous from the newest checkpoint (or 0).

    With ``every_commit`` False only the commits readers replay (those after the newest
    checkpoint) are parsed: the quick check ``find_damage`` makes.
    """
    table = storage.location(table)
    if not (table / LOG).is_dir():
        return [Finding(LOG, "is missing: this is not a Delta table")]
    files = _log_files(table)
    if not files.commits and not files.checkpoints:
        return [Finding(LOG, "holds no commits")]
    findings: list[Finding] = []
    start = _newest_checkpoint(files)
    first = 0 if start is None else start + 1
    for version in sorted(v for v in files.commits if every_commit or v >= first):
        try:
            _read_commit(files.commits[version])
        except (ValueError, UnicodeDecodeError) as exc:
            findings.append(Finding(_relative(table, files.commits[version]), str(exc)))
        except OSError as exc:
            reason = exc.strerror or _first_line(exc)
            findings.append(Finding(_relative(table, files.commits[version]), f"cannot be read: {reason}"))
    latest = max(max(files.commits, default=-1), max(files.checkpoints, default=-1))
    missing = [v for v in range(first, latest + 1) if v not in files.commits]
    if missing:
        shown = ", ".join(f"{LOG}/{v:020d}.json" for v in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        since = "version 0" if start is None else f"the checkpoint of version {start}"
        findings.append(Finding(shown + more, f"missing: the log has a gap after {since}"))
    return findings


def check_checkpoints(table: Location) -> list[Finding]:
    """Every checkpoint file is readable Parquet and complete; ``_last_checkpoint`` names a real one."""
    import pyarrow.parquet as pq

    table = storage.location(table)
    if not (table / LOG).is_dir():
        return []
    files = _log_files(table)
    findings: list[Finding] = []
    for version, parts in sorted(files.checkpoints.items()):
        if len(parts) != files.parts_expected[version]:
            findings.append(
                Finding(
                    _relative(table, parts[0]),
                    f"is one of {len(parts)} of {files.parts_expected[version]} checkpoint parts of version {version}",
                )
            )
        for part in parts:
            try:
                source, filesystem = storage.arrow_target(part)
                pq.read_table(source, filesystem=filesystem)
            except Exception as exc:  # pyarrow raises several unrelated kinds for a bad file
                findings.append(Finding(_relative(table, part), f"is not a readable checkpoint: {_first_line(exc)}"))
    pointer = table / LOG / "_last_checkpoint"
    if pointer.is_file():
        try:
            version = int(json.loads(pointer.read_text(encoding="utf-8"))["version"])
        except (ValueError, KeyError, TypeError) as exc:
            findings.append(Finding(_relative(table, pointer), f"is not valid: {_first_line(exc)}"))
        else:
            if version not in files.checkpoints:
                findings.append(Finding(_relative(table, pointer), f"names version {version}, which has no checkpoint"))
    return findings


_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _decode_z85(text: str) -> bytes:
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for char in text[i : i + 5]:
            value = value * 85 + _Z85.index(char)
        out += value.to_bytes(4, "big")
    return bytes(out)


def action_path(table: str, path: str) -> str:
    """A log action's path (relative and URL-encoded, or an absolute URI) as a local path
    (or, for an object in a store, as its ``s3://`` URI)."""
    if path.startswith(storage.SCHEMES):
        parts = urlparse(path)
        return f"s3://{parts.netloc}{unquote(parts.path)}"
    if "://" in path or path.startswith("file:"):
        return unquote(urlparse(path).path)
    # Plain string joins: this runs for every action of every commit.
    return f"{table}/{unquote(path) if '%' in path else path}"


def deletion_vector_path(table: str, dv: dict[str, Any] | None) -> str | None:
    """The deletion-vector file an action refers to; None when inline or absent (Delta protocol)."""
    if not dv:
        return None
    kind, where = dv.get("storageType"), str(dv.get("pathOrInlineDv") or "")
    if kind == "u":
        prefix, encoded = where[:-20], where[-20:]
        name = f"deletion_vector_{uuid.UUID(bytes=_decode_z85(encoded))}.bin"
        return os.path.join(table, prefix, name) if prefix else os.path.join(table, name)
    if kind == "p":
        return action_path(table, where)
    return None


def _file_key(action: dict[str, Any]) -> tuple[str, str]:
    """A file's identity in the log: its path and its deletion vector (Delta protocol)."""
    dv = action.get("deletionVector") or {}
    offset = "" if dv.get("offset") is None else str(dv["offset"])
    return action["path"], f"{dv.get('storageType') or ''}{dv.get('pathOrInlineDv') or ''}@{offset}"


def _deletion_vectors(table: Location, files: _LogFiles) -> list[Location]:
    """Deletion-vector files of the current version: the newest checkpoint's, then the JSON commits after it."""
    import pyarrow.parquet as pq

    live: dict[tuple[str, str], str] = {}

    def add(action: dict[str, Any]) -> None:
        dv = deletion_vector_path(str(table), action.get("deletionVector"))
        if dv:
            live[_file_key(action)] = dv

    start = _newest_checkpoint(files)
    if start is not None:
        for part in files.checkpoints[start]:
            source, filesystem = storage.arrow_target(part)
            if "add" in pq.read_schema(source, filesystem=filesystem).names:
                read = pq.read_table(source, columns=["add"], filesystem=filesystem)
                for action in read.column("add").to_pylist():
                    if action:
                        add(action)
    for version in sorted(v for v in files.commits if start is None or v > start):
        for action in _read_commit(files.commits[version]):
            if "remove" in action:
                live.pop(_file_key(action["remove"]), None)
            elif "add" in action:
                add(action["add"])
    return storage.sort_locations([storage.location(p) for p in set(live.values())])


def check_files(table: Location) -> list[Finding]:
    """Every data and deletion-vector file of the current version exists, with the size the log says."""
    from deltalake import DeltaTable

    table = storage.location(table)
    try:
        delta = DeltaTable(str(table), storage_options=storage.storage_options_for(table))
        actions = delta.get_add_actions(flatten=True)
        paths = [str(p) for p in actions.column("path").to_pylist()]
        sizes = [int(s) for s in actions.column("size_bytes").to_pylist()]
        version = delta.version()
        vectors = _deletion_vectors(table, _log_files(table))
    except Exception as exc:  # delta-rs and the log replay fail in many ways on a damaged log
        return [Finding(LOG, f"cannot be replayed to list the current files: {_first_line(exc)}", certain=False)]
    findings: list[Finding] = []
    for path, size in zip(paths, sizes, strict=True):
        local = storage.location(action_path(str(table), path))
        try:
            actual = local.stat().st_size
        except FileNotFoundError:
            findings.append(Finding(_relative(table, local), f"is missing (a data file of version {version})"))
            continue
        if actual != size:
            findings.append(
                Finding(_relative(table, local), f"has {actual} bytes, the log says {size} (version {version})")
            )
    for vector in vectors:
        if not vector.is_file():
            findings.append(
                Finding(_relative(table, vector), f"is missing (a deletion-vector file of version {version})")
            )
    return findings


def find_damage(table: Location, name: str | None = None) -> TableDamaged | None:
    """The first thing wrong with ``table``'s log or current files, as an error to raise; None if sound.

    Only local tables are inspected: on an object store the engine's own error stands.
    """
    if isinstance(table, ObjectPath):
        return None
    table = Path(table)
    if not (table / LOG).is_dir():
        return None  # no table at all: the caller's NotFound says so
    findings = check_log(table, every_commit=False) or [f for f in check_files(table) if f.certain]
    if not findings:
        return None
    label = name or _dataset_name(table)
    more = f" (and {len(findings) - 1} more problem(s))" if len(findings) > 1 else ""
    return TableDamaged(
        f"{label} is damaged: {findings[0].line()}{more}",
        path=str(table / findings[0].file),
        hint=_doctor_hint(table),
    )


@dataclass(frozen=True)
class _Checked:
    log_mtime_ns: int  # the log folder's: a new commit changes it
    commit: str  # the newest commit's file name then
    identity: tuple[int, int, int]  # that file's inode, size and mtime when it was read
    problem: str | None


_latest_checked: dict[str, _Checked] = {}
_latest_lock = threading.Lock()


def raise_if_latest_commit_cut(table: Location, name: str | None = None) -> None:
    """Raise ``TableDamaged`` when the newest commit is empty, does not parse, or is cut short.

    Readers call this before every read, so a table whose last commit lost its actions is
    refused instead of served as the version before. It reads only the newest commit, and
    only when that file (or the log folder) changed since the last call. Local tables only.
    """
    if isinstance(table, ObjectPath):
        return
    log = Path(table) / LOG
    key = str(log)
    try:
        log_mtime = log.stat().st_mtime_ns
        with _latest_lock:
            known = _latest_checked.get(key)
        commit = known.commit if known is not None and known.log_mtime_ns == log_mtime else _newest_commit(log)
        if commit is None:
            return  # no commits at all: find_damage and the readers' NotFound say so
        stat = (log / commit).stat()
    except FileNotFoundError:
        return  # no table (the caller says so) or replaced while we looked (the next read checks)
    identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if known is None or (known.log_mtime_ns, known.commit, known.identity) != (log_mtime, commit, identity):
        problem = None
        try:
            _read_commit(log / commit)
        except (ValueError, UnicodeDecodeError) as exc:
            problem = str(exc)
        except FileNotFoundError:
            return
        known = _Checked(log_mtime, commit, identity, problem)
        with _latest_lock:
            _latest_checked[key] = known
    if known.problem is not None:
        label = name or _dataset_name(Path(table))
        raise TableDamaged(
            f"{label} is damaged: {LOG}/{commit} {known.problem}",
            path=str(log / commit),
            hint=_doctor_hint(Path(table)),
        )


def _newest_commit(log: Path) -> str | None:
    names = [
        entry.name
        for entry in os.scandir(log)
        if len(entry.name) == 25 and entry.name.endswith(".json") and entry.name[:20].isdigit()
    ]
    return max(names, default=None)


def raise_if_damaged(table: Location, name: str | None = None) -> None:
    """Raise ``find_damage``'s error, if any."""
    damage = find_damage(table, name)
    if damage is not None:
        raise damage


def _dataset_name(table: Path) -> str:
    parts = Path(table).parts
    if len(parts) >= 5 and parts[-5] == "projects" and parts[-3] == "datasets":
        return f"{parts[-4]}/{parts[-2]}" + ("" if parts[-1] == "main" else f" ({parts[-1]})")
    return str(table)


def _doctor_hint(table: Path) -> str:
    parts = Path(table).parts
    if len(parts) >= 5 and parts[-5] == "projects" and parts[-3] == "datasets" and parts[-1] == "main":
        return f"run `oreo doctor {parts[-4]} {parts[-2]}` for a full check"
    return "run `oreo doctor PROJECT DATASET` for a full check"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
