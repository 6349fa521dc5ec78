"""The hand-coded schedule: what runs when nothing is tuned. It must beat the unoptimised kernel
broadly and never be wrong (every opt goes through the Kernel's legality checks)."""
from __future__ import annotations
import math
from linearizer.kernel import Kernel, Opt, OptError
from linearizer.lower import vector_widths
from linearizer.symbolic import Node

def _try(k: Kernel, opt: Opt) -> bool:
  try: k.apply_opt(opt)
  except OptError: return False
  return True

def _upcast_budget(k: Kernel) -> int: return math.prod(k.upcast_shape)

def hand_coded_optimizations(k: Kernel) -> list[Opt]:
  """Apply the hand-coded opts to `k` and return them."""
  start = len(k.applied_opts)
  work = math.prod(s if isinstance(s, int) else s.max for s in k.full_shape)
  # 1. broadcast axes: a leaf that does not move along an output axis is reused by every lane of it, so
  #    upcasting such axes turns loads into register reuse (matmul's tile). The one the output is
  #    contiguous along becomes the vector, as wide as the ISA has; the others upcast by 8, then 4.
  def broadcast_axes() -> list[int]:
    return [i for i in range(k.thread_dims, k.first_reduce) if isinstance(k.full_shape[i], int) and i not in upcasted
            and any(st.views[-1].strides[i] == 0 and st.shape[i] != 1 for st in k.sts[1:])]
  upcasted: set[int] = set()
  widths = vector_widths(k.ast, k.options)
  widest = max(widths or k.options.float_vector_widths, default=4)
  vec = next((i for i in broadcast_axes() if k.sts[0].views[-1].strides[i] == 1 and k.full_shape[i] % widest == 0), None)
  if k.reduceop is None: vec = None  # element-wise: a load saved per lane does not pay for the code (step 3 vectorises)
  if vec is not None and _try(k, Opt("UPCAST", vec, widest)): upcasted.add(vec)
  while k.reduceop is not None and _upcast_budget(k) < 128 and (cands := broadcast_axes()):
    # prefer the axis more leaves read with stride 0, then the inner one
    axis = max(cands, key=lambda i: (sum(st.views[-1].strides[i] == 0 for st in k.sts[1:]), i))
    upcasted.add(axis)  # a tile over two axes reuses both operands; one axis twice reuses only one
    next((amt for amt in (8, 4) if _upcast_budget(k) * amt <= 128 and _try(k, Opt("UPCAST", axis, amt))), None)
  # 2. reduces: unroll a short reduce whole, else by 4 (a tree of independent partial sums)
  if k.reduceop is not None and k.first_reduce < k.shape_len - k.upcasted:
    last = k.shape_len - k.upcasted - 1
    size = k.full_shape[last]
    if isinstance(size, int):
      for amt in ([0] if size <= 16 else []) + ([2] if _upcast_budget(k) >= 64 else [8, 4]):
        if _try(k, Opt("UNROLL", last - k.first_reduce, amt)): break
  # 3. element-wise: upcast the output's unit-stride axis so the compiler vectorises it
  if k.reduceop is None and widths and _upcast_budget(k) < 8 and k.first_reduce > k.thread_dims:
    axis = k.first_reduce - 1
    for amt in sorted(widths, reverse=True):
      if _try(k, Opt("UPCAST", axis, amt)): break
  # 4. threads: split the outermost global axis when there is enough work to pay for waking them
  if k.options.has_threads and k.options.threads > 1 and work >= 1 << 22:
    for axis in range(k.first_reduce):
      if not isinstance(k.full_shape[axis], Node) and _try(k, Opt("THREAD", axis, k.options.threads)): break
  return k.applied_opts[start:]
