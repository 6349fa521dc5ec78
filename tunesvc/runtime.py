"""Run a kernel on a device: linearize with a schedule, render, compile (cached on disk), run."""
from __future__ import annotations
from typing import Mapping, Optional, Sequence
import numpy as np
from devices import registry
from linearizer.ast import KernelAST
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower
from linearizer.render_c import render_c


def compile_kernel(kernel: KernelAST, device: str = "CPU", opts: Sequence[Opt | dict] = ()):
  """(source, program) for the kernel under `opts`; raises OptError for an illegal schedule."""
  dev = registry.get(device)
  k = Kernel(kernel, dev.options()).apply_opts(opts)
  src = render_c(lower(k, "kernel"))
  return src, dev.CPUProgram(dev.compile_c(src), "kernel")


def run_kernel(kernel: KernelAST, buffers: Sequence[np.ndarray], device: str = "CPU", opts: Optional[Sequence[Opt | dict]] = None,
               var_vals: Optional[Mapping[str, int]] = None) -> None:
  """Compute `kernel` into buffers[0]. `opts` None runs the unoptimised schedule (hand-coded heuristics come next)."""
  vv = kernel.var_vals(var_vals)
  _, prog = compile_kernel(kernel, device, opts or ())
  prog(*buffers, var_vals=[vv[v.name] for v in kernel.vars])
