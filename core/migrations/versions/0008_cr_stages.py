"""How long each stage of a change request's submit and approval took (JSON list).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("change_requests") as batch:
        batch.add_column(sa.Column("stages", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("change_requests") as batch:
        batch.drop_column("stages")
