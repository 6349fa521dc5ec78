"""A test-only backend: the CPU device, whose renderer plants faults in candidates with particular schedules.
Passed to search.tune as `module`, it reaches the compile pool and the runner by name, as a real backend does.

"lose" plays a GPU's sticky error (an illegal address or a trap poisons the CUDA context): its run raises a DeviceError
marked lost, and so does every later run in that process, as every call on a poisoned context fails."""
from devices import cpu
from devices.base import DeviceError
from devices.cpu import HOST_MEMORY, alloc, available, compile, compile_batch, copyin, copyout, fingerprint, fingerprint_hash, options  # noqa: F401
from devices.cpu import render as cpu_render
from linearizer.kernel import Opt

# the first opt of a schedule -> what its kernel does instead of its work
FAULTS = {Opt("UPCAST", 0, 2): "segfault", Opt("UPCAST", 1, 2): "hang", Opt("UNROLL", 0, 2): "wrong", Opt("UPCAST", 0, 4): "syntax",
          Opt("UPCAST", 1, 4): "lose"}
_CODE = {"segfault": "*(volatile int*)8 = 1;", "hang": "for (volatile int i = 0; ; i++);", "syntax": "this is not C",
         # which function of a batch's library (compile_batch #defines the name apart): the name after expansion
         "lose": '\n#define LOSE_S(x) #x\n#define LOSE_X(x) LOSE_S(x)\n'
                 '  __attribute__((used)) static const char lose[] = "LOSE " LOSE_X({name}); (void)lose;'}
_lost = False  # this process's device, once a "lose" candidate ran


class Program(cpu.Program):
  def __init__(self, binary, name: str):
    super().__init__(binary, name)
    self.loses = f"LOSE {name}\0".encode() in binary.image

  def time(self, *bufs, var_vals=()) -> float:
    global _lost
    _lost = _lost or self.loses
    if _lost: raise DeviceError("running the kernel failed: an illegal memory access was encountered (700)", lost=True)
    return super().time(*bufs, var_vals=var_vals)


def plant(src: str, name: str, code: str) -> str:
  """`code` at the start of kernel `name`'s body (tests/cuda_fault_backend.py plants its faults with it too)."""
  body = src.index("{\n", src.index(f"void {name}(")) + 2
  return src[:body] + "  " + code + "\n" + src[body:]

def render(prog) -> str:
  src = cpu_render(prog)
  fault = FAULTS.get(prog.opts[0]) if prog.opts else None
  if fault is None: return src
  if fault == "wrong": return src[:src.rindex("}")] + "  data0[0] += 1.0f;\n}\n"
  return plant(src, prog.name, _CODE[fault].format(name=prog.name))
