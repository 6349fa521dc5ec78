"""GPU matmuls in one run: tunesvc's hand-coded schedule and its searched one against torch (cuBLAS) on the same device.

  .venv/bin/python bench/gpu_kernels.py                                      # CUDA: matmul 4096 fp16 (tensor cores), fp32
  .venv/bin/python bench/gpu_kernels.py --device OPENCL --size 256 --budget-s 60    # the same steps on PoCL, here
  .venv/bin/python bench/gpu_kernels.py --dtypes none --corpus 10 --corpus-budget-s 10  # search.tune on ten corpus kernels

Per kernel (C = A @ B, n x n x n; fp16 inputs summed in fp32, or fp32 throughout): seeded random inputs and the
reference interpreter's output; the hand-coded schedule (linearizer.heuristic, tensor cores where it picks them)
compiled and checked; search.tune's winner (it verifies every candidate) compiled and checked again here; then
the contenders timed interleaved (bench/cpu_kernels.measure: rounds of one untimed and timed runs each) by the
device's own timer (CUDA events, OpenCL profiling events) on device-resident buffers, and torch's matmul on the same
inputs by CUDA events, or numpy on the host where torch has no such device. Reported: medians, TFLOP/s, and the
ratios to the baseline. A MISMATCH is printed loudly and makes the exit status 1. torch's fp16 matmul stores fp16
(cuBLAS accumulates in fp32); ours stores fp32: at n = 4096 the store is 1/1000 of the work. "Error used": the largest
distance of a correct output from the reference as a share of what compare allows there (the range a float SUM
summed in another order may reach, reference.expected_range): how much room the hardware's accumulation order (the
tensor cores' mma) leaves.

--corpus N: N corpus kernels (a seeded shuffle of those with 2^16 to 2^24 positions), each searched by search.tune
as `tunesvc tune` does, with its wall time, candidates, the hand-coded and the winner's time (the search's own
interleaved final timing) and whether the winner was verified.
"""
from __future__ import annotations
import argparse, datetime, json, random, shlex, sys, time
from pathlib import Path
from typing import Callable, Optional
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable without installing the package
from cpu_kernels import measure, med
from search_vs_tinygrad import corpus
from devices import registry
from linearizer import reference
from linearizer.ast import KernelAST
from linearizer.fuzz import positions
from linearizer.builders import matmul
from linearizer.dtypes import float16, float32
from linearizer.compare import compare
from search.settings import SearchSettings
from search.tune import tune
from tunesvc.runtime import compile_kernel


def kernels(n: int) -> dict[str, KernelAST]:
  return {f"matmul_{n}_fp16": matmul(n, n, n, dtype=float16, acc=float32, name=f"matmul_{n}_fp16"),
          f"matmul_{n}_fp32": matmul(n, n, n, dtype=float32, name=f"matmul_{n}_fp32")}

def baseline(device: str, a: np.ndarray, b: np.ndarray) -> tuple[str, Callable[[], float]]:
  """(name, timed run) of the library matmul: torch on the device where it has one (CUDA and HIP are torch's "cuda"),
  else numpy on the host."""
  try:
    import torch
    if device.split(":")[0] in ("CUDA", "HIP") and torch.cuda.is_available():
      ta, tb = (torch.from_numpy(x).cuda() for x in (a, b))
      start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
      def run() -> float:
        start.record(); torch.matmul(ta, tb); end.record(); end.synchronize()
        return start.elapsed_time(end) * 1e-3
      return f"torch {torch.__version__} ({torch.cuda.get_device_name()})", run
  except ImportError: pass
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  def host() -> float:
    t = time.perf_counter(); np.matmul(a32, b32); return time.perf_counter() - t
  return f"numpy {np.__version__} (host, fp32)", host

def bench(name: str, k: KernelAST, n: int, args) -> dict:
  dev = registry.get(args.device)
  bufs = reference.random_buffers(k, {}, 0)
  out, lo, hi = reference.expected_range(k, bufs, {})  # once: at n = 4096 each run of the reference is a matmul on the host
  want, bounds = [out] + bufs[1:], None if lo is None or hi is None else (lo, hi)
  t = time.monotonic()
  res = tune(k, args.device, SearchSettings.from_json({"beam": args.beam, "budget_s": args.budget_s, "worth_s": 0}))
  r = {"kernel": name, "flops": k.flops({}), "search_s": time.monotonic() - t, "candidates": len(res.candidates),
       "verified": res.verified, "opts": {}, "mismatch": {}}
  runs: dict[str, Callable[[], float]] = {}
  for who, opts in (("hand", None), ("search", res.best_opts)):
    _, prog, applied = compile_kernel(k, args.device, opts)
    r["opts"][who] = " ".join(f"{o.op}{'' if o.axis is None else o.axis}:{o.amt}" for o in applied) or "none"
    got = [b.copy() for b in bufs]  # the output poisoned, as random_buffers made it
    prog(*got)
    if msg := compare(k, got, want, {}, bounds): r["mismatch"][who] = msg
    r.setdefault("error_used", {})[who] = error_used(got[0], out, bounds)
    dbufs = [dev.alloc(b.size, b.dtype) for b in bufs]
    for d, b in zip(dbufs, bufs): dev.copyin(d, b)
    runs[who] = lambda prog=prog, dbufs=dbufs: prog.time(*dbufs)
  r["baseline"], runs["baseline"] = baseline(args.device, bufs[1].reshape(n, n), bufs[2].reshape(n, n))  # A (m, k), B (k, n)
  r["times"] = measure(runs, args.min_time, 3, args.max_runs, 0.05)
  return r

