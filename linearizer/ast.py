"""The kernel AST (`tunesvc.kernel/1`): node types, validation, JSON form, canonical form and key.

A document is untrusted and becomes native code, so `load` checks everything (types, dtypes,
shapes, limits, and a proof that no index any view can reach leaves its buffer) and raises only
`KernelValidationError`, whose `path` names the offending JSON node.
"""
from __future__ import annotations
import hashlib, json, math, re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, NoReturn, Optional, Sequence, Union
import numpy as np
from linearizer.dtypes import DTYPES, DType, bool_
from linearizer import symbolic
from linearizer.symbolic import Node, Var, sint, smin, smax, render, substitute, concrete
from linearizer.shapetracker import ShapeTracker, View, prod

FORMAT = "tunesvc.kernel/1"
UNARY = ("NEG", "EXP2", "LOG2", "SIN", "SQRT", "RECIP")
BINARY = ("ADD", "SUB", "MUL", "DIV", "MAX", "MOD", "CMPLT", "CMPEQ", "XOR")
ALU = UNARY + BINARY + ("WHERE",)
OPS = ("STORE", "LOAD", "CONST", "CAST", "REDUCE") + ALU
ARITY = {"STORE": 1, "LOAD": 0, "CONST": 0, "CAST": 1, "REDUCE": 1, "WHERE": 3, **{o: 1 for o in UNARY}, **{o: 2 for o in BINARY}}
FLOAT_ONLY = ("EXP2", "LOG2", "SIN", "SQRT", "RECIP")
NO_BOOL = ("SUB", "DIV", "MOD")
INT_OR_BOOL = ("XOR",)
MAX_ABS = 2**40  # any stride, offset or mask bound beyond this cannot address a buffer within the limits
NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}\Z")  # a leading "_" is reserved: the bound proofs use fresh vars _p0, _c0_0, ...


@dataclass(frozen=True)
class Limits:
  nodes: int = 4096
  dims: int = 16
  elements: int = 2**31
  buffers: int = 64
  depth: int = 256  # nesting of the AST; JSON parsers and tree walks recurse


class KernelValidationError(ValueError):
  def __init__(self, path: str, message: str):
    super().__init__(f"{path}: {message}")
    self.path, self.message = path, message


@dataclass(frozen=True)
class MemArg:
  buf: int
  dtype: DType
  st: ShapeTracker

@dataclass(frozen=True, eq=False)
class ConstArg:
  val: Union[int, float, bool]
  dtype: DType
  st: ShapeTracker
  # floats compare by bits: NaN equals itself and -0.0 stays apart from 0.0
  def _k(self): return (self.val.hex() if isinstance(self.val, float) else self.val, self.dtype, self.st)
  def __eq__(self, o: object) -> bool: return isinstance(o, ConstArg) and self._k() == o._k()
  def __hash__(self) -> int: return hash(self._k())

@dataclass(frozen=True)
class CastArg:
  dtype: DType
  bitcast: bool = False

@dataclass(frozen=True)
class ReduceArg:
  fn: str
  axis: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class LazyOp:
  op: str
  src: tuple[LazyOp, ...] = ()
  arg: Any = None
  _hash: int = field(init=False, repr=False, compare=False)

  def __post_init__(self): object.__setattr__(self, "_hash", hash((self.op, self.src, self.arg)))
  def __hash__(self) -> int: return self._hash
  def __eq__(self, o: object) -> bool:
    return self is o or (isinstance(o, LazyOp) and self._hash == o._hash and (self.op, self.src, self.arg) == (o.op, o.src, o.arg))

  @cached_property
  def dtype(self) -> DType:
    if self.op in ("LOAD", "CONST", "STORE", "CAST"): return self.arg.dtype
    if self.op in ("CMPLT", "CMPEQ"): return bool_
    return self.src[1 if self.op == "WHERE" else 0].dtype

  @cached_property
  def shape(self) -> tuple[sint, ...]:
    if self.op in ("LOAD", "CONST", "STORE"): return self.arg.st.shape
    if self.op == "REDUCE": return tuple(1 if i in self.arg.axis else s for i, s in enumerate(self.src[0].shape))
    return self.src[0].shape

  def toposort(self) -> list[LazyOp]:
    """Distinct nodes, each after its sources."""
    out: dict[LazyOp, None] = {}
    def go(n: LazyOp):
      if n in out: return
      for s in n.src: go(s)
      out[n] = None
    go(self)
    return list(out)


