"""The status of a change request's latest validation run.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("change_requests") as batch:
        batch.add_column(sa.Column("validation_status", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("change_requests") as batch:
        batch.drop_column("validation_status")
