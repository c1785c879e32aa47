"""Presence: who has a Table or Review page open, shared by every app replica (core.presence).

One row per person and page, written by the page's heartbeat every few seconds and deleted
once it is older than the idle time (``OREO_PRESENCE_IDLE_S``) by the next heartbeat of
anyone. ``seen_at`` is indexed for that clean-up.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "presence",
        sa.Column("page", sa.String(140), primary_key=True),
        sa.Column("username", sa.String(63), primary_key=True),
        sa.Column("project_id", sa.String(63), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_presence_seen_at", "presence", ["seen_at"])


def downgrade() -> None:
    op.drop_index("ix_presence_seen_at", table_name="presence")
    op.drop_table("presence")
