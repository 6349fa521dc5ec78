"""Lowering a Kernel to a linear IR: loops, accumulators, gated loads and stores, ALU ops.

Loop axes (thread, global, reduce) become LOOPs over symbolic loop variables; upcast axes are
unrolled into lanes, one value per combination of their indices. Every UOp is created once (common
subexpressions merge), constants fold by the reference semantics, and index and validity stay
symbolic expressions, simplified, until the renderer writes them.
"""
from __future__ import annotations
import itertools
from dataclasses import dataclass
from typing import Any, Optional
import numpy as np
from linearizer.ast import LazyOp
from linearizer.dtypes import DType, bool_
from linearizer.kernel import Kernel
from linearizer.reference import alu, cast
from linearizer.symbolic import Var, sint, smax

# ops: DEFINE_GLOBAL (arg: buf) DEFINE_VAR (arg: Var) LOOP (arg: (Var, end, threads)) ENDLOOP CONST (arg: value)
#      LOAD (arg: (buf, index, valid)) STORE (src: value; arg: (buf, index, valid)) ALU (arg: op) CAST (arg: bitcast)
#      DEFINE_ACC (arg: initial value) ACC (src: acc, value; arg: SUM|MAX) VALID (arg: a symbolic condition, as a bool)


@dataclass(frozen=True)
class UOp:
  op: str
  dtype: Optional[DType]
  src: tuple[int, ...] = ()
  arg: Any = None


class Program:
  """The linear IR of one kernel: uops in order, its buffers and variables."""
  def __init__(self, name: str, uops: list[UOp], buffers: list[tuple[int, DType]], vars: list[Var]):
    self.name, self.uops, self.buffers, self.vars = name, uops, buffers, vars


def _identity(fn: str, dt: DType):
  if fn == "SUM": return 0
  return -float("inf") if dt.is_float else dt.min

