"""The dtype table of the kernel format."""
from __future__ import annotations
from dataclasses import dataclass
import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
  name: str
  np: np.dtype      # numpy storage and arithmetic type (bfloat16 through ml_dtypes)
  c: str            # C type name
  itemsize: int
  kind: str         # 'b' bool, 'i' signed, 'u' unsigned, 'f' float

  @property
  def is_float(self) -> bool: return self.kind == "f"
  @property
  def is_int(self) -> bool: return self.kind in "iu"
  @property
  def min(self) -> int | float:
    return False if self.kind == "b" else int(np.iinfo(self.np).min) if self.is_int else -float("inf")
  @property
  def max(self) -> int | float:
    return True if self.kind == "b" else int(np.iinfo(self.np).max) if self.is_int else float("inf")
  @property
  def acc(self) -> DType:
    """The dtype a reduction accumulates in: float32 for the narrow floats, else itself."""
    return float32 if self.name in ("float16", "bfloat16") else self
  def __repr__(self) -> str: return f"dtypes.{self.name}"


def _d(name: str, npt, c: str, kind: str) -> DType: return DType(name, np.dtype(npt), c, np.dtype(npt).itemsize, kind)

bool_ = _d("bool", np.bool_, "bool", "b")
int8, uint8 = _d("int8", np.int8, "signed char", "i"), _d("uint8", np.uint8, "unsigned char", "u")
int16, uint16 = _d("int16", np.int16, "short", "i"), _d("uint16", np.uint16, "unsigned short", "u")
int32, uint32 = _d("int32", np.int32, "int", "i"), _d("uint32", np.uint32, "unsigned int", "u")
int64, uint64 = _d("int64", np.int64, "long long", "i"), _d("uint64", np.uint64, "unsigned long long", "u")
float16, bfloat16 = _d("float16", np.float16, "half", "f"), _d("bfloat16", ml_dtypes.bfloat16, "__bf16", "f")
float32, float64 = _d("float32", np.float32, "float", "f"), _d("float64", np.float64, "double", "f")

def float_to_int_via(dst: DType) -> DType:
  """The signed type a float converts to an int through (the kernel format's rule, x86-64's): int64 for 8-byte targets
  and uint32, else int32; a value past its range gives its minimum, then the result wraps to `dst` (uint64 takes more)."""
  return int64 if dst.itemsize == 8 or dst.name == "uint32" else int32

DTYPES: dict[str, DType] = {d.name: d for d in (bool_, int8, uint8, int16, uint16, int32, uint32, int64, uint64,
                                                float16, bfloat16, float32, float64)}
