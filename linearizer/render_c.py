"""C-style source for the linear IR -- C and OpenCL C here, CUDA, HIP and Metal in render_gpu -- from one renderer and
a small table per language, with the reference semantics spelled out where C leaves them undefined: integer division
by 0 or -1, NaN in MAX, float-to-int casts out of range or of NaN, signed overflow that wraps, and float16/bfloat16 arithmetic
done in float and rounded after every op. MULACC is an explicit fused multiply-add (the compiler contracts nothing
itself: -ffp-contract=off in C, FP_CONTRACT OFF in OpenCL). Vectors are C's gcc/clang vector extensions, selecting
lanes through masks where scalar code has ?:, and OpenCL's built-in vector types with select()."""
from __future__ import annotations
import json, math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence
from linearizer.dtypes import DTYPES, DType, bool_, float_to_int_via
from linearizer.lower import AVX2_REGISTERS, LANE, Program, UOps, lane_loads
from linearizer.vectors import lane_by_lane
from linearizer.shapetracker import affine
from linearizer.symbolic import Var, add, evaluate, mod, mul, parse, render, smax, substitute, variables
from linearizer.tensor_cores import TensorCore, opencl_wmma
from linearizer import vecmath


@dataclass(frozen=True)
class Lang:
  """What differs between the C-style languages."""
  prelude: str
  kernel: str = ""                                   # before the kernel's `void`
  # before `kernel` where a scalar LOAD or value has a validity (padding, masks: `valid ? x : 0`): C turns gcc's loop
  # if-conversion off, whose code gcc 12's loop vectorizer gets wrong (docs/compiler-bugs/gcc12-masked-*.md)
  gcc_optimize: str = ""  # a function attribute of gcc's optimize options, where the kernel needs some ({}: them, quoted)
  symbol: str = "{}"                                 # the kernel's symbol for its name: OpenCL reserves `kernel`
  buffer: str = ""                                   # address space of a kernel argument's buffer
  types: dict = field(default_factory=dict)          # dtype -> register type, where not DType.c
  storage: dict = field(default_factory=dict)        # dtype -> buffer element type, where not the register type
  load: dict = field(default_factory=dict)           # dtype -> stored element to register value
  store: dict = field(default_factory=dict)          # dtype -> register value to stored element
  narrow: dict = field(default_factory=dict)         # dtype -> a float-computed result rounded to the dtype
  from_double: dict = field(default_factory=dict)    # dtype -> a double rounded to it once (not through float)
  suffix: dict = field(default_factory=dict)         # int dtype -> literal suffix
  wrap: dict = field(default_factory=dict)           # signed dtype -> the unsigned type its + - * wrap through
  float_fn: str = "f"                                # suffix of float32 math functions (fmodf), "" where overloaded
  index: str = "long long"                           # type of loop and work-item indices
  bitcast: str = "({{union {{ {s} s; {d} d; }} u_; u_.s = {x}; u_.d;}})"
  ids: dict = field(default_factory=dict)            # "group" | "local" -> the index of launch dim {} (x, y, z: {xyz})
  id_args: str = ""                                  # kernel arguments that carry those indices, where they are arguments
  bounds: str = ""                                   # the work-group size the kernel is built for ({dims}: per dim, {n}: in all)
  barrier: str = ""
  shared: str = ""                                   # address space of local memory
  restrict: str = "restrict"                         # a buffer argument aliases no other
  arg: str = "{}"                                    # a kernel argument's declaration at position {i}
  var_arg: str = "int {}"                            # a variable's kernel argument
  wide: str = "double"                               # a float type holding every value exactly: casts compare and EXP2/LOG2/SIN compute in it
  # lanes -> the source of float32 EXP2/LOG2/SIN on that many lanes (vecmath), which float16/bfloat16 and float32 use;
  # None: the language's own functions on `wide`, rounded (GPUs' double exp2/log2/sin, never fast-math intrinsics)
  float_math: Optional[Callable[[int], str]] = None
  needs: dict = field(default_factory=dict)          # dtype -> what a program using it needs (headers, helpers)
  fma: str = "__builtin_fma{f}({0},{1},{2})"         # a*b+c rounded once ({f}: the float32 suffix)
  fmax: str = "(({0}>{1}||{0}!={0})?{0}:{1})"        # the scalar float MAX, NaN in either wins ({t}: the type it computes in)
  # vectors ({vt}: the vector type, {mt}: its mask type): the type of {n} lanes of dtype {d} (C type {t}), a mask's
  # type of {n} lanes of {bits} bits (C type {lane})
  declare_vectors: bool = True                       # vector and mask types and vector FMAs need declaring
  vectors: str = ""                                  # what a program with vector values needs
  vtype: str = "{d}x{n}"
  mtype: str = "int{bits}x{n}"
  mask_lanes: dict = field(default_factory=lambda: {1: "signed char", 2: "short", 4: "int", 8: "long long"})  # lane bytes -> C type
  vbroadcast: str = "{x}-({vt}){{}}"                 # x - 0 is x, -0 included (-0 + 0 is +0)
  vbuild: str = "({vt}){{{xs}}}"
  vzero: str = "({vt}){{}}"
  vload: str = "*({vt}u*)({p})"                      # through the unaligned type: only its lanes' alignment is known
  vstore: str = "*({vt}u*)({p}) = {x};"
  vload_aligned: str = ""                            # at an index that is a multiple of the lanes: one access ("": as above)
  vstore_aligned: str = ""
  # a non-temporal vector store at an aligned index, where the buffer starts aligned to the vector ({flag}: the name of
  # that test's result) and a fence that makes this thread's such stores visible before the kernel returns ("": none)
  vstream: str = ""
  stream_fence: str = ""
  select: str = "(({vt})(({m}&({mt}){a})|(~{m}&({mt}){b})))"  # lanes of a where mask m is set, else of b (bits reinterpreted)
  convert: str = "__builtin_convertvector({x},{vt})"  # lane by lane, as a scalar converts
  vfma: str = "mulacc_{vt}({0},{1},{2})"
  # vector value {x} kept in a register from here on (render_source's keep_loads; "": the language has no such hint)
  vkeep: str = ""
  vsqrt: str = ""                                    # the correctly rounded square root of vector x ("": lane by lane)
  gep: str = "{x}[{i}]"                              # lane i of vector x ({xyzw}: its letter, lanes 0-3)
  # lanes of vectors a and b by constant indices ({idx}: each lane's, into a's lanes then b's; {mt}: the mask type of
  # their lanes), and what a program with such shuffles needs ("": the language has none)
  shuffle: str = ""
  shuffle_decl: str = ""
  wmma: Optional[Callable[[TensorCore], tuple[str, str, str]]] = None  # TensorCore -> (function, kernel declaration, call): tensor_cores.py

  def ctype(self, dt: DType) -> str: return self.types.get(dt.name, dt.c)
  def tensor_core(self, tc: TensorCore) -> tuple[str, str, str]:
    if self.wmma is None: raise ValueError(f"{tc.name}: this language has no tensor cores")
    return self.wmma(tc)
  def storage_type(self, dt: DType) -> str: return self.storage.get(dt.name, self.ctype(dt))


