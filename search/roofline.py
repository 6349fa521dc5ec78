"""The roofline stop: a schedule that already runs as fast as the device moves the bytes its kernel must move cannot be
beaten by more than noise, so a search that reaches one (the hand-coded seed, or a later round's best) ends there.

`must_move` is a lower bound on those bytes, never more: the output's written elements (a STORE's view is injective,
checked when the kernel loaded), and of each input the distinct elements a load is sure to reach -- a single view with
no mask (its every position is read: no gate) that no two positions share (so their count is its size over its
non-broadcast dims). Any other load counts nothing.

The bandwidth is not a figure: `stream` is a kernel over the search's own buffers (the runner's case, so the same
footprint, caches and pages) that moves those bytes contiguously -- the output written whole, the counted inputs of its
size read whole (element-wise: a reduce's rows summed were no bound) -- under the device's hand-coded schedule
(threads, vectors and, on the CPU, non-temporal stores where the codegen uses them). The search times it beside its
best candidate, interleaved on the same runner, so load and clocks are the same for both: a figure cached per device
and footprint class was taken under other load (this host's stream triad moved 24.5-58 GB/s across one day,
docs/benchmarks.md, session 14 and 21 entries).
"""
from __future__ import annotations
import functools, math
from dataclasses import dataclass
from typing import Optional
from devices.base import Binary, CompileError
from linearizer.ast import BufferInfo, CastArg, KernelAST, LazyOp, MemArg, concrete_st, injective, load
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, OptOp
from linearizer.lower import lower
from linearizer.options import LinearizerOptions
from linearizer.shapetracker import ShapeTracker, View
from linearizer.symbolic import concrete

# The stop: the best candidate's median within TOLERANCE of the stream's, both timed ROUNDS times interleaved. At one
# thread on this 2-core host with the rest of the machine on both cores, the stream so judged against itself read
# 0.93-1.05 in most of 32 judgements, outliers 0.36-1.18: the quiet machine's to confirm (docs/benchmarks.md, session 24)
TOLERANCE = 0.05
ROUNDS = 5
# Kernels shorter than this are not judged: a call's fixed cost (the ctypes call, ~1 us; OpenMP's fork and join; a GPU's
# launch: a few to tens of us, not measured here) must stay well under TOLERANCE of their time, 20 us at 0.4 ms.
MIN_S = 4e-4
# nor is a stream built that moves fewer bytes than this: under MIN_S on any device we tune on, whose memory moves more
# than 10 GB/s (this 2-core host's DRAM 24-58 GB/s), so never judged -- and small kernels' searches, whose builds are
# most of their time, pay no compile for it
MIN_BYTES = int(MIN_S * 10e9)


@dataclass(frozen=True)
class Traffic:
  """Elements a kernel is sure to move: the output's written (buffer 0), and per input those its loads surely read."""
  written: int
  read: dict[int, int]


def must_move(k: KernelAST, var_vals: dict[str, int]) -> Traffic:
  store = concrete_st(k.ast.arg.st, var_vals).views[0]
  written = math.prod(concrete(x) for x in (store.shape if store.mask is None else [hi - lo for lo, hi in store.mask]))
  read: dict[int, int] = {}
  for n in k.nodes:
    if n.op != "LOAD" or n.arg.buf == 0 or len((st := concrete_st(n.arg.st, var_vals)).views) != 1 or st.views[0].mask is not None: continue
    # a broadcast dim reads its elements again: the others, where no two of their positions share an element
    dims = [(s, stride) for s, stride in zip(st.views[0].shape, st.views[0].strides) if stride != 0]
    if injective(View.create([s for s, _ in dims], [stride for _, stride in dims])):
      read[n.arg.buf] = max(read.get(n.arg.buf, 0), math.prod(concrete(s) for s, _ in dims))
  return Traffic(written, read)


@dataclass(frozen=True)
class Stream:
  """The kernel that moves a Traffic's bytes (`moved`: those it reads and writes) over the same buffers, and its schedule."""
  kernel: Kernel
  moved: int


def stream(k: KernelAST, t: Traffic, options: LinearizerOptions) -> Optional[Stream]:
  """The stream of `k`'s traffic over k's buffers, numbered and typed as k's (the runner passes them all, in order): the
  output written whole as the sum of the counted inputs of its size, read whole element by element, each cast to the
  output's type; any other input counts nothing and is read at its first element only (its argument must be there).
  Not the rows of a larger input summed: under the hand-coded schedule such a stream is no bound (BUSY, 1 thread:
  sops_8536's rows of 256 summed so ran 1.23x slower than the full search's winner for them). Its schedule is the
  device's hand-coded one. None where there is nothing to stream (a kernel with variables: its arguments differ; an
  output not of floats) or the stream would not use all the device's threads."""
  n, out = t.written, k.ast.arg.dtype
  if k.vars or not out.is_float or n == 0: return None
  view = ShapeTracker((View.create((n,)),))
  def ld(b: BufferInfo, whole: bool) -> LazyOp:
    x = LazyOp("LOAD", (), MemArg(b.buf, b.dtype, view if whole else ShapeTracker((View.create((n,), (0,)),))))
    return x if b.dtype == out else LazyOp("CAST", (x,), CastArg(out))
  if not (inputs := [b for b in k.buffers if b.buf]): return None
  # an input not counted: its first element, a register, no traffic
  root = functools.reduce(lambda a, x: LazyOp("ADD", (a, x)), [ld(b, t.read.get(b.buf) == n) for b in inputs])
  ast = load(KernelAST(LazyOp("STORE", (root,), MemArg(0, out, view)), (), "roofline_stream").to_json())  # validated as any kernel is
  sk = Kernel(ast, options)
  # on every thread the device has, or it is no bound on a schedule that uses them (an output too short to split)
  if not any(o.op is OptOp.THREAD for o in hand_coded_optimizations(sk)) and options.has_threads and options.threads > 1: return None
  return Stream(sk, n * (out.itemsize + sum(b.dtype.itemsize for b in inputs if t.read.get(b.buf) == n)))


@dataclass(frozen=True)
class Built:
  """A stream compiled for the device: its library and entry point, the bytes it moves and the threads it runs on."""
  binary: Binary
  name: str
  moved: int
  threads: int


def threads(opts: list[dict]) -> int:
  """The threads a schedule (opts in their JSON form) runs on: its THREAD split's, else 1."""
  return next((o["amt"] for o in opts if o["op"] == OptOp.THREAD), 1)


def build(dev, k: KernelAST, var_vals: dict[str, int]) -> Optional[Built]:
  """k's stream compiled for `dev` (a device module), in this process (a thread of the search's: the pool's queue is the
  candidates'); None where there is none, where it moves under MIN_BYTES, or where the device did not compile it (the
  search then runs as it would without)."""
  if (s := stream(k, must_move(k, var_vals), dev.options())) is None or s.moved < MIN_BYTES: return None
  try: return Built(dev.compile(dev.render(lower(s.kernel))), "kernel", s.moved, threads([o.to_json() for o in s.kernel.applied_opts]))
  except CompileError: return None
