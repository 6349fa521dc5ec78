"""Generated C on the CPU (and OpenCL C) against the reference interpreter: the semantic corner cases C leaves
undefined must come out exactly as the reference defines them, and schedules must not change results."""
import math, re, shutil, subprocess
from dataclasses import replace
from pathlib import Path
import numpy as np
import pytest
from corner_kernels import FLOAT_TO_INT_EDGES
from linearizer import lower as lower_module, reference, symbolic
from linearizer.builders import alu, broadcast, cast, conv2d, const, kernel, ld, matmul, mul_add, red, reduce, st, symbolic_sum
from linearizer.compare import compare
from linearizer.dtypes import DTYPES, bool_, float16, float32, int8, int32, uint8, uint16
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import PACK_BYTES, Kernel, Opt
from linearizer.lower import LANE, UOps, lower
from linearizer.shapetracker import ShapeTracker, View
from linearizer.vectors import vector_widths
from linearizer.symbolic import variables
from devices import cpu, cuda, hip, opencl, registry
from tunesvc.runtime import compile_kernel, run_kernel

I32_MIN, I32_MAX = -2**31, 2**31 - 1
F = float
F64, BF16 = DTYPES["float64"], DTYPES["bfloat16"]


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

# the semantic corner cases hold on every C-style backend: the C one, OpenCL where there is a device (PoCL on CI), CUDA
# and HIP where there is a GPU
DEVICES = ["CPU", pytest.param("OPENCL", marks=pytest.mark.skipif(not opencl.available(), reason="no OpenCL device (pocl-opencl-icd)")),
           pytest.param("CUDA", marks=pytest.mark.skipif(not cuda.available(), reason="no NVIDIA GPU")),
           pytest.param("HIP", marks=pytest.mark.skipif(not hip.available(), reason="no AMD GPU"))]


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
def test_float_to_int_casts_are_x86_64s_from_every_float_to_every_int(device):
  """The reference's (x86-64's) conversion, out of range and of NaN included, where C leaves it undefined; a constant
  is folded by the same rule (lower._fold)."""
  for src in (float16, BF16, float32, F64):
    with np.errstate(all="ignore"): xs = np.array(FLOAT_TO_INT_EDGES).astype(src.np)
    for dt in INTS:
      un(device, lambda v, dt=dt: cast(v, dt), src, xs)
      if device != "CPU": continue  # the fold is the lowering's, the same for every language
      k = kernel(alu("ADD", cast(const(3e9, (4,), src), dt), cast(const(F("nan"), (4,), src), dt)))
      assert not any(u.op is UOps.CAST for u in program(k).uops)
      check(k)


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


@pytest.mark.parametrize("dt", [float32, F64, float16, BF16], ids=lambda dt: dt.name)
def test_a_scalar_float_max_selects_computed_values_and_propagates_nan(dt):
  """A scalar float MAX in C is the larger by maxss's pattern, then a where a is NaN: two selects of values already
  computed, which gcc makes branch-free (a compare in one arm of ?: it branched on: a tree of maxes over random data 8x
  slower, corpus sops_13891). NaN either side, infinities and signed zeros as the reference, as a chain and a tree."""
  x = reference.random_floats(np.random.default_rng(0), 64 * 64).astype(dt.np).reshape(64, 64)
  x[0], x[1, 0], x[2, -1], x[3, :2], x[4] = F("nan"), F("nan"), F("nan"), (F("inf"), F("nan")), F("-inf")
  x[5], x[6, ::2] = -0.0, 0.0
  k = kernel(red("MAX", ld(1, (64, 64), dt), [0]))  # down the columns: an unrolled step's loads are no vector
  for opts in ([], [Opt("UNROLL", 0, 8)]):
    src = cpu.render(program(k, opts))
    fmax = re.findall(r"m_=(\S+?)>(\S+?)\?\1:\2; !\(\1<=\1\)\?\1:m_;", src)
    assert len(fmax) == sum(op == "MAX" for op in ops(program(k, opts))) > 0 and "||" not in src, src
    check(k, [x.T.reshape(-1)], opts=opts)


@pytest.mark.parametrize("device", DEVICES)
def test_bool_ops_and_integer_wrapping(device):
  a, b = np.array([0, 0, 1, 1], bool), np.array([0, 1, 0, 1], bool)
  for op in ("ADD", "MUL", "MAX", "XOR", "CMPLT", "CMPEQ"): bi(device, op, bool_, a, b)
  un(device, lambda v: alu("NEG", v), bool_, a)
  bi(device, "ADD", int32, np.array([I32_MAX, I32_MIN], np.int32), np.array([1, -1], np.int32))
  bi(device, "MUL", int8, np.array([100, -128], np.int8), np.array([3, -1], np.int8))
  un(device, lambda v: alu("NEG", v), int32, [I32_MIN, 5])
  # uint16 promotes to int in C: 65535 * 65535 overflows it, so the GPU languages multiply through unsigned int
  out = bi(device, "MUL", uint16, np.array([65535, 65535, 300], np.uint16), np.array([65535, 2, 300], np.uint16))
  assert out.tolist() == [1, 65534, 24464]
  if device != "CPU":  # the CPU's C has -fwrapv
    src = registry.get(device).render(lower(Kernel(kernel(alu("MUL", ld(1, (4,), uint16), ld(2, (4,), uint16))), registry.get(device).options())))
    assert re.search(r"\(\(uint\)v\d+\*\(uint\)v\d+\)", src.replace("unsigned int", "uint")), src


@pytest.mark.parametrize("device", DEVICES)
def test_float16_rounds_after_every_op_and_sums_in_float32(device):
  k = kernel(alu("SUB", alu("ADD", ld(1, (2,), float16), ld(2, (2,), float16)), ld(1, (2,), float16)))
  got = check(k, [np.array([2048, 1], np.float16), np.array([1, 1e-4], np.float16)], device=device)
  assert list(got) == [0, np.float16(1) + np.float16(1e-4) - 1]
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


BLOCKED = [  # odd sizes: matmul 45x35x99 (and K padded to 112), conv2d over 3 reduce axes; with threads, vectors, tails
  (matmul(45, 35, 99), [Opt("UPCAST", 0, 5), Opt("UNROLL", 0, 3), Opt("BLOCK", 2, 11)]),
  (matmul(45, 35, 99), [Opt("UPCAST", 1, 7), Opt("THREAD", 0, 3), Opt("BLOCK", 3, 9), Opt("BLOCK", 2, 5)]),
  (matmul(45, 48, 99), [Opt("PADTO", 2, 16), Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 3), Opt("UNROLL", 0, 2), Opt("BLOCK", 2, 8),
                        Opt("BLOCK", 1, 5)]),
  (conv2d(1, 6, 9, 9, 8, 3, 3, padding=1), [Opt("UPCAST", 0, 8), Opt("BLOCK", 3, 3), Opt("BLOCK", 3, 3)]),
  # under an epilogue (a bias, then ReLU; a conv's BatchNorm-like scale and shift): partial sums until the last block
  (kernel(alu("MAX", alu("ADD", matmul(45, 48, 99).reduceop, ld("bias", st((48,)).reshape((1, 48, 1)).expand((45, 48, 1)))),
              const(0.0, (45, 48, 1)))), [Opt("UPCAST", 1, 16), Opt("UNROLL", 0, 3), Opt("BLOCK", 2, 11)]),
  (kernel(alu("ADD", alu("MUL", conv2d(1, 6, 9, 9, 8, 3, 3, padding=1).reduceop, const(0.5, (1, 8, 9, 9, 1, 1, 1))),
              const(1.0, (1, 8, 9, 9, 1, 1, 1)))),
   [Opt("UPCAST", 0, 8), Opt("THREAD", 1, 3), Opt("BLOCK", 4, 3), Opt("BLOCK", 4, 3)]),
]

@pytest.mark.parametrize("k,opts", BLOCKED, ids=[str(i) for i in range(len(BLOCKED))])
def test_blocked_schedules_match_the_reference_and_the_unblocked_bits(k, opts):
  """A blocked reduce continues each accumulator from the output: the same sums in the same order as without BLOCK
  (the BLOCKs come last here, so the schedule without them is the same one)."""
  assert Kernel(k, cpu.options()).apply_opts(opts).block_dims == sum(o.op == "BLOCK" for o in opts)
  got = check(k, opts=opts, seed=3)
  assert np.array_equal(got, check(k, opts=[o for o in opts if o.op != "BLOCK"], seed=3))


PACKED = [  # a LOAD's block copied to the stack: odd sizes, masked reads (padding), threads, transposed, multi-axis leaves
  (matmul(45, 35, 99), [Opt("UPCAST", 1, 7), Opt("THREAD", 0, 3), Opt("BLOCK", 3, 9), Opt("BLOCK", 2, 5), Opt("PACK", 2)]),
  (matmul(45, 48, 99), [Opt("PADTO", 2, 16), Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 3), Opt("UNROLL", 0, 2), Opt("BLOCK", 2, 8),
                        Opt("PACK", 1), Opt("PACK", 2)]),
  (matmul(17, 32, 36, transpose_a=True, transpose_b=True), [Opt("UPCAST", 1, 16), Opt("BLOCK", 2, 4), Opt("PACK", 1), Opt("PACK", 2)]),
  (conv2d(1, 6, 9, 9, 8, 3, 3, padding=1), [Opt("UPCAST", 0, 8), Opt("BLOCK", 3, 3), Opt("PACK", 1), Opt("PACK", 2)]),
  # the threads split the row blocks (each thread its blocks' rows, packing its own copies), K blocked inside
  (matmul(48, 35, 99), [Opt("UPCAST", 1, 7), Opt("BLOCK", 0, 12), Opt("THREAD", 0, 2), Opt("BLOCK", 4, 9), Opt("PACK", 1), Opt("PACK", 2)]),
]

@pytest.mark.parametrize("k,opts", PACKED, ids=[str(i) for i in range(len(PACKED))])
def test_packed_schedules_match_the_reference_and_the_unpacked_bits(k, opts):
  src, _, _ = compile_kernel(k, "CPU", opts)
  assert all(f"pack{o.axis}[" in src for o in opts if o.op == "PACK")
  got = check(k, opts=opts, seed=4)
  assert np.array_equal(got, check(k, opts=[o for o in opts if o.op != "PACK"], seed=4))


def test_a_lowering_is_the_same_whatever_the_process_lowered_before():
  # a tracker's index at a lane and the symbolic ops are remembered as long as the process lives (lower.py _index,
  # _read; symbolic.py _cache): keyed by less than all they depend on, a kernel would take another lowering's indices --
  # the same trackers read at another vector axis's lanes, through another launch's loop variables, at other bounds
  cases = [(k, o) for k in (conv2d(1, 8, 9, 9, 8, 3, 3, padding=1), matmul(32, 32, 32))
           for o in (cpu.options(), replace(cpu.options(), float_vector_widths=(4, 8, 16)), cuda.ARCH_OPTIONS["sm_90"])]
  cases += [(symbolic_sum(8, ("n", 1, hi)), cpu.options()) for hi in (9, 300)]
  def ir(k, o): return lower(Kernel(k, o).apply_opts(hand_coded_optimizations(Kernel(k, o)))).uops
  alone = []
  for k, o in cases:
    for f in (lower_module._index, lower_module._read, symbolic.add, symbolic.mul, symbolic.floordiv, symbolic.mod): f.cache_clear()
    alone.append(ir(k, o))
  assert [ir(k, o) for k, o in cases] == alone