C = Lang(
  prelude="""#include <math.h>
#include <stdbool.h>
#include <string.h>
static inline float bf2f(unsigned short b) { unsigned u = (unsigned)b << 16; float f; memcpy(&f, &u, 4); return f; }
static inline unsigned short f2bf(float f) {  /* round to nearest even; NaN stays NaN */
  unsigned u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static inline float bfround(float f) { return bf2f(f2bf(f)); }
""",
  types={"float16": "_Float16", "bfloat16": "float", "bool": "bool"}, storage={"bfloat16": "unsigned short"},
  load={"bfloat16": "bf2f({})"}, store={"bfloat16": "f2bf({})"}, narrow={"float16": "((_Float16)({}))", "bfloat16": "bfround({})"},
  suffix={"int64": "LL", "uint64": "ULL", "uint32": "U"}, float_math=vecmath.c_source, vsqrt="sqrt_{vt}({x})",
  shared="__attribute__((aligned(64))) ",  # PACK's copies on the stack: a vector of a packed row is one cache line
  vstream="if ({flag}) stream_{vt}({p}, {x}); else *({vt}u*)({p}) = {x};", stream_fence="stream_fence();",
  # gcc before 12 has no __builtin_shufflevector, clang no __builtin_shuffle
  shuffle="tsvc_shuffle({a},{b},{mt},{idx})",
  shuffle_decl="#if defined(__clang__)\n#define tsvc_shuffle(a, b, m, ...) __builtin_shufflevector(a, b, __VA_ARGS__)\n#else\n"
               "#define tsvc_shuffle(a, b, m, ...) __builtin_shuffle(a, b, (m){__VA_ARGS__})\n#endif\n",
  gcc_optimize='#if defined(__GNUC__) && !defined(__clang__)\n__attribute__((optimize({})))\n#endif\n',
  # the larger by x86's maxss pattern (a>b?a:b: b where either is NaN), then a where a is NaN (!(a<=a)): both selects on
  # values already computed, which gcc makes maxss and a compare and blend, no branch; the old `(a>b||a!=a)?a:b` asked it
  # to evaluate a compare in one arm, which it will not before the test (-ftrapping-math), so it branched on the data
  # (a tree of maxes over random data mispredicts half of them: corpus sops_13891 8x, max pools 8-13x slower; with the
  # NaN test in one arm instead the max stayed a branch where gcc folded a negation into it). Bit for bit the old results.
  fmax="({{{t} m_={0}>{1}?{0}:{1}; !({0}<={0})?{0}:m_;}})",
  vkeep='__asm__("" : "+x"({x}));')  # an empty asm that reads and writes it: the value is no longer the memory it came from

# OpenCL C: half needs cl_khr_fp16, which many devices lack, so float16 is stored as its 16 bits and computed in float
# like bfloat16; vload_half/vstore_half_rte (core) convert exactly. No -fwrapv: signed + - * wrap through unsigned.
# Vectors are the built-in floatN/doubleN: comparisons give the -1/0 int lanes select() takes; fma() is rounded once.
OPENCL = Lang(
  prelude="""#pragma OPENCL FP_CONTRACT OFF
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
float bf2f(ushort b) { return as_float((uint)b << 16); }
ushort f2bf(float f) {  /* round to nearest even; NaN stays NaN */
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
float bfround(float f) { return bf2f(f2bf(f)); }
float h2f(ushort h) { return vload_half(0, (const half*)&h); }
ushort f2h(float f) { ushort h; vstore_half_rte(f, 0, (half*)&h); return h; }
ushort d2h(double f) { ushort h; vstore_half_rte(f, 0, (half*)&h); return h; }
float hround(float f) { return h2f(f2h(f)); }
""",
  kernel="__kernel ", symbol="tunesvc_{}", buffer="__global ",
  types={"int8": "char", "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "int64": "long", "uint64": "ulong",
         "float16": "float", "bfloat16": "float", "bool": "bool"},
  storage={"float16": "ushort", "bfloat16": "ushort", "bool": "uchar"},  # no bool in kernel arguments
  load={"float16": "h2f({})", "bfloat16": "bf2f({})"}, store={"float16": "f2h({})", "bfloat16": "f2bf({})"},
  narrow={"float16": "hround({})", "bfloat16": "bfround({})"}, from_double={"float16": "h2f(d2h({}))"},
  suffix={"int64": "L", "uint64": "UL", "uint32": "U"}, wrap={"int32": "uint", "int64": "ulong", "uint16": "uint"},  # ushort promotes to int
  float_fn="", index="long", bitcast="as_{d}({x})", ids={"group": "get_group_id({})", "local": "get_local_id({})"},
  bounds="__attribute__((reqd_work_group_size({dims}))) ", barrier="barrier(CLK_LOCAL_MEM_FENCE);", shared="__local ",
  fma="fma({0},{1},{2})", declare_vectors=False, vtype="{t}{n}", mtype="{lane}{n}", mask_lanes={1: "char", 2: "short", 4: "int", 8: "long"},
  vbroadcast="({vt})({x})", vbuild="({vt})({xs})", vzero="({vt})(0)", vload="vload{n}(0, {p})", vstore="vstore{n}({x}, 0, {p});",
  select="select({b},{a},{m})", convert="convert_{vt}({x})", vfma="fma({0},{1},{2})", vsqrt="sqrt({x})", gep="{x}.s{i}",
  wmma=opencl_wmma)  # no OpenCL device has tensor cores: an emulation with their semantics, for tests


