import statistics, time
from pathlib import Path
from devices import cpu
from linearizer.builders import reduce
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower
from search.pool import CompilePool
from search.runner import Runner, write_case


def burn(cpu_seconds: float) -> float:
  """A compile's load: busy on one core for this much CPU time (time spent stopped does not count)."""
  end = time.process_time() + cpu_seconds
  while time.process_time() < end: pass
  return cpu_seconds


def test_timings_with_the_pool_busy_and_paused_match_timings_with_it_idle(tmp_path: Path):
  # one thread summing 64 MiB: ~10 ms, longer than a scheduler time slice, so sharing a core shows in every run
  k = reduce("SUM", (4096, 4096), (1,))
  lib = cpu.compile(cpu.render(lower(Kernel(k, cpu.options()).apply_opts([Opt("UNROLL", 0, 8)]))))
  write_case(tmp_path, k, {}, 0)
  idle, paused, busy = [], [], []
  with Runner("devices.cpu") as runner:
    runner.setup(tmp_path, {})
    def best() -> float: return min(runner.measure(lib, "kernel", check=False, timeout_s=30, min_time_s=0.05).times_s)  # as the search ranks
    for _ in range(5):
      idle.append(best())
      with CompilePool(2) as pool:
        for _ in range(2): pool.submit(burn, 0.0)
        while pool.pending: list(pool.results())  # both workers are up
        for _ in range(2): pool.submit(burn, 60.0)
        time.sleep(0.05)
        with pool.paused(): paused.append(best())
        busy.append(best())
  # the search ranks candidates by their fastest run, so that is what must not move: the quietest moment of each series
  # (robust to the rest of the machine); a woken runner sometimes preempts a burner for a whole run, so the control,
  # that the load is real, looks at the typical run instead
  idle_s, paused_s = min(idle), min(paused)
  print(f"idle {idle_s * 1e3:.3f} ms  busy, paused {paused_s * 1e3:.3f} ms  busy (median) {statistics.median(busy) * 1e3:.3f} ms")
  assert statistics.median(busy) > 1.25 * statistics.median(idle)
  assert abs(paused_s / idle_s - 1) < 0.1
