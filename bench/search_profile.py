"""Where a search's wall time goes: search.tune on a few kernels, its main thread's time split by phase.

  .venv/bin/python bench/search_profile.py --kernels sops_8908,sops_4667,sops_8909,sops_2123,sops_1151
  .venv/bin/python bench/search_profile.py --kernels sops_1151 --settings '{"batch": false}' --compile

Per kernel (SearchSettings(beam=4, budget_s=240) as bench/search_vs_tinygrad.py, and --settings): the wall time of tune()
and, of its main thread, the time spent starting the compile pool and the runner (the first search of the process only:
later ones lease them warm), waiting for builds (rendering and gcc in the pool), featurising and ranking a round's
children (the model strategy), timing candidates (the runner's calls: the kernel's own runs, and the rest of it, the
pipe, a checked timing's poisoning of the output, loading the library), checking the round's
fastest against the reference, the final re-timing, and the rest (the strategy, Python); and how many candidates were
checked. The case (the inputs and the reference output, written by the workshop) and the runner's load of it run in a
thread while the seeds build; their times are shown apart (they overlap), the case's CPU too. CPU seconds of the pool's
workers, the compilers they ran and the runner come from /proc (the first search's: from their start). Also: candidates
by round, timed runs, slow (stopped early) ones.
`--compile`: the compiler CPU per candidate of a kernel's first two rounds (the children of its two seeds), built one
gcc each, batched one unit each, and batched the way the search does. `--shared-vs-alone`: whether a candidate built in
a unit shared with others runs as fast as built alone. The machine's load is printed: read a busy
machine's numbers as shares only.
"""
from __future__ import annotations
import argparse, atexit, collections, contextlib, functools, json, os, shutil, statistics, sys, tempfile, time
from pathlib import Path
from typing import Callable
sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_vs_tinygrad import corpus, example_case
from devices import cpu
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel
from linearizer.lower import lower
from linearizer.reference import random_buffers
from search import model_beam, runner as runner_mod, tune as tune_mod, workshop as workshop_mod
from search.actions import actions_for, children
from search.settings import SearchSettings

PHASES = {"lease": (workshop_mod.Workshop, "lease"), "timing": (runner_mod.Runner, "measure"),
          "check": (tune_mod._Search, "verify_fastest"), "final": (tune_mod._Search, "final"),
          "reference": (workshop_mod, "write_case"),  # the workshop calls it
          "setup": (runner_mod.Runner, "setup"),  # the runner loading the case (or not: it holds it)
          "rank": (model_beam.ModelBeamStrategy, "_next_round")}  # the model strategy's: featurising and ranking a round's children


class Clock:
  """Seconds and calls of the wrapped functions, by phase; the runner's calls split by who made them."""
  def __init__(self) -> None:
    self.s: collections.Counter[str] = collections.Counter()
    self.n: collections.Counter[str] = collections.Counter()
    self.inside: list[str] = []

  def wrap(self, phase: str, owner, name: str) -> None:
    f = getattr(owner, name)
    if phase == "lease":  # a context manager: entering it is what costs
      @functools.wraps(f)
      @contextlib.contextmanager
      def lease(*a, **k):
        t = time.perf_counter()
        with f(*a, **k) as got:
          self.s[phase] += time.perf_counter() - t
          yield got
      setattr(owner, name, lease)
      return
    outer = phase in ("check", "final")  # the runner's calls inside them are theirs, not the timing's
    @functools.wraps(f)
    def g(*a, **k):
      nested = phase == "timing" and bool(self.inside)
      t, cpu = time.perf_counter(), time.thread_time()
      if outer: self.inside.append(phase)
      try: m = f(*a, **k)
      finally:
        if outer: self.inside.pop()
      if not nested: self.s[phase] += time.perf_counter() - t
      if phase == "reference": self.s["reference CPU"] += time.thread_time() - cpu  # in the search's thread of its own
      self.n[phase] += 1
      if phase == "timing" and not nested: self.s["kernel runs"] += sum(m.times_s); self.n["kernel runs"] += len(m.times_s)
      return m
    setattr(owner, name, g)


