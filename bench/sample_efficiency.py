"""How many candidates each search strategy measures before it finds a fast schedule, and how well the cost model ranks.

For N corpus kernels (a seeded pick of float32 kernels without variables, of --min-pos..--max-pos output positions x
reduce size, none of those the shipped prior was measured on): a reference beam search (beam --ref-beam, no candidate
budget, capped at --ref-budget-s seconds: as close to exhaustive as the machine allows) and a model-guided one
(strategy=model, beam --model-beam, --measure-top a round, --patience) are run, the two in alternating order kernel by
kernel, each given the whole budget whatever the kernel's worth (worth_s 0: the reference is cut by its cap alone). Per
strategy: the candidates measured until the first verified one within 95% of the speed of the fastest schedule either
found (the beam's own count read off the reference run, in measuring order), and how many it measured in all. Speeds are
compared re-timed side by side in this process (the fastest: each search's three fastest together; then each plausible
candidate, in measuring order, beside it; the fastest's own candidate counts as reached), not across the two searches'
own timings. Ranking quality: Kendall tau-b against the reference run's measured times of a cost model fitted on a
seeded 3/4 of its timed candidates, ranking the held-back quarter (tau), and of the prior shipped for this CPU's family
(search/prior.py, fitted on other kernels) ranking all of them (prior_tau). Per kernel, recorded beside it: the
candidates' mean other load while timed, the wait for a quiet machine before it (--quiet-wait) and the load it ended at,
the load average, the CPU, the device family, the commit, each search's wall time (a reference that took its whole cap
was cut: not exhaustive). A kernel whose search ran nothing or whose winner mismatched here is recorded with its error
(summary's "failed"). The defaults are issue 13's run (100 kernels, the reference an exhaustive beam 8 with no budget:
hours); --json is written after every kernel, so a run can be stopped and gone on with (--resume), on a quiet machine at
a time -- or on another host: the summary is then given per device family too.

  python bench/sample_efficiency.py --quiet-wait 60 --json sample_efficiency.json [--resume]
  python bench/sample_efficiency.py --kernels 3 --ref-beam 2 --ref-budget-s 60     # a quick look
"""
from __future__ import annotations
import argparse, gzip, json, math, random, subprocess, statistics, sys, time
from pathlib import Path
from typing import Callable
from scipy.stats import kendalltau
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from devices import cpu
from linearizer.ast import loads
from linearizer.kernel import Kernel, Opt
from search import prior
from search.cost_model import CostModel
from search.features import schedule_features
from search.result import SearchResult, Status
from search.settings import SearchSettings
from search.load import wait_quiet
from cpu_kernels import QUIET, measure  # and libgomp's short spin for the THREAD candidates (GOMP_SPINCOUNT)
from warm_start import Timed
from search.builder import RenderBug
from search.tune import SearchError, tune

CORPUS = ROOT / "examples" / "corpus" / "tinygrad-v0.8.0-kernels.jsonl.gz"  # in the checkout, as tests/conftest.py


def pick(n: int, seed: int, lo: int, hi: int) -> list:
  """Less the kernels the shipped prior was measured on (search/prior.py): its ranking is judged on kernels it never saw."""
  with gzip.open(CORPUS, "rt", encoding="utf-8") as f: ks = [loads(line) for line in f if line.strip()]
  seen = set(shipped.kernels) if (shipped := prior.shipped(cpu.options())) else set()
  ok = [k for k in ks if k.name not in seen and not k.vars and all(x.dtype.name == "float32" for x in k.nodes)
        and lo <= math.prod(k.full_shape) <= hi]
  random.Random(seed).shuffle(ok)
  return ok[:n]


def verified(c) -> bool: return c.status is Status.OK and c.verified


def retime(fns: dict) -> dict[str, float]:
  """Fastest run of each timed schedule (the searches' own measure), timed interleaved in one run: two searches' own
  timings of microsecond kernels differ by more than the 5% allowed."""
  ts = measure(fns, min_time=0.1, min_runs=7, max_runs=400, turn=0.02)
  return {who: min(t) for who, t in ts.items()}


