"""A digest of each revision's staged content, so an approval can name the revision it reviewed.

``cr_revisions`` and ``change_requests`` gain ``digest``: a sha256 over the files of the
revision's staging table (``core.change_requests.staging_digest``), stored when the
revision is staged. An approval, a rejection or a request for changes may give the
revision and digest the approver saw; the core refuses when the request moved on.
Requests staged before this migration keep a NULL digest and are matched by revision
number alone.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cr_revisions") as batch:
        batch.add_column(sa.Column("digest", sa.String(64), nullable=True))
    with op.batch_alter_table("change_requests") as batch:
        batch.add_column(sa.Column("digest", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("change_requests") as batch:
        batch.drop_column("digest")
    with op.batch_alter_table("cr_revisions") as batch:
        batch.drop_column("digest")
