"""The job lifecycle: submit, claim under a lease, heartbeat, report a result or a failure, release, expiry.

Claims: the oldest queued job of the highest priority whose selector (a backend name or an exact fingerprint hash) matches
the worker's fingerprint and, where the job's settings name an action-space version, whose version is the worker's (a
confirm job's: the worker's or an older one -- versions only add opts, so a newer worker applies an older result's, and
a result of a version no worker runs any more must not wait for one forever). On
PostgreSQL the row is taken with SELECT ... FOR UPDATE SKIP LOCKED, so concurrent claimers each get another job without
waiting; on SQLite every write transaction is BEGIN IMMEDIATE, so claims run one at a time.

Failures: an expired lease or a reported failure costs one attempt and re-queues the job; the last attempt fails it.
`error` keeps one line per failed attempt. A search re-queued after a failure goes to a worker registered with other
credentials next where its device has one (a stolen worker token cannot spend every attempt of a kernel by itself).
Releasing (a worker shutting down) re-queues without costing an attempt.
A worker that found its device too busy to time on (search/settings.py OnBusy) reports the failure as busy: that costs no
attempt, and the job waits (Backoff: doubling delays, `not_before`) before any worker may claim it again -- the machine may
be quiet by then -- up to Backoff.retries times; the next busy refusal fails it with every reason.

Workers: registration gives a worker its id and a key (kept as its sha256); the API passes the key each worker call
carries, and a call for a worker whose key it is not is Forbidden -- a worker token lets anyone register a worker of
their own, never act as another. In-process callers pass no key (they are the service).

Reports: accepted from the current lease holder only -- while the job runs under the reporting worker, or while it is
queued again after that worker's own lease lapsed and no one has claimed it since (a finished, verified search is kept, not
redone; `last_owner` names that worker). Refused (Conflict) from any other worker: one that never held the job, or whose
lease another holds now, or once it failed. A repeated report of a done job by the worker that reported it returns the
stored result and writes nothing: one result row and one set of measurements per job.

Proof (tunesvc/store/proof.py): every report is checked against the stored kernel and the fingerprint's registered
LinearizerOptions (Invalid otherwise). A verified result is unconfirmed: its report queues a confirm job (kind
"confirm", on the exact fingerprint, ahead of searches; with Proof.confirm_on_other_worker, for a worker other than the
result's and registered with other credentials) whose measurement confirms it -- it becomes the best that
lookups serve -- or refutes it, failing its job with the reason; while that search has attempts left, the refutation costs
one and a new search of the kernel is queued at once, for the workers the confirmation was (so in a fleet not for the refuted
worker's credentials: a stolen token's forgery costs the kernel an attempt, not its tuning). An admin invalidates results (one, a kernel's, or a
worker's and those it confirmed): they leave the best, the next confirmed result takes their place, their jobs fail
with the reason and a new search of each is queued.
"""
from __future__ import annotations
import hashlib, hmac, json, time
from dataclasses import dataclass
from typing import Any, Optional, TypeVar
from sqlalchemy import and_, delete, func, or_, select, text
from sqlalchemy.orm import Session
from linearizer.ast import KernelAST, load
from search.result import SearchResult
from linearizer.alike import sizes, structure
from tunesvc.store import Store, proof
from tunesvc.states import ENDED, PENDING, JobKind, JobState, ResultStatus, WorkerState
from tunesvc.store.models import NOT_FAILED, Base, Best, Fingerprint, Job, Kernel, Measurement, ModelKernel, Result, Worker


class NotFound(LookupError): pass
class Conflict(RuntimeError): pass     # the job's state refuses the request
class Invalid(ValueError): pass        # the request contradicts what the store holds
class Forbidden(PermissionError): pass  # a worker call without that worker's key; a cancel of someone else's job
class TooMany(RuntimeError): pass     # a submitter's jobs waiting would pass its bound


@dataclass(frozen=True)
class Backoff:
  """How long a job refused as "device busy" waits before its next claim: first_s, doubling, at most max_s; after `retries`
  such waits the next refusal fails it (the sum of the waits bounds how long a busy machine may hold a kernel unanswered)."""
  retries: int = 6
  first_s: float = 30.0
  max_s: float = 480.0
  def delay_s(self, n: int) -> float: return min(self.first_s * 2 ** (n - 1), self.max_s)