def lower(k: Kernel, name: str = "kernel") -> Program:
  uops: list[UOp] = []
  seen: dict[UOp, int] = {}
  def emit(u: UOp, dedup: bool = True) -> int:
    if dedup and u in seen: return seen[u]
    uops.append(u)
    if dedup: seen[u] = len(uops) - 1
    return len(uops) - 1

  full, n, fr, up = k.full_shape, k.shape_len, k.first_reduce, k.shape_len - k.upcasted
  bufs = [(b.buf, b.dtype) for b in k.ast.buffers]
  for b, dt in bufs: emit(UOp("DEFINE_GLOBAL", dt, (), b))
  for v in k.ast.vars: emit(UOp("DEFINE_VAR", None, (), v))
  loop_vars = {i: Var(f"{'r' if k.is_reduce_axis(i) else 'g'}{i}", 0, smax(full[i]) - 1) for i in range(up)}
  upcast_axes = list(range(up, n))
  out_up = [i for i in upcast_axes if not k.is_reduce_axis(i)]
  lanes = list(itertools.product(*(range(full[i]) for i in upcast_axes)))
  st_of = dict(zip(k.leaves, k.sts))

  def const(val, dt: DType) -> int: return emit(UOp("CONST", dt, (), _scalar(val, dt)))

  def index(st, lane: dict[int, int]) -> tuple[sint, sint]:
    # axes where this tracker has size 1 read index 0 (the STORE at reduce axes, leaves above the reduce)
    idxs = [0 if st.shape[i] == 1 else lane[i] if i in lane else loop_vars[i] for i in range(n)]
    return st.expr_idxs(idxs)

  def value(node: LazyOp, lane: dict[int, int], memo: dict) -> int:
    key = (node, tuple(sorted(lane.items())))
    if key in memo: return memo[key]
    if node.op == "LOAD":
      idx, valid = index(st_of[node.arg], lane)
      r = const(0, node.dtype) if valid == 0 else emit(UOp("LOAD", node.dtype, (), (node.arg.buf, idx, valid)))
    elif node.op == "CONST":
      _, valid = index(st_of[node.arg], lane)
      r = const(node.arg.val if valid == 1 else 0, node.dtype) if isinstance(valid, int) else \
        emit(UOp("ALU", node.dtype, (emit(UOp("VALID", bool_, (), valid)), const(node.arg.val, node.dtype), const(0, node.dtype)), "WHERE"))
    else:
      src = tuple(value(s, lane, memo) for s in node.src)
      r = _fold(node, src, uops) if all(uops[s].op == "CONST" for s in src) else None
      r = const(r, node.dtype) if r is not None else \
        emit(UOp("CAST", node.dtype, src, node.arg.bitcast) if node.op == "CAST" else UOp("ALU", node.dtype, src, node.op))
    memo[key] = r
    return r

  def loop(axes: range, threads: int = 0) -> list[int]:
    for i in axes: emit(UOp("LOOP", None, (), (loop_vars[i], full[i], threads if i == 0 else 0)), dedup=False)
    return list(axes)

  outer = loop(range(fr), threads=full[0] if k.thread_dims else 0)
  reduced: dict[tuple, int] = {}
  red = k.reduceop
  if red is not None:
    out_lanes = list(itertools.product(*(range(full[i]) for i in out_up)))
    accs = {ol: emit(UOp("DEFINE_ACC", red.dtype.acc, (), _identity(red.arg.fn, red.dtype)), dedup=False) for ol in out_lanes}
    inner = loop(range(fr, up))
    memo: dict = {}
    parts: dict[tuple, list[int]] = {ol: [] for ol in out_lanes}
    for lane in lanes:
      l = dict(zip(upcast_axes, lane))
      v = value(red.src[0], l, memo)
      if red.dtype.acc != red.dtype: v = emit(UOp("CAST", red.dtype.acc, (v,), False))
      parts[tuple(l[i] for i in out_up)].append(v)
    op = "ADD" if red.arg.fn == "SUM" else "MAX"
    for ol, vs in parts.items():  # combine the unrolled lanes as a tree: independent adds, not one serial chain
      while len(vs) > 1: vs = [emit(UOp("ALU", red.dtype.acc, (a, b), op)) for a, b in zip(vs[::2], vs[1::2])] + vs[len(vs) & ~1:]
      accs[ol] = emit(UOp("ACC", red.dtype.acc, (accs[ol], vs[0]), red.arg.fn), dedup=False)
    for _ in inner: emit(UOp("ENDLOOP", None), dedup=False)
    seen.clear()  # values from inside the reduce loop are out of scope now
    for ol, a in accs.items():
      reduced[ol] = a if red.dtype.acc == red.dtype else emit(UOp("CAST", red.dtype, (a,), False))
  memo = {}
  for lane in itertools.product(*(range(full[i]) for i in out_up)):
    l = dict(zip(out_up, lane))
    if red is not None: memo[(red, tuple(sorted(l.items())))] = reduced[lane]
    v = value(k.ast.ast.src[0], l, memo)
    idx, valid = index(st_of[k.ast.ast.arg], l)
    if valid != 0: emit(UOp("STORE", None, (v,), (0, idx, valid)), dedup=False)
  for _ in outer: emit(UOp("ENDLOOP", None), dedup=False)
  return Program(name, uops, bufs, list(k.ast.vars))


def _scalar(val, dt: DType):
  return bool(val) if dt == bool_ else float(val) if dt.is_float else int(val)

def _fold(node: LazyOp, src: tuple[int, ...], uops: list[UOp]):
  """A constant result by the reference semantics, or None where that is not a plain scalar."""
  vals = [np.array([uops[s].arg], dtype=node.src[i].dtype.np) for i, s in enumerate(src)]
  with np.errstate(all="ignore"):
    out = cast(vals[0], node.src[0].dtype, node.arg.dtype, node.arg.bitcast) if node.op == "CAST" else alu(node.op, node.src[-1].dtype, vals)
  return np.asarray(out).astype(node.dtype.np)[0].item()
