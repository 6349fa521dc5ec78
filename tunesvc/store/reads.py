"""Questions the store answers: a job, kernels (filtered, a page at a time), a kernel with its history, tuned opts, and for
the dashboard the workers and the job queue."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Optional, Sequence
from sqlalchemy import Row, bindparam, case, exists, func, select
from sqlalchemy.orm import Session
from search.result import Seed, SeedSource
from linearizer.alike import nearest
from tunesvc.states import JobState
from tunesvc.store import Store
from tunesvc.store.models import Best, Fingerprint, Job, Kernel, Measurement, ModelKernel, Result, Worker


def job(st: Store, job_id: int) -> tuple[Job, Optional[Result]] | None:
  with st.read() as s:
    if (j := s.get(Job, job_id)) is None: return None
    return j, None if j.result_id is None else s.get(Result, j.result_id)

def jobs_of(st: Store, keys: Sequence[str]) -> dict[str, list[tuple[Job, Optional[Result]]]]:
  """Every job of these kernels with its result, oldest first."""
  out: dict[str, list] = {k: [] for k in keys}
  with st.read() as s:
    for j, r in s.execute(select(Job, Result).outerjoin(Result, Result.id == Job.result_id).where(Job.kernel_key.in_(keys)).order_by(Job.id)):
      out[j.kernel_key].append((j, r))
  return out


def kernels(st: Store, name: Optional[str] = None, device: Optional[str] = None, state: Optional[JobState] = None,
            limit: int = 50, offset: int = 0) -> tuple[list[Kernel], bool]:
  """A page of kernels, newest first: names containing `name`, with a job for `device` and/or in `state`; and whether more follow."""
  q = select(Kernel).order_by(Kernel.created.desc(), Kernel.key)
  if name: q = q.where(Kernel.name.contains(name, autoescape=True))
  if device or state:
    has = select(Job.id).where(Job.kernel_key == Kernel.key)
    if device: has = has.where(Job.device == device)
    if state: has = has.where(Job.state == state)
    q = q.where(exists(has))
  with st.read() as s: rows = s.scalars(q.limit(limit + 1).offset(offset)).all()
  return list(rows[:limit]), len(rows) > limit


@dataclass
class KernelHistory:
  kernel: Kernel
  jobs: list[tuple[Job, Optional[Result]]]
  measurements: dict[int, list[Measurement]]  # job id -> every candidate its search measured, in order

def kernel(st: Store, key: str) -> KernelHistory | None:
  with st.read() as s:
    if (k := s.get(Kernel, key)) is None: return None
    ms: dict[int, list[Measurement]] = {}
    for m in s.scalars(select(Measurement).join(Job, Job.id == Measurement.job_id).where(Job.kernel_key == key).order_by(Measurement.id)):
      ms.setdefault(m.job_id, []).append(m)
  return KernelHistory(k, jobs_of(st, [key])[key], ms)


# the runtime's hot path: one indexed query (best's primary key, then results' primary key), plain rows. Built once with
# bind parameters: SQLAlchemy then reuses its cache key and compiled SQL, where a statement built per call cost more
# than the query itself
_LOOKUP = select(Best.kernel_key, Best.action_space_version, Best.best_s, Result.best_opts, Result.baseline_s) \
  .join(Result, Result.id == Best.result_id) \
  .where(Best.kernel_key.in_(bindparam("keys", expanding=True)), Best.fingerprint_hash == bindparam("fingerprint_hash"))
LOOKUP_NEWEST = _LOOKUP.order_by(Best.action_space_version)
LOOKUP_VERSION = _LOOKUP.where(Best.action_space_version == bindparam("version"))

def lookup(st: Store, keys: Sequence[str], fingerprint_hash: str, action_space_version: Optional[int] = None) -> dict[str, Row]:
  """kernel key -> its best (opts, times) on this fingerprint, at that action-space version or else the newest one."""
  args = {"keys": list(keys), "fingerprint_hash": fingerprint_hash}
  with st.engine.connect() as c:
    rows = c.execute(LOOKUP_NEWEST, args) if action_space_version is None else c.execute(LOOKUP_VERSION, {**args, "version": action_space_version})
    return {r.kernel_key: r for r in rows}  # ascending versions: the newest one is left standing


def jobs_by_state(st: Store) -> dict[JobState, int]:
  with st.read() as s: return dict(s.execute(select(Job.state, func.count()).group_by(Job.state)).all())


def workers(st: Store, limit: int = 50, offset: int = 0) -> tuple[list[tuple[Worker, Optional[Job], Optional[str]]], bool]:
  """A page of workers, newest first, each with the running job it holds a lease on and that job's kernel name; and whether more follow."""
  with st.read() as s:
    ws = s.scalars(select(Worker).order_by(Worker.id.desc()).limit(limit + 1).offset(offset)).all()
    held = {j.lease_owner: (j, name) for j, name in s.execute(select(Job, Kernel.name).join(Kernel, Kernel.key == Job.kernel_key)
                                                               .where(Job.state == JobState.RUNNING, Job.lease_owner.in_([w.id for w in ws])))}
  return [(w, *held.get(w.id, (None, None))) for w in ws[:limit]], len(ws) > limit

