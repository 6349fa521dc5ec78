"""Symbolic integers: variables with inclusive bounds and the expressions built from them.

Every expression is kept simplified at construction, so a plain `int` comes back whenever the value
is known. `//` and `%` are *floor* division and modulo (Python semantics) throughout; the C
renderer emits cheaper C `/` `%` only where the numerator is provably non-negative.
Forms: a linear `Sum` of atoms with int coefficients, and the atoms `Var`, `Div` and `Mod` by a
positive constant, `Prod` (non-linear products), `Lt` (x < c, 0 or 1) and `And`.
"""
from __future__ import annotations
import functools, math
from typing import Mapping, Optional, Union, cast

sint = Union[int, "Node"]


class Node:
  __slots__ = ("min", "max", "_hash", "_key", "_str")
  min: int
  max: int
  _str: Optional[str]  # render's, kept

  def _init(self, lo: int, hi: int, key: tuple) -> None:
    self.min, self.max, self._key, self._hash, self._str = lo, hi, key, hash(key), None

  def __hash__(self) -> int: return self._hash
  def __eq__(self, o: object) -> bool: return isinstance(o, Node) and self._hash == o._hash and self._key == o._key
  def __repr__(self) -> str: return f"<{render(self)} [{self.min},{self.max}]>"
  def __bool__(self) -> bool: raise TypeError(f"truth value of symbolic {render(self)} is unknown")

  def __add__(self, o: sint) -> sint: return add(self, o)
  def __radd__(self, o: sint) -> sint: return add(o, self)
  def __sub__(self, o: sint) -> sint: return add(self, mul(o, -1))
  def __rsub__(self, o: sint) -> sint: return add(o, mul(self, -1))
  def __neg__(self) -> sint: return mul(self, -1)
  def __mul__(self, o: sint) -> sint: return mul(self, o)
  def __rmul__(self, o: sint) -> sint: return mul(o, self)
  def __floordiv__(self, o: sint) -> sint: return floordiv(self, o)
  def __rfloordiv__(self, o: sint) -> sint: return floordiv(o, self)
  def __mod__(self, o: sint) -> sint: return mod(self, o)
  def __rmod__(self, o: sint) -> sint: return mod(o, self)


class Var(Node):
  __slots__ = ("name",)
  def __init__(self, name: str, lo: int, hi: int):
    if lo > hi: raise ValueError(f"variable {name}: min {lo} > max {hi}")
    self.name = name
    self._init(lo, hi, ("V", name, lo, hi))


class Sum(Node):
  """const + sum(coef * atom); atoms distinct, sorted, none of them a Sum."""
  __slots__ = ("terms", "const")
  def __init__(self, terms: tuple[tuple[Node, int], ...], const: int):
    self.terms, self.const = terms, const
    lo = hi = const
    for a, c in terms:
      lo, hi = lo + min(c * a.min, c * a.max), hi + max(c * a.min, c * a.max)
    self._init(lo, hi, ("S", terms, const))


