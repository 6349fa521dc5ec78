"""Lowering a Kernel to a linear IR: loops, accumulators, gated loads and stores, ALU ops.

Loop axes (thread, global, reduce) become LOOPs over symbolic loop variables; upcast axes are
unrolled into lanes, one value per combination of their indices. On a device with local dims
(GPU-style) global axes become work-group indices and local and grouped-reduce axes work-item
indices instead; a grouped reduce leaves one partial accumulator per work-item, which go through
local memory to the work-item of the group whose grouped indices are all 0, which reduces them. A blocked reduce (Kernel.BLOCK)
starts each accumulator from the output, where the previous block left it. Every UOp is created once (common
subexpressions merge), constants fold by the reference semantics, and index and validity stay
symbolic expressions, simplified, until the renderer writes them.
"""
from __future__ import annotations
import collections, contextlib, functools, itertools, math
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence
import numpy as np
from linearizer.ast import ConstArg, LazyOp, MemArg
from linearizer.dtypes import DType, bool_
from linearizer.kernel import Kernel
from linearizer.reference import alu, cast
from linearizer.shapetracker import ShapeTracker, View, affine
from linearizer.vectors import consecutive, step, vector_widths
from linearizer.symbolic import Var, add, concrete, ge, land, lt, mul, simplify_valid, simplify_where, sint, smax, substitute, variables

# ops: DEFINE_GLOBAL (arg: buf) DEFINE_VAR (arg: Var) LOOP (arg: (Var, end, threads)) ENDLOOP CONST (arg: value)
#      LOAD (arg: (buf, index, valid)) STORE (src: value; arg: (buf, index, valid)) ALU (arg: op) CAST (arg: bitcast)
#      DEFINE_ACC (arg: initial value) ACC (src: acc, operands; arg: the ALU op, ADD|MAX|MULACC, folding the operands
#      into acc, its last operand) VALID (arg: a symbolic condition, as a bool) VBROADCAST (src: a scalar)
#      VBUILD (src: one scalar per lane). ALU ops are the format's, and MULACC (src: a, b, c): a*b+c rounded once.
#      `vec` > 1: a value of that many lanes; a bool vector is a comparison's lane mask. A vector LOAD's lanes are
#      contiguous from its index, or where the index is in LANE, 2 apart; its valid may depend on LANE (lane_loads).
#      SPECIAL (arg: (Var, "group"|"local", launch dim)) DEFINE_LOCAL (arg: (name, elements)) BARRIER IF (arg: condition) ENDIF
#      WMMA (src: acc, A's fragment, B's; arg: TensorCore; vec: C's elements) D = A @ B + C of the warp's tile into acc,
#      like ACC. GEP (src: a vector; arg: lane) one lane of it. SHUFFLE (src: vectors a, b of `vec` lanes; arg: each lane's
#      index into a's lanes then b's, 0 to 2 * vec - 1) lanes of either, by constant indices (a packed copy's transpose).
#      A LOAD's or STORE's buf is an int for a kernel argument, a DEFINE_LOCAL's name for local memory.
FMA_DTYPES = ("float32", "float64")  # float16/bfloat16 round every op, as the reference does: never fused
ACC_CHAINS = 8  # accumulators enough to hide an FMA's latency (4 cycles, 2 a cycle): each product goes straight in
PACK_LINE = 16  # a packed copy's source read in lines of this many elements (64 bytes of floats): lower.pack
L1_WAY_BYTES = 4096  # one way of a CPU's L1 data cache (32 KB of 8 ways, 48 KB of 12): addresses this far apart share a set
L1_WAYS = 8  # the ways of one L1 set (Zen 3 and 4; 12 on Zen 5)
# output lanes (vectors) few enough that their values are emitted op by op across them: an element-wise chain's vectors
# are independent latency chains the core overlaps only side by side (4 chained SINs, 2 vectors a step, 1M floats:
# 4.80 ms one after the other); more would keep every lane's value live at once (a tile's 64 vectors spill)
INTERLEAVED = 4
AVX2_REGISTERS = 16  # vector registers of a CPU without AVX-512 (ymm; SSE's xmm)


class UOps(StrEnum):
  """The linear IR's ops (above)."""
  DEFINE_GLOBAL = "DEFINE_GLOBAL"; DEFINE_VAR = "DEFINE_VAR"; DEFINE_LOCAL = "DEFINE_LOCAL"; DEFINE_ACC = "DEFINE_ACC"; SPECIAL = "SPECIAL"
  LOOP = "LOOP"; ENDLOOP = "ENDLOOP"; IF = "IF"; ENDIF = "ENDIF"; BARRIER = "BARRIER"
  CONST = "CONST"; LOAD = "LOAD"; STORE = "STORE"; VALID = "VALID"; ALU = "ALU"; CAST = "CAST"; ACC = "ACC"
  VBROADCAST = "VBROADCAST"; VBUILD = "VBUILD"; WMMA = "WMMA"; GEP = "GEP"; SHUFFLE = "SHUFFLE"


@dataclass(frozen=True)
class UOp:
  op: UOps
  dtype: Optional[DType]
  src: tuple[int, ...] = ()
  arg: Any = None
  vec: int = 1

  @property
  def value_dtype(self) -> DType:
    """The dtype of a uop that has a value (none: DEFINE_VAR, SPECIAL, LOOP, IF, their ends, BARRIER, STORE)."""
    if self.dtype is None: raise ValueError(f"{self.op} has no value")
    return self.dtype


class Program:
  """The linear IR of one kernel: uops in order, its buffers and variables, the opts it was scheduled with and, on a
  device with local dims, its launch: work-groups and work-items per launch dim (symbolic in the variables)."""
  def __init__(self, name: str, uops: list[UOp], buffers: list[tuple[int, DType]], vars: list[Var], opts: tuple = (),
               groups: tuple[sint, ...] = (), local: tuple[int, ...] = ()):
    self.name, self.uops, self.buffers, self.vars, self.opts, self.groups, self.local = name, uops, buffers, vars, opts, groups, local


Lane = tuple[int, ...]          # an output lane: its index on each output upcast axis
At = Mapping[int, sint]           # the index upcast axes read (a tensor core's A and B fragments: symbolic in the lane id)
Memo = dict[tuple[LazyOp, tuple[tuple[int, sint], ...]], int]  # a pass's values so far: (node, its At's items) -> uop
Loop = tuple[sint, sint, int]   # a LOOP's arg: (its variable, its end, threads)
SHARED = "temp"                 # the grouped reduce's local memory
LANE = "_lane"                  # the vector axis's lane, in a vector LOAD's validity where it depends on it (lane_loads)


def _identity(fn: str, dt: DType) -> int | float:
  if fn == "SUM": return 0
  return -float("inf") if dt.is_float else dt.min

class PastLimit(Exception):
  """lower(k, limit): the fused IR would be over limit ops (the lowering stopped there)."""


