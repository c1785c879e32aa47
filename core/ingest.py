"""Reading user files (CSV, Parquet, XLSX) into Arrow, strictly.

Everything that can be wrong with a file is found here, before any folder, table or
catalog row exists: unknown type, empty file, bad encoding, ragged rows, corrupt Parquet,
ambiguous XLSX sheets, unusable column names. Each failure is an ``InvalidFile`` whose
one-line message names the problem.

Timestamps are normalised to microseconds in UTC so Spark writes a plain ``timestamp``
column (no ``timestampNtz`` table feature) that DuckDB reads back unchanged.
"""

from __future__ import annotations

import codecs
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

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
        InvalidFile: The file is missing, empty, too large, malformed or unsupported.
    """
    path = Path(path)
    kind = file_kind(path)
    if not path.is_file():
        raise InvalidFile(f"file not found: {path}", path=str(path))
    size = path.stat().st_size
    if size == 0:
        raise InvalidFile(f"{path.name} is empty (0 bytes)", path=str(path))
    if max_bytes is not None and size > max_bytes:
        raise InvalidFile(
            f"{path.name} is {size / 2**20:.1f} MB, over the {max_bytes / 2**20:.0f} MB upload limit",
            path=str(path),
        )
    if kind == "csv":
        table = _read_csv(path, csv_types or {})
    elif kind == "parquet":
        table = _read_parquet(path)
    else:
        table = _read_xlsx(path, sheet)
    check_column_names(table.column_names, source=path.name)
    return normalise_types(table)


def _check_utf8(path: Path) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                raise InvalidFile(
                    f"{path.name} is not UTF-8 text (bad byte at offset {offset + exc.start}); "
                    "save it as UTF-8 and upload again",
                    path=str(path),
                ) from exc
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise InvalidFile(
                f"{path.name} is not UTF-8 text (truncated character at the end)", path=str(path)
            ) from exc


def csv_header(path: Path | str) -> list[str]:
    """The column names of a CSV file's header row (empty for an empty file)."""
    import csv as stdlib_csv

    with Path(path).open(newline="", encoding="utf-8", errors="replace") as fh:
        return next(stdlib_csv.reader(fh), [])


def _read_csv(path: Path, types: dict[str, pa.DataType]) -> pa.Table:
    from pyarrow import csv

    _check_utf8(path)
    try:
        table = csv.read_csv(
            path,
            read_options=csv.ReadOptions(block_size=16 << 20),
            parse_options=csv.ParseOptions(newlines_in_values=True),
            convert_options=csv.ConvertOptions(strings_can_be_null=True, column_types=types),
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


def _read_parquet(path: Path) -> pa.Table:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidFile(f"{path.name} is not a readable Parquet file: {message}", path=str(path)) from exc


def xlsx_sheets(path: Path | str) -> list[str]:
    """Sheet names of a workbook, for the sheet picker."""
    from openpyxl import load_workbook

    try:
        workbook = load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises zipfile/KeyError/ValueError variants
        raise InvalidFile(f"{Path(path).name} is not a readable XLSX workbook: {exc}", path=str(path)) from exc
    try:
        return list(workbook.sheetnames)
    finally:
        workbook.close()


def _read_xlsx(path: Path, sheet: str | None) -> pa.Table:
    import pandas as pd

    sheets = xlsx_sheets(path)
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
    check_column_names(_xlsx_header(path, sheet), source=path.name)
    # openpyxl with data_only returns cached formula results; formulas are never evaluated.
    frame = pd.read_excel(path, sheet_name=sheet, engine="openpyxl")
    if frame.columns.empty:
        raise InvalidFile(f"sheet {sheet!r} of {path.name} is empty", path=str(path))
    frame.columns = [str(c) for c in frame.columns]
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InvalidFile(f"sheet {sheet!r} of {path.name} mixes types in a column: {exc}", path=str(path)) from exc


def _xlsx_header(path: Path, sheet: str) -> list[str]:
    from openpyxl import load_workbook

    workbook = load_workbook(path, read_only=True, data_only=True)
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
        bad = sorted(set(name) & _FORBIDDEN_IN_NAMES)
        if bad:
            shown = ", ".join(repr(c) for c in bad)
            raise InvalidFile(f"column name {name!r} in {source} contains {shown}; use letters, digits, '_' or '-'")


def normalise_types(table: pa.Table) -> pa.Table:
    """Make Arrow types Spark and DuckDB both store the same way."""
    fields = []
    arrays = []
    for field, column in zip(table.schema, table.columns, strict=True):
        t = field.type
        if pa.types.is_timestamp(t):
            target = pa.timestamp("us", tz="UTC")
            if t.unit == "ns":
                # Spark keeps microseconds; drop pandas' nanoseconds rather than fail the upload.
                column = column.cast(pa.timestamp("us", tz=t.tz), safe=False)
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
        fields.append(pa.field(field.name, t))
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
