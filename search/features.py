"""A lowered candidate as a fixed-length numeric vector, the cost model's input (search/cost_model.py).

Read off the linear IR (linearizer/lower.py) in one pass: how many of each op, loads and stores by vector width and by
how their index moves with the innermost loop (contiguous: +1 per iteration, or a vector load; broadcast: the same
element every iteration, or a VBROADCAST; strided: anything else, a VBUILD's gathered lanes too), how they move with the
outermost loop (those that do not are read again by every thread of a THREAD, every block of a BLOCK; the others, the
bytes they move a step: which operand a THREAD splits), the loads from local memory (a PACK's copy: which operand it
packs), the loops' extents (the outermost's: their order), the accumulators (the register tile), threads and launch
size, and the work per innermost iteration and in all (each op weighted by its lanes and the extents of the loops around
it). Sizes that span orders of magnitude are log2'd."""
from __future__ import annotations
import math
from typing import Optional
from linearizer.ast import ALU, MemArg
from linearizer.kernel import Kernel
from linearizer.lower import Program, UOps, lower
from linearizer.shapetracker import affine
from linearizer.symbolic import Var, smax, variables
from linearizer.vectors import vector_widths

WIDTHS = (1, 2, 4, 8, 16)   # vector-width buckets of loads and stores (16: 16 lanes or more)
STRIDES = ("contiguous", "broadcast", "strided")
NAMES: tuple[str, ...] = (*(f"n_{op.name.lower()}" for op in UOps), *(f"{m}_w{w}" for m in ("load", "store") for w in WIDTHS),
                          *(f"load_{s}" for s in STRIDES), "outer_invariant_loads", "log_outer_stride", "local_loads",
                          "mulacc", "alu_lanes", "loops", "log_loop_product", "log_outermost", "log_innermost",
                          "accumulators", "acc_lanes", "threads", "log_groups", "local_size", "alu_per_iter", "bytes_per_iter",
                          "log_total_alu", "log_total_bytes", "intensity", "ir_size")
AT = {n: i for i, n in enumerate(NAMES)}
OP_AT = {op: AT[f"n_{op.name.lower()}"] for op in UOps}  # an enum's .name per uop was a fifth of the features' time


def features(k: Kernel) -> list[float]:
  """The feature vector of k's lowering."""
  return program_features(lower(k))


def program_features(prog: Program) -> list[float]:
  f = [0.0] * len(NAMES)
  loops: list[tuple[Var, int]] = []     # (loop variable, extent) of the loops open at each uop
  weight, depth_max, total_alu, total_bytes, threads = 1, 0, 0.0, 0.0, 1
  inner_alu, inner_bytes = 0.0, 0.0        # work in the body of the deepest loop nest
  outer_stride = 0.0                       # bytes the loads' indices move per step of their outermost loop, summed
  for u in prog.uops:
    f[OP_AT[u.op]] += 1
    if u.op is UOps.LOOP:
      var, end, thr = u.arg
      loops.append((var, max(1, smax(end))))
      weight *= loops[-1][1]
      threads = max(threads, thr or 1)
      f[AT["loops"]] += 1
      if f[AT["loops"]] == 1: f[AT["log_outermost"]] = math.log2(loops[-1][1])  # loop order: a BLOCK puts its blocks outside
      if len(loops) > depth_max: depth_max, inner_alu, inner_bytes = len(loops), 0.0, 0.0
      f[AT["log_innermost"]] = max(f[AT["log_innermost"]], math.log2(loops[-1][1]))
      continue
    if u.op is UOps.ENDLOOP:
      weight //= loops.pop()[1]
      continue
    alu = u.vec * (3 if u.op is UOps.WMMA else 1) if u.op in (UOps.ALU, UOps.ACC, UOps.WMMA) else 0
    dt = prog.uops[u.src[0]].dtype if u.op is UOps.STORE else u.dtype  # a STORE's dtype is its value's
    nbytes = u.vec * dt.itemsize if u.op in (UOps.LOAD, UOps.STORE) and dt is not None else 0
    if u.op in (UOps.LOAD, UOps.STORE):
      f[AT[f"{u.op.name.lower()}_w{min((w for w in WIDTHS if w >= u.vec), default=16)}"]] += 1
    if u.op is UOps.LOAD:
      f[AT[f"load_{_stride(u, loops)}"]] += 1
      if isinstance(u.arg[0], str): f[AT["local_loads"]] += 1  # a DEFINE_LOCAL's name
      if loops and loops[0][0] not in variables(u.arg[1]): f[AT["outer_invariant_loads"]] += 1
      elif loops and (aff := affine(u.arg[1], [loops[0][0]])) and isinstance(c := aff[0][0], int): outer_stride += abs(c) * nbytes / u.vec
    if u.op is UOps.VBROADCAST: f[AT["load_broadcast"]] += 1
    if u.op is UOps.VBUILD: f[AT["load_strided"]] += 1
    if u.arg == "MULACC": f[AT["mulacc"]] += 1
    if u.op is UOps.DEFINE_ACC: f[AT["accumulators"]], f[AT["acc_lanes"]] = f[AT["accumulators"]] + 1, f[AT["acc_lanes"]] + u.vec
    f[AT["alu_lanes"]] += alu
    total_alu, total_bytes = total_alu + alu * weight, total_bytes + nbytes * weight
    if len(loops) == depth_max: inner_alu, inner_bytes = inner_alu + alu, inner_bytes + nbytes
  f[AT["log_loop_product"]] = math.log2(max(1, math.prod(max(1, smax(u.arg[1])) for u in prog.uops if u.op is UOps.LOOP)))
  f[AT["threads"]] = float(threads)
  f[AT["log_groups"]] = math.log2(max(1, math.prod(smax(g) for g in prog.groups)))
  f[AT["local_size"]] = math.prod(prog.local)
  f[AT["alu_per_iter"]], f[AT["bytes_per_iter"]] = inner_alu, inner_bytes
  f[AT["log_total_alu"]], f[AT["log_total_bytes"]] = math.log2(1 + total_alu), math.log2(1 + total_bytes)
  f[AT["log_outer_stride"]] = math.log2(1 + outer_stride)
  f[AT["intensity"]] = total_alu / max(1.0, total_bytes)
  f[AT["ir_size"]] = len(prog.uops)
  return f


