"""Change requests made by imports: their kind, upload and schema changes.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("change_requests") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="edit"))
        batch.add_column(sa.Column("upload_id", sa.String(63), nullable=True))
        batch.add_column(sa.Column("schema_changes", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("change_requests") as batch:
        batch.drop_column("schema_changes")
        batch.drop_column("upload_id")
        batch.drop_column("kind")
