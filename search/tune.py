"""tune(): one kernel, one device -- the beam search wired to the compile pool and the sandboxed runner.

Candidates render and compile in the pool while the runner measures the ones ready; every timing runs with the pool
paused when the device is the CPU (compiles would share its cores). The reference output is computed once, before
any candidate runs. At the end the fastest few and the hand-coded baseline are re-timed, interleaved, and the
winner, always a verified candidate, is the one with the best median there.
"""
from __future__ import annotations
import contextlib, hashlib, importlib, os, statistics, tempfile, time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional
from devices import registry
from linearizer import ACTION_SPACE_VERSION
from linearizer.ast import KernelAST, loads
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower
from linearizer.options import LinearizerOptions
from search.actions import MAX_UOPS, actions_for
from search.beam import BeamSettings, beam_search
from search.pool import CompilePool
from search.result import OK, Candidate, SearchResult
from search.runner import Runner, write_case


class SearchError(RuntimeError): pass


@dataclass(frozen=True)
class SearchSettings:
  beam: int = 4
  budget_s: Optional[float] = 120.0
  budget_candidates: Optional[int] = None
  min_improvement: float = 0.01
  seed: int = 0                       # the input data's
  early_stop: float = 3.0             # stop timing a candidate this many times slower than the best
  min_time_s: float = 0.05            # measured time per candidate, split over repeats
  timeout_factor: float = 20.0        # a candidate's time limit: this many times the best (seeds: seed_timeout_s)
  seed_timeout_s: float = 120.0
  compile_timeout_s: float = 60.0
  final_top: int = 3                  # candidates re-timed against the baseline at the end
  final_rounds: int = 7
  workers: int = 0                    # compile processes; 0: one per core
  var_vals: Optional[dict] = None     # where to tune a symbolic kernel (default: each variable's midpoint)

  def to_json(self) -> dict: return asdict(self)


# ---- the pool's tasks: module-level, so a spawned worker finds them by name
_ASTS: dict[str, KernelAST] = {}

def render_task(module: str, key: str, doc: str, opts: tuple[Opt, ...], options: LinearizerOptions) -> tuple[Optional[str], int]:
  """(source, IR size) of the kernel under opts; no source past MAX_UOPS."""
  ast = _ASTS.get(key) or _ASTS.setdefault(key, loads(doc))
  prog = lower(Kernel(ast, options).apply_opts(opts))
  return (importlib.import_module(module).render(prog) if len(prog.uops) <= MAX_UOPS else None), len(prog.uops)

def compile_task(module: str, src: str) -> tuple[bytes, float]:
  t = time.perf_counter()
  return importlib.import_module(module).compile(src), time.perf_counter() - t


def tune(ast: KernelAST, device: str = "CPU", settings: SearchSettings = SearchSettings(), module: Optional[str] = None,
         progress: Optional[Callable[[int, Optional[float]], None]] = None) -> SearchResult:
  """Search the fastest verified schedule of `ast` on `device`. `module` swaps the backend module (tests plant faults
  with it); progress(candidates measured, best seconds so far) is called after each measurement (and may raise to
  abandon the search)."""
  start = time.monotonic()
  dev = importlib.import_module(module) if module else registry.get(device)
  vv = ast.var_vals(settings.var_vals)
  kr = ast.rebased()  # the runner allocates only what the kernel reaches; opts mean the same on it
  with tempfile.TemporaryDirectory(prefix="tunesvc-case-") as tmp, Runner(dev.__name__) as runner, \
       CompilePool(settings.workers or os.cpu_count() or 1, settings.compile_timeout_s) as pool:  # both start while the reference runs
    write_case(Path(tmp), kr, vv, settings.seed)
    runner.setup(Path(tmp), vv)
    search = _Search(dev, kr, settings, pool, runner, progress)
    root = Kernel(kr, dev.options())
    hand = root.copy()
    hand_coded_optimizations(hand)
    seeds = [hand, root] if hand.applied_opts else [root]
    s = settings
    measured = beam_search(seeds, actions_for(root.options), search.measure,
                           BeamSettings(s.beam, s.min_improvement, s.budget_candidates, s.budget_s), start)
    pool.close()
    base, win, med, ratios = search.final([c for _, c in measured], [o.to_json() for o in hand.applied_opts])
  fp = dev.fingerprint()
  return SearchResult(
    kernel_key=ast.key, kernel_name=ast.name or "", device=device, fingerprint=fp, fingerprint_hash=dev.fingerprint_hash(fp),
    action_space_version=ACTION_SPACE_VERSION, settings=s.to_json(), var_vals=vv, flops=ast.flops(vv), bytes=ast.bytes(vv),
    baseline_opts=base.opts, baseline_s=med[id(base)], best_opts=win.opts, best_s=med[id(win)],
    speedup=med[id(base)] / med[id(win)], speedup_spread=(min(ratios), max(ratios)), verified=win.verified,
    best_source=search.libs[win.source_hash][1], search_s=time.monotonic() - start, candidates=search.candidates)


