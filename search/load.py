"""The rest of the machine's CPU use while we time: busy ticks of /proc/stat (steal too) less our own process's (all
its threads) and those of the processes named. A busy machine slows and scatters timings -- a busy core made OpenMP
(THREAD) kernels look 100x slower -- so every timing records it, and the search re-times what ran contended.
Where /proc is absent (not Linux) the load reads 0: nothing is known to contend."""
from __future__ import annotations
import os, time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_s() -> float:
  try: f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
  except OSError: return 0.0
  return (sum(f[:8]) - f[3] - f[4]) / TICK  # all but idle and iowait; guest time is inside user

def _cpu_s(pid: int) -> float:
  try: return sum(int(x) for x in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13]) / TICK
  except (OSError, ValueError): return 0.0  # gone: what it used is in the machine's total, counted as others'


class OtherLoad:
  """Cores the rest of the machine kept busy since this was made (ticks: 1/TICK s, so a short window reads coarse)."""
  def __init__(self, *pids: int):
    self.pids = pids
    self.start = self._now()

  def _now(self) -> tuple[float, float, float]:
    return time.monotonic(), _busy_s(), sum(os.times()[:2]) + sum(_cpu_s(p) for p in self.pids)

  def cores(self) -> float:
    (t0, b0, o0), (t1, b1, o1) = self.start, self._now()
    return max(0.0, ((b1 - b0) - (o1 - o0)) / max(t1 - t0, 1.0 / TICK))


def wait_quiet(limit: float, max_wait: float, *pids: int) -> tuple[float, float]:
  """Wait (up to max_wait s) for a second in which the rest of the machine uses under `limit` cores: (seconds waited,
  the last second's load)."""
  st = time.monotonic()
  while True:
    load = OtherLoad(*pids)
    time.sleep(1.0)
    if (cores := load.cores()) < limit or time.monotonic() - st >= max_wait: return time.monotonic() - st, cores
