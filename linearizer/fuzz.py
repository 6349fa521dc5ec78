"""Random cases for the linearizer fuzzer (the output check is linearizer.compare).

A case is a kernel document, a schedule, variable values and a data seed: all a replay needs. Drawing a case
only asks the Kernel which opts are legal; compiling and running are the caller's (bench/fuzz_linearizer.py),
so this module stays free of devices, as the rest of linearizer/.
"""
from __future__ import annotations
import math, random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Mapping, Optional
from linearizer import builders as B
from linearizer.ast import KernelAST
from linearizer.dtypes import DTYPES
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt, OptError, OptOp, allowed_ops
from linearizer.options import LinearizerOptions

AMTS = (0, 2, 3, 4, 5, 7, 8, 16, 32)  # 0: the whole axis; odd ones mostly fail to divide, and must say so
MAX_OPTS = 4
MAX_DRAWS = 40
MAX_LANE_NODES = 4096  # upcast lanes x AST nodes: beyond this one case compiles for seconds (64 lanes of 873 nodes: 35 s)
ILLEGAL_RATE = 0.15    # share of draws from the ops the device lacks, each of which must raise OptError


def positions(k: KernelAST, var_vals: Mapping[str, int]) -> int:
  """Full-shape positions at var_vals: what a reference run costs."""
  return math.prod(k.shape_at(k.full_shape, var_vals))

class Outcome(StrEnum):
  """How a fuzz case ended (bench/fuzz_linearizer.py's docstring says what each means); str-valued, as replay files hold it."""
  PASS = "PASS"; MISMATCH = "MISMATCH"; ILLEGAL_OPT = "ILLEGAL_OPT"; OPT_ERROR = "OPT_ERROR"; COMPILE_ERROR = "COMPILE_ERROR"
  RUN_ERROR = "RUN_ERROR"; ERROR = "ERROR"

@dataclass
class Case:
  """One fuzz case, JSON-ready: what a replay file holds besides the outcome. Without opts and var_vals (None) it is
  still to be drawn, from the seed: a case whose drawing failed replays by drawing again."""
  doc: dict
  opts: Optional[list[Opt]]
  var_vals: Optional[dict[str, int]]
  seed: int
  label: str = ""
  status: Optional[Outcome] = None  # None until it ran
  message: str = ""
  extra: dict = field(default_factory=dict)  # where it ran: device, asan, max_positions
  compile_s: Optional[float] = None           # CPU seconds its compile took (0 from the cache); not replayed

  def to_json(self) -> dict:
    return {"label": self.label, "status": self.status or "", "message": self.message, **self.extra, "seed": self.seed,
            "var_vals": self.var_vals, "opts": None if self.opts is None else [o.to_json() for o in self.opts], "kernel": self.doc}
  @staticmethod
  def from_json(d: dict) -> Case:
    return Case(d["kernel"], None if d["opts"] is None else [Opt.from_json(o) for o in d["opts"]], d["var_vals"], d["seed"], d.get("label", ""),
                Outcome(d["status"]) if d.get("status") else None, d.get("message", ""),
                {k: d[k] for k in ("device", "asan", "max_positions", "hand_coded") if k in d})


def draw_var_vals(k: KernelAST, rng: random.Random, max_positions: int) -> dict[str, int]:
  """Values in bounds, the bounds themselves often; shrunk toward the minimum while the run would be too big."""
  vv = {v.name: rng.choice((v.min, v.max, rng.randint(v.min, v.max))) for v in k.vars}
  while positions(k, vv) > max_positions and any(x > v.min for v, x in zip(k.vars, vv.values())):
    vv = {v.name: rng.randint(v.min, x) for v, x in zip(k.vars, vv.values())}
  return vv

