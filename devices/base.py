"""The device interface: what every backend module gives (devices/cpu.py, opencl.py, cuda.py, hip.py; the registry hands
them out by name), its one error hierarchy, its build artifact, and the helpers the backends share.

A backend renders a kernel's linear IR to source, compiles that to a Binary (in compile workers, away from the device:
no device state), and in the runner that owns the device loads it as a Program, which runs on device buffers (alloc,
copyin, copyout) or host arrays, timed by the device's own clock where it has one."""
from __future__ import annotations
import ctypes, hashlib, json
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence
import numpy as np
import numpy.typing as npt
from linearizer.lower import Program as LinearProgram
from linearizer.options import LinearizerOptions
from linearizer.render_c import LAUNCH

MAX_ERR = 4096  # chars of a compiler's log kept in a CompileError


class DeviceError(RuntimeError):
  """A device's library, driver or device is missing, or one of its calls failed. `lost`: the failure left the device
  unusable in this process (CUDA's and HIP's sticky errors: a kernel's illegal address or trap poisons the context, and
  every later call fails), so the process that owns it must be replaced."""
  def __init__(self, *args: object, lost: bool = False):
    super().__init__(*args)
    self.lost = lost
class CompileError(DeviceError):
  """Source that did not compile (the compiler's log is the message), or a compiler that is missing or timed out."""


@dataclass(frozen=True)
class Binary:
  """What compile() builds and a Program loads: the device's image (a shared library, an OpenCL program binary, a cubin,
  a code object) and, for a GPU kernel, its launch (render_c.launch_line's JSON: work-groups symbolic in the
  variables, work-items)."""
  image: bytes
  launch: Optional[dict] = None

  @property
  def key(self) -> str:
    """A content hash: Binaries with one key load as the same Program."""
    return hashlib.sha256(self.image + json.dumps(self.launch, sort_keys=True).encode()).hexdigest()


class Runnable(Protocol):
  """A loaded kernel: called with device buffers or host arrays (copied in and every one back out), then the variables'
  values; `timed` returns the seconds it ran."""
  def __call__(self, *bufs: Any, var_vals: Sequence[int] = (), timed: bool = False) -> Optional[float]: ...
  def time(self, *bufs: Any, var_vals: Sequence[int] = ()) -> float: ...


class Device(Protocol):
  """A backend module. Buffers are whatever its alloc returns (numpy arrays on the CPU)."""
  __name__: str
  DEFAULT_FLAGS: tuple[str, ...]
  HOST_MEMORY: bool  # its buffers are host memory (numpy arrays): a guard can map them on pages of their own
  CompileError: type[CompileError]
  def available(self) -> bool: ...
  def options(self) -> LinearizerOptions: ...
  def fingerprint(self, flags: tuple[str, ...] = ...) -> dict: ...
  def fingerprint_hash(self, fp: dict) -> str: ...
  def render(self, prog: LinearProgram) -> str: ...
  def compile(self, src: str, flags: tuple[str, ...] = ...) -> Binary: ...
  def Program(self, binary: Binary, name: str) -> Runnable: ...  # noqa: N802 (a class in a backend module)
  def alloc(self, n: int, dtype: npt.DTypeLike) -> Any: ...
  def copyin(self, buf: Any, host: np.ndarray) -> None: ...
  def copyout(self, buf: Any) -> np.ndarray: ...


# ---- helpers every backend shares
def fingerprint_hash(fp: dict) -> str: return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()

def clipped(log: str) -> str:
  """A compiler's log as a CompileError keeps it: its first MAX_ERR chars."""
  return log[:MAX_ERR] + ("\n... (truncated)" if len(log) > MAX_ERR else "")

def int_arg(v: int) -> ctypes.c_int:
  """A variable value as a C int kernel argument (every backend passes them so)."""
  if not isinstance(v, (int, np.integer)) or not -2**31 <= v < 2**31: raise ValueError(f"var value {v!r} is not a C int")
  return ctypes.c_int(int(v))

def launch_of(src: str) -> dict:
  """The launch of a GPU kernel's source: its first line (render_c.launch_line)."""
  head = src[:src.index("\n")] if "\n" in src else src
  if not head.startswith(LAUNCH): raise CompileError(f"a GPU kernel's source starts with its launch line ({LAUNCH.strip()} ...)")
  return json.loads(head[len(LAUNCH):])


class Staged:
  """The host-array side of a GPU Program: given host arrays, it runs on new device buffers, copied in before and all
  back out after (a kernel that writes an input must show it). A backend's Program sets its alloc, copyin and copyout
  and runs device buffers in `launch`."""
  alloc: Callable[[int, npt.DTypeLike], Any]
  copyin: Callable[[Any, np.ndarray], None]
  copyout: Callable[[Any], np.ndarray]

  def launch(self, bufs: Sequence[Any], var_vals: Sequence[int], timed: bool) -> Optional[float]: raise NotImplementedError

  def __call__(self, *bufs: Any, var_vals: Sequence[int] = (), timed: bool = False) -> Optional[float]:
    if not any(isinstance(b, np.ndarray) for b in bufs): return self.launch(bufs, var_vals, timed)
    dev = [self.alloc(b.size, b.dtype) if isinstance(b, np.ndarray) else b for b in bufs]
    for d, b in zip(dev, bufs):
      if isinstance(b, np.ndarray): self.copyin(d, b)
    out = self.launch(dev, var_vals, timed)
    for d, b in zip(dev, bufs):
      if isinstance(b, np.ndarray): np.copyto(b, self.copyout(d).reshape(b.shape))
    return out

  def time(self, *bufs: Any, var_vals: Sequence[int] = ()) -> float:
    """Seconds the kernel ran, by the device's clock (no transfers)."""
    if (t := self(*bufs, var_vals=var_vals, timed=True)) is None: raise DeviceError("a timed run returned no time")
    return t


def contiguous(buf: Any, host: np.ndarray) -> np.ndarray:
  """`host` as the contiguous elements of a device buffer `buf` (its `n` and `dtype`), whose size it must have."""
  x = np.ascontiguousarray(host, buf.dtype)
  if x.size != buf.n: raise ValueError(f"copying {x.size} elements into a buffer of {buf.n}")
  return x