def test_a_packed_copy_is_made_once_per_block_of_the_axes_it_varies_along():
  # blocks K, then M, then N, on 2 threads: A's copy (K and M) is made before the N blocks' loop, not again in each of
  # them; B's (K and N) inside that loop, and inside the threads' loop, though it does not vary along the threads
  k = matmul(32, 48, 64)
  opts = [Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 4), Opt("BLOCK", 2, 16), Opt("BLOCK", 1, 2), Opt("BLOCK", 3, 3), Opt("THREAD", 1, 2),
          Opt("PACK", 1), Opt("PACK", 2)]
  src, _, _ = compile_kernel(k, "CPU", opts)
  lines = src.splitlines()
  at = lambda pattern: next(n for n, line in enumerate(lines) if re.search(pattern, line))
  assert at(r"omp parallel for") < at(r"for \(long long _r1 ") < at(r"for \(long long _g2 ") < at(r"float pack1\[") < \
    at(r"for \(long long _g3 ") < at(r"float pack2\[")
  got = check(k, opts=opts, seed=5)
  assert np.array_equal(got, check(k, opts=[o for o in opts if o.op != "PACK"], seed=5))


def test_hand_coded_schedule_blocks_and_packs_a_large_matmul_only():
  k = matmul(512, 512, 512)
  for widths in ((4, 8, 16), (4, 8)):
    opts = hand_coded_optimizations(Kernel(k, replace(cpu.options(), float_vector_widths=widths, threads=2, half_width_fma=False)))
    blocks, packs = [(o.axis, o.amt) for o in opts if o.op == "BLOCK"], [o.axis for o in opts if o.op == "PACK"]
    threads, tile = [(o.axis, o.amt) for o in opts if o.op == "THREAD"], [(o.axis, o.amt) for o in opts if o.op == "UPCAST"]
    if 16 in widths:  # Intel's AVX-512: a tile of 4 rows x 4 vectors; N's steps are 64 floats: K in 256s (unrolled by 2), N in 256s, B's
      # block packed (A's copy lost there: tests/test_heuristic_matmul.py)
      assert (tile, blocks, packs, threads) == ([(1, 16), (1, 4), (0, 4)], [(2, 128), (2, 4)], [2], [(2, 2)]), opts
    else:  # AVX2: a tile of 4 rows x 2 vectors (6 loads a step of 8 FMAs, not 8x1's 9); K in 256s, M in 128 rows (32
      # tiles of 4), N in 128 columns (8 steps of 16), A and B packed; the threads split M's blocks
      assert (tile, blocks, packs, threads) == ([(1, 8), (1, 2), (0, 4)], [(2, 128), (1, 32), (3, 8)], [1, 2], [(1, 2)]), opts
  check(k, opts=hand_coded_optimizations(Kernel(k, cpu.options())))
  for small in (matmul(64, 64, 64), reduce("SUM", (64, 4096), (1,)), matmul(100, 2999, 999)):  # no reuse, or no vector axis (odd N)
    assert not any(o.op in ("BLOCK", "PACK") for o in hand_coded_optimizations(Kernel(small, cpu.options())))


def folds_eagerly(prog) -> bool:
  """Does the reduce loop load a value after its first accumulate (each product folded in as it is made)?"""
  first = next(i for i, u in enumerate(prog.uops) if u.op == "ACC" and u.arg == "MULACC")
  end = next(i for i, u in enumerate(prog.uops) if i > first and u.op == "ENDLOOP")
  return any(u.op == "LOAD" for u in prog.uops[first:end])

def test_an_avx2_matmul_tile_folds_each_product_in_as_it_is_made():
  # 8 accumulators beside a loop step's 8 broadcasts of A and 4 vectors of B (K unrolled by 2): made first, they were more
  # than AVX2's 16 registers hold, and gcc reloaded or spilled them (a 6x2 tile: 79 spill loads and stores). Eager, a
  # step keeps B's 2 vectors and one broadcast live; the sums are the same bits. AVX-512 (32 registers) keeps values
  # first, and so do a tile of more accumulators than AVX2's registers and one whose lanes share their inputs (a 3x3
  # conv's row of pixels beside its window's row: eager, they stayed live from one window column to the next)
  avx2, avx512 = replace(cpu.options(), float_vector_widths=(4, 8)), replace(cpu.options(), float_vector_widths=(4, 8, 16))
  k, opts = matmul(64, 64, 512), [Opt("UPCAST", 1, 8), Opt("UPCAST", 1, 2), Opt("UPCAST", 0, 4), Opt("UNROLL", 0, 2)]
  assert folds_eagerly(tile := lower(Kernel(k, avx2).apply_opts(opts))) and most_live(tile) <= 4
  assert not folds_eagerly(lower(Kernel(k, avx512).apply_opts(opts)))
  assert not folds_eagerly(lower(Kernel(k, avx2).apply_opts([Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 16), Opt("UNROLL", 0, 2)])))
  conv = conv2d(1, 16, 14, 14, 16, 3, 3, padding=1)  # a vector of channels x 14 pixels, the window's row unrolled beside
  row = [Opt("BLOCK", 0, 8), Opt("UPCAST", 1, 0), Opt("UPCAST", 3, 14), Opt("UNROLL", 2, 0), Opt("PACK", 2)]
  assert not folds_eagerly(lower(Kernel(conv, avx2).apply_opts(row)))
  got = check(k, opts=opts, seed=6)
  assert np.array_equal(got, check(k, opts=opts[:3], seed=6))  # the same sums, one product a step


def test_a_sum_over_columns_reads_its_rows_whole_in_blocks():
  # a loop step read a tile-wide piece of a row, then jumped a row (4096x4096: 50% of the stream triad at 2 threads);
  # blocked, a block of rows is read whole, the threads splitting the row's tiles (each its own outputs)
  # (2 rows a step, as every core but Zen 4 reads them: the next test)
  k = Kernel(cols := reduce("SUM", (1024, 4096), (0,)), replace(cpu.options(), threads=2, column_sum_rows=2))  # work enough for threads
  opts = hand_coded_optimizations(k)
  rows = math.prod(s for i, s in enumerate(k.upcast_shape, k.shape_len - k.upcasted) if k.is_reduce_axis(i)) * k.full_shape[k.first_reduce]
  # (the threads split axis 1 as it was then: the first global axis, after the block's)
  assert len(k.reduce_blocks) == 1 and 2 <= rows <= 8 and opts[-1].op == "THREAD" and opts[-1].axis == 1, opts
  got = check(cols, opts=opts, seed=5)
  assert np.array_equal(got, check(cols, opts=[o for o in opts if o.op not in ("BLOCK", "THREAD")], seed=5))  # the same sums
  # not a MAX (a blocked reduce continues a SUM from the output), nor a row one vector covers, nor a tile over other
  # axes too (a 1x1 conv whose 196 pixels no full vector divides: 4x4x4, blocked it reloaded its accumulators, 0.81x)
  row = max(cpu.options().float_vector_widths)  # one vector of this host's
  for other in (reduce("MAX", (256, 4096), (0,)), reduce("SUM", (256, row), (0,)), conv2d(4, 68, 14, 14, 68, 1, 1)):
    assert not any(o.op == "BLOCK" for o in hand_coded_optimizations(Kernel(other, cpu.options()))), other


def test_a_zen4_core_reads_8_rows_of_a_column_sum_a_step_where_they_are_near():
  # LinearizerOptions.column_sum_rows (Zen 4's 8): 8 rows of 8 vectors a step, blocks of 2 steps (4096x4096, 1 thread,
  # busy Zen 4: 1.12-1.13x 2 rows of 16 vectors in blocks of 4 steps); 2 rows where they are 256 KB apart (0.86x at 8)
  zen4 = replace(cpu.options(), float_vector_widths=(4, 8, 16), threads=1, column_sum_rows=8)
  def schedule(shape, options): return [(o.op, o.axis, o.amt) for o in hand_coded_optimizations(Kernel(reduce("SUM", shape, (0,)), options))]
  assert schedule((256, 4096), zen4) == [("UPCAST", 0, 16), ("UPCAST", 0, 8), ("UNROLL", 0, 8), ("BLOCK", 1, 2)]
  assert schedule((256, 4096), replace(zen4, column_sum_rows=2)) == [("UPCAST", 0, 16), ("UPCAST", 0, 16), ("UNROLL", 0, 2), ("BLOCK", 1, 4)]
  assert schedule((64, 65536), zen4) == [("UPCAST", 0, 16), ("UPCAST", 0, 16), ("UNROLL", 0, 2), ("BLOCK", 1, 4)]
  if not cpu.options().avx512: pytest.skip("schedules checked; running them needs an AVX-512 host, this one has none")
  k = reduce("SUM", (256, 4096), (0,))
  opts = hand_coded_optimizations(Kernel(k, zen4))
  assert np.array_equal(check(k, opts=opts, seed=3), check(k, opts=opts[:3], seed=3))  # the same sums, blocked or not


def test_only_zen4_reads_8_rows_of_a_column_sum_a_step(monkeypatch):
  monkeypatch.setattr(cpu, "_cpuinfo", lambda: ("", frozenset({"avx", "avx2", "avx512f"})))
  monkeypatch.setattr(cpu, "_cpu_fields", lambda: {"vendor_id": "AuthenticAMD", "cpu family": "25"})
  assert cpu.options().column_sum_rows == 8
  monkeypatch.setenv("TUNESVC_CPU_LANES", "8")  # an AVX2 host's schedules
  assert cpu.options().column_sum_rows == 2
  monkeypatch.delenv("TUNESVC_CPU_LANES")
  monkeypatch.setattr(cpu, "_cpu_fields", lambda: {"vendor_id": "GenuineIntel", "cpu family": "6"})
  assert cpu.options().column_sum_rows == 2


def test_a_1x1_convs_pixels_are_blocked_where_its_reduce_is_too_short_to_block():
  # 256 input channels, each 3136 floats apart: pixel blocks outermost, so the output channels' tiles reuse the input's
  # panel while it is in L1 and the TLB (6.1 -> 3.3 ms on a Cascade Lake at 1 thread)
  k = conv2d(1, 256, 56, 56, 64, 1, 1)
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))
  assert [o.axis for o in opts if o.op == "BLOCK"] == [1], opts
  check(k, opts=opts)


def test_a_conv_whose_rows_do_not_split_runs_its_channel_blocks_on_the_threads():
  # ResNet-50's last stage: 7 rows of 7 pixels, the output channels in blocks; those blocks are what the threads split
  # (one thread ran the whole 3x3 512 -> 512 conv before; on full-width AVX-512 its input channels are blocks too, which
  # no thread may split)
  for cin in (512, 128):
    k = Kernel(conv := conv2d(1, cin, 7, 7, cin, 3, 3, padding=1), replace(cpu.options(), threads=2))
    opts = hand_coded_optimizations(k)
    assert opts[-1].op == "THREAD" and opts[-1].axis < k.block_dims, opts
  check(conv, opts=opts)


def test_a_conv_tile_reuses_its_input_rows_across_output_channels():
  # an unpadded stride-1 conv: the vector is a row of outputs; the input's row is the load that is a vector, each output
  # channel's lanes reuse it, where the rows' tile reused only the weights, one broadcast each already
  k = conv2d(1, 8, 34, 34, 16, 3, 3)  # (output channels, rows, columns, ...): 32 columns
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))
  assert [o.axis for o in opts if o.op == "UPCAST"] == [2, 0], opts
  check(k, opts=opts)


