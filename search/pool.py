"""The compile pool: worker processes (spawned, recycled after a number of tasks) that run picklable tasks -- render a
candidate, compile a source -- and never touch a device.

Each task has its own time limit: a worker that overruns it is killed and replaced, and the task fails with
TimeoutError. A worker that dies fails its task with the signal. `paused()` stops every worker and its compiler
processes (SIGSTOP to the worker's process group) so that a timing on the CPU has the cores to itself; paused time
does not count against a task's limit.
"""
from __future__ import annotations
import contextlib, ctypes, os, signal, sys, threading, time, traceback
from collections import deque
from dataclasses import dataclass
from multiprocessing import get_context, resource_tracker
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterator, Optional, cast

_STARTING = threading.Lock()


def start_alone(p: Any) -> None:
  """p.start() for a spawned process whose target is a module's function: without the parent's __main__ script run again
  in it, which multiprocessing does so that functions defined there unpickle. Under a benchmark or the CLI that script's
  imports (scipy, the benchmark's glue, the CLI's commands) were paid by every compile worker and runner it started: under
  bench/sample_efficiency.py's, a runner's start was 0.81-0.92 CPU-s, 0.18-0.28 without (BUSY). The script is hidden
  from the spawn's preparation (which reads __main__'s __spec__ and __file__) while the process starts."""
  main = sys.modules["__main__"]
  with _STARTING:
    file, spec = main.__dict__.pop("__file__", None), getattr(main, "__spec__", None)
    main.__spec__ = None
    # SIGINT blocked in the child (the mask survives the exec) until it has left its parent's process group (leave_group):
    # a terminal's Ctrl-C in its first ~0.3 s printed a KeyboardInterrupt traceback from every child still starting up.
    # The resource tracker first: p.start() starts it where it is not running, and unblocks SIGINT after that
    resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try: p.start()
    finally:
      signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
      if file is not None: main.__file__ = file
      main.__spec__ = spec

def leave_group() -> None:
  """A child of start_alone: into a process group of its own, then SIGINT unblocked, a Ctrl-C sent to the group it left
  meanwhile dropped (ignored while pending: its parent handles a terminal's Ctrl-C, and stops its children)."""
  os.setpgrp()
  handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
  signal.signal(signal.SIGINT, handler)


def die_with_parent() -> None:
  """Linux: SIGKILL this process when its parent dies, even while it is stopped or stuck in a candidate."""
  with contextlib.suppress(OSError, AttributeError): ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def parent_gone() -> contextlib.suppress:
  """Around a child's loop: its parent's end of the pipe closed, it returns quietly. A SIGKILLed parent's files close
  before the kernel sends the child its PDEATHSIG, and a child that wrote in between printed a BrokenPipeError traceback
  into the parent's stderr (the demo's log, a terminal)."""
  return contextlib.suppress(EOFError, BrokenPipeError, ConnectionResetError)


def _worker(conn: Connection) -> None:
  leave_group()  # its own group: pausing it pauses the compilers it started; orphaned and stopped, the kernel SIGHUPs it
  die_with_parent()
  with parent_gone():
    while (msg := conn.recv()) is not None:
      fn, args = msg
      try: result = (True, fn(*args))
      except Exception as e: result = (False, f"{type(e).__name__}: {e}" if str(e) else traceback.format_exc(limit=3))
      conn.send(result)


@dataclass
class _Slot:
  proc: Any
  conn: Connection
  tasks: int = 0
  ticket: Optional[int] = None
  deadline: float = 0.0


