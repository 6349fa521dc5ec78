"""EXP2, LOG2 and SIN for float32 in C, scalar and on gcc vectors, within the accuracy contract (reference.ULP_BOUND).

Each float32 lane is widened to double and computed there with a polynomial whose error (< 1e-13 relative) is far below
a float32 ulp (6e-8), then rounded once to float32: the result is the correctly rounded one unless the exact value lies
within 1e-13 of a rounding midpoint (tests/test_vecmath.py checks every float32 input against libm's double result: all
are correctly rounded). Twice the work of float arithmetic, but no float error analysis to get wrong. Doubles hold every
float32, its denormals as normal numbers, so no input needs a special path but SIN's huge arguments:
- exp2: x = n + r (n = round(x), |r| <= 1/2) after clamping x to [-152, 129] (beyond, the float result is 0 or inf);
  2^r by its Taylor series to r^11, times 2^n built from n's bits (a normal double for every clamped n).
- log2: x = 2^e * m with m in [sqrt(1/2), sqrt(2)); log2(m) = 2/ln2 * atanh(s), s = (m-1)/(m+1), |s| <= 0.172, by the
  series to s^17; +-0 -> -inf, < 0 -> NaN, inf -> inf, NaN -> NaN by selects.
- sin: Cody-Waite: k = round(x * 2/pi), r = x - k*pi/2 with pi/2 in three parts (the first two of 30 bits, so that
  k*P1 and k*P2 are exact for k < 2^23 and x - k*P1 is exact), then sin or cos of r (|r| <= pi/4) by Taylor series
  by k's quadrant. Lanes with |x| > 2^22 (where k would reach 2^22) and inf take the exact fallback, libm's double sin
  rounded to float, one lane at a time (never in practice: such arguments have no meaningful phase).
Each lane count is static inline functions over gcc vector types, so gcc keeps them in AVX-512/AVX2 registers: doubles
computed a register at a time (8 lanes with AVX-512, 4 without), wider float instances as two halves; the scalar one is
the 1-lane instance. Selects are bit masks, as the renderer's. Measured (docs/benchmarks.md): Debian's SLEEF 3.5 u10
functions are within 0.91 ulp (inside the contract, not correctly rounded) and about twice as fast.
"""
from __future__ import annotations
import math

FUNCS = ("EXP2", "LOG2", "SIN")
SIN_BIG = 2.0 ** 22  # |x| beyond it takes sin's exact fallback
_NAN = '__builtin_nan("")'

def _hex(c: float) -> str: return float(c).hex()

def _horner(var: str, coeffs: list[float]) -> str:
  """c0 + var*(c1 + var*(...)) as C."""
  out = _hex(coeffs[-1])
  for c in reversed(coeffs[:-1]): out = f"{_hex(c)}+{var}*({out})"
  return out

_LN2 = math.log(2)
EXP2_POLY = [_LN2 ** k / math.factorial(k) for k in range(12)]                  # 2^r = sum (r ln2)^k / k!
LOG2_POLY = [2 / (_LN2 * (2 * k + 1)) for k in range(9)]                         # log2(m) = s * sum c_k s^2k
SIN_POLY = [(-1) ** k / math.factorial(2 * k + 1) for k in range(8)]             # sin r = r * sum c_k r^2k
COS_POLY = [(-1) ** k / math.factorial(2 * k) for k in range(9)]                 # cos r = sum c_k r^2k
# pi/2 in three doubles: P1 and P2 keep 30 significant bits, P3 the next 53
_P1 = float.fromhex("0x1.921fb544p+0")
_P2 = float.fromhex("0x1.0b4611a6p-34")
_P3 = float.fromhex("0x1.3198a2e037073p-69")

def _types(n: int) -> str:
  return (f"typedef float tsvc_f{n} __attribute__((vector_size({4 * n})));\n"
          f"typedef double tsvc_d{n} __attribute__((vector_size({8 * n})));\n"
          f"typedef long long tsvc_l{n} __attribute__((vector_size({8 * n})));\n")

