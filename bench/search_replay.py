"""How well a cost-model prior ranks a beam search's rounds, replayed on recorded searches (every child measured).

  nice -n 19 .venv/bin/python bench/search_replay.py --record /tmp/beams.jsonl.gz                # search, then replay
  nice -n 19 .venv/bin/python bench/search_replay.py --from /tmp/beams.jsonl.gz [--prior P.json.gz]

--record searches bench/search_vs_tinygrad.py's corpus picks (--corpus-seeds, 0 and 1: none is in the shipped prior)
with the beam strategy (beam 4, 240 s, a cold compile cache, on_busy store: the candidates are the data) and writes each
search as bench/search_prior.py's --results does (one JSON object a line, gzipped, the load beside each). The replay
ranks each round >= 1 of each search with the prior's model (the shipped one of this machine's family by default), as
the model strategy's first rounds are ranked (search/model_beam.py: the predicted fastest measure_top - explored, then
the most underrated), and reports per round: the rank of the round's fastest timed child among the predictions, the
Kendall tau (tau-b) of predicted against measured times (all children, and those without THREAD alone), whether that
fastest child carries THREAD, and whether the measure_top the model strategy would measure hold one within --within
of the round's fastest (the round "held"). A round's measured fastest is the load's where THREAD ran on a busy core:
read its other load, shown per round.
"""
from __future__ import annotations
import argparse, gzip, json, math, os, shutil, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np
from sample_efficiency import kendall
from search_prior import compact
from search_vs_tinygrad import choose_corpus, corpus
from devices import cpu
from linearizer.ast import load
from linearizer.kernel import Kernel, OptError
from search import prior as priors
from search.features import schedule_features
from search.model_beam import OPTIMISM, explored
from search.result import SearchResult, Status
from search.settings import SearchSettings
from search.tune import SearchError, tune


def record(path: Path, seeds: list[int]) -> None:
  ks = corpus()
  names = [n for s in seeds for n in choose_corpus(ks, 0, s)[0]]
  os.environ["TUNESVC_CACHE_DIR"] = cache = tempfile.mkdtemp(prefix="bench-replay-cache-")  # cold: every build paid
  settings = SearchSettings.from_json({"beam": 4, "budget_s": 240, "on_busy": "store", "strategy": "beam"})
  try:
    with gzip.open(path, "wt") as f:
      f.write(json.dumps({"meta": {"settings": settings.to_json(), "kernels": names}}) + "\n")
      for n in names:
        k, l0 = ks[n].rebased(), os.getloadavg()[0]
        try: r = tune(k, "CPU", settings)
        except SearchError as e: print(f"{n}: {e}", file=sys.stderr); continue
        load = [round(l0, 2), round(os.getloadavg()[0], 2)]
        print(f"{n}: {len(r.candidates)} candidates, {r.search_s:.1f} s, load {load}", file=sys.stderr, flush=True)
        f.write(json.dumps({"kernel": k.to_json(), "result": compact(r), "load": load}, separators=(",", ":")) + "\n")
        f.flush()
  finally: shutil.rmtree(cache, True)


def threaded(opts: list[dict]) -> bool: return any(o["op"] == "THREAD" for o in opts)


