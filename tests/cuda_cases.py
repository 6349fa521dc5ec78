"""The CUDA renderer's compile harness: corpus cases under random GPU schedules and the tensor-core matmuls, rendered once
and compiled by NVRTC for each arch. bench/cuda_compile_report.py is its command line (the whole corpus, a markdown
report); the tests compile a sample, importing it from here."""
from __future__ import annotations
import functools, random, time, traceback
from multiprocessing import get_context
from typing import Iterator, Optional
from devices import cuda
from linearizer.ast import load
from linearizer.builders import matmul
from linearizer.dtypes import bfloat16, float16, float32
from linearizer.fuzz import Case, draw_case
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower
import fuzz_harness as F

ARCHS = ("sm_80", "sm_90")


def cases(seed: int, per_kernel: int, sample: Optional[int] = None) -> list[Case]:
  """Every corpus kernel `per_kernel` times, undrawn (the workers draw them), or a seeded sample of `sample` of those."""
  kernels, _ = F.kernel_pool([str(F.CORPUS)], builders=0, seed=seed, max_positions=2**62)
  todo = list(F.undrawn(kernels, 0, seed, per_kernel))
  return random.Random(seed).sample(todo, sample) if sample is not None and sample < len(todo) else todo

def tc_cases() -> list[Case]:
  """Tensor-core matmuls, their schedules given: TC alone, with 2x2 tiles a warp and 2 warps, unrolled over K, and padded."""
  shapes = [((64, 32, 64), {}, [Opt("TC", 0, 0)]),
            ((128, 64, 64), {"batch": (2,)}, [Opt("TC", 0, 0), Opt("UPCAST", 0, 2), Opt("UPCAST", 1, 2), Opt("LOCAL", 1, 2)]),
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
    out["archs"][arch] = {"s": time.perf_counter() - t}
    if c.registers is not None: out["archs"][arch] |= {"registers": c.registers, "spill_stores": c.spill_stores, "spill_loads": c.spill_loads}
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