@dataclass(frozen=True)
class BufferInfo:
  buf: int
  dtype: DType
  sts: tuple[ShapeTracker, ...]


@dataclass(frozen=True)
class KernelAST:
  ast: LazyOp
  vars: tuple[Var, ...] = ()
  name: Optional[str] = None

  @cached_property
  def nodes(self) -> list[LazyOp]: return self.ast.toposort()
  @cached_property
  def reduceop(self) -> Optional[LazyOp]: return next((n for n in self.nodes if n.op == "REDUCE"), None)
  @property
  def full_shape(self) -> tuple[sint, ...]: return (self.reduceop.src[0] if self.reduceop else self.ast).shape
  @property
  def output_shape(self) -> tuple[sint, ...]: return self.ast.shape

  @cached_property
  def buffers(self) -> list[BufferInfo]:
    by_buf: dict[int, list] = {}
    for n in self.nodes:
      if n.op in ("LOAD", "STORE"): by_buf.setdefault(n.arg.buf, [n.arg.dtype, []])[1].append(n.arg.st)
    return [BufferInfo(b, d, tuple(dict.fromkeys(sts))) for b, (d, sts) in sorted(by_buf.items())]

  def var_vals(self, var_vals: Optional[Mapping[str, int]] = None) -> dict[str, int]:
    """Checked variable values; None picks each variable's midpoint."""
    if var_vals is None: return {v.name: (v.min + v.max) // 2 for v in self.vars}
    names = {v.name for v in self.vars}
    if unknown := set(var_vals) - names: raise ValueError(f"unknown variables {sorted(unknown)}")
    for v in self.vars:
      if v.name not in var_vals: raise ValueError(f"no value for variable {v.name}")
      x = var_vals[v.name]
      if not isinstance(x, (int, np.integer)) or isinstance(x, bool) or not v.min <= x <= v.max:
        raise ValueError(f"variable {v.name}={x!r} outside [{v.min}, {v.max}]")
    return {k: int(x) for k, x in var_vals.items()}

  def buffer_windows(self, var_vals: Optional[Mapping[str, int]] = None) -> list[tuple[int, int]]:
    """Per buffer, the lowest and highest index any valid position reaches: at var_vals, or without
    them over all allowed values of the variables (what validation checked)."""
    out = []
    for b in self.buffers:
      bounds = [st.position_bounds()[0] for st in (b.sts if var_vals is None else [concrete_st(st, var_vals) for st in b.sts])]
      reached = [x for x in bounds if x is not None] or [(0, 0)]
      out.append((min(lo for lo, _ in reached), max(hi for _, hi in reached)))
    return out

  def buffer_sizes(self, var_vals: Optional[Mapping[str, int]] = None) -> list[int]:
    """Elements each buffer needs: largest reachable index + 1."""
    return [hi + 1 for _, hi in self.buffer_windows(var_vals)]

  def rebased(self) -> KernelAST:
    """The same computation with every buffer's indices shifted to start at 0, so a runner allocates
    only the window a kernel reaches (real kernels read 16M elements at offset 2.4G of a weights buffer)."""
    shift = {b.buf: lo for b, (lo, _) in zip(self.buffers, self.buffer_windows()) if lo > 0}
    if not shift: return self
    def move(n: LazyOp) -> LazyOp:
      src = tuple(move(s) for s in n.src)
      arg = n.arg
      if isinstance(arg, MemArg) and arg.buf in shift:
        v0 = arg.st.views[0]
        moved = View(v0.shape, v0.strides, symbolic.add(v0.offset, -shift[arg.buf]), v0.mask)
        arg = MemArg(arg.buf, arg.dtype, ShapeTracker((moved,) + arg.st.views[1:]))
      return LazyOp(n.op, src, arg)
    return KernelAST(move(self.ast), self.vars, self.name)

  def shape_at(self, shape: Sequence[sint], var_vals: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(concrete(substitute(s, var_vals)) for s in shape)

  def flops(self, var_vals: Optional[Mapping[str, int]] = None) -> int:
    """One per ALU op and per reduced element, at each position the op is evaluated."""
    vv = self.var_vals(var_vals)
    below = set(self.reduceop.src[0].toposort()) if self.reduceop else set()
    full, out = math.prod(self.shape_at(self.full_shape, vv)), math.prod(self.shape_at(self.output_shape, vv))
    return sum(full if n in below or n.op == "REDUCE" else out for n in self.nodes if n.op in ALU or n.op == "REDUCE")

  def bytes(self, var_vals: Optional[Mapping[str, int]] = None) -> int:
    return sum(s * b.dtype.itemsize for s, b in zip(self.buffer_sizes(self.var_vals(var_vals)), self.buffers))

  # JSON
  def to_json(self) -> dict:
    doc: dict = {"format": FORMAT}
    if self.name is not None: doc["name"] = self.name
    if self.vars: doc["vars"] = [{"name": v.name, "min": v.min, "max": v.max} for v in self.vars]
    doc["ast"] = _node_json(self.ast)
    return doc

  @cached_property
  def canonical(self) -> str:
    """Sorted keys, no whitespace, normalised views, shortest floats; `name` left out."""
    return json.dumps({"format": FORMAT, "vars": [{"name": v.name, "min": v.min, "max": v.max} for v in self.vars],
                       "ast": _node_json(self.ast)}, sort_keys=True, separators=(",", ":"), allow_nan=False)

  @cached_property
  def key(self) -> str: return hashlib.sha256(self.canonical.encode()).hexdigest()


def _sym_json(x: sint): return x if isinstance(x, int) else render(x)

def _st_json(st: ShapeTracker) -> dict:
  return {"views": [{"shape": [_sym_json(s) for s in v.shape], "strides": [_sym_json(s) for s in v.strides],
                     "offset": _sym_json(v.offset), "mask": None if v.mask is None else [[_sym_json(a), _sym_json(b)] for a, b in v.mask]}
                    for v in st.views]}

def _const_json(val, dtype: DType):
  if dtype.is_float and not math.isfinite(val): return "nan" if math.isnan(val) else "inf" if val > 0 else "-inf"
  return val

def _node_json(n: LazyOp) -> dict:
  out: dict = {"op": n.op}
  if n.src: out["src"] = [_node_json(s) for s in n.src]
  a = n.arg
  if isinstance(a, MemArg): out["arg"] = {"buf": a.buf, "dtype": a.dtype.name, "st": _st_json(a.st)}
  elif isinstance(a, ConstArg): out["arg"] = {"val": _const_json(a.val, a.dtype), "dtype": a.dtype.name, "st": _st_json(a.st)}
  elif isinstance(a, CastArg): out["arg"] = {"dtype": a.dtype.name, "bitcast": a.bitcast}
  elif isinstance(a, ReduceArg): out["arg"] = {"fn": a.fn, "axis": list(a.axis)}
  return out


def concrete_st(st: ShapeTracker, var_vals: Mapping[str, int]) -> ShapeTracker:
  """The tracker with the variables bound to values."""
  sub = lambda x: substitute(x, var_vals)
  return ShapeTracker(tuple(View.create([sub(s) for s in v.shape], [sub(s) for s in v.strides], sub(v.offset),
                                        None if v.mask is None else [(sub(a), sub(b)) for a, b in v.mask]) for v in st.views))



# ---------------------------------------------------------------- loading and validation

def loads(text: Union[str, bytes], limits: Limits = Limits()) -> KernelAST:
  """Parse and validate one JSON document."""
  def no_constants(name: str): raise KernelValidationError("$", f"{name} is not JSON")
  try: doc = json.loads(text, parse_constant=no_constants)
  except KernelValidationError: raise
  except RecursionError: raise KernelValidationError("$", "JSON nested too deeply") from None
  except (ValueError, UnicodeDecodeError) as e: raise KernelValidationError("$", f"not valid JSON: {e}") from None
  return load(doc, limits)

def load(doc: Any, limits: Limits = Limits()) -> KernelAST:
  """Validate a parsed document and build the AST. Raises only KernelValidationError."""
  try: return _Loader(limits).document(doc)
  except KernelValidationError: raise
  except RecursionError: raise KernelValidationError("$", "document nested too deeply") from None


def _tname(x: Any) -> str:
  names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null", int: "integer", float: "number"}
  return names.get(type(x), type(x).__name__)

def _is_int(x: Any) -> bool: return isinstance(x, int) and not isinstance(x, bool)

def _brief(x: Any) -> str:
  """At most 40 characters of a scalar for a message; str() of a 5000-digit int raises and of a deep array recurses."""
  if isinstance(x, (str, float, bool, type(None))) or (_is_int(x) and abs(x) < 10**40): return str(x)[:40]
  return f"<{_tname(x)}>"


class _Loader:
  def __init__(self, limits: Limits):
    self.limits, self.nodes = limits, 0
    self.vars: dict[str, Var] = {}
    self.interned: dict[LazyOp, LazyOp] = {}
    self.reduce: Optional[tuple[LazyOp, str]] = None
    self.bufs: dict[int, tuple[DType, str]] = {}
    self.var_symbols: dict[str, Var] = {}
    self.spans: dict[int, tuple[int, int, str]] = {}

  def fail(self, path: str, msg: str) -> NoReturn: raise KernelValidationError(path, msg)

  def obj(self, x: Any, path: str, required: Sequence[str], optional: Sequence[str] = ()) -> dict:
    if not isinstance(x, dict): self.fail(path, f"expected an object, got {_tname(x)}")
    for k in x:
      if k not in required and k not in optional: self.fail(path, f"unknown key {_brief(k)!r}")
    for k in required:
      if k not in x: self.fail(path, f"missing key {k!r}")
    return x

  def int_(self, x: Any, path: str, lo: int, hi: int) -> int:
    if not _is_int(x): self.fail(path, f"expected an integer, got {_tname(x)}")
    if not lo <= x <= hi: self.fail(path, f"{x if abs(x) < 10**12 else 'value'} outside [{lo}, {hi}]")
    return x

  def dtype(self, x: Any, path: str) -> DType:
    if not isinstance(x, str) or x not in DTYPES: self.fail(path, f"unknown dtype {_brief(x)!r}")
    return DTYPES[x]

  def document(self, doc: Any) -> KernelAST:
    self.obj(doc, "$", ("format", "ast"), ("name", "vars"))
    if doc["format"] != FORMAT: self.fail("format", f"expected {FORMAT!r}, got {_brief(doc['format'])!r}")
    name = doc.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 256):
      self.fail("name", "expected a string of at most 256 characters")
    vars_ = doc.get("vars", [])
    if not isinstance(vars_, list): self.fail("vars", f"expected an array, got {_tname(vars_)}")
    if len(vars_) > 16: self.fail("vars", "more than 16 variables")
    for i, v in enumerate(vars_):
      p = f"vars[{i}]"
      self.obj(v, p, ("name", "min", "max"))
      if not isinstance(v["name"], str) or not NAME_RE.match(v["name"]): self.fail(f"{p}.name", "expected an identifier not starting with '_'")
      if v["name"] in self.var_symbols: self.fail(f"{p}.name", f"variable {v['name']!r} declared twice")
      lo, hi = self.int_(v["min"], f"{p}.min", -2**31, 2**31 - 1), self.int_(v["max"], f"{p}.max", -2**31, 2**31 - 1)
      if lo > hi: self.fail(p, f"min {lo} > max {hi}")
      self.var_symbols[v["name"]] = Var(v["name"], lo, hi)
    root = self.node(doc["ast"], "ast", 0)
    if root.op != "STORE": self.fail("ast", f"the root must be a STORE, got {root.op}")
    nbuf = len(self.bufs)
    if nbuf > self.limits.buffers: self.fail("ast", f"{nbuf} buffers, more than the limit of {self.limits.buffers}")
    for b in range(nbuf):
      if b not in self.bufs: self.fail("ast", f"buffers must be numbered densely from 0: buffer {b} is missing")
    return KernelAST(root, tuple(sorted(self.var_symbols.values(), key=lambda v: v.name)), name)

  def node(self, x: Any, path: str, depth: int) -> LazyOp:
    if depth > self.limits.depth: self.fail(path, f"nested deeper than {self.limits.depth}")
    self.nodes += 1
    if self.nodes > self.limits.nodes: self.fail(path, f"more than {self.limits.nodes} nodes")
    self.obj(x, path, ("op",), ("src", "arg"))
    op = x["op"]
    if not isinstance(op, str) or op not in OPS: self.fail(f"{path}.op", f"unknown op {_brief(op)!r}")
    if op == "STORE" and depth != 0: self.fail(path, "STORE may only be the root")
    srcs = x.get("src", [])
    if not isinstance(srcs, list): self.fail(f"{path}.src", f"expected an array, got {_tname(srcs)}")
    if len(srcs) != ARITY[op]: self.fail(f"{path}.src", f"{op} takes {ARITY[op]} sources, got {len(srcs)}")
    src = tuple(self.node(s, f"{path}.src[{i}]", depth + 1) for i, s in enumerate(srcs))
    arg = self.arg(op, x.get("arg"), f"{path}.arg", src)
    n = LazyOp(op, src, arg)
    self.check(n, path)
    return self.interned.setdefault(n, n)

  def arg(self, op: str, a: Any, path: str, src: tuple[LazyOp, ...]) -> Any:
    if op in ("STORE", "LOAD"):
      self.obj(a, path, ("buf", "dtype", "st"))
      buf = self.int_(a["buf"], f"{path}.buf", 0, 0 if op == "STORE" else self.limits.buffers - 1)
      if op == "LOAD" and buf == 0: self.fail(f"{path}.buf", "buffer 0 is the output and cannot be loaded")
      dt = self.dtype(a["dtype"], f"{path}.dtype")
      if buf in self.bufs and self.bufs[buf][0] != dt:
        self.fail(f"{path}.dtype", f"buffer {buf} is {self.bufs[buf][0].name} at {self.bufs[buf][1]}, {dt.name} here")
      self.bufs.setdefault(buf, (dt, path))
      return MemArg(buf, dt, self.st(a["st"], f"{path}.st", buf))
    if op == "CONST":
      self.obj(a, path, ("val", "dtype", "st"))
      dt = self.dtype(a["dtype"], f"{path}.dtype")
      return ConstArg(self.const(a["val"], dt, f"{path}.val"), dt, self.st(a["st"], f"{path}.st", None))
    if op == "CAST":
      self.obj(a, path, ("dtype",), ("bitcast",))
      bitcast = a.get("bitcast", False)
      if not isinstance(bitcast, bool): self.fail(f"{path}.bitcast", f"expected a boolean, got {_tname(bitcast)}")
      return CastArg(self.dtype(a["dtype"], f"{path}.dtype"), bitcast)
    if op == "REDUCE":
      self.obj(a, path, ("fn", "axis"))
      if a["fn"] not in ("SUM", "MAX"): self.fail(f"{path}.fn", f"expected SUM or MAX, got {_brief(a['fn'])!r}")
      axes = a["axis"]
      if not isinstance(axes, list) or not axes: self.fail(f"{path}.axis", "expected a non-empty array of axes")
      ndim = len(src[0].shape)
      for i, ax in enumerate(axes): self.int_(ax, f"{path}.axis[{i}]", 0, ndim - 1)
      if len(set(axes)) != len(axes): self.fail(f"{path}.axis", "repeated axis")
      return ReduceArg(a["fn"], tuple(sorted(axes)))
    if a is not None: self.fail(path, f"{op} takes no arg")
    return None

  def const(self, v: Any, dt: DType, path: str) -> Union[int, float, bool]:
    if dt.kind == "b":
      if isinstance(v, bool) or (_is_int(v) and v in (0, 1)): return bool(v)
      self.fail(path, f"expected a boolean for bool, got {_brief(v)}")
    if isinstance(v, str):
      if not dt.is_float or v not in ("inf", "-inf", "nan"): self.fail(path, f"expected a number, got {v[:40]!r}")
      return float(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)): self.fail(path, f"expected a number, got {_tname(v)}")
    if dt.is_float:
      try: v = float(v)
      except OverflowError: v = math.inf if v > 0 else -math.inf  # an int past the float range rounds to inf, as 1e400 does
      with np.errstate(over="ignore"): return float(np.array(v, dtype=np.float64).astype(dt.np).astype(np.float64))
    if isinstance(v, float) and not v.is_integer(): self.fail(path, f"{v} is not an integer for {dt.name}")
    v = int(v)
    if not -2**63 <= v < 2**64: self.fail(path, "integer constant outside the 64-bit range")
    bits = dt.itemsize * 8
    v %= 2**bits  # wrap like a C cast
    return v - 2**bits if dt.kind == "i" and v >= 2**(bits - 1) else v

  def sym(self, x: Any, path: str) -> sint:
    if _is_int(x):
      if abs(x) > MAX_ABS: self.fail(path, f"{x if abs(x) < 10**30 else 'value'} exceeds {MAX_ABS} in magnitude")
      return x
    if isinstance(x, str):
      try: v = symbolic.parse(x, self.var_symbols)
      except symbolic.SymbolicParseError as e: self.fail(path, f"bad symbolic int {x[:60]!r}: {e}")
      if max(abs(smin(v)), abs(smax(v))) > MAX_ABS: self.fail(path, f"{x[:60]!r} exceeds {MAX_ABS} in magnitude")
      return v
    self.fail(path, f"expected an integer or a symbolic string, got {_tname(x)}")

  def st(self, x: Any, path: str, buf: Optional[int]) -> ShapeTracker:  # noqa: C901  (one flat check per field of a view, in order)
    self.obj(x, path, ("views",))
    vs = x["views"]
    if not isinstance(vs, list) or not vs: self.fail(f"{path}.views", "expected a non-empty array of views")
    if len(vs) > 16: self.fail(f"{path}.views", "more than 16 views")
    views = []
    for i, v in enumerate(vs):
      p = f"{path}.views[{i}]"
      self.obj(v, p, ("shape", "strides"), ("offset", "mask"))
      shape, strides, mask = v["shape"], v["strides"], v.get("mask")
      if not isinstance(shape, list): self.fail(f"{p}.shape", f"expected an array, got {_tname(shape)}")
      if len(shape) > self.limits.dims: self.fail(f"{p}.shape", f"{len(shape)} dims, more than the limit of {self.limits.dims}")
      if not isinstance(strides, list) or len(strides) != len(shape):
        self.fail(f"{p}.strides", f"expected an array of {len(shape)} strides")
      shp = [self.sym(s, f"{p}.shape[{k}]") for k, s in enumerate(shape)]
      for k, s in enumerate(shp):
        if smin(s) < 1: self.fail(f"{p}.shape[{k}]", f"dim {render(s)} may be less than 1")
        if smax(s) > self.limits.elements: self.fail(f"{p}.shape[{k}]", f"dim {render(s)} exceeds {self.limits.elements}")
        if isinstance(s, Node) and i != len(vs) - 1: self.fail(f"{p}.shape[{k}]", "symbolic dims are only supported in the last view")
      strd = [self.sym(s, f"{p}.strides[{k}]") for k, s in enumerate(strides)]
      offset = self.sym(v.get("offset", 0), f"{p}.offset")
      msk = None
      if mask is not None:
        if not isinstance(mask, list) or len(mask) != len(shape): self.fail(f"{p}.mask", f"expected null or {len(shape)} [lo, hi] pairs")
        msk = []
        for k, m in enumerate(mask):
          if not isinstance(m, list) or len(m) != 2: self.fail(f"{p}.mask[{k}]", "expected a [lo, hi] pair")
          lo, hi = self.sym(m[0], f"{p}.mask[{k}][0]"), self.sym(m[1], f"{p}.mask[{k}][1]")
          # a symbolic end may overhang the dim at some values (real kernels: [0, start_pos+1) on 128): it is clipped
          end = shp[k]
          overhang = isinstance(lo, int) and isinstance(hi, int) and isinstance(end, int) and hi > end
          if smin(lo) < 0 or smax(symbolic.add(lo, symbolic.mul(hi, -1))) > 0 or overhang:
            self.fail(f"{p}.mask[{k}]", f"[{render(lo)}, {render(hi)}) is not within [0, {render(shp[k])}] with lo <= hi")
          msk.append((lo, hi))
      views.append(View.create(shp, strd, offset, msk))
    st = ShapeTracker(tuple(views))
    bounds = st.position_bounds()
    for i in range(1, len(views)):  # each view's positions must land inside the view below it
      below, b = concrete(prod(views[i - 1].shape)), bounds[i]  # only the last view may have symbolic dims (checked above)
      if b is not None and (b[0] < 0 or b[1] >= below):
        self.fail(f"{path}.views[{i}]", f"reaches positions [{b[0]}, {b[1]}] outside the {below} elements of view {i - 1}")
    if buf is not None and bounds[0] is not None:
      lo, hi = bounds[0]
      if lo < 0: self.fail(f"{path}.views[0]", f"may reach index {lo} of buffer {buf}: indices must be >= 0")
      lo0, hi0, where = self.spans.get(buf, (lo, hi, path))
      lo, hi = min(lo, lo0), max(hi, hi0)
      if hi - lo + 1 > self.limits.elements:
        self.fail(f"{path}.views[0]", f"buffer {buf} is reached over indices [{lo}, {hi}], more than the limit of {self.limits.elements} elements")
      self.spans[buf] = (lo, hi, where)
    return st

  def check(self, n: LazyOp, path: str) -> None:
    op, src = n.op, n.src
    ndims = {len(s.shape) for s in src} | ({len(n.arg.st.shape)} if isinstance(n.arg, (MemArg, ConstArg)) else set())
    if len(ndims) > 1: self.fail(path, f"sources have different numbers of dims {sorted(ndims)}")
    if op in ALU or op == "CAST":
      dts = [s.dtype for s in src]
      if op == "WHERE":
        if dts[0] != bool_: self.fail(f"{path}.src[0]", f"WHERE's condition must be bool, got {dts[0].name}")
        dts = dts[1:]
      if len(set(dts)) > 1: self.fail(path, f"{op} needs equal dtypes, got {', '.join(d.name for d in dts)}")
      if op in FLOAT_ONLY and not dts[0].is_float: self.fail(path, f"{op} needs a float dtype, got {dts[0].name}")
      if op in NO_BOOL and dts[0] == bool_: self.fail(path, f"{op} is not defined on bool")
      if op in INT_OR_BOOL and dts[0].is_float: self.fail(path, f"{op} is not defined on {dts[0].name}")
      if op == "CAST" and n.arg.bitcast and (n.arg.dtype.itemsize != dts[0].itemsize or bool_ in (n.arg.dtype, dts[0])):
        self.fail(f"{path}.arg", f"bitcast from {dts[0].name} to {n.arg.dtype.name} needs equal sizes and no bool")
      shapes = [s.shape for s in src]
      if any(s != shapes[0] for s in shapes): self.fail(path, f"{op} needs equal shapes, got {' vs '.join(_shape_str(s) for s in shapes)}")
    if op == "REDUCE":
      if self.reduce is not None and self.reduce[0] != n:
        self.fail(path, f"a second REDUCE (the first is at {self.reduce[1]}); a kernel has at most one")
      if self.reduce is None: self.reduce = (n, path)
      if src[0].dtype == bool_: self.fail(path, "REDUCE is not defined on bool")
    if op == "STORE":
      if src[0].dtype != n.arg.dtype: self.fail(f"{path}.arg.dtype", f"STORE of {src[0].dtype.name} into a {n.arg.dtype.name} buffer")
      if src[0].shape != n.arg.st.shape:
        self.fail(f"{path}.arg.st", f"STORE shape {_shape_str(n.arg.st.shape)} differs from its source's {_shape_str(src[0].shape)}")
      if len(n.arg.st.views) != 1: self.fail(f"{path}.arg.st", "a STORE writes through exactly one view")
      if not injective(n.arg.st.views[0]): self.fail(f"{path}.arg.st", "two positions of the STORE write the same element")

def _shape_str(shape: Sequence[sint]) -> str: return "(" + ", ".join(render(s) for s in shape) + ")"

def injective(v: View) -> bool:
  """No two valid positions of the (single) view reach the same index: taken by increasing stride,
  each stride steps past all that the smaller ones can span over their masked-in extents."""
  dims = []
  for k, (s, st) in enumerate(zip(v.shape, v.strides)):
    ext = s if v.mask is None else symbolic.add(v.mask[k][1], symbolic.mul(v.mask[k][0], -1))
    if smax(ext) <= 1: continue
    if smax(st) <= 0: st = symbolic.mul(st, -1)
    if smin(st) < 0: return False  # sign unknown: nothing to prove with
    dims.append((smin(st), smax(st), st, ext))
  span: sint = 0
  for _, _, st, ext in sorted(dims, key=lambda t: t[:2]):
    if smin(symbolic.add(st, symbolic.mul(span, -1))) < 1: return False
    span = symbolic.add(span, symbolic.mul(st, symbolic.add(ext, -1)))
  return True
