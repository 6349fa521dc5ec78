"""tune(): one kernel, one device -- the orchestration: a strategy (beam search, or beam search guided by a cost model)
proposes, the builder compiles in the pool, the sandboxed runner measures, within the budget and until the caller's stop event.

Candidates render and compile in the pool while the runner measures the ones ready; every timing runs with the pool
paused when the device is the CPU (compiles would share its cores). The reference output is computed once, before
any candidate runs. A search whose fastest verified candidate moves the bytes its kernel must move as fast as a stream
of them, timed beside it, ends there (search/roofline.py). At the end the fastest few and the hand-coded baseline are
re-timed, interleaved, and the winner, always a verified candidate, is the one with the best median there.
"""
from __future__ import annotations
import contextlib, importlib, os, statistics, threading, time
from dataclasses import replace
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Optional, Sequence
from devices import registry
from linearizer import ACTION_SPACE_VERSION
from linearizer.ast import KernelAST
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt
from search.actions import actions_for
from search.beam import BeamStrategy
from search.builder import Build, Builder
from search.load import checked, drift
from search.model_beam import ModelBeamStrategy, prior_data
from search import prior as priors, roofline
from search.pool import CompilePool
from search.result import Candidate, SearchResult, Seed, SeedSource, Status
from search.runner import Runner
from search.settings import OnBusy, SearchSettings, StrategyKind
from search.similar import Tuned, refit, variants
from search.strategy import drive
from search.workshop import WORKSHOP, Built, Workshop


class SearchError(RuntimeError): pass

class DeviceBusy(RuntimeError):
  """The rest of the machine kept the device contended through every final check: no result (try again later)."""

class SearchStopped(Exception):
  """The caller's stop event was set: the search was abandoned, nothing is stored."""