def error_used(got: np.ndarray, want: np.ndarray, bounds: Optional[tuple[np.ndarray, np.ndarray]]) -> float:
  """The largest |got - want| as a share of the room compare's expected range (lo, hi) leaves on that side of the reference."""
  if bounds is None: return 0.0
  (lo, hi), g, w = bounds, got.astype(np.float64), want.astype(np.float64)
  room = np.where(g >= w, hi - w, w - lo)
  with np.errstate(divide="ignore", invalid="ignore"): used = np.where(g == w, 0.0, np.abs(g - w) / room)
  return float(np.nanmax(used))

def corpus_kernels(n: int, seed: int) -> list[tuple[str, KernelAST]]:
  ks = [(name, k) for name, k in corpus().items() if 1 << 16 <= positions(k, {v.name: v.min for v in k.vars}) <= 1 << 24]
  random.Random(seed).shuffle(ks)
  return ks[:n]

def tune_corpus(args) -> list[dict]:
  out = []
  for name, k in corpus_kernels(args.corpus, args.corpus_seed):
    t = time.monotonic()
    try: res = tune(k, args.device, SearchSettings.from_json({"beam": args.beam, "budget_s": args.corpus_budget_s, "worth_s": 0}))
    except Exception as e:  # a kernel the search could not take: say so and go on
      out.append({"kernel": name, "error": f"{type(e).__name__}: {e}"[:300]}); continue
    out.append({"kernel": name, "search_s": time.monotonic() - t, "candidates": len(res.candidates), "hand_s": res.baseline_s,
                "best_s": res.best_s, "verified": res.verified, "failed": res.failed,
                "opts": " ".join(f"{o['op']}{o['axis']}:{o['amt']}" for o in res.best_opts)})
    print(json.dumps(out[-1]), flush=True)
  return out

def corpus_report(rows: list[dict]) -> str:
  lines = ["| corpus kernel | search | candidates (failed) | hand-coded | tuned | speed-up | verified | opts |",
           "|---|---:|---:|---:|---:|---:|---|---|"]
  for r in rows:
    if "error" in r: lines.append(f"| {r['kernel']} | ERROR: {r['error']} | | | | | | |"); continue
    lines.append(f"| {r['kernel']} | {r['search_s']:.1f} s | {r['candidates']} ({r['failed']}) | {r['hand_s'] * 1e6:.1f} us | "
                 f"{r['best_s'] * 1e6:.1f} us | "
                 f"{r['hand_s'] / r['best_s']:.2f}x | {r['verified']} | {r['opts'] or 'hand-coded'} |")
  return "\n".join(lines)

def report(results: list[dict], device: str, fp: dict, cmd: str) -> str:
  fl = lambda r, who: f"{med(r['times'][who]) * 1e3:.3f} ms ({r['flops'] / med(r['times'][who]) * 1e-12:.3g} TFLOP/s)"
  lines = [f"Command: `{cmd}` ({datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC)", "",
           f"Device {device}: `{json.dumps(fp)}`", "",
           "| kernel | hand-coded | searched | baseline | hand / baseline | searched / baseline | search | error used (hand; searched) "
           "| opts (hand; searched) |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
  for r in results:
    b = med(r["times"]["baseline"])
    lines.append(f"| {r['kernel']} | {fl(r, 'hand')} | {fl(r, 'search')} | {fl(r, 'baseline')} | {b / med(r['times']['hand']):.2f}x | "
                 f"{b / med(r['times']['search']):.2f}x | {r['search_s']:.0f} s, {r['candidates']} candidates | "
                 f"{r['error_used']['hand']:.1%}; {r['error_used']['search']:.1%} | "
                 f"{r['opts']['hand']}; {r['opts']['search']} |")
  lines += ["", f"Baseline: {results[0]['baseline']}. Ratios above 1 mean tunesvc is faster."] if results else []
  return "\n".join(lines)

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--device", default="CUDA")
  ap.add_argument("--size", type=int, default=4096)
  ap.add_argument("--dtypes", default="fp16,fp32", help="which matmuls: fp16 (tensor cores where the device has them), fp32")
  ap.add_argument("--beam", type=int, default=4)
  ap.add_argument("--budget-s", type=float, default=240.0)
  ap.add_argument("--min-time", type=float, default=1.0, help="timed seconds per contender")
  ap.add_argument("--max-runs", type=int, default=200)
  ap.add_argument("--corpus", type=int, default=0, metavar="N", help="also search N corpus kernels (see above)")
  ap.add_argument("--corpus-seed", type=int, default=0)
  ap.add_argument("--corpus-budget-s", type=float, default=10.0, help="each corpus kernel's search budget")
  ap.add_argument("--json", type=Path)
  args = ap.parse_args()
  dev = registry.get(args.device)
  results = []
  for name, k in kernels(args.size).items():
    if name.rsplit("_", 1)[1] not in args.dtypes.split(","): continue
    results.append(r := bench(name, k, args.size, args))
    print(json.dumps({x: r[x] for x in ("kernel", "search_s", "candidates", "verified", "opts", "mismatch", "error_used")}), flush=True)
    for who, msg in r["mismatch"].items(): print(f"MISMATCH {name} {who}: {msg}", file=sys.stderr)
  print(report(results, args.device, dev.fingerprint(), "python " + shlex.join(sys.argv)), flush=True)
  rows = tune_corpus(args) if args.corpus else []
  if rows: print("\n" + corpus_report(rows))
  if args.json: args.json.write_text(json.dumps({"matmuls": results, "corpus": rows}, indent=1))
  return 1 if any(r["mismatch"] or not r["verified"] for r in results) or any(not r.get("verified") for r in rows) else 0

if __name__ == "__main__":
  sys.exit(main())
