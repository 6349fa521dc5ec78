"""Every builder's kernel, run by the reference interpreter, matches numpy; the examples match the builders."""
import importlib.util, json, math
from pathlib import Path
import numpy as np
import pytest
from linearizer import builders as B
from linearizer.ast import load, loads
from linearizer.dtypes import float16, float32, int32
from linearizer.reference import run

ROOT = Path(__file__).resolve().parents[1]

def rand(shape, dtype=np.float32, seed=0):
  """Random values in +-[0.25, 2] (ints: +-[1, 9]): never zero."""
  rng = np.random.default_rng(seed)
  mag = rng.integers(1, 10, shape) if np.issubdtype(dtype, np.integer) else rng.uniform(0.25, 2, shape)
  return (mag * rng.choice([-1, 1], shape)).astype(dtype)

def execute(k, *inputs, var_vals=None):
  """Run k on the given input arrays (in buffer order) and return the output at its shape."""
  vv = k.var_vals(var_vals)
  sizes = k.buffer_sizes(vv)
  assert len(inputs) == len(sizes) - 1
  for i, (x, n) in enumerate(zip(inputs, sizes[1:]), 1): assert x.size >= n, f"buffer {i}: {x.size} elements given, kernel reads {n}"
  out_dt = k.buffers[0].dtype
  out = np.full(sizes[0], np.nan if out_dt.is_float else out_dt.max, dtype=out_dt.np)  # poisoned
  run(k, [out] + [np.ascontiguousarray(x).reshape(-1) for x in inputs], vv)
  shape = k.shape_at(k.output_shape, vv)
  return out[:math.prod(shape)].reshape(shape)

def close(got, want, n=1):
  """float32 tolerance, atol scaled by the number of terms summed into each output."""
  np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-5 * n)

# ---------------------------------------------------------------- the helper layer

def test_kernel_numbers_buffers_by_first_use_and_shares_one_buffer_across_views():
  xt = B.ld("x", B.st((4, 3)).permute((1, 0)))  # x is (4, 3), read transposed and, below, reshaped to (3, 4)
  k = B.kernel(B.alu("ADD", B.alu("MUL", B.ld("y", (3, 4)), xt), B.ld("x", (3, 4))))
  assert [b.buf for b in k.buffers] == [0, 1, 2] and len(k.buffers[2].sts) == 2
  y, x = rand((3, 4)), rand((4, 3), seed=1)
  close(execute(k, y, x), y * x.T + x.reshape(3, 4))

def test_cast_helper_converts_int_to_float():
  x = rand(7, np.int32)
  close(execute(B.kernel(B.alu("MUL", B.cast(B.ld("x", (7,), int32), float32), B.const(0.5, (7,)))), x), x * 0.5)

def test_kernel_collects_variables_and_round_trips():
  k = B.symbolic_sum(8, ("n", 1, 100))
  assert k.to_json()["vars"] == [{"name": "n", "min": 1, "max": 100}]
  assert load(json.loads(json.dumps(k.to_json()))).key == k.key

# ---------------------------------------------------------------- element-wise

def test_mul_add_is_a_times_b_plus_c():
  a, b, c = (rand(1000, seed=s) for s in range(3))
  close(execute(B.mul_add(1000), a, b, c), a * b + c)

def test_elementwise_broadcasts_like_numpy():
  shapes = [(3, 4, 5), (4, 1), (5,), (3, 1, 1)]
  k = B.elementwise((3, 4, 5), shapes, lambda a, b, c, d: B.alu("MAX", B.alu("SUB", B.alu("MUL", a, b), c), d))
  xs = [rand(s, seed=i) for i, s in enumerate(shapes)]
  close(execute(k, *xs), np.maximum(xs[0] * xs[1] - xs[2], xs[3]))

NP_OPS = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "MAX": np.maximum, "SIN": np.sin, "EXP2": np.exp2, "NEG": np.negative}

