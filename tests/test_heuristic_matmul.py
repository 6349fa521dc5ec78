"""The hand-coded schedule of a blocked matmul on CPUs: its register tile per vector width (heuristic.REGISTER_TILES),
the code gcc makes of it, and the results."""
import math, re, subprocess
from dataclasses import replace
import pytest
from linearizer import reference
from linearizer.builders import matmul
from linearizer.compare import compare
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel
from linearizer.lower import lower
from linearizer.options import LinearizerOptions
from linearizer.render_c import kept_loads, render_c
from linearizer.builders import conv2d
from devices import cpu
from tunesvc.runtime import compile_kernel, run_kernel

# AVX512: an Intel AVX-512 core's options (full-width FMAs); ZEN4: AMD Zen 4's, whose 512-bit FMAs run as two halves
AVX512 = replace(cpu.options(), float_vector_widths=(4, 8, 16), threads=2, half_width_fma=False)
ZEN4, AVX2 = replace(AVX512, half_width_fma=True), replace(AVX512, float_vector_widths=(4, 8))

def schedule(k, options) -> list[tuple]: return [(o.op, o.axis, o.amt) for o in hand_coded_optimizations(Kernel(k, options))]


def test_the_avx512_check_is_one_property_of_the_options_and_no_field():
  assert AVX512.avx512 and not AVX2.avx512 and not LinearizerOptions("GPU").avx512
  assert "avx512" not in AVX512.to_json() and LinearizerOptions.from_json(AVX512.to_json()) == AVX512


@pytest.mark.parametrize("n", [1024, 2048])
def test_an_avx512_matmul_takes_a_tile_of_4_rows_by_4_vectors_and_packs_b_alone(n):
  # 16 accumulators (the old 8 x 1 tile's 8 were just the chains two FMA ports need) and 8 loads a step of 16 FMAs, not
  # 9 of 8; K in 256s unrolled by 2, N in blocks of 256 columns (4 steps of 64), B's block packed, A read in place (its
  # copy lost on AVX-512), the threads on the rows
  assert schedule(matmul(n, n, n), AVX512) == [("UPCAST", 1, 16), ("UPCAST", 1, 4), ("UPCAST", 0, 4), ("UNROLL", 0, 2), ("BLOCK", 2, 128),
                                               ("BLOCK", 2, 4), ("PACK", 2, None), ("THREAD", 2, 2)]

@pytest.mark.parametrize("n", [1024, 2048])
def test_a_zen4_matmul_keeps_the_tile_of_8_rows_by_1_vector(n):
  # Zen 4's half-width FMAs: 4 x 4 ran 0.80-0.90x of OpenBLAS there, 8 x 1 0.98-1.13x (heuristic.REGISTER_TILES)
  assert schedule(matmul(n, n, n), ZEN4) == [("UPCAST", 1, 16), ("UPCAST", 0, 8), ("UNROLL", 0, 2), ("BLOCK", 2, 128), ("BLOCK", 2, 16),
                                             ("PACK", 2, None), ("THREAD", 2, 2)]

def test_only_an_amd_family_25_core_with_avx512_has_half_width_fmas(monkeypatch):
  fields = {"vendor_id": "AuthenticAMD", "cpu family": "25"}
  monkeypatch.setattr(cpu, "_cpu_fields", lambda: fields)
  assert cpu._half_width_fma(frozenset({"avx2", "avx512f"})) and not cpu._half_width_fma(frozenset({"avx2"}))  # Zen 4, Zen 3
  for other in ({"vendor_id": "AuthenticAMD", "cpu family": "26"}, {"vendor_id": "GenuineIntel", "cpu family": "6"}):  # Zen 5, Intel
    fields = other
    assert not cpu._half_width_fma(frozenset({"avx2", "avx512f"}))

def test_the_avx2_matmul_schedule_is_unchanged():
  assert schedule(matmul(2048, 2048, 2048), AVX2) == [("UPCAST", 1, 8), ("UPCAST", 1, 2), ("UPCAST", 0, 4), ("UNROLL", 0, 2), ("BLOCK", 2, 128),
                                                      ("BLOCK", 1, 32), ("BLOCK", 3, 8), ("PACK", 1, None), ("PACK", 2, None), ("THREAD", 1, 2)]

def test_a_matmul_whose_columns_take_no_4_vectors_keeps_the_tile_of_step_1():
  # 1056 columns: 66 vectors, no multiple of 4; the tile is _tile's 8 rows of one vector
  assert schedule(matmul(512, 1056, 512), AVX512)[:3] == [("UPCAST", 1, 16), ("UPCAST", 0, 8), ("UNROLL", 0, 2)]


def test_the_avx512_tile_runs_right_and_keeps_its_accumulators_in_registers():
  k = matmul(64, 128, 512)  # the shortest reduce the tile takes (2 blocks of 256), 2 column blocks of 64
  assert schedule(k, AVX512)[:3] == [("UPCAST", 1, 16), ("UPCAST", 1, 4), ("UPCAST", 0, 4)]
  # the host's tile: 4 x 4 on Intel's AVX-512, 8 x 1 on Zen 4's, 4 x 2 on AVX2
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))
  bufs = reference.random_buffers(k, {}, 3)
  want = [b.copy() for b in bufs]
  reference.run(k, want, {})
  run_kernel(k, bufs, "CPU", opts=opts)
  assert (msg := compare(k, bufs, want, {})) is None, msg
  if not cpu.options().avx512: pytest.skip("gcc's AVX-512 code of the tile: this host (or TUNESVC_CPU_LANES) has no AVX-512")
  src, _, _ = compile_kernel(k, "CPU", opts)
  asm = subprocess.run([cpu._cc(), *cpu.DEFAULT_FLAGS, "-S", "-x", "c", "-", "-o", "-"], input=src, capture_output=True, text=True,
                       check=True).stdout
  # the reduce loop: the block of the most FMAs, the tile's accumulators (its upcast lanes / 16) x K unrolled by 2; none
  # of them on the stack
  accumulators = math.prod(o.amt for o in opts if o.op == "UPCAST") // 16
  loop = max(re.split(r"\n\.L\d+:", asm), key=lambda b: len(re.findall(r"\tvfmadd\w+ps\t", b)))
  assert accumulators in (8, 16) and len(re.findall(r"\tvfmadd\w+ps\t.*%zmm", loop)) == 2 * accumulators, loop
  assert not re.search(r"%zmm.*\((%rsp|%rbp)\)|\((%rsp|%rbp)\).*%zmm", loop), loop


