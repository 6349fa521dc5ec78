"""The first schema: kernels, fingerprints, workers, jobs, results, measurements, best.

Revision ID: 0001
"""
import sqlalchemy as sa
from alembic import op

revision, down_revision = "0001", None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite numbers rows only through an INTEGER PRIMARY KEY
Hash, Time = sa.String(64), sa.Double[float]()

def col(name, type_, nullable=False): return sa.Column(name, type_, nullable=nullable)
def fk(name, target): return sa.ForeignKeyConstraint([name], [target])


def upgrade():
  op.create_table("fingerprints", col("hash", Hash), col("backend", sa.String(32)), col("json", sa.JSON()),
                  sa.PrimaryKeyConstraint("hash"))
  op.create_index("ix_fingerprints_backend", "fingerprints", ["backend"])
  op.create_table("kernels", col("key", Hash), col("document", sa.JSON()), col("name", sa.Text(), True), col("flops", Id),
                  col("bytes", Id), col("created", Time), sa.PrimaryKeyConstraint("key"))
  op.create_index("ix_kernels_name", "kernels", ["name"])
  op.create_table("workers", col("id", Id), col("name", sa.Text()), col("device", sa.Text()), col("fingerprint_hash", Hash),
                  col("last_heartbeat", Time), col("state", sa.String(16)),
                  fk("fingerprint_hash", "fingerprints.hash"), sa.PrimaryKeyConstraint("id"))
  op.create_table("jobs", col("id", Id), col("kernel_key", Hash), col("device", sa.String(64)), col("settings", sa.JSON()),
                  col("settings_hash", Hash), col("state", sa.String(16)), col("error", sa.Text()), col("priority", Id),
                  col("attempts", Id), col("max_attempts", Id), col("lease_owner", Id, True), col("lease_expires", Time, True),
                  col("created", Time), col("started", Time, True), col("finished", Time, True), col("result_id", Id, True),
                  fk("kernel_key", "kernels.key"), fk("lease_owner", "workers.id"), sa.PrimaryKeyConstraint("id"))
  op.create_index("ix_jobs_claim", "jobs", ["state", "device", "priority"])
  op.create_index("ix_jobs_kernel_key", "jobs", ["kernel_key"])
  not_failed = sa.text("state != 'failed'")
  op.create_index("ux_jobs_request", "jobs", ["kernel_key", "device", "settings_hash"], unique=True,
                  sqlite_where=not_failed, postgresql_where=not_failed)
  op.create_table("results", col("id", Id), col("job_id", Id), col("worker_id", Id), col("kernel_key", Hash),
                  col("fingerprint_hash", Hash), col("action_space_version", Id), col("best_opts", sa.JSON()),
                  col("best_s", sa.Double()), col("baseline_s", sa.Double()), col("speedup", sa.Double()),
                  col("verified", sa.Boolean()), col("search_s", sa.Double()), col("result", sa.JSON()), col("created", Time),
                  fk("job_id", "jobs.id"), fk("worker_id", "workers.id"), fk("kernel_key", "kernels.key"),
                  fk("fingerprint_hash", "fingerprints.hash"), sa.PrimaryKeyConstraint("id"), sa.UniqueConstraint("job_id"))
  op.create_index("ix_results_kernel_key", "results", ["kernel_key"])
  op.create_table("measurements", col("id", Id), col("job_id", Id), col("round", Id), col("opts", sa.JSON()),
                  col("status", sa.String(32)), col("error", sa.Text()), col("source_hash", sa.Text()),
                  col("compile_s", sa.Double()), col("times", sa.JSON()), col("min_s", sa.Double(), True),
                  col("verified", sa.Boolean()), fk("job_id", "jobs.id"), sa.PrimaryKeyConstraint("id"))
  op.create_index("ix_measurements_job_id", "measurements", ["job_id"])
  op.create_table("best", col("kernel_key", Hash), col("fingerprint_hash", Hash), col("action_space_version", Id),
                  col("result_id", Id), col("best_s", sa.Double()),
                  fk("kernel_key", "kernels.key"), fk("fingerprint_hash", "fingerprints.hash"), fk("result_id", "results.id"),
                  sa.PrimaryKeyConstraint("kernel_key", "fingerprint_hash", "action_space_version"))


def downgrade():
  for t in ("best", "measurements", "results", "jobs", "workers", "kernels", "fingerprints"): op.drop_table(t)
