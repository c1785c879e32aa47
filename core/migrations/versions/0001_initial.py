"""Initial catalog: projects, users, memberships, datasets, audit events.

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("id", sa.String(63), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("username", sa.String(63), nullable=False, unique=True),
        sa.Column("email", sa.String(320), nullable=True, unique=True),
        sa.Column("display_name", sa.String(200), nullable=True),
        sa.Column("password_hash", sa.String(200), nullable=True),
        sa.Column("site_admin", sa.Boolean, nullable=False),
        sa.Column("auth_source", sa.String(16), nullable=False),
        sa.Column("disabled", sa.Boolean, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("last_login_at", TS, nullable=True),
    )
    op.create_table(
        "memberships",
        sa.Column("project_id", sa.String(63), sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "datasets",
        sa.Column("project_id", sa.String(63), sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("dataset_id", sa.String(63), primary_key=True),
        sa.Column("key_column", sa.String(200), nullable=True),
        sa.Column("delta_version", sa.Integer, nullable=True),
        sa.Column("last_commit_id", sa.String(64), nullable=True),
        sa.Column("last_commit_at", TS, nullable=True),
        sa.Column("row_count", sa.Integer, nullable=True),
        sa.Column("created_by", sa.String(63), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("ts", TS, nullable=False),
        sa.Column("actor", sa.String(63), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("project_id", sa.String(63), nullable=True),
        sa.Column("dataset_id", sa.String(63), nullable=True),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
    )
    op.create_index("ix_audit_events_ts", "audit_events", ["ts"])
    op.create_index("ix_audit_events_name", "audit_events", ["name"])
    op.create_index("ix_audit_events_project_id", "audit_events", ["project_id"])


def downgrade() -> None:
    op.drop_table("audit_events")
    op.drop_table("datasets")
    op.drop_table("memberships")
    op.drop_table("users")
    op.drop_table("projects")
