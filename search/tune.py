"""tune(): one kernel, one device -- the beam search wired to the compile pool and the sandboxed runner.

Candidates render and compile in the pool while the runner measures the ones ready; every timing runs with the pool
paused when the device is the CPU (compiles would share its cores). The reference output is computed once, before
any candidate runs. At the end the fastest few and the hand-coded baseline are re-timed, interleaved, and the
winner, always a verified candidate, is the one with the best median there.
"""
from __future__ import annotations
import contextlib, hashlib, importlib, os, statistics, tempfile, time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional
from devices import registry
from linearizer.ast import KernelAST, loads
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower
from linearizer.options import LinearizerOptions
from search.actions import ACTION_SPACE_VERSION, MAX_UOPS, actions_for
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


@dataclass
class _State:
  best_s: Optional[float] = None
  sources: set = field(default_factory=set)         # source hashes seen: the duplicate filter
  libs: dict = field(default_factory=dict)          # source hash -> (binary, source) of the verified candidates
  candidates: list = field(default_factory=list)


def tune(ast: KernelAST, device: str = "CPU", settings: SearchSettings = SearchSettings(), module: Optional[str] = None,
         progress: Optional[Callable[[int, Optional[float]], None]] = None) -> SearchResult:
  """Search the fastest verified schedule of `ast` on `device`. `module` swaps the backend module (tests plant faults
  with it); progress(candidates measured, best seconds so far) is called after each measurement."""
  start = time.monotonic()
  dev = importlib.import_module(module) if module else registry.get(device)
  options = dev.options()
  cpu = options.device == "CPU"  # compiles share its cores: the pool is paused while the runner times
  vv = ast.var_vals(settings.var_vals)
  kr = ast.rebased()  # the runner allocates only what the kernel reaches; opts mean the same on it
  st = _State()
  with tempfile.TemporaryDirectory(prefix="tunesvc-case-") as tmp, Runner(dev.__name__) as runner, \
       CompilePool(settings.workers or os.cpu_count() or 1, settings.compile_timeout_s) as pool:  # both start while the reference runs
    write_case(Path(tmp), kr, vv, settings.seed)
    runner.setup(Path(tmp), vv)
    def measure(kernels: list[Kernel], rnd: int, limit: int, deadline: float) -> list[tuple[Kernel, Candidate]]:
      out: list[tuple[Kernel, Candidate]] = []
      def add(k: Kernel, c: Candidate) -> None:
        out.append((k, c))
        if c.status == OK and c.verified: st.best_s = min(st.best_s or c.min_s, c.min_s)
        if progress: progress(len(st.candidates) + len(out), st.best_s)
      rendering = {pool.submit(render_task, dev.__name__, kr.key, kr.canonical, tuple(k.applied_opts), options): k for k in kernels}
      compiling: dict[int, tuple[Kernel, Candidate, str]] = {}
      order = {id(k): i for i, k in enumerate(kernels)}
      ready: list = []
      while (rendering or compiling) and len(out) < limit and time.monotonic() < deadline:
        for t, ok, val in pool.results(timeout=None if deadline == float("inf") else max(0.0, deadline - time.monotonic())):
          if t in rendering:
            k = rendering.pop(t)
            c = Candidate([o.to_json() for o in k.applied_opts], "", rnd)
            if not ok: add(k, _failed(c, "compile_error", f"rendering failed: {val}"))
            elif val[0] is None: add(k, _failed(c, "too_large", f"{val[1]} IR ops, more than {MAX_UOPS}"))
            elif (h := hashlib.sha256(val[0].encode()).hexdigest()) not in st.sources:  # else a duplicate: not measured
              st.sources.add(h)
              c.source_hash = h
              compiling[pool.submit(compile_task, dev.__name__, val[0])] = (k, c, val[0])
          elif t in compiling:
            k, c, src = compiling.pop(t)
            if not ok: add(k, _failed(c, "compile_error", val))
            else:
              c.compile_s = val[1]
              ready.append((order[id(k)], k, c, val[0], src))
          # round 0 measures its seeds in their order, once all are compiled: the hand-coded one first sets the bar
          # the unoptimised one is stopped early against
          if rnd > 0 or not (rendering or compiling):
            for _, k, c, lib, src in sorted(ready, key=lambda r: r[0]):
              if len(out) < limit and time.monotonic() < deadline: add(k, _measure(runner, pool if cpu else None, c, lib, src, settings, st))
            ready.clear()
          if len(out) >= limit or time.monotonic() >= deadline: break
      pool.cancel()
      st.candidates += [c for _, c in out]
      return out

    root = Kernel(kr, options)
    hand = root.copy()
    hand_coded_optimizations(hand)
    seeds = [hand, root] if hand.applied_opts else [root]
    measured = beam_search(seeds, actions_for(options), measure,
                           BeamSettings(settings.beam, settings.min_improvement, settings.budget_candidates, settings.budget_s), start)
    pool.close()
    return _final(ast, device, dev, runner, measured, hand, settings, st, vv, start)


