"""Builders for common kernels, each returned as a validated `KernelAST`.

Views are made with ShapeTracker movement ops, never hand-written strides, so building a kernel also
exercises the shape tracker, and every kernel is round-tripped through `load(to_json())`, so through
validation. While building, a LOAD names its buffer by any label; `kernel` numbers the inputs 1..n in
first-use order and adds the contiguous STORE.
"""
from __future__ import annotations
import math
from typing import Any, Callable, Hashable, Optional, Sequence, Union
from linearizer import symbolic
from linearizer.ast import LazyOp, MemArg, ConstArg, CastArg, ReduceArg, KernelAST, load
from linearizer.dtypes import DType, bool_, float32
from linearizer.shapetracker import ShapeTracker
from linearizer.symbolic import Var, concrete, sint

Shape = Sequence[sint]
LOG2E = math.log2(math.e)

def _pair(x: Union[int, Sequence[int]]) -> tuple[int, int]: return (x, x) if isinstance(x, int) else (x[0], x[1])
def _flat(xss) -> list: return [x for xs in xss for x in xs]

# ---------------------------------------------------------------- the helper layer

def st(shape: Shape) -> ShapeTracker: return ShapeTracker.from_shape(tuple(shape))

def broadcast(shape: Shape, out: Shape) -> ShapeTracker:
  """A contiguous tensor of `shape` read at `out` with numpy broadcasting (dims aligned on the right)."""
  return st(shape).reshape((1,) * (len(out) - len(shape)) + tuple(shape)).expand(tuple(out))

def ld(buf: Hashable, view: Union[ShapeTracker, Shape], dtype: DType = float32) -> LazyOp:
  """LOAD of the buffer labelled `buf` through `view` (a tracker, or a shape read contiguously)."""
  label: Any = buf  # a label until kernel() numbers the buffers
  return LazyOp("LOAD", (), MemArg(label, dtype, view if isinstance(view, ShapeTracker) else st(view)))

def const(val, shape: Union[ShapeTracker, Shape], dtype: DType = float32) -> LazyOp:
  """A scalar broadcast to `shape` (all strides 0), or read through a tracker: masked positions give 0."""
  view = shape if isinstance(shape, ShapeTracker) else st((1,) * len(shape)).expand(tuple(shape))
  return LazyOp("CONST", (), ConstArg(val, dtype, view))

def alu(op: str, *src: LazyOp) -> LazyOp: return LazyOp(op, tuple(src))
def cast(x: LazyOp, dtype: DType, bitcast: bool = False) -> LazyOp: return LazyOp("CAST", (x,), CastArg(dtype, bitcast))
def red(fn: str, x: LazyOp, axes: Sequence[int]) -> LazyOp: return LazyOp("REDUCE", (x,), ReduceArg(fn, tuple(sorted(axes))))

def _vars(sts: list[ShapeTracker]) -> list[Var]:
  ints = [x for s in sts for v in s.views for x in (*v.shape, *v.strides, v.offset, *_flat(v.mask or ()))]
  return sorted(set().union(*(symbolic.variables(x) for x in ints)), key=lambda v: v.name)

def kernel(x: LazyOp, name: Optional[str] = None) -> KernelAST:
  """STORE `x` to a contiguous output of its shape, with the inputs numbered 1..n in first-use order
  (sources left to right), the variables collected from the views; validated by a JSON round trip."""
  bufs: dict[Hashable, int] = {}
  memo: dict[LazyOp, LazyOp] = {}
  def renumber(n: LazyOp) -> LazyOp:
    if n not in memo:
      src, arg = tuple(renumber(s) for s in n.src), n.arg
      if n.op == "LOAD": arg = MemArg(bufs.setdefault(arg.buf, len(bufs) + 1), arg.dtype, arg.st)
      memo[n] = LazyOp(n.op, src, arg)
    return memo[n]
  root = renumber(x)
  out = LazyOp("STORE", (root,), MemArg(0, root.dtype, st(root.shape)))
  sts = [n.arg.st for n in out.toposort() if isinstance(n.arg, (MemArg, ConstArg))]
  return load(KernelAST(out, tuple(_vars(sts)), name).to_json())

