"""EXP2, LOG2 and SIN for float32 in C, scalar and on gcc vectors, within the accuracy contract (reference.ULP_BOUND).

EXP2 computes on the float lanes themselves where the ISA fuses multiply-adds (`_exp2_float`: at most 0.88 ulp, measured
on every input): the transcendental of softmax, SiLU and GELU, on twice the lanes of a register that doubles get and with
no conversions, 2.6x faster in SiLU than through doubles; where every lane's result is normal, without clamps and with
the power of two added to the exponent bits (another 1.45x in SiLU, 1.8x in softmax's exp-sum, AVX2). SIN too
(`_sin_float`: at most 0.72 ulp, every input), for |x| <= 2^15, a vector with a lane beyond taking the double path whole:
~2x the double path, alone and chained.
`compare` holds a kernel to the contract's ulp, not to the correctly rounded result, by carrying intervals through every
op above a transcendental (linearizer/bounds.py).
LOG2, SIN's large arguments (and EXP2 and SIN without an FMA) widen each float32 lane to double and compute there with
fused multiply-adds and near-minimax polynomials (Chebyshev interpolants, tools below) whose error (< 2^-50 relative) is
far below a float32 ulp (2^-24), then round once to float32: the result is the correctly rounded one unless the exact
value lies within 2^-50 of a rounding midpoint (tests/test_vecmath.py checks every float32 input against libm's double
result: all are correctly rounded). Doubles hold every float32, its denormals as normal numbers, so no input needs a
special path but SIN's huge arguments:
- exp2: x = n + r (n = round(x), |r| <= 1/2) after clamping x to [-152, 129] (beyond, the float result is 0 or inf);
  2^r = 1 + r*q(r), q of degree 9 (2^-50.6), times 2^n built from n's bits (a normal double for every clamped n).
- log2: x = 2^k * z with z in [0.703, 1.406) from x's bits less those of 0.703 (no branch); z's 4 leading fraction bits
  pick c, a 21-bit 1/z near z's: r = z*c - 1 is exact (|r| < 0.0313), log2(x) = k + log2(1/c) + r*L(r), L of degree 7
  (2^-50.1); the table's entry around 1 is c = 1, log2(1/c) = 0, so x near 1 loses nothing to cancellation and
  log2(2^k) is k exactly. +-0 -> -inf, < 0 -> NaN, inf -> inf, NaN -> NaN by selects.
- sin: Cody-Waite: k = round(x * 2/pi), r = x - k*pi/2 with pi/2 in three parts (the first two of 30 bits, so that
  k*P1 and k*P2 are exact for k < 2^23 and x - k*P1 is exact), then sin r = r + r^3 S(r^2) or cos r = 1 + r^2 C(r^2)
  (|r| <= pi/4, degrees 5 in r^2: 2^-55.5, 2^-51.6) by k's quadrant. Lanes with |x| > 2^22 (where k would reach 2^22)
  and inf take the exact fallback, libm's double sin rounded to float, one lane at a time (never in practice: such
  arguments have no meaningful phase).
Polynomials are evaluated by Estrin's scheme (powers r^2, r^4, ... and independent fused multiply-adds): chains of
transcendentals are latency-bound, and Horner's 10 dependent FMAs are 40 cycles. Each lane count is static inline
functions over gcc vector types, so gcc keeps them in AVX-512/AVX2 registers: doubles computed a register at a time
(8 lanes with AVX-512, 4 without), wider float instances as two halves; the scalar one is the 1-lane instance. Selects
are bit masks, as the renderer's; FMAs fused where the ISA has them (-ffp-contract=off fuses nothing unasked), else a
multiply and an add (the polynomials' error budget holds either way; the reductions do not rely on fusion).
Coefficients and tables: mpmath at 60 digits, Chebyshev interpolation at degree + 1 nodes, rounded to double; errors
measured at 60 digits on 4001 points.
"""
from __future__ import annotations
import math

