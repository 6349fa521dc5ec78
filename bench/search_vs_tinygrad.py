"""tunesvc's search against tinygrad's BEAM search, on the same kernels on this machine, in one run.

  .venv/bin/python bench/search_vs_tinygrad.py                    # every kernel: a markdown report (30-40 min when quiet)
  .venv/bin/python bench/search_vs_tinygrad.py --quick --kernels matmul_512,sops_2350 --json /tmp/svt.json

Kernels: the five of bench/cpu_kernels.py (examples/kernels/*.json, with tinygrad twins in bench/_tinygrad.py) and ten
of the shared corpus (`corpus`: chosen by choose_corpus), or any corpus kernel by its name. tinygrad 0.14 takes no
ShapeTracker AST, so a corpus kernel is rebuilt for it by to_plan: each view as movement ops on a flat input, the ALU
ops as Tensor ops; what that cannot express exactly is skipped with the reason.

Per kernel: the reference output (linearizer.reference) on seeded random inputs; tunesvc's search (search.tune,
SearchSettings(beam=--beam, budget_s=--budget-s)); tinygrad's BEAM=--beam search of the same computation on the same
inputs; both winners' outputs checked against the reference (a MISMATCH is printed loudly and makes the exit status 1);
then both winners timed by the same kind of timer, wall time around the ctypes call of the compiled function (tunesvc's
Program.time; tinygrad's kernels run by its time_call, with a clock around CPUProgram's ctypes calls: see
bench/_tinygrad.py), interleaved as bench/cpu_kernels.py does: medians. Before each phase (either search, the timing)
the script waits for the rest of the machine to go quiet.

Limits: tinygrad's BEAM has no budget; it keeps its defaults (BEAM_UOPS_MAX, BEAM_UPCAST_MAX, early stop at 3x the
best, ...) but for BEAM_TIMEOUT_SEC, a candidate's compile limit, raised from 10 s to tunesvc's 60 s; the child (and
its compile workers) is killed past --tinygrad-limit-s (1200 s) and that kernel reads n/a. Its search of matmul_1024
took 640 s on the 2-core VM with other work on it, so expect ~5 min when quiet; tunesvc's budget (240 s) is generous:
its searches here stop by converging first, and the report marks one cut by the budget.
Threads: each keeps its default: tunesvc's search may pick THREAD up to the machine's cores (OpenMP, in parallel);
tinygrad's BEAM may pick THREAD up to NUM_CPU_THREADS, whose parts its CPU backend runs one after another. The report
says what each winner used. tinygrad compiles BEAM candidates in its worker pool while it times (its default);
tunesvc pauses its compile pool while it times.
"""
from __future__ import annotations
import argparse, atexit, datetime, gzip, json, math, os, random, shlex, shutil, signal, sys, tempfile, threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional
import numpy as np
from cpu_kernels import ROOT, SPECS, Tinygrad, machine, measure_quietly, med, quiet, spread, start_tinygrad, tg_note, timing_args
from devices import cpu
from linearizer.ast import ALU, KernelAST, LazyOp, loads
from linearizer.compare import compare
from linearizer.fuzz import positions
from linearizer.reference import expected_range, random_buffers
from linearizer.shapetracker import View, strides_for_shape
from search.settings import SearchSettings
from search.tune import DeviceBusy, SearchError, tune
from tunesvc.runtime import compile_kernel

CORPUS = ROOT / "examples" / "corpus" / "tinygrad-v0.8.0-kernels.jsonl.gz"  # in the checkout, as tests/conftest.py
CORPUS_PICK = dict(reduce=6, elementwise=4, seed=0, min_positions=1 << 16, max_positions=1 << 22)
# tinygrad computes these with its own approximations, an ulp from libm's; in GELU's backward kernels that ulp grows past
# the check's tolerance (the reference itself fails it with every EXP2 one ulp high), so the chosen kernels have none
TRANSCENDENTAL = ("EXP2", "LOG2", "SIN")
# tinygrad's BEAM knobs: its defaults but for the compile timeout (10 s), raised to tunesvc's compile_timeout_s, so
# neither search drops a slow-to-compile candidate the other may keep; the per-kernel wall limit is --tinygrad-limit-s
TG_BEAM_ENV = {"BEAM_TIMEOUT_SEC": f"{SearchSettings().build.compile_timeout_s:.0f}"}
# tunesvc's default search: the beam, every child of its members measured but those pruned. Its winners are the quality
# bar of a faster one (issue 13: a geometric mean at least as fast). Until 2026-11-26 `previous` was one gcc a
# candidate, every one checked; on 2026-11-27 the beam with prune 0, then prune at its default (3); on 2026-11-29 without
# the roofline stop (search/roofline.py): a search not ended where its best moves its bytes as fast as a stream
PREVIOUS = {"strategy": "beam", "roofline": False}

