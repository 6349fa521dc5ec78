"""Beam search over schedules, apart from how candidates are measured.

Round 0 measures the seeds (the hand-coded schedule and the unoptimised kernel), which form the first beam. Each later
round expands every beam member by every legal action, skips schedules already seen, measures the new ones, and keeps
the `width` fastest verified candidates of the round as the next beam. It stops when a round's best is less than
`min_improvement` faster than the previous round's, when nothing is left to try, or on the budget. The seeds compete
for the win but do not end the search: one-opt schedules rarely beat the hand-coded one, their descendants may. Ties break by the order candidates were generated
in, so a search is deterministic for given timings.
"""
from __future__ import annotations
import time
from dataclasses import dataclass
from typing import Callable, Optional
from linearizer.kernel import Kernel, Opt
from search.actions import children
from search.result import OK, Candidate

# measure(kernels, round, limit, deadline) -> (kernel, candidate) for those it measured, at most `limit`, stopping at
# `deadline` (time.monotonic()); kernels whose source duplicates an earlier candidate's are left out
Measure = Callable[[list[Kernel], int, int, float], list[tuple[Kernel, Candidate]]]


@dataclass(frozen=True)
class BeamSettings:
  width: int = 4
  min_improvement: float = 0.01         # a round that gains less than this share ends the search
  budget_candidates: Optional[int] = None
  budget_s: Optional[float] = None
  max_rounds: int = 32


def beam_search(seeds: list[Kernel], actions: tuple[Opt, ...], measure: Measure, s: BeamSettings,
                start: Optional[float] = None) -> list[tuple[Kernel, Candidate]]:
  """Every (kernel, candidate) measured, in measuring order."""
  start = time.monotonic() if start is None else start
  deadline = start + s.budget_s if s.budget_s is not None else float("inf")
  order = {tuple(k.applied_opts): i for i, k in enumerate(seeds)}  # generation order: the tie-break
  def ranked(pairs):
    ok = [(k, c) for k, c in pairs if c.status == OK and c.verified]
    return sorted(ok, key=lambda p: (p[1].min_s, order[tuple(p[0].applied_opts)]))
  measured: list[tuple[Kernel, Candidate]] = []
  def left() -> int: return s.budget_candidates - len(measured) if s.budget_candidates is not None else 1 << 62

  measured += measure(seeds, 0, len(seeds), float("inf"))  # always, whatever the budget: every search has a baseline
  beam, last = seeds, float("inf")  # every seed is expanded, measured well or not: they are where the search starts
  for rnd in range(1, s.max_rounds + 1):
    if left() <= 0 or time.monotonic() >= deadline: break
    kids = []
    for k in beam:
      for c in children(k, actions):
        if (opts := tuple(c.applied_opts)) not in order:
          order[opts] = len(order)
          kids.append(c)
    if not kids: break
    new = measure(kids, rnd, left(), deadline)
    measured += new
    if not (top := ranked(new)): break
    beam = [k for k, _ in top[:s.width]]
    if top[0][1].min_s >= last * (1 - s.min_improvement): break  # this round's best barely beat the last round's
    last = top[0][1].min_s
  return measured
