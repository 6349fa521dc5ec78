"""Who registered each worker (a digest of the worker token it used, or its address): a fleet's confirmation must come
from a worker registered with other credentials than the result's, so that one stolen token cannot both report a
forgery and confirm it (two workers of its own registering are no second opinion).

Revision ID: 0006_registrants
"""
import sqlalchemy as sa
from alembic import op

revision, down_revision = "0006_registrants", "0005_submitters"


def upgrade():
  op.add_column("workers", sa.Column("registrant", sa.String(64), nullable=True))
  op.add_column("jobs", sa.Column("avoid_registrant", sa.String(64), nullable=True))

def downgrade():
  with op.batch_alter_table("jobs") as b: b.drop_column("avoid_registrant")
  with op.batch_alter_table("workers") as b: b.drop_column("registrant")
