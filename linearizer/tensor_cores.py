"""Tensor cores: warp-wide matrix multiply-accumulate instructions, D = A @ B + C over an M x N x K tile.

A description says how the tile's elements are spread over the warp's threads (lanes) and each thread's elements, bit by
bit: every coordinate of every operand is a binary number whose bits each come from one bit of the lane id ("l<b>") or
of the element's index in its thread's fragment ("e<b>"). That is exact for NVIDIA's mma fragments and lets the Kernel
lay its axes out by C's map while A's and B's loads alias the same lane and element ids through their own maps.

The renderers here are self-contained, each (TensorCore) -> (the device function, what the kernel must declare for it,
with {warps} for the work-group's warps, and the call's format, with {a} and {b} the fragments' rendered elements in
order, comma-separated, and {c} the accumulator, a float vector): CUDA's inline PTX, HIP's RDNA3 WMMA builtins, Metal's
simdgroup matrices, and an OpenCL C emulation of any of them with the same fragment semantics (the fragments through
local memory), which is how the layouts are checked on a machine without tensor cores."""
from __future__ import annotations
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class TensorCore:
  name: str                     # the device function's name
  instruction: str              # what computes it: the PTX instruction (CUDA), the builtin (HIP, Metal)
  dims: tuple[int, int, int]    # M, N, K
  dtype_in: str                 # A's and B's dtype
  dtype_out: str                # C's and D's: the accumulation
  threads: int                  # a warp
  # per operand, (row bits, column bits), low bit first: A is M x K, B is K x N, C (and D) M x N
  a: tuple[str, str]
  b: tuple[str, str]
  c: tuple[str, str]

  def elements(self, op: str) -> int: return 1 << max((int(s[1:]) + 1 for d in getattr(self, op) for s in d.split() if s[0] == "e"), default=0)
  @property
  def lane_bits(self) -> int: return self.threads.bit_length() - 1
  def runs(self) -> list[tuple[int, tuple[str, ...]]]:
    """C's coordinates' bits in runs of consecutive bits of both the coordinate and the lane id (or element index), in
    C's order, low bits first: (C's dim, the run's bits). Each run is one kernel axis."""
    out: list[tuple[int, tuple[str, ...]]] = []
    for d, bits in enumerate(self.c):
      for s in bits.split():
        if out and out[-1][0] == d and (p := out[-1][1][-1])[0] == s[0] and int(s[1:]) == int(p[1:]) + 1: out[-1] = (d, out[-1][1] + (s,))
        else: out.append((d, (s,)))
    return out
  def axes(self, kind: str) -> list[tuple[str, ...]]:
    """The runs of lane ("l") or element ("e") bits, outermost (highest bits) first: the order of their axes."""
    return sorted((r for _, r in self.runs() if r[0][0] == kind), key=lambda r: -int(r[0][1:]))

  def coord(self, op: str, dim: int, lane: dict, elem: int):
    """Operand op's coordinate dim (0: row, 1: column) of element `elem` held by the lane whose bits are `lane` (b -> a
    0/1 value, symbolic or not)."""
    out = 0
    for j, s in enumerate(getattr(self, op)[dim].split()): out = out + (lane[int(s[1:])] if s[0] == "l" else elem >> int(s[1:]) & 1) * (1 << j)
    return out


# mma.sync.aligned.m16n8k16.row.col (sm_80+), PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type":
# groupID = lane>>2 (bits l2-l4), threadID_in_group = lane%4 (l0-l1)
#   A: row = groupID + 8*((i>>1)&1)        col = 2*threadID_in_group + (i&1) + 8*(i>>2)
#   B: row = 2*threadID_in_group + (i&1) + 8*(i>>1)   col = groupID
#   C: row = groupID + 8*(i>>1)            col = 2*threadID_in_group + (i&1)
MMA_F16 = TensorCore("mma_m16n8k16_f16", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", dims=(16, 8, 16), dtype_in="float16",
                     dtype_out="float32", threads=32, a=("l2 l3 l4 e1", "e0 l0 l1 e2"), b=("e0 l0 l1 e1", "l2 l3 l4"), c=("l2 l3 l4 e1", "e0 l0 l1"))
