"""The Kernel's axis layout and opts. An opt only re-lays the iteration space, so the kernel rebuilt
over its new axes (`to_ast`) must compute, by the reference interpreter, what the original computes."""
import math, pickle, random
import numpy as np
import pytest
from linearizer import reference
from linearizer.ast import KernelValidationError
from linearizer.builders import alu, cast, conv2d, kernel, ld, matmul, red, reduce, symbolic_sum
from linearizer.compare import compare
from linearizer.dtypes import DTYPES
from linearizer.kernel import Kernel, Opt, OptError, OptOp
from linearizer.options import LinearizerOptions

CPU = LinearizerOptions("CPU", has_local=False, has_shared=False, has_threads=True, float_vector_widths=(4, 8, 16), threads=2)
GPU = LinearizerOptions("GPU", has_local=True, has_shared=True, shared_max=49152, local_max=(1024, 1024, 64))


def same_result(k: Kernel, var_vals=None) -> None:
  orig, moved = k.ast.rebased(), k.to_ast().rebased()
  vv = orig.var_vals(var_vals)
  a, b = reference.random_buffers(orig, vv, seed=2), reference.random_buffers(moved, vv, seed=2)
  assert [x.size for x in a] == [x.size for x in b]
  for x, y in zip(a[1:], b[1:]): np.testing.assert_array_equal(x, y)
  reference.run(orig, a, vv)
  reference.run(moved, b, vv)
  # within the contract a kernel's output is held to: the reference sums a moved reduce in another order too
  assert (msg := compare(orig, b, a, vv)) is None, msg


def test_layout_puts_reduce_axes_last_drops_ones_and_merges_contiguous_axes():
  k = Kernel(matmul(16, 8, 32), CPU)
  assert k.full_shape == (16, 8, 32) and k.output_shape == (16, 8, 1) and k.first_reduce == 2
  assert Kernel(reduce("SUM", (64, 32), (0, 1)), CPU).full_shape == (2048,)  # contiguous: one axis
  k = Kernel(reduce("SUM", (4, 5, 6), (0,)), CPU)  # the reduce axis moves last; the others merge
  assert k.full_shape == (30, 4) and k.first_reduce == 1
  k = Kernel(conv2d(2, 4, 9, 9, 6, 3, 3, padding=1), CPU)
  assert k.first_reduce < k.shape_len and math.prod(k.full_shape) == 2 * 6 * 9 * 9 * 4 * 3 * 3
  same_result(k)


def test_layout_keeps_symbolic_axes():
  k = Kernel(symbolic_sum(rows=4, var=("n", 1, 64)), CPU)
  assert k.first_reduce == 1 and str(k.full_shape[1]) == "<(n+1) [2,65]>"
  with pytest.raises(OptError, match="symbolic"): k.apply_opt(Opt("UNROLL", 0, 4))
  k.apply_opt(Opt("UPCAST", 0, 4))
  same_result(k, {"n": 9})


LEGAL_CPU = [("UPCAST", 0, 4), ("UPCAST", 1, 0), ("UNROLL", 0, 8), ("UNROLL", 0, 0), ("THREAD", 0, 2), ("PADTO", 0, 5),
             ("PADTO", 2, 5)]

@pytest.mark.parametrize("op,axis,amt", LEGAL_CPU, ids=[f"{o}{a}_{m}" for o, a, m in LEGAL_CPU])
def test_each_legal_cpu_opt_keeps_the_meaning(op, axis, amt):
  k = Kernel(matmul(12, 8, 16), CPU)
  k.apply_opt(Opt(op, axis, amt))
  assert k.applied_opts == [Opt(op, axis, amt)]
  same_result(k)


LEGAL_GPU = [[("LOCAL", 0, 4)], [("GROUP", 0, 4)], [("GROUPTOP", 0, 8)], [("NOLOCALS", None, None), ("UPCAST", 0, 4)],
             [("GROUP", 0, 8), ("UPCASTMID", 2, 2)], [("LOCAL", 1, 2), ("UPCAST", 0, 3), ("UNROLL", 0, 4), ("PADTO", 0, 8)]]

@pytest.mark.parametrize("opts", LEGAL_GPU, ids=["_".join(o[0] for o in os) for os in LEGAL_GPU])
def test_each_legal_gpu_opt_keeps_the_meaning(opts):
  k = Kernel(matmul(12, 8, 64), GPU).apply_opts([Opt(*o) for o in opts])
  assert len(k.applied_opts) == len(opts)
  same_result(k)