def literal(val, dt: DType, lang: Lang = C) -> str:
  if dt == bool_: return "1" if val else "0"
  t = lang.ctype(dt)
  if dt.is_int:
    sfx = lang.suffix.get(dt.name, "")
    return f"(({t}){val}{sfx})" if not (dt.name == "int64" and val == dt.min) else f"(({t})({dt.min + 1}{sfx}-1))"
  if math.isnan(val): return f"(({t})NAN)"
  if math.isinf(val): return f"(({t}){'-' if val < 0 else ''}INFINITY)"
  return f"(({t}){float(val).hex()})"  # hex floats are exact

def _narrow(dt: DType, expr: str, lang: Lang) -> str:
  """Round a float-computed result to the value's dtype, per op."""
  return lang.narrow[dt.name].format(expr) if dt.name in lang.narrow else expr

def _f(dt: DType, x: str) -> str: return f"(float){x}" if dt.name == "float16" else x

def _wrapped(op: str, t: str, u: str, a: list[str]) -> str:
  e = f"(-({u}){a[0]})" if op == "NEG" else f"(({u}){a[0]}{'+-*'['ADD SUB MUL'.split().index(op)]}({u}){a[1]})"
  return f"(({t}){e})"

def alu(op: str, dt: DType, a: list[str], src_dt: DType, lang: Lang = C) -> str:
  """One ALU op on rendered operands; dt is the result's dtype, src_dt the operands'."""
  if op == "WHERE": return f"({a[0]}?{a[1]}:{a[2]})"
  if op in ("CMPLT", "CMPEQ"): return f"({a[0]}{'<' if op == 'CMPLT' else '=='}{a[1]})"
  if src_dt == bool_: return {"ADD": "({0}||{1})", "MAX": "({0}||{1})", "MUL": "({0}&&{1})", "XOR": "({0}!={1})", "NEG": "(!{0})"}[op].format(*a)
  if src_dt.is_float:
    fn = "" if src_dt.name == "float64" else lang.float_fn
    if op == "MULACC": return lang.fma.format(*a, f=fn)  # float32/float64 only: rounded once
    x = [_f(src_dt, v) for v in a]
    if op in vecmath.FUNCS and lang.float_math and src_dt.name != "float64": return _narrow(dt, f"tsvc_{op.lower()}f({x[0]})", lang)
    if op in vecmath.FUNCS:  # from `wide` and rounded: within the contract (reference.ULP_BOUND)
      return _narrow(dt, f"({'double' if src_dt.name == 'float64' else 'float'}){op.lower()}(({lang.wide}){x[0]})", lang)
    e = {"NEG": "(-{0})", "ADD": "({0}+{1})", "SUB": "({0}-{1})", "MUL": "({0}*{1})", "DIV": "({0}/{1})",
         "MAX": lang.fmax, "MOD": f"fmod{fn}({{0}},{{1}})", "SQRT": f"sqrt{fn}({{0}})",
         "RECIP": "(1.0/{0})" if src_dt.name == "float64" else "(1.0f/{0})"}[op]
    return _narrow(dt, e.format(*x, t="double" if src_dt.name == "float64" else "float"), lang)
  signed, wrap = src_dt.kind == "i", lang.wrap.get(src_dt.name)
  if wrap and op in ("NEG", "ADD", "SUB", "MUL"): return _wrapped(op, lang.ctype(src_dt), wrap, a)
  if op == "DIV":
    neg = _wrapped("NEG", lang.ctype(src_dt), wrap, a) if wrap else f"-{a[0]}"
    return f"({a[1]}==0?0:{a[1]}==-1?{neg}:{a[0]}/{a[1]})" if signed else f"({a[1]}==0?0:{a[0]}/{a[1]})"
  if op == "MOD": return f"(({a[1]}==0{f'||{a[1]}==-1' if signed else ''})?0:{a[0]}%{a[1]})"
  return {"NEG": "(-{0})", "ADD": "({0}+{1})", "SUB": "({0}-{1})", "MUL": "({0}*{1})", "MAX": "({0}>{1}?{0}:{1})",
          "XOR": "({0}^{1})"}[op].format(*a)

def cast(x: str, src: DType, dst: DType, bitcast: bool, lang: Lang = C) -> str:
  if bitcast:  # through the stored bits: a bfloat16 lives in a float register
    u = lang.bitcast.format(s=lang.storage_type(src), d=lang.storage_type(dst), x=lang.store[src.name].format(x) if src.name in lang.store else x)
    return lang.load[dst.name].format(u) if dst.name in lang.load else u
  if dst == bool_: return f"({x}!=0)"
  if src.is_float and dst.is_int: return float_to_int(x, src, dst, lang)
  if src.name == "float64" and dst.name in lang.from_double: return lang.from_double[dst.name].format(x)
  return _narrow(dst, f"({lang.ctype(dst)}){_f(src, x)}", lang)


