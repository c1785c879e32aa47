"""A change request keeps the summary of each bulk change it holds (core.bulk).

``change_requests`` gains ``bulk_changes``: a JSON list, one entry per bulk change of the
current revision (its id, column, operation, conditions, base version and counts, and the
summary line), written when the request is staged or revised. The Review page, ``oreo cr
show`` and the API read it from here, so the summaries outlive the session (merged, rejected
or withdrawn requests keep them). Requests staged before this migration have NULL: none.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("change_requests") as batch:
        batch.add_column(sa.Column("bulk_changes", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("change_requests") as batch:
        batch.drop_column("bulk_changes")