ILLEGAL_CPU = [(("UPCAST", 2, 4), "global or local"), (("UNROLL", 5, 2), "past"), (("UPCAST", 0, 5), "does not divide"),
               (("UPCAST", 0, 1), "amount"), (("UPCAST", None, 4), "axis"), (("LOCAL", 0, 4), "no local"),
               (("GROUP", 0, 4), "shared memory"), (("GROUPTOP", 0, 4), "shared memory"), (("UPCASTMID", 0, 2), "grouped"),
               (("NOLOCALS", None, None), "local dims"), (("TC", 0, 0), "tensor cores"), (("PADTO", 0, 4), "already"),
               (("PADTO", 0, 64), "doubles"), (("UPCAST", 0, 512), "amount")]

@pytest.mark.parametrize("opt,why", ILLEGAL_CPU, ids=[f"{o[0]}{o[1]}_{o[2]}" for o, _ in ILLEGAL_CPU])
def test_each_illegal_cpu_opt_raises_and_leaves_the_kernel_unchanged(opt, why):
  k = Kernel(matmul(12, 8, 16), CPU)
  k.apply_opt(Opt("UPCAST", 1, 2))
  before = (list(k.sts), list(k.applied_opts), k.upcasted, k.full_shape)
  with pytest.raises(OptError, match=why): k.apply_opt(Opt(*opt))
  assert (k.sts, k.applied_opts, k.upcasted, k.full_shape) == before


def test_thread_is_one_split_of_a_global_axis():
  k = Kernel(matmul(12, 8, 16), CPU)
  k.apply_opt(Opt("THREAD", 1, 2))
  assert k.thread_dims == 1 and k.full_shape[0] == 2
  with pytest.raises(OptError, match="only one"): k.apply_opt(Opt("THREAD", 1, 2))
  with pytest.raises(OptError, match="no threads"): Kernel(matmul(8, 8, 8), GPU).apply_opt(Opt("THREAD", 0, 2))
  same_result(k)

def test_thread_splits_a_block_of_a_global_axis_but_not_of_a_reduce():
  k = Kernel(matmul(12, 8, 16), CPU).apply_opts([Opt("BLOCK", 0, 3), Opt("BLOCK", 3, 4)])  # rows in 4 blocks of 3, K in 4 of 4
  with pytest.raises(OptError, match="splits a global axis or a block of one"): k.apply_opt(Opt("THREAD", 1, 2))  # K's blocks
  k.apply_opt(Opt("THREAD", 0, 2))  # each thread two blocks of rows: its own outputs
  assert (k.thread_dims, k.block_dims, k.full_shape[:3]) == (1, 2, (2, 2, 4)) and k.reduce_blocks == [2]
  same_result(k)


def test_upcasts_are_capped():
  # MAX_UPCAST elements; on a CPU, where an upcast axis is as wide as a vector, MAX_VECTORS vectors (one register each),
  # but not on a GPU (a work-item's vector is a register a lane) nor for a kernel whose lanes cannot be vectors
  k = Kernel(matmul(64, 64, 64), CPU).apply_opts([Opt("UPCAST", 0, 16), Opt("UPCAST", 1, 16)])  # 256 elements, 16 vectors
  k.apply_opt(Opt("UNROLL", 0, 4))  # 64 vectors
  with pytest.raises(OptError, match="64 vectors of 16 lanes"): k.apply_opt(Opt("UNROLL", 0, 2))
  with pytest.raises(OptError, match="exceed 256 elements$"):
    Kernel(matmul(64, 64, 64), CPU).apply_opts([Opt("UPCAST", 1, 32), Opt("UPCAST", 0, 32)])  # no axis a vector's width: 1024 scalars
  g = Kernel(matmul(64, 64, 64), GPU).apply_opts([Opt("UPCAST", 0, 16), Opt("UPCAST", 1, 16)])
  with pytest.raises(OptError, match="exceed 256 elements$"): g.apply_opt(Opt("UNROLL", 0, 2))
  f16 = Kernel(matmul(64, 64, 64, dtype=DTYPES["float16"]), CPU).apply_opts([Opt("UPCAST", 0, 16), Opt("UPCAST", 1, 16)])  # scalar MULs
  with pytest.raises(OptError, match="exceed 256 elements$"): f16.apply_opt(Opt("UNROLL", 0, 2))


