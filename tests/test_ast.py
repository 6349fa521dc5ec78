"""The kernel document loader (linearizer/ast.py): the examples of the format's write-up (docs/kernel-format.md), the JSON round
trip, what the key depends on (and what it must not), the buffer-window proof and the shared corpus."""
from __future__ import annotations
import copy, gzip, itertools, json, math
import numpy as np
import pytest
from linearizer.ast import DTYPES, ARITY, FORMAT, KernelValidationError, load, loads

from conftest import CORPUS


# ---------------------------------------------------------------- small document builders

def view(shape, strides=None, offset=0, mask=None):
  if strides is None:  # contiguous; a symbolic dim only as the outermost
    strides, acc = [], 1
    for s in reversed(shape):
      assert acc is not None, "contiguous strides need int dims inside a symbolic one"
      strides.insert(0, acc)
      acc = acc * s if isinstance(s, int) else None
  return {"shape": list(shape), "strides": list(strides), "offset": offset, "mask": mask}

def st(*views): return {"views": list(views)}
def load_(buf, *views, dtype="float32"): return {"op": "LOAD", "arg": {"buf": buf, "dtype": dtype, "st": st(*views)}}
def const(val, shape, dtype="float32"): return {"op": "CONST", "arg": {"val": val, "dtype": dtype, "st": st(view(shape, [0] * len(shape)))}}
def alu(op, *src, arg=None):
  n = {"op": op, "src": list(src)}
  if arg is not None: n["arg"] = arg
  return n
def store(src, *views, dtype="float32"): return {"op": "STORE", "arg": {"buf": 0, "dtype": dtype, "st": st(*views)}, "src": [src]}
def doc(ast, vars=None, name=None):
  d = {"format": FORMAT}
  if name is not None: d["name"] = name
  if vars is not None: d["vars"] = vars
  d["ast"] = ast
  return d


# ---------------------------------------------------------------- the examples of docs/kernel-format.md

MATMUL_TEXT = """
{"format": "tunesvc.kernel/1", "name": "matmul_64",
 "ast": {"op": "STORE", "arg": {"buf": 0, "dtype": "float32",
          "st": {"views": [{"shape": [64, 64, 1], "strides": [64, 1, 0], "offset": 0, "mask": null}]}},
  "src": [{"op": "REDUCE", "arg": {"fn": "SUM", "axis": [2]},
   "src": [{"op": "MUL", "src": [
     {"op": "LOAD", "arg": {"buf": 1, "dtype": "float32",
       "st": {"views": [{"shape": [64, 64, 64], "strides": [64, 0, 1], "offset": 0, "mask": null}]}}},
     {"op": "LOAD", "arg": {"buf": 2, "dtype": "float32",
       "st": {"views": [{"shape": [64, 64, 64], "strides": [0, 1, 64], "offset": 0, "mask": null}]}}}]}]}]}}
"""

MAXPOOL_LOAD_TEXT = """
{"op": "LOAD", "arg": {"buf": 1, "dtype": "float32", "st": {"views": [
  {"shape": [32, 2, 111, 27], "strides": [6160, 3080, 28, 1], "offset": 0,
   "mask": [[0, 32], [0, 2], [0, 110], [0, 27]]},
  {"shape": [32, 2, 37, 9, 2, 2], "strides": [5994, 2997, 81, 3, 27, 1], "offset": 0, "mask": null}]}}}
"""

def matmul_doc() -> dict: return json.loads(MATMUL_TEXT)

def maxpool_doc() -> dict:
  """The padded max-pool read, reduced over its two window dims into a contiguous output."""
  return doc(store(alu("REDUCE", json.loads(MAXPOOL_LOAD_TEXT), arg={"fn": "MAX", "axis": [4, 5]}),
                   view([32, 2, 37, 9, 1, 1])), name="maxpool")

def vars_doc() -> dict:
  """The document skeleton with `vars`: a KV-cache style append, rows [0, start_pos) from the cache and
  row start_pos from the new value, plus a constant."""
  sp = [{"name": "start_pos", "min": 1, "max": 4096}]
  shape = ["(start_pos+1)", 64]
  cache = load_(1, view(shape, [64, 1], 0, [[0, "start_pos"], [0, 64]]))
  new = load_(2, view(shape, [0, 1], 0, [["start_pos", "start_pos+1"], [0, 64]]))
  return doc(store(alu("ADD", alu("ADD", cache, new), const(1.0, shape)), view(shape, [64, 1])), vars=sp, name="kv_append")