def draw_opts(k: Kernel, rng: random.Random) -> list[Opt]:
  """Apply random opts to k until 0-4 more are applied, drawing now and then from the ops the device lacks; returns all.
  An opt the Kernel accepts but must not (an op the device lacks) or that crashes it is kept: running the case
  reports it."""
  allowed = allowed_ops(k.options)
  illegal, nodes = [op for op in OptOp if op not in allowed], len(k.ast.nodes)
  want = len(k.applied_opts) + rng.randint(0, MAX_OPTS)
  for _ in range(MAX_DRAWS):
    if len(k.applied_opts) >= want: break
    # UPCASTMID fits only a grouped axis it divides: offered often once there is one
    if k.group_for_reduces and OptOp.UPCASTMID in allowed and rng.random() < 0.3: op = OptOp.UPCASTMID
    else: op = rng.choice(illegal if illegal and rng.random() < ILLEGAL_RATE else allowed)
    if op is OptOp.NOLOCALS and rng.random() < 0.75: continue  # always legal until locals are used: it would crowd them out
    # an axis up to one past the end; UPCASTMID's among the grouped axes (and one past them), where alone it can be legal
    axis = None if op is OptOp.NOLOCALS else \
      k.first_reduce + rng.randint(0, k.group_for_reduces) if op is OptOp.UPCASTMID else rng.randint(0, k.shape_len)
    opt = Opt(op, axis, rng.choice(AMTS))
    try: k.apply_opt(opt)
    except OptError: continue
    except Exception: return k.applied_opts + [opt]
    if op not in allowed: break
    if math.prod(k.upcast_shape) * nodes > MAX_LANE_NODES: k = Kernel(k.ast, k.options).apply_opts(k.applied_opts[:-1])
  return k.applied_opts

def draw_case(case: Case, k: KernelAST, options: LinearizerOptions, max_positions: int, hand_coded: bool = False) -> Case:
  """The undrawn case drawn for k, its kernel: variable values and a schedule from its seed (the data's seed too); with
  `hand_coded`, the random opts follow the hand-coded schedule's (what runs untuned, and the search's start)."""
  rng = random.Random(case.seed)
  vv = draw_var_vals(k, rng, max_positions)
  kern = Kernel(k.rebased(), options)
  if hand_coded: hand_coded_optimizations(kern)
  return Case(case.doc, draw_opts(kern, rng), vv, case.seed, case.label)


# ---------------------------------------------------------------- random kernels from the builders

def builder_kernel(rng: random.Random) -> KernelAST:
  """A small random kernel from linearizer.builders: odd sizes, padding, strides, dilation, groups, several dtypes."""
  c = rng.choice
  dims = lambda n, sizes=(1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 32): tuple(c(sizes) for _ in range(n))
  kind = c(("matmul", "conv2d", "pool2d", "reduce", "chain", "softmax", "layernorm", "symbolic", "mul_add"))
  if kind == "matmul":
    m, n, kk = dims(3)
    return B.matmul(m, n, kk, batch=dims(c((0, 1, 2)), (1, 2, 3)), transpose_a=c((False, True)), transpose_b=c((False, True)),
                    dtype=DTYPES[c(("float32", "float32", "float16", "float64", "int32"))], name="b_matmul")
  if kind == "conv2d":
    g = c((1, 1, 2))
    k_, p, d = c((1, 2, 3, 5)), c((0, 1, 2)), c((1, 1, 2))
    h = rng.randint(max(1, d * (k_ - 1) + 1 - 2 * p), 14)
    return B.conv2d(c((1, 2)), g * c((1, 2, 3)), h, rng.randint(max(1, d * (k_ - 1) + 1 - 2 * p), 14), g * c((1, 2, 4)), k_, k_,
                    stride=c((1, 2)), padding=p, dilation=d, groups=g, name="b_conv2d")
  if kind == "pool2d":
    k_ = c((2, 3))
    return B.pool2d(c(("max", "avg")), c((1, 2)), c((1, 3)), rng.randint(k_, 15), rng.randint(k_, 15), k=k_, stride=c((None, 1, 2)),
                    padding=c((0, k_ // 2)), name="b_pool2d")
  if kind == "reduce":
    shape = dims(rng.randint(1, 4))
    dt = c(("float32", "float32", "float16", "bfloat16", "float64", "int32", "int8", "uint8", "int64"))
    return B.reduce(c(("SUM", "MAX")), shape, rng.sample(range(len(shape)), rng.randint(1, len(shape))), DTYPES[dt], name="b_reduce")
  if kind == "chain": return B.elementwise_chain(dims(2), rng.randint(1, 24), DTYPES[c(("float32", "float16"))], name="b_chain")
  rows, cols = dims(2, (1, 3, 4, 8, 17, 32, 64))
  if kind == "softmax": return c((B.softmax_max, B.softmax_exp_sum, B.softmax_div))(rows, cols, name="b_softmax")
  if kind == "layernorm": return c((B.layernorm_mean, B.layernorm_var, B.layernorm_norm))(rows, cols, name="b_layernorm")
  if kind == "symbolic":
    lo = rng.randint(0, 8)
    return B.symbolic_sum(rows, ("n", lo, lo + rng.randint(0, 100)), c(("SUM", "MAX")), name="b_symbolic")
  return B.mul_add(rng.randint(1, 5000), DTYPES[c(("float32", "int32", "uint8", "float64"))], name="b_mul_add")

