"""GPU-style schedules every GPU backend's tests run against the reference: grouped reduces with locals and upcasts,
padding, more global axes than launch dims, a symbolic launch; tensor-core matmuls (the TC opt and what follows it,
padded tiles); one case run on a backend's device buffers; and one given host arrays."""
import numpy as np
import pytest
from linearizer import reference
from linearizer.builders import alu, cast, const, kernel, ld, matmul, red, reduce, softmax_exp_sum, st, symbolic_sum
from linearizer.compare import compare
from linearizer.dtypes import bfloat16, float16, float32
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


def mm(m, n, k, dt=float16, batch=(), acc=float32, transpose_b=False):
  """C = A @ B with A's and B's elements cast to `acc`, multiplied and summed there: what a tensor core computes."""
  return matmul(m, n, k, batch, transpose_b=transpose_b, dtype=dt, acc=acc)

def two_reduce_axes(m=32, n=16, k1=4, k2=32):
  """A K split over two reduce axes that do not merge: A stored (m, k1, k2), B (k2, k1, n)."""
  a = st((m, k1, k2)).reshape((m, 1, k1, k2)).expand((m, n, k1, k2))
  b = st((k2, k1, n)).permute((2, 1, 0)).reshape((1, n, k1, k2)).expand((m, n, k1, k2))
  return kernel(red("SUM", alu("MUL", cast(ld("a", a, float16), float32), cast(ld("b", b, float16), float32)), (2, 3)))

def relu_to_half(m=32, n=16, k=32):
  """An epilogue after the reduce: max(C, 0) stored as float16."""
  r = mm(m, n, k).ast.src[0]
  return kernel(cast(alu("MAX", r, const(0.0, (m, n, 1))), float16))

TC_SCHEDULES = [
  (mm(16, 8, 16), []), (mm(16, 8, 16, bfloat16), []), (mm(32, 16, 64), []), (mm(48, 40, 80, bfloat16), []),
  (mm(32, 16, 32), [Opt("UPCAST", 0, 2)]), (mm(64, 32, 64), [Opt("UPCAST", 1, 2), Opt("UPCAST", 0, 2), Opt("UNROLL", 0, 2)]),
  (mm(64, 32, 32), [Opt("LOCAL", 0, 2), Opt("LOCAL", 1, 2)]), (mm(64, 48, 32, bfloat16), [Opt("LOCAL", 1, 3), Opt("UPCAST", 0, 2)]),
  (mm(16, 16, 32, batch=(3,)), [Opt("LOCAL", 0, 3)]), (mm(32, 16, 48, transpose_b=True), []),
  (two_reduce_axes(), []), (two_reduce_axes(), [Opt("UNROLL", 0, 2), Opt("UPCAST", 1, 2)]),
  (relu_to_half(), [Opt("UPCAST", 0, 2), Opt("LOCAL", 1, 2)]),
  # padded to the tile: M, N, K, all three
  (mm(12, 8, 16), []), (mm(16, 12, 16), []), (mm(16, 8, 24, bfloat16), []), (mm(20, 20, 20), [Opt("UPCAST", 1, 3)]), (relu_to_half(24, 12, 40), []),
]
TC_IDS = [f"{i}-" + "-".join(f"{o.op}{o.axis}_{o.amt}" for o in s) for i, (_, s) in enumerate(TC_SCHEDULES)]


def run(dev, device: str, k, opts, var_vals=None, seed=0):
  """k under opts compiled for `device` (dev: its module), run on device buffers and timed; the output and the
  untouched inputs checked. `var_vals`: the variables' values, or a list of them: one build (a GPU compile is ~0.3 CPU-s
  of fixed cost on PoCL), run and checked at each."""
  _, prog, _ = compile_kernel(k, device, opts)
  for vals in var_vals if isinstance(var_vals, list) else [var_vals]:
    vv = k.var_vals(vals)
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