# ---------------------------------------------------------------- element-wise

def elementwise(shape: Shape, input_shapes: Sequence[Shape], expr: Callable[..., LazyOp], dtype: DType = float32,
                name: Optional[str] = None) -> KernelAST:
  """expr(*loads) at `shape`, input i being a contiguous tensor of input_shapes[i] broadcast numpy-style."""
  return kernel(expr(*(ld(i, broadcast(s, shape), dtype) for i, s in enumerate(input_shapes))), name)

def mul_add(n: int = 1 << 24, dtype: DType = float32, name: Optional[str] = None) -> KernelAST:
  """a*b+c on n elements."""
  return elementwise((n,), [(n,)] * 3, lambda a, b, c: alu("ADD", alu("MUL", a, b), c), dtype, name)

# a chain step applies its op to the accumulator and (binary ops) one input; the SINs keep values
# bounded, so the EXP2s never overflow however long the chain
CHAIN_OPS = ("MUL", "ADD", "SIN", "SUB", "MAX", "EXP2", "MUL", "NEG", "ADD", "SIN")

def chain_input_shapes(shape: Shape) -> list[tuple]:
  """The chain's inputs: full, broadcast along axis 0, broadcast along the last axis, full."""
  shape = tuple(shape)
  return [shape, (1,) + shape[1:], shape[:-1] + (1,), shape]

def elementwise_chain(shape: Shape = (1024, 1024), n_ops: int = 32, dtype: DType = float32,
                      name: Optional[str] = None) -> KernelAST:
  """acc = x0; then step i (from 1) is acc = CHAIN_OPS[(i-1) % 10](acc, x[i % 4]), unary ops ignoring x."""
  def expr(*xs: LazyOp) -> LazyOp:
    acc = xs[0]
    for i in range(1, n_ops + 1):
      op = CHAIN_OPS[(i - 1) % len(CHAIN_OPS)]
      acc = alu(op, acc) if op in ("SIN", "EXP2", "NEG") else alu(op, acc, xs[i % len(xs)])
    return acc
  return elementwise(shape, chain_input_shapes(shape), expr, dtype, name)

# ---------------------------------------------------------------- reductions

def reduce(fn: str = "SUM", shape: Shape = (4096, 4096), axes: Sequence[int] = (1,), dtype: DType = float32,
           name: Optional[str] = None) -> KernelAST:
  """SUM or MAX of a contiguous tensor over `axes`; the output keeps the reduced dims as 1."""
  return kernel(red(fn, ld("x", shape, dtype), axes), name)

def matmul(m: int = 64, n: int = 64, k: int = 64, batch: Sequence[int] = (), transpose_a: bool = False,
           transpose_b: bool = False, dtype: DType = float32, name: Optional[str] = None, acc: Optional[DType] = None) -> KernelAST:
  """C = A @ B over full shape (*batch, m, n, k), reducing the last axis; C is (*batch, m, n, 1).
  A is stored (*batch, m, k), or (*batch, k, m) with transpose_a; B is (*batch, k, n), or (*batch, n, k)
  with transpose_b. With `acc`, A's and B's elements are cast to it, then multiplied and summed there (a tensor core's
  float16 -> float32 matmul)."""
  b, nb = tuple(batch), len(batch)
  swap = (*range(nb), nb + 1, nb)  # swap the last two dims
  a = st((*b, k, m) if transpose_a else (*b, m, k))
  a = (a.permute(swap) if transpose_a else a).reshape((*b, m, 1, k)).expand((*b, m, n, k))
  w = st((*b, n, k) if transpose_b else (*b, k, n))
  w = (w if transpose_b else w.permute(swap)).reshape((*b, 1, n, k)).expand((*b, m, n, k))
  operand = lambda label, view: ld(label, view, dtype) if acc is None else cast(ld(label, view, dtype), acc)
  return kernel(red("SUM", alu("MUL", operand("a", a), operand("b", w)), (nb + 2,)), name)

# ---------------------------------------------------------------- windows: conv and pooling