def test_a_padded_or_strided_convs_vector_is_its_output_channels_with_the_weights_packed():
  # its rows are no clean vector (masked at the padding, strided): the output channels are, two vectors a block beside a
  # row of 7 pixels (one where no row of 7 divides), the weights packed with the channels innermost (a vector load each),
  # the input a broadcast, a tile of pixels reusing each weight vector, each lane stored alone after the reduce (3x3 256
  # channels 14x14 on Zen 4, 1 thread: 8.9 -> 48 GFLOP/s). AVX2 takes two beside a window row's 7 (stride 1, 28), not
  # where the 32x32 output's 4 KB channel planes put the lanes in one L1 set (stride 1, 32), nor beside a strided 3x3's
  # row (a one-vector 2-D tile)
  for stride, hw in ((1, 28), (2, 28), (1, 32), (2, 32)):
    k = conv2d(1, 8, hw, hw, 64, 3, 3, stride=stride, padding=1)
    kern = Kernel(k, cpu.options())
    w = widest(k)
    two = hw == 28 if w >= 16 else (stride, hw) == (1, 28)
    opts = hand_coded_optimizations(kern)
    applied = [(o.op, o.axis, o.amt) for o in opts]
    head = [("BLOCK", 0, 2 * w), ("UPCAST", 1, w), ("UPCAST", 1, 2)] if two else [("BLOCK", 0, w), ("UPCAST", 1, 0)]
    assert applied[:len(head)] == head and ("PACK", 2, None) in applied, opts
    # neighbouring pixels share inputs along the window's row (stride 1), unrolled beside a row of pixels; stride 2: a row
    # of pixels beside two vectors, a 2-D tile beside one
    tile = [o.op for o in opts[len(head):len(head) + 2]]
    assert tile == (["UPCAST", "UNROLL"] if stride == 1 else ["UPCAST", "PACK"] if two else ["UPCAST", "UPCAST"]), opts
    prog = lower(kern)
    assert any(u.op == "DEFINE_ACC" and u.vec == w for u in prog.uops)
    assert any(u.op == "LOAD" and u.vec == w and u.arg[0] == "pack2" for u in prog.uops)
    assert not any(u.op == "VBUILD" for u in prog.uops) and all(u.vec == 1 for u in prog.uops if u.op == "STORE" and u.arg[0] == 0)
    check(k, opts=opts)


def test_channels_a_multiple_of_half_the_width_only_take_half_width_vectors_with_the_weights_packed():
  # a 1x1 conv whose channels half the widest vector divides and the widest does not (136 on AVX-512, 68 on AVX2): the
  # output channels in half-width vectors, the weights packed, a row of pixels reusing each, not the reduce's unroll as
  # the vector, which gathered the input a lane at a time (1 thread, BUSY Zen 4: 136 channels 7x7 1.9x; corpus sops_3200,
  # four groups of 136 at 7x7 under a BatchNorm, 4.7x)
  w = max(cpu.options().float_vector_widths) // 2
  if w not in cpu.options().float_vector_widths: pytest.skip("no vector of half the widest width")
  k = conv2d(1, 17 * w, 7, 7, 17 * w, 1, 1)
  kern = Kernel(k, cpu.options())
  opts = hand_coded_optimizations(kern)
  applied = [(o.op, o.axis, o.amt) for o in opts]
  assert applied[:2] == [("BLOCK", 0, w), ("UPCAST", 1, 0)] and ("PACK", 2, None) in applied, opts
  prog = lower(kern)
  assert any(u.op == "LOAD" and u.vec == w and u.arg[0] == "pack2" for u in prog.uops) and not any(u.op == "VBUILD" for u in prog.uops)
  check(k, opts=opts)


def test_an_avx2_window_row_of_one_vector_takes_the_whole_row_where_the_budgets_half_keeps_under_4_pixels():
  # a padded 3x3 conv of 14-wide rows, one vector of channels beside the window's row: AVX2's budget (12) halved for the
  # next pixel axis kept 2 pixels (3x3 256 channels 14x14, busy Zen 3, 1 thread: 6.4 -> 3.7-4.0 ms with the row's 14);
  # AVX-512's choice (7 of 14) is unchanged
  # (24 channels: one vector; 16 take two beside 7 pixels on AVX2, the next test)
  def tile(k, widths):
    opts = hand_coded_optimizations(Kernel(k, replace(cpu.options(), float_vector_widths=widths)))
    return opts, [(o.op, o.axis, o.amt) for o in opts if o.op in ("UPCAST", "UNROLL")]
  k = conv2d(1, 8, 14, 14, 24, 3, 3, padding=1)
  avx2, applied = tile(k, (4, 8))
  assert applied == [("UPCAST", 1, 0), ("UPCAST", 3, 14), ("UNROLL", 2, 0)], avx2
  assert tile(conv2d(1, 8, 14, 14, 16, 3, 3, padding=1), (4, 8, 16))[1] == [("UPCAST", 0, 0), ("UPCAST", 2, 7), ("UNROLL", 2, 0)]
  check(k, opts=avx2)

def test_an_avx2_3x3_conv_takes_two_vectors_of_channels_beside_a_window_rows_part_where_their_lanes_spread_over_l1():
  # two vectors of output channels reuse each input broadcast twice: beside a stride-1 window row's part of up to 7
  # pixels, its window row unrolled (3x3 64 56x56, busy Zen 3, 1 thread: 1.35x one vector's 4 pixels); not a stride-2
  # row's part (3x3 128 stride 2, 2x4: 0.93-0.99x one vector's 4 x 2 at CODEGEN_VERSION 19). Not where the output's
  # channel planes are a multiple of 4 KB apart (64x64: 16 KB), which puts the 16 lanes stored one by one in one L1 set
  # of 8 ways (3x3 4->320 64x64: 0.91x; 68x68: 1.13x): one vector's tile there (the next test). AVX-512 unrolls a strided
  # window row beside a row of 7 pixels (test_an_avx512_strided_window_row_is_unrolled_beside_a_row_of_7_pixels_not_a_2d_tile)
  def tile(k, widths):
    opts = hand_coded_optimizations(Kernel(k, replace(cpu.options(), float_vector_widths=widths)))
    return opts, [(o.op, o.axis, o.amt) for o in opts if o.op in ("UPCAST", "UNROLL")]
  two = [("UPCAST", 0, 8), ("UPCAST", 0, 2)]
  for k, avx2_tile, avx512_tile in (
      (conv2d(1, 8, 56, 56, 16, 3, 3, padding=1), [*two, ("UPCAST", 2, 7), ("UNROLL", 2, 0)], [("UPCAST", 0, 0), ("UPCAST", 2, 7), ("UNROLL", 2, 0)]),
      (conv2d(1, 8, 56, 56, 16, 3, 3, stride=2, padding=1), [("UPCAST", 1, 0), ("UPCAST", 3, 4), ("UPCAST", 2, 2)],
       [("UPCAST", 0, 0), ("UPCAST", 2, 7), ("UNROLL", 2, 0)]),
      (conv2d(1, 8, 64, 64, 16, 3, 3, padding=1), [("UPCAST", 1, 0), ("UPCAST", 3, 8), ("UNROLL", 2, 0)],
       [("UPCAST", 0, 0), ("UPCAST", 2, 4), ("UNROLL", 2, 0)])):
    avx2, applied = tile(k, (4, 8))
    assert applied == avx2_tile and ("PACK", 2, None) in [(o.op, o.axis, o.amt) for o in avx2], avx2
    assert tile(k, (4, 8, 16))[1] == avx512_tile
    check(k, opts=avx2)

def test_an_avx512_strided_window_row_is_unrolled_beside_a_row_of_7_pixels_not_a_2d_tile():
  # one vector of channels beside a stride-2 3x3's rows: where the row's part fills its half of the budget (7 of 14), that
  # row with the window's row unrolled, as a stride-1 window's (3x3 128 channels 56x56 stride 2, 1 thread, busy Zen 4:
  # 1.29-1.43x the 7 x 2 tile); a row's part of 4 (a 32-wide output) keeps its 2-D tile (0.86x so: sops_5748); AVX2's
  # choice unchanged (a 2-D tile)
  def tile(k, widths):
    opts = hand_coded_optimizations(Kernel(k, replace(cpu.options(), float_vector_widths=widths)))
    return opts, [(o.op, o.axis, o.amt) for o in opts if o.op in ("UPCAST", "UNROLL")]
  schedules = []
  for hw, avx512_tile in ((56, [("UPCAST", 0, 0), ("UPCAST", 2, 7), ("UNROLL", 2, 0)]), (64, [("UPCAST", 0, 0), ("UPCAST", 2, 4), ("UPCAST", 1, 2)])):
    k = conv2d(1, 8, hw, hw, 16, 3, 3, stride=2, padding=1)
    opts, applied = tile(k, (4, 8, 16))
    assert applied == avx512_tile and ("PACK", 2, None) in [(o.op, o.axis, o.amt) for o in opts], opts
    assert [op for op, _, _ in tile(k, (4, 8))[1]] == ["UPCAST"] * 3
    schedules.append((k, opts))
  # an AVX2 host's options refuse the 16-lane tile (past its register budget), and its gcc could not run it anyway
  if not cpu.options().avx512: pytest.skip("schedules checked; running them needs an AVX-512 host, this one has none")
  for k, opts in schedules: check(k, opts=opts)

def test_an_avx2_window_row_of_one_vector_takes_a_part_of_the_whole_budget():
  # one vector beside a window row: its tile is the row's part alone (no next pixel axis joins it), within the whole
  # budget (12), not the half left for a next axis (6): 8 of a 32-, 56- or 64-wide row where 4 (3x3 64 32x32, busy Zen 3,
  # 1 thread: 1.12x; 64 56x56 1.25x; sops_566 and sops_581, 640 channels at 32x32, 1.12-1.13x); a row whose half-budget
  # part keeps under 4 pixels still takes the whole row (14: the test above)
  for hw in (32, 56, 64):
    k = conv2d(1, 8, hw, hw, 24, 3, 3, padding=1)
    opts = hand_coded_optimizations(Kernel(k, replace(cpu.options(), float_vector_widths=(4, 8))))
    assert [(o.op, o.axis, o.amt) for o in opts if o.op in ("UPCAST", "UNROLL")] == [("UPCAST", 1, 0), ("UPCAST", 3, 8), ("UNROLL", 2, 0)], opts
    check(k, opts=opts)


def test_an_avx2_strided_1x1_or_7x7_conv_takes_two_vectors_of_channels_beside_a_row_of_pixels():
  # stride 2: neighbouring pixels share no input, and a row of pixels beside two vectors of channels beat one vector's
  # 2-D tile (1x1 256->512 stride 2, busy Zen 3: 1.01-1.17x; a 7x7 stem 1.01-2.20x). AVX2's budget of 6 took one:
  # a 1x1 takes the largest part of its row within it (4 of 28), a 7x7 the window's 7. AVX-512: one vector's 2-D tile, but
  # beside a strided window row (the 7x7's) a row of 7 pixels with the window's row unrolled (the test below)
  def tile(k, widths):
    opts = hand_coded_optimizations(Kernel(k, replace(cpu.options(), float_vector_widths=widths)))
    return opts, [(o.op, o.axis, o.amt) for o in opts if o.op == "UPCAST"]
  for k, pixels, avx512 in ((conv2d(1, 8, 56, 56, 16, 1, 1, stride=2), 4, [("UPCAST", 1, 2)]),
                            (conv2d(1, 3, 28, 28, 16, 7, 7, stride=2, padding=3), 7, [])):
    avx2, applied = tile(k, (4, 8))
    assert applied == [("UPCAST", 0, 8), ("UPCAST", 0, 2), ("UPCAST", 2, pixels)], avx2
    assert tile(k, (4, 8, 16))[1] == [("UPCAST", 0, 0), ("UPCAST", 2, 7), *avx512]
    check(k, opts=avx2)

