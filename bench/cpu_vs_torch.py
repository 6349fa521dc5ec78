"""CPU kernels of real models against the libraries a CPU user would reach for, in one run: tunesvc (hand-coded and
tuned schedules), numpy (OpenBLAS), torch eager, torch.compile (Inductor's C++ backend) and tinygrad, at equal threads.

  .venv/bin/python bench/cpu_vs_torch.py --threads 2                        # every kernel; a markdown report
  .venv/bin/python bench/cpu_vs_torch.py --threads 1 --kernels matmul --budget-s 20 --json /tmp/t1.json

Kernels (--kernels: names or groups): matmul fp32 512-4096 and a batched one (attention's Q K^T); ResNet-50's conv2d
layers (batch 1, 3x3 and 1x1, strides 1 and 2) and a depthwise conv; softmax, layernorm (three kernels each, chained),
GELU (tanh form) and SiLU over model-sized tensors; the transcendental chain (examples/kernels/elementwise_chain); a*b+c;
sums over rows and columns; 20 shared-corpus kernels (transcendental, multi-view, float16 ones included); and the
machine's stream bandwidth (a C triad, OpenMP at --threads), against which the memory-bound kernels are stated.
All tunesvc kernels come from linearizer/builders.py; corpus kernels are as stored.

Per kernel: the reference output (linearizer.reference) on random inputs; every contender's output is checked against
it (tunesvc's by linearizer.compare.compare, each kernel of a chain on the reference's inputs: a MISMATCH makes the exit
status 1; the others' by reference.mismatch: a mismatching contender is reported and not timed); then all are timed
interleaved (bench/cpu_kernels.py's measure_quietly, its load sampling included): medians, spreads, other load.
- tunesvc "hand": the hand-coded schedule; "tuned": the search's winner from the result cache that `tunesvc tune`
  fills (search.cache.ResultCache; a miss is searched here with --beam/--budget-s and stored, unless --no-tune). With
  --threads 1 THREAD opts are dropped from both (the search ran with the machine's threads).
- numpy (OPENBLAS_NUM_THREADS=--threads) where numpy has the computation; torch 2.13 CPU in its own venv
  (bench/.venv-torch, made here on first use, never a project dependency): eager and torch.compile, both through
  bench/_torch.py, torch.set_num_threads(--threads); tinygrad through bench/_tinygrad.py (its CPU backend runs its
  THREAD parts one after another: one core). Model kernels use each library's own op (F.conv2d, torch.softmax, ...);
  corpus kernels a generic translation of the AST (search_vs_tinygrad.to_plan: movement and ALU ops on flat inputs),
  which is exact for single-view float32 kernels only: torch and tinygrad read n/a, with the reason, for the others.
"""
from __future__ import annotations
import argparse, os, sys
pre = argparse.ArgumentParser(add_help=False)
pre.add_argument("--threads", type=int, default=2)
THREADS = pre.parse_known_args()[0].threads
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"): os.environ[var] = str(THREADS)  # before numpy loads OpenBLAS
# and OpenBLAS's threads asleep at once after a call (bench/cpu_kernels.py's reason), here too: numpy is loaded below
# before cpu_kernels could set it, so its spinning threads took the second core from the turn after numpy's (2 threads,
# quiet: the hand-coded matmul_1024 23.9 ms right after numpy, the same code 10.6 ms a turn later)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
import ctypes, datetime, gzip, json, math, random, shlex, subprocess, tempfile, time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional
import numpy as np
from cpu_kernels import ROOT, Child, ensure_venv, machine, measure_quietly, med, spread, start_tinygrad, tg_note, timing_args, timed
from search_vs_tinygrad import CORPUS, Unexpressible, to_plan
from devices import cpu
from linearizer import builders as B
from linearizer.ast import KernelAST, loads
from linearizer.compare import compare
from linearizer.fuzz import positions
from linearizer.kernel import Kernel, OptError
from linearizer.reference import expected_range, mismatch, poison, random_buffers, reduce_size
from linearizer import ACTION_SPACE_VERSION
from linearizer.heuristic import hand_coded_optimizations
from search.cache import ResultCache
from search.settings import SearchSettings
from search.tune import SearchError, tune
from tunesvc.runtime import compile_kernel

TORCH_PIN = "2.13.0"
# BENCH_TORCH_VENV: another checkout's venv (a worktree runs the main checkout's, never a second copy or a symlink); a
# relative one from the directory this runs in (its torch child runs in a temporary one)
TORCH_VENV, TORCH_HELPER = Path(os.environ.get("BENCH_TORCH_VENV", ROOT / "bench" / ".venv-torch")).absolute(), ROOT / "bench" / "_torch.py"
CONTENDERS = ("hand", "tuned", "numpy", "eager", "compile", "tinygrad")
HEADS = {"hand": "tunesvc hand-coded", "tuned": "tunesvc tuned", "numpy": "numpy", "eager": "torch eager",
         "compile": "torch.compile", "tinygrad": "tinygrad"}
