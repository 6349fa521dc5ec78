"""A test-only backend: the CPU device, whose renderer raises on every schedule with an UNROLL (a renderer bug)."""
from devices.cpu import HOST_MEMORY, Program, alloc, available, compile, copyin, copyout, fingerprint, fingerprint_hash, options  # noqa: F401
from devices.cpu import render as cpu_render


def render(prog) -> str:
  if any(o.op == "UNROLL" for o in prog.opts): raise IndexError("planted renderer bug")
  return cpu_render(prog)
