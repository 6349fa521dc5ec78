"""The model-guided beam against beam on synthetic timings: deterministic, no kernel compiled or run, any load.

Each candidate's "time" is a function of its features (search/features.py), so the cost model can learn it; what is
measured is the search: per case (a kernel builder x a CPU's float vector widths, AVX2's or AVX-512's, x threads x a
timing), the candidates each strategy measures and the best time it finds. A case is won where the model strategy finds
beam's best (within 5%) measuring under 2/3 of beam's candidates, what tests/test_cost_model.py asks of its one case.
Options and actions are the host CPU's with the widths and threads replaced: the kernels are lowered, never compiled.

  nice -n 10 python bench/model_synthetic.py --threads 2
"""
from __future__ import annotations
import argparse, dataclasses, sys, time
from pathlib import Path
from typing import Callable
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from devices import cpu
from linearizer.builders import conv2d, matmul, reduce, softmax_exp_sum
from linearizer.kernel import Kernel
from search.actions import actions_for
from search.beam import BeamStrategy
from search.features import AT, features
from search.model_beam import ModelBeamStrategy
from search.result import Candidate, Status
from search.settings import StrategySettings
from search.strategy import drive

KERNELS = {"matmul32": lambda: matmul(32, 32, 32), "matmul16x64x32": lambda: matmul(16, 64, 32), "sum256": lambda: reduce("SUM", (256, 256), (1,)),
           "conv8x10x16": lambda: conv2d(1, 8, 10, 10, 16, 3, 3), "softmax_exp_sum64": lambda: softmax_exp_sum(64, 128)}
Timing = Callable[[list[float]], float]


def timings(widest: int) -> dict[str, Timing]:
  """Seconds from features: the test's (threads, work per inner iteration, the widest loads), memory traffic, lanes of work."""
  return {"widest": lambda f: 1e-3 / f[AT["threads"]] / (1 + f[AT["alu_per_iter"]]) ** 0.5 / (1 + f[AT[f"load_w{widest}"]]),
          "bytes": lambda f: 1e-3 * 2 ** (f[AT["log_total_bytes"]] - 20) / f[AT["threads"]] ** 0.9 / (1 + f[AT["acc_lanes"]]) ** 0.3,
          "lanes": lambda f: 1e-3 / (1 + f[AT["alu_lanes"]]) ** 0.5 * (1 + f[AT["load_strided"]]) ** 0.3 / f[AT["threads"]]
                             * (1 + f[AT["ir_size"]] / 500)}


def search(cls, k: Kernel, timing: Timing, s: StrategySettings) -> tuple[int, float]:
  def measure(kernels, rnd, limit, deadline):
    return [(c, Candidate([o.to_json() for o in c.applied_opts], Status.OK, rnd, times_s=[timing(features(c))], verified=True))
            for c in kernels[:limit]]
  measured = drive(cls([k.copy()], actions_for(k.options), s), measure)
  return len(measured), min(c.min_s for _, c in measured)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--threads", default=str(cpu.options().threads), help="comma-separated thread counts (default: this machine's)")
  p.add_argument("--beam", type=int, default=2)
  p.add_argument("--measure-top", type=int, default=5)
  a = p.parse_args()
  s, won, n, t = StrategySettings(beam=a.beam, measure_top=a.measure_top), 0, 0, time.monotonic()
  for kname, build in KERNELS.items():
    for widths in ((4, 8), (4, 8, 16)):
      for threads in map(int, a.threads.split(",")):
        k = Kernel(build(), dataclasses.replace(cpu.options(), float_vector_widths=widths, threads=threads))
        for tname, timing in timings(widths[-1]).items():
          (bn, bs), (mn, ms) = search(BeamStrategy, k, timing, s), search(ModelBeamStrategy, k, timing, s)
          ok = ms <= bs * 1.05 and mn * 1.5 < bn
          won, n = won + ok, n + 1
          print(f"{kname} w{widths[-1]} t{threads} {tname}: beam {bn} measured, best {bs:.3g} s; model {mn}, {ms:.3g} s ({ms / bs:.2f}x)"
                f"{'' if ok else '  MISSED'}", flush=True)
  print(f"won {won} of {n} ({time.monotonic() - t:.0f} s)")


if __name__ == "__main__": main()
