"""Results are served only once proven: the fingerprint's registered LinearizerOptions, confirm jobs, a result's standing,
the worker whose lapsed lease alone may still report a queued job.

Revision ID: 0002
"""
import sqlalchemy as sa
from alembic import op

revision, down_revision = "0002", "0001"
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade():
  op.add_column("fingerprints", sa.Column("options", sa.JSON(), nullable=True))
  for name in ("confirms", "avoid_worker", "last_owner"): op.add_column("jobs", sa.Column(name, Id, nullable=True))
  op.add_column("jobs", sa.Column("kind", sa.String(16), nullable=False, server_default="tune"))
  # results stored before proof existed were never confirmed: they stay served (status confirmed) as they were
  op.add_column("results", sa.Column("status", sa.String(16), nullable=False, server_default="confirmed"))
  op.execute("UPDATE results SET status = 'unverified' WHERE NOT verified")
  op.add_column("results", sa.Column("confirmed_by", Id, nullable=True))
  op.add_column("results", sa.Column("note", sa.Text(), nullable=False, server_default=""))


def downgrade():
  with op.batch_alter_table("results") as b:
    for name in ("note", "confirmed_by", "status"): b.drop_column(name)
  with op.batch_alter_table("jobs") as b:
    for name in ("kind", "last_owner", "avoid_worker", "confirms"): b.drop_column(name)
  with op.batch_alter_table("fingerprints") as b: b.drop_column("options")
