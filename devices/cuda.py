"""The CUDA backend: the driver API through gpuctypes.cuda (device 0, its primary context, modules, launches timed by
events, memory), NVRTC through devices/nvrtc (source -> cubin), fingerprint, LinearizerOptions from the device's
limits.

compile() runs in compile workers: it asks the driver only for the device's architecture (no context) and returns the
cubin for it with the source's launch line (render_c.launch_line) in front, as OpenCL does; Program, in the runner that
owns the device, only loads and launches. compile_for() compiles for a named architecture with no GPU or driver at all
and gives ptxas's register and spill counts: what CI checks every renderer change with.

gpuctypes binds nothing and raises nothing where libcuda is missing: available() is True only when the driver loads and
has a device. Buffers come from cuMemAlloc, aligned to 256 bytes, which the renderer's whole-vector accesses rely on."""
from __future__ import annotations
import ctypes, functools, json
from typing import Sequence
import numpy as np
import numpy.typing as npt
from devices import nvrtc
from devices.cpu import fingerprint_hash, int_arg  # noqa: F401  (one definition for every backend)
from devices.rtc import CompileError  # noqa: F401  (the device interface's)
from devices.staging import contiguous, staged
from linearizer import CODEGEN_VERSION
from linearizer.options import LinearizerOptions
from linearizer.tensor_cores import SM80
from linearizer.render_c import LAUNCH, launch_sizes
from linearizer.render_gpu import render_cuda as render  # noqa: F401  (the device interface's renderer)

# --fmad=false: no a*b+c contracted to an fma (the reference rounds the product; only the linearizer's MULACCs fuse).
# NVRTC's other defaults are IEEE already: no flush to zero, / and sqrt correctly rounded (--prec-div, --prec-sqrt).
DEFAULT_FLAGS: tuple[str, ...] = ("--fmad=false",)


class CUDAError(RuntimeError): pass


def _options(threads: int, block: tuple[int, ...], grid: tuple[int, ...], shared: int, sm: int) -> LinearizerOptions:
  # float16/bfloat16 live in float registers: only float32/float64 lanes are vectors (float4, double2 accesses);
  # mma.sync m16n8k16 with float16 and bfloat16 inputs from sm_80 on
  return LinearizerOptions("CUDA", has_local=True, has_shared=True, supports_float4=True, float_vector_widths=(4,),
                           vector_dtypes=("float32", "float64"), tensor_cores=SM80 if sm >= 80 else (), global_max=grid, local_max=block,
                           local_size_max=threads, shared_max=shared)

# every sm_80 and sm_90 GPU (A100, A10, H100, H200): 1024 threads a block, block dims (1024, 1024, 64), grid dims
# (2^31-1, 65535, 65535), 48 KiB of static shared memory a block. The schedules compile checks draw without a GPU.
ARCH_OPTIONS = {arch: _options(1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535), 48 << 10, int(arch[3:])) for arch in ("sm_80", "sm_90")}


@functools.cache
def _cu():
  """gpuctypes.cuda with the driver initialised; without libcuda it has no functions and raises nothing itself."""
  try: from gpuctypes import cuda
  except (ImportError, OSError) as e: raise CUDAError(f"gpuctypes.cuda does not load: {e}") from None
  if not hasattr(cuda, "cuInit"): raise CUDAError("no CUDA driver (libcuda.so): not an NVIDIA GPU machine")
  _check(cuda.cuInit(0), "cuInit", cuda)
  return cuda

def _check(status: int, what: str, cu=None) -> None:
  if status == 0: return
  cu, msg = cu or _cu(), ctypes.POINTER(ctypes.c_char)()
  cu.cuGetErrorString(status, ctypes.byref(msg))
  raise CUDAError(f"{what} failed: {ctypes.string_at(msg).decode() if msg else f'CUDA error {status}'}")

def _int(fn, *args) -> int:
  out = ctypes.c_int32()
  _check(fn(ctypes.byref(out), *args), fn.__name__)
  return out.value

@functools.cache
def _device() -> int:
  cu = _cu()
  if _int(cu.cuDeviceGetCount) == 0: raise CUDAError("no CUDA device")
  return _int(cu.cuDeviceGet, 0)

def _attr(name: str) -> int: return _int(_cu().cuDeviceGetAttribute, getattr(_cu(), f"CU_DEVICE_ATTRIBUTE_{name}"), _device())

@functools.cache
def _context():
  """This process's current context: device 0's primary one."""
  cu, ctx = _cu(), _cu().CUcontext()
  _check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), _device()), "cuDevicePrimaryCtxRetain")
  _check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
  return ctx

def available() -> bool:
  try: _device()
  except CUDAError: return False
  return True

def arch() -> str: return f"sm_{_attr('COMPUTE_CAPABILITY_MAJOR')}{_attr('COMPUTE_CAPABILITY_MINOR')}"


def compile_for(src: str, arch: str, flags: tuple[str, ...] = DEFAULT_FLAGS) -> nvrtc.Compiled:
  """Source -> cubin for `arch` (sm_80, sm_90, ...) with ptxas's register and spill counts; needs NVRTC only."""
  return nvrtc.compile(src, arch, flags)