EXAMPLES = {"matmul_64": matmul_doc, "maxpool": maxpool_doc, "kv_append": vars_doc}


def test_matmul_example_parses_with_its_documented_shapes():
  k = loads(MATMUL_TEXT)
  assert k.name == "matmul_64"
  assert k.full_shape == (64, 64, 64) and k.output_shape == (64, 64, 1)
  assert k.reduceop is not None and k.reduceop.arg.axis == (2,)
  assert [b.buf for b in k.buffers] == [0, 1, 2]
  assert k.buffer_sizes() == [64 * 64] * 3


def test_maxpool_example_load_parses_inside_a_complete_document():
  k = load(maxpool_doc())
  assert k.full_shape == (32, 2, 37, 9, 2, 2) and k.output_shape == (32, 2, 37, 9, 1, 1)
  (ld,) = [n for n in k.nodes if n.op == "LOAD"]
  assert len(ld.arg.st.views) == 2 and ld.arg.st.views[0].mask is not None
  lo, hi = k.buffer_windows()[1]
  # the last position, 191779 of the lower view, decodes to (31, 1, 109, 25): that element must be covered,
  # and no element of row 110, which the mask excludes
  assert lo == 0 and 31 * 6160 + 3080 + 109 * 28 + 25 <= hi < 31 * 6160 + 3080 + 110 * 28


def test_vars_example_parses_with_a_symbolic_shape():
  k = load(vars_doc())
  assert [(v.name, v.min, v.max) for v in k.vars] == [("start_pos", 1, 4096)]
  assert k.buffer_sizes({"start_pos": 10}) == [11 * 64, 10 * 64, 64]
  assert k.buffer_sizes() == [4097 * 64, 4096 * 64, 64]


# ---------------------------------------------------------------- round trip

def assert_round_trip(k):
  j = k.to_json()
  k2 = load(j)
  assert k2.key == k.key and k2.canonical == k.canonical
  assert k2.to_json() == j
  k3 = loads(json.dumps(j))
  assert k3.key == k.key and k3.to_json() == j


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_round_trip_through_to_json(name):
  assert_round_trip(load(EXAMPLES[name]()))


def test_to_json_of_a_loaded_document_is_the_normalised_document():
  k = load(matmul_doc())
  assert k.to_json() == matmul_doc()  # already normal: nothing to change, name kept


# ---------------------------------------------------------------- what the key ignores

def reorder_keys(x):
  if isinstance(x, dict): return {k: reorder_keys(x[k]) for k in reversed(list(x))}
  if isinstance(x, list): return [reorder_keys(v) for v in x]
  return x

def at(d, *path):
  for p in path: d = d[p]
  return d

def edited(base: dict, fn) -> dict:
  d = copy.deepcopy(base)
  fn(d)
  return d

def _two_vars_doc(order):
  vs = {"a": {"name": "a", "min": 1, "max": 8}, "b": {"name": "b", "min": 2, "max": 5}}
  shape = ["a", "b+1"]
  return doc(store(load_(1, view(shape, ["b+1", 1])), view(shape, ["b+1", 1])), vars=[vs[n] for n in order])

def _mm_edit(fn): return edited(matmul_doc(), fn)
def _set_store_stride(d): at(d, "ast", "arg", "st", "views", 0, "strides")[2] = 7
def _full_mask(d): at(d, "ast", "src", 0, "src", 0, "src", 0, "arg", "st", "views", 0)["mask"] = [[0, 64]] * 3
def _drop_optional(d):
  for v in (at(d, "ast", "arg", "st", "views", 0), at(d, "ast", "src", 0, "src", 0, "src", 1, "arg", "st", "views", 0)):
    del v["offset"], v["mask"]
def _empty_src_and_null_arg(d):
  at(d, "ast", "src", 0, "src", 0, "src", 0)["src"] = []
  at(d, "ast", "src", 0, "src", 0)["arg"] = None

