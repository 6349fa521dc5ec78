"""The store's tables. Times are Unix seconds (one float type on every database, no time-zone rules); JSON columns hold
what the API validated."""
from __future__ import annotations
from enum import StrEnum
from typing import Any, Optional
from sqlalchemy import JSON, BigInteger, Double, ForeignKey, Index, Integer, String, text, types
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from search.result import Status
from tunesvc.states import JobKind, JobState, ResultStatus, WorkerState

NOT_FAILED = f"state != '{JobState.FAILED}'"  # the jobs that answer a new identical request


class Text(types.TypeDecorator):
  """Free text that can always be written: PostgreSQL refuses NUL, and no database stores a lone surrogate."""
  impl, cache_ok = types.Text, True
  def process_bind_param(self, value, dialect):
    return None if value is None else value.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")

class Closed(types.TypeDecorator):
  """A member of a closed set (a StrEnum of tunesvc/states.py) in a VARCHAR column, as its value: a read gives the member
  back, a write or a comparison with a name outside the set raises (ValueError) before any SQL runs."""
  impl, cache_ok = String, True
  def __init__(self, enum: type[StrEnum], length: int = 16):
    super().__init__(length)
    self.enum, self.length = enum, length
  def process_bind_param(self, value, dialect): return None if value is None else self.enum(value).value
  def process_result_value(self, value, dialect): return None if value is None else self.enum(value)

class Base(DeclarativeBase):
  # SQLite numbers rows only through an INTEGER PRIMARY KEY
  type_annotation_map = {str: Text, int: BigInteger().with_variant(Integer, "sqlite"), float: Double, dict[str, Any]: JSON, list[Any]: JSON}

Hash = String(64)  # sha256 hex: kernel keys, fingerprint hashes, settings hashes


class Kernel(Base):
  __tablename__ = "kernels"
  key: Mapped[str] = mapped_column(Hash, primary_key=True)
  document: Mapped[dict[str, Any]]
  name: Mapped[Optional[str]] = mapped_column(index=True)
  flops: Mapped[int]
  bytes: Mapped[int]
  created: Mapped[float]
  # linearizer/alike.py's structure hash and full shape: the kernels alike (same op tree and views, other sizes) whose winners
  # seed a search of this one, nearest by sizes; None where the document no longer loads (a kernel alike of none)
  structure: Mapped[Optional[str]] = mapped_column(Hash, index=True)
  sizes: Mapped[Optional[list[Any]]]


class ModelKernel(Base):
  """A kernel of a model (a program whose kernels were captured and submitted together), with its runs per inference."""
  __tablename__ = "model_kernels"
  model: Mapped[str] = mapped_column(primary_key=True)
  kernel_key: Mapped[str] = mapped_column(ForeignKey("kernels.key"), primary_key=True)
  runs: Mapped[int]


class Fingerprint(Base):
  __tablename__ = "fingerprints"
  hash: Mapped[str] = mapped_column(Hash, primary_key=True)
  backend: Mapped[str] = mapped_column(String(32), index=True)
  json: Mapped[dict[str, Any]]
  options: Mapped[Optional[dict[str, Any]]]  # the LinearizerOptions its workers registered: what opts are legal on it


class Worker(Base):
  __tablename__ = "workers"
  id: Mapped[int] = mapped_column(primary_key=True)
  name: Mapped[str]
  device: Mapped[str]                   # the worker's own device, e.g. "CUDA:0"
  fingerprint_hash: Mapped[str] = mapped_column(ForeignKey("fingerprints.hash"))
  last_heartbeat: Mapped[float]
  state: Mapped[WorkerState] = mapped_column(Closed(WorkerState))
  key_hash: Mapped[Optional[str]] = mapped_column(Hash)  # sha256 of the key its registration was given: it proves it is this worker
  registrant: Mapped[Optional[str]] = mapped_column(String(64))  # the credentials it registered with (api/auth.py Caller)


