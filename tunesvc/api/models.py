"""Request and response bodies of /v1. Requests reject unknown fields; every number the store keeps is bounded."""
from __future__ import annotations
import math
from typing import Annotated, Any, Optional, Self
from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator
from linearizer.kernel import Opt, OptError
from search.result import STORED, SearchResult, Seed, Status
from search.settings import JOB_FIELDS
from tunesvc.states import JobKind, JobState, ResultStatus, WorkerState
from tunesvc.store.models import Job, Result

HEX64 = r"^[0-9a-f]{64}$"
BACKEND = r"^[A-Z][A-Z0-9_]{0,31}$"
DEVICE = f"{BACKEND}|{HEX64}"  # a device selector
MAX_ID, MAX_INT = 2**63 - 1, 2**31 - 1
Hash = Annotated[str, Field(pattern=HEX64, description="sha256 hex")]
Device = Annotated[str, Field(pattern=DEVICE, description='a backend name ("CPU", "CUDA") or an exact fingerprint hash')]
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
IdPath = Annotated[int, Path(ge=1, le=MAX_ID)]
Version = Annotated[int, Field(ge=0, le=MAX_INT)]
LeaseS = Annotated[float, Field(ge=1, le=3600, description="seconds the lease lasts without a heartbeat")]
Document = Annotated[dict[str, Any], Field(description="a tunesvc.kernel/1 document")]


def storable(x: Any, path: str = "") -> Any:
  """Raise on what no column can hold or no response can carry: NaN, infinity, an integer past 64 bits, a lone surrogate."""
  if isinstance(x, str):
    try: x.encode()
    except UnicodeEncodeError: raise ValueError(f"{path or 'value'}: not valid Unicode (a lone surrogate)") from None
  if isinstance(x, float) and not math.isfinite(x): raise ValueError(f"{path or 'value'}: {x} is not a finite number")
  if isinstance(x, int) and not -2**63 <= x < 2**63: raise ValueError(f"{path or 'value'}: integer outside the 64-bit range")
  if isinstance(x, dict):
    for k, v in x.items():
      storable(k, path)
      storable(v, f"{path}.{k}" if path else k)
  if isinstance(x, (list, tuple)):
    for i, v in enumerate(x): storable(v, f"{path}[{i}]")
  return x

class Request(BaseModel): model_config = ConfigDict(extra="forbid")


# the search settings a job may set: search/settings.py's definition (names, types, bounds, help), the service's defaults
# for two of them (a shared service spends less per job than `tunesvc tune`)
SERVICE_DEFAULTS = {"beam": 2, "budget_s": 60.0}
_SETTINGS: dict[str, Any] = {name: (typ, Field(SERVICE_DEFAULTS.get(name, default), description=meta["help"], **meta["bounds"]))
                              for name, (typ, default, meta) in JOB_FIELDS.items()}
SearchSettings = create_model("SearchSettings", __base__=Request, **_SETTINGS, action_space_version=(Optional[Version], Field(None, description=
  "search with this action-space version: workers of another version leave the job (a runtime asks for the version it looks up); null: any")))

class SubmitRequest(Request):
  kernels: list[Document] = Field(min_length=1, max_length=1000)
  device: Device = "CPU"
  search: SearchSettings = SearchSettings()
  priority: int = Field(0, ge=-1000, le=1000, description="higher is claimed first")
  model: Optional[str] = Field(None, min_length=1, max_length=128, description="record the kernels as this model's (the dashboard groups them)")
  runs: Optional[list[int]] = Field(None, max_length=1000, description="with model: how often each kernel runs per inference")