# ---------------------------------------------------------------- corpus kernels as tinygrad Tensor programs

class Unexpressible(Exception): pass

def view_moves(v: View) -> tuple[list[tuple[str, Any]], int]:
  """Movement ops that make a flat tensor read what view `v` reads (0 where masked), and the length that tensor needs.
  The strided dims must nest: sorted by stride, each dim's whole extent fits in one step of the dim above. Then the
  flat tensor is cut at the lowest position and, outermost dim first, reshaped to (size, stride) and shrunk to the
  next dim's extent; broadcast dims are expanded, negative strides flipped and the mask padded back with zeros."""
  mask = v.mask or tuple((0, s) for s in v.shape)
  if any(lo >= hi for lo, hi in mask): raise Unexpressible("a mask that hides the whole view")
  shape = [hi - lo for lo, hi in mask]
  live = [i for i, s in enumerate(shape) if s > 1]
  flips = [i for i in live if v.strides[i] < 0]
  off = v.offset + sum(lo * st for (lo, _), st in zip(mask, v.strides)) + sum((shape[i] - 1) * v.strides[i] for i in flips)
  dims = sorted((i for i in live if v.strides[i] != 0), key=lambda i: -abs(v.strides[i]))
  sz, st = [shape[i] for i in dims], [abs(v.strides[i]) for i in dims]
  if any(st[j] < sz[j + 1] * st[j + 1] for j in range(len(dims) - 1)):
    raise Unexpressible(f"strides that do not nest: shape {v.shape}, strides {v.strides}")
  extents = [s * t for s, t in zip(sz, st)][1:] + [1]
  moves: list[tuple[str, Any]] = [("shrink", [(off, off + (sz[0] * st[0] if dims else 1))])]
  for j in range(len(dims)):
    moves.append(("reshape", sz[:j] + [sz[j], st[j]]))
    if extents[j] != st[j]: moves.append(("shrink", [(0, s) for s in sz[:j + 1]] + [(0, extents[j])]))
  rest = [i for i in range(len(shape)) if i not in dims]
  order = [(dims + rest).index(i) for i in range(len(shape))]
  moves.append(("reshape", sz + [1] * len(rest)))
  if order != sorted(order): moves.append(("permute", order))
  if [shape[i] for i in dims + rest] != sz + [1] * len(rest): moves.append(("expand", shape))
  if flips: moves.append(("flip", flips))
  if v.mask: moves.append(("pad", [(lo, s - hi) for (lo, hi), s in zip(mask, v.shape)]))
  return moves, off + (sz[0] * st[0] if dims else 1)

def store_moves(v: View, size: int) -> list[tuple[str, Any]]:
  """Movement ops that lay the output out flat in its buffer: the store's view must be a permuted dense layout of it."""
  dims = sorted((i for i, s in enumerate(v.shape) if s != 1), key=lambda i: -v.strides[i])
  sz = [v.shape[i] for i in dims]
  if v.offset != 0 or v.mask is not None or [v.strides[i] for i in dims] != list(strides_for_shape(sz)) or math.prod(sz) != size:
    raise Unexpressible(f"an output view that is not a dense layout of its buffer: {v}")
  return [("permute", dims + [i for i in range(len(v.shape)) if i not in dims]), ("reshape", [size])]

def single_view(n: LazyOp) -> View:
  views = n.arg.st.simplify().views
  if len(views) > 1: raise Unexpressible(f"{n.op} through {len(views)} views")
  return views[0]

