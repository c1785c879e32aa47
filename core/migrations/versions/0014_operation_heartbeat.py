"""An async operation's heartbeat, so a poll can tell a running operation from a lost one.

The API process running an operation writes ``heartbeat_at`` every few seconds; if that
process dies (kill -9, a crash, a redeploy), a poll on any replica sees the heartbeat go
stale and reports the operation failed instead of running forever.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_operations") as batch:
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_operations") as batch:
        batch.drop_column("heartbeat_at")
