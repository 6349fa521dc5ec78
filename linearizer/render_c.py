"""C for the linear IR, with the reference semantics spelled out where C leaves them undefined:
integer division by 0 or -1, NaN in MAX, float-to-int casts that saturate, and float16/bfloat16
arithmetic done in float and rounded after every op. MULACC is an explicit fused multiply-add (the
compiler contracts nothing itself: -ffp-contract=off). Vectors use the gcc/clang vector extensions,
selecting lanes through masks where scalar code has ?:."""
from __future__ import annotations
import math
from linearizer.dtypes import DType, bool_
from linearizer.lower import Program
from linearizer.symbolic import render

PRELUDE = """#include <math.h>
#include <stdbool.h>
#include <string.h>
static inline float bf2f(unsigned short b) { unsigned u = (unsigned)b << 16; float f; memcpy(&f, &u, 4); return f; }
static inline unsigned short f2bf(float f) {  /* round to nearest even; NaN stays NaN */
  unsigned u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static inline float bfround(float f) { return bf2f(f2bf(f)); }
"""

def ctype(dt: DType) -> str:
  """The C type a value lives in: bfloat16 computes as float and is stored as its 16 bits."""
  return {"float16": "_Float16", "bfloat16": "float", "bool": "bool"}.get(dt.name, dt.c)

def storage(dt: DType) -> str: return "unsigned short" if dt.name == "bfloat16" else ctype(dt)

def literal(val, dt: DType) -> str:
  if dt == bool_: return "1" if val else "0"
  if dt.is_int:
    suffix = {"int64": "LL", "uint64": "ULL", "uint32": "U"}.get(dt.name, "")
    return f"(({dt.c}){val}{suffix})" if not (dt.name == "int64" and val == dt.min) else "((long long)(-9223372036854775807LL-1))"
  if math.isnan(val): return f"(({ctype(dt)})NAN)"
  if math.isinf(val): return f"(({ctype(dt)}){'-' if val < 0 else ''}INFINITY)"
  return f"(({ctype(dt)}){float(val).hex()})"  # hex floats are exact

def _narrow(dt: DType, expr: str) -> str:
  """Round a float-computed result to the value's dtype, per op."""
  return f"((_Float16)({expr}))" if dt.name == "float16" else f"bfround({expr})" if dt.name == "bfloat16" else expr

def _f(dt: DType, x: str) -> str: return f"(float){x}" if dt.name == "float16" else x

def alu(op: str, dt: DType, a: list[str], src_dt: DType) -> str:
  """One ALU op on rendered operands; dt is the result's dtype, src_dt the operands'."""
  if op == "WHERE": return f"({a[0]}?{a[1]}:{a[2]})"
  if op in ("CMPLT", "CMPEQ"): return f"({a[0]}{'<' if op == 'CMPLT' else '=='}{a[1]})"
  if src_dt == bool_: return {"ADD": "({0}||{1})", "MAX": "({0}||{1})", "MUL": "({0}&&{1})", "XOR": "({0}!={1})", "NEG": "(!{0})"}[op].format(*a)
  if src_dt.is_float:
    fn = "" if src_dt.name == "float64" else "f"
    if op == "MULACC": return f"__builtin_fma{fn}({a[0]},{a[1]},{a[2]})"  # float32/float64 only: rounded once
    x = [_f(src_dt, v) for v in a]
    if op in ("EXP2", "LOG2", "SIN"):  # from double and rounded: correctly rounded, as the reference defines them
      return _narrow(dt, f"({'double' if fn == '' else 'float'}){op.lower()}((double){x[0]})")
    e = {"NEG": "(-{0})", "ADD": "({0}+{1})", "SUB": "({0}-{1})", "MUL": "({0}*{1})", "DIV": "({0}/{1})",
         "MAX": "(({0}>{1}||{0}!={0})?{0}:{1})", "MOD": f"fmod{fn}({{0}},{{1}})", "SQRT": f"sqrt{fn}({{0}})",
         "RECIP": "(1.0f/{0})" if fn else "(1.0/{0})"}[op]
    return _narrow(dt, e.format(*x))
  signed = src_dt.kind == "i"
  if op == "DIV": return f"({a[1]}==0?0:{a[1]}==-1?-{a[0]}:{a[0]}/{a[1]})" if signed else f"({a[1]}==0?0:{a[0]}/{a[1]})"
  if op == "MOD": return f"(({a[1]}==0{f'||{a[1]}==-1' if signed else ''})?0:{a[0]}%{a[1]})"
  return {"NEG": "(-{0})", "ADD": "({0}+{1})", "SUB": "({0}-{1})", "MUL": "({0}*{1})", "MAX": "({0}>{1}?{0}:{1})",
          "XOR": "({0}^{1})"}[op].format(*a)

