"""The CUDA backend. With no GPU (CI): NVRTC builds the CUDA renderer's source for sm_80 and sm_90 -- a seeded sample of
corpus kernels under random GPU schedules (bench/cuda_compile_report.py does the whole corpus), and kernels using every
op, cast and reduction of every dtype, scalar and as vectors -- and reports ptxas's registers and spills; without a
driver the backend is not available. With an NVIDIA GPU: device buffers, launches timed by events, fingerprint,
options, the GPU schedules and a fuzz run against the reference (the codegen corner cases run there too)."""
import collections, hashlib, math, re
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
import pytest
import corner_kernels
from build_cache import accept, accepted
from devices import cuda, nvrtc, registry
from gpu_schedules import IDS, SCHEDULES, TC_IDS, TC_SCHEDULES, host_arrays_round_trip, mm, relu_to_half, run, var_values
from linearizer.builders import alu, kernel, ld, matmul, st
from linearizer.dtypes import bfloat16
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt, OptError, allowed_ops
from linearizer.lower import lower

import cuda_cases as R
import fuzz_harness as F


needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="no NVRTC (pip install nvidia-cuda-nvrtc: the test extra has it)")
needs_gpu = pytest.mark.skipif(not cuda.available(), reason="no NVIDIA GPU (no CUDA driver with a device)")
SAMPLE = 300  # corpus cases, each compiled for sm_80 and sm_90


def source(k, opts=(), arch="sm_80", name="kernel") -> str: return cuda.render(lower(Kernel(k, cuda.ARCH_OPTIONS[arch]).apply_opts(opts), name))

def compile_together(srcs: list[str], arch: str) -> None:
  """NVRTC accepts each of the sources (kernels named apart) for `arch`, asked in one program -- a program's fixed cost is
  most of a small one's (188 sources, sm_80: 9.2 CPU-s one by one, 4.0 in 4 programs, busy): the includes first (every
  source's the same), then each source in a namespace of its own with its macros undefined after it, so nothing one
  defines serves another. A failed program is asked again one source at a time: the error is the failing source's own."""
  includes = [line for line in srcs[0].splitlines() if line.startswith("#include")]
  assert all([line for line in s.splitlines() if line.startswith("#include")] == includes for s in srcs), "one include set a program"
  body = "".join(f"namespace n{i} {{\n" + "".join(line + "\n" for line in s.splitlines() if not line.startswith("#include")) + "}\n" +
                 "".join(f"#undef {m}\n" for m in re.findall(r"^#define (\w+)", s, re.M)) for i, s in enumerate(srcs))
  try: cuda.compile_for("".join(line + "\n" for line in includes) + body, arch)
  except cuda.CompileError:
    for src in srcs: cuda.compile_for(src, arch)
    raise

def nvrtc_identity() -> str:
  """NVRTC's version and origin, and the CUDA headers a source may include (each file's path, size and mtime)."""
  inc = nvrtc.include_dir()
  headers = sorted(p for p in inc.rglob("*") if p.is_file()) if inc else []
  return hashlib.sha256(" ".join([nvrtc.version(), str(inc), *(f"{p.relative_to(inc)}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
                                                                 for p in headers)]).encode()).hexdigest()


def test_a_log_without_ptxas_report_is_a_cubin_from_the_compute_cache_not_an_error():
  assert nvrtc._ptxas("") == (None, None, None)
  report = "ptxas info    : Used 40 registers, used 0 barriers\nptxas .     0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads"
  assert nvrtc._ptxas(report) == (40, 8, 4)


@needs_nvrtc
def test_compile_errors_carry_nvrtcs_log():
  with pytest.raises(cuda.CompileError, match="no_such_identifier"):
    cuda.compile_for('extern "C" __global__ void k(float* o) { o[0] = no_such_identifier; }\n', "sm_80")


