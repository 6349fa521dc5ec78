"""The tinygrad side of bench/cpu_kernels.py and bench/search_vs_tinygrad.py. Runs inside bench/.venv-tinygrad (never
the project's venv) as a long-lived child that answers one JSON line per request on stdin, so the parent can
interleave tinygrad's runs with its own (A B C D A B C D ...):

  {"cmd": "setup", "name": N, "inputs": [npy paths], "out": npy path}  build, compile, warm up, write the output
    optional: "plan": a kernel as movement and ALU ops on flat inputs (see from_plan), instead of the named twin;
              "twin": {"fn": F, "kw": {...}}, TWINS[F](*inputs, **kw) instead of the named twin;
              "beam": N, compile with tinygrad's BEAM search of width N ("compile_s" is then the search's wall time)
  {"cmd": "time"}                                                         one timed run: {"t": seconds}
  {"cmd": "quit"}

What is timed: the kernels run through tinygrad's own kernel timer, `tinygrad.engine.realize.time_call` (what its
BEAM search uses), one per kernel CALL of the computation's schedule; a run's time is the wall time around the ctypes
calls of the compiled functions (Clock: one call per THREAD index, one after another on this thread: tinygrad 0.14's
CPU backend does not run them in parallel), so it is kernel execution only: scheduling, compiling, loading the ELF,
host<->device copies and the Python of CPUProgram.__call__ (its argument conversion: 1.5 us of a 3.4 us run of a tiny
kernel) are outside the clock, as for tunesvc's program.time(). The inputs are realized on the device before
scheduling, so the schedule holds compute kernels only; a computation tinygrad splits into several kernels is timed as
the sum of one run of each.

The parent sets the environment before this starts: DEV=CPU (or another CPU renderer), BEAM=0, CACHELEVEL=0,
IGNORE_BEAM_CACHE=1 and a private CACHEDB, so what runs is tinygrad's default hand-coded heuristics, compiled now,
unless a setup asks for a BEAM search (whose limits, BEAM_TIMEOUT_SEC and the like, come from the environment too).
"""
import json, os, sys, time
from importlib.metadata import version
import numpy as np

# replies go to the real stdout; anything tinygrad prints goes to stderr
_reply, sys.stdout = sys.stdout, sys.stderr
def reply(**kw) -> None: _reply.write(json.dumps(kw) + "\n"); _reply.flush()

from tinygrad import Tensor, Device, dtypes
from tinygrad.engine.realize import time_call, compile_linear
from tinygrad.uop.ops import Ops
from tinygrad.helpers import NUM_CPU_THREADS
from tinygrad.runtime.ops_cpu import CPUProgram

class Clock:
  """A compiled CPU function that adds the wall time of each ctypes call to Clock.total."""
  total = 0.0
  def __init__(self, fxn): self.fxn = fxn
  def __call__(self, *args) -> None:
    st = time.perf_counter()
    self.fxn(*args)
    Clock.total += time.perf_counter() - st

def clocked_init(init):
  def __init__(self, *args, **kwargs) -> None:
    init(self, *args, **kwargs)
    self.fxn = Clock(self.fxn)
  return __init__
CPUProgram.__init__ = clocked_init(CPUProgram.__init__)  # every program, BEAM's candidates too: the same small cost for each

# the same computations as the tunesvc kernels (examples/kernels/*.json), on tinygrad Tensors
EXPRS = {
  "matmul_512": lambda a, b: a @ b,
  "matmul_1024": lambda a, b: a @ b,
  "sum_rows_4096": lambda x: x.sum(axis=1),
  "mul_add_16m": lambda a, b, c: a * b + c,
  "conv2d_3x3_pad": lambda x, w: x.conv2d(w, padding=1),
}

# the ops a tinygrad user would write for bench/cpu_vs_torch.py's kernels (bench/_torch.py has torch's)
TWINS = {
  "matmul": lambda a, b, transpose_b=False: a @ (b.transpose(-1, -2) if transpose_b else b),
  "conv2d": lambda x, w, stride=1, padding=0, groups=1: x.conv2d(w, stride=stride, padding=padding, groups=groups),
  "softmax": lambda x: x.softmax(-1),
  "layernorm": lambda x, g, b, eps: x.layernorm(eps=eps) * g + b,
  "gelu": Tensor.gelu,  # tinygrad's is the tanh approximation
  "silu": Tensor.silu,
  "sum": lambda x, axis: x.sum(axis=axis),
  "mul_add": lambda a, b, c: a * b + c,
}

