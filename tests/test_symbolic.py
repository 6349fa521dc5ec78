"""Property and unit tests for linearizer.symbolic: simplified expressions must keep Python's floor
semantics exactly, bounds must contain every value, and the parser must accept only the format's grammar."""
import functools
import os
import random
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from linearizer import symbolic
from linearizer.symbolic import (And, Div, Lt, Mod, Node, Prod, Sum, SymbolicParseError, Var, evaluate, ge, land, lt,
                                 parse, render, smax, smin, substitute, variables)
from conftest import own_clock

NAMES = "abc"


# ---- expression trees: ("const", k) ("var", name) ("add"|"sub"|"mul", l, r) ("neg", t) ("mulc"|"div"|"mod", t, k)

def fold(t, leaves):
  """The tree with each variable taken from `leaves`: symbolic Vars build the simplified expression,
  Python ints or numpy arrays evaluate it directly (floor // and %, like Python)."""
  op = t[0]
  if op == "const": return t[1]
  if op == "var": return leaves[t[1]]
  if op == "neg": return -fold(t[1], leaves)
  if op in ("add", "sub", "mul"):
    l, r = fold(t[1], leaves), fold(t[2], leaves)
    return l + r if op == "add" else l - r if op == "sub" else l * r
  x = fold(t[1], leaves)
  return x * t[2] if op == "mulc" else x // t[2] if op == "div" else x % t[2]

def magnitude(t, bounds):
  """A crude bound on |value| of every intermediate, to pick int64 or exact object arrays."""
  op = t[0]
  if op == "const": return abs(t[1])
  if op == "var": return max(abs(b) for b in bounds[t[1]])
  if op == "neg": return magnitude(t[1], bounds)
  if op in ("add", "sub"): return magnitude(t[1], bounds) + magnitude(t[2], bounds)
  if op == "mul": return magnitude(t[1], bounds) * magnitude(t[2], bounds)
  m = magnitude(t[1], bounds)
  return m * abs(t[2]) if op == "mulc" else m + 1 if op == "div" else m + abs(t[2])

def tree_vars(t):
  if t[0] == "var": return {t[1]}
  if t[0] == "const": return set()
  return set().union(*(tree_vars(s) for s in t[1:] if isinstance(s, tuple)))

def grid(bounds, dtype=np.int64):
  """Every combination of variable values, as flat arrays by name."""
  names = sorted(bounds)
  axes = np.meshgrid(*(np.arange(lo, hi + 1) for lo, hi in (bounds[n] for n in names)), indexing="ij")
  return {n: a.reshape(-1).astype(dtype) for n, a in zip(names, axes)}

def values(x, env):
  n = len(next(iter(env.values())))
  return np.broadcast_to(np.asarray(evaluate(x, env)), (n,))

def subnodes(x):
  """x and every node inside it."""
  if isinstance(x, int): return
  yield x
  kids = ([a for a, _ in x.terms] if isinstance(x, Sum) else x.factors if isinstance(x, Prod) else
          x.terms if isinstance(x, And) else [x.x] if isinstance(x, (Div, Mod, Lt)) else [])
  for k in kids: yield from subnodes(k)

def assert_bounds_contain(x, env):
  """Every node's [min, max] must contain all of its values; the simplifier and the C renderer rely on it."""
  for n in subnodes(x):
    v = values(n, env)
    assert n.min <= v.min() and v.max() <= n.max, f"{n!r} takes values in [{v.min()}, {v.max()}]"


@st.composite
def var_bounds(draw):
  out = {}
  for name in NAMES[:draw(st.integers(1, 3))]:
    lo = draw(st.one_of(st.integers(-16, 16), st.just(0)))
    # wide ranges, and narrow index-like ones that let the decode rules (small terms never carry) fire
    out[name] = (lo, lo + draw(st.one_of(st.integers(0, 20), st.integers(5, 20), st.integers(1, 3))))
  return out

divisors = st.one_of(st.integers(1, 8), st.integers(-8, -1), st.sampled_from([12, 16, 30, -12]))