class ResultSummary(BaseModel):
  result_id: int
  fingerprint: str
  action_space_version: int
  opts: list[dict[str, Any]]
  best_s: float
  baseline_s: float
  speedup: float
  verified: bool
  worker_id: int = Field(description="the worker that reported it")
  status: ResultStatus = Field(description="unconfirmed, confirmed (served), refuted, invalidated; unverified and a confirm job's measurement are "
                                  "never served")
  note: str = Field(description="why it was refuted or invalidated")

  @classmethod
  def of(cls, r: Result, **extra) -> Self:
    return cls(result_id=r.id, fingerprint=r.fingerprint_hash, action_space_version=r.action_space_version, opts=r.best_opts,
               best_s=r.best_s, baseline_s=r.baseline_s, speedup=r.speedup, verified=r.verified, worker_id=r.worker_id, status=r.status,
               note=r.note, **extra)

class JobOut(BaseModel):
  job_id: int
  kind: JobKind = Field(description="tune, or confirm: a second measurement of the result `confirms`")
  confirms: Optional[int]
  kernel_key: str
  device: str
  state: JobState
  error: str = Field(description="one line per failed attempt")
  attempts: int
  max_attempts: int
  not_before: Optional[float] = Field(description="a worker found its device too busy to time on: not claimed again before then (Unix seconds)")
  priority: int
  settings: dict[str, Any]
  created: float = Field(description="Unix seconds, as are started and finished")
  started: Optional[float]
  finished: Optional[float]
  result: Optional[ResultSummary]

  @classmethod
  def of(cls, j: Job, r: Optional[Result], **extra) -> JobOut:
    return cls(job_id=j.id, kind=j.kind, confirms=j.confirms, kernel_key=j.kernel_key, device=j.device, state=j.state, error=j.error,
               attempts=j.attempts, max_attempts=j.max_attempts, not_before=j.not_before, priority=j.priority, settings=j.settings,
               created=j.created, started=j.started, finished=j.finished, result=None if r is None else ResultSummary.of(r), **extra)

class SubmitResponse(BaseModel):
  jobs: list[JobOut]
  warnings: list[str] = Field([], description="e.g. no worker has registered this device: the jobs wait for one")

class CancelRequest(Request): reason: str = Field("cancelled by the user", min_length=1, max_length=4096)


class ModelKernelOut(BaseModel):
  key: str
  name: Optional[str]
  runs: int
  state: str = Field(description="done, running, queued or failed (the best of its jobs), or none")

class ModelOut(BaseModel):
  model: str
  kernels: int
  runs: int = Field(description="kernel runs per inference")
  states: dict[str, int] = Field(description="kernels per state")
  detail: Optional[list[ModelKernelOut]] = Field(None, description="GET /v1/models/{name}: a page of its kernels, most-run first")
  next_offset: Optional[int] = Field(None, description="the offset of the detail's next page; null on the last")

class ModelPage(BaseModel):
  models: list[ModelOut]
  next_offset: Optional[int] = Field(None, description="the offset of the next page; null on the last")


class KernelSummary(BaseModel):
  key: str
  name: Optional[str]
  flops: int
  bytes: int
  created: float
  jobs: list[JobOut]

class KernelPage(BaseModel):
  kernels: list[KernelSummary]
  next_offset: Optional[int] = Field(description="the offset of the next page; null on the last")

class MeasurementOut(BaseModel):
  model_config = ConfigDict(from_attributes=True)
  round: int
  opts: list[dict[str, Any]]
  status: Status
  error: str
  source_hash: str
  compile_s: float
  times: list[float]
  min_s: Optional[float]
  verified: bool

class ResultOut(ResultSummary):
  job_id: int
  search_s: float
  created: float
  measurements: list[MeasurementOut] = Field(description="every candidate the search measured, failures too")
  best_source: str = Field(description="the winner's rendered source")
  confirmed_by: Optional[int] = Field(description="the confirm measurement's result")
  conditions: dict[str, Any] = Field({}, description="how the final check measured: other_load (cores busy elsewhere), drift, retimed, "
                                     "busy, spread, and roofline where the search judged its best against a stream of its bytes "
                                     "(search/result.py); {} for results of older workers")
  seeds: list[Seed] = Field([], description="the warm starts its claim brought, whose each is, and what the search made of each "
                                            "(applied: its opts re-fitted to this kernel, measured in round 0; [] where dropped: not even "
                                            "its first opt legal here); [] for results of older workers")
  seeds_dropped: int = Field(0, description="how many seeds were dropped")

  @classmethod
  def of(cls, r: Result, **extra) -> Self:
    seeds = [Seed.from_json(w) for w in r.result.get("seeds", [])]
    return super().of(r, best_source=r.result["best_source"], confirmed_by=r.confirmed_by, conditions=r.result.get("conditions", {}),
                      seeds=seeds, seeds_dropped=sum(w.dropped for w in seeds), **extra)