def best_schedule(timed: Timed, runs: dict[str, SearchResult]) -> tuple[list[dict], float, Callable[[], float]]:
  """The fastest schedule either search found, by re-timing each search's three fastest verified ones together."""
  top = {json.dumps(c.opts): c.opts for r in runs.values() for c in sorted(filter(verified, r.candidates), key=lambda c: c.fastest_s)[:3]}
  fns = {key: timed.timer(key, opts) for key, opts in top.items()}
  fastest = retime(fns)
  key = min(fastest, key=fastest.__getitem__)
  return top[key], fastest[key], fns[key]


def to_95(timed: Timed, r: SearchResult, best: list[dict], best_fn: Callable[[], float], best_s: float) -> int | None:
  """1-based count of candidates measured until the first verified one within 95% of the best schedule's speed: the best
  schedule itself, or one re-timed beside it, each plausible one (its own timing within 2x: a busy machine's timings in
  the search were off by over 25%, and the best schedule's own candidate was passed over) in measuring order."""
  for i, c in enumerate(r.candidates):
    if verified(c) and c.opts == best: return i + 1
    if verified(c) and c.fastest_s * 0.5 <= best_s:
      fastest = retime({"best": best_fn, "cand": timed.timer("cand", c.opts)})
      if fastest["cand"] * 0.95 <= fastest["best"]: return i + 1
  return None


def kendall(pred, t) -> float:
  """Kendall's tau-b (ties counted as scipy does), the statistic every bench script reports."""
  return float(kendalltau(pred, t).statistic)


def taus(ast, r: SearchResult, seed: int) -> tuple[float | None, float | None]:
  """Kendall tau of (a) a model fitted on a seeded 3/4 of the run's timed candidates, ranking the held-back quarter, and
  (b) the shipped prior's model (search/prior.py, fitted on other kernels) ranking all of them; None under 12."""
  timed = [c for c in r.candidates if c.min_s]
  if len(timed) < 12: return None, None
  random.Random(seed).shuffle(timed)
  X = [schedule_features(Kernel(ast, cpu.options()).apply_opts([Opt.from_json(o) for o in c.opts])) for c in timed]
  t, cut = [c.min_s for c in timed], len(timed) * 3 // 4
  shipped = prior.model(cpu.options())
  return kendall(CostModel().fit(X[:cut], t[:cut]).predict(X[cut:]), t[cut:]), None if shipped is None else kendall(shipped.predict(X), t)


def summary(rows: list[dict]) -> dict:
  """Over every row, and per device family where the rows mix families (a run resumed on another host: each family's
  model strategy ranks by its own prior, and prior_tau is that prior's)."""
  out = _summary(rows)
  if len(families := sorted({r["family"] for r in rows})) > 1:
    out["by_family"] = {f: _summary([r for r in rows if r["family"] == f]) for f in families}
  return out


