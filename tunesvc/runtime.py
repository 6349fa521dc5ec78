"""Run a kernel on a device: linearize with a schedule, render, compile (cached on disk), run."""
from __future__ import annotations
from typing import Mapping, Optional, Sequence
import numpy as np
from devices import registry
from linearizer.ast import KernelAST
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower


def compile_kernel(kernel: KernelAST, device: str = "CPU", opts: Optional[Sequence[Opt | dict]] = None):
  """(source, program, opts) for the kernel under `opts` (None: the hand-coded ones); OptError for an illegal schedule."""
  dev = registry.get(device)
  k = Kernel(kernel, dev.options())
  if opts is None: hand_coded_optimizations(k)
  else: k.apply_opts(opts)
  src = dev.render(lower(k, "kernel"))
  return src, dev.Program(dev.compile(src), "kernel"), k.applied_opts


def run_kernel(kernel: KernelAST, buffers: Sequence[np.ndarray], device: str = "CPU", opts: Optional[Sequence[Opt | dict]] = None,
               var_vals: Optional[Mapping[str, int]] = None) -> None:
  """Compute `kernel` into buffers[0]; `opts` None runs the hand-coded schedule."""
  vv = kernel.var_vals(var_vals)
  _, prog, _ = compile_kernel(kernel, device, opts)
  prog(*buffers, var_vals=[vv[v.name] for v in kernel.vars])
