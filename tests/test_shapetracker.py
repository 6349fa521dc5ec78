"""Property tests for linearizer.shapetracker: a chain of movement ops on a tracker must map every
position exactly as the same chain of numpy view operations maps np.arange (padding as a -1 sentinel)."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from linearizer.shapetracker import ShapeTracker, View, index_vars, strides_for_shape
from linearizer.symbolic import Var, evaluate

MAX_SIZE = 512
PAD = -1  # sentinel for padded elements; np.arange never produces it


# ---- op chains, drawn against the current shape

def divisors(n): return [d for d in range(1, n + 1) if n % d == 0]

@st.composite
def factorisation(draw, size, max_dims=4):
  """A random shape with the given number of elements, 1 to max_dims dims (size-1 dims allowed)."""
  n, dims, rest = draw(st.integers(1, max_dims)), [], size
  for _ in range(n - 1):
    d = draw(st.sampled_from(divisors(rest)))
    dims.append(d); rest //= d
  dims.append(rest)
  return tuple(draw(st.permutations(dims)))

@st.composite
def shapes(draw):
  shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
  return shape if math.prod(shape) <= MAX_SIZE else shape[:2]

@st.composite
def movement_op(draw, shape):
  size, kinds = math.prod(shape), ["reshape", "reshape", "permute", "shrink", "stride", "pad"]
  if 1 in shape: kinds.append("expand")
  kind = draw(st.sampled_from(kinds))
  if kind == "reshape": return kind, draw(factorisation(size))
  if kind == "permute": return kind, tuple(draw(st.permutations(range(len(shape)))))
  if kind == "shrink":
    arg = []
    for s in shape:
      lo = draw(st.integers(0, s - 1))
      arg.append((lo, draw(st.one_of(st.just(lo + 1), st.integers(lo + 1, s)))))  # size 1 often: expand needs it
    return kind, tuple(arg)
  if kind == "stride": return kind, tuple(draw(st.sampled_from([1, 1, 2, 3, -1, -2, -3])) for _ in shape)
  if kind == "pad":
    arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    if math.prod(s + b + a for s, (b, a) in zip(shape, arg)) > MAX_SIZE: return "permute", tuple(range(len(shape)))
    return kind, arg
  new = tuple(draw(st.integers(1, 4)) if s == 1 else s for s in shape)  # expand
  return ("expand", new) if math.prod(new) <= MAX_SIZE else ("permute", tuple(range(len(shape))))

def op_shape(shape, op):
  kind, arg = op
  if kind in ("reshape", "expand"): return tuple(arg)
  if kind == "permute": return tuple(shape[i] for i in arg)
  if kind == "shrink": return tuple(hi - lo for lo, hi in arg)
  if kind == "stride": return tuple(-(-s // abs(m)) for s, m in zip(shape, arg))
  return tuple(s + b + a for s, (b, a) in zip(shape, arg))  # pad

@st.composite
def chains(draw, max_ops=8):
  """(start shape, [ops]) of movement ops, each valid for the shape the previous ones leave."""
  shape = draw(shapes())
  ops, cur = [], shape
  for _ in range(draw(st.integers(1, max_ops))):
    op = draw(movement_op(cur))
    ops.append(op); cur = op_shape(cur, op)
  return shape, ops


# ---- applying a chain to numpy and to trackers

def np_apply(a, op):
  kind, arg = op
  if kind == "reshape": return a.reshape(arg)
  if kind == "permute": return a.transpose(arg)
  if kind == "expand": return np.broadcast_to(a, arg)
  if kind == "shrink": return a[tuple(slice(lo, hi) for lo, hi in arg)]
  if kind == "stride": return a[tuple(slice(None, None, m) for m in arg)]
  return np.pad(a, arg, constant_values=PAD)

def st_apply(t, op): return getattr(t, op[0])(op[1])

def run_chain(shape, ops, simplify=False):
  a, t = np.arange(math.prod(shape)).reshape(shape), ShapeTracker.from_shape(shape)
  for op in ops:
    a, t = np_apply(a, op), st_apply(t, op)
    if simplify: t = t.simplify()
    assert t.shape == a.shape, f"{op}: tracker shape {t.shape}, numpy {a.shape}"
  return a, t

def mapping(t):
  """(index, valid) of the tracker at every position of its shape, as numpy arrays."""
  idx = np.indices(t.shape)
  env = {f"idx{i}": idx[i] for i in range(len(t.shape))}
  pos, valid = t.expr_idxs()
  return np.broadcast_to(evaluate(pos, env), t.shape), np.broadcast_to(evaluate(valid, env), t.shape)

def assert_maps_like_numpy(t, a, ops):
  index, valid = mapping(t)
  assert np.isin(valid, (0, 1)).all()
  want_valid = a != PAD
  assert np.array_equal(valid == 1, want_valid), f"validity differs after {ops}: {t}"
  assert np.array_equal(index[want_valid], a[want_valid]), f"index differs after {ops}: {t}"

def assert_normalised(t):
  for v in t.views:
    assert len(v.shape) == len(v.strides) and all(st == 0 for s, st in zip(v.shape, v.strides) if s == 1), v
    assert v.mask is None or (len(v.mask) == len(v.shape) and any(m != (0, s) for m, s in zip(v.mask, v.shape))), v


# ---- mapping

@given(chains())
def test_movement_op_chain_maps_positions_like_numpy(chain):
  shape, ops = chain
  a, t = run_chain(shape, ops)
  assert_maps_like_numpy(t, a, ops)
  assert_normalised(t)

@given(chains())
def test_simplify_after_every_op_keeps_the_mapping(chain):
  shape, ops = chain
  a, t = run_chain(shape, ops, simplify=True)
  _, plain = run_chain(shape, ops)
  assert_maps_like_numpy(t, a, ops)
  assert_normalised(t)
  assert_maps_like_numpy(plain.simplify(), a, ops)  # simplifying once at the end, too


@pytest.mark.parametrize("shape,ops", [
  ((1, 3), [("pad", ((1, 0), (0, 0))), ("shrink", ((0, 1), (0, 3))), ("expand", (4, 3))]),  # all padding, broadcast
  ((2, 3), [("pad", ((0, 0), (2, 1))), ("shrink", ((0, 2), (1, 2))), ("expand", (2, 5))]),
  ((2, 3), [("pad", ((0, 0), (2, 1))), ("shrink", ((0, 2), (3, 4))), ("expand", (2, 5)), ("stride", (-1, 2))]),
  ((4, 5), [("pad", ((1, 2), (0, 3))), ("stride", (-3, 2)), ("reshape", (12,)), ("shrink", ((1, 10),))]),
  ((3, 4), [("permute", (1, 0)), ("pad", ((1, 1), (0, 0))), ("reshape", (2, 3, 3)), ("stride", (1, -1, 2))]),
  ((3, 4), [("pad", ((1, 2), (0, 0))), ("permute", (1, 0)), ("reshape", (2, 2, 6))]),  # merges, mask bounds both ends
])
def test_tricky_chains_map_like_numpy(shape, ops):
  for simplify in (False, True):
    a, t = run_chain(shape, ops, simplify)
    assert_maps_like_numpy(t, a, ops)


# ---- merging into one view in the easy cases

@given(shapes(), st.data())
def test_reshapes_of_a_contiguous_tracker_stay_one_contiguous_view(shape, data):
  t, size = ShapeTracker.from_shape(shape), math.prod(shape)
  for _ in range(data.draw(st.integers(1, 3))):
    t = t.reshape(data.draw(factorisation(size)))
    assert len(t.views) == 1 and t.views[0].contiguous, t

@st.composite
def exact_reshape(draw, shape, strides):
  """A reshape that a strided view can take without a second view: merge adjacent dims whose strides
  chain (stride[i] == shape[i+1] * stride[i+1]) or that are size 1, then split dims into factors."""
  groups, last = [[0]], 0  # last: the group's innermost dim that is not size 1
  for i in range(1, len(shape)):
    chained = shape[i] == 1 or shape[last] == 1 or strides[last] == shape[i] * strides[i]
    if chained and draw(st.booleans()): groups[-1].append(i)
    else: groups.append([i])
    if shape[i] != 1 or len(groups[-1]) == 1: last = i
  merged = [math.prod(shape[i] for i in g) for g in groups]
  out = []
  for s in merged: out += draw(factorisation(s, max_dims=2))
  return tuple(out[:6]) if len(out) <= 6 else tuple(merged)

@given(shapes(), st.data())
def test_permute_then_exact_reshape_stays_one_view(shape, data):
  perm = tuple(data.draw(st.permutations(range(len(shape)))))
  t = ShapeTracker.from_shape(shape).permute(perm)
  v = t.views[0]
  new = data.draw(exact_reshape(v.shape, v.strides))
  r = t.reshape(new)
  assert len(r.views) == 1, f"{v} reshaped to {new}: {r.views}"
  want = np.arange(math.prod(shape)).reshape(shape).transpose(perm).reshape(new)
  assert_maps_like_numpy(r, want, [("permute", perm), ("reshape", new)])

@given(shapes(), st.data())
def test_pad_then_reshape_of_other_dims_merges_into_one_masked_view(shape, data):
  pad = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in shape)
  p = ShapeTracker.from_shape(shape).pad(pad)
  new = []  # split each dim into factors; a padded dim stays whole
  for s, (b, a) in zip(p.shape, pad): new += [s] if b or a else list(data.draw(factorisation(s, max_dims=2)))
  r = p.reshape(new)
  assert len(r.views) == 1, r
  want = np.pad(np.arange(math.prod(shape)).reshape(shape), pad, constant_values=PAD).reshape(new)
  assert_maps_like_numpy(r, want, [("pad", pad), ("reshape", tuple(new))])

@given(shapes(), st.data())
def test_pad_then_shrink_back_is_the_original_view(shape, data):
  t = ShapeTracker.from_shape(shape)
  pad = tuple((data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in shape)
  back = tuple((b, b + s) for s, (b, _) in zip(shape, pad))
  p = t.pad(pad)
  assert len(p.views) == 1 and (p.views[0].mask is not None or all(x == (0, 0) for x in pad))
  assert p.shrink(back) == t
  # also through a reshape on each side: the masks merge away and one contiguous view is left
  size = math.prod(shape)
  r = ShapeTracker.from_shape(data.draw(factorisation(size))).reshape(shape).pad(pad).shrink(back)
  r = r.reshape(data.draw(factorisation(size)))
  assert len(r.views) == 1 and r.views[0].contiguous, r


# ---- what validation and the linearizer ask of a tracker

@given(chains())
def test_position_bounds_contain_every_valid_index_and_are_exact_for_one_view(chain):
  shape, ops = chain
  a, t = run_chain(shape, ops, simplify=True)
  bounds, reached = t.position_bounds(), a[a != PAD]
  assert len(bounds) == len(t.views)
  if bounds[0] is None:
    assert reached.size == 0, f"None bounds but {reached.size} valid positions: {t}"
    return
  lo, hi = bounds[0]
  if reached.size: assert lo <= reached.min() and reached.max() <= hi, f"{bounds[0]} misses {reached.min()}..{reached.max()}: {t}"
  if len(t.views) == 1:  # one view, masked or not: each dim ranges independently over its mask
    assert reached.size == 0 or (lo, hi) == (reached.min(), reached.max()), t
  # precise enough for validation (ast.py) to accept what numpy can do: every level stays inside the view
  # below it and the bottom inside the buffer, padding included
  assert 0 <= lo and hi < math.prod(shape), f"{bounds[0]} outside [0, {math.prod(shape)}): {t}"
  for i in range(1, len(t.views)):
    if bounds[i] is not None: assert 0 <= bounds[i][0] and bounds[i][1] < math.prod(t.views[i - 1].shape), (i, bounds, t)

@given(shapes(), st.data())
def test_position_bounds_of_a_padded_view_stay_inside_the_buffer(shape, data):
  pad = tuple((data.draw(st.integers(0, 4)), data.draw(st.integers(0, 4))) for _ in shape)
  t = ShapeTracker.from_shape(shape).pad(pad)
  assert t.views[0].offset == -sum(b * st for (b, _), st in zip(pad, t.views[0].strides))
  assert t.position_bounds() == [(0, math.prod(shape) - 1)]
  r = t.reshape((math.prod(t.shape),))  # read flat through a second view: still sound
  lo, hi = r.position_bounds()[0]
  assert lo <= 0 and math.prod(shape) - 1 <= hi

@given(chains())
def test_real_strides_agree_with_index_differences_between_neighbours(chain):
  shape, ops = chain
  a, t = run_chain(shape, ops, simplify=True)
  index, valid = mapping(t)
  valid = valid == 1
  strict, loose = t.real_strides(), t.real_strides(ignore_valid=True)
  unmasked = all(v.mask is None for v in t.views)
  for d, s in enumerate(t.shape):
    if s == 1: continue
    lo, hi = [slice(None)] * len(t.shape), [slice(None)] * len(t.shape)
    lo[d], hi[d] = slice(0, s - 1), slice(1, s)
    both = valid[tuple(lo)] & valid[tuple(hi)]
    diff = (index[tuple(hi)] - index[tuple(lo)])[both]
    if loose[d] is not None: assert (diff == loose[d]).all(), f"dim {d}: stride {loose[d]}, steps {set(diff.tolist())}: {t}"
    if strict[d] is not None:
      assert strict[d] == loose[d]
      assert (valid == valid[tuple(lo[:d]) + (slice(0, 1),)]).all(), f"dim {d} changes validity: {t}"
    if unmasked:  # no mask: every position is valid, and a single view's stride is found exactly
      assert valid.all()
      if len(t.views) == 1: assert strict[d] == t.views[0].strides[d]
  assert t.unit_stride_axes() == [d for d, st in enumerate(strict) if st == 1]
  assert t.unit_stride_axes(ignore_valid=True) == [d for d, st in enumerate(loose) if st == 1]

@given(chains())
def test_an_index_on_a_dim_the_view_does_not_read_changes_nothing(chain):
  # the lowering reads a tracker with such dims at 0, so that lanes reading one element share a cached index
  # (lower.py _Lowering.at), and expr_idxs decodes no such dim of a view below (unravel): exact only if expr never looks
  shape, ops = chain
  _, t = run_chain(shape, ops)
  ivars, top = index_vars(t.shape), t.views[-1]
  assert t.expr_idxs([i if top.reads(d) else 0 for d, i in enumerate(ivars)]) == t.expr_idxs(ivars)
  for v in t.views[:-1]:
    assert v.expr([i if v.reads(d) else 0 for d, i in enumerate(index_vars(v.shape))]) == v.expr(index_vars(v.shape)), v

def test_real_strides_of_a_padded_dim_depend_on_ignore_valid():
  t = ShapeTracker.from_shape((4, 6)).pad(((0, 0), (1, 1)))
  assert t.real_strides() == (6, None) and t.real_strides(ignore_valid=True) == (6, 1)
  assert t.unit_stride_axes() == [] and t.unit_stride_axes(ignore_valid=True) == [1]
  assert ShapeTracker.from_shape((4, 6)).permute((1, 0)).unit_stride_axes() == [0]  # shape (6, 4), strides (1, 6)


# ---- normalisation

@given(st.lists(st.tuples(st.integers(1, 4), st.integers(-8, 8)), min_size=1, max_size=4), st.data())
def test_view_create_gives_size_one_dims_stride_zero_and_drops_full_masks(dims, data):
  shape, strides = [s for s, _ in dims], [st_ for _, st_ in dims]
  v = View.create(shape, strides, 3)
  assert v.strides == tuple(0 if s == 1 else st_ for s, st_ in dims) and v.offset == 3 and v.mask is None
  assert View.create(shape).strides == strides_for_shape(shape) and all(x == 0 for s, x in zip(shape, strides_for_shape(shape)) if s == 1)
  assert View.create(shape, strides, 0, [(0, s) for s in shape]).mask is None
  mask = [(data.draw(st.integers(0, s)), s) for s in shape]
  mask = [(lo, data.draw(st.integers(lo, s))) for lo, s in mask]
  full = all(m == (0, s) for m, s in zip(mask, shape))
  assert View.create(shape, strides, 0, mask).mask == (None if full else tuple(mask))

def test_view_create_examples():
  assert View.create((1, 4, 1), (7, 1, 9)) == View((1, 4, 1), (0, 1, 0), 0, None)
  assert View.create((3, 1)).strides == (1, 0) and View.create((2, 3, 4)).strides == (12, 4, 1)
  assert View.create((3, 4), (4, 1), 0, ((0, 3), (1, 4))).mask == ((0, 3), (1, 4))
  assert ShapeTracker.from_shape((2, 3)).expand((2, 3)) == ShapeTracker.from_shape((2, 3))
  assert ShapeTracker.from_shape((2, 1)).expand((2, 5)).views[0].strides == (1, 0)


# ---- symbolic dims (the last view only, as the format allows)

def test_symbolic_shrink_and_pad_map_like_numpy_for_every_value_of_the_variable():
  n = Var("n", 1, 8)
  t = ShapeTracker.from_shape((4, 8)).shrink(((0, 4), (0, n))).pad(((1, 0), (2, 1)))
  assert t.position_bounds() == [(0, 31)]
  pos, valid = t.expr_idxs()
  for v in range(1, 9):
    want = np.pad(np.arange(32).reshape(4, 8)[:, :v], ((1, 0), (2, 1)), constant_values=PAD)
    idx = np.indices(want.shape)
    env = {"idx0": idx[0], "idx1": idx[1], "n": v}
    got, ok = np.broadcast_to(evaluate(pos, env), want.shape), np.broadcast_to(evaluate(valid, env), want.shape) == 1
    assert np.array_equal(ok, want != PAD) and np.array_equal(got[ok], want[ok]), v


def test_an_empty_mask_survives_reshaping_to_no_dims():
  # tinygrad's gradient of x.pad(((1, 0),))[0] is a CONST 1.0 read through an empty mask on a size-1 dim: 0 everywhere.
  # Merged into a view of no dims, the mask had nowhere to live and the kernel stored 1.0.
  st = ShapeTracker((View.create((1,), (0,), 0, ((0, 0),)),)).reshape(())
  assert st.expr_idxs([])[1] == 0
