"""Which kernels' lanes the CPU and GPU-style renderers can carry as vectors, and in how many lanes: the lowering picks a
vector axis among those widths, and the Kernel counts a CPU's upcasts in vectors where one is that wide; and whether an
index reads lanes as consecutive elements, for the lowering and the hand-coded schedule alike."""
from __future__ import annotations
from linearizer.ast import KernelAST, LazyOp
from linearizer.dtypes import DType, bool_
from linearizer.options import LinearizerOptions
from linearizer.shapetracker import affine
from linearizer.symbolic import Var, sint, variables

# What lanes may carry as vectors: float32/float64 and integer arithmetic, which C vector extensions do lane by lane as
# the scalar ops do (integers wrap: -fwrapv); float16 only loaded, stored, reduced and converted (its arithmetic rounds
# per op through float32: on float32 lanes it was no faster, gcc 12 converts _Float16 vectors lane by lane); bool only
# as masks from comparisons and casts, feeding a WHERE or a cast. EXP2/LOG2/SIN: the renderer's vector function where
# it has one (C: linearizer.vecmath's, float32), else lane by lane; SQRT and RECIP (exact, as scalars) the ISA's vector
# sqrt and division where the language has them, else lane by lane. Ops whose scalar C spells out the reference
# semantics with branches or a libm call (lane_by_lane) are computed lane by lane: each lane's scalar op on the
# operands' lanes, gathered into a vector, so that they do not keep the rest scalar.
INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
VEC_ARITH, VEC_MEMORY = ("float32", "float64", *INTS), ("float16", "float32", "float64", *INTS)
VEC_ALU = {"f": ("ADD", "SUB", "MUL", "DIV", "NEG", "MAX", "CMPLT", "CMPEQ", "WHERE", "EXP2", "LOG2", "SIN", "SQRT", "RECIP"),
           "i": ("ADD", "SUB", "MUL", "NEG", "MAX", "CMPLT", "CMPEQ", "WHERE", "XOR")}  # by the operands' kind: float, int
VEC_CASTS = {("float16", "float32"), ("float32", "float16"), ("float32", "float64"), ("float64", "float32"),
             ("float32", "bool"), ("float64", "bool"), ("bool", "float32"), ("bool", "float64"),
             *((a, b) for a in INTS for b in (*INTS, "float16", "float32", "float64", "bool")), *(("bool", b) for b in INTS)}

def lane_by_lane(op: str, src: DType, dst: DType) -> bool:
  """Whether a vector's op (an ALU op or CAST, from `src` lanes to `dst` lanes) is computed lane by lane: integer DIV
  and MOD (by 0 and -1 defined), float MOD (fmod) and float-to-int casts (range checks: C leaves the rest undefined)."""
  if op == "CAST": return src.name in VEC_MEMORY and src.is_float and dst.name in INTS
  return (op == "MOD" or op == "DIV" and src.is_int) and src.name in VEC_ARITH

def vector_node(n: LazyOp) -> bool:
  if n.op == "CAST": return not n.arg.bitcast and ((n.src[0].dtype.name, n.dtype.name) in VEC_CASTS or lane_by_lane("CAST", n.src[0].dtype, n.dtype))
  if n.op in ("LOAD", "CONST", "STORE", "REDUCE"): return n.dtype.name in VEC_MEMORY
  srcs = n.src[1:] if n.op == "WHERE" else n.src  # WHERE: a mask, 2 values
  if lane_by_lane(n.op, srcs[0].dtype, n.dtype): return True
  return all(s.dtype.name in VEC_ARITH for s in srcs) and n.op in VEC_ALU["f" if srcs[0].dtype.is_float else "i"]

def vector_widths(ast: KernelAST, options: LinearizerOptions) -> tuple[int, ...]:
  """The lane counts this kernel's lanes can be carried as vectors of: none unless every node can be (on this device:
  its vector_dtypes), then the device's vector sizes (its float_vector_widths count float32 lanes) in lanes of the
  kernel's widest dtype."""
  if not all(vector_node(n) and (n.dtype == bool_ or n.dtype.name in options.vector_dtypes) for n in ast.nodes): return ()
  size = max(n.dtype.itemsize for n in ast.nodes if n.dtype != bool_)
  return tuple(w * 4 // size for w in options.float_vector_widths if w * 4 % size == 0 and w * 4 // size > 1)

def step(idx: sint, v: Var) -> sint | None:
  """How many elements apart `idx` is from one value of `v` to the next: its coefficient where `idx` is affine in `v`."""
  return None if (aff := affine(idx, [v])) is None else aff[0][0]

def consecutive(idx: sint, valid: sint, v: Var) -> bool:
  """Are the lanes of `v` consecutive elements at `idx`, valid together: one vector load, not lanes gathered or masked?"""
  return step(idx, v) == 1 and v not in variables(valid)