def _kv(shape_str, mask_hi):
  sp = [{"name": "start_pos", "min": 1, "max": 100}]
  return doc(store(load_(1, view([shape_str, 8], [8, 1], 0, [[0, mask_hi], [0, 8]])), view([shape_str, 8], [8, 1])), vars=sp)

def _bool_c(val): return doc(store(alu("CMPEQ", load_(1, view([4]), dtype="bool"), const(val, [4], "bool")), view([4]), dtype="bool"))
def _c(val, dtype): return doc(store(alu("ADD", load_(1, view([4]), dtype=dtype), const(val, [4], dtype)), view([4]), dtype=dtype))

EQUIVALENT = {
  "key_order": (matmul_doc, lambda: reorder_keys(matmul_doc())),
  "name_changed": (matmul_doc, lambda: _mm_edit(lambda d: d.update(name="another"))),
  "name_dropped": (matmul_doc, lambda: _mm_edit(lambda d: d.pop("name"))),
  "stride_on_size1_dim": (matmul_doc, lambda: _mm_edit(_set_store_stride)),
  "full_mask_vs_null": (matmul_doc, lambda: _mm_edit(_full_mask)),
  "offset_and_mask_omitted": (matmul_doc, lambda: _mm_edit(_drop_optional)),
  "empty_src_and_null_arg": (matmul_doc, lambda: _mm_edit(_empty_src_and_null_arg)),
  "float_const_1_vs_1.0": (lambda: _c(1.0, "float32"), lambda: _c(1, "float32")),
  "float_const_rounded_to_dtype": (lambda: _c(0.1, "float32"), lambda: _c(float(np.float32(0.1)), "float32")),
  "int_const_2.0_vs_2": (lambda: _c(2, "int32"), lambda: _c(2.0, "int32")),
  "bool_const_true_vs_1": (lambda: _bool_c(True), lambda: _bool_c(1)),
  "symbolic_1+start_pos": (lambda: _kv("(start_pos+1)", "start_pos"), lambda: _kv("1+start_pos", "(start_pos)")),
  "symbolic_spacing": (lambda: _kv("(start_pos+1)", "start_pos"), lambda: _kv(" start_pos + 1 ", " start_pos")),
  "symbolic_rewritten": (lambda: _kv("(start_pos+1)", "start_pos"), lambda: _kv("2*start_pos - start_pos + (3 - 2)", "start_pos*1")),
  "vars_order": (lambda: _two_vars_doc("ab"), lambda: _two_vars_doc("ba")),
}

@pytest.mark.parametrize("case", EQUIVALENT)
def test_key_is_unchanged_by_an_equivalent_spelling(case):
  a, b = (f() for f in EQUIVALENT[case])
  assert json.dumps(a) != json.dumps(b)
  ka, kb = load(a), load(b)
  assert ka.key == kb.key and ka.canonical == kb.canonical


@pytest.mark.parametrize("name", EXAMPLES)
def test_key_is_unchanged_by_whitespace_and_key_order_of_the_text(name):
  d = EXAMPLES[name]()
  compact = json.dumps(d, separators=(",", ":"))
  spaced = json.dumps(reorder_keys(d), indent=7).replace("\n", "\r\n\t ")
  assert loads(compact).key == loads(spaced).key == loads(spaced.encode()).key == load(d).key


def test_canonical_form_is_sorted_compact_json_without_name():
  k = load(matmul_doc())
  c = json.loads(k.canonical)
  assert "name" not in c and c["vars"] == [] and c["format"] == FORMAT
  assert k.canonical == json.dumps(c, sort_keys=True, separators=(",", ":"))
  assert len(k.key) == 64 and int(k.key, 16) >= 0


# ---------------------------------------------------------------- what the key depends on