def tune(ast: KernelAST, device: str = "CPU", settings: SearchSettings = SearchSettings(), module: Optional[str] = None,
         progress: Optional[Callable[[int, Optional[float]], None]] = None, stop: Optional[threading.Event] = None,
         warm: Sequence[Seed] = (), workshop: Optional[Workshop] = None, runs: int = 1, alike: Sequence[Tuned] = (),
         prior: Optional[priors.Prior] = None) -> SearchResult:
  """Search the fastest verified schedule of `ast` on `device` within the settings' budget. `module` swaps the backend
  module (tests plant faults with it); progress(candidates measured, best seconds so far) is called after each
  measurement; setting `stop` abandons the search (SearchStopped) within a candidate's timing. `warm`: schedules to
  start from besides the hand-coded one (winners found elsewhere: warm_seeds), re-fitted to these sizes; round 1 tries
  their variants (search/similar.py); the result's seeds say what each became (dropped where not even its first opt is
  legal here). `alike`: kernels alike tuned before on this device: their winners are warm starts too, and what their
  searches measured trains the cost model that orders the children from round 1 on (with the beam strategy it orders
  them, the model strategy's measure_top cut stays, its model fitted on the prior shipped for the device's family too:
  search/prior.py). `prior`: the model strategy's prior in place of the shipped one (a service's, trained from its
  store; refused, with a log line, where it is of another family, codegen or action space: the shipped one then).
  `workshop`: where the compile pool and the runner come from and go back to (default: the process's,
  search/workshop.py). `runs`: how often the kernel runs per inference of its model: with its hand-coded time, what the
  search is worth (the share of the budget it gets after the seeds: StrategySettings.effort)."""
  start = time.monotonic()
  dev = importlib.import_module(module) if module else registry.get(device)
  s, vv = settings, ast.var_vals(settings.var_vals)
  kr = ast.rebased()  # the runner allocates only what the kernel reaches; opts mean the same on it
  ws = workshop or WORKSHOP
  with ws.lease(dev.__name__, s.build.workers or os.cpu_count() or 1, s.build.compile_timeout_s) as (pool, runner), \
       contextlib.ExitStack() as held, ThreadPoolExecutor(2) as bg:
    # the reference runs (numpy, mostly outside the GIL) while the seeds render and compile; the first timing waits for it
    def prepare() -> None: runner.setup(held.enter_context(ws.case(kr, vv, s.measure.seed)), vv)
    case = bg.submit(prepare)
    # the roofline's stream (search/roofline.py), compiled meanwhile too
    stream = bg.submit(roofline.build, dev, kr, vv) if s.strategy.roofline else None
    root = Kernel(kr, dev.options())
    hand = root.copy()
    hand_coded_optimizations(hand)
    actions = actions_for(root.options)
    given = [*warm, *(Seed(t.result.best_opts, SeedSource.ALIKE, t.ast.key, t.result.fingerprint_hash) for t in alike)]
    given = [replace(w, applied=[o.to_json() for o in refit(root, w.opts, actions).applied_opts]) for w in given]
    schedules = [w.opts for w in given]
    seeds, extra = warm_seeds(root, [hand.applied_opts, [], *schedules], actions), [v for w in schedules for v in variants(root, w, actions)]
    data, model = prior_data(alike, root.options), s.strategy.strategy is StrategyKind.MODEL
    # the beam's order from a warm start's data stays as it was measured (bench/warm_start.py): the shipped prior is the model strategy's
    fitted = priors.model(root.options, data, prior) if model else None
    strategy = ModelBeamStrategy(seeds, actions, s.strategy, extra, data, cut=model, fitted=fitted) if model or data \
      else BeamStrategy(seeds, actions, s.strategy, extra)
    search = _Search(dev, s, Builder(pool, dev.__name__, kr, dev.options(), s.build.batch), pool, runner, progress, stop, case,
                     [o.to_json() for o in hand.applied_opts], runs, strategy.go_on_below, stream)
    def deadline() -> float: return start + s.budget_s * search.effort if s.budget_s is not None else float("inf")
    measured = drive(strategy, search.measure, s.budget_candidates, deadline, stop, search.at_roofline)
    case.result()
    search.check_stop()
    with pool.paused() if dev.options().device == "CPU" else contextlib.nullcontext():  # a compile still running waits
      base, win, med, ratios, conditions = search.final([c for _, c in measured])
  for c in (base, win):  # for the confirmation, which runs these two again (workers/confirm.py)
    b = search.libs[c.source_hash]
    ws.keep_build(dev.__name__, kr.key, c.opts, Built(b.source, b.binary, b.name))
  fp = dev.fingerprint()
  return SearchResult(
    kernel_key=ast.key, kernel_name=ast.name or "", device=device, fingerprint=fp, fingerprint_hash=dev.fingerprint_hash(fp),
    action_space_version=ACTION_SPACE_VERSION, settings=s.to_json(), var_vals=vv, flops=ast.flops(vv), bytes=ast.bytes(vv),
    baseline_opts=base.opts, baseline_s=med[id(base)], best_opts=win.opts, best_s=med[id(win)],
    speedup=med[id(base)] / med[id(win)], speedup_spread=(min(ratios), max(ratios)), verified=win.verified,
    best_source=search.libs[win.source_hash].source, search_s=time.monotonic() - start, candidates=search.candidates, conditions=conditions,
    seeds=given)


