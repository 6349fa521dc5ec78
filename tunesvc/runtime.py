"""Run a kernel on a device: its tuned opts (asked of the service through the client's local cache) or the hand-coded
ones, linearize, render, compile (cached on disk), run."""
from __future__ import annotations
import functools, logging, os
from typing import Mapping, Optional, Sequence
import numpy as np
from devices import registry
from devices.base import Binary
from linearizer import ACTION_SPACE_VERSION
from linearizer.ast import KernelAST
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt, OptError
from linearizer.lower import lower

log = logging.getLogger("tunesvc.runtime")


@functools.cache
def default_client():
  """The service named by TUNESVC_URL (token: TUNESVC_TOKEN), or None: then kernels run their hand-coded opts."""
  from tunesvc.client import Client
  return Client(url, os.environ.get("TUNESVC_TOKEN")) if (url := os.environ.get("TUNESVC_URL")) else None


def opts_for(kernel: KernelAST, device: str = "CPU", client=None, submit: bool = False) -> Optional[list[dict]]:
  """The tuned opts for this kernel on this device's fingerprint, or None (untuned, or no service); with `submit`, an
  untuned kernel is queued for tuning on this fingerprint."""
  if (client := client or default_client()) is None: return None
  dev = registry.get(device)
  return client.opts_for(kernel, dev.fingerprint_hash(dev.fingerprint()), ACTION_SPACE_VERSION, submit)


def build_kernel(kernel: KernelAST, device: str = "CPU", opts: Optional[Sequence[Opt | dict]] = None) -> tuple[str, Binary, list[Opt]]:
  """(source, its build, opts) for the kernel, its entry point named `kernel`, under `opts` (None: the hand-coded
  ones), not loaded: a program of another owner of the device may load it; OptError for an illegal schedule."""
  dev = registry.get(device)
  k = Kernel(kernel, dev.options())
  if opts is None: hand_coded_optimizations(k)
  else: k.apply_opts(opts)
  src = dev.render(lower(k, "kernel"))
  return src, dev.compile(src), k.applied_opts

def compile_kernel(kernel: KernelAST, device: str = "CPU", opts: Optional[Sequence[Opt | dict]] = None):
  """(source, program, opts) for the kernel under `opts` (None: the hand-coded ones); OptError for an illegal schedule."""
  src, binary, applied = build_kernel(kernel, device, opts)
  return src, registry.get(device).Program(binary, "kernel"), applied


def run_kernel(kernel: KernelAST, buffers: Sequence[np.ndarray], device: str = "CPU", opts: Optional[Sequence[Opt | dict]] = None,
               var_vals: Optional[Mapping[str, int]] = None, client=None, submit: bool = False) -> None:
  """Compute `kernel` into buffers[0]. `opts` None: the tuned ones from `client` (default: TUNESVC_URL's) or, where
  there are none, the hand-coded schedule (and with `submit` the kernel is queued for tuning on this device)."""
  vv = kernel.var_vals(var_vals)
  check_buffers(kernel, buffers, vv)
  if opts is None and (tuned := opts_for(kernel, device, client, submit)) is not None:
    try: _, prog, _ = compile_kernel(kernel, device, tuned)
    except OptError as e:  # the service's answer does not fit here (a damaged or foreign answer): it must not stop the caller
      log.warning("tuned opts of kernel %s do not apply (%s): running the hand-coded ones", kernel.key[:12], e)
      _, prog, _ = compile_kernel(kernel, device)
  else: _, prog, _ = compile_kernel(kernel, device, opts)
  prog(*buffers, var_vals=[vv[v.name] for v in kernel.vars])


def check_buffers(kernel: KernelAST, buffers: Sequence[np.ndarray], var_vals: Mapping[str, int]) -> None:
  """ValueError unless there is one C-contiguous numpy array per buffer, of its dtype and at least the elements it reaches
  (the compiled kernel reads and writes raw memory: a short or mistyped buffer would corrupt the caller's process)."""
  if not isinstance(buffers, (list, tuple)) or len(buffers) != len(kernel.buffers):
    raise ValueError(f"kernel {kernel.name or kernel.key[:12]} takes {len(kernel.buffers)} buffers (output first), "
                     f"got {len(buffers) if isinstance(buffers, (list, tuple)) else type(buffers).__name__}")
  for i, (b, info, need) in enumerate(zip(buffers, kernel.buffers, kernel.buffer_sizes(var_vals))):
    if not isinstance(b, np.ndarray): raise ValueError(f"buffers[{i}]: a numpy array, not {type(b).__name__}")
    if b.dtype != info.dtype.np: raise ValueError(f"buffers[{i}]: dtype {b.dtype}, the kernel's buf{info.buf} is {info.dtype.name}")
    if not b.flags.c_contiguous: raise ValueError(f"buffers[{i}]: not C-contiguous (np.ascontiguousarray makes a copy that is)")
    if b.size < need: raise ValueError(f"buffers[{i}]: {b.size:,} elements, the kernel reaches {need:,}")
    if i == 0 and not b.flags.writeable: raise ValueError("buffers[0]: the output is read-only")