def node_dtypes_ok(n: LazyOp) -> bool:
  """float32 everywhere, but for the bools of comparisons, which only WHERE and CAST read."""
  ins = [s.dtype.name for s in n.src]
  if n.op in ("LOAD", "CONST", "STORE", "REDUCE"): return n.dtype.name == "float32"
  if n.op == "CAST": return not n.arg.bitcast and {ins[0], n.dtype.name} == {"float32", "bool"}
  if n.op == "WHERE": return ins == ["bool", "float32", "float32"]
  return n.op in ALU and n.op not in ("MOD", "XOR") and set(ins) == {"float32"}

def to_plan(k: KernelAST) -> tuple[list[dict], list[int]]:
  """k (rebased, so its inputs start at index 0) as a bench/_tinygrad.py plan, and the length each input tensor needs
  (a flat input may have to reach past the buffer's end, where nothing is read); Unexpressible if it is not exact."""
  if k.vars: raise Unexpressible("symbolic variables")
  if not any(n.op == "LOAD" for n in k.nodes): raise Unexpressible("no input: tinygrad folds a constant kernel away")
  sizes = k.buffer_sizes()
  lengths = sizes[1:]
  index: dict[LazyOp, int] = {}
  plan: list[dict] = []
  for n in k.nodes:
    if not node_dtypes_ok(n):
      ins = "/".join(s.dtype.name for s in n.src)
      raise Unexpressible(f"{n.dtype.name} {n.op}" + (f" of {ins}" if ins else ""))
    d: dict = {"op": n.op, "src": [index[s] for s in n.src]}
    if n.op == "LOAD":
      d["moves"], need = view_moves(single_view(n))
      d["buf"], lengths[n.arg.buf - 1] = n.arg.buf, max(lengths[n.arg.buf - 1], need)
    elif n.op == "CONST":
      d.update(moves=view_moves(single_view(n))[0], val=n.arg.val, dtype=n.arg.dtype.name)
    elif n.op == "STORE": d["moves"] = store_moves(single_view(n), sizes[0])
    elif n.op == "CAST": d["dtype"] = n.arg.dtype.name
    elif n.op == "REDUCE": d.update(fn=n.arg.fn, axis=list(n.arg.axis))
    index[n] = len(plan)
    plan.append(d)
  return plan, lengths

# ---------------------------------------------------------------- the kernels

@dataclass
class Case:
  """One kernel, ready for both searches. tinygrad builds its twin (bench/_tinygrad.py's EXPRS[name]) or the plan."""
  name: str
  k: KernelAST                        # rebased: the runner's buffers start at each kernel's lowest index
  plan: Optional[list[dict]] = None
  lengths: Optional[list[int]] = None  # the plan's flat inputs: how long each must be

def corpus() -> dict[str, KernelAST]:
  with gzip.open(CORPUS, "rt", encoding="utf-8") as f: ks = [loads(line) for line in f if line.strip()]
  return {k.name or f"L{i}": k for i, k in enumerate(ks)}

def corpus_case(name: str, k: KernelAST) -> Case:
  kr = k.rebased()
  return Case(name, kr, *to_plan(kr))

def choose_corpus(ks: dict[str, KernelAST], seed: int, pick_seed: int = CORPUS_PICK["seed"]) -> tuple[list[str], Counter]:
  """CORPUS_PICK's reductions and element-wise kernels: a seeded shuffle of the expressible float32 ones whose full shape
  has min_positions..max_positions positions (long enough to time, cheap to check) and no TRANSCENDENTAL op, taken in
  order while the reference output on the inputs of `seed` is finite (NaN and inf semantics differ between the two
  libraries); and why the others were not. `pick_seed`: the shuffle's (another draws ten other kernels)."""
  why: Counter = Counter()
  ok = []
  for name, k in ks.items():
    try: corpus_case(name, k)
    except Unexpressible as e: why[str(e).split(":")[0]] += 1; continue
    if not CORPUS_PICK["min_positions"] <= positions(k, k.var_vals()) <= CORPUS_PICK["max_positions"]: why["too small or too large"] += 1
    elif any(n.op in TRANSCENDENTAL for n in k.nodes): why["a transcendental op"] += 1
    else: ok.append(name)
  random.Random(pick_seed).shuffle(ok)
  want = {True: CORPUS_PICK["reduce"], False: CORPUS_PICK["elementwise"]}
  picked = []
  for name in ok:
    red = ks[name].reduceop is not None
    if want[red] == 0: continue
    if not np.isfinite(reference_of(ks[name].rebased(), seed)[0]).all(): why["a non-finite reference output"] += 1; continue
    want[red] -= 1
    picked.append(name)
  return picked, why

