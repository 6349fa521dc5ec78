"""The reference interpreter: what a kernel computes, defined in numpy.

It is the golden answer for every generated kernel, so the semantics are spelled out here:
- A position masked out by any view reads 0 of the LOAD's (or CONST's) dtype; a STORE skips it.
  Positions are decoded view by view exactly as the format says, independently of the symbolic
  machinery the code generators use.
- float16 and bfloat16 arithmetic is done in float32 and rounded to the dtype after every op, as
  generated code does. EXP2, LOG2 and SIN are computed in float64 and rounded to the dtype, so the
  reference is correctly rounded there (numpy's float32 exp2 is 1 ulp off on a fifth of inputs). Float DIV is IEEE
  division; MAX propagates NaN; float MOD is C `fmod`.
- The accuracy contract: generated code computes SQRT, RECIP (1/x) and DIV exactly (IEEE, correctly rounded), and
  EXP2, LOG2 and SIN within ULP_BOUND ulps of the result's dtype of the exact value, over every input, with the
  special values exact: NaN in, NaN out; exp2(-inf) = +0, exp2(+inf) = +inf, exp2 of an integer exact; log2(+-0) =
  -inf, log2(x < 0) = NaN, log2(+inf) = +inf, log2(2^k) = k exactly; sin(+-0) = +-0, sin(+-inf) = NaN; results that
  round past the largest finite value are inf. float16 and bfloat16 compute in float32 and round. The
  implementations, and what checks them (tests/test_vecmath.py: every float32, float16 and bfloat16 input; a sample
  of float64 ones):
    C        float32 (and float16/bfloat16 through it): linearizer.vecmath, scalar and on 4/8/16-lane vectors: EXP2 on
             float lanes within 0.88 ulp and SIN within 0.72 ulp for |x| <= 2^15 where the ISA has an FMA; LOG2, the
             larger SIN arguments (and EXP2 and SIN without an FMA) through doubles, correctly rounded; |x| >= 2^22 in
             SIN through libm's double sin, rounded. float64: glibc's exp2/log2/sin.
    OpenCL, CUDA, HIP  float32 and narrower: the language's double exp2/log2/sin rounded to the dtype (never the
             native_/half_/__exp2f intrinsics): <= 4 ulp of a double is far inside half a float32 ulp. float64: those
             double functions, within 3 (EXP2, LOG2) and 4 (SIN) ulps by the OpenCL spec, 1/1/2 by CUDA's guide.
    Metal    (text only here: no device checks it) float32 through Metal's precise exp2/log2/sin: Metal has no double,
             and its documented bounds are wider than the contract's: not covered.
  `compare` holds generated code to it: the range a correct kernel may produce (`expected_range`, `run_bounds`) carries
  an interval through every op above each EXP2/LOG2/SIN (linearizer.bounds), so any error pattern within the contract
  stays inside, however the ops above move it (SIN of an amplified value, a comparison, a cast to int).
- Integer arithmetic wraps (two's complement). DIV truncates toward zero and MOD takes the sign of
  the dividend (C); dividing by zero gives 0 for both, INT_MIN / -1 wraps to INT_MIN.
- bool: ADD and MAX are OR, MUL is AND, XOR is XOR, NEG is NOT; SUB, DIV and MOD are not defined.
- Comparisons give bool; NaN compares false (CMPEQ too).
- CAST: to bool is `x != 0` (NaN is true); from bool gives 0 or 1; int to int wraps; int or float to
  float rounds to nearest; float to int is x86-64's conversion (what numpy's astype and plain C give there), defined
  for every input (C leaves out-of-range and NaN undefined; we define them): truncation toward zero to int32 (int64
  for uint32 and int64), a value outside that range or NaN giving its minimum (x86's "integer indefinite"), the result
  wrapped to the target; to uint64 a value in [-2^63, 2^64) wraps, one above gives 0, one below or NaN 2^63. A
  bitcast reinterprets the bits.
- REDUCE SUM accumulates in float32 for float16/bfloat16/float32, float64 for float64, and in the
  integer dtype itself (wrapping) for integers; the result is rounded to the dtype. MAX starts
  from the first element (every axis has at least one), propagating NaN.
"""
from __future__ import annotations
import math, warnings
from typing import Callable, Iterator, Mapping, Optional, Sequence
import numpy as np
from linearizer import bounds
from linearizer.ast import KernelAST, LazyOp, MemArg, ConstArg, concrete_st
from linearizer.bounds import Bounds
from linearizer.dtypes import DType, bool_, float_to_int_via
from linearizer.shapetracker import ShapeTracker, prod
from linearizer.symbolic import concrete

