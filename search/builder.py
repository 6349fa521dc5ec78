"""The builder: schedules to binaries in the compile pool, as typed build results.

A schedule renders (lowering, then the device's renderer) and its new sources compile; a source seen before is a
duplicate and not built again. A build fails as too large (past MAX_UOPS, never compiled) or as a compile error (the
candidate's failure, kept with the compiler's message). A render error is tunesvc's bug, not a failed candidate:
lowering and rendering must take every schedule the Kernel accepted, so it raises RenderBug; one that overran the pool's
time limit fails as the candidate's TIMEOUT."""
from __future__ import annotations
import hashlib, importlib, threading, time
from dataclasses import dataclass
from typing import Generator, Optional
from devices.base import Binary
from linearizer.ast import KernelAST, loads
from linearizer.kernel import Kernel, Opt
from linearizer.lower import PastLimit, lower
from linearizer.options import LinearizerOptions
from search.actions import MAX_UOPS
from search.pool import CompilePool
from search.result import Status


class RenderBug(RuntimeError):
  """Lowering or rendering raised on a schedule the Kernel accepted."""


@dataclass
class Build:
  kernel: Kernel
  source: str = ""
  source_hash: str = ""
  ir_size: int = 0                    # uops of the linear IR
  launch: tuple = ()                  # (work-groups, work-items) per launch dim where the device has local dims
  binary: Binary = Binary(b"")        # a library holding the entry point `name`, maybe with other candidates' too
  name: str = "kernel"
  compile_s: float = 0.0
  error: Optional[Status] = None     # TOO_LARGE or COMPILE_ERROR: the candidate's status
  message: str = ""


# ---- the pool's tasks: module-level, so a spawned worker finds them by name
_ASTS: dict[str, KernelAST] = {}

def _ast(key: str, doc: str) -> KernelAST:
  if key not in _ASTS and len(_ASTS) >= 16: _ASTS.clear()  # a long-lived worker sees many kernels, a search one
  return _ASTS.get(key) or _ASTS.setdefault(key, loads(doc))

def render_task(module: str, key: str, doc: str, opts: tuple[Opt, ...], options: LinearizerOptions) -> tuple[Optional[str], int, tuple]:
  """(source, IR size, launch) of the kernel under opts; no source past MAX_UOPS, whose lowering stops once its IR is sure
  to end past it (lower's limit: the IR size is then MAX_UOPS + 1)."""
  try: prog = lower(Kernel(_ast(key, doc), options).apply_opts(opts), limit=MAX_UOPS)
  except PastLimit: return None, MAX_UOPS + 1, ()
  src = importlib.import_module(module).render(prog) if len(prog.uops) <= MAX_UOPS else None
  return src, len(prog.uops), (prog.groups, prog.local) if prog.local else ()

def compile_task(module: str, src: str) -> tuple[Binary, float]:
  t = time.perf_counter()
  return importlib.import_module(module).compile(src), time.perf_counter() - t

def compile_batch_task(module: str, srcs: list[str]) -> tuple[Binary, float]:
  """One library for all of srcs (the device's compile_batch): source i's entry point is kernel_i."""
  t = time.perf_counter()
  return importlib.import_module(module).compile_batch(srcs), time.perf_counter() - t


