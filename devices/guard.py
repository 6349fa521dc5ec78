"""Guard regions around a device buffer handed to an untrusted candidate: random canary bytes after its end and, where the
device's memory is host memory (a numpy array: a view can start inside the allocation), before its start too. A candidate
that writes out of bounds changes them; `trampled` says where, and the runner fails the candidate (a write that lands in
a guard never reaches the runner's other memory). Host memory lies on pages of its own, which `lock` makes read-only: the
runner's inputs, which a candidate that writes one then crashes on, instead of the check comparing them after each run."""
from __future__ import annotations
import ctypes, mmap
from typing import Optional
import numpy as np
import numpy.typing as npt
from devices.base import Device

GUARD_BYTES = 64 << 10  # on each side: a candidate's stray write is rarely farther (an unmasked tile, a wrong stride)
_libc = ctypes.CDLL(None, use_errno=True)


def _pages(n: int, dt: np.dtype) -> np.ndarray:
  """n zeros of dt on an anonymous mapping of their own, advised into huge pages as numpy advises its large arrays (the
  runtime's buffers: a memory-bound kernel is timed on pages like theirs)."""
  m = mmap.mmap(-1, n * dt.itemsize)
  if hasattr(mmap, "MADV_HUGEPAGE"): m.madvise(mmap.MADV_HUGEPAGE)
  return np.frombuffer(m, dt, n)


class Guarded:
  def __init__(self, dev: Device, n: int, dtype: npt.DTypeLike, seed: int = 0):
    self.dev, self.n, dt = dev, n, np.dtype(dtype)
    g = GUARD_BYTES // dt.itemsize  # a multiple of any vector width: the buffer keeps the allocation's alignment
    self.host = dev.HOST_MEMORY
    self.raw = _pages(g + n + g, dt) if self.host else dev.alloc(g + n + g, dt)  # host memory: pages of its own, for lock()
    self.locked = False
    self.lead = g if self.host else 0
    self.canary = np.random.default_rng(seed).integers(0, 256, 2 * g * dt.itemsize, np.uint8).view(dt)  # a device's: all after the end
    self.buf = self.raw[self.lead:self.lead + n] if self.host else self.raw  # what the candidate is given
    self.fill(np.zeros(n, dt))

  def _padded(self, x: np.ndarray) -> np.ndarray: return np.concatenate([self.canary[:self.lead], x.reshape(-1), self.canary[self.lead:]])

  def fill(self, x: np.ndarray) -> None:
    """The buffer's contents, with fresh guards (on a device, one copy of both); locked, it stays so."""
    if self.host:
      locked = self.locked
      if locked: self.lock(False)
      self.raw[:self.lead], self.raw[self.lead + self.n:] = self.canary[:self.lead], self.canary[self.lead:]
      self.dev.copyin(self.buf, x)
      if locked: self.lock()
    else: self.dev.copyin(self.raw, self._padded(x))

  def lock(self, read_only: bool = True) -> bool:
    """Host memory: the buffer's pages read-only (whole pages: the last may hold the start of the guard after it), or writable again;
    False where it cannot be (a device's memory; pages larger than GUARD_BYTES, so the buffer's first is the guard's too)."""
    if not self.host or self.buf.ctypes.data % mmap.PAGESIZE: return False  # the mapping starts on a page: the buffer, GUARD_BYTES on, too
    start, page = self.buf.ctypes.data, mmap.PAGESIZE
    prot = mmap.PROT_READ | (0 if read_only else mmap.PROT_WRITE)
    if _libc.mprotect(ctypes.c_void_p(start), ctypes.c_size_t(-(-self.buf.nbytes // page) * page), prot) != 0:
      raise OSError(ctypes.get_errno(), "mprotect failed")
    self.locked = read_only
    return True

  def contents(self) -> np.ndarray:
    return self.buf if self.host else self.dev.copyout(self.raw)[:self.n]

  def trampled(self) -> Optional[str]:
    """None while both guards hold their canaries; else which bytes a write outside the buffer changed."""
    raw = self.raw if self.host else self.dev.copyout(self.raw)
    got = np.concatenate([raw[:self.lead], raw[self.lead + self.n:]]).view(np.uint8)
    if (bad := np.flatnonzero(got != self.canary.view(np.uint8))).size == 0: return None
    lead_b, item = self.lead * self.canary.itemsize, self.canary.itemsize
    where = [f"{lead_b - b} bytes before its start" if b < lead_b else f"{b - lead_b} bytes past its end" for b in (bad[0], bad[-1])]
    return f"{bad.size} guard bytes changed ({item}-byte elements), from {where[0]} to {where[1]}"
