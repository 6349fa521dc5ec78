"""The sandboxed runner: one process owns the device and measures compiled candidates on fixed inputs.

The search writes the inputs and the reference output to a directory once per kernel; the runner loads them (again,
after every restart) into device buffers. The range a correct kernel may reach where it differs from the reference by
more than the tolerance (a float SUM in another order, EXP2/LOG2/SIN within the contract: reference.range_of) is the
runner's to compute, once, when a check first needs it: most cases' checks never do, and it cost 30x the reference
itself (sum_rows_4096: 0.14-0.23 CPU-s with it, 0.00-0.01 without, BUSY). Per candidate: a warm-up, then timed runs until a minimum
measured time (or half of it, where its two fastest runs agree within TIGHT); an early stop once it is clearly slower
than the best; and, where it is checked, each run on a freshly poisoned output and the last run's output checked
against the reference (an unchecked timing poisons nothing: its output is never read, and on a 16M-element output the
poisoning cost half a run). A candidate that kills the runner
(segfault) or hangs is the parent's to see: it kills and restarts the process and reports the reason. One that crashes
without killing it (a write past its buffers' guards; on a GPU, an illegal address or a trap, after which the device's
context fails every call) is reported by the runner, which the parent then restarts too.
"""
from __future__ import annotations
import contextlib, importlib, json, signal
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Callable, Optional
import numpy as np
from devices.base import Binary, DeviceError
from devices.guard import Guarded
from linearizer import reference
from linearizer.ast import KernelAST, loads
from linearizer.compare import compare
from search.load import OtherLoad
from search.pool import die_with_parent, leave_group, parent_gone, start_alone
from search.result import Status


@dataclass
class Measurement:
  status: Status                    # ok, slow, mismatch, run_error, crash or timeout
  times_s: list[float] = field(default_factory=list)
  error: str = ""
  verified: bool = False
  other_load: float = 0.0           # cores the rest of the machine kept busy meanwhile (search/load.py)


def write_case(d: Path, k: KernelAST, var_vals: dict[str, int], seed: int) -> None:
  """The runner's inputs and expected output for k: seeded random buffers (the output's poisoned) and the reference's."""
  bufs = reference.random_buffers(k, var_vals, seed)
  want = [bufs[0].copy(), *bufs[1:]]
  reference.run(k, want, var_vals)
  (d / "kernel.json").write_text(json.dumps(k.to_json()))
  for name, arr in [*((f"in{i}", b) for i, b in enumerate(bufs)), ("want", want[0])]: np.save(d / f"{name}.npy", arr)


RANGING = "ranging"  # the runner's word before it computes a case's range for a check: our code's time, not the candidate's


TIGHT = 1.02  # a timing's two fastest runs this close confirm its fastest (the time the search ranks by)

def confirmed(times: list[float], min_time_s: float) -> bool:
  """Whether runs this long have timed a candidate well enough: half the minimum time, the two fastest within TIGHT (its
  fastest, what the search ranks by, known to 2%). min_runs 3 and min_time_s 50 ms time a memory-bound kernel's 10-30 ms
  run (mul_add_16m) 3-5 times; on a busy machine its runs rarely agree so well, and it times them all."""
  return len(times) >= 2 and sum(times) >= min_time_s / 2 and (s := sorted(times))[1] <= TIGHT * s[0]


