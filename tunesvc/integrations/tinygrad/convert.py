"""tinygrad v0.8.0's live kernel AST -> a `tunesvc.kernel/1` document, in process: tinygrad's LazyOp tree over
MemBuffer/ConstBuffer/ShapeTracker args is the format's own model, so this is a walk over the tree, not a parse of its
text. The document is validated by `linearizer.ast.load`, as the service validates what it is sent."""
from __future__ import annotations
import math
from typing import Any
import numpy as np
from tinygrad.dtype import DType, ImageDType
from tinygrad.ops import LazyOp, BufferOps, ReduceOps, UnaryOps, BinaryOps, TernaryOps, MemBuffer, ConstBuffer, get_lazyop_info
from tinygrad.shape.shapetracker import ShapeTracker
from tinygrad.shape.symbolic import Node, NumNode, LtNode, AndNode
from linearizer.ast import FORMAT, KernelAST, load

ALU = {**{op: op.name for op in (UnaryOps.NEG, UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN, UnaryOps.SQRT)},
       **{op: op.name for op in BinaryOps}, TernaryOps.WHERE: "WHERE"}


class Unsupported(ValueError):
  """A kernel the format cannot say; the message is the fallback's reason, short enough to count by."""


def dtype_name(dt: DType) -> str:
  if isinstance(dt, ImageDType): raise Unsupported("image dtype")
  if dt.sz != 1: raise Unsupported("vector dtype")
  return "bfloat16" if dt.name == "__bf16" else np.dtype(dt.np).name

def sym(x: Any):
  """An int, or the symbolic string in the format's grammar: tinygrad renders Variables by name and + * // % in parens."""
  if isinstance(x, NumNode): return x.b
  if isinstance(x, (LtNode, AndNode)): raise Unsupported("symbolic comparison in a view")
  return x.render() if isinstance(x, Node) else int(x)

def lower_shape(shape: tuple) -> list:
  """A view below the last only decodes the flat position above it by its dims, and its outermost dim (every dim before
  it 1) is that position's quotient by the dims inside, which never reaches its size: a symbolic size there says no more
  than its upper bound, which the format takes (only the last view may be symbolic). Grouped KV heads over a KV cache of
  start_pos+1 rows are such a view; a symbolic dim further in stays, and fails validation."""
  outer = next((k for k, s in enumerate(shape) if sym(s) != 1), None)
  return [s.max if k == outer and isinstance(s, Node) else sym(s) for k, s in enumerate(shape)]

def st_doc(st: ShapeTracker) -> dict:
  return {"views": [{"shape": [sym(s) for s in v.shape] if i == len(st.views) - 1 else lower_shape(v.shape),
                     "strides": [sym(s) for s in v.strides], "offset": sym(v.offset),
                     "mask": None if v.mask is None else [[sym(lo), sym(hi)] for lo, hi in v.mask]} for i, v in enumerate(st.views)]}

def const_val(val: float, dt: str):
  if dt == "bool": return bool(val)
  if dt.startswith(("int", "uint")): return int(val)
  return val if math.isfinite(val) else "nan" if math.isnan(val) else "inf" if val > 0 else "-inf"


def to_document(ast: LazyOp) -> tuple[dict, list[int]]:
  """(the document, for each of its buffers the index of tinygrad's raw buffer it is): buffers are numbered densely, in
  the order of tinygrad's indices (the output is 0 in both)."""
  idxs = sorted({x.arg.idx for x in ast.lazyops if x.op in (BufferOps.LOAD, BufferOps.STORE)})
  buf = {idx: i for i, idx in enumerate(idxs)}
  seen: dict[int, dict] = {}  # a subtree tinygrad shares (one REDUCE under several parents) is one dict
  def node(x: LazyOp) -> dict:
    if id(x) not in seen: seen[id(x)] = _node(x)
    return seen[id(x)]
  def _node(x: LazyOp) -> dict:
    if x.op in (BufferOps.LOAD, BufferOps.STORE):
      assert isinstance(x.arg, MemBuffer)
      out = {"op": x.op.name, "arg": {"buf": buf[x.arg.idx], "dtype": dtype_name(x.arg.dtype), "st": st_doc(x.arg.st)}}
      return {**out, "src": [node(x.src[0])]} if x.op is BufferOps.STORE else out
    if x.op is BufferOps.CONST:
      assert isinstance(x.arg, ConstBuffer)
      dt = dtype_name(x.arg.dtype)
      return {"op": "CONST", "arg": {"val": const_val(x.arg.val, dt), "dtype": dt, "st": st_doc(x.arg.st)}}
    if x.op is UnaryOps.CAST:
      dt, bitcast = x.arg
      return {"op": "CAST", "src": [node(x.src[0])], "arg": {"dtype": dtype_name(dt), "bitcast": bool(bitcast)}}
    if x.op in ReduceOps:
      # tinygrad's arg is the reduced shape; the format names the axes. Reducing only size-1 dims changes nothing.
      axes = [i for i, (a, b) in enumerate(zip(get_lazyop_info(x.src[0]).shape, x.arg)) if sym(a) != sym(b)]
      return {"op": "REDUCE", "src": [node(x.src[0])], "arg": {"fn": x.op.name, "axis": axes}} if axes else node(x.src[0])
    if x.op in ALU: return {"op": ALU[x.op], "src": [node(s) for s in x.src]}
    raise Unsupported(f"op {x.op}")
  doc = {"format": FORMAT, "vars": [{"name": v.expr, "min": v.min, "max": v.max} for v in ast.vars()], "ast": node(ast)}
  return doc, idxs

def to_kernel(ast: LazyOp) -> tuple[KernelAST, list[int]]:
  """The validated kernel; Unsupported or KernelValidationError where tinygrad's kernel is outside the format."""
  doc, idxs = to_document(ast)
  return load(doc), idxs
