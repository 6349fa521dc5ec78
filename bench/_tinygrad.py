"""The tinygrad side of bench/cpu_kernels.py. Runs inside bench/.venv-tinygrad (never the project's venv) as a
long-lived child that answers one JSON line per request on stdin, so the parent can interleave tinygrad's runs
with its own (A B C D A B C D ...):

  {"cmd": "setup", "name": N, "inputs": [npy paths], "out": npy path}  build, compile, warm up, write the output
  {"cmd": "time"}                                                         one timed run: {"t": seconds}
  {"cmd": "quit"}

What is timed: tinygrad's own kernel timer, `tinygrad.engine.realize.time_call` (what its BEAM search uses). It
wraps each kernel CALL of the computation's schedule and, per run, returns the seconds CPUProgram.__call__ spent
around the ctypes calls of the compiled function (one call per THREAD index, one after another on this thread:
tinygrad 0.14's CPU backend does not run them in parallel), so it is kernel execution only:
scheduling, compiling, loading the ELF and host<->device copies are outside the clock, as for tunesvc's
program.time(). The inputs are realized on the device before scheduling, so the schedule holds compute kernels
only; a computation tinygrad splits into several kernels is timed as the sum of one run of each.

The parent sets the environment before this starts: DEV=CPU (or another CPU renderer), BEAM=0, CACHELEVEL=0,
IGNORE_BEAM_CACHE=1 and a private CACHEDB, so what runs is tinygrad's default hand-coded heuristics, compiled now.
"""
import json, os, sys, time
from importlib.metadata import version
import numpy as np

# replies go to the real stdout; anything tinygrad prints goes to stderr
_reply, sys.stdout = sys.stdout, sys.stderr
def reply(**kw) -> None: _reply.write(json.dumps(kw) + "\n"); _reply.flush()

from tinygrad import Tensor, Device
from tinygrad.engine.realize import time_call, lower_and_compile
from tinygrad.uop.ops import Ops
from tinygrad.helpers import NUM_CPU_THREADS

# the same computations as the tunesvc kernels (examples/kernels/*.json), on tinygrad Tensors
EXPRS = {
  "matmul_512": lambda a, b: a @ b,
  "matmul_1024": lambda a, b: a @ b,
  "sum_rows_4096": lambda x: x.sum(axis=1),
  "mul_add_16m": lambda a, b, c: a * b + c,
  "conv2d_3x3_pad": lambda x, w: x.conv2d(w, padding=1),
}

class Bench:
  timers: list = []

  def setup(self, name: str, inputs: list[str], out: str) -> dict:
    self.timers = []
    xs = [Tensor(np.load(p)).realize() for p in inputs]  # on the device now: no copies in the schedule below
    y = EXPRS[name](*xs)
    linear, var_vals = y.linear_with_vars()
    st = time.perf_counter()
    linear = lower_and_compile(linear)  # the default heuristics pick the opts here (BEAM=0)
    compile_s = time.perf_counter() - st
    calls = [c for c in linear.src if c.op is Ops.CALL and c.src[0].op is Ops.PROGRAM]
    if len(calls) != len(linear.src): raise RuntimeError(f"schedule has non-kernel calls: {[c.src[0].op for c in linear.src]}")
    self.timers = [time_call(c, var_vals) for c in calls]
    self.run()  # first run touches the output pages
    self.run()  # warm-up
    np.save(out, y.numpy())  # the buffer the timed kernels wrote: the parent checks it against numpy
    infos = [c.src[0].arg for c in calls]
    names = [i.function_name for i in infos]  # the name without its colours
    opts = [[f"{o.op.name} {o.axis} {o.arg}" for o in (c.src[0].src[0].arg.applied_opts or ())] for c in calls]
    gs = [list(i.global_size) for i in infos]
    return {"kernels": len(calls), "names": names, "opts": opts, "global_size": gs, "compile_s": compile_s}

  def run(self) -> float:
    if not self.timers: raise RuntimeError("no kernel is set up")
    return sum(next(t) for t in self.timers)

def main() -> None:
  dev = Device[Device.DEFAULT]
  reply(ready=True, version=version("tinygrad"), device=Device.DEFAULT, renderer=type(dev.renderer).__name__,
        threads=NUM_CPU_THREADS.value, beam=os.environ.get("BEAM"))
  b = Bench()
  for line in sys.stdin:
    req = json.loads(line)
    try:
      if req["cmd"] == "setup": reply(**b.setup(req["name"], req["inputs"], req["out"]))
      elif req["cmd"] == "time": reply(t=b.run())
      elif req["cmd"] == "quit": reply(bye=True); return
      else: reply(error=f"unknown cmd {req['cmd']!r}")
    except Exception as e:  # report and keep serving: one kernel failing leaves the others measurable
      reply(error=f"{type(e).__name__}: {e}"[:2000])

if __name__ == "__main__": main()