def compile(src: str, flags: tuple[str, ...] = DEFAULT_FLAGS) -> bytes:
  """Source -> the launch line and the cubin for this machine's device; the log in the CompileError."""
  return src[:src.index("\n") + 1].encode() + compile_for(src, arch(), flags).cubin


class Buffer:
  """Device memory for n elements of a dtype."""
  def __init__(self, n: int, dtype: npt.DTypeLike):
    _context()
    self.n, self.dtype, self.ptr = n, np.dtype(dtype), ctypes.c_uint64()
    _check(_cu().cuMemAlloc_v2(ctypes.byref(self.ptr), max(1, n * self.dtype.itemsize)), "cuMemAlloc")
  def __del__(self):
    if getattr(self, "ptr", None): _cu().cuMemFree_v2(self.ptr)

def alloc(n: int, dtype: npt.DTypeLike) -> Buffer: return Buffer(n, dtype)

def copyin(buf: Buffer, host: np.ndarray) -> None:
  x = contiguous(buf, host)
  if x.size: _check(_cu().cuMemcpyHtoD_v2(buf.ptr, x.ctypes.data, x.nbytes), "cuMemcpyHtoD")

def copyout(buf: Buffer) -> np.ndarray:
  x = np.empty(buf.n, buf.dtype)
  if x.size: _check(_cu().cuMemcpyDtoH_v2(x.ctypes.data, buf.ptr, x.nbytes), "cuMemcpyDtoH")
  return x


class Program:
  """A cubin's kernel `name` and its launch; called with Buffers or host arrays (copied in and back out), then the
  variable values."""
  def __init__(self, lib: bytes, name: str):
    cu, _ = _cu(), _context()
    head, cubin = lib.split(b"\n", 1)
    self.launch, self.name, self.image = json.loads(head[len(LAUNCH):]), name, ctypes.create_string_buffer(cubin)
    self.module, self.fn = cu.CUmodule(), cu.CUfunction()
    _check(cu.cuModuleLoadData(ctypes.byref(self.module), self.image), "cuModuleLoadData")
    _check(cu.cuModuleGetFunction(ctypes.byref(self.fn), self.module, cu.char_pointer_cast(name)), f"finding kernel {name!r}")
    self.events = (cu.CUevent(), cu.CUevent())
    for e in self.events: _check(cu.cuEventCreate(ctypes.byref(e), cu.CU_EVENT_DEFAULT), "cuEventCreate")

  def __del__(self):
    for e in getattr(self, "events", ()): _cu().cuEventDestroy_v2(e)
    if getattr(self, "module", None): _cu().cuModuleUnload(self.module)

  def __call__(self, *bufs: Buffer | np.ndarray, var_vals: Sequence[int] = (), timed: bool = False) -> float | None:
    if any(isinstance(b, np.ndarray) for b in bufs):
      return staged(lambda dev: self(*dev, var_vals=var_vals, timed=timed), bufs, alloc, copyin, copyout)
    cu = _cu()
    groups, local = launch_sizes(self.launch, var_vals)
    args = [ctypes.c_uint64(b.ptr.value) for b in bufs] + [int_arg(v) for v in var_vals]
    params = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])
    _check(cu.cuEventRecord(self.events[0], None), "cuEventRecord")
    _check(cu.cuLaunchKernel(self.fn, *(groups + [1, 1, 1])[:3], *(local + [1, 1, 1])[:3], 0, None, params, None), "cuLaunchKernel")
    _check(cu.cuEventRecord(self.events[1], None), "cuEventRecord")
    _check(cu.cuEventSynchronize(self.events[1]), "running the kernel")
    if not timed: return None
    ms = ctypes.c_float()
    _check(cu.cuEventElapsedTime(ctypes.byref(ms), *self.events), "cuEventElapsedTime")
    return ms.value * 1e-3

  def time(self, *bufs: Buffer | np.ndarray, var_vals: Sequence[int] = ()) -> float:
    """Seconds the kernel ran, by the device's events (no transfers)."""
    return self(*bufs, var_vals=var_vals, timed=True)


def fingerprint(flags: tuple[str, ...] = DEFAULT_FLAGS) -> dict:
  name = ctypes.create_string_buffer(256)
  _check(_cu().cuDeviceGetName(name, len(name), _device()), "cuDeviceGetName")
  driver = _int(_cu().cuDriverGetVersion)
  return {"backend": "CUDA", "device": name.value.decode(errors="replace"), "arch": arch(),
          "driver_version": f"{driver // 1000}.{driver % 1000 // 10}", "nvrtc": nvrtc.version(), "flags": list(flags), "codegen": CODEGEN_VERSION}

def options() -> LinearizerOptions:
  return _options(_attr("MAX_THREADS_PER_BLOCK"), tuple(_attr(f"MAX_BLOCK_DIM_{d}") for d in "XYZ"),
                  tuple(_attr(f"MAX_GRID_DIM_{d}") for d in "XYZ"), _attr("MAX_SHARED_MEMORY_PER_BLOCK"), int(arch()[3:]))
