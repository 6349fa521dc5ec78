"""Beam search guided by a cost model, a Strategy (search/strategy.py) beside BeamStrategy: the same beam and the same
end, but of each round's children (all lowered and featurised: cheap next to compiling and timing them) only the
measure_top that a cost model trained on this search's measurements so far ranks fastest are proposed. Before there
is enough to learn from (MIN_TRAIN measurements: round 1, after the seeds alone) the round measures every child, as the
beam does: a broad sample of measure_top children there missed the best branch (sops_4927 kept its baseline). Of the
measure_top, explored() go not to the predicted fastest but to those the model may most underrate (predicted log time
less OPTIMISM spreads of its members, search/cost_model.py): a round's best child may lie beyond what was measured,
where trees do not extrapolate (a matmul's best branch ranked 7th of 24). The model only chooses what is measured: the
winner is measured and verified like any candidate, and the final check is the same."""
from __future__ import annotations
import numpy as np
from linearizer.kernel import Kernel, Opt
from search.beam import BeamStrategy
from search.cost_model import CostModel
from search.features import features
from search.result import Candidate
from search.settings import StrategySettings


# measurements before the model ranks: fitted on the seeds alone (2-3 points) it ranked no better than chance
MIN_TRAIN = 16
OPTIMISM = 2.0   # spreads below its predicted log time an explored child may lie


def explored(top: int) -> int:
  """How many of a round's top measured children are explored: 1 of 3 to 7, 2 of 8 to 12, none of 1 or 2."""
  return (top + 2) // 5


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
    fs = [self._features(k) for k in self.pending]
    self.model.fit(*zip(*self.data))
    best = self.model.rank(fs)[:top - explored(top)]
    hope = np.argsort(self.model.predict(fs) - OPTIMISM * self.model.spread(fs), kind="stable")
    self.pending = [self.pending[i] for i in best + [int(i) for i in hope if i not in best][:explored(top)]]

  def _features(self, k: Kernel) -> list[float]:
    if (key := tuple(k.applied_opts)) not in self.featurised: self.featurised[key] = features(k)
    return self.featurised[key]