def _core(n: int) -> str:
  """EXP2, LOG2 and SIN on n double lanes: tsvc_exp2_d{n} & co."""
  d, l = f"tsvc_d{n}", f"tsvc_l{n}"
  s = lambda m, a, b: f"(({d})((({m})&({l}){a})|(~({m})&({l}){b})))"  # lanes of a where mask m is set, else of b
  c = lambda x: f"(({d}){{}}+{x})"  # a constant in every lane (only constants: -0 + 0 is +0)
  magic = "0x1.8p+52"  # adding it rounds a double of magnitude < 2^51 to an integer, kept in the low mantissa bits
  return f"""static inline {d} tsvc_exp2_d{n}({d} x) {{
  x = {s("x > 129.0", c("129.0"), "x")};
  x = {s("x < -152.0", c("-152.0"), "x")};
  {d} t = x + {magic};
  {d} r = x - (t - {magic});
  {d} p = {_horner("r", EXP2_POLY)};
  return p * ({d})((({l})t + 1023) << 52);  /* 2^n from n's bits, the low ones of t */
}}
static inline {d} tsvc_log2_d{n}({d} x) {{
  {l} bits = ({l})x;
  {d} e = __builtin_convertvector(((bits >> 52) & 0x7ff) - 1023, {d});
  {d} m = ({d})((bits & 0xfffffffffffffLL) | 0x3ff0000000000000LL);
  {l} hi = m > 0x1.6a09e667f3bcdp+0;
  m = {s("hi", "(m * 0.5)", "m")};
  e = {s("hi", "(e + 1.0)", "e")};
  {d} sr = (m - 1.0) / (m + 1.0), z = sr * sr;
  {d} y = e + sr * ({_horner("z", LOG2_POLY)});
  y = {s("x == 0.0", c("-__builtin_inf()"), "y")};
  y = {s("x < 0.0", c(_NAN), "y")};
  y = {s("x == __builtin_inf()", "x", "y")};
  return {s("x != x", "x", "y")};
}}
static inline {d} tsvc_sin_d{n}({d} x) {{
  {d} t = x * {_hex(2 / math.pi)} + {magic};
  {d} k = t - {magic};
  {d} r = ((x - k * {_hex(_P1)}) - k * {_hex(_P2)}) - k * {_hex(_P3)};
  {d} z = r * r;
  {d} sn = r + r * z * ({_horner("z", SIN_POLY[1:])});
  {d} cs = {_horner("z", COS_POLY)};
  {l} q = ({l})t;
  {d} y = {s("((q & 1) != 0)", "cs", "sn")};
  y = {s("((q & 2) != 0)", "-y", "y")};
  y = {s("x == 0.0", "x", "y")};  /* sin(-0) is -0: the polynomial's r + r*z*p gave +0 */
  {l} big = (x > {_hex(SIN_BIG)}) | (x < -{_hex(SIN_BIG)});
  long long any = 0;
  for (int i = 0; i < {n}; i++) any |= big[i];
  if (__builtin_expect(any != 0, 0))
    for (int i = 0; i < {n}; i++) if (big[i]) y[i] = sin(x[i]);  /* the exact fallback */
  return y;
}}
"""

# lanes -> the macro under which its doubles fit one register and it computes there directly ("": always); elsewhere an
# instance is two of half the lanes (gcc scalarises comparisons on vectors wider than the ISA's: 16 lanes of double
# ran 10x slower)
DIRECT = {1: "", 4: "", 8: "__AVX512F__"}

def c_source(n: int) -> str:
  """tsvc_exp2_f{n}, tsvc_log2_f{n}, tsvc_sin_f{n} on n float32 lanes (tsvc_f{n}: a gcc vector; n = 1 adds tsvc_exp2f & co
  on plain floats), with every smaller instance they are built of; guarded, so instances may repeat."""
  f, h = f"tsvc_f{n}", n // 2
  direct = "".join(f"static inline {f} tsvc_{fn}_f{n}({f} x) "
                   f"{{ return __builtin_convertvector(tsvc_{fn}_d{n}(__builtin_convertvector(x, tsvc_d{n})), {f}); }}\n"
                   for fn in ("exp2", "log2", "sin"))
  lanes = lambda lo, hi: ", ".join(map(str, range(lo, hi)))
  split = "".join(f"static inline {f} tsvc_{fn}_f{n}({f} x) {{\n  tsvc_f{h} a = tsvc_{fn}_f{h}(__builtin_shufflevector(x, x, {lanes(0, h)})), "
                  f"b = tsvc_{fn}_f{h}(__builtin_shufflevector(x, x, {lanes(h, n)}));\n  return __builtin_shufflevector(a, b, {lanes(0, n)});\n}}\n"
                  for fn in ("exp2", "log2", "sin"))
  body = _types(n) + (_core(n) + direct if DIRECT.get(n) == "" else split if n not in DIRECT else
                      f"#ifdef {DIRECT[n]}\n{_core(n)}{direct}#else\n{split}#endif\n")
  if n == 1:
    body += "".join(f"static inline float tsvc_{fn}f(float x) {{ return tsvc_{fn}_f1((tsvc_f1){{x}})[0]; }}\n" for fn in ("exp2", "log2", "sin"))
  return (c_source(h) if n > 4 else "") + f"#ifndef TSVC_MATH_{n}\n#define TSVC_MATH_{n}\n{body}#endif\n"