def example_case(name: str) -> Case:
  return Case(name, loads((ROOT / "examples" / "kernels" / f"{name}.json").read_text()).rebased())

def inputs_for(c: Case, bufs: list[np.ndarray]) -> list[np.ndarray]:
  """What tinygrad loads: a twin's inputs in their shapes, a plan's flat and zero-padded to the lengths it needs."""
  if c.plan is None: return [b.reshape(s) for b, s in zip(bufs[1:], SPECS[c.name].shapes)]
  return [np.concatenate([b, np.zeros(n - b.size, b.dtype)]) for b, n in zip(bufs[1:], c.lengths)]

def reference_of(k: KernelAST, seed: int = 0) -> tuple[np.ndarray, tuple, list[np.ndarray]]:
  """(want, SUM bounds, the buffers): the reference output on seeded random inputs."""
  bufs = random_buffers(k, None, seed)
  want, lo, hi = expected_range(k, bufs)
  return want, (lo, hi) if lo is not None else None, bufs

# ---------------------------------------------------------------- one kernel, both searches

def opt_str(o: dict) -> str: return f"{o['op']} {o['axis']} {o['amt']}"

def bench_kernel(c: Case, args, tg: Optional[Tinygrad], tmp: Path) -> dict:
  k, vv = c.k, c.k.var_vals()
  want, bounds, bufs = reference_of(k, args.seed)
  res: dict = {"name": c.name, "flops": k.flops(), "bytes": k.bytes(), "reduce": k.reduceop is not None, "notes": {}, "mismatch": []}
  fns: dict[str, Callable[[], float]] = {}

  def check(who: str, got: np.ndarray, ins: list[np.ndarray]) -> bool:
    if (bad := compare(k, [got, *ins], [want, *bufs[1:]], vv, bounds)) is None: return True
    print(f"\n!!!!!!!! MISMATCH: {c.name} / {who}: {bad}\n", file=sys.stderr)
    res["notes"][who], res["mismatch"] = f"MISMATCH: {bad}", res["mismatch"] + [who]
    return False

  def search(who: str, settings: dict) -> None:
    """tunesvc's search, then its winner compiled here, checked and kept for the timing."""
    quiet(args, None)
    try:
      r = tune(k, "CPU", SearchSettings.from_json({"beam": args.beam, "budget_s": args.budget_s, "seed": args.seed, **settings}))
      res[who] = {"search_s": r.search_s, "opts": [opt_str(o) for o in r.best_opts], "candidates": len(r.candidates),
                  "failed": r.failed, "hand_s": r.baseline_s, "search_best_s": r.best_s}
      _, prg, _ = compile_kernel(k, "CPU", r.best_opts)
      out, ins = cpu.alloc(bufs[0].size, bufs[0].dtype), [cpu.alloc(b.size, b.dtype) for b in bufs[1:]]
      for x, b in zip([out, *ins], bufs): x[:] = b  # the output starts poisoned
      args_vv = [vv[v.name] for v in k.vars]
      prg(out, *ins, var_vals=args_vv)
      if check(who, out, ins): fns[who] = lambda: prg.time(out, *ins, var_vals=args_vv)
    except (SearchError, DeviceBusy) as e: res["notes"][who] = f"search failed: {tg_note(e)}"  # busy: the search refused to store

  search("tunesvc", args.settings)
  if not args.no_previous: search("previous", PREVIOUS)  # second: the compile cache holds what both built, in its favour

  # tinygrad: its BEAM search of the twin or the plan, on the same inputs through .npy files
  if tg is not None:
    quiet(args, tg.proc.pid)
    paths = [str(tmp / f"in{i}.npy") for i in range(len(bufs) - 1)]
    for p, x in zip(paths, inputs_for(c, bufs)): np.save(p, x)
    killer = threading.Timer(args.tinygrad_limit_s, os.killpg, (tg.proc.pid, signal.SIGKILL))  # its BEAM has no budget
    killer.start()
    try:
      res["tinygrad"] = tg.ask(cmd="setup", name=c.name, inputs=paths, out=str(tmp / "out.npy"), beam=args.beam, plan=c.plan)
      if check("tinygrad", np.load(tmp / "out.npy").reshape(-1), bufs[1:]): fns["tinygrad"] = lambda: tg.ask(cmd="time")["t"]
    except RuntimeError as e:
      res["notes"]["tinygrad"] = f"search killed after {args.tinygrad_limit_s:g} s" if not killer.is_alive() else str(e)[:300]
    finally:
      killer.cancel()
      for p in paths: os.unlink(p)

  res.update(measure_quietly(fns, args, tg.proc.pid if tg is not None else None))
  return res

