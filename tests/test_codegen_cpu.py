"""Generated C on the CPU (and OpenCL C) against the reference interpreter: the semantic corner cases C leaves
undefined must come out exactly as the reference defines them, and schedules must not change results."""
import math
import numpy as np
import pytest
from linearizer import reference
from linearizer.builders import alu, cast, conv2d, const, kernel, ld, matmul, red, reduce, st, symbolic_sum
from linearizer.fuzz import compare
from linearizer.dtypes import DTYPES, bool_, float16, float32, int8, int32, uint8
from linearizer.kernel import Opt
from devices import opencl
from tunesvc.runtime import compile_kernel, run_kernel

I32_MIN, I32_MAX = -2**31, 2**31 - 1
F = float


def check(k, inputs=None, opts=(), var_vals=None, seed=0, device="CPU"):
  """Run compiled on `device` and reference on the same inputs (given, or seeded random); outputs must match."""
  vv = k.var_vals(var_vals)
  bufs = reference.random_buffers(k, vv, seed)
  if inputs is not None: bufs[1:] = [np.asarray(x, dtype=b.dtype.np) for x, b in zip(inputs, k.buffers[1:])]
  want = [b.copy() for b in bufs]
  reference.run(k, want, vv)
  run_kernel(k, bufs, device, opts=list(opts), var_vals=vv)
  assert (msg := compare(k, bufs, want, vv)) is None, msg
  return bufs[0]


def un(device, fn, dt, xs): return check(kernel(fn(ld(1, (len(xs),), dt))), [xs], device=device)
def bi(device, op, dt, a, b): return check(kernel(alu(op, ld(1, (len(a),), dt), ld(2, (len(a),), dt))), [a, b], device=device)

# the semantic corner cases hold on every C-style backend: the C one, and OpenCL where there is a device (PoCL on CI)
DEVICES = ["CPU", pytest.param("OPENCL", marks=pytest.mark.skipif(not opencl.available(), reason="no OpenCL device (pocl-opencl-icd)"))]


@pytest.mark.parametrize("device", DEVICES)
def test_integer_division_and_modulo_corner_cases_match_exactly(device):
  a = [-7, 7, -7, 7, 5, I32_MIN, 0, I32_MIN, 9]
  b = [2, -2, -2, 2, 0, -1, 3, 1, -1]
  for dt in (int32, DTYPES["int64"], int8):
    x, y = np.array(a).astype(dt.np), np.array(b).astype(dt.np)
    bi(device, "DIV", dt, x, y)
    bi(device, "MOD", dt, x, y)
  bi(device, "DIV", uint8, np.array([250, 7, 9], np.uint8), np.array([7, 0, 255], np.uint8))


@pytest.mark.parametrize("device", DEVICES)
def test_float_to_int_casts_saturate_and_nan_gives_zero(device):
  xs = [1.9, -1.9, 1e10, -1e10, F("nan"), F("inf"), -F("inf"), 255.5, -0.5, 2147483520.0]
  for dt in (int32, uint8, int8, DTYPES["uint32"], DTYPES["int64"], DTYPES["uint64"]):
    un(device, lambda v: cast(v, dt), float32, xs)


@pytest.mark.parametrize("device", DEVICES)
def test_other_casts_and_bitcasts(device):
  un(device, lambda v: cast(v, uint8), int32, [300, -1, 255, I32_MIN])
  un(device, lambda v: cast(v, bool_), float32, [0.0, -0.0, 2.5, F("nan")])
  un(device, lambda v: cast(v, float16), float32, [1.0001, 65520.0, 1e-8, -3.14159])
  un(device, lambda v: cast(v, uint8, bitcast=True), int8, [-1, -128, 5])
  un(device, lambda v: cast(v, int32, bitcast=True), float32, [1.0, -0.0, F("nan")])
  un(device, lambda v: cast(v, DTYPES["bfloat16"]), float32, [1.0, 3.14159265, -2.5e-3, 1e30])
  un(device, lambda v: cast(v, float32), bool_, [True, False])


