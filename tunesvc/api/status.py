"""What the service is doing, read-only: its workers and its job queue (the dashboard's workers and queue pages)."""
from __future__ import annotations
import time
from typing import Annotated, Optional
from fastapi import APIRouter, Query, Request
from tunesvc.api.auth import ANY
from tunesvc.api.models import MAX_INT, JobPage, JobRow, WorkerPage, WorkerRow
from tunesvc.states import JobState, WorkerState
from tunesvc.store import reads

router = APIRouter(prefix="/v1", tags=["status"], dependencies=[ANY])
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=MAX_INT)]


@router.get("/workers", response_model=WorkerPage)
def workers(request: Request, limit: Limit = 50, offset: Offset = 0):
  """Every registered worker, newest first, with the job it is searching; offline once it has not been heard from for
  TUNESVC_WORKER_OFFLINE_S and holds no live lease."""
  ws, more = reads.workers(request.app.state.store, limit, offset)
  now, quiet_s = time.time(), request.app.state.settings.worker_offline_s
  def state(w, j) -> WorkerState:  # silent past quiet_s and holding no live lease: dead, or cut off from the service
    return WorkerState.OFFLINE if now - w.last_heartbeat > quiet_s and (j is None or j.lease_expires < now) else w.state
  return WorkerPage(workers=[WorkerRow(worker_id=w.id, name=w.name, device=w.device, fingerprint=w.fingerprint_hash, last_heartbeat=w.last_heartbeat,
                                       state=state(w, j), job_id=j and j.id, kernel_key=j and j.kernel_key, kernel_name=name) for w, j, name in ws],
                    next_offset=offset + limit if more else None, now=now)


@router.get("/jobs", response_model=JobPage)
def jobs(request: Request, state: Annotated[Optional[JobState], Query(description="only jobs in this state")] = None,
         limit: Limit = 50, offset: Offset = 0):
  """A page of jobs with attempts and errors: queued ones in claim order (priority, then age), the others newest first."""
  st = request.app.state.store
  js, more = reads.jobs(st, state, limit, offset)
  return JobPage(jobs=[JobRow.of(j, r, kernel_name=name, worker_id=j.lease_owner, lease_expires=j.lease_expires) for j, r, name in js],
                 next_offset=offset + limit if more else None, counts=reads.jobs_by_state(st))