def test_padding_a_reduce_is_legal_only_where_zeros_keep_the_result():
  pad = Opt("PADTO", 1, 8)  # the reduce axis of 6 becomes 8
  k = Kernel(reduce("SUM", (5, 6), (1,)), CPU)
  k.apply_opt(pad)
  same_result(k)
  with pytest.raises(OptError, match="change its result"): Kernel(reduce("MAX", (5, 6), (1,)), CPU).apply_opt(pad)
  exp_sum = kernel(red("SUM", alu("EXP2", ld(1, (5, 6))), [1]))  # exp2(0) = 1: padding would add ones
  with pytest.raises(OptError, match="change its result"): Kernel(exp_sum, CPU).apply_opt(pad)


def test_opt_json_round_trip_and_bad_opts():
  assert Opt.from_json(Opt("UPCAST", 1, 4).to_json()) == Opt("UPCAST", 1, 4)
  for bad in ({"op": "FOO"}, {"op": "UPCAST", "axis": "1"}, {"op": "UPCAST", "axis": True}, [1], {"op": "UPCAST", "x": 1}):
    with pytest.raises(OptError): Opt.from_json(bad)


def test_kernel_pickles_small_and_replays_its_opts():
  k = Kernel(conv2d(1, 8, 16, 16, 8, 3, 3, padding=1), CPU).apply_opts([Opt("UPCAST", 0, 2), Opt("UNROLL", 0, 2)])
  blob = pickle.dumps(k)
  k2 = pickle.loads(blob)
  assert k2.sts == k.sts and k2.applied_opts == k.applied_opts and len(blob) < 4 * len(str(k.ast.to_json()))


def test_random_opt_sequences_keep_the_meaning_on_corpus_kernels(corpus):
  rng = random.Random(0)
  small = [k for k in corpus if math.prod(k.shape_at(k.full_shape, k.var_vals())) < 300_000]
  applied = 0
  for k in rng.sample(small, 100):
    for opts in (CPU, GPU):
      kern = Kernel(k, opts)
      for _ in range(rng.randint(2, 8)):  # most random opts are illegal somewhere: try enough of them
        try: kern.apply_opt(Opt(rng.choice(list(OptOp)), rng.randint(0, max(0, kern.shape_len - 1)), rng.choice([0, 2, 3, 4, 8])))
        except OptError: continue
        applied += 1
      try: kern.to_ast()
      except KernelValidationError as e:  # PADTO, then a split of the padded axis, needs a two-view STORE: no document holds it
        assert "exactly one view" in e.message, e
        continue
      same_result(kern)
  assert applied > 100


def test_a_split_that_would_stack_a_view_over_symbolic_dims_is_illegal():
  """Found by the fuzzer: PADTO masks an axis, so splitting it needs a second view; over a tracker with
  a symbolic dim that view could not be decoded."""
  k = Kernel(symbolic_sum(rows=20, var=("n", 1, 64)), CPU)
  k.apply_opt(Opt("PADTO", 0, 3))
  before = list(k.sts)
  with pytest.raises(OptError, match="symbolic"): k.apply_opt(Opt("THREAD", 0, 3))
  assert k.sts == before
  same_result(k, {"n": 33})


def test_padto_among_the_reduce_axes_is_for_a_reduce_axis():
  """Found by the fuzzer: a whole-axis UNROLL of an inner reduce axis leaves a size-1 axis after the outer one; padded,
  it was an output axis inside the reduce loop, and the STORE used that loop's variable outside it (C did not compile)."""
  k = Kernel(conv2d(1, 2, 6, 6, 2, 3, 3, padding=1), CPU).apply_opts([Opt("UNROLL", 2, 0)])
  assert k.full_shape[k.first_reduce:] == (2, 3, 1, 3) and not k.is_reduce_axis(5)
  with pytest.raises(OptError, match="reduce axis"): k.apply_opt(Opt("PADTO", 5, 2))
  k.apply_opt(Opt("PADTO", 4, 2))  # the reduce axis itself still pads
  same_result(k)


def test_copy_is_cheap_and_independent():
  k = Kernel(conv2d(1, 8, 16, 16, 8, 3, 3, padding=1), CPU)
  c = k.copy()
  assert c.ast is k.ast  # shared, not re-validated (pickling replays; copying must not)
  c.apply_opt(Opt("UPCAST", 0, 2))
  assert k.applied_opts == [] and k.sts != c.sts


