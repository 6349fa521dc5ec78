"""Tensor cores (TC): the fragment maps against the PTX ISA's formulas, the opt's matching rules, and TC kernels run for
real on OpenCL, whose renderer emulates the tensor core's fragment semantics, against the reference (tests/test_cuda.py
compiles them for sm_80 and sm_90 with NVRTC)."""
import dataclasses, json, pickle, random
import pytest
from gpu_schedules import TC_IDS, TC_SCHEDULES, mm, relu_to_half, two_reduce_axes
from devices import opencl
from linearizer import reference
from linearizer.builders import alu, cast, kernel, ld, matmul, red
from linearizer.dtypes import bfloat16, float16, float32
from linearizer.compare import compare
from linearizer.fuzz import draw_opts
from linearizer.kernel import Kernel, Opt, OptError
from linearizer.lower import lower
from linearizer.options import LinearizerOptions
from linearizer.tensor_cores import APPLE, MMA_F16, RDNA3, SIMDGROUP_F16, SM80, WMMA_F16
from search.actions import actions_for, children

GPU = LinearizerOptions("GPU", shared_max=49152, local_max=(1024, 1024, 64), tensor_cores=SM80)



def test_fragment_maps_are_the_ptx_isas():
  for lane in range(32):
    g, t, bits = lane >> 2, lane % 4, {b: lane >> b & 1 for b in range(5)}
    for i in range(8):
      assert (MMA_F16.coord("a", 0, bits, i), MMA_F16.coord("a", 1, bits, i)) == (g + 8 * (i >> 1 & 1), 2 * t + (i & 1) + 8 * (i >> 2))
    for i in range(4): assert (MMA_F16.coord("b", 0, bits, i), MMA_F16.coord("b", 1, bits, i)) == (2 * t + (i & 1) + 8 * (i >> 1), g)
    for i in range(4): assert (MMA_F16.coord("c", 0, bits, i), MMA_F16.coord("c", 1, bits, i)) == (g + 8 * (i >> 1), 2 * t + (i & 1))
  assert [MMA_F16.elements(op) for op in "abc"] == [8, 4, 4]