@pytest.mark.parametrize("shape,n_ops", [((6, 7), 32), ((2, 3, 4), 13)])
def test_elementwise_chain_matches_numpy_with_broadcast_inputs(shape, n_ops):
  xs = [rand(s, seed=i) for i, s in enumerate(B.chain_input_shapes(shape))]
  acc = xs[0]
  for i in range(1, n_ops + 1):
    op = B.CHAIN_OPS[(i - 1) % len(B.CHAIN_OPS)]
    acc = NP_OPS[op](acc) if op in ("SIN", "EXP2", "NEG") else NP_OPS[op](acc, xs[i % 4])
  k = B.elementwise_chain(shape, n_ops)
  assert sum(n.op not in ("LOAD", "STORE") for n in k.nodes) == n_ops
  close(execute(k, *xs), acc)

# ---------------------------------------------------------------- reductions

@pytest.mark.parametrize("fn,shape,axes", [("SUM", (8, 16), (1,)), ("SUM", (8, 16), (0,)), ("SUM", (8, 16), (0, 1)),
                                           ("SUM", (3, 4, 5), (1,)), ("MAX", (8, 16), (1,)), ("MAX", (4, 5, 6), (0, 2)),
                                           ("MAX", (64,), (0,))])
def test_reduce_float32_matches_numpy(fn, shape, axes):
  x = rand(shape)
  want = (np.sum if fn == "SUM" else np.max)(x.astype(np.float64), axis=axes, keepdims=True)
  close(execute(B.reduce(fn, shape, axes), x), want, math.prod(shape[a] for a in axes))

def test_reduce_int32_sum_and_max_are_exact():
  x = rand((6, 7), np.int32)
  np.testing.assert_array_equal(execute(B.reduce("SUM", (6, 7), (0, 1), int32), x), x.sum(keepdims=True))
  np.testing.assert_array_equal(execute(B.reduce("MAX", (6, 7), (1,), int32), x), x.max(1, keepdims=True))

def test_reduce_float16_sum_accumulates_in_float32():
  x = rand((4, 256), np.float16)
  want = x.astype(np.float32).sum(1, keepdims=True, dtype=np.float64).astype(np.float16)
  got = execute(B.reduce("SUM", (4, 256), (1,), float16), x)
  assert got.dtype == np.float16
  np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)  # one float16 ulp

# ---------------------------------------------------------------- matmul

@pytest.mark.parametrize("m,n,k,batch,ta,tb", [(5, 6, 7, (), False, False), (4, 3, 8, (2,), True, False),
                                               (4, 3, 8, (2,), False, True), (3, 5, 4, (2, 3), True, True), (1, 1, 33, (), False, False)])
def test_matmul_matches_numpy(m, n, k, batch, ta, tb):
  a, b = rand((*batch, k, m) if ta else (*batch, m, k)), rand((*batch, n, k) if tb else (*batch, k, n), seed=1)
  want = np.swapaxes(a, -1, -2).astype(np.float64) if ta else a.astype(np.float64)
  want = want @ (np.swapaxes(b, -1, -2) if tb else b)
  close(execute(B.matmul(m, n, k, batch, ta, tb), a, b), want[..., None], k)

def test_matmul_float16_rounds_products_and_accumulates_in_float32():
  a, b = rand((8, 64), np.float16), rand((64, 8), np.float16, seed=1)
  prods = (a.astype(np.float32)[:, None, :] * b.T.astype(np.float32)[None]).astype(np.float16)
  want = prods.astype(np.float64).sum(-1, keepdims=True).astype(np.float16)
  got = execute(B.matmul(8, 8, 64, dtype=float16), a, b)
  assert got.dtype == np.float16
  np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)

# ---------------------------------------------------------------- conv2d, against a direct loop over (group, ky, kx)