def settings_hash(settings: dict) -> str: return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()

Row = TypeVar("Row", bound=Base)

def _get(s: Session, model: type[Row], ident: Any, lock: bool = False) -> Row:
  if (row := s.get(model, ident, with_for_update=lock)) is None: raise NotFound(f"{model.__tablename__[:-1]} {ident} not found")
  return row

def key_hash(key: str) -> str: return hashlib.sha256(key.encode()).hexdigest()

def _proven_worker(w: Worker, key: Optional[str]) -> Worker:
  """The worker, unless `key` (a caller's claim to be it) is not its registration's key."""
  if key is not None and not (w.key_hash is not None and hmac.compare_digest(w.key_hash, key_hash(key))):
    raise Forbidden(f"this is not worker {w.id}'s key" if w.key_hash is not None else f"worker {w.id} has no key: register again")
  return w

def _worker(s: Session, worker_id: int, key: Optional[str] = None) -> tuple[Worker, Fingerprint]:
  q = select(Worker, Fingerprint).join(Fingerprint, Fingerprint.hash == Worker.fingerprint_hash).where(Worker.id == worker_id)
  if (row := s.execute(q).first()) is None: raise NotFound(f"worker {worker_id} not found")
  w, fp = row
  return _proven_worker(w, key), fp


def submit(st: Store, kernels: list[KernelAST], device: str, settings: dict, priority: int = 0,
           max_attempts: int = 3, model: Optional[str] = None, runs: Optional[list[int]] = None, submitter: Optional[str] = None,
           max_pending: Optional[int] = None) -> list[tuple[Job, Optional[Result]]]:
  """A job per kernel, with its result: a kernel that has a queued, running or done job for (device, settings) gets that
  job, so identical pending requests share one and a tuned kernel is answered at once. With `model`, the kernels are
  recorded as that model's, with their `runs` (1 each where not given; a later submission's count replaces it). New jobs
  are the `submitter`'s, who may have at most `max_pending` queued or running (TooMany past it; nothing is written)."""
  t, sh = time.time(), settings_hash(settings)
  unique = {k.key: k for k in kernels}
  with st.write() as s:
    if submitter is not None and max_pending is not None:
      shared = s.scalar(select(func.count()).select_from(Job).where(Job.kernel_key.in_(unique), Job.device == device, Job.settings_hash == sh,
                                                                    Job.state != JobState.FAILED)) or 0
      pending = s.scalar(select(func.count()).select_from(Job).where(Job.submitter == submitter, Job.state.in_(PENDING))) or 0
      if pending + (new := len(unique) - shared) > max_pending:
        raise TooMany(f"{pending} of your jobs wait already and this would add {new}: at most {max_pending} may wait "
                      "(TUNESVC_MAX_PENDING_JOBS); submit again once some have ended")
    s.execute(st.insert(Kernel).on_conflict_do_nothing(), [dict(key=k.key, document=k.to_json(), name=k.name, flops=k.flops(), bytes=k.bytes(),
                                                                created=t, structure=structure(k), sizes=sizes(k)) for k in unique.values()])
    # the partial unique index (not failed) decides between concurrent identical submissions
    s.execute(st.insert(Job).on_conflict_do_nothing(index_elements=["kernel_key", "device", "settings_hash"], index_where=text(NOT_FAILED)),
              [dict(kernel_key=key, device=device, settings=settings, settings_hash=sh, state=JobState.QUEUED, error="", priority=priority,
                    attempts=0, max_attempts=max_attempts, created=t, submitter=submitter) for key in unique])
    if model is not None:
      counts = dict(zip((k.key for k in kernels), runs or [1] * len(kernels)))
      ins = st.insert(ModelKernel)
      s.execute(ins.on_conflict_do_update(index_elements=["model", "kernel_key"], set_={"runs": ins.excluded.runs}),
                [dict(model=model, kernel_key=key, runs=n) for key, n in counts.items()])
    jobs = {j.kernel_key: (j, r) for j, r in s.execute(select(Job, Result).outerjoin(Result, Result.id == Job.result_id).where(
      Job.kernel_key.in_(unique), Job.device == device, Job.settings_hash == sh, Job.state != JobState.FAILED))}
  return [jobs[k.key] for k in kernels]


