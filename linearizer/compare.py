"""Does a device's output agree with the reference? The check every generated kernel passes: the fuzzer, the search's
runner, `tunesvc kernel run --check`, the tests. Floats within reference.mismatch's tolerance, or within the range the
reference says a correct kernel may reach (reference.range_of: a float SUM summed in another order, EXP2/LOG2/SIN
within the accuracy contract, reference.ULP_BOUND)."""
from __future__ import annotations
from typing import Mapping, Optional, Sequence
import numpy as np
from linearizer import reference
from linearizer.ast import KernelAST


def compare(k: KernelAST, got: Sequence[np.ndarray], want: Sequence[np.ndarray], var_vals: Mapping[str, int],
            bounds: Optional[tuple] = None) -> Optional[str]:
  """None if a device's buffers agree with the reference's (both started as the same random_buffers), else what
  differs: the output by `reference.mismatch` (within `range_of` for a float SUM or EXP2/LOG2/SIN, or `bounds`, its (lo, hi) when
  the caller computed them once for many checks), where it was written (the output starts poisoned), and the inputs,
  which a kernel must leave as they were."""
  dt = k.ast.arg.dtype
  if reference.same_bits(got[0], want[0]): return _inputs_changed(got, want)  # the common case, cheaply
  if dt.is_float:  # mismatch lets NaN equal NaN; the poison's payload tells unwritten from computed
    out, ref = got[0].reshape(-1), want[0].reshape(-1)
    n, i = reference.disagreements(out, ref, lambda sl, at: reference.is_poison(out[sl][at], dt) != reference.is_poison(ref[sl][at], dt))
    if n:
      what = "not written" if reference.is_poison(out[i:i + 1], dt)[0] else "written where the reference writes none"
      return f"{n} of {ref.size} elements {what}; first at {i}"
  n = reference.reduce_size(k, var_vals)
  # only then the dearer range a correct kernel may reach: the caller's, else computed from `want`'s inputs (the reference
  # output is want's: not run again); without a float SUM or EXP2/LOG2/SIN there is none (a runner's case has no bounds then)
  if msg := reference.mismatch(got[0], want[0], dt, n):
    msg = reference.mismatch(got[0], want[0], dt, n, *(bounds or reference.range_of(k, want, var_vals)))
  return msg or _inputs_changed(got, want)

def _inputs_changed(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> Optional[str]:
  return next((f"input buffer {b} was modified" for b, (x, y) in enumerate(zip(got[1:], want[1:]), 1) if not reference.same_bits(x, y)), None)