def test_a_strided_1x1_convs_input_is_packed_in_blocks_of_rows_outside_its_channel_blocks():
  # each block of channels read the strided input again in place, every other element of its rows (1x1 256->512 stride 2
  # at 56x56, 1 thread, busy Emerald Rapids: 3.26-3.48 -> 1.99-2.05 ms with the input copied in blocks of 7 rows, the
  # weights then copied 4 times; 14 rows of this one's fit beside them; busy Zen 1, AVX2, beside two vectors of 7 pixels
  # not 4: 9.38 -> 6.68 ms); not under a few blocks of channels (128->64: 0.90x), nor for a window that overlaps the next
  # (a 3x3's copy would repeat its rows)
  def opts(k, widths=(4, 8, 16), threads=1):
    kern = Kernel(k, replace(cpu.options(), float_vector_widths=widths, has_threads=True, threads=threads))
    return kern, hand_coded_optimizations(kern)
  k = conv2d(1, 96, 56, 56, 256, 1, 1, stride=2)
  for widths, width in (((4, 8, 16), 16), ((4, 8), 8)):
    _, hand = opts(k, widths)
    assert [(o.op, o.axis, o.amt) for o in hand] == [("BLOCK", 1, 14), ("BLOCK", 1, 2 * width), ("UPCAST", 2, width), ("UPCAST", 2, 2),
                                                     ("UPCAST", 4, 7), ("PACK", 2, None), ("PACK", 1, None)], hand
    check(k, opts=hand)
    kern, two = opts(k, widths, threads=2)  # the threads split the blocks of rows: each copies its rows' input
    assert [(o.op, o.axis) for o in two if o.op == "THREAD"] == [("THREAD", 0)] and kern.block_dims == 2, two
  check(k, opts=two)
  for k, widths in ((conv2d(1, 384, 56, 56, 64, 1, 1, stride=2), (4, 8, 16)), (conv2d(1, 96, 56, 56, 256, 3, 3, stride=2, padding=1), (4, 8, 16)),
                    (conv2d(1, 192, 56, 56, 64, 1, 1, stride=2), (4, 8))):
    assert ("PACK", 1, None) not in [(o.op, o.axis, o.amt) for o in opts(k, widths)[1]], k.name

def test_two_vectors_of_channels_whose_copy_is_over_half_the_budget_take_blocks_of_the_reduce_on_avx512_and_the_whole_on_avx2():
  # two vectors' packed weights over half the budget kept one vector (Zen 4: their 128 and 256 KB copies ran slower);
  # over blocks of BLOCK_K input channels each copy is 32 KB (1x1 2048->512 7x7, 1 thread, busy Emerald Rapids: 1.67-1.71
  # -> 1.42-1.52 ms; 1024->256 14x14 1.25 -> 1.08); a copy under half the budget (512 channels) is not blocked, nor AVX2's
  for cin, blocked in ((2048, True), (1024, True), (512, False)):
    k = conv2d(1, cin, 7, 7, 64, 1, 1)
    opts = hand_coded_optimizations(Kernel(k, replace(cpu.options(), float_vector_widths=(4, 8, 16), threads=1)))
    applied = [(o.op, o.axis, o.amt) for o in opts]
    assert applied[:4] == [("BLOCK", 0, 32), ("UPCAST", 1, 16), ("UPCAST", 1, 2), ("UPCAST", 2, 7)], opts
    assert (("BLOCK", 3, 256) in applied) == blocked and ("PACK", 2, None) in applied, opts
    if cin == 1024: check(k, opts=opts)
  # AVX2: two vectors beside 7 of the 49 pixels (no part of its own budget, 6, divides them), their 128 KB copy whole
  # (1x1 2048->512 7x7, BUSY Zen 1, 1 thread: 1.12x one vector's 7 pixels, blocks of the reduce 1.00x)
  k = conv2d(1, 2048, 7, 7, 64, 1, 1)
  opts = hand_coded_optimizations(Kernel(k, replace(cpu.options(), float_vector_widths=(4, 8), threads=1)))
  assert [(o.op, o.axis, o.amt) for o in opts] == [("BLOCK", 0, 16), ("UPCAST", 1, 8), ("UPCAST", 1, 2), ("UPCAST", 2, 7), ("PACK", 2, None)], opts
  check(k, opts=opts)

def test_a_full_width_avx512_3x3_conv_takes_two_vectors_of_channels_over_blocks_of_its_input_channels():
  # two vectors' copy of a 3x3's weights at 128 input channels is over half the budget (147 KB), and its reduce's innermost
  # axis is the window's row: on full-width AVX-512 the input channels go in blocks whose copy is under half (64 here),
  # beside 7 pixels, a strided window row unrolled too (1 thread, busy Emerald Rapids: 3x3 256 14x14 1.14x, 128 stride 2
  # 56x56 1.40x one vector's 7 pixels); Zen 4 (half_width_fma) keeps one vector's 7
  def tile(k, half_width_fma):
    opts = hand_coded_optimizations(Kernel(k, replace(cpu.options(), float_vector_widths=(4, 8, 16), half_width_fma=half_width_fma, threads=1)))
    return opts, [(o.op, o.axis, o.amt) for o in opts]
  schedules = []
  for stride, hw in ((1, 14), (2, 28)):
    k = conv2d(1, 128, hw, hw, 64, 3, 3, stride=stride, padding=1)
    opts, applied = tile(k, False)
    assert applied == [("BLOCK", 0, 32), ("UPCAST", 1, 16), ("UPCAST", 1, 2), ("UPCAST", 3, 7), ("UNROLL", 2, 0), ("BLOCK", 4, 64),
                       ("PACK", 2, None)], opts
    assert tile(k, True)[1] == [("BLOCK", 0, 16), ("UPCAST", 1, 0), ("UPCAST", 3, 7), ("UNROLL", 2, 0), ("PACK", 2, None)]
    schedules.append((k, opts))
  if not cpu.options().avx512: pytest.skip("schedules checked; running them needs an AVX-512 host, this one has none")
  for k, opts in schedules: check(k, opts=opts)

def test_threads_split_a_convs_channel_blocks_where_its_weights_outweigh_its_input():
  # each thread packs the weights of the blocks it takes: split over the pixels, each packed all of them (3x3 256 14x14,
  # 2.4 MB of weights against 0.2 MB of input: 1.06x over the channel blocks at 2 threads, busy Zen 3); where the input
  # is the larger (1x1 128->64 stride 2 at 56x56 here; 1x1 256->512 stride 2: 0.91x over the blocks) the pixels still
  options = replace(cpu.options(), has_threads=True, threads=2)
  for k, blocks in ((conv2d(1, 64, 14, 14, 64, 3, 3, padding=1), True), (conv2d(1, 128, 56, 56, 64, 1, 1, stride=2), False)):
    kern = Kernel(k, options)
    opts = hand_coded_optimizations(kern)
    thread = [o for o in opts if o.op == "THREAD"]
    assert len(thread) == 1 and (thread[0].axis < kern.block_dims) == blocks, opts
    check(k, opts=opts)

def test_a_load_after_the_reduce_neither_is_packed_nor_keeps_the_pixels_out_of_the_tile():
  # a 1x1 conv at 7x7 plus a residual (ResNet's last stage): the residual varies along the pixels, but it is read once an
  # output, after the reduce: the pixels still tile beside the packed weights (it kept them out: one pixel a step, 3.9 ms
  # where this schedule takes 1.7 on Zen 4)
  conv = conv2d(1, 64, 7, 7, 64, 1, 1)
  k = kernel(alu("ADD", conv.reduceop, ld("residual", conv.ast.arg.st)))
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))
  assert [o.op for o in opts].count("PACK") == 1 and ("PACK", 2, None) in [(o.op, o.axis, o.amt) for o in opts], opts
  assert any(o.op == "UPCAST" and o.amt == 7 for o in opts), opts
  check(k, opts=opts)

def test_an_nt_matmul_under_a_bias_and_residual_packs_its_rows_where_that_tile_beats_its_columns():
  # a Linear's matmul with its weights stored (out, in): both operands are gathered along the output's columns, which
  # only the bias and the residual read cleanly, after the reduce. The rows are the vector, A's rows packed, beside a tile
  # of 12 columns (the columns' own tile is 8: GPT-2's MLP down projection 34.3 -> 7.4 ms, Zen 4). A reduce past
  # heuristic.SHORT_REDUCE: over a shorter one AVX-512 packs B's columns instead (tests/test_heuristic_matmul.py)
  mm = matmul(32, 96, 192, transpose_b=True)
  k = kernel(alu("ADD", alu("ADD", mm.reduceop, ld("bias", broadcast((96, 1), (32, 96, 1)))), ld("residual", mm.ast.arg.st)))
  w = widest(k)
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))
  applied = [(o.op, o.axis, o.amt) for o in opts]
  # AVX2 (8 lanes, PIXEL_TILE 12 halved for two vectors): two vectors of rows beside 6 columns, the same 12 accumulators
  rows = [("BLOCK", 0, w), ("UPCAST", 1, 0)] if w >= 16 else [("BLOCK", 0, 2 * w), ("UPCAST", 1, w), ("UPCAST", 1, 2)]
  assert applied[:len(rows) + 1] == [*rows, ("UPCAST", 2, 12 if w >= 16 else 6)] and ("PACK", 1, None) in applied, opts
  check(k, opts=opts)

def test_a_matvec_takes_its_reduce_as_the_vector_beside_rows_of_no_vector_width():
  # a Linear at one token (weights stored (out, in)): no tile reuses a row of the weights, and the rows' vector gathers
  # them (packed or not); the reduce's unroll is the vector, 8 rows (2 x 2 x 2: no vector width, so not the vector) share
  # each input vector (3072x768 plus a bias: 0.40 -> 0.12 ms, Zen 4), with or without a bias
  for bias in (False, True):
    mv = red("SUM", alu("MUL", ld("x", broadcast((64,), (96, 64))), ld("w", (96, 64))), (1,))
    k = kernel(alu("ADD", mv, ld("bias", (96, 1))) if bias else mv)
    w = widest(k)
    kern = Kernel(k, cpu.options())
    opts = hand_coded_optimizations(kern)
    assert [(o.op, o.axis, o.amt) for o in opts][:4] == [("UPCAST", 0, 2)] * 3 + [("UNROLL", 0, w)], opts
    prog = lower(kern)
    assert sum(u.op == "DEFINE_ACC" and u.vec == w for u in prog.uops) == 8 and not any(u.op == "VBUILD" for u in prog.uops)
    check(k, opts=opts)

def test_a_packed_vector_with_a_tile_of_one_unrolls_its_reduce_where_pixels_are_left_to_loop_over():
  # 17 columns (no divisor for a tile: GPT-2's LM head has 50257): one accumulator, an FMA's latency a step, so the
  # reduce is unrolled by 8 into a tree (481 -> 349 ms on the LM head, Zen 4); 4 rows, all in the tile, are not
  k = matmul(32, 17, 64, transpose_b=True)
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))
  applied = [(o.op, o.axis, o.amt) for o in opts]
  assert applied[:2] == [("BLOCK", 0, widest(k)), ("UPCAST", 1, 0)] and ("UNROLL", 0, 8) in applied, opts
  check(k, opts=opts)
  k = matmul(4, 96, 64, transpose_b=True)  # the 96 columns the vector, the 4 rows its tile
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))
  assert ("PACK", 2, None) in [(o.op, o.axis, o.amt) for o in opts] and not any(o.op == "UNROLL" for o in opts), opts
  check(k, opts=opts)

