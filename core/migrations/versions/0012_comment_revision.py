"""A comment records the revision of its change request it was made on.

* ``cr_comments`` gains ``revision``: a cell comment shows beside its cell only in that
  revision's diff (the thread still lists it, "on revision N").
* Existing comments get the newest revision staged before them (1 if none). Comments are
  append-only (0011): the backfill lifts that guard for its one UPDATE and puts it back.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_BACKFILL = (
    "UPDATE cr_comments SET revision = COALESCE((SELECT max(r.revision) FROM cr_revisions r "
    "WHERE r.cr_id = cr_comments.cr_id AND r.staged_at <= cr_comments.ts), 1)"
)
_SQLITE_GUARDS = [
    f"CREATE TRIGGER cr_comments_no_{verb.lower()} BEFORE {verb} ON cr_comments "
    "BEGIN SELECT RAISE(ABORT, 'comments are append-only'); END"
    for verb in ("UPDATE", "DELETE")
]


def upgrade() -> None:
    # A plain ADD COLUMN (not a batch copy of the table), so SQLite keeps the table's triggers.
    op.add_column("cr_comments", sa.Column("revision", sa.Integer, nullable=True))
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS cr_comments_no_update")
        op.execute(_BACKFILL)
        op.execute(_SQLITE_GUARDS[0])
    elif dialect == "postgresql":
        op.execute("ALTER TABLE cr_comments DISABLE TRIGGER cr_comments_append_only")
        op.execute(_BACKFILL)
        op.execute("ALTER TABLE cr_comments ENABLE TRIGGER cr_comments_append_only")
    else:
        op.execute(_BACKFILL)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        # SQLite drops a column by copying the table, which loses its triggers: put them back.
        op.execute("DROP TRIGGER IF EXISTS cr_comments_no_update")
        op.execute("DROP TRIGGER IF EXISTS cr_comments_no_delete")
        with op.batch_alter_table("cr_comments") as batch:
            batch.drop_column("revision")
        for guard in _SQLITE_GUARDS:
            op.execute(guard)
    else:
        op.drop_column("cr_comments", "revision")
