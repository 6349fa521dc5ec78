"""The processes a search runs on -- the compile pool and a device's sandboxed runner -- kept for the next search of the
same process (a worker's jobs, a model's kernels, a benchmark's), so each starts once and not once per search: a
spawned Python that imports numpy and the linearizer is ~0.3 s a process on a quiet machine (~5 s at load 15), a small
kernel's whole search a few seconds. A confirmation leases the runner alone.

A search leases them and gives them back when it ends well; one that raised (stopped, failed, a renderer bug) closes
them, as they may be mid-task. A runner is replaced after RUNNER_SEARCHES searches: the libraries it loaded stay
mapped until its process ends. Leases are exclusive: searches running at once get processes of their own.

It keeps the last CASES cases too (a kernel's inputs and its reference output, search/runner.py write_case): the
confirmation of a result this process just found reads the search's instead of running the reference interpreter again
(seconds on a large kernel) -- and the last BUILDS builds of the schedules a search ended with (its baseline and winner),
so that the confirmation runs the very libraries the search timed instead of lowering and compiling both again (0.2-0.6
s of a microsecond kernel's confirmation; the search compiled them in batches, which the compile cache keys as one)."""
from __future__ import annotations
import atexit, contextlib, hashlib, json, shutil, tempfile, threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional
from devices.base import Binary
from linearizer.ast import KernelAST
from search.pool import CompilePool
from search.runner import Runner, write_case


@dataclass(frozen=True)
class Built:
  source: str
  binary: Binary   # a library holding the entry point `name` (a search's batch: other candidates' too)
  name: str


class Workshop:
  RUNNER_SEARCHES = 32
  CASES = 4
  BUILDS = 16

  def __init__(self) -> None:
    self._lock = threading.Lock()
    self._pools: dict[tuple[int, float], CompilePool] = {}        # idle, by (workers, compile timeout)
    self._runners: dict[str, tuple[Runner, int]] = {}            # idle, by device module: (runner, searches it ran)
    self._builds: OrderedDict[tuple[str, str, str], Built] = OrderedDict()  # (device module, kernel key, opts) -> its build
    self._cases: OrderedDict[tuple, Path] = OrderedDict()        # (kernel key, var_vals, seed) -> its directory, oldest first
    self._in_use: Counter[Path] = Counter()                      # cases a search reads now: never removed meanwhile

  @contextlib.contextmanager
  def lease(self, module: str, workers: int, compile_timeout_s: float) -> Iterator[tuple[CompilePool, Runner]]:
    with self.runner(module) as runner, self.pool(workers, compile_timeout_s) as pool: yield pool, runner

  @contextlib.contextmanager
  def pool(self, workers: int, compile_timeout_s: float) -> Iterator[CompilePool]:
    with self._lock: pool = self._pools.pop((workers, compile_timeout_s), None)
    pool = pool or CompilePool(workers, compile_timeout_s)
    ok = False
    try:
      yield pool
      ok = True
    finally:
      with self._lock:
        if keep := ok and (workers, compile_timeout_s) not in self._pools: self._pools[(workers, compile_timeout_s)] = pool
      if not keep: pool.close()

  @contextlib.contextmanager
  def runner(self, module: str) -> Iterator[Runner]:
    with self._lock: runner, used = self._runners.pop(module, (None, 0))
    runner = runner if runner is not None and runner.proc.is_alive() else Runner(module)
    ok = False
    try:
      yield runner
      ok = True
    finally:
      with self._lock:
        if keep := ok and used + 1 < self.RUNNER_SEARCHES and module not in self._runners and runner.proc.is_alive():
          self._runners[module] = (runner, used + 1)
      if not keep: runner.close()

  @contextlib.contextmanager
  def idle_paused(self) -> Iterator[None]:
    """The idle pools stopped while the block times on the CPU: a search that ended leaves its last compiles running
    (their results unread), and a confirmation timed right after it counted them as the rest of the machine's load --
    4 of a decoder's 10 confirmations waited for a quiet second and timed again, on a quiet machine."""
    with self._lock: pools = list(self._pools.values())
    with contextlib.ExitStack() as stack:
      for p in pools: stack.enter_context(p.paused())
      yield

  def keep_build(self, module: str, kernel_key: str, opts: list[dict], built: Built) -> None:
    with self._lock:
      self._builds[(module, kernel_key, json.dumps(opts))] = built
      while len(self._builds) > self.BUILDS: self._builds.popitem(last=False)

  def build(self, module: str, kernel_key: str, opts: list[dict]) -> Optional[Built]:
    """The build a search of this process kept for the schedule, if any."""
    with self._lock: return self._builds.get((module, kernel_key, json.dumps(opts)))

  @contextlib.contextmanager
  def case(self, k: KernelAST, var_vals: dict[str, int], seed: int) -> Iterator[Path]:
    """The directory of k's case (written here unless kept from before), kept while the block reads it."""
    key = (k.key, tuple(sorted(var_vals.items())), seed)
    with self._lock:
      if (d := self._cases.get(key)) is not None:
        self._cases.move_to_end(key)
        self._in_use[d] += 1
    if d is None:  # named by its key: a runner that holds the case of a directory's name holds this one (Runner.setup)
      d = Path(tempfile.mkdtemp(prefix=f"tunesvc-case-{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}-"))
      try: write_case(d, k, var_vals, seed)
      except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
      with self._lock:
        self._in_use[d] += 1
        if (old := self._cases.pop(key, None)) is not None: self._evict(old)  # another search wrote it meanwhile
        self._cases[key] = d
    try: yield d
    finally:
      with self._lock:
        self._in_use[d] -= 1
        while len(self._cases) > self.CASES: self._evict(self._cases.popitem(last=False)[1])
        if d not in self._cases.values(): self._evict(d)

  def _evict(self, d: Path) -> None:
    if not self._in_use[d]:
      del self._in_use[d]
      shutil.rmtree(d, ignore_errors=True)

  def close(self) -> None:
    """Close every idle process and remove the cases no search reads (leased ones close when their search ends)."""
    with self._lock:
      pools, runners = list(self._pools.values()), [r for r, _ in self._runners.values()]
      self._pools.clear()
      self._runners.clear()
      self._builds.clear()
      for d in self._cases.values(): self._evict(d)
      self._cases.clear()
    for p in pools: p.close()
    for r in runners: r.close()


WORKSHOP = Workshop()  # the process's: tune()'s and confirm()'s default
atexit.register(WORKSHOP.close)