def register(st: Store, name: str, device: str, fingerprint: dict, fingerprint_hash: str, options: dict, key: Optional[str] = None,
             registrant: Optional[str] = None, max_live: Optional[tuple[int, float]] = None) -> Worker:
  """A worker of this fingerprint (its hash must be the devices' sha256 of its sorted JSON) whose linearizer runs under
  `options` (LinearizerOptions JSON), which must be the fingerprint's own (its "options"): so the hash names them, and no
  one registering a fingerprint first can impose other options on it, or refuse its honest workers.
  `key`: what its later calls must carry (kept as its sha256); `registrant`: the credentials it registered with, which
  may have at most max_live = (n, offline_s) workers heard from within offline_s (TooMany past it: a stolen token's
  registrations grow no table without bound)."""
  t = time.time()
  if fingerprint_hash != (h := settings_hash(fingerprint)): raise Invalid(f"fingerprint_hash {fingerprint_hash} is not the fingerprint's hash {h}")
  try: device = proof.options_of(options).device
  except proof.Unproven as e: raise Invalid(str(e)) from None
  # a device's options name it as its fingerprint does: another device's would check its reports by the wrong rules, and
  # registered first, refuse every honest worker of this one
  if device != (backend := fingerprint["backend"]):
    raise Invalid(f"options: another device's LinearizerOptions ({device}) for a {backend} fingerprint")
  if fingerprint.get("options") != options: raise Invalid("options: not the LinearizerOptions the fingerprint names (its \"options\")")
  with st.write() as s:
    s.execute(st.insert(Fingerprint).values(hash=fingerprint_hash, backend=fingerprint["backend"], json=fingerprint, options=options)
              .on_conflict_do_nothing())
    fp = s.get_one(Fingerprint, fingerprint_hash, with_for_update=True)
    if fp.json != fingerprint: raise Invalid(f"fingerprint {fingerprint_hash} is registered with a different fingerprint")
    if registrant is not None and max_live is not None:
      most, offline_s = max_live
      live = select(func.count()).select_from(Worker).where(Worker.registrant == registrant, Worker.last_heartbeat >= t - offline_s)
      if (n := s.scalar(live) or 0) >= most:
        raise TooMany(f"{n} workers registered with these credentials were heard from in the last {offline_s:.0f} s: at most {most} may be "
                      "(TUNESVC_MAX_LIVE_WORKERS); register again once some are offline")
    s.add(w := Worker(name=name, device=device, fingerprint_hash=fingerprint_hash, last_heartbeat=t, state=WorkerState.IDLE,
                      key_hash=None if key is None else key_hash(key), registrant=registrant))
  return w


def cancel(st: Store, job_id: int, reason: str, by: Optional[str] = None) -> Job:
  """A queued or running job ends failed with the reason (its worker's next heartbeat is refused: it stops searching).
  `by`: the submitter asking, who may cancel only its own jobs (None: an admin, or the service; it may cancel any, a
  confirmation too -- whose cancel refutes its result)."""
  with st.write() as s:
    job = _get(s, Job, job_id, lock=True)
    if by is not None and job.submitter != by:
      raise Forbidden(f"job {job_id} is {'the service' if job.kind == JobKind.CONFIRM else 'another submitter'}'s: only it or an admin may cancel it")
    if job.state in ENDED: raise Conflict(f"job {job_id} has ended: it is {job.state}")
    job.state, job.finished, job.error = JobState.FAILED, time.time(), job.error + f"cancelled: {reason}\n"
    job.lease_owner = job.lease_expires = job.last_owner = None
    if job.kind == JobKind.CONFIRM: _refute(s, job, f"its confirm job {job.id} was cancelled", job.finished, retry=False)
  return job


def _avoid_failer(s: Session, job: Job) -> None:
  """A search that failed under its lease holder goes to a worker of other credentials next, where the job's device has
  one: a stolen worker token that fails (or lets lapse, or calls busy) every search it claims costs each kernel one
  attempt, not all of them. A confirmation keeps whom it avoids: the result's maker."""
  if job.kind != JobKind.TUNE or job.lease_owner is None or (w := s.get(Worker, job.lease_owner)) is None or w.registrant is None: return
  other = select(Worker.id).join(Fingerprint, Fingerprint.hash == Worker.fingerprint_hash).where(
    or_(Fingerprint.backend == job.device, Fingerprint.hash == job.device), Worker.registrant.is_not(None), Worker.registrant != w.registrant)
  if s.scalar(other.limit(1)) is not None: job.avoid_worker, job.avoid_registrant = w.id, w.registrant