def _leaf_mutations(d: dict):  # noqa: C901 (one branch per kind of AST field: a table written as code)
  """(path, new value) for single changes of meaning: every shape/stride/offset/mask entry and const val,
  each dtype, each op, each REDUCE fn and axis, each bitcast flag, each var bound."""
  out = []
  def num(path, v):
    if isinstance(v, str): out.extend([(path, f"({v})+1"), (path, f"({v})-1")])
    else: out.extend([(path, v + 1), (path, v - 1), (path, v * 3 + 5)])
  def node(n, p):
    op, arg = n["op"], n.get("arg")
    if op in ARITY and op not in ("STORE", "LOAD", "CONST", "CAST", "REDUCE"):
      out.extend((p + ("op",), o) for o in ARITY if o != op and ARITY[o] == ARITY[op] and o not in ("STORE", "CAST", "REDUCE"))
    if op in ("LOAD", "STORE", "CONST", "CAST"):
      out.extend((p + ("arg", "dtype"), t) for t in DTYPES if t != arg["dtype"])
    if op == "CAST": out.append((p + ("arg", "bitcast"), not arg.get("bitcast", False)))
    if op == "REDUCE":
      out.append((p + ("arg", "fn"), "MAX" if arg["fn"] == "SUM" else "SUM"))
      for i, ax in enumerate(arg["axis"]): out.extend([(p + ("arg", "axis", i), ax + 1), (p + ("arg", "axis", i), ax - 1)])
    if op == "CONST":
      v, dt = arg["val"], DTYPES[arg["dtype"]]
      if isinstance(v, str): out.extend((p + ("arg", "val"), w) for w in ("inf", "-inf", "nan", 0.5) if w != v)
      elif dt.kind == "b": out.append((p + ("arg", "val"), not v))
      elif dt.is_int and v == dt.min: out.append((p + ("arg", "val"), v + 1))
      else: out.append((p + ("arg", "val"), -v if v else 1))  # exact in every dtype, unlike v+1 in a narrow float
    if op in ("LOAD", "STORE", "CONST"):
      for vi, v in enumerate(arg["st"]["views"]):
        vp = p + ("arg", "st", "views", vi)
        for k, s in enumerate(v["shape"]):
          num(vp + ("shape", k), s)
          if s != 1: num(vp + ("strides", k), v["strides"][k])  # a size-1 dim's stride is normalised away
        if "offset" in v: num(vp + ("offset",), v["offset"])
        for k, m in enumerate(v.get("mask") or []):
          num(vp + ("mask", k, 0), m[0]); num(vp + ("mask", k, 1), m[1])
    for i, s in enumerate(n.get("src", [])): node(s, p + ("src", i))
  node(d["ast"], ("ast",))
  for i, v in enumerate(d.get("vars", [])):
    num(("vars", i, "min"), v["min"]); num(("vars", i, "max"), v["max"])
  return out

def _mutated(d: dict, path, value) -> dict:
  d = json.loads(json.dumps(d))
  at(d, *path[:-1])[path[-1]] = value
  return d

def _corpus_docs() -> dict[str, dict]:
  with gzip.open(CORPUS, "rt") as f: return {(d := json.loads(line))["name"]: d for line in f}

# small corpus kernels that between them have vars, masks, several views, CONST, CAST, WHERE, CMPEQ, EXP2, REDUCE
MUTATED_CORPUS = ["sops_6710", "sops_8443", "sops_8846", "sops_9027"]

def _mutation_subjects():
  subjects = [("matmul_64", matmul_doc), ("kv_append", vars_doc)]
  corpus = _corpus_docs()
  return subjects + [(n, lambda n=n: corpus[n]) for n in MUTATED_CORPUS]

@pytest.mark.parametrize("name,make", _mutation_subjects(), ids=lambda x: x if isinstance(x, str) else "")
def test_key_changes_with_every_change_of_meaning(name, make):
  base = make()
  key = load(base).key
  muts = _leaf_mutations(base)
  assert len(muts) > 50
  valid = 0
  for path, value in muts:
    try: k = load(_mutated(base, path, value))
    except KernelValidationError: continue
    valid += 1
    assert k.key != key, f"{name}: setting {'.'.join(map(str, path))} to {value!r} kept the key"
  assert valid >= 10, f"{name}: only {valid} of {len(muts)} mutations validated; the test proves little"


# ---------------------------------------------------------------- buffer windows and rebasing

def test_padding_view_with_negative_offset_and_mask_has_window_starting_at_0():
  # a 1-padded read of a 4-element buffer: position p reads p-1 where 1 <= p < 5
  k = load(doc(store(load_(1, view([6], [1], -1, [[1, 5]])), view([6]))))
  assert k.buffer_windows() == [(0, 5), (0, 3)]
  assert k.buffer_sizes() == [6, 4]

