"""A test-only backend: the CPU device, whose renderer plants faults in candidates with particular schedules.
Passed to search.tune as `module`, it reaches the compile pool and the runner by name, as a real backend does."""
from devices.cpu import Program, alloc, available, compile, compile_batch, copyin, copyout, fingerprint, fingerprint_hash, options  # noqa: F401
from devices.cpu import render as cpu_render
from linearizer.kernel import Opt

# the first opt of a schedule -> what its kernel does instead of its work
FAULTS = {Opt("UPCAST", 0, 2): "segfault", Opt("UPCAST", 1, 2): "hang", Opt("UNROLL", 0, 2): "wrong", Opt("UPCAST", 0, 4): "syntax"}
_CODE = {"segfault": "*(volatile int*)8 = 1;", "hang": "for (volatile int i = 0; ; i++);", "syntax": "this is not C"}


def render(prog) -> str:
  src = cpu_render(prog)
  fault = FAULTS.get(prog.opts[0]) if prog.opts else None
  if fault is None: return src
  if fault == "wrong": return src[:src.rindex("}")] + "  data0[0] += 1.0f;\n}\n"
  body = src.index("{\n", src.index(f"void {prog.name}(")) + 2
  return src[:body] + "  " + _CODE[fault] + "\n" + src[body:]
