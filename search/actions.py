"""The action space: every opt the search may append to a schedule, in a fixed order, under a version.

A stored result names the version it was searched under; change the list (or what an action means) and bump
linearizer.ACTION_SPACE_VERSION, so results searched over another space are never reused as if they were this one's.
To add an op: one row in _SPACE (op, axes, amounts), and the bump."""
from __future__ import annotations
from typing import Iterator
from linearizer.kernel import Kernel, Opt, OptError, OptOp, allowed_ops
from linearizer.options import LinearizerOptions

# (op, axes, amounts); amount 0 takes the whole axis. Widths 8 and 16 are the AVX2/AVX-512 float vectors.
_SPACE: tuple[tuple[OptOp, range, tuple[int, ...]], ...] = (
  (OptOp.UPCAST, range(8), (0, 2, 3, 4, 8, 16)),
  (OptOp.UNROLL, range(5), (0, 2, 4, 8, 16)),
  (OptOp.LOCAL, range(6), (2, 3, 4, 8, 16, 32)),
  (OptOp.GROUP, range(3), (0, 4, 8, 16)),
  (OptOp.GROUPTOP, range(3), (16, 32, 64, 128, 256)),
  (OptOp.UPCASTMID, range(2), (2, 4)),
  (OptOp.PADTO, range(7), (8, 16, 32)),
  (OptOp.THREAD, range(3), (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)),
  (OptOp.TC, range(1), (0,)),  # the first way the kernel matches a device's tensor core (Kernel._tc_choices)
  (OptOp.BLOCK, range(4), (8, 16, 32, 64, 128)),  # CPUs' cache blocking: blocks of 8 tiles (columns) to 128 steps (a reduce)
  (OptOp.PACK, range(1, 3), (0,)),  # CPUs: copy the first or second LOAD's block to the stack (Kernel.leaves' index)
)
ACTIONS: tuple[Opt, ...] = tuple(Opt(op, a, amt) for op, axes, amts in _SPACE for a in axes for amt in amts) + (Opt(OptOp.NOLOCALS),)

MAX_UOPS = 6000      # linear-IR size: larger candidates are dropped before compiling (search/builder.py render_task)


def busiest(amt: int, cores: int) -> float:
  """The share of the work the busiest core does under THREAD amt: a split into more parts than cores runs on the cores,
  each thread a run of adjacent parts (the lowering's schedule(static))."""
  return -(-amt // cores) / amt


def thread_amounts(cores: int) -> tuple[int, ...]:
  """The THREAD amounts worth trying on `cores`: from the cores to 4x them, less each amount above the cores that a smaller
  one kept makes redundant -- it divides the amount (so it is legal wherever the amount is) and its busiest core does no
  more of the work. On 2 cores THREAD 4, 6 and 8 are THREAD 2 (half the work each) and go; THREAD 3 stays (the one split
  of an axis of 3 x odd: the busiest core 2/3 of it). On 6 cores THREAD 16 stays (its busiest core 3/16, THREAD 8's 1/4)."""
  kept: list[int] = []
  for a in sorted({o.amt for o in ACTIONS if o.op is OptOp.THREAD and o.amt is not None and cores <= o.amt <= 4 * cores}):
    if not any(a % b == 0 and busiest(b, cores) <= busiest(a, cores) for b in kept): kept.append(a)
  return tuple(kept) if cores > 1 else ()


def actions_for(o: LinearizerOptions) -> tuple[Opt, ...]:
  """The actions this device can take: ops it has, and THREAD splits in thread_amounts(its threads)."""
  ok, amts = set(allowed_ops(o)), thread_amounts(o.threads)
  return tuple(a for a in ACTIONS if a.op in ok and (a.op is not OptOp.THREAD or a.amt in amts))


def children(k: Kernel, actions: tuple[Opt, ...]) -> Iterator[Kernel]:
  """k with each action applied, where it is legal, in the action space's order. The Kernel checks the limits on
  upcasts, local sizes and shared memory; MAX_UOPS drops what would compile for too long, its lowering stopped once
  sure to end past it (linearizer/lower.py lower's limit)."""
  for a in actions:
    c = k.copy()
    try: c.apply_opt(a)
    except OptError: continue
    yield c
