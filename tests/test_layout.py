"""The storage contract: id validation and every path of a dataset's folder layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import InvalidInput
from core.layout import (
    AUDIT_SUBDIRS,
    DATASET_SUBDIRS,
    DatasetLayout,
    dataset_layout,
    new_id,
    project_root,
    validate_id,
)

BAD_IDS = [
    pytest.param("..", id="dotdot"),
    pytest.param(".", id="dot"),
    pytest.param("/", id="slash"),
    pytest.param("a/b", id="nested"),
    pytest.param("../etc", id="climb"),
    pytest.param("a\\b", id="backslash"),
    pytest.param("", id="empty"),
    pytest.param("A", id="upper-letter"),
    pytest.param("Demo", id="upper-case"),
    pytest.param("d\u0435mo", id="cyrillic-e"),
    pytest.param("\uff44\uff45\uff4d\uff4f", id="full-width"),
    pytest.param("caf\u00e9", id="accented"),
    pytest.param("abc\n", id="trailing-newline"),
    pytest.param("\nabc", id="leading-newline"),
    pytest.param("a" * 64, id="64-chars"),
    pytest.param("-abc", id="leading-dash"),
    pytest.param("_abc", id="leading-underscore"),
    pytest.param("a b", id="space"),
    pytest.param("a.b", id="dot-inside"),
    pytest.param("a\x00b", id="nul"),
    pytest.param(" abc", id="leading-space"),
]

GOOD_IDS = ["a", "0", "demo", "customers-2024", "a_b-c", "9lives", "a" * 63, "x" + "-" * 62]


@pytest.mark.parametrize("value", BAD_IDS)
def test_bad_ids_are_refused(value: str) -> None:
    with pytest.raises(InvalidInput, match="project id") as info:
        validate_id(value, kind="project id")
    assert info.value.field == "project id"


@pytest.mark.parametrize("value", [None, 42, b"demo"])
def test_non_string_ids_are_refused(value: object) -> None:
    with pytest.raises(InvalidInput, match="dataset id must not be empty"):
        validate_id(value, kind="dataset id")


def test_invalid_id_message_says_what_is_allowed() -> None:
    with pytest.raises(InvalidInput, match=r"invalid dataset id 'Sales': use 1-63 lowercase ASCII letters"):
        validate_id("Sales", kind="dataset id")


@pytest.mark.parametrize("value", GOOD_IDS)
def test_good_ids_pass_unchanged(value: str) -> None:
    assert validate_id(value) == value


def test_new_id_is_a_valid_unique_id() -> None:
    ids = {new_id("cr") for _ in range(50)}
    assert len(ids) == 50
    for value in ids:
        assert value.startswith("cr_")
        assert validate_id(value) == value


def test_every_path_of_the_spec(tmp_path: Path) -> None:
    layout = dataset_layout(tmp_path, "demo", "customers")
    root = tmp_path / "projects" / "demo" / "datasets" / "customers"
    assert layout == DatasetLayout(root=root, project_id="demo", dataset_id="customers")
    assert project_root(tmp_path, "demo") == tmp_path / "projects" / "demo"
    assert layout.main == root / "main"
    assert layout.staging_root == root / "staging"
    assert layout.staging("cr_1") == root / "staging" / "cr_1"
    assert layout.live_edit_root == root / "live_edit"
    assert layout.session_dir("s1") == root / "live_edit" / "s1"
    assert layout.live_edit("s1") == root / "live_edit" / "s1" / "edits.delta"
    assert layout.session_metadata("s1") == root / "live_edit" / "s1" / "metadata.json"
    assert layout.imports_root == root / "imports"
    assert layout.upload("up_1") == root / "imports" / "up_1"
    assert layout.audit == root / "audit"
    assert layout.validation_run("run_1") == root / "audit" / "validation_runs" / "run_1"
    assert layout.maintenance_reports() == root / "audit" / "maintenance"


def test_resolving_paths_creates_nothing(tmp_path: Path) -> None:
    layout = dataset_layout(tmp_path / "data", "demo", "customers")
    layout.staging("cr_1")
    layout.live_edit("s1")
    layout.upload("up_1")
    assert not (tmp_path / "data").exists()
    assert not layout.exists()
    assert not layout.has_main_table()


def test_create_makes_the_whole_tree_and_is_idempotent(tmp_path: Path) -> None:
    layout = dataset_layout(tmp_path, "demo", "customers")
    layout.create()
    expected = {"main", "staging", "live_edit", "imports", "audit"}
    assert set(DATASET_SUBDIRS) == expected
    assert {p.name for p in layout.root.iterdir()} == expected
    assert {p.name for p in layout.audit.iterdir()} == set(AUDIT_SUBDIRS)
    assert set(AUDIT_SUBDIRS) == {"validation_runs", "snapshots", "history", "maintenance"}
    assert layout.exists()
    assert not layout.has_main_table()

    marker = layout.main / "_delta_log"
    marker.mkdir()
    (marker / "00000000000000000000.json").write_text("{}")
    layout.create()  # again: nothing is lost, nothing is added
    assert {p.name for p in layout.root.iterdir()} == expected
    assert (marker / "00000000000000000000.json").read_text() == "{}"
    assert layout.has_main_table()


@pytest.mark.parametrize(
    ("project_id", "dataset_id"),
    [("..", "customers"), ("demo", ".."), ("demo", "a/b"), ("Demo", "customers"), ("demo", "abc\n"), ("", "x")],
)
def test_bad_ids_create_nothing_on_disk(tmp_path: Path, project_id: str, dataset_id: str) -> None:
    data_root = tmp_path / "data"
    with pytest.raises(InvalidInput):
        dataset_layout(data_root, project_id, dataset_id).create()
    assert not data_root.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "resolve",
    [
        pytest.param(lambda layout: layout.staging(".."), id="staging"),
        pytest.param(lambda layout: layout.session_dir("../../x"), id="session"),
        pytest.param(lambda layout: layout.live_edit("S1"), id="live-edit"),
        pytest.param(lambda layout: layout.session_metadata(""), id="metadata"),
        pytest.param(lambda layout: layout.upload("a/b"), id="upload"),
        pytest.param(lambda layout: layout.validation_run("run\n"), id="validation-run"),
    ],
)
def test_sub_ids_are_validated_too(tmp_path: Path, resolve) -> None:  # type: ignore[no-untyped-def]
    layout = dataset_layout(tmp_path / "data", "demo", "customers")
    with pytest.raises(InvalidInput, match="id"):
        resolve(layout)
    assert not (tmp_path / "data").exists()