def float_to_int(x: str, src: DType, dst: DType, lang: Lang) -> str:
  """reference._float_to_int. C defines a conversion only where the truncated value fits the type, so each is behind a
  range check in the source's precision (exact: its bounds are powers of two or, from a double to int32, -2^31 - 1;
  NaN fails it), and no compiler's folding of a constant can differ from the rule."""
  v, t = _f(src, x), lang.ctype(dst)
  fl = lambda c: f"{float(c).hex()}{'' if src.name == 'float64' else 'f'}"  # noqa: E731  (powers of two: exact in float)
  def fits(bits: int) -> str:  # -2^(bits-1) - 1 < v < 2^(bits-1): the truncation fits intN
    lo = f">{-(2 ** 31) - 1}.0" if bits == 32 and src.name == "float64" else f">=-{fl(2 ** (bits - 1))}"  # else no value between
    return f"({v}{lo}&&{v}<{fl(2 ** (bits - 1))})"
  i64 = lang.ctype(DTYPES["int64"])
  if dst.name == "uint64":  # [-2^63, 0) through int64, [0, 2^64) as it is; 0 above, 2^63 below and NaN
    return (f"({v}>=0?({v}<{fl(2 ** 64)}?({t}){v}:{literal(0, dst, lang)}):"
            f"{fits(64)}?({t})({i64}){v}:{literal(2 ** 63, dst, lang)})")
  via = float_to_int_via(dst)
  return f"(({t})({fits(8 * via.itemsize)}?({lang.ctype(via)}){v}:{literal(via.min, via, lang)}))"


VECTOR_ONLY = ("MAX", "WHERE", "MULACC")  # the ALU ops whose scalar C does not work on vectors as it is

def vtype(dt: DType, vec: int, lang: Lang) -> str: return lang.vtype.format(d=dt.name, t=lang.ctype(dt), n=vec) if vec > 1 else lang.ctype(dt)
def mtype(size: int, vec: int, lang: Lang) -> str: return lang.mtype.format(bits=8 * size, lane=lang.mask_lanes[size], n=vec)

def valu(op: str, a: list[str], vt: str, mt: str, lang: Lang) -> str:
  """A VECTOR_ONLY op on float32/float64 vectors (mt: the mask type of their lanes), the scalar semantics per lane."""
  if op == "MAX": return lang.select.format(m=f"(({a[0]}>{a[1]})|({a[0]}!={a[0]}))", a=a[0], b=a[1], vt=vt, mt=mt)  # NaN in either lane wins
  if op == "WHERE": return lang.select.format(m=a[0], a=a[1], b=a[2], vt=vt, mt=mt)
  return lang.vfma.format(*a, vt=vt)

def lanes(vec: int, vt: str, lang: Lang, fn: Callable[[Callable[[str], str]], str]) -> str:
  """A vector of `vec` lanes, lane j fn(lane j of an operand)."""
  def lane(j: int) -> Callable[[str], str]: return lambda x: lang.gep.format(x=x, i=j, xyzw="xyzw"[j % 4])
  return lang.vbuild.format(xs=", ".join(fn(lane(j)) for j in range(vec)), vt=vt)

def steps(src: DType, dst: DType) -> list[DType]:
  """The int dtypes a vector conversion from int lanes goes through, so that no step more than halves or doubles the
  lane size: gcc 12 converts such a step in an instruction or two and a longer one lane by lane (uint8 -> float32: 57
  instructions). Widening keeps the value (ints of the source's signedness), narrowing to an int wraps either way."""
  if not src.is_int or dst.is_float and dst.itemsize < src.itemsize: return []
  out, size, kind = [], src.itemsize, src.kind if dst.itemsize > src.itemsize else dst.kind
  while not size / 2 <= dst.itemsize <= size * 2:
    size = size * 2 if dst.itemsize > size else size // 2
    out.append(DTYPES[f"{'u' if kind == 'u' else ''}int{8 * size}"])
  return out

def vcast(x: str, src: DType, dst: DType, vt: str, vec: int, lang: Lang) -> str:
  """Lanes convert as C converts a scalar (ints wrap, ints to floats round) but float to int, lane by lane; a mask is a
  comparison's lanes (-1 or 0)."""
  if dst == bool_: return f"({x}!=0)"
  if lane_by_lane("CAST", src, dst): return lanes(vec, vt, lang, lambda lane: cast(lane(x), src, dst, False, lang))
  for step in steps(src, dst): x = lang.convert.format(x=x, vt=vtype(step, vec, lang))
  return lang.convert.format(x=f"{x}&1" if src == bool_ else x, vt=vt)

def mulacc_fn(vt: str, dt: DType, lanes: int) -> str:
  """a*b+c on vectors, rounded once where the ISA has a fused multiply-add (vecmath.fma_fn; other dtypes twice)."""
  if dt.name not in ("float32", "float64"): return f"static inline {vt} mulacc_{vt}({vt} a, {vt} b, {vt} c) {{\n  return a * b + c;\n}}\n"
  return vecmath.fma_fn(f"mulacc_{vt}", vt, dt.name == "float64", lanes)

def sqrt_fn(vt: str, dt: DType, lanes: int) -> str:
  """sqrt on vectors: C has none, but gcc and clang make one vsqrtps/vsqrtpd of a lane loop (under -fno-math-errno)."""
  fn = "__builtin_sqrtf" if dt.name == "float32" else "__builtin_sqrt"
  return f"static inline {vt} sqrt_{vt}({vt} x) {{\n  {vt} r;\n  for (int i = 0; i < {lanes}; i++) r[i] = {fn}(x[i]);\n  return r;\n}}\n"

