"""The SQLAlchemy catalog: Alembic migrations, idempotent upgrades, append-only audit, UTC timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, func, inspect, select, text
from sqlalchemy.exc import DBAPIError

from core import audit
from core.catalog import (
    MIGRATIONS_DIR,
    AuditEventRow,
    Base,
    Catalog,
    ProjectRow,
    open_catalog,
    reset_catalogs,
)
from core.errors import EngineError

TABLES = {
    "projects", "users", "memberships", "datasets", "audit_events", "change_requests", "cr_comments",
    "web_sessions", "sign_in_failures",
    "webhooks", "notify_outbox", "notify_inbox",
    "cr_revisions",
    "api_tokens", "api_idempotency_keys", "api_operations",
    "presence",
}  # fmt: skip


def _head_revision() -> str:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(cfg).get_current_head()
    assert head is not None
    return head


def _stored_revisions(catalog: Catalog) -> list[str]:
    with catalog.engine.connect() as con:
        return [r[0] for r in con.execute(text("SELECT version_num FROM alembic_version"))]


def test_migrations_create_every_table(catalog: Catalog) -> None:
    inspector = inspect(catalog.engine)
    assert set(inspector.get_table_names()) == TABLES | {"alembic_version"}
    assert _stored_revisions(catalog) == [_head_revision()]
    indexed = {tuple(ix["column_names"]) for ix in inspector.get_indexes("audit_events")}
    assert {("ts",), ("name",), ("project_id",)} <= indexed


@pytest.mark.parametrize("table", sorted(TABLES))
def test_migrated_columns_match_the_orm_models(catalog: Catalog, table: str) -> None:
    """The migration and the ORM must describe the same schema, or queries fail at run time."""
    inspector = inspect(catalog.engine)
    migrated = {c["name"]: c for c in inspector.get_columns(table)}
    model = Base.metadata.tables[table]
    assert set(migrated) == {c.name for c in model.columns}
    for column in model.columns:
        assert migrated[column.name]["nullable"] == column.nullable, column.name
    assert set(inspector.get_pk_constraint(table)["constrained_columns"]) == {c.name for c in model.primary_key}


def test_opening_twice_is_an_idempotent_upgrade(catalog: Catalog, tmp_path: Path) -> None:
    assert open_catalog() is catalog  # one Catalog per URL and process
    with catalog.session() as s:
        s.add(ProjectRow(id="demo", name="Demo"))

    reset_catalogs()  # as if the process restarted
    again = open_catalog()
    assert again is not catalog
    again.upgrade()  # and an explicit second upgrade changes nothing either
    assert _stored_revisions(again) == [_head_revision()]
    with again.session() as s:
        assert s.scalar(select(func.count()).select_from(ProjectRow)) == 1
        assert s.get(ProjectRow, "demo").name == "Demo"


def test_session_rolls_back_on_error(catalog: Catalog) -> None:
    with pytest.raises(RuntimeError, match="boom"), catalog.session() as s:
        s.add(ProjectRow(id="demo", name="Demo"))
        s.flush()
        raise RuntimeError("boom")
    with catalog.session() as s:
        assert s.get(ProjectRow, "demo") is None


@pytest.mark.parametrize(
    ("url", "shown", "hidden"),
    [
        ("nosuchdialect://host/db", "nosuchdialect://host/db", None),
        ("postgresql+psycopg://oreo:s3cret-pw@127.0.0.1:1/oreo", "postgresql+psycopg://***@127.0.0.1:1/oreo", "s3cret"),
    ],
)
def test_unusable_catalog_url_is_an_engine_error(url: str, shown: str, hidden: str | None) -> None:
    with pytest.raises(EngineError, match="could not open the catalog") as info:
        open_catalog(url)
    assert shown in str(info.value)
    if hidden is not None:
        assert hidden not in str(info.value)


def test_unwritable_sqlite_folder_is_an_engine_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(EngineError, match="could not open the catalog"):
        open_catalog(f"sqlite:///{blocker / 'catalog.db'}")


def _one_event(catalog: Catalog) -> int:
    with catalog.session() as s:
        audit.record(s, audit.ProjectCreated(actor="alice", project_id="demo", project_name="Demo"))
    with catalog.session() as s:
        return s.scalars(select(AuditEventRow.id)).one()


def test_audit_events_cannot_be_updated(catalog: Catalog) -> None:
    event_id = _one_event(catalog)
    with pytest.raises(EngineError, match="append-only"), catalog.session() as s:
        row = s.get(AuditEventRow, event_id)
        row.actor = "mallory"
        s.flush()
    [stored] = audit.list_events(catalog)
    assert stored.actor == "alice"


def test_audit_events_cannot_be_deleted(catalog: Catalog) -> None:
    event_id = _one_event(catalog)
    with pytest.raises(EngineError, match="append-only"), catalog.session() as s:
        s.delete(s.get(AuditEventRow, event_id))
        s.flush()
    assert [e.id for e in audit.list_events(catalog)] == [event_id]


@pytest.mark.parametrize(
    "statement",
    ["UPDATE audit_events SET actor = 'mallory'", "DELETE FROM audit_events"],
)
def test_audit_events_are_append_only_in_the_database_too(catalog: Catalog, statement: str) -> None:
    """Bulk SQL bypasses the ORM guard; the database trigger still refuses it."""
    from sqlalchemy import text
    from sqlalchemy.exc import DatabaseError

    event_id = _one_event(catalog)
    with pytest.raises(DatabaseError, match="append-only"), catalog.engine.begin() as conn:
        conn.execute(text(statement))
    assert [(e.id, e.actor) for e in audit.list_events(catalog)] == [(event_id, "alice")]


def test_audit_events_are_stored_with_name_target_and_details(catalog: Catalog) -> None:
    with catalog.session() as s:
        audit.record(s, audit.ProjectCreated(actor="alice", project_id="demo", project_name="Demo"))
        audit.record(s, audit.MemberAdded(actor="alice", project_id="demo", username="bob", role="editor"))
        audit.record(s, audit.UserCreated(actor="system", username="carol"))
    events = audit.list_events(catalog)
    assert [e.name for e in events] == ["user_created", "member_added", "project_created"]
    assert events[0].target == "user:carol"
    assert events[1].target == "demo"
    assert events[1].details == {"username": "bob", "role": "editor", "source": "manual"}
    assert [e.name for e in audit.list_events(catalog, project_id="demo")] == ["member_added", "project_created"]
    assert [e.actor for e in audit.list_events(catalog, name="user_created")] == ["system"]
    assert len(audit.list_events(catalog, limit=1)) == 1


def test_timestamps_come_back_timezone_aware(catalog: Catalog) -> None:
    before = datetime.now(UTC)
    with catalog.session() as s:
        s.add(ProjectRow(id="auto", name="default timestamp"))
        s.add(ProjectRow(id="naive", name="naive", created_at=datetime(2024, 1, 2, 3, 4, 5)))
        s.add(
            ProjectRow(
                id="paris", name="+02:00", created_at=datetime(2024, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
            )
        )
        audit.record(s, audit.ProjectCreated(actor="alice", project_id="auto"))
    reset_catalogs()  # read through a fresh engine, so nothing comes from the identity map
    fresh = open_catalog()
    with fresh.session() as s:
        stamps = {row.id: row.created_at for row in s.scalars(select(ProjectRow))}
    for value in stamps.values():
        assert value.tzinfo is not None
        assert value.utcoffset() == timedelta(0)
    assert stamps["naive"] == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert stamps["paris"] == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert before - timedelta(seconds=1) <= stamps["auto"] <= datetime.now(UTC) + timedelta(seconds=1)
    [event] = audit.list_events(fresh)
    assert event.ts.tzinfo is not None and event.ts.utcoffset() == timedelta(0)


# ---------------------------------------------------------------- migration 0012: comments gain their revision


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
