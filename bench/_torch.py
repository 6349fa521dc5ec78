"""The torch side of bench/cpu_vs_torch.py. Runs inside bench/.venv-torch (never the project's venv) as a long-lived child
that answers one JSON line per request on stdin, as bench/_tinygrad.py does, so the parent can interleave torch's runs
with its own (A B C D A B C D ...):

  {"cmd": "setup", "inputs": [npy paths], "outs": {mode: npy path}, "twin": {"fn": F, "kw": {...}} or "plan": [...]}
      build the computation (the twin: the torch op a user would call; the plan: a kernel as movement and ALU ops on
      flat inputs, bench/_tinygrad.py's format), for each mode ("eager", "compile"), run it, warm it up and write its
      output; a mode that fails reads {"errors": {mode: why}} and the others stay usable
  {"cmd": "time", "mode": M}   one timed run: {"t": seconds}
  {"cmd": "quit"}

What is timed: the wall time of one call of the function on the inputs (torch tensors sharing the .npy data), output
allocation included (torch's CPU allocator; that is how torch code runs). "compile" is torch.compile(fn,
mode=$TORCH_COMPILE_MODE (default max-autotune), dynamic=False, fullgraph=True): Inductor's C++ backend (vectorised C++,
SLEEF for transcendentals; matmul/conv through oneDNN/MKL or its own GEMM templates, autotuned under max-autotune),
compiled in setup, not timed. Threads: torch.set_num_threads($BENCH_THREADS), set by the parent to its own count.
"""
import json, os, sys, time
_reply, sys.stdout = sys.stdout, sys.stderr  # replies go to the real stdout; anything torch prints goes to stderr
def reply(**kw) -> None: _reply.write(json.dumps(kw) + "\n"); _reply.flush()

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
COMPILE_MODE = os.environ.get("TORCH_COMPILE_MODE", "max-autotune")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bool": torch.bool}

TWINS = {  # the op a torch user would write for each computation
  "matmul": lambda a, b, transpose_b=False: a @ (b.mT if transpose_b else b),
  "conv2d": lambda x, w, stride=1, padding=0, groups=1: F.conv2d(x, w, stride=stride, padding=padding, groups=groups),
  "softmax": lambda x: torch.softmax(x, -1),
  "layernorm": lambda x, g, b, eps: F.layer_norm(x, (x.shape[-1],), g, b, eps),
  "gelu": lambda x: F.gelu(x, approximate="tanh"),
  "silu": F.silu,
  "sum": lambda x, axis: x.sum(axis),
  "mul_add": lambda a, b, c: a * b + c,
}
ALU = {"NEG": torch.neg, "EXP2": torch.exp2, "LOG2": torch.log2, "SIN": torch.sin, "SQRT": torch.sqrt, "RECIP": torch.reciprocal,
       "ADD": torch.add, "SUB": torch.sub, "MUL": torch.mul, "DIV": torch.div, "MAX": torch.maximum, "CMPLT": torch.lt,
       "CMPEQ": torch.eq, "WHERE": torch.where}

def move(t: torch.Tensor, method: str, arg):
  if method == "reshape": return t.reshape(arg)
  if method == "permute": return t.permute(arg)
  if method == "expand": return t.expand(arg)
  if method == "flip": return t.flip(arg)
  if method == "shrink": return t[tuple(slice(lo, hi) for lo, hi in arg)]
  if method == "pad": return F.pad(t, [p for lo_hi in reversed(arg) for p in lo_hi])  # F.pad lists the last dim first
  raise ValueError(f"unknown movement op {method}")

def from_plan(plan: list[dict], xs: list[torch.Tensor]) -> torch.Tensor:
  """bench/_tinygrad.py's from_plan on torch tensors."""
  ts: list[torch.Tensor] = []
  for n in plan:
    src = [ts[i] for i in n.get("src", ())]
    if n["op"] == "LOAD": t = xs[n["buf"] - 1]
    elif n["op"] == "CONST": t = torch.full((1,), n["val"], dtype=DTYPES[n["dtype"]])
    elif n["op"] == "CAST": t = src[0].to(DTYPES[n["dtype"]])
    elif n["op"] == "REDUCE": t = (torch.sum if n["fn"] == "SUM" else torch.amax)(src[0], dim=tuple(n["axis"]), keepdim=True)
    else: t = src[0] if n["op"] == "STORE" else ALU[n["op"]](*src)
    for method, arg in n.get("moves", ()): t = move(t, method, arg)
    ts.append(t)
  return ts[-1].contiguous()

class Bench:
  fns: dict = {}
  xs: list = []

  def setup(self, inputs: list[str], outs: dict, twin: dict | None = None, plan: list[dict] | None = None) -> dict:
    self.xs = [torch.from_numpy(np.load(p)) for p in inputs]
    fn = (lambda *xs: TWINS[twin["fn"]](*xs, **twin.get("kw", {}))) if twin is not None else (lambda *xs: from_plan(plan, list(xs)))
    self.fns, errors, compile_s = {}, {}, None
    for mode, out in outs.items():
      try:
        f = fn
        if mode == "compile":
          torch._dynamo.reset()
          f = torch.compile(fn, mode=COMPILE_MODE, dynamic=False, fullgraph=True)
          st = time.perf_counter()
          f(*self.xs)
          compile_s = time.perf_counter() - st
        with torch.no_grad():
          y = f(*self.xs)
          f(*self.xs)  # warm-up
        np.save(out, y.numpy())
        self.fns[mode] = f
      except Exception as e:  # report and keep serving: the other mode stays measurable
        errors[mode] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return {"errors": errors, "compile_s": compile_s}

  def time(self, mode: str) -> float:
    f, xs = self.fns[mode], self.xs
    with torch.no_grad():
      st = time.perf_counter()
      f(*xs)
      return time.perf_counter() - st

def main() -> None:
  cfg = torch.__config__.parallel_info().splitlines()
  reply(ready=True, version=torch.__version__, threads=torch.get_num_threads(), compile_mode=COMPILE_MODE,
        parallel=[line.strip() for line in cfg if "OpenMP" in line or "MKL" in line or "oneDNN" in line or "MKLDNN" in line][:4],
        isa=torch.backends.cpu.get_cpu_capability())
  b = Bench()
  for line in sys.stdin:
    req = json.loads(line)
    try:
      if req["cmd"] == "setup": reply(**b.setup(req["inputs"], req["outs"], req.get("twin"), req.get("plan")))
      elif req["cmd"] == "time": reply(t=b.time(req["mode"]))
      elif req["cmd"] == "quit": reply(bye=True); return
      else: reply(error=f"unknown cmd {req['cmd']!r}")
    except Exception as e:
      reply(error=f"{type(e).__name__}: {e}"[:2000])

if __name__ == "__main__": main()