def replay(path: Path, prior: priors.Prior, top: int, within: float) -> list[dict]:
  """One row per round >= 1 of each recorded search with at least 2 timed children."""
  o = cpu.options()
  if not priors.usable(prior, o): raise SystemExit(f"the prior may not rank here: {prior.refusal(o)}")
  model = priors.model(o, given=prior)
  assert model is not None
  with gzip.open(path, "rt") as f: _, *lines = [json.loads(x) for x in f]
  rows = []
  for d in lines:
    k, r = load(d["kernel"]), SearchResult.from_json(d["result"])
    root = Kernel(k, o)
    for rnd in sorted({c.round for c in r.candidates} - {0}):
      cs, fs = [], []
      for c in r.candidates:
        if c.round != rnd or not c.min_s or c.status not in (Status.OK, Status.SLOW): continue
        try: fs.append(schedule_features(root.copy().apply_opts(c.opts)))
        except OptError: continue
        cs.append(c)
      if len(cs) < 2: continue
      mean, spread = model.estimate(fs)
      t = np.array([c.fastest_s for c in cs])
      ranked = list(np.argsort(mean, kind="stable"))
      best = int(np.argmin(t))
      chosen = ranked[:top - explored(top)]
      chosen += [int(i) for i in np.argsort(mean - OPTIMISM * spread, kind="stable") if i not in chosen][:explored(top)]
      one = [i for i, c in enumerate(cs) if not threaded(c.opts)]  # on one core: what a busy machine times fairly
      rows.append({"kernel": k.name, "round": rnd, "children": len(cs), "rank": ranked.index(best) + 1,
                   "tau": kendall(mean, t),
                   "tau1": kendall(mean[one], t[one]) if len(one) > 1 else math.nan,
                   "thread": threaded(cs[best].opts),
                   "held": bool(t[chosen].min() <= t[best] / within), "best_held": best in chosen,
                   "best_opts": " ".join(f"{x['op']} {x['axis']} {x['amt']}" for x in cs[best].opts),
                   "other_load": cs[best].other_load})
  return rows


def report(rows: list[dict], top: int, within: float) -> str:
  out = [f"| kernel | round | children | fastest's rank | tau | tau, 1 thread | THREAD | top {top} holds | fastest's opts | its other load |",
         "|---|---:|---:|---:|---:|---:|---|---|---|---:|"]
  out += [f"| {r['kernel']} | {r['round']} | {r['children']} | {r['rank']} | {r['tau']:.2f} | {r['tau1']:.2f} | {'yes' if r['thread'] else ''} | "
          f"{'yes' if r['held'] else 'NO'} | {r['best_opts']} | {r['other_load']:.2f} |" for r in rows]
  def line(name: str, rs: list[dict]) -> str:
    if not rs: return f"- {name}: none"
    return (f"- {name}: {len(rs)} rounds, fastest ranked median {statistics.median(r['rank'] for r in rs):g} "
            f"(of median {statistics.median(r['children'] for r in rs):g}), tau median {statistics.median(r['tau'] for r in rs):.2f} "
            f"({statistics.median(r['tau1'] for r in rs if r['tau1'] == r['tau1']):.2f} among the children on one core), "
            f"top {top} held {sum(r['held'] for r in rs)} of {len(rs)}")
  out += ["", line("all", rows), line("round 1", [r for r in rows if r["round"] == 1]),
          line("fastest child THREAD", [r for r in rows if r["thread"]]), line("fastest without THREAD", [r for r in rows if not r["thread"]])]
  return "\n".join(out)


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--record", type=Path, help="search and write the searches here first (.jsonl.gz)")
  ap.add_argument("--from", dest="source", type=Path, help="replay these recorded searches")
  ap.add_argument("--corpus-seeds", default="0,1")
  ap.add_argument("--prior", type=Path, help="a prior file (default: the shipped one of this machine's family)")
  ap.add_argument("--top", type=int, default=SearchSettings().strategy.measure_top)
  ap.add_argument("--within", type=float, default=0.95)
  args = ap.parse_args()
  if args.record:
    t0 = time.time()
    record(args.record, [int(s) for s in args.corpus_seeds.split(",")])
    print(f"recorded in {time.time() - t0:.0f} s", file=sys.stderr)
  path = args.record or args.source
  if path is None: ap.error("--record or --from")
  prior = priors.read(args.prior) if args.prior else priors.shipped(cpu.options())
  if prior is None: raise SystemExit("no shipped prior for this machine's family")
  print(report(replay(path, prior, args.top, args.within), args.top, args.within))
  return 0


if __name__ == "__main__": sys.exit(main())
