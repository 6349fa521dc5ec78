"""The hand-coded schedule: what runs when nothing is tuned. It must beat the unoptimised kernel
broadly and never be wrong (every opt goes through the Kernel's legality checks)."""
from __future__ import annotations
import math
from linearizer.kernel import Kernel, Opt, OptError
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
  #    upcasting such axes turns loads into register reuse (matmul's 4x4 tile), up to 16 outputs
  upcasted: set[int] = set()
  while _upcast_budget(k) < 16:
    cands = [i for i in range(k.thread_dims, k.first_reduce) if isinstance(k.full_shape[i], int) and k.full_shape[i] % 4 == 0
             and i not in upcasted and any(st.views[-1].strides[i] == 0 and st.shape[i] != 1 for st in k.sts[1:])]
    # prefer the axis more leaves read with stride 0, then the inner one
    cands.sort(key=lambda i: (sum(st.views[-1].strides[i] == 0 for st in k.sts[1:]), i), reverse=True)
    if not cands or not _try(k, Opt("UPCAST", cands[0], 4)): break
    upcasted.add(cands[0])  # a tile over two axes reuses both operands; one axis twice reuses only one
  # 2. reduces: unroll a short reduce whole, else by 4 (a tree of independent partial sums)
  if k.reduceop is not None and k.first_reduce < k.shape_len - k.upcasted:
    last = k.shape_len - k.upcasted - 1
    size = k.full_shape[last]
    if isinstance(size, int):
      for amt in ([0] if size <= 16 else []) + [8, 4]:
        if _try(k, Opt("UNROLL", last - k.first_reduce, amt)): break
  # 3. element-wise: upcast the output's unit-stride axis so the compiler vectorises it
  if k.reduceop is None and _upcast_budget(k) < 8 and k.first_reduce > k.thread_dims:
    axis = k.first_reduce - 1
    for amt in (16, 8, 4):
      if _try(k, Opt("UPCAST", axis, amt)): break
  # 4. threads: split the outermost global axis when there is enough work to pay for waking them
  if k.options.has_threads and k.options.threads > 1 and work >= 1 << 22:
    for axis in range(k.first_reduce):
      if not isinstance(k.full_shape[axis], Node) and _try(k, Opt("THREAD", axis, k.options.threads)): break
  return k.applied_opts[start:]