FUNCS = ("EXP2", "LOG2", "SIN")
SIN_BIG = 2.0 ** 22  # |x| beyond it takes sin's exact fallback
_NAN = '__builtin_nan("")'
# gcc decides what to inline: forcing every call inline made elementwise_chain (12 sin halves) 15-60% slower
_INLINE = "static inline"

def _f(h: str) -> float: return float.fromhex(h)
def _hex(c: float) -> str: return float(c).hex()

# (2^r - 1) / r on [-1/2, 1/2]
EXP2_Q = [_f(h) for h in ("0x1.62e42fefa39f7p-1", "0x1.ebfbdff82c590p-3", "0x1.c6b08d7044119p-5", "0x1.3b2ab6fba385fp-7",
                          "0x1.5d87fe908f88ap-10", "0x1.4309130378460p-13", "0x1.ffcb76789860fp-17", "0x1.62bfe46117445p-20",
                          "0x1.b6571de2f2351p-24", "0x1.e5e9f548e5725p-28")]
# (2^r - 1) / r on [-1/2, 1/2] in float32 (exp2_float), degree 5: each coefficient rounded to float, the rest refitted to
# what it left (Lawson-weighted least squares, relative error of 1 + r*q at 60 digits): 2^-28.3, as degree 6's rounded
# coefficients reached (2^-28.4), so a sixth FMA bought nothing
EXP2_QF = [_f(h) for h in ("0x1.62e430p-1", "0x1.ebfbdcp-3", "0x1.c6af7ap-5", "0x1.3b2dcep-7", "0x1.5f0950p-10", "0x1.418000p-13")]
# log2(1 + r) / r on [-0.0313, 0.0313]
LOG2_L = [_f(h) for h in ("0x1.71547652b82f9p+0", "-0x1.71547652b82f5p-1", "0x1.ec709dc4463d7p-2", "-0x1.715476534d954p-2",
                          "0x1.2776b822359a5p-2", "-0x1.ec70867fb007dp-3", "0x1.a6bc3d4739faep-3", "-0x1.71e8d575af513p-3")]
# the 16 buckets of z by its leading fraction bits: c (21 significant bits) and log2(1/c)
LOG2_C = [_f(h) for h in ("0x1.642c8p+0", "0x1.55555p+0", "0x1.47ae1p+0", "0x1.3b13bp+0", "0x1.2f685p+0", "0x1.24925p+0",
                          "0x1.1a7b9p+0", "0x1.11111p+0", "0x1.08421p+0", "0x1p+0", "0x1.e1e1ep-1", "0x1.c71c7p-1",
                          "0x1.af287p-1", "0x1.9999ap-1", "0x1.86186p-1", "0x1.745d1p-1")]
LOG2_LOGC = [_f(h) for h in ("-0x1.e7df48cff117ep-2", "-0x1.a8ff8002c9129p-2", "-0x1.6cb0e253bdf2cp-2", "-0x1.32bfe871bd0a6p-2",
                             "-0x1.f5fdb2f5a08dap-3", "-0x1.8a89c5ebd132fp-3", "-0x1.22da9cb02e44ap-3", "-0x1.7d603257b4441p-4",
                             "-0x1.773935884e226p-5", "0x0p+0", "0x1.663f86c1d8a22p-4", "0x1.5c01af2a6120dp-3",
                             "0x1.fbc14eb58d664p-3", "0x1.49a76da78a81bp-2", "0x1.91bbae57434ccp-2", "0x1.d6755addc8279p-2")]
LOG2_OFF = 0x3fe6800000000000  # the bits of 0.703125: x's bits less these split into k and a z in [0.703125, 1.40625)
# (sin(r)/r - 1) / r^2 and (cos(r) - 1) / r^2 as polynomials in z = r^2 on [0, (pi/4)^2]
SIN_S = [_f(h) for h in ("-0x1.5555555555555p-3", "0x1.1111111110bb2p-7", "-0x1.a01a019e83816p-13", "0x1.71de379654304p-19",
                         "-0x1.ae600aca92c64p-26", "0x1.5e0b05bff20f2p-33")]