def workshop_pids() -> list[int]:
  ws = workshop_mod.WORKSHOP
  return [s.proc.pid for p in ws._pools.values() for s in p._slots] + [r.proc.pid for r, _ in ws._runners.values()]


def profile(name: str, k, settings: SearchSettings, clock: Clock) -> dict:
  clock.s.clear(); clock.n.clear()
  before = {p: cpu.process_cpu_s(p) for p in workshop_pids()}  # none before the first search: its processes are started in it
  m0, t0 = sum(os.times()[:2]), time.perf_counter()
  r = tune_mod.tune(k, "CPU", settings)
  wall = time.perf_counter() - t0
  # the processes the search left in the workshop, each since the search began or since it started (a runner restarted
  # meanwhile: the dead one's CPU is not seen)
  main_cpu, pool_cpu = sum(os.times()[:2]) - m0, sum(cpu.process_cpu_s(p) - before.get(p, 0.0) for p in workshop_pids())
  build = wall - sum(clock.s[p] for p in ("lease", "timing", "check", "final", "rank"))
  return {"kernel": name, "wall_s": wall, "phases": dict(clock.s), "calls": dict(clock.n), "build_and_rest_s": build,
          "main_cpu_s": main_cpu, "pool_runner_cpu_s": pool_cpu, "candidates": len(r.candidates),
          "rounds": dict(collections.Counter(c.round for c in r.candidates)),
          "status": dict(collections.Counter(c.status.value for c in r.candidates)), "verified": sum(c.verified for c in r.candidates),
          "best_s": r.best_s, "baseline_s": r.baseline_s, "best_opts": r.best_opts, "conditions": r.conditions}


def compile_cpu(k) -> dict[str, float]:
  """Compiler CPU ms per candidate of the first two rounds' sources, three ways."""
  root = Kernel(k.rebased(), cpu.options())
  hand = root.copy()
  hand_coded_optimizations(hand)
  acts = actions_for(root.options)
  srcs = list(dict.fromkeys(cpu.render(lower(c)) for seed in (hand, root) for c in children(seed, acts)))
  def children_cpu() -> float: t = os.times(); return t.children_user + t.children_system
  ways: dict[str, Callable[[list[str]], object]] = {
    "one gcc each": lambda g: [cpu.compile(s) for s in g],
    "batched, one unit each": lambda g: cpu.compile_batch([f"/* {i} */\n{s}" for i, s in enumerate(g)]),  # no preamble alike
    "batched as the search": cpu.compile_batch}
  out = {"sources": len(srcs)}
  for way, fn in ways.items():
    with tempfile.TemporaryDirectory(prefix="bench-profile-compile-") as d:  # a cold compile cache each way
      os.environ["TUNESVC_CACHE_DIR"], cache = d, os.environ["TUNESVC_CACHE_DIR"]
      try:
        c0 = children_cpu()
        for i in range(0, len(srcs), 16): fn(srcs[i:i + 16])
        out[way] = (children_cpu() - c0) / len(srcs) * 1e3
      finally: os.environ["TUNESVC_CACHE_DIR"] = cache
  return out


