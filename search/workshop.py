"""The processes a search runs on -- the compile pool and a device's sandboxed runner -- kept for the next search of the
same process (a worker's jobs, a model's kernels, a benchmark's), so each starts once and not once per search: a
spawned Python that imports numpy and the linearizer is ~0.3 s a process, a small kernel's whole search a few seconds.

A search leases them and gives them back when it ends well; one that raised (stopped, failed, a renderer bug) closes
them, as they may be mid-task. A runner is replaced after RUNNER_SEARCHES searches: the libraries it loaded stay
mapped until its process ends. Leases are exclusive: searches running at once get processes of their own."""
from __future__ import annotations
import atexit, contextlib, threading
from typing import Iterator
from search.pool import CompilePool
from search.runner import Runner


class Workshop:
  RUNNER_SEARCHES = 32

  def __init__(self) -> None:
    self._lock = threading.Lock()
    self._pools: dict[tuple[int, float], CompilePool] = {}        # idle, by (workers, compile timeout)
    self._runners: dict[str, tuple[Runner, int]] = {}            # idle, by device module: (runner, searches it ran)

  @contextlib.contextmanager
  def lease(self, module: str, workers: int, compile_timeout_s: float) -> Iterator[tuple[CompilePool, Runner]]:
    with self._lock:
      pool = self._pools.pop((workers, compile_timeout_s), None)
      runner, used = self._runners.pop(module, (None, 0))
    pool = pool or CompilePool(workers, compile_timeout_s)
    try: runner = runner if runner is not None and runner.proc.is_alive() else Runner(module)
    except BaseException:
      pool.close()
      raise
    ok = False
    try:
      yield pool, runner
      ok = True
    finally:
      with self._lock:
        keep_pool = ok and (workers, compile_timeout_s) not in self._pools
        keep_runner = ok and used + 1 < self.RUNNER_SEARCHES and module not in self._runners and runner.proc.is_alive()
        if keep_pool: self._pools[(workers, compile_timeout_s)] = pool
        if keep_runner: self._runners[module] = (runner, used + 1)
      if not keep_pool: pool.close()
      if not keep_runner: runner.close()

  def close(self) -> None:
    """Close every idle process (leased ones close when their search ends)."""
    with self._lock:
      pools, runners = list(self._pools.values()), [r for r, _ in self._runners.values()]
      self._pools.clear()
      self._runners.clear()
    for p in pools: p.close()
    for r in runners: r.close()


WORKSHOP = Workshop()  # the process's: tune()'s default
atexit.register(WORKSHOP.close)
