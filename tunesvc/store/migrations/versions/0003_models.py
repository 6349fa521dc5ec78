"""Models: which kernels a program (a captured tinygrad model) runs and how often, so the dashboard groups them.

Revision ID: 0003_models
"""
import sqlalchemy as sa
from alembic import op

revision, down_revision = "0003_models", "0002"


def upgrade():
  op.create_table("model_kernels", sa.Column("model", sa.Text(), nullable=False), sa.Column("kernel_key", sa.String(64), nullable=False),
                  sa.Column("runs", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
                  sa.ForeignKeyConstraint(["kernel_key"], ["kernels.key"]), sa.PrimaryKeyConstraint("model", "kernel_key"))

def downgrade(): op.drop_table("model_kernels")