def test_an_nt_matmul_whose_columns_no_tile_divides_pads_them_to_a_tile():
  # GPT-2's LM head: 50257 = 29 x 1733 columns, no divisor within the tile's budget, took one accumulator a step (0.45x
  # of OpenBLAS); padded to a multiple of a tile of columns (PADTO; padded outputs not stored) beside 2 vectors of rows:
  # 430 -> 160 ms, 1 thread, Zen 4. Here 263 (a prime) columns, a bias and a residual after the reduce.
  mm = matmul(64, 263, 64, transpose_b=True)
  k = kernel(alu("ADD", alu("ADD", mm.reduceop, ld("bias", broadcast((263, 1), (64, 263, 1)))), ld("residual", mm.ast.arg.st)))
  kern = Kernel(k, replace(cpu.options(), threads=1))  # one thread: a THREAD split would renumber the axes checked below
  opts = hand_coded_optimizations(kern)
  applied = [(o.op, o.axis, o.amt) for o in opts]
  pad = next((o for o in opts if o.op == "PADTO"), None)
  assert pad is not None and ("UPCAST", pad.axis, pad.amt) in applied and ("PACK", 1, None) in applied, opts
  assert not any(o.op == "UNROLL" for o in opts), opts
  # A, broadcast along the padded columns, is widened there, not masked: its packed copy holds rows and the reduce only
  assert kern.pack_bytes() <= 64 * 64 * 4 and pad.axis not in kern.varies(1) and pad.axis in kern.varies(2)
  for seed in range(2): check(k, opts=opts, seed=seed)
  # not a short axis (a whole tile of padding would be too much of its work: 17 columns), nor under a short reduce (32
  # deep: the tile's masked loads and lane stores outweigh its multiply-adds): the unrolled reduce there
  for short in (matmul(64, 17, 64, transpose_b=True), matmul(64, 263, 32, transpose_b=True)):
    assert not any(o.op == "PADTO" for o in hand_coded_optimizations(Kernel(short, cpu.options()))), short.full_shape

