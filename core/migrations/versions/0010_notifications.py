"""Notifications: project webhooks, the outbox the sender drains, and each user's inbox.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(63), primary_key=True),
        sa.Column("project_id", sa.String(63), sa.ForeignKey("projects.id", ondelete="CASCADE"), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("secret", sa.Text, nullable=False),
        sa.Column("created_by", sa.String(63), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("failing", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("last_error_at", TS, nullable=True),
        sa.Column("last_success_at", TS, nullable=True),
    )
    op.create_index("ix_webhooks_project_id", "webhooks", ["project_id"])
    op.create_table(
        "notify_outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("project_id", sa.String(63), nullable=True),
        sa.Column("dataset_id", sa.String(63), nullable=True),
        sa.Column("cr_id", sa.String(63), nullable=True),
        sa.Column("actor", sa.String(63), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("channel", sa.String(16), nullable=False),
        sa.Column("target", sa.String(320), nullable=False),
        sa.Column("recipient", sa.String(63), nullable=True),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", TS, nullable=False),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("sent_at", TS, nullable=True),
        sa.Column("dedup_key", sa.String(200), nullable=True),
    )
    op.create_index("ix_notify_outbox_state", "notify_outbox", ["state"])
    op.create_index("ix_notify_outbox_next_attempt_at", "notify_outbox", ["next_attempt_at"])
    op.create_index("ix_notify_outbox_dedup_key", "notify_outbox", ["dedup_key"])
    op.create_table(
        "notify_inbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("username", sa.String(63), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("project_id", sa.String(63), nullable=True),
        sa.Column("dataset_id", sa.String(63), nullable=True),
        sa.Column("cr_id", sa.String(63), nullable=True),
        sa.Column("actor", sa.String(63), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("read_at", TS, nullable=True),
        sa.Column("dedup_key", sa.String(200), nullable=True),
    )
    op.create_index("ix_notify_inbox_username", "notify_inbox", ["username"])
    op.create_index("ix_notify_inbox_dedup_key", "notify_inbox", ["dedup_key"])


def downgrade() -> None:
    op.drop_index("ix_notify_inbox_dedup_key", table_name="notify_inbox")
    op.drop_index("ix_notify_inbox_username", table_name="notify_inbox")
    op.drop_table("notify_inbox")
    op.drop_index("ix_notify_outbox_dedup_key", table_name="notify_outbox")
    op.drop_index("ix_notify_outbox_next_attempt_at", table_name="notify_outbox")
    op.drop_index("ix_notify_outbox_state", table_name="notify_outbox")
    op.drop_table("notify_outbox")
    op.drop_index("ix_webhooks_project_id", table_name="webhooks")
    op.drop_table("webhooks")
