"""Warm starts from kernels alike (linearizer/alike.py: the same op tree and views, other sizes). The winner of one is a
good first guess for another: the search seeds with the winners of the nearest tuned ones, re-fitted to the new sizes
(refit: an amount that does not fit takes the nearest that does), tries their tiles a step smaller and larger
(variants), and learns from what their searches measured (search/model_beam.py: a cost model's data before the search
has measured anything)."""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Sequence
from linearizer.ast import KernelAST
from linearizer.kernel import MAX_AMT, Kernel, Opt, OptError
from search.result import SearchResult

@dataclass(frozen=True)
class Tuned:
  """A kernel tuned before on this device: its AST and its search's result (the winner, every candidate measured)."""
  ast: KernelAST
  result: SearchResult


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