@pytest.mark.parametrize("device", DEVICES)
def test_max_propagates_nan_and_comparisons_treat_nan_as_false(device):
  a = np.array([1, F("nan"), 3, F("nan"), -0.0], np.float32)
  b = np.array([F("nan"), 2, 1, F("nan"), 0.0], np.float32)
  for op in ("MAX", "CMPLT", "CMPEQ"): bi(device, op, float32, a, b)
  check(kernel(red("MAX", ld(1, (5,)), [0])), [a], device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_bool_ops_and_integer_wrapping(device):
  a, b = np.array([0, 0, 1, 1], bool), np.array([0, 1, 0, 1], bool)
  for op in ("ADD", "MUL", "MAX", "XOR", "CMPLT", "CMPEQ"): bi(device, op, bool_, a, b)
  un(device, lambda v: alu("NEG", v), bool_, a)
  bi(device, "ADD", int32, np.array([I32_MAX, I32_MIN], np.int32), np.array([1, -1], np.int32))
  bi(device, "MUL", int8, np.array([100, -128], np.int8), np.array([3, -1], np.int8))
  un(device, lambda v: alu("NEG", v), int32, [I32_MIN, 5])


@pytest.mark.parametrize("device", DEVICES)
def test_float16_rounds_after_every_op_and_sums_in_float32(device):
  k = kernel(alu("SUB", alu("ADD", ld(1, (2,), float16), ld(2, (2,), float16)), ld(1, (2,), float16)))
  assert list(check(k, [np.array([2048, 1], np.float16), np.array([1, 1e-4], np.float16)], device=device)) == [0, np.float16(1) + np.float16(1e-4) - 1]
  assert check(kernel(red("SUM", ld(1, (4096,), float16), [0])), [np.ones(4096, np.float16)], device=device)[0] == 4096


@pytest.mark.parametrize("device", DEVICES)
def test_transcendentals_and_division_by_zero(device):
  xs = np.array([0.5, -3.25, 0.0, -0.0, 100.0, -200.0, F("inf"), F("nan")], np.float32)
  for op in ("EXP2", "LOG2", "SIN", "SQRT", "RECIP", "NEG"): un(device, lambda v, op=op: alu(op, v), float32, xs)
  bi(device, "DIV", float32, xs, np.array([0, 0, 0, 1, -0.0, 3, 2, 1], np.float32))
  bi(device, "MOD", float32, xs, np.array([0.3, 2, 1, 1, 7, -3, 2, 1], np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_masked_loads_consts_and_stores(device):
  check(kernel(ld(1, st((4,)).pad(((2, 1),)))), device=device)
  check(kernel(alu("ADD", const(7.0, st((1,)).expand((3,)).pad(((1, 1),))), ld(1, (5,)))), device=device)
  check(conv2d(1, 3, 7, 7, 4, 3, 3, padding=2, stride=2), device=device)


SCHEDULES = [[], [Opt("UPCAST", 0, 4)], [Opt("UNROLL", 0, 4)], [Opt("UPCAST", 1, 2), Opt("UNROLL", 0, 0)],
             [Opt("THREAD", 0, 2), Opt("UPCAST", 2, 4)], [Opt("PADTO", 0, 8)], [Opt("PADTO", 2, 16), Opt("UNROLL", 0, 2)]]

@pytest.mark.parametrize("opts", SCHEDULES, ids=["-".join(f"{o.op}{o.axis}_{o.amt}" for o in s) or "none" for s in SCHEDULES])
def test_schedules_keep_matmul_and_conv_results(opts):
  check(matmul(36, 20, 44), opts=opts)
  check(reduce("SUM", (36, 24), (1,)), opts=[o for o in opts if o.axis == 0 and o.op != "UNROLL"])


def test_symbolic_kernel_takes_its_variable_as_an_argument():
  k = symbolic_sum(rows=4, var=("n", 1, 64))
  src, _, _ = compile_kernel(k, "CPU", [Opt("UPCAST", 0, 2)])
  assert "int n)" in src
  for n in (1, 17, 64): check(k, var_vals={"n": n}, opts=[Opt("UPCAST", 0, 2)])


def test_hand_coded_schedules_are_correct_on_examples_and_corpus_kernels(corpus):
  from devices import cpu
  from linearizer.heuristic import hand_coded_optimizations
  from linearizer.kernel import Kernel
  import random
  small = [k for k in corpus if math.prod(k.shape_at(k.full_shape, k.var_vals())) < 2_000_000]
  kernels = [matmul(64, 48, 80), conv2d(1, 8, 12, 12, 8, 3, 3, padding=1), reduce("SUM", (64, 256), (1,)),
             symbolic_sum(rows=8, var=("n", 1, 300))] + [k.rebased() for k in random.Random(1).sample(small, 120)]
  used = set()
  for k in kernels:
    opts = hand_coded_optimizations(Kernel(k, cpu.options()))
    used |= {o.op for o in opts}
    check(k, opts=opts)
  assert {"UPCAST", "UNROLL"} <= used


def test_run_kernel_without_opts_runs_the_hand_coded_schedule():
  from devices import cpu
  from linearizer.heuristic import hand_coded_optimizations
  from linearizer.kernel import Kernel
  k = matmul(64, 48, 80)
  _, _, opts = compile_kernel(k, "CPU")
  assert opts == hand_coded_optimizations(Kernel(k, cpu.options())) and opts
  check(k, opts=opts)
  vv = k.var_vals()
  bufs, want = reference.random_buffers(k, vv, 3), reference.random_buffers(k, vv, 3)
  reference.run(k, want, vv)
  run_kernel(k, bufs)
  assert (msg := compare(k, bufs, want, vv)) is None, msg
