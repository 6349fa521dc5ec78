"""The job lifecycle: submit, claim under a lease, heartbeat, report a result or a failure, release, expiry.

Claims: the oldest queued job of the highest priority whose selector (a backend name or an exact fingerprint hash) matches
the worker's fingerprint and, where the job's settings name an action-space version, whose version is the worker's. On PostgreSQL the row is taken with SELECT ... FOR UPDATE SKIP LOCKED, so concurrent claimers
each get another job without waiting; on SQLite every write transaction is BEGIN IMMEDIATE, so claims run one at a time.

Failures: an expired lease or a reported failure costs one attempt and re-queues the job; the last attempt fails it.
`error` keeps one line per failed attempt. Releasing (a worker shutting down) re-queues without costing an attempt.

Reports: accepted while the job runs under the reporting worker, or while it is queued again after that lease lapsed and
no one has claimed it since (a finished, verified search is kept, not redone). Refused (Conflict) while another worker
holds the job, or once it failed. A repeated report of a done job by the worker that reported it returns the stored
result and writes nothing: one result row and one set of measurements per job.
"""
from __future__ import annotations
import hashlib, json, time
from typing import Optional
from sqlalchemy import or_, select, text
from sqlalchemy.orm import Session
from linearizer.ast import KernelAST
from search.result import SearchResult
from tunesvc.store import Store
from tunesvc.store.models import NOT_FAILED, Best, Fingerprint, Job, Kernel, Measurement, Result, Worker


class NotFound(LookupError): pass
class Conflict(RuntimeError): pass     # the job's state refuses the request
class Invalid(ValueError): pass        # the request contradicts what the store holds


def settings_hash(settings: dict) -> str: return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()

def _get(s: Session, model, ident, lock: bool = False):
  if (row := s.get(model, ident, with_for_update=lock)) is None: raise NotFound(f"{model.__tablename__[:-1]} {ident} not found")
  return row

def _worker(s: Session, worker_id: int) -> tuple[Worker, Fingerprint]:
  q = select(Worker, Fingerprint).join(Fingerprint, Fingerprint.hash == Worker.fingerprint_hash).where(Worker.id == worker_id)
  if (row := s.execute(q).first()) is None: raise NotFound(f"worker {worker_id} not found")
  return tuple(row)


def submit(st: Store, kernels: list[KernelAST], device: str, settings: dict, priority: int = 0,
           max_attempts: int = 3) -> list[tuple[Job, Optional[Result]]]:
  """A job per kernel, with its result: a kernel that has a queued, running or done job for (device, settings) gets that
  job, so identical pending requests share one and a tuned kernel is answered at once."""
  t, sh = time.time(), settings_hash(settings)
  unique = {k.key: k for k in kernels}
  with st.write() as s:
    s.execute(st.insert(Kernel).on_conflict_do_nothing(), [dict(key=k.key, document=k.to_json(), name=k.name, flops=k.flops(),
                                                                bytes=k.bytes(), created=t) for k in unique.values()])
    # the partial unique index (not failed) decides between concurrent identical submissions
    s.execute(st.insert(Job).on_conflict_do_nothing(index_elements=["kernel_key", "device", "settings_hash"], index_where=text(NOT_FAILED)),
              [dict(kernel_key=key, device=device, settings=settings, settings_hash=sh, state="queued", error="", priority=priority,
                    attempts=0, max_attempts=max_attempts, created=t) for key in unique])
    jobs = {j.kernel_key: (j, r) for j, r in s.execute(select(Job, Result).outerjoin(Result, Result.id == Job.result_id).where(
      Job.kernel_key.in_(unique), Job.device == device, Job.settings_hash == sh, Job.state != "failed"))}
  return [jobs[k.key] for k in kernels]


def register(st: Store, name: str, device: str, fingerprint: dict, fingerprint_hash: str) -> Worker:
  t = time.time()
  with st.write() as s:
    s.execute(st.insert(Fingerprint).values(hash=fingerprint_hash, backend=fingerprint["backend"], json=fingerprint).on_conflict_do_nothing())
    if s.get(Fingerprint, fingerprint_hash).json != fingerprint:
      raise Invalid(f"fingerprint {fingerprint_hash} is registered with a different fingerprint")
    s.add(w := Worker(name=name, device=device, fingerprint_hash=fingerprint_hash, last_heartbeat=t, state="idle"))
  return w


def _attempt_failed(job: Job, reason: str, t: float, retry: bool = True) -> None:
  job.attempts += 1
  job.error += f"attempt {job.attempts}: {reason}\n"
  job.lease_owner = job.lease_expires = None
  if retry and job.attempts < job.max_attempts: job.state = "queued"
  else: job.state, job.finished = "failed", t

def _expire(s: Session, t: float) -> int:
  jobs = s.scalars(select(Job).where(Job.state == "running", Job.lease_expires < t).with_for_update(skip_locked=True)).all()
  for j in jobs: _attempt_failed(j, f"the lease of worker {j.lease_owner} expired", t)
  return len(jobs)

def expire(st: Store) -> int:
  """Re-queue (or fail) the running jobs whose lease has passed; the number swept."""
  with st.write() as s: return _expire(s, time.time())


