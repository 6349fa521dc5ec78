"""Submitting kernels for tuning, and reading jobs, kernels and their history."""
from __future__ import annotations
import math
from typing import Annotated, Optional
from fastapi import APIRouter, HTTPException, Path, Query, Request
from linearizer.ast import KernelAST, KernelValidationError, load
from tunesvc.api.auth import ANY, SUBMITTER, Caller
from tunesvc.api.models import CancelRequest, DEVICE, HEX64, MAX_INT, IdPath, JobOut, KernelDetail, KernelPage, KernelSummary, MeasurementOut, \
  ResultOut, SubmitRequest, SubmitResponse, storable
from tunesvc.states import JobState
from tunesvc.store import queue, reads

router = APIRouter(prefix="/v1", tags=["kernels"])
KeyPath = Annotated[str, Path(pattern=HEX64, description="the kernel key")]


def json_only(x, path: str = "$") -> None:
  """The CLI's rule (linearizer.ast.loads) for a document the API's JSON parser read: NaN and Infinity are not JSON."""
  if isinstance(x, float) and not math.isfinite(x):
    raise KernelValidationError(path, f"{'NaN' if x != x else ('-' if x < 0 else '') + 'Infinity'} is not JSON")
  if isinstance(x, dict):
    for k, v in x.items(): json_only(v, k if path == "$" else f"{path}.{k}")
  elif isinstance(x, list):
    for i, v in enumerate(x): json_only(v, f"{path}[{i}]")

def buffer_bytes(k: KernelAST) -> int:
  """The bytes a run allocates (each buffer's reached window, variables at their largest)."""
  kr = k.rebased()
  return sum(n * b.dtype.itemsize for b, n in zip(kr.buffers, kr.buffer_sizes({v.name: v.max for v in kr.vars})))

def load_all(docs: list[dict], field: str, max_bytes: Optional[int] = None) -> list[KernelAST]:
  """Validate every document (and with max_bytes, bound the memory a run needs); one 422 naming each bad one by index and JSON path."""
  out, errors = [], []
  for i, doc in enumerate(docs):
    try:
      json_only(doc)
      out.append(k := load(doc))
      storable(k.name, "name")
      if max_bytes is not None and (n := buffer_bytes(k)) > max_bytes:
        raise KernelValidationError("$", f"its buffers need {n:,} bytes, more than this service's limit of {max_bytes:,} (TUNESVC_MAX_KERNEL_BYTES)")
    except (KernelValidationError, ValueError) as e:
      path, msg = (e.path, e.message) if isinstance(e, KernelValidationError) else ("name", str(e))
      errors.append({"loc": ["body", field, i], "type": "invalid_kernel", "path": path, "msg": f"{field}[{i}] {path}: {msg}"})
  if errors: raise HTTPException(422, errors)
  return out


@router.post("/kernels", status_code=202, response_model=SubmitResponse, responses={429: {"description": "too many of the caller's jobs wait"}})
def submit(body: SubmitRequest, request: Request, who: Caller = SUBMITTER):
  """Queue a tuning job per kernel. A kernel with a queued, running or done job for the same device and search settings
  shares that job; a done one carries its result. A caller (a token; an address where there are none) may have at most
  TUNESVC_MAX_PENDING_JOBS queued or running."""
  kernels = load_all(body.kernels, "kernels", request.app.state.settings.max_kernel_bytes)
  settings = body.search.model_dump()
  if settings["action_space_version"] is None: del settings["action_space_version"]  # settings (and their hash) as before it existed
  if body.runs is not None and (body.model is None or len(body.runs) != len(kernels) or min(body.runs) < 1):
    raise HTTPException(422, "runs needs a model and one count of at least 1 per kernel")
  cfg = request.app.state.settings
  jobs = queue.submit(request.app.state.store, kernels, body.device, settings, body.priority, cfg.max_attempts, body.model, body.runs,
                      who.submitter, None if who.admin and cfg.tokens else cfg.max_pending_jobs)
  known, warnings = reads.devices(request.app.state.store), []
  if body.device not in known:
    warnings.append(f"no worker has registered device {body.device}: the jobs wait for one; registered: "
                    f"{', '.join(sorted(d for d in known if len(d) < 64)) or 'none'}")
  return SubmitResponse(jobs=[JobOut.of(j, r) for j, r in jobs], warnings=warnings)


@router.post("/jobs/{job_id}/cancel", response_model=JobOut, responses={403: {"description": "another caller's job, or a confirmation"},
                                                                       409: {"description": "the job has ended"}})
def cancel(job_id: IdPath, body: CancelRequest, request: Request, who: Caller = SUBMITTER):
  """A queued or running job ends failed with the reason; its worker stops at its next heartbeat. Only the caller that
  submitted it, or an admin, may cancel a job (confirmations: an admin)."""
  return JobOut.of(queue.cancel(request.app.state.store, job_id, body.reason, None if who.admin else who.submitter), None)


@router.get("/jobs/{job_id}", response_model=JobOut, dependencies=[ANY])
def job(job_id: IdPath, request: Request):
  if (found := reads.job(request.app.state.store, job_id)) is None: raise HTTPException(404, f"job {job_id} not found")
  return JobOut.of(*found)


@router.get("/kernels", response_model=KernelPage, dependencies=[ANY])
def kernels(request: Request, name: Annotated[Optional[str], Query(max_length=256, description="part of the name")] = None,
            device: Annotated[Optional[str], Query(pattern=DEVICE, description="has a job for this selector")] = None,
            state: Annotated[Optional[JobState], Query(description="has a job in this state")] = None,
            limit: Annotated[int, Query(ge=1, le=500)] = 50, offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0):
  st = request.app.state.store
  ks, more = reads.kernels(st, name, device, state, limit, offset)
  jobs = reads.jobs_of(st, [k.key for k in ks])
  return KernelPage(kernels=[KernelSummary(key=k.key, name=k.name, flops=k.flops, bytes=k.bytes, created=k.created,
                                           jobs=[JobOut.of(j, r) for j, r in jobs[k.key]]) for k in ks],
                    next_offset=offset + limit if more else None)


@router.get("/kernels/{key}", response_model=KernelDetail, dependencies=[ANY])
def kernel(key: KeyPath, request: Request):
  """The document, every job, every result and the measurements of each search."""
  if (h := reads.kernel(request.app.state.store, key)) is None: raise HTTPException(404, f"kernel {key} not found")
  k = h.kernel
  return KernelDetail(key=k.key, name=k.name, flops=k.flops, bytes=k.bytes, created=k.created, document=k.document,
                      jobs=[JobOut.of(j, r) for j, r in h.jobs],
                      results=[ResultOut.of(r, job_id=r.job_id, search_s=r.search_s, created=r.created,
                                            measurements=[MeasurementOut.model_validate(m) for m in h.measurements.get(j.id, [])])
                               for j, r in h.jobs if r is not None])
