"""Kernels alike in all but their sizes -- the same op tree over the same view structure -- and the nearest of them.

Two kernels have one structure when their documents agree once every size is taken out: the ops, dtypes, buffers and
reduce axes as they are; each view by its number of dims, which strides are 0, 1, negative or other, whether it has a
mask and an offset (a matmul 512 and a matmul 640 agree; a matmul and its transpose do not); nearest: the sum over the
dims of |log2| of the size ratio. Functions of a kernel alone: the store indexes kernels by them (finding a claim's
kernels alike) and the search seeds from the winners of the nearest (search/similar.py)."""
from __future__ import annotations
import hashlib, json, math
from typing import Any, Iterable, Sequence, TypeVar
from linearizer.ast import KernelAST
from linearizer.symbolic import smax

T = TypeVar("T")


def _abstract(node: Any) -> Any:
  if isinstance(node, dict):
    if "views" in node:  # a ShapeTracker
      return [{"dims": len(v["shape"]), "mask": v["mask"] is not None, "offset": v["offset"] != 0,
               "strides": ["0" if s == 0 else "1" if s == 1 else "-" if isinstance(s, int) and s < 0 else "n" for s in v["strides"]]}
              for v in node["views"]]
    return {k: _abstract(v) for k, v in node.items() if k not in ("val", "name")}  # a CONST's value is no structure
  if isinstance(node, list): return [_abstract(x) for x in node]
  return node


def structure(ast: KernelAST) -> str:
  """The structure's hash: equal for kernels that differ only in their sizes (and constants)."""
  return hashlib.sha256(json.dumps(_abstract(ast.to_json()["ast"]), sort_keys=True).encode()).hexdigest()


def sizes(ast: KernelAST) -> list[int]:
  """The full shape (a variable at its largest)."""
  return [max(1, int(smax(s))) for s in ast.full_shape]


def distance(a: Sequence[int], b: Sequence[int]) -> float:
  """How far two full shapes of one structure are apart: the sum of |log2| of the dims' ratios (inf if the ranks differ)."""
  if len(a) != len(b): return math.inf
  return sum(abs(math.log2(x) - math.log2(y)) for x, y in zip(a, b))


def nearest(want: Sequence[int], tuned: Iterable[tuple[Sequence[int], T]], n: int = 3) -> list[T]:
  """The n tuned kernels' items (with their sizes) nearest to `want`, nearest first."""
  return [t for _, t in sorted(tuned, key=lambda t: distance(want, t[0]))[:n]]