def test_fragment_maps_are_rdna3s_and_metals():
  for lane in range(32):
    bits = {b: lane >> b & 1 for b in range(5)}
    coords = lambda tc, op, n, bits=bits: [(tc.coord(op, 0, bits, i), tc.coord(op, 1, bits, i)) for i in range(n)]
    # RDNA3 wave32 WMMA (GPUOpen's WMMA how-to): a_frag[i] = A[lane%16][i], b_frag[i] = B[i][lane%16], c_frag[i] = C[2i + lane/16][lane%16]
    assert coords(WMMA_F16, "a", 16) == [(lane % 16, i) for i in range(16)] and coords(WMMA_F16, "b", 16) == [(i, lane % 16) for i in range(16)]
    assert coords(WMMA_F16, "c", 8) == [(2 * i + lane // 16, lane % 16) for i in range(8)]
    # Metal simdgroup 8x8 (MLX steel's get_coord), the same for A, B and C: element i at (fm, fn + i)
    qid = lane // 4
    fm, fn = (qid & 4) + (lane // 2) % 4, (qid & 2) * 2 + (lane % 2) * 2
    assert all(coords(SIMDGROUP_F16, op, 2) == [(fm, fn), (fm, fn + 1)] for op in "abc")
  lane_bits = [{b: lane >> b & 1 for b in range(5)} for lane in range(32)]
  assert sorted({WMMA_F16.coord("c", 0, bits, i) * 16 + WMMA_F16.coord("c", 1, bits, i)
                 for bits in lane_bits for i in range(8)}) == list(range(256))  # C's 256 elements, each held once


def test_tc_lays_out_the_warp_and_keeps_the_meaning():
  k = Kernel(mm(32, 16, 64), GPU).apply_opts([Opt("TC", 0, 0)])
  # M/16, N/8 | groupID (lane bits 2-4, C's row bits 0-2), threadID_in_group (lane bits 0-1, C's column bits 1-2) | K/16 |
  # K's tile, C's element bit 1 (its row bit 3), bit 0 (its column bit 0)
  assert k.local_dims == 2 and k.upcasted == 3 and k.full_shape == (2, 2, 8, 4, 4, 16, 2, 2)
  lanes = {"l2": (2, 0), "l3": (2, 1), "l4": (2, 2), "l0": (3, 0), "l1": (3, 1)}
  assert k.tc_axes() == {"k": (5, 0), **lanes, "e1": (6, 0), "e0": (7, 0)}
  k.apply_opts([Opt("LOCAL", 1, 2), Opt("UPCAST", 0, 2), Opt("UNROLL", 0, 2)])  # a local before the lanes, upcasts after C's
  assert k.full_shape == (1, 1, 2, 8, 4, 2, 16, 2, 2, 2, 2)
  assert k.tc_axes() == {"k": (6, 0), **{l: (a + 1, j) for l, (a, j) in lanes.items()}, "e1": (7, 0), "e0": (8, 0)}
  assert pickle.loads(pickle.dumps(k)).sts == k.sts
  from test_kernel import same_result
  same_result(k)


ILLEGAL = [  # (kernel, options, opts before, the TC opt, why)
  (mm(32, 16, 32), LinearizerOptions("GPU"), [], Opt("TC", 0, 0), "no tensor cores"),
  (mm(32, 16, 32), GPU, [Opt("UPCAST", 0, 2)], Opt("TC", 0, 0), "first"),
  (mm(32, 16, 32, float32), GPU, [], Opt("TC", 0, 0), "no tensor core takes float32"),
  (matmul(32, 16, 32, dtype=float16), GPU, [], Opt("TC", 0, 0), "no tensor core takes .* products in float16"),  # rounded products
  (mm(32, 16, 32, acc=float16), GPU, [], Opt("TC", 0, 0), "summed in float16"),
  (mm(6, 6, 32), GPU, [], Opt("TC", 0, 0), "no global axis"),  # neither M nor N a multiple of 16, nor padded to one at most doubled
  (mm(32, 3, 32), GPU, [], Opt("TC", 0, 0), "no global axis"),  # nor N (nor M, for the operands swapped) of 8
  (mm(32, 16, 7), GPU, [], Opt("TC", 0, 0), "no global axis"),  # K of 16
  (kernel(red("SUM", cast(ld(1, (32, 16), float16), float32), (1,))), GPU, [], Opt("TC", 0, 0), "SUM over a MUL"),
  (kernel(red("MAX", alu("MUL", cast(ld(1, (16, 16), float16), float32), cast(ld(2, (16, 16), float16), float32)), (1,))), GPU, [],
   Opt("TC", 0, 0), "SUM over a MUL"),
  (kernel(red("SUM", alu("MUL", alu("NEG", cast(ld(1, (16, 16), float16), float32)), cast(ld(2, (16, 16), float16), float32)), (1,))),
   GPU, [], Opt("TC", 0, 0), "two LOADs"),
  (mm(32, 16, 32), GPU, [], Opt("TC", 2, 0), "one of the 2 ways"),
  (mm(32, 16, 32), GPU, [], Opt("TC", 0, 2), "no amount"),
  (mm(32, 16, 32), GPU, [Opt("TC", 0, 0)], Opt("GROUP", 0, 2), "after TC"),
  (mm(32, 16, 32), GPU, [Opt("TC", 0, 0)], Opt("PADTO", 0, 4), "after TC"),
  (mm(32, 16, 32), GPU, [Opt("TC", 0, 0)], Opt("UPCAST", 2, 2), "lane"),
  (mm(32, 16, 64), GPU, [Opt("TC", 0, 0)], Opt("UNROLL", 0, 0), "whole axis after TC"),
  (mm(32, 16, 32), GPU, [Opt("TC", 0, 0)], Opt("TC", 0, 0), "first"),
]

@pytest.mark.parametrize("k,o,before,opt,why", ILLEGAL, ids=[f"{i}-{w.split()[0]}" for i, (*_, w) in enumerate(ILLEGAL)])
def test_illegal_tc_raises_and_leaves_the_kernel_unchanged(k, o, before, opt, why):
  kern = Kernel(k, o).apply_opts(before)
  was = (list(kern.sts), list(kern.applied_opts), kern.upcasted, kern.local_dims, kern.tensor_core)
  with pytest.raises(OptError, match=why): kern.apply_opt(opt)
  assert (kern.sts, kern.applied_opts, kern.upcasted, kern.local_dims, kern.tensor_core) == was


def test_both_operand_orders_match_where_both_fit_and_options_travel():
  k = Kernel(mm(32, 16, 32), GPU)
  assert [(tc.name, a.arg.buf, m, n) for tc, a, _, m, n, _ in k._tc_choices()] == [("mma_m16n8k16_f16", 1, 0, 1), ("mma_m16n8k16_f16", 2, 1, 0)]
  assert LinearizerOptions.from_json(json.loads(json.dumps(GPU.to_json()))) == GPU and pickle.loads(pickle.dumps(GPU)) == GPU
  assert Opt("TC", 0, 0) in actions_for(GPU) and not any(a.op == "TC" for a in actions_for(dataclasses.replace(GPU, tensor_cores=())))


# ---- on OpenCL, through the emulation
needs_opencl = pytest.mark.skipif(not opencl.available(), reason="no OpenCL device")

def emulated(tcs=SM80): return dataclasses.replace(opencl.options(), tensor_cores=tcs)

def run(k, opts, seed=0, tcs=SM80):
  kern = Kernel(k, emulated(tcs)).apply_opts(opts)
  src = opencl.render(lower(kern, "kernel"))
  assert any(tc.name in src for tc in tcs) == any(o.op == "TC" for o in opts)
  prog = opencl.Program(opencl.compile(src), "kernel")
  host = reference.random_buffers(k, {}, seed)
  want = [b.copy() for b in host]
  reference.run(k, want, {})
  prog(*host)
  assert (msg := compare(k, host, want, {})) is None, msg


@needs_opencl
@pytest.mark.parametrize("k,opts", TC_SCHEDULES, ids=TC_IDS)
def test_tc_kernels_match_the_reference_on_emulated_tensor_cores(k, opts):
  run(k, [Opt("TC", 0, 0)] + opts)


# RDNA3's 16x16x16 and Metal's 8x8x8 layouts through the same emulation: A's fragment not spread over every lane bit
# (RDNA3's lanes 16-31 repeat 0-15), C's lane bits in runs that are not consecutive (Metal: four lane axes)
FAMILY_SCHEDULES = [
  (RDNA3, mm(16, 16, 16), []), (RDNA3, mm(32, 32, 64, bfloat16), [Opt("UPCAST", 0, 2)]),
  (RDNA3, mm(64, 32, 96), [Opt("LOCAL", 1, 2), Opt("UNROLL", 0, 3)]),
  (RDNA3, mm(16, 16, 32, batch=(2,), transpose_b=True), []), (RDNA3, relu_to_half(32, 16, 32), [Opt("UPCAST", 0, 2)]),
  (APPLE, mm(8, 8, 8), []), (APPLE, mm(16, 8, 24), [Opt("UPCAST", 0, 2)]), (APPLE, mm(32, 16, 32), [Opt("LOCAL", 0, 2), Opt("UNROLL", 0, 2)]),
  (APPLE, two_reduce_axes(16, 8, 4, 16), []), (APPLE, mm(16, 16, 16, batch=(3,)), [Opt("UPCAST", 1, 2), Opt("LOCAL", 0, 3)]),
  (RDNA3, mm(12, 24, 20), []), (RDNA3, mm(16, 40, 16, bfloat16), [Opt("UPCAST", 1, 3)]), (APPLE, mm(6, 12, 20), []),
  (APPLE, relu_to_half(12, 8, 6), []),
]

@needs_opencl
@pytest.mark.parametrize("tcs,k,opts", FAMILY_SCHEDULES, ids=[f"{i}-{t[0].name}" for i, (t, *_) in enumerate(FAMILY_SCHEDULES)])
@pytest.mark.parametrize("choice", [0, 1])
def test_rdna3_and_metal_layouts_match_the_reference_on_emulated_tensor_cores(tcs, k, opts, choice):
  run(k, [Opt("TC", choice, 0)] + opts, tcs=tcs)


@needs_opencl
def test_the_other_operand_order_matches_too():
  run(mm(32, 16, 32), [Opt("TC", 1, 0)])


# a bounded random run's coverage is its size: 28 kernels, the first 14 in `make test` and the other 14 in the exhaustive
# tier, which CI runs too (~0.7 CPU-s each, cold, on an AVX2 Zen 1 host); the seed fixes the draw: each part has TC's other operand order
# first at least twice and 10 random actions after TC, the first part UPCAST, UNROLL and LOCAL among them
@needs_opencl
@pytest.mark.slow
@pytest.mark.parametrize("first,last,after_ops", [(0, 14, {"UPCAST", "UNROLL", "LOCAL"}),
                                                   pytest.param(14, 28, {"UPCAST", "LOCAL"}, marks=pytest.mark.exhaustive)],
                         ids=["first-14", "other-14"])
def test_a_fuzz_with_tensor_cores_drawn_finds_no_failures(first, last, after_ops):
  """Random TC kernels with TC and then random legal actions of the search's space, as a beam search would apply them;
  and, drawn by the fuzzer (which draws TC too, illegal but where first), kernels TC may or may not fit."""
  rng, cases, actions = random.Random(5), [], actions_for(emulated())
  for i in range(last):  # the cases before `first` drawn, not run
    k = mm(16 * rng.randint(1, 3), 8 * rng.randint(1, 4), rng.choice((16, 32, 64)), rng.choice((float16, bfloat16)), batch=rng.choice(((), (2,)))) \
      if i % 4 else rng.choice((matmul(16, 8, 16, dtype=float16), matmul(12, 8, 8), mm(24, 24, 32), mm(16, 8, 32)))
    kern = Kernel(k, emulated())
    if i % 4:
      kern.apply_opt(Opt("TC", rng.randint(0, len(kern._tc_choices()) - 1), 0))
      for _ in range(rng.randint(0, 3)):
        if legal := list(children(kern, actions)): kern = rng.choice(legal)
      opts = kern.applied_opts
    else: opts = draw_opts(kern, rng)
    if i < first: continue
    cases.append(opts)
    run(k, opts, seed=i)
  after = [o.op for c in cases if c and c[0].op == "TC" for o in c[1:]]
  assert sum(c[:1] == [Opt("TC", 1, 0)] for c in cases) >= 2 and after_ops <= set(after) and len(after) >= 10, (cases, after)


@needs_opencl
@pytest.mark.slow
def test_a_search_on_emulated_tensor_cores_measures_and_verifies_tc_candidates():
  from search.settings import SearchSettings
  from search.tune import tune
  # PoCL builds a kernel with many barriers (the emulation's) slowly, at its first launch too: no candidate times out
  s = SearchSettings.from_json(dict(beam=2, budget_candidates=16, min_time_s=0.005, final_rounds=2, workers=1, timeout_factor=1e6,
                                    verify_all=True))  # every candidate checked, not only the fastest of each round
  r = tune(mm(64, 32, 64), "OPENCL", s, module="tc_opencl_backend")
  tc = [c for c in r.candidates if c.opts and c.opts[0]["op"] == "TC"]
  assert tc and all(c.status in ("ok", "slow") and (c.status != "ok" or c.verified) for c in tc), [(c.opts, c.status, c.error) for c in tc]
  assert any(len(c.opts) > 1 for c in tc)  # the beam went on from TC


@needs_opencl
@pytest.mark.parametrize("k", [mm(64, 32, 64), mm(16, 8, 32, bfloat16), mm(32, 24, 16, batch=(2,)), relu_to_half(), two_reduce_axes()])
def test_hand_coded_schedules_use_tensor_cores_and_match_the_reference(k):
  from linearizer.heuristic import hand_coded_optimizations
  opts = hand_coded_optimizations(Kernel(k, emulated()))
  assert opts[0] == Opt("TC", 0, 0)
  run(k, opts)

@needs_opencl
@pytest.mark.parametrize("tcs,k", [(RDNA3, mm(64, 64, 64)), (RDNA3, mm(32, 16, 32, bfloat16, batch=(2,))), (APPLE, mm(64, 32, 64)),
                                  (APPLE, relu_to_half(16, 8, 16))])
def test_hand_coded_schedules_use_rdna3_and_metal_tensor_cores(tcs, k):
  from linearizer.heuristic import hand_coded_optimizations
  opts = hand_coded_optimizations(Kernel(k, emulated(tcs)))
  assert opts[0] == Opt("TC", 0, 0)
  run(k, opts, tcs=tcs)
