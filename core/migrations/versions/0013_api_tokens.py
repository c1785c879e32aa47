"""The HTTP API's tables: personal access tokens, idempotency keys and async operations.

* ``api_tokens``: a token ``oreo_<id>_<secret>`` is looked up by id; only the secret's
  argon2 hash is kept. ``project_id`` and ``role`` narrow the user's roles.
* ``api_idempotency_keys``: the first response to a POST per (token, key); the primary
  key makes a concurrent retry fail to insert, so it never acts twice.
* ``api_operations``: ``Prefer: respond-async`` calls, kept in the catalog so any replica
  can answer a poll.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("secret_hash", sa.String(200), nullable=False),
        sa.Column("project_id", sa.String(63), nullable=True),
        sa.Column("role", sa.String(16), nullable=True),
        sa.Column("created_by", sa.String(63), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_tokens_user_id", "api_tokens", ["user_id"])
    op.create_table(
        "api_idempotency_keys",
        sa.Column("principal", sa.String(63), primary_key=True),
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.Integer, nullable=True),
        sa.Column("body", sa.Text, nullable=True),
        sa.Column("headers", sa.Text, nullable=True),
    )
    op.create_table(
        "api_operations",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("token_id", sa.String(32), nullable=False),
        sa.Column("username", sa.String(63), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.Integer, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("api_operations")
    op.drop_table("api_idempotency_keys")
    op.drop_index("ix_api_tokens_user_id", table_name="api_tokens")
    op.drop_table("api_tokens")
