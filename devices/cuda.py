"""The CUDA backend: the driver API (devices/gpu.py's CUDA column: device 0, its primary context, memory, modules,
launches timed by events), NVRTC through devices/nvrtc (source -> cubin), fingerprint, LinearizerOptions from the
device's limits.

compile() runs in compile workers: it asks the driver only for the device's architecture (no context) and returns the
cubin for it with the source's launch (render_c.launch_line), as OpenCL does; Program, in the runner that owns the
device, only loads and launches. compile_for() compiles for a named architecture with no GPU or driver at all and gives
ptxas's register and spill counts: what CI checks every renderer change with."""
from __future__ import annotations
import ctypes
from devices import nvrtc
from devices.base import Binary, launch_of
from devices.base import CompileError as CompileError, fingerprint_hash as fingerprint_hash  # the device interface's
from devices.gpu import CUDA_API, CUDAError as CUDAError, Driver, options as gpu_options
from linearizer import CODEGEN_VERSION
from linearizer.options import LinearizerOptions
from linearizer.render_gpu import render_cuda as render  # noqa: F401  (the device interface's renderer)
from linearizer.tensor_cores import SM80

# --fmad=false: no a*b+c contracted to an fma (the reference rounds the product; only the linearizer's MULACCs fuse).
# NVRTC's other defaults are IEEE already: no flush to zero, / and sqrt correctly rounded (--prec-div, --prec-sqrt).
DEFAULT_FLAGS: tuple[str, ...] = ("--fmad=false",)
HOST_MEMORY = False  # buffers live on the device (alloc)

DRIVER = Driver(CUDA_API)
available, alloc, copyin, copyout, Program = DRIVER.available, DRIVER.alloc, DRIVER.copyin, DRIVER.copyout, DRIVER.program

def _options(limits: tuple[int, tuple[int, ...], tuple[int, ...], int], sm: int) -> LinearizerOptions:
  return gpu_options("CUDA", limits, SM80 if sm >= 80 else ())  # mma.sync m16n8k16 with float16 and bfloat16 inputs from sm_80 on

# every sm_80 and sm_90 GPU (A100, A10, H100, H200): 1024 threads a block, block dims (1024, 1024, 64), grid dims
# (2^31-1, 65535, 65535), 48 KiB of static shared memory a block. The schedules compile checks draw without a GPU.
ARCH_OPTIONS = {arch: _options((1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535), 48 << 10), int(arch[3:])) for arch in ("sm_80", "sm_90")}

def arch() -> str: return f"sm_{DRIVER.attribute('COMPUTE_CAPABILITY_MAJOR')}{DRIVER.attribute('COMPUTE_CAPABILITY_MINOR')}"


def compile_for(src: str, arch: str, flags: tuple[str, ...] = DEFAULT_FLAGS) -> nvrtc.Compiled:
  """Source -> cubin for `arch` (sm_80, sm_90, ...) with ptxas's register and spill counts; needs NVRTC only."""
  return nvrtc.compile(src, arch, flags)

def compile(src: str, flags: tuple[str, ...] = DEFAULT_FLAGS) -> Binary:
  """Source -> the cubin for this machine's device and the source's launch; the log in the CompileError."""
  return Binary(compile_for(src, arch(), flags).cubin, launch_of(src))


def fingerprint(flags: tuple[str, ...] = DEFAULT_FLAGS) -> dict:
  name, driver = ctypes.create_string_buffer(256), DRIVER.get_int("driver_version")
  DRIVER.check(DRIVER.fn("device_name")(name, len(name), DRIVER.device), DRIVER.name("device_name"))
  return {"backend": "CUDA", "device": name.value.decode(errors="replace"), "arch": arch(),
          "driver_version": f"{driver // 1000}.{driver % 1000 // 10}", "nvrtc": nvrtc.version(), "flags": list(flags), "codegen": CODEGEN_VERSION,
          "options": options().to_json()}

def options() -> LinearizerOptions: return _options(DRIVER.limits(), int(arch()[3:]))