def vector_decls(prog: Program, lang: Lang) -> str:
  """C: typedefs of the vector types the program uses, each with its unaligned twin (for memory) and its lane mask,
  and the fused multiply-add and square root of each vector type that has MULACCs or SQRTs. OpenCL has them built in."""
  if not lang.declare_vectors: return ""
  vecs = [(u.value_dtype, u.vec) for u in prog.uops if u.vec > 1 and u.dtype not in (None, bool_)]
  vecs += [(step, u.vec) for u in prog.uops if u.op is UOps.CAST and u.vec > 1 for step in steps(prog.uops[u.src[0]].value_dtype, u.value_dtype)]
  fmas = [(u.value_dtype, u.vec) for u in prog.uops if u.vec > 1 and u.op in (UOps.ALU, UOps.ACC) and u.arg == "MULACC"]
  sqrts = [(u.value_dtype, u.vec) for u in prog.uops if u.vec > 1 and u.op is UOps.ALU and u.arg == "SQRT"]
  out = list(dict.fromkeys(t for dt, vec in vecs for t in (  # a signed int vector and its mask are one type (int32x8)
    f"typedef {lang.ctype(dt)} {vtype(dt, vec, lang)} __attribute__((vector_size({dt.itemsize * vec})));\n",
    f"typedef {lang.ctype(dt)} {vtype(dt, vec, lang)}u __attribute__((vector_size({dt.itemsize * vec}), aligned({dt.itemsize})));\n",
    f"typedef {lang.mask_lanes[dt.itemsize]} {mtype(dt.itemsize, vec, lang)} __attribute__((vector_size({dt.itemsize * vec})));\n")))
  if fmas: out.append("#if defined(__clang__) && (defined(__FMA__) || defined(__AVX512F__))\n#include <immintrin.h>\n#endif\n")
  if any(u.op is UOps.SHUFFLE for u in prog.uops): out.append(lang.shuffle_decl)
  return "".join(out + [mulacc_fn(vtype(dt, vec, lang), dt, vec) for dt, vec in dict.fromkeys(fmas)] +
                 [sqrt_fn(vtype(dt, vec, lang), dt, vec) for dt, vec in dict.fromkeys(sqrts)])


# vector bytes -> (the ISA macro, gcc's builtin of its non-temporal store of 64-bit lanes)
STREAM_X86 = {16: ("__SSE2__", "__builtin_ia32_movntdq"), 32: ("__AVX__", "__builtin_ia32_movntdq256"),
              64: ("__AVX512F__", "__builtin_ia32_movntdq512")}

LINE = 64         # bytes of a cache line
LIGHT_BODY = 16   # ALU ops a stored vector: a loop body no heavier completes a line of non-temporal stores in good time

def streamed(prog: Program, lang: Lang, stream_bytes: Optional[int]) -> set[int]:
  """The output buffers whose stores are non-temporal: at least stream_bytes written (None: no buffer), too large for its
  reader to find in the cache, where a normal store reads each line before writing it (y = f(x): 3 lines moved for 2);
  each element written once, by full vectors at indices that are multiples of the lanes, in one run the innermost loop
  around them continues, so that the write-combining buffers fill whole lines in order. Nothing symbolic: its size could
  not be shown. Whether the buffer starts aligned to the vector is tested at run time (render_source's stream{b})."""
  if stream_bytes is None or not lang.vstream: return set()
  stores: dict[int, list] = {}
  loads, scopes = set(), []
  alus: dict[int, int] = {}  # a LOOP's index -> the ALU ops in its body, not in loops inside it
  for i, u in enumerate(prog.uops):
    if u.op in (UOps.LOOP, UOps.IF): scopes.append(i)
    elif u.op in (UOps.ENDLOOP, UOps.ENDIF): scopes.pop()
    elif u.op is UOps.ALU and scopes: alus[scopes[-1]] = alus.get(scopes[-1], 0) + 1
    elif u.op is UOps.LOAD: loads.add(u.arg[0])
    elif u.op is UOps.STORE and isinstance(u.arg[0], int): stores.setdefault(u.arg[0], []).append((u, tuple(scopes)))
  dtypes = dict(prog.buffers)
  def body(ss) -> int: return alus.get(ss[0][1][-1], 0) if ss[0][1] else 0
  return {b for b, ss in stores.items()
          if b not in loads and _streams(ss, [prog.uops[i] for i in ss[0][1]], body(ss), dtypes[b], stream_bytes, lang)}

def _streams(stores: list, scopes: list, alus: int, dt: DType, stream_bytes: int, lang: Lang) -> bool:
  """Whether one buffer's STOREs (each with the indices of the LOOPs and IFs around it), under those scopes whose
  innermost holds `alus` ALU ops, can be non-temporal (streamed)."""
  n = stores[0][0].vec
  if dt == bool_ or dt.name in lang.store or n * dt.itemsize not in STREAM_X86: return False
  if any(u.vec != n or u.arg[2] != 1 or s != stores[0][1] or mod(u.arg[1], n) != 0 for u, s in stores): return False
  if not scopes or any(u.op is not UOps.LOOP or not isinstance(u.arg[1], int) for u in scopes): return False
  loops = [(u.arg[0], u.arg[1]) for u in scopes if isinstance(u.arg[0], Var)]
  idxs = [u.arg[1] for u, _ in stores]
  if any(variables(i) - {v for v, _ in loops} for i in idxs): return False  # a kernel variable's
  offsets = [o for i in idxs if isinstance(o := add(i, mul(idxs[0], -1)), int)]
  run = n * len(idxs)
  if len(offsets) != len(idxs) or sorted(o - min(offsets) for o in offsets) != list(range(0, run, n)): return False
  # a line the loop completes over iterations of a heavy body is written back in parts: corpus sops_170 (41 ALU ops, an
  # EXP2 and a DIV among them, a vector of 32 bytes an iteration) ran 1.04-1.07x slower non-temporal; the kernels at up
  # to 7 ALU ops a vector (mul_add, layernorm's norm) and at whole lines an iteration (GELU, softmax's division) did not
  if run * dt.itemsize % LINE and alus > LIGHT_BODY * len(idxs): return False
  aff = affine(idxs[0], [v for v, _ in loops])
  steps = [c for c in aff[0] if isinstance(c, int) and c > 0] if aff is not None else []
  if len(steps) != len(loops): return False
  # every element once: each loop's step at least the extent of the loops under it, the innermost continuing the run
  span = run
  for step, end, depth in sorted(zip(steps, [end for _, end in loops], range(len(loops)))):
    if step < span or span == run and (step != run or depth != len(loops) - 1): return False
    span = step * end
  return (max(smax(i) for i in idxs) + n) * dt.itemsize >= stream_bytes