class Div(Node):
  __slots__ = ("x", "c")
  def __init__(self, x: Node, c: int):
    self.x, self.c = x, c
    self._init(x.min // c, x.max // c, ("D", x, c))


class Mod(Node):
  __slots__ = ("x", "c")
  def __init__(self, x: Node, c: int):
    self.x, self.c = x, c
    same_block = x.min // c == x.max // c
    self._init(x.min % c if same_block else 0, x.max % c if same_block else c - 1, ("M", x, c))


class Prod(Node):
  __slots__ = ("factors",)
  def __init__(self, factors: tuple[Node, ...]):
    self.factors = factors
    lo = hi = 1
    for f in factors:
      corners = (lo * f.min, lo * f.max, hi * f.min, hi * f.max)
      lo, hi = min(corners), max(corners)
    self._init(lo, hi, ("P", factors))


class Lt(Node):
  """x < c, as 0 or 1."""
  __slots__ = ("x", "c")
  def __init__(self, x: Node, c: int):
    self.x, self.c = x, c
    self._init(0, 1, ("L", x, c))


class And(Node):
  __slots__ = ("terms",)
  def __init__(self, terms: tuple[Node, ...]):
    self.terms = terms
    self._init(0, 1, ("A", terms))


def smin(x: sint) -> int: return x if isinstance(x, int) else x.min
def smax(x: sint) -> int: return x if isinstance(x, int) else x.max
def concrete(x: sint) -> int:
  """x where the caller's own checks make it an int, typed so; a symbolic x raises the TypeError comparing it would."""
  if isinstance(x, int): return x
  raise TypeError(f"{render(x)} is symbolic where an int is needed")

def _sort_key(n: Node) -> tuple: return (render(n), n.min, n.max)

def _linear(x: sint) -> tuple[dict[Node, int], int]:
  if isinstance(x, int): return {}, x
  if isinstance(x, Sum): return dict(x.terms), x.const
  return {x: 1}, 0

def _make_sum(terms: dict[Node, int], const: int) -> sint:
  terms = {a: c for a, c in terms.items() if c != 0}
  # c*k*(x//c) + k*(x%c) == k*x: undo the decode of an index into dims
  for m in [a for a in terms if isinstance(a, Mod)]:
    k, d = terms.get(m), floordiv(m.x, m.c)
    if k and isinstance(d, Node) and terms.get(d, 0) == k * m.c:
      del terms[m], terms[d]
      return add(_make_sum(terms, const), mul(m.x, k))
  # the same from the Div side: mod() reduces y's coefficients, so y%c may not look like Mod(y, c)
  for d in [a for a in terms if isinstance(a, Div) and terms[a] % a.c == 0]:
    k = terms[d] // d.c
    rt, rc = _linear(mod(d.x, d.c))
    if rt and all(terms.get(a) == k * v for a, v in rt.items()):
      for a in [d, *rt]: del terms[a]
      return add(_make_sum(terms, const - k * rc), mul(d.x, k))
  if not terms: return const
  if const == 0 and len(terms) == 1 and next(iter(terms.values())) == 1: return next(iter(terms))
  return Sum(tuple(sorted(terms.items(), key=lambda t: _sort_key(t[0]))), const)

# The four ops below are pure (an expression is its structure: equal ones simplify alike), and a kernel's lowering asks
# them the same questions again and again: each upcast lane's index decodes the same loop-variable terms through the same
# views, and every Sum made checks its Mod and Div atoms again. Remembered, sops_296's UPCAST 0 16, THREAD 0 2, UPCAST 1 16
# (256 lanes, 30 trackers of up to 4 views) lowered in 3.7 CPU-s, not 9.9 (lower.py's index caches in place either way;
# BUSY, one run each). typed: a numpy int is never taken for an int.
_cache = functools.lru_cache(maxsize=1 << 13, typed=True)

@_cache
def add(a: sint, b: sint) -> sint:
  if isinstance(a, int) and isinstance(b, int): return a + b
  ta, ca = _linear(a)
  tb, cb = _linear(b)
  for atom, c in tb.items(): ta[atom] = ta.get(atom, 0) + c
  return _make_sum(ta, ca + cb)

@_cache
def mul(a: sint, b: sint) -> sint:
  if isinstance(a, int) and isinstance(b, int): return a * b
  if isinstance(a, int): a, b = b, a
  if isinstance(b, int):
    if b == 0: return 0
    t, c = _linear(a)
    return _make_sum({atom: k * b for atom, k in t.items()}, c * b)
  tb, cb = _linear(b)
  if len(tb) > 1 or cb != 0:  # distribute over a sum so products stay atoms of one linear form
    return add(mul(a, cb), _sum_of(mul(a, atom) * k for atom, k in tb.items()))
  ta, ca = _linear(a)
  if len(ta) > 1 or ca != 0: return mul(b, a)
  (xa, ka), (xb, kb) = next(iter(ta.items())), next(iter(tb.items()))
  factors = (xa.factors if isinstance(xa, Prod) else (xa,)) + (xb.factors if isinstance(xb, Prod) else (xb,))
  return mul(Prod(tuple(sorted(factors, key=_sort_key))), ka * kb)

def _sum_of(xs) -> sint:
  out: sint = 0
  for x in xs: out = add(out, x)
  return out

def _const_divisor(c: sint, what: str) -> int:
  if not isinstance(c, int): raise ValueError(f"{what} by a symbolic value ({render(c)}) is not supported")
  if c == 0: raise ZeroDivisionError(f"{what} by zero")
  return c

@_cache
def floordiv(x: sint, c: sint) -> sint:
  c = _const_divisor(c, "division")
  if c < 0: return floordiv(mul(x, -1), -c)  # floor(x / -c) == floor(-x / c)
  if isinstance(x, int): return x // c
  if c == 1: return x
  if x.min // c == x.max // c: return x.min // c
  if isinstance(x, Div): return floordiv(x.x, x.c * c)
  if isinstance(x, Mod) and x.c % c == 0: return mod(floordiv(x.x, c), x.c // c)
  terms, const = _linear(x)
  if isinstance(x, Sum) or terms[x] != 1:
    # floor((c*k + y) / c) == k + floor(y / c) for integer k; a coefficient of size >= c goes to [0, c) as mod()
    # reduces it, so y//c and y%c keep one remainder form (c*(y//c) + y%c folds back to y)
    whole = {a: k // c for a, k in terms.items() if abs(k) >= c}
    rest = {a: k - c * whole.get(a, 0) for a, k in terms.items() if k % c != 0}
    if whole or const // c:
      return add(_make_sum(whole, const // c), floordiv(_make_sum(rest, const % c), c))
    g = math.gcd(c, const, *rest.values())
    if g > 1: return floordiv(_make_sum({a: k // g for a, k in rest.items()}, const // g), c // g)
    # floor((g*y + r) / c) == (y + q) // (c/g) for g | c and r in one block [g*q, g*q + g): r never carries (decodes 2*i+j)
    for g in sorted({math.gcd(k, c) for k in rest.values()} - {1}, reverse=True):
      small = _make_sum({a: k % g for a, k in rest.items()}, const)
      if (q := smin(small) // g) == smax(small) // g: return floordiv(_make_sum({a: k // g for a, k in rest.items()}, q), c // g)
    # floor((s + y//d) / c) == floor((d*s + y) / (d*c)): one form for a decode of a decode
    if (inner := next((a for a, k in rest.items() if k == 1 and isinstance(a, Div)), None)) is not None:
      return floordiv(add(_make_sum({a: k * inner.c for a, k in rest.items() if a != inner}, const * inner.c), inner.x), inner.c * c)
  return Div(x, c)

@_cache
def mod(x: sint, c: sint) -> sint:
  c = _const_divisor(c, "modulo")
  if c < 0: return add(x, mul(floordiv(x, c), -c))  # Python: x % c == x - c * (x // c)
  if isinstance(x, int): return x % c
  if c == 1: return 0
  if x.min // c == x.max // c: return add(x, -c * (x.min // c))
  if isinstance(x, Mod) and x.c % c == 0: return mod(x.x, c)
  terms, const = _linear(x)
  if isinstance(x, Sum) or terms[x] != 1:
    # x % c == x - c*(x//c) when x//c resolves to atoms x already has: the two stay one consistent pair
    if set(_linear(q := floordiv(x, c))[0]) <= set(terms): return add(x, mul(q, -c))
    reduced = {a: k % c for a, k in terms.items()}
    if reduced != terms or const != const % c: return mod(_make_sum(reduced, const % c), c)
    g = math.gcd(c, const, *terms.values())
    if g > 1: return mul(mod(_make_sum({a: k // g for a, k in terms.items()}, const // g), c // g), g)
    # (g*y + r) % c == g*((y + q) % (c/g)) + r - g*q for g | c and r in one block [g*q, g*q + g)
    for g in sorted({math.gcd(k, c) for k in terms.values()} - {1}, reverse=True):
      small = _make_sum({a: k % g for a, k in terms.items()}, const)
      if (q := smin(small) // g) == smax(small) // g:
        return add(mul(mod(_make_sum({a: k // g for a, k in terms.items()}, q), c // g), g), add(small, -g * q))
  return Mod(x, c)

def lt(x: sint, c: sint) -> sint:
  """x < c as 0/1."""
  if not isinstance(c, int): return lt(add(x, mul(c, -1)), 0)
  if isinstance(x, int): return int(x < c)
  if x.max < c: return 1
  if x.min >= c: return 0
  if isinstance(x, Div): return lt(x.x, c * x.c)  # floor(y/d) < c  <=>  y < c*d
  terms, const = _linear(x)
  if const: return lt(_make_sum(terms, 0), c - const)
  if isinstance(x, Sum):
    g = math.gcd(*terms.values())
    if g > 1: return lt(_make_sum({a: k // g for a, k in terms.items()}, 0), -(-c // g))  # g*y < c <=> y < ceil(c/g)
    # x < k*g <=> x//g < k, which pays when x//g drops the small terms
    for g in sorted({abs(k) for k in terms.values()}, reverse=True):
      if g > 1 and c % g == 0 and len(_linear(q := floordiv(x, g))[0]) < len(terms): return lt(q, c // g)
  return Lt(x, c)

def ge(x: sint, c: sint) -> sint: return lt(mul(x, -1), add(mul(c, -1), 1))

def land(*xs: sint) -> sint:
  flat: list[Node] = []
  for x in xs:
    if isinstance(x, int):
      if x == 0: return 0
      continue
    for t in (x.terms if isinstance(x, And) else (x,)):
      if t.max == 0: return 0
      if t.min == 0 and t not in flat: flat.append(t)
  # x < a and x < b  ->  x < min(a, b)
  tightest: dict[object, Node] = {}
  for t in flat:
    key = ("<", t.x) if isinstance(t, Lt) else t  # own key space: a 0/1 term v must not replace v < c
    if isinstance(t, Lt) and isinstance(prev := tightest.get(key), Lt) and prev.c <= t.c: continue
    tightest[key] = t
  terms = sorted(tightest.values(), key=_sort_key)
  if not terms: return 1
  return terms[0] if len(terms) == 1 else And(tuple(terms))


def substitute(x: sint, env: Mapping[str, sint]) -> sint:
  """Replace variables by name; the result is re-simplified."""
  if isinstance(x, int): return x
  memo: dict[Node, sint] = {}
  def go(n: Node) -> sint:
    if n in memo: return memo[n]
    if isinstance(n, Var): r = env.get(n.name, n)
    elif isinstance(n, Sum): r = _sum_of([n.const] + [mul(go(a), k) for a, k in n.terms])
    elif isinstance(n, Div): r = floordiv(go(n.x), n.c)
    elif isinstance(n, Mod): r = mod(go(n.x), n.c)
    elif isinstance(n, Prod):
      r = 1
      for f in n.factors: r = mul(r, go(f))
    elif isinstance(n, Lt): r = lt(go(n.x), n.c)
    else: r = land(*(go(t) for t in cast(And, n).terms))
    memo[n] = r
    return r
  return go(x)

def simplify_where(x: sint, valid: sint) -> sint:
  """x simplified where `valid` holds (anywhere else it may differ): its variables narrowed to the bounds valid's terms
  on one variable alone put on them (v < c, -v < c), x re-simplified, then the variables given their own bounds back.
  A padded axis's mask, say, bounds its index variable: a decode that only carries in the padding then drops out."""
  terms = valid.terms if isinstance(valid, And) else (valid,) if isinstance(valid, Lt) else ()
  own = {v.name: v for v in variables(x)}
  bounds = {n: (v.min, v.max) for n, v in own.items()}
  for t in terms:
    if not isinstance(t, Lt): continue
    v, k = (t.x, 1) if isinstance(t.x, Var) else (t.x.terms[0][0], t.x.terms[0][1]) if isinstance(t.x, Sum) and \
      len(t.x.terms) == 1 and t.x.const == 0 and isinstance(t.x.terms[0][0], Var) else (None, 0)
    if v is None or v.name not in bounds or k not in (1, -1): continue
    lo, hi = bounds[v.name]
    bounds[v.name] = (lo, min(hi, t.c - 1)) if k == 1 else (max(lo, 1 - t.c), hi)  # -v < c  <=>  v >= 1 - c
  narrow = {n: Var(n, lo, hi) for n, (lo, hi) in bounds.items() if (lo, hi) != (own[n].min, own[n].max) and lo <= hi}
  return substitute(substitute(x, narrow), own) if narrow else x

def simplify_valid(valid: sint) -> sint:
  """valid with each of its terms simplified where the others hold (in turn: a term is simplified under the terms
  already simplified and the ones still to come, never under itself)."""
  if not isinstance(valid, And): return valid
  terms, done = list(valid.terms), list[sint]()
  for i, t in enumerate(terms):
    if (s := simplify_where(t, land(*done, *terms[i + 1:]))) == 0: return 0
    done.append(s)
  return land(*done)

def evaluate(x: sint, env: Mapping[str, object]):
  """Value of x for variable values by name; values may be ints or numpy int arrays."""
  if isinstance(x, int): return x
  if isinstance(x, Var): return env[x.name]
  if isinstance(x, Sum):
    out = x.const
    for a, k in x.terms: out = out + evaluate(a, env) * k
    return out
  if isinstance(x, Div): return evaluate(x.x, env) // x.c
  if isinstance(x, Mod): return evaluate(x.x, env) % x.c
  if isinstance(x, Prod):
    out = 1
    for f in x.factors: out = out * evaluate(f, env)
    return out
  if isinstance(x, Lt): return (evaluate(x.x, env) < x.c) * 1
  out = 1
  for t in cast(And, x).terms: out = out * evaluate(t, env)
  return out

def variables(x: sint) -> set[Var]:
  if isinstance(x, int): return set()
  if isinstance(x, Var): return {x}
  if isinstance(x, Sum): return set().union(*(variables(a) for a, _ in x.terms))
  if isinstance(x, (Div, Mod, Lt)): return variables(x.x)
  return set().union(*(variables(t) for t in (x.factors if isinstance(x, Prod) else cast(And, x).terms)))


def render(x: sint, c: bool = False) -> str:
  """The canonical string form (parseable by `parse`), or with c=True a C expression."""
  if isinstance(x, int): return f"({x})" if x < 0 and c else str(x)
  if not c:
    if x._str is None: x._str = _render(x, False)
    return x._str
  return _render(x, True)

def _render(x: Node, c: bool) -> str:
  if isinstance(x, Var): return x.name
  if isinstance(x, Sum):
    parts = [render(a, c) if k == 1 else f"({render(a, c)}*{k})" for a, k in x.terms]
    s = "+".join(parts)
    return f"({s}{'+' if x.const > 0 else ''}{x.const if x.const else ''})"
  if isinstance(x, (Div, Mod)):
    n, op = render(x.x, c), ("/" if isinstance(x, Div) else "%") if c else ("//" if isinstance(x, Div) else "%")
    if not c or x.x.min >= 0: return f"({n}{op}{x.c})"
    fmod = f"((({n}%{x.c})+{x.c})%{x.c})"  # C truncates; rebuild floor semantics for negative numerators
    return fmod if isinstance(x, Mod) else f"(({n}-{fmod})/{x.c})"
  if isinstance(x, Prod): return "(" + "*".join(render(f, c) for f in x.factors) + ")"
  if isinstance(x, Lt): return f"({render(x.x, c)}<{x.c})"
  return "(" + "&&".join(render(t, c) for t in cast(And, x).terms) + ")"


class SymbolicParseError(ValueError): pass

MAX_EXPR_LEN, MAX_EXPR_DEPTH, MAX_LITERAL, MAX_EXPR_TERMS = 256, 32, 2**62, 64

def parse(text: str, variables: Mapping[str, Var]) -> sint:  # noqa: C901  (a tokenizer and a recursive-descent parser, one screen)
  """Parse the format's grammar: int literals, declared names, + - * // %, unary minus, parentheses."""
  if not isinstance(text, str): raise SymbolicParseError(f"expected a string, got {type(text).__name__}")
  if len(text) > MAX_EXPR_LEN: raise SymbolicParseError(f"expression longer than {MAX_EXPR_LEN} characters")
  tokens: list[int | str | tuple[str, str]] = []  # literals, ("name", name), operators and parentheses
  i = 0
  while i < len(text):
    ch = text[i]
    if ch.isspace(): i += 1
    elif ch.isascii() and ch.isdigit():
      j = i
      while j < len(text) and text[j].isascii() and text[j].isdigit(): j += 1
      if j - i > 19 or int(text[i:j]) > MAX_LITERAL: raise SymbolicParseError(f"literal {text[i:j][:24]} too large")
      tokens.append(int(text[i:j])); i = j
    elif ch.isascii() and (ch.isalpha() or ch == "_"):
      j = i
      while j < len(text) and text[j].isascii() and (text[j].isalnum() or text[j] == "_"): j += 1
      tokens.append(("name", text[i:j])); i = j
    elif text.startswith("//", i): tokens.append("//"); i += 2
    elif ch in "+-*%()": tokens.append(ch); i += 1
    else: raise SymbolicParseError(f"unexpected character {ch!r} at {i}")
  pos = 0

  def peek(): return tokens[pos] if pos < len(tokens) else None
  def take():
    nonlocal pos
    pos += 1
    return tokens[pos - 1]
  def expr(depth: int) -> sint:
    out = term(depth)
    while peek() in ("+", "-"):
      op, rhs = take(), term(depth)
      out = add(out, rhs) if op == "+" else add(out, mul(rhs, -1))
    return out
  def term(depth: int) -> sint:
    out = unary(depth)
    while peek() in ("*", "//", "%"):
      op, rhs = take(), unary(depth)
      # a product of sums multiplies out term by term: bound it, (a+b+c+d)*(a+b+c+d)*... took minutes
      if op == "*" and len(_linear(out)[0]) * len(_linear(rhs)[0]) > MAX_EXPR_TERMS:
        raise SymbolicParseError(f"product expands to more than {MAX_EXPR_TERMS} terms")
      try: out = mul(out, rhs) if op == "*" else floordiv(out, rhs) if op == "//" else mod(out, rhs)
      except (ValueError, ZeroDivisionError) as e: raise SymbolicParseError(str(e)) from None
    return out
  def unary(depth: int) -> sint:
    if depth > MAX_EXPR_DEPTH: raise SymbolicParseError(f"expression nested deeper than {MAX_EXPR_DEPTH}")
    tok = take() if peek() is not None else None
    if tok == "-": return mul(unary(depth + 1), -1)
    if tok == "(":
      out = expr(depth + 1)
      if peek() != ")": raise SymbolicParseError("missing ')'")
      take()
      return out
    if isinstance(tok, int): return tok
    if isinstance(tok, tuple):
      if tok[1] not in variables: raise SymbolicParseError(f"undeclared variable {tok[1]!r}")
      return variables[tok[1]]
    raise SymbolicParseError("unexpected end of expression" if tok is None else f"unexpected {tok!r}")

  if not tokens: raise SymbolicParseError("empty expression")
  out = expr(0)
  if pos != len(tokens): raise SymbolicParseError(f"unexpected {tokens[pos]!r} after expression")
  if abs(out.max if isinstance(out, Node) else out) > MAX_LITERAL or abs(smin(out)) > MAX_LITERAL:
    raise SymbolicParseError("value out of range")
  return out