def _stride(u, loops: list[tuple[Var, int]]) -> str:
  """How a LOAD's index moves with the innermost open loop (a vector LOAD is contiguous along its lanes)."""
  if u.vec > 1: return "contiguous"
  if not loops: return "broadcast"
  aff = affine(u.arg[1], [loops[-1][0]])
  if aff is None: return "strided"
  c = aff[0][0]
  return "strided" if not isinstance(c, int) else "broadcast" if c == 0 else "contiguous" if c == 1 else "strided"


# A schedule's features read off the Kernel itself, without lowering it (tens of microseconds against the lowering's
# tens of milliseconds): the AST's op counts, the sizes of the loops and of the upcast tile the opts made, and each
# buffer's strides along them -- what the lowering turns into vector widths, loads per iteration and accumulators.
SCHEDULE_NAMES: tuple[str, ...] = (
  "s_alu", "s_transcendental", "s_loads", "s_consts", "s_mulacc", "s_log_positions", "s_log_output", "s_log_reduce", "s_pad_ratio",
  "s_log_upcast", "s_log_upcast_out", "s_log_unroll", "s_upcast_axes", "s_threads", "s_blocks", "s_log_block", "s_packed",
  "s_log_pack_bytes", "s_local_dims", "s_groups", "s_tc", "s_log_iters", "s_log_innermost", "s_inner_reduce", "s_log_outermost",
  "s_accumulators", "s_lanes", "s_vec_contiguous", "s_vec_broadcast", "s_vec_strided", "s_store_vector", "s_inner_contiguous",
  "s_inner_broadcast", "s_inner_strided", "s_outer_invariant", "s_log_outer_stride", "s_elements_per_iter", "s_vector_loads",
  "s_element_loads", "s_alu_per_iter",
  "s_bytes_per_iter", "s_log_total_alu", "s_log_total_bytes", "s_intensity")
S_AT = {n: i for i, n in enumerate(SCHEDULE_NAMES)}
TRANSCENDENTAL = ("EXP2", "LOG2", "SIN")


def _strides(k: Kernel) -> list[tuple[Optional[int], ...]]:
  """Each leaf's stride along each axis (None: not affine, or symbolic), the one view's own where it has one view."""
  out = []
  for st in k.sts:
    s = st.views[0].strides if len(st.views) == 1 else st.real_strides(ignore_valid=True)
    out.append(tuple(x if isinstance(x, int) else None for x in s))
  return out


def _vector_axis(k: Kernel, full: list[int], strides: list[tuple[Optional[int], ...]], loads: list[tuple[Optional[int], ...]],
                 widths: tuple[int, ...]) -> Optional[int]:
  n = len(full)
  ups = [i for i in reversed(range(n - k.upcasted, n)) if full[i] in widths]
  ranked = []
  for i in (i for i in ups if not k.is_reduce_axis(i)):
    contiguous = strides[0][i] == 1
    if contiguous and any(s[i] == 1 for s in loads): return i
    if any(i in k.pack_axes(j) for j in k.packed): ranked.append((1, i))
    elif contiguous: ranked.append((2, i))
  if ranked: return min(ranked, key=lambda r: r[0])[1]
  if all(full[i] == 1 for i in range(k.first_reduce, n - k.upcasted)): return None  # no reduce loop to carry lanes across
  return next((i for i in ups if k.is_reduce_axis(i) and any(s[i] == 1 for s in loads)), None)


def _kind(stride: Optional[int]) -> str: return "broadcast" if stride == 0 else "contiguous" if stride == 1 else "strided"