@functools.cache
def _trees(names):
  var = st.tuples(st.just("var"), st.sampled_from(names))
  leaf = st.one_of(var, st.tuples(st.just("const"), st.integers(-20, 20)), var)  # mostly variables
  def extend(t):
    return st.one_of(st.tuples(st.just("add"), t, t), st.tuples(st.just("sub"), t, t), st.tuples(st.just("neg"), t),
                     st.tuples(st.just("mulc"), t, st.integers(-6, 6)), st.tuples(st.just("mul"), t, t),
                     st.tuples(st.just("div"), t, divisors), st.tuples(st.just("mod"), t, divisors))
  return st.recursive(leaf, extend, max_leaves=10)

def trees(names): return _trees(tuple(names))  # built once per name set: building is slow

@st.composite
def cases(draw):
  """(variable bounds, expression tree, exhaustive grid of variable values)."""
  bounds = draw(var_bounds())
  t = draw(trees(sorted(bounds)))
  env = grid(bounds, np.int64 if magnitude(t, bounds) < 2**50 else object)
  return bounds, t, env

def declare(bounds): return {n: Var(n, lo, hi) for n, (lo, hi) in bounds.items()}

def expected_values(t, env):
  n = len(next(iter(env.values())))
  return np.broadcast_to(np.asarray(fold(t, env)), (n,))


# ---- arithmetic

@given(cases(), st.randoms(use_true_random=False))
def test_simplified_expression_evaluates_like_python_ints_and_stays_in_bounds(case, rnd):
  bounds, t, env = case
  x, want = fold(t, declare(bounds)), expected_values(t, env)
  assert np.array_equal(values(x, env), want)
  assert_bounds_contain(x, env)
  if not tree_vars(t): assert isinstance(x, int)
  # scalar Python ints too (evaluate must not depend on numpy's semantics)
  for _ in range(3):
    point = {n: rnd.randint(lo, hi) for n, (lo, hi) in bounds.items()}
    assert evaluate(x, point) == fold(t, point)

@given(cases(), st.data())
def test_substitute_partial_full_and_narrowed_agree_with_direct_evaluation(case, data):
  bounds, t, env = case
  x, want = fold(t, declare(bounds)), expected_values(t, env)
  name = data.draw(st.sampled_from(sorted(bounds)))
  lo, hi = bounds[name]
  # partial: one variable becomes an int, the others stay symbolic
  val = data.draw(st.integers(lo, hi))
  part = substitute(x, {name: val})
  assert name not in {v.name for v in variables(part)}
  sel = env[name] == val
  assert np.array_equal(values(part, env)[sel], want[sel])
  # a narrower range for one variable: re-simplified with tighter bounds, same values on that range
  nlo = data.draw(st.integers(lo, hi))
  nhi = data.draw(st.integers(nlo, hi))
  narrowed = substitute(x, {name: Var(name, nlo, nhi)})
  sel = (env[name] >= nlo) & (env[name] <= nhi)
  assert np.array_equal(values(narrowed, env)[sel], want[sel])
  # full: every variable an int gives back a plain int
  for i in data.draw(st.lists(st.integers(0, len(want) - 1), min_size=1, max_size=4)):
    point = {n: int(a[i]) for n, a in env.items()}
    full = substitute(x, point)
    assert isinstance(full, int) and full == want[i]

@given(cases())
def test_parse_of_render_gives_back_the_same_expression(case):
  bounds, t, env = case
  V = declare(bounds)
  x = fold(t, V)
  text = render(x)
  if len(text) > symbolic.MAX_EXPR_LEN: return  # too long for the parser, checked by the parser tests
  y = parse(text, V)
  assert np.array_equal(values(y, env), values(x, env))
  assert y == x, f"{text!r} parses to {render(y)!r}"
  assert render(y) == text


@given(cases(), st.integers(-40, 40), st.integers(-40, 40), st.data())
def test_comparisons_and_conjunctions_evaluate_like_python_booleans(case, c1, c2, data):
  bounds, t, env = case
  V = declare(bounds)
  x, want = fold(t, V), expected_values(t, env)
  # a second expression over (a subset of) the same variables
  t2 = data.draw(trees(sorted(bounds)))
  y, want2 = fold(t2, V), expected_values(t2, env)
  checks = {
    "x<c1": (lt(x, c1), want < c1), "x>=c1": (ge(x, c1), want >= c1), "x<y": (lt(x, y), want < want2),
    "x>=y": (ge(x, y), want >= want2), "x<c1&x<c2": (land(lt(x, c1), lt(x, c2)), (want < c1) & (want < c2)),
    "c2<=x<c1": (land(ge(x, c2), lt(x, c1)), (want >= c2) & (want < c1)),
    "x<c1&y>=c2": (land(lt(x, c1), ge(y, c2)), (want < c1) & (want2 >= c2)),
    "nested": (land(land(lt(x, c1), ge(y, c2)), land(lt(y, c1), 1)), (want < c1) & (want2 >= c2) & (want2 < c1)),
  }
  for what, (node, truth) in checks.items():
    got = values(node, env)
    assert np.array_equal(got, truth.astype(np.int64)), f"{what}: {node!r}"
    assert_bounds_contain(node, env)
  assert land() == 1 and land(0, lt(x, c1)) == 0 and land(1, 1) == 1

