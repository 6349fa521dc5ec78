"""Beam search guided by a cost model, a Strategy (search/strategy.py) beside BeamStrategy: the same beam and the same
end, but each round's children (all featurised from their schedules, search/features.py schedule_features: ~0.2 ms a
child, against a lowering's ~5 and a compile's 10-100) are proposed in the order a cost model trained on the
measurements so far ranks them, fastest first, and with `cut` only measure_top of them and the best-ranked child of each
thread count, of each op on the beam's fastest member and of BLOCK those hold none of (lineages: the model cannot rank
across them; the one-core lineage keeps the beam's last slot while it verifies).
Before there is enough to learn from (MIN_TRAIN measurements: round 1, after the seeds alone) the round measures every
child, as the beam does: a broad sample of measure_top children there missed the best branch (sops_4927 kept its
baseline). Of the measure_top, explored() go not to the predicted fastest but to those the model may most underrate
(predicted log time less OPTIMISM spreads of its members, search/cost_model.py): a round's best child may lie beyond
what was measured, where trees do not extrapolate (a matmul's best branch ranked 7th of 24). A warm start brings data
(`prior`): what the searches of kernels alike measured (search/similar.py), each time relative to its own kernel's
hand-coded one, as this search's are to its own: then the model ranks from round 1. `fitted`: a model fitted before the
search (search/prior.py: on what full searches of other kernels measured on this CPU family, and on the warm start's
data) ranks every round instead, round 1 included, and the search's own measurements refit nothing (tens of rows beside
thousands; a fit costs ~0.3 s, as much as a small kernel's measurements). The children a round leaves unmeasured are its
`rest` (search/beam.py: a round with no verified child measures the next ones). The model only chooses what is
measured: the winner is measured and verified like any candidate, and the final check is the same."""
from __future__ import annotations
from typing import Iterator, Optional, Sequence
import numpy as np
from linearizer.kernel import Kernel, Opt, OptError, OptOp
from linearizer.options import LinearizerOptions
from search.beam import BeamStrategy
from search.cost_model import CostModel
from search.features import schedule_features
from search.result import Candidate
from search.settings import StrategySettings
from search.similar import Tuned


# measurements before the model ranks: fitted on the seeds alone (2-3 points) it ranked no better than chance
MIN_TRAIN = 16
OPTIMISM = 2.0   # spreads below its predicted log time an explored child may lie


def _threads(k: Kernel) -> int: return next((o.amt or 0 for o in k.applied_opts if o.op is OptOp.THREAD), 1)  # the parts its work is split in
def _alone(k: Kernel) -> bool: return _threads(k) == 1  # runs on one core

def kinds(k: Kernel, lead: tuple[Opt, ...]) -> set:
  """The lineages a child opens, of which a cut round measures one child each (lineages): the parts its work is split in
  (one core counted as one) and, where it is a child of the beam's fastest member `lead`, its last opt's op -- the member
  the search most likely goes on from, every op of which the beam measures (an UPCAST of the hand-coded schedule) -- and
  a BLOCK of any member: its worth lies in the caches, which the model ranks worst (QUIET, Zen 4, session 24: without it
  sops_2123 lost the beam's `UPCAST 1 16, THREAD 1 2, BLOCK 2 16` lineage, 0.43-0.93x)."""
  opts = k.applied_opts
  return {_threads(k), *([opts[-1].op] if opts and (tuple(opts[:-1]) == lead or opts[-1].op is OptOp.BLOCK) else [])}

def lineages(of: Sequence[set], ranked: Sequence[int], chosen: Sequence[int]) -> list[int]:
  """Which of a round's children a cut measures (indices; of[i]: child i's kinds): `chosen`, then, in rank order, the
  best-ranked child of every kind those hold none of.

  What a model of other kernels' timings cannot rank across: THREAD's worth depends on what keeps the other cores busy
  while the kernel runs, which it cannot know (beam's prune exempts THREAD for that reason), and a lineage's worth lies
  a few opts on, where its first child may be no faster than its siblings. A top of one thread count lost the others'
  lineages (sops_2123's winner threads its first axis 3 ways, a child a cut never measured: QUIET, Zen 4, 0.82x the
  beam's; session 14's model ranked its THREAD 3 above THREAD 2 and lost to the beam's THREAD 2, 0.78x); a top of a few
  ops lost the others' (sum_rows_4096, QUIET, session 23: the beam's winner upcast the hand-coded schedule's rows twice,
  the model's unrolled its reduce, 0.80x in one pair; 4 of the 10 kernels the model never brought within 95% of the
  beam-8 reference took a BLOCK the prior ranked 12th-15th among its parent's children). Replayed on the rounds of the
  shipped priors' recorded beam searches (~100 of ~30 children in each family, ranked by a model fitted on the other 39
  kernels' rows, measure_top 9): these kinds measure 11.5 children a round, and the round's best child or one within 5%
  of it is among them in 85% of the rounds on AVX-512 and 73% on AVX2, the worst round's best measured 2.6x and 3.3x the
  round's best. The 11 best-ranked: 75% and 66%, 5.9x and 4.8x; thread counts and a BLOCK (the cut before, ~10): 75% and
  62%, 4.2x and 4.3x; a child of every op on every member besides (~16): 89% and 77%, 2.6x and 3.3x, but its searches
  measured near the beam's candidates (BUSY: sum_rows_4096 89 against the beam's 117, mul_add_16m 93 where the beam
  measures 49-64)."""
  out, kept = list(chosen), set().union(*(of[i] for i in chosen))
  for i in ranked:
    if new := of[i] - kept: out, kept = out + [i], kept | new
  return out

