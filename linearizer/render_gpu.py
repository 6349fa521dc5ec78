"""The GPU languages of the C-style renderer (render_c.render_source): CUDA C++ (NVRTC), HIP (hipRTC, hipcc) and Metal
(text only: nothing here compiles it), each a Lang table with the reference semantics render_c spells out. float16 and
bfloat16 live in float registers and are rounded after every op, as the reference computes them; memory holds their
16 bits (__half and __nv_bfloat16 in CUDA, _Float16 and the bits of a bfloat16 in HIP, half and the bits in Metal).
C++ leaves signed overflow undefined, so int32/int64 + - * wrap through the unsigned type, as uint16 ones do (promoted
to int, 65535 * 65535 overflows). Contraction is off in the compiler (NVRTC --fmad=false, hipcc -ffp-contract=off): the
only fused ops are the linearizer's MULACCs, fma()."""
from __future__ import annotations
from typing import Any
from linearizer.lower import Program, UOps
from linearizer.render_c import Lang, render_source
from linearizer.tensor_cores import cuda_wmma, hip_wmma, metal_wmma

# CUDA and HIP vectors: N lanes of T aligned to their size, so that a load or store of a whole one at an aligned index
# is one instruction (ld.global.v4), and elsewhere lane by lane; every operator works lane by lane as the scalar op
# does, comparisons give bool lanes (a mask), and & with an int makes a mask's lanes 0/1 again.
LANES = """template <class T, int N> struct alignas(sizeof(T) * N) lanes { T v[N]; };
#define LANES_OP(op, R) template <class T, int N> __device__ inline lanes<R, N> operator op(lanes<T, N> a, lanes<T, N> b) { \\
  lanes<R, N> r; for (int i = 0; i < N; i++) r.v[i] = a.v[i] op b.v[i]; return r; }
LANES_OP(+, T) LANES_OP(-, T) LANES_OP(*, T) LANES_OP(/, T) LANES_OP(|, T) LANES_OP(<, bool) LANES_OP(>, bool) LANES_OP(==, bool) LANES_OP(!=, bool)
template <class T, int N> __device__ inline lanes<T, N> operator-(lanes<T, N> a) { for (int i = 0; i < N; i++) a.v[i] = -a.v[i]; return a; }
template <class T, int N> __device__ inline lanes<bool, N> operator!=(lanes<T, N> a, int b) { lanes<bool, N> r; for (int i = 0; i < N; i++) r.v[i] = a.v[i] != b; return r; }
template <int N> __device__ inline lanes<int, N> operator&(lanes<bool, N> a, int b) { lanes<int, N> r; for (int i = 0; i < N; i++) r.v[i] = a.v[i] & b; return r; }
template <class V, class T> __device__ inline V lanes_splat(T x) { V r; for (auto& l : r.v) l = x; return r; }
template <class V, class T, int N> __device__ inline V lanes_convert(lanes<T, N> x) { V r; for (int i = 0; i < N; i++) r.v[i] = x.v[i]; return r; }
template <class T, int N> __device__ inline lanes<T, N> lanes_select(lanes<bool, N> m, lanes<T, N> a, lanes<T, N> b) {
  for (int i = 0; i < N; i++) a.v[i] = m.v[i] ? a.v[i] : b.v[i];
  return a; }
template <class T, int N> __device__ inline lanes<T, N> lanes_fma(lanes<T, N> a, lanes<T, N> b, lanes<T, N> c) {
  for (int i = 0; i < N; i++) a.v[i] = fma(a.v[i], b.v[i], c.v[i]);
  return a; }
template <class V, class T> __device__ inline V lanes_load(const T* p) { V r; for (int i = 0; i < int(sizeof(V) / sizeof(T)); i++) r.v[i] = p[i]; return r; }
template <class T, int N> __device__ inline void lanes_store(T* p, lanes<T, N> x) { for (int i = 0; i < N; i++) p[i] = x.v[i]; }
"""

_CPP: dict[str, Any] = dict(  # what CUDA and HIP share
  kernel='extern "C" __global__ ', bounds="__launch_bounds__({n}) ", ids={"group": "blockIdx.{xyz}", "local": "threadIdx.{xyz}"},
  barrier="__syncthreads();", shared="__shared__ __attribute__((aligned(16))) ",  # the widest vector: read whole from there
  restrict="__restrict__", types={"float16": "float", "bfloat16": "float"}, suffix={"int64": "LL", "uint64": "ULL", "uint32": "U"},
  wrap={"int32": "unsigned int", "int64": "unsigned long long", "uint16": "unsigned int"}, fma="fma{f}({0},{1},{2})", vectors=LANES,
  declare_vectors=False,
  vtype="lanes<{t},{n}>", mtype="lanes<bool,{n}>", vbroadcast="lanes_splat<{vt}>({x})", vbuild="{vt}{{{{{xs}}}}}", vzero="{vt}{{}}",
  vload="lanes_load<{vt}>({p})", vstore="lanes_store({p}, {x});", vload_aligned="*(const {vt}*)({p})", vstore_aligned="*({vt}*)({p}) = {x};",
  select="lanes_select({m},{a},{b})", convert="lanes_convert<{vt}>({x})", vfma="lanes_fma({0},{1},{2})", gep="{x}.v[{i}]")

