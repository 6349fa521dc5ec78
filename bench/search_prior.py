"""Collect the search's shipped cost-model prior (search/prior.py): full beam searches of corpus kernels that no search
benchmark uses, every timed candidate kept as (features, time relative to the kernel's hand-coded time).

  nice -n 19 .venv/bin/python bench/search_prior.py --kernels 40 --budget-s 30

The kernels: a seeded shuffle of the corpus's float32 kernels without variables of --min-pos..--max-pos positions,
less bench/search_vs_tinygrad.py's picks under corpus seeds 0-3 (its 15 kernels and the done-when's ten more, and
two seeds beyond). Each is searched by the beam strategy (beam 4, every child measured) within --budget-s; a busy
machine's final checks store anyway (on_busy store: the data is the candidates, not the winner). Writes
search/priors/<family>.json.gz for this machine's family (search/prior.py: with the kernels' names, the load, and the
codegen and action-space versions it was measured at); --results also writes how it was collected and each kernel's
document and search result (one JSON object a line, gzipped; search/priors/<family>.searches.jsonl.gz is the shipped
prior's), from which --from builds the prior again without searching
(where the features changed, not the code: the times are of the code they timed) and bench/schedule_features.py
compares features computed two ways.
"""
from __future__ import annotations
import argparse, gzip, json, math, os, random, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_vs_tinygrad import choose_corpus, corpus
from devices import cpu
from linearizer.ast import load
from search.prior import build, write
from search.result import SearchResult
from search.settings import SearchSettings
from search.similar import Tuned
from search.tune import SearchError, tune


def collect(args) -> tuple[list[Tuned], dict]:
  """Search the kernels: what each measured, and how the prior was collected."""
  ks = corpus()
  held = {n for s in range(4) for n in choose_corpus(ks, 0, s)[0]}  # every benchmark pick: never trained on
  ok = sorted(n for n, k in ks.items() if n not in held and not k.vars and all(x.dtype.name == "float32" for x in k.nodes)
              and args.min_pos <= math.prod(k.full_shape) <= args.max_pos)
  random.Random(args.seed).shuffle(ok)
  settings = SearchSettings.from_json({"beam": 4, "budget_s": args.budget_s, "on_busy": "store", "worth_s": 0})
  tuned, load0, t0 = [], os.getloadavg()[0], time.time()
  for name in ok[:args.kernels]:
    k = ks[name].rebased()
    try: r = tune(k, "CPU", settings)
    except SearchError as e: print(f"{name}: {e}", file=sys.stderr); continue
    tuned.append(Tuned(k, r))
    print(f"{name}: {len(r.candidates)} candidates, {r.search_s:.1f} s, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
  return tuned, {"source": "shipped", "settings": settings.to_json(), "options": cpu.options().to_json(),
                 "load": [round(load0, 2), round(os.getloadavg()[0], 2)], "collected_s": round(time.time() - t0)}


def compact(r: SearchResult) -> dict:
  """r's JSON form less what a prior does not need: its winner's source, and every timed run but each candidate's fastest."""
  d = r.to_json()
  d["best_source"] = ""
  for c in d["candidates"]: c["times_s"] = c["times_s"] and [min(c["times_s"])]
  return d


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--kernels", type=int, default=40)
  ap.add_argument("--budget-s", type=float, default=30.0)
  ap.add_argument("--seed", type=int, default=7)
  ap.add_argument("--min-pos", type=int, default=1 << 14)
  ap.add_argument("--max-pos", type=int, default=1 << 22)
  ap.add_argument("--results", type=Path, help="also write how it was collected and every search's kernel and result here (.jsonl.gz)")
  ap.add_argument("--from", dest="source", type=Path, help="search nothing: the prior again, under today's features, from what --results wrote")
  args = ap.parse_args()
  if args.source:
    with gzip.open(args.source, "rt") as f: head, *lines = [json.loads(x) for x in f]
    tuned, meta = [Tuned(load(d["kernel"]), SearchResult.from_json(d["result"])) for d in lines], head["meta"]
  else:
    tuned, meta = collect(args)
    if args.results:
      with gzip.open(args.results, "wt") as f:
        f.write(json.dumps({"meta": meta}) + "\n")
        for t in tuned: f.write(json.dumps({"kernel": t.ast.to_json(), "result": compact(t.result)}, separators=(",", ":")) + "\n")
  p = write(build([(cpu.options(), tuned)], meta))
  print(f"{p}: {len(tuned)} kernels")
  return 0


if __name__ == "__main__": sys.exit(main())
