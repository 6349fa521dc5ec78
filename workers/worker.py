"""The worker: one process per device. It claims a job under a lease, searches it, keeps the lease alive with
heartbeats while it does, and reports the result -- or why it failed. SIGTERM or SIGINT stops it cleanly: a job
in progress goes back to the queue without costing an attempt. It talks to the service over HTTP only."""
from __future__ import annotations
import logging, os, signal, socket, threading, time
from typing import Callable, Optional
import httpx
from devices import registry
from linearizer.ast import KernelValidationError, load
from linearizer import ACTION_SPACE_VERSION, CODEGEN_VERSION
from search.builder import RenderBug
from search.prior import Prior, family
from search.result import Seed
from search.settings import SearchSettings, StrategyKind
from search.tune import DeviceBusy, SearchError, SearchStopped, tune
from tunesvc.client import Client, ServiceError
from tunesvc.states import JobKind
from workers.confirm import CONFIRM_KEYS, confirm

log = logging.getLogger("tunesvc.worker")
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 30.0  # the backoff while the service is away
PRIOR_REFRESH_S = 600.0  # how long a fetched cost model serves before it is asked for again (training is offline and occasional)


def settings_of(job: dict) -> SearchSettings:
  """The job's search settings; ValueError on a name a job may not set (the machine owns its cores, for one)."""
  settings = job.get("settings") or {}
  if job.get("kind") == JobKind.CONFIRM: settings = {k: v for k, v in settings.items() if k not in CONFIRM_KEYS}
  return SearchSettings.from_json(settings, job=True)


def warm_of(job: dict) -> list[Seed]:
  """The schedules a job asks the search to start from besides the hand-coded one (winners of the kernel elsewhere, of
  kernels alike here), with whose each is: each opt checked where it is applied (an illegal one ends its schedule there,
  a schedule whose first opt is illegal is dropped); an entry that is no seed is left out."""
  warm, out = job.get("warm") or [], []
  for w in warm if isinstance(warm, list) else []:
    try: out.append(Seed.from_json(w))
    except (TypeError, ValueError): continue
  return [w for w in out if isinstance(w.opts, list)]


def runs_of(job: dict) -> int:
  """How often the job's kernel runs per inference of its model (what its search is worth), 1 where unknown."""
  runs = job.get("runs")
  return runs if isinstance(runs, int) and not isinstance(runs, bool) and runs >= 1 else 1