def explored(top: int) -> int:
  """How many of a round's top measured children are explored: 1 of 3 to 7, 2 of 8 to 12, none of 1 or 2."""
  return (top + 2) // 5

Data = list[tuple[list[float], float]]  # (features, time relative to the kernel's hand-coded time)


class ModelBeamStrategy(BeamStrategy):
  def __init__(self, seeds: list[Kernel], actions: tuple[Opt, ...], s: StrategySettings, extra: Sequence[Kernel] = (),
               prior: Sequence[tuple[list[float], float]] = (), cut: bool = True, fitted: Optional[CostModel] = None):
    super().__init__(seeds, actions, s, extra)
    self.prior, self.cut, self.fitted = list(prior), cut, fitted
    self.model = fitted or CostModel()
    self.hand = tuple(seeds[0].applied_opts) if seeds else ()  # the first seed is the hand-coded one (search/tune.py)
    self.base: Optional[float] = None                      # its time: what this search's times are relative to
    self.featurised: dict[tuple, list[float]] = {}         # by schedule: each candidate featurised once here
    self.data: list[tuple[list[float], float]] = []        # (features, best time) of everything timed so far

  def observe(self, results: list[tuple[Kernel, Candidate]]) -> None:
    super().observe(results)
    # a SLOW candidate's time is where its timing stopped, already several times the best: still the right order
    timed = [(k, c.min_s) for k, c in results if c.min_s]
    if self.fitted is None: self.data += zip(self._features([k for k, _ in timed]), (t for _, t in timed))  # what the model is fitted on
    if self.base is None and timed: self.base = next((t for k, t in timed if tuple(k.applied_opts) == self.hand), min(t for _, t in timed))

  def _next_round(self) -> None:
    super()._next_round()
    top = self.s.measure_top
    if self.done or self.cut and len(self.pending) <= top: return
    if self.fitted is None:
      if len(data := self.prior + [(f, t / (self.base or 1.0)) for f, t in self.data]) < MIN_TRAIN: return  # every child, as the beam
      self.model.fit(*zip(*data))
    mean, spread = self.model.estimate(self._features(self.pending))
    ranked = [int(i) for i in np.argsort(mean, kind="stable")]
    if not self.cut:  # every child, the predicted fastest first
      self.pending = [self.pending[i] for i in ranked]
      return
    best = ranked[:top - explored(top)]
    hope = [int(i) for i in np.argsort(mean - OPTIMISM * spread, kind="stable") if i not in best][:explored(top)]
    lead = tuple(self.beam[0].applied_opts)
    chosen = lineages([kinds(c, lead) for c in self.pending], ranked, best + hope)
    taken = set(chosen)
    self.pending, self.rest, self.partial = [self.pending[i] for i in chosen], [self.pending[i] for i in ranked if i not in taken], True

  def _next_beam(self, ok: list[Kernel]) -> list[Kernel]:
    """The fastest verified children, and where those all run threaded the fastest verified one-core child in the last
    slot: a one-core lineage the cut measures one child of a round (_next_round) goes on while it verifies (search/tune.py
    checks a round's fastest one-core child where it beats every one-core schedule before it)."""
    beam = ok[:self.s.beam]
    if self.cut and len(beam) > 1 and not any(map(_alone, beam)) and (solo := next((k for k in ok if _alone(k)), None)): beam[-1:] = [solo]
    return beam

  def _features(self, ks: list[Kernel]) -> list[list[float]]:
    if new := [k for k in ks if tuple(k.applied_opts) not in self.featurised]:
      self.featurised.update((tuple(k.applied_opts), schedule_features(k)) for k in new)
    return [self.featurised[tuple(k.applied_opts)] for k in ks]


def measured(tuned: Sequence[Tuned], options: LinearizerOptions, max_other_load: Optional[float] = None) -> Iterator[tuple[list[float], float]]:
  """What the searches of `tuned` measured, as a cost model's data: each timed candidate's schedule featurised on its own
  kernel under these options, its time relative to that search's hand-coded candidate's (its baseline's where that one is gone); with
  max_other_load, only those timed while the rest of the machine kept fewer cores busy."""
  for t in tuned:
    r, root = t.result, Kernel(t.ast.rebased(), options)
    base = next((c.min_s for c in r.candidates if c.opts == r.baseline_opts and c.min_s), r.baseline_s)
    for c in r.candidates:
      if not c.min_s or c.failed or max_other_load is not None and c.other_load >= max_other_load: continue
      try: yield schedule_features(root.copy().apply_opts(c.opts)), c.min_s / base
      except OptError: continue  # an opt these options refuse


def prior_data(tuned: Sequence[Tuned], options: LinearizerOptions) -> Data:
  """What the searches of kernels alike measured (measured()), every timed candidate."""
  return list(measured(tuned, options))
