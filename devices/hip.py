"""The HIP backend (ROCm >= 6): the runtime through gpuctypes.hip (device 0, modules, launches timed by events, memory),
hipRTC (ROCm's libhiprtc, through devices/rtc) for source -> code object, fingerprint, LinearizerOptions from the
device's limits. It works as the CUDA backend does: compile() in compile workers asks only for the device's
architecture and returns the code object with the launch line in front; Program loads and launches.

gpuctypes.hip loads /opt/rocm/lib/libamdhip64.so when it is imported and raises OSError where ROCm is not installed:
then this backend is not available, and says why."""
from __future__ import annotations
import ctypes, functools, json
from typing import Sequence
import numpy as np
import numpy.typing as npt
from devices.cpu import fingerprint_hash, int_arg  # noqa: F401  (one definition for every backend)
from devices.rtc import RTC, CompileError  # noqa: F401  (the device interface's)
from devices.staging import contiguous, staged
from linearizer import CODEGEN_VERSION
from linearizer.options import LinearizerOptions
from linearizer.render_c import LAUNCH, launch_sizes
from linearizer.render_gpu import render_hip as render  # noqa: F401  (the device interface's renderer)
from linearizer.tensor_cores import RDNA3

ROCM_LIB = "/opt/rocm/lib"
DEFAULT_FLAGS: tuple[str, ...] = ("-O3", "-ffp-contract=off")  # no contraction: only the linearizer's MULACCs fuse


class HIPError(RuntimeError): pass


@functools.cache
def _hip():
  try: from gpuctypes import hip
  except (ImportError, OSError) as e: raise HIPError(f"no ROCm runtime (gpuctypes.hip: {e})") from None
  if not hasattr(hip, "hipInit"): raise HIPError(f"{ROCM_LIB}/libamdhip64.so binds no hipInit")
  _check(hip.hipInit(0), "hipInit", hip)
  return hip

def _check(status: int, what: str, hip=None) -> None:
  if status != 0: raise HIPError(f"{what} failed: {ctypes.string_at((hip or _hip()).hipGetErrorString(status)).decode()}")

def _int(fn, *args) -> int:
  out = ctypes.c_int32()
  _check(fn(ctypes.byref(out), *args), fn.__name__)
  return out.value

@functools.cache
def _device() -> int:
  if _int(_hip().hipGetDeviceCount) == 0: raise HIPError("no HIP device")
  _check(_hip().hipSetDevice(0), "hipSetDevice")
  return 0

def _attr(name: str) -> int: return _int(_hip().hipDeviceGetAttribute, getattr(_hip(), f"hipDeviceAttribute{name}"), _device())

@functools.cache
def _props():
  props = _hip().hipDeviceProp_t()
  _check(_hip().hipGetDeviceProperties(ctypes.byref(props), _device()), "hipGetDeviceProperties")
  return props

@functools.cache
def _rtc() -> RTC:
  try: return RTC(ctypes.CDLL(f"{ROCM_LIB}/libhiprtc.so"), "hiprtc", "GetCode")
  except OSError as e: raise HIPError(f"no hipRTC: {e}") from None

def available() -> bool:
  try: _device()
  except HIPError: return False
  return True

def arch() -> str: return _props().gcnArchName.decode()  # e.g. gfx90a:sramecc+:xnack-, the target features included


def compile(src: str, flags: tuple[str, ...] = DEFAULT_FLAGS) -> bytes:
  """Source -> the launch line and the code object for this machine's device; the log in the CompileError."""
  code, _ = _rtc().compile(src, [f"--offload-arch={arch()}", *flags], arch())
  return src[:src.index("\n") + 1].encode() + code


class Buffer:
  """Device memory for n elements of a dtype."""
  def __init__(self, n: int, dtype: npt.DTypeLike):
    _device()
    self.n, self.dtype, self.ptr = n, np.dtype(dtype), ctypes.c_void_p()
    _check(_hip().hipMalloc(ctypes.byref(self.ptr), max(1, n * self.dtype.itemsize)), "hipMalloc")
  def __del__(self):
    if getattr(self, "ptr", None): _hip().hipFree(self.ptr)

def alloc(n: int, dtype: npt.DTypeLike) -> Buffer: return Buffer(n, dtype)

