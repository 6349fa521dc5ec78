"""Builds per candidate: tune() with batched builds (many candidates per compiler invocation) against one compiler
process per candidate, on the same kernels in one run, interleaved (A B B A per kernel), with the rest of the machine's
load recorded. Reports search seconds, compile seconds per candidate and the winners' times; ratios are batched over
single.

  PYTHONPATH=. .venv/bin/python bench/search_builds.py [--budget-candidates 40] [--kernels matmul_512 sum_rows_4096 ...]
"""
from __future__ import annotations
import argparse, json, os, statistics, sys, tempfile
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from linearizer.ast import loads
from search.load import OtherLoad
from search.settings import SearchSettings
from search.tune import tune


def run(name: str, batch: bool, args) -> dict:
  k = loads((ROOT / "examples" / "kernels" / f"{name}.json").read_text())
  s = SearchSettings.from_json({"beam": args.beam, "budget_candidates": args.budget_candidates, "budget_s": None, "batch": batch,
                                "min_time_s": args.min_time_s, "on_busy": "store"})
  with tempfile.TemporaryDirectory() as cache:  # a cold compile cache each run: the single builds would hit the last run's
    os.environ["TUNESVC_CACHE_DIR"] = cache
    load = OtherLoad()
    r = tune(k, "CPU", s)
  return {"search_s": r.search_s, "candidates": len(r.candidates), "compile_s": sum(c.compile_s for c in r.candidates) / len(r.candidates),
          "best_s": r.best_s, "other_load": load.cores()}


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--kernels", nargs="+", default=["sum_rows_4096", "mul_add_16m", "softmax_exp_sum", "matmul_512"])
  p.add_argument("--beam", type=int, default=4)
  p.add_argument("--budget-candidates", type=int, default=40)
  p.add_argument("--min-time-s", type=float, default=0.02)
  args = p.parse_args()
  rows = []
  for name in args.kernels:
    got: dict[bool, list[dict]] = {True: [], False: []}
    for batch in (True, False, False, True): got[batch].append(run(name, batch, args))
    med = {b: {key: statistics.median(x[key] for x in got[b]) for key in got[b][0]} for b in got}
    rows.append({"kernel": name, "batched": med[True], "single": med[False]})
    b, o = med[True], med[False]
    print(f"{name}: search {b['search_s']:.1f} s vs {o['search_s']:.1f} s ({b['search_s'] / o['search_s']:.2f}x), compile/candidate "
          f"{b['compile_s'] * 1e3:.0f} vs {o['compile_s'] * 1e3:.0f} ms, best {b['best_s'] * 1e3:.3f} vs {o['best_s'] * 1e3:.3f} ms, "
          f"other load {b['other_load']:.2f}/{o['other_load']:.2f} cores", flush=True)
  print(json.dumps(rows))


if __name__ == "__main__": main()
