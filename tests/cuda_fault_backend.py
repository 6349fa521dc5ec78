"""A test-only backend: the CUDA device, whose renderer plants faults in candidates with particular schedules (as
tests/fault_backend.py does on the CPU). A write far outside every buffer and a trap poison the CUDA context (every
later call in that process fails); a kernel that never ends holds the GPU until its process is killed."""
from devices.cuda import HOST_MEMORY, Program, alloc, available, compile, copyin, copyout, fingerprint, fingerprint_hash, options  # noqa: F401
from devices.cuda import render as cuda_render
from fault_backend import plant
from linearizer.kernel import Opt

# the first opt of a schedule -> what its kernel does before its work (tests/test_cuda.py checks none is the hand-coded one's)
FAULTS = {Opt("UPCAST", 0, 2): "illegal_address", Opt("UPCAST", 1, 2): "hang", Opt("UNROLL", 0, 2): "trap"}
_CODE = {"illegal_address": "if (threadIdx.x == 0) *(volatile float*)((char*)data0 + (1ll << 40)) = 1.0f;",
         "hang": "for (volatile int i = 0; ; i++);", "trap": "__trap();"}


def render(prog) -> str:
  src = cuda_render(prog)
  fault = FAULTS.get(prog.opts[0]) if prog.opts else None
  return src if fault is None else plant(src, prog.name, _CODE[fault])
