"""Files that are not files: one check for dataset create, append, migrate parquet and uploads."""

from __future__ import annotations

import io
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import imports, ingest, migrate
from core.auth import get_user
from core.catalog import Catalog, ChangeRequestRow, DatasetRow, open_catalog
from core.config import get_settings
from core.datasets import layout_for
from core.errors import InvalidFile, InvalidInput
from core.projects import create_project
from tests.merge_support import fresh_copy, make_pristine, switch

GOOD_CSV = "id,name,qty,score\n901,new,1,1.5\n"

# A FIFO or a device must be refused without ever blocking on it; these time out otherwise.
PROMPT = pytest.mark.timeout(60)


def _folder(tmp: Path) -> Path:
    (tmp / "folder.csv").mkdir()
    return tmp / "folder.csv"


def _missing(tmp: Path) -> Path:
    return tmp / "missing.csv"


def _device(tmp: Path) -> Path:
    (tmp / "zero.csv").symlink_to("/dev/zero")
    return tmp / "zero.csv"


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "pipe.csv")
    return tmp / "pipe.csv"


def _socket(tmp: Path) -> Path:
    path = tmp / "sock.csv"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))  # the socket file stays after the socket is closed
    server.close()
    return path


def _loop(tmp: Path) -> Path:
    (tmp / "loop.csv").symlink_to(tmp / "loop.csv")
    return tmp / "loop.csv"


def _dangling(tmp: Path) -> Path:
    (tmp / "dangling.csv").symlink_to(tmp / "gone.csv")
    return tmp / "dangling.csv"


def _under_a_file(tmp: Path) -> Path:
    # As root, chmod does not stop a read; a path through a regular file is unreadable for anyone.
    (tmp / "plain.csv").write_text(GOOD_CSV)
    return tmp / "plain.csv" / "inner.csv"


NOT_FILES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("folder", _folder, r"folder\.csv is a folder, not a file"),
    ("missing", _missing, r"file not found: .*missing\.csv"),
    ("device", _device, r"zero\.csv is a device, not a regular file"),
    ("fifo", _fifo, r"pipe\.csv is a named pipe, not a regular file"),
    ("socket", _socket, r"sock\.csv is a socket, not a regular file"),
    ("symlink loop", _loop, r"loop\.csv is a symbolic link loop"),
    ("dangling symlink", _dangling, r"dangling\.csv is a broken symbolic link"),
    ("path through a file", _under_a_file, r"file not found: .*plain\.csv/inner\.csv"),
]
NOT_FILE_IDS = [case[0] for case in NOT_FILES]


@PROMPT
@pytest.mark.parametrize(("name", "make", "message"), NOT_FILES, ids=NOT_FILE_IDS)
def test_only_regular_files_are_read(tmp_path: Path, name: str, make: Callable[[Path], Path], message: str) -> None:
    path = make(tmp_path)

    with pytest.raises(InvalidFile, match=message):
        ingest.check_input_file(path, max_bytes=1 << 20)
    with pytest.raises(InvalidFile, match=message):
        ingest.read_table_file(path, max_bytes=1 << 20)


@PROMPT
def test_the_csv_header_of_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    with pytest.raises(InvalidFile, match="named pipe"):
        ingest.csv_header(_fifo(tmp_path))


def test_the_size_limit_is_checked_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.csv"
    big.write_text("id\n" + "1\n" * 600_000)  # 1.2 MB
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k))

    with pytest.raises(InvalidFile, match=r"big\.csv is 1\.1 MB, over the 1 MB upload limit"):
        ingest.read_table_file(big, max_bytes=1 << 20)

    assert str(big) not in opened


def test_an_input_larger_than_it_said_stops_at_the_limit(tmp_path: Path) -> None:
    """/proc files say they are 0 bytes long and then give more: the read stops at the limit."""
    status = tmp_path / "status.csv"
    status.symlink_to("/proc/self/status")
    assert status.stat().st_size == 0 and len(status.read_bytes()) > 100

    with pytest.raises(InvalidFile, match=r"status\.csv grew past the 100 byte limit while it was read"):
        ingest.read_table_file(status, max_bytes=100)