def _summary(rows: list[dict]) -> dict:
  out: dict = {"kernels": len(rows), "failed": [r["kernel"] for r in rows if "error" in r]}
  rows = [r for r in rows if "error" not in r]
  for who in ("beam", "model"):
    got = [r[f"{who}_to_95"] for r in rows if r[f"{who}_to_95"] is not None]
    out[f"{who}_reached_95"] = f"{len(got)}/{len(rows)}"  # the median is over these only: a run that never got there has no count
    out[f"{who}_to_95_median"] = statistics.median(got) if got else None
    # the done-when's median: over every kernel, one that never got there counting as more than any count ("never")
    every = sorted(got) + [math.inf] * (len(rows) - len(got))
    out[f"{who}_to_95_median_all"] = None if not every else "never" if (m := statistics.median_high(every)) == math.inf else m
    out[f"{who}_to_95_quartiles"] = statistics.quantiles(got, n=4, method="inclusive") if len(got) > 1 else None  # never past the data
  for k in ("tau", "prior_tau"): out[f"{k}_median"] = statistics.median(t) if (t := [r[k] for r in rows if r[k] is not None]) else None
  return out


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--kernels", type=int, default=100)
  p.add_argument("--seed", type=int, default=0)
  # from 64K positions: a kernel of a few microseconds tells two schedules 5% apart by layout (two builds of one
  # schedule, re-timed side by side, differed by more on this VM), not by speed
  p.add_argument("--min-pos", type=int, default=1 << 16)
  p.add_argument("--max-pos", type=int, default=1 << 20)
  p.add_argument("--ref-beam", type=int, default=8, help="the reference beam's width (default 8: issue 13's exhaustive beam)")
  p.add_argument("--ref-budget-s", type=float, default=86400.0, help="its cap in seconds (default a day: no budget)")
  # the model strategy as it would run: its own beam width and patience (search/settings.py's defaults), not the reference's
  p.add_argument("--model-beam", type=int, default=4)
  p.add_argument("--measure-top", type=int, default=9)
  p.add_argument("--patience", type=int, default=1)
  p.add_argument("--quiet-wait", type=float, default=0.0, metavar="S", help="before each kernel, wait up to S s for the rest of the "
                 f"machine to use under {QUIET} cores (the wait and the load it ended at are recorded)")
  p.add_argument("--json", type=Path, help="written after every kernel; with --resume, the kernels it holds are not run again")
  p.add_argument("--resume", action="store_true", help="go on from --json's rows (a run of the same settings: refused otherwise)")
  a = p.parse_args()
  settings = {k: getattr(a, k) for k in ("seed", "min_pos", "max_pos", "ref_beam", "ref_budget_s", "model_beam", "measure_top", "patience")}
  out = {"command": " ".join(sys.argv), "settings": settings, "rows": []}
  if a.resume:
    if a.json is None or not a.json.exists(): raise SystemExit("--resume needs an existing --json")
    out = json.loads(a.json.read_text())
    if out.get("settings") != settings: raise SystemExit(f"--resume: {a.json} was run with {out.get('settings')}, not {settings}")
  done = {r["kernel"] for r in out["rows"]}
  commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
  common = dict(budget_s=a.ref_budget_s, worth_s=0, min_time_s=0.005, final_rounds=1, on_busy="store")
  for i, ast in enumerate(pick(a.kernels, a.seed, a.min_pos, a.max_pos)):
    if ast.name in done: continue
    waited, load = wait_quiet(QUIET, a.quiet_wait) if a.quiet_wait > 0 else (0.0, None)
    runs: dict[str, SearchResult] = {}
    try:
      for who in (("beam", "model") if i % 2 == 0 else ("model", "beam")):
        model = {"strategy": "model", "beam": a.model_beam, "measure_top": a.measure_top, "patience": a.patience} if who == "model" \
          else {"strategy": "beam", "beam": a.ref_beam}
        runs[who] = tune(ast, settings=SearchSettings.from_json(dict(common, **model)))
        print(f"{ast.name} {who}: {len(runs[who].candidates)} candidates, {runs[who].search_s:.1f} s", file=sys.stderr)
      timed = Timed(ast, a.seed)  # inputs and the reference made once for every re-timing of this kernel
      best, best_s, best_fn = best_schedule(timed, runs)
      row = {"kernel": ast.name, "shape": [int(x) for x in ast.full_shape], "best_s": best_s, "best_opts": best,
             **{f"{who}_to_95": to_95(timed, r, best, best_fn, best_s) for who, r in runs.items()},
             **{f"{who}_measured": len(r.candidates) for who, r in runs.items()},
             **{f"{who}_search_s": round(r.search_s, 1) for who, r in runs.items()},
             **dict(zip(("tau", "prior_tau"), taus(ast, runs["beam"], a.seed))),
             "other_load": round(statistics.mean(c.other_load for r in runs.values() for c in r.candidates), 2),
             "quiet_wait_s": round(waited, 1), "load_at_start": None if load is None else round(load, 2)}
    except (SearchError, RenderBug, AssertionError) as e:  # nothing ran, a bug, or a schedule mismatched here: recorded, not run again on --resume
      row = {"kernel": ast.name, "error": f"{type(e).__name__}: {e}"}
    out["rows"].append({**row, "cpu": cpu.fingerprint()["cpu"], "family": prior.family(cpu.options()), "commit": commit,
                        "loadavg": Path("/proc/loadavg").read_text().split()[:3], "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())})
    print(json.dumps(out["rows"][-1]))
    out.update(summary(out["rows"]))
    if a.json: a.json.write_text(json.dumps(out, indent=1) + "\n")
  print(json.dumps({k: v for k, v in out.items() if k != "rows"}))


if __name__ == "__main__": main()
