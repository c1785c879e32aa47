"""The catalog on a real PostgreSQL server through a postgresql+psycopg:// URL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from argon2 import PasswordHasher
from sqlalchemy import inspect

from core import auth, projects
from core.audit import list_events
from core.catalog import Catalog, open_catalog, reset_catalogs
from core.config import get_settings
from core.errors import AlreadyExists, AuthenticationFailed


def test_migrations_accounts_roles_and_audit_on_postgres(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OREO_DATABASE_URL", postgres_url)
    get_settings.cache_clear()
    reset_catalogs()
    catalog = open_catalog()
    assert catalog.engine.dialect.name == "postgresql"
    tables = set(inspect(catalog.engine).get_table_names())
    assert {"projects", "users", "memberships", "datasets", "audit_events", "alembic_version"} <= tables

    projects.create_project(catalog, "pgproj", name="On Postgres")
    user, password = auth.create_user(catalog, "pguser", email="pg@example.com")
    auth.add_member(catalog, "pgproj", "pguser", "approver")
    assert auth.authenticate(catalog, "pguser", password) == user
    assert auth.role_in(catalog, user, "pgproj") == auth.Role.APPROVER
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(catalog, "pguser", "wrong-password")
    with pytest.raises(AlreadyExists):
        auth.create_user(catalog, "pguser")

    names = [e.name for e in list_events(catalog, limit=20)]
    assert names[:2] == ["sign_in_failed", "signed_in"]
    assert {"project_created", "user_created", "member_added"} <= set(names)
    assert all(e.ts.tzinfo is not None for e in list_events(catalog))

    from sqlalchemy import text
    from sqlalchemy.exc import DatabaseError

    with pytest.raises(DatabaseError, match="append-only"), catalog.engine.begin() as conn:
        conn.execute(text("DELETE FROM audit_events"))

    # A second open (another process start) finds the schema at head and changes nothing.
    reset_catalogs()
    again = open_catalog()
    assert [p.id for p in projects.list_projects(again, auth.SYSTEM)] == ["pgproj"]


def test_web_sessions_and_sign_in_throttling_on_postgres(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from core import web_sessions

    monkeypatch.setenv("OREO_DATABASE_URL", postgres_url)
    get_settings.cache_clear()
    reset_catalogs()
    catalog = open_catalog()
    assert {"web_sessions", "sign_in_failures"} <= set(inspect(catalog.engine).get_table_names())

    user, password = auth.create_user(catalog, "pgsessions")
    token = web_sessions.start_web_session(catalog, user, "password", client="10.1.2.3 · Chrome 150")
    resumed = web_sessions.resume_web_session(catalog, token)
    assert resumed is not None and resumed.user == user and resumed.expires_at.tzinfo is not None
    assert web_sessions.revoke_user_sessions(catalog, "pgsessions") == 1
    assert web_sessions.resume_web_session(catalog, token) is None

    for _ in range(5):
        with pytest.raises(AuthenticationFailed, match="invalid username or password"):
            auth.authenticate(catalog, "pgsessions", "wrong-password", client="10.9.9.9")
    with pytest.raises(AuthenticationFailed, match="too many failed sign-ins"):
        auth.authenticate(catalog, "pgsessions", password, client="10.9.9.8")


def test_concurrent_wrong_passwords_reach_the_hash_at_most_five_times_on_postgres(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count-then-check reservation holds under PostgreSQL's row locks too."""
    monkeypatch.setenv("OREO_DATABASE_URL", postgres_url)
    get_settings.cache_clear()
    reset_catalogs()
    catalog = open_catalog()
    auth.create_user(catalog, "pgrace", password="pgrace-password")
    checked: list[int] = []
    lock = threading.Lock()

    class CountingHasher(PasswordHasher):
        def verify(self, hash: str | bytes, password: str | bytes) -> bool:
            with lock:
                checked.append(1)
            return super().verify(hash, password)

    monkeypatch.setattr(auth, "_hasher", CountingHasher())
    start = threading.Barrier(12)

    def attempt(n: int) -> str:
        own = Catalog(postgres_url)
        try:
            start.wait(timeout=60)
            auth.authenticate(own, "pgrace", "wrong-password", client=f"10.7.0.{n}")
            return "signed in"
        except AuthenticationFailed as exc:
            return str(exc)
        finally:
            own.engine.dispose()

    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(attempt, range(12)))
    assert len(checked) == auth.THROTTLE_AFTER
    assert answers.count("invalid username or password") == auth.THROTTLE_AFTER
    assert sum(a.startswith("too many failed sign-ins") for a in answers) == 12 - auth.THROTTLE_AFTER
