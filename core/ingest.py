"""Reading user files (CSV, Parquet, XLSX) into Arrow, strictly.

Everything that can be wrong with a file is found here, before any folder, table or
catalog row exists: a path that is not a regular file (a folder, device, named pipe,
socket, broken or looping link), a file over the size limit, unknown type, empty file,
bad encoding, ragged rows, corrupt Parquet, ambiguous XLSX sheets, unusable column
names. Each failure is an ``InvalidFile`` whose one-line message names the problem.
``check_input_file`` is the one check every way in (dataset create, append, migrate
parquet, the Import page) uses; files are read once, with a bounded read.

Timestamps are normalised to microseconds in UTC so Spark writes a plain ``timestamp``
column (no ``timestampNtz`` table feature) that DuckDB reads back unchanged.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import shutil
import stat
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc

from core import schema
from core.errors import InvalidFile

SUPPORTED_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".xlsx": "xlsx"}
RESERVED_COLUMNS = {"row_id"}
# Delta refuses these in column names unless column mapping is on, and column mapping
# breaks DuckDB reads, so they are refused up front.
_FORBIDDEN_IN_NAMES = set(" ,;{}()\n\t=")
_CHUNK = 1 << 20


def file_kind(path: Path) -> str:
    """``csv``, ``parquet`` or ``xlsx`` from the suffix; anything else is refused."""
    kind = SUPPORTED_SUFFIXES.get(Path(path).suffix.lower())
    if kind is None:
        raise InvalidFile(
            f"unsupported file type {Path(path).suffix or '(none)'!r} for {Path(path).name}; "
            "use .csv, .parquet or .xlsx",
            path=str(path),
        )
    return kind


# ---------------------------------------------------------------- files that are not files

# What a path that is not a regular file is, in the user's words.
_NOT_REGULAR = (
    (stat.S_ISDIR, "is a folder, not a file"),
    (stat.S_ISFIFO, "is a named pipe, not a regular file"),
    (stat.S_ISSOCK, "is a socket, not a regular file"),
    (stat.S_ISCHR, "is a device, not a regular file"),
    (stat.S_ISBLK, "is a device, not a regular file"),
)


def check_input_file(path: Path | str, *, max_bytes: int | None = None) -> int:
    """Refuse anything but a regular file of at most ``max_bytes``, without opening it.

    Dataset create, append, ``migrate parquet`` and the Import page's uploads all go
    through this one check: folders, devices, named pipes, sockets, missing paths,
    broken or looping symbolic links and unreadable paths are refused with one line.

    Returns:
        The file's size in bytes, as it says (``/proc`` files say 0 and are not).

    Raises:
        InvalidFile: The path is not a readable regular file, or is over ``max_bytes``.
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    _check_regular(path, info.st_mode)
    check_size(path.name, info.st_size, max_bytes, path=str(path))
    return info.st_size


def check_size(name: str, size: int, max_bytes: int | None, *, path: str = "") -> None:
    """Refuse ``size`` bytes when it is over ``max_bytes`` (``OREO_MAX_UPLOAD_MB``)."""
    if max_bytes is not None and size > max_bytes:
        raise InvalidFile(
            f"{name} is {size / 2**20:.1f} MB, over the {max_bytes / 2**20:.0f} MB upload limit", path=path
        )


