"""The runner's timing of one candidate (search/runner.py _Case._measure): the early stop against the best so far, the
stop once two runs agree, and the poisoning of a checked timing's output."""
import pytest
from search import runner
from search.result import Status
from search.runner import _Case


def measured(runs: list[float], early_stop_s: float, min_runs: int = 3):
  case = object.__new__(_Case)  # the timing loop alone: no buffers, no check
  it = iter(runs)
  case.run = lambda prog, poison=True: next(it)
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


def test_a_timing_whose_two_fastest_runs_agree_stops_at_half_the_minimum_time():
  case = object.__new__(_Case)
  it = iter([0.02, 0.010, 0.0101, 0.010, 0.010, 0.010])  # warm-up, then a memory-bound kernel's steady runs
  case.run = lambda prog, poison=True: next(it)
  m = case._measure(None, check=False, min_time_s=0.04, min_runs=3, max_runs=50, early_stop_s=None)
  assert m.times_s == [0.010, 0.0101]  # 20 ms of runs, the two within 1%: a third said nothing new


def test_a_timing_whose_runs_disagree_runs_to_the_minimum_time():
  case = object.__new__(_Case)
  it = iter([0.02, 0.010, 0.012, 0.011, 0.0105, 0.010])
  case.run = lambda prog, poison=True: next(it)
  m = case._measure(None, check=False, min_time_s=0.04, min_runs=3, max_runs=50, early_stop_s=None)
  assert m.times_s == [0.010, 0.012, 0.011, 0.0105]  # no two fastest within TIGHT until 40 ms were timed


class _Out:
  def __init__(self): self.fills = 0
  def fill(self, x): self.fills += 1
  def contents(self): return None


def _counting_case(monkeypatch) -> tuple[_Case, _Out]:
  monkeypatch.setattr(runner, "compare", lambda *a: None)  # the check's outcome is not what is tested here
  case, out = object.__new__(_Case), _Out()
  case.guarded, case.poison, case.bufs, case.var_args, case.k, case.want, case.vv, case.bounds = [out], None, [], [], None, [], {}, None
  case.compared = [out]
  return case, out


class _Prog:
  def __init__(self): self.runs = 0
  def time(self, *a, **k):
    self.runs += 1
    return 0.001 * self.runs  # runs that disagree: none stops early


@pytest.mark.parametrize("check", [True, False])
def test_only_a_checked_timing_poisons_the_output_before_each_run(monkeypatch, check):
  case, out = _counting_case(monkeypatch)
  prog = _Prog()
  m = case._measure(prog, check=check, min_time_s=0.0, min_runs=3, max_runs=3, early_stop_s=None)
  assert m.verified is check and prog.runs == 4  # the warm-up and three runs
  assert out.fills == (4 if check else 0)  # the checked run's output starts poisoned; an unchecked one's is never read
