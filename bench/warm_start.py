"""Warm starts from kernels alike: after tuning matmul 512 and conv2d 3x3 64->64 56x56, do their neighbours (matmul 384,
640, 768, 1536; conv2d 3x3 128->128 28x28) reach 95% of their own full search's speed within 16 measured candidates?

  .venv/bin/python bench/warm_start.py                 # a markdown report
  .venv/bin/python bench/warm_start.py --neighbours matmul_384 --budget-s 30 --min-time 0.1

The two tuned kernels go into a fresh local result cache (search/cache.py, with their structure); per neighbour, in
one process: its full search (search.tune with the default settings, no seeds but its own), then the warm search
(`alike`: the cache's nearest tuned kernels of its structure on this fingerprint -- their winners re-fitted as seeds,
their tiles a step smaller and larger in round 1, their measurements the cost model's data ordering the children; at
most 16 candidates measured, seeds and failures included). Both winners are compiled here, checked against the reference,
and timed interleaved (bench/cpu_kernels.py's measure_quietly: medians). The warm search reaches 95% when its
winner's median is at most 1/0.95 of the full search's; "first within 95%" is the candidate (in measuring order) whose
own search-time timing first came within 95% of the full search's best, read off the warm search's records.
"""
from __future__ import annotations
import argparse, os, shlex, sys, tempfile
from pathlib import Path
from typing import Callable
from cpu_kernels import ROOT, machine, measure_quietly, med, quiet, spread, timing_args
from devices import cpu
from linearizer import ACTION_SPACE_VERSION
from linearizer.ast import KernelAST
from linearizer.builders import conv2d, matmul
from linearizer.compare import compare
from linearizer.reference import expected_range, random_buffers
from search.cache import ResultCache
from search.result import SearchResult, Status
from search.settings import SearchSettings
from search.tune import tune
from tunesvc.runtime import compile_kernel

TUNED = {"matmul_512": lambda: matmul(512, 512, 512), "conv2d_64_56": lambda: conv2d(1, 64, 56, 56, 64, 3, 3, padding=1)}
NEIGHBOURS = {**{f"matmul_{n}": (lambda n=n: matmul(n, n, n)) for n in (384, 640, 768, 1536)},
              "conv2d_128_28": lambda: conv2d(1, 128, 28, 28, 128, 3, 3, padding=1)}
WARM_CANDIDATES = 16


def first_within(r: SearchResult, best_s: float, share: float = 0.95) -> int | None:
  """1-based index (measuring order) of the first verified candidate whose own timing is within `share` of best_s's speed."""
  return next((i + 1 for i, c in enumerate(r.candidates) if c.status is Status.OK and c.verified and c.fastest_s * share <= best_s), None)


def opts_str(opts: list[dict]) -> str: return "[" + ", ".join(f"{o['op']} {o['axis']} {o['amt']}" for o in opts) + "]"


class Timed:
  """Schedules of one kernel compiled here, each checked against the reference (computed once, on random inputs;
  AssertionError on a mismatch), as timed calls on their own buffers."""
  def __init__(self, k: KernelAST, seed: int):
    self.k, self.vv = k, k.var_vals()
    self.bufs = random_buffers(k, self.vv, seed)
    self.want, self.lo, self.hi = expected_range(k, self.bufs, self.vv)

  def timer(self, who: str, opts: list[dict]) -> Callable[[], float]:
    _, prg, _ = compile_kernel(self.k, "CPU", opts)
    dev = [cpu.alloc(b.size, b.dtype) for b in self.bufs]
    for x, b in zip(dev, self.bufs): x[:] = b  # the output starts poisoned
    prg(*dev)
    if (bad := compare(self.k, dev, [self.want, *self.bufs[1:]], self.vv, None if self.lo is None else (self.lo, self.hi))) is not None:
      raise AssertionError(f"{who} {opts}: {bad}")
    return lambda: prg.time(*dev)


def timers(k: KernelAST, schedules: dict[str, list[dict]], seed: int) -> dict[str, Callable[[], float]]:
  t = Timed(k, seed)
  return {who: t.timer(who, opts) for who, opts in schedules.items()}


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--neighbours", default=",".join(NEIGHBOURS), help=f"comma-separated, of: {', '.join(NEIGHBOURS)}")
  ap.add_argument("--budget-s", type=float, default=120.0, help="each full search's budget in seconds (default 120, the default's)")
  ap.add_argument("--seed", type=int, default=0)
  timing_args(ap)
  args = ap.parse_args()
  cmd = shlex.join(["python", os.path.relpath(__file__, ROOT), *sys.argv[1:]])
  settings = SearchSettings.from_json({"budget_s": args.budget_s, "seed": args.seed})
  fp_hash = cpu.fingerprint_hash(cpu.fingerprint())
  rows, ok = [], True
  with tempfile.TemporaryDirectory(prefix="bench-warm-") as td:
    cache = ResultCache(Path(td) / "results.sqlite")
    for name, make in TUNED.items():
      k = make()
      quiet(args, None)
      r = tune(k, "CPU", settings)
      cache.put(r, k)
      print(f"{name}: tuned in {r.search_s:.1f} s, {len(r.candidates)} candidates: {r.best_opts}", file=sys.stderr)
    for name in [n.strip() for n in args.neighbours.split(",") if n.strip()]:
      k = NEIGHBOURS[name]()
      quiet(args, None)
      full = tune(k, "CPU", settings)
      alike = cache.alike(k, fp_hash, ACTION_SPACE_VERSION)
      seeds = [t.result.best_opts for t in alike]
      quiet(args, None)
      warm = tune(k, "CPU", SearchSettings.from_json({**settings.to_json(), "budget_candidates": WARM_CANDIDATES}), alike=alike)
      fns = timers(k, {"full": full.best_opts, "warm": warm.best_opts}, args.seed)
      t = measure_quietly(fns, args, None)
      share = med(t["times"]["full"]) / med(t["times"]["warm"])
      ok &= share >= 0.95 and len(warm.candidates) <= WARM_CANDIDATES
      rows.append((name, full, warm, seeds, t, share))
      print(f"{name}: warm at {share:.1%} of the full search's speed", file=sys.stderr)
  lines = [f"Command: `{cmd}`", "", *machine(None, "CPU", "not used"), "",
           "| neighbour | full search: best, candidates, time | warm: best, candidates, time | warm speed / full | first within 95% "
           "| spreads (IQR/median) | other load | seeds | warm winner | full winner |", "|---|---|---|---:|---:|---|---:|---|---|---|"]
  for name, full, warm, seeds, t, share in rows:
    f, w = med(t["times"]["full"]), med(t["times"]["warm"])
    lines.append(f"| {name} | {f * 1e3:.3g} ms, {len(full.candidates)}, {full.search_s:.1f} s | {w * 1e3:.3g} ms, {len(warm.candidates)}, "
                 f"{warm.search_s:.1f} s | {share:.1%} | {first_within(warm, full.best_s) or '-'} "
                 f"| {spread(t['times']['full']):.1%} / {spread(t['times']['warm']):.1%} | {t['other_load']:.2f} "
                 f"| {'; '.join(map(opts_str, seeds)) or 'none'} | {opts_str(warm.best_opts)} | {opts_str(full.best_opts)} |")
  lines += ["", f"Target: every neighbour's warm winner within 95% of its full search's speed, {WARM_CANDIDATES} candidates at most: "
            + ("MET" if ok else "NOT MET")]
  print("\n".join(lines))
  return 0 if ok else 1


if __name__ == "__main__": sys.exit(main())