def jobs(st: Store, state: Optional[JobState] = None, limit: int = 50,
         offset: int = 0) -> tuple[list[tuple[Job, Optional[Result], Optional[str]]], bool]:
  """A page of jobs with their result and kernel name; and whether more follow. Queued ones in the order workers claim them
  (highest priority, then oldest), the others newest first."""
  q = select(Job, Result, Kernel.name).join(Kernel, Kernel.key == Job.kernel_key).outerjoin(Result, Result.id == Job.result_id)
  if state: q = q.where(Job.state == state)
  q = q.order_by(Job.priority.desc(), Job.id) if state == JobState.QUEUED else q.order_by(Job.id.desc())
  with st.read() as s: rows = s.execute(q.limit(limit + 1).offset(offset)).all()
  return [(j, r, name) for j, r, name in rows[:limit]], len(rows) > limit


# a model's kernel is in the state of its best job (none: it has no job); its rank here, counted in the database
MODEL_ORDER = (JobState.DONE, JobState.RUNNING, JobState.QUEUED, JobState.FAILED, "none")
_RANK = case(*((Job.state == state, i) for i, state in enumerate(MODEL_ORDER[:-1])), else_=len(MODEL_ORDER) - 1)

def _best_states(models: Sequence[str]):
  """(model, kernel_key, runs, rank) of each kernel of these models."""
  return select(ModelKernel.model, ModelKernel.kernel_key, ModelKernel.runs, func.min(_RANK).label("rank")) \
    .outerjoin(Job, Job.kernel_key == ModelKernel.kernel_key).where(ModelKernel.model.in_(models)) \
    .group_by(ModelKernel.model, ModelKernel.kernel_key, ModelKernel.runs)

@dataclass
class ModelSummary:
  model: str
  kernels: int
  runs: int
  states: dict[str, int]  # kernels by the state of their best job

def models(st: Store, limit: int = 50, offset: int = 0, name: Optional[str] = None) -> tuple[list[ModelSummary], bool]:
  """A page of models by name (or the one called `name`), each summed in the database; and whether more follow."""
  q = select(ModelKernel.model).distinct().order_by(ModelKernel.model)
  with st.read() as s:
    names = s.scalars((q if name is None else q.where(ModelKernel.model == name)).limit(limit + 1).offset(offset)).all()
    best = _best_states(names[:limit]).subquery()
    rows = s.execute(select(best.c.model, best.c.rank, func.count(), func.sum(best.c.runs)).group_by(best.c.model, best.c.rank)).all()
  out = {m: ModelSummary(m, 0, 0, {}) for m in names[:limit]}
  for m, rank, n, runs in rows:
    out[m].kernels, out[m].runs, out[m].states[MODEL_ORDER[rank]] = out[m].kernels + n, out[m].runs + runs, n
  return list(out.values()), len(names) > limit

