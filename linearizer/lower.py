"""Lowering a Kernel to a linear IR: loops, accumulators, gated loads and stores, ALU ops.

Loop axes (thread, global, reduce) become LOOPs over symbolic loop variables; upcast axes are
unrolled into lanes, one value per combination of their indices. On a device with local dims
(GPU-style) global axes become work-group indices and local and grouped-reduce axes work-item
indices instead; a grouped reduce leaves one partial accumulator per work-item, which go through
local memory to the work-item of the group whose grouped indices are all 0, which reduces them. Every UOp is created once (common
subexpressions merge), constants fold by the reference semantics, and index and validity stay
symbolic expressions, simplified, until the renderer writes them.
"""
from __future__ import annotations
import collections, itertools, math
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Optional
import numpy as np
from linearizer.ast import ConstArg, KernelAST, LazyOp
from linearizer.dtypes import DType, bool_
from linearizer.kernel import Kernel
from linearizer.options import LinearizerOptions
from linearizer.reference import alu, cast
from linearizer.shapetracker import affine
from linearizer.symbolic import Var, lt, simplify_valid, simplify_where, sint, smax, substitute, variables

# ops: DEFINE_GLOBAL (arg: buf) DEFINE_VAR (arg: Var) LOOP (arg: (Var, end, threads)) ENDLOOP CONST (arg: value)
#      LOAD (arg: (buf, index, valid)) STORE (src: value; arg: (buf, index, valid)) ALU (arg: op) CAST (arg: bitcast)
#      DEFINE_ACC (arg: initial value) ACC (src: acc, operands; arg: the ALU op, ADD|MAX|MULACC, folding the operands
#      into acc, its last operand) VALID (arg: a symbolic condition, as a bool) VBROADCAST (src: a scalar)
#      VBUILD (src: one scalar per lane). ALU ops are the format's, and MULACC (src: a, b, c): a*b+c rounded once.
#      `vec` > 1: a value of that many lanes; a bool vector is a comparison's lane mask.
#      SPECIAL (arg: (Var, "group"|"local", launch dim)) DEFINE_LOCAL (arg: (name, elements)) BARRIER IF (arg: condition) ENDIF
#      WMMA (src: acc, A's fragment, B's; arg: TensorCore; vec: C's elements) D = A @ B + C of the warp's tile into acc,
#      like ACC. GEP (src: a vector; arg: lane) one lane of it.
#      A LOAD's or STORE's buf is an int for a kernel argument, a DEFINE_LOCAL's name for local memory.
# What lanes may carry as vectors: float32/float64 arithmetic, which C vector extensions do lane by lane as the scalar
# ops do; float16 only loaded, stored, reduced and converted (its arithmetic rounds per op through float32); bool
# only as masks from comparisons and casts, feeding a WHERE or a cast back to a float. EXP2/LOG2/SIN: the renderer's
# vector function where it has one (C: linearizer.vecmath's, float32), else lane by lane.
VEC_ARITH, VEC_MEMORY = ("float32", "float64"), ("float16", "float32", "float64")
VEC_ALU = ("ADD", "SUB", "MUL", "DIV", "NEG", "MAX", "CMPLT", "CMPEQ", "WHERE", "EXP2", "LOG2", "SIN")
VEC_CASTS = {("float16", "float32"), ("float32", "float16"), ("float32", "float64"), ("float64", "float32"),
             ("float32", "bool"), ("float64", "bool"), ("bool", "float32"), ("bool", "float64")}
FMA_DTYPES = ("float32", "float64")  # float16/bfloat16 round every op, as the reference does: never fused
ACC_CHAINS = 8  # accumulators enough to hide an FMA's latency (4 cycles, 2 a cycle): each product goes straight in


class UOps(StrEnum):
  """The linear IR's ops (above)."""
  DEFINE_GLOBAL = "DEFINE_GLOBAL"; DEFINE_VAR = "DEFINE_VAR"; DEFINE_LOCAL = "DEFINE_LOCAL"; DEFINE_ACC = "DEFINE_ACC"; SPECIAL = "SPECIAL"
  LOOP = "LOOP"; ENDLOOP = "ENDLOOP"; IF = "IF"; ENDIF = "ENDIF"; BARRIER = "BARRIER"
  CONST = "CONST"; LOAD = "LOAD"; STORE = "STORE"; VALID = "VALID"; ALU = "ALU"; CAST = "CAST"; ACC = "ACC"
  VBROADCAST = "VBROADCAST"; VBUILD = "VBUILD"; WMMA = "WMMA"; GEP = "GEP"


