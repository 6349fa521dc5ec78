"""Schema migrations (Alembic scripts in migrations/), applied by every process that opens the store."""
from __future__ import annotations
from pathlib import Path
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, text

SCRIPTS = Path(__file__).parent / "migrations"
PG_LOCK = 0x74756E65  # advisory lock id: API processes that start together migrate one at a time


def alembic_config(conn: Connection) -> Config:
  cfg = Config()
  cfg.set_main_option("script_location", str(SCRIPTS))
  cfg.attributes["connection"] = conn
  return cfg

def upgrade(engine: Engine) -> None:
  """Bring the schema to the newest revision, in one transaction (BEGIN IMMEDIATE on SQLite, an advisory lock on PostgreSQL)."""
  with engine.execution_options(write=True).begin() as conn:
    if conn.dialect.name == "postgresql": conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_LOCK})
    command.upgrade(alembic_config(conn), "head")