def shared_vs_alone(k) -> list[float]:
  """Each single-threaded child of the hand-coded schedule (16 at most) compiled in a batch, its unit shared, over the
  same source compiled alone: the medians of 15 interleaved turns' fastest of 20 runs (1.0: the same speed)."""
  k = k.rebased()
  hand = Kernel(k, cpu.options())
  hand_coded_optimizations(hand)
  srcs = [s for s in dict.fromkeys(cpu.render(lower(c)) for c in children(hand, actions_for(hand.options))) if "omp" not in s][:16]
  lib = cpu.compile_batch(srcs)
  bufs = []
  for b in random_buffers(k, k.var_vals(), 0):
    bufs.append(cpu.alloc(b.size, b.dtype))
    bufs[-1][:] = b
  out = []
  for i, src in enumerate(srcs):
    progs, ts = (cpu.Program(lib, f"kernel_{i}"), cpu.Program(cpu.compile(src), "kernel")), ([], [])
    for _ in range(15):
      for p, t in zip(progs, ts):
        p.time(*bufs)
        t.append(min(p.time(*bufs) for _ in range(20)))
    out.append(statistics.median(ts[0]) / statistics.median(ts[1]))
  return out


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--kernels", default="sops_8908,sops_4667,sops_8909,sops_2123,sops_1151", help="corpus or example kernels")
  ap.add_argument("--settings", type=json.loads, default={}, help="more search settings, as JSON")
  ap.add_argument("--compile", action="store_true", help="also the compiler CPU per candidate, three ways")
  ap.add_argument("--shared-vs-alone", action="store_true", help="also the speed of candidates built in a shared unit over alone")
  ap.add_argument("--json", type=Path, help="also write the records here")
  args = ap.parse_args()
  os.environ["TUNESVC_CACHE_DIR"] = cache = tempfile.mkdtemp(prefix="bench-profile-cache-")  # cold, as a new kernel's search
  atexit.register(shutil.rmtree, cache, True)
  settings = SearchSettings.from_json({"beam": 4, "budget_s": 240, **args.settings})
  clock = Clock()
  for phase, (owner, fn) in PHASES.items(): clock.wrap(phase, owner, fn)
  ks = corpus()
  print(f"load average before: {os.getloadavg()[0]:.2f}; settings: {settings.to_json()}")
  rows = []
  for name in args.kernels.split(","):
    k = ks[name] if name in ks else example_case(name).k
    row = profile(name, k, settings, clock)
    if args.compile: row["compile_ms_per_candidate"] = compile_cpu(k)
    if args.shared_vs_alone: row["shared_over_alone"] = shared_vs_alone(k)
    rows.append(row)
    ph, n = row["phases"], row["calls"]
    print(f"{name}: {row['wall_s']:.2f} s wall | pool+runner start {ph.get('lease', 0):.2f} | builds (render, gcc) and "
          f"the rest {row['build_and_rest_s']:.2f} | rank {ph.get('rank', 0):.2f} "
          f"| timing {ph.get('timing', 0):.2f} ({n.get('timing', 0)} calls, kernel runs "
          f"{ph.get('kernel runs', 0):.2f} s in {n.get('kernel runs', 0)}) | check {ph.get('check', 0):.2f} | final {ph.get('final', 0):.2f} "
          f"| reference {ph.get('reference', 0):.2f} ({ph.get('reference CPU', 0):.2f} CPU-s), runner setup {ph.get('setup', 0):.2f} "
          f"(both overlapped) | CPU: main {row['main_cpu_s']:.2f} s, pool+compilers+runner {row['pool_runner_cpu_s']:.2f} s"
          + f" | {row['candidates']} candidates ({row['verified']} verified), rounds {row['rounds']}, {row['status']}"
          f" | best {row['best_s'] * 1e6:.2f} us, "
          f"hand-coded {row['baseline_s'] * 1e6:.2f} us, {row['best_opts']}")
    if args.compile: print(f"  compiler CPU per candidate: {json.dumps({w: round(v, 1) for w, v in row['compile_ms_per_candidate'].items()})}")
    if args.shared_vs_alone: print(f"  shared unit over alone: {' '.join(f'{x:.2f}' for x in row['shared_over_alone'])}")
  print(f"load average after: {os.getloadavg()[0]:.2f}")
  if args.json: args.json.write_text(json.dumps(rows, indent=1))
  return 0


if __name__ == "__main__": sys.exit(main())