def test_2d_padding_reaches_exactly_the_unpadded_buffer():
  # 3x3 buffer read through a 5x5 view padded by 1 on every side
  k = load(doc(store(load_(1, view([5, 5], [3, 1], -4, [[1, 4], [1, 4]])), view([5, 5]))))
  assert k.buffer_windows()[1] == (0, 8) and k.buffer_sizes()[1] == 9

def test_padding_that_uncovers_a_negative_index_is_rejected():
  with pytest.raises(KernelValidationError) as e: load(doc(store(load_(1, view([6], [1], -1, [[0, 5]])), view([6]))))
  assert e.value.path == "ast.src[0].arg.st.views[0]"

def test_broadcast_view_needs_only_the_broadcast_source():
  k = load(doc(store(alu("ADD", load_(1, view([4, 8], [0, 1])), load_(2, view([4, 8], [1, 0]))), view([4, 8]))))
  assert k.buffer_windows() == [(0, 31), (0, 7), (0, 3)]
  assert k.buffer_sizes() == [32, 8, 4]

def test_negative_stride_with_offset_reads_the_buffer_reversed():
  k = load(doc(store(load_(1, view([5], [-1], 4)), view([5]))))
  assert k.buffer_windows()[1] == (0, 4)

def test_buffer_read_through_two_views_gets_the_largest_size():
  k = load(doc(store(alu("ADD", load_(1, view([4], [1])), load_(1, view([4], [2], 3))), view([4]))))
  assert len(k.buffers) == 2 and len(k.buffers[1].sts) == 2
  assert k.buffer_windows()[1] == (0, 9)

def test_symbolic_kernel_windows_over_all_values_and_at_a_binding():
  k = load(_kv("(start_pos+1)", "start_pos"))  # start_pos in [1, 100]; rows [0, start_pos) of 8 are read
  assert k.buffer_windows() == [(0, 101 * 8 - 1), (0, 100 * 8 - 1)]
  assert k.buffer_windows({"start_pos": 3}) == [(0, 4 * 8 - 1), (0, 3 * 8 - 1)]
  assert k.buffer_sizes({"start_pos": 1}) == [16, 8]
  assert k.buffer_sizes({"start_pos": 100}) == [101 * 8, 100 * 8]

def test_vars_example_new_row_is_one_row_wide():
  k = load(vars_doc())
  for sp in (1, 77, 4096): assert k.buffer_windows({"start_pos": sp})[2] == (0, 63)

def _indices(k, var_vals=None):
  """Per LOAD/STORE node in order, the buffer index and validity at every position (a small brute force)."""
  from linearizer.ast import concrete_st
  out = []
  for n in k.nodes:
    if n.op not in ("LOAD", "STORE"): continue
    s = n.arg.st if var_vals is None else concrete_st(n.arg.st, var_vals)
    idx = []
    for pos in itertools.product(*(range(d) for d in s.shape)):
      i, valid = s.expr_idxs(list(pos))
      idx.append((i, valid) if valid else (None, 0))
    out.append((n.arg.buf, idx))
  return out

REBASE_CASES = {
  "offset": lambda: doc(store(load_(1, view([4, 3], [3, 1], 100)), view([4, 3]))),
  "padded_with_offset": lambda: doc(store(load_(1, view([6], [1], 99, [[1, 5]])), view([6]))),
  "two_views_of_one_buffer": lambda: doc(store(alu("MUL", load_(1, view([4], [1], 50)), load_(1, view([4], [-1], 80))), view([4]))),
  "two_view_tracker": lambda: doc(store(alu("ADD", load_(1, view([4, 4])), load_(2, view([8, 2], [2, 1], 1000), view([4, 4], [4, 1]))),
                                        view([4, 4]))),
}