# a plan's ALU ops (the tunesvc.kernel/1 names) as Tensor methods
ALU = {"NEG": Tensor.neg, "EXP2": Tensor.exp2, "LOG2": Tensor.log2, "SIN": Tensor.sin, "SQRT": Tensor.sqrt, "RECIP": Tensor.reciprocal,
       "ADD": Tensor.add, "SUB": Tensor.sub, "MUL": Tensor.mul, "DIV": Tensor.div, "MAX": Tensor.maximum,
       "CMPLT": Tensor.__lt__, "CMPEQ": Tensor.__eq__, "WHERE": Tensor.where}

def from_plan(plan: list[dict], xs: list[Tensor]) -> Tensor:
  """A plan is a kernel's nodes in topological order, each {"op", "src": [earlier node indices], ...}: LOAD {"buf",
  "moves"} applies movement ops ([method, arg]) to flat input buf (xs[buf-1]), CONST {"val", "dtype", "moves"} the same
  to a one-element constant, CAST {"dtype"}, REDUCE {"fn", "axis"} keeps the reduced dims, STORE {"moves"} makes the
  output flat and contiguous (a plan that only moves data is then a copy kernel, not a view). The last node is the
  STORE."""
  ts: list[Tensor] = []
  for n in plan:
    src = [ts[i] for i in n.get("src", ())]
    if n["op"] == "LOAD": t = xs[n["buf"] - 1]
    elif n["op"] == "CONST": t = Tensor.full((1,), n["val"], getattr(dtypes, n["dtype"]), buffer=False)  # a buffer would be a kernel
    elif n["op"] == "CAST": t = src[0].cast(getattr(dtypes, n["dtype"]))
    elif n["op"] == "REDUCE": t = (src[0].sum if n["fn"] == "SUM" else src[0].max)(axis=tuple(n["axis"]), keepdim=True)
    else: t = src[0] if n["op"] == "STORE" else ALU[n["op"]](*src)
    for method, arg in n.get("moves", ()): t = getattr(t, method)(tuple(tuple(a) if isinstance(a, list) else a for a in arg))
    ts.append(t)
  return ts[-1].contiguous()

class Bench:
  timers: list = []

  def setup(self, name: str, inputs: list[str], out: str, plan: list[dict] | None = None, beam: int = 0, twin: dict | None = None) -> dict:
    self.timers = []
    xs = [Tensor(np.load(p)).realize() for p in inputs]  # on the device now: no copies in the schedule below
    y = from_plan(plan, xs) if plan is not None else TWINS[twin["fn"]](*xs, **twin.get("kw", {})) if twin is not None else EXPRS[name](*xs)
    linear, var_vals = y.linear_with_vars()
    st = time.perf_counter()
    linear = compile_linear(linear, beam=beam)  # the default heuristics (beam 0) or the BEAM search pick the opts here
    compile_s = time.perf_counter() - st
    calls = [c for c in linear.src if c.op is Ops.CALL and c.src[0].op is Ops.PROGRAM]
    if len(calls) != len(linear.src): raise RuntimeError(f"schedule has non-kernel calls: {[c.src[0].op for c in linear.src]}")
    if not calls: raise RuntimeError("the schedule has no kernel: tinygrad made the result a view of an input")
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
    Clock.total = 0.0
    for t in self.timers: next(t)
    if Clock.total == 0.0: raise RuntimeError(f"no CPUProgram ran: DEV={Device.DEFAULT} is not a CPU backend")
    return Clock.total

def main() -> None:
  dev = Device[Device.DEFAULT]
  reply(ready=True, version=version("tinygrad"), device=Device.DEFAULT, renderer=type(dev.renderer).__name__,
        threads=NUM_CPU_THREADS.value, beam=os.environ.get("BEAM"))
  b = Bench()
  for line in sys.stdin:
    req = json.loads(line)
    try:
      if req["cmd"] == "setup": reply(**b.setup(req["name"], req["inputs"], req["out"], req.get("plan"), req.get("beam", 0), req.get("twin")))
      elif req["cmd"] == "time": reply(t=b.run())
      elif req["cmd"] == "quit": reply(bye=True); return
      else: reply(error=f"unknown cmd {req['cmd']!r}")
    except Exception as e:  # report and keep serving: one kernel failing leaves the others measurable
      reply(error=f"{type(e).__name__}: {e}"[:2000])

if __name__ == "__main__": main()