@needs_nvrtc
def test_tensor_core_matmuls_of_float16_and_bfloat16_compile_to_mma_for_sm80_and_sm90():
  results = list(R.run(R.tc_cases(), R.ARCHS, jobs=2))
  assert len(results) == 8 and R.failures(results) == []  # each compiled for both: ptxas assembled the mma there
  ptx = {"tc:float16": "f16.f16", "tc:bfloat16": "bf16.bf16"}
  assert [r["source"].count(f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx[r['label']]}.f32") for r in results] == [1] * 8
  assert all(cuda.ARCH_OPTIONS[a].tensor_cores and "TC" in allowed_ops(cuda.ARCH_OPTIONS[a]) for a in R.ARCHS)


@needs_nvrtc
@pytest.mark.parametrize("arch", R.ARCHS)
def test_cubins_come_with_ptxas_registers_and_spills(arch, monkeypatch):
  monkeypatch.setenv("CUDA_CACHE_DISABLE", "1")  # where a driver is, NVRTC may take a cubin built before from its cache, unreported
  c = cuda.compile_for(source(matmul(64, 64, 64), [Opt("LOCAL", 0, 16), Opt("UPCAST", 1, 4), Opt("UNROLL", 0, 4)]), arch)
  assert c.cubin[:4] == b"\x7fELF" and f"'{arch}'" in c.log
  assert 8 <= c.registers <= 255 and c.spill_stores == c.spill_loads == 0, c.log


@needs_nvrtc
@pytest.mark.slow
def test_every_op_cast_and_reduction_of_every_dtype_compiles_scalar_and_vectorised():
  srcs = []
  for k in corner_kernels.KERNELS.values():
    for opts in corner_kernels.SCHEDULES:
      try: srcs.append(source(k, opts, name=f"k{len(srcs)}"))
      except OptError: continue  # a GROUP of an element-wise kernel
  # what NVRTC accepted before, the same source for the same arch under the same NVRTC, flags and headers, is not asked
  # again (tests/build_cache.py): a warm run compiles only what changed, in a program for each arch and include set
  ident = nvrtc_identity()
  todo: dict[tuple[str, tuple[str, ...]], list[str]] = collections.defaultdict(list)
  for arch in R.ARCHS:
    for s in srcs:
      if not accepted(ident, arch, *cuda.DEFAULT_FLAGS, s): todo[arch, tuple(re.findall(r"^#include.*", s, re.M))].append(s)
  if todo:
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
      list(pool.map(compile_together, todo.values(), [arch for arch, _ in todo]))  # raises the first CompileError
    for (arch, _), ss in todo.items():
      for s in ss: accept(ident, arch, *cuda.DEFAULT_FLAGS, s)
  assert sum("lanes<float,4>" in s for s in srcs) >= 3 and sum("lanes<double,2>" in s for s in srcs) >= 4
  assert sum("lanes_fma" in s for s in srcs) >= 2 and sum("__shared__" in s for s in srcs) >= 20 and len(srcs) >= 150


@needs_nvrtc
@pytest.mark.slow
@pytest.mark.exhaustive  # ~40 CPU-s of NVRTC; CI runs it, then bench/cuda_compile_report.py over the whole corpus
def test_a_corpus_sample_under_random_gpu_schedules_compiles_for_sm80_and_sm90():
  results = list(R.run(R.cases(seed=0, per_kernel=3, sample=SAMPLE), R.ARCHS, jobs=2))
  assert len(results) == SAMPLE and R.failures(results) == []
  uses = collections.Counter(o.split(":")[0].rstrip("0123456789") for r in results for o in r["opts"].split() if o != "no")
  assert min(uses[op] for op in ("LOCAL", "GROUP", "GROUPTOP", "UPCAST", "UNROLL", "NOLOCALS", "PADTO")) >= 10, uses
  srcs = [r["source"] for r in results]
  # vector code: few random GPU schedules upcast a contiguous axis by a vector width (the corner kernels cover every form)
  assert sum("cuda_fp16.h" in s for s in srcs) >= 10 and sum("__syncthreads" in s for s in srcs) >= 20 and sum("lanes<" in s for s in srcs) >= 3


def test_the_renderer_gives_cuda_its_launch_bounds_shared_memory_and_whole_vector_accesses():
  src = source(matmul(16, 16, 64), [Opt("UPCAST", 1, 4), Opt("LOCAL", 0, 4), Opt("GROUPTOP", 0, 8)])
  assert 'extern "C" __global__ __launch_bounds__(32) void kernel(' in src and "__shared__" in src and "__syncthreads();" in src
  assert "*(const lanes<float,4>*)(data2+" in src and "*(lanes<float,4>*)(data0+" in src  # indices that are multiples of 4
  shifted = source(kernel(alu("ADD", ld(1, st((65,)).shrink(((1, 65),))), ld(2, (64,)))), [Opt("UPCAST", 0, 4)])  # x[i+1] + y[i]
  assert "lanes_load<lanes<float,4>>(data1+" in shifted and "*(const lanes<float,4>*)(data2+" in shifted


BIG_Y = kernel(alu("ADD", ld(1, st((3, 8, 100000)).permute((2, 1, 0))), ld(2, (100000, 8, 3))))  # axes that do not merge

def test_launch_dims_past_cudas_grid_limits_fold_into_x():
  for opts in ([], [Opt("LOCAL", 1, 4)]):  # 100000 blocks in z (or y), 65535 at most: all in x, decoded with // and %
    p = lower(Kernel(BIG_Y, cuda.ARCH_OPTIONS["sm_80"]).apply_opts(opts))
    assert len(p.groups) == 1 and p.groups[0] * math.prod(p.local) == 2_400_000


def test_without_a_driver_or_device_cuda_is_not_available():
  if cuda.available(): pytest.skip("this machine has an NVIDIA GPU")
  assert "CUDA" not in registry.available()
  with pytest.raises(ValueError, match="'CUDA:0' is not available"): registry.get("CUDA:0")
  with pytest.raises(cuda.CUDAError, match="no CUDA driver|no CUDA device"): cuda.options()


# ---------------------------------------------------------------- on an NVIDIA GPU

@needs_gpu
def test_fingerprint_options_and_registry():
  fp, o = cuda.fingerprint(), cuda.options()
  assert fp["options"] == o.to_json()  # the hash names the options
  assert fp["backend"] == "CUDA" and fp["arch"].startswith("sm_") and all(fp[f] for f in ("device", "driver_version", "nvrtc"))
  assert o.has_local and o.has_shared and o.local_size_max >= 1024 and o.local_max[2] == 64 and o.shared_max >= 48 << 10
  assert registry.get("CUDA:0") is registry.get("CUDA") is cuda and "CUDA" in registry.available()


@needs_gpu
def test_programs_take_host_arrays_and_copy_every_buffer_back():
  host_arrays_round_trip(cuda, "CUDA")


@needs_gpu
@pytest.mark.parametrize("k,opts", SCHEDULES, ids=IDS)
def test_gpu_schedules_match_the_reference(k, opts):
  run(cuda, "CUDA", k, opts, var_values(k))


@needs_gpu
def test_a_launch_folded_into_x_matches_the_reference():
  for opts in ([], [Opt("LOCAL", 1, 4)]): run(cuda, "CUDA", BIG_Y, opts)


@needs_gpu
def test_a_bounded_fuzz_run_finds_no_failures():
  kernels, _ = F.kernel_pool([str(F.CORPUS), str(F.EXAMPLES)], builders=40, seed=1, max_positions=1_000_000)
  with F.Pool(jobs=2, device="CUDA", timeout=120, max_positions=1_000_000) as pool: cases = list(pool.run(F.undrawn(kernels, 300, 1)))
  assert [f"{c.status} {F.describe(c)}: {c.message[:400]}" for c in cases if c.status != "PASS"] == []


@needs_gpu
@pytest.mark.parametrize("k,opts", TC_SCHEDULES, ids=TC_IDS)
def test_tensor_core_schedules_match_the_reference_on_the_gpus_mma(k, opts):
  run(cuda, "CUDA", k, [Opt("TC", 0, 0)] + opts)

@needs_gpu
@pytest.mark.parametrize("k", [mm(256, 256, 256), mm(64, 32, 64, bfloat16), mm(40, 24, 72), relu_to_half(), mm(32, 24, 16, batch=(2,))])
def test_hand_coded_schedules_use_the_tensor_cores_and_match_the_reference(k):
  assert hand_coded_optimizations(Kernel(k, cuda.options()))[0] == Opt("TC", 0, 0)
  run(cuda, "CUDA", k, None)


@needs_gpu
@pytest.mark.slow
def test_planted_illegal_address_trap_and_hang_fail_their_candidates_and_the_search_goes_on():
  """A GPU fault poisons the runner's CUDA context: the candidate fails as a crash, the runner is replaced, and every
  later candidate is measured on a context that works."""
  import cuda_fault_backend as faulty
  from search.actions import actions_for, children
  from search.result import Status
  from search.settings import SearchSettings
  from search.tune import tune
  k = matmul(64, 64, 64)
  hand, plain = Kernel(k, cuda.options()), Kernel(k, cuda.options())
  assert hand_coded_optimizations(hand)[0] not in faulty.FAULTS  # the baseline itself is sound
  first_round = 2 + sum(1 for seed in (hand, plain) for _ in children(seed, actions_for(plain.options)))
  s = SearchSettings.from_json(dict(beam=2, budget_s=120, budget_candidates=first_round, early_stop=1e6, verify_all=True, worth_s=0,
                                    min_time_s=0.005, final_rounds=3))
  r = tune(k, "CUDA", s, module="cuda_fault_backend")
  got = {fault: next(c for c in r.candidates if c.opts and Opt.from_json(c.opts[0]) == opt) for opt, fault in faulty.FAULTS.items()}
  assert got["illegal_address"].status == "crash" and "(700)" in got["illegal_address"].error, got["illegal_address"].error
  assert got["trap"].status == "crash" and "(71" in got["trap"].error, got["trap"].error  # 710-719: a launch failure of the sticky kind
  assert got["hang"].status == "timeout" and "killed" in got["hang"].error
  for c in got.values():
    after = r.candidates[r.candidates.index(c) + 1:]
    assert not any(a.status == Status.RUN_ERROR for a in after), [(a.opts, a.error) for a in after]
  assert sum(c.status == Status.OK for c in r.candidates) > 10 and r.verified and r.best_s > 0
  assert not r.best_opts or Opt.from_json(r.best_opts[0]) not in faulty.FAULTS