def lower(k: Kernel, name: str = "kernel", limit: Optional[int] = None) -> Program:
  """The kernel's linear IR: the declarations, the loops outside the reduce, the reduce (plain, grouped or on tensor
  cores), the stores; then products fused into their accumulates. Each loop nest and IF is a scope (_Lowering.scope).
  Lowered twice where a padded row's vector load could be a shifted one the kernel loads anyway (_Lowering.loaded).
  With `limit`, PastLimit as soon as the IR is sure to end over it: 2x limit uops emitted before any shifted load could
  be (the second lowering emits the same ones up to there), a fused product taking one op away per fold at most."""
  lo = _lower(k, frozenset(), 2 * limit if limit is not None else None)
  if lo.shiftable: lo = _lower(k, frozenset(u.arg for u in lo.uops if u.op is UOps.LOAD and u.vec == lo.W > 1 and LANE not in _names(u.arg[2])))
  launch = tuple(s for _, s in lo.gdims), tuple(concrete(s) for _, s in lo.ldims)  # LOCAL and GROUP split int sizes
  return Program(name, _fuse_mulacc(lo.uops, lo.sums), lo.bufs, list(k.ast.vars), tuple(k.applied_opts), *launch)

def _names(x: sint) -> set[str]: return {v.name for v in variables(x)}

def _lower(k: Kernel, loaded: frozenset, stop: Optional[int] = None) -> _Lowering:
  lo = _Lowering(k, loaded, stop)
  bufs = [(b.buf, b.dtype) for b in k.ast.buffers]
  for b, dt in bufs: lo.emit(UOp(UOps.DEFINE_GLOBAL, dt, (), b))
  for v in k.ast.vars: lo.emit(UOp(UOps.DEFINE_VAR, None, (), v))
  for kind, dims in (("group", lo.gdims), ("local", lo.ldims)):
    for d, (v, _) in enumerate(dims): lo.emit(UOp(UOps.SPECIAL, None, (), (v, kind, d)))
  if lo.gfr:
    assert k.reduceop is not None  # GROUP is for a reduce axis
    size = math.prod(s for _, s in lo.ldims) * math.prod(lo.full[i] for i in lo.out_up) * lo.W
    lo.emit(UOp(UOps.DEFINE_LOCAL, k.reduceop.dtype.acc, (), (SHARED, size)))
  # a THREAD split into more parts than the device has cores runs them on its cores (schedule(static): each thread's parts
  # adjacent), one thread none: more threads than cores wait for each other at the join (a 0.4 ms conv, 2 cores, busy
  # machine: THREAD 8 least 724 us, 90th percentile 26.7 ms; THREAD 2 393 us, 13.6 ms)
  threads = min(concrete(lo.full[0]), k.options.threads) if k.thread_dims else 0
  threads = threads if threads > 1 else 0
  blocks = [i for i in lo.outer if i < k.thread_dims + k.block_dims]
  # each packed copy is made once per block of the axes it varies along, right inside the innermost of their loops, not
  # again in the block loops inside that it does not vary along (a matmul's A block across the column blocks); inside
  # the threads' loop, where there are threads: a copy is on its thread's stack
  at = {j: max([n + 1 for n, i in enumerate(blocks) if i in k.varies(j) or i == 0 and threads], default=0) for j in k.packed}
  with contextlib.ExitStack() as opened:
    for n, i in enumerate([*blocks, None]):
      for j in k.packed:
        if at[j] == n: lo.pack(j, blocks[:n])
      if i is not None: opened.enter_context(lo.scope([(lo.loop_vars[i], lo.full[i], threads if i == 0 else 0)]))
    inner = [i for i in lo.outer if i >= k.thread_dims + k.block_dims]  # on a GPU the launch's axes are no loops
    with lo.scope([(lo.loop_vars[i], lo.full[i], 0) for i in inner]): lo.body()
  lo.bufs = bufs
  return lo


