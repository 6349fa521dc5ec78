"""The reference interpreter's semantics, one documented rule per test, and its consistency checks."""
import math, platform
import numpy as np
import pytest
from linearizer import reference
from linearizer.ast import load, concrete_st
from linearizer.builders import alu, cast, const, kernel, ld, red, st, matmul, reduce, conv2d
from linearizer.dtypes import DTYPES, bool_, float16, float32, int8, int32, uint8
from corner_kernels import FLOAT_TO_INT_EDGES

I32_MIN, I32_MAX = -2**31, 2**31 - 1


def run(k, *inputs, var_vals=None):
  """Run with given inputs and a poisoned output; returns the output buffer."""
  vv = k.var_vals(var_vals)
  out = reference.random_buffers(k, vv)[0]
  bufs = [out] + [np.asarray(x, dtype=b.dtype.np) for x, b in zip(inputs, k.buffers[1:])]
  reference.run(k, bufs, vv)
  return out


def unary(fn, x, dt_in, dt_out=None):
  n = len(x)
  return run(kernel(fn(ld(1, (n,), dt_in))), np.array(x, dtype=dt_in.np))


def binary(op, a, b, dt):
  n = len(a)
  return run(kernel(alu(op, ld(1, (n,), dt), ld(2, (n,), dt))), a, b)


def test_masked_load_reads_zero():
  x = np.array([1.5, -2.0, 3.0, 4.0], dtype=np.float32)
  out = run(kernel(ld(1, st((4,)).pad(((2, 1),)))), x)
  np.testing.assert_array_equal(out, [0, 0, 1.5, -2.0, 3.0, 4.0, 0])


def test_masked_const_reads_zero():
  out = run(kernel(alu("ADD", const(7.0, st((1,)).expand((3,)).pad(((1, 1),))), ld(1, (5,)))), np.ones(5, np.float32))
  np.testing.assert_array_equal(out, [1, 8, 8, 8, 1])


def test_integer_div_truncates_and_mod_follows_c_with_zero_and_overflow_defined():
  a = np.array([-7, 7, -7, 7, 5, I32_MIN, 0], dtype=np.int32)
  b = np.array([2, -2, -2, 2, 0, -1, 3], dtype=np.int32)
  np.testing.assert_array_equal(binary("DIV", a, b, int32), [-3, -3, 3, 3, 0, I32_MIN, 0])
  np.testing.assert_array_equal(binary("MOD", a, b, int32), [-1, 1, -1, 1, 0, 0, 0])


def test_unsigned_div_and_mod():
  a, b = np.array([250, 7, 9], np.uint8), np.array([7, 0, 3], np.uint8)
  np.testing.assert_array_equal(binary("DIV", a, b, uint8), [35, 0, 3])
  np.testing.assert_array_equal(binary("MOD", a, b, uint8), [5, 0, 0])


def test_integer_arithmetic_wraps():
  a = np.array([I32_MAX, I32_MIN, 100000], dtype=np.int32)
  np.testing.assert_array_equal(binary("ADD", a, np.array([1, -1, 100000], np.int32), int32), [I32_MIN, I32_MAX, 200000])
  np.testing.assert_array_equal(binary("MUL", a, np.array([2, 1, 100000], np.int32), int32), [-2, I32_MIN, 1410065408])
  np.testing.assert_array_equal(unary(lambda x: alu("NEG", x), [I32_MIN, 5], int32), [I32_MIN, -5])