class CompilePool:
  def __init__(self, workers: int, timeout_s: float = 60.0, max_tasks: int = 1024):
    self.timeout_s, self.max_tasks = timeout_s, max_tasks
    self._ctx = get_context("spawn")
    self._slots = [self._start() for _ in range(max(1, workers))]
    self._queue: deque[tuple[int, Callable, tuple]] = deque()
    self._next = 0
    self._closed = False

  def _start(self) -> _Slot:
    parent, child = self._ctx.Pipe()
    p = self._ctx.Process(target=_worker, args=(child,), daemon=True)
    start_alone(p)
    child.close()
    return _Slot(p, parent)

  def _replace(self, s: _Slot) -> _Slot:
    self._end(s)
    s.conn.close()
    new = self._slots[self._slots.index(s)] = self._start()
    return new

  def submit(self, fn: Callable, *args) -> int:
    """Queue fn(*args) (both picklable; fn importable by name); returns its ticket."""
    self._next += 1
    self._queue.append((self._next, fn, args))
    self._dispatch()
    return self._next

  def cancel(self) -> None:
    """Drop the queued tasks; running ones finish, their results reach whoever still waits for them."""
    self._queue.clear()

  @property
  def workers(self) -> int: return len(self._slots)

  @property
  def pending(self) -> int: return len(self._queue) + sum(s.ticket is not None for s in self._slots)

  def _dispatch(self) -> None:
    for s in list(self._slots):
      if not self._queue: return
      if s.ticket is not None: continue
      if s.tasks >= self.max_tasks: s = self._replace(s)
      ticket, fn, args = self._queue.popleft()
      try: s.conn.send((fn, args))
      except OSError:  # the idle worker died (killed from outside; seen under heavy load): a fresh one takes the task
        s = self._replace(s)
        s.conn.send((fn, args))
      s.ticket, s.tasks, s.deadline = ticket, s.tasks + 1, time.monotonic() + self.timeout_s

  def results(self, timeout: Optional[float] = None) -> Iterator[tuple[int, bool, Any]]:
    """(ticket, ok, value or error text) for the tasks that finish within `timeout` seconds (None: until one does);
    a task's error text is its exception, its overrun or its worker's death."""
    end = None if timeout is None else time.monotonic() + timeout
    while self.pending:
      busy = {s.conn: s for s in self._slots if s.ticket is not None}
      now = time.monotonic()
      wait_s = min(s.deadline for s in busy.values()) - now
      if end is not None: wait_s = min(wait_s, end - now)
      done: list[tuple[int, bool, Any]] = []
      for ready in wait(list(busy), timeout=max(0.0, wait_s)):
        s = busy[cast(Connection, ready)]  # wait() answers with what it was given
        try: ok, val = s.conn.recv()
        except (EOFError, OSError):
          s.proc.join(1)
          ok, val = False, f"compile worker died (exit code {s.proc.exitcode})"
          self._replace(s)
        done.append((cast(int, s.ticket), ok, val))  # busy: each holds a ticket
        s.ticket = None
      for s in [s for s in busy.values() if s.ticket is not None and time.monotonic() > s.deadline]:
        done.append((cast(int, s.ticket), False, TimeoutError(f"timed out after {self.timeout_s:g} s")))
        s.ticket = None
        self._replace(s)
      self._dispatch()
      yield from done
      if done and timeout is None or end is not None and time.monotonic() >= end: return

  @contextlib.contextmanager
  def paused(self):
    """Stop every worker and the processes it started while the block runs."""
    t0 = time.monotonic()
    for s in self._slots: self._signal(s, signal.SIGSTOP)
    try: yield
    finally:
      for s in self._slots: self._signal(s, signal.SIGCONT)
      for s in self._slots: s.deadline += time.monotonic() - t0

  def _end(self, s: _Slot) -> None:
    """Kill the worker and its group: a worker that died (a PR_SET_PDEATHSIG is the thread's that started it: a pool kept
    past that thread loses its workers) leaves its compilers running in its group, reparented. A dead worker's own pid is
    not signalled: reaped, it may be another process's now (its group's id is not reused while a member runs)."""
    if s.proc.is_alive(): self._signal(s, signal.SIGKILL)
    else:
      with contextlib.suppress(ProcessLookupError, PermissionError): os.killpg(s.proc.pid, signal.SIGKILL)
    s.proc.join()

  @staticmethod
  def _signal(s: _Slot, sig: int) -> None:
    """To the worker, and to its group (its compilers) once it has one: a worker still starting up has not."""
    for kill in (os.kill, os.killpg):
      with contextlib.suppress(ProcessLookupError, PermissionError): kill(s.proc.pid, sig)

  def close(self) -> None:
    if self._closed: return
    self._closed = True
    for s in self._slots:
      self._signal(s, signal.SIGCONT)
      with contextlib.suppress(OSError): s.conn.send(None)
    for s in self._slots:
      s.proc.join(2)
      self._end(s)
      s.conn.close()

  def __enter__(self) -> CompilePool: return self
  def __exit__(self, *exc) -> None: self.close()