@pytest.mark.parametrize("case", REBASE_CASES)
def test_rebased_keeps_the_meaning_and_starts_every_window_at_zero(case):
  k = load(REBASE_CASES[case]())
  r = k.rebased()
  assert len(r.buffers) == len(k.buffers) and [b.dtype for b in r.buffers] == [b.dtype for b in k.buffers]
  wk, wr = k.buffer_windows(), r.buffer_windows()
  assert all(lo == 0 for lo, _ in wr)
  assert [hi - lo for lo, hi in wk] == [hi - lo for lo, hi in wr]
  assert any(lo > 0 for lo, _ in wk)  # there was something to rebase
  # each node reads the same elements, shifted by its buffer's old window start
  shift = {b.buf: lo for b, (lo, _) in zip(k.buffers, wk)}
  for (buf, old), (buf2, new) in zip(_indices(k), _indices(r)):
    assert buf == buf2
    assert new == [(None if i is None else i - shift[buf], v) for i, v in old]
  # still a valid document, and its own round trip holds
  assert_round_trip(load(r.to_json()))
  assert load(r.to_json()).key == r.key

def test_rebased_of_a_zero_based_kernel_is_itself():
  k = load(matmul_doc())
  assert k.rebased().key == k.key

def test_rebased_symbolic_kernel_keeps_the_symbolic_window():
  sp = [{"name": "start_pos", "min": 1, "max": 10}]
  d = doc(store(load_(1, view(["start_pos", 4], [4, 1], "start_pos*4+64")), view(["start_pos", 4])), vars=sp)
  k = load(d)
  assert k.buffer_windows()[1] == (68, 64 + 40 + 39)
  r = k.rebased()
  assert r.buffer_windows()[1][0] == 0
  for sp_ in (1, 5, 10):
    lo, hi = k.buffer_windows({"start_pos": sp_})[1]
    assert r.buffer_windows({"start_pos": sp_})[1] == (lo - 68, hi - 68)


# ---------------------------------------------------------------- regressions for loader bugs

def test_huge_integer_const_for_a_float_dtype_rounds_to_inf_like_1e400():
  # was: OverflowError escaped from loads (int too large to convert to float)
  big = "1" + "0" * 400
  for text_val, expect in ((big, math.inf), ("-" + big, -math.inf), ("1e400", math.inf)):
    text = json.dumps(_c(0.0, "float32")).replace('"val": 0.0', f'"val": {text_val}')
    assert text_val in text
    k = loads(text)
    (c,) = [n for n in k.nodes if n.op == "CONST"]
    assert c.arg.val == expect
    assert_round_trip(k)

def test_variable_named_like_an_internal_proof_variable_cannot_hide_a_negative_index():
  # was accepted: a user var "_p0" equal to the index var the bound proof used made "idx - _p0" look like 0
  d = doc(store(load_(1, view([10], [1], "-_p0")), view([10])), vars=[{"name": "_p0", "min": 0, "max": 9}])
  with pytest.raises(KernelValidationError) as e: load(d)
  assert e.value.path == "vars[0].name"


# ---------------------------------------------------------------- the shared corpus

# every corpus document is parsed by loads in every run (the session's `corpus` fixture: a kernel that fails it errors the
# fixture); the load from a dict and the round trip of each, two more parses of ~4 ms (its views' bounds are checked),
# of every 4th document in `make test` and of the other three quarters in the exhaustive tier, which CI runs too
@pytest.mark.slow
@pytest.mark.parametrize("part", [0, pytest.param(1, marks=pytest.mark.exhaustive)], ids=["every-4th", "the-rest"])
def test_every_corpus_document_loads_from_dict_and_text_and_round_trips(corpus_lines, corpus, part):
  assert len(corpus_lines) == len(corpus) == 1000
  assert len({k.key for k in corpus}) > 900  # distinct kernels get distinct keys
  failures, keys = [], set()
  for i, (line, kt) in enumerate(zip(corpus_lines, corpus)):
    if (i % 4 == 0) != (part == 0): continue
    d = json.loads(line)
    try:
      k = load(d)
      assert kt.key == k.key, "load and loads disagree"
      j = k.to_json()
      k2 = load(j)
      assert k2.key == k.key and k2.to_json() == j, "round trip changed the kernel"
      assert j["name"] == d["name"]
      keys.add(k.key)
    except (KernelValidationError, AssertionError) as e:
      failures.append(f"{d.get('name')}: {e}")
  assert not failures, f"{len(failures)} corpus kernels failed:\n" + "\n".join(failures[:20])
  assert keys == {k.key for i, k in enumerate(corpus) if (i % 4 == 0) == (part == 0)}
