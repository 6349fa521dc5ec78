"""A job refused as "device busy" waits before it may be claimed again (not_before), and such refusals are counted (busy)
apart from failed attempts: a busy machine is no fault of the job's, but its retries are bounded too. A worker proves
who it is with the key its registration was given (its sha256 kept here), not by the id alone.

Revision ID: 0004_busy_keys
"""
import sqlalchemy as sa
from alembic import op

revision, down_revision = "0004_busy_keys", "0003_models"


def upgrade():
  op.add_column("jobs", sa.Column("not_before", sa.Double(), nullable=True))
  op.add_column("jobs", sa.Column("busy", sa.Integer(), nullable=False, server_default="0"))
  op.add_column("workers", sa.Column("key_hash", sa.String(64), nullable=True))  # workers registered before keys have none

def downgrade():
  with op.batch_alter_table("workers") as b: b.drop_column("key_hash")
  with op.batch_alter_table("jobs") as b:
    for name in ("busy", "not_before"): b.drop_column(name)
