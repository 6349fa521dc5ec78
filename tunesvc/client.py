"""The service's client: submit kernels and read jobs (users), register, claim, heartbeat and report (workers), and
`opts_for`, the runtime's question: the local cache, then the server, then None (run the hand-coded opts)."""
from __future__ import annotations
import logging, threading, time
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence
import httpcore, httpx
from linearizer.ast import KernelAST
from tunesvc.cache import OptsCache, well_formed

log = logging.getLogger("tunesvc.client")
RETRY_S = 30.0  # after a miss or an unreachable server, opts_for answers None for this long without asking again
REFRESH_S = 24 * 3600.0  # a cached answer older than this is asked again: a later search may have found faster opts
MAX_ANSWER_BYTES = 256 << 20  # the most any answer may hold (a page of 500 jobs, a kernel's every measurement)
MAX_LOOKUP_BYTES = 1 << 20    # the most opts_for's answer, one kernel's opts, may hold


def _doc(k: KernelAST | dict) -> dict: return k.to_json() if isinstance(k, KernelAST) else k

class Reportable(Protocol):  # a search.result.SearchResult: the client takes its JSON form, not the search package
  def to_json(self) -> dict: ...

_deadline = threading.local()  # .at: when this thread's call must have its answer (time.monotonic), or None

class _DeadlineStream(httpcore.NetworkStream):
  """A connection whose every read and write ends by the calling thread's deadline, besides httpx's timeout for each."""
  def __init__(self, stream: httpcore.NetworkStream): self.stream = stream
  def _left(self, timeout: Optional[float]) -> Optional[float]:
    if (at := getattr(_deadline, "at", None)) is None: return timeout
    if (left := at - time.monotonic()) <= 0: raise httpcore.ReadTimeout("the call's deadline passed")
    return left if timeout is None else min(timeout, left)
  def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes: return self.stream.read(max_bytes, self._left(timeout))
  def write(self, buffer: bytes, timeout: Optional[float] = None) -> None: self.stream.write(buffer, self._left(timeout))
  def close(self) -> None: self.stream.close()
  def start_tls(self, *args, **kw) -> httpcore.NetworkStream: return _DeadlineStream(self.stream.start_tls(*args, **kw))
  def get_extra_info(self, info: str) -> Any: return self.stream.get_extra_info(info)

class _DeadlineBackend(httpcore.NetworkBackend):
  def __init__(self, backend: httpcore.NetworkBackend): self.backend = backend
  def connect_tcp(self, *args, **kw) -> httpcore.NetworkStream: return _DeadlineStream(self.backend.connect_tcp(*args, **kw))
  def connect_unix_socket(self, *args, **kw) -> httpcore.NetworkStream: return _DeadlineStream(self.backend.connect_unix_socket(*args, **kw))
  def sleep(self, seconds: float) -> None: self.backend.sleep(seconds)

def _transport() -> httpx.HTTPTransport:
  t = httpx.HTTPTransport()
  # httpx does not take a network backend; its pool (httpcore's) does: the one private name this needs
  t._pool._network_backend = _DeadlineBackend(t._pool._network_backend)
  return t


class ServiceError(RuntimeError):
  def __init__(self, status: int, detail: Any):
    super().__init__(f"{status}: {detail}")
    self.status, self.detail = status, detail