def _attempt_failed(s: Session, job: Job, reason: str, t: float, retry: bool = True, lapsed: bool = False) -> None:
  _avoid_failer(s, job)
  job.attempts += 1
  job.error += f"attempt {job.attempts}: {reason}\n"
  job.last_owner = job.lease_owner if lapsed else None  # a lapsed lease's worker may still report its finished search
  job.lease_owner = job.lease_expires = None
  if retry and job.attempts < job.max_attempts: job.state = JobState.QUEUED
  else:
    job.state, job.finished = JobState.FAILED, t
    if job.kind == JobKind.CONFIRM: _refute(s, job, f"its confirm job {job.id} failed: {reason}", t)

def _expire(s: Session, t: float) -> int:
  jobs = s.scalars(select(Job).where(Job.state == JobState.RUNNING, Job.lease_expires < t).with_for_update(skip_locked=True)).all()
  for j in jobs: _attempt_failed(s, j, f"the lease of worker {j.lease_owner} expired", t, lapsed=True)
  return len(jobs)

def expire(st: Store) -> int:
  """Re-queue (or fail) the running jobs whose lease has passed; the number swept."""
  with st.write() as s: return _expire(s, time.time())


def claim(st: Store, worker_id: int, lease_s: float, action_space_version: Optional[int] = None,
          key: Optional[str] = None) -> tuple[Job, Kernel] | None:
  """The next job for the worker's fingerprint; with its action-space version, no search that asks for another version
  and no confirmation of a newer one."""
  t = time.time()
  with st.write() as s:
    w, fp = _worker(s, worker_id, key)
    _expire(s, t)
    q = select(Job, Kernel).join(Kernel, Kernel.key == Job.kernel_key).where(Job.state == JobState.QUEUED, Job.device.in_((fp.backend, fp.hash)),
                                                                             or_(Job.avoid_worker.is_(None), Job.avoid_worker != w.id),
                                                                             or_(Job.not_before.is_(None), Job.not_before <= t))
    if w.registrant is not None: q = q.where(or_(Job.avoid_registrant.is_(None), Job.avoid_registrant != w.registrant))
    if action_space_version is not None:
      asked = Job.settings["action_space_version"].as_integer()
      q = q.where(or_(asked.is_(None), asked == action_space_version, and_(Job.kind == JobKind.CONFIRM, asked < action_space_version)))
    got = s.execute(q.order_by(Job.priority.desc(), Job.id).limit(1).with_for_update(of=Job, skip_locked=True)).first()
    w.last_heartbeat, w.state = t, WorkerState.IDLE if got is None else WorkerState.BUSY
    if got is None: return None
    job, kernel = got
    job.state, job.lease_owner, job.lease_expires, job.started, job.last_owner, job.not_before = JobState.RUNNING, w.id, t + lease_s, t, None, None
    return job, kernel


def _held(s: Session, worker_id: int, job_id: int, t: float, key: Optional[str]) -> tuple[Worker, Job]:
  """The worker and its job, locked; Conflict unless the job runs under that worker."""
  w = _proven_worker(_get(s, Worker, worker_id), key)
  job = _get(s, Job, job_id, lock=True)
  w.last_heartbeat = t
  if job.state != JobState.RUNNING or job.lease_owner != w.id:
    raise Conflict(f"job {job_id} is not held by worker {worker_id}: it is {job.state}"
                   + (f" under worker {job.lease_owner}" if job.lease_owner is not None else ""))
  return w, job

HOLD_SLACK_S = 600.0  # past twice its search budget, a job's compiles, final check and quiet waits fit in this

def heartbeat(st: Store, worker_id: int, job_id: int, lease_s: float, key: Optional[str] = None) -> Job:
  """Extend the lease; Conflict if the job was taken away (its lease lapsed and it was re-queued, claimed or ended), or
  once it has run twice its search budget and HOLD_SLACK_S more: a worker that beats and never reports (a stolen token's)
  would hold it forever; refused, its lease lapses like a dead worker's and the attempt counts."""
  t = time.time()
  with st.write() as s:
    _, job = _held(s, worker_id, job_id, t, key)
    if (budget := job.settings.get("budget_s")) and job.started is not None and t - job.started > (hold := 2 * budget + HOLD_SLACK_S):
      raise Conflict(f"job {job_id} is held past its {hold:.0f} s (twice its search budget and {HOLD_SLACK_S:.0f} s): report it or let it go")
    job.lease_expires = t + lease_s
  return job

