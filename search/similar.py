"""Kernels alike in all but their sizes -- the same op tree over the same view structure -- and the nearest of them.

Two kernels have one structure when their documents agree once every size is taken out: the ops, dtypes, buffers and
reduce axes as they are; each view by its number of dims, which strides are 0, 1, negative or other, whether it has a
mask and an offset (a matmul 512 and a matmul 640 agree; a matmul and its transpose do not). The winner of one is a
good first guess for another: the search seeds with the winners of the nearest tuned ones (nearest: the sum over the
dims of |log2| of the size ratio), re-fitted to the new sizes (refit: an amount that does not fit takes the nearest
that does), tries their tiles a step smaller and larger (variants), and learns from what their searches measured
(search/model_beam.py: a cost model's data before the search has measured anything)."""
from __future__ import annotations
import hashlib, json, math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence, TypeVar
from linearizer.ast import KernelAST
from linearizer.kernel import MAX_AMT, Kernel, Opt, OptError
from linearizer.symbolic import smax
from search.result import SearchResult

T = TypeVar("T")


@dataclass(frozen=True)
class Tuned:
  """A kernel tuned before on this device: its AST and its search's result (the winner, every candidate measured)."""
  ast: KernelAST
  result: SearchResult


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


def _amounts(o: Opt, actions: Sequence[Opt]) -> list[int]:
  """The amounts the action space has for o's op and axis, but the whole axis (0), ascending."""
  return sorted({a.amt for a in actions if a.op is o.op and a.axis == o.axis and a.amt})


def refit(root: Kernel, opts: Sequence, actions: Sequence[Opt]) -> Kernel:
  """root under `opts` re-fitted to its sizes: an opt illegal here takes the amount nearest to its own (in log2; a whole
  axis counts as MAX_AMT) that is legal for its op and axis among `actions`; the schedule ends at the first opt that
  has none (or is no opt)."""
  k = root
  for d in opts:
    try: o = d if isinstance(d, Opt) else Opt.from_json(d)
    except OptError: break
    want = math.log2(o.amt or MAX_AMT) if isinstance(o.amt, int) and o.amt >= 0 else None  # no amount: nothing to re-fit
    others = [] if want is None else sorted((n for n in _amounts(o, actions) if n != o.amt), key=lambda n: abs(math.log2(n) - want))
    for a in [o, *(Opt(o.op, o.axis, n) for n in others)]:
      try:
        k = k.copy().apply_opts([a])  # a copy each: a refused opt leaves no half-applied state
        break
      except OptError: continue
    else: break
  return k


def variants(root: Kernel, opts: Sequence, actions: Sequence[Opt]) -> list[Kernel]:
  """The re-fitted schedule with one opt's amount a step smaller or larger (the action space's next amounts for its op
  and axis), the opts after it re-fitted again: a neighbour's tile, halved or doubled, for sizes that want another.
  Each once, the re-fitted schedule itself left out."""
  base = refit(root, opts, actions).applied_opts
  seen, out = {tuple(base)}, []
  for i, o in enumerate(base):
    amts = _amounts(o, actions)
    if not o.amt or o.amt not in amts: continue
    j = amts.index(o.amt)
    for n in amts[max(0, j - 1):j] + amts[j + 1:j + 2]:
      k = refit(root, [*base[:i], Opt(o.op, o.axis, n), *base[i + 1:]], actions)
      if (key := tuple(k.applied_opts)) not in seen and len(key) > i:  # the changed opt itself applied
        seen.add(key)
        out.append(k)
  return out
