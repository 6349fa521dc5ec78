"""What a worker's report must prove before the store keeps it, and when a kept result may be served.

A report is checked against what the store knows, never against what the report says about itself: the opts must apply
to the stored kernel under the LinearizerOptions registered with the worker's fingerprint; its FLOPs, bytes and variable
values must be the kernel's; every time must be finite, positive and no faster than the plausibility limits (a roofline
with generous peaks: no device moves data or computes faster); the winner must be a verified candidate of its own search.

A verified result is then only `unconfirmed`: a confirm job measures its opts again on the same fingerprint (with
`confirm_on_other_worker`, on another worker registered with other credentials -- two workers one stolen token registers
are no second opinion, so a fleet gives each machine its own worker token; the embedded default with one worker
re-measures on that worker, and trusts whoever holds its worker token), timed
interleaved with the hand-coded baseline, and it is served once that measurement is verified and agrees with the claim.
A verified result whose opts ARE the hand-coded schedule (for the registered options, recomputed here) is served at once:
it makes a client run exactly what a miss runs, so no claim of it can make a kernel slower or wrong, and measuring the
baseline against itself again would only cost time (about half a whole model's tuning keeps its hand-coded schedules).
Agreeing is relative to the baseline of each run: a confirmer on a busier (or quieter) machine measures both slower (or
faster) alike, so its time is compared with the claim's scaled by the two baselines' ratio, within `confirm_tolerance`;
and that ratio itself must lie within `confirm_baseline_factor` either way, or the claim's times are not this
fingerprint's (a report may lie about both of its times, never about how fast the hand-coded schedule runs here).
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from linearizer.ast import KernelAST
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt, OptError
from linearizer.options import LinearizerOptions
from search.result import SearchResult, Status


class Unproven(ValueError): pass


@dataclass(frozen=True)
class Proof:
  max_flops_per_s: float = 1e16     # 10 PFLOP/s: beyond any one device's dense peak
  max_bytes_per_s: float = 2e13     # 20 TB/s: beyond any one device's memory (or a CPU's summed L1) bandwidth
  min_kernel_s: float = 1e-8        # no launch, timed by any clock we use, takes less
  confirm_tolerance: float = 0.5    # the confirmation's time may differ from the scaled claim by this share (of the larger)
  confirm_baseline_factor: float = 4.0  # the confirmation's baseline may be this many times slower or faster than the claim's
  confirm_on_other_worker: bool = False  # a fleet sets it: no worker confirms a result of its own token's workers

  def floor_s(self, flops: int, nbytes: int) -> float:
    return max(self.min_kernel_s, flops / self.max_flops_per_s, nbytes / self.max_bytes_per_s)

  def disagreement(self, claimed: tuple[float, float], measured: tuple[float, float]) -> str | None:
    """Why a measurement (baseline_s, best_s), timed interleaved in one run, does not confirm the claimed one; None if it does."""
    (cb, ct), (mb, mt) = claimed, measured
    if not 1 / self.confirm_baseline_factor <= (scale := mb / cb) <= self.confirm_baseline_factor:
      return (f"its baseline took {mb:.4g} s, the claim's {cb:.4g} s: {scale:.3g}x, past the {self.confirm_baseline_factor:g}x "
              "a busier machine explains")
    if abs((expected := ct * scale) - mt) > self.confirm_tolerance * max(expected, mt):
      return (f"it took {mt:.4g} s against its baseline's {mb:.4g} s ({mb / mt:.3g}x), the claim {ct:.4g} s against {cb:.4g} s ({cb / ct:.3g}x): "
              f"more than {self.confirm_tolerance:.0%} apart")
    return None


def options_of(d: dict) -> LinearizerOptions:
  try: return LinearizerOptions.from_json(d)
  except (TypeError, KeyError, ValueError) as e: raise Unproven(f"options: not LinearizerOptions: {type(e).__name__}: {e}") from None

def _legal(k: KernelAST, options: LinearizerOptions, opts: list[dict], where: str) -> None:
  try: Kernel(k, options).apply_opts(opts)
  except OptError as e: raise Unproven(f"{where}: {e}") from None

def is_hand_coded(k: KernelAST, options: LinearizerOptions, opts: list[dict]) -> bool:
  """Whether `opts` (legal: check() said so) are the schedule a client computes on a miss."""
  return [Opt.from_json(o).to_json() for o in opts] == [o.to_json() for o in hand_coded_optimizations(Kernel(k, options))]

def check(k: KernelAST, options: LinearizerOptions, r: SearchResult, proof: Proof) -> None:
  """Unproven naming the first thing the report gets wrong about this kernel on this fingerprint."""
  try: vv = k.var_vals(r.var_vals)
  except (ValueError, TypeError) as e: raise Unproven(f"var_vals: {e}") from None
  if vv != r.var_vals: raise Unproven(f"var_vals: {r.var_vals} is not a full assignment of the kernel's variables {list(vv)}")
  if (r.flops, r.bytes) != (k.flops(vv), k.bytes(vv)):
    raise Unproven(f"flops, bytes: {r.flops}, {r.bytes} are not the kernel's {k.flops(vv)}, {k.bytes(vv)}")
  floor = proof.floor_s(r.flops, r.bytes)
  times = [("best_s", r.best_s), ("baseline_s", r.baseline_s)] + \
          [(f"candidates[{i}].times_s", t) for i, c in enumerate(r.candidates) if c.status is Status.OK for t in c.times_s]
  for where, t in times:
    if not (isinstance(t, (int, float)) and math.isfinite(t) and t >= floor):
      raise Unproven(f"{where}: {t!r} s is not plausible: this kernel ({r.flops} FLOPs, {r.bytes} bytes) takes at least {floor:.3g} s")
  if not math.isclose(r.speedup, r.baseline_s / r.best_s, rel_tol=1e-6): raise Unproven(f"speedup: {r.speedup} is not baseline_s / best_s")
  _legal(k, options, r.best_opts, "best_opts")
  _legal(k, options, r.baseline_opts, "baseline_opts")
  if r.verified and not any(c.opts == r.best_opts and c.status is Status.OK and c.verified for c in r.candidates):
    raise Unproven("verified: no verified candidate of the search has best_opts")
