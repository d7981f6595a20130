"""Alembic's environment: db.upgrade() hands the open connection in; nothing here reads a URL or a file."""

from alembic import context

from agent.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