CORPUS_PICK = dict(transcendental=6, multi_view=4, float16=4, reduce=3, elementwise=3, seed=0, min_positions=1 << 16, max_positions=1 << 22)

# ---------------------------------------------------------------- the kernels

@dataclass
class Step:
  k: KernelAST
  ins: list[str]  # the named arrays it reads, in its buffer order 1..n
  out: str

@dataclass
class Case:
  name: str
  group: str                         # matmul, conv, model, memory, corpus
  steps: list[Step]
  inputs: dict[str, tuple]           # the named inputs and the shapes the libraries see them in
  twin: Optional[dict] = None        # {"fn", "kw"}: the library op (bench/_torch.py, bench/_tinygrad.py TWINS)
  numpy: Optional[tuple] = None      # ((*inputs, out) -> a run writing out, out's shape)
  plan: Optional[list] = None        # corpus: the generic translation
  lengths: Optional[list[int]] = None
  why_no_plan: str = ""
  metric: str = "flop"

  @property
  def out(self) -> str: return self.steps[-1].out
  def flops(self) -> int: return sum(s.k.flops() for s in self.steps)
  def bytes(self) -> int:  # the computation's minimal traffic: inputs read once, the output written once
    dt = {n: s.k.buffers[i + 1].dtype for s in self.steps for i, n in enumerate(s.ins)}
    last = self.steps[-1].k
    return sum(math.prod(shape) * dt[n].itemsize for n, shape in self.inputs.items()) + last.buffer_sizes()[0] * last.buffers[0].dtype.itemsize

def one(name: str, group: str, k: KernelAST, shapes: dict[str, tuple], twin: Optional[dict], numpy=None, metric="flop") -> Case:
  return Case(name, group, [Step(k, list(shapes), "y")], shapes, twin, numpy, metric=metric)

def np_matmul(a, b, o): return lambda: np.matmul(a, b, out=o)
def np_matmul_t(a, b, o): return lambda: np.matmul(a, b.swapaxes(-1, -2), out=o)
def np_mul_add(a, b, c, o):
  def run(): np.multiply(a, b, out=o); np.add(o, c, out=o)
  return run
def np_softmax(x, o):
  def run():
    np.subtract(x, x.max(-1, keepdims=True), out=o)
    np.exp(o, out=o)
    np.divide(o, o.sum(-1, keepdims=True), out=o)
  return run
def np_layernorm(x, g, b, o):
  def run():
    np.subtract(x, x.mean(-1, keepdims=True), out=o)
    np.multiply(o, 1 / np.sqrt((o * o).mean(-1, keepdims=True) + 1e-5), out=o)
    np.multiply(o, g, out=o)
    np.add(o, b, out=o)
  return run
def np_silu(x, o):
  def run(): np.negative(x, out=o); np.exp(o, out=o); np.add(o, 1, out=o); np.divide(x, o, out=o)
  return run