def test_float_to_int_casts_are_x86_64s():
  """Through int32 (int64 for uint32 and int64), whose minimum a value out of its range or NaN gives, then wrapped;
  uint64 wraps [-2^63, 2^64), gives 0 above and 2^63 below and for NaN (docs/kernel-format.md)."""
  nan, inf, p31, p63 = float("nan"), float("inf"), 2**31, 2**63
  x = [1.9, -1.9, 255.5, -0.5, 300.0, -1.0, 2.0**31, -2.0**31, 2.0**32, 2.0**33 + 2**31, -2.0**33, 2.0**63, 2.0**64, -2.0**64,
       1.5 * 2**63, inf, -inf, nan]
  want = {"int32": [1, -1, 255, 0, 300, -1] + [I32_MIN] * 12,
          "int8": [1, -1, -1, 0, 44, -1] + [0] * 12,
          "uint32": [1, 2**32 - 1, 255, 0, 300, 2**32 - 1, p31, p31, 0, p31] + [0] * 8,
          "int64": [1, -1, 255, 0, 300, -1, p31, -p31, 2**32, 2**33 + p31, -2**33] + [-p63] * 7,
          "uint64": [1, 2**64 - 1, 255, 0, 300, 2**64 - 1, p31, 2**64 - p31, 2**32, 2**33 + p31, 2**64 - 2**33, p63, 0, p63, 3 * 2**62,
                     0, p63, p63]}
  for src in (float32, DTYPES["float64"]):
    for name, w in want.items():
      assert unary(lambda v, name=name: cast(v, DTYPES[name]), x, src).tolist() == w, (src, name)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="numpy's astype is x86-64's conversion only on x86-64")
def test_float_to_int_casts_are_numpys_astype_on_x86_64():
  """Element by element, as tinygrad's tests compare: numpy's loop over a contiguous array converts float to uint32 as
  gcc's SIMD code does (out of range: 0 above 2^32, 2^31 below -2^31 and for NaN), its single elements as scalar C does."""
  for src in (float16, DTYPES["bfloat16"], float32, DTYPES["float64"]):
    with np.errstate(all="ignore"): x = np.array(FLOAT_TO_INT_EDGES).astype(src.np)
    for dt in (d for d in DTYPES.values() if d.is_int):
      with np.errstate(all="ignore"): want = np.concatenate([x[i:i + 1].astype(dt.np) for i in range(len(x))])
      np.testing.assert_array_equal(unary(lambda v, dt=dt: cast(v, dt), x, src), want, err_msg=f"{src} -> {dt}")


def test_int_casts_wrap_and_bool_casts_test_nonzero():
  np.testing.assert_array_equal(unary(lambda v: cast(v, uint8), [300, -1, 255], int32), [44, 255, 255])
  np.testing.assert_array_equal(unary(lambda v: cast(v, bool_), [0.0, -0.0, 2.5, float("nan")], float32), [False, False, True, True])
  np.testing.assert_array_equal(unary(lambda v: cast(v, float32), [True, False], bool_), [1.0, 0.0])


def test_bitcast_reinterprets_bits():
  np.testing.assert_array_equal(unary(lambda v: cast(v, uint8, bitcast=True), [-1, -128, 5], int8), [255, 128, 5])
  np.testing.assert_array_equal(unary(lambda v: cast(v, int32, bitcast=True), [1.0], float32), [0x3F800000])


def test_bool_ops_are_logical():
  a, b = np.array([0, 0, 1, 1], bool), np.array([0, 1, 0, 1], bool)
  np.testing.assert_array_equal(binary("ADD", a, b, bool_), [0, 1, 1, 1])
  np.testing.assert_array_equal(binary("MAX", a, b, bool_), [0, 1, 1, 1])
  np.testing.assert_array_equal(binary("MUL", a, b, bool_), [0, 0, 0, 1])
  np.testing.assert_array_equal(binary("XOR", a, b, bool_), [0, 1, 1, 0])
  np.testing.assert_array_equal(unary(lambda v: alu("NEG", v), a, bool_), [1, 1, 0, 0])


def test_comparisons_give_bool_and_nan_compares_false():
  a = np.array([1.0, float("nan"), 2.0], np.float32)
  b = np.array([2.0, float("nan"), 2.0], np.float32)
  assert binary("CMPLT", a, b, float32).dtype == np.bool_
  np.testing.assert_array_equal(binary("CMPLT", a, b, float32), [True, False, False])
  np.testing.assert_array_equal(binary("CMPEQ", a, b, float32), [False, False, True])


def test_max_propagates_nan_in_alu_and_reduce():
  a = np.array([1.0, float("nan")], np.float32)
  assert np.isnan(binary("MAX", a, a[::-1].copy(), float32)).all()
  out = run(kernel(red("MAX", ld(1, (4,)), [0])), np.array([1, float("nan"), 3, 2], np.float32))
  assert np.isnan(out[0])


