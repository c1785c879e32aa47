"""Change request threads and revisions: cell comments, append-only comments, ``cr_revisions``.

* ``cr_comments`` gains ``row_id`` and ``column_name`` (a comment on one cell of the diff)
  and becomes append-only in the database itself, as ``audit_events`` is (0002).
* ``change_requests`` gains ``revision`` (1 at submit, +1 per ``revise``).
* ``cr_revisions`` records each revision: when it was staged, its counts, its validation
  run and its base version. Existing requests get their revision 1 from their own row.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cr_comments") as batch:
        batch.add_column(sa.Column("row_id", sa.String(200), nullable=True))
        batch.add_column(sa.Column("column_name", sa.String(200), nullable=True))
    with op.batch_alter_table("change_requests") as batch:
        batch.add_column(sa.Column("revision", sa.Integer, nullable=False, server_default="1"))
    op.create_table(
        "cr_revisions",
        sa.Column("cr_id", sa.String(63), sa.ForeignKey("change_requests.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("revision", sa.Integer, primary_key=True),
        sa.Column("staged_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("cells", sa.Integer, nullable=False),
        sa.Column("validation_run_id", sa.String(63), nullable=True),
        sa.Column("validation_status", sa.String(16), nullable=True),
        sa.Column("base_version", sa.Integer, nullable=False),
    )
    op.execute(
        "INSERT INTO cr_revisions (cr_id, revision, staged_at, rows, cells, validation_run_id, validation_status, "
        "base_version) SELECT id, 1, created_at, rows, cells, validation_run_id, validation_status, base_version "
        "FROM change_requests"
    )
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER cr_comments_no_{verb.lower()} BEFORE {verb} ON cr_comments "
                "BEGIN SELECT RAISE(ABORT, 'comments are append-only'); END"
            )
    elif dialect == "postgresql":
        op.execute(
            "CREATE FUNCTION oreo_comments_append_only() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION 'comments are append-only'; END; $$ LANGUAGE plpgsql"
        )
        op.execute(
            "CREATE TRIGGER cr_comments_append_only BEFORE UPDATE OR DELETE ON cr_comments "
            "FOR EACH ROW EXECUTE FUNCTION oreo_comments_append_only()"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS cr_comments_no_update")
        op.execute("DROP TRIGGER IF EXISTS cr_comments_no_delete")
    elif dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS cr_comments_append_only ON cr_comments")
        op.execute("DROP FUNCTION IF EXISTS oreo_comments_append_only()")
    op.drop_table("cr_revisions")
    with op.batch_alter_table("change_requests") as batch:
        batch.drop_column("revision")
    with op.batch_alter_table("cr_comments") as batch:
        batch.drop_column("column_name")
        batch.drop_column("row_id")