def release(st: Store, worker_id: int, job_id: int, key: Optional[str] = None) -> Job:
  """Back to the queue without costing an attempt: the worker is shutting down, the job did nothing wrong."""
  with st.write() as s:
    w, job = _held(s, worker_id, job_id, time.time(), key)
    job.state, job.lease_owner, job.lease_expires, job.last_owner, w.state = JobState.QUEUED, None, None, None, WorkerState.IDLE
  return job

def fail(st: Store, worker_id: int, job_id: int, reason: str, retry: bool = True, busy: Optional[Backoff] = None,
         key: Optional[str] = None) -> Job:
  """The attempt failed: re-queued while attempts remain (and retry), failed with every reason after that. With `busy`
  (the device was too busy to time on), it costs no attempt: the job waits busy.delay_s before its next claim, and fails
  once busy.retries such waits are spent."""
  t = time.time()
  with st.write() as s:
    w, job = _held(s, worker_id, job_id, t, key)
    why = f"worker {w.id} ({w.name}): {reason}"
    if busy is None: _attempt_failed(s, job, why, t, retry)
    elif job.busy >= busy.retries: _attempt_failed(s, job, f"{why} (busy {job.busy + 1} times: no more waits)", t, retry=False)
    else:
      _avoid_failer(s, job)
      job.busy += 1
      job.error += f"busy {job.busy}: {why}; again after {busy.delay_s(job.busy):.0f} s\n"
      job.state, job.not_before, job.lease_owner, job.lease_expires, job.last_owner = JobState.QUEUED, t + busy.delay_s(job.busy), None, None, None
    w.state = WorkerState.IDLE
  return job


def _proven(st: Store, worker_id: int, job_id: int, r: SearchResult, pf: proof.Proof) -> bool:
  """Invalid unless the report fits its job, its worker and the stored kernel (read outside the write: the check costs CPU);
  whether it is a verified search whose winner is the hand-coded schedule (served without a confirm job: proof.py)."""
  with st.read() as s:
    (w, fp), job = _worker(s, worker_id), _get(s, Job, job_id)
    kernel = s.get_one(Kernel, job.kernel_key)
  if r.kernel_key != job.kernel_key: raise Invalid(f"the result is for kernel {r.kernel_key}, job {job_id} tunes {job.kernel_key}")
  if r.fingerprint_hash != fp.hash or r.fingerprint != fp.json:
    raise Invalid(f"the result's fingerprint {r.fingerprint_hash} is not worker {w.id}'s {fp.hash}")
  if fp.options is None: raise Invalid(f"worker {w.id}'s fingerprint has no registered LinearizerOptions: register the worker again")
  if job.kind == JobKind.CONFIRM and r.best_opts != job.settings["opts"]: raise Invalid(f"confirm job {job_id} measures other opts than these")
  if job.kind == JobKind.TUNE and (asked := job.settings.get("action_space_version")) is not None and r.action_space_version != asked:
    raise Invalid(f"the result is of action-space version {r.action_space_version}, job {job_id} asked for {asked}")
  k, options = load(kernel.document), proof.options_of(fp.options)
  try: proof.check(k, options, r, pf)
  except proof.Unproven as e: raise Invalid(f"job {job_id}: {e}") from None
  return job.kind == JobKind.TUNE and r.verified and proof.is_hand_coded(k, options, r.best_opts)


def _may_report(s: Session, job: Job, worker_id: int) -> Optional[Result]:
  """The stored result where this is a repeat of the worker's own report; Conflict where the worker may not report the job."""
  if job.state == JobState.DONE:
    if (prev := s.get_one(Result, job.result_id)).worker_id == worker_id: return prev
    raise Conflict(f"job {job.id} is already done: result {prev.id} from worker {prev.worker_id}")
  if job.state == JobState.FAILED: raise Conflict(f"job {job.id} has failed:\n{job.error}")
  if job.state == JobState.RUNNING and job.lease_owner != worker_id:
    raise Conflict(f"job {job.id} is held by worker {job.lease_owner}: the lease of worker {worker_id} lapsed and the job was claimed again")
  if job.state == JobState.QUEUED and job.last_owner != worker_id:
    raise Conflict(f"job {job.id} is queued and was never leased to worker {worker_id} (or it gave the job back): claim it first")
  return None

