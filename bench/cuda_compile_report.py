"""Compile the CUDA renderer's source of every corpus kernel under random GPU schedules with NVRTC, for sm_80 and sm_90:
errors (there must be none), compile time, and ptxas's registers and spills per kernel, as markdown. No GPU needed.

  .venv/bin/python bench/cuda_compile_report.py                       # the corpus x 3 schedules x sm_80, sm_90 (1 job)
  .venv/bin/python bench/cuda_compile_report.py --sample 100 --jobs 2 --out /tmp/report.md

Schedules are the linearizer fuzzer's (linearizer.fuzz.draw_case: 0-4 opts among LOCAL GROUP GROUPTOP UPCASTMID
NOLOCALS PADTO UPCAST UNROLL, drawn legally) under the CUDA LinearizerOptions of an sm_80/sm_90 GPU
(devices.cuda.ARCH_OPTIONS: the two have the same limits), so each case is rendered once and compiled for both. Then
the tensor-core path: float16 and bfloat16 matmuls accumulating in float32 under TC (mma.sync m16n8k16), alone and with
more tiles, warps and unrolling. Exit status 1 if any case fails to render or compile."""
from __future__ import annotations
import argparse, statistics, sys, time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable without installing the package
sys.path.insert(0, str(ROOT / "tests"))  # the harness (tests/cuda_cases.py) and the fuzzer's it draws from
from devices import cuda, nvrtc  # noqa: E402
from cuda_cases import ARCHS, cases, failures, run, tc_cases  # noqa: E402


def _dist(xs: list[float], fmt: str) -> str:
  q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else xs * 99
  return " | ".join(fmt.format(v) for v in (min(xs), q[49], q[89], q[98], max(xs)))

def report(results: list[dict], archs: tuple[str, ...], wall: float, jobs: int) -> str:
  ok = [r for r in results if "error" not in r]
  lines = [f"{len(results)} cases ({len({r['label'] for r in results})} kernels), compiled for {', '.join(archs)} with NVRTC {nvrtc.version()}, "
           f"flags `{' '.join(cuda.DEFAULT_FLAGS)}`; {wall:.0f} s wall with {jobs} job{'s' * (jobs > 1)}", "",
           "| arch | compiled | errors | compile s: min | p50 | p90 | p99 | max | registers: min | p50 | p90 | p99 | max | cases that spill |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for a in archs:
    got = [r["archs"][a] for r in ok if a in r["archs"] and "error" not in r["archs"][a]]
    errs = len(results) - len(got)
    if not got:
      lines.append(f"| {a} | 0 | {errs} |" + " |" * 11)
      continue
    ptxas = [g for g in got if "registers" in g]  # not where NVRTC took the cubin from a driver's compute cache (devices/nvrtc.py)
    lines.append(f"| {a} | {len(got)} | {errs} | {_dist([g['s'] for g in got], '{:.3f}')} | {_dist([g['registers'] for g in ptxas], '{:.0f}')} | "
                 f"{sum(g['spill_stores'] + g['spill_loads'] > 0 for g in ptxas)} |")
  for a in archs:
    worst = sorted((r for r in ok if "registers" in r["archs"].get(a, {})),
                   key=lambda r: (-(r["archs"][a]["spill_stores"] + r["archs"][a]["spill_loads"]), -r["archs"][a]["registers"]))[:10]
    lines += ["", f"Worst cases on {a} (spill bytes, then registers):", "",
              "| kernel | opts | registers | spill stores | spill loads | compile s |", "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['label']} | {r['opts']} | {x['registers']} | {x['spill_stores']} | {x['spill_loads']} | {x['s']:.2f} |"
              for r in worst for x in [r["archs"][a]]]
  if bad := failures(results): lines += ["", f"{len(bad)} failures:", ""] + [f"- {b.splitlines()[0][:300]}" for b in bad]
  return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--per-kernel", type=int, default=3, help="schedules per corpus kernel (default 3)")
  p.add_argument("--sample", type=int, help="only a seeded sample of this many cases")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--arch", action="append", help=f"repeatable (default: {' '.join(ARCHS)})")
  p.add_argument("--jobs", type=int, default=1)
  p.add_argument("--out", help="also write the markdown here")
  args = p.parse_args(argv)
  archs = tuple(args.arch or ARCHS)
  todo = cases(args.seed, args.per_kernel, args.sample) + tc_cases()
  t = time.perf_counter()
  results = []
  for i, r in enumerate(run(todo, archs, args.jobs), 1):
    results.append(r)
    if i % 100 == 0: print(f"{i}/{len(todo)} cases, {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
  text = report(results, archs, time.perf_counter() - t, args.jobs)
  print(text)
  if args.out: Path(args.out).write_text(text)
  return 1 if failures(results) else 0


if __name__ == "__main__":
  sys.exit(main())
