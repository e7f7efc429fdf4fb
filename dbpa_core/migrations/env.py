"""Alembic's entry point: dbpa runs the migrations on a connection it opened (inside its
own transaction), never from an alembic.ini."""

from alembic import context

from dbpa_core.db import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise SystemExit(
        "dbpa's migrations run from dbpa itself: open the history "
        "(e.g. `dbpa history upgrade`), not `alembic upgrade`."
    )
context.configure(
    connection=connection, target_metadata=metadata, render_as_batch=connection.dialect.name == "sqlite"
)
with context.begin_transaction():
    context.run_migrations()