COS_C = [_f(h) for h in ("-0x1.ffffffffffffap-2", "0x1.5555555554134p-5", "-0x1.6c16c1691d3cep-10", "0x1.a019fc7ae6b8bp-16",
                         "-0x1.27e0f5440bb64p-22", "0x1.1c063511f828dp-29")]
# pi/2 in three doubles: P1 and P2 keep 30 significant bits, P3 the next 53
_P1 = _f("0x1.921fb544p+0")
_P2 = _f("0x1.0b4611a6p-34")
_P3 = _f("0x1.3198a2e037073p-69")

# float SIN: (sin(r)/r - 1) / r^2 and (cos(r) - 1 + r^2/2) / r^4 in z = r^2 on [0, 0.7875^2] (|r| <= pi/4 + k's error
# below 2^15 * 2/pi), float coefficients each rounded then the rest refitted (Lawson-weighted least squares on the Taylor
# series): 2^-32.5 and 2^-32.9 of the result
SIN_SF = [_f(h) for h in ("-0x1.555556p-3", "0x1.111174p-7", "-0x1.a0594ap-13", "0x1.7c2736p-19")]
COS_CF = [_f(h) for h in ("0x1.55554ap-5", "-0x1.6c0c26p-10", "0x1.99e706p-16")]
# pi/2 = _C1 + _C2 + _C3 + 2^-76, each the float nearest what the previous ones leave; 2/pi as a float
_C1, _C2, _C3, _TWO_OVER_PI_F = _f("0x1.921fb6p+0"), _f("-0x1.777a5cp-25"), _f("-0x1.ee59dap-50"), _f("0x1.45f306p-1")
SIN_FLOAT_BIG = 2.0 ** 15  # |x| beyond it (and inf, NaN) takes the double path: the float reduction holds below

def _types(n: int) -> str:
  return (f"typedef float tsvc_f{n} __attribute__((vector_size({4 * n})));\n"
          f"typedef double tsvc_d{n} __attribute__((vector_size({8 * n})));\n"
          f"typedef long long tsvc_l{n} __attribute__((vector_size({8 * n})));\n"
          f"typedef int tsvc_i{n} __attribute__((vector_size({4 * n})));\n"  # exp2_float's
          f"typedef unsigned tsvc_u{n} __attribute__((vector_size({4 * n})));\n")  # its exponent added, modulo 2^32

# vector bytes -> (the macro saying x86 has an FMA of that size, its intrinsics' prefix and vector type, and gcc's own
# builtins of them, what <immintrin.h> wraps: the float32 and float64 calls)
FMA_X86 = {16: ("__FMA__", "_mm", "__m128", "__builtin_ia32_vfmaddps(a, b, c)", "__builtin_ia32_vfmaddpd(a, b, c)"),
           32: ("__FMA__", "_mm256", "__m256", "__builtin_ia32_vfmaddps256(a, b, c)", "__builtin_ia32_vfmaddpd256(a, b, c)"),
           64: ("__AVX512F__", "_mm512", "__m512", "__builtin_ia32_vfmaddps512_mask(a, b, c, (unsigned short)-1, 4)",
                "__builtin_ia32_vfmaddpd512_mask(a, b, c, (unsigned char)-1, 4)")}

def fma_fn(name: str, vt: str, double: bool, lanes: int) -> str:
  """`static inline vt name(vt a, vt b, vt c)`: a*b+c on a gcc vector, rounded once where the ISA has a fused multiply-add,
  else a multiply and an add (rounded twice, as the reference rounds). C has no vector fma: gcc takes its builtin of the
  instruction, which needs no header (parsing <immintrin.h> was ~0.15 s of a search candidate's ~0.25 s compile), clang
  the x86 intrinsic; one lane, the scalar fma. (A lane loop of fmaf, which gcc 12.2 vectorises into one vfmadd, was
  miscompiled inlined into a blocked matvec with its weights packed, corpus sops_7348 (docs/compiler-bugs/), and left
  partly scalar inlined into the float SIN.)"""
  body = "  return a * b + c;\n"
  if lanes == 1:
    body = f"#if defined(__FMA__)\n  return ({vt}){{__builtin_fma{'' if double else 'f'}(a[0], b[0], c[0])}};\n#else\n{body}#endif\n"
  elif (nbytes := lanes * (8 if double else 4)) in FMA_X86:
    guard, pre, m, gcc_ps, gcc_pd = FMA_X86[nbytes]
    sfx, m, builtin = ("pd", m + "d", gcc_pd) if double else ("ps", m, gcc_ps)
    body = (f"#if defined({guard}) && defined(__clang__)\n  return ({vt}){pre}_fmadd_{sfx}(({m})a, ({m})b, ({m})c);\n"
            f"#elif defined({guard})\n  return {builtin};\n#else\n{body}#endif\n")
  return f"static inline {vt} {name}({vt} a, {vt} b, {vt} c) {{\n{body}}}\n"