@dataclass(frozen=True)
class UOp:
  op: UOps
  dtype: Optional[DType]
  src: tuple[int, ...] = ()
  arg: Any = None
  vec: int = 1


class Program:
  """The linear IR of one kernel: uops in order, its buffers and variables, the opts it was scheduled with and, on a
  device with local dims, its launch: work-groups and work-items per launch dim (symbolic in the variables)."""
  def __init__(self, name: str, uops: list[UOp], buffers: list[tuple[int, DType]], vars: list[Var], opts: tuple = (),
               groups: tuple[sint, ...] = (), local: tuple[int, ...] = ()):
    self.name, self.uops, self.buffers, self.vars, self.opts, self.groups, self.local = name, uops, buffers, vars, opts, groups, local


def _identity(fn: str, dt: DType):
  if fn == "SUM": return 0
  return -float("inf") if dt.is_float else dt.min

def lower(k: Kernel, name: str = "kernel") -> Program:  # noqa: C901  (one 220-line function; follow-up: passes with explicit scopes, issue 16 item 3)
  uops: list[UOp] = []
  seen: dict[UOp, int] = {}
  def emit(u: UOp, dedup: bool = True) -> int:
    if dedup and u in seen: return seen[u]
    uops.append(u)
    if dedup: seen[u] = len(uops) - 1
    return len(uops) - 1

  full, n, fr, up = k.full_shape, k.shape_len, k.first_reduce, k.shape_len - k.upcasted
  bufs = [(b.buf, b.dtype) for b in k.ast.buffers]
  for b, dt in bufs: emit(UOp(UOps.DEFINE_GLOBAL, dt, (), b))
  for v in k.ast.vars: emit(UOp(UOps.DEFINE_VAR, None, (), v))
  loop_vars: dict[int, sint] = {i: 0 if full[i] == 1 else Var(f"{'_r' if k.is_reduce_axis(i) else '_g'}{i}", 0, smax(full[i]) - 1) for i in range(up)}
  gpu, gfr = k.options.has_local, k.group_for_reduces
  gdims, ldims, outer_axes = [], [], range(fr)
  if gpu:
    gidx, gdims, outer_axes = _launch("_gidx", range(k.thread_dims, fr - k.local_dims), full, k.options.global_max)
    lidx, ldims, _ = _launch("_lidx", range(fr - k.local_dims, fr + gfr), full, k.options.local_max)  # int sizes: always fit
    loop_vars.update(gidx)
    loop_vars.update(lidx)
  upcast_axes = list(range(up, n))
  out_up = [i for i in upcast_axes if not k.is_reduce_axis(i)]
  lanes = list(itertools.product(*(range(full[i]) for i in upcast_axes)))
  st_of = dict(zip(k.leaves, k.sts))

  def const(val, dt: DType) -> int:
    v = _scalar(val, dt)  # -0.0 == 0.0 as a key: a negative zero is never merged with the other
    return emit(UOp(UOps.CONST, dt, (), v), dedup=not (dt.is_float and v == 0 and math.copysign(1.0, v) < 0))
  lane_var = Var("_lane", 0, 0)
  vaxis = None if k.tensor_core else _vector_axis(k, out_up, loop_vars)
  W = full[vaxis] if vaxis is not None else 1
  if vaxis is not None:
    out_up = [i for i in out_up if i != vaxis]
    upcast_axes = [i for i in upcast_axes if i != vaxis]
    lanes = list(itertools.product(*(range(full[i]) for i in upcast_axes)))
    lane_var = Var("_lane", 0, W - 1)

  def index(st, lane: dict[int, int]) -> tuple[sint, sint]:
    # axes where this tracker has size 1 read index 0 (the STORE at reduce axes, leaves above the reduce);
    # the vector axis reads the symbolic lane. Index and validity only matter where the validity holds: simplified
    # under it, a padded view's index often loses its decode (// and %) and becomes affine in the loop variables
    idxs = [0 if st.shape[i] == 1 else lane[i] if i in lane else lane_var if i == vaxis else loop_vars[i] for i in range(n)]
    idx, valid = st.expr_idxs(idxs)
    valid = simplify_valid(valid)
    return simplify_where(idx, valid), valid

  def lane0(x: sint) -> sint: return substitute(x, {"_lane": 0})

  def vector_load(node: LazyOp, lane: dict[int, int]) -> int:
    """Contiguous along the vector axis: one vector load; stride 0: a broadcast; else one load per lane."""
    idx, valid = index(st_of[node.arg], lane)
    aff = affine(idx, [lane_var])
    if lane_var not in variables(valid) and aff is not None and aff[0][0] in (0, 1):
      if aff[0][0] == 1: return emit(UOp(UOps.LOAD, node.dtype, (), (node.arg.buf, lane0(idx), valid), W))
      return emit(UOp(UOps.VBROADCAST, node.dtype, (scalar_load(node.arg.buf, node.dtype, lane0(idx), valid),), None, W))
    lanes = tuple(scalar_load(node.arg.buf, node.dtype, substitute(idx, {"_lane": j}), substitute(valid, {"_lane": j})) for j in range(W))
    return emit(UOp(UOps.VBUILD, node.dtype, lanes, None, W))

  def scalar_load(buf: int, dt: DType, idx: sint, valid: sint) -> int:
    return const(0, dt) if valid == 0 else emit(UOp(UOps.LOAD, dt, (), (buf, idx, valid)))

  def value(node: LazyOp, lane: dict[int, int], memo: dict) -> int:
    key = (node, tuple(sorted(lane.items())))
    if key in memo: return memo[key]
    if node.op == "LOAD" and W > 1: r = vector_load(node, lane)
    elif node.op == "LOAD":
      idx, valid = index(st_of[node.arg], lane)
      r = scalar_load(node.arg.buf, node.dtype, idx, valid)
    elif node.op == "CONST":
      _, valid = index(st_of[node.arg], lane)  # lane-independent where vectorised (_vector_axis checks)
      c, zero = const(node.arg.val, node.dtype), const(0, node.dtype)  # one uop when the constant is 0 (not -0.0)
      r = (c if valid == 1 else zero) if isinstance(valid, int) or c == zero else \
        emit(UOp(UOps.ALU, node.dtype, (emit(UOp(UOps.VALID, bool_, (), valid)), c, zero), "WHERE"))
      if W > 1: r = emit(UOp(UOps.VBROADCAST, node.dtype, (r,), None, W))
    else:
      src = tuple(value(s, lane, memo) for s in node.src)
      r = _fold(node, src, uops) if W == 1 and all(uops[s].op is UOps.CONST for s in src) else None
      r = const(r, node.dtype) if r is not None else \
        emit(UOp(UOps.CAST, node.dtype, src, node.arg.bitcast, W) if node.op == "CAST" else UOp(UOps.ALU, node.dtype, src, node.op, W))
    memo[key] = r
    return r

  def loop(axes: range, threads: int = 0) -> list[int]:
    axes = [i for i in axes if full[i] != 1]  # a size-1 axis (what a whole-axis split leaves) reads index 0
    for i in axes: emit(UOp(UOps.LOOP, None, (), (loop_vars[i], full[i], threads if i == 0 else 0)), dedup=False)
    return axes

  sums: set[int] = set()  # the ALU ops combining a reduce's lanes
  red = k.reduceop
  if gpu:
    for kind, dims in (("group", gdims), ("local", ldims)):
      for d, (v, _) in enumerate(dims): emit(UOp(UOps.SPECIAL, None, (), (v, kind, d)))
    if gfr: temp = emit(UOp(UOps.DEFINE_LOCAL, red.dtype.acc, (), ("temp", math.prod(s for _, s in ldims) * math.prod(full[i] for i in out_up) * W)))
  outer = loop(outer_axes, threads=full[0] if k.thread_dims else 0)

  def define_accs(out_lanes) -> dict[tuple, int]:
    return {ol: emit(UOp(UOps.DEFINE_ACC, red.dtype.acc, (), _identity(red.arg.fn, red.dtype), W), dedup=False) for ol in out_lanes}

  def folder(accs: dict[tuple, int], chain: bool = False):
    """(add, done): add(output lane, value) for each value of an output lane, done() gives the accumulators after the
    last. Products that fuse into enough independent accumulators go straight in (`chain`), one FMA each (a longer
    serial sum per accumulator than the tree's, well inside the SUM's range), after all of the iteration's values;
    otherwise the values combine as a balanced tree first (independent ops, not one serial chain through the
    accumulator), two partial sums of a level as soon as both exist, so a few are live at once, not every lane's value.
    Both orders are gcc 12's compile time (CPU s, -O3 -march=native): a tree of 256 lanes (sops_8452, every value
    computed first) was vectorised with its lanes spilled, 20.7 s, and takes 1.7 s combined as it goes; 240 chained
    lanes of gated loads (sops_7806) take 4.8 s values first and 19.7 s with each FMA right after its loads."""
    op, dt = "ADD" if red.arg.fn == "SUM" else "MAX", red.dtype.acc
    def combine(a: int, b: int) -> int:  # never merged with an element-wise op: only these may fuse
      sums.add(i := emit(UOp(UOps.ALU, dt, (a, b), op, W), dedup=False))
      return i
    pending: dict[tuple, list] = {ol: [] for ol in accs}  # chained: its values; else (tree level, partial sum), levels decreasing
    def add(ol: tuple, v: int) -> None:
      level, stack = 0, pending[ol]
      while not chain and stack and stack[-1][0] == level: v, level = combine(stack.pop()[1], v), level + 1
      stack.append(v if chain else (level, v))
    def done() -> dict[tuple, int]:
      new = dict(accs)
      for ol, stack in pending.items():
        if chain: vs = stack
        elif stack:
          v = stack.pop()[1]
          while stack: v = combine(stack.pop()[1], v)
          vs = [v]
        else: vs = []
        for v in vs: new[ol] = emit(UOp(UOps.ACC, dt, (new[ol], v), op, W), dedup=False)
      return new
    return add, done

  def group_reduce(accs: dict[tuple, int]) -> dict[tuple, int]:
    """Every work-item's partial accumulators into local memory; after a barrier the work-item whose grouped indices are
    all 0 reduces its local position's partials, looping over the grouped axes and unrolling the UPCASTMID ones."""
    def slot(ix: dict[int, sint], j: int) -> sint:  # layout: [local and grouped axes..., output lane, vector lane]
      pos: sint = 0
      for i in range(fr - k.local_dims, fr + gfr): pos = pos * full[i] + ix[i]
      return (pos * len(accs) + j) * W
    for j, a in enumerate(accs.values()): emit(UOp(UOps.STORE, None, (a,), (uops[temp].arg[0], slot(loop_vars, j), 1), W), dedup=False)
    emit(UOp(UOps.BARRIER, None), dedup=False)
    emit(UOp(UOps.IF, None, (), lt(sum(loop_vars[i] for i in range(fr, fr + gfr)), 1)), dedup=False)
    grouped = [i for i in range(fr, fr + gfr) if full[i] != 1]
    mid = [i for i in grouped if i in k.upcast_in_mid_reduce]
    tvars = {i: Var(f"_t{i}", 0, full[i] - 1) for i in grouped if i not in mid}
    add, done = folder(define_accs(accs))
    for i, v in tvars.items(): emit(UOp(UOps.LOOP, None, (), (v, full[i], 0)), dedup=False)
    for m in itertools.product(*(range(full[i]) for i in mid)):
      ix = {**loop_vars, **tvars, **dict(zip(mid, m))}
      for j, ol in enumerate(accs): add(ol, emit(UOp(UOps.LOAD, red.dtype.acc, (), (uops[temp].arg[0], slot(ix, j), 1), W)))
    new = done()
    for _ in tvars: emit(UOp(UOps.ENDLOOP, None), dedup=False)
    seen.clear()
    return new

  def tensor_core_reduce() -> dict[tuple, int]:
    """One WMMA per tile (each combination of the other output upcasts) and unrolled reduce step: each lane's A and B
    fragments loaded where the fragment maps put its elements (the M, N and K axes read from the lane's id bits and the
    element's index through A's or B's map instead of C's, which the axes follow), the C fragment a vector accumulator
    whose elements are the output lanes C's map gives."""
    tc, a_ld, b_ld = k.tensor_core
    ax = k.tc_axes()
    lane_bits = {b: loop_vars[ax[f"l{b}"][0]] // (1 << ax[f"l{b}"][1]) % 2 for b in range(tc.lane_bits)}
    def bit(s: str, i: int) -> sint: return lane_bits[int(s[1:])] if s[0] == "l" else i >> int(s[1:]) & 1
    def frag(op: str, i: int) -> dict[int, sint]:  # the axes' values that address element i of A (op "a") or B ("b")
      # A's M bits (its rows) or B's N bits (its columns), on the axes C's map gives them; then K: A's column, B's row.
      # The element axes of C's other dim stay 0: the operand does not vary there.
      c_bits, own, kdim = (tc.c[0], tc.a[0], 1) if op == "a" else (tc.c[1], tc.b[1], 0)
      vals: dict[int, sint] = {axis: 0 for l, (axis, _) in ax.items() if l[0] == "e"}
      for c, s in zip(c_bits.split(), own.split()): vals[ax[c][0]] = vals.get(ax[c][0], 0) + bit(s, i) * (1 << ax[c][1])
      return vals | {ax["k"][0]: tc.coord(op, kdim, lane_bits, i)}
    nc, tc_up = tc.elements("c"), {axis for l, (axis, _) in ax.items() if l[0] in "ke"}
    tiles, steps = [i for i in out_up if i not in tc_up], [i for i in upcast_axes if i not in tc_up]
    accs = {t: emit(UOp(UOps.DEFINE_ACC, red.dtype.acc, (), _identity("SUM", red.dtype), nc), dedup=False)
            for t in itertools.product(*(range(full[i]) for i in tiles))}
    inner, memo = loop(range(fr, up)), {}
    for step in itertools.product(*(range(full[i]) for i in steps)):
      l = dict(zip(steps, step))
      a = [value(a_ld, l | frag("a", i), memo) for i in range(tc.elements("a"))]
      b = [value(b_ld, l | frag("b", i), memo) for i in range(tc.elements("b"))]
      t = tuple(l[i] for i in tiles)
      accs[t] = emit(UOp(UOps.WMMA, red.dtype.acc, (accs[t], *a, *b), tc, nc), dedup=False)
    for _ in inner: emit(UOp(UOps.ENDLOOP, None), dedup=False)
    seen.clear()
    out = {}
    for ol in itertools.product(*(range(full[i]) for i in out_up)):
      l = dict(zip(out_up, ol))
      j = sum((l[ax[f"e{b}"][0]] >> ax[f"e{b}"][1] & 1) << b for b in range(nc.bit_length() - 1))  # the element C's map puts here
      out[ol] = emit(UOp(UOps.GEP, red.dtype.acc, (accs[tuple(l[i] for i in tiles)],), j))
    return out

  reduced: dict[tuple, int] = {}
  if red is not None and k.tensor_core: reduced = tensor_core_reduce()  # the tensor core's accumulation is the SUM's dtype
  elif red is not None:
    accs = define_accs(list(itertools.product(*(range(full[i]) for i in out_up))))
    chain = red.arg.fn == "SUM" and red.src[0].op == "MUL" and red.dtype.name in FMA_DTYPES and len(accs) >= ACC_CHAINS
    add, done = folder(accs, chain)
    inner = loop(range(fr + gfr, up))
    memo: dict = {}
    for lane in lanes:
      l = dict(zip(upcast_axes, lane))
      v = value(red.src[0], l, memo)
      if red.dtype.acc != red.dtype: v = emit(UOp(UOps.CAST, red.dtype.acc, (v,), False, W))
      add(tuple(l[i] for i in out_up), v)
    accs = done()
    for _ in inner: emit(UOp(UOps.ENDLOOP, None), dedup=False)
    seen.clear()  # values from inside the reduce loop are out of scope now
    if gfr: accs = group_reduce(accs)
    for ol, a in accs.items():
      reduced[ol] = a if red.dtype.acc == red.dtype else emit(UOp(UOps.CAST, red.dtype, (a,), False, W))
  memo = {}
  for lane in itertools.product(*(range(full[i]) for i in out_up)):
    l = dict(zip(out_up, lane))
    if red is not None: memo[(red, tuple(sorted(l.items())))] = reduced[lane]
    v = value(k.ast.ast.src[0], l, memo)
    idx, valid = index(st_of[k.ast.ast.arg], l)
    if valid != 0: emit(UOp(UOps.STORE, None, (v,), (0, lane0(idx), valid), W), dedup=False)
  if gfr:
    emit(UOp(UOps.ENDIF, None), dedup=False)
    if outer: emit(UOp(UOps.BARRIER, None), dedup=False)  # local memory is written again in the next iteration
  for _ in outer: emit(UOp(UOps.ENDLOOP, None), dedup=False)
  launch = tuple(s for _, s in gdims), tuple(s for _, s in ldims)
  return Program(name, _fuse_mulacc(uops, sums), bufs, list(k.ast.vars), tuple(k.applied_opts), *launch)


def _launch(prefix: str, axes, full, maxes: Optional[tuple[int, ...]] = None,
            dims: int = 3) -> tuple[dict[int, sint], list[tuple[Var, sint]], list[int]]:
  """Axes onto at most `dims` launch dims, the innermost axis on dim 0 and the outermost ones sharing the last (decoded
  with // and %, so only the outermost of those may have a symbolic size; the rest stay loops): (each axis's index,
  each launch dim's index variable and size, the axes left to loops). A dim past the device's limit for it (`maxes`:
  CUDA has 65535 blocks in y and z, 2^31-1 in x) is merged with the dims inside it into dim 0, decoded alike."""
  axes = [i for i in axes if full[i] != 1][::-1]  # innermost first
  shared, loops = axes[dims - 1:], []
  while any(not isinstance(full[i], int) for i in shared[:-1]): loops.insert(0, shared.pop())
  groups = [[i] for i in axes[:dims - 1]] + ([shared] if shared else [])
  while maxes and (d := next((d for d, g in enumerate(groups) if smax(math.prod(full[i] for i in g)) > maxes[d]), 0)) > 0:
    merged = [i for g in groups[:d + 1] for i in g]
    if any(not isinstance(full[i], int) for i in merged[:-1]): break  # not decodable: the launch reports the limit
    groups = [merged] + groups[d + 1:]
  idx: dict[int, sint] = {}
  launch: list[tuple[Var, sint]] = []
  for d, group in enumerate(groups):
    size = math.prod(full[i] for i in group)
    v, div = Var(f"{prefix}{d}", 0, smax(size) - 1), 1
    for i in group:
      idx[i] = v // div if i == group[-1] else v // div % full[i]
      div *= full[i]
    launch.append((v, size))
  return idx, launch, loops


def _fuse_mulacc(uops: list[UOp], sums: set[int]) -> list[UOp]:
  """A float SUM's accumulate (ACC) or lane-combining ADD (in `sums`) of a product MUL(a, b) -> MULACC(a, b, acc):
  one op and one rounding instead of two. Only there: the fused term misses just its product's rounding, half an ulp
  of that term, which the reference's range for a SUM summed in another order covers. An element-wise a*b+c stays as
  the reference rounds it: a cancellation after it can magnify that half ulp past the tolerance (the fuzzer found
  such kernels: corpus GELU gradients, the elementwise_chain example). A MUL something else uses too stays: fusing it
  saves no op (it is computed anyway) and its users would see two different products."""
  uses = collections.Counter(s for u in uops for s in u.src)
  def product(i: int) -> bool:
    return uops[i].op is UOps.ALU and uops[i].arg == "MUL" and uops[i].dtype.name in FMA_DTYPES and uses[i] == 1
  fused: dict[int, UOp] = {}
  gone: set[int] = set()  # the products folded into their user
  for i, u in enumerate(uops):
    if i in sums and u.arg == "ADD" and (m := next((s for s in u.src if product(s)), None)) is not None:
      fused[i] = replace(u, src=(*uops[m].src, u.src[u.src[0] == m]), arg="MULACC")
    elif u.op is UOps.ACC and u.arg == "ADD" and product(m := u.src[1]):
      fused[i] = replace(u, src=(u.src[0], *uops[m].src), arg="MULACC")
    else: continue
    gone.add(m)
  out: list[UOp] = []
  at: dict[int, int] = {}  # old position -> new
  for i, u in enumerate(uops):
    if i in gone: continue
    at[i] = len(out)
    out.append(replace(u := fused.get(i, u), src=tuple(at[s] for s in u.src)))
  return out


def _vector_node(n: LazyOp) -> bool:
  if n.op == "CAST": return not n.arg.bitcast and (n.src[0].dtype.name, n.dtype.name) in VEC_CASTS
  if n.op in ("LOAD", "CONST", "STORE", "REDUCE"): return n.dtype.name in VEC_MEMORY
  return n.op in VEC_ALU and all(s.dtype.name in VEC_ARITH for s in (n.src[1:] if n.op == "WHERE" else n.src))  # WHERE: a mask, 2 floats

def vector_widths(ast: KernelAST, options: LinearizerOptions) -> tuple[int, ...]:
  """The lane counts this kernel's lanes can be carried as vectors of: none unless every node can be (on this device:
  its vector_dtypes), then the device's vector sizes (its float_vector_widths count float32 lanes) in lanes of the
  kernel's widest dtype."""
  if not all(_vector_node(n) and (n.dtype == bool_ or n.dtype.name in options.vector_dtypes) for n in ast.nodes): return ()
  size = max(n.dtype.itemsize for n in ast.nodes if n.dtype != bool_)
  return tuple(w * 4 // size for w in options.float_vector_widths if w * 4 % size == 0 and w * 4 // size > 1)

def _vector_axis(k: Kernel, out_up: list[int], loop_vars: dict) -> Optional[int]:
  """The output upcast axis to carry as vector lanes: a kernel whose every value can be a vector, a width the ISA
  has, and a STORE contiguous along it with a validity (and every CONST's) that does not depend on it."""
  widths = vector_widths(k.ast, k.options)
  for axis in reversed(out_up):
    if k.full_shape[axis] not in widths: continue
    lv = Var("_lane", 0, k.full_shape[axis] - 1)
    # the other upcast axes at every one of their values, not only at 0: a padded axis upcast twice (sops_4149) has a
    # STORE valid for every lane where the other upcast axis is 0 and for lane 0 only where it is 1
    ups = {i: Var(f"_up{i}", 0, k.full_shape[i] - 1) for i in range(k.shape_len - k.upcasted, k.shape_len)}
    def at(st):
      return st.expr_idxs([0 if st.shape[i] == 1 else lv if i == axis else loop_vars.get(i, ups.get(i, 0))  # noqa: B023  (this iteration's)
                           for i in range(k.shape_len)])
    idx, valid = at(k.sts[0])
    aff = affine(idx, [lv])
    if aff is None or aff[0][0] != 1 or lv in variables(valid): continue
    if any(lv in variables(at(st)[1]) for a, st in zip(k.leaves, k.sts) if isinstance(a, ConstArg)): continue
    return axis
  return None

def _scalar(val, dt: DType):
  return bool(val) if dt == bool_ else float(val) if dt.is_float else int(val)

def _fold(node: LazyOp, src: tuple[int, ...], uops: list[UOp]):
  """A constant result by the reference semantics, or None where that is not a plain scalar."""
  vals = [np.array([uops[s].arg], dtype=node.src[i].dtype.np) for i, s in enumerate(src)]
  with np.errstate(all="ignore"):
    out = cast(vals[0], node.src[0].dtype, node.arg.dtype, node.arg.bitcast) if node.op == "CAST" else alu(node.op, node.src[-1].dtype, vals)
  return np.asarray(out).astype(node.dtype.np)[0].item()