MMA_BF16 = replace(MMA_F16, name="mma_m16n8k16_bf16", instruction="mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", dtype_in="bfloat16")
SM80 = (MMA_F16, MMA_BF16)  # what a CUDA device of compute capability 8.0 or later offers

# RDNA3 (gfx11) wave32 v_wmma_f32_16x16x16_{f16,bf16} (AMD's RDNA3 ISA guide; GPUOpen, "How to accelerate AI applications
# on RDNA 3 using WMMA"): A: row = lane%16, col = i (16 elements; lanes 16-31 hold copies of lanes 0-15, so no l4);
# B: row = i, col = lane%16; C and D, 8 floats: row = 2*i + lane/16, col = lane%16.
WMMA_F16 = TensorCore("wmma_16x16x16_f16", "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32", dims=(16, 16, 16), dtype_in="float16",
                      dtype_out="float32", threads=32, a=("l0 l1 l2 l3", "e0 e1 e2 e3"), b=("e0 e1 e2 e3", "l0 l1 l2 l3"),
                      c=("l4 e0 e1 e2", "l0 l1 l2 l3"))
WMMA_BF16 = replace(WMMA_F16, name="wmma_16x16x16_bf16", instruction="__builtin_amdgcn_wmma_f32_16x16x16_bf16_w32", dtype_in="bfloat16")
RDNA3 = (WMMA_F16, WMMA_BF16)

# Metal simdgroup_half8x8 x simdgroup_half8x8 + simdgroup_float8x8 (Apple GPUs from the M1/A14): every 8x8 matrix is held
# the same way, 2 elements a lane (thread_elements()): row = (lane/4 & 4) + (lane/2 % 4), col = (lane/4 & 2)*2 + (lane%2)*2
# + i, as MLX's steel MMA fragments read them (BaseMMAFrag::get_coord).
_SIMD8 = ("l1 l2 l4", "e0 l0 l3")
SIMDGROUP_F16 = TensorCore("simdgroup_8x8x8_f16", "simdgroup_multiply_accumulate", dims=(8, 8, 8), dtype_in="float16", dtype_out="float32",
                           threads=32, a=_SIMD8, b=_SIMD8, c=_SIMD8)
APPLE = (SIMDGROUP_F16,)
BY_NAME = {tc.name: tc for tc in SM80 + RDNA3 + APPLE}


# ---- CUDA: the device function and its call. A and B arrive as half / __nv_bfloat16 (a float register converts
# implicitly, and exactly: it holds a loaded half), C as a float4; pairs of elements pack into one 32-bit register, the
# lower-numbered element in the lower half, as the PTX ISA wants.
_CUDA_PAIR = {"float16": ("half", "__halves2half2", "half2"), "bfloat16": ("__nv_bfloat16", "__halves2bfloat162", "__nv_bfloat162")}

