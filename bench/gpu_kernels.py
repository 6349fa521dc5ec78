"""GPU matmuls in one run: tunesvc's hand-coded schedule and its searched one against torch (cuBLAS) on the same device.

  .venv/bin/python bench/gpu_kernels.py                                      # CUDA: matmul 4096 fp16 (tensor cores), fp32
  .venv/bin/python bench/gpu_kernels.py --device OPENCL --size 256 --budget-s 60    # the same steps on PoCL, here

Per kernel (C = A @ B, n x n x n; fp16 inputs summed in fp32, or fp32 throughout): seeded random inputs and the
reference interpreter's output; the hand-coded schedule (linearizer.heuristic, tensor cores where it picks them)
compiled and checked; search.tune's winner (it verifies every candidate) compiled and checked again here; then
the contenders timed interleaved (bench/cpu_kernels.measure: rounds of one untimed and timed runs each) by the
device's own timer (CUDA events, OpenCL profiling events) on device-resident buffers, and torch's matmul on the same
inputs by CUDA events, or numpy on the host where torch has no such device. Reported: medians, TFLOP/s, and the
ratios to the baseline. A MISMATCH is printed loudly and makes the exit status 1. torch's fp16 matmul stores fp16
(cuBLAS accumulates in fp32); ours stores fp32: at n = 4096 the store is 1/1000 of the work.
"""
from __future__ import annotations
import argparse, datetime, json, shlex, sys, time
from pathlib import Path
from typing import Callable
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable without installing the package
from cpu_kernels import measure, med
from devices import registry
from linearizer import reference
from linearizer.ast import KernelAST
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
  want = [b.copy() for b in bufs]
  reference.run(k, want, {})
  t = time.monotonic()
  res = tune(k, args.device, SearchSettings.from_json({"beam": args.beam, "budget_s": args.budget_s}))
  r = {"kernel": name, "flops": k.flops({}), "search_s": time.monotonic() - t, "candidates": len(res.candidates),
       "verified": res.verified, "opts": {}, "mismatch": {}}
  runs: dict[str, Callable[[], float]] = {}
  for who, opts in (("hand", None), ("search", res.best_opts)):
    _, prog, applied = compile_kernel(k, args.device, opts)
    r["opts"][who] = " ".join(f"{o.op}{'' if o.axis is None else o.axis}:{o.amt}" for o in applied) or "none"
    got = [b.copy() for b in bufs]  # the output poisoned, as random_buffers made it
    prog(*got)
    if msg := compare(k, got, want, {}): r["mismatch"][who] = msg
    dbufs = [dev.alloc(b.size, b.dtype) for b in bufs]
    for d, b in zip(dbufs, bufs): dev.copyin(d, b)
    runs[who] = lambda prog=prog, dbufs=dbufs: prog.time(*dbufs)
  r["baseline"], runs["baseline"] = baseline(args.device, bufs[1].reshape(n, n), bufs[2].reshape(n, n))  # A (m, k), B (k, n)
  r["times"] = measure(runs, args.min_time, 3, args.max_runs, 0.05)
  return r

def report(results: list[dict], device: str, fp: dict, cmd: str) -> str:
  fl = lambda r, who: f"{med(r['times'][who]) * 1e3:.3f} ms ({r['flops'] / med(r['times'][who]) * 1e-12:.3g} TFLOP/s)"
  lines = [f"Command: `{cmd}` ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
           f"Device {device}: `{json.dumps(fp)}`", "",
           "| kernel | hand-coded | searched | baseline | hand / baseline | searched / baseline | search | opts (hand; searched) |",
           "|---|---:|---:|---:|---:|---:|---:|---|"]
  for r in results:
    b = med(r["times"]["baseline"])
    lines.append(f"| {r['kernel']} | {fl(r, 'hand')} | {fl(r, 'search')} | {fl(r, 'baseline')} | {b / med(r['times']['hand']):.2f}x | "
                 f"{b / med(r['times']['search']):.2f}x | {r['search_s']:.0f} s, {r['candidates']} candidates | "
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
  ap.add_argument("--json", type=Path)
  args = ap.parse_args()
  dev = registry.get(args.device)
  results = []
  for name, k in kernels(args.size).items():
    if name.rsplit("_", 1)[1] not in args.dtypes.split(","): continue
    results.append(r := bench(name, k, args.size, args))
    for who, msg in r["mismatch"].items(): print(f"MISMATCH {name} {who}: {msg}", file=sys.stderr)
  print(report(results, args.device, dev.fingerprint(), "python " + shlex.join(sys.argv)))
  if args.json: args.json.write_text(json.dumps(results, indent=1))
  return 1 if any(r["mismatch"] or not r["verified"] for r in results) else 0

if __name__ == "__main__":
  sys.exit(main())