class KernelDetail(KernelSummary):
  document: dict[str, Any]
  results: list[ResultOut]


class JobRow(JobOut):
  kernel_name: Optional[str]
  worker_id: Optional[int] = Field(description="the worker holding the lease while the job runs")
  lease_expires: Optional[float]

class JobPage(BaseModel):
  jobs: list[JobRow]
  next_offset: Optional[int] = Field(description="the offset of the next page; null on the last")
  counts: dict[JobState, int] = Field(description="every job by state")

class WorkerRow(BaseModel):
  worker_id: int
  name: str
  device: str
  fingerprint: str
  last_heartbeat: float = Field(description="Unix seconds of its last claim, heartbeat or report")
  state: WorkerState = Field(description="idle or busy, as of its last call; offline once silent past the settings' worker_offline_s")
  job_id: Optional[int] = Field(description="the running job it holds a lease on")
  kernel_key: Optional[str]
  kernel_name: Optional[str]

class WorkerPage(BaseModel):
  workers: list[WorkerRow]
  next_offset: Optional[int] = Field(description="the offset of the next page; null on the last")
  now: float = Field(description="the server's clock, to age heartbeats by")


class OptsOut(BaseModel):
  kernel_key: str
  fingerprint: str
  action_space_version: int
  opts: list[dict[str, Any]]
  best_s: float
  baseline_s: float

class LookupRequest(Request):
  fingerprint: Hash
  action_space_version: Optional[Version] = Field(None, description="null: the newest version tuned")
  keys: list[Hash] = Field([], max_length=1000)
  kernels: list[Document] = Field([], max_length=100, description="documents, for a caller that has not computed the keys")

class LookupResponse(BaseModel):
  results: list[Optional[OptsOut]] = Field(description="one per key, then one per document, in order; null where nothing is tuned")


class Fingerprint(BaseModel):
  """What makes a timing transferable (devices/*.py `fingerprint()`): the backend and whatever else the device module keeps."""
  model_config = ConfigDict(extra="allow")
  backend: str = Field(pattern=BACKEND)

  @model_validator(mode="after")
  def _storable(self) -> Fingerprint:
    storable(self.model_extra)
    return self

class RegisterRequest(Request):
  name: str = Field(min_length=1, max_length=128)
  device: str = Field(min_length=1, max_length=64, description='the worker\'s device, e.g. "CUDA:0"')
  fingerprint: Fingerprint
  fingerprint_hash: Hash = Field(description="the device module's fingerprint_hash(fingerprint): sha256 of its sorted JSON")
  options: dict[str, Any] = Field(description="the device module's options().to_json(): the LinearizerOptions whose opts its results "
                                  "may use; the first worker of a fingerprint registers them, every later one must send the same")

class WorkerOut(BaseModel):
  worker_id: int
  worker_key: str = Field(description="send it as X-Worker-Key with every later call for this worker: it alone proves the worker")

class ClaimRequest(Request):
  lease_s: LeaseS = 60.0
  action_space_version: Optional[Version] = Field(None, description="the worker's: it is given no job that asks for another")

