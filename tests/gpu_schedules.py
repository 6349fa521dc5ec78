"""GPU-style schedules every GPU backend's tests run against the reference: grouped reduces with locals and upcasts,
padding, more global axes than launch dims, a symbolic launch; one case run on a backend's device buffers; and one
given host arrays."""
import numpy as np
import pytest
from linearizer import reference
from linearizer.builders import alu, kernel, ld, matmul, reduce, softmax_exp_sum, st, symbolic_sum
from linearizer.compare import compare
from linearizer.kernel import Opt
from linearizer.symbolic import Var
from tunesvc.runtime import compile_kernel

n = Var("n", 1, 9)
SCHEDULES = [  # (kernel, opts)
  (matmul(36, 20, 44), [Opt("LOCAL", 0, 4), Opt("GROUP", 0, 4)]),
  (matmul(36, 20, 44), [Opt("LOCAL", 1, 4), Opt("UPCAST", 0, 4), Opt("GROUPTOP", 0, 11), Opt("UNROLL", 1, 2)]),
  (matmul(16, 16, 64), [Opt("UPCAST", 1, 4), Opt("GROUPTOP", 0, 8), Opt("UPCASTMID", 2, 2)]),
  (matmul(36, 20, 44), [Opt("NOLOCALS"), Opt("UPCAST", 1, 4), Opt("PADTO", 0, 40)]),
  (reduce("SUM", (17, 33), (1,)), [Opt("PADTO", 1, 40), Opt("PADTO", 0, 2), Opt("GROUP", 0, 8), Opt("LOCAL", 0, 2)]),
  (softmax_exp_sum(17, 33), [Opt("PADTO", 0, 20), Opt("GROUP", 0, 11), Opt("LOCAL", 0, 4)]),
  (reduce("MAX", (12, 64), (1,)), [Opt("GROUP", 0, 16), Opt("LOCAL", 0, 3)]),
  (symbolic_sum(8, ("n", 1, 300)), [Opt("LOCAL", 0, 2), Opt("UPCAST", 0, 2)]),
  (kernel(alu("ADD", ld(1, st((4, 7, 5, 3, 2)).permute((4, 3, 2, 1, 0))), ld(2, (2, 3, 5, 7, 4)))), [Opt("LOCAL", 3, 7)]),  # merged
  (kernel(alu("ADD", ld(1, st((5, n + 1, 3, 7)).permute((2, 1, 0, 3))), ld(2, (3, n + 1, 5, 7)))), []),  # a loop
]
IDS = [f"{i}-" + "-".join(f"{o.op}{o.axis}_{o.amt}" for o in s) for i, (_, s) in enumerate(SCHEDULES)]


def run(dev, device: str, k, opts, var_vals=None, seed=0):
  """k under opts compiled for `device` (dev: its module), run on device buffers and timed; the output and the
  untouched inputs checked."""
  vv = k.var_vals(var_vals)
  _, prog, _ = compile_kernel(k, device, opts)
  host = reference.random_buffers(k, vv, seed)
  want = [b.copy() for b in host]
  reference.run(k, want, vv)
  bufs = [dev.alloc(b.size, b.dtype) for b in host]
  for b, x in zip(bufs, host): dev.copyin(b, x)
  assert prog.time(*bufs, var_vals=[vv[v.name] for v in k.vars]) > 0
  assert (msg := compare(k, [dev.copyout(b) for b in bufs], want, vv)) is None, msg

def host_arrays_round_trip(dev, device: str) -> None:
  """A program given host arrays copies them in and every buffer back out; a copy-in of the wrong size is refused."""
  k = matmul(8, 8, 8)
  _, prog, _ = compile_kernel(k, device, [Opt("LOCAL", 0, 4)])
  bufs = reference.random_buffers(k, {}, 0)
  want = [b.copy() for b in bufs]
  reference.run(k, want, {})
  assert prog(*bufs) is None and compare(k, bufs, want, {}) is None
  with pytest.raises(ValueError, match="into a buffer of 3"): dev.copyin(dev.alloc(3, np.float32), np.zeros(4, np.float32))

def var_values(k) -> list:
  """Each variable at its minimum, then at its maximum; [None] for a kernel without."""
  return ([{v.name: v.min} for v in k.vars] + [{v.name: v.max} for v in k.vars]) or [None]