def streamed_decls(prog: Program, lang: Lang, streams: set[int]) -> str:
  """C: stream_{vt}(p, x), a store of vector x at p that bypasses the cache (gcc's builtin of the ISA's instruction,
  clang's generic one; a plain store where the ISA has none), and stream_fence(): this thread's such stores made
  visible, in order, before its part of the kernel ends."""
  dtypes = dict(prog.buffers)
  vts = dict.fromkeys((vtype(dt, u.vec, lang), lang.storage_type(dt), u.vec * dt.itemsize)
                      for u in prog.uops if u.op is UOps.STORE and u.arg[0] in streams for dt in [dtypes[u.arg[0]]])
  fns = []
  for vt, t, nbytes in vts:
    guard, builtin = STREAM_X86[nbytes]
    fns.append(f"static inline void stream_{vt}({t}* p, {vt} x) {{\n#if defined(__clang__)\n  __builtin_nontemporal_store(x, ({vt}*)p);\n"
               f"#elif defined({guard})\n  typedef long long q __attribute__((vector_size({nbytes})));\n  {builtin}((q*)p, (q)x);\n"
               f"#else\n  *({vt}u*)p = x;\n#endif\n}}\n")
  fence = "static inline void stream_fence(void) {\n#if defined(__SSE2__)\n  __builtin_ia32_sfence();\n#endif\n}\n"
  return "".join(fns) + (fence if fns else "")


LAUNCH = "// launch "

def launch_line(prog: Program) -> str:
  """The launch a GPU-style kernel needs, as the first line of its source: work-groups per launch dim (symbolic in
  the variables, named in the kernel's argument order) and work-items per launch dim."""
  return LAUNCH + json.dumps({"groups": [render(g) for g in prog.groups], "local": list(prog.local), "vars": [v.name for v in prog.vars]}) + "\n"

def launch_sizes(launch: dict, var_vals: Sequence[int]) -> tuple[list[int], list[int]]:
  """(work-groups, work-items) per launch dim of a launch line's JSON at the variables' values, in argument order."""
  env = dict(zip(launch["vars"], var_vals))
  names = {n: Var(n, v, v) for n, v in env.items()}
  return [int(evaluate(parse(g, names), env)) for g in launch["groups"]], launch["local"]


def kept_loads(prog: Program) -> set[int]:
  """The vector LOADs that two FMAs or more take (a register tile's vectors of B, each row's FMA), where there are two
  such loads or more and they fit in AVX2's registers beside the accumulators and a broadcast. gcc 12 (x86) folds such
  a load into each FMA as its memory operand, no register left to the value: IRA finds the load's memory as cheap a
  home for it as a register (an FMA's operand costs the same either way), and under a tile's pressure takes it. The 4x2
  AVX2 tile of a matmul then loaded each vector of B 4 times, 24 loads a step of 16 FMAs where 12 do (Zen 3: 3 loads a
  cycle against 2 FMAs, the loads set the pace). Kept in registers (Lang.vkeep), 1 thread, BUSY Zen 3, thread CPU time,
  interleaved: matmul 512-4096 0.55-0.66x -> 0.77-0.93x of OpenBLAS (docs/benchmarks.md). A lone vector gcc keeps in
  a register itself, where the asm only cost (the 3x3 conv 128->128 stride 2, 8 pixels x 1 vector: 0.84x); past the
  registers the asm spilled an accumulator (sops_940, 7 pixels x 2 vectors: 0.65x)."""
  fmas: dict[int, int] = {}
  for u in prog.uops:
    if u.op is UOps.ACC and u.arg == "MULACC":
      for s in set(u.src[1:]): fmas[s] = fmas.get(s, 0) + 1
  kept = {i for i, n in fmas.items() if n > 1 and prog.uops[i].op is UOps.LOAD and prog.uops[i].vec > 1}
  accs = sum(u.op is UOps.DEFINE_ACC and u.vec > 1 for u in prog.uops)
  return kept if len(kept) > 1 and accs + len(kept) + 1 <= AVX2_REGISTERS else set()

