"""Malformed kernel documents: every one is rejected with KernelValidationError naming the exact JSON path
of the offending node, and no input whatever makes `load`/`loads` raise anything else."""
from __future__ import annotations
import copy, json
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from linearizer.ast import FORMAT, KernelValidationError, Limits, load, loads

LIMITS = Limits()
assert (LIMITS.nodes, LIMITS.dims, LIMITS.buffers, LIMITS.elements, LIMITS.depth) == (4096, 16, 64, 2**31, 256), \
  "the cases below are written against the default limits"


# ---------------------------------------------------------------- builders

def view(shape, strides=None, offset=0, mask=None):
  if strides is None:
    strides, acc = [], 1
    for s in reversed(shape):
      strides.insert(0, acc)
      acc = acc * s if isinstance(s, int) else None
  return {"shape": list(shape), "strides": list(strides), "offset": offset, "mask": mask}

def st_(*views): return {"views": list(views)}
def ld(buf, *views, dtype="float32"): return {"op": "LOAD", "arg": {"buf": buf, "dtype": dtype, "st": st_(*(views or (view([4, 4]),)))}}
def const(val, shape=(4, 4), dtype="float32"): return {"op": "CONST", "arg": {"val": val, "dtype": dtype, "st": st_(view(list(shape), [0] * len(shape)))}}
def op(o, *src, arg=None):
  n = {"op": o, "src": list(src)}
  if arg is not None: n["arg"] = arg
  return n
def store(src, *views, dtype="float32"): return {"op": "STORE", "arg": {"buf": 0, "dtype": dtype, "st": st_(*(views or (view([4, 4]),)))}, "src": [src]}
def doc(ast, vars=None):
  d = {"format": FORMAT, "name": "t"}
  if vars is not None: d["vars"] = vars
  d["ast"] = ast
  return d
def reduce_(src, axis, fn="SUM"): return op("REDUCE", src, arg={"fn": fn, "axis": axis})
SP = [{"name": "start_pos", "min": 1, "max": 16}]

def base() -> dict:
  """out[i, j] = in1[i, j] + in2[i, j] on 4x4 float32."""
  return doc(store(op("ADD", ld(1), ld(2))))

def edit(d: dict, *changes) -> dict:
  """Apply (path, value) changes to a copy; value DROP deletes."""
  d = copy.deepcopy(d)
  for path, value in changes:
    parent = d
    for p in path[:-1]: parent = parent[p]
    if value is DROP: del parent[path[-1]]
    else: parent[path[-1]] = value
  return d
DROP = object()

class Text(str):
  """A case given as JSON text, checked with `loads`."""

ADD = ("ast", "src", 0)
L1, L2 = ADD + ("src", 0), ADD + ("src", 1)
V1 = L1 + ("arg", "st", "views", 0)
P_ADD, P_L1, P_L2 = "ast.src[0]", "ast.src[0].src[0]", "ast.src[0].src[1]"
P_V1 = P_L1 + ".arg.st.views[0]"

def b(*changes): return edit(base(), *changes)

def with_load1(shape=(4, 4), **kw) -> dict:
  """The base document with in1 read through a different view."""
  return b((L1, ld(1, view(list(shape), **kw))))

def with_offset(expr, vars=SP) -> dict: return doc(store(op("ADD", ld(1, view([4, 4], offset=expr)), ld(2))), vars=vars)

def neg_chain(depth: int) -> dict:
  n = ld(1)
  for _ in range(depth): n = op("NEG", n)
  return doc(store(n))

def balanced_add_tree(levels: int) -> dict:
  def t(h): return ld(1) if h == 1 else op("ADD", t(h - 1), t(h - 1))
  return doc(store(t(levels)))

def add_chain_of_buffers(n: int) -> dict:
  acc = ld(1)
  for k in range(2, n + 1): acc = op("ADD", acc, ld(k))
  return doc(store(acc))

def deep_list(depth: int):
  x: list = []
  for _ in range(depth): x = [x]
  return x

BASE_TEXT = json.dumps(base())

def text_with_val(val_text: str) -> Text:
  d = doc(store(op("ADD", ld(1), const(0.5))))
  t = json.dumps(d)
  assert t.count('"val": 0.5') == 1
  return Text(t.replace('"val": 0.5', f'"val": {val_text}'))


# ---------------------------------------------------------------- the table: (id, document or Text, path, message part)

