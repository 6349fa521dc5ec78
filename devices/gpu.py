"""CUDA's driver API and HIP's module API, one implementation: HIP mirrors CUDA call for call with the same signatures,
so a table of names drives either (as devices/rtc.py does for NVRTC and hipRTC): device 0 and its context, memory, and
Programs that load a Binary's image and launch its kernel, timed by events.

gpuctypes binds the library: where it is missing, gpuctypes.cuda binds no function and gpuctypes.hip does not import.
The backend is then not available, and says why. Device memory comes from the driver's allocator (alloc: the one place
buffers are made), aligned to 256 bytes at least, which the renderers' whole-vector accesses rely on."""
from __future__ import annotations
import ctypes, functools, importlib
from dataclasses import dataclass
from typing import Any, Optional, Sequence
import numpy as np
import numpy.typing as npt
from devices.base import Binary, DeviceError, Staged, contiguous, int_arg
from linearizer.options import LinearizerOptions
from linearizer.render_c import launch_sizes
from linearizer.tensor_cores import TensorCore


class CUDAError(DeviceError): pass
class HIPError(DeviceError): pass


# our name: (CUDA's, HIP's). Functions first, then types; None: that API has no such step.
NAMES: dict[str, tuple[Optional[str], Optional[str]]] = {
  "init": ("cuInit", "hipInit"), "count": ("cuDeviceGetCount", "hipGetDeviceCount"), "device": ("cuDeviceGet", "hipDeviceGet"),
  "attribute": ("cuDeviceGetAttribute", "hipDeviceGetAttribute"), "error_string": ("cuGetErrorString", "hipDrvGetErrorString"),
  "retain_context": ("cuDevicePrimaryCtxRetain", None), "set_context": ("cuCtxSetCurrent", None), "set_device": (None, "hipSetDevice"),
  "malloc": ("cuMemAlloc_v2", "hipMalloc"), "free": ("cuMemFree_v2", "hipFree"),
  "htod": ("cuMemcpyHtoD_v2", "hipMemcpyHtoD"), "dtoh": ("cuMemcpyDtoH_v2", "hipMemcpyDtoH"),
  "module_load": ("cuModuleLoadData", "hipModuleLoadData"), "module_function": ("cuModuleGetFunction", "hipModuleGetFunction"),
  "module_unload": ("cuModuleUnload", "hipModuleUnload"), "launch": ("cuLaunchKernel", "hipModuleLaunchKernel"),
  "event_create": ("cuEventCreate", "hipEventCreateWithFlags"), "event_destroy": ("cuEventDestroy_v2", "hipEventDestroy"),
  "event_record": ("cuEventRecord", "hipEventRecord"), "event_synchronize": ("cuEventSynchronize", "hipEventSynchronize"),
  "event_elapsed": ("cuEventElapsedTime", "hipEventElapsedTime"), "device_name": ("cuDeviceGetName", None),
  "driver_version": ("cuDriverGetVersion", None), "runtime_version": (None, "hipRuntimeGetVersion"),
  "properties": (None, "hipGetDeviceProperties"), "properties_t": (None, "hipDeviceProp_t"),
  "context_t": ("CUcontext", None), "module_t": ("CUmodule", "hipModule_t"), "function_t": ("CUfunction", "hipFunction_t"),
  "event_t": ("CUevent", "hipEvent_t"),
}
# errors after which the context is unusable and every later call fails (CUDA's and HIP's codes agree): an illegal address,
# a launch timeout, a hardware stack error, an illegal instruction, a misaligned address, an invalid address space or PC, a
# launch failure (a trap), a device-side assert
STICKY = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719})
# device attributes by CUDA's name; HIP's is its CamelCase (MAX_BLOCK_DIM_X: hipDeviceAttributeMaxBlockDimX)
ATTRIBUTE = ("CU_DEVICE_ATTRIBUTE_{}", "hipDeviceAttribute{}")


@dataclass(frozen=True)
class API:
  """One column of the table, and what its failures say."""
  name: str                 # CUDA | HIP
  column: int               # in NAMES and ATTRIBUTE
  module: str               # the gpuctypes module that binds it
  error: type[DeviceError]
  unloadable: str           # the module does not import: {} is why
  unbound: str              # it imports and binds nothing

