"""Kernels that between them use every ALU op on every dtype, every cast and same-size bitcast between dtypes, and both
reductions: what a renderer has to spell right per dtype. The GPU languages' compile checks build each of them."""
from linearizer.builders import alu, cast, kernel, ld, red
from linearizer.dtypes import DTYPES, bool_, float32, float64
from linearizer.kernel import Opt

N = 64

# the floats a float-to-int cast is checked on: each side of every int dtype's ends (and of 2^63 and 2^64 where uint64
# changes rule), fractions that truncate, infinities and NaN (docs/kernel-format.md)
_POWERS = [2.0 ** k for k in (7, 8, 15, 16, 31, 32, 63, 64)]
FLOAT_TO_INT_EDGES = [0.0, -0.0, 0.5, -0.5, 0.9, -0.9, 1.9, -1.9, 127.5, -128.5, 255.5, 65535.9, -32768.5, 2.0 ** 31 - 128,
                      -(2.0 ** 31) - 256, 3e9, -3e9, 5e9, -5e9, 1e10, 2.0 ** 63 - 1024, 1.5 * 2.0 ** 63, 2.0 ** 64 - 4096, 1e20,
                      -1e20, 3.4e38, -3.4e38, 65504.0, 1e-40, float("inf"), -float("inf"), float("nan"), -float("nan")] + \
                     [v for p in _POWERS for v in (p, p - 1, p + 1, -p, -p - 1)]
SCHEDULES = ([Opt("LOCAL", 0, 8)], [Opt("UPCAST", 0, 4)], [Opt("UPCAST", 0, 2)], [Opt("GROUP", 0, 16)])  # each kernel is built under each


def _sum(xs):
  out = xs[0]
  for x in xs[1:]: out = alu("ADD", out, x)
  return out

def alu_kernel(dt):
  a, b = ld(1, (N,), dt), ld(2, (N,), dt)
  if dt == bool_:
    return kernel(alu("WHERE", alu("CMPEQ", a, b), alu("XOR", alu("ADD", a, b), alu("MUL", a, b)), alu("MAX", alu("NEG", a), alu("CMPLT", a, b))))
  terms = [alu("WHERE", alu("CMPLT", a, b), alu("MAX", a, b), alu("MOD", a, b)), alu("SUB", alu("MUL", a, b), alu("DIV", a, alu("NEG", b))),
           alu("WHERE", alu("CMPEQ", a, b), a, b)]
  return kernel(_sum(terms + ([alu(op, a) for op in ("EXP2", "LOG2", "SIN", "SQRT", "RECIP")] if dt.is_float else [alu("XOR", a, b)])))

ALL_DTYPES = tuple(DTYPES.values())

def cast_kernel(src, to=ALL_DTYPES, acc=float64):
  """src cast to every other dtype of `to`, and bitcast to each of its size, each then to `acc`, summed."""
  a = ld(1, (N,), src)
  others = [d for d in to if d != src]
  bits = [d for d in others if d.itemsize == src.itemsize and bool_ not in (d, src)]
  return kernel(_sum([cast(cast(a, d), acc) for d in others] + [cast(cast(a, d, bitcast=True), acc) for d in bits]))

def vector_kernel(dt):
  """The ops float lanes carry as vectors: arithmetic, MAX, comparisons and WHERE, casts to bool and back (and a float32
  one to float64 and back: then the lanes are float64's, two of them)."""
  a, b = ld(1, (N,), dt), ld(2, (N,), dt)
  return kernel(_sum([alu("WHERE", alu("CMPLT", a, b), alu("MAX", a, b), alu("DIV", a, alu("NEG", b))), alu("SUB", alu("MUL", a, b), a),
                      cast(alu("CMPEQ", a, b), dt), cast(cast(a, bool_), dt)] + ([cast(cast(a, float64), dt)] if dt == float32 else [])))

def dot_kernel(dt):
  """out[j] = sum_i a[i, j] * b[i, j]: MULACCs, as vectors along j."""
  return kernel(red("SUM", alu("MUL", ld(1, (N, N), dt), ld(2, (N, N), dt)), [0]))

KERNELS = {**{f"vector_{dt.name}": vector_kernel(dt) for dt in (float32, float64)}, **{f"dot_{dt.name}": dot_kernel(dt) for dt in (float32, float64)},
           **{f"alu_{n}": alu_kernel(dt) for n, dt in DTYPES.items()}, **{f"cast_{n}": cast_kernel(dt) for n, dt in DTYPES.items()},
           **{f"{fn.lower()}_{n}": kernel(red(fn, ld(1, (N, N), dt), [1])) for n, dt in DTYPES.items() if dt != bool_ for fn in ("SUM", "MAX")}}
