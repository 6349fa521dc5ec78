"""The runner's timing of one candidate (search/runner.py _Case._measure): the early stop against the best so far."""
from search.result import Status
from search.runner import _Case


def measured(runs: list[float], early_stop_s: float, min_runs: int = 3):
  case = object.__new__(_Case)  # the timing loop alone: no buffers, no check
  it = iter(runs)
  case.run = lambda prog: next(it)
  return case._measure(None, check=False, min_time_s=0.0, min_runs=min_runs, max_runs=min_runs, early_stop_s=early_stop_s)


def test_a_candidate_slow_only_while_cold_is_timed_in_full():
  m = measured([1.0, 0.01, 0.011, 0.012], early_stop_s=0.1)  # the cold run 10x the bar, the warm ones under it
  assert m.status is Status.OK and m.times_s == [0.01, 0.011, 0.012]


def test_a_candidate_slow_cold_and_warm_is_stopped_after_one_warm_run():
  m = measured([1.0, 0.5, 0.01], early_stop_s=0.1)
  assert m.status is Status.SLOW and m.times_s == [0.5]


def test_a_candidate_slow_warm_is_stopped_after_two_runs():
  m = measured([0.15, 0.3, 0.2, 0.01], early_stop_s=0.1)  # cold under twice the bar: timed, stopped once two runs are over it
  assert m.status is Status.SLOW and m.times_s == [0.3, 0.2]