class _Case:
  """The runner's side: device buffers (the device module's alloc, filled by its copyin) and what their output must be."""
  def __init__(self, dev, d: Path, var_vals: dict[str, int]):
    self.dev = dev
    self.k = loads((d / "kernel.json").read_text())
    self.vv, self.var_args = var_vals, [var_vals[v.name] for v in self.k.vars]
    self.inputs = [np.load(d / f"in{i}.npy", mmap_mode="r") for i in range(len(self.k.buffers))]
    self.guarded = [Guarded(dev, x.size, x.dtype, seed=i) for i, x in enumerate(self.inputs)]  # a stray write fails the candidate
    for g, x in zip(self.guarded, self.inputs): g.fill(x)
    # host inputs read-only: a candidate that writes one crashes, and a check compares the output alone (16M-element inputs
    # cost more to compare than the output); a device's inputs are compared after each checked run
    self.compared = self.guarded[:1] if all([g.lock() for g in self.guarded[1:]]) else self.guarded
    self.bufs = [g.buf for g in self.guarded]
    self.want = [np.load(d / "want.npy", mmap_mode="r")] + self.inputs[1:]  # mapped, as the inputs: only read
    self.bounds: Optional[tuple] = None  # the range a correct output may reach, where a check first needs it (check())
    self.ranging: Callable[[], None] = lambda: None  # called before it is computed
    self.poison = self.inputs[0]  # buffer 0 starts poisoned

  def run(self, prog, poison: bool = True) -> float:
    if poison: self.guarded[0].fill(self.poison)
    return prog.time(*self.bufs, var_vals=self.var_args)

  def trampled(self) -> Optional[Measurement]:
    """The guard check after a candidate's runs: a write outside its buffers fails it, and the guards are laid again."""
    for i, g in enumerate(self.guarded):
      if msg := g.trampled():
        for j, x in enumerate(self.inputs): self.guarded[j].fill(x)
        return Measurement(Status.CRASH, error=f"out-of-bounds write around buffer {i}: {msg}")
    return None

  def measure(self, prog, check: bool, min_time_s: float, min_runs: int, max_runs: int, early_stop_s: Optional[float]) -> Measurement:
    m = self._measure(prog, check, min_time_s, min_runs, max_runs, early_stop_s)
    return self.trampled() or m

  def _measure(self, prog, check: bool, min_time_s: float, min_runs: int, max_runs: int, early_stop_s: Optional[float]) -> Measurement:
    first = self.run(prog, check)  # warm-up: code and data into caches, threads started
    times: list[float] = []
    # clearly slow even cold: one warm run confirms it (a µs kernel's cold run, its code not paged in yet, was 6-16x its
    # warm ones on a busy machine, and dropped candidates on that one run)
    if early_stop_s is not None and first > 2 * early_stop_s and (times := [self.run(prog, check)])[0] > early_stop_s:
      return Measurement(Status.SLOW, times)
    while len(times) < max(min_runs, max_runs):
      times.append(self.run(prog, check))
      if early_stop_s is not None and len(times) >= 2 and min(times) > early_stop_s: return Measurement(Status.SLOW, times)
      if len(times) >= min_runs and sum(times) >= min_time_s or confirmed(times, min_time_s): break
    if not check: return Measurement(Status.OK, times)
    if msg := self.check(): return Measurement(Status.MISMATCH, times, msg)
    return Measurement(Status.OK, times, verified=True)

  def check(self) -> Optional[str]:
    """compare()'s verdict on the output: within the tolerance of the reference, else within the range a correct kernel
    may reach, computed the first time a check needs it (reference.range_of, from the reference output and the inputs,
    as compare() would each time) and kept for the case's later checks."""
    got = [g.contents() for g in self.compared]
    msg = compare(self.k, got, self.want, self.vv, self.bounds or (None, None))  # (None, None): no range, the tolerance alone
    if msg and self.bounds is None and reference.ranged(self.k):
      self.ranging()
      self.bounds = reference.range_of(self.k, self.want, self.vv)
      msg = compare(self.k, got, self.want, self.vv, self.bounds)
    return msg


def _main(conn: Connection, module: str) -> None:
  die_with_parent()
  leave_group()  # out of the worker's group: a terminal's Ctrl-C is the worker's to handle (it stops the search, then us)
  dev, progs = importlib.import_module(module), {}
  case: Optional[_Case] = None
  with parent_gone():
    while (msg := conn.recv()) is not None:
      op, *args = msg
      answer: Optional[Measurement] = None  # None: the setup done
      try:
        if op == "setup":
          case = _Case(dev, Path(args[0]), args[1])
          case.ranging = lambda: conn.send(RANGING)
        elif op == "measure":
          lib, name, check, min_time_s, min_runs, max_runs, early_stop_s = args
          if case is None: raise RuntimeError("measure before setup")
          key = (lib.key, name)  # a batch's library holds many candidates' entry points
          if key not in progs: progs[key] = dev.Program(lib, name)
          load = OtherLoad()  # this process's own threads are not others'
          answer = case.measure(progs[key], check, min_time_s, min_runs, max_runs, early_stop_s)
          answer.other_load = load.cores()
      except Exception as e:  # a device that lost its context fails the candidate as a crash
        answer = Measurement(Status.CRASH if isinstance(e, DeviceError) and e.lost else Status.RUN_ERROR, error=f"{type(e).__name__}: {e}")
      conn.send(answer)


