"""Beam search over schedules, a Strategy (search/strategy.py): it proposes, it is told the measurements.

Round 0 proposes the seeds (the hand-coded schedule, the unoptimised kernel, and any warm starts), which form the first
beam (the `beam` fastest where there are more). Each later round expands every beam member by every legal action (round
1 first tries the `extra` candidates: a warm start's variants, search/similar.py), skips schedules already proposed, and
keeps the `beam` fastest verified candidates of the round as the next beam. It ends when a round's best is less than
`min_improvement` faster than the previous round's, when nothing is left to try, or after max_rounds; a round that
measured only some of its children (a cost model's cut) and got no verified one first measures measure_top more, and
one that gained too little ends the search only after `patience` such rounds in a row. An action that made a schedule
`prune` times slower is not tried again on that schedule's descendants (the measured effect of an action predicts its
effect a few opts on; the unrolled ones among them cost the most to compile), THREAD excepted: its time depends on what
else keeps the other cores busy, which a busy machine changes from one timing to the next. The seeds compete
for the win but do not end the search: one-opt schedules rarely beat the hand-coded one, their descendants may. Ties
break by the order candidates were generated in, so a search is deterministic for given timings.
"""
from __future__ import annotations
from typing import Sequence
from linearizer.kernel import Kernel, Opt, OptOp
from search.actions import children
from search.result import Candidate, Status
from search.settings import StrategySettings


class BeamStrategy:
  def __init__(self, seeds: list[Kernel], actions: tuple[Opt, ...], s: StrategySettings, extra: Sequence[Kernel] = ()):
    self.actions, self.s, self.extra = actions, s, list(extra)
    self.order = {tuple(k.applied_opts): i for i, k in enumerate(seeds)}  # generation order: the tie-break
    self.round, self.beam, self.pending = 0, list(seeds), list(seeds)  # the pending: this round's, not proposed yet
    self.rest: list[Kernel] = []      # this round's children a cut left unmeasured (search/model_beam.py), best first
    self.partial, self.stale = False, 0  # whether this round was cut; rounds in a row without gain
    self.results: list[tuple[Kernel, Candidate]] = []                  # this round's
    self.last, self.done = float("inf"), False
    self.times: dict[tuple[Opt, ...], float] = {}                      # the fastest run of every schedule timed

  def propose(self, n: int) -> list[Kernel]:
    if not self.pending and not self.done: self._next_round()
    if self.done: return []
    n = len(self.pending) if self.round == 0 else max(0, n)
    out, self.pending = self.pending[:n], self.pending[n:]
    return out

  def observe(self, results: list[tuple[Kernel, Candidate]]) -> None: self.results += results

  def _next_round(self) -> None:
    self.times.update((tuple(k.applied_opts), c.min_s) for k, c in self.results if c.min_s)
    ok = sorted(((k, c) for k, c in self.results if c.status is Status.OK and c.verified),
                key=lambda p: (p[1].fastest_s, self.order[tuple(p[0].applied_opts)]))
    if self.round > 0:
      if not ok and self.rest:  # nothing measured verified (all failed, or slow): once, the round's next children
        self.pending, self.rest = self.rest[:self.s.measure_top], []
        return
      if not ok or ok[0][1].fastest_s >= self.last * (1 - self.s.min_improvement):  # this round's best barely beat the last's
        if not ok or not self.partial or self.stale >= self.s.patience:
          self.done = True
          return
        self.stale += 1  # a round cut to a few children may have missed its gain: its fastest go on (patience rounds in a row)
      else: self.stale, self.last = 0, ok[0][1].fastest_s
      self.beam = self._next_beam([k for k, _ in ok])
    elif len(self.beam) > self.s.beam:  # more seeds than the beam (warm starts): the fastest go on, the first seed if none ran
      self.beam = [k for k, _ in ok[:self.s.beam]] or self.beam[:1]
    # else the seeds are all expanded, measured well or not: they are where the search starts
    self.round, self.results = self.round + 1, []
    for c in [*(self.extra if self.round == 1 else ()), *(c for k in self.beam for c in children(k, self.actions) if not self._futile(c))]:
      if (opts := tuple(c.applied_opts)) not in self.order:
        self.order[opts] = len(self.order)
        self.pending.append(c)
    self.rest, self.partial = [], False
    self.done = not self.pending or self.round > self.s.max_rounds

  def _next_beam(self, ok: list[Kernel]) -> list[Kernel]:
    """The next beam from a round's verified children, fastest first."""
    return ok[:self.s.beam]

  def go_on_below(self) -> float:
    """The time this round's fastest verified child must beat for the search to go on from the round (and so use its
    beam): inf where it goes on whatever that child's time (round 1; a cut round with patience left)."""
    return self.last * (1 - self.s.min_improvement) if self.round > 0 and (not self.partial or self.stale >= self.s.patience) else float("inf")

  def _futile(self, k: Kernel) -> bool:
    """Whether k's last opt made one of its parent's ancestors (the unoptimised kernel included) `prune` times slower."""
    *parent, a = k.applied_opts
    return self.s.prune > 0 and a.op is not OptOp.THREAD and any((t := self.times.get(tuple(parent[:i]))) is not None and
                                    self.times.get((*parent[:i], a), 0.0) >= self.s.prune * t for i in range(len(parent)))