def test_a_regular_file_through_a_symlink_is_read(tmp_path: Path) -> None:
    (tmp_path / "real.csv").write_text(GOOD_CSV)
    (tmp_path / "link.csv").symlink_to(tmp_path / "real.csv")

    table = ingest.read_table_file(tmp_path / "link.csv", max_bytes=1 << 20)

    assert table.column("name").to_pylist() == ["new"]
    assert ingest.check_input_file(tmp_path / "link.csv", max_bytes=1 << 20) == len(GOOD_CSV)


# ---------------------------------------------------------------- Import page uploads


def test_an_upload_over_the_limit_is_refused_before_it_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OREO_MAX_UPLOAD_MB", "1")
    get_settings.cache_clear()
    body = io.BytesIO(b"id\n" + b"1\n" * 600_000)

    with (
        pytest.raises(InvalidFile, match=r"big\.csv is 1\.1 MB, over the 1 MB upload limit"),
        imports.saved_upload(body, "big.csv"),
    ):
        pytest.fail("an oversized upload must not be saved")


@pytest.mark.parametrize("name", ["..", ".", "", "../../etc/x.csv"])
def test_an_upload_name_cannot_leave_its_temporary_folder(name: str) -> None:
    with imports.saved_upload(io.BytesIO(GOOD_CSV.encode()), name) as path:
        assert path.parent.name.startswith("oreo-upload-")
        assert path.read_text() == GOOD_CSV


# ---------------------------------------------------------------- migrate parquet DIR


@pytest.fixture
def migrating(catalog: Catalog, tmp_path: Path) -> Path:
    create_project(catalog, "demo")
    folder = tmp_path / "parquet"
    folder.mkdir()
    pq.write_table(pa.table({"id": [1, 2], "name": ["a", "b"]}), folder / "part-0.parquet")
    return folder


def _migrate(catalog: Catalog, folder: Path) -> None:
    migrate.migrate_parquet(catalog, folder, "demo", "moved", dry_run=True)


def _nothing_migrated(catalog: Catalog) -> None:
    with catalog.session() as s:
        assert s.get(DatasetRow, ("demo", "moved")) is None
    assert not layout_for("demo", "moved").root.exists()


@PROMPT
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: (d / "loop.parquet").symlink_to(d / "loop.parquet"), r"loop\.parquet is a symbolic link loop"),
        (lambda d: (d / "gone.parquet").symlink_to(d / "nowhere"), r"gone\.parquet is a broken symbolic link"),
        (lambda d: os.mkfifo(d / "pipe.parquet"), r"pipe\.parquet is a named pipe"),
        (lambda d: (d / "zero.parquet").symlink_to("/dev/zero"), r"zero\.parquet is a device"),
    ],
    ids=["symlink loop", "dangling symlink", "fifo", "device"],
)
def test_migrate_refuses_what_is_not_a_readable_parquet_file(
    catalog: Catalog, migrating: Path, make: Callable[[Path], object], message: str
) -> None:
    make(migrating)

    with pytest.raises(InvalidFile, match=message):
        _migrate(catalog, migrating)

    _nothing_migrated(catalog)


def test_migrate_checks_the_size_limit_before_reading(
    catalog: Catalog, migrating: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_MAX_UPLOAD_MB", "1")
    get_settings.cache_clear()
    text = os.urandom(1 << 20).hex()
    noise = pa.array([text[i : i + 64] for i in range(0, len(text), 64)])
    pq.write_table(pa.table({"id": range(len(noise)), "name": noise}), migrating / "part-1.parquet")
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: pytest.fail("read before the size check"))

    with pytest.raises(InvalidInput, match=r"the Parquet files under parquet are .* MB, over the 1 MB dataset limit"):
        _migrate(catalog, migrating)

    _nothing_migrated(catalog)


# ---------------------------------------------------------------- the CLI: dataset create and append


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return make_pristine(tmp_path_factory.mktemp("files"))


