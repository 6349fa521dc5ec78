"""search/load.py: a contended timing is redone when quiet (the search's final check and a confirmation share the rule),
and what kept the machine busy is named."""
import subprocess, sys, time
from types import SimpleNamespace
import pytest
from search import load


def scripted(monkeypatch, loads: list[float]) -> list[int]:
  """OtherLoad reads the loads in turn, one per timing; the waits for a quiet second find one at once: their count."""
  it, waits = iter(loads), []
  monkeypatch.setattr(load, "OtherLoad", lambda *pids: (v := next(it), SimpleNamespace(cores=lambda: v, steal=lambda: 0.0))[1])
  def wait_quiet(*a) -> tuple[float, float]:
    waits.append(1)
    return 1.0, 0.0
  monkeypatch.setattr(load, "wait_quiet", wait_quiet)
  return waits


def run(timings, **kw):
  it = iter(timings)
  args = dict(pid=0, busy_load=0.5, max_drift=0.25, retries=2, quiet_wait_s=30.0, check_stop=lambda: None) | kw
  return load.checked(lambda: next(it), load.drift, **args)


@pytest.mark.parametrize("loads,waits_want", [((0.0, 0.0), 0), ((1.5, 0.0), 1)], ids=["drift-alone", "other-load"])
def test_a_drift_alone_is_retimed_at_once_and_other_load_waits_for_a_quiet_second_first(monkeypatch, loads, waits_want):
  waits = scripted(monkeypatch, list(loads))
  c = run([[1.0, 1.0, 2.0, 2.0] if loads[0] == 0.0 else [1.0] * 4, [1.0] * 4])
  assert (c.retimed, c.contended, len(waits), c.value) == (1, False, waits_want, [1.0] * 4)


def test_a_timing_contended_throughout_is_redone_retries_times_and_says_so(monkeypatch):
  waits = scripted(monkeypatch, [1.5, 1.5, 1.5])
  c = run([[1.0]] * 3)
  assert (c.retimed, c.contended, len(waits)) == (2, True, 2)
  assert c.busy("final checks").startswith("the rest of the machine kept 1.50 cores busy (steal 0.00; busiest while waiting: ")
  assert c.busy("final checks").endswith("through 3 final checks") and c.conditions()["other_load"] == 1.5


def test_a_device_that_shares_no_cpu_keeps_its_first_timing(monkeypatch):
  waits = scripted(monkeypatch, [1.5])
  c = run([[1.0, 3.0]], contends=False)
  assert (c.retimed, c.contended, waits) == (0, False, [])


def test_busiest_names_the_process_that_kept_a_core_busy():
  spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
  try:
    who = load.Busiest()
    time.sleep(1.0)
    assert f"(pid {spin.pid})" in who.top(n=1000), who.top(n=10)  # all of them: other tests may keep the cores busier
  finally:
    spin.kill()
    spin.wait()


def test_cores_and_steal_read_one_window_ending_at_the_first_reading(monkeypatch):
  # a checked timing reads both: two samples of /proc/stat back to back gave them windows ticks apart
  samples = iter([(10.0, 1.0), (12.0, 1.5), (99.0, 9.0)])
  monkeypatch.setattr(load, "_busy_s", lambda: next(samples))
  clock = iter([100.0, 102.0, 200.0])
  monkeypatch.setattr(load, "time", SimpleNamespace(monotonic=lambda: next(clock)))
  monkeypatch.setattr(load.os, "times", lambda: (0.0, 0.0))
  o = load.OtherLoad()
  assert (o.cores(), o.steal(), o.cores()) == (1.0, 0.25, 1.0)
