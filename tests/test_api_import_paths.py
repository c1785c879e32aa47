"""The API's server-path imports with OREO_IMPORT_FOLDERS unset (the default): refused for everyone, uploads only.

The refusal comes before any engine work, so the app runs in-process without its lifespan (no Spark starts).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from core import auth, projects, tokens
from core.catalog import Catalog, ChangeRequestRow


@pytest.mark.parametrize("site_admin", [True, False], ids=["site admin", "project admin"])
def test_without_import_folders_no_one_imports_by_server_path(
    catalog: Catalog, data_root: Path, tmp_path: Path, site_admin: bool
) -> None:
    projects.create_project(catalog, "p2")
    auth.create_user(catalog, "someone", password="not-a-common-password", site_admin=site_admin)
    auth.add_member(catalog, "p2", "someone", "admin")
    secret = tmp_path / "raw.csv"
    secret.write_text("email,name\nalice@example.com,Alice\n")
    client = TestClient(create_app())  # not entered: no lifespan, so no Spark
    answer = client.post(
        "/api/v1/projects/p2/datasets/secret/imports",
        data={"path": str(secret)},
        headers={"Authorization": f"Bearer {tokens.create_token(catalog, 'someone').secret}"},
    )
    assert answer.status_code == 403, answer.text
    message = answer.json()["error"]["message"]
    assert str(secret) in message and "alice" not in message.lower()
    assert ("OREO_IMPORT_FOLDERS" in message) is site_admin
    assert not data_root.exists()
    with catalog.session() as s:
        assert s.scalar(select(func.count()).select_from(ChangeRequestRow)) == 0
