"""Browser sign-in sessions and the failed sign-in counters that throttle guessing.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("last_seen_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
        sa.Column("client", sa.String(200), nullable=False),
    )
    op.create_index("ix_web_sessions_user_id", "web_sessions", ["user_id"])
    op.create_table(
        "sign_in_failures",
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("last_failure_at", TS, nullable=False),
        sa.Column("blocked_until", TS, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("sign_in_failures")
    op.drop_index("ix_web_sessions_user_id", table_name="web_sessions")
    op.drop_table("web_sessions")
