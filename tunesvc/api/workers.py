"""What a worker does over HTTP: register its device, claim a job under a lease, heartbeat, report, release.
The rules (who may report when, what an attempt costs) are in tunesvc/store/queue.py; here they become 403, 404, 409 and
422. Registration answers a worker key, and every later call for that worker carries it (X-Worker-Key): the worker
token is a role many share, the key is one worker's."""
from __future__ import annotations
import secrets
from typing import Annotated
from fastapi import APIRouter, Header, Request, Response
from tunesvc.api.auth import WORKER, Caller, role
from tunesvc.api.models import ClaimOut, ClaimRequest, HeartbeatOut, HeartbeatRequest, IdPath, JobOut, RegisterRequest, \
  ReleaseRequest, ReportOut, ReportRequest, WorkerOut
from tunesvc.states import JobKind, JobState
from tunesvc.store import queue, reads

router = APIRouter(prefix="/v1/workers", tags=["workers"], dependencies=[role("worker")])
# the key the worker's registration was given; a missing one is nobody's
WorkerKey = Annotated[str, Header(alias="X-Worker-Key", max_length=256, description="the worker_key its registration answered")]


@router.post("", response_model=WorkerOut, status_code=201, responses={429: {"description": "TUNESVC_MAX_LIVE_WORKERS reached"}})
def register(body: RegisterRequest, request: Request, who: Caller = WORKER):
  """A worker per process and device; its fingerprint decides which jobs it may claim. The token it registers with is
  recorded: in a fleet (TUNESVC_CONFIRM_ON_OTHER_WORKER) a result is confirmed only by a worker of another token."""
  key, cfg = secrets.token_urlsafe(32), request.app.state.settings
  w = queue.register(request.app.state.store, body.name, body.device, body.fingerprint.model_dump(), body.fingerprint_hash, body.options, key,
                     who.submitter, None if who.admin and cfg.tokens else (cfg.max_live_workers, cfg.worker_offline_s))
  return WorkerOut(worker_id=w.id, worker_key=key)


@router.post("/{worker_id}/claim", response_model=ClaimOut, responses={204: {"description": "no job for this worker's device"}})
def claim(worker_id: IdPath, body: ClaimRequest, request: Request, key: WorkerKey = ""):
  """The next job for this worker's fingerprint (selector = its backend or its exact hash), leased for lease_s."""
  if (got := queue.claim(request.app.state.store, worker_id, body.lease_s, body.action_space_version, key)) is None: return Response(status_code=204)
  j, k = got
  st = request.app.state.store
  warm = reads.warm_starts(st, k, worker_id, body.action_space_version) if j.kind == JobKind.TUNE else []
  return ClaimOut(job_id=j.id, kind=j.kind, kernel_key=j.kernel_key, kernel=k.document, device=j.device, settings=j.settings, attempts=j.attempts,
                  lease_expires=j.lease_expires, runs=reads.kernel_runs(st, j.kernel_key), warm=warm)


@router.post("/{worker_id}/heartbeat", response_model=HeartbeatOut, responses={409: {"description": "the job was taken away"}})
def heartbeat(worker_id: IdPath, body: HeartbeatRequest, request: Request, key: WorkerKey = ""):
  """Extend the lease. 409 when the job was taken away: stop searching it."""
  j = queue.heartbeat(request.app.state.store, worker_id, body.job_id, body.lease_s, key)
  return HeartbeatOut(job_id=j.id, lease_expires=j.lease_expires)


@router.post("/{worker_id}/report", response_model=ReportOut, responses={409: {"description": "another worker holds the job, or it ended"}})
def report(worker_id: IdPath, body: ReportRequest, request: Request, key: WorkerKey = ""):
  """A finished search (idempotent: a repeat returns the stored result), or why the attempt failed. Only the worker holding
  the lease may report; the result is checked against the kernel and the worker's fingerprint (422 naming what is wrong)
  and served once a confirm job's measurement agrees."""
  st = request.app.state.store
  if body.result is None:
    assert body.error is not None, "ReportRequest takes exactly one of result and error"
    j = queue.fail(st, worker_id, body.job_id, body.error, body.retry, request.app.state.settings.backoff() if body.busy else None, key)
    return ReportOut(job_id=j.id, state=j.state, result_id=None)
  r, duplicate = queue.report(st, worker_id, body.job_id, body.result, request.app.state.settings.proof(), key)
  request.app.state.recent_answers.clear()  # the new best is answered at once, here
  return ReportOut(job_id=r.job_id, state=JobState.DONE, result_id=r.id, duplicate=duplicate)


@router.post("/{worker_id}/release", response_model=JobOut)
def release(worker_id: IdPath, body: ReleaseRequest, request: Request, key: WorkerKey = ""):
  """Give the job back without costing an attempt (the worker is shutting down)."""
  return JobOut.of(queue.release(request.app.state.store, worker_id, body.job_id, key), None)
