"""Beam search guided by a cost model, a Strategy (search/strategy.py) beside BeamStrategy: the same beam and the same
end, but of each round's children (all lowered and featurised: cheap next to compiling and timing them) only the
measure_top that a cost model trained on this search's measurements so far ranks fastest are proposed. Before there
is enough to learn from (MIN_TRAIN measurements: round 1, after the seeds alone) the round measures every child, as the
beam does: a broad sample of measure_top children there missed the best branch (sops_4927 kept its baseline). The model only
chooses what is measured: the winner is measured and verified like any candidate, and the final check is the same."""
from __future__ import annotations
from linearizer.kernel import Kernel, Opt
from search.beam import BeamStrategy
from search.cost_model import CostModel
from search.features import features
from search.result import Candidate
from search.settings import StrategySettings


# measurements before the model ranks: fitted on the seeds alone (2-3 points) it ranked no better than chance
MIN_TRAIN = 16


class ModelBeamStrategy(BeamStrategy):
  def __init__(self, seeds: list[Kernel], actions: tuple[Opt, ...], s: StrategySettings):
    super().__init__(seeds, actions, s)
    self.model = CostModel()
    self.featurised: dict[tuple, list[float]] = {}         # by schedule: each candidate lowered once here
    self.data: list[tuple[list[float], float]] = []        # (features, best time) of everything timed so far

  def observe(self, results: list[tuple[Kernel, Candidate]]) -> None:
    super().observe(results)
    # a SLOW candidate's time is where its timing stopped, already several times the best: still the right order
    self.data += [(self._features(k), c.min_s) for k, c in results if c.min_s]

  def _next_round(self) -> None:
    super()._next_round()
    top = self.s.measure_top
    if self.done or len(self.pending) <= top: return
    if len(self.data) < MIN_TRAIN: return  # too little to learn from: every child, as the beam measures them
    self.model.fit(*zip(*self.data))
    self.pending = [self.pending[i] for i in self.model.rank([self._features(k) for k in self.pending])[:top]]

  def _features(self, k: Kernel) -> list[float]:
    if (key := tuple(k.applied_opts)) not in self.featurised: self.featurised[key] = features(k)
    return self.featurised[key]
