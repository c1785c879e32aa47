"""Change requests and their comments.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "change_requests",
        sa.Column("id", sa.String(63), primary_key=True),
        sa.Column("project_id", sa.String(63), nullable=False),
        sa.Column("dataset_id", sa.String(63), nullable=False),
        sa.Column("author", sa.String(63), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("base_version", sa.Integer, nullable=False),
        sa.Column("session_id", sa.String(63), nullable=True),
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("cells", sa.Integer, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("closed_at", TS, nullable=True),
        sa.Column("closed_by", sa.String(63), nullable=True),
        sa.Column("close_reason", sa.Text, nullable=True),
        sa.Column("merged_version", sa.Integer, nullable=True),
        sa.Column("validation_run_id", sa.String(63), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id", "dataset_id"], ["datasets.project_id", "datasets.dataset_id"], ondelete="CASCADE"
        ),
    )
    op.create_index("ix_change_requests_state", "change_requests", ["state"])
    op.create_index("ix_change_requests_dataset", "change_requests", ["project_id", "dataset_id"])
    op.create_table(
        "cr_comments",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cr_id", sa.String(63), sa.ForeignKey("change_requests.id", ondelete="CASCADE"), nullable=False),
        sa.Column("author", sa.String(63), nullable=False),
        sa.Column("ts", TS, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_cr_comments_cr_id", "cr_comments", ["cr_id"])


def downgrade() -> None:
    op.drop_table("cr_comments")
    op.drop_table("change_requests")