def render_source(prog: Program, lang: Lang, stream_bytes: Optional[int] = None, keep_loads: bool = False) -> str:  # noqa: C901  (one branch per IR op, flat; follow-up with lower()'s passes)
  """The program's source; outputs of at least stream_bytes (None: none) stored non-temporally where streamed() allows;
  with keep_loads, the vectors kept_loads() finds held in registers (an AVX2 host's: 16 of them, x86 asm)."""
  names: dict[int, str] = {}
  # a kernel's own variables are renamed apart: no generated name (v1, acc4, data0; the linearizer's start with "_"), type,
  # macro or builtin of any of the languages (int, NAN, threadIdx) starts with "var_"
  user = {v.name: Var(f"var_{v.name}", v.min, v.max) for v in prog.vars}
  def ex(x) -> str: return render(substitute(x, user) if user else x, c=True)
  types: dict[int, str] = {}  # the C type of every value
  body: list[str] = []
  depth = 1
  streams = streamed(prog, lang, stream_bytes)
  kept = kept_loads(prog) if keep_loads and lang.vkeep else set()
  threaded: list[bool] = []  # per open LOOP: is it the threads' loop
  fence_at_end = False       # a non-temporal store outside the threads' loop
  def line(s: str) -> None: body.append("  " * depth + s)
  def define(i: int, e: str) -> None:
    names[i] = f"v{i}"
    line(f"{types[i]} v{i} = {e};")
  def buf(b) -> str: return f"data{b}" if isinstance(b, int) else b  # a kernel argument or local memory
  def ptr(b, idx) -> str: return f"{buf(b)}+{ex(idx)}"
  def at(b, idx) -> str: return f"{buf(b)}[{ex(idx)}]"
  def loaded(b, dt: DType, x: str) -> str: return lang.load[dt.name].format(x) if isinstance(b, int) and dt.name in lang.load else x
  def guarded(valid, x: str, zero: str) -> str: return x if valid == 1 else zero if valid == 0 else f"(({ex(valid)})?{x}:{zero})"
  def vmem(fmt: str, aligned: str, idx, n: int) -> str:
    """A vector access, as one aligned access where the index is a multiple of the lanes (buffers and local memory start
    aligned to a vector)."""
    return aligned if aligned and mod(idx, n) == 0 else fmt
  def expr(i: int, op: str, a: list[str]) -> str:
    u = prog.uops[i]
    dt = u.value_dtype
    if u.vec > 1 and op == "RECIP": return f"(({lang.vbroadcast.format(x=literal(1.0, dt, lang), vt=types[i])})/{a[0]})"  # 1/x, as scalars
    if u.vec > 1 and op == "SQRT" and lang.vsqrt: return lang.vsqrt.format(x=a[0], vt=types[i])
    src_dt = prog.uops[u.src[-1]].value_dtype
    if op in vecmath.FUNCS and u.vec > 1 and lang.float_math and dt.name == "float32": return f"tsvc_{op.lower()}_f{u.vec}({a[0]})"
    if u.vec > 1 and (op in (*vecmath.FUNCS, "SQRT") or lane_by_lane(op, src_dt, dt)):  # each lane's scalar op
      return lanes(u.vec, types[i], lang, lambda lane: alu(op, dt, [lane(x) for x in a], src_dt, lang))
    if u.vec == 1 or op not in VECTOR_ONLY: return alu(op, dt, a, src_dt, lang)  # operators work lane-wise
    mt = mtype(dt.itemsize, u.vec, lang)  # of this value's lanes (MAX, WHERE)
    if op == "WHERE" and types[u.src[0]] != mt: a = [lang.convert.format(x=a[0], vt=mt), *a[1:]]  # a mask of other lanes
    return valu(op, a, types[i], mt, lang)
  def load(i: int, u) -> None:
    b, idx, valid = u.arg
    dt, vt, n = u.value_dtype, types[i], u.vec
    zero = literal(0, dt, lang)
    def vload(idx) -> str: return loaded(b, dt, vmem(lang.vload, lang.vload_aligned, idx, n).format(n=n, p=ptr(b, idx), vt=vt))
    lane_vars = [v for v in variables(idx) | variables(valid) if v.name == LANE]
    if n == 1: return define(i, guarded(valid, loaded(b, dt, at(b, idx)), zero))
    if not lane_vars: return define(i, guarded(valid, vload(idx), lang.vzero.format(vt=vt)))
    # vector loads where every lane is valid, else lane by lane
    every, each = lane_loads(idx, valid, n)
    lanes_x = lang.vbuild.format(xs=", ".join(guarded(v, loaded(b, dt, at(b, ix)), zero) for ix, v in each), vt=vt)
    if not (strided := [v for v in variables(idx) if v.name == LANE]): return define(i, guarded(every, vload(idx), lanes_x))
    # lanes 2 apart: the even elements of the two vectors over [lane 0's element, the last lane's] (overlapping: in bounds)
    aff = affine(idx, strided)
    assert aff is not None and aff[0][0] == 2, f"a vector LOAD's lanes are 1 or 2 apart, not {render(idx)}"
    names[i] = f"v{i}"
    line(f"{vt} v{i};")
    if every != 0:
      line(f"if ({ex(every)}) {{" if every != 1 else "{")
      for m in range(2): line(f"  {vt} v{i}_{m} = {vload(add(aff[1], m * (n - 1)))};")
      at_lane = [(2 * j // n, 2 * j - 2 * j // n * (n - 1)) for j in range(n)]  # (vector, its lane) of lane j's element 2j
      line(f"  v{i} = {lang.vbuild.format(xs=', '.join(lang.gep.format(x=f'v{i}_{m}', i=e, xyzw='xyzw'[e % 4]) for m, e in at_lane), vt=vt)};")
      line("} else" if every != 1 else "}")
    if every != 1: line(f"{'  ' if every != 0 else ''}v{i} = {lanes_x};")
  for i, u in enumerate(prog.uops):
    op, dt, src = u.op, u.dtype, [names[s] for s in u.src]
    if dt is not None:  # a bool vector is a mask of its operands' lanes
      types[i] = mtype(prog.uops[u.src[0]].value_dtype.itemsize, u.vec, lang) if dt == bool_ and u.vec > 1 else vtype(dt, u.vec, lang)
    if op in (UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR): continue
    if op is UOps.CONST: names[i] = literal(u.arg, u.value_dtype, lang)
    elif op is UOps.SPECIAL:
      var, kind, dim = u.arg
      line(f"{lang.index} {var.name} = {lang.ids[kind].format(dim, xyz='xyz'[dim])};")
    elif op is UOps.DEFINE_LOCAL: line(f"{lang.shared}{lang.ctype(u.value_dtype)} {u.arg[0]}[{u.arg[1]}];")
    elif op is UOps.BARRIER: line(lang.barrier)
    elif op is UOps.VBROADCAST and dt is not None and dt.name == "float16":  # x - 0 would promote x to float: each lane
      define(i, lang.vbuild.format(xs=", ".join(src * u.vec), vt=types[i]))
    elif op is UOps.VBROADCAST: define(i, lang.vbroadcast.format(x=src[0], vt=types[i]))
    elif op is UOps.VBUILD: define(i, lang.vbuild.format(xs=", ".join(src), vt=types[i]))
    elif op is UOps.VALID: names[i] = ex(u.arg)
    elif op is UOps.LOOP:
      var, end, threads = u.arg
      threaded.append(bool(threads))
      if threads: line(f"#pragma omp parallel for num_threads({threads}) schedule(static)")
      line(f"for ({lang.index} {var.name} = 0; {var.name} < {ex(end)}; {var.name}++) {{")
      depth += 1
    elif op is UOps.IF:
      line(f"if ({ex(u.arg)}) {{")
      depth += 1
    elif op in (UOps.ENDLOOP, UOps.ENDIF):
      if op is UOps.ENDLOOP and threaded.pop() and streams: line(lang.stream_fence)  # each thread's, before the join
      depth -= 1
      line("}")
    elif op is UOps.DEFINE_ACC:
      names[i] = f"acc{i}"
      acc = literal(u.arg, u.value_dtype, lang)
      line(f"{types[i]} acc{i} = {acc if u.vec == 1 else lang.vbroadcast.format(x=acc, vt=types[i])};")
    elif op is UOps.ACC:
      names[i] = src[0]
      line(f"{src[0]} = {expr(i, u.arg, [*src[1:], src[0]])};")
    elif op is UOps.STORE:
      b, idx, valid = u.arg
      val = src[0]
      if isinstance(b, int) and (bdt := prog.buffers[b][1]).name in lang.store: val = lang.store[bdt.name].format(val)
      store = f"{at(b, idx)} = {val};" if u.vec == 1 else \
        vmem(lang.vstore, lang.vstore_aligned, idx, u.vec).format(n=u.vec, x=val, p=ptr(b, idx), vt=types[u.src[0]])
      if b in streams:
        store, fence_at_end = lang.vstream.format(flag=f"stream{b}", x=val, p=ptr(b, idx), vt=types[u.src[0]]), fence_at_end or not any(threaded)
      line(store if valid == 1 else f"if ({ex(valid)}) {store}")
    elif op is UOps.LOAD:
      load(i, u)
      if i in kept: line(lang.vkeep.format(x=names[i]))
    elif op is UOps.WMMA:
      names[i] = src[0]
      na = u.arg.elements("a")
      line(f"{src[0]} = {lang.tensor_core(u.arg)[2].format(a=', '.join(src[1:1 + na]), b=', '.join(src[1 + na:]), c=src[0])};")
    elif op is UOps.GEP: define(i, lang.gep.format(x=src[0], i=u.arg, xyzw="xyzw"[u.arg % 4]))
    elif op is UOps.SHUFFLE:
      if not lang.shuffle: raise ValueError("this language has no vector shuffles")
      define(i, lang.shuffle.format(a=src[0], b=src[1], mt=mtype(u.value_dtype.itemsize, u.vec, lang), idx=",".join(map(str, u.arg))))
    elif op is UOps.CAST:
      sdt, ddt = prog.uops[u.src[0]].value_dtype, u.value_dtype
      define(i, cast(src[0], sdt, ddt, u.arg, lang) if u.vec == 1 else vcast(src[0], sdt, ddt, types[i], u.vec, lang))
    else: define(i, expr(i, u.arg, src))
  q = f" {lang.restrict}" if lang.restrict else ""
  args = [f"{lang.buffer}{lang.storage_type(dt)}*{q} data{b}" for b, dt in prog.buffers] + [lang.var_arg.format(user[v.name].name) for v in prog.vars]
  args = [lang.arg.format(a, i=i) for i, a in enumerate(args)] + ([lang.id_args] if lang.id_args else [])
  attrs = lang.bounds.format(dims=", ".join(map(str, (list(prog.local) + [1, 1, 1])[:3])), n=math.prod(prog.local))
  head = launch_line(prog) if lang.ids else ""
  used = sorted({u.dtype.name for u in prog.uops if u.dtype is not None})
  needs = "".join(dict.fromkeys(lang.needs[d] for d in used if d in lang.needs))
  vectors = lang.vectors if any(u.vec > 1 for u in prog.uops) else ""
  if (float_math := lang.float_math) is not None:  # the lane counts whose float32 functions the program calls (1: scalars, float16/bfloat16 too)
    math_lanes = sorted({u.vec if u.value_dtype.name == "float32" else 1 for u in prog.uops
                         if u.op == "ALU" and u.arg in vecmath.FUNCS and u.value_dtype.name != "float64"})
    needs += "".join(float_math(n) for n in math_lanes)
  fns = decls = ""
  for tc in dict.fromkeys(u.arg for u in prog.uops if u.op is UOps.WMMA):
    fn, decl, _ = lang.tensor_core(tc)
    fns, decls = fns + fn, decls + (f"  {decl.format(warps=math.prod(prog.local) // tc.threads)}\n" if decl else "")
  # gcc 12.2's loop vectorizer miscompiles (docs/compiler-bugs/): a scalar conditional load's loop if-converted into
  # masked loads (a loop with our vector types in it, lanes loaded one by one included, is not loop-vectorized), a scalar
  # validity's select reduced in a loop if-converted (AVX-512: a padded window's masked constant, corpus sops_8430), and a
  # PACK's copy loop (a strided gather into the stack; a PACK's copy is the only local memory a C kernel has) vectorized,
  # corpus sops_7348
  conditional = any(u.vec == 1 and (u.op is UOps.VALID or (u.op is UOps.LOAD and u.arg[2] not in (0, 1))) for u in prog.uops)
  packs = any(u.op is UOps.DEFINE_LOCAL for u in prog.uops)
  gcc_opts = ['"no-tree-loop-if-convert"'] * conditional + ['"no-tree-loop-vectorize"'] * packs
  attr = lang.gcc_optimize.format(", ".join(gcc_opts)) if gcc_opts and lang.gcc_optimize else ""
  # a non-temporal store needs its vector's alignment, which the buffer's start has or not: the caller's (devices/cpu.alloc's
  # are 64-byte aligned, a numpy array's 16 in general)
  for b in sorted(streams):
    nbytes = next(u.vec for u in prog.uops if u.op is UOps.STORE and u.arg[0] == b) * dict(prog.buffers)[b].itemsize
    decls += f"  const int stream{b} = ((__UINTPTR_TYPE__)data{b} & {nbytes - 1}) == 0;\n"
  if fence_at_end: body.append(f"  {lang.stream_fence}")
  return head + lang.prelude + needs + vectors + vector_decls(prog, lang) + streamed_decls(prog, lang, streams) + fns + attr + \
    f"{lang.kernel}{attrs}void {lang.symbol.format(prog.name)}({', '.join(args)}) {{\n" + decls + "\n".join(body) + "\n}\n"

def render_c(prog: Program, stream_bytes: Optional[int] = None, keep_loads: bool = False) -> str:
  return render_source(prog, C, stream_bytes, keep_loads)
def render_opencl(prog: Program) -> str: return render_source(prog, OPENCL)