def cast(x: str, src: DType, dst: DType, bitcast: bool) -> str:
  if bitcast:  # through the stored bits: a bfloat16 lives in a float register
    u = f"({{union {{ {storage(src)} s; {storage(dst)} d; }} u_; u_.s = {f'f2bf({x})' if src.name == 'bfloat16' else x}; u_.d;}})"
    return f"bf2f({u})" if dst.name == "bfloat16" else u
  if dst == bool_: return f"({x}!=0)"
  if src.is_float and dst.is_int:  # truncate, saturate, NaN to 0
    bits = dst.itemsize * 8 - (dst.kind == "i")
    lo = f"-{float(2 ** bits).hex()}" if dst.kind == "i" else "-0x1p+0"
    f = f"(double){x}"
    return f"({f}!={f}?({dst.c})0:{f}>={float(2 ** bits).hex()}?{literal(dst.max, dst)}:{f}{'<' if dst.kind == 'i' else '<='}{lo}?{literal(dst.min, dst)}:({dst.c}){f})"
  return _narrow(dst, f"({'float' if dst.name == 'bfloat16' else ctype(dst)}){_f(src, x)}")


# vectors: gcc/clang vector extensions; lane masks are ints as wide as the compared lanes
MASK_LANES = {2: "short", 4: "int", 8: "long long"}
# vector bytes -> (the macro saying x86 has an FMA of that size, its intrinsics' prefix and vector type)
FMA_X86 = {16: ("__FMA__", "_mm", "__m128"), 32: ("__FMA__", "_mm256", "__m256"), 64: ("__AVX512F__", "_mm512", "__m512")}

def vtype(dt: DType, vec: int) -> str: return f"{dt.name}x{vec}" if vec > 1 else ctype(dt)
def mtype(size: int, vec: int) -> str: return f"int{8 * size}x{vec}"

def select(m: str, a: str, b: str, vt: str, mt: str) -> str:
  """Lanes of a where the mask m is set, else of b: C has no ?: on vectors; the casts reinterpret bits."""
  return f"(({vt})(({m}&({mt}){a})|(~{m}&({mt}){b})))"

VECTOR_ONLY = ("MAX", "WHERE", "MULACC")  # the ALU ops whose scalar C does not work on vectors as it is

def valu(op: str, a: list[str], vt: str, mt: str) -> str:
  """A VECTOR_ONLY op on float32/float64 vectors (mt: the mask type of their lanes), the scalar semantics per lane."""
  if op == "MAX": return select(f"(({a[0]}>{a[1]})|({a[0]}!={a[0]}))", a[0], a[1], vt, mt)  # NaN in either lane wins
  if op == "WHERE": return select(a[0], a[1], a[2], vt, mt)
  return f"mulacc_{vt}({a[0]},{a[1]},{a[2]})"

def vcast(x: str, src: DType, dst: DType, vt: str) -> str:
  """Float<->float lanes convert as C converts a scalar; a mask is a comparison's lanes (-1 or 0)."""
  if dst == bool_: return f"({x}!=0)"
  return f"__builtin_convertvector({x}&1,{vt})" if src == bool_ else f"__builtin_convertvector({x},{vt})"

def mulacc_fn(vt: str, dt: DType, nbytes: int) -> str:
  """a*b+c on vectors, rounded once: gcc has no generic vector fma, so the x86 intrinsic where the ISA has one."""
  body = "  return a * b + c;  /* no FMA: rounded twice, as the reference rounds */\n"
  if nbytes in FMA_X86:
    guard, pre, m = FMA_X86[nbytes]
    s, m = ("ps", m) if dt.name == "float32" else ("pd", m + "d")
    body = f"#ifdef {guard}\n  return ({vt}){pre}_fmadd_{s}(({m})a, ({m})b, ({m})c);\n#else\n{body}#endif\n"
  return f"static inline {vt} mulacc_{vt}({vt} a, {vt} b, {vt} c) {{\n{body}}}\n"