def test_block_moves_outer_loops_out_in_the_order_applied():
  k = Kernel(matmul(24, 64, 48), CPU).apply_opts([Opt("UPCAST", 1, 16), Opt("UNROLL", 0, 2), Opt("BLOCK", 2, 8), Opt("BLOCK", 2, 2)])
  # (K blocks, N blocks | M, N tiles | K steps | 16 columns, 2 of K)
  assert k.full_shape == (3, 2, 24, 2, 8, 16, 2) and k.block_dims == 2 and k.first_reduce == 4 and k.blocked_reduce
  assert k.output_shape[:2] == (1, 2) and k.global_dims == 2
  k.apply_opt(Opt("THREAD", 2, 2))  # threads stay outermost, the blocks after them
  assert k.full_shape[:3] == (2, 3, 2) and k.thread_dims == 1 and k.first_reduce == 5 and k.blocked_reduce
  same_result(k)
  g = Kernel(matmul(24, 64, 48), CPU).apply_opts([Opt("BLOCK", 1, 16)])  # an output axis: only the loop order changes
  assert g.full_shape == (4, 24, 16, 48) and not g.blocked_reduce
  same_result(g)


BLOCK_ILLEGAL = [
  (matmul(12, 8, 16), [Opt("BLOCK", 2, 16)], "leaves no outer loop"),
  (matmul(12, 8, 16), [Opt("BLOCK", 2, 5)], "does not divide"),
  (matmul(12, 8, 16), [Opt("UPCAST", 1, 4), Opt("BLOCK", 3, 2)], "global or reduce axis"),  # an upcast axis
  (matmul(12, 8, 16), [Opt("BLOCK", 2, 4), Opt("BLOCK", 0, 2)], "global or reduce axis"),   # a block axis
  (matmul(12, 8, 16), [Opt("BLOCK", 2, 4), Opt("UPCAST", 0, 2)], "global or local axis"),
  (matmul(12, 8, 16), [Opt("BLOCK", 2, 4), Opt("THREAD", 0, 2)], "splits a global axis"),
  (matmul(12, 8, 16), [Opt("BLOCK", 2, 4), Opt("PADTO", 0, 8)], "block axis"),
  (reduce("MAX", (6, 16), (1,)), [Opt("BLOCK", 1, 4)], "needs a SUM"),
  (kernel(cast(red("SUM", ld(1, (6, 16)), [1]), DTYPES["float16"])), [Opt("BLOCK", 1, 4)], "float16 output cannot hold the float32 partial"),
  (matmul(4, 4, 16, dtype=DTYPES["float16"]), [Opt("BLOCK", 2, 4)], "cannot hold its float32 accumulator"),
]

@pytest.mark.parametrize("ast,opts,why", BLOCK_ILLEGAL, ids=[w.split()[0] + str(i) for i, (_, _, w) in enumerate(BLOCK_ILLEGAL)])
def test_an_impossible_block_is_an_opt_error_that_says_why(ast, opts, why):
  k = Kernel(ast, CPU).apply_opts(opts[:-1])
  before = (list(k.sts), list(k.applied_opts), k.block_dims, k.full_shape)
  with pytest.raises(OptError, match=why): k.apply_opt(opts[-1])
  assert (k.sts, k.applied_opts, k.block_dims, k.full_shape) == before
  with pytest.raises(OptError, match="for CPUs"): Kernel(matmul(12, 8, 16), GPU).apply_opt(Opt("BLOCK", 2, 4))


def test_pack_copies_a_loads_block_and_says_why_it_cannot():
  k = Kernel(matmul(24, 64, 48), CPU).apply_opts([Opt("UPCAST", 1, 16), Opt("BLOCK", 2, 8), Opt("PACK", 2)])
  assert k.packed == (2,) and k.pack_axes(2) == [2, 3, 4]  # B varies along N's tiles, K's steps and N's 16 lanes, not M
  same_result(k)  # the layout is unchanged: the copy is the lowering's
  for opt, why in ((Opt("PACK", 2), "packed already"), (Opt("PACK", 0), "LOAD's view"), (Opt("PACK", 3), "LOAD's view"),
                   (Opt("PACK", 1, 4), "no amount")):
    with pytest.raises(OptError, match=why): k.apply_opt(opt)
  with pytest.raises(OptError, match="for CPUs"): Kernel(matmul(12, 8, 16), GPU).apply_opt(Opt("PACK", 1))
  with pytest.raises(OptError, match="over 262144"): Kernel(matmul(8, 1100, 64), CPU).apply_opt(Opt("PACK", 2))  # all of B
  near = Kernel(matmul(8, 1100, 36), CPU).apply_opts([Opt("PACK", 2)])  # 158400 bytes, until K is padded to 64
  with pytest.raises(OptError, match="would take 281600 bytes"): near.apply_opt(Opt("PADTO", 2, 32))
  assert near.applied_opts == [Opt("PACK", 2)]