def _helpers(n: int) -> str:
  """tsvc_fma_d{n}, tsvc_any_l{n} (is any lane of a mask set: OR-ed halves; a lane loop is an extract and an OR a lane)
  and tsvc_lookup_d{n} (a 16-entry table per lane: one two-register permute on AVX-512)."""
  d, l = f"tsvc_d{n}", f"tsvc_l{n}"
  out = fma_fn(f"tsvc_fma_d{n}", d, True, n)
  half = lambda lo: ", ".join(map(str, range(lo, lo + n // 2)))
  halves = f"__builtin_shufflevector(m, m, {half(0)}) | __builtin_shufflevector(m, m, {half(n // 2)})"
  anyl = {1: "return m[0] != 0;", 4: f"tsvc_l2 h = {halves};\n  return (h[0] | h[1]) != 0;", 8: f"return tsvc_any_l4({halves});"}[n]
  out += ("typedef long long tsvc_l2 __attribute__((vector_size(16)));\n" if n == 4 else "") + \
    f"{_INLINE} int tsvc_any_l{n}({l} m) {{\n  {anyl}\n}}\n"
  if n == 8: look = f"  {d} lo, hi;\n  memcpy(&lo, t, 64); memcpy(&hi, t + 8, 64);\n  return __builtin_shuffle(lo, hi, i);\n"
  else: look = f"  return ({d}){{{', '.join(f't[i[{j}]]' for j in range(n))}}};\n"
  return out + f"{_INLINE} {d} tsvc_lookup_d{n}(const double *t, {l} i) {{\n{look}}}\n"

def _estrin(n: int, var: str, coeffs: list[float], name: str) -> tuple[list[str], str]:
  """(statements, expression): sum coeffs[i] var^i by Estrin's scheme, the powers var^2, var^4, ... as {name}2, {name}4."""
  d = f"tsvc_d{n}"
  terms, pw, stmts = [f"(({d}){{}}+{_hex(c)})" for c in coeffs], var, []
  while len(terms) > 1:
    terms = [f"tsvc_fma_d{n}({pw}, {terms[j + 1]}, {terms[j]})" if j + 1 < len(terms) else terms[j] for j in range(0, len(terms), 2)]
    if len(terms) > 1:
      nxt = f"{name}{2 * (int(pw[len(name):]) if pw != var else 1)}"
      stmts.append(f"{d} {nxt} = {pw} * {pw};")
      pw = nxt
  return stmts, terms[0]

def _poly(n: int, var: str, coeffs: list[float], out: str) -> str:
  stmts, e = _estrin(n, var, coeffs, f"{out}_{var}")
  return "".join(f"  {s}\n" for s in stmts) + f"  tsvc_d{n} {out} = {e};\n"

def _tables() -> str:
  arr = lambda name, xs: f"static const double {name}[16] __attribute__((aligned(64))) = {{{', '.join(map(_hex, xs))}}};\n"
  return "#ifndef TSVC_MATH_TABLES\n#define TSVC_MATH_TABLES\n#include <string.h>\n" + \
    "#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))\n#include <immintrin.h>\n#endif\n" + \
    arr("tsvc_log2_c", LOG2_C) + arr("tsvc_log2_logc", LOG2_LOGC) + "#endif\n"

def _core(n: int) -> str:
  """EXP2, LOG2 and SIN on n double lanes: tsvc_exp2_d{n} & co."""
  d, l = f"tsvc_d{n}", f"tsvc_l{n}"
  s = lambda m, a, b: f"(({d})((({m})&({l}){a})|(~({m})&({l}){b})))"  # lanes of a where mask m is set, else of b
  c = lambda x: f"(({d}){{}}+{x})"  # a constant in every lane (only constants: -0 + 0 is +0)
  fma = f"tsvc_fma_d{n}"
  magic = "0x1.8p+52"  # adding it rounds a double of magnitude < 2^51 to an integer, kept in the low mantissa bits
  return _helpers(n) + f"""{_INLINE} {d} tsvc_exp2_d{n}({d} x) {{
  x = {s("x > 129.0", c("129.0"), "x")};
  x = {s("x < -152.0", c("-152.0"), "x")};
  {d} t = x + {magic};
  {d} r = x - (t - {magic});
{_poly(n, "r", EXP2_Q, "q")}  {d} p = {fma}(r, q, {c("1.0")});
  return p * ({d})((({l})t + 1023) << 52);  /* 2^n from n's bits, the low ones of t */
}}
{_INLINE} {d} tsvc_log2_d{n}({d} x) {{
  {l} tmp = ({l})x - {LOG2_OFF:#x}LL;
  {d} k = __builtin_convertvector(tmp >> 52, {d});
  {d} z = ({d})(({l})x - (tmp & (long long)0xfff0000000000000ULL));
  {l} i = (tmp >> 48) & 15;
  {d} r = z * tsvc_lookup_d{n}(tsvc_log2_c, i) - 1.0;  /* exact: 24 by 21 bits, then a subtraction within [1/2, 2] */
{_poly(n, "r", LOG2_L, "lp")}  {d} y = {fma}(r, lp, k + tsvc_lookup_d{n}(tsvc_log2_logc, i));
  y = {s("x == 0.0", c("-__builtin_inf()"), "y")};
  y = {s("x < 0.0", c(_NAN), "y")};
  y = {s("x == __builtin_inf()", "x", "y")};
  return {s("x != x", "x", "y")};
}}
{_INLINE} {d} tsvc_sin_d{n}({d} x) {{
  {d} t = x * {_hex(2 / math.pi)} + {magic};
  {d} k = t - {magic};
  {d} r = {fma}(k, {c(_hex(-_P3))}, {fma}(k, {c(_hex(-_P2))}, {fma}(k, {c(_hex(-_P1))}, x)));
  {d} z = r * r;
{_poly(n, "z", SIN_S, "sp")}{_poly(n, "z", COS_C, "cp")}  {d} sn = {fma}(r * z, sp, r);
  {d} cs = {fma}(z, cp, {c("1.0")});
  {l} q = ({l})t;
  {d} y = {s("((q & 1) != 0)", "cs", "sn")};
  y = {s("((q & 2) != 0)", "-y", "y")};
  y = {s("x == 0.0", "x", "y")};  /* sin(+-0) is +-0, whatever signs the reduction gave its zeros */
  {l} big = (x > {_hex(SIN_BIG)}) | (x < -{_hex(SIN_BIG)});
  if (__builtin_expect(tsvc_any_l{n}(big), 0))
    for (int i = 0; i < {n}; i++) if (big[i]) y[i] = sin(x[i]);  /* the exact fallback */
  return y;
}}
"""

# lanes -> the macro under which its doubles fit one register and it computes there directly ("": always); elsewhere an
# instance is two of half the lanes (gcc scalarises comparisons on vectors wider than the ISA's: 16 lanes of double
# ran 10x slower)
DIRECT = {1: "", 4: "", 8: "__AVX512F__"}
# lanes -> the macro under which EXP2 and SIN compute on the float lanes themselves (one register, fused multiply-adds);
# elsewhere as LOG2 does, through doubles
FLOAT_LANES = {1: "__FMA__", 4: "__FMA__", 8: "__FMA__", 16: "__AVX512F__"}

def _horner(n: int, var: str, coeffs: list[float]) -> str:
  c = lambda v: f"((tsvc_f{n}){{}}+{float(v).hex()}f)"
  out = c(coeffs[-1])
  for co in reversed(coeffs[:-1]): out = f"tsvc_fma_f{n}({var}, {out}, {c(co)})"
  return out

# lanes -> (the macro saying x86 has vscalefps at that width, its intrinsic and type, gcc's builtin): p * 2^k in one
# instruction, rounded once (subnormal and overflowing results included), instead of two multiplies by built powers of two
SCALEF_X86 = {4: ("__AVX512VL__", "_mm_scalef_ps", "__m128", "__builtin_ia32_scalefps128_mask(p, k, p, (unsigned char)-1)"),
              8: ("__AVX512VL__", "_mm256_scalef_ps", "__m256", "__builtin_ia32_scalefps256_mask(p, k, p, (unsigned char)-1)"),
              16: ("__AVX512F__", "_mm512_scalef_ps", "__m512", "__builtin_ia32_scalefps512_mask(p, k, p, (unsigned short)-1, 4)")}

def _exp2_float(n: int) -> str:
  """EXP2 on n float lanes within 0.88 ulp (tests/test_vecmath.py measures every input): twice the lanes of the double
  path a register, and no conversions. x = k + r (k = round(x), |r| <= 1/2, exact); 2^r = 1 + r*q(r), q of degree 5
  (relative error 2^-28.3 with float coefficients, each rounded then the rest refitted), Horner's scheme in fused
  multiply-adds: the last one's rounding (1/2 ulp) and q's (at most 0.3 ulp of the result, at r = -1/2) are the error
  (0.80 ulp over every r; 0.88 where a subnormal result rounds p * 2^k once more). Where every lane's k is in [-125, 127]
  (its result normal), p * 2^k is k added to p's exponent bits: two integer ops, no clamps (14 vector ops in all, from
  23 with AVX2: softmax's exp-sum 1.8x, SiLU 1.45x, 1 thread, Zen 1). A vector with a lane beyond (or NaN) takes the
  full path whole (tsvc_exp2s_f{n}): x clamped to [-151, 129] (so that t holds k: 0 and inf results), p * 2^k by
  vscalefps where the ISA has it (one instruction, rounded once; there the full path is the only one, its clamps costing
  what the fast path's test does), else as two normal powers of two, so that p * 2^k1 is exact and * 2^k2 rounds once,
  subnormal results included."""
  f, i, u = f"tsvc_f{n}", f"tsvc_i{n}", f"tsvc_u{n}"
  poly = (f"  {f} r = x - (t - 0x1.8p+23f);\n  {f} p = tsvc_fma_f{n}(r, {_horner(n, 'r', EXP2_QF)}, (({f}){{}}+1.0f));\n")
  clamp = lambda cmp, v: f"  m = x {cmp} {float(v).hex()}f;\n  x = ({f})((m & ({i})(({f}){{}}+{float(v).hex()}f)) | (~m & ({i})x));\n"
  full = lambda name, scale: (f"{_INLINE} {f} {name}({f} x) {{\n  {i} m;\n{clamp('>', 129)}{clamp('<', -151)}"
                              f"  {f} t = x + 0x1.8p+23f;  /* rounds x to an integer, kept in t's low mantissa bits */\n{poly}{scale}}}\n")
  powers = f"  {i} k = ({i})t - 0x4b400000, k1 = k >> 1;\n  return p * ({f})((k1 + 127) << 23) * ({f})((k - k1 + 127) << 23);\n"
  # t's bits are 0x4b400000 + k for |x| < 2^22 and beyond that range else (NaN, inf, larger x): k in [-125, 127] is
  # their offset from 0x4b400000 - 125 at most 252 unsigned, signed after adding 2^31 (AVX2 compares only signed)
  fast = (f"{_INLINE} {f} tsvc_exp2_f{n}({f} x) {{\n  {f} t = x + 0x1.8p+23f;  /* rounds x to an integer, kept in t's low mantissa bits */\n"
          f"  if (__builtin_expect(tsvc_any_i{n}(({i})(({u})t + {2**31 - (0x4b400000 - 125):#x}u) > {-2**31 + 252}), 0)) "
          f"return tsvc_exp2s_f{n}(x);\n"
          f"{poly}  return ({f})(({u})p + (({u})t << 23));  /* k << 23: t's bits shifted, modulo 2^32 */\n}}\n")
  if n not in SCALEF_X86: return full(f"tsvc_exp2s_f{n}", powers) + fast
  guard, fn, m, builtin = SCALEF_X86[n]
  scalef = (f"  {f} k = t - 0x1.8p+23f;\n#if defined(__clang__)\n  return ({f}){fn}(({m})p, ({m})k);\n"
            f"#else\n  return {builtin};\n#endif\n")
  return f"#if defined({guard})\n{full(f'tsvc_exp2_f{n}', scalef)}#else\n{full(f'tsvc_exp2s_f{n}', powers)}{fast}#endif\n"

def _any_i(n: int) -> str:
  """tsvc_any_i{n}: is any lane of an int mask set (a branch's test, off the data's path): the lanes' sign bits in one
  movmskps where x86 has it at that width (gcc's and clang's builtin; OR-ed lane extracts were 8 instructions at 8 lanes),
  else halves OR-ed down to 4 lanes."""
  h = n // 2
  movmsk = {4: ("__SSE__", "__builtin_ia32_movmskps"), 8: ("__AVX__", "__builtin_ia32_movmskps256")}
  body = "return m[0] != 0;" if n == 1 else "return (m[0] | m[1] | m[2] | m[3]) != 0;" if n == 4 else \
    f"return tsvc_any_i{h}(__builtin_shufflevector(m, m, {', '.join(map(str, range(h)))}) | " \
    f"__builtin_shufflevector(m, m, {', '.join(map(str, range(h, n)))}));"
  body = f"  {body}\n"
  if n in movmsk: body = f"#if defined({movmsk[n][0]})\n  return {movmsk[n][1]}((tsvc_f{n})m) != 0;\n#else\n{body}#endif\n"
  return f"{_INLINE} int tsvc_any_i{n}(tsvc_i{n} m) {{\n{body}}}\n"

def _sin_float(n: int) -> str:
  """SIN on n float lanes within the contract (tests/test_vecmath.py measures every input), for |x| <= 2^15; a vector with
  a lane beyond (or inf, NaN) takes the double path whole (tsvc_sinw_f{n}). k = round(x * 2/pi), r = x - k*pi/2 as a
  float pair s + lo: pi/2 in three floats, x - k*_C1 exact in one FMA (k < 2^22, |result| < 1, a multiple of 2^-24),
  k*_C2 split exactly by an FMA, their difference by Fast2Sum (exact: the first is a multiple of the second's ulp),
  k*_C3 into lo. |r| >= 2^-28 for every float x (the nearest to a multiple of pi/2), so the pair's 2^-57 keeps r to
  2^-29 relative: the error is the last addition's rounding (1/2 ulp) and the small corrections' (sin: s + (s^3 S(z)
  + lo (1 - z/2)); cos: w = 1 - z/2, its rounding error recovered exactly, s^2's low part by an FMA)."""
  f, i = f"tsvc_f{n}", f"tsvc_i{n}"
  c = lambda v: f"(({f}){{}}+{float(v).hex()}f)"
  fma = f"tsvc_fma_f{n}"
  return f"""{_INLINE} {f} tsvc_sin_f{n}({f} x) {{
  {i} big = (x > {c(SIN_FLOAT_BIG)}) | (x < {c(-SIN_FLOAT_BIG)}) | (x != x);
  if (__builtin_expect(tsvc_any_i{n}(big), 0)) return tsvc_sinw_f{n}(x);
  {f} t = {fma}(x, {c(_TWO_OVER_PI_F)}, {c(1.5 * 2.0 ** 23)});  /* k in t's low mantissa bits */
  {f} k = t - 0x1.8p+23f;
  {f} r1 = {fma}(-k, {c(_C1)}, x);
  {f} ph = k * {float(_C2).hex()}f;
  {f} pl = {fma}(k, {c(_C2)}, -ph);
  {f} s = r1 - ph;
  {f} lo = {fma}(-k, {c(_C3)}, ((r1 - s) - ph) - pl);
  {f} z = s * s;
  {f} hz = z * 0.5f;
  {f} sn = s + {fma}(s * z, {_horner(n, 'z', SIN_SF)}, {fma}(-lo, hz, lo));
  {f} w = 1.0f - hz;
  {f} zl = {fma}(s, s, -z);
  {f} cs = w + {fma}(z * z, {_horner(n, 'z', COS_CF)}, ((1.0f - w) - hz) - {fma}(s, lo, zl * 0.5f));
  {i} q = ({i})t;
  {i} y = (((q & 1) != 0) & ({i})cs) | (((q & 1) == 0) & ({i})sn);
  y ^= ((q & 2) != 0) & (-0x7fffffff - 1);  /* quadrants 2 and 3: -y */
  return ({f})((({i})(x == 0.0f) & ({i})x) | (~({i})(x == 0.0f) & y));  /* sin(+-0) is +-0 */
}}
"""

def c_source(n: int) -> str:
  """tsvc_exp2_f{n}, tsvc_log2_f{n}, tsvc_sin_f{n} on n float32 lanes (tsvc_f{n}: a gcc vector; n = 1 adds tsvc_exp2f & co
  on plain floats), with every smaller instance they are built of; guarded, so instances may repeat."""
  f, h = f"tsvc_f{n}", n // 2
  direct = lambda fn, nm: (f"{_INLINE} {f} tsvc_{nm}_f{n}({f} x) "
                           f"{{ return __builtin_convertvector(tsvc_{fn}_d{n}(__builtin_convertvector(x, tsvc_d{n})), {f}); }}\n")
  lanes = lambda lo, hi: ", ".join(map(str, range(lo, hi)))
  split = lambda nm: (f"{_INLINE} {f} tsvc_{nm}_f{n}({f} x) {{\n  tsvc_f{h} a = tsvc_{nm}_f{h}(__builtin_shufflevector(x, x, {lanes(0, h)})), "
                      f"b = tsvc_{nm}_f{h}(__builtin_shufflevector(x, x, {lanes(h, n)}));\n"
                      f"  return __builtin_shufflevector(a, b, {lanes(0, n)});\n}}\n")
  def through_doubles(fns: tuple[str, ...], sfx: str = "") -> str:
    """tsvc_{fn}{sfx}_f{n} through doubles: one register's, else two halves of tsvc_{fn}{sfx}_f{n/2}."""
    if DIRECT.get(n) == "": return "".join(direct(fn, fn + sfx) for fn in fns)
    if n not in DIRECT: return "".join(split(fn + sfx) for fn in fns)
    return f"#ifdef {DIRECT[n]}\n{''.join(direct(fn, fn + sfx) for fn in fns)}#else\n{''.join(split(fn + sfx) for fn in fns)}#endif\n"
  core = _core(n) if DIRECT.get(n) == "" else f"#ifdef {DIRECT[n]}\n{_core(n)}#endif\n" if n in DIRECT else ""
  floats = (f"#if defined({FLOAT_LANES[n]})\n{fma_fn('tsvc_fma_f' + str(n), f, False, n)}{_exp2_float(n)}{_sin_float(n)}"
            f"#else\n{through_doubles(('exp2', 'sin'))}#endif\n")
  # SIN's double path, the float one's fallback: defined unguarded, as the float path's any-lane test
  body = _types(n) + core + through_doubles(("sin",), "w") + _any_i(n) + floats + through_doubles(("log2",))
  if n == 1:
    body += "".join(f"{_INLINE} float tsvc_{fn}f(float x) {{ return tsvc_{fn}_f1((tsvc_f1){{x}})[0]; }}\n" for fn in ("exp2", "log2", "sin"))
  return (c_source(h) if n > 4 else _tables()) + f"#ifndef TSVC_MATH_{n}\n#define TSVC_MATH_{n}\n{body}#endif\n"
