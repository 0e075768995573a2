"""Alembic environment: runs on the connection handed over by ``ensure_schema``."""

from alembic import context
from sqlalchemy import text

from services.common.db.models import Base

connection = context.config.attributes["connection"]
if connection.dialect.name == "postgresql":
    # Several workers start at once; one migrates, the others wait for it.
    connection.execute(text("SELECT pg_advisory_xact_lock(74657201)"))
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