def model_kernels(st: Store, model: str, limit: int = 50, offset: int = 0) -> tuple[list[tuple[str, Optional[str], int, str]], bool]:
  """A page of one model's kernels, most-run first: (key, name, runs, state of its best job); and whether more follow."""
  best = _best_states([model]).subquery()
  q = select(best.c.kernel_key, Kernel.name, best.c.runs, best.c.rank).join(Kernel, Kernel.key == best.c.kernel_key) \
    .order_by(best.c.runs.desc(), best.c.kernel_key).limit(limit + 1).offset(offset)
  with st.read() as s: rows = s.execute(q).all()
  return [(key, name, runs, MODEL_ORDER[rank]) for key, name, runs, rank in rows[:limit]], len(rows) > limit


def kernel_runs(st: Store, key: str) -> int:
  """How often the kernel runs per inference: the most any model recorded for it (1 where none did)."""
  with st.read() as s: return s.scalar(select(func.max(ModelKernel.runs)).where(ModelKernel.kernel_key == key)) or 1

def warm_starts(st: Store, kernel: Kernel, worker_id: int, action_space_version: Optional[int] = None, n: int = 3,
                scan: int = 1000) -> list[Seed]:
  """A search's warm starts (seeds, each measured in its first round, so a few): the kernel's served winners on up to n
  other device fingerprints than the worker's, then the served winners on the worker's fingerprint of up to n kernels
  alike (linearizer/alike.py: its structure, other sizes), nearest first among the `scan` newest (a claim reads their sizes:
  1000 cost 28 ms on SQLite, 55 ms on PostgreSQL, 2 busy cores); of an action-space version at most the worker's
  (versions only add opts), the newest."""
  with st.read() as s:
    if (mine := s.scalar(select(Worker.fingerprint_hash).where(Worker.id == worker_id))) is None: return []
    return _winners_elsewhere(s, kernel.key, mine, action_space_version, n) + _winners_alike(s, kernel, mine, action_space_version, n, scan)

def _winners_elsewhere(s: Session, key: str, mine: str, action_space_version: Optional[int], n: int) -> list[Seed]:
  """Of the worker's backend first, then of the newest version."""
  backend = select(Fingerprint.backend).where(Fingerprint.hash == mine).scalar_subquery()
  q = select(Result.id, Best.fingerprint_hash, Result.best_opts).join(Best, Best.result_id == Result.id) \
    .join(Fingerprint, Fingerprint.hash == Best.fingerprint_hash).where(Best.kernel_key == key, Best.fingerprint_hash != mine)
  if action_space_version is not None: q = q.where(Best.action_space_version <= action_space_version)
  q = q.order_by((Fingerprint.backend == backend).desc(), Best.action_space_version.desc(), Best.fingerprint_hash).limit(n)
  return [Seed(list(opts), SeedSource.OTHER_FINGERPRINT, key, fp, rid) for rid, fp, opts in s.execute(q)]

def _winners_alike(s: Session, kernel: Kernel, mine: str, action_space_version: Optional[int], n: int, scan: int) -> list[Seed]:
  """The index on the structure finds the kernels alike; their sizes (only those read) decide the nearest."""
  if kernel.structure is None or kernel.sizes is None: return []
  q = select(Best.kernel_key, Kernel.sizes, Best.result_id, Best.action_space_version).join(Kernel, Kernel.key == Best.kernel_key) \
    .where(Kernel.structure == kernel.structure, Best.kernel_key != kernel.key, Best.fingerprint_hash == mine)
  if action_space_version is not None: q = q.where(Best.action_space_version <= action_space_version)
  newest: dict[str, tuple[list[int], int, int]] = {}  # each kernel's newest version's result
  for key, sz, rid, v in s.execute(q.order_by(Best.result_id.desc()).limit(scan)):
    if key not in newest or v > newest[key][2]: newest[key] = (sz, rid, v)
  near = nearest(kernel.sizes, [(sz, (key, rid)) for key, (sz, rid, _) in newest.items()], n)
  if not near: return []
  opts = {rid: o for rid, o in s.execute(select(Result.id, Result.best_opts).where(Result.id.in_([rid for _, rid in near])))}
  return [Seed(list(opts[rid]), SeedSource.ALIKE, key, mine, rid) for key, rid in near]

def devices(st: Store) -> set[str]:
  """Every device selector some worker has registered: backend names and fingerprint hashes."""
  with st.read() as s: return {x for row in s.execute(select(Fingerprint.backend, Fingerprint.hash)) for x in row}
