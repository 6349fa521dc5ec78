"""The strategy seam: a search strategy is asked for candidates and told how they measured (ask/tell), and knows
nothing of how they are built or timed. `drive` runs one against a Measure until the strategy, the budget or the
stop event ends it; beam search (search/beam.py) is one strategy."""
from __future__ import annotations
import threading, time
from typing import Callable, Optional, Protocol
from linearizer.kernel import Kernel
from search.result import Candidate

# measure(kernels, round, limit, deadline) -> (kernel, candidate) for those it measured, at most `limit`, stopping at
# `deadline` (time.monotonic()); kernels whose source duplicates an earlier candidate's are left out
Measure = Callable[[list[Kernel], int, int, float], list[tuple[Kernel, Candidate]]]


class Strategy(Protocol):
  round: int                          # the round of the last proposals (0: the seeds)
  def propose(self, n: int) -> list[Kernel]: ...   # at most n schedules not proposed before (round 0: all seeds); [] when done
  def observe(self, results: list[tuple[Kernel, Candidate]]) -> None: ...
  def go_on_below(self) -> float: ...  # the time the round's fastest verified candidate must beat for the search to go on (inf: it goes on)


def drive(strategy: Strategy, measure: Measure, budget_candidates: Optional[int] = None, deadline: float | Callable[[], float] = float("inf"),
          stop: Optional[threading.Event] = None, done: Callable[[], bool] = lambda: False) -> list[tuple[Kernel, Candidate]]:
  """Every (kernel, candidate) measured, in measuring order. Round 0 (the seeds) is measured whatever the budget:
  every search has a baseline. `deadline` (time.monotonic()) may be a function, asked after each round: the seeds'
  measurements may move it (search/settings.py StrategySettings.effort). `done`, asked after each round too, ends the
  search where nothing measured later could win (the roofline: search/roofline.py)."""
  measured: list[tuple[Kernel, Candidate]] = []
  def left() -> int: return budget_candidates - len(measured) if budget_candidates is not None else 1 << 62
  def due() -> float: return deadline() if callable(deadline) else deadline
  while ks := strategy.propose(left()):
    rnd = strategy.round
    new = measure(ks, rnd, len(ks) if rnd == 0 else left(), float("inf") if rnd == 0 else due())
    measured += new
    strategy.observe(new)
    if left() <= 0 or time.monotonic() >= due() or stop and stop.is_set() or done(): break
  return measured
