"""Run a kernel on a device: its tuned opts (asked of the service through the client's local cache) or the hand-coded
ones, linearize, render, compile (cached on disk), run."""
from __future__ import annotations
import functools, os
from typing import Mapping, Optional, Sequence
import numpy as np
from devices import registry
from linearizer import ACTION_SPACE_VERSION
from linearizer.ast import KernelAST
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower


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


def compile_kernel(kernel: KernelAST, device: str = "CPU", opts: Optional[Sequence[Opt | dict]] = None):
  """(source, program, opts) for the kernel under `opts` (None: the hand-coded ones); OptError for an illegal schedule."""
  dev = registry.get(device)
  k = Kernel(kernel, dev.options())
  if opts is None: hand_coded_optimizations(k)
  else: k.apply_opts(opts)
  src = dev.render(lower(k, "kernel"))
  return src, dev.Program(dev.compile(src), "kernel"), k.applied_opts


def run_kernel(kernel: KernelAST, buffers: Sequence[np.ndarray], device: str = "CPU", opts: Optional[Sequence[Opt | dict]] = None,
               var_vals: Optional[Mapping[str, int]] = None, client=None, submit: bool = False) -> None:
  """Compute `kernel` into buffers[0]. `opts` None: the tuned ones from `client` (default: TUNESVC_URL's) or, where
  there are none, the hand-coded schedule (and with `submit` the kernel is queued for tuning on this device)."""
  vv = kernel.var_vals(var_vals)
  _, prog, _ = compile_kernel(kernel, device, opts if opts is not None else opts_for(kernel, device, client, submit))
  prog(*buffers, var_vals=[vv[v.name] for v in kernel.vars])
