"""Interval arithmetic over the reference's values: what a correct kernel may compute where the exact answer is not unique.

Two things let a correct kernel differ from the reference: EXP2/LOG2/SIN within the accuracy contract (reference.ULP_BOUND
ulps of the exact value, any error pattern) and a float SUM added in another order. `reference.run(..., bounds=True)`
carries each value as exact (one array, the reference's) or as a `Bounds` that holds every value such a kernel may have
there, through every op above: an error that moves the ops above it non-monotonically (SIN of an amplified value, a
comparison, a cast to int) stays inside, which moving every result one way or the other (the former `nudge` runs) did not
guarantee. Bounds are computed in round-to-nearest, so an endpoint may sit half an ulp inside the true range; `mismatch`'s
16-ulp tolerance covers that.
- floats: [lo, hi]; an endpoint NaN where NaN is possible (lo NaN, hi +inf: anything, NaN included).
- bools: (certainly true, possibly true).
- integers: [lo, hi], the dtype's whole range where wrapping or an op without a cheap rule (DIV, MOD, XOR, bitcast) is met.
"""
from __future__ import annotations
import math
from typing import Callable, NamedTuple, Sequence
import numpy as np
from linearizer.dtypes import DType, bool_


class Bounds(NamedTuple):
  lo: np.ndarray
  hi: np.ndarray

Value = np.ndarray | Bounds
Alu = Callable[[str, DType, list[np.ndarray]], np.ndarray]  # reference.alu: the exact op on arrays
Cast = Callable[[np.ndarray, DType, DType, bool], np.ndarray]  # reference.cast
Reduce = Callable[[str, DType, np.ndarray, Sequence[int]], np.ndarray]  # reference._reduce
Combine = Callable[[str, np.ndarray, np.ndarray], np.ndarray]  # reference._combine

def of(x: Value) -> Bounds: return x if isinstance(x, Bounds) else Bounds(x, x)

def anything(dt: DType, shape) -> Bounds:
  if dt.is_float: return Bounds(np.full(shape, np.nan, dt.np), np.full(shape, np.inf, dt.np))
  return Bounds(np.full(shape, dt.min, dt.np), np.full(shape, dt.max, dt.np))

def _pick(m: np.ndarray, a: Bounds, b: Bounds) -> Bounds:
  return Bounds(np.where(m, a.lo, b.lo), np.where(m, a.hi, b.hi))

def _hull(a: Bounds, b: Bounds, dt: DType) -> Bounds:
  if dt == bool_: return Bounds(a.lo & b.lo, a.hi | b.hi)
  if dt.is_float: return Bounds(_nanmin(a.lo, b.lo), _nanmax(a.hi, b.hi))
  return Bounds(np.minimum(a.lo, b.lo), np.maximum(a.hi, b.hi))

def _nanmin(a, b): return np.where(np.isnan(a) | np.isnan(b), np.nan, np.minimum(a, b)).astype(np.result_type(a, b))
def _nanmax(a, b): return np.where(np.isnan(a) | np.isnan(b), np.inf, np.maximum(a, b)).astype(np.result_type(a, b))

def widen(x: Value, dt: DType, ulps: float, nudge: Callable[[np.ndarray, DType, float], np.ndarray]) -> Bounds:
  """x within `ulps` of the dtype either way (reference.nudge_ulps moves finite nonzero values; a zero or an infinity
  stays, as the contract's special values do)."""
  b = of(x)
  return Bounds(nudge(b.lo, dt, -ulps), nudge(b.hi, dt, ulps))

def magnitude(x: Value) -> np.ndarray:
  b = of(x)
  return np.maximum(np.abs(b.lo.astype(np.float64)), np.abs(b.hi.astype(np.float64)))

def _ints(lo64: np.ndarray, hi64: np.ndarray, dt: DType) -> Bounds:
  """Integer bounds computed in float64: where either leaves the dtype (it would wrap) or float64's exact range, any value."""
  ok = (lo64 >= max(dt.min, -2.0 ** 52)) & (hi64 <= min(dt.max, 2.0 ** 52))
  return Bounds(np.where(ok, lo64, dt.min).astype(dt.np), np.where(ok, hi64, dt.max).astype(dt.np))

def _monotone(f: Callable[[np.ndarray], np.ndarray], x: Bounds, increasing: bool = True) -> Bounds:
  lo, hi = f(x.lo), f(x.hi)
  return Bounds(lo, hi) if increasing else Bounds(hi, lo)