def claim(st: Store, worker_id: int, lease_s: float, action_space_version: Optional[int] = None) -> tuple[Job, Kernel] | None:
  """The next job for the worker's fingerprint; with its action-space version, none that asks for another version."""
  t = time.time()
  with st.write() as s:
    _expire(s, t)
    w, fp = _worker(s, worker_id)
    q = select(Job, Kernel).join(Kernel, Kernel.key == Job.kernel_key).where(Job.state == "queued", Job.device.in_((fp.backend, fp.hash)))
    if action_space_version is not None:
      asked = Job.settings["action_space_version"].as_integer()
      q = q.where(or_(asked.is_(None), asked == action_space_version))
    got = s.execute(q.order_by(Job.priority.desc(), Job.id).limit(1).with_for_update(of=Job, skip_locked=True)).first()
    w.last_heartbeat, w.state = t, "idle" if got is None else "busy"
    if got is None: return None
    job, kernel = got
    job.state, job.lease_owner, job.lease_expires, job.started = "running", w.id, t + lease_s, t
    return job, kernel


def _held(s: Session, worker_id: int, job_id: int, t: float) -> tuple[Worker, Job]:
  """The worker and its job, locked; Conflict unless the job runs under that worker."""
  w, job = _get(s, Worker, worker_id), _get(s, Job, job_id, lock=True)
  w.last_heartbeat = t
  if job.state != "running" or job.lease_owner != w.id:
    raise Conflict(f"job {job_id} is not held by worker {worker_id}: it is {job.state}"
                   + (f" under worker {job.lease_owner}" if job.lease_owner is not None else ""))
  return w, job

def heartbeat(st: Store, worker_id: int, job_id: int, lease_s: float) -> Job:
  """Extend the lease; Conflict if the job was taken away (its lease lapsed and it was re-queued, claimed or ended)."""
  t = time.time()
  with st.write() as s:
    _, job = _held(s, worker_id, job_id, t)
    job.lease_expires = t + lease_s
  return job

def release(st: Store, worker_id: int, job_id: int) -> Job:
  """Back to the queue without costing an attempt: the worker is shutting down, the job did nothing wrong."""
  with st.write() as s:
    w, job = _held(s, worker_id, job_id, time.time())
    job.state, job.lease_owner, job.lease_expires, w.state = "queued", None, None, "idle"
  return job

def fail(st: Store, worker_id: int, job_id: int, reason: str, retry: bool = True) -> Job:
  """The attempt failed: re-queued while attempts remain (and retry), failed with every reason after that."""
  t = time.time()
  with st.write() as s:
    w, job = _held(s, worker_id, job_id, t)
    _attempt_failed(job, f"worker {w.id} ({w.name}): {reason}", t, retry)
    w.state = "idle"
  return job


def report(st: Store, worker_id: int, job_id: int, r: SearchResult) -> tuple[Result, bool]:
  """Store a finished search: (the result row, whether it was stored before by this same report)."""
  t = time.time()
  with st.write() as s:
    (w, fp), job = _worker(s, worker_id), _get(s, Job, job_id, lock=True)
    if job.state == "done":
      prev = s.get(Result, job.result_id)
      if prev.worker_id == w.id: return prev, True
      raise Conflict(f"job {job_id} is already done: result {prev.id} from worker {prev.worker_id}")
    if job.state == "failed": raise Conflict(f"job {job_id} has failed:\n{job.error}")
    if job.state == "running" and job.lease_owner != w.id:
      raise Conflict(f"job {job_id} is held by worker {job.lease_owner}: the lease of worker {w.id} lapsed and the job was claimed again")
    if r.kernel_key != job.kernel_key: raise Invalid(f"the result is for kernel {r.kernel_key}, job {job_id} tunes {job.kernel_key}")
    if r.fingerprint_hash != fp.hash: raise Invalid(f"the result's fingerprint {r.fingerprint_hash} is not worker {w.id}'s {fp.hash}")
    if job.device not in (fp.backend, fp.hash): raise Invalid(f"job {job_id} is for device {job.device}, worker {w.id} is {fp.backend} {fp.hash}")
    s.add(res := Result(job_id=job.id, worker_id=w.id, kernel_key=job.kernel_key, fingerprint_hash=fp.hash,
                        action_space_version=r.action_space_version, best_opts=r.best_opts, best_s=r.best_s, baseline_s=r.baseline_s,
                        speedup=r.speedup, verified=r.verified, search_s=r.search_s, result=r.to_json(), created=t))
    s.flush()
    if r.candidates:
      s.execute(st.insert(Measurement), [dict(job_id=job.id, round=c.round, opts=c.opts, status=c.status, error=c.error,
                                              source_hash=c.source_hash, compile_s=c.compile_s, times=c.times_s, min_s=c.min_s,
                                              verified=c.verified) for c in r.candidates])
    job.state, job.result_id, job.finished, job.lease_owner, job.lease_expires = "done", res.id, t, None, None
    w.state, w.last_heartbeat = "idle", t
    if r.verified:  # only a schedule checked against the reference on this device may be handed out
      ins = st.insert(Best).values(kernel_key=job.kernel_key, fingerprint_hash=fp.hash, action_space_version=r.action_space_version,
                                   result_id=res.id, best_s=r.best_s)
      s.execute(ins.on_conflict_do_update(index_elements=["kernel_key", "fingerprint_hash", "action_space_version"],
                                          set_=dict(result_id=ins.excluded.result_id, best_s=ins.excluded.best_s),
                                          where=Best.best_s > ins.excluded.best_s))
  return res, False