class Runner:
  """The parent's handle: starts the process, sends it work, and turns a death or a hang into a Measurement."""
  SETUP_TIMEOUT_S = 120.0

  def __init__(self, module: str):
    self.module, self.restarts = module, 0
    self.case: Optional[tuple[Path, dict[str, int]]] = None  # the setup's, repeated after each restart
    self._ctx = get_context("spawn")
    self._start()

  def _start(self) -> None:
    self.conn, child = self._ctx.Pipe()
    self.proc = self._ctx.Process(target=_main, args=(child, self.module), daemon=True)
    start_alone(self.proc)
    child.close()
    self.loaded = False  # whether the process holds self.case
    if self.case: self.setup(*self.case)

  @property
  def pid(self) -> int:
    if self.proc.pid is None: raise RuntimeError("the runner process is not started")
    return self.proc.pid

  def setup(self, case_dir: Path, var_vals: dict[str, int]) -> None:
    """Load the case `write_case` wrote (again after each restart) -- not where the process holds it already: a kernel's
    next search in this process, its confirmation (a directory holds one case while it exists: search/workshop.py names
    each by its key). A 16M-element kernel's load was 0.3-0.5 CPU-s, the guarded buffers' pages faulted in again."""
    if self.loaded and self.case == (case_dir, var_vals): return
    self.case = (case_dir, var_vals)
    self.conn.send(("setup", str(case_dir), var_vals))
    try: err = self.conn.recv() if self.conn.poll(self.SETUP_TIMEOUT_S) else f"no answer in {self.SETUP_TIMEOUT_S:g} s"
    except EOFError: err = "the runner died"
    if err is not None:
      self.close()
      raise RuntimeError(f"runner setup failed: {getattr(err, 'error', err)}")
    self.loaded = True

  def _restart(self) -> None:
    self.close()
    self.restarts += 1
    self._start()

  def measure(self, lib: Binary, name: str, *, check: bool, timeout_s: float, min_time_s: float = 0.1, min_runs: int = 3,
              max_runs: int = 50, early_stop_s: Optional[float] = None) -> Measurement:
    """Time one compiled candidate: a warm-up, then at least `min_runs` and `min_time_s` of runs (at most `max_runs`), or
    half min_time_s where the two fastest agree (`confirmed`); `timeout_s` bounds the whole measurement (a hang's limit)."""
    try:
      self.conn.send(("measure", lib, name, check, min_time_s, min_runs, max_runs, early_stop_s))
      wait = timeout_s
      while self.conn.poll(wait):
        m: Measurement | str = self.conn.recv()
        if isinstance(m, str):  # RANGING: the candidate's runs are done, the check's range takes what a setup may
          wait = self.SETUP_TIMEOUT_S
          continue
        if m.status is Status.CRASH: self._restart()  # a crashed candidate may have left the device (its context, memory) unusable
        return m
      self._restart()
      return Measurement(Status.TIMEOUT, error=f"no answer after {wait:.3g} s: killed")
    except (EOFError, OSError):
      self.proc.join(5)
      code = self.proc.exitcode
      why = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
      self._restart()
      return Measurement(Status.CRASH, error=f"runner died: {why}")

  def close(self) -> None:
    self.loaded = False
    with contextlib.suppress(OSError): self.conn.send(None)
    self.proc.join(1)
    if self.proc.is_alive():
      self.proc.kill()
      self.proc.join()
    self.conn.close()

  def __enter__(self) -> Runner: return self
  def __exit__(self, *exc) -> None: self.close()
