"""What the linearizer needs to know about a device: a small, picklable, hashable value, never the device itself."""
from __future__ import annotations
from dataclasses import dataclass, fields
from typing import Any
from linearizer.tensor_cores import BY_NAME, TensorCore


@dataclass(frozen=True)
class LinearizerOptions:
  device: str                                  # backend name: "CPU", "OPENCL", "CUDA", ...
  # memory hierarchy: GPU-style local (workgroup) dims and shared memory
  has_local: bool = True
  has_shared: bool = True
  # CPU-style parallelism: the kernel may split its outer loop over `threads` threads
  has_threads: bool = False
  # vectors: float4 loads/stores, and every width in float32 elements the ISA handles natively
  supports_float4: bool = True
  float_vector_widths: tuple[int, ...] = (4,)
  vector_dtypes: tuple[str, ...] = ("float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                                    "uint64")  # the dtypes whose lanes the renderer can vectorise
  # tensor-core descriptions the device offers (empty: none)
  tensor_cores: tuple[TensorCore, ...] = ()
  # launch limits: max global and local size per dimension (None: unlimited), shared bytes per workgroup
  global_max: tuple[int, ...] | None = None
  local_max: tuple[int, ...] | None = None
  local_size_max: int = 1024                   # work-items in one work-group
  shared_max: int = 0
  threads: int = 1
  # the widest vectors' FMAs run as two halves, one a cycle (AMD Zen 4's AVX-512), not at full width (Intel's AVX-512
  # cores issue two a cycle): the CPU matmul's register tile follows it (linearizer.heuristic.REGISTER_TILES)
  half_width_fma: bool = False
  # the rows a column sum's loop step reads (linearizer.heuristic._stream_rows), a property of the core's memory system,
  # not of its FMAs: one Zen 4 core sums 4096x4096's columns at 79% of the triad reading 2 rows a step, 1.09-1.13x faster
  # reading 8; Zen 3 (AVX2) and Intel's AVX-512 cores hold 109-115% and 132% of it at 2 (not measured at 8)
  column_sum_rows: int = 2

  # AVX-512's vectors of 16 floats, and with them 32 registers (AVX2's 8-float ones come with 16): the register budgets
  # of the CPU tiles (linearizer.heuristic, linearizer.lower) follow from it
  @property
  def avx512(self) -> bool: return max(self.float_vector_widths, default=4) >= 16

  # a tensor core travels as its name
  def to_json(self) -> dict[str, Any]:
    return {f.name: _lists(getattr(self, f.name)) for f in fields(self)} | {"tensor_cores": [t.name for t in self.tensor_cores]}
  @classmethod
  def from_json(cls, d: dict[str, Any]) -> LinearizerOptions:
    return cls(**{k: _tuples(v) for k, v in d.items()} | {"tensor_cores": tuple(BY_NAME[n] for n in d.get("tensor_cores", ()))})


# JSON has lists only; the dataclass keeps tuples so that it stays hashable
def _lists(x: Any) -> Any: return [_lists(v) for v in x] if isinstance(x, tuple) else x
def _tuples(x: Any) -> Any: return tuple(_tuples(v) for v in x) if isinstance(x, list) else x
