"""A kernel's own variables never collide with a name the code generator or a language owns: the issue's six (r1 and g0,
the linearizer's loop variables; int, a C type; data0, a buffer argument; NAN, a macro; acc4, an accumulator) and the
other backends' words, each named variable run against the reference on every backend that runs here (CPU; OpenCL on
PoCL), compiled by NVRTC for CUDA, and rendered as text for Metal."""
import pytest
from devices import cpu, cuda, nvrtc, opencl
from gpu_schedules import run
from linearizer import reference
from linearizer.builders import alu, kernel, ld, red, st
from linearizer.compare import compare
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower
from linearizer.render_gpu import render_metal
from linearizer.symbolic import Var
from test_metal import OPTIONS as METAL_OPTIONS
from tunesvc.runtime import compile_kernel

NAMES = ["r1", "g0", "int", "data0", "NAN", "acc4", "r2", "acc6", "v3", "gidx0", "lidx0", "t1", "kernel", "threadIdx", "get_global_id", "float4",
         "INFINITY", "half", "thread", "restrict", "temp"]

def named(name: str):
  """A reduce over the variable's extent and an element-wise loop over it: the variable in loop ends, indices and masks."""
  n = Var(name, 1, 40)
  summed = kernel(red("SUM", alu("MUL", ld(1, (6, n + 1, 5)), ld(2, st((6, 5, n + 1)).permute((0, 2, 1)))), (1,)), name=f"sum_{name}")
  added = kernel(alu("ADD", ld(1, st((5, n + 1, 3, 7)).permute((2, 1, 0, 3))), ld(2, (3, n + 1, 5, 7))), name=f"add_{name}")
  return [summed, added]

CPU_OPTS = [[], [Opt("UPCAST", 0, 2), Opt("UNROLL", 0, 4)], [Opt("THREAD", 0, 2)]]
GPU_OPTS = [[], [Opt("LOCAL", 0, 2)], [Opt("LOCAL", 0, 3), Opt("GROUP", 0, 4)]]

def schedules(k, options, all_opts):
  for opts in all_opts:
    try: Kernel(k, options).apply_opts(opts)
    except Exception: continue  # a GROUP of the element-wise kernel
    yield opts


@pytest.mark.parametrize("name", NAMES)
def test_a_named_variable_runs_right_on_the_cpu(name):
  for k in named(name):
    for opts in schedules(k, cpu.options(), CPU_OPTS):
      src, prog, _ = compile_kernel(k, "CPU", opts)  # once: the variable's value is an argument
      for x in (1, 17, 40):
        vv = {name: x}
        got, want = reference.random_buffers(k, vv, 3), reference.random_buffers(k, vv, 3)
        reference.run(k, want, vv)
        prog(*got, var_vals=[x])
        assert compare(k, got, want, vv) is None, (name, opts, x, src)

# each name on one GPU schedule of each kernel, taken in turn (every schedule runs with a third of the names or more): a
# PoCL compile is ~0.15 CPU-s, and the name meets each schedule in the same renderer's CUDA source below
@pytest.mark.skipif(not opencl.available(), reason="no OpenCL device (install pocl-opencl-icd ocl-icd-libopencl1)")
@pytest.mark.parametrize("name", NAMES)
def test_a_named_variable_runs_right_on_opencl(name):
  for k in named(name):
    legal = list(schedules(k, opencl.options(), GPU_OPTS))
    run(opencl, "OPENCL", k, legal[NAMES.index(name) % len(legal)], [{name: 1}, {name: 40}])

@pytest.mark.skipif(not nvrtc.available(), reason="no NVRTC (pip install nvidia-cuda-nvrtc: the test extra has it)")
def test_named_variables_compile_for_cuda():
  options = cuda.ARCH_OPTIONS["sm_80"]
  for name in NAMES:
    for k in named(name):
      for opts in schedules(k, options, GPU_OPTS):
        src = cuda.render(lower(Kernel(k, options).apply_opts(opts)))
        assert f"int var_{name}" in src, src
        cuda.compile_for(src, "sm_80")  # CompileError where the name meant something to CUDA

def test_named_variables_render_apart_in_metal():
  for name in NAMES:
    for k in named(name):
      for opts in schedules(k, METAL_OPTIONS, GPU_OPTS):
        src = render_metal(lower(Kernel(k, METAL_OPTIONS).apply_opts(opts)))
        assert f"var_{name}" in src, src
