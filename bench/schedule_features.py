"""The cost model's features without lowering (search/features.py schedule_features) against the lowered ones (features):
how well a model fitted on some kernels' measured candidates ranks the candidates of kernels it never saw (Kendall tau
per held-back kernel), and what featurising a candidate costs each way.

  nice -n 19 .venv/bin/python bench/schedule_features.py RESULTS.jsonl.gz [--folds 4] [--seed 0]

RESULTS: what bench/search_prior.py --results wrote (each kernel's document and its full search's result; the shipped
prior's: search/priors/cpu-w16.searches.jsonl.gz). Each timed
candidate's time is taken relative to its search's hand-coded candidate's (search/model_beam.py measured), the kernels are
split into --folds groups (seeded), and each group is ranked by a model fitted on the others' rows, as the shipped prior
ranks a new kernel's children. Featurisation: wall time in this process of computing a candidate's features from its
Kernel (the lowering included for `features`; the search has each child's Kernel already: building it from the opts is
reported apart).
"""
from __future__ import annotations
import argparse, gzip, itertools, json, random, statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sample_efficiency import kendall
from devices import cpu
from linearizer.ast import load
from linearizer.kernel import Kernel, Opt, OptError
from search.cost_model import CostModel
from search.features import features, schedule_features
from search.result import SearchResult


def rows(path: Path) -> dict[str, list[tuple[float, dict[str, list[float]], dict[str, float]]]]:
  """Per kernel: (relative time, {way: features}, {way: seconds to featurise}) of each timed candidate."""
  o, out = cpu.options(), {}
  ways = {"lowered": features, "schedule": schedule_features}
  with gzip.open(path, "rt") as f:
    for line in itertools.islice(f, 1, None):  # after how it was collected
      d = json.loads(line)
      ast, r = load(d["kernel"]).rebased(), SearchResult.from_json(d["result"])
      base = next((c.min_s for c in r.candidates if c.opts == r.baseline_opts and c.min_s), r.baseline_s)
      got = []
      for c in r.candidates:
        if not c.min_s or c.failed: continue
        t = time.perf_counter()
        try: k = Kernel(ast, o).apply_opts([Opt.from_json(x) for x in c.opts])
        except OptError: continue
        secs, fs = {"apply": time.perf_counter() - t}, {}
        for way, fn in ways.items():
          t = time.perf_counter()
          fs[way] = fn(k)
          secs[way] = time.perf_counter() - t
        got.append((c.min_s / base, fs, secs))
      out[ast.name or ast.key] = got
  return out


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("results", type=Path)
  ap.add_argument("--folds", type=int, default=4)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--min-candidates", type=int, default=8, help="held-back kernels with fewer timed candidates are not scored")
  args = ap.parse_args()
  data = rows(args.results)
  names = sorted(data)
  random.Random(args.seed).shuffle(names)
  folds = [names[i::args.folds] for i in range(args.folds)]
  apply = [secs["apply"] * 1e3 for n in names for _, _, secs in data[n]]
  print(f"building each candidate's Kernel from its opts: {statistics.mean(apply):.3f} ms a candidate (median {statistics.median(apply):.3f})")
  for way in ("lowered", "schedule"):
    taus: dict[str, float] = {}
    for held in folds:
      train = [(fs[way], t) for n in names if n not in held for t, fs, _ in data[n]]
      model = CostModel().fit([f for f, _ in train], [t for _, t in train])
      for n in held:
        if len(data[n]) < args.min_candidates: continue
        taus[n] = kendall(list(model.predict([fs[way] for _, fs, _ in data[n]])), [t for t, _, _ in data[n]])
    ms = [secs[way] * 1e3 for n in names for _, _, secs in data[n]]
    print(f"{way}: tau over {len(taus)} held-back kernels: mean {statistics.mean(taus.values()):.3f}, median {statistics.median(taus.values()):.3f} "
          f"(min {min(taus.values()):.2f}, max {max(taus.values()):.2f}); featurising: {statistics.mean(ms):.3f} ms a candidate "
          f"(median {statistics.median(ms):.3f}, max {max(ms):.1f}; {len(ms)} candidates)")
    print("  " + ", ".join(f"{n} {t:.2f}" for n, t in sorted(taus.items())))
  return 0


if __name__ == "__main__": sys.exit(main())
