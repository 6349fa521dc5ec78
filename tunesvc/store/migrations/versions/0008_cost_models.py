"""Cost models trained from the store's measurements (`tunesvc cost-model train`): one per device family, generated-code
version and action-space version, served to workers (GET /v1/cost-models/{family}).

Revision ID: 0008_cost_models
"""
import sqlalchemy as sa
from alembic import op

revision, down_revision = "0008_cost_models", "0007_kernel_structure"


def upgrade():
  op.create_table("cost_models", sa.Column("family", sa.String(64), nullable=False), sa.Column("codegen_version", sa.Integer(), nullable=False),
                  sa.Column("action_space_version", sa.Integer(), nullable=False), sa.Column("prior", sa.JSON(), nullable=False),
                  sa.Column("rows", sa.Integer(), nullable=False), sa.Column("kernels", sa.Integer(), nullable=False),
                  sa.Column("created", sa.Double(), nullable=False),
                  sa.PrimaryKeyConstraint("family", "codegen_version", "action_space_version"))

def downgrade(): op.drop_table("cost_models")
