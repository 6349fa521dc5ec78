"""The rest of the machine's CPU use while we time: busy ticks of /proc/stat (steal too) less our own process's (all
its threads) and those of the processes named. A busy machine slows and scatters timings -- a busy core made OpenMP
(THREAD) kernels look 100x slower -- so every timing records it, and the search re-times what ran contended.
Where /proc is absent (not Linux) the load reads 0: nothing is known to contend."""
from __future__ import annotations
import os, statistics, time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, TypeVar

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
T = TypeVar("T")


def _busy_s() -> tuple[float, float]:
  """(busy, of it stolen by the hypervisor for other machines) seconds of all cores since boot."""
  try: f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
  except OSError: return 0.0, 0.0
  return (sum(f[:8]) - f[3] - f[4]) / TICK, f[7] / TICK  # all but idle and iowait; guest time is inside user

def _stat(pid: int | str) -> tuple[str, float]:
  """A process's (command name, CPU seconds); OSError/ValueError once it is gone."""
  head, tail = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
  return head.split("(", 1)[1], sum(int(x) for x in tail.split()[11:13]) / TICK

def _cpu_s(pid: int) -> float:
  try: return _stat(pid)[1]
  except (OSError, ValueError): return 0.0  # gone: what it used is in the machine's total, counted as others'


class OtherLoad:
  """Cores the rest of the machine kept busy from when this was made to its first reading, which ends the window: cores()
  and steal() read one end sample, not one each (ticks: 1/TICK s, so a short window reads coarse)."""
  def __init__(self, *pids: int):
    self.pids = pids
    self.start = self._now()
    self.end: tuple[float, float, float, float] | None = None

  def _now(self) -> tuple[float, float, float, float]:
    return time.monotonic(), *_busy_s(), sum(os.times()[:2]) + sum(_cpu_s(p) for p in self.pids)

  def _window(self) -> tuple[float, float, float, float]:
    """(seconds, busy, stolen, ours' CPU seconds) from the start to the end, taken at the first reading."""
    self.end = self.end or self._now()
    (t0, b0, s0, o0), (t1, b1, s1, o1) = self.start, self.end
    return max(t1 - t0, 1.0 / TICK), b1 - b0, s1 - s0, o1 - o0

  def cores(self) -> float:
    dt, busy, _, ours = self._window()
    return max(0.0, (busy - ours) / dt)

  def steal(self) -> float:
    """Of cores(), those the hypervisor gave to other virtual machines: contention no process here shows."""
    dt, _, stolen, _ = self._window()
    return max(0.0, stolen / dt)


class Busiest:
  """The machine's processes' CPU since this was made, to name who kept it busy (a scan of /proc: a few ms)."""
  def __init__(self, *pids: int):
    self.skip, self.t0, self.start = {os.getpid(), *pids}, time.monotonic(), self._scan()

  @staticmethod
  def _scan() -> dict[int, tuple[str, float]]:
    out = {}
    for p in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
      if p.name.isdigit():
        try: out[int(p.name)] = _stat(p.name)
        except (OSError, ValueError): pass  # gone meanwhile
    return out

  def top(self, n: int = 3) -> str:
    """The n processes (not ours) that used the most CPU since, as cores: "cc1 (pid 7) 0.93, ..."."""
    dt, now = max(time.monotonic() - self.t0, 1.0 / TICK), self._scan()
    used = sorted(((cpu - self.start.get(p, (name, 0.0))[1], name, p) for p, (name, cpu) in now.items() if p not in self.skip), reverse=True)
    return ", ".join(f"{name} (pid {p}) {cpu / dt:.2f}" for cpu, name, p in used[:n] if cpu > 0) or "no process"


def wait_quiet(limit: float, max_wait: float, *pids: int) -> tuple[float, float]:
  """Wait (up to max_wait s) for a second in which the rest of the machine uses under `limit` cores: (seconds waited,
  the last second's load)."""
  st = time.monotonic()
  while True:
    load = OtherLoad(*pids)
    time.sleep(1.0)
    if (cores := load.cores()) < limit or time.monotonic() - st >= max_wait: return time.monotonic() - st, cores


@dataclass
class Checked(Generic[T]):
  value: T            # the last timing's
  other_load: float   # cores the rest of the machine kept busy during it
  steal: float        # of them, stolen by the hypervisor (other virtual machines)
  drift: float
  retimed: int        # timings redone
  contended: bool     # the last one too
  busiest: str        # who used the most CPU in the last second a retry waited for quiet ("" where none waited)

  def conditions(self) -> dict:
    """How it was measured, for the result: other load, drift, retimings, busy (retimed or still contended), and where
    seen, steal and the busiest others."""
    return {"other_load": round(self.other_load, 3), "drift": round(self.drift, 4), "retimed": self.retimed,
            "busy": self.retimed > 0 or self.contended,
            **({"steal": round(self.steal, 3)} if self.steal else {}), **({"busiest": self.busiest} if self.busiest else {})}

  def busy(self, what: str) -> str:
    """Why a contended timing was refused, for the error."""
    who = f"; busiest while waiting: {self.busiest}" if self.busiest else ""
    return (f"the rest of the machine kept {self.other_load:.2f} cores busy (steal {self.steal:.2f}{who}), the baseline drifted "
            f"{self.drift:.0%}, through {self.retimed + 1} {what}")


def checked(time_it: Callable[[], T], drift_of: Callable[[T], float], pid: int, busy_load: float, max_drift: float, retries: int,
            quiet_wait_s: float, check_stop: Callable[[], None], contends: bool = True) -> Checked[T]:
  """time_it() until neither the rest of the machine (busy_load cores or more meanwhile, `pid` counted as ours) nor a
  drift of the baseline (drift_of its result over max_drift) disturbed it, redone `retries` times at most. A retry after
  other load first waits up to quiet_wait_s for a quiet second (check_stop each second); one after a drift alone on a
  quiet machine -- a microsecond kernel's noise -- runs at once: the wait was most of a small kernel's confirmation.
  `contends`: False where the device shares no CPU with the rest (a GPU): the first timing stands."""
  other, busiest = 0.0, ""
  for attempt in range(1 + retries):
    if attempt and other >= busy_load:
      end = time.monotonic() + quiet_wait_s
      while True:
        who = Busiest(pid)
        quiet = wait_quiet(busy_load, 0, pid)[1] < busy_load
        busiest = who.top()
        if quiet or time.monotonic() >= end: break
        check_stop()
    load = OtherLoad(pid)
    out = time_it()
    other, steal, drift = load.cores(), load.steal(), drift_of(out)
    if not (contended := contends and (other >= busy_load or drift > max_drift)): break
  return Checked(out, other, steal, drift, attempt, contended, busiest)


def drift(ts: list[float]) -> float:
  """How far the second half of timings' median is from the first half's (0.25: 25% apart either way)."""
  if len(ts) < 2: return 0.0
  a, b = statistics.median(ts[:len(ts) // 2]), statistics.median(ts[len(ts) // 2:])
  return max(a, b) / min(a, b) - 1 if min(a, b) > 0 else 0.0