def test_a_conv_whose_packed_weights_are_over_the_budget_takes_half_width_vectors_of_its_channels():
  # a 3x3 conv at 7x7 (no row vector) with so many input channels that a whole vector's packed weights are over
  # PACK_BYTES but half of it fits (ResNet-50's 512 at 16 lanes: 18.6 -> 2.9 ms on Zen 4)
  w = widest(conv2d(1, 16, 7, 7, 16, 3, 3, padding=1))
  cin = (PACK_BYTES // (36 * w) // 16 + 1) * 16
  k = conv2d(1, cin, 7, 7, 16, 3, 3, padding=1)
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))
  applied = [(o.op, o.axis, o.amt) for o in opts]
  assert applied[:2] == [("BLOCK", 0, w // 2), ("UPCAST", 1, 0)] and ("PACK", 2, None) in applied, opts
  check(k, opts=opts)

def test_a_vector_the_output_is_strided_along_continues_a_blocked_reduce_lane_by_lane():
  # a blocked reduce reads its accumulators back from the output, strided along the vector (the output channels): one
  # element per lane, not a vector load at lane 0's (which read the wrong outputs)
  k = conv2d(1, 64, 7, 7, 32, 1, 1)  # (output channels, pixels, input channels)
  w = widest(k)
  opts = [Opt("BLOCK", 0, w), Opt("UPCAST", 1, 0), Opt("UPCAST", 2, 7), Opt("BLOCK", 3, 16), Opt("PACK", 2)]
  prog = program(k, opts)
  assert any(u.op == "DEFINE_ACC" and u.vec == w for u in prog.uops)
  check(k, opts=opts)


def test_the_stem_conv_takes_its_output_channels_as_the_vector():
  # the 7x7 stride-2 stem, 3 input channels: its padded, strided rows made every row vector load lane by lane on a
  # 16-lane host (a 16 x 8 tile: 2.4 ms at 32x32 on a Cascade Lake), and 8 x 8 with the channels unrolled was slower
  # than one vector of output channels with a tile of pixels (Zen 4, 224x224: 25.7 and 11.2 -> 5.3 ms; 32x32: 0.57 and
  # 0.27 -> 0.067 ms)
  k = conv2d(1, 3, 32, 32, 64, 7, 7, stride=2, padding=3)
  kern = Kernel(k, cpu.options())
  opts = hand_coded_optimizations(kern)
  assert ("PACK", 2) in [(o.op, o.axis) for o in opts] and not any(u.op == "VBUILD" for u in lower(kern).uops), opts
  check(k, opts=opts)


def test_a_thread_split_into_more_parts_than_cores_runs_on_the_cores():
  k, cores = matmul(64, 48, 80), cpu.options().threads
  for parts in (4, 8):
    src, _, _ = compile_kernel(k, "CPU", [Opt("THREAD", 0, parts), Opt("UPCAST", 2, 4)])
    assert re.findall(r"num_threads\((\d+)\)", src) == ([str(min(parts, cores))] if cores > 1 else []), src
    check(k, opts=[Opt("THREAD", 0, parts), Opt("UPCAST", 2, 4)])


def test_symbolic_kernel_takes_its_variable_as_an_argument():
  k = symbolic_sum(rows=4, var=("n", 1, 64))
  src, _, _ = compile_kernel(k, "CPU", [Opt("UPCAST", 0, 2)])
  assert "int var_n)" in src  # a kernel's variable, renamed apart (tests/test_names.py)
  for n in (1, 17, 64): check(k, var_vals={"n": n}, opts=[Opt("UPCAST", 0, 2)])


# 120 sampled corpus kernels have 31 distinct hand-coded schedules (their opts and amounts; on AVX2): `make test` checks the
# examples and the first corpus kernel of each schedule (35 compiles, was 124: ~7 CPU-s, was ~22, busy), the exhaustive
# tier, which CI runs too, the kernels after it, which repeat a schedule already checked on another kernel
@pytest.mark.slow
@pytest.mark.parametrize("repeats", [False, pytest.param(True, marks=pytest.mark.exhaustive)], ids=["first-of-each-schedule", "repeated-schedules"])
def test_hand_coded_schedules_are_correct_on_examples_and_corpus_kernels(corpus, repeats):
  import random
  small = [k for k in corpus if math.prod(k.shape_at(k.full_shape, k.var_vals())) < 2_000_000]
  examples = [matmul(64, 48, 80), conv2d(1, 8, 12, 12, 8, 3, 3, padding=1), reduce("SUM", (64, 256), (1,)),
              symbolic_sum(rows=8, var=("n", 1, 300))]
  seen: set[tuple] = set()
  cases = [] if repeats else [(k, hand_coded_optimizations(Kernel(k, cpu.options()))) for k in examples]
  for k in [k.rebased() for k in random.Random(1).sample(small, 120)]:
    opts = hand_coded_optimizations(Kernel(k, cpu.options()))
    if ((shape := tuple((o.op, o.amt) for o in opts)) in seen) == repeats: cases.append((k, opts))
    seen.add(shape)
  for k, opts in cases: check(k, opts=opts)
  assert {"UPCAST", "UNROLL"} <= {o.op for _, opts in cases for o in opts}


def test_the_hand_coded_schedule_of_a_reduce_over_size_1_axes_is_none():
  # its layout drops the size-1 axes and has none left: the heuristic indexed axis -1 of an empty shape (IndexError out of
  # run_kernel), found by the hand-coded fuzz on a builder kernel
  for shape, fn in (((1,), "MAX"), ((1, 1), "SUM"), ((1, 1, 1), "SUM")):
    k = reduce(fn, shape, tuple(range(len(shape))))
    assert hand_coded_optimizations(Kernel(k, cpu.options())) == []
    check(k)


def test_run_kernel_without_opts_runs_the_hand_coded_schedule():
  k = matmul(64, 48, 80)
  _, _, opts = compile_kernel(k, "CPU")
  assert opts == hand_coded_optimizations(Kernel(k, cpu.options())) and opts
  check(k, opts=opts)
  vv = k.var_vals()
  bufs, want = reference.random_buffers(k, vv, 3), reference.random_buffers(k, vv, 3)
  reference.run(k, want, vv)
  run_kernel(k, bufs)
  assert (msg := compare(k, bufs, want, vv)) is None, msg


# ---------------------------------------------------------------- multiply-accumulate fusion

def program(k, opts=(), device="CPU"):
  return lower(Kernel(k, registry.get(device).options()).apply_opts(list(opts)))

def ops(prog, vec=1) -> list[str]:
  """ALU and ACC ops of the program whose values have at least `vec` lanes."""
  return [u.arg for u in prog.uops if u.op in ("ALU", "ACC") and u.vec >= vec]

def widest(k, device="CPU") -> int: return max(vector_widths(k, registry.get(device).options()))  # the most lanes the device's vectors hold for k


# (1+e)^2 = 1 + 2e + e^2 rounds to 1 + 2e: e^2 is the product's rounding error, which a fused multiply-add keeps
FMA_E = [(float32, 2**-12), (F64, 2**-27)]
SUM_SCHEDULES = {"accumulate": lambda w: [], "tree": lambda w: [Opt("UNROLL", 0, 0)], "vector": lambda w: [Opt("UPCAST", 0, w)],
                 "vector_chain": lambda w: [Opt("UPCAST", 0, w), Opt("UPCAST", 0, 8), Opt("UNROLL", 0, 0)]}  # 8 accumulators

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt,e", FMA_E, ids=["float32", "float64"])
@pytest.mark.parametrize("name", SUM_SCHEDULES)
def test_a_sum_of_products_rounds_each_product_once(dt, e, name, device):
  # each row sums (1+e)(1+e) and -(1+e)(1+e): 0 with every product rounded, +-e^2 with one of them fused into the sum
  # (in whatever order the schedule adds them); within the reference's range for a SUM summed in another order
  if "vector" in name and device == "CPU" and "fma" not in cpu.fingerprint()["isa"]: pytest.skip("C vectors fuse where the ISA has an FMA")
  k = kernel(red("SUM", alu("MUL", ld(1, (128, 2), dt), ld(2, (128, 2), dt)), [1]))
  w = widest(k, device) if "vector" in name else 1
  opts = SUM_SCHEDULES[name](w)
  assert "MULACC" in ops(program(k, opts, device), w)
  x = np.tile([1 + e, -1 - e], 128).astype(dt.np)
  out = check(k, [x, np.full(256, 1 + e, dt.np)], opts=opts, device=device)
  assert (np.abs(out) == e * e).all(), out[:4]

@pytest.mark.parametrize("dt,e", FMA_E + [(float16, 2**-6), (BF16, 2**-4)], ids=["float32", "float64", "float16", "bfloat16"])
def test_element_wise_mul_add_is_rounded_as_the_reference_rounds(dt, e):
  # a*b+c outside a SUM is not fused: a cancellation after it could magnify the difference past the tolerance
  for opts in ([], [Opt("UPCAST", 0, 8)]):
    assert "MULACC" not in ops(program(mul_add(64, dt), opts))
    x = np.full(64, 1 + e, dt.np)
    assert (check(mul_add(64, dt), [x, x, np.full(64, -(1 + 2 * e), dt.np)], opts=opts) == 0).all()

def test_sum_of_products_goes_straight_into_enough_accumulators_else_through_a_tree():
  mm = matmul(64, 48, 80)
  tile = [Opt("UPCAST", 1, widest(mm)), Opt("UPCAST", 0, 8), Opt("UNROLL", 0, 2)]  # 8 vector accumulators
  assert ops(program(mm, tile), widest(mm)) == ["MULACC"] * 16  # each product one FMA into its accumulator
  check(mm, opts=tile)
  dot = kernel(red("SUM", alu("MUL", ld(1, (4, 256)), ld(2, (4, 256))), [1]))
  # the unrolled reduce axis read contiguously is the vector: one FMA a row into its vector accumulator, whose 4 lanes
  # are added after the loop
  assert sorted(ops(program(dot, [Opt("UNROLL", 0, 4)]))) == ["ADD", "ADD", "ADD", "MULACC"]
  check(dot, opts=[Opt("UNROLL", 0, 4)])
  # read across rows, scalars: one accumulator a row, the unrolled products pair up (a*b + c*d: one MUL, one MULACC),
  # then one ADD into it
  cols = kernel(red("SUM", alu("MUL", ld(1, st((256, 4)).permute((1, 0))), ld(2, st((256, 4)).permute((1, 0)))), [1]))
  assert sorted(ops(program(cols, [Opt("UNROLL", 0, 4)]))) == ["ADD", "ADD", "MUL", "MUL", "MULACC", "MULACC"]
  check(cols, opts=[Opt("UNROLL", 0, 4)])


# ---------------------------------------------------------------- vector lanes for more ops

EDGE = [F("nan"), F("inf"), -F("inf"), 0.0, -0.0, 1.0, -1.0, 1.5, 1e-45, -1e-40, 3.4e38, -3.4e38, 65504.0, 65520.0, 2049.0, 1 / 3]

def pairs(dt) -> list[np.ndarray]:
  """Every edge value against every other (256 elements)."""
  return [np.repeat(EDGE, len(EDGE)).astype(dt.np), np.tile(EDGE, len(EDGE)).astype(dt.np)]

def vcheck(k, inputs, *vector_ops: str, device="CPU"):
  """The output's last axis carried as vectors as wide as the device has, these ALU ops among the vector ones;
  compiled vs reference."""
  w = widest(k, device)
  opts = [Opt("UPCAST", Kernel(k, registry.get(device).options()).first_reduce - 1, w)]
  prog = program(k, opts, device)
  assert any(u.vec == w for u in prog.uops) and set(vector_ops) <= set(ops(prog, w)), (ops(prog, w), vector_ops)
  return check(k, inputs, opts=opts, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [float32, F64], ids=["float32", "float64"])
def test_vector_max_comparisons_and_where_keep_the_reference_semantics(dt, device):
  a, b = ld(1, (256,), dt), ld(2, (256,), dt)
  x = pairs(dt)
  vcheck(kernel(alu("MAX", a, b)), x, "MAX", device=device)  # NaN in either operand wins
  vcheck(kernel(alu("WHERE", alu("CMPLT", a, b), a, b)), x, "CMPLT", "WHERE", device=device)  # NaN compares false
  vcheck(kernel(cast(alu("CMPEQ", a, b), dt)), x, "CMPEQ", device=device)
  vcheck(kernel(alu("WHERE", alu("CMPEQ", a, a), const(2.5, (256,), dt), a)), x, "CMPEQ", "WHERE", device=device)
  vcheck(kernel(cast(cast(a, bool_), dt)), x, device=device)  # NaN is true, -0 false
  vcheck(kernel(alu("SUB", alu("MUL", a, b), alu("DIV", a, alu("NEG", b)))), x, "MUL", "DIV", "NEG", "SUB", device=device)

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [float32, F64], ids=["float32", "float64"])
def test_vector_sqrt_and_recip_are_exact(dt, device):
  # correctly rounded as scalars (the contract): edge values (-0, negatives, 0, subnormals, inf, NaN) and random ones
  x = np.concatenate([EDGE, np.random.default_rng(4).standard_normal(240) * 10.0 ** np.arange(-20, 20, 1 / 6)]).astype(dt.np)
  vcheck(kernel(alu("SQRT", ld(1, (256,), dt))), [x], "SQRT", device=device)
  vcheck(kernel(alu("RECIP", ld(1, (256,), dt))), [x], "RECIP", device=device)
  # a BatchNorm over features: each feature's 1/sqrt(var + eps), the features as lanes
  var = ld(1, st((1, 256)).expand((8, 256)), dt)
  vcheck(kernel(alu("MUL", ld(2, (8, 256), dt), alu("RECIP", alu("SQRT", alu("ADD", var, const(1e-5, (8, 256), dt)))))), None,
         "SQRT", "RECIP", device=device)

def conv_bn(cin: int = 8, cout: int = 16, hw: int = 16, eps: float = 1e-5):
  """A 3x3 conv with BatchNorm fused, as tinygrad fuses it: (conv - mean) * (gamma * sqrt(1 / (var + eps))) + beta, per
  output channel."""
  conv = conv2d(1, cin, hw, hw, cout, 3, 3, padding=1).ast.src[0]
  ch = lambda buf: ld(buf, broadcast((1, cout, 1, 1, 1, 1, 1), conv.shape))
  invstd = alu("SQRT", alu("RECIP", alu("ADD", ch("var"), const(eps, conv.shape))))
  return kernel(alu("ADD", alu("MUL", alu("SUB", conv, ch("mean")), alu("MUL", ch("gamma"), invstd)), ch("beta")))

@pytest.mark.parametrize("device", DEVICES)
def test_a_conv_with_batchnorm_is_vectorised(device):
  # SQRT and RECIP are vector ops: before, one per output made the whole conv scalar. The lanes (a row of one output
  # channel) share the channel's variance: one scalar SQRT and RECIP, broadcast
  k = conv_bn()
  w, row = widest(k, device), Kernel(k, registry.get(device).options()).first_reduce - 1
  prog = program(k, [Opt("UPCAST", row, w)], device)
  assert "MULACC" in ops(prog, w) and [u.vec for u in prog.uops if u.op == "ALU" and u.arg in ("SQRT", "RECIP")] == [1, 1]
  check(k, opts=[Opt("UPCAST", row, w)], device=device)
  if device == "CPU":
    kern = Kernel(k, cpu.options())
    opts = hand_coded_optimizations(kern)
    assert max(u.vec for u in lower(kern).uops) > 1, opts
    check(k, opts=opts)

@pytest.mark.parametrize("device", DEVICES)
def test_a_padded_or_strided_conv_loads_its_rows_as_vectors(device):
  # along a padded row a shifted window's lanes are valid or not by lane: vector loads where every lane is valid and
  # each lane alone where some is not (the rows' ends here), and a stride-2 row's lanes are the even elements of two
  # vector loads; before, every such load was gathered lane by lane (VBUILD), inside the image too
  def rows(k, w, *more):
    return [Opt("UPCAST", Kernel(k, registry.get(device).options()).first_reduce - 1, w), *more]
  # (kernel, lanes, the reduce axis unrolled, where LANE is: the validity (2) or the index (1))
  for k, w, kx, lane_in in ((conv2d(1, 4, 16, 16, 8, 3, 3, padding=1), 8, 2, 2), (conv2d(1, 3, 20, 32, 8, 7, 7, stride=2, padding=3), 8, 2, 1),
                            (conv2d(1, 3, 9, 16, 4, 5, 5, padding=2, dilation=(1, 2)), 4, 2, 2), (conv2d(1, 2, 8, 8, 4, 1, 1, stride=2), 4, 0, 1)):
    opts = rows(k, min(w, widest(k, device)), Opt("UNROLL", kx, 0))
    prog = program(k, opts, device)
    assert not [u for u in prog.uops if u.op == "VBUILD"], opts
    assert any(LANE in {v.name for v in variables(u.arg[lane_in])} for u in prog.uops if u.op == "LOAD" and u.vec > 1)
    check(k, opts=opts, device=device)

@pytest.mark.parametrize("device", DEVICES)
def test_a_padded_row_one_vector_wide_is_the_unshifted_rows_lanes_shifted(device):
  # a row as wide as the vector: every kx-shifted row has a lane in the padding, and the others valid where the row is;
  # those are the lanes of the row the kernel loads at kx = 1, shifted, with no loads of their own (before: each
  # shifted row lane by lane, 6x the unshifted conv's time on an 8x8 image)
  w = min(8, widest(conv2d(1, 4, 8, 8, 8, 3, 3, padding=1), device))
  k = conv2d(1, 4, w, w, 8, 3, 3, padding=1)
  opts = [Opt("UPCAST", Kernel(k, registry.get(device).options()).first_reduce - 1, w), Opt("UNROLL", 2, 0)]
  prog = program(k, opts, device)
  loads = [u for u in prog.uops if u.op == "LOAD" and u.vec == w]
  assert loads and all(LANE not in {v.name for v in variables(u.arg[2])} for u in loads) and any(u.op == "GEP" for u in prog.uops)
  check(k, opts=opts, device=device)

@pytest.mark.parametrize("device", DEVICES)
def test_vector_where_with_a_mask_of_other_lanes(device):
  # a float64 comparison selecting float32 lanes and the reverse: the mask converts between lane widths
  a, b = ld(1, (256,)), ld(2, (256,))
  vcheck(kernel(alu("WHERE", alu("CMPLT", cast(a, F64), cast(b, F64)), a, b)), pairs(float32), "CMPLT", "WHERE", device=device)
  a, b = ld(1, (256,), F64), ld(2, (256,), F64)
  x = pairs(F64)
  x[0][::5] = 1e300  # beyond float32: compares as inf
  vcheck(kernel(alu("WHERE", alu("CMPLT", cast(a, float32), cast(b, float32)), a, b)), x, "CMPLT", "WHERE", device=device)

@pytest.mark.parametrize("device", DEVICES)
def test_vector_float_casts_round_as_c(device):
  rng = np.random.default_rng(1)
  f32 = np.concatenate([pairs(float32)[0][::16], rng.standard_normal(240).astype(np.float32) * 3e4])
  f32[-16:] = np.float32(1) + np.float32(2**-11) * np.arange(16)  # ties to even into float16
  halves = np.arange(0, 1 << 16, 256, dtype=np.uint16).view(np.float16)  # every exponent, NaNs, infs, subnormals, both signs
  to16, from16 = kernel(cast(ld(1, (256,)), float16)), kernel(cast(ld(1, (256,), float16), float32))
  if device == "CPU":
    vcheck(to16, [f32])
    vcheck(from16, [halves])
  else:  # the GPU languages compute float16 in float registers, lane by lane
    o = registry.get(device).options()
    assert not vector_widths(to16, o) and not vector_widths(from16, o)
  vcheck(kernel(cast(ld(1, (256,)), F64)), [f32], device=device)
  f64 = np.concatenate([[1e300, -1e300, 1e-300, 2.0**24 + 1, 1 / 3, F("nan"), -0.0, 2.0**-149 * 0.75], rng.standard_normal(248)])
  vcheck(kernel(cast(ld(1, (256,), F64), float32)), [f64], device=device)

@pytest.mark.parametrize("lanes", ["16", "8"])
def test_vector_float_to_int_casts_are_x86_64s(lanes, monkeypatch):
  """Each lane converts as a scalar does (lane by lane, range checks before each conversion), every float to every int,
  on AVX-512's vectors and AVX2's (OpenCL carries no int lanes)."""
  monkeypatch.setenv("TUNESVC_CPU_LANES", lanes)
  if not cpu.options().avx512 and lanes == "16": pytest.skip("AVX-512's vectors need an AVX-512 host, this one has none")
  assert widest(kernel(cast(ld(1, (256,)), int32))) == int(lanes)
  for src in (float16, float32, F64):
    with np.errstate(all="ignore"): xs = np.resize(np.array(FLOAT_TO_INT_EDGES).astype(src.np), 256)
    for dt in INTS: vcheck(kernel(cast(ld(1, (256,), src), dt)), [xs])

def test_a_float16_broadcast_is_a_vector():
  # x - 0 on a _Float16 promotes x to float, which gcc refuses to convert to a _Float16 vector: it failed to compile
  out = vcheck(kernel(ld(1, st((1,)).expand((256,)), float16)), [np.array([-3.5], np.float16)])
  assert (out == -3.5).all()

INTS = [DTYPES[n] for n in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")]

def int_edges(dt) -> np.ndarray:
  """16 values of an int dtype: its ends, around 0, negatives (wrapped into an unsigned dtype)."""
  bits = 8 * dt.itemsize
  vals = [dt.min, dt.min + 1, dt.max, dt.max - 1, 0, 1, 2, 3, 7, -1, -2, -3, -7, 100, -100, dt.max // 3]
  return np.array([v % 2**bits for v in vals], np.uint64).astype(f"u{dt.itemsize}").view(dt.np)

@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_int_vectors_wrap_compare_and_divide_as_the_reference(dt):
  e = int_edges(dt)
  x = [np.repeat(e, 16), np.tile(e, 16)]  # every edge value against every other
  a, b = ld(1, (256,), dt), ld(2, (256,), dt)
  for op in ("ADD", "SUB", "MUL", "MAX", "XOR"): vcheck(kernel(alu(op, a, b)), x, op)  # + - * wrap
  vcheck(kernel(alu("NEG", a)), x[:1], "NEG")
  vcheck(kernel(alu("WHERE", alu("CMPLT", a, b), a, b)), x, "CMPLT", "WHERE")
  vcheck(kernel(cast(alu("CMPEQ", a, b), dt)), x, "CMPEQ")
  vcheck(kernel(alu("DIV", a, b)), x, "DIV")  # lane by lane: by 0 and min / -1 as the reference defines them
  vcheck(kernel(alu("MOD", a, b)), x, "MOD")
  for to in (float16, float32, F64, int8, DTYPES["uint16"], DTYPES["int64"]): vcheck(kernel(cast(a, to)), x[:1])  # round, wrap
  vcheck(kernel(cast(cast(a, bool_), dt)), x[:1])
  rows = np.resize(e, (37, 64))
  vcheck(kernel(red("SUM", ld(1, (37, 64), dt), [0])), [rows.reshape(-1)], "ADD")  # wraps
  vcheck(kernel(red("MAX", ld(1, (37, 64), dt), [0])), [rows.reshape(-1)], "MAX")

def test_a_one_hot_embedding_is_vectorised():
  # GPT-2's token embedding as tinygrad 0.8.0 fuses it: (token == arange) ? weight : 0, summed over the vocabulary
  vocab, width = 48, 64
  tok, ar = ld(1, broadcast((4, 1, 1), (4, vocab, width)), int32), ld(2, broadcast((1, vocab, 1), (4, vocab, width)), int32)
  onehot = alu("WHERE", alu("CMPEQ", tok, ar), ld(3, broadcast((1, vocab, width), (4, vocab, width))), const(0.0, (4, vocab, width)))
  k = kernel(red("SUM", onehot, [1]))
  vcheck(k, [np.array([5, -1, 47, 0], np.int32), np.arange(vocab, dtype=np.int32),
             np.random.default_rng(5).standard_normal(vocab * width)], "CMPEQ", "WHERE")
  kern = Kernel(k, cpu.options())
  opts = hand_coded_optimizations(kern)
  assert max(u.vec for u in lower(kern).uops) > 1, opts
  check(k, opts=opts)

# float16 vectors on the CPU only: the GPU languages keep float16 in float registers, scalar
VECTOR_REDUCTIONS = [pytest.param(getattr(d, "values", (d,))[0], dt, marks=getattr(d, "marks", ()), id=f"{dt.name}-{getattr(d, 'values', (d,))[0]}")
                     for d in DEVICES for dt in (float32, F64, float16) if dt != float16 or d == "CPU"]

@pytest.mark.parametrize("device,dt", VECTOR_REDUCTIONS)
def test_vector_reductions(dt, device):
  # over axis 0 of (rows, 64): the output's 64 columns are the vector lanes
  x = np.random.default_rng(2).standard_normal((37, 64)).astype(dt.np)
  x[5, 3], x[30, 17], x[:, 40] = F("nan"), F("inf"), -F("inf")
  vcheck(kernel(red("MAX", ld(1, (37, 64), dt), [0])), [x.reshape(-1)], "MAX", device=device)
  vcheck(kernel(red("SUM", ld(1, (37, 64), dt), [0])), [x.reshape(-1)], "ADD", device=device)

@pytest.mark.parametrize("dt", [float32, F64, float16], ids=lambda d: d.name)
def test_an_unrolled_reduce_axis_is_a_vector_whose_lanes_are_folded_after_the_loop(dt):
  # over axis 1 of (37, 64): no output axis is upcast, so the unrolled, contiguous reduce axis carries the vector; its
  # lanes fold once after the loop (SUM in another order, within the SUM's range; MAX's NaN from any lane)
  x = np.random.default_rng(3).standard_normal((37, 64)).astype(dt.np)
  x[5, 3], x[30, 17], x[9, :] = F("nan"), F("inf"), -F("inf")
  fns = [lambda a: red("SUM", a, [1]), lambda a: red("MAX", a, [1])]
  if dt == float32: fns.append(lambda a: red("SUM", alu("EXP2", a), [1]))  # softmax's exp-sum: vecmath's vector exp2
  for fn in fns:
    k = kernel(fn(ld(1, (37, 64), dt)))
    w = min(widest(k), 16)
    prog = program(k, [Opt("UNROLL", 0, w)])
    assert [u.vec for u in prog.uops if u.op == "DEFINE_ACC"] == [w] and sum(u.op == "GEP" for u in prog.uops) == w
    check(k, [x.reshape(-1)], [Opt("UNROLL", 0, w)])
  # read with stride 37 the lanes would be gathered: they stay scalar
  k = kernel(red("SUM", ld(1, st((64, 37)).permute((1, 0)), dt), [1]))
  assert max(u.vec for u in program(k, [Opt("UNROLL", 0, 16)]).uops) == 1
  check(k, [x.reshape(-1)], [Opt("UNROLL", 0, 16)])

def test_hand_coded_reductions_take_the_reduce_axis_as_the_vector():
  k = kernel(red("SUM", alu("EXP2", alu("SUB", ld(1, (64, 1024)), ld(2, st((64, 1)).expand((64, 1024))))), [1]))
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))
  assert opts[0] == Opt("UNROLL", 0, widest(k)), opts
  check(k, opts=opts)

def test_a_pooling_window_at_stride_2_takes_its_output_row_as_the_vector_where_windows_overlap():
  # max pooling over 64x18x18 (a padded 16x16 image): 3x3 windows at stride 2 overlap, so the compiler cannot split the
  # row into even and odd lanes itself: the output row is upcast, its lanes shuffled from two loads; 2x2 windows at
  # stride 2 it does vectorise by itself, and they keep the scalar row
  for window, rows, upcast in ((3, 18, True), (2, 16, False)):
    view = View.create((64, 8, 8, window, window), (rows * rows, 2 * rows, 2, rows, 1))
    k = kernel(red("MAX", ld(1, ShapeTracker((view,))), [3, 4]))
    opts = hand_coded_optimizations(Kernel(k, cpu.options()))
    assert any(o.op == "UPCAST" and o.axis == 2 for o in opts) == upcast, (window, opts)
    check(k, opts=opts)
  # a column-style reduce whose row no vector of the widest width divides takes a narrower one (24 wide: 8; the reduce
  # axis goes last, the row is axis 0)
  k = kernel(red("SUM", ld(1, (37, 24)), [0]))
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))
  assert opts[0] == Opt("UPCAST", 0, max(w for w in vector_widths(k, cpu.options()) if 24 % w == 0)), opts
  check(k, opts=opts)