def report(st: Store, worker_id: int, job_id: int, r: SearchResult, pf: proof.Proof = proof.Proof(),
           key: Optional[str] = None) -> tuple[Result, bool]:
  """Store a finished search: (the result row, whether it was stored before by this same report)."""
  t = time.time()
  with st.read() as s:
    _worker(s, worker_id, key)
    if (prev := _may_report(s, _get(s, Job, job_id), worker_id)) is not None: return prev, True
  hand_coded = _proven(st, worker_id, job_id, r, pf)
  with st.write() as s:
    (w, fp), job = _worker(s, worker_id), _get(s, Job, job_id, lock=True)
    if (prev := _may_report(s, job, w.id)) is not None: return prev, True
    if job.device not in (fp.backend, fp.hash): raise Invalid(f"job {job_id} is for device {job.device}, worker {w.id} is {fp.backend} {fp.hash}")
    status = ResultStatus.MEASUREMENT if job.kind == JobKind.CONFIRM else ResultStatus.CONFIRMED if hand_coded else \
             ResultStatus.UNCONFIRMED if r.verified else ResultStatus.UNVERIFIED
    s.add(res := Result(job_id=job.id, worker_id=w.id, kernel_key=job.kernel_key, fingerprint_hash=fp.hash,
                        action_space_version=r.action_space_version, best_opts=r.best_opts, best_s=r.best_s, baseline_s=r.baseline_s,
                        speedup=r.speedup, verified=r.verified, search_s=r.search_s, result=r.to_json(), created=t, status=status,
                        note="the hand-coded schedule, as a miss runs it: nothing to confirm" if hand_coded else ""))
    s.flush()
    if r.candidates:
      s.execute(st.insert(Measurement), [dict(job_id=job.id, round=c.round, opts=c.opts, status=c.status, error=c.error,
                                              source_hash=c.source_hash, compile_s=c.compile_s, times=c.times_s, min_s=c.min_s,
                                              verified=c.verified) for c in r.candidates])
    job.state, job.result_id, job.finished, job.lease_owner, job.lease_expires, job.last_owner = JobState.DONE, res.id, t, None, None, None
    w.state, w.last_heartbeat = WorkerState.IDLE, t
    if job.kind == JobKind.CONFIRM: _settle(st, s, job, res, pf, t)
    elif hand_coded: _promote(st, s, res)
    elif r.verified:  # only a schedule checked against the reference on this device may be handed out, once measured again
      settings = {**job.settings, "action_space_version": r.action_space_version, "opts": r.best_opts, "confirms": res.id}
      s.add(Job(kernel_key=job.kernel_key, device=fp.hash, settings=settings, settings_hash=settings_hash(settings), state=JobState.QUEUED,
                error="", priority=job.priority + 1, attempts=0, max_attempts=job.max_attempts, created=t, kind=JobKind.CONFIRM,
                confirms=res.id, avoid_worker=w.id if pf.confirm_on_other_worker else None,
                avoid_registrant=w.registrant if pf.confirm_on_other_worker else None))
  return res, False


def _settle(st: Store, s: Session, job: Job, measured: Result, pf: proof.Proof, t: float) -> None:
  """A confirm job's measurement decides its result: served (the best, where faster than the standing one) or refuted."""
  claimed = s.get_one(Result, job.confirms, with_for_update=True)
  if claimed.status != ResultStatus.UNCONFIRMED: return  # invalidated meanwhile
  claimed.confirmed_by = measured.id
  if not measured.verified: return _refute(s, job, f"the confirm measurement {measured.id} did not verify", t)
  if (why := pf.disagreement((claimed.baseline_s, claimed.best_s), (measured.baseline_s, measured.best_s))) is not None:
    return _refute(s, job, f"the confirm measurement {measured.id} disagrees: {why}", t)
  claimed.status = ResultStatus.CONFIRMED
  _promote(st, s, claimed)

