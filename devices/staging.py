"""Host arrays given to a GPU program: staged through device buffers of the backend."""
from __future__ import annotations
from typing import Callable, Sequence
import numpy as np


def contiguous(buf, host: np.ndarray) -> np.ndarray:
  """`host` as the contiguous elements of a device buffer `buf` (its `n` and `dtype`), whose size it must have."""
  x = np.ascontiguousarray(host, buf.dtype)
  if x.size != buf.n: raise ValueError(f"copying {x.size} elements into a buffer of {buf.n}")
  return x

def staged(run: Callable[[list], object], bufs: Sequence, alloc: Callable, copyin: Callable, copyout: Callable):
  """run(device buffers), with the host arrays among bufs copied into new device buffers first and back out after, all
  of them (a kernel that writes an input must show it); returns what run returns."""
  dev = [alloc(b.size, b.dtype) if isinstance(b, np.ndarray) else b for b in bufs]
  for d, b in zip(dev, bufs):
    if isinstance(b, np.ndarray): copyin(d, b)
  out = run(dev)
  for d, b in zip(dev, bufs):
    if isinstance(b, np.ndarray): np.copyto(b, copyout(d).reshape(b.shape))
  return out