CASES = [
  # document level
  ("document_is_an_array", [], "$", "expected an object, got array"),
  ("document_is_a_string", "tunesvc.kernel/1", "$", "expected an object, got string"),
  ("document_is_null", None, "$", "expected an object, got null"),
  ("missing_format", b((("format",), DROP)), "$", "missing key 'format'"),
  ("missing_ast", b((("ast",), DROP)), "$", "missing key 'ast'"),
  ("unknown_top_level_key", b((("version",), 2)), "$", "unknown key 'version'"),
  ("wrong_format_string", b((("format",), "tunesvc.kernel/2")), "format", "expected 'tunesvc.kernel/1'"),
  ("format_not_a_string", b((("format",), 1)), "format", "expected 'tunesvc.kernel/1'"),
  ("name_not_a_string", b((("name",), ["x"])), "name", "expected a string"),
  ("name_too_long", b((("name",), "x" * 257)), "name", "at most 256"),
  ("ast_not_an_object", b((("ast",), [base()["ast"]])), "ast", "expected an object, got array"),
  ("root_not_a_store", b((("ast",), ld(1))), "ast", "the root must be a STORE, got LOAD"),
  ("store_below_the_root", b((L2, store(ld(2)))), P_L2, "STORE may only be the root"),

  # node structure
  ("src_not_a_list", b((ADD + ("src",), {"0": ld(1), "1": ld(2)})), P_ADD + ".src", "expected an array, got object"),
  ("src_is_null", b((ADD + ("src",), None)), P_ADD + ".src", "expected an array, got null"),
  ("unknown_op", b((ADD + ("op",), "FMA")), P_ADD + ".op", "unknown op 'FMA'"),
  ("op_not_a_string", b((ADD + ("op",), 7)), P_ADD + ".op", "unknown op '7'"),
  ("op_lowercase", b((ADD + ("op",), "add")), P_ADD + ".op", "unknown op 'add'"),
  ("missing_op", b((ADD + ("op",), DROP)), P_ADD, "missing key 'op'"),
  ("unknown_node_key", b((ADD + ("srcs",), [])), P_ADD, "unknown key 'srcs'"),
  ("node_not_an_object", b((L1, 5)), P_L1, "expected an object, got integer"),
  ("binary_op_with_one_source", b((ADD + ("src",), [ld(1)])), P_ADD + ".src", "ADD takes 2 sources, got 1"),
  ("binary_op_with_three_sources", b((ADD + ("src",), [ld(1), ld(2), ld(3)])), P_ADD + ".src", "ADD takes 2 sources, got 3"),
  ("load_with_a_source", b((L1 + ("src",), [ld(2)])), P_L1 + ".src", "LOAD takes 0 sources, got 1"),
  ("store_with_two_sources", b((("ast", "src"), [ld(1), ld(2)])), "ast.src", "STORE takes 1 sources, got 2"),
  ("where_with_two_sources", doc(store(op("WHERE", op("CMPLT", ld(1), ld(2)), ld(1)))), P_ADD + ".src", "WHERE takes 3 sources, got 2"),
  ("alu_op_with_an_arg", b((ADD + ("arg",), {"fn": "SUM"})), P_ADD + ".arg", "ADD takes no arg"),
  ("load_arg_null", b((L1 + ("arg",), None)), P_L1 + ".arg", "expected an object, got null"),
  ("load_arg_missing_st", b((L1 + ("arg", "st"), DROP)), P_L1 + ".arg", "missing key 'st'"),
  ("load_arg_unknown_key", b((L1 + ("arg", "stride"), 1)), P_L1 + ".arg", "unknown key 'stride'"),
  ("cast_arg_missing_dtype", doc(store(op("CAST", ld(1), arg={"bitcast": False}))), P_ADD + ".arg", "missing key 'dtype'"),

  # dtypes and typed scalars
  ("unknown_dtype", b((L1 + ("arg", "dtype"), "float8")), P_L1 + ".arg.dtype", "unknown dtype 'float8'"),
  ("dtype_not_a_string", b((L1 + ("arg", "dtype"), 32)), P_L1 + ".arg.dtype", "unknown dtype '32'"),
  ("dtype_case_matters", b((L1 + ("arg", "dtype"), "Float32")), P_L1 + ".arg.dtype", "unknown dtype 'Float32'"),
  ("buf_is_a_bool", b((L1 + ("arg", "buf"), True)), P_L1 + ".arg.buf", "expected an integer, got boolean"),
  ("buf_is_a_float", b((L1 + ("arg", "buf"), 1.0)), P_L1 + ".arg.buf", "expected an integer, got number"),
  ("buf_is_a_string", b((L1 + ("arg", "buf"), "1")), P_L1 + ".arg.buf", "expected an integer, got string"),

  # shape trackers: types
  ("st_not_an_object", b((L1 + ("arg", "st"), [view([4, 4])])), P_L1 + ".arg.st", "expected an object, got array"),
  ("st_missing_views", b((L1 + ("arg", "st"), {})), P_L1 + ".arg.st", "missing key 'views'"),
  ("views_empty", b((L1 + ("arg", "st", "views"), [])), P_L1 + ".arg.st.views", "non-empty array of views"),
  ("views_not_a_list", b((L1 + ("arg", "st", "views"), view([4, 4]))), P_L1 + ".arg.st.views", "non-empty array of views"),
  ("more_than_16_views", b((L1 + ("arg", "st", "views"), [view([4, 4])] * 17)), P_L1 + ".arg.st.views", "more than 16 views"),
  ("view_not_an_object", b((V1, [[4, 4], [4, 1]])), P_V1, "expected an object, got array"),
  ("view_missing_strides", b((V1 + ("strides",), DROP)), P_V1, "missing key 'strides'"),
  ("view_unknown_key", b((V1 + ("contiguous",), True)), P_V1, "unknown key 'contiguous'"),
  ("shape_not_a_list", b((V1 + ("shape",), "4,4")), P_V1 + ".shape", "expected an array, got string"),
  ("strides_wrong_length", b((V1 + ("strides",), [4])), P_V1 + ".strides", "expected an array of 2 strides"),
  ("strides_not_a_list", b((V1 + ("strides",), {"0": 4})), P_V1 + ".strides", "expected an array of 2 strides"),
  ("stride_is_a_float", b((V1 + ("strides", 1), 1.0)), P_V1 + ".strides[1]", "expected an integer or a symbolic string, got number"),
  ("shape_entry_is_a_bool", b((V1 + ("shape", 0), True)), P_V1 + ".shape[0]", "got boolean"),
  ("stride_is_a_bool", b((V1 + ("strides", 1), True)), P_V1 + ".strides[1]", "got boolean"),
  ("offset_is_null", b((V1 + ("offset",), None)), P_V1 + ".offset", "got null"),
  ("offset_is_a_list", b((V1 + ("offset",), [0])), P_V1 + ".offset", "got array"),
  ("mask_wrong_length", b((V1 + ("mask",), [[0, 4]])), P_V1 + ".mask", "expected null or 2 [lo, hi] pairs"),
  ("mask_not_a_list", b((V1 + ("mask",), "all")), P_V1 + ".mask", "expected null or 2 [lo, hi] pairs"),
  ("mask_entry_not_a_pair", b((V1 + ("mask",), [[0, 4], [0]])), P_V1 + ".mask[1]", "expected a [lo, hi] pair"),
  ("mask_bound_is_a_float", b((V1 + ("mask",), [[0, 4], [0, 4.0]])), P_V1 + ".mask[1][1]", "got number"),
  ("mask_past_the_dim", b((V1 + ("mask",), [[0, 5], [0, 4]])), P_V1 + ".mask[0]", "is not within [0, 4]"),
  ("mask_lo_above_hi", b((V1 + ("mask",), [[0, 4], [3, 1]])), P_V1 + ".mask[1]", "with lo <= hi"),
  ("mask_negative_lo", b((V1 + ("mask",), [[-1, 4], [0, 4]])), P_V1 + ".mask[0]", "is not within"),
  ("dim_of_size_zero", b((V1 + ("shape", 0), 0)), P_V1 + ".shape[0]", "may be less than 1"),
  ("dim_negative", b((V1 + ("shape", 1), -4)), P_V1 + ".shape[1]", "may be less than 1"),
  ("dim_that_can_be_zero", doc(store(op("ADD", ld(1, view(["n", 4])), ld(2, view(["n", 4]))), view(["n", 4])),
                                 vars=[{"name": "n", "min": 0, "max": 4}]), P_V1 + ".shape[0]", "dim n may be less than 1"),
  ("dim_that_can_be_zero_via_expression", doc(store(op("ADD", ld(1, view(["n-3", 4])), ld(2, view(["n-3", 4]))), view(["n-3", 4])),
                                                vars=[{"name": "n", "min": 3, "max": 9}]), P_V1 + ".shape[0]", "may be less than 1"),
  ("symbolic_dim_in_a_lower_view", b((L1, ld(1, view(["start_pos", 4]), view([4, 4])))) | {"vars": SP},
   P_V1 + ".shape[0]", "only supported in the last view"),
  ("upper_view_outside_the_view_below", b((L1, ld(1, view([4]), view([4, 4])))), P_L1 + ".arg.st.views[1]", "outside the 4 elements of view 0"),
  ("upper_view_negative_position", b((L1, ld(1, view([16]), view([4, 4], offset=-1, mask=None)))), P_L1 + ".arg.st.views[1]", "outside the 16 elements of view 0"),

  # shapes and dtypes between nodes
  ("elementwise_shape_mismatch", b((L2, ld(2, view([4, 2])))), P_ADD, "ADD needs equal shapes, got (4, 4) vs (4, 2)"),
  ("elementwise_dim_count_mismatch", b((L2, ld(2, view([16])))), P_ADD, "different numbers of dims [1, 2]"),
  ("where_branch_shape_mismatch", doc(store(op("WHERE", op("CMPLT", ld(1), ld(2)), ld(1), ld(3, view([4, 1]))))),
   P_ADD, "WHERE needs equal shapes"),
  ("store_shape_differs_from_source", b((("ast", "arg", "st"), st_(view([4, 2])))), "ast.arg.st", "STORE shape (4, 2) differs from its source's (4, 4)"),
  ("store_shape_not_the_reduced_shape", doc(store(reduce_(ld(1), [1]))), "ast.arg.st", "STORE shape (4, 4) differs from its source's (4, 1)"),
  ("store_dtype_differs_from_source", b((("ast", "arg", "dtype"), "float16")), "ast.arg.dtype", "STORE of float32 into a float16 buffer"),
  ("binary_dtypes_differ", b((L2 + ("arg", "dtype"), "int32")), P_ADD, "ADD needs equal dtypes, got float32, int32"),
  ("where_branch_dtypes_differ", doc(store(op("WHERE", op("CMPLT", ld(1), ld(2)), ld(1), ld(3, dtype="float16")))),
   P_ADD, "WHERE needs equal dtypes, got float32, float16"),
  ("store_through_two_views", b((("ast", "arg", "st"), st_(view([16]), view([4, 4])))), "ast.arg.st", "exactly one view"),
  ("store_writes_an_element_twice_stride_0", b((("ast", "arg", "st"), st_(view([4, 4], [4, 0])))), "ast.arg.st", "write the same element"),
  ("store_writes_an_element_twice_overlap", b((("ast", "arg", "st"), st_(view([4, 4], [2, 1])))), "ast.arg.st", "write the same element"),
  ("store_writes_twice_with_negative_stride", b((("ast", "arg", "st"), st_(view([4, 4], [-1, 1], 3)))), "ast.arg.st", "write the same element"),

  # REDUCE
  ("two_different_reduces", doc(store(op("ADD", reduce_(ld(1), [1]), reduce_(ld(1), [1], "MAX")), view([4, 1]))),
   P_ADD + ".src[1]", "a second REDUCE (the first is at ast.src[0].src[0])"),
  ("two_reduces_over_different_axes", doc(store(op("ADD", reduce_(ld(1), [1]), op("NEG", reduce_(ld(2, view([4, 4], [4, 1])), [1]))), view([4, 1]))),
   P_ADD + ".src[1].src[0]", "a second REDUCE"),
  ("reduce_axis_out_of_range", doc(store(reduce_(ld(1), [2]), view([4, 1]))), P_ADD + ".arg.axis[0]", "2 outside [0, 1]"),
  ("reduce_axis_negative", doc(store(reduce_(ld(1), [-1]), view([4, 1]))), P_ADD + ".arg.axis[0]", "-1 outside [0, 1]"),
  ("reduce_axis_repeated", doc(store(reduce_(ld(1), [1, 1]), view([4, 1]))), P_ADD + ".arg.axis", "repeated axis"),
  ("reduce_axis_empty", doc(store(reduce_(ld(1), []))), P_ADD + ".arg.axis", "non-empty array of axes"),
  ("reduce_axis_not_a_list", doc(store(reduce_(ld(1), 1), view([4, 1]))), P_ADD + ".arg.axis", "non-empty array of axes"),
  ("reduce_axis_is_a_bool", doc(store(reduce_(ld(1), [True]), view([4, 1]))), P_ADD + ".arg.axis[0]", "got boolean"),
  ("reduce_unknown_fn", doc(store(reduce_(ld(1), [1], "MIN"), view([4, 1]))), P_ADD + ".arg.fn", "expected SUM or MAX, got 'MIN'"),
  ("reduce_missing_arg", doc(store(op("REDUCE", ld(1)), view([4, 1]))), P_ADD + ".arg", "expected an object, got null"),
  ("reduce_on_bool", doc(store(reduce_(op("CMPLT", ld(1), ld(2)), [1]), view([4, 1]), dtype="bool")), P_ADD, "REDUCE is not defined on bool"),

  # dtype rules of the ops
  ("where_condition_not_bool", doc(store(op("WHERE", ld(1), ld(1), ld(2)))), P_ADD + ".src[0]", "WHERE's condition must be bool, got float32"),
  ("exp2_on_int", doc(store(op("EXP2", ld(1, dtype="int32")), dtype="int32")), P_ADD, "EXP2 needs a float dtype, got int32"),
  ("sqrt_on_bool", doc(store(op("SQRT", ld(1, dtype="bool")), dtype="bool")), P_ADD, "SQRT needs a float dtype, got bool"),
  ("sub_on_bool", doc(store(op("SUB", op("CMPLT", ld(1), ld(2)), op("CMPEQ", ld(1), ld(2))), dtype="bool")), P_ADD, "SUB is not defined on bool"),
  ("mod_on_bool", doc(store(op("MOD", ld(1, dtype="bool"), ld(2, dtype="bool")), dtype="bool")), P_ADD, "MOD is not defined on bool"),
  ("xor_on_float", b((ADD + ("op",), "XOR")), P_ADD, "XOR is not defined on float32"),
  ("bitcast_size_mismatch", doc(store(op("CAST", ld(1), arg={"dtype": "int64", "bitcast": True}), dtype="int64")),
   P_ADD + ".arg", "bitcast from float32 to int64 needs equal sizes"),
  ("bitcast_to_bool", doc(store(op("CAST", ld(1, dtype="int8"), arg={"dtype": "bool", "bitcast": True}), dtype="bool")),
   P_ADD + ".arg", "no bool"),
  ("bitcast_not_a_boolean", doc(store(op("CAST", ld(1), arg={"dtype": "int32", "bitcast": 1}), dtype="int32")),
   P_ADD + ".arg.bitcast", "expected a boolean, got integer"),

  # buffer numbering
  ("buffer_numbering_gap", b((L2 + ("arg", "buf"), 3)), "ast", "buffer 2 is missing"),
  ("load_of_buffer_0", b((L1 + ("arg", "buf"), 0)), P_L1 + ".arg.buf", "buffer 0 is the output"),
  ("store_to_buffer_1", b((("ast", "arg", "buf"), 1)), "ast.arg.buf", "1 outside [0, 0]"),
  ("negative_buffer", b((L1 + ("arg", "buf"), -1)), P_L1 + ".arg.buf", "-1 outside [0, 63]"),
  ("one_buffer_two_dtypes", b((L2, ld(1, dtype="float16"))), P_L2 + ".arg.dtype", "buffer 1 is float32 at ast.src[0].src[0].arg, float16 here"),
  ("more_than_64_buffers", add_chain_of_buffers(64), P_ADD + ".src[1].arg.buf", "64 outside [0, 63]"),

  # the index proof
  ("negative_index_via_negative_stride", with_load1(strides=[-4, 1]), P_V1, "may reach index -12 of buffer 1"),
  ("negative_index_via_negative_offset", with_load1(offset=-1), P_V1, "may reach index -1 of buffer 1"),
  ("negative_index_via_mask_uncovering_padding", with_load1(strides=[4, 1], offset=-5, mask=[[1, 4], [0, 4]]), P_V1, "may reach index -1 of buffer 1"),
  ("negative_index_via_symbolic_offset", with_offset("4-start_pos"), P_V1, "may reach index -12 of buffer 1"),
  ("negative_index_in_the_output", b((("ast", "arg", "st"), st_(view([4, 4], offset=-3)))), "ast.arg.st.views[0]", "may reach index -3 of buffer 0"),
  ("negative_index_through_two_views", b((L1, ld(1, view([16], offset=-1), view([4, 4])))), P_V1, "may reach index -1 of buffer 1"),
  ("index_past_the_span_limit", with_load1(strides=[2**31, 1]), P_V1, "more than the limit of 2147483648 elements"),
  ("span_limit_over_two_reads_of_one_buffer", b((L2, ld(1, view([4, 4], offset=2**31)))),
   P_L2 + ".arg.st.views[0]", "buffer 1 is reached over indices [0, 2147483663]"),

  # symbolic strings
  ("symbolic_syntax_error", with_offset("start_pos+"), P_V1 + ".offset", "bad symbolic int 'start_pos+'"),
  ("symbolic_unbalanced_parens", with_offset("(start_pos+1"), P_V1 + ".offset", "missing ')'"),
  ("symbolic_eval_injection", with_offset("__import__('os').system('true')"), P_V1 + ".offset", "bad symbolic int"),
  ("symbolic_builtin_name", with_offset("len"), P_V1 + ".offset", "undeclared variable 'len'"),
  ("symbolic_attribute_access", with_offset("start_pos.real"), P_V1 + ".offset", "unexpected character '.'"),
  ("symbolic_division_by_zero", with_offset("4//0"), P_V1 + ".offset", "by zero"),
  ("symbolic_modulo_by_zero", with_offset("start_pos%0"), P_V1 + ".offset", "by zero"),
  ("symbolic_undeclared_variable", with_offset("n+1"), P_V1 + ".offset", "undeclared variable 'n'"),
  ("symbolic_undeclared_without_vars", with_offset("start_pos", vars=None), P_V1 + ".offset", "undeclared variable 'start_pos'"),
  ("symbolic_division_by_a_variable", with_offset("64//start_pos"), P_V1 + ".offset", "by a symbolic value"),
  ("symbolic_empty_string", with_offset(""), P_V1 + ".offset", "empty expression"),
  ("symbolic_float_literal", with_offset("1.5"), P_V1 + ".offset", "unexpected character '.'"),
  ("symbolic_single_slash", with_offset("8/2"), P_V1 + ".offset", "unexpected character '/'"),
  ("symbolic_too_long", with_offset("+".join(["1"] * 200)), P_V1 + ".offset", "longer than 256"),
  ("symbolic_nested_too_deep", with_offset("(" * 40 + "1" + ")" * 40), P_V1 + ".offset", "nested deeper"),
  ("symbolic_literal_too_large", with_offset("9" * 30), P_V1 + ".offset", "too large"),
  ("symbolic_value_too_large", with_offset("4611686018427387904*4"), P_V1 + ".offset", "out of range"),

  # variables
  ("vars_not_a_list", doc(store(op("ADD", ld(1), ld(2))), vars={"start_pos": [1, 16]}), "vars", "expected an array, got object"),
  ("var_not_an_object", doc(store(op("ADD", ld(1), ld(2))), vars=["start_pos"]), "vars[0]", "expected an object, got string"),
  ("var_declared_twice", doc(store(op("ADD", ld(1), ld(2))), vars=SP + [{"name": "start_pos", "min": 2, "max": 3}]), "vars[1].name", "declared twice"),
  ("var_min_above_max", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": "n", "min": 5, "max": 2}]), "vars[0]", "min 5 > max 2"),
  ("var_name_with_a_space", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": "start pos", "min": 1, "max": 2}]), "vars[0].name", "expected an identifier"),
  ("var_name_starts_with_a_digit", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": "1n", "min": 1, "max": 2}]), "vars[0].name", "expected an identifier"),
  ("var_name_with_an_operator", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": "n+1", "min": 1, "max": 2}]), "vars[0].name", "expected an identifier"),
  ("var_name_empty", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": "", "min": 1, "max": 2}]), "vars[0].name", "expected an identifier"),
  ("var_name_reserved_underscore", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": "_p0", "min": 0, "max": 3}]), "vars[0].name", "expected an identifier"),
  ("var_name_not_a_string", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": 1, "min": 1, "max": 2}]), "vars[0].name", "expected an identifier"),
  ("var_missing_max", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": "n", "min": 1}]), "vars[0]", "missing key 'max'"),
  ("var_unknown_key", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": "n", "min": 1, "max": 2, "step": 1}]), "vars[0]", "unknown key 'step'"),
  ("var_bound_is_a_float", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": "n", "min": 1.0, "max": 2}]), "vars[0].min", "expected an integer, got number"),
  ("var_bound_past_int32", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": "n", "min": 1, "max": 2**31}]), "vars[0].max", "outside [-2147483648, 2147483647]"),
  ("more_than_16_vars", doc(store(op("ADD", ld(1), ld(2))), vars=[{"name": f"v{i}", "min": 1, "max": 2} for i in range(17)]), "vars", "more than 16 variables"),

  # limits and hostile sizes
  ("more_than_4096_nodes", balanced_add_tree(13), P_ADD + ".src[0]" + ".src[1]" * 11, "more than 4096 nodes"),
  ("more_than_16_dims", doc(store(op("ADD", ld(1, view([1] * 17)), ld(2, view([1] * 17))), view([1] * 17))),
   P_V1 + ".shape", "17 dims, more than the limit of 16"),
  ("stride_10_to_the_30", with_load1(strides=[10**30, 1]), P_V1 + ".strides[0]", "exceeds 1099511627776 in magnitude"),
  ("offset_past_2_to_the_40", with_load1(offset=2**40 + 1), P_V1 + ".offset", "exceeds 1099511627776 in magnitude"),
  ("dim_past_the_element_limit", with_load1(shape=[2**31 + 1, 4], strides=[0, 1]), P_V1 + ".shape[0]", "exceeds 2147483648"),
  ("neg_chain_300_deep", neg_chain(300), "ast" + ".src[0]" * 257, "nested deeper than 256"),
  ("format_is_a_5000_digit_int", b((("format",), 10**5000)), "format", "expected 'tunesvc.kernel/1'"),
  ("dtype_is_a_100000_deep_list", b((L1 + ("arg", "dtype"), deep_list(100000))), P_L1 + ".arg.dtype", "unknown dtype"),
  ("op_is_a_5000_digit_int", b((ADD + ("op",), -10**5000)), P_ADD + ".op", "unknown op"),

  # CONST values
  ("const_fractional_val_for_int", doc(store(op("ADD", ld(1, dtype="int32"), const(2.5, dtype="int32")), dtype="int32")),
   P_L2 + ".arg.val", "2.5 is not an integer for int32"),
  ("const_inf_for_int", doc(store(op("ADD", ld(1, dtype="int32"), const("inf", dtype="int32")), dtype="int32")), P_L2 + ".arg.val", "expected a number, got 'inf'"),
  ("const_val_numeric_string", doc(store(op("ADD", ld(1), const("1.5")))), P_L2 + ".arg.val", "expected a number, got '1.5'"),
  ("const_val_null", doc(store(op("ADD", ld(1), const(None)))), P_L2 + ".arg.val", "expected a number, got null"),
  ("const_val_bool_for_float", doc(store(op("ADD", ld(1), const(True)))), P_L2 + ".arg.val", "expected a number, got boolean"),
  ("const_val_2_for_bool", doc(store(op("CMPEQ", ld(1, dtype="bool"), const(2, dtype="bool")), dtype="bool")), P_L2 + ".arg.val", "expected a boolean for bool"),
  ("const_int_past_64_bits", doc(store(op("ADD", ld(1, dtype="int64"), const(2**64, dtype="int64")), dtype="int64")),
   P_L2 + ".arg.val", "outside the 64-bit range"),
  ("const_missing_st", b((L2, {"op": "CONST", "arg": {"val": 1.0, "dtype": "float32"}})), P_L2 + ".arg", "missing key 'st'"),

  # JSON text (via loads)
  ("text_not_json", Text('{"format": "tunesvc.kernel/1", ast: {}}'), "$", "not valid JSON"),
  ("text_truncated", Text(BASE_TEXT[:-3]), "$", "not valid JSON"),
  ("text_trailing_garbage", Text(BASE_TEXT + " x"), "$", "not valid JSON"),
  ("text_empty", Text(""), "$", "not valid JSON"),
  ("text_invalid_utf8", b'{"format": "\xff"}', "$", "not valid JSON"),
  ("text_top_level_array", Text("[" + BASE_TEXT + "]"), "$", "expected an object, got array"),
  ("text_nan_literal", text_with_val("NaN"), "$", "NaN is not JSON"),
  ("text_infinity_literal", text_with_val("Infinity"), "$", "Infinity is not JSON"),
  ("text_minus_infinity_literal", text_with_val("-Infinity"), "$", "-Infinity is not JSON"),
  ("text_5000_digit_int", Text(BASE_TEXT.replace('"offset": 0', '"offset": 1' + "0" * 5000, 1)), "$", "not valid JSON"),
  ("text_100000_deep_array", Text('{"format": "tunesvc.kernel/1", "ast": ' + "[" * 100000 + "]" * 100000 + "}"), "$", "nested too deeply"),
  ("text_int_where_stride_expected_via_text", Text(BASE_TEXT.replace('"strides": [4, 1]', '"strides": [4, 1e0]', 1)),
   "ast.arg.st.views[0].strides[1]", "got number"),  # the STORE view comes first in the text; its arg is checked after its source
]

def _id(case): return case[0]

def _reject(x):
  if isinstance(x, (Text, bytes)): return loads(x)
  return load(x)


def test_the_table_has_at_least_40_distinct_cases():
  ids = [c[0] for c in CASES]
  assert len(ids) >= 40 and len(set(ids)) == len(ids)
  def text(x):
    if isinstance(x, (Text, bytes)): return repr(x)
    try: return json.dumps(x)
    except (ValueError, RecursionError): return repr(id(x))  # a 5000-digit int, a 100000-deep list: unique anyway
  texts = [text(c[1]) for c in CASES]
  assert len(set(texts)) == len(texts), "two cases are the same document"


@pytest.mark.parametrize("case_id,document,path,message", CASES, ids=[c[0] for c in CASES])
def test_malformed_document_is_rejected_at_its_json_path(case_id, document, path, message):
  with pytest.raises(KernelValidationError) as e: _reject(document)
  assert (e.value.path, message in e.value.message) == (path, True), f"got {e.value.path}: {e.value.message}"
  assert str(e.value).startswith(path + ": ")


def test_base_documents_of_the_table_are_valid():
  """Every case is one change away from something valid: the builders themselves produce valid kernels."""
  for d in (base(), with_offset("start_pos"), with_load1(offset=3), doc(store(reduce_(ld(1), [1]), view([4, 1]))),
            doc(store(op("WHERE", op("CMPLT", ld(1), ld(2)), ld(1), ld(3)))), add_chain_of_buffers(63), neg_chain(250),
            balanced_add_tree(12), doc(store(op("ADD", ld(1, dtype="int32"), const(2.0, dtype="int32")), dtype="int32")),
            doc(store(op("CAST", ld(1), arg={"dtype": "int32", "bitcast": True}), dtype="int32")),
            b((L2, ld(1, view([4, 4], offset=2**31 - 32)))), with_load1(strides=[4, 1], offset=-5, mask=[[1, 4], [1, 4]])):
    load(d)
  for d in VALID: load(d)  # the starting points of the random mutations below
  loads(BASE_TEXT)
  loads(text_with_val("1e400"))  # a float literal past the range is inf, not a NaN/Infinity literal


# ---------------------------------------------------------------- random mutations: KernelValidationError or success, nothing else

VALID = [
  base(),
  with_offset("start_pos*2"),
  doc(store(reduce_(op("MUL", ld(1, view([4, 4, 8], [8, 0, 1])), ld(2, view([4, 4, 8], [0, 8, 1]))), [2]), view([4, 4, 1]))),
  doc(store(op("ADD", ld(1, dtype="int16"), const(3, dtype="int16")), dtype="int16")),
  doc(store(op("WHERE", op("CMPLT", ld(1), const(2)), op("CAST", ld(2, dtype="int32"), arg={"dtype": "float32", "bitcast": False}),
               op("EXP2", ld(1, view([4, 4], [1, 4], 0, [[0, 4], [1, 4]])))))),
  doc(store(ld(1, view([6, 6], [4, 1], -5, [[1, 5], [1, 5]]), view([3, 12], [12, 1]), view([6, 6])), view([6, 6]))),
  doc(store(op("ADD", ld(1, view(["(start_pos+1)", 4], [4, 1], 0, [[0, "start_pos"], [0, 4]])),
               ld(2, view(["(start_pos+1)", 4], [0, 1], 0, [["start_pos", "start_pos+1"], [0, 4]]))), view(["(start_pos+1)", 4])), vars=SP),
]

def _positions(x, path=()):
  yield path
  if isinstance(x, dict):
    for k, v in x.items(): yield from _positions(v, path + (k,))
  elif isinstance(x, list):
    for i, v in enumerate(x): yield from _positions(v, path + (i,))

def _get(x, path):
  for p in path: x = x[p]
  return x

KEYS = ["op", "src", "arg", "buf", "dtype", "st", "views", "shape", "strides", "offset", "mask", "val", "fn", "axis", "bitcast",
        "name", "min", "max", "format", "vars", "ast"]
SCALARS = st.one_of(
  st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([0, 1, -1, 2**31, 2**40 + 1, 10**30]),
  st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
  st.sampled_from(["start_pos", "start_pos+1", "(start_pos*4)//2", "start_pos%3", "-start_pos", "inf", "-inf", "nan", "float32",
                   "int8", "bool", "uint64", "bfloat16", "ADD", "WHERE", "REDUCE", "CAST", "SUM", "MAX", FORMAT, "1//0", "x"]))
JSON = st.recursive(SCALARS, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), c, max_size=4),
                    max_leaves=8)

def _field(path) -> str:
  """The key a position sits under (list positions take their list's key): views entries are many, `val` is one."""
  for p in reversed(path):
    if isinstance(p, str): return p
  return "$"

def _pick(data, paths, label):
  """A position, drawn field first so that rare fields (val, fn, bitcast, min) are hit as often as strides."""
  by_field: dict = {}
  for p in paths: by_field.setdefault(_field(p), []).append(p)
  return data.draw(st.sampled_from(by_field[data.draw(st.sampled_from(sorted(by_field)), label=label + " field")]), label=label)

def _mutate(d, data):
  positions = list(_positions(d))
  path = _pick(data, positions, "path")
  kind = data.draw(st.sampled_from(["drop", "replace", "replace", "dup_src", "drop_src", "nudge_int", "nudge_int", "nudge_int"]), label="kind")
  if kind == "replace" or (kind == "drop" and not path):
    new = data.draw(JSON, label="value")
    if not path: return new
    _get(d, path[:-1])[path[-1]] = new
  elif kind == "drop":
    del _get(d, path[:-1])[path[-1]]
  elif kind in ("dup_src", "drop_src"):
    lists = [p for p in positions if p and p[-1] == "src" and isinstance(_get(d, p), list) and _get(d, p)]
    if lists:
      srcs = _get(d, data.draw(st.sampled_from(lists), label="src"))
      i = data.draw(st.integers(0, len(srcs) - 1), label="i")
      if kind == "dup_src": srcs.insert(i, copy.deepcopy(srcs[i]))
      else: del srcs[i]
  else:
    ints = [p for p in positions if p and type(_get(d, p)) in (int, float)]
    if ints:
      p = _pick(data, ints, "number")
      v = _get(d, p)
      big = [v * 10**400 + 1] if type(v) is int else [v * 1e300]  # an int past the float range; a float to inf
      _get(d, p[:-1])[p[-1]] = data.draw(st.sampled_from([v + 1, v - 1, -v, v * 2**31, v * 10**12 + 1] + big), label="new")
  return d


@settings(suppress_health_check=[HealthCheck.too_slow])  # example count and deadline: conftest.py's profile (make test-exhaustive: 500)
@given(st.data())
def test_random_mutations_are_rejected_cleanly_or_load(data):
  d = copy.deepcopy(data.draw(st.sampled_from(VALID), label="base"))
  for _ in range(data.draw(st.integers(1, 3), label="n")): d = _mutate(d, data)
  try:
    kd = load(d)
  except KernelValidationError as e:
    kd = None
    assert isinstance(e.path, str) and e.path and isinstance(e.message, str) and e.message
    assert e.path == "$" or e.path.split(".")[0].split("[")[0] in ("ast", "vars", "format", "name"), e.path
  else:  # accepted: it must then round-trip like any valid kernel
    j = kd.to_json()
    k2 = load(j)
    assert k2.key == kd.key and k2.to_json() == j
  # the same document as JSON text: NaN/Infinity literals are refused, everything else agrees with load
  try: text = json.dumps(d)
  except (TypeError, ValueError): return
  try: kt = loads(text)
  except KernelValidationError: kt = None
  if kd is not None and not any(s in text for s in ("NaN", "Infinity")):
    assert kt is not None and kt.key == kd.key
  if kt is not None: assert kd is not None and kt.key == kd.key
