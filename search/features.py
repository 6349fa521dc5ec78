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
from linearizer.kernel import Kernel
from linearizer.lower import Program, UOps, lower
from linearizer.shapetracker import affine
from linearizer.symbolic import Var, smax, variables

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
