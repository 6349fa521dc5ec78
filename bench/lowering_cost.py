"""The lowering's output and CPU cost over many schedules: what a change to linearizer/lower.py must leave alone.

  PYTHONPATH=$PWD .venv/bin/python bench/lowering_cost.py --out a.jsonl                  # corpus + examples, 3 devices
  PYTHONPATH=$PWD .venv/bin/python bench/lowering_cost.py --kernels sops_296 --children --out a.jsonl
  .venv/bin/python bench/lowering_cost.py --compare a.jsonl b.jsonl                       # same output? CPU s each

Per kernel (the corpus, then examples/kernels) and device (this host's CPU, it with AVX-512's widths, its OpenCL driver's
options, CUDA sm_90's: no GPU needed): its hand-coded schedule, then the device's number of seeded random walks of 1-4
search actions from it (a random legal action of actions_for at each step), and with --children every child of the
hand-coded schedule (a search's first round).
Each is lowered as the search does (lower's limit at MAX_UOPS: "PastLimit" where it stops) and rendered; a line per
schedule: its IR's hash (each uop's repr), its source's, its IR size and the thread CPU seconds lower() took. The walks
depend only on the Kernel, so two commits' runs lower the same schedules. --profile: cProfile's top functions over it all.
"""
from __future__ import annotations
import argparse, cProfile, hashlib, json, pstats, random, statistics, sys, time
from dataclasses import replace
from pathlib import Path
from typing import Iterator
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from devices import cpu, cuda, opencl  # noqa: E402
from linearizer.ast import KernelAST, loads  # noqa: E402
from linearizer.heuristic import hand_coded_optimizations  # noqa: E402
from linearizer.kernel import Kernel, OptError  # noqa: E402
from linearizer.lower import PastLimit, lower  # noqa: E402
from linearizer.options import LinearizerOptions  # noqa: E402
from search.actions import MAX_UOPS, actions_for  # noqa: E402
from search_vs_tinygrad import corpus  # noqa: E402

EXAMPLES = ROOT / "examples" / "kernels"
DEVICES = {"CPU": (cpu.options, cpu.render), "AVX512": (lambda: replace(cpu.options(), float_vector_widths=(4, 8, 16)), cpu.render),
           "OPENCL": (opencl.options, opencl.render), "CUDA": (lambda: cuda.ARCH_OPTIONS["sm_90"], cuda.render)}


def kernels() -> Iterator[tuple[str, KernelAST]]:
  yield from corpus().items()
  for p in sorted(EXAMPLES.glob("*.json")): yield p.stem, loads(p.read_text())

def walk(k: Kernel, rng: random.Random, actions: tuple) -> Kernel:
  """k after 1-4 random actions, each drawn until one is legal (at most 50 draws a step)."""
  for _ in range(rng.randint(1, 4)):
    for _ in range(50):
      c = k.copy()
      try: c.apply_opt(rng.choice(actions))
      except OptError: continue
      k = c
      break
  return k

def schedules(k: KernelAST, options: LinearizerOptions, walks: int, rng: random.Random, children: bool) -> Iterator[Kernel]:
  hand = Kernel(k.rebased(), options)
  hand_coded_optimizations(hand)
  yield hand
  actions = actions_for(options)
  if children:
    for a in actions:
      c = hand.copy()
      try: c.apply_opt(a)
      except OptError: continue
      yield c
  for _ in range(walks): yield walk(hand, rng, actions)

def measure(kern: Kernel, render) -> dict:
  t = time.thread_time()
  try: prog = lower(kern, limit=MAX_UOPS)
  except PastLimit: return {"ir": "PastLimit", "src": "", "uops": MAX_UOPS + 1, "cpu_s": time.thread_time() - t}
  except Exception as e: return {"ir": f"{type(e).__name__}: {e}", "src": "", "uops": 0, "cpu_s": time.thread_time() - t}
  cpu_s = time.thread_time() - t
  ir = hashlib.sha256("\n".join(map(repr, prog.uops)).encode()).hexdigest()[:16]
  src = hashlib.sha256(render(prog).encode()).hexdigest()[:16] if len(prog.uops) <= MAX_UOPS else ""
  return {"ir": ir, "src": src, "uops": len(prog.uops), "cpu_s": cpu_s}

def run(a) -> None:
  want = set(a.kernels.split(",")) if a.kernels else None
  prof = cProfile.Profile() if a.profile else None
  walks = {d: int(n) for d, _, n in (x.partition(":") for x in a.devices.split(","))}
  devices = {d: (DEVICES[d][0](), DEVICES[d][1], n) for d, n in walks.items()}
  with open(a.out, "w") as out:
    for name, k in kernels():
      if want is not None and name not in want: continue
      for dev, (options, render, n) in devices.items():
        for kern in schedules(k, options, n, random.Random(f"{a.seed}:{name}:{dev}"), a.children):
          if prof: prof.enable()
          m = measure(kern, render)
          if prof: prof.disable()
          out.write(json.dumps({"kernel": name, "device": dev, "opts": [o.to_json() for o in kern.applied_opts], **m}) + "\n")
          out.flush()
  if prof: pstats.Stats(prof).sort_stats("tottime").print_stats(a.profile)

def compare(a_path: str, b_path: str, worst: int = 15) -> None:
  a, b = ([json.loads(line) for line in open(p)] for p in (a_path, b_path))
  key = lambda r: (r["kernel"], r["device"], json.dumps(r["opts"]))
  assert list(map(key, a)) == list(map(key, b)), "not the same schedules"
  diff = [(x, y) for x, y in zip(a, b) if (x["ir"], x["src"]) != (y["ir"], y["src"])]
  print(f"{len(a)} schedules ({len(set(map(key, a)))} distinct), {sum(r['ir'] == 'PastLimit' for r in a)} stopped past the limit, "
        f"{sum(' ' in r['ir'] for r in a)} raised; {len(diff)} differ")
  for x, y in diff[:20]: print(" ", *key(x), x["ir"], y["ir"])
  sa, sb = sum(r["cpu_s"] for r in a), sum(r["cpu_s"] for r in b)
  ratios = [x["cpu_s"] / max(y["cpu_s"], 1e-6) for x, y in zip(a, b)]
  print(f"lowering CPU s: {sa:.1f} -> {sb:.1f} ({sa / sb:.2f}x); per schedule ratio median {statistics.median(ratios):.2f}")
  for x, y in sorted(zip(a, b), key=lambda p: -p[0]["cpu_s"])[:worst]:
    opts = ", ".join(f"{o['op']} {o['axis']} {o['amt']}" for o in x["opts"])
    print(f"  {x['kernel']:>10} {x['device']:6} {x['uops']:6} uops {x['cpu_s']:6.2f} -> {y['cpu_s']:6.2f} s  {opts}")

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--out", default="lowering.jsonl")
  p.add_argument("--kernels", help="comma-separated kernel names (default: all)")
  p.add_argument("--devices", default="CPU:2,AVX512:1,OPENCL:1,CUDA:1", help="each device and its number of random walks")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--children", action="store_true", help="every child of the hand-coded schedule too")
  p.add_argument("--profile", type=int, default=0, metavar="N", help="print cProfile's top N functions by own time")
  p.add_argument("--compare", nargs=2, metavar=("A", "B"))
  a = p.parse_args()
  if a.compare: compare(*a.compare)
  else: run(a)


if __name__ == "__main__": main()