def conv2d_direct(x, w, stride=1, padding=0, dilation=1, groups=1):
  (sh, sw), (ph, pw), (dh, dw) = (B._pair(v) for v in (stride, padding, dilation))
  n, cin, h, wd = x.shape
  cout, cig, kh, kw = w.shape
  oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
  out, cpg = np.zeros((n, cout, oh, ow)), cout // groups
  for g in range(groups):
    for ky in range(kh):
      for kx in range(kw):
        patch = xp[:, g * cig:(g + 1) * cig, ky * dh:ky * dh + (oh - 1) * sh + 1:sh, kx * dw:kx * dw + (ow - 1) * sw + 1:sw]
        out[:, g * cpg:(g + 1) * cpg] += np.einsum("nchw,oc->nohw", patch, w[g * cpg:(g + 1) * cpg, :, ky, kx])
  return out

@pytest.mark.parametrize("n,cin,h,w,cout,kh,kw,opts", [
  (1, 3, 6, 6, 4, 3, 3, {}),
  (2, 3, 7, 8, 4, 3, 3, {"padding": 1}),
  (1, 2, 9, 9, 3, 3, 3, {"stride": 2}),
  (1, 2, 9, 10, 3, 3, 3, {"stride": 2, "padding": 1}),
  (1, 2, 9, 9, 3, 3, 3, {"dilation": 2}),
  (1, 2, 11, 11, 2, 3, 3, {"dilation": 2, "padding": 2}),
  (1, 4, 6, 6, 6, 3, 3, {"groups": 2}),
  (2, 4, 10, 9, 4, 3, 2, {"stride": (2, 1), "padding": (1, 2), "dilation": (2, 1), "groups": 2}),
  (1, 6, 5, 5, 3, 1, 1, {"groups": 3}),
  (1, 2, 8, 8, 2, 2, 2, {"stride": 2}),  # windows that do not overlap
  (1, 2, 5, 5, 2, 5, 5, {"padding": 2, "stride": 3}),
])
def test_conv2d_matches_direct_loops(n, cin, h, w, cout, kh, kw, opts):
  g = opts.get("groups", 1)
  x, wt = rand((n, cin, h, w)), rand((cout, cin // g, kh, kw), seed=1)
  want = conv2d_direct(x, wt, **opts)
  got = execute(B.conv2d(n, cin, h, w, cout, kh, kw, **opts), x, wt)
  assert got.shape == want.shape + (1, 1, 1)
  close(got[..., 0, 0, 0], want, cin // g * kh * kw)

def test_conv2d_reads_padded_input_through_a_masked_multi_view_tracker():
  k = B.conv2d(1, 4, 6, 6, 4, 3, 3, padding=1, groups=2)
  x = next(n for n in k.nodes if n.op == "LOAD" and n.arg.buf == 1).arg.st
  assert len(x.views) >= 2 and x.views[0].mask is not None

# ---------------------------------------------------------------- pooling

def pool_direct(kind, x, k, stride, padding):
  """Max pads with -inf, avg pads with 0 and divides by k*k (PyTorch's defaults)."""
  n, c, h, w = x.shape
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)),
              constant_values=-np.inf if kind == "max" else 0)
  oh, ow = (h + 2 * padding - k) // stride + 1, (w + 2 * padding - k) // stride + 1
  out = np.zeros((n, c, oh, ow))
  for i in range(oh):
    for j in range(ow):
      win = xp[:, :, i * stride:i * stride + k, j * stride:j * stride + k]
      out[:, :, i, j] = win.max((2, 3)) if kind == "max" else win.sum((2, 3)) / (k * k)
  return out

@pytest.mark.parametrize("kind,n,c,h,w,k,stride,padding", [
  ("max", 2, 3, 8, 8, 2, None, 0), ("max", 1, 2, 9, 7, 2, None, 0), ("max", 1, 2, 9, 9, 3, 2, 1), ("max", 1, 2, 6, 6, 3, 1, 1),
  ("max", 1, 2, 7, 7, 3, 1, 0), ("avg", 2, 3, 8, 8, 2, None, 0), ("avg", 1, 2, 9, 9, 3, 2, 1), ("avg", 1, 2, 10, 10, 2, 3, 1),
])
def test_pool2d_matches_direct_loops(kind, n, c, h, w, k, stride, padding):
  x = rand((n, c, h, w))
  want = pool_direct(kind, x, k, stride or k, padding)
  got = execute(B.pool2d(kind, n, c, h, w, k, stride, padding), x)
  close(got[..., 0, 0], want, k * k)