@given(var_bounds(), st.lists(st.tuples(st.sampled_from(["lt", "ge", "bit", "not bit"]), st.sampled_from(NAMES),
                                        st.integers(-14, 14)), min_size=1, max_size=5))
def test_land_of_bounds_and_boolean_variables_evaluates_like_python_and(bounds, parts):
  """land over 0/1 terms: comparisons of variables, and 0/1-valued variables and their negations."""
  V = declare(bounds)
  bits = {n: Var(n + "_bit", 0, 1) for n in bounds}
  env = grid({**bounds, **{b.name: (0, 1) for b in bits.values()}})
  terms, truth = [], np.ones(len(env[NAMES[0]]), dtype=bool)
  for kind, name, c in parts:
    name = name if name in V else NAMES[0]
    if kind == "lt": terms.append(lt(V[name], c)); truth &= env[name] < c
    elif kind == "ge": terms.append(ge(V[name], c)); truth &= env[name] >= c
    elif kind == "bit": terms.append(bits[name]); truth &= env[name + "_bit"] == 1
    else: terms.append(lt(bits[name], 1)); truth &= env[name + "_bit"] == 0
  assert np.array_equal(values(land(*terms), env), truth.astype(np.int64))


@given(cases(), st.data())
def test_simplified_where_valid_holds_keeps_every_value_there(case, data):
  """simplify_where: x's values wherever the validity holds; simplify_valid: the same validity everywhere. A validity
  of bounds on single variables (what masks give) and a comparison of another expression."""
  bounds, t, env = case
  V = declare(bounds)
  x, want = fold(t, V), expected_values(t, env)
  y = fold(data.draw(trees(sorted(bounds))), V)
  parts = data.draw(st.lists(st.tuples(st.booleans(), st.sampled_from(sorted(bounds)), st.integers(-16, 40)), max_size=4))
  valid = land(*(lt(V[n], c) if below else ge(V[n], c) for below, n, c in parts), lt(y, data.draw(st.integers(-40, 40))))
  holds = values(valid, env) == 1
  assert np.array_equal(values(symbolic.simplify_where(x, valid), env)[holds], want[holds])
  assert np.array_equal(values(symbolic.simplify_valid(valid), env), values(valid, env))

def test_a_mask_drops_the_decode_that_only_carries_in_the_padding():
  g, r = Var("g", 0, 3), Var("r", 0, 13)  # g padded from 3 to 4
  idx, valid = (g * 15 + r) // 58 + (g + r * 2) % 29, land(lt((g + r * 2) % 29, 28), lt(g, 3))
  assert symbolic.simplify_valid(valid) == land(lt(g + r * 2, 28), lt(g, 3))
  assert symbolic.simplify_where(idx, valid) == g + r * 2
  assert symbolic.simplify_where(idx, lt(g, 4)) == idx and symbolic.simplify_valid(land(lt(g, 3), lt(g * 10 + r, 34))) == Lt(g, 3)

# ---- C rendering: one gcc build for a batch of random expressions

def rand_tree(rng, names, leaves):
  if leaves <= 1:
    return ("var", rng.choice(names)) if rng.random() < 0.7 else ("const", rng.randint(-20, 20))
  op = rng.choice(["add", "sub", "neg", "mulc", "mul", "div", "div", "mod", "mod"])
  if op in ("add", "sub", "mul"):
    k = rng.randint(1, leaves - 1)
    return (op, rand_tree(rng, names, k), rand_tree(rng, names, leaves - k))
  sub = rand_tree(rng, names, leaves - 1)
  if op == "neg": return (op, sub)
  if op == "mulc": return (op, sub, rng.randint(-6, 6))
  return (op, sub, rng.choice([2, 3, 4, 5, 6, 7, 8, 12, 16, -2, -3, -4, -7]))

