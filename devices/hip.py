"""The HIP backend (ROCm >= 6): HIP's module API (devices/gpu.py's HIP column: device 0, memory, modules, launches timed
by events), hipRTC (ROCm's libhiprtc, through devices/rtc) for source -> code object, fingerprint, LinearizerOptions
from the device's limits. It works as the CUDA backend does: compile() in compile workers asks only for the device's
architecture and returns the code object with the source's launch; Program loads and launches.

gpuctypes.hip loads /opt/rocm/lib/libamdhip64.so when it is imported and raises OSError where ROCm is not installed:
then this backend is not available, and says why."""
from __future__ import annotations
import ctypes, functools
from typing import Any
from devices.base import Binary, launch_of
from devices.base import CompileError as CompileError, fingerprint_hash as fingerprint_hash  # the device interface's
from devices.gpu import HIP_API, Driver, HIPError as HIPError, options as gpu_options
from devices.rtc import RTC
from linearizer import CODEGEN_VERSION
from linearizer.options import LinearizerOptions
from linearizer.render_gpu import render_hip as render  # noqa: F401  (the device interface's renderer)
from linearizer.tensor_cores import RDNA3

ROCM_LIB = "/opt/rocm/lib"
DEFAULT_FLAGS: tuple[str, ...] = ("-O3", "-ffp-contract=off")  # no contraction: only the linearizer's MULACCs fuse
HOST_MEMORY = False  # buffers live on the device (alloc)

DRIVER = Driver(HIP_API)
available, alloc, copyin, copyout, Program = DRIVER.available, DRIVER.alloc, DRIVER.copyin, DRIVER.copyout, DRIVER.program

@functools.cache
def _props() -> Any:
  props = getattr(DRIVER.lib, DRIVER.name("properties_t"))()
  DRIVER.check(DRIVER.fn("properties")(ctypes.byref(props), DRIVER.device), DRIVER.name("properties"))
  return props

@functools.cache
def _rtc() -> RTC:
  try: return RTC(ctypes.CDLL(f"{ROCM_LIB}/libhiprtc.so"), "hiprtc", "GetCode")
  except OSError as e: raise HIPError(f"no hipRTC: {e}") from None

def arch() -> str: return _props().gcnArchName.decode()  # e.g. gfx90a:sramecc+:xnack-, the target features included


def compile(src: str, flags: tuple[str, ...] = DEFAULT_FLAGS) -> Binary:
  """Source -> the code object for this machine's device and the source's launch; the log in the CompileError."""
  code, _ = _rtc().compile(src, [f"--offload-arch={arch()}", *flags], arch())
  return Binary(code, launch_of(src))


def fingerprint(flags: tuple[str, ...] = DEFAULT_FLAGS) -> dict:
  return {"backend": "HIP", "device": _props().name.decode(errors="replace"), "arch": arch(),
          "runtime_version": DRIVER.get_int("runtime_version"), "hiprtc": _rtc().version(), "flags": list(flags), "codegen": CODEGEN_VERSION,
          "options": options().to_json()}

def options() -> LinearizerOptions: return gpu_options("HIP", DRIVER.limits(), RDNA3 if arch().startswith("gfx11") else ())