def schedule_features(k: Kernel) -> list[float]:
  """The feature vector of k's schedule, without lowering it (SCHEDULE_NAMES)."""
  f = [0.0] * len(SCHEDULE_NAMES)
  def put(name: str, x: float) -> None: f[S_AT[name]] = float(x)
  nodes, full = k.ast.nodes, [max(1, smax(s)) for s in k.full_shape]
  n, up = len(full), k.upcasted
  alu = sum(1 for x in nodes if x.op in ALU)
  put("s_alu", alu)
  put("s_transcendental", sum(1 for x in nodes if x.op in TRANSCENDENTAL))
  put("s_loads", sum(1 for x in nodes if x.op == "LOAD"))
  put("s_consts", sum(1 for x in nodes if x.op == "CONST"))
  put("s_mulacc", k.reduceop is not None and k.reduceop.arg.fn == "SUM" and k.reduceop.src[0].op == "MUL")
  positions = math.prod(full)
  put("s_log_positions", math.log2(positions))
  put("s_log_output", math.log2(math.prod(max(1, smax(s)) for s in k.output_shape)))
  put("s_log_reduce", math.log2(positions / math.prod(max(1, smax(s)) for s in k.output_shape)))
  put("s_pad_ratio", positions / max(1, math.prod(max(1, smax(s)) for s in k.ast.full_shape)))
  upcast = list(range(n - up, n))
  tile = math.prod(full[i] for i in upcast)
  put("s_log_upcast", math.log2(tile))
  put("s_log_upcast_out", sum(math.log2(full[i]) for i in upcast if not k.is_reduce_axis(i)))
  put("s_log_unroll", sum(math.log2(full[i]) for i in upcast if k.is_reduce_axis(i)))
  put("s_upcast_axes", up)
  threads = full[0] if k.thread_dims else 1
  put("s_threads", threads)
  blocks = range(k.thread_dims, k.thread_dims + k.block_dims)
  put("s_blocks", k.block_dims)
  put("s_log_block", sum(math.log2(full[i]) for i in blocks))
  put("s_packed", len(k.packed))
  put("s_log_pack_bytes", math.log2(1 + k.pack_bytes()) if k.packed else 0)
  put("s_local_dims", k.local_dims)
  put("s_groups", k.group_for_reduces)
  put("s_tc", k.tensor_core is not None)
  loops = list(range(k.thread_dims, n - up))  # the loop nest each thread runs, outermost first
  iters = positions / tile / threads
  put("s_log_iters", math.log2(max(1.0, iters)))
  inner = loops[-1] if loops else None
  put("s_log_innermost", math.log2(full[inner]) if inner is not None else 0)
  put("s_inner_reduce", inner is not None and k.is_reduce_axis(inner))
  put("s_log_outermost", math.log2(full[loops[0]]) if loops else 0)
  strides = _strides(k)
  out_st, loads = strides[0], [(a, s) for a, s in zip(k.leaves[1:], strides[1:]) if isinstance(a, MemArg)]
  put("s_accumulators", math.prod(full[i] for i in upcast if out_st[i] != 0) if k.reduceop is not None else 0)
  # the vector axis, as the lowering picks it (linearizer/lower.py _vector_axis, less the masks): an output upcast axis of a
  # width the ISA has, innermost first, the STORE and a LOAD contiguous along it, else one a packed copy holds, else one the
  # STORE is contiguous along; else an unrolled reduce axis a LOAD is contiguous along, where a reduce loop is left
  widths = vector_widths(k.ast, k.options) if not k.options.has_local else ()
  vec = _vector_axis(k, full, strides, [s for _, s in loads], widths)
  lanes = full[vec] if vec is not None else 1
  put("s_lanes", lanes)
  for _, s in loads:
    if vec is not None and lanes > 1: f[S_AT[f"s_vec_{_kind(s[vec])}"]] += 1
    if inner is not None: f[S_AT[f"s_inner_{_kind(s[inner])}"]] += 1
    if loops and s[loops[0]] == 0: f[S_AT["s_outer_invariant"]] += 1
  put("s_store_vector", vec is not None and lanes > 1 and out_st[vec] == 1)
  outer_stride = sum(abs(st) * a.dtype.itemsize for a, s in loads if loops and (st := s[loops[0]]))
  put("s_log_outer_stride", math.log2(1 + outer_stride))
  # the elements each leaf moves a tile: an upcast axis it does not vary along reads one
  moved = [(a.dtype.itemsize, math.prod(full[i] for i in upcast if s[i] != 0)) for a, s in zip(k.leaves, strides) if isinstance(a, MemArg)]
  put("s_elements_per_iter", sum(e for _, e in moved))
  # the loads a tile takes: a leaf read contiguously along the vector axis in vectors of `lanes`, the others element by element
  for _, s in loads:
    e = math.prod(full[i] for i in upcast if s[i] != 0)
    if vec is not None and lanes > 1 and s[vec] == 1: f[S_AT["s_vector_loads"]] += e / lanes
    else: f[S_AT["s_element_loads"]] += e
  put("s_alu_per_iter", alu * tile)
  put("s_bytes_per_iter", sum(b * e for b, e in moved))
  put("s_log_total_alu", math.log2(1 + alu * positions))
  total_bytes = sum(b * e for b, e in moved) * iters * threads
  put("s_log_total_bytes", math.log2(1 + total_bytes))
  put("s_intensity", alu * positions / max(1.0, total_bytes))
  return f