def test_float16_rounds_after_every_op():
  # 2048 + 1 is not a float16: it rounds back to 2048, so (a + b) - a is 0 (float32 would give 1)
  out = binary("ADD", np.array([2048], np.float16), np.array([1], np.float16), float16)
  assert out[0] == 2048
  k = kernel(alu("SUB", alu("ADD", ld(1, (1,), float16), ld(2, (1,), float16)), ld(1, (1,), float16)))
  assert run(k, np.array([2048], np.float16), np.array([1], np.float16))[0] == 0


def test_float16_sum_accumulates_in_float32():
  # accumulating 4096 ones in float16 would stall at 2048; the float32 accumulator reaches 4096
  out = run(kernel(red("SUM", ld(1, (4096,), float16), [0])), np.ones(4096, np.float16))
  assert out.dtype == np.float16 and out[0] == 4096


def test_integer_sum_wraps_in_its_dtype():
  out = run(kernel(red("SUM", ld(1, (100,), int8), [0])), np.full(100, 100, np.int8))
  assert out[0] == np.array(100 * 100, np.int64).astype(np.int8)


def test_masked_store_leaves_other_elements_untouched():
  doc = {"format": "tunesvc.kernel/1", "ast": {"op": "STORE",
         "arg": {"buf": 0, "dtype": "float32", "st": {"views": [{"shape": [4], "strides": [1], "offset": 0, "mask": [[1, 3]]}]}},
         "src": [{"op": "LOAD", "arg": {"buf": 1, "dtype": "float32",
                                        "st": {"views": [{"shape": [4], "strides": [1], "offset": 0, "mask": None}]}}}]}}
  out = run(load(doc), np.array([1, 2, 3, 4], np.float32))
  assert out.size == 3 and np.isnan(out[0]) and list(out[1:3]) == [2, 3]  # sized to the highest index written


def test_symbolic_kernel_follows_its_variable():
  from linearizer.builders import symbolic_sum
  k = symbolic_sum(rows=3, var=("n", 1, 16))
  for n in (1, 7, 16):
    x = np.random.default_rng(n).standard_normal(k.buffer_sizes({"n": n})[1]).astype(np.float32)
    out = run(k, x, var_vals={"n": n})
    np.testing.assert_allclose(out[:3], x[:3 * (n + 1)].reshape(3, n + 1).sum(1), rtol=1e-5)


def test_wrong_buffers_and_variables_are_rejected():
  k = matmul(4, 4, 4)
  bufs = reference.random_buffers(k)
  with pytest.raises(ValueError, match="buffers"): reference.run(k, bufs[:2])
  with pytest.raises(ValueError, match="at least 16"): reference.run(k, [bufs[0]] + [bufs[1][:3], bufs[2]])
  with pytest.raises(ValueError, match="float32"): reference.run(k, [bufs[0], bufs[1].astype(np.float64), bufs[2]])
  from linearizer.builders import symbolic_sum
  with pytest.raises(ValueError, match="outside"): reference.run(symbolic_sum(rows=2, var=("n", 1, 8)), bufs, {"n": 9})


def test_random_buffers_are_seeded_nonzero_and_poison_the_output():
  k = matmul(8, 8, 8)
  a, b = reference.random_buffers(k, seed=3), reference.random_buffers(k, seed=3)
  assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))
  assert reference.is_poison(a[0], float32).all() and all(np.count_nonzero(x) == x.size for x in a[1:])
  assert not reference.is_poison(np.array([np.nan, np.inf], np.float32), float32).any()  # computed NaNs are not poison


def test_random_floats_are_exactly_n_nonzero_of_both_signs_over_four_binades():
  x = reference.random_floats(np.random.default_rng(0), 40_001)
  assert x.dtype == np.float32 and x.size == 40_001 and x.nbytes == (x.base if x.base is not None else x).nbytes  # nothing past its end
  mag = np.abs(x)
  assert (mag >= 0.125).all() and (mag < 2).all() and 0.45 < (x < 0).mean() < 0.55
  assert all(0.23 < ((mag >= lo) & (mag < 2 * lo)).mean() < 0.27 for lo in (0.125, 0.25, 0.5, 1.0))
  assert np.array_equal(x, reference.random_floats(np.random.default_rng(0), 40_001))


