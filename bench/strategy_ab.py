"""The model strategy against the beam, ABBA, winners timed interleaved: is the model strategy's winner as fast, for how
many fewer candidates?

  TUNESVC_ON_BUSY=store nice -n 19 .venv/bin/python bench/strategy_ab.py --kernels sum_rows_4096,mul_add_16m --pairs 3 --json ab.json
  ... --model '{"measure_top": 5, "patience": 0}'      # the model strategy with other settings than its defaults
  ... --model '{"strategy": "beam"}' --beam-settings '{"roofline": false}'   # any two settings: here the roofline stop
                                                                             # ("model") against the full beam

Per kernel (an example's name, examples/kernels/, or a corpus kernel's): --pairs pairs of search.tune in one process
and one compile cache (beam --beam, budget --budget-s, as bench/search_vs_tinygrad.py), the model strategy first in
even pairs and second in odd ones, so that neither always searches on a warmer cache or a calmer machine; then every
distinct winner compiled here and checked against the reference on random inputs (bench/warm_start.py Timed), and all
timed interleaved in one run (bench/cpu_kernels.py measure: turns of 0.02 s, >= --min-time s each). Per pair: the beam
winner's median over the model winner's (above 1: the model's is faster), the candidates each measured and each
search's wall time; per kernel, the rest of the machine's load while the winners were timed (read a busy run's ratios,
not its seconds). The searches store whatever a busy final check picks (TUNESVC_ON_BUSY=store).
"""
from __future__ import annotations
import argparse, json, statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_kernels import measure
from search_vs_tinygrad import corpus, example_case
from warm_start import Timed
from search.load import OtherLoad
from search.settings import SearchSettings
from search.tune import tune

ROOT = Path(__file__).resolve().parents[1]


def kernel(name: str, ks: dict):
  return example_case(name).k if (ROOT / "examples" / "kernels" / f"{name}.json").exists() else ks[name]


def bench_kernel(name: str, ast, a, model: dict, beam: dict) -> dict:
  searches = []
  for p in range(a.pairs):
    for who in ("model", "beam") if p % 2 == 0 else ("beam", "model"):
      s = SearchSettings.from_json({"beam": a.beam, "budget_s": a.budget_s, **({"strategy": "model", **model} if who == "model" else beam)})
      r = tune(ast, settings=s)
      searches.append({"pair": p, "who": who, "candidates": len(r.candidates), "search_s": round(r.search_s, 2), "opts": r.best_opts,
                       "busy": r.conditions.get("busy"), "roofline": r.conditions.get("roofline"),
                       "other_load": round(statistics.mean(c.other_load for c in r.candidates), 2)})
      print(f"{name} pair {p} {who}: {len(r.candidates)} candidates, {r.search_s:.1f} s, {r.best_opts}", file=sys.stderr)
  timed, keys = Timed(ast, 0), {json.dumps(x["opts"]) for x in searches}
  fns = {k: timed.timer(k, json.loads(k)) for k in sorted(keys)}
  load = OtherLoad()
  ts = measure(fns, min_time=a.min_time, min_runs=7, max_runs=20000, turn=0.02)
  med = {k: statistics.median(t) for k, t in ts.items()}
  by = {(x["pair"], x["who"]): x for x in searches}
  ratios = [med[json.dumps(by[p, "beam"]["opts"])] / med[json.dumps(by[p, "model"]["opts"])] for p in range(a.pairs)]
  return {"kernel": name, "searches": searches, "medians_s": med, "ratios": ratios, "other_load": round(load.cores(), 2),
          "loadavg": Path("/proc/loadavg").read_text().split()[:3], "finished": time.strftime("%H:%M:%S UTC", time.gmtime())}


def summary(r: dict) -> str:
  def of(who: str, key: str) -> float: return statistics.median(x[key] for x in r["searches"] if x["who"] == who)
  rs = r["ratios"]
  return (f"| {r['kernel']} | {len(rs)} | {statistics.median(rs):.3f} | {min(rs):.3g}-{max(rs):.3g} | {sum(x >= 0.95 for x in rs)} of {len(rs)} | "
          f"{of('model', 'candidates'):g} / {of('beam', 'candidates'):g} | {of('model', 'search_s'):.1f} / {of('beam', 'search_s'):.1f} | "
          f"{r['other_load']} |")


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--kernels", default="sum_rows_4096,mul_add_16m,sops_2123,sops_1151,sops_3698")
  p.add_argument("--pairs", type=int, default=2)
  p.add_argument("--beam", type=int, default=4)
  p.add_argument("--budget-s", type=float, default=240.0)
  p.add_argument("--model", type=json.loads, default={}, help="the model strategy's settings beside strategy=model (JSON)")
  p.add_argument("--beam-settings", type=json.loads, default={}, help="the beam's settings beside its defaults (JSON)")
  p.add_argument("--min-time", type=float, default=0.5, help="seconds each winner is timed (interleaved)")
  p.add_argument("--json", type=Path)
  a = p.parse_args()
  ks, out = corpus(), {"command": " ".join(sys.argv), "rows": []}
  print("| kernel | pairs | beam / model (median) | range | pairs >= 0.95 | candidates model / beam | search s model / beam | other load |")
  print("|---|---:|---:|---|---:|---:|---:|---:|")
  for name in a.kernels.split(","):
    out["rows"].append(r := bench_kernel(name, kernel(name, ks), a, a.model, a.beam_settings))
    print(summary(r), flush=True)
    if a.json: a.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__": main()