class _Lowering:
  """One kernel's lowering: its layout as the passes read it (each loop axis's index, the upcast axes unrolled into
  lanes, the vector axis carried as `W` lanes of one value), the uops so far, and the common subexpressions of the
  scope being emitted into, which every uop goes through (emit)."""
  def __init__(self, k: Kernel, loaded: frozenset = frozenset(), stop: Optional[int] = None):
    self.k, self.red = k, k.reduceop
    self.uops: list[UOp] = []
    self.stop = stop  # uops past which a first lowering raises PastLimit (lower's limit)
    # the (buf, index, valid) of every vector LOAD whose lanes are all valid together, from a first lowering: where such
    # a load's validity holds, all its lanes are in bounds (the kernel reads them), so a padded row's lanes that are
    # valid under that validity are that load's lanes, shifted (shifted), with no memory access of their own
    self.loaded, self.shiftable = loaded, False
    self.bufs: list[tuple[int, DType]] = []
    self.seen: dict[UOp, int] = {}
    self.sums: set[int] = set()  # the ALU ops combining a reduce's lanes (_fuse_mulacc may fuse only these)
    full = self.full = k.full_shape
    self.n, self.fr, self.up, self.gfr = k.shape_len, k.first_reduce, k.shape_len - k.upcasted, k.group_for_reduces
    self.loop_vars: dict[int, sint] = {i: 0 if full[i] == 1 else Var(f"{'_r' if k.is_reduce_axis(i) else '_g'}{i}", 0, smax(full[i]) - 1)
                                       for i in range(self.up)}
    self.gdims: list[tuple[Var, sint]] = []
    self.ldims: list[tuple[Var, sint]] = []
    outer: Sequence[int] = range(self.fr)
    if k.options.has_local:
      gidx, self.gdims, outer = _launch("_gidx", range(k.thread_dims, self.fr - k.local_dims), full, k.options.global_max)
      lidx, self.ldims, _ = _launch("_lidx", range(self.fr - k.local_dims, self.fr + self.gfr), full, k.options.local_max)  # int sizes: always fit
      self.loop_vars.update(gidx)
      self.loop_vars.update(lidx)
    self.outer = [i for i in outer if full[i] != 1]  # a size-1 axis (what a whole-axis split leaves) reads index 0
    out_up = [i for i in range(self.up, self.n) if not k.is_reduce_axis(i)]
    self.vaxis = None if k.tensor_core else _vector_axis(k, out_up, self.loop_vars)
    # else an unrolled reduce axis as the vector on a CPU: vector accumulators, their lanes summed once after the loop
    # (not where a blocked reduce stores its accumulators: the output holds one value per output lane)
    self.reduce_vector = self.vaxis is None and not k.tensor_core and not k.options.has_local and not k.blocked_reduce and \
      (vaxis := _reduce_vector_axis(k, [i for i in range(self.up, self.n) if k.is_reduce_axis(i)], self.loop_vars)) is not None
    if self.reduce_vector: self.vaxis = vaxis
    self.W = concrete(full[self.vaxis]) if self.vaxis is not None else 1
    self.lane_var = Var(LANE, 0, self.W - 1)
    self.upcast_axes = [i for i in range(self.up, self.n) if i != self.vaxis]
    self.out_up = [i for i in out_up if i != self.vaxis]
    self.st_of = dict(zip(k.leaves, k.sts))
    self.buf_of: dict[Any, int | str] = {a: a.buf for a in k.leaves if isinstance(a, MemArg)}
    for j in k.packed:  # a packed LOAD reads its copy: local memory over its pack axes, row-major, the vector axis innermost
      size, strides = 1, {}
      for i in reversed(self.pack_order(j)): strides[i], size = size, size * concrete(full[i])
      # the leaf's own shape: an axis it is broadcast along keeps size 1, so index() reads 0 there as for any leaf (an
      # upcast axis there has no lane of its own to read)
      self.st_of[k.leaves[j]] = ShapeTracker((View.create(k.sts[j].shape, [strides.get(i, 0) for i in range(self.n)]),))
      self.buf_of[k.leaves[j]] = f"pack{j}"

  def pack_order(self, leaf: int) -> list[int]: return sorted(self.k.pack_axes(leaf), key=lambda i: (i == self.vaxis, i))

  # ---- emitting
  def emit(self, u: UOp, dedup: bool = True) -> int:
    if dedup and u in self.seen: return self.seen[u]
    self.uops.append(u)
    if self.stop is not None and len(self.uops) > self.stop and not self.shiftable: raise PastLimit()
    if dedup: self.seen[u] = len(self.uops) - 1
    return len(self.uops) - 1

  @contextlib.contextmanager
  def scope(self, loops: Sequence[Loop] = (), cond: Optional[sint] = None) -> Iterator[None]:
    """A block: an IF on `cond` and/or LOOPs. What is made inside stays inside: after the block no new uop merges with
    one of its uops (the common subexpressions are those from before it again)."""
    outside = dict(self.seen)
    if cond is not None: self.emit(UOp(UOps.IF, None, (), cond), dedup=False)
    for loop in loops: self.emit(UOp(UOps.LOOP, None, (), loop), dedup=False)
    yield
    for _ in loops: self.emit(UOp(UOps.ENDLOOP, None), dedup=False)
    if cond is not None: self.emit(UOp(UOps.ENDIF, None), dedup=False)
    self.seen = outside

  def loops(self, axes: range) -> list[Loop]:
    return [(self.loop_vars[i], self.full[i], 0) for i in axes if self.full[i] != 1]

  def lanes(self, axes: Sequence[int]) -> Iterator[dict[int, int]]:
    """Each combination of the (upcast) axes' indices."""
    for ix in itertools.product(*(range(concrete(self.full[i])) for i in axes)): yield dict(zip(axes, ix))

  def const(self, val: Any, dt: DType) -> int:
    v = _scalar(val, dt)  # -0.0 == 0.0 as a key: a negative zero is never merged with the other
    return self.emit(UOp(UOps.CONST, dt, (), v), dedup=not (dt.is_float and v == 0 and math.copysign(1.0, v) < 0))

  # ---- values
  def indices(self, st: ShapeTracker, lane: At) -> tuple[sint, ...]:
    """The index on each axis that `st` is read at for this lane: the vector axis at the symbolic lane. 0 where the index
    is not read (st's size 1: the STORE at reduce axes, leaves above the reduce; no stride and no mask: a broadcast), so
    lanes that read the same element ask _index once."""
    top = st.views[-1]
    return tuple(0 if st.shape[i] == 1 or not top.reads(i) else lane[i] if i in lane else self.lane_var if i == self.vaxis
                 else self.loop_vars[i] for i in range(self.n))

  def index(self, st: ShapeTracker, lane: At) -> tuple[sint, sint]: return _index(st, self.indices(st, lane))

  def vector_load(self, node: LazyOp, lane: At) -> int:
    """Contiguous along the vector axis: one vector load; stride 2 (a strided conv's row): two, their even lanes;
    (where the validity depends on the lane, a padded axis's edge, only where every lane is valid: lane_loads);
    stride 0: a broadcast; else one load per lane."""
    idx, valid = self.index(self.st_of[node.arg], lane)
    aff, buf = affine(idx, [self.lane_var]), self.buf_of[node.arg]
    if aff is not None and aff[0][0] == 1:
      if self.lane_var in variables(valid) and (r := self.shifted(node.dtype, buf, _lane0(idx), valid)) is not None: return r
      return self.emit(UOp(UOps.LOAD, node.dtype, (), (buf, _lane0(idx), valid), self.W))
    if aff is not None and aff[0][0] == 2 and self.W > 2: return self.emit(UOp(UOps.LOAD, node.dtype, (), (buf, idx, valid), self.W))
    if self.lane_var not in variables(valid) and aff is not None and aff[0][0] == 0:
      return self.emit(UOp(UOps.VBROADCAST, node.dtype, (self.scalar_load(buf, node.dtype, _lane0(idx), valid),), None, self.W))
    return self.gathered(node.dtype, buf, idx, valid)

  def gathered(self, dt: DType, buf: int | str, idx: sint, valid: sint) -> int:
    """A vector of one load per lane."""
    lanes = tuple(self.scalar_load(buf, dt, substitute(idx, {LANE: j}), substitute(valid, {LANE: j})) for j in range(self.W))
    return self.emit(UOp(UOps.VBUILD, dt, lanes, None, self.W))

  def shifted(self, dt: DType, buf: int | str, idx: sint, valid: sint) -> Optional[int]:
    """A contiguous row at `idx` whose lanes are each never valid or valid under one lane-free condition (a padded conv's
    row shifted by its window): the lanes of the vector LOAD the kernel makes under that condition `s` elements on,
    where there is one (self.loaded), else None (and a second lowering is asked for where one could be)."""
    live = [(j, v) for j in range(self.W) if (v := substitute(valid, {LANE: j})) != 0]
    if not live or any(v != live[0][1] for _, v in live) or LANE in _names(cond := live[0][1]): return None
    for s in range(1 - self.W, self.W):
      if all(0 <= j - s < self.W for j, _ in live):
        self.shiftable = True
        if (buf, add(idx, s), cond) in self.loaded:
          row = self.emit(UOp(UOps.LOAD, dt, (), (buf, add(idx, s), cond), self.W))
          lanes = {j: self.emit(UOp(UOps.GEP, dt, (row,), j - s)) for j, _ in live}
          return self.emit(UOp(UOps.VBUILD, dt, tuple(lanes.get(j, self.const(0, dt)) for j in range(self.W)), None, self.W))
    return None

  def _contiguous(self, idx: sint) -> bool:
    """Whether the lanes of the vector axis are consecutive elements at `idx` (an output is strided along a vector axis
    _vector_axis picked for a packed operand)."""
    return self.W == 1 or step(idx, self.lane_var) == 1

  def scalar_load(self, buf: int | str, dt: DType, idx: sint, valid: sint) -> int:
    return self.const(0, dt) if valid == 0 else self.emit(UOp(UOps.LOAD, dt, (), (buf, idx, valid)))

  def value(self, node: LazyOp, lane: At, memo: Memo) -> int:
    """The uop of `node` at this lane (each upcast axis's index); `memo`: the pass's values so far."""
    key = (node, _items(lane))
    if key in memo: return memo[key]
    W = self.W
    if node.op == "LOAD" and W > 1: r = self.vector_load(node, lane)
    elif node.op == "LOAD":
      idx, valid = self.index(self.st_of[node.arg], lane)
      r = self.scalar_load(self.buf_of[node.arg], node.dtype, idx, valid)
    elif node.op == "CONST":
      _, valid = _read(st := self.st_of[node.arg], self.indices(st, lane))  # lane-independent where vectorised (_vector_axis checks)
      c, zero = self.const(node.arg.val, node.dtype), self.const(0, node.dtype)  # one uop when the constant is 0 (not -0.0)
      r = (c if valid == 1 else zero) if isinstance(valid, int) or c == zero else \
        self.emit(UOp(UOps.ALU, node.dtype, (self.emit(UOp(UOps.VALID, bool_, (), valid)), c, zero), "WHERE"))
      if W > 1: r = self.emit(UOp(UOps.VBROADCAST, node.dtype, (r,), None, W))
    else:
      src = tuple(self.value(s, lane, memo) for s in node.src)
      # an op on broadcasts is one scalar op, broadcast (not a comparison: a mask's lanes are -1, a bool is 1)
      if W > 1 and node.dtype != bool_ and all(self.uops[s].op is UOps.VBROADCAST for s in src):
        r = self.emit(UOp(UOps.VBROADCAST, node.dtype, (self.op(node, tuple(self.uops[s].src[0] for s in src), 1),), None, W))
      else: r = self.op(node, src, W)
    memo[key] = r
    return r

  def op(self, node: LazyOp, src: tuple[int, ...], w: int) -> int:
    """`node`'s ALU op or CAST on `w` lanes of `src`, folded where they are constants."""
    folded = _fold(node, src, self.uops) if w == 1 and all(self.uops[s].op is UOps.CONST for s in src) else None
    if folded is not None: return self.const(folded, node.dtype)
    return self.emit(UOp(UOps.CAST, node.dtype, src, node.arg.bitcast, w) if node.op == "CAST" else UOp(UOps.ALU, node.dtype, src, node.op, w))

  # ---- the passes inside the outer loops
  def pack(self, j: int, opened: Sequence[int]) -> None:
    """Packed leaf j's elements for this thread and block, copied (its validity applied: 0 where it reads none) into a
    local buffer on the thread's stack in the order of its pack axes, which the loads inside read (st_of, buf_of). The
    `opened` thread and block loops are open: they hold every such axis the leaf varies along (its value at any index
    of the others is its value at 0)."""
    a, st, axes = self.k.leaves[j], self.k.sts[j], self.pack_order(j)
    name, size = str(self.buf_of[a]), math.prod(concrete(self.full[i]) for i in axes)
    self.emit(UOp(UOps.DEFINE_LOCAL, a.dtype, (), (name, size)), dedup=False)
    pv = {i: Var(f"_p{j}_{i}", 0, concrete(self.full[i]) - 1) for i in axes}
    if self.pack_transposed(j, axes, pv, opened): return
    loops: list[Loop] = [(v, self.full[i], 0) for i, v in pv.items()]
    at: dict[int, sint] = dict(pv)
    if (line := self.pack_line(j, axes, pv)) is not None:
      # the copy's innermost axis reads the source far apart (a conv's weights along the output channels: rows 8 KB apart,
      # which share L1's sets) and another axis reads it contiguously (the input channels): that one in lines of PACK_LINE
      # elements, each line's loop innermost, so every source line is read whole at once and the copy's lines it writes
      # are few (1x1 conv 2048->512 7x7, 1 thread, busy Zen 4: the pack 0.62 of 1.55 ms)
      c, n = line, concrete(self.full[line]) // PACK_LINE
      outer, inner = Var(f"_p{j}_{c}o", 0, n - 1), Var(f"_p{j}_{c}i", 0, PACK_LINE - 1)
      at[c] = add(outer * PACK_LINE, inner)
      loops = [(outer, n, 0) if v is pv[c] else lp for lp, v in zip(loops, pv.values())] + [(inner, PACK_LINE, 0)]
    with self.scope(loops):
      ix = self.pack_index(j, at, opened)
      idx, valid = st.expr_idxs(ix)
      valid = simplify_valid(valid)
      v = self.scalar_load(a.buf, a.dtype, simplify_where(idx, valid), valid)
      self.emit(UOp(UOps.STORE, None, (v,), (name, self.st_of[a].expr_idxs(ix)[0], 1)), dedup=False)

  def pack_index(self, j: int, at: Mapping[int, sint], opened: Sequence[int]) -> list[sint]:
    """The index on each axis of an element of packed leaf j's copy: `at` on its pack axes, the open loops' elsewhere."""
    st = self.k.sts[j]
    return [at[i] if i in at else self.loop_vars[i] if i in opened and st.shape[i] != 1 else 0 for i in range(self.n)]

  def pack_transposed(self, j: int, axes: list[int], pv: dict[int, Var], opened: Sequence[int]) -> bool:
    """pack's copy in blocks of W x W elements transposed in registers, where its innermost axis reads the source rows
    apart and another of its axes reads it contiguously, both multiples of the vector's W lanes long, nothing masked:
    each block's W rows loaded as vectors, transposed (`transposed`) and stored as W vectors of the copy. Element by
    element, the weights' copy of the 1x1 conv 2048->512 7x7 was ~40% of that kernel; its hand-edited C with this copy
    ran the kernel 1.34x (session 19, busy Intel AVX-512). False where it does not apply: the copy is element by element."""
    W, a, st = self.W, self.k.leaves[j], self.k.sts[j]
    if W < 2 or W & (W - 1) or len(axes) < 2 or concrete(self.full[v := axes[-1]]) % W: return False
    idx, _ = st.expr_idxs(self.pack_index(j, pv, opened))
    c = next((i for i in axes[:-1] if step(idx, pv[i]) == 1 and concrete(self.full[i]) % W == 0), None)
    if c is None or step(idx, pv[v]) == 1: return False
    # each of the two axes as a block's index (where there are several blocks) times W plus a lane within the block
    blocks = {i: Var(f"_p{j}_{i}b", 0, n - 1) for i in (c, v) if (n := concrete(self.full[i]) // W) > 1}
    lanes = {i: Var(f"_p{j}_{i}l", 0, W - 1) for i in (c, v)}
    at = {**pv, **{i: add(blocks[i] * W, lanes[i]) if i in blocks else lanes[i] for i in (c, v)}}
    ix = self.pack_index(j, at, opened)
    idx, valid = st.expr_idxs(ix)
    src, dst = affine(idx, [lanes[c], lanes[v]]), affine(self.st_of[a].expr_idxs(ix)[0], [lanes[c], lanes[v]])
    if simplify_valid(valid) != 1 or src is None or dst is None or src[0][0] != 1 or not isinstance(src[0][1], int) or dst[0][1] != 1: return False
    loops: list[Loop] = [(blocks[i], concrete(self.full[i]) // W, 0) if i in (c, v) else (pv[i], self.full[i], 0)
                         for i in axes if i in blocks or i not in (c, v)]
    with self.scope(loops):
      rows = [self.emit(UOp(UOps.LOAD, a.dtype, (), (a.buf, add(src[1], r * src[0][1]), 1), W)) for r in range(W)]
      for q, col in enumerate(self.transposed(rows, a.dtype)):
        self.emit(UOp(UOps.STORE, None, (col,), (str(self.buf_of[a]), add(dst[1], mul(q, dst[0][0])), 1), W), dedup=False)
    return True

  def transposed(self, rows: list[int], dt: DType) -> list[int]:
    """The square block whose rows are the vectors `rows` (as many as their lanes), as its columns: log2 of the lanes
    stages, each of which swaps one bit between the row index and the lane index -- rows r and r + d (d that bit, clear
    in r) exchange r's lanes with the bit set for r + d's lanes with it clear, a two-input shuffle for each."""
    w, d = len(rows), len(rows) // 2
    while d:
      lo = tuple(i if i & d == 0 else w + i - d for i in range(w))  # row r: lanes with the bit clear from r, the rest from r + d
      hi = tuple(i + d if i & d == 0 else w + i for i in range(w))  # row r + d
      rows = [self.emit(UOp(UOps.SHUFFLE, dt, (rows[r & ~d], rows[r | d]), hi if r & d else lo, w)) for r in range(w)]
      d //= 2
    return rows

  def pack_line(self, j: int, axes: list[int], pv: dict[int, Var]) -> Optional[int]:
    """pack's axis to copy in lines: one that reads packed leaf j's source contiguously, a multiple of PACK_LINE long and
    longer, where the copy's innermost axis reads it a multiple of L1_WAY_BYTES apart, its elements more than L1_WAYS in
    one L1 set, each evicting another's line before the next element reads it (None where none). Not where they spread
    over sets (rows 768 floats apart, 3 KB: 4 sets; sops_2421, sops_3777 0.83-0.86x in lines) or fit one's ways (AVX2's 8
    lanes: sops_1381 0.80x)."""
    if len(axes) < 2: return None
    idx, _ = self.k.sts[j].expr_idxs([pv.get(i, 0) for i in range(self.n)])
    if concrete(self.full[axes[-1]]) <= L1_WAYS: return None
    if not isinstance(s := step(idx, pv[axes[-1]]), int) or s == 0 or s * self.k.leaves[j].dtype.itemsize % L1_WAY_BYTES: return None
    return next((i for i in axes[:-1] if step(idx, pv[i]) == 1 and (m := concrete(self.full[i])) % PACK_LINE == 0 and m > PACK_LINE), None)

  def body(self) -> None:
    """The reduce, if any, and the stores. A grouped reduce's work-items share their partial accumulators, and only the
    group's first work-item (its grouped indices all 0) folds them and stores."""
    if self.red is None: return self.store({})
    if self.k.tensor_core: return self.store(self.tensor_core_reduce(self.red))  # accumulated in the SUM's dtype
    accs = self.reduce(self.red)
    if self.reduce_vector: accs = self.across_lanes(self.red, accs)
    if not self.gfr and self.k.blocked_reduce and self.k.ast.ast.src[0] is not self.red:
      # a blocked reduce under an epilogue (a bias, BatchNorm): the output holds the raw partial sums until the last block
      # (every blocked reduce index at its end), which stores the epilogue of the whole sum
      accs, at, end = self.narrowed(self.red, accs), self.reduce_block_at(), sum(smax(self.full[i]) - 1 for i in self.k.reduce_blocks)
      with self.scope(cond=lt(at, end)): self.store(accs, self.red)
      with self.scope(cond=ge(at, end)): self.store(accs)
      return None
    if not self.gfr: return self.store(self.narrowed(self.red, accs))
    for j, a in enumerate(accs.values()):
      self.emit(UOp(UOps.STORE, None, (a,), (SHARED, self.slot(self.loop_vars, j, len(accs)), 1), self.W), dedup=False)
    self.emit(UOp(UOps.BARRIER, None), dedup=False)
    with self.scope(cond=lt(sum(self.loop_vars[i] for i in range(self.fr, self.fr + self.gfr)), 1)):
      self.store(self.narrowed(self.red, self.group_reduce(self.red, accs)))
    if self.outer: self.emit(UOp(UOps.BARRIER, None), dedup=False)  # local memory is written again in the next iteration

  def define_accs(self, red: LazyOp, out_lanes: Iterable[Lane]) -> dict[Lane, int]:
    return {ol: self.emit(UOp(UOps.DEFINE_ACC, red.dtype.acc, (), _identity(red.arg.fn, red.dtype), self.W), dedup=False) for ol in out_lanes}

  def narrowed(self, red: LazyOp, accs: dict[Lane, int]) -> dict[Lane, int]:
    """The accumulators in the reduce's own dtype."""
    if red.dtype.acc == red.dtype: return accs
    return {ol: self.emit(UOp(UOps.CAST, red.dtype, (a,), False, self.W)) for ol, a in accs.items()}

  def reduce(self, red: LazyOp) -> dict[Lane, int]:
    """Each output lane's accumulator after the reduce loops, every upcast lane's value folded in each iteration."""
    accs = self.define_accs(red, [tuple(l.values()) for l in self.lanes(self.out_up)])
    if self.k.blocked_reduce: accs = self.resumed(red, accs)
    chain = red.arg.fn == "SUM" and red.src[0].op == "MUL" and red.dtype.name in FMA_DTYPES and len(accs) >= ACC_CHAINS
    eager = chain and self.eager_chain(red, len(accs))
    fold, memo = _Folder(self, red, accs, chain, eager), Memo()
    # eager: a loop step's reduce lanes outermost, each output lane's product folded in as soon as it is made, the
    # output axes smallest innermost (a 4x2 tile: a row's broadcast and the step's 2 vectors of B live, not 8 and 4)
    red_up = [i for i in self.upcast_axes if i not in self.out_up]
    order = red_up + sorted(self.out_up, key=lambda i: -concrete(self.full[i])) if eager else self.upcast_axes
    with self.scope(self.loops(range(self.fr + self.gfr, self.up))):  # the reduce loop's values are out of scope after it
      for l in self.lanes(order):
        v = self.value(red.src[0], l, memo)
        if red.dtype.acc != red.dtype: v = self.emit(UOp(UOps.CAST, red.dtype.acc, (v,), False, self.W))
        fold.add(tuple(l[i] for i in self.out_up), v)
      return fold.done()

  def eager_chain(self, red: LazyOp, accs: int) -> bool:
    """CPUs: are a chained reduce's accumulators few enough to stay in registers beside a product's operands, while with
    every value of a loop step as well they would not? Then its products go in as they are made (_Folder): gcc keeps
    the order it is given, and a step's values made first spilled the accumulators where there was room for all (a 6x2
    tile on AVX2: 79 spill loads and stores, none eagerly; a 4x2 tile, none spilled, ran 0.83x, busy Zen 3). A tile past the registers
    keeps values first (sops_7806's 240 accumulators: gcc took 4x as long over it eagerly), and so does every tile on
    AVX-512 (32 registers, not measured there)."""
    if self.k.options.has_local or self.k.options.avx512: return False
    values = 0
    for a in {n.arg for n in red.src[0].toposort() if n.op == "LOAD"}:
      lanes = list(self.lanes([i for i in self.upcast_axes if i in self.k.varies(self.k.leaves.index(a))]))
      reads = {self.index(self.st_of[a], {**dict.fromkeys(self.upcast_axes, 0), **lane}) for lane in lanes}
      # lanes that share a value (a 3x3 conv's row of pixels beside its window's row read the same inputs) would keep it
      # live from one reduce lane to the next (the 3x3 conv 256 channels 14x14 ran 0.65x eagerly, busy Zen 3)
      if len(reads) < len(lanes): return False
      values += len(reads)
    return accs + 2 <= AVX2_REGISTERS < accs + values

  def reduce_block_at(self) -> sint:
    """The blocked reduce loops' indices summed: 0 only in the first block, their sizes less one summed only in the last."""
    return sum(self.loop_vars[i] for i in self.k.reduce_blocks)

  def resumed(self, red: LazyOp, accs: dict[Lane, int]) -> dict[Lane, int]:
    """A blocked reduce's accumulators continued from what the previous block stored (Kernel._check_reduce_blocks): the
    output read where the STORE writes it, as 0 in the first block (every blocked reduce index 0), added to the 0 they
    start from (exact)."""
    out, later = self.k.ast.ast, ge(self.reduce_block_at(), 1)
    new = {}
    for l, (ol, a) in zip(self.lanes(self.out_up), accs.items()):
      idx, valid = self.index(self.st_of[out.arg], l)
      valid = land(valid, later)
      if self._contiguous(idx): ld = self.emit(UOp(UOps.LOAD, red.dtype, (), (0, _lane0(idx), valid), self.W))
      else: ld = self.gathered(red.dtype, 0, idx, valid)
      new[ol] = self.emit(UOp(UOps.ACC, red.dtype, (a, ld), "ADD", self.W), dedup=False)
    return new

  def across_lanes(self, red: LazyOp, accs: dict[Lane, int]) -> dict[Lane, int]:
    """A reduce-axis vector's accumulators folded across their lanes, as a balanced tree: scalars from here on (the
    vector axis ends with the reduce loop)."""
    w, self.W, self.vaxis = self.W, 1, None
    out = {}
    for ol, a in accs.items():
      vs = [self.emit(UOp(UOps.GEP, red.dtype.acc, (a,), j)) for j in range(w)]
      while len(vs) > 1:
        vs = [self.emit(UOp(UOps.ALU, red.dtype.acc, (vs[j], vs[j + 1]), "ADD" if red.arg.fn == "SUM" else "MAX"), dedup=False)
              if j + 1 < len(vs) else vs[j] for j in range(0, len(vs), 2)]
      out[ol] = vs[0]
    return out

  def slot(self, ix: dict[int, sint], j: int, n_accs: int) -> sint:
    """Accumulator j's place in local memory, laid out [local and grouped axes..., output lane, vector lane]."""
    pos: sint = 0
    for i in range(self.fr - self.k.local_dims, self.fr + self.gfr): pos = pos * self.full[i] + ix[i]
    return (pos * n_accs + j) * self.W

  def group_reduce(self, red: LazyOp, accs: dict[Lane, int]) -> dict[Lane, int]:
    """The group's partial accumulators (every work-item's, in local memory) at this work-item's local position folded,
    looping over the grouped axes and unrolling the UPCASTMID ones."""
    grouped = [i for i in range(self.fr, self.fr + self.gfr) if self.full[i] != 1]
    mid = [i for i in grouped if i in self.k.upcast_in_mid_reduce]
    tvars = {i: Var(f"_t{i}", 0, concrete(self.full[i]) - 1) for i in grouped if i not in mid}
    fold = _Folder(self, red, self.define_accs(red, accs))
    with self.scope([(v, self.full[i], 0) for i, v in tvars.items()]):
      for m in self.lanes(mid):
        ix = {**self.loop_vars, **tvars, **m}
        for j, ol in enumerate(accs): fold.add(ol, self.emit(UOp(UOps.LOAD, red.dtype.acc, (), (SHARED, self.slot(ix, j, len(accs)), 1), self.W)))
      return fold.done()

  def tensor_core_reduce(self, red: LazyOp) -> dict[Lane, int]:
    """One WMMA per tile (each combination of the other output upcasts) and unrolled reduce step: each lane's A and B
    fragments loaded where the fragment maps put its elements (the M, N and K axes read from the lane's id bits and the
    element's index through A's or B's map instead of C's, which the axes follow), the C fragment a vector accumulator
    whose elements are the output lanes C's map gives."""
    assert self.k.tensor_core is not None
    tc, a_ld, b_ld = self.k.tensor_core
    ax = self.k.tc_axes()
    lane_bits = {b: self.loop_vars[ax[f"l{b}"][0]] // (1 << ax[f"l{b}"][1]) % 2 for b in range(tc.lane_bits)}
    def bit(s: str, i: int) -> sint: return lane_bits[int(s[1:])] if s[0] == "l" else i >> int(s[1:]) & 1
    def frag(op: str, i: int) -> dict[int, sint]:  # the axes' values that address element i of A (op "a") or B ("b")
      # A's M bits (its rows) or B's N bits (its columns), on the axes C's map gives them; then K: A's column, B's row.
      # The element axes of C's other dim stay 0: the operand does not vary there.
      c_bits, own, kdim = (tc.c[0], tc.a[0], 1) if op == "a" else (tc.c[1], tc.b[1], 0)
      vals: dict[int, sint] = {axis: 0 for l, (axis, _) in ax.items() if l[0] == "e"}
      for c, s in zip(c_bits.split(), own.split()): vals[ax[c][0]] = vals.get(ax[c][0], 0) + bit(s, i) * (1 << ax[c][1])
      return vals | {ax["k"][0]: tc.coord(op, kdim, lane_bits, i)}
    nc, tc_up = tc.elements("c"), {axis for l, (axis, _) in ax.items() if l[0] in "ke"}
    tiles, steps = [i for i in self.out_up if i not in tc_up], [i for i in self.upcast_axes if i not in tc_up]
    accs = {tuple(t.values()): self.emit(UOp(UOps.DEFINE_ACC, red.dtype.acc, (), _identity("SUM", red.dtype), nc), dedup=False)
            for t in self.lanes(tiles)}
    memo = Memo()
    with self.scope(self.loops(range(self.fr, self.up))):
      for l in self.lanes(steps):
        a = [self.value(a_ld, {**l, **frag("a", i)}, memo) for i in range(tc.elements("a"))]
        b = [self.value(b_ld, {**l, **frag("b", i)}, memo) for i in range(tc.elements("b"))]
        t = tuple(l[i] for i in tiles)
        accs[t] = self.emit(UOp(UOps.WMMA, red.dtype.acc, (accs[t], *a, *b), tc, nc), dedup=False)
    out = {}
    for l in self.lanes(self.out_up):
      j = sum((l[ax[f"e{b}"][0]] >> ax[f"e{b}"][1] & 1) << b for b in range(nc.bit_length() - 1))  # the element C's map puts here
      out[tuple(l.values())] = self.emit(UOp(UOps.GEP, red.dtype.acc, (accs[tuple(l[i] for i in tiles)],), j))
    return out

  def store(self, reduced: dict[Lane, int], value: Optional[LazyOp] = None) -> None:
    """The output at each output lane, `value` there (default: the STORE's), the reduce's value taken from `reduced`."""
    memo = Memo()
    out = self.k.ast.ast
    value = out.src[0] if value is None else value
    lanes = list(self.lanes(self.out_up))
    for l in lanes:
      if self.red is not None: memo[(self.red, _items(l))] = reduced[tuple(l.values())]
    if 1 < len(lanes) <= INTERLEAVED:  # op by op across the lanes: their chains side by side for the core to overlap
      below = set(self.red.toposort()) if self.red is not None else set()  # the reduce's (its lanes' accumulators, above)
      for node in value.toposort():
        if node not in below:
          for l in lanes: self.value(node, l, memo)
    for l in lanes:
      v = self.value(value, l, memo)
      idx, valid = self.index(self.st_of[out.arg], l)
      if valid == 0: continue
      if self._contiguous(idx):
        self.emit(UOp(UOps.STORE, None, (v,), (0, _lane0(idx), valid), self.W), dedup=False)
      else:  # a vector axis the output is strided along (_vector_axis): each lane's element
        for j in range(self.W):
          lane = self.emit(UOp(UOps.GEP, self.uops[v].dtype, (v,), j))
          self.emit(UOp(UOps.STORE, None, (lane,), (0, substitute(idx, {LANE: j}), valid)), dedup=False)


class _Folder:
  """Folds each output lane's values into its accumulator: add(output lane, value) for each value, then done() gives the
  accumulators after the last. Products that fuse into enough independent accumulators go straight in (`chain`), one
  FMA each (a longer serial sum per accumulator than the tree's, well inside the SUM's range), after all of the
  iteration's values, or with `eager` each as soon as its value is made (_Lowering.eager_chain); otherwise the values
  combine as a balanced tree first (independent ops, not one serial chain through the accumulator), two partial sums of
  a level as soon as both exist, so a few are live at once, not every lane's value. Both orders are gcc 12's compile
  time (CPU s, -O3 -march=native): a tree of 256 lanes (sops_8452, every value computed first) was vectorised with its
  lanes spilled, 20.7 s, and takes 1.7 s combined as it goes; 240 chained lanes of gated loads (sops_7806) take 4.8 s
  values first and 19.7 s with each FMA right after its loads."""
  def __init__(self, lo: _Lowering, red: LazyOp, accs: dict[Lane, int], chain: bool = False, eager: bool = False):
    self.lo, self.accs, self.chain, self.eager = lo, dict(accs), chain, eager
    self.op, self.dt = "ADD" if red.arg.fn == "SUM" else "MAX", red.dtype.acc
    self.pending: dict[Lane, list[tuple[int, int]]] = {ol: [] for ol in accs}  # (tree level, partial sum), levels decreasing

  def combine(self, a: int, b: int) -> int:  # never merged with an element-wise op: only these may fuse
    self.lo.sums.add(i := self.lo.emit(UOp(UOps.ALU, self.dt, (a, b), self.op, self.lo.W), dedup=False))
    return i

  def add(self, ol: Lane, v: int) -> None:
    if self.eager:
      self.accs[ol] = self.lo.emit(UOp(UOps.ACC, self.dt, (self.accs[ol], v), self.op, self.lo.W), dedup=False)
      return
    level, stack = 0, self.pending[ol]
    while not self.chain and stack and stack[-1][0] == level: v, level = self.combine(stack.pop()[1], v), level + 1
    stack.append((level, v))

  def done(self) -> dict[Lane, int]:
    new = dict(self.accs)
    for ol, stack in self.pending.items():
      if self.chain: vs = [v for _, v in stack]
      elif stack:
        v = stack.pop()[1]
        while stack: v = self.combine(stack.pop()[1], v)
        vs = [v]
      else: vs = []
      for v in vs: new[ol] = self.lo.emit(UOp(UOps.ACC, self.dt, (new[ol], v), self.op, self.lo.W), dedup=False)
    return new


def _lane0(x: sint) -> sint: return substitute(x, {LANE: 0})

def lane_loads(idx: sint, valid: sint, w: int) -> tuple[sint, list[tuple[sint, sint]]]:
  """A vector LOAD of `w` lanes whose validity depends on the lane or whose lanes are strided: (the condition that every
  lane is valid, where it is vector loads, each lane's (index, validity), where it is not)."""
  strided = any(v.name == LANE for v in variables(idx))
  each = [(substitute(idx, {LANE: j}) if strided else add(idx, j), substitute(valid, {LANE: j})) for j in range(w)]
  return land(*(v for _, v in each)), each

def _items(at: At) -> tuple[tuple[int, sint], ...]: return tuple((i, at[i]) for i in sorted(at))

# A tracker read at the same indices gives the same index, and a lowering asks again and again: a kernel's constants
# share a few trackers (sops_296: 190 leaves, 30 trackers of up to 4 views), the shifted second lowering reads them all
# again, so do the passes of a reduce (eager_chain's), and a search's children. Exact: the two are functions of the
# tracker and the indices alone, compared as values (docs/benchmarks.md, bench/lowering_cost.py: 9,108 schedules' IR and
# source unchanged). The caches and symbolic.py's hold ~25 MB at most.
INDEX_CACHE = 1 << 14  # entries each

@functools.lru_cache(INDEX_CACHE)
def _read(st: ShapeTracker, idxs: tuple[sint, ...]) -> tuple[sint, sint]:
  """The tracker's index and validity at these indices, each of the validity's terms simplified where the others hold."""
  idx, valid = st.expr_idxs(idxs)
  return idx, simplify_valid(valid)

@functools.lru_cache(INDEX_CACHE)
def _index(st: ShapeTracker, idxs: tuple[sint, ...]) -> tuple[sint, sint]:
  """_read's, the index simplified where the validity holds (anywhere else it is not read): a padded view's index often
  loses its decode (// and %) there and becomes affine in the loop variables."""
  idx, valid = _read(st, idxs)
  return simplify_where(idx, valid), valid


def _launch(prefix: str, axes: Iterable[int], full: Sequence[sint], maxes: Optional[tuple[int, ...]] = None,
            dims: int = 3) -> tuple[dict[int, sint], list[tuple[Var, sint]], list[int]]:
  """Axes onto at most `dims` launch dims, the innermost axis on dim 0 and the outermost ones sharing the last (decoded
  with // and %, so only the outermost of those may have a symbolic size; the rest stay loops): (each axis's index,
  each launch dim's index variable and size, the axes left to loops). A dim past the device's limit for it (`maxes`:
  CUDA has 65535 blocks in y and z, 2^31-1 in x) is merged with the dims inside it into dim 0, decoded alike."""
  inner_first = [i for i in axes if full[i] != 1][::-1]
  shared, loops = inner_first[dims - 1:], list[int]()
  while any(not isinstance(full[i], int) for i in shared[:-1]): loops.insert(0, shared.pop())
  groups = [[i] for i in inner_first[:dims - 1]] + ([shared] if shared else [])
  while maxes and (d := next((d for d, g in enumerate(groups) if smax(math.prod(full[i] for i in g)) > maxes[d]), 0)) > 0:
    merged = [i for g in groups[:d + 1] for i in g]
    if any(not isinstance(full[i], int) for i in merged[:-1]): break  # not decodable: the launch reports the limit
    groups = [merged] + groups[d + 1:]
  idx: dict[int, sint] = {}
  launch: list[tuple[Var, sint]] = []
  for d, group in enumerate(groups):
    size = math.prod(full[i] for i in group)
    v = Var(f"{prefix}{d}", 0, smax(size) - 1)
    div: sint = 1
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
    u = uops[i]
    return u.op is UOps.ALU and u.arg == "MUL" and u.dtype is not None and u.dtype.name in FMA_DTYPES and uses[i] == 1
  def fuse(i: int, u: UOp) -> Optional[tuple[UOp, int]]:  # (u fused, the product it took in)
    if i in sums and u.arg == "ADD":  # a lane-combining ADD (an ALU): either operand
      m = next((s for s in u.src if product(s)), None)
      return None if m is None else (replace(u, src=(*uops[m].src, u.src[u.src[0] == m]), arg="MULACC"), m)
    if u.op is UOps.ACC and u.arg == "ADD" and product(p := u.src[1]): return replace(u, src=(u.src[0], *uops[p].src), arg="MULACC"), p
    return None
  fused: dict[int, UOp] = {}
  gone: set[int] = set()  # the products folded into their user
  for i, u in enumerate(uops):
    if (f := fuse(i, u)) is not None: fused[i], _ = f; gone.add(f[1])
  out: list[UOp] = []
  at: dict[int, int] = {}  # old position -> new
  for i, u in enumerate(uops):
    if i in gone: continue
    at[i] = len(out)
    out.append(replace(u := fused.get(i, u), src=tuple(at[s] for s in u.src)))
  return out


def _lane_axes(k: Kernel, axes: list[int], loop_vars: dict) -> Iterator[tuple[int, Var, Callable]]:
  """(axis, the lane variable, at) for each of the upcast axes, innermost first, whose size is a vector width this kernel
  has; at(st): a tracker's (index, validity) with the lane variable on that axis and the other upcast axes at every one
  of their values, not only at 0 (a padded axis upcast twice, sops_4149, has a STORE valid for every lane where the
  other upcast axis is 0 and for lane 0 only where it is 1)."""
  widths = vector_widths(k.ast, k.options)
  ups = {i: Var(f"_up{i}", 0, s - 1) for i, s in enumerate(k.upcast_shape, k.shape_len - k.upcasted)}
  for axis in reversed(axes):
    if k.full_shape[axis] not in widths: continue
    lv = Var(LANE, 0, concrete(k.full_shape[axis]) - 1)
    yield axis, lv, lambda st, axis=axis, lv=lv: st.expr_idxs([0 if st.shape[i] == 1 else lv if i == axis else loop_vars.get(i, ups.get(i, 0))
                                                               for i in range(k.shape_len)])

def _vector_axis(k: Kernel, out_up: list[int], loop_vars: dict) -> Optional[int]:
  """The output upcast axis to carry as vector lanes: a kernel whose every value can be a vector, a width the ISA has,
  a STORE and CONSTs whose validity does not depend on it; of those, first one the STORE is contiguous along and a LOAD
  reads as a clean vector (consecutive, valid together: a matmul's columns), then one a packed LOAD's copy is contiguous
  along (the pack puts the vector axis innermost: a padded conv's output channels, its weights packed, each lane stored
  alone after the reduce), then any the STORE is contiguous along."""
  ranked: list[tuple[int, int]] = []
  for axis, lv, at in _lane_axes(k, out_up, loop_vars):
    idx, valid = at(k.sts[0])
    if lv in variables(valid) or any(lv in variables(at(st)[1]) for a, st in zip(k.leaves, k.sts) if isinstance(a, ConstArg)): continue
    contiguous = step(idx, lv) == 1
    loads = (at(st) for a, st in zip(k.leaves[1:], k.sts[1:]) if isinstance(a, MemArg))
    if contiguous and any(consecutive(idx_j, valid_j, lv) for idx_j, valid_j in loads): return axis
    if any(axis in k.pack_axes(j) and lv not in variables(at(k.sts[j])[1]) for j in k.packed): ranked.append((1, axis))
    elif contiguous: ranked.append((2, axis))
  return min(ranked, key=lambda r: r[0])[1] if ranked else None  # the first (innermost) of the best rank

def _reduce_vector_axis(k: Kernel, red_up: list[int], loop_vars: dict) -> Optional[int]:
  """The unrolled reduce axis to carry as vector lanes where no output axis is one: a reduce loop left to accumulate
  across (a reduce unrolled whole folds its lanes once either way), a width the ISA has, a LOAD that reads it
  contiguously (else the lanes are gathered, no faster than scalars), and no LOAD's or CONST's validity that depends on it."""
  if all(k.full_shape[i] == 1 for i in range(k.first_reduce, k.shape_len - k.upcasted)): return None
  for axis, lv, at in _lane_axes(k, red_up, loop_vars):
    leaves = [at(st) for st in k.sts[1:]]
    if any(lv in variables(valid) for _, valid in leaves): continue
    if any(step(idx, lv) == 1 for (idx, _), a in zip(leaves, k.leaves[1:]) if not isinstance(a, ConstArg)):
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
