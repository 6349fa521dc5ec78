"""The Metal renderer, text only (nothing here compiles Metal): every op, cast and reduction of every dtype Metal has
renders, with Metal's kernel signature, address spaces and barriers; vectors and float64 are refused, not miswritten;
tensor cores as simdgroup matrices (their layout runs emulated on OpenCL in tests/test_tensor_cores.py)."""
import dataclasses
import pytest
import corner_kernels
from linearizer.builders import matmul, symbolic_sum
from linearizer.dtypes import DTYPES, float16, float32, float64
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower
from linearizer.options import LinearizerOptions
from linearizer.render_gpu import render_metal
from linearizer.tensor_cores import APPLE

OPTIONS = LinearizerOptions("METAL", local_size_max=1024, shared_max=32 << 10, vector_dtypes=())  # an Apple GPU's limits, no vectors
METAL_DTYPES = tuple(dt for dt in DTYPES.values() if dt != float64)


def metal(k, opts=(), options=OPTIONS) -> str: return render_metal(lower(Kernel(k, options).apply_opts(opts)))


def test_every_dtype_but_float64_renders_with_metal_types():
  kernels = {name: k for name, k in corner_kernels.KERNELS.items() if "float64" not in str(k.to_json())}
  kernels.update({f"cast_{n}": corner_kernels.cast_kernel(dt, METAL_DTYPES, float32) for n, dt in DTYPES.items() if dt in METAL_DTYPES})
  srcs = {name: metal(k, [Opt("LOCAL", 0, 8)]) for name, k in kernels.items()}
  assert len(srcs) >= 45 and all(s.count("[[buffer(") == s.count("device ") for s in srcs.values())
  assert "device half* data1 [[buffer(1)]]" in srcs["alu_float16"] and "float(half(" in srcs["alu_float16"]
  assert "bf2f(" in srcs["sum_bfloat16"] and "as_type<uint>(" in srcs["cast_bfloat16"] and "bf2f" not in srcs["alu_int8"]
  assert "long long" not in "".join(srcs.values()) and "(double)" not in "".join(srcs.values())


def test_kernel_signature_work_item_attributes_threadgroup_memory_and_variables():
  src = metal(matmul(16, 16, 64), [Opt("LOCAL", 0, 4), Opt("GROUPTOP", 0, 8)])
  assert "kernel void tunesvc_kernel(device float* data0 [[buffer(0)]]," in src
  assert "uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]])" in src
  assert "threadgroup float temp[" in src and "threadgroup_barrier(mem_flags::mem_threadgroup);" in src and "= lid.y;" in src
  assert "constant int& var_n [[buffer(2)]]" in metal(symbolic_sum(8, ("n", 1, 30)))


def test_vectors_and_float64_are_refused():
  with pytest.raises(ValueError, match="scalar lanes only"):
    metal(matmul(8, 8, 8), [Opt("UPCAST", 1, 4)], LinearizerOptions("METAL", shared_max=32 << 10))
  with pytest.raises(ValueError, match="no float64"): metal(corner_kernels.KERNELS["alu_float64"])


def test_tensor_cores_render_as_simdgroup_matrices_with_float2_accumulators():
  src = metal(matmul(32, 16, 32, dtype=float16, acc=float32), [Opt("TC", 0, 0), Opt("UPCAST", 0, 2)],
              dataclasses.replace(OPTIONS, tensor_cores=APPLE))
  assert "#include <metal_simdgroup_matrix>" in src and "simdgroup_half8x8 a; simdgroup_half8x8 b; simdgroup_float8x8 d;" in src
  assert src.count("float2 acc") == 2 and src.count("= simdgroup_8x8x8_f16(") == 2 and "simdgroup_multiply_accumulate(d, a, b, d);" in src
  assert "lanes<" not in src and "float2(((float)0x0.0p+0))" in src
