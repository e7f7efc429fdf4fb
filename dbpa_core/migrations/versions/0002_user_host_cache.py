"""Who ran each run and where (user, host), and the sample cache in the database.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

from dbpa_core import db

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

NEW_COLUMNS = ("user_name", "host_name")


def upgrade() -> None:
    schema = db.schema_at(revision)
    for name in NEW_COLUMNS:
        op.add_column("runs", schema.tables["runs"].c[name]._copy())
    schema.tables["sample_cache"].create(op.get_bind())


def downgrade() -> None:
    db.schema_at(revision).tables["sample_cache"].drop(op.get_bind())
    with op.batch_alter_table("runs") as batch:
        for name in NEW_COLUMNS:
            batch.drop_column(name)