# ---------------------------------------------------------------- the report

def best(r: dict, who: str) -> Optional[float]: return med(r["times"][who]) if who in r["times"] else None
def speed_ratio(r: dict, other: str = "tinygrad") -> Optional[float]:
  t, g = best(r, "tunesvc"), best(r, other)
  return g / t if t and g else None
def search_s(r: dict, who: str) -> Optional[float]: return r[who]["compile_s" if who == "tinygrad" else "search_s"] if who in r else None
def geomean(xs: list[float]) -> Optional[float]: return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None
def fmt(x: Optional[float], f: str, unit: str = "") -> str: return "n/a" if x is None else format(x, f) + unit
def best_cell(r: dict, who: str) -> str:
  return "MISMATCH" if who in r["mismatch"] else fmt(t * 1e3 if (t := best(r, who)) else None, ".3g", " ms")
def threads(opts: list[str]) -> int: return math.prod(int(o.split()[2]) or 1 for o in opts if o.startswith("THREAD"))
def used_threads(r: dict, who: str) -> str:
  if who not in r: return "n/a"
  return str(max(map(threads, r[who]["opts"]), default=1) if who == "tinygrad" else threads(r[who]["opts"]))

def report(results: list[dict], cmd: str, facts: list[str], args, tg_info: Optional[dict]) -> str:
  when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
  tgt = tg_info["threads"] if tg_info else "n/a"
  lines = [f"Command: `{cmd}`", f"Date: {when}", "", *facts,
           f"- tunesvc: search.tune with SearchSettings(beam={args.beam}, budget_s={args.budget_s:g}"
           f"{''.join(f', {k}={v!r}' for k, v in args.settings.items())}); THREAD up to {cpu.options().threads} OpenMP threads, "
           "run in parallel; a fresh compile cache (TUNESVC_CACHE_DIR) for the run",
           *([] if args.no_previous else [f"- previous: tunesvc's full search ({PREVIOUS}), run "
              "second on each kernel (the compile cache holding what the first built), timed interleaved with the others"]),
           f"- tinygrad: BEAM={args.beam} ({', '.join(f'{k}={v}' for k, v in TG_BEAM_ENV.items())}, the rest its defaults; "
           f"killed past {args.tinygrad_limit_s:g} s); THREAD up to NUM_CPU_THREADS={tgt}, whose parts its CPU backend runs one after another",
           f"- timing: the winners interleaved, turns of {args.turn:g} s, until {args.min_time:g} s and >= {args.min_runs} runs each "
           f"(or {args.max_runs} runs); the median shown. Search time: wall time of tune() (reference, pools, final re-timing "
           f"included) and of tinygrad's compile_linear with BEAM (its schedule's kernels searched and compiled)", "",
           f"| kernel | tunesvc best | tinygrad BEAM={args.beam} best | speed ratio | tunesvc search | tinygrad search | search-time ratio "
           "| previous best | speed vs previous | previous search | tunesvc opts | tinygrad opts |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
  for r in results:
    ts, gs = search_s(r, "tunesvc"), search_s(r, "tinygrad")
    tgo = "; ".join(f"[{', '.join(o)}]" for o in r["tinygrad"]["opts"]) if "tinygrad" in r else "n/a"
    cut = " (budget)" if ts and ts >= args.budget_s else ""  # stopped by its budget, not by converging
    lines.append(f"| {r['name']} | {best_cell(r, 'tunesvc')} | {best_cell(r, 'tinygrad')} | {fmt(speed_ratio(r), '.2f')} "
                 f"| {fmt(ts, '.1f', ' s')}{cut} "
                 f"| {fmt(gs, '.1f', ' s')} | {fmt(gs / ts if ts and gs else None, '.2f')} "
                 f"| {best_cell(r, 'previous')} | {fmt(speed_ratio(r, 'previous'), '.2f')} | {fmt(search_s(r, 'previous'), '.1f', ' s')} "
                 f"| [{', '.join(r['tunesvc']['opts']) if 'tunesvc' in r else 'n/a'}] | {tgo} |")
  if notes := [f"- {r['name']}, {who}: {note}" for r in results for who, note in r["notes"].items()]: lines += ["", "Notes:", "", *notes]
  ratios = [x for r in results if (x := speed_ratio(r)) is not None]
  prev = [x for r in results if (x := speed_ratio(r, "previous")) is not None]
  geo, geo_prev = geomean(ratios), geomean(prev)
  lines += ["", "speed ratio: tinygrad's best time over tunesvc's (above 1, tunesvc's kernel is faster); search-time ratio: "
            "tinygrad's search wall time over tunesvc's (above 1, tunesvc searched faster); speed vs previous: the previous "
            "search's winner's time over tunesvc's.", "",
            f"Geometric mean of the speed ratios over {len(ratios)} of {len(results)} kernels: {fmt(geo, '.2f')}"
            + ("" if geo is None else f" ({'tunesvc at least as fast' if geo >= 1 else 'tinygrad faster'})"),
            f"Geometric mean of the speeds vs previous over {len(prev)} kernels: {fmt(geo_prev, '.3f')}", "",
            "Runs and spread (interquartile range / median); threads each winner used (tinygrad's in series); other load: "
            "cores the rest of the machine kept busy while timing:", "",
            "| kernel | tunesvc | tinygrad | previous | threads tunesvc / tinygrad / previous | candidates tunesvc / previous (failed) "
            "| other load | attempts |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
  for r in results:
    who = ("tunesvc", "tinygrad", "previous")
    runs = [f"{len(r['times'][w])} runs, {spread(r['times'][w]):.1%}" if w in r["times"] else "n/a" for w in who]
    cand = " / ".join(f"{r[w]['candidates']} ({r[w]['failed']})" if w in r else "n/a" for w in ("tunesvc", "previous"))
    lines.append(f"| {r['name']} | {' | '.join(runs)} | {' / '.join(used_threads(r, w) for w in who)} | {cand} | {r['other_load']:.2f} "
                 f"| {r['attempts']} |")
  lines += ["", "Targets:", ""]
  r = next((r for r in results if r["name"] == "matmul_1024"), None)
  x, ts, gs = (speed_ratio(r), search_s(r, "tunesvc"), search_s(r, "tinygrad")) if r else (None, None, None)
  lines += [f"- matmul_1024: tuned kernel at least as fast as tinygrad BEAM={args.beam}'s: "
            + ("n/a" if x is None else f"{x:.2f}x, {'MET' if x >= 1 else 'NOT MET'}"),
            "- matmul_1024: tunesvc's search at most half of tinygrad's wall time: "
            + ("n/a" if not (ts and gs) else f"{ts:.0f} s vs {gs:.0f} s, {'MET' if ts <= gs / 2 else 'NOT MET'}"),
            "- all kernels: geometric-mean speed of tunesvc's winners at least tinygrad's: "
            + ("n/a" if geo is None else f"{geo:.2f}, {'MET' if geo >= 1 else 'NOT MET'}")]
  quick = [r["name"] for r in results if (ts := search_s(r, "tunesvc")) and (gs := search_s(r, "tinygrad")) and ts <= gs / 4]
  timed = [r for r in results if search_s(r, "tunesvc") and search_s(r, "tinygrad")]
  lines += [f"- every kernel: tunesvc's search at most 25% of tinygrad's wall time: {len(quick)} of {len(timed)} kernels, "
            + ("MET" if timed and len(quick) == len(results) else "NOT MET"),
            "- the winners' geometric-mean speed at least the previous search's: "
            + ("n/a" if geo_prev is None else f"{geo_prev:.3f}, {'MET' if geo_prev >= 1 else 'NOT MET'}")]
  return "\n".join(lines)

# ---------------------------------------------------------------- main

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--kernels", default=",".join([*SPECS, "corpus"]),
                  help=f"comma-separated, of: {', '.join(SPECS)}, corpus (the ten chosen), or a corpus kernel's name")
  ap.add_argument("--beam", type=int, help="beam width of both searches (default 4; 1 with --quick)")
  ap.add_argument("--budget-s", type=float, help="tunesvc's search budget in seconds (default 240; 10 with --quick)")
  ap.add_argument("--tinygrad-limit-s", type=float, help="kill tinygrad's search of one kernel past this many seconds "
                  "(default 1200; 120 with --quick)")
  ap.add_argument("--quick", action="store_true", help="for development: beam 1, a 10 s budget, tinygrad killed past 120 s, "
                  "and short timings (--min-time 0.1, --min-runs 3, --quiet-wait at most 10, --retries 0)")
  ap.add_argument("--seed", type=int, default=0, help="the inputs' seed")
  ap.add_argument("--corpus-seed", type=int, default=CORPUS_PICK["seed"], help="the seed that picks `corpus`'s ten kernels")
  ap.add_argument("--settings", type=json.loads, default={}, help="more of tunesvc's search settings, as JSON (its defaults otherwise)")
  ap.add_argument("--no-previous", action="store_true", help="skip tunesvc's default search "
                  f"(PREVIOUS: {PREVIOUS})")
  ap.add_argument("--json", type=Path, help="also write every sample, schedule and search record here")
  timing_args(ap)
  args = ap.parse_args()
  q = args.quick
  os.environ["TUNESVC_CACHE_DIR"] = cache = tempfile.mkdtemp(prefix="bench-svt-cache-")  # cold, as tinygrad's (CACHELEVEL=0)
  atexit.register(shutil.rmtree, cache, True)
  args.beam = args.beam or (1 if q else 4)
  args.budget_s = args.budget_s or (10.0 if q else 240.0)
  args.tinygrad_limit_s = args.tinygrad_limit_s or (120.0 if q else 1200.0)
  if q: args.min_time, args.min_runs, args.quiet_wait, args.retries = 0.1, 3, min(args.quiet_wait, 10), 0
  cmd = shlex.join([os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else sys.executable,
                    os.path.relpath(__file__, ROOT), *sys.argv[1:]])

  names = [n.strip() for n in args.kernels.split(",") if n.strip()]
  ks = corpus() if set(names) - set(SPECS) else {}
  cases, facts = [], []
  for n in names:
    if n in SPECS: cases.append(example_case(n)); continue
    if n == "corpus":
      picked, skipped = choose_corpus(ks, args.seed, args.corpus_seed)
      facts.append(f"- corpus: {', '.join(picked)}: a seeded sample ({dict(CORPUS_PICK, seed=args.corpus_seed)}) of {len(ks)} kernels; the others: "
                   + ", ".join(f"{c} {w}" for w, c in skipped.most_common()))
    elif n in ks: picked = [n]
    else: ap.error(f"unknown kernel {n!r}: one of {list(SPECS)}, corpus, or a corpus kernel's name")
    for p in picked:
      try: cases.append(corpus_case(p, ks[p]))
      except Unexpressible as e: print(f"{p}: skipped, tinygrad cannot express it exactly: {e}", file=sys.stderr)
  print(*facts, sep="\n", file=sys.stderr)

  with tempfile.TemporaryDirectory(prefix="bench-svt-") as td:
    tmp, results = Path(td), []
    tg, why = start_tinygrad(args.tinygrad_dev, tmp, TG_BEAM_ENV)
    tg_info = tg.info if tg is not None else None
    if tg is None: print(f"tinygrad: n/a: {why}", file=sys.stderr)
    try:
      for c in cases:
        print(f"{c.name} ...", file=sys.stderr, flush=True)
        results.append(bench_kernel(c, args, tg, tmp))
        if tg is not None and tg.proc.poll() is not None: tg, _ = start_tinygrad(args.tinygrad_dev, tmp, TG_BEAM_ENV)  # killed
    finally:
      if tg is not None: tg.close()
  print(report(results, cmd, machine(tg_info, args.tinygrad_dev, why, args.beam) + facts, args, tg_info))
  if args.json:
    args.json.write_text(json.dumps({"command": cmd, "tinygrad": tg_info, "corpus_pick": CORPUS_PICK, "results": results}, indent=1))
  bad = [(r["name"], w) for r in results for w in r["mismatch"]]
  if bad: print(f"\nMISMATCH in {bad}: these kernels computed wrong results", file=sys.stderr)
  return 1 if bad else 0

if __name__ == "__main__": sys.exit(main())