def _sin(x: Bounds, dt: DType) -> Bounds:
  """sin over [lo, hi]: its endpoints' values, and +-1 where a crest or trough lies between."""
  lo, hi = x.lo.astype(np.float64), x.hi.astype(np.float64)
  s, t = np.sin(lo), np.sin(hi)
  crest = np.ceil((lo - math.pi / 2) / (2 * math.pi)) * 2 * math.pi + math.pi / 2 <= hi
  trough = np.ceil((lo + math.pi / 2) / (2 * math.pi)) * 2 * math.pi - math.pi / 2 <= hi
  return Bounds(np.where(trough, -1.0, np.minimum(s, t)).astype(dt.np), np.where(crest, 1.0, np.maximum(s, t)).astype(dt.np))

def _compare(op: str, a: Bounds, b: Bounds) -> Bounds:
  """CMPLT/CMPEQ as (certainly, possibly); NaN compares false, and an endpoint NaN means anything."""
  if op == "CMPLT": return Bounds(a.hi < b.lo, ~(a.lo >= b.hi))
  exact = (a.lo == a.hi) & (b.lo == b.hi)
  return Bounds(exact & (a.lo == b.lo), ~((a.hi < b.lo) | (b.hi < a.lo)))

def alu(op: str, dt: DType, xs: Sequence[Value], exact: Alu) -> Value:
  """Bounds of op (reference.alu's semantics; dt the operands' dtype) over operands some of which are Bounds."""
  arrays = [x for x in xs if not isinstance(x, Bounds)]
  if len(arrays) == len(xs): return exact(op, dt, arrays)
  bs = [of(x) for x in xs]
  f = lambda o, *v: exact(o, dt, list(v))  # noqa: E731
  shape = np.broadcast_shapes(*(b.lo.shape for b in bs))
  if op == "WHERE":
    c, a, b = bs
    both = _hull(a, b, dt)
    return Bounds(np.where(c.lo, a.lo, np.where(~c.hi, b.lo, both.lo)), np.where(c.lo, a.hi, np.where(~c.hi, b.hi, both.hi)))
  if op in ("CMPLT", "CMPEQ"):
    if dt == bool_: bs = [Bounds(b.lo.astype(np.int8), b.hi.astype(np.int8)) for b in bs]
    return _compare(op, *bs)
  if dt == bool_:
    a = bs[0]
    if op == "NEG": return Bounds(~a.hi, ~a.lo)
    b = bs[1]
    if op in ("ADD", "MAX"): return Bounds(a.lo | b.lo, a.hi | b.hi)
    if op == "MUL": return Bounds(a.lo & b.lo, a.hi & b.hi)
    unsure = (a.lo != a.hi) | (b.lo != b.hi)  # XOR
    return Bounds((a.lo ^ b.lo) & ~unsure, (a.lo ^ b.lo) | unsure)
  if not dt.is_float: return _int_alu(op, dt, bs, shape)
  a = bs[0]
  if op == "NEG": return Bounds(f("NEG", a.hi), f("NEG", a.lo))
  if op in ("EXP2", "LOG2", "SQRT"): return _monotone(lambda v: f(op, v), a)
  if op == "RECIP":
    away = (a.lo > 0) | (a.hi < 0)
    r = _monotone(lambda v: f("RECIP", v), a, increasing=False)
    return _pick(away, r, anything(dt, shape))
  if op == "SIN": return _sin(a, dt)
  b = bs[1]
  if op == "ADD": return Bounds(f("ADD", a.lo, b.lo), f("ADD", a.hi, b.hi))
  if op == "SUB": return Bounds(f("SUB", a.lo, b.hi), f("SUB", a.hi, b.lo))
  if op == "MAX": return Bounds(f("MAX", a.lo, b.lo), f("MAX", a.hi, b.hi))
  if op in ("MUL", "DIV"):
    ends = [f(op, u, v) for u in (a.lo, a.hi) for v in (b.lo, b.hi)]
    lo, hi = ends[0], ends[0]
    for e in ends[1:]: lo, hi = _nanmin(lo, e), _nanmax(hi, e)
    out = Bounds(lo, hi)
    return out if op == "MUL" else _pick((b.lo > 0) | (b.hi < 0), out, anything(dt, shape))
  # MOD (C fmod: a - trunc(a/b)*b, the sign of a): increasing in a while trunc(a/b) stays, with b exact; else |r| < |b|
  one_turn = (b.lo == b.hi) & (np.trunc(f("DIV", a.lo, b.lo)) == np.trunc(f("DIV", a.hi, b.lo))) & ((a.lo >= 0) | (a.hi <= 0))
  mb = np.maximum(np.abs(b.lo), np.abs(b.hi))
  zero = np.zeros((), dt.np)
  wide = Bounds(np.where(a.lo < 0, -mb, zero).astype(dt.np), np.where(a.hi > 0, mb, zero).astype(dt.np))
  return _pick(one_turn, Bounds(f("MOD", a.lo, b.lo), f("MOD", a.hi, b.lo)), wide)