class Builder:
  """Where the device module has compile_batch (the CPU), new sources compile up to BATCH at a time in one compiler
  invocation (a batch that fails is compiled again source by source, so each candidate gets its own compile error);
  elsewhere one by one. Batches form once the kernels have rendered (compiles would wait behind the renders in the
  pool's queue anyway), in the kernels' order in waves of a batch per worker, each wave's sources split over its
  batches by their length (balanced: below); the same kernels make the same batches, which the compile cache then
  holds (a search run again, the test suite's)."""
  BATCH = 16      # sources per batch: its fixed cost (cc1 starting, the headers, as and the link: ~37 ms of CPU) is shared by more

  def __init__(self, pool: CompilePool, module: str, k: KernelAST, options: LinearizerOptions, batch: bool = True):
    self.pool, self.module, self.k, self.options = pool, module, k, options
    self.batch = batch and hasattr(importlib.import_module(module), "compile_batch")
    self.sources: set[str] = set()     # source hashes seen: the duplicate filter

  def build(self, kernels: list[Kernel], deadline: float = float("inf"), stop: Optional[threading.Event] = None,
            need: Optional[int] = None) -> Generator[Build, None, None]:
    """Builds of the kernels as they finish (failures too, duplicates left out), until all are done, the deadline
    passes or `stop` is set; the consumer may stop early, and the queued tasks are dropped. `need`: how many the consumer
    may take at most (a budget's last candidates): no batch is larger than its share of them a worker."""
    pool, mod = self.pool, self.module
    cap = self.BATCH if need is None else max(1, min(self.BATCH, -(-need // pool.workers)))
    rendering = {pool.submit(render_task, mod, self.k.key, self.k.canonical, tuple(k.applied_opts), self.options): k for k in kernels}
    compiling: dict[int, list[Build]] = {}
    waiting: list[Build] = []       # new sources not yet compiling
    order = {id(k): i for i, k in enumerate(kernels)}
    first: dict[str, int] = {}      # source hash -> the first of the kernels that rendered it (whichever rendered first is built)
    def flush() -> None:
      waiting.sort(key=lambda b: first[b.source_hash])
      parts = max(pool.workers, -(-len(waiting) // cap))
      n = max(1, -(-len(waiting) // parts)) if self.batch else 1
      wave = n * pool.workers  # the batches the workers compile at once: the first kernels first (a budget takes those)
      for group in (g for i in range(0, len(waiting), wave) for g in balanced(waiting[i:i + wave], n)):
        for j, b in enumerate(group): b.name = f"kernel_{j}" if self.batch else "kernel"
        if self.batch: compiling[pool.submit(compile_batch_task, mod, [b.source for b in group])] = group
        else: compiling.update({pool.submit(compile_task, mod, b.source): [b] for b in group})
      waiting.clear()
    try:
      while (rendering or compiling or waiting) and time.monotonic() < deadline and not (stop and stop.is_set()):
        for t, ok, val in pool.results(timeout=max(0.0, min(deadline - time.monotonic(), 0.25))):  # wakes to see `stop`
          if t in rendering:
            k = rendering.pop(t)
            # past the pool's limit, the candidate's: lowering a schedule far past MAX_UOPS in full took minutes at load 8
            # (sops_296's UPCAST 0 16, THREAD 0 2, UPCAST 1 16: 38,544 IR ops, 15.7 CPU-s; stopped at 2x MAX_UOPS now)
            if isinstance(val, TimeoutError):
              yield _failed(Build(k), Status.TIMEOUT, f"lowering and rendering {val}")
              continue
            if not ok: raise RenderBug(f"rendering {[o.to_json() for o in k.applied_opts]} failed: {val}")
            src, size, launch = val
            b = Build(k, ir_size=size, launch=launch)
            if src is None: yield _failed(b, Status.TOO_LARGE, f"at least {size} IR ops, more than {MAX_UOPS}")
            elif (h := hashlib.sha256(src.encode()).hexdigest()) in first: first[h] = min(first[h], order[id(k)])  # a duplicate
            elif h not in self.sources:  # else built for an earlier call
              self.sources.add(h)
              first[h] = order[id(k)]
              b.source, b.source_hash = src, h
              waiting.append(b)
          elif t in compiling:
            group = compiling.pop(t)
            if ok:
              for b in group: b.binary, b.compile_s = val[0], val[1] / len(group)
              yield from group
            elif len(group) > 1:  # one bad source fails its batch: each again on its own
              compiling.update({pool.submit(compile_task, mod, b.source): [b] for b in group})
              for b in group: b.name = "kernel"
            else: yield _failed(group[0], Status.COMPILE_ERROR, str(val))
        if not rendering: flush()
    finally: pool.cancel()


def balanced(builds: list[Build], most: int) -> list[list[Build]]:
  """builds in as few groups of at most `most` as hold them, their sources' total lengths balanced (the longest first, each
  into the shortest group with room; ties by order): a batch's compile time follows the length of its sources (gcc -O3 on a
  corpus kernel's children: 60-720 ms CPU a source alone, correlation 0.81-0.95 with its length), and a round's builds
  end with the slower of the batches the workers compile at once: halves in order put a round's longest sources in one
  (the model strategy's rounds of six kernels compiled again both ways: the slower batch 2-19% less CPU, BUSY). Each
  group, and the groups by their first, in the given order."""
  groups: list[list[Build]] = [[] for _ in range(-(-len(builds) // most))]
  for b in sorted(builds, key=lambda b: -len(b.source)):  # stable: among equal lengths, the given order
    min((g for g in groups if len(g) < most), key=lambda g: sum(len(x.source) for x in g)).append(b)
  at = {id(b): i for i, b in enumerate(builds)}
  return sorted((sorted(g, key=lambda b: at[id(b)]) for g in groups), key=lambda g: at[id(g[0])])


def _failed(b: Build, error: Status, message: str) -> Build:
  b.error, b.message = error, message
  return b
