"""NVRTC, CUDA's runtime compiler: CUDA C++ -> a cubin for any sm_XY, with ptxas's report (registers, spills), on a
machine with no GPU and no driver.

gpuctypes.cuda binds NVRTC through ctypes.util.find_library("nvrtc") only, which finds neither the pip wheel's library
(libnvrtc.so.13, no unversioned name, in site-packages) nor a CUDA install off the loader's path. So the library is
looked for here: the nvidia-cuda-nvrtc wheel (nvidia/cu13/lib, or nvidia/cuda_nvrtc/lib in older wheels), then
$CUDA_HOME (default /usr/local/cuda), then the loader's path. libnvrtc dlopens its builtins library by soname when it
compiles, so that is loaded first, RTLD_GLOBAL, from the same folder."""
from __future__ import annotations
import ctypes, ctypes.util, functools, importlib.metadata, importlib.util, os, re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from devices.base import CompileError, DeviceError
from devices.rtc import RTC


class NVRTCMissing(DeviceError): pass


def _wheel_dirs() -> list[Path]:
  spec = importlib.util.find_spec("nvidia")
  roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
  return [r / sub for r in roots for sub in ("cu13", "cuda_nvrtc", "cuda_runtime")]

def _cuda_home() -> Path: return Path(os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda")

@functools.cache
def _lib() -> tuple[RTC, str]:
  """(NVRTC, which one: the wheel and its version, or the library file)."""
  for d in [w / "lib" for w in _wheel_dirs()] + [_cuda_home() / "lib64", _cuda_home() / "lib"]:
    libs, builtins = sorted(d.glob("libnvrtc.so*")), sorted(d.glob("libnvrtc-builtins.so*"))
    if libs and builtins:
      ctypes.CDLL(str(builtins[0]), mode=ctypes.RTLD_GLOBAL)
      wheel = next((f"nvidia-cuda-nvrtc {importlib.metadata.version('nvidia-cuda-nvrtc')}" for w in _wheel_dirs() if d == w / "lib"), None)
      return RTC(ctypes.CDLL(str(libs[0])), "nvrtc", "GetCUBIN"), wheel or os.path.basename(os.path.realpath(libs[0]))
  if name := ctypes.util.find_library("nvrtc"): return RTC(ctypes.CDLL(name), "nvrtc", "GetCUBIN"), name
  raise NVRTCMissing("no NVRTC: pip install nvidia-cuda-nvrtc (in the test extra: pip install -e '.[test]') or install the "
                     "CUDA toolkit (set CUDA_HOME if it is not in /usr/local/cuda)")

def available() -> bool:
  try: _lib()
  except (NVRTCMissing, OSError): return False
  return True

def version() -> str:
  """NVRTC's version and where it came from, e.g. "13.0 (nvidia-cuda-nvrtc 13.0.88)"."""
  rtc, origin = _lib()
  return f"{rtc.version()} ({origin})"

@functools.cache
def include_dir() -> Path | None:
  """Where cuda_fp16.h and cuda_bf16.h are: the CUDA install's include folder, else a wheel's (nvidia-cuda-runtime)."""
  return next((d for d in [_cuda_home() / "include"] + [w / "include" for w in _wheel_dirs()] if (d / "cuda_fp16.h").is_file()), None)


@dataclass(frozen=True)
class Compiled:
  """A cubin and ptxas's report on it. Where a CUDA driver is installed, NVRTC serves the cubin of a program it built
  before from the driver's compute cache (~/.nv/ComputeCache, CUDA_CACHE_DISABLE=1 turns it off) without running ptxas:
  then the log is empty and the report None (seen on an H100: the same kernel compiled by a second process)."""
  cubin: bytes
  log: str                     # NVRTC's program log: warnings, and ptxas's report
  registers: Optional[int]     # per thread, by ptxas
  spill_stores: Optional[int]  # bytes
  spill_loads: Optional[int]

def compile(src: str, arch: str, flags: tuple[str, ...]) -> Compiled:
  """CUDA C++ -> a cubin for `arch` (sm_80, sm_90, ...) under NVRTC `flags`; the log in the CompileError."""
  if "#include <cuda_" in src and include_dir() is None:
    raise CompileError(f"the source includes CUDA headers and none were found in {_cuda_home() / 'include'} or the nvidia wheels: "
                       "install the CUDA toolkit or pip install nvidia-cuda-runtime")
  opts = [f"--gpu-architecture={arch}", "--ptxas-options=-v", *flags] + ([f"-I{include_dir()}"] if include_dir() else [])
  cubin, log = _lib()[0].compile(src, opts, arch)
  return Compiled(cubin, log, *_ptxas(log))

def _ptxas(log: str) -> tuple[Optional[int], Optional[int], Optional[int]]:
  """(registers, spill store bytes, spill load bytes) from ptxas's -v report of the one kernel; Nones where the log has
  none (a cubin from the compute cache)."""
  regs = re.search(r"Used (\d+) registers", log)
  spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
  if regs is None or spills is None: return None, None, None
  return int(regs.group(1)), int(spills.group(1)), int(spills.group(2))