@pytest.mark.parametrize("device", DEVICES)
def test_vector_broadcasts_keep_negative_zero(device):
  # a lane broadcast that added to 0 would turn -0 into +0, and x / -0 into +inf
  x = np.arange(1, 65, dtype=np.float32)
  out = vcheck(kernel(alu("DIV", ld(1, (64,)), const(-0.0, (64,)))), [x], "DIV", device=device)
  assert (out == -F("inf")).all()
  out = vcheck(kernel(alu("DIV", ld(1, (64,)), ld(2, st((1,)).expand((64,))))), [x, np.array([-0.0], np.float32)], "DIV", device=device)
  assert (out == -F("inf")).all()

def test_hand_coded_schedules_vectorise_the_new_ops():
  relu = kernel(alu("MAX", ld(1, (64, 256)), const(0.0, (64, 256))))
  for k in (relu, mul_add(4096, F64), kernel(cast(ld(1, (64, 256), float16), float32)), matmul(64, 48, 80, dtype=F64)):
    kern = Kernel(k, cpu.options())
    opts = hand_coded_optimizations(kern)
    assert max(u.vec for u in lower(kern).uops) == widest(k), opts
    check(k, opts=opts)


def test_mulacc_compiles_to_vector_fma_and_the_loop_stays_vectorised():
  if "avx512f" not in cpu.fingerprint()["isa"]: pytest.skip("checks the AVX-512 code of this host")
  src, _, _ = compile_kernel(matmul(256, 256, 256), "CPU")
  asm = subprocess.run([cpu._cc(), *cpu.DEFAULT_FLAGS, "-S", "-x", "c", "-", "-o", "-"], input=src, capture_output=True,
                       text=True, check=True).stdout
  assert len(re.findall(r"\tvfmadd\w+ps\t.*%zmm", asm)) >= 16, asm  # the 8x2 FMAs of the register tile, on 16 lanes
  assert not re.search(r"\tv(fmadd\w+|mul|add)ss\t", asm), asm  # and nothing scalar


@pytest.mark.parametrize("cin,lines", [(1024, True), (768, False)])
def test_a_pack_reads_rows_sharing_an_l1_set_in_lines(cin, lines, monkeypatch):
  # a 1x1 conv's weights packed 16 output channels a block: the copy's innermost axis (the channels) reads rows cin floats
  # apart. 1024 (4 KB) puts all 16 in one L1 set of 8 ways: the input channels are copied in lines of 16, each line's
  # loop innermost; 768 (3 KB, 4 sets) keeps the copy's own order. Both match the reference. At 8 lanes the 16 channels
  # are no vector, so the copy is element by element (a vector's would be transposed in registers: the test below).
  monkeypatch.setenv("TUNESVC_CPU_LANES", "8")
  k = conv2d(1, cin, 2, 2, 32, 1, 1)
  opts = [Opt("BLOCK", 0, 16), Opt("UPCAST", 1, 0), Opt("PACK", 2)]
  src, _, _ = compile_kernel(k, "CPU", opts)
  assert bool(re.search(r"for \(long long _p2_\d+i = 0; _p2_\d+i < 16;", src)) == lines, src
  check(k, opts=opts)

