"""The HIP backend. Without ROCm: not available, saying why. With hipcc (Debian's, which `make test` installs as root):
the HIP renderer's source of every op, cast and reduction of every dtype, scalar and as vectors, and of a corpus
sample under random GPU schedules, builds for gfx90a (and code-generates for gfx1100). With an AMD GPU: the GPU
schedules against the reference, fingerprint and options."""
import dataclasses, functools, os, shutil, subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import pytest
import corner_kernels
from build_cache import accept, accepted
from devices import cuda, hip, registry
from gpu_schedules import IDS, SCHEDULES, host_arrays_round_trip, run, var_values
from linearizer.ast import load
from linearizer.fuzz import draw_case
from linearizer.builders import matmul
from linearizer.dtypes import bfloat16, float16, float32
from linearizer.kernel import Kernel, Opt, OptError
from linearizer.lower import lower
from linearizer.tensor_cores import RDNA3

import cuda_cases as R


HIPCC = shutil.which("hipcc")
# CDNA2 (MI200) built whole; RDNA3 code-generated only, its device-library calls left unresolved: Debian's ROCm 5.2
# device libraries stop at gfx1036. hipRTC includes hip_runtime.h by itself; hipcc is told to. hipcc picks NVIDIA's
# platform (and runs nvcc) where it finds CUDA, as on these machines: AMD's is asked for.
BUILDS = {"gfx90a": ["-c"], "gfx1100": ["-S", "-nogpulib"]}
OPTIONS = cuda.ARCH_OPTIONS["sm_80"]  # within AMD's limits too: 1024 work-items a group, 48 of its 64 KiB of LDS
BATCH = 200  # kernels per hipcc run, each source in a namespace of its own, its kernel named apart: a run's fixed cost (hip_runtime.h,
# the device libraries) is most of a small one's (188 sources in runs of 25, 95, 188: 16.7, 9.1, 7.6 CPU-s, busy)


@functools.cache
def hipcc_identity() -> str:
  """hipcc's HIP and clang versions: with the flags and the source, what decides whether it builds."""
  return subprocess.run([HIPCC, "--version"], capture_output=True, text=True, env=os.environ | {"HIP_PLATFORM": "amd"}).stdout

def hipcc(sources: list[str], tmp: Path, archs=tuple(BUILDS), remember: bool = False) -> list[Path | None]:
  """Build the sources in batches, each one translation unit (device code only), for each of `archs`; two at a time.
  The outputs: objects, or assembly for gfx1100. With `remember`, where only whether hipcc builds them matters, a batch
  it built before (the same text, flags and hipcc: tests/build_cache.py) is not built again, and has no output."""
  def build(job: tuple[int, str]) -> Path | None:
    i, arch = job
    unit, text = tmp / f"unit{i}-{arch}.hip", "".join(f"namespace n{j} {{\n{s}}}\n" for j, s in enumerate(sources[i:i + BATCH]))
    flags = ["-x", "hip", "--cuda-device-only", *BUILDS[arch], *hip.DEFAULT_FLAGS, "-include", "hip/hip_runtime.h", f"--offload-arch={arch}"]
    if remember and accepted(hipcc_identity(), *flags, text): return None
    unit.write_text(text)
    r = subprocess.run([HIPCC, *flags, str(unit), "-o", str(unit.with_suffix(".out"))], capture_output=True, text=True, timeout=600,
                       env=os.environ | {"HIP_PLATFORM": "amd"})
    assert r.returncode == 0, f"{arch}: {r.stderr[:6000]}"
    if remember: accept(hipcc_identity(), *flags, text)
    return unit.with_suffix(".out")
  with ThreadPoolExecutor(2) as pool: return list(pool.map(build, [(i, a) for i in range(0, len(sources), BATCH) for a in archs]))

def sources(kernels, options=OPTIONS) -> list[str]:
  """The HIP source of each (kernel, opts), its kernel named k<i>; schedules the layout has no room for are left out."""
  out = []
  for k, opts in kernels:
    try: out.append(hip.render(lower(Kernel(k, options).apply_opts(opts), f"k{len(out)}")))
    except OptError: continue
  return out