def conv(name: str, cin: int, hw: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> Case:
  p = k // 2
  ast = B.conv2d(1, cin, hw, hw, cout, k, k, stride=stride, padding=p, groups=groups, name=name)
  return one(name, "conv", ast, {"x": (1, cin, hw, hw), "w": (cout, cin // groups, k, k)},
             {"fn": "conv2d", "kw": {"stride": stride, "padding": p, "groups": groups}})

def model_cases() -> list[Case]:
  R, C = 4096, 1024
  mm = lambda n: one(f"matmul_{n}", "matmul", B.matmul(n, n, n), {"a": (n, n), "b": (n, n)}, {"fn": "matmul"}, (np_matmul, (n, n)))
  softmax = Case("softmax_4096x1024", "model", [Step(B.softmax_max(R, C), ["x"], "max"), Step(B.softmax_exp_sum(R, C), ["x", "max"], "sum"),
                 Step(B.softmax_div(R, C), ["x", "max", "sum"], "y")], {"x": (R, C)}, {"fn": "softmax"}, (np_softmax, (R, C)))
  layernorm = Case("layernorm_4096x1024", "memory", [Step(B.layernorm_mean(R, C), ["x"], "mean"), Step(B.layernorm_var(R, C), ["x", "mean"], "var"),
                   Step(B.layernorm_norm(R, C), ["x", "mean", "var", "gamma", "beta"], "y")], {"x": (R, C), "gamma": (C,), "beta": (C,)},
                   {"fn": "layernorm", "kw": {"eps": 1e-5}}, (np_layernorm, (R, C)), metric="byte")
  chain = B.elementwise_chain((1024, 1024), 32, name="elementwise_chain")
  return [
    *map(mm, (512, 1024, 2048, 4096)),
    one("bmm_32x512x512x64_qkT", "matmul", B.matmul(512, 512, 64, batch=(32,), transpose_b=True), {"a": (32, 512, 64), "b": (32, 512, 64)},
        {"fn": "matmul", "kw": {"transpose_b": True}}, (np_matmul_t, (32, 512, 512))),
    # GPT-2's LM head over a 128-token prompt: weights stored (vocabulary, width), 50257 columns no tile divides
    one("lm_head_gpt2", "matmul", B.matmul(128, 50257, 768, transpose_b=True), {"a": (128, 768), "b": (50257, 768)},
        {"fn": "matmul", "kw": {"transpose_b": True}}, (np_matmul_t, (128, 50257))),
    conv("r50_conv_3x3_64_56", 64, 56, 64, 3), conv("r50_conv_1x1_64to256_56", 64, 56, 256, 1), conv("r50_conv_1x1_256to64_56", 256, 56, 64, 1),
    conv("r50_conv_3x3_128_s2_56", 128, 56, 128, 3, 2), conv("r50_conv_1x1_256to512_s2_56", 256, 56, 512, 1, 2),
    conv("r50_conv_3x3_256_14", 256, 14, 256, 3), conv("r50_conv_1x1_2048to512_7", 2048, 7, 512, 1),
    conv("dwconv_3x3_144_56", 144, 56, 144, 3, groups=144),
    softmax, layernorm,
    one("gelu_2048x3072", "model", B.gelu((2048, 3072)), {"x": (2048, 3072)}, {"fn": "gelu"}, metric="byte"),
    one("silu_2048x3072", "model", B.silu((2048, 3072)), {"x": (2048, 3072)}, {"fn": "silu"}, (np_silu, (2048, 3072)), metric="byte"),
    Case("elementwise_chain", "model", [Step(chain, ["x0", "x1", "x2", "x3"], "y")],
         dict(zip(["x0", "x1", "x2", "x3"], B.chain_input_shapes((1024, 1024)))),
         None, None, *to_plan(chain), metric="byte"),  # torch and tinygrad run its plan: the chain has no library op
    one("mul_add_16m", "memory", B.mul_add(1 << 24), {"a": (1 << 24,), "b": (1 << 24,), "c": (1 << 24,)}, {"fn": "mul_add"},
        (np_mul_add, (1 << 24,)), "byte"),
    one("sum_rows_4096", "memory", B.reduce("SUM", (4096, 4096), (1,)), {"x": (4096, 4096)}, {"fn": "sum", "kw": {"axis": 1}},
        (lambda x, o: lambda: np.sum(x, axis=1, out=o), (4096,)), "byte"),
    one("sum_cols_4096", "memory", B.reduce("SUM", (4096, 4096), (0,)), {"x": (4096, 4096)}, {"fn": "sum", "kw": {"axis": 0}},
        (lambda x, o: lambda: np.sum(x, axis=0, out=o), (4096,)), "byte"),
  ]

def corpus_cases(seed: int) -> tuple[list[Case], str]:
  """CORPUS_PICK's kernels of each kind (a seeded shuffle of those with min..max_positions positions and a finite
  reference output), each once: transcendental (EXP2/LOG2/SIN), multi-view (a buffer read through several views),
  float16 (a float16 buffer), then reductions and element-wise ones with none of those."""
  with gzip.open(CORPUS, "rt", encoding="utf-8") as f: ks = [loads(line) for line in f if line.strip()]
  named = [(k.name or f"L{i}", k) for i, k in enumerate(ks)]
  random.Random(CORPUS_PICK["seed"]).shuffle(named)
  kind = lambda k: ("float16" if any(b.dtype.name == "float16" for b in k.buffers) else
                    "multi_view" if any(len(n.arg.st.simplify().views) > 1 for n in k.nodes if n.op in ("LOAD", "CONST")) else
                    "transcendental" if any(n.op in ("EXP2", "LOG2", "SIN") for n in k.nodes) else
                    "reduce" if k.reduceop is not None else "elementwise")
  want, cases = {c: CORPUS_PICK[c] for c in ("transcendental", "multi_view", "float16", "reduce", "elementwise")}, []
  for name, k in named:
    if k.vars or not CORPUS_PICK["min_positions"] <= positions(k, {}) <= CORPUS_PICK["max_positions"]: continue
    if want.get(c := kind(k), 0) == 0: continue
    kr = k.rebased()
    if not all(np.isfinite(b).all() for b in random_buffers(kr, None, seed)[1:] if b.dtype.kind == "f"): continue
    want[c] -= 1
    ins = [f"in{i}" for i in range(1, len(kr.buffers))]
    case = Case(f"{name} ({c})", "corpus", [Step(kr, ins, "y")], {n: (kr.buffer_sizes()[i + 1],) for i, n in enumerate(ins)},
                metric="flop" if kr.flops() >= kr.bytes() else "byte")
    try: case.plan, case.lengths = to_plan(kr)
    except Unexpressible as e: case.why_no_plan = str(e)[:120]
    cases.append(case)
    if not any(want.values()): break
  return cases, f"corpus: {CORPUS_PICK}, of {len(ks)} kernels"

# how far another library's output may be from the reference and still be timed (the deviation is reported): its
# transcendentals are not correctly rounded, and over elementwise_chain's 32 ops (9 of them SIN/EXP2) an ulp compounds
OTHERS_OFF, OTHERS_ERR = 0.01, 1e-3
TRANSCENDENTAL_HEAVY = ("elementwise_chain", "softmax_4096x1024", "gelu_2048x3072", "silu_2048x3072")  # issue 14's list
GROUPS = ("matmul", "conv", "model", "memory", "corpus", "stream")

# ---------------------------------------------------------------- the machine's stream bandwidth

TRIAD_C = """#include <stddef.h>
void triad(float *restrict a, const float *restrict b, const float *restrict c, float s, long n, int threads) {
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}"""

def stream_triad(tmp: Path, n: int) -> Callable[[], float]:
  """STREAM's triad a = b + s*c on n floats per array, gcc -O3 -march=native -fopenmp: the sustainable bandwidth,
  counted as STREAM does (12 bytes per element: no write-allocate traffic)."""
  src, lib = tmp / "triad.c", tmp / "triad.so"
  src.write_text(TRIAD_C)
  subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
  f = ctypes.CDLL(str(lib)).triad
  f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_float, ctypes.c_long, ctypes.c_int]
  a, b, c = (cpu.alloc(n, np.float32) for _ in range(3))
  b[:], c[:] = 1.0, 2.0
  run = lambda bufs=(a, b, c): f(*(x.ctypes.data for x in bufs), 3.0, n, THREADS)  # the arrays live as long as run
  run()
  assert (a == 7.0).all(), "triad computed wrong results"
  return timed(run)

# ---------------------------------------------------------------- one kernel

def strip_threads(opts: list[dict]) -> list[dict]:
  """At --threads 1, the schedule without its THREAD opts (an opt after one may then fail to apply: OptError)."""
  return [o for o in opts if o["op"] != "THREAD"] if THREADS == 1 else opts

def tuned_opts(k: KernelAST, args, cache: ResultCache, fp_hash: str) -> tuple[Optional[list[dict]], str]:
  r = cache.get(k.key, fp_hash, ACTION_SPACE_VERSION)
  if r is None and not args.no_tune:
    try:
      r = tune(k, "CPU", SearchSettings.from_json({"beam": args.beam, "budget_s": args.budget_s, "seed": args.seed}))
      cache.put(r)
    except SearchError as e: return None, f"search failed: {tg_note(e)}"
  if r is None: return None, "n/a (not in the result cache; --no-tune)"
  return r.best_opts, ""

def child_pids(*children) -> list[int]:
  """The contenders' helper processes that run (torch's, tinygrad's): their CPU is the run's own work, not other load."""
  return [ch.proc.pid for ch in children if ch is not None]

def bench_case(c: Case, args, torch_child: Optional[Child], tg, tmp: Path, cache: ResultCache, fp_hash: str,  # noqa: C901 (each contender's run in turn, one report)
               triad: Optional[Callable[[], float]] = None) -> dict:
  """One kernel's contenders, interleaved; `triad` (the stream triad) joins a memory-bound kernel's rounds as its own
  contender: this host's bandwidth, shared with other machines, moved 25.6-43.1 GB/s between runs a minute apart with
  nothing else running here, so a kernel is judged against the triad timed beside it, not one taken before."""
  res: dict = {"name": c.name, "group": c.group, "metric": c.metric, "flops": c.flops(), "bytes": c.bytes(), "notes": {},
               "mismatch": [], "opts": {}}
  rng = np.random.default_rng(args.seed)
  # the inputs (corpus: the reference's random buffers; else standard-normal float32), then the reference, step by step
  if c.group == "corpus":
    bufs = random_buffers(c.steps[0].k, None, args.seed)
    arrays = {n: b for n, b in zip(c.steps[0].ins, bufs[1:])}
  else: arrays = {n: rng.standard_normal(math.prod(s), dtype=np.float32) for n, s in c.inputs.items()}
  ref: dict[str, np.ndarray] = dict(arrays)
  bounds = []
  for s in c.steps:
    rb = [poison(s.k.buffers[0].dtype, s.k.buffer_sizes()[0]), *(ref[n] for n in s.ins)]
    want, lo, hi = expected_range(s.k, rb)
    ref[s.out] = want
    bounds.append((lo, hi) if lo is not None else None)
  want, dt = ref[c.out], c.steps[-1].k.buffers[0].dtype
  n_red = max(reduce_size(s.k, {}) for s in c.steps)
  fns: dict[str, Callable[[], float]] = {}

  def check_other(who: str, got: np.ndarray) -> bool:
    """Another library's output: within the reference's contract, or (its own transcendentals, another summation
    order, compounded over a chain) off in at most OTHERS_OFF of the elements by at most OTHERS_ERR relative: timed,
    and the deviation noted; else not timed."""
    g = got.reshape(-1).astype(want.dtype)
    if (bad := mismatch(g, want, dt, n_red)) is None: return True
    g64, w64 = g.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):
      err = np.where(np.isnan(g64) & np.isnan(w64), 0.0, np.abs(g64 - w64) / (1 + np.abs(w64)))
    n_bad, worst = int(bad.split(" of ")[0]), float(np.nan_to_num(err, nan=np.inf).max())
    if n_bad <= OTHERS_OFF * want.size and worst <= OTHERS_ERR:
      res["notes"][who + "_deviation"] = f"{n_bad} of {want.size} elements past the 16-ulp contract, max error {worst:.1e} relative"
      return True
    print(f"  {c.name} / {HEADS[who]}: output differs from the reference, not timed: {bad}", file=sys.stderr)
    res["notes"][who] = f"differs from the reference ({bad.split(';')[0]}, max error {worst:.1e} relative)"
    return False

  # tunesvc: each step compiled under the schedule, checked on the reference's inputs, then chained on its own buffers
  scheds: dict[str, list[Optional[list[dict]]]] = {"hand": [], "tuned": []}
  for s in c.steps:
    scheds["hand"].append(strip_threads([o.to_json() for o in hand_coded_optimizations(Kernel(s.k, cpu.options()))]))
    opts, why = tuned_opts(s.k, args, cache, fp_hash) if not args.no_tuned else (None, "n/a (--no-tuned)")
    scheds["tuned"].append(strip_threads(opts) if opts is not None else None)
    if why: res["notes"]["tuned"] = why
  for who, per_step in scheds.items():
    if any(o is None for o in per_step): continue
    res["opts"][who] = [[f"{o['op']} {o['axis']} {o['amt']}" for o in opts] for opts in per_step]
    own = {n: cpu.alloc(a.size, a.dtype) for n, a in arrays.items()}
    for n, a in arrays.items(): own[n][:] = a
    calls, ok = [], True
    for s, opts, bd in zip(c.steps, per_step, bounds):
      try: _, prg, _ = compile_kernel(s.k, "CPU", opts)
      except OptError as e:
        res["notes"][who], ok = f"n/a (its schedule without THREAD does not apply: {e})", False
        break
      out = cpu.alloc(s.k.buffer_sizes()[0], s.k.buffers[0].dtype.np)
      out[:] = poison(s.k.buffers[0].dtype, out.size)
      ins = [cpu.alloc(ref[n].size, ref[n].dtype) for n in s.ins]
      for x, n in zip(ins, s.ins): x[:] = ref[n]
      prg(out, *ins)
      if (bad := compare(s.k, [out, *ins], [ref[s.out], *(ref[n] for n in s.ins)], {}, bd)) is not None:
        print(f"\n!!!!!!!! MISMATCH: {c.name} / {HEADS[who]} ({s.k.name or 'step'}): {bad}\n", file=sys.stderr)
        res["notes"][who], ok = f"MISMATCH: {bad}", False
        res["mismatch"].append(who)
        break
      own[s.out] = out
      calls.append((prg, [own[s.out], *(own[n] for n in s.ins)]))
    if ok:
      for prg, bs in calls: prg(*bs)  # the chain on its own buffers, warm
      # each step's times too (a chain's, "step_times"): which kernel of three is far from its own traffic's limit
      steps: list[list[float]] = [[] for _ in calls]
      def run(calls=calls, steps=steps) -> float:
        ts = [prg.time(*bs) for prg, bs in calls]
        for log, t in zip(steps, ts): log.append(t)
        return sum(ts)
      fns[who] = run
      if len(calls) > 1: res.setdefault("step_times", {})[who] = steps

  shaped = [arrays[n].reshape(s) for n, s in c.inputs.items()]
  if c.numpy is not None:
    fn, shape = c.numpy
    o = np.full(shape, np.nan, np.float32)
    run = fn(*shaped, o)
    run()
    if check_other("numpy", o): run(); fns["numpy"] = timed(run)

  # torch and tinygrad: the inputs through .npy files (a plan's flat and zero-padded to the lengths it reads)
  if c.twin is None and c.plan is None:
    for who in ("eager", "compile", "tinygrad"): res["notes"][who] = f"n/a ({c.why_no_plan or 'no twin'})"
  else:
    xs = shaped if c.twin is not None else [np.concatenate([arrays[n], np.zeros(ln - arrays[n].size, arrays[n].dtype)])
                                              for n, ln in zip(c.steps[0].ins, c.lengths)]
    paths = [str(tmp / f"in{i}.npy") for i in range(len(xs))]
    for p, x in zip(paths, xs): np.save(p, x)
    req = {"inputs": paths, "twin": c.twin, "plan": c.plan if c.twin is None else None}
    if torch_child is not None:
      try:
        r = torch_child.ask(cmd="setup", outs={m: str(tmp / f"out_{m}.npy") for m in ("eager", "compile")}, **req)
        res["torch_compile_s"] = r["compile_s"]
        for m in ("eager", "compile"):
          if m in r["errors"]: res["notes"][m] = f"failed: {r['errors'][m]}"
          elif check_other(m, np.load(tmp / f"out_{m}.npy")): fns[m] = lambda m=m: torch_child.ask(cmd="time", mode=m)["t"]
      except RuntimeError as e: res["notes"]["eager"] = res["notes"]["compile"] = f"n/a ({tg_note(e)})"
    if tg is not None:
      try:
        res["tinygrad"] = tg.ask(cmd="setup", name=c.name, out=str(tmp / "out.npy"), **req)
        if check_other("tinygrad", np.load(tmp / "out.npy")): fns["tinygrad"] = lambda: tg.ask(cmd="time")["t"]
      except RuntimeError as e: res["notes"]["tinygrad"] = f"n/a ({tg_note(e)})"
    for p in paths: os.unlink(p)

  # a contender slower than --slow-s a run would take minutes: one timed run, reported, not interleaved
  for who in [w for w in fns if (t := fns[w]()) > args.slow_s]:
    res["notes"][who] = f"{t * 1e3:.4g} ms (one run; over --slow-s, not interleaved)"
    del fns[who]
  if triad is not None and c.group == "memory": fns["triad"] = triad
  res["step_bytes"] = {s.out: s.k.bytes() for s in c.steps}  # each kernel's own minimal traffic, by what it writes
  res.update(measure_quietly({n: fns[n] for n in (*CONTENDERS, "triad") if n in fns}, args, *child_pids(torch_child, tg)))
  return res

# ---------------------------------------------------------------- the report

def t_of(r: dict, who: str) -> Optional[float]: return med(r["times"][who]) if who in r.get("times", {}) else None
def ours(r: dict) -> tuple[Optional[float], str]:
  """tunesvc's time: the tuned schedule's, else the hand-coded one's."""
  for who in ("tuned", "hand"):
    if (t := t_of(r, who)) is not None: return t, who
  return None, ""

def rate(r: dict, t: float) -> str:
  return f"{r['flops'] / t * 1e-9:.1f} GFLOP/s" if r["metric"] == "flop" else f"{r['bytes'] / t * 1e-9:.1f} GB/s"

def cell(r: dict, who: str) -> str:
  if (t := t_of(r, who)) is None: return r["notes"].get(who, "n/a").replace("|", "/")
  return f"{t * 1e3:.3g} ms, {rate(r, t)}"

def ratio(r: dict, other: str) -> Optional[float]:
  t, _ = ours(r)
  o = t_of(r, other)
  return o / t if t and o else None

def fmt(x: Optional[float], f: str = ".2f", unit: str = "x") -> str: return "n/a" if x is None else format(x, f) + unit
def geomean(xs: list[float]) -> Optional[float]: return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None

def targets(results: list[dict], stream_bw: Optional[float], stream_bytes: Optional[int]) -> list[str]:
  by = {r["name"]: r for r in results}
  def verdict(name: str, other: str, goal: float, what: str) -> str:
    if name not in by or (x := ratio(by[name], other)) is None: return f"- {name}: {what}: n/a (not measured)"
    return f"- {name}: {what}: {x:.2f}x ({ours(by[name])[1]}), {'HOLDS' if x >= goal else 'does NOT hold'}"
  lines = [verdict(f"matmul_{n}", "numpy", 0.85, f"tunesvc >= 85% of OpenBLAS at {THREADS} thread(s)") for n in (1024, 2048, 4096)]
  lines += [verdict(r["name"], "eager", 1.0, "tunesvc >= torch eager (oneDNN)") for r in results if r["group"] == "conv"]
  lines += [verdict(n, "compile", 1.0, "tunesvc >= torch.compile") for n in TRANSCENDENTAL_HEAVY]
  for r in results:
    if r["group"] != "memory": continue
    t, who = ours(r)
    beside = stream_bytes / tt if stream_bytes and (tt := t_of(r, "triad")) else None  # the triad timed in this kernel's rounds
    bw, where = (beside, "timed beside it") if beside else (stream_bw, "measured before")
    if t is None or not bw: lines.append(f"- {r['name']}: >= 90% of stream bandwidth: n/a"); continue
    x = r["bytes"] / t / bw
    lines.append(f"- {r['name']}: >= 90% of the stream triad {where} ({bw * 1e-9:.1f} GB/s): {x:.0%} ({who}), "
                 f"{'HOLDS' if x >= 0.9 else 'does NOT hold'}")
  xs = [x for r in results if (x := ratio(r, "compile")) is not None]
  g = geomean(xs)
  lines.append(f"- geometric mean of torch.compile's time over tunesvc's, {len(xs)} kernels with both: {fmt(g)}, "
               + ("n/a" if g is None else "HOLDS" if g >= 1.2 else "does NOT hold") + " (target >= 1.2x)")
  return lines

def step_lines(r: dict, stream_bytes: Optional[int]) -> list[str]:
  """A chain's kernels, one line per contender: time, GB/s and (a memory kernel) the share of the triad beside it."""
  triad = stream_bytes / tt if stream_bytes and (tt := t_of(r, "triad")) else None
  def step(out: str, t: float, nbytes: int) -> str:
    return f"{out} {t * 1e3:.3g} ms, {nbytes / t * 1e-9:.1f} GB/s" + (f" ({nbytes / t / triad:.0%})" if triad else "")
  return [f"- {r['name']}, {who}: " + "; ".join(step(out, med(ts), b) for ts, (out, b) in zip(steps, r["step_bytes"].items()))
          for who, steps in r.get("step_times", {}).items()]

def report(results: list[dict], stream: Optional[dict], cmd: str, facts: list[str], args) -> str:
  when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
  stream_bw = stream["bytes"] / med(stream["times"]["triad"]) if stream and "times" in stream else None
  lines = [f"Command: `{cmd}`", f"Date: {when}", "", *facts,
           f"- threads: {THREADS} for every contender (tunesvc: THREAD opts{' dropped' if THREADS == 1 else ' as scheduled'}; "
           "OPENBLAS_NUM_THREADS; torch.set_num_threads; tinygrad runs one core); tuned: "
           + ("cached results only (--no-tune)" if args.no_tune else f"beam {args.beam}, budget {args.budget_s:g} s per kernel where not cached"),
           f"- method: per kernel, contenders in rounds of turns ({', '.join(CONTENDERS)}, ...); a turn is one untimed run, then timed "
           f"runs for {args.turn:g} s; until each has {args.min_time:g} s and >= {args.min_runs} runs, or {args.max_runs} runs; median shown",
           "- stream triad: " + (f"{stream_bw * 1e-9:.1f} GB/s ({stream['n']} floats per array, {len(stream['times']['triad'])} runs, "
                                 f"spread {spread(stream['times']['triad']):.1%}, other load {stream['other_load']:.2f})"
                                 if stream_bw else "not measured"),
           "", "| kernel | " + " | ".join(HEADS[c] for c in CONTENDERS) + " | vs numpy | vs eager | vs compile | vs tinygrad |",
           "|---|" + "---:|" * (len(CONTENDERS) + 4)]
  for r in results:
    lines.append(f"| {r['name']} | " + " | ".join(cell(r, c) for c in CONTENDERS) + " | "
                 + " | ".join(fmt(ratio(r, o)) for o in ("numpy", "eager", "compile", "tinygrad")) + " |")
  lines += ["", "\"vs y\": y's median time over tunesvc's (the tuned schedule's, else the hand-coded one's): above 1, tunesvc is "
            "faster. Rates: the computation's FLOPs, or its minimal bytes (inputs read once, the output written once), whoever runs it.",
            "", "Runs and spread (interquartile range / median); other load: cores the rest of the machine kept busy meanwhile:", "",
            "| kernel | " + " | ".join(HEADS[c] for c in CONTENDERS) + " | other load | attempts |", "|---|" + "---:|" * (len(CONTENDERS) + 2)]
  for r in results:
    lines.append(f"| {r['name']} | " + " | ".join(f"{len(r['times'][c])}, {spread(r['times'][c]):.0%}" if c in r["times"] else "-"
                                               for c in CONTENDERS) + f" | {r['other_load']:.2f} | {r['attempts']} |")
  if devs := [f"- {r['name']}, {HEADS[w.split('_')[0]]}: {n}" for r in results for w, n in r["notes"].items() if w.endswith("_deviation")]:
    lines += ["", f"Other libraries' outputs timed although past the reference's contract (at most {OTHERS_OFF:.0%} of the elements, "
              f"by at most {OTHERS_ERR:g} relative; tunesvc's kernels get no such allowance):", "", *devs]
  lines += ["", "Schedules (tunesvc, per kernel of the chain):", ""]
  for r in results:
    lines.append(f"- {r['name']}: " + "; ".join(f"{w} " + " / ".join(f"[{', '.join(o)}]" for o in r["opts"][w]) for w in r["opts"]))
  if chains := [line for r in results for line in step_lines(r, stream["bytes"] if stream else None)]:
    lines += ["", "Chains' kernels (tunesvc): each one's median over all its runs (a turn's untimed first one included), its own "
              "minimal bytes over that, and that rate against the triad timed beside it:", "", *chains]
  lines += ["", "Targets of issue 14 (at this thread count):", "", *targets(results, stream_bw, stream["bytes"] if stream else None)]
  return "\n".join(lines)

# ---------------------------------------------------------------- main

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], parents=[pre])
  ap.add_argument("--kernels", default=",".join(GROUPS), help=f"comma-separated kernel names or groups ({', '.join(GROUPS)})")
  ap.add_argument("--beam", type=int, default=2, help="the search's beam width where a tuned result is not cached (default 2)")
  ap.add_argument("--budget-s", type=float, default=30.0, help="the search's budget per kernel where not cached (default 30)")
  ap.add_argument("--no-tune", action="store_true", help="tuned: cached results only (n/a where none)")
  ap.add_argument("--no-tuned", action="store_true", help="skip the tuned column")
  ap.add_argument("--tune-only", action="store_true", help="only fill the result cache for the selected kernels (searching the misses)")
  ap.add_argument("--no-torch", action="store_true")
  ap.add_argument("--no-tinygrad", action="store_true")
  ap.add_argument("--slow-s", type=float, default=3.0, help="a contender whose one run takes longer is timed once, not interleaved")
  ap.add_argument("--stream-n", type=int, default=1 << 24, help="floats per array of the stream triad (default 16M: 192 MB)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--json", type=Path, help="also write every sample and schedule here")
  timing_args(ap)
  args = ap.parse_args()
  cmd = shlex.join([os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else sys.executable,
                    os.path.relpath(__file__, ROOT), *sys.argv[1:]])
  sel = [n.strip() for n in args.kernels.split(",") if n.strip()]
  facts = machine(None, args.tinygrad_dev, "")[:3]
  cases = model_cases()
  if "corpus" in sel or not set(sel) <= set(GROUPS) | {c.name for c in cases}:
    cc, how = corpus_cases(args.seed)
    cases += cc
    facts.append(f"- {how}; picked: {', '.join(c.name for c in cc)}")
  cases = [c for c in cases if c.group in sel or c.name in sel or c.name.split(" ")[0] in sel]
  if unknown := set(sel) - set(GROUPS) - {c.name for c in cases} - {c.name.split(" ")[0] for c in cases}: ap.error(f"unknown kernels {unknown}")

  if args.tune_only:
    cache, fp_hash = ResultCache(), cpu.fingerprint_hash(cpu.fingerprint())
    for c in cases:
      for s in c.steps:
        st = time.monotonic()
        opts, why = tuned_opts(s.k, args, cache, fp_hash)
        print(f"{c.name} {s.k.name or ''}: {why or opts} ({time.monotonic() - st:.0f} s)", file=sys.stderr, flush=True)
    return 0

  with tempfile.TemporaryDirectory(prefix="bench-cvt-") as td:
    tmp, torch_child, tg, results, stream = Path(td), None, None, [], None
    if not args.no_torch:
      py, why = ensure_venv(TORCH_VENV, "torch", TORCH_PIN)
      try: torch_child = Child(py, TORCH_HELPER, {**os.environ, "BENCH_THREADS": str(THREADS)}, tmp) if py else None
      except RuntimeError as e: why = tg_note(e)
      facts.append(f"- torch {torch_child.info['version']} (bench/.venv-torch), threads {torch_child.info['threads']}, "
                   f"torch.compile mode={torch_child.info['compile_mode']}, CPU capability {torch_child.info['isa']}; "
                   f"{'; '.join(torch_child.info['parallel'])}" if torch_child else f"- torch: n/a ({why})")
    if not args.no_tinygrad:
      tg, why = start_tinygrad(args.tinygrad_dev, tmp)
      facts.append(f"- tinygrad {tg.info['version']}, DEV={args.tinygrad_dev} ({tg.info['renderer']}), BEAM=0: one core" if tg
                   else f"- tinygrad: n/a ({why})")
    cache = ResultCache()
    fp_hash = cpu.fingerprint_hash(cpu.fingerprint())
    try:
      triad = stream_triad(tmp, args.stream_n) if "stream" in sel else None
      if triad is not None:
        print("stream triad ...", file=sys.stderr, flush=True)
        stream = {"n": args.stream_n, "bytes": 12 * args.stream_n, **measure_quietly({"triad": triad}, args, *child_pids(torch_child, tg))}
      for c in cases:
        print(f"{c.name} ...", file=sys.stderr, flush=True)
        st = time.monotonic()
        try: results.append(bench_case(c, args, torch_child, tg, tmp, cache, fp_hash, triad))
        except Exception as e:  # one kernel failing leaves the others' numbers
          print(f"  FAILED: {tg_note(e)}", file=sys.stderr)
          results.append({"name": c.name, "group": c.group, "metric": c.metric, "notes": {"hand": f"failed: {tg_note(e)}"}, "times": {},
                          "mismatch": [], "opts": {}, "other_load": math.nan, "attempts": 0})
        print(f"  {time.monotonic() - st:.0f} s, other load {results[-1]['other_load']:.2f}", file=sys.stderr, flush=True)
    finally:
      for ch in (torch_child, tg):
        if ch is not None: ch.close()
      cache.close()
  print(report(results, stream, cmd, facts, args))
  if args.json: args.json.write_text(json.dumps({"command": cmd, "threads": THREADS, "stream": stream, "results": results}, indent=1))
  bad = [(r["name"], w) for r in results for w in r["mismatch"]]
  if bad: print(f"\nMISMATCH in {bad}: these tunesvc kernels computed wrong results", file=sys.stderr)
  return 1 if bad else 0

if __name__ == "__main__": sys.exit(main())