CUDA_API = API("CUDA", 0, "gpuctypes.cuda", CUDAError, "gpuctypes.cuda does not load: {}", "no CUDA driver (libcuda.so): not an NVIDIA GPU machine")
HIP_API = API("HIP", 1, "gpuctypes.hip", HIPError, "no ROCm runtime (gpuctypes.hip: {})", "/opt/rocm/lib/libamdhip64.so binds no hipInit")


class Driver:
  """One API's device 0. The library is loaded, and the device opened, on first use (not on import)."""
  def __init__(self, api: API): self.api, self.is_current = api, False

  def name(self, ours: str) -> str:
    if (theirs := NAMES[ours][self.api.column]) is None: raise KeyError(f"{self.api.name} has no {ours}")
    return theirs
  def fn(self, ours: str) -> Any: return getattr(self.lib, self.name(ours))  # a gpuctypes (ctypes) function: untyped

  @functools.cached_property
  def lib(self) -> Any:
    """The gpuctypes module, initialised."""
    try: lib = importlib.import_module(self.api.module)
    except (ImportError, OSError) as e: raise self.api.error(self.api.unloadable.format(e)) from None
    if not hasattr(lib, init := NAMES["init"][self.api.column] or ""): raise self.api.error(self.api.unbound)
    self.check(getattr(lib, init)(0), init, lib)
    return lib

  def check(self, status: int, what: str, lib: Any = None) -> None:
    if status == 0: return
    msg = ctypes.POINTER(ctypes.c_char)()
    getattr(lib or self.lib, NAMES["error_string"][self.api.column] or "")(status, ctypes.byref(msg))
    raise self.api.error(f"{what} failed: {ctypes.string_at(msg).decode() if msg else f'{self.api.name} error {status}'} ({status})",
                         lost=status in STICKY)

  def get_int(self, ours: str, *args: Any) -> int:
    """A call that reports one int through its first argument."""
    out = ctypes.c_int32()
    self.check(self.fn(ours)(ctypes.byref(out), *args), self.name(ours))
    return out.value

  @functools.cached_property
  def device(self) -> int:
    if self.get_int("count") == 0: raise self.api.error(f"no {self.api.name} device")
    return self.get_int("device", 0)

  def make_current(self) -> None:
    """Device 0 made this process's current one (CUDA: its primary context), once."""
    if self.is_current: return
    if NAMES["set_device"][self.api.column]: self.check(self.fn("set_device")(self.device), self.name("set_device"))
    else:
      ctx = getattr(self.lib, self.name("context_t"))()
      self.check(self.fn("retain_context")(ctypes.byref(ctx), self.device), self.name("retain_context"))
      self.check(self.fn("set_context")(ctx), self.name("set_context"))
    self.is_current = True

  def available(self) -> bool:
    try: return self.device >= 0
    except DeviceError: return False

  def attribute(self, cuda_name: str) -> int:
    name = cuda_name if self.api.column == 0 else cuda_name.title().replace("_", "")
    return self.get_int("attribute", getattr(self.lib, ATTRIBUTE[self.api.column].format(name)), self.device)

  def limits(self) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
    """(threads a block, block dims, grid dims, shared memory bytes a block)."""
    return (self.attribute("MAX_THREADS_PER_BLOCK"), tuple(self.attribute(f"MAX_BLOCK_DIM_{d}") for d in "XYZ"),
            tuple(self.attribute(f"MAX_GRID_DIM_{d}") for d in "XYZ"), self.attribute("MAX_SHARED_MEMORY_PER_BLOCK"))

  # ---- memory: the device interface's alloc, copyin, copyout
  def alloc(self, n: int, dtype: npt.DTypeLike) -> Buffer: return Buffer(self, n, dtype)

  def copyin(self, buf: Buffer, host: np.ndarray) -> None:
    x = contiguous(buf, host)
    if x.size: self.check(self.fn("htod")(buf.ptr, x.ctypes.data, x.nbytes), self.name("htod"))

  def copyout(self, buf: Buffer) -> np.ndarray:
    x = np.empty(buf.n, buf.dtype)
    if x.size: self.check(self.fn("dtoh")(x.ctypes.data, buf.ptr, x.nbytes), self.name("dtoh"))
    return x

  def program(self, binary: Binary, name: str) -> Program: return Program(self, binary, name)