def test_without_rocm_hip_is_not_available():
  if hip.available(): pytest.skip("this machine has ROCm and an AMD GPU")
  assert "HIP" not in registry.available()
  with pytest.raises(hip.HIPError, match="ROCm|HIP device|hipInit"): hip.options()


@pytest.mark.skipif(HIPCC is None, reason="no hipcc (Debian: apt-get install hipcc; make test does as root)")
@pytest.mark.slow
def test_hipcc_builds_every_op_cast_and_reduction_of_every_dtype_scalar_and_vectorised(tmp_path):
  srcs = sources((k, opts) for k in corner_kernels.KERNELS.values() for opts in corner_kernels.SCHEDULES)
  assert len(srcs) >= 150 and sum("lanes<" in s for s in srcs) >= 8 and sum("__shared__" in s for s in srcs) >= 20
  hipcc(srcs, tmp_path, remember=True)


@pytest.mark.skipif(HIPCC is None, reason="no hipcc (Debian: apt-get install hipcc; make test does as root)")
@pytest.mark.slow
@pytest.mark.exhaustive  # ~20 CPU-s of hipcc over 100 corpus cases; CI runs it (the corner kernels above cover every form in make test)
def test_hipcc_builds_a_corpus_sample_under_random_gpu_schedules(tmp_path):
  cases = [draw_case(c, load(c.doc), OPTIONS, 2**62) for c in R.cases(seed=1, per_kernel=3, sample=100)]
  srcs = sources((load(c.doc).rebased(), c.opts) for c in cases)
  assert len(srcs) == 100 and sum("__syncthreads" in s for s in srcs) >= 5
  hipcc(srcs, tmp_path, remember=True)


@pytest.mark.skipif(HIPCC is None, reason="no hipcc (Debian: apt-get install hipcc; make test does as root)")
def test_hipcc_builds_rdna3_tensor_core_kernels_into_wmma_instructions(tmp_path):
  rdna3 = dataclasses.replace(OPTIONS, tensor_cores=RDNA3)
  kernels = [(matmul(m, n, k, dtype=dt, acc=float32, **kw), [Opt("TC", 0, 0), *opts]) for dt in (float16, bfloat16) for (m, n, k), kw, opts in
             [((16, 16, 16), {}, []), ((64, 32, 64), {}, [Opt("UPCAST", 0, 2)]),
              ((32, 32, 96), {"batch": (2,)}, [Opt("LOCAL", 0, 2), Opt("UNROLL", 0, 3)])]]
  srcs = sources(kernels, rdna3)
  assert len(srcs) == 6 and all("__builtin_amdgcn_wmma_f32_16x16x16_" in s for s in srcs)
  asm = "".join(p.read_text() for p in hipcc(srcs, tmp_path, ("gfx1100",)) if p)
  assert asm.count("v_wmma_f32_16x16x16_f16") >= 3 and asm.count("v_wmma_f32_16x16x16_bf16") >= 3


# ---------------------------------------------------------------- on an AMD GPU

needs_gpu = pytest.mark.skipif(not hip.available(), reason="no AMD GPU (ROCm >= 6 with a device)")

@needs_gpu
def test_programs_take_host_arrays_and_copy_every_buffer_back():
  host_arrays_round_trip(hip, "HIP")


@needs_gpu
def test_fingerprint_options_and_registry():
  fp, o = hip.fingerprint(), hip.options()
  assert fp["options"] == o.to_json()  # the hash names the options
  assert fp["backend"] == "HIP" and fp["arch"].startswith("gfx") and fp["device"] and o.local_size_max >= 256 and o.shared_max >= 32 << 10
  assert o.tensor_cores == (RDNA3 if fp["arch"].startswith("gfx11") else ())
  assert registry.get("HIP:0") is registry.get("HIP") is hip and "HIP" in registry.available()

@needs_gpu
@pytest.mark.parametrize("k,opts", SCHEDULES, ids=IDS)
def test_gpu_schedules_match_the_reference(k, opts):
  run(hip, "HIP", k, opts, var_values(k))