# CUDA: INFINITY and NAN are math.h's, which NVRTC lacks; the quiet NaN is the reference's. The fp16/bf16 headers only
# where a program uses the dtype (they are most of a small kernel's compile time). float64 -> bfloat16 rounds through
# float32, as the reference does; float64 -> float16 rounds once.
CUDA = Lang(
  prelude="""#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)
template <class D, class S> __device__ inline D bitcast(S s) { D d; memcpy(&d, &s, sizeof(D)); return d; }
""",
  needs={"float16": "#include <cuda_fp16.h>\n", "bfloat16": "#include <cuda_bf16.h>\n"},
  storage={"float16": "__half", "bfloat16": "__nv_bfloat16"},
  load={"float16": "__half2float({})", "bfloat16": "__bfloat162float({})"},
  store={"float16": "__float2half_rn({})", "bfloat16": "__float2bfloat16_rn({})"},
  narrow={"float16": "__half2float(__float2half_rn({}))", "bfloat16": "__bfloat162float(__float2bfloat16_rn({}))"},
  from_double={"float16": "__half2float(__double2half({}))"},
  bitcast="bitcast<{d}>({x})", wmma=cuda_wmma, **_CPP)

# HIP: clang's _Float16 for float16 (its conversions round to nearest even, from double once) and bfloat16 by hand as
# in OpenCL, so one source builds with hipRTC (ROCm >= 6) and with hipcc of any ROCm: their bfloat16 headers differ.
HIP = Lang(
  prelude="""#ifndef INFINITY
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#endif
""",
  needs={"bfloat16": """__device__ inline float bf2f(unsigned short b) { return __builtin_bit_cast(float, (unsigned)b << 16); }
__device__ inline unsigned short f2bf(float f) {  /* round to nearest even; NaN stays NaN */
  unsigned u = __builtin_bit_cast(unsigned, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
__device__ inline float bfround(float f) { return bf2f(f2bf(f)); }
"""},
  storage={"float16": "_Float16", "bfloat16": "unsigned short"},
  load={"float16": "(float)({})", "bfloat16": "bf2f({})"}, store={"float16": "(_Float16)({})", "bfloat16": "f2bf({})"},
  narrow={"float16": "(float)(_Float16)({})", "bfloat16": "bfround({})"}, from_double={"float16": "(float)(_Float16)({})"},
  bitcast="__builtin_bit_cast({d}, {x})", wmma=hip_wmma, **_CPP)

# Metal: no float64 (casts compare and EXP2/LOG2/SIN compute in float, exact for every float32 and narrower source),
# work-item indices as attributed arguments, every argument bound to its buffer index. `kernel` is a keyword.
METAL = Lang(
  prelude="#include <metal_stdlib>\nusing namespace metal;\n",
  needs={"bfloat16": """float bf2f(ushort b) { return as_type<float>((uint)b << 16); }
ushort f2bf(float f) {  /* round to nearest even; NaN stays NaN */
  uint u = as_type<uint>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
float bfround(float f) { return bf2f(f2bf(f)); }
"""},
  kernel="kernel ", symbol="tunesvc_{}", buffer="device ", restrict="", arg="{} [[buffer({i})]]", var_arg="constant int& {}",
  id_args="uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]",
  ids={"group": "gid.{xyz}", "local": "lid.{xyz}"}, barrier="threadgroup_barrier(mem_flags::mem_threadgroup);", shared="threadgroup ",
  types={"int8": "char", "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "int64": "long", "uint64": "ulong",
         "float16": "float", "bfloat16": "float"},
  storage={"float16": "half", "bfloat16": "ushort"}, load={"float16": "float({})", "bfloat16": "bf2f({})"},
  store={"float16": "half({})", "bfloat16": "f2bf({})"}, narrow={"float16": "float(half({}))", "bfloat16": "bfround({})"},
  suffix={"int64": "L", "uint64": "UL", "uint32": "U"}, wrap={"int32": "uint", "int64": "ulong", "uint16": "uint"},
  float_fn="", index="long", wide="float", bitcast="as_type<{d}>({x})", fma="fma({0},{1},{2})",
  declare_vectors=False, vtype="{t}{n}", vbroadcast="{vt}({x})", wmma=metal_wmma)  # vectors: a tensor core's float2 accumulators only


def render_cuda(prog: Program) -> str: return render_source(prog, CUDA)
def render_hip(prog: Program) -> str: return render_source(prog, HIP)

def render_metal(prog: Program) -> str:
  """Metal source; lanes stay scalars (lower with no vector_dtypes), but for a tensor core's accumulators, and float64 has
  no Metal type."""
  if any(u.vec > 1 and u.op not in (UOps.DEFINE_ACC, UOps.WMMA) for u in prog.uops):
    raise ValueError("Metal renders scalar lanes only: lower with vector_dtypes=()")
  if any(u.dtype is not None and u.dtype.name == "float64" for u in prog.uops): raise ValueError("Metal has no float64")
  return render_source(prog, METAL)