class Buffer:
  """Device memory for n elements of a dtype (CUDA's pointer is an integer, HIP's a pointer)."""
  def __init__(self, drv: Driver, n: int, dtype: npt.DTypeLike):
    drv.make_current()
    self.drv, self.n, self.dtype = drv, n, np.dtype(dtype)
    self.ptr = ctypes.c_uint64() if drv.api.column == 0 else ctypes.c_void_p()
    drv.check(drv.fn("malloc")(ctypes.byref(self.ptr), max(1, n * self.dtype.itemsize)), drv.name("malloc"))
  def __del__(self):
    if getattr(self, "ptr", None): self.drv.fn("free")(self.ptr)


class Program(Staged):
  """A Binary's kernel `name` loaded as a module, and its launch."""
  def __init__(self, drv: Driver, binary: Binary, name: str):
    if binary.launch is None: raise DeviceError(f"{drv.api.name} needs a GPU kernel's Binary, with its launch")
    drv.make_current()
    self.drv, self.launch_dims, self.name = drv, binary.launch, name
    self.alloc, self.copyin, self.copyout = drv.alloc, drv.copyin, drv.copyout
    self.image = ctypes.create_string_buffer(binary.image)  # kept: the driver may read it until the module goes
    self.module, self.fn = getattr(drv.lib, drv.name("module_t"))(), getattr(drv.lib, drv.name("function_t"))()
    drv.check(drv.fn("module_load")(ctypes.byref(self.module), self.image), drv.name("module_load"))
    drv.check(drv.fn("module_function")(ctypes.byref(self.fn), self.module, drv.lib.char_pointer_cast(name)), f"finding kernel {name!r}")
    self.events = (getattr(drv.lib, drv.name("event_t"))(), getattr(drv.lib, drv.name("event_t"))())
    for e in self.events: drv.check(drv.fn("event_create")(ctypes.byref(e), 0), drv.name("event_create"))  # 0: default flags

  def __del__(self):
    for e in getattr(self, "events", ()): self.drv.fn("event_destroy")(e)
    if getattr(self, "module", None): self.drv.fn("module_unload")(self.module)

  def launch(self, bufs: Sequence[Buffer], var_vals: Sequence[int], timed: bool) -> Optional[float]:
    drv, (start, end) = self.drv, self.events
    groups, local = launch_sizes(self.launch_dims, var_vals)
    args = [b.ptr for b in bufs] + [int_arg(v) for v in var_vals]  # each kernel argument's value, where it is
    params = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])
    drv.check(drv.fn("event_record")(start, None), drv.name("event_record"))
    drv.check(drv.fn("launch")(self.fn, *(groups + [1, 1, 1])[:3], *(local + [1, 1, 1])[:3], 0, None, params, None), drv.name("launch"))
    drv.check(drv.fn("event_record")(end, None), drv.name("event_record"))
    drv.check(drv.fn("event_synchronize")(end), "running the kernel")
    if not timed: return None
    ms = ctypes.c_float()
    drv.check(drv.fn("event_elapsed")(ctypes.byref(ms), start, end), drv.name("event_elapsed"))
    return ms.value * 1e-3


def options(name: str, limits: tuple[int, tuple[int, ...], tuple[int, ...], int], tensor_cores: tuple[TensorCore, ...]) -> LinearizerOptions:
  """A GPU's LinearizerOptions from its limits (Driver.limits). float16/bfloat16 live in float registers: only
  float32/float64 lanes are vectors (float4, double2 accesses)."""
  threads, block, grid, shared = limits
  return LinearizerOptions(name, has_local=True, has_shared=True, supports_float4=True, float_vector_widths=(4,),
                           vector_dtypes=("float32", "float64"), tensor_cores=tensor_cores, global_max=grid, local_max=block,
                           local_size_max=threads, shared_max=shared)
