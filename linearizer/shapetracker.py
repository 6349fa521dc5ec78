"""Views and shape trackers: how a kernel position maps to a buffer index, and whether it is valid.

A view maps an index per dim to `offset + sum(idx * stride)`, valid where every `mask` range
holds. A tracker stacks views: the position one view produces is decoded, as a flat index, into the
dims of the view below it. Reshape pushes a contiguous view; `simplify` then merges two views into
one wherever the symbolic simplifier proves the composition affine with per-dim validity.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence
from linearizer.symbolic import Node, Var, Sum, Lt, And, sint, add, mul, lt, ge, land, floordiv, mod, smin, smax, \
  variables, concrete

def prod(xs: Iterable[sint]) -> sint:
  out: sint = 1
  for x in xs: out = mul(out, x)
  return out

def strides_for_shape(shape: Sequence[sint]) -> tuple[sint, ...]:
  out: list[sint] = []
  acc: sint = 1
  for s in reversed(shape):
    out.append(0 if s == 1 else acc)
    acc = mul(acc, s)
  return tuple(reversed(out))

def unravel(flat: sint, shape: Sequence[sint], dims: Callable[[int], bool] = lambda _: True) -> list[sint]:
  """Decode a flat index into dims (the outermost without a modulo: a valid position is in range); only the `dims` asked
  for (0 at the others: each is decoded on its own, and a view reads only some: View.reads)."""
  out: list[sint] = []
  acc: sint = 1
  for i, s in reversed(list(enumerate(shape))):
    q = floordiv(flat, acc) if dims(i) else 0
    out.append(q if i == 0 else mod(q, s))
    acc = mul(acc, s)
  return out[::-1]


@dataclass(frozen=True)
class View:
  shape: tuple[sint, ...]
  strides: tuple[sint, ...]
  offset: sint = 0
  mask: Optional[tuple[tuple[sint, sint], ...]] = None

  @staticmethod
  def create(shape: Sequence[sint], strides: Optional[Sequence[sint]] = None, offset: sint = 0,
             mask: Optional[Sequence[tuple[sint, sint]]] = None) -> View:
    """The normalised view: size-1 dims get stride 0, a mask covering the whole view becomes None."""
    shape = tuple(shape)
    strides = strides_for_shape(shape) if strides is None else tuple(0 if s == 1 else st for s, st in zip(shape, strides))
    if mask is not None:
      mask = tuple((lo, hi) for lo, hi in mask)
      if all(lo == 0 and hi == s for (lo, hi), s in zip(mask, shape)): mask = None
    return View(shape, strides, offset, mask)

  def reads(self, dim: int) -> bool:
    """Whether expr's position or validity depends on dim's index: a stride there, or a mask (which bounds every dim)."""
    return self.strides[dim] != 0 or self.mask is not None

  @property
  def contiguous(self) -> bool:
    return self.offset == 0 and self.mask is None and self.strides == strides_for_shape(self.shape)

  def expr(self, idxs: Sequence[sint]) -> tuple[sint, sint]:
    """(position, valid) of one index per dim."""
    pos = self.offset
    for i, st in zip(idxs, self.strides):
      if st != 0: pos = add(pos, mul(i, st))
    valid: sint = 1
    if self.mask is not None:
      valid = land(*(land(ge(i, lo), lt(i, hi)) for i, (lo, hi) in zip(idxs, self.mask)))
    return pos, valid

  # movement ops on one view
  def permute(self, order: Sequence[int]) -> View:
    assert sorted(order) == list(range(len(self.shape))), f"bad permutation {order} for {len(self.shape)} dims"
    return View.create([self.shape[o] for o in order], [self.strides[o] for o in order], self.offset,
                       None if self.mask is None else [self.mask[o] for o in order])

  def expand(self, shape: Sequence[sint]) -> View:
    assert len(shape) == len(self.shape) and all(a == b or a == 1 for a, b in zip(self.shape, shape)), \
      f"cannot expand {self.shape} to {tuple(shape)}"
    mask = None if self.mask is None else [m if a == b else ((0, b) if m == (0, 1) else (0, 0))
                                           for m, a, b in zip(self.mask, self.shape, shape)]
    return View.create(shape, [st if a == b else 0 for st, a, b in zip(self.strides, self.shape, shape)], self.offset, mask)

  def shrink(self, arg: Sequence[tuple[sint, sint]]) -> View:
    assert len(arg) == len(self.shape), f"shrink needs one range per dim, got {arg}"
    offset = add(self.offset, sum_of(mul(lo, st) for (lo, _), st in zip(arg, self.strides)))
    shape = [add(hi, mul(lo, -1)) for lo, hi in arg]
    mask = None
    if self.mask is not None:
      mask = [(_smax(add(mlo, mul(lo, -1)), 0), _smin(add(mhi, mul(lo, -1)), s)) for (mlo, mhi), (lo, _), s in zip(self.mask, arg, shape)]
      mask = [(a, b) if smax(a) <= smin(b) else (0, 0) for a, b in mask]
    return View.create(shape, self.strides, offset, mask)

  def pad(self, arg: Sequence[tuple[sint, sint]]) -> View:
    assert len(arg) == len(self.shape), f"pad needs one pair per dim, got {arg}"
    shape = [add(add(s, b), a) for s, (b, a) in zip(self.shape, arg)]
    offset = add(self.offset, sum_of(mul(b, mul(st, -1)) for (b, _), st in zip(arg, self.strides)))
    old = self.mask or [(0, s) for s in self.shape]
    return View.create(shape, self.strides, offset, [(add(lo, b), add(hi, b)) for (lo, hi), (b, _) in zip(old, arg)])

  def stride(self, mul_: Sequence[int]) -> View:
    assert all(isinstance(m, int) and m != 0 for m in mul_) and all(isinstance(s, int) for s in self.shape), \
      f"stride needs nonzero ints on a concrete shape, got {mul_}"
    shape = [-(-concrete(s) // abs(m)) for s, m in zip(self.shape, mul_)]
    offset = add(self.offset, sum_of(mul(s - 1, st) for s, st, m in zip(self.shape, self.strides, mul_) if m < 0))
    mask = None
    if self.mask is not None:
      mask = []
      for (lo, hi), s, m, ns in zip(((concrete(lo), concrete(hi)) for lo, hi in self.mask), map(concrete, self.shape), mul_, shape):
        # new j reads old j*m (m > 0) or s-1-j*|m| (m < 0); keep the j whose old index is in [lo, hi)
        nlo, nhi = (-(-lo // m), -(-hi // m)) if m > 0 else ((s - 1 - hi) // -m + 1, (s - 1 - lo) // -m + 1)
        nlo, nhi = max(0, min(nlo, ns)), max(0, min(nhi, ns))
        mask.append((nlo, nhi) if nlo < nhi else (0, 0))
    return View.create(shape, [mul(st, m) for st, m in zip(self.strides, mul_)], offset, mask)

def sum_of(xs) -> sint:
  out: sint = 0
  for x in xs: out = add(out, x)
  return out

def _smax(a: sint, b: sint) -> sint: return a if smin(a) >= smax(b) else b if smin(b) >= smax(a) else _undecidable(a, b)
def _smin(a: sint, b: sint) -> sint: return a if smax(a) <= smin(b) else b if smax(b) <= smin(a) else _undecidable(a, b)
def _undecidable(a: sint, b: sint) -> sint: raise ValueError(f"cannot order symbolic {a} and {b}")


def index_vars(shape: Sequence[sint], prefix: str = "idx") -> list[Var]:
  return [Var(f"{prefix}{i}", 0, smax(s) - 1) for i, s in enumerate(shape)]

def affine(x: sint, ivars: Sequence[Var]) -> Optional[tuple[list[sint], sint]]:
  """Split x into (per-var coefficient, rest) if x is affine in ivars with coefficients free of them."""
  iset = set(ivars)
  coef: dict[Var, sint] = {}
  rest: sint = 0
  terms, const = ((x.terms, x.const) if isinstance(x, Sum) else (((x, 1),), 0)) if isinstance(x, Node) else ((), x)
  for atom, k in terms:
    vs = variables(atom) & iset
    if not vs: rest = add(rest, mul(atom, k)); continue
    if isinstance(atom, Var) and atom in iset: coef[atom] = add(coef.get(atom, 0), k); continue
    factors = getattr(atom, "factors", None)
    if factors is None or len(vs) != 1 or sum(f in iset for f in factors) != 1: return None
    v = next(iter(vs))
    other = [f for f in factors if f != v]
    if any(variables(f) & iset for f in other): return None
    coef[v] = add(coef.get(v, 0), mul(prod(other), k))
  return [coef.get(v, 0) for v in ivars], add(rest, const)

def _per_dim_mask(valid: sint, ivars: Sequence[Var], shape: Sequence[sint]) -> Optional[list[tuple[sint, sint]]]:
  """Read a conjunction of bounds on single index vars as one [lo, hi) per dim, if it is one."""
  if valid == 0: return [(0, 0)] * len(ivars) if ivars else None  # a view of no dims has no mask to say "never valid" with
  lo: list[int] = [0] * len(ivars)
  hi: list[sint] = list(shape)
  for t in [] if valid == 1 else valid.terms if isinstance(valid, And) else [valid]:
    if not isinstance(t, Lt): return None
    terms = t.x.terms if isinstance(t.x, Sum) and t.x.const == 0 else ((t.x, 1),)
    if len(terms) != 1: return None
    atom, k = terms[0]
    if not isinstance(atom, Var) or atom not in ivars or k not in (1, -1): return None
    d = list(ivars).index(atom)
    if k == -1: lo[d] = max(lo[d], 1 - t.c)  # -v < c  <=>  v >= 1 - c
    elif isinstance(h := hi[d], int): hi[d] = min(h, t.c)
    else: return None
  return [(0, 0) if isinstance(h, int) and l >= h else (l, h) for l, h in zip(lo, hi)]

def merge_views(lower: View, upper: View) -> Optional[View]:
  """One view equal to `upper` read through `lower`, or None when that is not provably exact.
  Assumes, as validation proves, that every valid position of `upper` lies inside `lower`."""
  if any(isinstance(s, Node) for s in lower.shape): return None
  ivars = index_vars(upper.shape, "_m")
  pos, valid = upper.expr(ivars)
  lpos, lvalid = lower.expr(unravel(pos, lower.shape))
  aff = affine(lpos, ivars)
  mask = None if aff is None else _per_dim_mask(land(valid, lvalid), ivars, upper.shape)
  return None if aff is None or mask is None else View.create(upper.shape, aff[0], aff[1], mask)


def _reshape_view(v: View, shape: tuple[sint, ...]) -> Optional[View]:
  """The reshapes that need no proof, done on the view itself (symbolic dims included): inserting or
  removing size-1 dims, splitting one dim, merging two adjacent ones. None for anything else."""
  def full(k: int) -> bool: return v.mask is None or v.mask[k] == (0, v.shape[k])
  old = [k for k, d in enumerate(v.shape) if d != 1]
  new = [k for k, d in enumerate(shape) if d != 1]
  if any(not full(k) for k in range(len(v.shape)) if v.shape[k] == 1): return None  # an empty size-1 dim empties the view
  olds, news = [v.shape[k] for k in old], [shape[k] for k in new]
  def build(strides: list[sint], mask: list[tuple[sint, sint]]) -> View:  # place the non-1 dims, 1s between
    st: list[sint] = [0] * len(shape)
    mk: list[tuple[sint, sint]] = [(0, 1)] * len(shape)
    it = iter(zip(strides, mask))
    for k in new: st[k], mk[k] = next(it)
    return View.create(shape, st, v.offset, None if v.mask is None else mk)
  strides, mask = [v.strides[k] for k in old], [(0, v.shape[k]) if v.mask is None else v.mask[k] for k in old]
  if olds == news: return build(strides, mask)
  for i in range(len(olds)):
    if olds[:i] != news[:i]: break
    if len(news) == len(olds) + 1 and olds[i + 1:] == news[i + 2:] and isinstance(olds[i], int) and full(old[i]) \
       and isinstance(news[i], int) and news[i] * news[i + 1] == olds[i]:  # split dim i
      return build(strides[:i] + [mul(strides[i], news[i + 1]), strides[i]] + strides[i + 1:],
                   mask[:i] + [(0, news[i]), (0, news[i + 1])] + mask[i + 1:])
    if len(news) == len(olds) - 1 and olds[i + 2:] == news[i + 1:] and all(isinstance(x, int) for x in olds[i:i + 2]) \
       and full(old[i]) and full(old[i + 1]) and olds[i] * olds[i + 1] == news[i] and strides[i] == mul(strides[i + 1], olds[i + 1]):
      return build(strides[:i] + [strides[i + 1]] + strides[i + 2:], mask[:i] + [(0, news[i])] + mask[i + 2:])  # merge i, i+1
  return None


@dataclass(frozen=True)
class ShapeTracker:
  views: tuple[View, ...]

  @staticmethod
  def from_shape(shape: Sequence[sint]) -> ShapeTracker: return ShapeTracker((View.create(shape),))

  @property
  def shape(self) -> tuple[sint, ...]: return self.views[-1].shape

  def expr_idxs(self, idxs: Optional[Sequence[sint]] = None) -> tuple[sint, sint]:
    """(buffer index, valid) for an index per dim of the last view (default: fresh bounded vars)."""
    pos, valid = self.views[-1].expr(index_vars(self.shape) if idxs is None else idxs)
    for v in reversed(self.views[:-1]):
      pos, lvalid = v.expr(unravel(pos, v.shape, v.reads))
      valid = land(valid, lvalid)
    return pos, valid

  def simplify(self) -> ShapeTracker:
    views = list(self.views)
    while len(views) >= 2 and (merged := merge_views(views[-2], views[-1])) is not None:
      views[-2:] = [merged]
    return ShapeTracker(tuple(views))

  # movement ops
  def _on_last(self, v: View) -> ShapeTracker: return ShapeTracker(self.views[:-1] + (v,))
  def permute(self, order: Sequence[int]) -> ShapeTracker: return self._on_last(self.views[-1].permute(order))
  def expand(self, shape: Sequence[sint]) -> ShapeTracker: return self._on_last(self.views[-1].expand(shape))
  def shrink(self, arg: Sequence[tuple[sint, sint]]) -> ShapeTracker: return self._on_last(self.views[-1].shrink(arg))
  def pad(self, arg: Sequence[tuple[sint, sint]]) -> ShapeTracker: return self._on_last(self.views[-1].pad(arg))
  def stride(self, mul_: Sequence[int]) -> ShapeTracker: return self._on_last(self.views[-1].stride(mul_))
  def broadcast_along(self, axis: int) -> bool:
    """Every index of `axis` reads the same (stride 0 there, unmasked): `widen` may lengthen it."""
    v = self.views[-1]
    return v.strides[axis] == 0 and (v.mask is None or v.mask[axis] == (0, v.shape[axis]))
  def widen(self, axis: int, size: sint) -> ShapeTracker:
    """A broadcast axis made `size` long, every new index reading what the others read (pad would mask them)."""
    assert self.broadcast_along(axis), f"axis {axis} of {self} is not a broadcast"
    v, put = self.views[-1], lambda t, x: t[:axis] + (x,) + t[axis + 1:]
    return self._on_last(View.create(put(v.shape, size), v.strides, v.offset, None if v.mask is None else put(v.mask, (0, size))))
  def reshape(self, shape: Sequence[sint]) -> ShapeTracker:
    shape = tuple(shape)
    if shape == self.shape: return self
    assert all(smin(s) >= 1 for s in shape), f"reshape to non-positive dims {shape}"
    assert all(isinstance(s, int) for s in shape + self.shape) and math.prod(shape) == math.prod(self.shape) \
      or prod(shape) == prod(self.shape), f"cannot reshape {self.shape} to {shape}"
    if (direct := _reshape_view(self.views[-1], shape)) is not None: return self._on_last(direct)
    return ShapeTracker(self.views + (View.create(shape),)).simplify()

  # what the linearizer asks
  def real_strides(self, ignore_valid: bool = False) -> tuple[Optional[sint], ...]:
    """Per dim, the buffer stride if the index is affine in that dim (and, unless ignore_valid, the
    validity does not depend on it); else None."""
    ivars = index_vars(self.shape)
    pos, valid = self.expr_idxs(ivars)
    in_valid = variables(valid)
    out: list[Optional[sint]] = []
    for v in ivars:
      aff = affine(pos, [v])
      out.append(None if aff is None or (not ignore_valid and v in in_valid) else aff[0][0])
    return tuple(out)

  def unit_stride_axes(self, ignore_valid: bool = False) -> list[int]:
    return [i for i, st in enumerate(self.real_strides(ignore_valid)) if st == 1]

  def position_bounds(self) -> list[Optional[tuple[int, int]]]:
    """Per view, bottom first: sound (min, max) of the position it produces over every position valid
    under all masks, for every allowed value of the variables; None where no position is valid.
    A dim restricted by its mask is bounded by the mask (a fresh variable) so padding is proved safe."""
    out: list[Optional[tuple[int, int]]] = []
    dims: list[sint] = list(index_vars(self.shape, "_p"))
    dead = False
    for level, v in enumerate(reversed(self.views)):
      clamped: list[sint] = []
      for k, (d, s) in enumerate(zip(dims, v.shape)):
        lo, hi = (0, s) if v.mask is None else v.mask[k]
        lo_b, hi_b = max(smin(d), smin(lo)), min(smax(d), smax(hi) - 1)
        if lo_b > hi_b: dead = True
        if (lo_b, hi_b) == (smin(d), smax(d)): clamped.append(d)
        elif isinstance(lo, int): clamped.append(Var(f"_c{level}_{k}", lo_b, max(lo_b, hi_b)))
        else:  # a symbolic lower bound: d = lo + t keeps the correlation with lo's variables
          clamped.append(add(lo, Var(f"_c{level}_{k}", 0, max(0, smax(add(hi, mul(lo, -1))) - 1))))
      pos, _ = v.expr(clamped)
      out.append(None if dead else (smin(pos), smax(pos)))
      if level + 1 < len(self.views): dims = unravel(pos, self.views[-2 - level].shape)
    return out[::-1]