def pool(view: ShapeTracker, k_: Sequence[int], s_: Sequence[int], d_: Sequence[int]) -> ShapeTracker:
  """Sliding windows over the last len(k_) dims, (..., *i) -> (..., *o, *k), o = (i-d*(k-1)-1)//s+1,
  with window o reading i = o*s + k*d (tinygrad's _pool)."""
  pre, i_ = tuple(view.shape[:-len(k_)]), [concrete(i) for i in view.shape[-len(k_):]]
  keep, npre = [(0, p) for p in pre], len(pre)
  o_ = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(i_, k_, s_, d_)]
  assert all(o >= 1 for o in o_), f"window {tuple(k_)} (dilation {tuple(d_)}) does not fit in {tuple(i_)}"
  if all(k <= s and d == 1 for k, s, d in zip(k_, s_, d_)):
    # windows do not overlap: cut each dim into o blocks of s and keep the first k of each block
    view = view.pad(keep + [(0, max(0, o * s - i)) for o, s, i in zip(o_, s_, i_)])
    view = view.shrink(keep + [(0, o * s) for o, s in zip(o_, s_)]).reshape(pre + tuple(_flat(zip(o_, s_))))
    view = view.shrink(keep + _flat(((0, o), (0, k)) for o, k in zip(o_, k_)))
    return view.permute((*range(npre), *(npre + 2 * j for j in range(len(k_))), *(npre + 2 * j + 1 for j in range(len(k_)))))
  # windows overlap: repeat each dim e times and read it in rows of i+d, so row j starts j*d further in...
  e_ = [-(-k * (i + d) // i) for k, i, d in zip(k_, i_, d_)]
  view = view.reshape(pre + tuple(_flat((1, i) for i in i_))).expand(pre + tuple(_flat(zip(e_, i_))))
  view = view.reshape(pre + tuple(e * i for e, i in zip(e_, i_))).shrink(keep + [(0, k * (i + d)) for k, i, d in zip(k_, i_, d_)])
  view = view.reshape(pre + tuple(_flat((k, i + d) for k, i, d in zip(k_, i_, d_))))
  # ...and the o windows start every s along a row
  view = view.shrink(keep + _flat(((0, k), (0, (o - 1) * s + 1)) for k, o, s in zip(k_, o_, s_)))
  view = view.stride([1] * npre + _flat((1, s) for s in s_))
  return view.permute((*range(npre), *(npre + 2 * j + 1 for j in range(len(k_))), *(npre + 2 * j for j in range(len(k_)))))

def _padded_windows(n: int, c: int, h: int, w: int, k_, s_, p_, d_) -> ShapeTracker:
  """(n, c, h, w) zero-padded (masked) then windowed: (n, c, oh, ow, kh, kw)."""
  return pool(st((n, c, h, w)).pad(((0, 0), (0, 0), (p_[0], p_[0]), (p_[1], p_[1]))), k_, s_, d_)

def conv2d(n: int = 1, cin: int = 64, h: int = 56, w: int = 56, cout: int = 64, kh: int = 3, kw: int = 3, stride=1, padding=0,
           dilation=1, groups: int = 1, dtype: DType = float32, name: Optional[str] = None) -> KernelAST:
  """NCHW conv of x (n, cin, h, w) with weight (cout, cin/groups, kh, kw), no bias: one REDUCE SUM over
  full shape (n, cout, oh, ow, cin/groups, kh, kw); the output is (n, cout, oh, ow) (stored with three
  trailing 1s). stride, padding and dilation are ints or (h, w) pairs; padding is zeros."""
  assert cin % groups == 0 and cout % groups == 0, f"groups={groups} must divide cin={cin} and cout={cout}"
  g, cig, cpg = groups, cin // groups, cout // groups
  x = _padded_windows(n, cin, h, w, (kh, kw), _pair(stride), _pair(padding), _pair(dilation))
  oh, ow = x.shape[2:4]
  full = (n, cout, oh, ow, cig, kh, kw)
  # split the channels into groups, repeat each group for its cout/groups filters, merge (g, cpg) into cout
  x = x.reshape((n, g, 1, cig, oh, ow, kh, kw)).expand((n, g, cpg, cig, oh, ow, kh, kw))
  x = x.permute((0, 1, 2, 4, 5, 3, 6, 7)).reshape(full)
  wt = st((cout, cig, kh, kw)).reshape((1, cout, 1, 1, cig, kh, kw)).expand(full)
  return kernel(red("SUM", alu("MUL", ld("x", x, dtype), ld("w", wt, dtype)), (4, 5, 6)), name)

def pool2d(kind: str = "max", n: int = 1, c: int = 64, h: int = 112, w: int = 112, k: int = 2, stride: Optional[int] = None,
           padding: int = 0, dtype: DType = float32, name: Optional[str] = None) -> KernelAST:
  """Max- or avg-pool of NCHW x over k x k windows (stride defaults to k): full shape (n, c, oh, ow, k, k),
  reducing the last two axes. As in PyTorch, max pads with -inf (a WHERE on the padding mask, read as
  a masked bool CONST) and avg pads with 0 and divides by k*k (count_include_pad)."""
  assert kind in ("max", "avg"), f"kind must be 'max' or 'avg', got {kind!r}"
  win = _padded_windows(n, c, h, w, (k, k), _pair(stride or k), _pair(padding), (1, 1))
  x = ld("x", win, dtype)
  if kind == "max":
    if padding: x = alu("WHERE", const(True, win, bool_), x, const(-math.inf, win.shape, dtype))
    return kernel(red("MAX", x, (4, 5)), name)
  s = red("SUM", x, (4, 5))
  return kernel(alu("MUL", s, const(1 / (k * k), s.shape, dtype)), name)

# ---------------------------------------------------------------- softmax over the last axis, in three kernels

def softmax_max(rows: int = 4096, cols: int = 1024, dtype: DType = float32, name: Optional[str] = None) -> KernelAST:
  """max(x) per row: (rows, 1)."""
  return kernel(red("MAX", ld("x", (rows, cols), dtype), (1,)), name)

def _exp_shifted(rows: int, cols: int, dtype: DType) -> LazyOp:
  """exp(x - max) as exp2((x - max) * log2(e)); x is the first input, the (rows, 1) max the second."""
  x, mx = ld("x", (rows, cols), dtype), ld("max", broadcast((rows, 1), (rows, cols)), dtype)
  return alu("EXP2", alu("MUL", alu("SUB", x, mx), const(LOG2E, (rows, cols), dtype)))

def softmax_exp_sum(rows: int = 4096, cols: int = 1024, dtype: DType = float32, name: Optional[str] = None) -> KernelAST:
  """sum(exp(x - max)) per row, from x and the row max: (rows, 1)."""
  return kernel(red("SUM", _exp_shifted(rows, cols, dtype), (1,)), name)

def softmax_div(rows: int = 4096, cols: int = 1024, dtype: DType = float32, name: Optional[str] = None) -> KernelAST:
  """exp(x - max) / sum, from x, the row max and the row sum: (rows, cols)."""
  return kernel(alu("DIV", _exp_shifted(rows, cols, dtype), ld("sum", broadcast((rows, 1), (rows, cols)), dtype)), name)

# ---------------------------------------------------------------- layernorm over the last axis, in three kernels

def _row(buf: str, rows: int, cols: int, dtype: DType) -> LazyOp: return ld(buf, broadcast((rows, 1), (rows, cols)), dtype)

def layernorm_mean(rows: int = 4096, cols: int = 1024, dtype: DType = float32, name: Optional[str] = None) -> KernelAST:
  """sum(x) * (1/cols) per row: (rows, 1)."""
  s = red("SUM", ld("x", (rows, cols), dtype), (1,))
  return kernel(alu("MUL", s, const(1 / cols, s.shape, dtype)), name)

def layernorm_var(rows: int = 4096, cols: int = 1024, dtype: DType = float32, name: Optional[str] = None) -> KernelAST:
  """sum((x - mean)^2) * (1/cols) per row, from x and the row mean: (rows, 1)."""
  d = alu("SUB", ld("x", (rows, cols), dtype), _row("mean", rows, cols, dtype))
  s = red("SUM", alu("MUL", d, d), (1,))
  return kernel(alu("MUL", s, const(1 / cols, s.shape, dtype)), name)

def layernorm_norm(rows: int = 4096, cols: int = 1024, eps: float = 1e-5, dtype: DType = float32,
                   name: Optional[str] = None) -> KernelAST:
  """(x - mean) * 1/sqrt(var + eps) * gamma + beta, from x, the row mean and var, and gamma and beta (cols,)."""
  x, shape = ld("x", (rows, cols), dtype), (rows, cols)
  rstd = alu("RECIP", alu("SQRT", alu("ADD", _row("var", rows, cols, dtype), const(eps, shape, dtype))))
  y = alu("MUL", alu("MUL", alu("SUB", x, _row("mean", rows, cols, dtype)), rstd), ld("gamma", broadcast((cols,), shape), dtype))
  return kernel(alu("ADD", y, ld("beta", broadcast((cols,), shape), dtype)), name)

# ---------------------------------------------------------------- activations: x * sigmoid(a * f(x)), one kernel each

def _x_sigmoid(x: LazyOp, arg: LazyOp, shape: Shape, dtype: DType) -> LazyOp:
  """x * sigmoid(arg) as x / (1 + exp2(-arg * log2(e))): no cancellation where sigmoid is small."""
  e = alu("EXP2", alu("MUL", arg, const(-LOG2E, shape, dtype)))
  return alu("DIV", x, alu("ADD", const(1.0, shape, dtype), e))

def silu(shape: Shape = (2048, 3072), dtype: DType = float32, name: Optional[str] = None) -> KernelAST:
  """x * sigmoid(x)."""
  return elementwise(shape, [shape], lambda x: _x_sigmoid(x, x, shape, dtype), dtype, name)

def gelu(shape: Shape = (2048, 3072), dtype: DType = float32, name: Optional[str] = None) -> KernelAST:
  """GELU's tanh approximation, 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))), as x * sigmoid(2 sqrt(2/pi)(x + 0.044715x^3))."""
  def expr(x: LazyOp) -> LazyOp:
    inner = alu("ADD", x, alu("MUL", alu("MUL", alu("MUL", x, x), x), const(0.044715, shape, dtype)))
    return _x_sigmoid(x, alu("MUL", inner, const(2 * math.sqrt(2 / math.pi), shape, dtype)), shape, dtype)
  return elementwise(shape, [shape], expr, dtype, name)

# ---------------------------------------------------------------- symbolic shapes

def symbolic_sum(rows: int = 32, var: tuple[str, int, int] = ("start_pos", 1, 4096), fn: str = "SUM", dtype: DType = float32,
                 name: Optional[str] = None) -> KernelAST:
  """fn over each row of a contiguous (rows, v+1) input, v = Var(*var) (e.g. the keys seen so far): (rows, 1)."""
  return kernel(red(fn, ld("x", (rows, Var(*var) + 1), dtype), (1,)), name)


# ---- the example kernels: examples/kernels/*.json (written by examples/make_kernels.py), what `tunesvc demo` tunes
EXAMPLES = {
  "matmul_512": lambda name: matmul(512, 512, 512, name=name),
  "matmul_1024": lambda name: matmul(1024, 1024, 1024, name=name),
  "conv2d_3x3_pad": lambda name: conv2d(1, 64, 56, 56, 64, 3, 3, padding=1, name=name),
  "maxpool_2x2": lambda name: pool2d("max", 1, 64, 112, 112, k=2, name=name),
  "sum_rows_4096": lambda name: reduce("SUM", (4096, 4096), (1,), name=name),
  "sum_all": lambda name: reduce("SUM", (4096, 4096), (0, 1), name=name),
  "softmax_max": lambda name: softmax_max(4096, 1024, name=name),
  "softmax_exp_sum": lambda name: softmax_exp_sum(4096, 1024, name=name),
  "softmax_div": lambda name: softmax_div(4096, 1024, name=name),
  "elementwise_chain": lambda name: elementwise_chain((1024, 1024), 32, name=name),
  "mul_add_16m": lambda name: mul_add(1 << 24, name=name),
  "symbolic_sum": lambda name: symbolic_sum(32, ("start_pos", 1, 4096), name=name),
}

def examples() -> dict[str, KernelAST]: return {name: make(name) for name, make in EXAMPLES.items()}
