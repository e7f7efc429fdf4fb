"""The run history as dbpa kept it in SQLite before Alembic: runs, their audits, tests and
arms, and the extras of every other kind of run.

Revision ID: 0001
Revises:
"""

from alembic import op

from dbpa_core import db

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    db.schema_at(revision).create_all(op.get_bind())


def downgrade() -> None:
    db.schema_at(revision).drop_all(op.get_bind())