class _Search:
  """The measuring side of one search: candidates through the pool into the runner, and the final check."""
  def __init__(self, dev, kr: KernelAST, s: SearchSettings, pool: CompilePool, runner: Runner, progress):
    self.dev, self.kr, self.s, self.pool, self.runner, self.progress = dev, kr, s, pool, runner, progress
    self.options = dev.options()
    self.best_s: Optional[float] = None
    self.sources: set[str] = set()                  # source hashes seen: the duplicate filter
    self.libs: dict[str, tuple[bytes, str]] = {}   # source hash -> (binary, source) of the verified candidates
    self.candidates: list[Candidate] = []

  def measure(self, kernels: list[Kernel], rnd: int, limit: int, deadline: float) -> list[tuple[Kernel, Candidate]]:
    """The beam's Measure: render all, compile the new sources, time each as it is ready (round 0 waits for all of its
    seeds and times them in order: the hand-coded one first sets the bar the unoptimised one is stopped early against)."""
    out: list[tuple[Kernel, Candidate]] = []
    mod, pool = self.dev.__name__, self.pool
    rendering = {pool.submit(render_task, mod, self.kr.key, self.kr.canonical, tuple(k.applied_opts), self.options): k for k in kernels}
    compiling: dict[int, tuple[Kernel, Candidate, str]] = {}
    order, ready = {id(k): i for i, k in enumerate(kernels)}, []
    def add(k: Kernel, c: Candidate) -> None:
      out.append((k, c))
      self.candidates.append(c)
      if c.status == OK and c.verified: self.best_s = min(self.best_s or c.min_s, c.min_s)
      if self.progress: self.progress(len(self.candidates), self.best_s)
    def more() -> bool: return len(out) < limit and time.monotonic() < deadline
    while (rendering or compiling) and more():
      for t, ok, val in pool.results(timeout=None if deadline == float("inf") else max(0.0, deadline - time.monotonic())):
        if t in rendering:
          k = rendering.pop(t)
          c = Candidate([o.to_json() for o in k.applied_opts], "", rnd)
          if not ok: add(k, _failed(c, "compile_error", f"rendering failed: {val}"))
          elif val[0] is None: add(k, _failed(c, "too_large", f"{val[1]} IR ops, more than {MAX_UOPS}"))
          elif (h := hashlib.sha256(val[0].encode()).hexdigest()) not in self.sources:  # else a duplicate: not measured
            self.sources.add(h)
            c.source_hash = h
            compiling[pool.submit(compile_task, mod, val[0])] = (k, c, val[0])
        elif t in compiling:
          k, c, src = compiling.pop(t)
          if not ok: add(k, _failed(c, "compile_error", val))
          else:
            c.compile_s = val[1]
            ready.append((order[id(k)], k, c, val[0], src))
        if rnd > 0 or not (rendering or compiling):
          for _, k, c, lib, src in sorted(ready, key=lambda r: r[0]):
            if more(): add(k, self.time(c, lib, src))
          ready.clear()
        if not more(): break
    pool.cancel()
    return out

  def time(self, c: Candidate, lib: bytes, src: str) -> Candidate:
    """Time and verify one compiled candidate; on the CPU the pool's workers are stopped meanwhile."""
    s, best = self.s, self.best_s
    # a hang's limit: the warm-up and two runs at timeout_factor x the best, and the minimum measured time
    limit = s.seed_timeout_s if best is None else max(2.0, 3 * s.timeout_factor * best) + s.min_time_s
    with self.pool.paused() if self.options.device == "CPU" else contextlib.nullcontext():
      m = self.runner.measure(lib, "kernel", check=True, timeout_s=limit, min_time_s=s.min_time_s,
                              early_stop_s=None if best is None else s.early_stop * best)
    c.status, c.times_s, c.error, c.verified = m.status, m.times_s, m.error, m.verified
    if c.status == OK: self.libs[c.source_hash] = (lib, src)
    return c

  def final(self, measured: list[Candidate], hand_opts: list[dict]):
    """Re-time the fastest few verified candidates and the baseline (the hand-coded one, else the unoptimised one),
    interleaved; the best median wins. (baseline, winner, medians by id, per-round baseline/winner ratios)."""
    s = self.s
    ok = sorted((c for c in measured if c.status == OK and c.verified), key=lambda c: c.min_s)
    if not ok:
      why = "; ".join(f"{c.opts or 'no opts'}: {c.status} {c.error}".strip() for c in self.candidates[:2])
      raise SearchError(f"no candidate ran correctly ({len(self.candidates)} tried); seeds: {why}")
    base = next((c for c in ok if c.opts == hand_opts), None) or next((c for c in ok if not c.opts), ok[0])
    finalists = list({id(c): c for c in [c for c in ok[:s.final_top] if c.min_s < s.early_stop * ok[0].min_s] + [base]}.values())
    rounds: dict[int, list[float]] = {id(c): [] for c in finalists}
    for r in range(s.final_rounds):
      for c in finalists[r % len(finalists):] + finalists[:r % len(finalists)]:  # rotated: no candidate always runs first
        m = self.runner.measure(self.libs[c.source_hash][0], "kernel", check=False, timeout_s=max(10.0, 50 * c.min_s),
                                min_time_s=s.min_time_s / 2, min_runs=1)
        if m.status == OK: rounds[id(c)].append(min(m.times_s))
      if self.progress: self.progress(len(self.candidates), self.best_s)  # the caller may abandon the search here too
    med = {i: statistics.median(t) if t else float("inf") for i, t in rounds.items()}
    win = min(finalists, key=lambda c: (med[id(c)], c is not base))
    return base, win, med, [b / w for b, w in zip(rounds[id(base)], rounds[id(win)])] or [1.0]


def _failed(c: Candidate, status: str, error: str) -> Candidate:
  c.status, c.error = status, error
  return c