BLOCKED = {"matmul": matmul(33, 17, 65), "sum_all": reduce("SUM", (64, 96), (0, 1)), "max_mid": reduce("MAX", (40, 50, 6), (1,)),
           "conv2d": conv2d(2, 4, 9, 9, 6, 3, 3, padding=1, stride=2), "int_sum": reduce("SUM", (64, 96), (0,), DTYPES["int32"])}
# every kernel at blocks of 1, 7 and 500 elements; one element a block is a numpy call a position (matmul's 4.4 CPU-s,
# conv2d's 3.1, busy): theirs in the exhaustive tier, which CI runs too, the reductions' in `make test`
@pytest.mark.parametrize("name,blocks", [(n, (1, 7, 500) if n not in ("matmul", "conv2d") else (7, 500)) for n in BLOCKED] +
                         [pytest.param(n, (1,), marks=pytest.mark.exhaustive) for n in ("matmul", "conv2d")],
                         ids=lambda x: x if isinstance(x, str) else "-".join(map(str, x)))
def test_result_does_not_depend_on_blocking(name, blocks, monkeypatch):
  k = BLOCKED[name]
  ref = reference.random_buffers(k, seed=1)
  reference.run(k, ref)
  for block in blocks:
    monkeypatch.setattr(reference, "BLOCK_ELEMENTS", block)
    bufs = reference.random_buffers(k, seed=1)
    reference.run(k, bufs)
    np.testing.assert_allclose(bufs[0], ref[0], rtol=2e-6, atol=1e-5)


@pytest.mark.slow
def test_simplified_trackers_reach_the_same_positions_on_the_corpus(corpus):
  """The reference evaluates merged views; on every tracker of the corpus, a random block of
  positions must map identically (valid everywhere alike, the same index wherever valid)."""
  rng = np.random.default_rng(0)
  checked = merged = 0
  for k in corpus:
    vv = k.var_vals()
    for b in k.buffers:
      for s in b.sts:
        if len(s.views) == 1: continue
        c = concrete_st(s, vv)
        simple = c.simplify()
        merged += len(simple.views) < len(c.views)
        shape = [int(x) for x in c.shape]
        ext = [min(d, 3) for d in shape]
        block = [(int(lo), int(lo) + e) for lo, e in zip((rng.integers(0, d - e + 1) for d, e in zip(shape, ext)), ext)]
        (p1, v1), (p2, v2) = reference._positions(c, block), reference._positions(simple, block)
        v1, v2 = np.broadcast_to(v1, [e for e in ext]), np.broadcast_to(v2, [e for e in ext])
        np.testing.assert_array_equal(v1, v2)
        np.testing.assert_array_equal(np.broadcast_to(p1, v1.shape)[v1], np.broadcast_to(p2, v1.shape)[v1])
        checked += 1
  assert checked >= 500 and merged >= 300


SHARDS = 12

def reference_cost(k) -> int:
  """What the reference's time follows: the positions of the full shape it visits (symbolic kernels at their midpoint)."""
  return math.prod(int(d) for d in k.shape_at(k.full_shape, k.var_vals()))

@pytest.fixture(scope="session")
def corpus_shards(corpus) -> list[list]:
  """The corpus in SHARDS parts of about equal cost: the costliest kernel first, each to the cheapest part so far. A few
  convolutions are half the cost of the whole corpus; shards taken by position put three of them in one shard, which
  pytest-xdist then waited on alone."""
  shards: list[list] = [[] for _ in range(SHARDS)]
  costs = [0] * SHARDS
  for k in sorted(corpus, key=reference_cost, reverse=True):
    i = costs.index(min(costs))
    shards[i].append(k)
    costs[i] += reference_cost(k)
  return shards

def test_the_shards_hold_the_whole_corpus_once(corpus, corpus_shards):
  assert sorted(id(k) for s in corpus_shards for k in s) == sorted(id(k) for k in corpus)