class Job(Base):
  __tablename__ = "jobs"
  id: Mapped[int] = mapped_column(primary_key=True)
  kernel_key: Mapped[str] = mapped_column(ForeignKey("kernels.key"), index=True)
  device: Mapped[str] = mapped_column(String(64))  # selector: a backend name ("CPU") or an exact fingerprint hash
  settings: Mapped[dict[str, Any]]
  settings_hash: Mapped[str] = mapped_column(Hash)
  state: Mapped[JobState] = mapped_column(Closed(JobState))
  error: Mapped[str] = mapped_column(default="")  # one line per failed attempt
  priority: Mapped[int] = mapped_column(default=0)
  attempts: Mapped[int] = mapped_column(default=0)  # failed attempts: expired leases and reported failures
  max_attempts: Mapped[int]
  lease_owner: Mapped[Optional[int]] = mapped_column(ForeignKey("workers.id"))
  lease_expires: Mapped[Optional[float]]
  created: Mapped[float]
  started: Mapped[Optional[float]]
  finished: Mapped[Optional[float]]
  result_id: Mapped[Optional[int]]    # results.job_id points back; no FK here, so neither table needs the other first
  kind: Mapped[JobKind] = mapped_column(Closed(JobKind), default=JobKind.TUNE)
  confirms: Mapped[Optional[int]]     # a confirm job: the result whose opts it measures again
  avoid_worker: Mapped[Optional[int]]  # the worker that may not claim it: a confirm job's result's maker; a search's last failer
  avoid_registrant: Mapped[Optional[str]] = mapped_column(String(64))  # ... nor any worker registered with the same credentials
  last_owner: Mapped[Optional[int]]   # the worker whose lease lapsed last: it alone may still report the queued job
  not_before: Mapped[Optional[float]]  # refused as "device busy": no claim before then (queue.Backoff)
  busy: Mapped[int] = mapped_column(Integer, default=0)  # "device busy" refusals so far: bounded apart from failed attempts
  submitter: Mapped[Optional[str]] = mapped_column(String(64))  # who asked (api/auth.py Caller); None: the service itself
  __table_args__ = (
    Index("ix_jobs_claim", "state", "device", "priority"),
    Index("ix_jobs_submitter", "submitter", "state"),
    # identical requests share a job: one that is not failed per (kernel, selector, settings)
    Index("ux_jobs_request", "kernel_key", "device", "settings_hash", unique=True,
          sqlite_where=text(NOT_FAILED), postgresql_where=text(NOT_FAILED)),
  )


class Result(Base):
  __tablename__ = "results"
  id: Mapped[int] = mapped_column(primary_key=True)
  job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), unique=True)
  worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"))
  kernel_key: Mapped[str] = mapped_column(ForeignKey("kernels.key"), index=True)
  fingerprint_hash: Mapped[str] = mapped_column(ForeignKey("fingerprints.hash"))
  action_space_version: Mapped[int]
  best_opts: Mapped[list[Any]]
  best_s: Mapped[float]
  baseline_s: Mapped[float]
  speedup: Mapped[float]
  verified: Mapped[bool]
  search_s: Mapped[float]
  result: Mapped[dict[str, Any]]      # SearchResult.to_json(), candidates included
  created: Mapped[float]
  status: Mapped[ResultStatus] = mapped_column(Closed(ResultStatus), default=ResultStatus.UNCONFIRMED)
  confirmed_by: Mapped[Optional[int]]  # the confirm job's result that agreed (or disagreed)
  note: Mapped[str] = mapped_column(default="")  # why it was refuted or invalidated


class Measurement(Base):
  __tablename__ = "measurements"
  id: Mapped[int] = mapped_column(primary_key=True)
  job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
  round: Mapped[int]
  opts: Mapped[list[Any]]
  status: Mapped[Status] = mapped_column(Closed(Status, 32))
  error: Mapped[str]
  source_hash: Mapped[str]
  compile_s: Mapped[float]
  times: Mapped[list[Any]]
  min_s: Mapped[Optional[float]]
  verified: Mapped[bool]


class Best(Base):
  __tablename__ = "best"
  kernel_key: Mapped[str] = mapped_column(ForeignKey("kernels.key"), primary_key=True)
  fingerprint_hash: Mapped[str] = mapped_column(ForeignKey("fingerprints.hash"), primary_key=True)
  action_space_version: Mapped[int] = mapped_column(primary_key=True)
  result_id: Mapped[int] = mapped_column(ForeignKey("results.id"))
  best_s: Mapped[float]               # the result's, kept here so a replacement can be decided in one upsert


class CostModel(Base):
  """A cost model's prior trained from the store's measurements (search/prior.py's JSON form): rows of a candidate's
  features and its time relative to its kernel's hand-coded one, of one device family at one codegen and action-space version."""
  __tablename__ = "cost_models"
  family: Mapped[str] = mapped_column(String(64), primary_key=True)
  codegen_version: Mapped[int] = mapped_column(Integer, primary_key=True)
  action_space_version: Mapped[int] = mapped_column(Integer, primary_key=True)
  prior: Mapped[dict[str, Any]]
  rows: Mapped[int] = mapped_column(Integer)
  kernels: Mapped[int] = mapped_column(Integer)
  created: Mapped[float]
