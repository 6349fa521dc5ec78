"""The Kernel: a validated AST laid out over axes, and the optimisation ops that reshape that layout.

Every leaf (each distinct LOAD and CONST view) and the STORE keep a shape tracker over the same
axes. The axes are ordered, left to right:

  thread | block | global | local | grouped reduce (local) | reduce | upcast (unrolled reduce and upcast)

BLOCK (CPUs) splits a global or reduce axis and moves its outer part to the block region, after the blocks before it:
loops in the order they were blocked, outside every global loop, so a tile of the operands stays in a cache while the
loops inside sweep it (cache blocking). A blocked reduce accumulates through the output: each output position's
accumulator starts from what the previous block stored there (0 in the first block) and continues in the same order,
so the result is bit for bit the unblocked schedule's. PACK (CPUs) copies what a LOAD reads inside the thread's and
blocks' loops into a buffer on the thread's stack, in the order the loops inside read it (an operand's block contiguous,
as a BLAS packs a panel), once per block; the loads inside read that copy.

TC (tensor cores) lays out one warp's tile by C's fragment map: its lane-id bits are the innermost local axes (lane
bit 0 innermost, so the launch's linear work-item id is the lane), then after the reduce axes one upcast axis for the
tile's K and C's element-index bits (highest first); see tc_axes. A's and B's loads read those axes through their own
fragment maps (lower.py). M, N and K that are not multiples of the tile are padded to one (at most doubled).

An opt splits an axis and moves the new part into one of those regions; it never changes what the
kernel computes. An opt that is illegal here raises OptError and leaves the kernel as it was.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Optional
import numpy as np
from linearizer.ast import KernelAST, LazyOp, MemArg, ReduceArg, load
from linearizer.reference import alu, cast
from linearizer.options import LinearizerOptions
from linearizer.shapetracker import ShapeTracker
from linearizer.symbolic import Node, Var, concrete, sint, smax, variables
from linearizer.vectors import vector_widths
from linearizer.tensor_cores import TensorCore


class OptOp(StrEnum):
  """The optimisation ops; str-valued, so an opt's JSON form is the op's name."""
  LOCAL = "LOCAL"; GROUP = "GROUP"; GROUPTOP = "GROUPTOP"; UPCAST = "UPCAST"; UPCASTMID = "UPCASTMID"
  UNROLL = "UNROLL"; NOLOCALS = "NOLOCALS"; PADTO = "PADTO"; TC = "TC"; THREAD = "THREAD"; BLOCK = "BLOCK"; PACK = "PACK"

MAX_UPCAST = 256       # elements one thread computes: beyond this the code explodes and registers spill
MAX_VECTORS = 64       # a CPU's, where an upcast axis is as wide as a vector: one register each (Kernel._check_upcast)
MAX_AMT = 256
PACK_BYTES = 256 << 10  # the packed copies of a kernel, on each thread's stack: a BLAS's B block (256 x 256 floats) fits L2


class OptError(ValueError): pass


@dataclass(frozen=True)
class Opt:
  op: OptOp
  axis: Optional[int] = None
  amt: Optional[int] = None

  def __post_init__(self): object.__setattr__(self, "op", OptOp(self.op))  # a name given as a plain str becomes its OptOp (ValueError if none)
  def to_json(self) -> dict: return {"op": self.op.value, "axis": self.axis, "amt": self.amt}
  @staticmethod
  def from_json(d) -> Opt:
    if not isinstance(d, dict) or set(d) - {"op", "axis", "amt"} or not isinstance(d.get("op"), str) or d["op"] not in OptOp.__members__:
      raise OptError(f"not an opt: {str(d)[:80]}")
    for f in ("axis", "amt"):
      if d.get(f) is not None and (not isinstance(d[f], int) or isinstance(d[f], bool)): raise OptError(f"opt {f} must be an int or null")
    return Opt(d["op"], d.get("axis"), d.get("amt"))


def allowed_ops(o: LinearizerOptions) -> tuple[OptOp, ...]:
  """The opt ops a device may accept (each one still has its own preconditions)."""
  return tuple(op for op, ok in ((OptOp.UPCAST, True), (OptOp.UNROLL, True), (OptOp.PADTO, True), (OptOp.THREAD, o.has_threads),
                                 (OptOp.BLOCK, not o.has_local), (OptOp.PACK, not o.has_local),
                                 (OptOp.LOCAL, o.has_local), (OptOp.NOLOCALS, o.has_local),
                                 (OptOp.GROUP, o.has_local and o.has_shared),
                                 (OptOp.GROUPTOP, o.has_local and o.has_shared), (OptOp.UPCASTMID, o.has_local and o.has_shared),
                                 (OptOp.TC, bool(o.tensor_cores))) if ok)


def _padded(size: int, multiple: int) -> int: return -(-size // multiple) * multiple

def check(cond: bool, msg: str) -> None:
  if not cond: raise OptError(msg)


class Kernel:
  def __init__(self, ast: KernelAST, options: LinearizerOptions):
    self.ast, self.options = ast, options
    self.reduceop: Optional[LazyOp] = ast.reduceop
    # one tracker per distinct leaf view (LOAD or CONST argument), the STORE's first
    self.leaves: list = [ast.ast.arg] + list(dict.fromkeys(n.arg for n in ast.nodes if n.op in ("LOAD", "CONST")))
    self.sts: list[ShapeTracker] = [a.st for a in self.leaves]
    self.applied_opts: list[Opt] = []
    self.thread_dims = self.block_dims = self.local_dims = self.group_for_reduces = self.upcasted = 0
    self.upcast_in_mid_reduce: list[int] = []
    self.dont_use_locals = False
    self.packed: tuple[int, ...] = ()  # the leaves (indices into self.leaves) whose LOADs read a packed copy
    self.tensor_core: Optional[tuple[TensorCore, LazyOp, LazyOp]] = None  # the tensor core, A's LOAD, B's LOAD
    self._initial_layout()

  # ---- the layout
  @property
  def shape_len(self) -> int: return len(self.sts[0].shape)
  @property
  def full_shape(self) -> tuple[sint, ...]:
    return tuple(next((st.shape[i] for st in self.sts if st.shape[i] != 1), 1) for i in range(self.shape_len))
  @property
  def output_shape(self) -> tuple[sint, ...]: return self.sts[0].shape
  @property
  def first_reduce(self) -> int:
    """The first reduce axis (the output has 1 where the full shape does not) after the blocks, before the upcasts."""
    out, full = self.output_shape, self.full_shape
    return next((i for i in range(self.thread_dims + self.block_dims, self.shape_len - self.upcasted) if out[i] != full[i]),
                self.shape_len - self.upcasted)
  @property
  def global_dims(self) -> int: return self.first_reduce - self.local_dims - self.block_dims - self.thread_dims
  @property
  def reduce_blocks(self) -> list[int]:
    """The blocked reduce axes: outer reduce loops outside the global ones, accumulating through the output."""
    return [i for i in range(self.thread_dims, self.thread_dims + self.block_dims) if self.is_reduce_axis(i)]
  @property
  def blocked_reduce(self) -> bool: return bool(self.reduce_blocks)
  @property
  def upcast_shape(self) -> tuple[int, ...]: return tuple(smax(s) for s in self.full_shape[self.shape_len - self.upcasted:])  # ints: see _apply
  def is_reduce_axis(self, i: int) -> bool: return self.output_shape[i] != self.full_shape[i]

  def _initial_layout(self) -> None:
    """Reduce axes last, size-1 axes dropped, adjacent axes merged wherever every tracker allows."""
    axes = self.reduceop.arg.axis if self.reduceop is not None else ()
    n = len(self.full_shape)
    self.sts = [st.permute([i for i in range(n) if i not in axes] + list(axes)) for st in self.sts]
    self._reshape_all(lambda shape: [s for s, f in zip(shape, self.full_shape) if f != 1])
    i = 0
    while i + 1 < self.shape_len:
      if self.is_reduce_axis(i) == self.is_reduce_axis(i + 1) and (merged := self._merged(i)) is not None: self.sts = merged
      else: i += 1

  def _merged(self, i: int) -> Optional[list[ShapeTracker]]:
    """The trackers with axes i and i+1 merged, if every one of them stays the same number of views."""
    out = []
    for st in self.sts:
      shape = list(st.shape)
      if any(isinstance(s, Node) for s in shape[i:i + 2]): return None
      new = st.reshape(shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2:])
      if len(new.views) > len(st.views): return None
      out.append(new)
    return out

  def _reshape_all(self, new_shape) -> None: self.sts = [st.reshape(new_shape(st.shape)) for st in self.sts]

  def shift_to(self, axis: int, amount: int, top: bool = False, insert_before: Optional[int] = None) -> None:
    """Split `axis` into (rest, amount) -- (amount, rest) if `top` -- and move the `amount` part before
    `insert_before` (default: to the end)."""
    if insert_before is None: insert_before = self.shape_len
    move_axis = axis if top else axis + 1
    if move_axis < insert_before: insert_before += 1
    def split(shape):
      s = shape[axis]
      parts = (1, 1) if s == 1 else (amount, s // amount) if top else (s // amount, amount)
      return list(shape[:axis]) + list(parts) + list(shape[axis + 1:])
    old = self.sts
    self._reshape_all(split)
    if any(len(n.views) > len(o.views) and any(isinstance(d, Node) for d in o.views[-1].shape) for o, n in zip(old, self.sts)):
      raise OptError(f"splitting axis {axis} needs a view over symbolic dims, which indexing cannot decode")
    order = [i for i in range(self.shape_len) if i != move_axis]
    order.insert(insert_before - (insert_before > move_axis), move_axis)
    self.sts = [st.permute(order) for st in self.sts]

  # ---- opts
  def copy(self) -> Kernel:
    """A cheap copy (copy.copy would go through __reduce__, which re-validates and replays)."""
    k = Kernel.__new__(Kernel)
    k.__dict__.update(self.__dict__)
    k.sts, k.applied_opts, k.upcast_in_mid_reduce = list(self.sts), list(self.applied_opts), list(self.upcast_in_mid_reduce)
    return k

  def apply_opt(self, opt: Opt) -> None:
    """Apply one opt, or raise OptError with the reason and leave the kernel unchanged."""
    k = self.copy()
    k._apply(opt)
    self.__dict__.update(k.__dict__)

  def apply_opts(self, opts) -> Kernel:
    for o in opts: self.apply_opt(o if isinstance(o, Opt) else Opt.from_json(o))
    return self

  def _apply(self, opt: Opt) -> None:
    o = self.options
    if opt.op is OptOp.TC: return self._apply_tc(opt)
    if self.tensor_core:
      check(opt.op in (OptOp.UPCAST, OptOp.UNROLL, OptOp.LOCAL), f"{opt.op} after TC: only UPCAST, UNROLL and LOCAL keep the warp's layout")
    if opt.op is OptOp.PACK: return self._apply_pack(opt)
    if opt.op is OptOp.NOLOCALS:
      check(o.has_local, "NOLOCALS needs a device with local dims")
      check(self.local_dims == 0 and self.group_for_reduces == 0 and not self.dont_use_locals, "NOLOCALS after locals were used")
      self.dont_use_locals = True
      self.applied_opts.append(opt)
      return
    if not isinstance(opt.axis, int) or opt.axis < 0: raise OptError(f"{opt.op} needs an axis >= 0")
    axis = opt.axis + (self.first_reduce if opt.op is OptOp.UNROLL else
                       self.first_reduce + self.group_for_reduces if opt.op in (OptOp.GROUP, OptOp.GROUPTOP) else 0)
    check(axis < self.shape_len, f"{opt.op} axis {opt.axis} is past the {self.shape_len} axes")
    if not isinstance(size := self.full_shape[axis], int): raise OptError(f"axis {axis} has a symbolic size")
    amt = size if opt.amt == 0 else opt.amt
    if not isinstance(amt, int) or not 1 < amt <= MAX_AMT: raise OptError(f"{opt.op} amount must be in [2, {MAX_AMT}], got {opt.amt}")
    reduce_range = (self.first_reduce + self.group_for_reduces, self.shape_len - self.upcasted)
    outer = self.thread_dims + self.block_dims  # the first axis past the threads and blocks
    if opt.op is not OptOp.PADTO: check(size % amt == 0, f"{opt.op} {amt} does not divide axis {axis} of size {size}")

    if opt.op is OptOp.UPCAST:
      check(outer <= axis < self.first_reduce - self._tc_lanes, "UPCAST is for a global or local axis (not a tensor core's lane)")
      self._check_upcast(amt)
      self.shift_to(axis, amt)
      self.upcasted += 1
    elif opt.op is OptOp.UNROLL:
      check(reduce_range[0] <= axis < reduce_range[1], "UNROLL is for a reduce axis")
      # the size-1 axis a whole-axis UNROLL leaves would read as a global one, inside the warp's lanes
      check(not self.tensor_core or amt < size, "UNROLL of a whole axis after TC")
      self._check_upcast(amt)
      self.shift_to(axis, amt)
      self.upcasted += 1
    elif opt.op is OptOp.THREAD:
      check(o.has_threads, "this device has no threads")
      check(self.thread_dims == 0, "only one THREAD split")
      # a block of a global axis splits as the global axis would have before it was blocked (each thread its own outputs);
      # a block of a reduce would have both threads accumulate into the same outputs
      check(axis < self.first_reduce - self.local_dims and axis not in self.reduce_blocks, "THREAD splits a global axis or a block of one")
      self.shift_to(axis, amt, top=True, insert_before=0)  # each thread takes one contiguous part
      self.thread_dims = 1
    elif opt.op is OptOp.BLOCK: self._apply_block(axis, size, amt, reduce_range)
    elif opt.op is OptOp.LOCAL:
      check(o.has_local and not self.dont_use_locals, "this kernel uses no local dims")
      check(self.thread_dims <= axis < self.first_reduce - self.local_dims, "LOCAL is for a global axis")
      self._check_local_size(amt)
      self.shift_to(axis, amt, insert_before=self.first_reduce - self._tc_lanes)  # the warp's lanes stay innermost
      self.local_dims += 1
    elif opt.op in (OptOp.GROUP, OptOp.GROUPTOP):
      check(o.has_local and o.has_shared and not self.dont_use_locals, "grouping needs local dims and shared memory")
      check(reduce_range[0] <= axis < reduce_range[1], f"{opt.op} is for a reduce axis")
      self._check_local_size(amt)
      self.shift_to(axis, amt, top=opt.op is OptOp.GROUPTOP, insert_before=self.first_reduce + self.group_for_reduces)
      self.group_for_reduces += 1
    elif opt.op is OptOp.UPCASTMID:
      check(o.has_local and self.group_for_reduces > 0, "UPCASTMID upcasts inside a grouped reduce")
      check(self.first_reduce <= axis < self.first_reduce + self.group_for_reduces, "UPCASTMID is for a grouped axis")
      check(amt < size, "UPCASTMID of a whole grouped axis would leave a size-1 axis among the grouped ones, where it reads as global")
      self.shift_to(axis, amt, insert_before=self.first_reduce + self.group_for_reduces)
      self.group_for_reduces += 1
      self.upcast_in_mid_reduce.append(self.first_reduce + self.group_for_reduces - 1)
    elif opt.op is OptOp.PADTO:
      check(axis < self.shape_len - self.upcasted, "PADTO is not for an upcast axis")
      check(not self.thread_dims <= axis < outer, "PADTO is not for a block axis")
      # the size-1 axis a whole-axis UNROLL leaves among the reduce axes would become an output axis inside the reduce loop
      check(axis < self.first_reduce or self.is_reduce_axis(axis), "PADTO among the reduce axes is for a reduce axis")
      check(size != 1, "PADTO of a size-1 axis, which may be the rest of a reduce: the output's 1 there would be padded too")
      padded = _padded(size, amt)
      check(padded != size, f"axis {axis} of size {size} is already a multiple of {amt}")
      check(padded <= 2 * size, f"padding {size} to {padded} more than doubles the work")
      if self.is_reduce_axis(axis): check(self._pad_reduce_is_exact(), "padding this reduce would change its result")
      # a padded output is not stored, so a load broadcast along an output axis is widened unmasked (as TC's): its value
      # serves every lane there, where a pad would mask it by the lane and a PACK's copy would vary along the axis
      widen = lambda j, st: j > 0 and axis < self.first_reduce and st.shape[axis] == size and st.broadcast_along(axis)
      pad = lambda st: st.pad([(0, padded - size) if i == axis and s == size else (0, 0) for i, s in enumerate(st.shape)])
      self.sts = [st.widen(axis, padded) if widen(j, st) else pad(st) for j, st in enumerate(self.sts)]
    if self.packed: self._check_packs()  # after every opt: splits and pads change what a block's copy holds
    if self.group_for_reduces:  # after every opt: locals and upcasts grow what a grouped reduce keeps in shared memory
      check(self._shared_bytes() <= o.shared_max, f"the grouped reduce would need more than {o.shared_max} bytes of shared memory")
    self.applied_opts.append(opt)

  def _check_upcast(self, amt: int) -> None:
    """The elements a thread computes, with a new upcast of `amt`, within MAX_UPCAST; or on a CPU, where an upcast axis
    is as wide as a vector this kernel can have, its vectors (elements over that width) within MAX_VECTORS: a vector is
    one register there, not one per lane as on a GPU (a 3x3 conv's 7 pixels x 3 window columns x 16 output channels: 21
    vectors, 336 elements, 1.4x faster than without the columns, Zen 4)."""
    elements = self._upcast_elements() * amt
    if elements <= MAX_UPCAST: return
    widths = () if self.options.has_local or self.tensor_core else vector_widths(self.ast, self.options)
    lanes = max((s for s in (*self.upcast_shape, amt) if s in widths), default=0)
    check(lanes > 0 and elements // lanes <= MAX_VECTORS, f"upcasts would exceed {MAX_UPCAST} elements" +
          (f" and {MAX_VECTORS} vectors of {lanes} lanes" if lanes else ""))

  def _upcast_elements(self) -> int:
    """The elements a thread computes: its upcast lanes, where a tensor core's K tile counts once (the tensor core
    does those products)."""
    return math.prod(self.upcast_shape) // (self.tensor_core[0].dims[2] if self.tensor_core else 1)

  # ---- tensor cores
  @property
  def _tc_lanes(self) -> int: return len(self.tensor_core[0].axes("l")) if self.tensor_core else 0

  def tc_axes(self) -> dict[str, tuple[int, int]]:
    """Where each bit of the tensor core's lane id ("l<b>") and of C's element index ("e<b>") is, (axis, bit of its
    index), and the tile's K ("k"). Later opts keep them there: LOCAL inserts before the lanes, UPCAST and UNROLL append
    after these upcasts."""
    assert self.tensor_core is not None, "tc_axes of a kernel without TC"
    tc, u0 = self.tensor_core[0], self.shape_len - self.upcasted
    runs = list(enumerate(tc.axes("l"), self.first_reduce - self._tc_lanes)) + list(enumerate(tc.axes("e"), u0 + 1))
    return {"k": (u0, 0)} | {s: (axis, j) for axis, r in runs for j, s in enumerate(r)}

  def _tc_choices(self) -> list[tuple[TensorCore, LazyOp, LazyOp, int, int, int]]:
    """Every (tensor core, A's LOAD, B's LOAD, M axis, N axis, K axis) this kernel matches: a SUM of products of two
    LOADs of the tensor core's input dtype, each cast exactly to its accumulation dtype, which the product and the sum
    are in (a tensor core's products are exact); a global axis along which only A varies and one along which only B
    does, and a reduce axis along which both do, divisible by the tensor core's M, N and K."""
    if (red := self.reduceop) is None or red.arg.fn != "SUM" or red.src[0].op != "MUL": raise OptError("TC needs a SUM over a MUL")
    loads = [s.src[0] if s.op == "CAST" and not s.arg.bitcast else s for s in red.src[0].src]
    check(all(s.op == "LOAD" for s in loads), "TC needs a product of two LOADs, each maybe through a CAST")
    tcs = [tc for tc in self.options.tensor_cores
           if all(s.dtype.name == tc.dtype_in for s in loads) and red.src[0].dtype.name == red.dtype.name == tc.dtype_out]
    check(bool(tcs), f"no tensor core takes {loads[0].dtype.name} x {loads[1].dtype.name} products in {red.src[0].dtype.name} "
                     f"summed in {red.dtype.name}")
    def varies(ld: LazyOp) -> set[int]: return self.varies(self.leaves.index(ld.arg))
    def fits(axis: int, d: int, flat: Optional[LazyOp] = None) -> bool:
      """The axis is a multiple of d, or padded to one at most doubles it, where the operand `flat`, which does not vary
      along it, reads it as a broadcast (its fragments are the same for every lane's row or column there: no mask)."""
      s = self.full_shape[axis]
      return isinstance(s, int) and (s % d == 0 or _padded(s, d) <= 2 * s and
                                     (flat is None or self.sts[self.leaves.index(flat.arg)].broadcast_along(axis)))
    out = []
    for tc in tcs:
      M, N, K = tc.dims
      for a, b in (loads, loads[::-1]):
        va, vb = varies(a), varies(b)
        out += [(tc, a, b, m, n, k) for m in sorted(va - vb) for n in sorted(vb - va) for k in sorted(va & vb)
                if m < self.first_reduce and n < self.first_reduce <= k and fits(m, M, b) and fits(n, N, a) and fits(k, K)]
    check(bool(out), "no global axis only A varies along, a multiple of the tensor core's M, with one only B varies along, a multiple of "
                     "its N, and a reduce axis a multiple of its K (or padded to one, at most doubled)")
    return out

  def _apply_tc(self, opt: Opt) -> None:
    """Lay out the warp's tile over the axes of the choice opt.axis (of _tc_choices): M's and N's low bits to the lane
    and element axes C's map gives them, K's tile to an upcast axis; the rest of M, N and K stay where they were."""
    o = self.options
    check(bool(o.tensor_cores), "no tensor cores on this device")
    check(not self.applied_opts, "TC must be the first opt")
    check(opt.amt in (None, 0), "TC takes no amount")
    choices = self._tc_choices()
    if not isinstance(opt.axis, int) or not 0 <= opt.axis < len(choices):
      raise OptError(f"TC axis picks one of the {len(choices)} ways this kernel matches a tensor core")
    tc, a, b, m, n, k = choices[opt.axis]
    check(o.has_local and tc.threads <= o.local_size_max, "TC needs local dims for the warp's lanes")
    fr, n0 = self.first_reduce, self.shape_len
    # pad M, N and K to the tile: A past M, B past N and both past K read 0, so the padded products add 0, and padded
    # outputs are not stored; B along M and A along N are broadcasts, widened unmasked (fits): a lane's fragment serves
    # every column (row) of C, whose mask a padded read would take from the lane's own
    full, ops = self.full_shape, {self.leaves.index(a.arg), self.leaves.index(b.arg)}
    for axis, d in zip((m, n, k), tc.dims):
      if (size := _padded(concrete(full[axis]), d)) == full[axis]: continue  # ints: fits() checked
      self.sts = [st.widen(axis, size) if j in ops and st.broadcast_along(axis) else
                  st.pad([(0, size - full[axis]) if i == axis and s == full[axis] else (0, 0) for i, s in enumerate(st.shape)])
                  for j, st in enumerate(self.sts)]
    self.shift_to(k, tc.dims[2])
    new: list[tuple[str, ...]] = [("k",)]  # the bits each new axis holds, in the order they were split off to the end
    for d, run in tc.runs():  # low bits first: each split takes the axis's lowest bits
      self.shift_to((m, n)[d], 2 ** len(run))
      new.append(run)
    at = {r: n0 + i for i, r in enumerate(new)}
    lanes, elems = tc.axes("l"), tc.axes("e")
    order = list(range(fr)) + [at[r] for r in lanes] + list(range(fr, n0)) + [at[("k",)]] + [at[r] for r in elems]
    self.sts = [st.permute(order) for st in self.sts]
    if self.full_shape[k + len(lanes)] == 1:  # all of K in one tile: the size-1 rest would read as a global axis
      self._reshape_all(lambda shape: list(shape[:k + len(lanes)]) + list(shape[k + len(lanes) + 1:]))
    self.local_dims, self.upcasted, self.tensor_core = len(lanes), 1 + len(elems), (tc, a, b)
    self.applied_opts.append(opt)

  def _apply_block(self, axis: int, size: int, amt: int, reduce_range: tuple[int, int]) -> None:
    check(not self.options.has_local, "BLOCK is for CPUs: on a device with local dims its outer loop would run inside every work-item")
    outer = self.thread_dims + self.block_dims
    on_global = outer <= axis < self.first_reduce
    check(on_global or reduce_range[0] <= axis < reduce_range[1], "BLOCK is for a global or reduce axis (not a thread, block or upcast one)")
    check(amt < size, f"BLOCK {amt} of axis {axis} of size {size} leaves no outer loop")
    if not on_global: self._check_reduce_blocks()
    self.shift_to(axis, size // amt, top=True, insert_before=outer)
    self.block_dims += 1

  def _check_reduce_blocks(self) -> None:
    """A reduce blocked into an outer loop continues each position's accumulator from the output: legal where the output
    holds the accumulator exactly (the STORE's dtype is the reduce's, its accumulation dtype), a first block that reads 0
    there starts the sum as the unblocked reduce does (a SUM); the last block stores the STORE's value over the whole sum
    (lower: an epilogue, a bias or BatchNorm, applied in the last block only; no kernel loads its output)."""
    red = self.reduceop
    check(red is not None and red.arg.fn == "SUM", "BLOCK of a reduce axis needs a SUM (its first block starts from 0)")
    assert red is not None
    out = self.ast.ast
    check(out.src[0].dtype == red.dtype, f"BLOCK of a reduce axis: the {out.src[0].dtype.name} output cannot hold the {red.dtype.name} partial sums")
    check(red.dtype.acc == red.dtype, f"BLOCK of a reduce axis: a {red.dtype.name} output cannot hold its {red.dtype.acc.name} accumulator")

  def varies(self, leaf: int) -> set[int]:
    """The axes (of int size) leaf `leaf`'s index or validity depends on."""
    st, vs = self.sts[leaf], [Var(f"_v{i}", 0, s - 1) if isinstance(s, int) and s > 1 else None for i, s in enumerate(self.full_shape)]
    idx, valid = st.expr_idxs([0 if st.shape[i] == 1 or v is None else v for i, v in enumerate(vs)])
    names = {v.name for v in variables(idx) | variables(valid)}
    return {i for i, v in enumerate(vs) if v is not None and v.name in names}

  def pack_axes(self, leaf: int) -> list[int]:
    """The axes inside the threads and blocks that a packed leaf's copy holds, outermost first: those it varies along."""
    return sorted(i for i in self.varies(leaf) if i >= self.thread_dims + self.block_dims)

  def _apply_pack(self, opt: Opt) -> None:
    check(not self.options.has_local, "PACK is for CPUs (a device with local dims has its own local memory)")
    check(opt.amt in (None, 0), "PACK takes no amount")
    loads = [i for i, a in enumerate(self.leaves) if i > 0 and isinstance(a, MemArg)]
    if not isinstance(opt.axis, int) or opt.axis not in loads: raise OptError(f"PACK axis picks a LOAD's view: one of {loads}")
    check(opt.axis not in self.packed, f"leaf {opt.axis} is packed already")
    self.packed += (opt.axis,)
    self._check_packs()
    self.applied_opts.append(opt)

  def pack_bytes(self, leaves: Optional[list[int]] = None) -> int:
    """What the packed copies (of `leaves`, default all) take on a thread's stack."""
    return sum(math.prod(concrete(self.full_shape[i]) for i in self.pack_axes(j)) * self.leaves[j].dtype.itemsize
               for j in (self.packed if leaves is None else leaves))

  def _check_packs(self) -> None:
    outer = self.thread_dims + self.block_dims
    check(all(isinstance(s, int) for s in self.full_shape[outer:]), "PACK of a kernel with a symbolic axis inside its blocks")
    check((size := self.pack_bytes()) <= PACK_BYTES, f"the packed copies would take {size} bytes, over {PACK_BYTES} (BLOCK the axes inside first)")

  def _check_local_size(self, amt: int) -> None:
    lo = self.first_reduce - self.local_dims
    size = math.prod(map(concrete, self.full_shape[lo:self.first_reduce + self.group_for_reduces])) * amt  # LOCAL and GROUP split ints
    check(size <= self.options.local_size_max, f"local size {size} exceeds {self.options.local_size_max}")

  def _shared_bytes(self) -> int:
    """The grouped reduce's local memory: a partial accumulator per work-item and output lane."""
    assert self.reduceop is not None, "grouped without a reduce"
    out_lanes = [s for i, s in enumerate(self.upcast_shape, self.shape_len - self.upcasted) if not self.is_reduce_axis(i)]
    return math.prod(map(concrete, self.full_shape[self.first_reduce - self.local_dims:self.first_reduce + self.group_for_reduces])) * \
      math.prod(out_lanes) * self.reduceop.dtype.acc.itemsize

  def _pad_reduce_is_exact(self) -> bool:
    """Padded positions read 0: a SUM stays exact when its source, by the reference semantics, is 0
    wherever every leaf is 0."""
    if (red := self.reduceop) is None or red.arg.fn != "SUM": return False
    vals: dict[LazyOp, np.ndarray] = {}
    with np.errstate(all="ignore"):
      for n in red.src[0].toposort():
        if n.op in ("LOAD", "CONST"): vals[n] = np.zeros(1, dtype=n.dtype.np)
        elif n.op == "CAST": vals[n] = np.asarray(cast(vals[n.src[0]], n.src[0].dtype, n.arg.dtype, n.arg.bitcast))
        else: vals[n] = np.asarray(alu(n.op, n.src[-1].dtype, [vals[s] for s in n.src]))
    return bool(vals[red.src[0]][0] == 0)

  def to_ast(self) -> KernelAST:
    """The kernel over its current axes as a document: the same computation, so the reference
    interpreter checks that opts kept the meaning, independently of any code generator."""
    st_of = dict(zip(self.leaves, self.sts))
    axes = tuple(i for i in range(self.shape_len) if self.is_reduce_axis(i))
    def rebuild(n: LazyOp) -> LazyOp:
      src = tuple(rebuild(s) for s in n.src)
      a = n.arg
      if n.op in ("LOAD", "CONST", "STORE"): a = type(a)(*(st_of[a] if f == "st" else getattr(a, f) for f in a.__dataclass_fields__))
      elif n.op == "REDUCE": a = ReduceArg(a.fn, axes)
      return LazyOp(n.op, src, a)
    return load(KernelAST(rebuild(self.ast.ast), self.ast.vars, self.ast.name).to_json())

  # ---- transport: a kernel pickles as its AST, options and opts, and is rebuilt by replaying them
  def __reduce__(self): return (_rebuild, (self.ast.to_json(), self.options, tuple(self.applied_opts)))

  def __repr__(self) -> str:
    return f"<Kernel {self.ast.name} shape={self.full_shape} first_reduce={self.first_reduce} upcasted={self.upcasted} opts={self.applied_opts}>"


def _rebuild(doc: dict, options: LinearizerOptions, opts: tuple[Opt, ...]) -> Kernel:
  return Kernel(load(doc), options).apply_opts(opts)