@pytest.fixture
def with_dataset(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    switch(fresh_copy(pristine, tmp_path), monkeypatch)
    yield open_catalog()


@pytest.mark.spark
@pytest.mark.parametrize(("name", "make", "message"), NOT_FILES, ids=NOT_FILE_IDS)
def test_cli_append_and_create_refuse_what_is_not_a_file_with_one_error_line(
    with_dataset: Catalog,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    make: Callable[[Path], Path],
    message: str,
) -> None:
    from tests.test_cli import assert_one_error_line, run

    path = make(tmp_path)
    imports_before = sorted(p.name for p in layout_for("demo", "nums").imports_root.iterdir())

    appended = run(capsys, "--json", "append", "demo", "nums", "--file", str(path), "--as", "ed")
    created = run(capsys, "--json", "dataset", "create", "demo", "other", "--file", str(path))

    assert_one_error_line(appended, message)
    assert_one_error_line(created, message)
    assert sorted(p.name for p in layout_for("demo", "nums").imports_root.iterdir()) == imports_before
    assert not layout_for("demo", "other").root.exists()
    with with_dataset.session() as s:
        assert s.query(ChangeRequestRow).count() == 0
        assert s.get(DatasetRow, ("demo", "other")) is None
    assert get_user(with_dataset, "ed").username == "ed"


# ---------------------------------------------------------------- a file that changes after it was read


def _change_after_the_read(monkeypatch: pytest.MonkeyPatch, path: Path, body: bytes, *, mode: str) -> None:
    """Append ``body`` to ``path`` (mode "ab") or replace it ("wb") right after its bounded read."""
    real = ingest._check_utf8
    changed: list[bool] = []

    def check_then_change(data: bytes, at: Path) -> None:
        real(data, at)
        if not changed:
            changed.append(True)
            with path.open(mode) as fh:
                fh.write(body)

    monkeypatch.setattr(ingest, "_check_utf8", check_then_change)


@pytest.mark.spark
def test_an_upload_keeps_the_bytes_it_read_not_what_the_file_grew_to(
    with_dataset: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OREO_MAX_UPLOAD_MB", "1")
    get_settings.cache_clear()
    source = tmp_path / "more.csv"
    source.write_text(GOOD_CSV)
    _change_after_the_read(monkeypatch, source, b"902,grown,1,1.5\n" * 150_000, mode="ab")  # 2.4 MB

    upload = imports.store_upload(with_dataset, "demo", "nums", source, actor=get_user(with_dataset, "ed"))

    assert source.stat().st_size > 2 << 20
    assert (upload.folder / "raw.csv").read_bytes() == GOOD_CSV.encode()
    assert upload.rows == 1


@pytest.mark.spark
def test_a_created_dataset_keeps_the_bytes_it_read_not_what_the_file_grew_to(
    with_dataset: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.datasets import create_dataset

    monkeypatch.setenv("OREO_MAX_UPLOAD_MB", "1")
    get_settings.cache_clear()
    source = tmp_path / "other.csv"
    source.write_text(GOOD_CSV)
    _change_after_the_read(monkeypatch, source, b"902,grown,1,1.5\n" * 150_000, mode="ab")

    info = create_dataset(with_dataset, "demo", "other", source, key="id")

    kept = list(layout_for("demo", "other").imports_root.glob("*/raw.csv"))
    assert [p.read_bytes() for p in kept] == [GOOD_CSV.encode()]
    assert info.rows == 1


@pytest.mark.spark
def test_a_decimal_refusal_names_the_value_read_not_the_file_rewritten_since(
    with_dataset: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row and value a refused CSV decimal names come from the bytes read once, bounded."""
    monkeypatch.setenv("OREO_MAX_UPLOAD_MB", "1")
    get_settings.cache_clear()
    # As if the table's score column were DECIMAL(10,2) (the demo table's is DOUBLE).
    monkeypatch.setattr(imports, "_csv_types", lambda *args: {"score": pa.decimal128(10, 2)})
    source = tmp_path / "more.csv"
    source.write_text("id,name,qty,score\n901,new,1,1.5\n902,odd,1,1.234\n")
    rewrite = b"id,name,qty,score\n" + b"903,other,1,9.999\n" * 100_000  # 1.8 MB, over the limit
    _change_after_the_read(monkeypatch, source, rewrite, mode="wb")

    with pytest.raises(InvalidInput, match=r"more\.csv data row 2, column 'score': '1\.234' has more than 2 decimal"):
        imports.store_upload(with_dataset, "demo", "nums", source, actor=get_user(with_dataset, "ed"))

    assert source.stat().st_size > 1 << 20
