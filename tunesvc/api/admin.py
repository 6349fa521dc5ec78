"""An admin's verdicts on stored results: invalidate one result, every result of a kernel, or every result a worker made or
confirmed. Lookups fall back at once (to the next confirmed result, or a miss) and each affected search is queued again."""
from __future__ import annotations
from fastapi import APIRouter, Request
from tunesvc.api.auth import role
from tunesvc.api.kernels import KeyPath
from tunesvc.api.models import IdPath, InvalidateOut, InvalidateRequest
from tunesvc.store import queue

router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[role("admin")])


def _invalidate(request: Request, reason: str, **which) -> InvalidateOut:
  ids, jobs = queue.invalidate(request.app.state.store, reason, **which)
  request.app.state.recent_answers.clear()  # this process stops answering with them at once; others within answer_ttl_s
  return InvalidateOut(invalidated=ids, requeued=jobs)

@router.post("/results/{result_id}/invalidate", response_model=InvalidateOut)
def invalidate_result(result_id: IdPath, body: InvalidateRequest, request: Request): return _invalidate(request, body.reason, result_id=result_id)

@router.post("/kernels/{key}/invalidate", response_model=InvalidateOut)
def invalidate_kernel(key: KeyPath, body: InvalidateRequest, request: Request): return _invalidate(request, body.reason, kernel_key=key)

@router.post("/workers/{worker_id}/invalidate", response_model=InvalidateOut)
def invalidate_worker(worker_id: IdPath, body: InvalidateRequest, request: Request):
  """Every result the worker reported, and every result its measurement confirmed (a stolen token, a faulty device)."""
  return _invalidate(request, body.reason, worker_id=worker_id)