def read_input_file(path: Path | str, *, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file, read once and never more than ``max_bytes``.

    The size is checked before reading; a file that grows past the limit while it is
    read stops there with an error, so no input can fill the memory.

    Raises:
        InvalidFile: Not a readable regular file, empty, or over ``max_bytes``.
    """
    path = Path(path)
    size = check_input_file(path, max_bytes=max_bytes)
    with open_input_file(path) as fh:
        data = _read_capped(fh, size, None if max_bytes is None else max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise InvalidFile(
            f"{path.name} grew past the {_amount(max_bytes)} limit while it was read; upload a file that "
            "is not being written to",
            path=str(path),
        )
    if not data:
        raise InvalidFile(f"{path.name} is empty (0 bytes)", path=str(path))
    return data


def _read_capped(fh: BinaryIO, size: int, cap: int | None) -> bytes:
    """Read to the end or to ``cap`` bytes, whichever comes first; ``size`` is what the file said."""
    first = size + 1 if cap is None else min(size + 1, cap)
    data = fh.read(first)  # one read of the expected size, plus a byte to notice growth
    if len(data) < first or len(data) == cap:
        return data
    # Longer than it said (still being written, or a /proc file): read on in chunks, still capped.
    parts, total = [data], len(data)
    while cap is None or total < cap:
        chunk = fh.read(_CHUNK if cap is None else min(_CHUNK, cap - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
    return b"".join(parts)


def open_input_file(path: Path | str) -> BinaryIO:
    """Open a regular file for reading; a named pipe or device is refused, never waited on.

    ``O_NONBLOCK`` makes opening a named pipe return at once, and the open file is
    checked again, so a path swapped for a pipe after ``check_input_file`` is refused too.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    try:
        _check_regular(path, os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def save_upload(source: bytes | BinaryIO, target: Path, *, max_bytes: int | None) -> None:
    """Write an uploaded body to ``target``, refusing it before writing when it is over ``max_bytes``."""
    if isinstance(source, bytes | bytearray | memoryview):
        source = io.BytesIO(source)
    if source.seekable():
        size = source.seek(0, io.SEEK_END)
        source.seek(0)
        check_size(target.name, size, max_bytes, path=str(target))
    limit = None if max_bytes is None else max_bytes + 1
    with target.open("wb") as out:
        shutil.copyfileobj(_Bounded(source, limit), out)
    if max_bytes is not None and target.stat().st_size > max_bytes:
        target.unlink()
        raise InvalidFile(f"{target.name} is over the {_amount(max_bytes)} upload limit", path=str(target))


class _Bounded(io.RawIOBase):
    """A reader that stops after ``limit`` bytes (None: at the end of ``source``)."""

    def __init__(self, source: BinaryIO, limit: int | None) -> None:
        self._source = source
        self._left = limit

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._left is None:
            return self._source.read(size)
        if self._left <= 0:
            return b""
        chunk = self._source.read(self._left if size is None or size < 0 else min(size, self._left))
        self._left -= len(chunk)
        return chunk


def _check_regular(path: Path, mode: int) -> None:
    for test, what in _NOT_REGULAR:
        if test(mode):
            raise InvalidFile(f"{path.name} {what}", path=str(path))
    if not stat.S_ISREG(mode):
        raise InvalidFile(f"{path.name} is not a regular file", path=str(path))


def _unreadable(path: Path, exc: OSError) -> InvalidFile:
    """``exc`` from stat or open, as the one-line reason the path cannot be read."""
    if exc.errno == errno.ELOOP:
        return InvalidFile(f"{path.name} is a symbolic link loop ({path})", path=str(path))
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        if path.is_symlink():
            return InvalidFile(
                f"{path.name} is a broken symbolic link (it points to {os.readlink(path)}, which does not exist)",
                path=str(path),
            )
        return InvalidFile(f"file not found: {path}", path=str(path))
    if exc.errno == errno.ENXIO:  # opening a socket
        return InvalidFile(f"{path.name} is a socket, not a regular file", path=str(path))
    if exc.errno in (errno.EACCES, errno.EPERM):
        return InvalidFile(f"cannot read {path}: permission denied", path=str(path))
    return InvalidFile(f"cannot read {path}: {exc.strerror or exc}", path=str(path))


def _amount(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n} byte"


# ---------------------------------------------------------------- reading


def read_table_file(
    path: Path | str,
    *,
    sheet: str | None = None,
    max_bytes: int | None = None,
    csv_types: dict[str, pa.DataType] | None = None,
) -> pa.Table:
    """Read a CSV, Parquet or XLSX file into an Arrow table.

    Args:
        path: The file; its suffix decides the format.
        sheet: The XLSX sheet to read; required when the workbook has several.
        max_bytes: Refuse files larger than this.
        csv_types: Types to parse these CSV columns as instead of inferring them.

    Raises:
        InvalidFile: The file is missing, not a regular file, empty, too large, malformed
            or unsupported.
    """
    path = Path(path)
    file_kind(path)
    return parse_table(read_input_file(path, max_bytes=max_bytes), path, sheet=sheet, csv_types=csv_types)


def parse_table(
    data: bytes, path: Path | str, *, sheet: str | None = None, csv_types: dict[str, pa.DataType] | None = None
) -> pa.Table:
    """Parse a file's bytes, as read once by ``read_input_file``, into an Arrow table.

    Callers that keep the original file (dataset create, ``store_upload``) read it once
    with ``read_input_file``, parse those bytes here and store the same bytes, so a file
    that changes or grows after the read is never copied or read again unbounded.

    Args:
        data: The file's bytes.
        path: The file's path; its suffix decides the format and its name is in messages.
        sheet: The XLSX sheet to read; required when the workbook has several.
        csv_types: Types to parse these CSV columns as instead of inferring them.

    Raises:
        InvalidFile: The bytes are malformed for the format, or a column is unusable.
    """
    path = Path(path)
    kind = file_kind(path)
    if kind == "csv":
        table = _read_csv(data, path, csv_types or {})
    elif kind == "parquet":
        table = _read_parquet(data, path)
    else:
        table = _read_xlsx(data, path, sheet)
    check_column_names(table.column_names, source=path.name)
    schema.check_column_types(table.schema, source=path.name)
    return normalise_types(table)


def _check_utf8(data: bytes, path: Path) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    for offset in range(0, len(view), _CHUNK):
        try:
            decoder.decode(view[offset : offset + _CHUNK])
        except UnicodeDecodeError as exc:
            raise InvalidFile(
                f"{path.name} is not UTF-8 text (bad byte at offset {offset + exc.start}); "
                "save it as UTF-8 and upload again",
                path=str(path),
            ) from exc
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise InvalidFile(f"{path.name} is not UTF-8 text (truncated character at the end)", path=str(path)) from exc


def csv_header(path: Path | str) -> list[str]:
    """The column names of a CSV file's header row (empty for an empty file).

    Raises:
        InvalidFile: ``path`` is not a readable regular file.
    """
    import csv as stdlib_csv

    check_input_file(path)
    with open_input_file(path) as fh:
        text = io.TextIOWrapper(fh, newline="", encoding="utf-8", errors="replace")
        return next(stdlib_csv.reader(text), [])


def csv_header_of(data: bytes) -> list[str]:
    """The column names of the header row of a CSV file's bytes (empty for no bytes)."""
    import csv as stdlib_csv

    text = io.TextIOWrapper(io.BytesIO(data), newline="", encoding="utf-8", errors="replace")
    return next(stdlib_csv.reader(text), [])


def _read_csv(data: bytes, path: Path, types: dict[str, pa.DataType]) -> pa.Table:
    from pyarrow import csv

    _check_utf8(data, path)
    try:
        table = csv.read_csv(
            pa.BufferReader(data),
            read_options=csv.ReadOptions(block_size=16 << 20),
            parse_options=csv.ParseOptions(newlines_in_values=True),
            # Only an empty field is NULL: pyarrow's default also blanks "NA", "NULL", "nan",
            # "N/A"..., silently turning text such as Namibia's country code into NULL.
            convert_options=csv.ConvertOptions(strings_can_be_null=True, null_values=[""], column_types=types),
        )
    except pa.ArrowInvalid as exc:
        message = str(exc).splitlines()[0]
        if "Expected" in message and "columns" in message:
            raise InvalidFile(
                f"{path.name} has rows with a different number of columns than its header: {message}", path=str(path)
            ) from exc
        if "Empty CSV file" in message:
            raise InvalidFile(f"{path.name} has no header row", path=str(path)) from exc
        raise InvalidFile(f"{path.name} is not a readable CSV file: {message}", path=str(path)) from exc
    return table


def _read_parquet(data: bytes, path: Path) -> pa.Table:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidFile(f"{path.name} is not a readable Parquet file: {message}", path=str(path)) from exc


def xlsx_sheets(path: Path | str, *, max_bytes: int | None = None) -> list[str]:
    """Sheet names of a workbook, for the sheet picker.

    Raises:
        InvalidFile: Not a readable regular file, over ``max_bytes``, or not a workbook.
    """
    return _sheets(read_input_file(path, max_bytes=max_bytes), Path(path))


def _sheets(data: bytes, path: Path) -> list[str]:
    from openpyxl import load_workbook

    try:
        workbook = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises zipfile/KeyError/ValueError variants
        raise InvalidFile(f"{path.name} is not a readable XLSX workbook: {exc}", path=str(path)) from exc
    try:
        return list(workbook.sheetnames)
    finally:
        workbook.close()


def _read_xlsx(data: bytes, path: Path, sheet: str | None) -> pa.Table:
    import pandas as pd

    sheets = _sheets(data, path)
    if sheet is None:
        if len(sheets) != 1:
            raise InvalidFile(
                f"{path.name} has {len(sheets)} sheets ({', '.join(sheets)}); name the one to read",
                path=str(path),
            )
        sheet = sheets[0]
    elif sheet not in sheets:
        raise InvalidFile(f"{path.name} has no sheet {sheet!r}; sheets are: {', '.join(sheets)}", path=str(path))
    # pandas renames a repeated header "a" to "a.1", so check the names as the sheet has them.
    check_column_names(_xlsx_header(data, sheet), source=path.name)
    # openpyxl with data_only returns cached formula results; formulas are never evaluated,
    # so one without a cached result would read as an empty cell.
    _refuse_uncached_formulas(data, sheet, path)
    frame = pd.read_excel(io.BytesIO(data), sheet_name=sheet, engine="openpyxl")
    if frame.columns.empty:
        raise InvalidFile(f"sheet {sheet!r} of {path.name} is empty", path=str(path))
    frame.columns = [str(c) for c in frame.columns]
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InvalidFile(f"sheet {sheet!r} of {path.name} mixes types in a column: {exc}", path=str(path)) from exc


_SHOWN_CELLS = 10


def _refuse_uncached_formulas(data: bytes, sheet: str, path: Path) -> None:
    """Refuse formula cells the workbook holds no computed value for (saved by a tool that does not compute).

    Raises:
        InvalidFile: Naming the cells (``Sheet1!B3``), up to ``_SHOWN_CELLS`` of them.
    """
    from openpyxl import load_workbook

    formulas = load_workbook(io.BytesIO(data), read_only=True, data_only=False)
    values = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    found: list[str] = []
    try:
        rows = zip(formulas[sheet].iter_rows(), values[sheet].iter_rows(), strict=False)
        for formula_row, value_row in rows:
            for formula, value in zip(formula_row, value_row, strict=False):
                if getattr(formula, "data_type", None) == "f" and value.value is None:
                    found.append(f"{sheet}!{formula.coordinate}")
    finally:
        formulas.close()
        values.close()
    if found:
        more = len(found) - _SHOWN_CELLS
        shown = ", ".join(found[:_SHOWN_CELLS]) + (f" and {more} more" if more > 0 else "")
        raise InvalidFile(
            f"{path.name} has formula cells without a computed value ({shown}); open and save it in a spreadsheet "
            "program so each formula's value is stored, or replace the formulas by values",
            path=str(path),
        )


def _xlsx_header(data: bytes, sheet: str) -> list[str]:
    from openpyxl import load_workbook

    workbook = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        first = next(workbook[sheet].iter_rows(max_row=1, values_only=True), ())
    finally:
        workbook.close()
    return [str(value) for value in first if value is not None]


def check_column_names(names: list[str], *, source: str) -> None:
    """Refuse empty, duplicate, reserved or Delta-incompatible column names."""
    seen: set[str] = set()
    for name in names:
        if not name or not name.strip() or name.startswith("Unnamed:"):
            raise InvalidFile(f"{source} has a column without a name; every column needs a header")
        lowered = name.lower()
        if lowered in seen:
            raise InvalidFile(f"{source} has the column {name!r} twice (names are case-insensitive)")
        seen.add(lowered)
        schema.check_column_name(name, source=source)
        bad = sorted(set(name) & _FORBIDDEN_IN_NAMES)
        if bad:
            shown = ", ".join(repr(c) for c in bad)
            raise InvalidFile(f"column name {name!r} in {source} contains {shown}; use letters, digits, '_' or '-'")


def normalise_types(table: pa.Table) -> pa.Table:
    """Make Arrow types Spark and DuckDB both store the same way.

    Raises:
        InvalidFile: A column's values do not fit the type Oreo keeps it as (an unsigned
            64-bit value over the largest ``bigint``), naming the column.
    """
    fields = []
    arrays = []
    for field, column in zip(table.schema, table.columns, strict=True):
        try:
            t, column = _normalised(field.type, column)
        except pa.ArrowInvalid as exc:
            if pa.types.is_unsigned_integer(field.type):
                kept = "bigint"
            elif pa.types.is_timestamp(field.type):
                kept = "microseconds (Spark keeps no finer time)"
            else:
                kept = "a type Spark and DuckDB share"
            raise InvalidFile(
                f"column {field.name!r} is {field.type} with values that do not fit {kept} exactly "
                f"({str(exc).splitlines()[0]}); store them as a decimal or as text"
            ) from exc
        _refuse_out_of_years(field.name, t, column)
        fields.append(pa.field(field.name, t))
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


# 0001-01-01 and 9999-12-31 as days, and their first and last microsecond, since 1970-01-01.
_DAYS = (-719_162, 2_932_896)
_MICROSECONDS = (-62_135_596_800_000_000, 253_402_300_799_999_999)


def _refuse_out_of_years(name: str, t: pa.DataType, column: pa.ChunkedArray) -> None:
    """Refuse a date or timestamp outside the years 0001-9999 (year 0 pages fail in every reader later).

    Raises:
        InvalidFile: Naming the column, the first such value and its data row.
    """
    if pa.types.is_date32(t):
        low, high = _DAYS
        numbers = column.cast(pa.int32())
    elif pa.types.is_timestamp(t) and t.unit == "us":
        low, high = _MICROSECONDS
        numbers = column.cast(pa.int64())
    else:
        return
    outside = pc.or_(pc.less(numbers, low), pc.greater(numbers, high))
    if not pc.any(outside).as_py():
        return
    row = pc.index(outside, True).as_py()
    shown = pc.cast(column.slice(row, 1), pa.string())[0].as_py()
    raise InvalidFile(
        f"column {name!r} has {shown!r} (data row {row + 1}), outside the years 0001-9999 that dates and "
        "timestamps can hold; correct it in the file"
    )


def _normalised(t: pa.DataType, column: pa.ChunkedArray) -> tuple[pa.DataType, pa.ChunkedArray]:
    """``column`` of type ``t`` as the type Oreo stores; a value that would change raises ``ArrowInvalid``."""
    if pa.types.is_timestamp(t):
        target = pa.timestamp("us", tz="UTC")
        if t.unit == "ns":
            # Spark keeps microseconds: a safe cast raises when nanoseconds would be cut.
            column = column.cast(pa.timestamp("us", tz=t.tz))
        if t.tz is None:
            column = pc.assume_timezone(column.cast(pa.timestamp("us")), "UTC")
        column = column.cast(target)
        t = target
    elif pa.types.is_large_string(t) or pa.types.is_dictionary(t) or pa.types.is_null(t):
        t = pa.string()
        column = column.cast(t)
    elif pa.types.is_unsigned_integer(t):
        t = pa.int64()
        column = column.cast(t)
    elif pa.types.is_date64(t):
        t = pa.date32()
        column = column.cast(t)
    return t, column
