"""Alembic's entry point: migrate on the connection `upgrade` hands over, inside its transaction."""
from alembic import context
from tunesvc.store.models import Base

context.configure(connection=context.config.attributes["connection"], target_metadata=Base.metadata)
with context.begin_transaction(): context.run_migrations()