def avx2_program(k):
  return lower(Kernel(k, AVX2).apply_opts(hand_coded_optimizations(Kernel(k, AVX2))))

def test_the_avx2_tile_keeps_its_vectors_of_b_and_a_lone_vector_is_left_to_gcc():
  # the 4 x 2 tile unrolled by 2: 4 vectors of B a step, each taken by the tile's 4 rows' FMAs
  prog = avx2_program(matmul(64, 128, 512))
  kept = kept_loads(prog)
  assert len(kept) == 4 and all(prog.uops[i].op == "LOAD" and prog.uops[i].vec == 8 for i in kept)
  src = render_c(prog, keep_loads=True)
  assert sum(f'__asm__("" : "+x"(v{i}));' in src for i in kept) == 4 and "__asm__" not in render_c(prog)
  # the strided 3x3 conv's tile: 8 pixels of one vector of weights, which gcc keeps in a register by itself
  assert kept_loads(avx2_program(conv2d(1, 128, 56, 56, 128, 3, 3, stride=2, padding=1))) == set()

def test_only_avx2_schedules_on_x86_keep_their_loads(monkeypatch):
  prog = avx2_program(matmul(64, 128, 512))
  monkeypatch.setattr(cpu, "_cpuinfo", lambda: ("x86", frozenset({"avx", "avx2", "fma"})))
  assert "__asm__" in cpu.render(prog)
  for isa in ({"avx", "avx2", "fma", "avx512f"}, {"neon", "asimd"}):  # AVX-512 (its sources as before), ARM
    monkeypatch.setattr(cpu, "_cpuinfo", lambda isa=isa: ("other", frozenset(isa)))
    assert "__asm__" not in cpu.render(prog)

def test_gcc_loads_each_vector_of_the_avx2_tile_once_a_step():
  # gcc 12 folded each vector of B into its 4 FMAs as a memory operand: 24 loads a step of 16 FMAs where 12 do
  if "avx2" not in cpu._cpuinfo()[1]: pytest.skip("gcc's AVX2 code of the tile: this host is no x86 with AVX2")
  src = render_c(avx2_program(matmul(64, 128, 512)), keep_loads=True)
  asm = subprocess.run([cpu._cc(), *cpu.DEFAULT_FLAGS, "-mno-avx512f", "-S", "-x", "c", "-", "-o", "-"], input=src,
                       capture_output=True, text=True, check=True).stdout
  loop = max(re.split(r"\n\.L\d+:", asm), key=lambda b: len(re.findall(r"\tvfmadd\w+ps\t", b)))
  fmas = re.findall(r"\tvfmadd\w+ps\t(.*)", loop)
  assert len(fmas) == 16 and not [f for f in fmas if "(" in f], loop
  assert len(re.findall(r"\tvmov[au]ps\t-?\w*\(", loop)) == 4 and len(re.findall(r"\tvbroadcastss\t", loop)) == 8, loop

@pytest.mark.parametrize("depth,blocks", [(64, [("BLOCK", 0, 2)]), (128, [("BLOCK", 0, 2), ("BLOCK", 3, 16)])])
def test_a_batched_nt_matmul_over_a_short_reduce_packs_b_into_rows_of_its_vector(depth, blocks):
  # Q K^T: B stored (N, K). The packed vector's 16 lanes along M are stored transposed, a scalar each, against only 64 or
  # 128 FMAs a vector; the columns the vector instead, B's block packed (PACK lays it contiguous), the batch blocked by 2
  # so B's copy fits (and at 128 deep the columns in blocks of 256)
  k = matmul(512, 512, depth, batch=(32,), transpose_b=True)
  assert schedule(k, AVX512) == [("UPCAST", 2, 16), ("UPCAST", 1, 8), ("UNROLL", 0, 2), *blocks, ("PACK", 2, None),
                                 ("THREAD", len(blocks), 2)]
  assert ("PACK", 2, None) not in schedule(matmul(512, 512, 256, batch=(32,), transpose_b=True), AVX512)  # past SHORT_REDUCE
  assert ("PACK", 2, None) not in schedule(k, AVX2)  # AVX2 (not measured): the packed vector, as before

def test_the_packed_columns_run_right():
  k = matmul(64, 48, 40, batch=(4,), transpose_b=True)
  assert ("PACK", 2, None) in schedule(k, AVX512)
  opts = hand_coded_optimizations(Kernel(k, cpu.options()))  # (the host's: on AVX2 the packed vector)
  bufs = reference.random_buffers(k, {}, 4)
  want = [b.copy() for b in bufs]
  reference.run(k, want, {})
  run_kernel(k, bufs, "CPU", opts=opts)
  assert (msg := compare(k, bufs, want, {})) is None, msg