BLOCK_ELEMENTS = 1 << 24  # the most elements one block materialises per operand (~64 MB of float32)


def run(kernel: KernelAST, buffers: Sequence[np.ndarray], var_vals: Optional[Mapping[str, int]] = None) -> None:
  """Compute `kernel` into buffers[0]; buffers[1..] are its inputs (1-D, each buffer's dtype)."""
  _run(kernel, [buffers[0]], buffers, kernel.var_vals(var_vals), 0.0, False)


def run_bounds(kernel: KernelAST, buffers: Sequence[np.ndarray], var_vals: Optional[Mapping[str, int]] = None,
               sum_order: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
  """(lo, hi): the output a kernel correct by the accuracy contract may produce (linearizer.bounds), each element between
  them, with every EXP2/LOG2/SIN within ULP_BOUND ulps and a float SUM within `sum_order` x the sum of its terms'
  magnitudes (what adding in another order may change). Elements the kernel does not write are buffers[0]'s."""
  lo, hi = buffers[0].copy(), buffers[0].copy()
  _run(kernel, [lo, hi], buffers, kernel.var_vals(var_vals), sum_order, True)
  return lo, hi


def _run(kernel: KernelAST, outs: list[np.ndarray], buffers: Sequence[np.ndarray], vv: Mapping[str, int], sum_order: float,
         widen: bool) -> None:
  _check_buffers(kernel, buffers, vv)
  sts: dict[ShapeTracker, ShapeTracker] = {}
  # merged views decode far cheaper; tests check on the corpus that merging keeps every position
  def conc(st: ShapeTracker) -> ShapeTracker: return sts[st] if st in sts else sts.setdefault(st, concrete_st(st, vv).simplify())
  full = kernel.shape_at(kernel.full_shape, vv)
  red = kernel.reduceop
  axes = red.arg.axis if red is not None else ()
  live = _live_dims(kernel.ast)
  # SUM over a MUL of two float32/64 operands is a contraction: einsum never materialises the product
  # space, so blocks are sized by what the operands and the output materialise
  contract = red is not None and red.arg.fn == "SUM" and red.src[0].op == "MUL" and red.dtype.name in ("float32", "float64")
  def size(r, dims) -> int: return math.prod(r[d][1] - r[d][0] for d in dims)
  parts = [live[red.src[0].src[0]], live[red.src[0].src[1]], [d for d in range(len(full)) if d not in axes]] if red is not None and contract \
    else [list(range(len(full)))]
  cost = lambda r: max(size(r, dims) for dims in parts)
  # split first the axes of the largest operand, so the others stay whole and are reused across blocks
  whole = [(0, s) for s in full]
  heaviest = lambda axs: sorted(axs, key=lambda d: -max((size(whole, dims) for dims in parts if d in dims), default=0))
  leaves: dict[LazyOp, tuple] = {}  # a leaf's last value, reused while its dims' ranges stay the same
  shift = sum_order != 0 and red is not None and red.arg.fn == "SUM" and red.dtype.is_float
  with np.errstate(all="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    for block in _blocks(whole, heaviest([a for a in range(len(full)) if a not in axes]), cost):
      memo: dict[LazyOp, bounds.Value] = {}
      if red is not None:
        acc: Optional[bounds.Value] = None
        mag: np.ndarray | float = 0.0
        for sub in _blocks(block, heaviest(axes), cost):
          ev = lambda x: _eval(x, sub, buffers, conc, {}, leaves, live, widen)  # noqa: B023  (used in this iteration only)
          einsum = lambda a, b: _contract(a, b, sub, axes)  # noqa: B023
          if contract:
            a, b = ev(red.src[0].src[0]), ev(red.src[0].src[1])
            part = bounds.contract(a, b, einsum)
            if shift: mag = mag + einsum(bounds.magnitude(a), bounds.magnitude(b))
          else:
            x = ev(red.src[0])
            ext = [hi - lo for lo, hi in sub]
            xb = Bounds(np.broadcast_to(x.lo, ext), np.broadcast_to(x.hi, ext)) if isinstance(x, Bounds) else np.broadcast_to(x, ext)
            part = bounds.reduce(red.arg.fn, xb, red.dtype, tuple(axes), _reduce)
            if shift: mag = mag + np.sum(np.broadcast_to(bounds.magnitude(x), ext), axis=tuple(axes), keepdims=True)
          acc = part if acc is None else bounds.combine(red.arg.fn, acc, part, red.dtype, _combine)
        assert acc is not None  # _blocks covers every range with at least one block
        if shift: acc = Bounds(bounds.of(acc).lo - sum_order * mag, bounds.of(acc).hi + sum_order * mag)
        memo[red] = _as(acc, red.dtype)
        block = [(0, 1) if a in axes else r for a, r in enumerate(block)]
      _store(kernel.ast, block, outs, buffers, conc, memo, leaves, live, widen)


def _as(x: bounds.Value, dt: DType) -> bounds.Value:
  return Bounds(np.asarray(x.lo, dtype=dt.np), np.asarray(x.hi, dtype=dt.np)) if isinstance(x, Bounds) else np.asarray(x, dtype=dt.np)


# output poison: a quiet NaN with a payload no arithmetic produces, so an unwritten element is told
# apart from a computed NaN; non-float outputs get the dtype's max
NAN_POISON: dict[str, np.unsignedinteger] = {"float16": np.uint16(0x7E5A), "bfloat16": np.uint16(0x7FDA), "float32": np.uint32(0x7FC5DEAD),
              "float64": np.uint64(0x7FF8DEADDEADDEAD)}

def poison(d: DType, n: int) -> np.ndarray:
  return np.full(n, NAN_POISON[d.name]).view(d.np) if d.is_float else np.full(n, d.max, dtype=d.np)

def is_poison(x: np.ndarray, d: DType) -> np.ndarray:
  return x.view(NAN_POISON[d.name].dtype) == NAN_POISON[d.name] if d.is_float else x == d.max


TRANSCENDENTALS = ("EXP2", "LOG2", "SIN")
ULP_BOUND = {"float16": 1, "bfloat16": 1, "float32": 1, "float64": 4}  # the contract: max error of EXP2/LOG2/SIN in ulps
_SIGNIFICAND = {"float16": (11, -14), "bfloat16": (8, -126), "float32": (24, -126), "float64": (53, -1022)}  # bits, min exponent

def nudge_ulps(y: np.ndarray, dt: DType, ulps: float) -> np.ndarray:
  """Finite nonzero values of dtype dt moved by `ulps` of dt (up if > 0); zeros, infinities and NaN stay."""
  p, emin = _SIGNIFICAND[dt.name]
  y64 = y.astype(np.float64)
  with np.errstate(all="ignore"):
    e = np.maximum(np.floor(np.log2(np.abs(y64))), emin)
    moved = y64 + ulps * np.exp2(e - (p - 1))
  return np.where(np.isfinite(y64) & (y64 != 0), moved, y64).astype(dt.np)

FLOAT_TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-12}  # ~16 ulp at 1.0

def reduce_size(k: KernelAST, var_vals: Mapping[str, int]) -> int:
  """Elements summed into each output element (1 without a reduce): what the float tolerance grows with."""
  if k.reduceop is None: return 1
  return math.prod(k.shape_at(k.reduceop.src[0].shape, var_vals)) // max(1, math.prod(k.shape_at(k.reduceop.shape, var_vals)))


def _float_sum(kernel: KernelAST) -> bool: return (red := kernel.reduceop) is not None and red.arg.fn == "SUM" and red.dtype.is_float

def ranged(kernel: KernelAST) -> bool:
  """Whether a correct kernel's output may differ from the reference by more than `mismatch`'s tolerance: a float SUM
  (another order) or EXP2/LOG2/SIN (the contract)."""
  return _float_sum(kernel) or any(n.op in TRANSCENDENTALS for n in kernel.nodes)

def range_of(kernel: KernelAST, buffers: Sequence[np.ndarray], var_vals: Optional[Mapping[str, int]] = None):
  """(lo, hi): the range a correct kernel may produce (`run_bounds`) by summing its float SUM in another order -- the SUM
  within 16 ulp x sqrt(n) of the magnitude of its terms -- and by computing EXP2/LOG2/SIN within the contract, carried
  through every op above them; (None, None) where not `ranged`. Elements the kernel does not write are buffers[0]'s."""
  if not ranged(kernel): return None, None
  vv, red = kernel.var_vals(var_vals), kernel.reduceop
  rel = FLOAT_TOLERANCE[red.dtype.name] * max(1.0, math.sqrt(reduce_size(kernel, vv))) if _float_sum(kernel) and red is not None else 0.0
  return run_bounds(kernel, buffers, vv, rel)

def expected_range(kernel: KernelAST, buffers: Sequence[np.ndarray], var_vals: Optional[Mapping[str, int]] = None):
  """(want, lo, hi) for the output: the reference, and `range_of`. buffers[0] is left untouched."""
  vv = kernel.var_vals(var_vals)
  want = [buffers[0].copy()] + list(buffers[1:])
  run(kernel, want, vv)
  return (want[0], *range_of(kernel, buffers, vv))


def mismatch(got: np.ndarray, want: np.ndarray, dt: DType, reduce_size: int = 1, lo: Optional[np.ndarray] = None,
             hi: Optional[np.ndarray] = None) -> Optional[str]:
  """None if `got` matches the reference `want`, else what differs. Integers and bools equal it, or lie within [lo, hi]
  from `expected_range` (bools: lo certainly true, hi possibly true); floats agree within 16 ulp of the dtype (growing
  with the square root of the reduction length) or lie within [lo, hi] widened by as much, and are NaN where the
  reference is, or where lo or hi is NaN (NaN possible; the reference's own NaN where both are)."""
  if got.shape != want.shape: return f"shape {got.shape} != {want.shape}"
  got, want = got.reshape(-1), want.reshape(-1)
  flat = (lo.reshape(-1), hi.reshape(-1)) if lo is not None and hi is not None else None
  tol = FLOAT_TOLERANCE[dt.name] * max(1.0, math.sqrt(reduce_size)) if dt.is_float else 0.0
  def bad(sl: slice, at: np.ndarray) -> np.ndarray:  # which of the chunk's differing positions `at` are out of tolerance
    g, w = got[sl][at], want[sl][at]
    l, h = (flat[0][sl][at], flat[1][sl][at]) if flat is not None else (None, None)
    if not dt.is_float:
      ok = g == w
      if l is not None and h is not None: ok |= (g >= l) & (g <= h)
      return ~ok
    g, w = g.astype(np.float64), w.astype(np.float64)
    with np.errstate(invalid="ignore"):
      ok = (np.isnan(g) & np.isnan(w)) | (g == w) | (np.abs(g - w) <= tol * (1 + np.abs(w)))
      if l is not None and h is not None:
        l, h = l.astype(np.float64), h.astype(np.float64)
        ok |= ((np.isnan(l) | np.isnan(h)) & ~(np.isnan(l) & np.isnan(h) & np.isnan(w))) | \
          ((g >= l - tol * (1 + np.abs(l))) & (g <= h + tol * (1 + np.abs(h))))
    return ~ok
  n, i = disagreements(got, want, bad)
  if n == 0: return None
  return f"{n} of {want.size} elements differ; first at {i}: got {got[i]!r}, want {want[i]!r}"


CHUNK = 1 << 16  # elements a chunked pass takes at once: its temporaries stay in cache, none of the arrays' size

def _bits(x: np.ndarray) -> np.ndarray: return x.reshape(-1).view(f"u{x.dtype.itemsize}")

def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
  """Whether a and b (the same dtype and size) hold the same bytes, chunk by chunk."""
  ab, bb = _bits(a), _bits(b)
  return ab.size == bb.size and all(np.array_equal(ab[s:s + CHUNK], bb[s:s + CHUNK]) for s in range(0, ab.size, CHUNK))

def disagreements(got: np.ndarray, want: np.ndarray, bad: Callable[[slice, np.ndarray], np.ndarray]) -> tuple[int, int]:
  """(how many, the first: -1 where none) of got's positions that disagree with want's, a chunk at a time: equal bits
  always agree, and of the positions that differ, `bad(chunk, positions in it)` says which disagree (a mask of them)."""
  gb, wb = _bits(got), _bits(want)
  count, first = 0, -1
  for s in range(0, gb.size, CHUNK):
    if (at := np.flatnonzero(gb[s:s + CHUNK] != wb[s:s + CHUNK])).size == 0: continue
    wrong = at[bad(slice(s, s + CHUNK), at)]
    if wrong.size and first < 0: first = s + int(wrong[0])
    count += wrong.size
  return count, first


def random_buffers(kernel: KernelAST, var_vals: Optional[Mapping[str, int]] = None, seed: int = 0) -> list[np.ndarray]:
  """Seeded random inputs (never all zeros) and a poisoned output."""
  rng = np.random.default_rng(seed)
  out = []
  for b, n in zip(kernel.buffers, kernel.buffer_sizes(kernel.var_vals(var_vals))):
    d = b.dtype
    if b.buf == 0: out.append(poison(d, n)); continue
    if d.is_float: x = random_floats(rng, n).astype(d.np, copy=False)
    elif d == bool_: x = rng.random(n) < 0.5
    else: x = rng.integers(-64 if d.kind == "i" else 1, 64, n).astype(d.np)
    out.append(x)
  return out


def random_floats(rng: np.random.Generator, n: int) -> np.ndarray:
  """n float32 of a random sign and significand and magnitude in [1/8, 2) (one of four binades, each as likely): never
  0, inf or NaN. Made from the bit generator's raw words, two a word, in two passes: a normal variate cost ~10x (16M of
  them 0.4 s quiet, 3 s at load 12: a 16M-element kernel's search waited seconds for its inputs)."""
  u = rng.bit_generator.random_raw(n // 2 + n % 2).view(np.uint32)
  if u.size > n: u = u[:n].copy()  # an allocation of n exactly: a read one past its end must fault (ASan)
  u &= np.uint32(0x81FFFFFF)  # the sign, the exponent's two low bits, the significand
  u |= np.uint32(0x3E000000)  # the exponent's other bits: 124 + 0..3, 2^-3 <= |x| < 2
  return u.view(np.float32)


def _check_buffers(kernel: KernelAST, buffers: Sequence[np.ndarray], vv: Mapping[str, int]) -> None:
  if len(buffers) != len(kernel.buffers): raise ValueError(f"kernel takes {len(kernel.buffers)} buffers, got {len(buffers)}")
  for b, n, x in zip(kernel.buffers, kernel.buffer_sizes(vv), buffers):
    if not isinstance(x, np.ndarray) or x.ndim != 1 or x.dtype != b.dtype.np or x.size < n:
      raise ValueError(f"buffer {b.buf} must be a 1-D {b.dtype.name} array of at least {n} elements")


def _blocks(ranges: list[tuple[int, int]], axes: list[int], cost) -> Iterator[list[tuple[int, int]]]:
  """Cover `ranges` with blocks whose cost (elements materialised) is at most BLOCK_ELEMENTS where
  possible, splitting only `axes`, outer first, each into the longest steps that fit."""
  def go(i: int, ranges: list[tuple[int, int]]) -> Iterator[list[tuple[int, int]]]:
    if cost(ranges) <= BLOCK_ELEMENTS or i == len(axes):
      yield ranges
      return
    ax, (lo0, hi0) = axes[i], ranges[axes[i]]
    with_len = lambda n: ranges[:ax] + [(lo0, lo0 + n)] + ranges[ax + 1:]
    step, hi = 1, hi0 - lo0  # the longest step that fits, by bisection (cost grows with the extent)
    while step < hi:
      mid = (step + hi + 1) // 2
      step, hi = (mid, hi) if cost(with_len(mid)) <= BLOCK_ELEMENTS else (step, mid - 1)
    for lo in range(lo0, hi0, step):
      yield from go(i + 1, ranges[:ax] + [(lo, min(hi0, lo + step))] + ranges[ax + 1:])
  yield from go(0, list(ranges))


def _live_dims(root: LazyOp) -> dict[LazyOp, list[int]]:
  """The dims each node's value varies along: a leaf's nonzero strides and restricting masks of its last
  view (the views below only re-read that position), and the union over an op's sources."""
  out: dict[LazyOp, list[int]] = {}
  for n in root.toposort():
    if n.op in ("LOAD", "CONST"):
      v = n.arg.st.views[-1]
      out[n] = [d for d, st in enumerate(v.strides) if st != 0 or (v.mask is not None and v.mask[d] != (0, v.shape[d]))]
    else: out[n] = sorted(set().union(*(out[s] for s in n.src)))
  return out


def _positions(st: ShapeTracker, block: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
  """(index, valid) of every position of the block, as arrays broadcastable to the block."""
  nd = len(block)
  # int32 arithmetic is ~5x faster (numpy vectorises its division); use it wherever no value can overflow
  it = np.int32 if all(abs(concrete(v.offset)) + sum((concrete(s) - 1) * abs(concrete(st)) for s, st in zip(v.shape, v.strides)) < 2**31 and
                       concrete(prod(v.shape)) < 2**31 for v in st.views) else np.int64  # st is concrete (the caller's concrete_st)
  idxs: list[Optional[np.ndarray]] = [np.arange(lo, hi, dtype=it).reshape([-1 if k == d else 1 for k in range(nd)])
                                      for d, (lo, hi) in enumerate(block)]
  pos, valid = _through_view(st.views[-1], idxs, np.ones([1] * nd, dtype=bool), it)
  for v in reversed(st.views[:-1]):  # re-read the position as a flat index into the dims below (those that matter)
    acc = [math.prod(v.shape[k + 1:]) for k in range(len(v.shape))]
    idxs = [None if v.strides[k] == 0 and not _restricts(v, k) else pos // acc[k] % v.shape[k] if k else pos // acc[k]
            for k in range(len(v.shape))]
    pos, valid = _through_view(v, idxs, valid, it)
  return pos, valid

def _restricts(v, k: int) -> bool: return v.mask is not None and v.mask[k] != (0, v.shape[k])

def _through_view(v, idxs: list, valid: np.ndarray, it) -> tuple[np.ndarray, np.ndarray]:
  pos = np.full([1] * valid.ndim, v.offset, dtype=it)
  for k, (i, s) in enumerate(zip(idxs, v.strides)):
    if s: pos = pos + i * s
    if _restricts(v, k): valid = valid & (i >= v.mask[k][0]) & (i < v.mask[k][1])
  return pos, valid


def _eval(n: LazyOp, block, buffers, conc, memo: dict, leaves: dict, live: dict, widen: bool) -> bounds.Value:
  """n's value over the block: an array, or with `widen` Bounds where the contract lets a correct kernel differ."""
  if n in memo: return memo[n]
  if n.op in ("LOAD", "CONST"):
    key = tuple(block[d] for d in live[n])
    if n in leaves and leaves[n][0] == key: return leaves[n][1]
  out: bounds.Value
  if n.op == "LOAD" and (view := _strided(conc(n.arg.st), block, buffers[n.arg.buf])) is not None: out = view
  elif n.op == "LOAD":
    a: MemArg = n.arg
    pos, valid = _positions(conc(a.st), block)
    buf, pos = buffers[a.buf], np.where(valid, pos, 0)
    if pos.min() < 0 or pos.max() >= buf.size:  # numpy would wrap a negative index silently
      raise RuntimeError(f"reference: buffer {a.buf} indexed out of range; validation should have rejected this kernel")
    out = np.where(valid, buf[pos], a.dtype.np.type(0))
  elif n.op == "CONST":
    c: ConstArg = n.arg
    _, valid = _positions(conc(c.st), block)
    out = np.where(valid, np.array(c.val, dtype=c.dtype.np), c.dtype.np.type(0))
  else:
    srcs = [_eval(s, block, buffers, conc, memo, leaves, live, widen) for s in n.src]
    out = bounds.cast(srcs[0], n.src[0].dtype, n.arg.dtype, n.arg.bitcast, cast) if n.op == "CAST" else \
      bounds.alu(n.op, n.src[-1].dtype, srcs, alu)
    if widen and n.op in TRANSCENDENTALS: out = bounds.widen(out, n.dtype, ULP_BOUND[n.dtype.name], nudge_ulps)
  memo[n] = out = _as(out, n.dtype)
  if n.op in ("LOAD", "CONST"): leaves[n] = (key, out)
  return out


def _strided(st: ShapeTracker, block, buf: np.ndarray, writeable: bool = False) -> Optional[np.ndarray]:
  """The block of a single unmasked view with strides >= 0 as a strided view of buf, without index arrays (the
  common case, and much the cheapest); None where the general path is needed. Stride-0 dims come out size 1."""
  if len(st.views) > 1 or (v := st.views[0]).mask is not None: return None
  strides = [concrete(s) for s in v.strides]  # st is concrete (the caller's concrete_st)
  if any(s < 0 for s in strides): return None
  start = concrete(v.offset) + sum(lo * s for (lo, _), s in zip(block, strides))
  end = start + sum((hi - lo - 1) * s for (lo, hi), s in zip(block, strides))
  if start < 0 or end >= buf.size: raise RuntimeError("reference: a buffer indexed out of range; validation should have rejected this kernel")
  return np.lib.stride_tricks.as_strided(buf[start:], [hi - lo if s else 1 for (lo, hi), s in zip(block, strides)],
                                         [s * buf.itemsize for s in strides], writeable=writeable)


def _store(n: LazyOp, block, outs: list[np.ndarray], buffers, conc, memo: dict, leaves: dict, live: dict, widen: bool) -> None:
  """The block of the STORE's value into outs (one output, or with `widen` the lo and hi outputs)."""
  val = _eval(n.src[0], block, buffers, conc, memo, leaves, live, widen)
  for out_buf, v in zip(outs, (val.lo, val.hi) if isinstance(val, Bounds) else (val, val)):
    if (out := _strided(conc(n.arg.st), block, out_buf, writeable=True)) is not None and out.shape == tuple(hi - lo for lo, hi in block):
      out[...] = v
      continue
    pos, valid = _positions(conc(n.arg.st), block)
    shape = [hi - lo for lo, hi in block]
    pos, valid, v = (np.broadcast_to(x, shape) for x in (pos, valid, v))
    out_buf[pos[valid]] = v[valid]


def alu(op: str, dt: DType, xs: list[np.ndarray]) -> np.ndarray:
  if op == "WHERE": return np.where(xs[0], xs[1], xs[2])
  if dt == bool_:
    return {"ADD": np.logical_or, "MAX": np.logical_or, "MUL": np.logical_and, "XOR": np.logical_xor, "NEG": np.logical_not,
            "CMPLT": np.less, "CMPEQ": np.equal}[op](*xs)
  if dt.is_float:
    if op in ("EXP2", "LOG2", "SIN"): xs = [x.astype(np.float64) for x in xs]  # rounded from float64: the golden answer
    elif dt.itemsize < 4: xs = [x.astype(np.float32) for x in xs]  # narrow floats compute in float32, round per op
    f = {"NEG": np.negative, "EXP2": np.exp2, "LOG2": np.log2, "SIN": np.sin, "SQRT": np.sqrt, "RECIP": np.reciprocal,
         "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide, "MAX": np.maximum, "MOD": np.fmod,
         "CMPLT": np.less, "CMPEQ": np.equal}[op]
    out = f(*xs)
    return out if op in ("CMPLT", "CMPEQ") else out.astype(dt.np, copy=False)  # f made a new array: one already of dt is not copied again
  if op in ("DIV", "MOD"):
    a, b = xs
    safe = np.where(b == 0, np.ones_like(b), b)
    q = a // safe
    if dt.kind == "i":  # floor -> truncation: step back toward zero where the signs differ and it did not divide
      q = np.where(((a - q * safe) != 0) & ((a < 0) != (safe < 0)), q + np.ones_like(q), q)
    out = q if op == "DIV" else a - q * safe
    return np.where(b == 0, np.zeros_like(out), out)
  return {"NEG": np.negative, "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "MAX": np.maximum,
          "XOR": np.bitwise_xor, "CMPLT": np.less, "CMPEQ": np.equal}[op](*xs)


def cast(x: np.ndarray, src: DType, dst: DType, bitcast: bool) -> np.ndarray:
  if bitcast: return np.ascontiguousarray(x).view(dst.np)
  if dst == bool_: return x != 0
  if src.is_float and dst.is_int: return _float_to_int(np.trunc(x.astype(np.float64)), dst)
  return x.astype(dst.np)

def _float_to_int(t: np.ndarray, dst: DType) -> np.ndarray:
  """x86-64's conversion of truncated floats `t` (float64, exact), spelled out so that it holds on every host: through
  int32 (int64 for uint32 and int64) where `t` fits, else that type's minimum (NaN too), then wrapped to dst; uint64
  takes [-2^63, 2^64) wrapped, 0 above, 2^63 below and NaN (gcc's two-conversion sequence)."""
  i64 = lambda v: np.where(np.abs(v) < 2.0 ** 63, v, -(2.0 ** 63)).astype(np.int64)  # noqa: E731  (NaN: the minimum)
  if dst.name == "uint64":
    low = (t >= -(2.0 ** 63)) & (t < 2.0 ** 63)
    high = (t >= 2.0 ** 63) & (t < 2.0 ** 64)
    beyond = np.where(t > 0, np.uint64(0), np.uint64(2 ** 63))
    return np.where(low, i64(t).astype(np.uint64), np.where(high, i64(t - 2.0 ** 63).astype(np.uint64) + np.uint64(2 ** 63), beyond))
  bits = 8 * float_to_int_via(dst).itemsize
  fits = (t >= -(2.0 ** (bits - 1))) & (t < 2.0 ** (bits - 1))
  return i64(np.where(fits, t, -(2.0 ** (bits - 1)))).astype(dst.np)


def _reduce(fn: str, dt: DType, x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
  acc = dt.acc.np
  if fn == "SUM": return np.sum(x, axis=tuple(axes), keepdims=True, dtype=acc)
  return np.max(x.astype(acc), axis=tuple(axes), keepdims=True)

def _contract(a: np.ndarray, b: np.ndarray, block, axes: Sequence[int]) -> np.ndarray:
  """sum(a * b) over `axes` with keepdims, for a and b broadcastable to the block."""
  ext = [hi - lo for lo, hi in block]
  a_dims, b_dims = [d for d in range(len(ext)) if a.shape[d] > 1], [d for d in range(len(ext)) if b.shape[d] > 1]
  out_dims = [d for d in range(len(ext)) if d not in axes and d in a_dims + b_dims]
  r = np.einsum(a.reshape([ext[d] for d in a_dims]), a_dims, b.reshape([ext[d] for d in b_dims]), b_dims, out_dims, optimize=True)
  r = r.reshape([ext[d] if d in out_dims else 1 for d in range(len(ext))])
  # a reduced dim that neither operand varies along sums the same product ext[d] times
  n = math.prod(ext[d] for d in axes if d not in a_dims + b_dims)
  return r * r.dtype.type(n) if n > 1 else r

def _combine(fn: str, a: np.ndarray, b: np.ndarray) -> np.ndarray: return a + b if fn == "SUM" else np.maximum(a, b)