class ClaimOut(BaseModel):
  job_id: int
  kind: JobKind = Field(description="tune: search; confirm: measure settings.opts again and report them as the best")
  kernel_key: str
  kernel: dict[str, Any]
  device: str
  settings: dict[str, Any]
  attempts: int = Field(description="failed attempts so far")
  lease_expires: float
  runs: int = Field(1, description="how often the kernel runs per inference (the most any model recorded): what its search is worth")
  warm: list[Seed] = Field([], description="a search's: schedules to start from besides the hand-coded one, with whose each is "
                            "(this kernel's served winners on other device fingerprints, then those of the nearest kernels alike -- "
                            "its structure, other sizes -- on the worker's); the result's seeds say what each became")

class HeartbeatRequest(Request):
  job_id: Id
  lease_s: LeaseS = 60.0

class HeartbeatOut(BaseModel):
  job_id: int
  lease_expires: float


def _result(r: SearchResult) -> SearchResult:
  storable(r.to_json())
  for i, c in enumerate(r.candidates):
    if c.status not in STORED: raise ValueError(f"candidates[{i}].status: {c.status[:40]!r} is not one of {', '.join(STORED)}")
  listed = [("best_opts", r.best_opts), ("baseline_opts", r.baseline_opts)] + [(f"candidates[{i}].opts", c.opts) for i, c in enumerate(r.candidates)]
  listed += [(f"seeds[{i}].{f}", opts) for i, w in enumerate(r.seeds) for f, opts in (("opts", w.opts), ("applied", w.applied))]
  for where, opts in listed:
    try: [Opt.from_json(o) for o in opts]
    except OptError as e: raise ValueError(f"{where}: {e}") from None
  if not 0 <= r.action_space_version <= MAX_INT: raise ValueError(f"action_space_version: outside [0, {MAX_INT}]")
  if not r.best_s > 0: raise ValueError("best_s: must be positive")
  return r

class ReportRequest(BaseModel):
  model_config = ConfigDict(extra="ignore")  # reaches into SearchResult, whose JSON also carries derived fields (min_s, failed)
  job_id: Id
  result: Optional[Annotated[SearchResult, AfterValidator(_result)]] = Field(None, description="the finished search (search/result.py's JSON)")
  error: Optional[str] = Field(None, min_length=1, max_length=65536, description="why the attempt failed, instead of a result")
  retry: bool = Field(True, description="with error: whether another attempt may succeed")
  busy: bool = Field(False, description="with error: the device was too busy to time on; no attempt is spent, the job waits "
                                        "(doubling delays, a bounded number of times) before it may be claimed again")

  @model_validator(mode="after")
  def _one(self) -> ReportRequest:
    if (self.result is None) == (self.error is None): raise ValueError("send exactly one of result and error")
    return self

class ReportOut(BaseModel):
  job_id: int
  state: JobState
  result_id: Optional[int]
  duplicate: bool = Field(False, description="the same report was stored before; nothing was written")

class ReleaseRequest(Request): job_id: Id


class InvalidateRequest(Request):
  reason: str = Field(min_length=1, max_length=4096, description="recorded on every result and job it affects")

class InvalidateOut(BaseModel):
  invalidated: list[int] = Field(description="the results invalidated")
  requeued: list[int] = Field(description="the new tuning jobs")


class CostModelOut(BaseModel):
  """A cost model's prior trained from the store (`tunesvc cost-model train`; search/prior.py reads it): rows of a
  candidate's features and its time relative to its kernel's hand-coded one, measured on the family's devices."""
  family: str = Field(description='the device family: backend and widest float vector, e.g. "cpu-w16"')
  codegen_version: int = Field(description="the CODEGEN_VERSION of the code its rows timed")
  action_space_version: int
  names: list[str] = Field(description="the features' names, in the rows' order after the time")
  kernels: list[str] = Field(description="the kernels measured (names, else keys)")
  rows: list[list[float]] = Field(description="[time relative to the kernel's hand-coded time, *features] per measured candidate")
  meta: dict[str, Any] = Field(description="how it was trained: source, searches, load filter")
  created: float = Field(description="when it was trained (Unix seconds)")