def render_c(prog: Program) -> str:
  names: dict[int, str] = {}
  types: dict[int, str] = {}  # the C type of every value
  body: list[str] = []
  depth = 1
  def line(s: str) -> None: body.append("  " * depth + s)
  def define(i: int, e: str) -> None:
    names[i] = f"v{i}"
    line(f"{types[i]} v{i} = {e};")
  def at(b: int, idx, vec: int) -> str:  # a vector goes through the unaligned type: only its lanes' alignment is known
    return f"data{b}[{render(idx, c=True)}]" if vec == 1 else f"*({vtype(prog.buffers[b][1], vec)}u*)(data{b}+{render(idx, c=True)})"
  def expr(i: int, op: str, a: list[str]) -> str:
    u = prog.uops[i]
    if u.vec == 1 or op not in VECTOR_ONLY: return alu(op, u.dtype, a, prog.uops[u.src[-1]].dtype)  # operators work lane-wise
    mt = mtype(u.dtype.itemsize, u.vec)  # of this value's lanes (MAX, WHERE)
    if op == "WHERE" and types[u.src[0]] != mt: a = [f"__builtin_convertvector({a[0]},{mt})", *a[1:]]  # a mask of other lanes
    return valu(op, a, types[i], mt)
  for i, u in enumerate(prog.uops):
    op, dt, src = u.op, u.dtype, [names.get(s) for s in u.src]
    if dt is not None:  # a bool vector is a mask of its operands' lanes
      types[i] = mtype(prog.uops[u.src[0]].dtype.itemsize, u.vec) if dt == bool_ and u.vec > 1 else vtype(dt, u.vec)
    if op in ("DEFINE_GLOBAL", "DEFINE_VAR"): continue
    if op == "CONST": names[i] = literal(u.arg, dt)
    elif op == "VBROADCAST": define(i, f"{src[0]}-({types[i]}){{}}")  # x - 0 is x, -0 included (-0 + 0 is +0)
    elif op == "VBUILD": define(i, f"({types[i]}){{{', '.join(src)}}}")
    elif op == "VALID": names[i] = render(u.arg, c=True)
    elif op == "LOOP":
      var, end, threads = u.arg
      if threads: line(f"#pragma omp parallel for num_threads({threads}) schedule(static)")
      line(f"for (long long {var.name} = 0; {var.name} < {render(end, c=True)}; {var.name}++) {{")
      depth += 1
    elif op == "ENDLOOP":
      depth -= 1
      line("}")
    elif op == "DEFINE_ACC":
      names[i] = f"acc{i}"
      line(f"{types[i]} acc{i} = {literal(u.arg, dt)}{'' if u.vec == 1 else f'-({types[i]}){{}}'};")
    elif op == "ACC":
      names[i] = src[0]
      line(f"{src[0]} = {expr(i, u.arg, [*src[1:], src[0]])};")
    elif op == "STORE":
      b, idx, valid = u.arg
      val = f"f2bf({src[0]})" if prog.buffers[b][1].name == "bfloat16" else src[0]
      store = f"{at(b, idx, u.vec)} = {val};"
      line(store if valid == 1 else f"if ({render(valid, c=True)}) {store}")
    elif op == "LOAD":
      b, idx, valid = u.arg
      x = at(b, idx, u.vec)
      if dt.name == "bfloat16": x = f"bf2f({x})"
      define(i, x if valid == 1 else f"(({render(valid, c=True)})?{x}:{literal(0, dt) if u.vec == 1 else f'({types[i]}){{}}'})")
    elif op == "CAST":
      sdt = prog.uops[u.src[0]].dtype
      define(i, cast(src[0], sdt, dt, u.arg) if u.vec == 1 else vcast(src[0], sdt, dt, types[i]))
    else: define(i, expr(i, u.arg, src))
  args = [f"{storage(dt)}* restrict data{b}" for b, dt in prog.buffers] + [f"int {v.name}" for v in prog.vars]
  return PRELUDE + vector_decls(prog) + f"void {prog.name}({', '.join(args)}) {{\n" + "\n".join(body) + "\n}\n"

def vector_decls(prog: Program) -> str:
  """typedefs of the vector types the program uses, each with its unaligned twin (for memory) and its lane mask, and
  the fused multiply-add of each vector type that has MULACCs."""
  vecs = [(u.dtype, u.vec) for u in prog.uops if u.vec > 1 and u.dtype not in (None, bool_)]
  fmas = [(u.dtype, u.vec) for u in prog.uops if u.vec > 1 and u.op in ("ALU", "ACC") and u.arg == "MULACC"]
  out = [f"typedef {ctype(dt)} {vtype(dt, vec)} __attribute__((vector_size({dt.itemsize * vec})));\n"
         f"typedef {ctype(dt)} {vtype(dt, vec)}u __attribute__((vector_size({dt.itemsize * vec}), aligned({dt.itemsize})));\n"
         f"typedef {MASK_LANES[dt.itemsize]} {mtype(dt.itemsize, vec)} "
         f"__attribute__((vector_size({dt.itemsize * vec})));\n" for dt, vec in dict.fromkeys(vecs)]
  if fmas: out.append("#if defined(__FMA__) || defined(__AVX512F__)\n#include <immintrin.h>\n#endif\n")
  return "".join(out + [mulacc_fn(vtype(dt, vec), dt, dt.itemsize * vec) for dt, vec in dict.fromkeys(fmas)])