@pytest.mark.slow
@pytest.mark.exhaustive  # ~150 CPU-s, over half of it two convolutions (sops_7345/7346)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_corpus_kernel_runs_in_the_reference_and_writes_its_whole_output(corpus_shards, shard):
  """Each kernel (symbolic ones at the midpoint of their variables, buffers rebased to the window
  they reach) runs on seeded random data, and every element its STORE reaches is written."""
  for k in corpus_shards[shard]:
    k = k.rebased()
    vv = k.var_vals()
    bufs = reference.random_buffers(k, vv, seed=1)
    reference.run(k, bufs, vv)
    out, dt = bufs[0], k.ast.arg.dtype
    pos, valid = reference._positions(concrete_st(k.ast.arg.st, vv), [(0, s) for s in k.shape_at(k.output_shape, vv)])
    reached = np.broadcast_to(pos, np.broadcast_shapes(pos.shape, valid.shape))[np.broadcast_to(valid, np.broadcast_shapes(pos.shape, valid.shape))]
    if dt.is_float: assert not reference.is_poison(out[reached], dt).any(), f"{k.name}: elements left unwritten"
    else:  # an integer result may equal the poison: run again over another poison and compare
      again = [np.full_like(out, dt.min)] + bufs[1:]
      reference.run(k, again, vv)
      np.testing.assert_array_equal(out[reached], again[0][reached], err_msg=k.name)


# -------------------------------------------------------------- the range a correct kernel may produce (linearizer.bounds)

def _within_contract(monkeypatch, seed: int):
  """reference.alu as an implementation that meets the accuracy contract with the worst freedom it allows: every
  EXP2/LOG2/SIN result moved by a random -1, 0 or +1 ulp, element by element."""
  rng, exact = np.random.default_rng(seed), reference.alu
  def alu_(op, dt, xs):
    out = exact(op, dt, xs)
    if op not in reference.TRANSCENDENTALS: return out
    moved = reference.nudge_ulps(out, dt, 1.0), reference.nudge_ulps(out, dt, -1.0)
    pick = rng.integers(0, 3, out.shape)
    return np.where(pick == 1, moved[0], np.where(pick == 2, moved[1], out))
  monkeypatch.setattr(reference, "alu", alu_)

def _results(k, monkeypatch, seed=0):
  from linearizer.compare import compare
  bufs = reference.random_buffers(k, seed=seed)
  want = [b.copy() for b in bufs]
  reference.run(k, want)
  with monkeypatch.context() as m:
    _within_contract(m, seed)
    got = [b.copy() for b in bufs]
    reference.run(k, got)
  return got, want, lambda g: compare(k, g, want, {})

@pytest.mark.parametrize("n_ops", [32, 64])
def test_any_within_contract_chain_passes_compare(monkeypatch, n_ops):
  """elementwise_chain's SIN of amplified values turns one-ulp errors non-monotone: moving every result one way (the
  former check) rejected SLEEF's 1-ulp functions on 14 of 1M outputs; the interval bounds hold any such implementation."""
  from linearizer.builders import elementwise_chain
  k = elementwise_chain((256, 256), n_ops)
  got, want, check = _results(k, monkeypatch)
  assert not np.array_equal(got[0], want[0])  # the errors reached the output
  assert check(got) is None
  wrong = [got[0].copy()] + got[1:]
  i = np.flatnonzero(np.isfinite(want[0]) & (np.abs(want[0]) > 1e-3))[7]
  wrong[0][i] = want[0][i] * 1.01
  assert check(wrong) is not None