def _int_alu(op: str, dt: DType, bs: list[Bounds], shape) -> Bounds:
  d = [Bounds(b.lo.astype(np.float64), b.hi.astype(np.float64)) for b in bs]
  if op == "NEG": return _ints(-d[0].hi, -d[0].lo, dt)
  if op in ("ADD", "SUB", "MUL", "MAX"):
    a, b = d
    if op == "ADD": return _ints(a.lo + b.lo, a.hi + b.hi, dt)
    if op == "SUB": return _ints(a.lo - b.hi, a.hi - b.lo, dt)
    if op == "MAX": return _ints(np.maximum(a.lo, b.lo), np.maximum(a.hi, b.hi), dt)
    ends = np.stack(np.broadcast_arrays(*[u * v for u in (a.lo, a.hi) for v in (b.lo, b.hi)]))
    return _ints(ends.min(axis=0), ends.max(axis=0), dt)
  return anything(dt, shape)  # DIV, MOD, XOR of an inexact integer

def cast(x: Value, src: DType, dst: DType, bitcast: bool, exact: Cast) -> Value:
  if not isinstance(x, Bounds): return exact(x, src, dst, bitcast)
  if bitcast: return anything(dst, x.lo.shape)
  if dst == bool_:  # x != 0 (NaN is true)
    if src == bool_: return x
    return Bounds((x.lo > 0) | (x.hi < 0), ~((x.lo == 0) & (x.hi == 0)))
  if src == bool_: return Bounds(exact(x.lo, src, dst, False), exact(x.hi, src, dst, False))
  if src.is_float and dst.is_int:  # truncation: increasing while it fits dst; past that it wraps or jumps (reference._float_to_int)
    lo, hi = np.trunc(x.lo.astype(np.float64)), np.trunc(x.hi.astype(np.float64))
    fits = (lo >= dst.min) & (hi < 2.0 ** (8 * dst.itemsize - (dst.kind == "i")))  # NaN fails
    return _pick(fits, Bounds(exact(x.lo, src, dst, False), exact(x.hi, src, dst, False)), anything(dst, x.lo.shape))
  if src.is_int and dst.is_int:
    return _ints(x.lo.astype(np.float64), x.hi.astype(np.float64), dst)
  return Bounds(exact(x.lo, src, dst, False), exact(x.hi, src, dst, False))  # to a float: rounding is increasing

def reduce(fn: str, x: Value, dt: DType, axes: tuple[int, ...], exact: Reduce) -> Value:
  """SUM or MAX over axes with keepdims (reference._reduce on each endpoint: both are increasing); an integer SUM's
  endpoints are summed in float64 and take the whole range where they would wrap."""
  if not isinstance(x, Bounds): return exact(fn, dt, x, axes)
  if fn == "SUM" and dt.is_int:
    total = lambda v: np.asarray(np.sum(v, axis=axes, keepdims=True, dtype=np.float64))  # noqa: E731
    return _ints(total(x.lo), total(x.hi), dt)
  return Bounds(exact(fn, dt, x.lo, axes), exact(fn, dt, x.hi, axes))

def combine(fn: str, a: Value, b: Value, dt: DType, exact: Combine) -> Value:
  """Two partial reductions combined (reference._combine on the endpoints; integer SUMs as in `reduce`)."""
  if not isinstance(a, Bounds) and not isinstance(b, Bounds): return exact(fn, a, b)
  a, b = of(a), of(b)
  if fn == "SUM" and dt.is_int: return _ints(a.lo.astype(np.float64) + b.lo, a.hi.astype(np.float64) + b.hi, dt)
  return Bounds(exact(fn, a.lo, b.lo), exact(fn, a.hi, b.hi))

def contract(a: Value, b: Value, einsum: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Value:
  """sum(a * b) over the reduce by midpoint and radius (a = am +- ar, b = bm +- br): am.bm +- (|am|.br + ar.|bm| + ar.br),
  four contractions, never the product space."""
  if not isinstance(a, Bounds) and not isinstance(b, Bounds): return einsum(a, b)
  a, b = of(a), of(b)
  am, ar = (a.lo + a.hi) / 2, (a.hi - a.lo) / 2
  bm, br = (b.lo + b.hi) / 2, (b.hi - b.lo) / 2
  mid = einsum(am, bm)
  rad = einsum(np.abs(am), br) + einsum(ar, np.abs(bm)) + einsum(ar, br)
  return Bounds(mid - rad, mid + rad)