@pytest.mark.property  # its expressions scale with the property tests' examples: 400 in make test, 2,000 in test-exhaustive
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_c_rendering_matches_python_floor_semantics_for_negative_numerators():
  rng = random.Random(1234)
  n_expr, n_env = 4 * settings.default.max_examples, 8
  bounds = {"a": (-13, 9), "b": (0, 3), "c": (-30, -2)}
  V = declare(bounds)
  exprs = []
  while len(exprs) < n_expr:
    t = rand_tree(rng, NAMES, rng.randint(2, 8))
    x = fold(t, V)
    if isinstance(x, int) or magnitude(t, bounds) > 2**40: continue
    exprs.append((t, x))
  envs = [{n: rng.randint(lo, hi) for n, (lo, hi) in bounds.items()} for _ in range(n_env)]
  cexprs = [render(x, c=True) for _, x in exprs]
  assert sum("+" in e and "%" in e for e in cexprs) > n_expr // 10, "too few floor-corrected renders to mean anything"
  src = ["#include <stdio.h>", "static void run(long long a, long long b, long long c) {", "  (void)a; (void)b; (void)c;"]
  src += [f'  printf("%lld\\n", (long long)({e}));' for e in cexprs]
  src += ["}", "int main(void) {"] + [f"  run({e['a']}LL, {e['b']}LL, {e['c']}LL);" for e in envs] + ["  return 0;", "}"]
  with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "t.c"), "w") as f: f.write("\n".join(src))
    subprocess.run(["gcc", "-O0", "-w", "-o", os.path.join(d, "t"), os.path.join(d, "t.c")], check=True)
    out = subprocess.run([os.path.join(d, "t")], check=True, capture_output=True, text=True).stdout.split()
  got = iter(int(v) for v in out)
  for env in envs:
    for (t, _), ce in zip(exprs, cexprs):
      assert next(got) == fold(t, env), f"C {ce} at {env}"


# ---- parser

V3 = {"x": Var("x", 0, 100), "y": Var("y", -10, 10), "start_pos": Var("start_pos", 1, 4096)}

@pytest.mark.parametrize("text,want", [
  ("0", 0), ("42", 42), ("-7", -7), ("--7", 7), ("1+2*3", 7), ("(1+2)*3", 9), ("7//2", 3), ("-7//2", -4), ("7%-3", -2),
  ("-7%3", 2), ("10-3-2", 5), ("2*3%4", 2), ("8//2//2", 2), ("100//7*7+100%7", 100), (" ( 3 ) ", 3),
  ("-(2+3)*2", -10), ("2--3", 5), ("1-(-1)", 2), ("007", 7)])
def test_parse_constant_expressions_follow_precedence_and_floor_semantics(text, want):
  assert parse(text, V3) == want

@pytest.mark.parametrize("text,env,want", [
  ("start_pos+1", {"start_pos": 5}, 6), ("(x*4)//2", {"x": 3}, 6), ("x+y*2", {"x": 1, "y": -3}, -5),
  ("-x%7", {"x": 3}, 4), ("x-y-1", {"x": 5, "y": -2}, 6), ("x*y//3", {"x": 5, "y": -2}, -4),
  ("-(x+y)//4", {"x": 1, "y": 2}, -1), ("x*(y+1)", {"x": 2, "y": 3}, 8), ("start_pos%x", None, None)])
def test_parse_expressions_with_declared_names(text, env, want):
  if env is None:
    with pytest.raises(SymbolicParseError): parse(text, V3)
    return
  got = parse(text, V3)
  assert isinstance(got, Node) and evaluate(got, {**{"x": 0, "y": 0, "start_pos": 1}, **env}) == want

def test_parse_keeps_declared_bounds():
  x = parse("start_pos+1", V3)
  assert (x.min, x.max) == (2, 4097) and parse("x", V3) is V3["x"]

