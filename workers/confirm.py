"""A confirm job: measure one result's opts again, on this worker's device, against the hand-coded baseline -- the second,
independent measurement without which the service serves no result (tunesvc/store/proof.py, which compares the two runs
each relative to its own baseline). A contended confirmation on the CPU is redone once the machine is quiet, as the
search's final check is (search/settings.py OnBusy), and one that stays contended raises DeviceBusy: the worker gives
the job back to wait a while, and the store bounds how often (tunesvc/store/queue.py Backoff)."""
from __future__ import annotations
import contextlib, importlib, statistics, threading, time
from typing import Optional
from devices import registry
from linearizer import ACTION_SPACE_VERSION
from linearizer.ast import KernelAST
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel
from linearizer.lower import lower
from search.result import Candidate, SearchResult, Status
from search.load import checked, drift
from search.settings import OnBusy, SearchSettings
from search.tune import DeviceBusy, SearchError, SearchStopped
from search.workshop import WORKSHOP, Built, Workshop

CONFIRM_KEYS = ("opts", "confirms")  # what a confirm job's settings carry besides its search's


def confirm(ast: KernelAST, device: str, opts: list[dict], settings: SearchSettings = SearchSettings(), module: Optional[str] = None,
            stop: Optional[threading.Event] = None, workshop: Optional[Workshop] = None) -> SearchResult:
  """The opts and the hand-coded schedule, each verified against the reference, then re-timed interleaved: a SearchResult whose
  best is `opts` (SearchError where they do not run at all; SearchStopped once `stop` is set). `workshop`: where the runner
  and the case (inputs, reference output) come from, as tune()'s: a result this process found is confirmed on them."""
  start, dev = time.monotonic(), importlib.import_module(module) if module else registry.get(device)
  vv, kr, options, ms = ast.var_vals(settings.var_vals), ast.rebased(), dev.options(), settings.measure
  def check_stop() -> None:
    if stop is not None and stop.is_set(): raise SearchStopped("the confirmation was stopped")
  hand = Kernel(kr, options)
  hand_coded_optimizations(hand)
  cands = [Candidate([o.to_json() for o in hand.applied_opts], Status.PENDING), Candidate(opts, Status.PENDING, 1)]
  ws = workshop or WORKSHOP
  # the search's runner, and its case where it is kept; the compiles its search left running wait meanwhile
  with ws.runner(dev.__name__) as runner, ws.case(kr, vv, ms.seed) as case, \
       ws.idle_paused() if options.device == "CPU" else contextlib.nullcontext():
    runner.setup(case, vv)
    built: list[Built] = []
    for c in cands:  # the libraries this process's search timed where it kept them, else built here
      if (b := ws.build(dev.__name__, kr.key, c.opts)) is None:
        src = dev.render(lower(Kernel(kr, options).apply_opts(c.opts)))
        b = Built(src, dev.compile(src), "kernel")
      built.append(b)
      m = runner.measure(b.binary, b.name, check=True, timeout_s=ms.seed_timeout_s, min_time_s=ms.min_time_s)
      c.status, c.times_s, c.error, c.verified = m.status, m.times_s, m.error, m.verified
      if c.status is not Status.OK: raise SearchError(f"opts {c.opts} do not run here: {c.status} {c.error}".strip())
      check_stop()
    fs = settings.final
    def time_both() -> tuple[list[float], list[float]]:
      rounds: tuple[list[float], list[float]] = ([], [])  # the baseline's times, the opts'
      for r in range(fs.final_rounds):
        for i in (r % 2, 1 - r % 2):  # alternating which runs first
          m = runner.measure(built[i].binary, built[i].name, check=False, timeout_s=max(10.0, 50 * min(cands[i].times_s)),
                             min_time_s=ms.min_time_s / 2, min_runs=1)
          if m.status is Status.OK: rounds[i].append(min(m.times_s))
        check_stop()
      return rounds
    check = checked(time_both, lambda rounds: drift(rounds[0]), runner.pid, fs.busy_load, fs.max_drift,
                    fs.busy_retries if fs.on_busy == OnBusy.REFUSE else 0, fs.quiet_wait_s, check_stop, contends=options.device == "CPU")
    if check.contended and fs.on_busy == OnBusy.REFUSE: raise DeviceBusy(check.busy("confirmation runs"))
    rounds = check.value
  if not all(rounds): raise SearchError("the final re-timing failed")
  base_s, best_s = statistics.median(rounds[0]), statistics.median(rounds[1])
  ratios = [b / w for b, w in zip(*rounds)] or [base_s / best_s]
  fp = dev.fingerprint()
  return SearchResult(kernel_key=ast.key, kernel_name=ast.name or "", device=device, fingerprint=fp, fingerprint_hash=dev.fingerprint_hash(fp),
                      action_space_version=ACTION_SPACE_VERSION, settings=settings.to_json(), var_vals=vv, flops=ast.flops(vv),
                      bytes=ast.bytes(vv), baseline_opts=cands[0].opts, baseline_s=base_s, best_opts=opts, best_s=best_s,
                      speedup=base_s / best_s, speedup_spread=(min(ratios), max(ratios)), verified=cands[1].verified,
                      best_source=built[1].source, search_s=time.monotonic() - start, candidates=cands,
                      conditions=check.conditions())
