"""Who asked for each job (a digest of the caller's token, or its address on a service without tokens): what bounds the
jobs one caller may have waiting, and who besides an admin may cancel a job.

Revision ID: 0005_submitters
"""
import sqlalchemy as sa
from alembic import op

revision, down_revision = "0005_submitters", "0004_busy_keys"


def upgrade():
  op.add_column("jobs", sa.Column("submitter", sa.String(64), nullable=True))  # jobs from before: nobody's but an admin's to cancel
  op.create_index("ix_jobs_submitter", "jobs", ["submitter", "state"])

def downgrade():
  op.drop_index("ix_jobs_submitter", "jobs")
  with op.batch_alter_table("jobs") as b: b.drop_column("submitter")