@pytest.mark.parametrize("text", [
  "", "   ", "(", ")", "(1", "1)", "((x)", "x)(", "1 2", "x y", "zz", "X", "x+", "*x", "x*", "1/2", "x/2", "2**3", "x**2",
  "1//0", "x%0", "x//(y-y)", "x//y", "x%y", "7//start_pos", "1+" * 130 + "1", "(" * 40 + "1" + ")" * 40, "-" * 40 + "1",
  "9" * 30, "99999999999999999999", str(2**62 + 1), "4611686018427387904*2", "1.5", "1e3", "0x10", "x.y", "x[0]",
  "x & 1", "x<1", "x==1", "\x00", "é", "١", "²", "start-pos", "x+(", "()", "+", "-", "x;y", "𝑥"])
def test_parse_rejects_bad_strings_with_symbolic_parse_error(text):
  with pytest.raises(SymbolicParseError): parse(text, V3)

@pytest.mark.timing
def test_parse_rejects_products_that_multiply_out_to_many_terms_quickly():
  text = "*".join(["(x+y+start_pos)"] * 16)  # 255 characters, 3**16 terms multiplied out
  t0 = own_clock()  # the parser's own time: a busy machine's wait for a core is not its work
  with pytest.raises(SymbolicParseError): parse(text, V3)
  assert own_clock() - t0 < 2
  assert parse("(x+y)*(x-y)*(x+1)", V3) is not None  # small products are fine

@pytest.mark.parametrize("bad", [None, 3, b"1", ["1"]])
def test_parse_rejects_non_strings_with_symbolic_parse_error(bad):
  with pytest.raises(SymbolicParseError): parse(bad, V3)