def cuda_wmma(tc: TensorCore) -> tuple[str, str, str]:
  """The __device__ function computing D = A @ B + C for one warp's fragments (needs cuda_fp16.h / cuda_bf16.h)."""
  t, pack, t2 = _CUDA_PAIR[tc.dtype_in]
  na, nb = tc.elements("a"), tc.elements("b")
  acc = "lanes<float,4>"  # the CUDA renderer's vector type (render_gpu.LANES): C and D are the kernel's accumulators
  args = ", ".join([f"{t} a{i}" for i in range(na)] + [f"{t} b{i}" for i in range(nb)] + [f"{acc} c"])
  regs = "\n".join(f"  {t2} {x}{j}h = {pack}({x}{2 * j}, {x}{2 * j + 1}); unsigned {x}{j}r = *(unsigned*)&{x}{j}h;"
                   for x, n in (("a", na), ("b", nb)) for j in range(n // 2))
  ops = [f"%{i}" for i in range(4 + na // 2 + nb // 2 + 4)]
  operands = [ops[:4], ops[4:4 + na // 2], ops[4 + na // 2:4 + na // 2 + nb // 2], ops[-4:]]  # D, A, B, C
  asm = f"{tc.instruction} " + ", ".join("{" + ", ".join(o) + "}" for o in operands) + ";"
  ins = ", ".join([f'"r"({x}{j}r)' for x, n in (("a", na), ("b", nb)) for j in range(n // 2)] + [f'"f"(c.v[{i}])' for i in range(4)])
  return (f"__device__ inline {acc} {tc.name}({args}) {{\n{regs}\n  {acc} d;\n"
          f'  asm volatile("{asm}" : {", ".join(f"{chr(34)}=f{chr(34)}(d.v[{i}])" for i in range(4))} : {ins});\n  return d;\n}}\n'), "", \
    tc.name + "({a}, {b}, {c})"


# ---- HIP (clang's builtins for gfx11): A and B arrive as floats holding float16 / bfloat16 values, converted exactly to
# the builtin's _Float16 lanes or bfloat16's bits; C as lanes<float,8>.
def hip_wmma(tc: TensorCore) -> tuple[str, str, str]:
  na, nb, nc = tc.elements("a"), tc.elements("b"), tc.elements("c")
  lane, to = ("_Float16", "(_Float16){}") if tc.dtype_in == "float16" else ("short", "(short)(__builtin_bit_cast(unsigned, {}) >> 16)")
  args = ", ".join([f"float a{i}" for i in range(na)] + [f"float b{i}" for i in range(nb)] + [f"lanes<float,{nc}> c"])
  frag = lambda x, n: "{" + ", ".join(to.format(f"{x}{i}") for i in range(n)) + "}"
  return (f"__device__ inline lanes<float,{nc}> {tc.name}({args}) {{\n"
          f"  typedef {lane} in_t __attribute__((ext_vector_type({na})));\n  typedef float acc_t __attribute__((ext_vector_type({nc})));\n"
          f"  in_t a = {frag('a', na)}, b = {frag('b', nb)};\n  acc_t d = {{{', '.join(f'c.v[{i}]' for i in range(nc))}}};\n"
          f"  d = {tc.instruction}(a, b, d);\n  lanes<float,{nc}> r;\n  for (int i = 0; i < {nc}; i++) r.v[i] = d[i];\n  return r;\n}}\n"), "", \
    tc.name + "({a}, {b}, {c})"


# ---- Metal: the fragments into simdgroup matrices' thread elements and back; C is a float2.
def metal_wmma(tc: TensorCore) -> tuple[str, str, str]:
  m, n, k = tc.dims
  na, nb, nc = tc.elements("a"), tc.elements("b"), tc.elements("c")
  args = ", ".join([f"float a{i}" for i in range(na)] + [f"float b{i}" for i in range(nb)] + [f"float{nc} c"])
  fill = lambda x, vals: "".join(f"  {x}.thread_elements()[{i}] = {v};\n" for i, v in enumerate(vals))
  return ("#include <metal_simdgroup_matrix>\n"
          f"float{nc} {tc.name}({args}) {{\n  simdgroup_half{m}x{k} a; simdgroup_half{k}x{n} b; simdgroup_float{m}x{n} d;\n"
          + fill("a", [f"half(a{i})" for i in range(na)]) + fill("b", [f"half(b{i})" for i in range(nb)]) + fill("d", [f"c[{i}]" for i in range(nc)])
          + f"  {tc.instruction}(d, a, b, d);\n"
          f"  return float{nc}({', '.join(f'd.thread_elements()[{i}]' for i in range(nc))});\n}}\n"), "", tc.name + "({a}, {b}, {c})"


# ---- OpenCL emulation: every lane writes its A and B elements at their (row, column) in the warp's tiles in local
# memory, and after a barrier computes its C elements from the whole tiles: float products of the inputs (exact for
# float16 and bfloat16) added to C in K order, fp32 throughout. Every work-item of the work-group must call it (it has
# barriers), as the kernel does: in uniform control flow. A warp is `threads` consecutive work-items, as on the GPU:
# the lanes are the kernel's innermost local dims.
SCRATCH = "wmma_scratch"

def scratch_floats(tc: TensorCore) -> int: return tc.dims[0] * tc.dims[2] + tc.dims[2] * tc.dims[1]

def _c_coord(tc: TensorCore, op: str, dim: int) -> str:
  """TensorCore.coord as a C expression of `lane` and the element index `i`."""
  return " + ".join(f"(({'lane' if s[0] == 'l' else 'i'}>>{s[1:]}&1)<<{j})" for j, s in enumerate(getattr(tc, op)[dim].split()))

def opencl_wmma(tc: TensorCore) -> tuple[str, str, str]:
  """An OpenCL C function with tc's fragment semantics: A, B and C as float vectors of their fragments, and the
  work-group's scratch (scratch_floats(tc) floats per warp) in local memory. Its two halves, the lane's writes and its
  C elements' sums, are functions of their own, not inlined: PoCL inlines only what has a barrier, and builds each
  region between barriers once per work-item loop, so a call's region is a call, not the unrolled tile (3-5x less
  PoCL build per kernel)."""
  m, n, k = tc.dims
  na, nb, nc = tc.elements("a"), tc.elements("b"), tc.elements("c")
  return (f"__attribute__((noinline)) void {tc.name}_put(float{na} a_, float{nb} b_, __local float* sa, int lane) {{\n"
          f"  __local float *sb = sa + {m * k};\n  float a[{na}], b[{nb}];\n  vstore{na}(a_, 0, a); vstore{nb}(b_, 0, b);\n"
          f"  for (int i = 0; i < {na}; i++) sa[({_c_coord(tc, 'a', 0)})*{k} + {_c_coord(tc, 'a', 1)}] = a[i];\n"
          f"  for (int i = 0; i < {nb}; i++) sb[({_c_coord(tc, 'b', 0)})*{n} + {_c_coord(tc, 'b', 1)}] = b[i];\n}}\n"
          f"__attribute__((noinline)) float{nc} {tc.name}_sum(float{nc} c_, __local float* sa, int lane) {{\n"
          f"  __local float *sb = sa + {m * k};\n  float c[{nc}];\n  vstore{nc}(c_, 0, c);\n"
          f"  for (int i = 0; i < {nc}; i++) {{\n    int r = {_c_coord(tc, 'c', 0)}, col = {_c_coord(tc, 'c', 1)};\n"
          f"    for (int kk = 0; kk < {k}; kk++) c[i] += sa[r*{k} + kk] * sb[kk*{n} + col];\n  }}\n  return vload{nc}(0, c);\n}}\n"
          f"float{nc} {tc.name}(float{na} a_, float{nb} b_, float{nc} c_, __local float* s) {{\n"
          f"  int id = get_local_id(0) + get_local_size(0)*(get_local_id(1) + get_local_size(1)*get_local_id(2));\n"
          f"  __local float *sa = s + id / {tc.threads} * {scratch_floats(tc)};\n"
          f"  {tc.name}_put(a_, b_, sa, id % {tc.threads});\n  barrier(CLK_LOCAL_MEM_FENCE);\n"
          f"  float{nc} d = {tc.name}_sum(c_, sa, id % {tc.threads});\n"
          f"  barrier(CLK_LOCAL_MEM_FENCE);  /* the scratch is written again by the next call */\n  return d;\n}}\n",
          f"__local float {SCRATCH}[{{warps}}*{scratch_floats(tc)}];", f"{tc.name}((float{na})({{a}}), (float{nb})({{b}}), {{c}}, {SCRATCH})")
