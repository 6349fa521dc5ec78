"""Each kernel's structure (linearizer/alike.py: the hash of its op tree and views with the sizes taken out) and its full shape,
so that a claimed search finds the kernels alike -- same structure, other sizes -- tuned on its worker's fingerprint (an
index on the hash) and seeds from the nearest ones' winners. Filled here for the kernels stored before, a page at a time; a
document that no longer loads keeps None (a kernel alike of none). A change to what structure() hashes needs a migration
that fills the column again.

Revision ID: 0007_kernel_structure
"""
import sqlalchemy as sa
from alembic import op
from linearizer.ast import KernelValidationError, load
from linearizer.alike import sizes, structure

revision, down_revision = "0007_kernel_structure", "0006_registrants"
PAGE = 500  # documents read at a time: a large store's are not all held at once


def upgrade():
  op.add_column("kernels", sa.Column("structure", sa.String(64), nullable=True))
  op.add_column("kernels", sa.Column("sizes", sa.JSON(), nullable=True))
  op.create_index("ix_kernels_structure", "kernels", ["structure"])
  kernels = sa.table("kernels", sa.column("key", sa.String), sa.column("document", sa.JSON), sa.column("structure", sa.String),
                     sa.column("sizes", sa.JSON))
  conn, last = op.get_bind(), ""
  while rows := conn.execute(sa.select(kernels.c.key, kernels.c.document).where(kernels.c.key > last).order_by(kernels.c.key).limit(PAGE)).all():
    last, filled = rows[-1][0], []
    for key, doc in rows:
      try: k = load(doc)
      except KernelValidationError: continue
      filled.append({"k": key, "structure": structure(k), "sizes": sizes(k)})
    if filled: conn.execute(kernels.update().where(kernels.c.key == sa.bindparam("k")), filled)

def downgrade():
  op.drop_index("ix_kernels_structure", "kernels")
  with op.batch_alter_table("kernels") as b:
    for name in ("sizes", "structure"): b.drop_column(name)