def test_comparisons_and_int_casts_of_transcendentals_allow_either_side():
  """A comparison or a cast to int of a result within an ulp of the threshold may go either way in a correct kernel;
  far from it, it may not."""
  x = np.array([3.0, 3.5, 2.0, 0.25], np.float32)  # exp2: 8 exactly (an ulp below rounds to 7), 11.3, 4 (int 4), 1.19
  k = kernel(alu("CMPLT", alu("EXP2", ld(1, (4,), float32)), const(8.0, (4,))))
  want = [np.zeros(4, bool), x]
  reference.run(k, want)
  lo, hi = reference.run_bounds(k, [np.zeros(4, bool), x])
  assert list(want[0]) == [False, False, True, True] and list(lo) == [False, False, True, True] and list(hi) == [True, False, True, True]
  assert reference.mismatch(np.array([True, False, True, True]), want[0], bool_, 1, lo, hi) is None
  assert reference.mismatch(np.array([False, True, True, True]), want[0], bool_, 1, lo, hi) is not None
  k = kernel(cast(alu("EXP2", ld(1, (4,), float32)), int32))
  want = [np.zeros(4, np.int32), x]
  reference.run(k, want)
  lo, hi = reference.run_bounds(k, [np.zeros(4, np.int32), x])
  assert list(want[0]) == [8, 11, 4, 1] and list(lo) == [7, 11, 3, 1] and list(hi) == [8, 11, 4, 1]
  assert reference.mismatch(np.array([7, 11, 3, 1], np.int32), want[0], int32, 1, lo, hi) is None
  assert reference.mismatch(np.array([8, 12, 4, 1], np.int32), want[0], int32, 1, lo, hi) is not None

def test_an_int_cast_of_a_transcendental_near_int32s_end_may_give_either_side_of_the_jump():
  """exp2(31) is 2^31 (past int32: INT32_MIN); an ulp below, 2^31 - 128 converts as it is: both are correct kernels."""
  x = np.array([31.0, 30.0], np.float32)
  k = kernel(cast(alu("EXP2", ld(1, (2,), float32)), int32))
  want = [np.zeros(2, np.int32), x]
  reference.run(k, want)
  lo, hi = reference.run_bounds(k, [np.zeros(2, np.int32), x])
  assert list(want[0]) == [I32_MIN, 2**30] and list(lo) == [I32_MIN, 2**30 - 128] and list(hi) == [I32_MAX, 2**30 + 128]  # bounds' ulps
  assert reference.mismatch(np.array([2**31 - 128, 2**30], np.int32), want[0], int32, 1, lo, hi) is None
  assert reference.mismatch(np.array([I32_MIN, 2**30 + 1024], np.int32), want[0], int32, 1, lo, hi) is not None

def test_bounds_of_a_sum_over_transcendentals_hold_random_errors(monkeypatch):
  """A SUM's terms from EXP2 and a MUL contraction with a transcendental operand (midpoint-radius bounds)."""
  k = kernel(red("SUM", alu("EXP2", ld(1, (64, 128), float32)), (1,)))
  got, want, check = _results(k, monkeypatch, 1)
  assert check(got) is None
  m = matmul(32, 32, 64)
  a, b = m.ast.src[0].src[0].src  # STORE(REDUCE(MUL(a, b)))
  k = kernel(red("SUM", alu("MUL", alu("SIN", a), b), (2,)))
  got, want, check = _results(k, monkeypatch, 2)
  assert check(got) is None

def test_bounds_carry_casts_mods_and_wheres_over_transcendentals(monkeypatch):
  """Random within-contract errors through a cast to int, integer and float MOD, a MAX and a WHERE on a comparison."""
  x = ld(1, (64, 64), float32)
  e = alu("MUL", alu("EXP2", x), const(3.0, (64, 64)))
  ints = alu("MOD", alu("ADD", cast(e, int32), const(7, (64, 64), int32)), const(5, (64, 64), int32))
  k = kernel(ints)
  got, want, check = _results(k, monkeypatch, 3)
  assert check(got) is None
  s = alu("MUL", alu("SIN", alu("MUL", x, const(40.0, (64, 64)))), const(10.0, (64, 64)))
  k = kernel(alu("WHERE", alu("CMPLT", s, const(0.0, (64, 64))), alu("MOD", s, const(3.0, (64, 64))), alu("MAX", s, alu("LOG2", alu("MUL", x, x)))))
  got, want, check = _results(k, monkeypatch, 4)
  assert not np.array_equal(got[0], want[0]) and check(got) is None