def test_parse_limits_are_at_the_documented_edges():
  assert parse("1" + "+1" * ((symbolic.MAX_EXPR_LEN - 1) // 2), V3) == 1 + (symbolic.MAX_EXPR_LEN - 1) // 2
  assert parse(str(symbolic.MAX_LITERAL), V3) == symbolic.MAX_LITERAL
  depth = symbolic.MAX_EXPR_DEPTH
  assert parse("(" * depth + "x" + ")" * depth, V3) is V3["x"]
  with pytest.raises(SymbolicParseError): parse("(" * (depth + 1) + "x" + ")" * (depth + 1), V3)

@given(st.one_of(st.text(max_size=80),
                 st.lists(st.sampled_from(["x", "y", "start_pos", "z", "0", "1", "7", "-", "+", "*", "//", "/", "%", "(",
                                           ")", " ", "**", "99999999999", "2"]), max_size=60).map("".join)))
def test_parse_of_random_text_raises_nothing_but_symbolic_parse_error(text):
  try: out = parse(text, V3)
  except SymbolicParseError: return
  assert isinstance(out, (int, Node)) and max(abs(smin(out)), abs(smax(out))) <= symbolic.MAX_LITERAL


# ---- the simplifications the shape tracker relies on

X = Var("x", 0, 1000)
XN = Var("x", -200, 200)

@pytest.mark.parametrize("x", [X, XN], ids=["x>=0", "x signed"])
def test_decode_then_recombine_gives_back_the_index(x):
  assert 6 * (x // 6) + x % 6 == x
  assert x % 6 + (x // 6) * 6 == x
  assert 3 * (6 * (x // 6) + x % 6) == 3 * x
  assert 30 * (x // 30) + 6 * ((x // 6) % 5) + x % 6 == x
  assert 6 * ((x // 6) % 5) + x % 6 + 30 * (x // 30) == x
  assert 7 * (x // 6) + x % 6 != x  # the wrong coefficient must not be absorbed

def test_whole_multiples_leave_a_floor_division():
  a, b = Var("a", 0, 50), Var("b", 0, 3)
  assert (a * 4 + b) // 4 == a and (a * 4 + b) % 4 == b
  assert (4 * a + 3 * 4 + b) // 4 == a + 3
  b5 = Var("b", 0, 4)  # b may reach the next block: no simplification to a
  q = (a * 4 + b5) // 4
  assert q != a and evaluate(q, {"a": 2, "b": 4}) == 3
  bn = Var("b", -1, 2)
  assert evaluate((a * 4 + bn) // 4, {"a": 2, "b": -1}) == 1

def test_nested_floor_divisions_fold_and_mod_then_div_becomes_div_then_mod():
  assert (X // 3) // 4 == X // 12 and (XN // 3) // 4 == XN // 12
  assert (X % 12) // 3 == (X // 3) % 4 and (XN % 12) // 3 == (XN // 3) % 4
  assert (X % 12) % 4 == X % 4

def test_small_terms_that_never_carry_drop_out_of_a_division():
  a, b = Var("a", 0, 10), Var("b", 0, 1)
  assert (2 * a + b) // 4 == a // 2 and (2 * a + b) % 4 == 2 * (a % 2) + b
  assert (6 * a + b + 1) // 12 == a // 2 and (6 * a + b + 1) % 12 == 6 * (a % 2) + b + 1
  assert (3 * a + 3 * b + 4) // 6 == (a + b + 1) // 2  # the constant splits too: 4 == 3*1 + 1
  b2 = Var("b", 0, 2)  # b may carry: not a // 2
  assert (2 * a + b2) // 4 != a // 2 and evaluate((2 * a + b2) // 4, {"a": 1, "b": 2}) == 1

def test_decode_of_a_decode_has_one_form():
  y = Var("y", 0, 100)
  assert (y // 2 + 1) // 3 == (y + 2) // 6 and ((y // 3) // 2) == y // 6
  p = 4 * Var("m0", 0, 2) + Var("m1", 0, 3)  # position of a (3, 4) view read through (2, 3, 2)
  assert 6 * (p // 6) + 2 * ((p // 2) % 3) + p % 2 == p
  assert 4 * (p // 4) + p % 4 == p and 12 * (p // 12) + 3 * ((p // 3) % 4) + p % 3 == p
  q = 24 * Var("m0", 0, 2) + Var("m1", 0, 23)  # (3, 24) read through (4, 6, 3)
  assert 18 * (q // 18) + 3 * ((q // 3) % 6) + q % 3 == q

def test_mod_agrees_with_a_resolved_floor_division():
  a, b = Var("a", 0, 1), Var("b", 0, 5)
  x = 2 * b - a + 1  # x // 2 == b, so x % 2 == 1 - a (not (a + 1) % 2)
  assert x // 2 == b and x % 2 == 1 - a and 2 * (x // 2) + x % 2 == x

def test_mod_within_one_block_is_a_shift():
  x = Var("x", 13, 17)
  assert x % 6 == x - 12 and x // 6 == 2
  xn = Var("x", -5, -1)
  assert xn % 6 == xn + 6 and xn // 6 == -1
  assert Var("x", 0, 5) % 6 == Var("x", 0, 5)

def test_negative_divisors_follow_floor_semantics():
  for v in range(-200, 201, 7):
    for c in (-1, -3, -4, 3):
      assert evaluate(XN // c, {"x": v}) == v // c and evaluate(XN % c, {"x": v}) == v % c

def test_lt_drops_terms_that_cannot_reach_the_next_multiple():
  a, b = Var("a", 0, 10), Var("b", 0, 2)
  assert lt(3 * a + b, 3) == lt(a, 1) and lt(3 * a + b, 3) == Lt(a, 1)
  assert lt(3 * a + b, 6) == Lt(a, 2)
  assert lt(6 * a + 3, 9) == Lt(a, 1)  # gcd: 2a < 2
  assert lt(X // 4, 3) == Lt(X, 12)
  assert lt(X + 5, 10) == Lt(X, 5) and lt(X, 1001) == 1 and lt(X, 0) == 0
  assert ge(X, 5) == Lt(-X, -4) and ge(X, 0) == 1
  b3 = Var("b", 0, 3)  # b may reach the next multiple: not a < 1
  assert evaluate(lt(3 * a + b3, 3), {"a": 0, "b": 3}) == 0

def test_land_keeps_the_tightest_upper_bound_and_drops_true_terms():
  assert land(lt(X, 5), lt(X, 9)) == Lt(X, 5) and land(lt(X, 9), lt(X, 5)) == Lt(X, 5)
  assert land(lt(X, 5), 1, lt(X, 2000)) == Lt(X, 5) and land(lt(X, 5), lt(X, 0)) == 0

def test_symbolic_divisors_are_rejected_and_zero_divides_raise():
  with pytest.raises(ValueError): X // XN
  with pytest.raises(ValueError): X % XN
  with pytest.raises(ZeroDivisionError): X // 0
  with pytest.raises(ZeroDivisionError): X % 0
  with pytest.raises(TypeError): bool(X)