def test_maxpool_padding_is_minus_inf_so_all_negative_borders_keep_their_max():
  x = -np.abs(rand((1, 1, 4, 4)))  # all negative: zero padding would win every border window
  got = execute(B.pool2d("max", 1, 1, 4, 4, 3, 1, 1), x)[..., 0, 0]
  assert (got < 0).all()
  close(got, pool_direct("max", x, 3, 1, 1))

# ---------------------------------------------------------------- softmax and layernorm, kernel after kernel

def test_softmax_three_kernels_match_numpy():
  rows, cols = 5, 37
  x = rand((rows, cols)) * 4
  mx = execute(B.softmax_max(rows, cols), x)
  close(mx, x.max(1, keepdims=True))
  e = np.exp(x.astype(np.float64) - mx)
  s = execute(B.softmax_exp_sum(rows, cols), x, mx)
  close(s, e.sum(1, keepdims=True), cols)
  y = execute(B.softmax_div(rows, cols), x, mx, s)
  close(y, e / s)
  close(y.sum(1), np.ones(rows), cols)

def test_layernorm_three_kernels_match_numpy():
  rows, cols, eps = 6, 40, 1e-5
  x, gamma, beta = rand((rows, cols)) + 1, rand(cols, seed=1), rand(cols, seed=2)
  mean = execute(B.layernorm_mean(rows, cols), x)
  close(mean, x.astype(np.float64).mean(1, keepdims=True), cols)
  var = execute(B.layernorm_var(rows, cols), x, mean)
  close(var, ((x.astype(np.float64) - mean) ** 2).mean(1, keepdims=True), cols)
  y = execute(B.layernorm_norm(rows, cols, eps), x, mean, var, gamma, beta)
  x64 = x.astype(np.float64)
  close(y, (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + eps) * gamma + beta, cols)

# ---------------------------------------------------------------- activations

def test_silu_and_gelu_match_their_definitions():
  x = np.concatenate([rand((5, 8)) * 4, [[-100.0, -20.0, 0.0, 1e-3, -1e-3, 20.0, 100.0, 3.0]]]).astype(np.float32)
  x64 = x.astype(np.float64)
  close(execute(B.silu(x.shape), x), x64 / (1 + np.exp(-x64)))
  close(execute(B.gelu(x.shape), x), 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3))))

# ---------------------------------------------------------------- symbolic shapes

@pytest.mark.parametrize("start_pos", [1, 6, 33])
def test_symbolic_sum_over_rows_of_start_pos_plus_one(start_pos):
  k = B.symbolic_sum(4, ("start_pos", 1, 64))
  x = rand((4, start_pos + 1))
  close(execute(k, x, var_vals={"start_pos": start_pos}), x.astype(np.float64).sum(1, keepdims=True), start_pos + 1)

def test_symbolic_max_over_rows():
  x = rand((3, 10))
  close(execute(B.symbolic_sum(3, ("t", 1, 20), fn="MAX"), x, var_vals={"t": 9}), x.max(1, keepdims=True))

# ---------------------------------------------------------------- examples

def make_kernels():
  spec = importlib.util.spec_from_file_location("make_kernels", ROOT / "examples" / "make_kernels.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

def test_example_files_are_exactly_what_make_kernels_writes_now():
  mk = make_kernels()
  built = mk.build()
  files = {p.stem: p for p in (ROOT / "examples" / "kernels").glob("*.json")}
  assert sorted(files) == sorted(built), "run: python examples/make_kernels.py"
  for name, k in built.items():
    text = files[name].read_text()
    assert loads(text).key == k.key and loads(text).name == name, f"{name}.json is stale: run python examples/make_kernels.py"
    assert text == mk.dumps(k)
