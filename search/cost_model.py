"""The learned cost model: gradient-boosted trees from a candidate's features (search/features.py) to its log time.

Trained on log time (a kernel's candidates span orders of magnitude; what matters is the ratio between them), ranking
by predicted time. Small-data settings: a search has tens of measurements, not thousands, so leaves may hold few.
MEMBERS models, each on its own bagged sample of the rows and features: the prediction is their mean, their spread how
far they disagree (search/model_beam.py measures some of the children it may underrate by it)."""
from __future__ import annotations
from typing import TYPE_CHECKING, Sequence
import numpy as np
if TYPE_CHECKING: import lightgbm

MIN_FIT = 4   # measurements below which there is nothing to learn from
ROUNDS = 60
MEMBERS = 5
PARAMS = dict(objective="regression", learning_rate=0.15, num_leaves=8, min_data_in_leaf=2, num_threads=1,  # one thread: a busy machine
              bagging_fraction=0.7, bagging_freq=1, feature_fraction=0.7, deterministic=True, force_row_wise=True, verbose=-1)
DATASET = dict(min_data_in_bin=1, verbose=-1)


class CostModel:
  def __init__(self, seed: int = 0):
    self.seed = seed
    self.boosters: list[lightgbm.Booster] = []  # once fitted

  def fit(self, features: Sequence[Sequence[float]], times: Sequence[float]) -> CostModel:
    """Fit on measured times (seconds, > 0); ValueError where fewer than MIN_FIT."""
    if len(times) < MIN_FIT: raise ValueError(f"{len(times)} measurements: a cost model needs {MIN_FIT} at least")
    if len(features) != len(times) or min(times) <= 0: raise ValueError("one positive time per feature vector")
    # LightGBM: fast to fit on tens of rows, a lambdarank objective for cross-kernel ranking, a wheel with no build step;
    # imported here, not with the module: with scipy it is ~0.4 CPU-s of every process that imports search.tune (the CLI's
    # tune, a worker), most of which never fit a model (the beam strategy without a warm start's data)
    import lightgbm
    data = lightgbm.Dataset(np.asarray(features, dtype=np.float64), np.log(np.asarray(times, dtype=np.float64)), params=DATASET)
    self.boosters = [lightgbm.train(dict(PARAMS, seed=self.seed + i), data, num_boost_round=ROUNDS) for i in range(MEMBERS)]
    return self

  def _members(self, features: Sequence[Sequence[float]]) -> np.ndarray:
    if not self.boosters: raise ValueError("the cost model is not fitted")
    x = np.asarray(features, dtype=np.float64)
    return np.stack([np.asarray(b.predict(x)) for b in self.boosters])  # each member's: an ndarray already, typed as a union

  def estimate(self, features: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Predicted log time of each, and how far the members' predictions of it lie apart (their standard deviation):
    one pass of the members for both (a LightGBM predict call costs ~10 ms whatever its rows)."""
    m = self._members(features)
    return m.mean(axis=0), m.std(axis=0)

  def predict(self, features: Sequence[Sequence[float]]) -> np.ndarray:
    """Predicted log time of each."""
    return self.estimate(features)[0]

  def rank(self, features: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the feature vectors, predicted fastest first (ties: in the given order)."""
    return [int(i) for i in np.argsort(self.predict(features), kind="stable")] if len(features) else []