def _failed(c: Candidate, status: str, error: str) -> Candidate:
  c.status, c.error = status, error
  return c


def _measure(runner: Runner, pool: Optional[CompilePool], c: Candidate, lib: bytes, src: str, s: SearchSettings, st: _State) -> Candidate:
  """Time and verify one compiled candidate; with `pool`, its workers are stopped while the runner times."""
  # a hang's limit: the warm-up and two runs at timeout_factor x the best, and the minimum measured time
  limit = s.seed_timeout_s if st.best_s is None else max(2.0, 3 * s.timeout_factor * st.best_s) + s.min_time_s
  with pool.paused() if pool else contextlib.nullcontext():
    m = runner.measure(lib, "kernel", check=True, timeout_s=limit, min_time_s=s.min_time_s,
                       early_stop_s=None if st.best_s is None else s.early_stop * st.best_s)
  c.status, c.times_s, c.error, c.verified = m.status, m.times_s, m.error, m.verified
  if c.status == OK: st.libs[c.source_hash] = (lib, src)
  return c


def _final(ast: KernelAST, device: str, dev, runner: Runner, measured: list[tuple[Kernel, Candidate]], hand: Kernel,
           s: SearchSettings, st: _State, vv: dict, start: float) -> SearchResult:
  """Re-time the fastest few verified candidates and the baseline, interleaved; the best median wins."""
  ok = sorted((c for _, c in measured if c.status == OK and c.verified), key=lambda c: c.min_s)
  if not ok:
    why = "; ".join(f"{c.opts or 'no opts'}: {c.status} {c.error}".strip() for c in st.candidates[:2])
    raise SearchError(f"no candidate ran correctly ({len(st.candidates)} tried); seeds: {why}")
  hand_opts = [o.to_json() for o in hand.applied_opts]
  base = next((c for c in ok if c.opts == hand_opts), None) or next((c for c in ok if not c.opts), ok[0])
  finalists = list({id(c): c for c in [c for c in ok[:s.final_top] if c.min_s < s.early_stop * ok[0].min_s] + [base]}.values())
  rounds: dict[int, list[float]] = {id(c): [] for c in finalists}
  for r in range(s.final_rounds):
    for c in finalists[r % len(finalists):] + finalists[:r % len(finalists)]:  # rotated: no candidate always runs first
      m = runner.measure(st.libs[c.source_hash][0], "kernel", check=False, timeout_s=max(10.0, 50 * c.min_s), min_time_s=s.min_time_s / 2, min_runs=1)
      if m.status == OK: rounds[id(c)].append(min(m.times_s))
  med = {i: statistics.median(t) if t else float("inf") for i, t in rounds.items()}
  win = min(finalists, key=lambda c: (med[id(c)], c is not base))
  ratios = [b / w for b, w in zip(rounds[id(base)], rounds[id(win)])] or [1.0]
  fp = dev.fingerprint()
  return SearchResult(
    kernel_key=ast.key, kernel_name=ast.name or "", device=device, fingerprint=fp, fingerprint_hash=dev.fingerprint_hash(fp),
    action_space_version=ACTION_SPACE_VERSION, settings=s.to_json(), var_vals=vv, flops=ast.flops(vv), bytes=ast.bytes(vv),
    baseline_opts=base.opts, baseline_s=med[id(base)], best_opts=win.opts, best_s=med[id(win)],
    speedup=med[id(base)] / med[id(win)], speedup_spread=(min(ratios), max(ratios)), verified=win.verified,
    best_source=st.libs[win.source_hash][1], search_s=time.monotonic() - start, candidates=st.candidates)