@pytest.mark.parametrize("cc", ["cc", pytest.param("clang", marks=pytest.mark.skipif(not shutil.which("clang"), reason="no clang"))])
@pytest.mark.parametrize("lanes", [8, 16])
def test_a_transposing_pack_is_copied_in_blocks_transposed_in_registers(lanes, cc, monkeypatch):
  # a copy whose innermost axis (the vector's lanes) reads the source rows apart and another axis reads it contiguously
  # -- a 1x1 conv's weights along the output and input channels, an NT matmul's B along its columns and K -- is copied
  # in blocks of lanes x lanes: the block's rows loaded as vectors, log2(lanes) stages of `lanes` two-input shuffles,
  # its columns stored as vectors (gcc's builtin; clang's, built without OpenMP, whose runtime it may lack). Where the
  # contiguous axis is no multiple of the lanes (cin + 4) the copy stays element by element. All match the reference.
  if lanes not in cpu.options().float_vector_widths: pytest.skip(f"this host has no {lanes}-lane float vectors")
  monkeypatch.setenv("TUNESVC_CPU_LANES", str(lanes))
  monkeypatch.setenv("TUNESVC_CC", cc)
  conv = [Opt("BLOCK", 0, lanes), Opt("UPCAST", 1, 0), Opt("PACK", 2)]
  for k, opts, blocked in [(conv2d(1, 4 * lanes, 2, 2, 2 * lanes, 1, 1), conv, True),
                           (matmul(4, 2 * lanes, 3 * lanes, transpose_b=True), [Opt("UPCAST", 1, lanes), Opt("PACK", 2)], True),
                           (conv2d(1, 4 * lanes + 4, 2, 2, 2 * lanes, 1, 1), conv, False)]:
    prog = lower(Kernel(k, cpu.options()).apply_opts(opts), "kernel")
    shuffles = [u for u in prog.uops if u.op is UOps.SHUFFLE]
    assert len(shuffles) == (lanes * int(math.log2(lanes)) if blocked else 0) and all(u.vec == lanes for u in shuffles), k.name
    src = cpu.render(prog)
    assert ("tsvc_shuffle(" in src) == blocked
    bufs = reference.random_buffers(k, {}, seed=6)
    want = [b.copy() for b in bufs]
    reference.run(k, want, {})
    cpu.Program(cpu.compile(src, tuple(f for f in cpu.DEFAULT_FLAGS if f != "-fopenmp")), "kernel")(*bufs)
    assert (msg := compare(k, bufs, want, {})) is None, msg

# ---------------------------------------------------------------- corpus schedules the fuzzer found failing

def corpus_kernel(corpus, name): return next(k for k in corpus if k.name == name).rebased()


def test_a_blocked_matvec_with_its_weights_packed_runs_right(corpus):
  # found by the hand-coded fuzz (--hand-coded): gcc 12.2's vectorizer miscompiled the lane loop of fmaf that was the
  # 16-lane MULACC, inlined here, and the PACK's copy loop (1,200 of 1,280 outputs wrong on a Zen 4): the helper is gcc's
  # builtin of the instruction now, and a kernel with a PACK is not loop-vectorized (docs/compiler-bugs/gcc12-pack-copy-vectorized.md)
  k = corpus_kernel(corpus, "sops_7348")
  check(k, opts=[Opt("UPCAST", 0, 16), Opt("BLOCK", 1, 2), Opt("PACK", 2)])
  check(k, opts=[Opt("BLOCK", 0, 16), Opt("UPCAST", 1, 0), Opt("PACK", 2), Opt("BLOCK", 2, 2)])

@pytest.mark.parametrize("channels", [16, pytest.param(0, marks=pytest.mark.exhaustive)], ids=["16", "all-240"])
def test_a_padded_window_is_indexed_without_its_decode(corpus, channels):
  # a convolution's weight gradient, its 240 output channels upcast, an output and a reduce axis padded: every load of
  # the window was gated and indexed through // 58 and % 29, which never carry where the mask holds, and gcc took a
  # minute over the 240 copies. Simplified under the mask, index and mask are affine in the loop variables. The same
  # with 16 channels in `make test`: the whole 240 is one gcc compile of 480 loads (20 CPU-s cold), in the exhaustive tier
  k, opts = corpus_kernel(corpus, "sops_7806"), [Opt("UPCAST", 0, channels), Opt("PADTO", 3, 4), Opt("PADTO", 2, 4)]
  src, _, _ = compile_kernel(k, "CPU", opts)
  loads = re.findall(r"= (.*data\d\[.*);", src)
  assert len(loads) == 2 * (channels or 240) and not any(re.search(r"[/%]", x) for x in loads), loads[0]
  check(k, opts=opts)

def most_live(prog) -> int:
  """The most computed values (not constants, conditions or accumulators) defined and still to be used at one point."""
  last = {s: i for i, u in enumerate(prog.uops) for s in u.src}
  live, most = set(), 0
  for i, u in enumerate(prog.uops):
    live -= {s for s in u.src if last[s] == i}
    if u.op in ("ALU", "LOAD", "CAST", "VBUILD", "VBROADCAST") and i in last: live.add(i)
    most = max(most, len(live))
  return most

def test_an_unrolled_tree_reduce_combines_its_lanes_as_it_goes(corpus):
  # an arange: a sum of 256 masked constants into one accumulator. Every lane computed before any was combined kept
  # 256 values live, and gcc vectorised the loop with them spilled (21 s to compile); a balanced tree built as the
  # lanes come keeps one partial sum per level
  k, opts = corpus_kernel(corpus, "sops_8452"), [Opt("UNROLL", 0, 32), Opt("THREAD", 1, 4), Opt("UNROLL", 0, 0)]
  assert most_live(program(k, opts)) <= 9
  check(k, opts=opts)

def test_a_matvec_with_its_unrolled_reduce_padded_matches_the_reference(corpus):
  # 28 outputs upcast, the reduce of 672 unrolled by 8 and its 84 iterations padded to 96, every load gated by r1<84:
  # reported giving ~1e35 under gcc 12 -O3 -march=native on an earlier AVX-512 host. The C is well-defined (gated
  # loads in bounds, accumulators initialised; clean under ASan and UBSan) and correct on this host's targets.
  check(corpus_kernel(corpus, "sops_3766"), opts=[Opt("UPCAST", 0, 0), Opt("UNROLL", 0, 8), Opt("PADTO", 1, 16)])

def test_a_vector_axis_is_only_taken_where_every_lane_of_the_other_upcasts_stores_alike(corpus):
  # the padded axis upcast by 8, then its rest (2) upcast too: the STORE of the second half is valid in lane 0 only,
  # which the vector axis check missed (it looked at the other upcast axes at 0), and the C used an undeclared _lane
  k, opts = corpus_kernel(corpus, "sops_4149"), [Opt("THREAD", 0, 2), Opt("PADTO", 1, 8), Opt("UPCAST", 1, 8), Opt("UPCAST", 1, 0)]
  assert "_lane" not in compile_kernel(k, "CPU", opts)[0] and all(u.vec == 1 for u in program(k, opts).uops if u.op == "STORE")
  check(k, opts=opts)

def test_a_packed_leaf_read_outside_the_reduce_indexes_its_copy_like_itself(corpus):
  # found by the fuzzer: leaf 2 is read once per output (size 1 along the reduce), leaf 4 along it, and the reduce is
  # unrolled by 3. The packed copy's view had the kernel's full shape, so leaf 2's load indexed the unrolled axis,
  # which has no loop of its own (KeyError in lower); it keeps the leaf's own shape now
  k, opts = corpus_kernel(corpus, "sops_856"), [Opt("PACK", 2), Opt("UNROLL", 0, 3), Opt("PACK", 4), Opt("THREAD", 0, 2)]
  assert np.array_equal(check(k, opts=opts, seed=4), check(k, opts=[o for o in opts if o.op != "PACK"], seed=4))

GCC12_BUG = "docs/compiler-bugs/gcc12-masked-load-permutation"  # .md: what gcc 12.2 does wrong; .c: the reduced C

def test_a_packed_copy_through_a_guarded_load_is_not_miscompiled(corpus):
  # found by the fuzzer: a 2x2x2 uint32 reduce, its packed copy padded (4x3x2, rows and columns past 2 zero) over a
  # broadcast axis, so one copy row reads data1[2a], data1[2a+1], data1[2a], data1[2a+1] under one condition. gcc 12.2's
  # loop vectorizer (-O3, AVX2 or AVX-512) drops the permutation of that group of masked loads: 3 of 4 outputs were
  # wrong. The C is well-defined (GCC12_BUG); a kernel with a scalar guarded load is compiled without loop if-conversion.
  k, opts = corpus_kernel(corpus, "sops_8384"), [Opt("PACK", 1), Opt("PADTO", 0, 4), Opt("PADTO", 1, 3)]
  for seed in range(3): check(k, opts=opts, seed=seed)
  assert "no-tree-loop-if-convert" in compile_kernel(k, "CPU", opts)[0]
  # only there: not without a guarded load or a masked value (the hand-coded matmul's packed copy has neither; a PACK is
  # compiled without loop vectorization, test_a_blocked_matvec_with_its_weights_packed_runs_right), nor without a PACK
  # either (sops_8384 itself has a masked constant, `i == j ? 1 : 0`: with or without a PACK it is compiled so)
  big = matmul(512, 512, 512)
  assert "no-tree-loop-if-convert" not in compile_kernel(big, "CPU", hand_coded_optimizations(Kernel(big, cpu.options())))[0]
  assert "optimize(" not in compile_kernel(big, "CPU", [Opt("UPCAST", 1, 16)])[0]

def test_a_padded_reduce_upcast_into_scalar_accumulators_is_not_miscompiled():
  # the same gcc bug without PACK (found by comparing builds with and without if-conversion): int64 has no vectors here,
  # so 16 upcast columns are 16 scalar accumulators, each loading `r<7 ? data1[...] : 0`; gcc finds the 16 reductions
  # last to first and dropped the loads' permutation {15,...,0}: 105 of 112 outputs wrong
  check(reduce("SUM", (7, 7, 16), (1,), DTYPES["int64"]), opts=[Opt("UPCAST", 1, 16), Opt("PADTO", 2, 8)], seed=2)

GCC12_SELECT_BUG = "docs/compiler-bugs/gcc12-masked-select-reduction"

def test_a_padded_windows_masked_constant_summed_is_not_miscompiled(corpus):
  # found by the fuzzer (TUNESVC_CPU_LANES=8, on AVX-512): how many of a 3x3 window's positions lie inside a padded
  # input, a SUM of `valid ? 1 : 0` with no load; its 3 columns padded to 4. gcc 12.2 -O3 with AVX-512 and -fwrapv
  # gave the corner outputs 6 for 4 (GCC12_SELECT_BUG); a scalar validity's select is compiled without loop if-conversion
  k = corpus_kernel(corpus, "sops_8430")
  for opts in ([Opt("PADTO", 4, 2)], [Opt("UPCAST", 0, 4), Opt("PADTO", 4, 2), Opt("THREAD", 0, 0)]):
    check(k, opts=opts, seed=1)
    assert "no-tree-loop-if-convert" in compile_kernel(k, "CPU", opts)[0]
  assert "optimize(" not in compile_kernel(matmul(64, 64, 64), "CPU", [])[0]  # no validity, no attribute

@pytest.mark.parametrize("bug", [GCC12_BUG, GCC12_SELECT_BUG])
def test_the_gcc_workaround_holds_on_the_reduced_reproducer(tmp_path, bug):
  # the reduced C of the tests above, with the attribute the renderer adds, under the CPU device's compiler and
  # flags (without it gcc 12.2 gets them wrong on x86: AVX2 or AVX-512, each file says how to see that)
  src = Path(__file__).parents[1] / f"{bug}.c"
  exe = tmp_path / "repro"
  flags = [f for f in cpu.DEFAULT_FLAGS if f not in ("-shared", "-fPIC")]
  subprocess.run([cpu._cc(), *flags, "-DWORKAROUND", str(src), "-o", str(exe)], check=True)
  assert subprocess.run([str(exe)]).returncode == 0

@pytest.mark.parametrize("device", DEVICES)
def test_zero_and_negative_zero_constants_stay_apart(device):
  # -0.0 == 0.0 in Python: one kernel's two zero constants must not become one uop (x / -0 would read x / +0)
  x = np.arange(1, 65, dtype=np.float32)
  out = check(kernel(alu("DIV", alu("ADD", ld(1, (64,)), const(0.0, (64,))), const(-0.0, (64,)))), [x], device=device)
  assert (out == -F("inf")).all()
  out = check(kernel(alu("DIV", alu("ADD", ld(1, (64,)), const(-0.0, (64,))), const(0.0, (64,)))), [x], device=device)
  assert (out == F("inf")).all()