def test_compare_never_runs_the_reference_again_and_computes_a_range_only_where_the_caller_gave_none(monkeypatch):
  """A failed strict check widens to the range a correct kernel may reach: the caller's bounds where given (a runner has
  its case's), else computed from want's inputs -- never the reference again (want holds its output), and only where the
  kernel has a range: with no float SUM or EXP2/LOG2/SIN the strict check's verdict stands."""
  from linearizer.compare import compare
  def checks(k, spoil):
    bufs = reference.random_buffers(k, seed=0)
    want = [b.copy() for b in bufs]
    reference.run(k, want)
    return [spoil(want[0].copy())] + bufs[1:], want
  calls, run, run_bounds = [], reference.run, reference.run_bounds
  monkeypatch.setattr(reference, "run", lambda *a: calls.append("run") or run(*a))
  monkeypatch.setattr(reference, "run_bounds", lambda *a: calls.append("bounds") or run_bounds(*a))
  for k in (kernel(alu("MUL", ld(1, (64,), float32), ld(2, (64,), float32))), reduce("MAX", (8, 16), (1,)),
            kernel(alu("ADD", ld(1, (64,), int32), ld(2, (64,), int32)))):
    got, want = checks(k, lambda o: o + o.dtype.type(3))
    calls.clear()
    assert not reference.ranged(k) and compare(k, got, want, {}) == reference.mismatch(got[0], want[0], k.ast.arg.dtype, 1) is not None
    assert not calls
  k = reduce("SUM", (8, 64), (1,))
  got, want = checks(k, lambda o: o + np.float32(3e-4))  # past the strict check (16 ulp x sqrt(64) of 1 + |w|), within the sum's range
  _, lo, hi = reference.expected_range(k, want)
  calls.clear()
  assert reference.ranged(k) and reference.mismatch(got[0], want[0], float32, 64) is not None
  assert compare(k, got, want, {}) is None and calls == ["bounds"]
  assert compare(k, got, want, {}, (lo, hi)) is None and calls == ["bounds"]  # the caller's own
  got[0][3] *= 2
  assert compare(k, got, want, {}) == reference.mismatch(got[0], want[0], float32, 64, lo, hi) is not None and calls == ["bounds"] * 2

@pytest.mark.parametrize("chunk", [7, 64, reference.CHUNK])
def test_mismatch_and_compare_count_every_disagreement_whatever_the_chunk(chunk, monkeypatch):
  """The checks go a chunk at a time over the positions whose bits differ: chunked or not, they count the same
  positions (every chunk's) and name the same first one."""
  from linearizer.compare import compare
  monkeypatch.setattr(reference, "CHUNK", chunk)
  k = kernel(alu("ADD", ld(1, (1000,), float32), ld(2, (1000,), float32)))
  want = reference.random_buffers(k, seed=5)
  reference.run(k, want)
  w = want[0]
  got = w.copy()
  far, near = [3, 70, 500, 999], [5, 64, 700]
  got[far] *= np.float32(1.01)
  got[near] = np.nextafter(got[near], np.float32(np.inf))  # an ulp: within the tolerance
  got[[10, 11]] = w[[10, 11]] = np.nan                      # NaN where the reference's is
  w[20], got[20] = np.float32(0.0), np.float32(-0.0)        # equal, other bits
  bad = reference.mismatch(got, w, float32)
  assert bad == f"4 of 1000 elements differ; first at 3: got {got[3]!r}, want {w[3]!r}"
  assert compare(k, [got, *want[1:]], want, {}) == bad
  unwritten = got.copy()
  unwritten[[600, 650]] = reference.poison(float32, 2)
  assert compare(k, [unwritten, *want[1:]], want, {}) == "2 of 1000 elements not written; first at 600"
  ints, lo, hi = np.arange(1000, dtype=np.int32), np.arange(1000, dtype=np.int32) - 1, np.arange(1000, dtype=np.int32) + 1
  off = ints.copy()
  off[[1, 400]] += 1   # within [lo, hi]
  off[[300, 900]] += 2  # past it
  assert reference.mismatch(off, ints, int32, 1, lo, hi) == "2 of 1000 elements differ; first at 300: got np.int32(302), want np.int32(300)"
  assert reference.same_bits(ints, ints.copy()) and not reference.same_bits(ints, off)