class Worker:
  def __init__(self, client: Client, device: str = "CPU", name: Optional[str] = None, lease_s: float = 60.0, poll_s: float = 2.0,
               module: Optional[str] = None, stopping: Optional[threading.Event] = None):
    self.client, self.device, self.lease_s, self.poll_s, self.module = client, device, lease_s, poll_s, module
    self.dev = registry.get(device)
    fp = self.dev.fingerprint()
    self.fingerprint_hash = self.dev.fingerprint_hash(fp)
    self.id = client.register(name or f"{socket.gethostname()}:{os.getpid()}:{device}", device, fp, self.fingerprint_hash,
                              self.dev.options().to_json())
    self.stopping = stopping or threading.Event()  # set: finish no more jobs, give the current one back
    self._prior: tuple[float, Optional[Prior]] = (-PRIOR_REFRESH_S, None)  # (when fetched, the service's trained cost model)

  def prior(self) -> Optional[Prior]:
    """The cost model trained from the service's store for this device's family at this worker's versions
    (`tunesvc cost-model train`), fetched at most every PRIOR_REFRESH_S; None where none is trained (the search ranks by
    the prior shipped with it). Where the service does not answer, what was fetched before."""
    fetched, prior = self._prior
    if time.monotonic() - fetched < PRIOR_REFRESH_S: return prior
    try:
      d = self.client.cost_model(family(self.dev.options()), CODEGEN_VERSION, ACTION_SPACE_VERSION)
      prior = None if d is None else Prior.from_json(d)
    except Exception as e: log.warning("cannot fetch the cost model: %s", e)  # the search still runs, on the shipped prior
    self._prior = (time.monotonic(), prior)
    return prior

  def run(self, max_jobs: Optional[int] = None, until_idle: bool = False) -> int:
    """Claim and search jobs until stopped (or max_jobs are done; or, `until_idle`, until a claim finds no job it may take
    now: a batch run); returns how many were finished."""
    done = 0
    while not self.stopping.is_set() and (max_jobs is None or done < max_jobs):
      try:
        if (job := self.client.claim(self.id, self.lease_s, ACTION_SPACE_VERSION)) is None and until_idle: break
      except Exception as e:  # the service is away (not idle): wait and try again, never crash
        log.warning("claim failed: %s", e)
        job = None
      if job is None:
        self.stopping.wait(self.poll_s)
        continue
      done += self.work(job)
    return done

  def work(self, job: dict) -> bool:
    """Search one claimed job and report it; True if it finished (done or failed for good)."""
    jid, lost, stop, done = job["job_id"], threading.Event(), threading.Event(), threading.Event()
    try: settings = settings_of(job)
    except ValueError as e:  # a job this worker cannot search as asked: no retry either
      return self.fail(jid, f"bad search settings: {e}", retry=False)
    def beat() -> None:  # heartbeats; and the search's stop once the lease is lost or the worker is stopping
      next_beat = time.monotonic() + self.lease_s / 4
      while not done.wait(0.1):
        if self.stopping.is_set(): stop.set()
        if time.monotonic() < next_beat: continue
        next_beat = time.monotonic() + self.lease_s / 4
        try: self.client.heartbeat(self.id, jid, self.lease_s)
        except ServiceError as e:
          if e.status in (404, 409):  # taken away: stop searching it
            lost.set()
            stop.set()
        except Exception as e: log.warning("heartbeat for job %s failed: %s", jid, e)  # the lease may still hold
    hb = threading.Thread(target=beat, daemon=True)
    hb.start()
    try:
      if job.get("kind") == JobKind.CONFIRM:
        result = confirm(load(job["kernel"]), self.device, job["settings"]["opts"], settings, module=self.module, stop=stop)
      else:
        prior = self.prior() if settings.strategy.strategy is StrategyKind.MODEL else None
        result = tune(load(job["kernel"]), self.device, settings, module=self.module, stop=stop, warm=warm_of(job), runs=runs_of(job), prior=prior)
    except SearchStopped:
      if not lost.is_set(): self.deliver(jid, "release", lambda: self.client.release(self.id, jid))  # stopping: no attempt spent
      return False
    except DeviceBusy as e:  # back to the queue with the reason, to wait a while: later the machine may be quiet
      return self.fail(jid, f"device busy: {e}", retry=True, busy=True)
    except (KernelValidationError, SearchError, RenderBug, MemoryError) as e:  # the same input fails the same way: no retry
      return self.fail(jid, f"{type(e).__name__}: {e}", retry=False)
    except Exception as e:
      log.exception("job %s failed", jid)
      return self.fail(jid, f"{type(e).__name__}: {e}", retry=True)
    finally:
      done.set()
      hb.join()
    if self.deliver(jid, "result", lambda: self.client.report(self.id, jid, result)):
      log.info("job %s: %s %.3g ms -> %.3g ms", jid, job["kernel_key"][:12], result.baseline_s * 1e3, result.best_s * 1e3)
    return True

  def fail(self, jid: int, reason: str, retry: bool, busy: bool = False) -> bool:
    """Report the attempt failed (the reason bound here, not an except clause's name a deferred call would lose)."""
    return self.deliver(jid, "failure", lambda: self.client.fail(self.id, jid, reason, retry=retry, busy=busy))

  def deliver(self, jid: int, what: str, call: Callable[[], object]) -> bool:
    """Send a finished job's outcome, riding out the service being away (network errors, 5xx: again after a backoff that
    doubles to RETRY_MAX_S, for as long as it takes -- a finished search is kept, not lost); True once it is taken.
    A refusal (4xx: the job was taken away, the result rejected) is logged and dropped: sending it again cannot help."""
    delay = RETRY_FIRST_S
    while True:
      try:
        call()
        return True
      except ServiceError as e:
        if e.status < 500:
          log.error("job %s: the service refused the %s: %s", jid, what, e)
          return False
        err: Exception = e
      except httpx.TransportError as e: err = e
      if self.stopping.is_set(): return False  # shutting down: the lease lapses instead and the job is searched again
      log.warning("job %s: cannot send the %s (%s): again in %.1f s", jid, what, err, delay)
      time.sleep(delay)
      delay = min(2 * delay, RETRY_MAX_S)


def main(server: str, token: Optional[str], device: str, lease_s: float = 60.0, max_jobs: Optional[int] = None) -> int:
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
  logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
  stopping, interrupted = threading.Event(), threading.Event()
  def stop(sig: int, _) -> None:
    if sig == signal.SIGINT: interrupted.set()
    stopping.set()
  for sig in (signal.SIGTERM, signal.SIGINT): signal.signal(sig, stop)
  with Client(server, token) as client:
    while True:  # the service may still be starting, or away for a while: register once it answers
      try:
        w = Worker(client, device, lease_s=lease_s, stopping=stopping)
        break
      except ServiceError as e:
        if e.status in (401, 403): raise SystemExit(f"ERROR {server}: {e.detail}") from None  # a wrong token stays wrong
        log.warning("cannot register with %s: %s", server, e)
      except Exception as e: log.warning("cannot register with %s: %s", server, e)
      if stopping.wait(2): return 0
    log.info("worker %s on %s (fingerprint %s) serving %s", w.id, device, w.fingerprint_hash, server)
    w.run(max_jobs)
  if interrupted.is_set(): log.info("worker %s stopped (Ctrl-C)", w.id)  # the user's; SIGTERM's sender (serve, demo) says its own
  return 0
