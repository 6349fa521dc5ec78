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
import argparse, functools, random, statistics, sys, time, traceback
from multiprocessing import get_context
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable without installing the package
sys.path.insert(0, str(ROOT / "bench"))
from devices import cuda, nvrtc  # noqa: E402
from linearizer.ast import load  # noqa: E402
from linearizer.builders import matmul  # noqa: E402
from linearizer.dtypes import bfloat16, float16, float32  # noqa: E402
from linearizer.fuzz import Case, draw_case  # noqa: E402
from linearizer.kernel import Kernel, Opt  # noqa: E402
from linearizer.lower import lower  # noqa: E402
import fuzz_linearizer as F  # noqa: E402

ARCHS = ("sm_80", "sm_90")


def cases(seed: int, per_kernel: int, sample: Optional[int] = None) -> list[Case]:
  """Every corpus kernel `per_kernel` times, undrawn (the workers draw them), or a seeded sample of `sample` of those."""
  kernels, _ = F.kernel_pool([str(F.CORPUS)], builders=0, seed=seed, max_positions=2**62)
  todo = list(F.undrawn(kernels, 0, seed, per_kernel))
  return random.Random(seed).sample(todo, sample) if sample is not None and sample < len(todo) else todo

def tc_cases() -> list[Case]:
  """Tensor-core matmuls, their schedules given: TC alone, with 2x2 tiles a warp and 2 warps, unrolled over K, and padded."""
  shapes = [((64, 32, 64), {}, [Opt("TC", 0, 0)]), ((128, 64, 64), {"batch": (2,)}, [Opt("TC", 0, 0), Opt("UPCAST", 0, 2), Opt("UPCAST", 1, 2), Opt("LOCAL", 1, 2)]),
            ((64, 64, 128), {"transpose_b": True}, [Opt("TC", 0, 0), Opt("UPCAST", 1, 2), Opt("UNROLL", 0, 2)]),
            ((40, 20, 72), {}, [Opt("TC", 0, 0), Opt("UPCAST", 1, 3)])]  # M, N and K padded to the tile
  return [Case(matmul(*mnk, **kw, dtype=dt, acc=float32, name=f"tc_{dt.name}_{'x'.join(map(str, mnk))}").to_json(), opts, {}, 0, f"tc:{dt.name}")
          for dt in (float16, bfloat16) for mnk, kw, opts in shapes]

def compile_case(case: Case, archs: tuple[str, ...] = ARCHS) -> dict:
  """Draw the case's schedule, render it for CUDA, compile it for each arch: {case, source, per arch: seconds,
  registers, spills, or the error}."""
  out: dict = {"label": case.label, "archs": {}}
  try:
    k = load(case.doc)
    if case.opts is None: case = draw_case(case, k, cuda.ARCH_OPTIONS[archs[0]], max_positions=2**62)
    out["opts"] = " ".join(f"{o.op}{'' if o.axis is None else o.axis}:{o.amt}" for o in case.opts) or "no opts"
    src = out["source"] = cuda.render(lower(Kernel(k.rebased(), cuda.ARCH_OPTIONS[archs[0]]).apply_opts(case.opts), "kernel"))
  except Exception:
    out["error"] = "rendering: " + traceback.format_exc()[-1500:]
    return out
  for arch in archs:
    t = time.perf_counter()
    try: c = cuda.compile_for(src, arch)
    except cuda.CompileError as e:
      out["archs"][arch] = {"error": str(e)[:1500], "s": time.perf_counter() - t}
      continue
    out["archs"][arch] = {"s": time.perf_counter() - t, "registers": c.registers, "spill_stores": c.spill_stores, "spill_loads": c.spill_loads}
  return out

def run(todo: list[Case], archs: tuple[str, ...], jobs: int) -> Iterator[dict]:
  """compile_case of each case in `jobs` spawned processes, in order."""
  if jobs <= 1:
    yield from (compile_case(c, archs) for c in todo)
    return
  with get_context("spawn").Pool(jobs) as pool: yield from pool.imap(functools.partial(compile_case, archs=archs), todo, chunksize=4)

def failures(results: list[dict]) -> list[str]:
  out = []
  for r in results:
    if "error" in r: out.append(f"{r['label']} [{r.get('opts', 'not drawn')}]: {r['error']}")
    out += [f"{r['label']} [{r['opts']}] {a}: {x['error']}" for a, x in r["archs"].items() if "error" in x]
  return out


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
    lines.append(f"| {a} | {len(got)} | {errs} | {_dist([g['s'] for g in got], '{:.3f}')} | {_dist([g['registers'] for g in got], '{:.0f}')} | "
                 f"{sum(g['spill_stores'] + g['spill_loads'] > 0 for g in got)} |")
  for a in archs:
    worst = sorted((r for r in ok if "registers" in r["archs"].get(a, {})), key=lambda r: (-(r["archs"][a]["spill_stores"] + r["archs"][a]["spill_loads"]),
                                                                                       -r["archs"][a]["registers"]))[:10]
    lines += ["", f"Worst cases on {a} (spill bytes, then registers):", "", "| kernel | opts | registers | spill stores | spill loads | compile s |", "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['label']} | {r['opts']} | {x['registers']} | {x['spill_stores']} | {x['spill_loads']} | {x['s']:.2f} |" for r in worst for x in [r["archs"][a]]]
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