class _Search:
  """The measuring side of one search: builds into the runner, and the final check."""
  def __init__(self, dev, s: SearchSettings, builder: Builder, pool: CompilePool, runner: Runner, progress, stop,
               case: Optional[Future] = None, hand_opts: Optional[list[dict]] = None, runs: int = 1,
               go_on_below: Callable[[], float] = lambda: float("inf"), stream: Optional[Future] = None):
    self.dev, self.s, self.builder, self.pool, self.runner, self.progress, self.stop = dev, s, builder, pool, runner, progress, stop
    self.case = case  # the runner's setup, done once it is (its exception raised at the first timing)
    self.hand_opts, self.runs = hand_opts or [], runs
    self.effort = 1.0  # the share of the budget this kernel is worth, known once the seeds are measured
    self.go_on_below = go_on_below  # the strategy's (search/beam.py): which checks its beam needs
    self.options = dev.options()
    self.best_s: Optional[float] = None
    self.libs: dict[str, Build] = {}   # source hash -> build of the candidates timed in full
    self.candidates: list[Candidate] = []
    self.stream = stream  # the roofline's stream being built (roofline.build); None once there is none to judge by
    self.judged: Optional[Candidate] = None  # the candidate last judged against it
    self.roofline: dict = {}  # that judgement, for the result's conditions

  def check_stop(self) -> None:
    if self.stop and self.stop.is_set(): raise SearchStopped("the search was stopped")

  def measure(self, kernels: list[Kernel], rnd: int, limit: int, deadline: float) -> list[tuple[Kernel, Candidate]]:
    """The strategy's Measure: build all, time each as it is ready (round 0 waits for all of its seeds and times them in
    order: the hand-coded one first sets the bar the unoptimised one is stopped early against)."""
    out: list[tuple[Kernel, Candidate]] = []
    order = {id(k): i for i, k in enumerate(kernels)}
    def add(k: Kernel, c: Candidate) -> None:
      out.append((k, c))
      self.candidates.append(c)
      self.note_best(c)
      if self.progress: self.progress(len(self.candidates), self.best_s)
    def more() -> bool: return len(out) < limit and time.monotonic() < deadline and not (self.stop and self.stop.is_set())
    seeds, slow, builds = [], [], self.builder.build(kernels, deadline, self.stop, None if rnd == 0 else limit)
    check = rnd == 0 or self.s.measure.verify_all
    for b in builds:
      c = Candidate([o.to_json() for o in b.kernel.applied_opts], Status.PENDING, rnd, b.source_hash, compile_s=b.compile_s)
      if b.error: add(b.kernel, _failed(c, b.error, b.message))
      elif rnd == 0: seeds.append((b, c))  # the seeds are timed together, in order, once all are built
      elif more():
        add(b.kernel, self.time(c, b, check))
        if c.status is Status.SLOW: slow.append((c, b))
      if rnd > 0 and not more(): break
    builds.close()
    for b, c in sorted(seeds, key=lambda p: order[id(p[0].kernel)]):
      if more(): add(b.kernel, self.time(c, b, check))
    if slow and not any(c.status is Status.OK for _, c in out): self.retime_bar(slow, check)
    if not check: self.verify_fastest([c for _, c in out], self.go_on_below())
    if rnd == 0: self.weigh([c for _, c in out])
    return out

  def weigh(self, seeds: list[Candidate]) -> None:
    """The effort the kernel is worth: its hand-coded seed's time (the fastest seed's where that one failed) x its runs."""
    ok = [c for c in seeds if c.status is Status.OK and c.verified]
    if hand := next((c for c in ok if c.opts == self.hand_opts), None) or min(ok, key=lambda c: c.fastest_s, default=None):
      self.effort = self.s.strategy.effort(hand.fastest_s * self.runs)

  def verify_fastest(self, timed: list[Candidate], go_on_below: float = float("inf")) -> None:
    """Check the round's fastest timed candidates against the reference, fastest first, until `need` of them passed:
    all the beam and the final check can pick (they take verified candidates only). Once one passed at or above
    `go_on_below` the search ends with this round (the strategy's bar) and its beam is never used: the rest are checked
    only where the final check could pick them (finalist()). The others are never checked: on a kernel with a large
    output the check cost more than the timing (mul_add_16m: ~0.1-0.4 s a candidate)."""
    need, ends = max(self.s.strategy.beam, self.s.final.final_top), None  # ends: known from the round's fastest that passed
    ordered = sorted((c for c in timed if c.status is Status.OK), key=lambda c: c.fastest_s)
    # past those, the round's fastest one-core candidate where the final check could pick it (its `alone`): a busy round
    # timed threaded ones fastest, and the deeper one-core schedule it found was never checked, so never a finalist
    solo = next((c for c in ordered if not _threaded(c)), None)
    for c in ordered:
      if need <= 0 and c is not solo: continue
      if (ends or need <= 0) and not self.finalist(c): continue
      if not c.verified:
        b = self.libs[c.source_hash]
        with self.pool.paused() if self.options.device == "CPU" else contextlib.nullcontext():
          m = self.runner.measure(b.binary, b.name, check=True, timeout_s=max(10.0, 50 * c.fastest_s), min_time_s=0.0, min_runs=1, max_runs=1)
        c.verified = m.status is Status.OK and m.verified
        if not c.verified: c.status, c.error = (m.status, m.error) if m.status is not Status.OK else (Status.MISMATCH, "not verified")
      if c.verified:
        need, ends = need - 1, c.fastest_s >= go_on_below if ends is None else ends
        self.note_best(c)

  def finalist(self, c: Candidate) -> bool:
    """Whether the final check could pick c were it verified: faster than the final_top-th fastest verified candidate, or
    than the fastest verified one on one core where c runs on one (final(): its `top` and `alone`). Later rounds only
    add faster verified candidates: one that is not now never becomes one."""
    ok = sorted((x for x in self.candidates if x.status is Status.OK and x.verified), key=lambda x: x.fastest_s)
    if len(ok) < self.s.final.final_top or c.fastest_s < ok[self.s.final.final_top - 1].fastest_s: return True
    return not _threaded(c) and c.fastest_s < min((x.fastest_s for x in ok if not _threaded(x)), default=float("inf"))

  def at_roofline(self) -> bool:
    """Whether the fastest verified candidate runs at the roofline (search/roofline.py): its median over ROUNDS rounds
    interleaved with the stream's within TOLERANCE of it. Judged once per new fastest, and only one on the stream's
    threads: a busy core slows a threaded stream more than a one-core candidate, which then looked at a roofline that
    the device's other cores raise. Never where the stream is shorter than MIN_S (then no more) or there is none."""
    ok = [c for c in self.candidates if c.status is Status.OK and c.verified]
    if self.stream is None or not ok or (best := min(ok, key=lambda c: c.fastest_s)) is self.judged: return False
    if (built := self.stream.result()) is None:
      self.stream = None
      return False
    if roofline.threads(best.opts) != built.threads: return False
    if self.roofline and best.fastest_s > 2 * self.roofline["stream_s"]: return False  # its fastest run far off: not timed
    self.judged, b = best, self.libs[best.source_hash]
    runs: dict[str, list[float]] = {"stream": [], "best": []}
    timed, other = [("stream", built.binary, built.name), ("best", b.binary, b.name)], 0.0
    with self.pool.paused() if self.options.device == "CPU" else contextlib.nullcontext():
      for r in range(roofline.ROUNDS):
        for what, binary, name in timed[r % 2:] + timed[:r % 2]:
          m = self.runner.measure(binary, name, check=False, timeout_s=max(10.0, 50 * best.fastest_s), min_time_s=0.0, min_runs=2)
          if m.status is Status.OK: runs[what].append(min(m.times_s))
          other = max(other, m.other_load)
        self.check_stop()
    if not runs["stream"]: self.stream = None  # it failed to run: nothing to judge by (a bug of ours, not the kernel's)
    if not all(runs.values()) or self.stream is None: return False
    stream_s, best_s = statistics.median(runs["stream"]), statistics.median(runs["best"])
    # the rest of the machine on the cores they run on: a threaded kernel waits for its slowest thread, and both timings
    # are noise (BUSY, other load 2.0 of 2 cores: the THREAD 2 stream against itself 0.03-24x); the search goes on
    busy = self.options.device == "CPU" and other >= self.s.final.busy_load + (os.cpu_count() or 1) - built.threads
    at = best_s <= (1 + roofline.TOLERANCE) * stream_s and not busy
    self.roofline = {"moved": built.moved, "stream_s": stream_s, "best_s": best_s, "opts": best.opts, "other_load": round(other, 3),
                     "ended": at}
    if stream_s < roofline.MIN_S: self.stream, self.roofline = None, {}
    return at and self.stream is not None

  def retime_bar(self, slow: list[tuple[Candidate, Build]], check: bool) -> None:
    """A round whose every timed child was stopped early: the bar they were stopped at (early_stop x the fastest verified
    time) is re-timed, and the children it would not have stopped are timed again against it. The bar is one
    candidate's fastest run of many, a child's of one or two: a seed timed in a second when the other core was free
    made every child of a busy round SLOW, and a round with nothing verified ends the search (BUSY, sum_rows_4096's
    hand-coded seed timed 2.4 ms, ~4x under its usual, and the model strategy ended at round 1, 0.62x the beam's winner)."""
    ok = [c for c in self.candidates if c.status is Status.OK and c.verified]
    if not (bar := min(ok, key=lambda c: c.fastest_s, default=None)): return
    b = self.libs[bar.source_hash]
    with self.pool.paused() if self.options.device == "CPU" else contextlib.nullcontext():
      m = self.runner.measure(b.binary, b.name, check=False, timeout_s=max(10.0, 50 * bar.fastest_s), min_time_s=self.s.measure.min_time_s)
    if m.status is not Status.OK or (now := min(m.times_s)) <= bar.fastest_s: return
    for c, b in sorted(slow, key=lambda p: p[0].fastest_s):
      if c.fastest_s <= self.s.measure.early_stop * now: self.note_best(self.time(c, b, check, now))

  def note_best(self, c: Candidate) -> None:
    """The bar for early stops: the fastest verified time."""
    if c.status is Status.OK and c.verified: self.best_s = c.fastest_s if self.best_s is None else min(self.best_s, c.fastest_s)

  def time(self, c: Candidate, b: Build, check: bool = True, bar: Optional[float] = None) -> Candidate:
    """Time one compiled candidate, and with `check` verify it; on the CPU the pool's workers are stopped meanwhile. Its
    early stop and time limit are against `bar` (default: the fastest verified time)."""
    if self.case is not None: self.case.result()
    s, best = self.s.measure, self.best_s if bar is None else bar
    # a hang's limit: the warm-up and two runs at timeout_factor x the best, and the minimum measured time
    limit = s.seed_timeout_s if best is None else max(2.0, 3 * s.timeout_factor * best) + s.min_time_s
    with self.pool.paused() if self.options.device == "CPU" else contextlib.nullcontext():
      m = self.runner.measure(b.binary, b.name, check=check, timeout_s=limit, min_time_s=s.min_time_s,
                              early_stop_s=None if best is None else s.early_stop * best)
    c.status, c.times_s, c.error, c.verified, c.other_load = m.status, m.times_s, m.error, m.verified, round(m.other_load, 3)
    if c.status is Status.OK: self.libs[c.source_hash] = b
    return c

  def final(self, measured: list[Candidate]):
    """Re-time the fastest few verified candidates and the baseline (the hand-coded one, else the unoptimised one),
    interleaved; the best median wins. On the CPU a contended check (FinalSettings) is redone once the machine is
    quiet, and one that stays contended raises DeviceBusy unless the baseline won it: a busy core made THREAD kernels
    look 100x slower, and a slower winner must never be stored.
    (baseline, winner, medians by id, per-round baseline/winner ratios, the measurement conditions)."""
    s, early_stop = self.s.final, self.s.measure.early_stop
    ok = sorted((c for c in measured if c.status is Status.OK and c.verified), key=lambda c: c.fastest_s)
    if not ok:
      why = "; ".join(f"{c.opts or 'no opts'}: {c.status} {c.error}".strip() for c in self.candidates[:2])
      raise SearchError(f"no candidate ran correctly ({len(self.candidates)} tried); seeds: {why}")
    base = next((c for c in ok if c.opts == self.hand_opts), None) or next((c for c in ok if not c.opts), ok[0])
    # the fastest schedule on one core competes too: where the fastest few are all THREAD ones, a busy core re-times
    # them up to 100x slow and the check fell back to the baseline (sops_8908: 122 us stored, 18-50 us found)
    alone = next((c for c in ok if not _threaded(c)), base)
    top = [c for c in ok[:s.final_top] if c.fastest_s < early_stop * ok[0].fastest_s]
    if self.roofline.get("ended") and self.judged is not None:  # nothing beats the best there by more than noise: it and the baseline
      top, alone = [self.judged], base
    finalists = list({id(c): c for c in top + [alone, base]}.values())
    busy_search = any(c.other_load >= s.busy_load for c in self.candidates)
    # a kernel worth less than the whole effort waits for no quiet machine (two waits cost a minute): a contended check
    # stores its baseline, never slower than itself
    retries = s.busy_retries if s.on_busy == OnBusy.REFUSE and self.effort >= 1 else 0
    check = checked(lambda: self.final_rounds(finalists), lambda rounds: drift(rounds[id(base)]), self.runner.pid, s.busy_load,
                    s.max_drift, retries, s.quiet_wait_s, self.check_stop, contends=self.options.device == "CPU")
    rounds = check.value
    med = {i: statistics.median(t) if t else float("inf") for i, t in rounds.items()}
    win = min(finalists, key=lambda c: (med[id(c)], c is not base))
    if check.contended and win is not base and s.on_busy == OnBusy.REFUSE:  # a baseline that won is stored: never slower than itself
      if self.effort < 1: win = base
      else: raise DeviceBusy(f"{check.busy('final checks')}: not stored")
    wt = rounds[id(win)]
    measured_as = check.conditions()
    conditions = {**measured_as, "effort": round(self.effort, 3), "busy": busy_search or measured_as["busy"],
                  "spread": round(max(wt) / min(wt), 4) if wt else None, **({"roofline": self.roofline} if self.roofline else {})}
    return base, win, med, [b / w for b, w in zip(rounds[id(base)], wt)] or [1.0], conditions

  def final_rounds(self, finalists: list[Candidate]) -> dict[int, list[float]]:
    """Each finalist's best time per round, the rounds rotated so that no candidate always runs first."""
    rounds: dict[int, list[float]] = {id(c): [] for c in finalists}
    for r in range(self.s.final.final_rounds):
      for c in finalists[r % len(finalists):] + finalists[:r % len(finalists)]:
        b = self.libs[c.source_hash]
        m = self.runner.measure(b.binary, b.name, check=False, timeout_s=max(10.0, 50 * c.fastest_s),
                                min_time_s=self.s.measure.min_time_s / 2, min_runs=1)
        if m.status is Status.OK: rounds[id(c)].append(min(m.times_s))
      self.check_stop()
      if self.progress: self.progress(len(self.candidates), self.best_s)
    return rounds


def warm_seeds(root: Kernel, schedules: Sequence[Sequence], actions: Sequence[Opt]) -> list[Kernel]:
  """root under each schedule, each once, in order, re-fitted to these sizes (search/similar.py refit: a neighbour's
  tile that does not divide them takes the nearest that does; the schedule ends at an opt that fits in no amount),
  none where not even its first opt fits."""
  out, seen = [], set()
  for opts in schedules:
    k = refit(root, opts, actions)
    if (key := tuple(k.applied_opts)) not in seen and (key or not opts):
      seen.add(key)
      out.append(k)
  return out


def _threaded(c: Candidate) -> bool: return any(o["op"] == "THREAD" for o in c.opts)

def _failed(c: Candidate, status: Status, error: str) -> Candidate:
  c.status, c.error = status, error
  return c
