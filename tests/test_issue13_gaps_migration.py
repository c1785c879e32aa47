"""Migration 0012: comments gain the revision they were made on (backfilled), and stay append-only."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from core.catalog import MIGRATIONS_DIR


def _config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url)
    return cfg


def test_existing_comments_get_the_revision_staged_before_them_and_stay_append_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(_config(url), "0011")
    engine = create_engine(url)
    with engine.begin() as con:
        con.execute(text("INSERT INTO projects (id, name, created_at) VALUES ('p', 'P', '2026-01-01 00:00:00.000000')"))
        con.execute(
            text(
                "INSERT INTO datasets (project_id, dataset_id, created_by, created_at) "
                "VALUES ('p', 'd', 'ada', '2026-01-01 00:00:00.000000')"
            )
        )
        con.execute(
            text(
                "INSERT INTO change_requests (id, project_id, dataset_id, author, title, description, state, "
                "base_version, rows, cells, created_at, updated_at, kind, revision) VALUES ('cr_1', 'p', 'd', 'ed', "
                "'t', '', 'open', 0, 1, 1, '2026-01-01 10:00:00.000000', '2026-01-01 12:00:00.000000', 'edit', 2)"
            )
        )
        # 0011 already gave cr_1 its revision 1 (from created_at); revision 2 was staged at noon.
        con.execute(text("DELETE FROM cr_revisions"))
        for number, at in ((1, "2026-01-01 10:00:00.000000"), (2, "2026-01-01 12:00:00.000000")):
            con.execute(
                text(
                    "INSERT INTO cr_revisions (cr_id, revision, staged_at, rows, cells, base_version) "
                    "VALUES ('cr_1', :n, :at, 1, 1, 0)"
                ),
                {"n": number, "at": at},
            )
        for body, at in (
            ("early", "2026-01-01 09:00:00.000000"),  # before any revision was recorded: revision 1
            ("on one", "2026-01-01 11:00:00.000000"),
            ("on two", "2026-01-01 13:00:00.000000"),
        ):
            con.execute(
                text("INSERT INTO cr_comments (cr_id, author, ts, body) VALUES ('cr_1', 'al', :at, :body)"),
                {"at": at, "body": body},
            )
    engine.dispose()

    command.upgrade(_config(url), "head")

    engine = create_engine(url)
    with engine.connect() as con:
        rows = con.execute(text("SELECT body, revision FROM cr_comments ORDER BY id")).all()
        assert [tuple(r) for r in rows] == [("early", 1), ("on one", 1), ("on two", 2)]
        for statement in ("UPDATE cr_comments SET body = 'edited'", "DELETE FROM cr_comments"):
            with pytest.raises(DBAPIError, match="append-only"):
                con.execute(text(statement))
            con.rollback()
    engine.dispose()

    # Down and up again: the guards survive SQLite's table copy on the way down.
    command.downgrade(_config(url), "0011")
    engine = create_engine(url)
    with engine.connect() as con:
        assert "revision" not in {r[1] for r in con.execute(text("PRAGMA table_info(cr_comments)"))}
        with pytest.raises(DBAPIError, match="append-only"):
            con.execute(text("DELETE FROM cr_comments"))
    engine.dispose()