def copyin(buf: Buffer, host: np.ndarray) -> None:
  x = contiguous(buf, host)
  if x.size: _check(_hip().hipMemcpy(buf.ptr, x.ctypes.data, x.nbytes, _hip().hipMemcpyHostToDevice), "hipMemcpy")

def copyout(buf: Buffer) -> np.ndarray:
  x = np.empty(buf.n, buf.dtype)
  if x.size: _check(_hip().hipMemcpy(x.ctypes.data, buf.ptr, x.nbytes, _hip().hipMemcpyDeviceToHost), "hipMemcpy")
  return x


class Program:
  """A code object's kernel `name` and its launch; called with Buffers or host arrays, then the variable values."""
  def __init__(self, lib: bytes, name: str):
    hip, _ = _hip(), _device()
    head, code = lib.split(b"\n", 1)
    self.launch, self.name, self.image = json.loads(head[len(LAUNCH):]), name, ctypes.create_string_buffer(code)
    self.module, self.fn = hip.hipModule_t(), hip.hipFunction_t()
    _check(hip.hipModuleLoadData(ctypes.byref(self.module), self.image), "hipModuleLoadData")
    _check(hip.hipModuleGetFunction(ctypes.byref(self.fn), self.module, hip.char_pointer_cast(name)), f"finding kernel {name!r}")
    self.events = (hip.hipEvent_t(), hip.hipEvent_t())
    for e in self.events: _check(hip.hipEventCreate(ctypes.byref(e)), "hipEventCreate")

  def __del__(self):
    for e in getattr(self, "events", ()): _hip().hipEventDestroy(e)
    if getattr(self, "module", None): _hip().hipModuleUnload(self.module)

  def __call__(self, *bufs: Buffer | np.ndarray, var_vals: Sequence[int] = (), timed: bool = False) -> float | None:
    if any(isinstance(b, np.ndarray) for b in bufs):
      return staged(lambda dev: self(*dev, var_vals=var_vals, timed=timed), bufs, alloc, copyin, copyout)
    hip = _hip()
    groups, local = launch_sizes(self.launch, var_vals)
    args = [ctypes.c_void_p(b.ptr.value) for b in bufs] + [int_arg(v) for v in var_vals]
    params = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])
    _check(hip.hipEventRecord(self.events[0], None), "hipEventRecord")
    _check(hip.hipModuleLaunchKernel(self.fn, *(groups + [1, 1, 1])[:3], *(local + [1, 1, 1])[:3], 0, None, params, None), "hipModuleLaunchKernel")
    _check(hip.hipEventRecord(self.events[1], None), "hipEventRecord")
    _check(hip.hipEventSynchronize(self.events[1]), "running the kernel")
    if not timed: return None
    ms = ctypes.c_float()
    _check(hip.hipEventElapsedTime(ctypes.byref(ms), *self.events), "hipEventElapsedTime")
    return ms.value * 1e-3

  def time(self, *bufs: Buffer | np.ndarray, var_vals: Sequence[int] = ()) -> float:
    """Seconds the kernel ran, by the device's events (no transfers)."""
    return self(*bufs, var_vals=var_vals, timed=True)


def fingerprint(flags: tuple[str, ...] = DEFAULT_FLAGS) -> dict:
  return {"backend": "HIP", "device": _props().name.decode(errors="replace"), "arch": arch(),
          "runtime_version": _int(_hip().hipRuntimeGetVersion), "hiprtc": _rtc().version(), "flags": list(flags), "codegen": CODEGEN_VERSION}

def options() -> LinearizerOptions:
  # float16/bfloat16 live in float registers: only float32/float64 lanes are vectors
  return LinearizerOptions("HIP", has_local=True, has_shared=True, supports_float4=True, float_vector_widths=(4,),
                           vector_dtypes=("float32", "float64"), global_max=tuple(_attr(f"MaxGridDim{d}") for d in "XYZ"),
                           local_max=tuple(_attr(f"MaxBlockDim{d}") for d in "XYZ"), local_size_max=_attr("MaxThreadsPerBlock"),
                           shared_max=_attr("MaxSharedMemoryPerBlock"), tensor_cores=RDNA3 if arch().startswith("gfx11") else ())