def _promote(st: Store, s: Session, r: Result) -> None:
  ins = st.insert(Best).values(kernel_key=r.kernel_key, fingerprint_hash=r.fingerprint_hash, action_space_version=r.action_space_version,
                               result_id=r.id, best_s=r.best_s)
  s.execute(ins.on_conflict_do_update(index_elements=["kernel_key", "fingerprint_hash", "action_space_version"],
                                      set_=dict(result_id=ins.excluded.result_id, best_s=ins.excluded.best_s),
                                      where=Best.best_s > ins.excluded.best_s))

def _refute(s: Session, confirm: Job, why: str, t: float, retry: bool = True) -> None:
  """The confirm job's result is refuted and its search fails with the reason. With `retry`, while the search has attempts
  left, the refutation costs one and the kernel is searched again at once, by a worker the confirmation could have come
  from (in a fleet, none of the refuted worker's credentials): a stolen token's forgery must not leave a kernel untuned."""
  if confirm.confirms is None or (r := s.get_one(Result, confirm.confirms, with_for_update=True)).status != ResultStatus.UNCONFIRMED: return
  r.status, r.note = ResultStatus.REFUTED, why
  if (job := s.get_one(Job, r.job_id, with_for_update=True)).state != JobState.DONE: return
  job.state, job.finished, job.error = JobState.FAILED, t, job.error + f"result {r.id} refuted: {why}\n"
  if not retry or job.attempts + 1 >= job.max_attempts: return
  s.flush()  # the failed job leaves the unique index of requests before its retry enters it
  s.add(again := Job(kernel_key=job.kernel_key, device=job.device, settings=job.settings, settings_hash=job.settings_hash, state=JobState.QUEUED,
                     error=job.error, priority=job.priority, attempts=job.attempts + 1, max_attempts=job.max_attempts, created=t,
                     kind=JobKind.TUNE, submitter=job.submitter, avoid_worker=confirm.avoid_worker, avoid_registrant=confirm.avoid_registrant))
  s.flush()
  job.error += f"searched again as job {again.id}\n"

def invalidate(st: Store, reason: str, result_id: Optional[int] = None, kernel_key: Optional[str] = None,
               worker_id: Optional[int] = None) -> tuple[list[int], list[int]]:
  """An admin's verdict on one result, every result of a kernel, or every result a worker made or confirmed: they leave the
  best (the next confirmed result of each stands in), their jobs fail with the reason and each is searched again.
  (the results invalidated, the new jobs)."""
  t = time.time()
  with st.write() as s:
    q = select(Result).where(Result.status != ResultStatus.INVALIDATED)
    if result_id is not None: q = q.where(Result.id == result_id)
    if kernel_key is not None: q = q.where(Result.kernel_key == kernel_key)
    if worker_id is not None:
      confirmed = select(Result.id).where(Result.worker_id == worker_id, Result.status == ResultStatus.MEASUREMENT)
      q = q.where(or_(Result.worker_id == worker_id, Result.confirmed_by.in_(confirmed)))
    rows = s.scalars(q.with_for_update()).all()
    if result_id is not None and not rows and s.get(Result, result_id) is None: raise NotFound(f"result {result_id} not found")
    ids = [r.id for r in rows]
    s.execute(delete(Best).where(Best.result_id.in_(ids)))
    retune: list[tuple[KernelAST, str, dict, int, int]] = []
    for r in rows:
      r.status, r.note = ResultStatus.INVALIDATED, f"invalidated: {reason}"
      job = s.get_one(Job, r.job_id, with_for_update=True)
      if job.state == JobState.DONE and job.kind == JobKind.TUNE:
        job.state, job.finished, job.error = JobState.FAILED, t, job.error + f"result {r.id} invalidated: {reason}\n"
        retune.append((load(s.get_one(Kernel, job.kernel_key).document), job.device, job.settings, job.priority, job.max_attempts))
    s.flush()
    for key, fp, v in {(r.kernel_key, r.fingerprint_hash, r.action_space_version) for r in rows}:
      nxt = s.scalars(select(Result).where(Result.kernel_key == key, Result.fingerprint_hash == fp, Result.action_space_version == v,
                                           Result.status == ResultStatus.CONFIRMED).order_by(Result.best_s).limit(1)).first()
      if nxt is not None: _promote(st, s, nxt)
  return ids, [submit(st, [k], device, settings, prio, attempts)[0][0].id for k, device, settings, prio, attempts in retune]
