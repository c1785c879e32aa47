"""An Idempotency-Key's heartbeat, so a retry can tell a running first call from a lost one.

While the first call with a key runs, its API process refreshes ``heartbeat_at``; if that
process dies (kill -9, a crash, a redeploy) the key's answer is never stored, and a retry
that finds the heartbeat stale is told the first call was lost instead of "still running"
forever.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_idempotency_keys") as batch:
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_idempotency_keys") as batch:
        batch.drop_column("heartbeat_at")