class Client:
  def __init__(self, url: str = "http://127.0.0.1:8000", token: Optional[str] = None, timeout: float = 30.0,
               lookup_timeout: float = 0.5, cache_dir: str | Path | None = None, refresh_s: float = REFRESH_S):
    self.http = httpx.Client(base_url=url, timeout=timeout, headers={"Authorization": f"Bearer {token}"} if token else {}, transport=_transport())
    self.timeout = timeout
    self.lookup_timeout, self.cache, self.refresh_s = lookup_timeout, OptsCache(cache_dir), refresh_s
    self._ask_after: dict[tuple[str, str, int], float] = {}  # misses not to ask about again yet
    self._down_until = 0.0
    self.worker_keys: dict[int, str] = {}  # what the workers registered through this client prove themselves with

  def close(self) -> None: self.http.close()
  def __enter__(self) -> Client: return self
  def __exit__(self, *_) -> None: self.close()

  def _call(self, method: str, path: str, timeout: Optional[float] = None, max_bytes: int = MAX_ANSWER_BYTES, **kw) -> httpx.Response:
    """The answer, read whole within `timeout` (default: the client's) and `max_bytes`: httpx's timeouts bound each read,
    not the call, and a server (a compromised one, or anything at that address) could trickle or flood its answer."""
    limit = self.timeout if timeout is None else timeout
    body, _deadline.at = bytearray(), time.monotonic() + limit
    try:
      with self.http.stream(method, path, timeout=limit, **kw) as r:
        for chunk in r.iter_bytes():
          body += chunk
          if len(body) > max_bytes: raise ServiceError(r.status_code, f"the answer holds more than {max_bytes} bytes")
    finally: _deadline.at = None
    r = httpx.Response(r.status_code, content=bytes(body), request=r.request)
    if r.status_code >= 400:
      try: detail = r.json()["detail"]
      except (ValueError, KeyError, TypeError): detail = r.text
      raise ServiceError(r.status_code, detail)
    return r

  # users
  def submit(self, kernels: Sequence[KernelAST | dict], device: str = "CPU", search: Optional[dict] = None, priority: int = 0,
             timeout: Optional[float] = None, model: Optional[str] = None, runs: Optional[Sequence[int]] = None) -> list[dict]:
    """A job per kernel: [{"kernel_key", "job_id", "state", "result", ...}]; with `model`, recorded as its kernels (with
    each one's `runs`)."""
    body = {"kernels": [_doc(k) for k in kernels], "device": device, "search": search or {}, "priority": priority,
            **({"model": model, "runs": None if runs is None else list(runs)} if model else {})}
    out = self._call("POST", "/v1/kernels", json=body, timeout=timeout).json()
    for w in out.get("warnings", []): log.warning("tunesvc: %s", w)
    return out["jobs"]

  def cancel(self, job_id: int, reason: str = "cancelled by the user") -> dict:
    return self._call("POST", f"/v1/jobs/{job_id}/cancel", json={"reason": reason}).json()

  def job(self, job_id: int) -> dict: return self._call("GET", f"/v1/jobs/{job_id}").json()
  def kernel(self, key: str) -> dict: return self._call("GET", f"/v1/kernels/{key}").json()

  def kernels(self, name: Optional[str] = None, device: Optional[str] = None, state: Optional[str] = None, limit: int = 50,
              offset: int = 0) -> dict:
    """A page of kernels, newest first, each with its jobs: {"kernels": [...], "next_offset"}."""
    params = {k: v for k, v in {"name": name, "device": device, "state": state, "limit": limit, "offset": offset}.items() if v is not None}
    return self._call("GET", "/v1/kernels", params=params).json()

  def jobs(self, state: Optional[str] = None, limit: int = 50, offset: int = 0) -> dict:
    """A page of jobs (queued ones in claim order): {"jobs": [...], "next_offset", "counts"}."""
    return self._call("GET", "/v1/jobs", params={"limit": limit, "offset": offset, **({"state": state} if state else {})}).json()

  def lookup(self, fingerprint: str, keys: Sequence[str] = (), kernels: Sequence[KernelAST | dict] = (),
             action_space_version: Optional[int] = None, timeout: Optional[float] = None,
             max_bytes: int = MAX_ANSWER_BYTES) -> list[Optional[dict]]:
    """The tuned opts of each key, then of each document, or None where nothing is tuned."""
    body = {"fingerprint": fingerprint, "action_space_version": action_space_version, "keys": list(keys),
            "kernels": [_doc(k) for k in kernels]}
    return self._call("POST", "/v1/opts/lookup", json=body, timeout=timeout, max_bytes=max_bytes).json()["results"]

  def cost_model(self, family: str, codegen_version: Optional[int] = None, action_space_version: Optional[int] = None) -> Optional[dict]:
    """The cost model trained from the server's store for this device family and these versions (None: the newest), in
    search/prior.py's JSON form; None where none is trained."""
    params = {k: v for k, v in {"codegen_version": codegen_version, "action_space_version": action_space_version}.items() if v is not None}
    try: return self._call("GET", f"/v1/cost-models/{family}", params=params).json()
    except ServiceError as e:
      if e.status == 404: return None
      raise

  # workers
  def register(self, name: str, device: str, fingerprint: dict, fingerprint_hash: str, options: dict) -> int:
    """options: the device's LinearizerOptions JSON, which the service checks reported opts against."""
    out = self._call("POST", "/v1/workers", json={"name": name, "device": device, "fingerprint": fingerprint,
                                                   "fingerprint_hash": fingerprint_hash, "options": options}).json()
    self.worker_keys[out["worker_id"]] = out["worker_key"]
    return out["worker_id"]

  def _as_worker(self, worker_id: int, call: str, body: dict) -> httpx.Response:
    key = self.worker_keys.get(worker_id)
    return self._call("POST", f"/v1/workers/{worker_id}/{call}", json=body, headers={"X-Worker-Key": key} if key else {})

  def claim(self, worker_id: int, lease_s: float = 60.0, action_space_version: Optional[int] = None) -> Optional[dict]:
    """{"job_id", "kernel_key", "kernel", "settings", "lease_expires", ...}, or None when no job waits for this device
    (and, given the worker's action-space version, for that version)."""
    r = self._as_worker(worker_id, "claim", {"lease_s": lease_s, "action_space_version": action_space_version})
    return None if r.status_code == 204 else r.json()

  def heartbeat(self, worker_id: int, job_id: int, lease_s: float = 60.0) -> dict:
    """Extends the lease; ServiceError 409 when the job was taken away (stop searching it)."""
    return self._as_worker(worker_id, "heartbeat", {"job_id": job_id, "lease_s": lease_s}).json()

  def report(self, worker_id: int, job_id: int, result: Reportable) -> dict:
    """Idempotent: reporting again returns the stored result with "duplicate": true."""
    return self._as_worker(worker_id, "report", {"job_id": job_id, "result": result.to_json()}).json()

  def fail(self, worker_id: int, job_id: int, reason: str, retry: bool = True, busy: bool = False) -> dict:
    """busy: the device was too busy to time on (the job waits a while instead of spending an attempt)."""
    return self._as_worker(worker_id, "report", {"job_id": job_id, "error": reason, "retry": retry, "busy": busy}).json()

  def release(self, worker_id: int, job_id: int) -> dict:
    return self._as_worker(worker_id, "release", {"job_id": job_id}).json()

  # admins
  def invalidate(self, reason: str, result_id: Optional[int] = None, kernel_key: Optional[str] = None, worker_id: Optional[int] = None) -> dict:
    """Invalidate one result, a kernel's results or a worker's: {"invalidated": [result ids], "requeued": [job ids]}."""
    (what, ident), = [(w, i) for w, i in (("results", result_id), ("kernels", kernel_key), ("workers", worker_id)) if i is not None]
    return self._call("POST", f"/v1/admin/{what}/{ident}/invalidate", json={"reason": reason}).json()

  # the runtime
  def opts_for(self, kernel: KernelAST | str, fingerprint: str, action_space_version: int,
               submit: bool = False) -> Optional[list[dict]]:
    """The tuned opts of `kernel` (an AST or its key) on this device fingerprint, or None: then run the hand-coded ones.
    Asks the local cache, then the server (a short timeout; never raises for the network), and with `submit` queues a
    tuning job for a kernel the server has no answer for, on exactly this fingerprint: a worker on another model of the
    device would find opts that this one does not look up. A cached answer older than
    `refresh_s` is asked again, and stands where the server has none newer or does not answer."""
    key = kernel if isinstance(kernel, str) else kernel.key
    q = (key, fingerprint, action_space_version)
    if (hit := self.cache.get(*q, max_age_s=self.refresh_s)) is not None: return hit["opts"]
    # an answer past its refresh age is still a verified kernel: it stands whenever the server gives no newer one
    stale = None if (old := self.cache.get(*q)) is None else old["opts"]
    now = time.monotonic()
    if now < self._down_until or now < self._ask_after.get(q, 0.0): return stale
    try:
      answer = self.lookup(fingerprint, [key], action_space_version=action_space_version, timeout=self.lookup_timeout, max_bytes=MAX_LOOKUP_BYTES)[0]
      if answer is not None and not well_formed(answer, *q): raise ValueError(f"answered {str(answer)[:200]}")
    except Exception as e:  # whatever the network or the server does, the kernel runs: with the hand-coded opts
      log.warning("tunesvc at %s: %s; running %s opts for %.0fs", self.http.base_url, e, "hand-coded" if stale is None else "cached", RETRY_S)
      self._down_until = now + RETRY_S
      return stale
    if answer is not None:
      try: self.cache.put(answer)
      except OSError as e: log.warning("cannot cache the answer for kernel %s (%s): using it uncached", key, e)  # a full disk
      return answer["opts"]
    self._ask_after[q] = now + RETRY_S
    if stale is None and submit and isinstance(kernel, KernelAST):
      try: self.submit([kernel], fingerprint, {"action_space_version": action_space_version}, timeout=self.lookup_timeout)
      except (httpx.HTTPError, ServiceError) as e: log.warning("could not queue kernel %s for tuning: %s", key, e)
    return stale
