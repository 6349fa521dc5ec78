"""The hand-coded schedule: what runs when nothing is tuned. It must beat the unoptimised kernel
broadly and never be wrong (every opt goes through the Kernel's legality checks)."""
from __future__ import annotations
import functools, math
from linearizer import vecmath
from linearizer.ast import ConstArg, MemArg
from linearizer.shapetracker import ShapeTracker
from linearizer.lower import ACC_CHAINS, AVX2_REGISTERS, L1_WAY_BYTES
from linearizer.kernel import MAX_UPCAST, MAX_VECTORS, PACK_BYTES, Kernel, Opt, OptError, OptOp
from linearizer.vectors import consecutive, step, vector_widths
from linearizer.symbolic import Node, Var, sint, smax

def _try(k: Kernel, opt: Opt) -> bool:
  try: k.apply_opt(opt)
  except OptError: return False
  return True

def _upcast_budget(k: Kernel) -> int: return math.prod(k.upcast_shape)

def _int_size(k: Kernel, axes: range) -> int | None:
  sizes = [s for i in axes if isinstance(s := k.full_shape[i], int)]
  return math.prod(sizes) if len(sizes) == len(axes) else None

# what an EXP2/LOG2/SIN costs in adds, for whether a kernel has the work to pay for threads (linearizer.vecmath's take
# ~0.5 ns a lane, an add ~0.03)
TRANSCENDENTAL_COST = 16
# the work (positions, a transcendental's weighted as above) from which a CPU kernel's THREAD split pays for waking the
# threads: 2 threads on an Intel EMR host, quiet, libgomp's default spin (a program's kernels back to back): a*b+c over
# 64K floats 17.3 -> 9.6 us, the sum of 256 rows of 1024 13.3 -> 8.1, the 32-op chain over 64x64 33 -> 18; at 16K floats
# (4.4 us) and 64 rows (3.8) even. torch splits its CPU loops from 32K elements (at::internal::GRAIN_SIZE) alike. It was
# 4M, never measured: corpus kernels of 0.3-1.2 ms ran on one core at half torch.compile's speed (sops_1020, sops_7021)
THREAD_WORK = 1 << 16

# GPUs: a matrix-vector product splits each row's reduce over MV_GROUP work-items and gives a work-group MV_ROWS rows,
# each work-item MV_UPCAST of them; a small output over a long reduce splits the reduce over work-items instead
MV_GROUP, MV_ROWS, MV_UPCAST = 8, 4, 4
GROUPTOP_SIZES, SMALL_OUTPUT = (256, 16), 2048
LOCAL_SIZE = 128  # work-items the locals aim for: enough warps to hide latency, few enough to fit any device
# CPUs: a tile's reduce in blocks of BLOCK_K elements, the output's vector axis in blocks of BLOCK_N elements: a matmul's
# B block (256 x 256 floats, 256 KB) stays in L2 across the rows of A, A's rows of a tile (8 x 256) in L1 across the
# columns. Measured on matmul 2048 (1 thread, busy machine): 0.22x of OpenBLAS unblocked, 0.57x with the reduce
# blocked, 0.68x with both
BLOCK_K = BLOCK_N = 256
# AVX2 (8 lanes): a tile's rows of A, a whole row of A apart (4 KB at 1024 floats), share L1 sets, and the tile read them
# in place (1024x56 @ K, B packed, 1 thread, busy Zen 3: K=1024 48.7 GFLOP/s, K=1040 77.7): A packed too, in blocks of
# BLOCK_M rows, beside B's block of BLOCK_M columns (both within kernel.PACK_BYTES); _packed_rows
BLOCK_M = 128
# AVX2, such a matmul's register tile: AVX2_TILE rows x AVX2_TILE_VECTORS vectors of columns, ACC_CHAINS accumulators
# whose loop step loads 4 broadcasts of A and 2 vectors of B for 8 FMAs (8 rows x 1 vector: 8 broadcasts and 1 vector;
# a broadcast is a load, and the loads, not the FMAs, set the pace). 1024, 1 thread, busy Zen 3, interleaved with numpy
# (CPU time): 8x1 0.74-0.79x of OpenBLAS, 4x2 0.91-0.97x (with lower's eager chain: without it 0.76x), 6x2 over 1026
# padded rows 0.88-0.95x, 3x4 0.94x, 2x4 0.82x, 12x1 0.76x. QUIET it ran 0.58-0.60x: gcc had folded each vector of B
# into its 4 FMAs as a memory operand, 24 loads a step, not 12; render_c.kept_loads keeps them in registers (0.77-0.93x)
AVX2_TILE, AVX2_TILE_VECTORS = 4, 2
# AVX-512 (16 lanes, 32 registers), the same tile rule: 8 x 1 (the AVX-512 rule before) has 8 accumulators, just the 8
# chains two FMA ports of 4-cycle latency need, and its step's 8 broadcasts (folded into the FMAs) and 1 vector of B are
# 9 loads for 8 FMAs, over the 2 loads a cycle beside them; 4 x 4 keeps 16 accumulators, 4 vectors of B and a broadcast
# in 21 registers (gcc: no spills, values first), 8 loads a step of 16 FMAs. 1 and 2 threads, busy Intel Emerald Rapids
# class (2 FMA ports), interleaved with numpy (CPU time, the fastest run of each), against OpenBLAS: 1024 8x1
# 0.93-0.95x, 4x4 1.01-1.04x; 2048 0.86-0.91x vs 0.93-1.00x (2 threads 0.96-1.01x vs 1.02-1.07x); 4096 0.81-0.84x vs
# 0.86-0.87x (2 threads 0.89-0.90x vs 0.92-0.94x). 8x2 (values first: 4 accumulators spilled) 0.92x, eager (lower)
# 0.98-1.03x, no better than 4x4 and a codegen change for every AVX-512 tile; 6x4, 12x2 and 14x2 over padded rows
# 0.54-0.66x (the padding's masks spill); A packed too (_packed_rows: B's block copied again every 128 rows) 0.79-0.91x.
# The 1x1 convs it takes as well ran 1.00-1.12x (sops_619 2.7x: B's block packed now). Zen 4 (one 512-bit FMA a cycle,
# as two halves: LinearizerOptions.half_width_fma) keeps 8 x 1 (no register tile): there 4 x 4 lost, QUIET, 1 thread,
# interleaved runs against OpenBLAS: 1024 0.87-0.90x vs 8 x 1's 1.12-1.13x, 2048 0.80x vs 0.98-1.02x (main 63944a4 vs
# 7b7bf29)
AVX512_TILE, AVX512_TILE_VECTORS = 4, 4
REGISTER_TILES = {8: (AVX2_TILE, AVX2_TILE_VECTORS), 16: (AVX512_TILE, AVX512_TILE_VECTORS)}  # vector width: (rows, vectors)
# AVX-512, an NT matmul over a reduce of at most SHORT_REDUCE (attention's Q K^T): _packed_columns' vector along the
# output's columns with B packed, COLUMN_TILE rows a step, not _packed_vector's, whose lanes are stored transposed, a
# scalar each, after as few FMAs a vector as the reduce is long. 1 thread, busy Intel EMR, CPU time: 32 x 512x512 @
# 512x64^T (bmm_32x512x512x64_qkT) 0.73x -> 1.33x of OpenBLAS, 128 deep 0.74x -> 1.07x (256 deep, B's block of 2
# batches x 256 columns is over PACK_BYTES: not taken); the 9 corpus kernels it changes 1.0-5.9x (sops_8262 5.9x,
# sops_4609, 8 x 4096x4096 @ 40 deep, 4.4x, sops_1381, 16 x 384x384 @ 64 deep, 1.8-2.2x; sops_3838 and sops_2473, 10 us,
# 1.0x)
SHORT_REDUCE, COLUMN_TILE = 128, 8
# _packed_vector's accumulators (vectors), leaving registers for the packed vector and a broadcast: 14 of AVX-512's 32
# (1x1 conv 256->64 56x56, Zen 4: 14 pixels 86, 16 pixels 62 GFLOP/s); 12 of AVX2's 16, as BLAS kernels there keep
PIXEL_TILE_512, PIXEL_TILE = 14, 12
WINDOW = 7  # the longest innermost reduce _packed_vector unrolls whole: a conv window's row (the stem's 7)
CHANNEL_VECTORS = 2  # vectors of output channels in _packed_vector's tile, where they fit
# _gathered_rows: a strided conv's input over GATHER_BYTES (Zen 4's L2; the Intel host's is 2 MB, Zen 1's 512 KB) under
# at least GATHER_VECTORS vectors of output channels, copied in blocks of rows that copy the packed weights at most
# ROW_COPIES times
GATHER_BYTES, GATHER_VECTORS, ROW_COPIES = 1 << 20, 16, 4
PAD_WASTE = 16  # _padded_pixels pads an axis of at least this many tiles: at most 1/16 of its work wasted
PAD_REDUCE = 64  # ... under a reduce of at least this many elements
POOL_WINDOW = 16  # the positions of a pooling window (3x3, 2x2) _streamed_row reads at a stride of 2
ROW_BLOCK = 8  # the rows of a streamed row's reduce one block reads whole (_row_blocks)
# the farthest apart a column sum's rows may be for LinearizerOptions.column_sum_rows' rows a step (_stream_rows). Zen 4,
# 1 thread, BUSY, interleaved, thread CPU time, 8 rows of 8 vectors a step in blocks of 16 against 2 rows of 16 vectors
# in blocks of 8 (where 2 rows already streamed at 94% of a C read 256 KB apart): 4096x4096 (16 KB) 1.12-1.13x, 1024x8192
# (32 KB) 1.07x, 256x65536 (256 KB) 0.86x, 64x393216 (1.5 MB) 0.80x
COLUMN_ROW_BYTES = 32 << 10

def _group_reduce(k: Kernel) -> bool:
  """Split the reduce over the work-items of a work-group where one work-item per output would starve the device."""
  if k.reduceop is None: return False
  out, red = _int_size(k, range(k.first_reduce)), _int_size(k, range(k.first_reduce, k.shape_len))
  if out is None or red is None or red < 256: return False
  strides = [st.views[-1].strides for st in k.sts[1:]]
  vector = any(all(s[i] == 0 for i in range(k.first_reduce)) and any(s[i] != 0 for i in range(k.first_reduce, k.shape_len)) for s in strides)
  if k.reduceop.arg.fn == "SUM" and k.first_reduce >= 1 and vector and _try(k, Opt(OptOp.GROUP, 0, MV_GROUP)):
    # matrix-vector: every row reads the whole vector; rows go to work-items MV_ROWS a group, MV_UPCAST each
    if _try(k, Opt(OptOp.LOCAL, k.first_reduce - 1, MV_ROWS)): _try(k, Opt(OptOp.UPCAST, k.first_reduce - 1 - k.local_dims, MV_UPCAST))
    return True
  # the first reduce axis that divides: (32, 2, 112, 112) summed over its last three groups its 112s, not its 2 (on an
  # H100 its 8 work-items of 4 outputs each took 15.3 ms, a work-group a sum 62 us)
  axes = range(k.shape_len - k.first_reduce)
  return out <= SMALL_OUTPUT and any(_try(k, Opt(OptOp.GROUPTOP, axis, amt)) for amt in GROUPTOP_SIZES for axis in axes)

def _locals(k: Kernel) -> None:
  """Work-groups over the global axes, innermost first (the output's contiguous axis, so loads coalesce)."""
  budget = min(LOCAL_SIZE, k.options.local_size_max)
  for axis in reversed(range(k.thread_dims, k.first_reduce - k.local_dims)):
    size = k.full_shape[axis]
    amt = next((a for a in (32, 16, 8, 4, 2) if isinstance(size, int) and size % a == 0 and a <= budget and _try(k, Opt(OptOp.LOCAL, axis, a))), None)
    if amt: budget //= amt
    if budget < 2: break

def _tensor_cores(k: Kernel) -> bool:
  """A matrix product on a device with tensor cores: TC, two tiles per warp along N and along M (each A fragment used
  twice, each B fragment too) and two warps along each (a work-group of 4 warps shares the L1 lines of its tiles)."""
  if not k.options.tensor_cores or k.applied_opts: return False
  try: _, _, _, m, n, _ = k._tc_choices()[0]
  except OptError: return False
  if not _try(k, Opt(OptOp.TC, 0, 0)): return False
  for op in (OptOp.UPCAST, OptOp.LOCAL):  # the global axes keep their places: TC, UPCAST and LOCAL move split parts past them
    for axis in (n, m): _try(k, Opt(op, axis, 2))
  return True

def _indexing(k: Kernel) -> tuple[list[Var | None], list[tuple[sint, sint]]]:
  """A variable for each axis of int size over 1, and each LOAD's (index, validity) in them."""
  vs = [Var(f"_v{i}", 0, s - 1) if isinstance(s, int) and s > 1 else None for i, s in enumerate(k.full_shape)]
  return vs, [st.expr_idxs([0 if st.shape[i] == 1 or x is None else x for i, x in enumerate(vs)])
              for a, st in zip(k.leaves[1:], k.sts[1:]) if isinstance(a, MemArg)]

def _reduce_loads(k: Kernel) -> set:
  """The MemArgs the reduce reads (its operands), not those of the epilogue after it."""
  return {n.arg for n in k.reduceop.toposort() if n.op == "LOAD"} if k.reduceop is not None else set()

def _reduce_operands(k: Kernel) -> list[int]:
  """The leaf indices of the buffers the reduce loads (its operands), the output's excluded."""
  loads = _reduce_loads(k)
  return [j for j, a in enumerate(k.leaves) if j > 0 and isinstance(a, MemArg) and a in loads]

def _clean_vector(k: Kernel, axis: int, operands: bool = False) -> bool:
  """Does a LOAD (with `operands`, one of the reduce's) read output axis `axis` as consecutive elements valid together:
  a vector load, not lanes gathered or masked (a padded conv's rows are masked at the image's edges, a strided conv's
  rows strided)?"""
  vs, loads = _indexing(k)
  inside = _reduce_loads(k)
  mems = [a for a in k.leaves[1:] if isinstance(a, MemArg)]
  return (v := vs[axis]) is not None and any(consecutive(idx, valid, v) for (idx, valid), a in zip(loads, mems) if not operands or a in inside)

def _shared_window(k: Kernel, pixel: int, column: int) -> bool:
  """Do neighbouring pixels read each other's inputs at neighbouring window columns (a LOAD's index steps alike along
  both axes: a stride-1 conv's input along its row and its window's row)?"""
  vs, loads = _indexing(k)
  if (p := vs[pixel]) is None or (c := vs[column]) is None: return False
  return any((s := step(idx, p)) is not None and s != 0 and step(idx, c) == s for idx, _ in loads)

def _tile_part(k: Kernel, axes: list[int], n: int, budget: int) -> int | None:
  """The largest divisor of axes[n]'s size within `budget` accumulators, or half of it where another axis follows."""
  cap = budget // 2 if n + 1 < len(axes) else budget
  return max((d for d in range(2, cap + 1) if smax(k.full_shape[axes[n]]) % d == 0), default=None)

def _accumulators(k: Kernel, width: int) -> int:
  """The output's vectors of `width` lanes a tile of k keeps in registers (its output upcasts' elements over `width`)."""
  return math.prod(s for i, s in enumerate(k.upcast_shape, k.shape_len - k.upcasted) if not k.is_reduce_axis(i)) // width

def _packed_vector(k: Kernel, width: int, narrow: bool = False, beat: int = 0) -> bool:
  """CPUs, a reduce whose output's contiguous axis is no clean vector (a padded or strided conv's rows, 14 or 28 wide):
  the vector along another output axis instead, one where an operand is broadcast (a conv's input along the output
  channels) and the operands that vary along it are packed, that axis innermost (the weights): blocks of one vector
  along it, a tile of pixels on the other axes that reuse each packed vector, each lane stored once after the reduce
  (lower._vector_axis). Measured on ResNet-50's 3x3 convs, 1 thread, Zen 4, busy machine: 3x3 256 14x14 8.9 -> 48,
  3x3 64 56x56 28 -> 76, 3x3 128 stride 2 16 -> 59 GFLOP/s; applied to a copy, kept only whole. `narrow`: one vector of
  half the width, along an axis the full width divides (where that one's packed weights are over the budget). `beat`: the
  accumulators its tile must exceed."""
  # the reduce's operands only: a load after it (a residual added to the conv, BatchNorm's per-channel vectors) is read
  # once an output, and one varying along the pixels kept them out of the tile (1x1 conv 512->2048 7x7 plus a residual:
  # one pixel a step, 0.24x tinygrad BEAM=2's kernel)
  inside = _reduce_loads(k)
  loads = [(j, st.views[-1].strides) for j, (a, st) in enumerate(zip(k.leaves, k.sts)) if j > 0 and isinstance(a, MemArg) and a in inside]
  for axis in range(k.thread_dims + k.block_dims, k.first_reduce):
    size = k.full_shape[axis]
    packed = [j for j, s in loads if s[axis] != 0]
    if not isinstance(size, int) or size % width or not packed or all(s[axis] != 0 for _, s in loads): continue
    # two vectors of it where they divide it, a row of 7 pixels follows and their packed copies stay under half the
    # budget: each input read then feeds twice the multiply-adds (1 thread, busy Zen 5: 1x1 conv 256->512 stride 2 1.29
    # -> 0.90 ms; 1x1 512->2048 7x7 with a residual, 64 KB a block, 3.9 -> 1.7 ms on Zen 4; but 1x1 1024->256 7x7, 128
    # KB, 1.04 -> 1.32 ms and 1x1 2048->512 7x7, 256 KB, 0.74 -> 0.99: kept one). AVX2, a copy of half the budget too
    # (1x1 2048->512 7x7, 128 KB, BUSY Zen 1: 1.12x, _channel_tile)
    half = PACK_BYTES // 2 + (not k.options.avx512)
    tiles = [(width // 2, 1)] if narrow else [(width, n) for n in ((CHANNEL_VECTORS, 1) if size % (CHANNEL_VECTORS * width) == 0 else (1,))]
    # a strided 1x1 conv's input packed in blocks of rows first, each tile's largest block that fits (_gathered_rows)
    for (w, vecs), rows in [*((tile, r) for tile in tiles for r in _gathered_rows(k, axis, packed)), *((tile, None) for tile in tiles)]:
      t = _channel_tile(k, axis, w, vecs, packed, rows)
      if t is not None and (vecs == 1 or t.pack_bytes(packed) < half) and _accumulators(t, w) > beat:
        k.apply_opts(t.applied_opts[len(k.applied_opts):])
        return True
  return False

def _channel_tile(k: Kernel, axis: int, width: int, vecs: int, packed: list[int], rows: tuple[int, int, int] | None = None) -> Kernel | None:
  """_packed_vector's schedule on a copy of k: `vecs` vectors of `axis` and a tile of pixels, or None where it does not
  apply; with `rows` (_gathered_rows' (leaf, axis, block)), that axis in blocks outside the channels' and that leaf packed."""
  t, block = k.copy(), width * vecs
  if rows is not None and rows[2] < smax(k.full_shape[rows[1]]):
    if not _try(t, Opt(OptOp.BLOCK, rows[1], rows[2])): return None
    axis += 1  # (past the row block, which goes before every global axis)
  at = axis + (t.full_shape[axis] != block)  # the block's lanes follow its BLOCK loop
  if not ((t.full_shape[axis] == block or _try(t, Opt(OptOp.BLOCK, axis, block))) and _try(t, Opt(OptOp.UPCAST, at, width if vecs > 1 else 0)) and
          (vecs == 1 or _try(t, Opt(OptOp.UPCAST, at, vecs)))): return None
  # the accumulators: a tile over the pixel axes, which reuse each packed vector, innermost first, leaving 2 for the
  # next where one follows (a 3x3 conv 256 channels 14x14: 7 x 2 ran 1.5x faster than 14 x 1); but where neighbouring
  # pixels share their inputs along a short window row (the innermost reduce), a row of pixels with the window's row
  # unrolled beside it (7 pixels x 3 columns read 9 inputs: 3x3 convs, stride 1, 1.1-1.4x faster than 7 x 2 pixels;
  # stride 2 shares less, and was slower so). Two vectors take one row of pixels.
  pixels = _pixel_axes(t, packed)
  last = t.shape_len - t.upcasted - 1
  wide = k.options.avx512
  budget = (PIXEL_TILE_512 if wide else PIXEL_TILE) // vecs
  # AVX2, two vectors of a strided conv: a row takes the largest part of it within the budget, a window row of WINDOW
  # (the stem's 7x7) 7 pixels, as on AVX-512, over the registers' budget (14 accumulators, 2 weight vectors: the input's
  # broadcasts fold into the FMAs). Against one vector's 2-D tile, interleaved, busy Zen 3, 1 and 2 threads: 1x1 256->512
  # stride 2 2x4 1.01-1.17x, 64->128 1.00-1.06x; 7x7 3->64 stride 2 (sops_7858) 2x7 1.01-2.20x; but 3x3 stride 2 2x7
  # 0.75-1.21x (128 and 64 channels, the 3-channel stem) and 2x4 (below). Its input gathered (`rows`), 7 pixels too: 1x1
  # 256->512 stride 2, 1 thread, BUSY Zen 1, thread CPU time, interleaved: 2x7 gathered 6.68 ms, 2x4 gathered 9.73, 2x4
  # in place (before) 9.38, 2x7 in place 11.0
  strided = vecs > 1 and not wide and _strided_conv(t, pixels, packed)
  window_row = t.full_shape[last] if t.is_reduce_axis(last) else 0
  short_row = isinstance(window_row, int) and 1 < window_row <= WINDOW
  if strided and (window_row == WINDOW or rows is not None): budget = PIXEL_TILE_512 // vecs
  # AVX2, two vectors beside pixels no part of the budget divides but AVX-512's 7 does (a 7x7 image's 49): those 7, as the
  # 7x7 stem's row (1x1 2048->512 7x7, BUSY Zen 1, CPU time, interleaved: 1 thread 4.74 -> 4.23 ms, 2 threads 6.30 ->
  # 5.99, torch eager beside them 4.40 at 1; over reduce blocks of BLOCK_K, as AVX-512's below, 4.70 at 1)
  if vecs > 1 and not wide and pixels and _tile_part(t, pixels, 0, budget) is None and \
      _tile_part(t, pixels, 0, PIXEL_TILE_512 // vecs) == PIXEL_TILE_512 // vecs: budget = PIXEL_TILE_512 // vecs
  padded = _padded_pixels(t, pixels, budget)
  # AVX-512, a strided conv's short window row (its input not shared along the row of pixels) where the row's part fills
  # its half of the budget (7 of 14): that row of pixels with the window's row unrolled, as a stride-1 window's, not a
  # 2-D tile of pixels. 1 thread, busy Zen 4, CODEGEN 20, interleaved, against the 7 x 2 tile: 3x3 stride 2, 128
  # channels 56x56 1.29-1.43x (7 x 2 with the window row unrolled 1.01x, 4 x 2 1.22x), 256 at 28x28 1.20x, 512 at 14x14
  # (half-width vectors) 1.13x; two vectors (64 at 56x56, the 7x7 stem) 0.98-1.01x, and a row's part of 4 or 2 pixels
  # 0.81-1.06x (sops_5748, sops_2471, sops_2472, sops_2397: too few accumulators): not taken. Full-width AVX-512, two
  # vectors whose copy is half the budget or more (their input channels blocked below: _channel_blocks) take it too, their
  # 7 pixels all of their budget (1 thread, BUSY Emerald Rapids, thread CPU time, interleaved: 3x3 stride 2, 128 channels
  # 56x56, 1.21x one vector's 7 pixels unrolled, 1.11x not; 256 at 28x28 1.05x, 0.95x not)
  pair = vecs > 1 and wide and not k.options.half_width_fma and t.pack_bytes(packed) >= PACK_BYTES // 2
  row_budget = PIXEL_TILE_512 if pair else budget
  strided_row = wide and short_row and bool(pixels) and _tile_part(t, pixels, 0, row_budget) == row_budget // 2 and \
    _strided_conv(t, pixels, packed)
  window = not padded and bool(pixels) and _tile_part(t, pixels, 0, budget) is not None and short_row and \
    (strided_row or _shared_window(t, pixels[0], last))
  # AVX2, two vectors beside a stride-1 window row (its inputs shared, the window's row unrolled): a part of the row of up
  # to 7 pixels, as the stem's (3x3 64 56x56, thread CPU time, interleaved, busy Zen 3, 1 thread: against one vector's 4
  # pixels, 2x7 1.35x, 2x4 1.31x; one vector's 8 pixels 1.25x), where their lanes' stores spread over L1's sets
  spread = vecs > 1 and not wide and _spread_lanes(k, axis)
  if spread and window: budget = PIXEL_TILE_512 // vecs
  row = pixels[:1] if window or vecs > 1 else pixels
  # AVX2, one vector: a window row whose budget's half (left for the next pixel axis, which a window row's tile does not
  # take) keeps under ACC_CHAINS // 2 accumulators takes the whole row where it fits the registers left beside the packed
  # vector and a broadcast (3x3 conv 256 channels 14x14, busy Zen 3, interleaved, 1 thread: 2 pixels 6.38 ms, 7 pixels
  # 8.25, the whole row 3.98; but sops_627's 8-wide row, 4 pixels kept, ran 0.76x whole)
  whole = window and vecs == 1 and not wide and smax(t.full_shape[row[0]]) <= AVX2_REGISTERS - 2 and \
    (_tile_part(t, pixels, 0, budget) or 0) < ACC_CHAINS // 2
  # two vectors only beside a whole row of 7 pixels (or a padded one, or on AVX2 a strided 1x1's part of a row of at
  # least ACC_CHAINS accumulators, or where their lanes' stores spread, a window row's): with fewer, or none, they
  # measured 0.2-0.7x (sops_7440, sops_4609). A strided 3x3's 2x4, 1.12-1.28x its one vector's 4 x 2 at CODEGEN_VERSION
  # 18, ran 0.99x (1 thread) and 0.93x (2) at 19, whose reduce order sped that tile up: kept on one vector
  part = _tile_part(t, row, 0, budget) if row else None
  avx2_part = (strided and not short_row or spread and window) and part is not None and part * vecs >= ACC_CHAINS
  if vecs > 1 and not padded and not avx2_part and part != budget: return None
  # (AVX2, one vector beside a window row: its part within the whole budget, 8 of 32 or 64, not the half left for a next
  # pixel axis its tile does not take: 1.04-1.13x, busy Zen 3, thread CPU time; sops_566, sops_581, 640 channels 32x32)
  avx2_window = window and not wide
  for n, i in enumerate(row):
    amt = padded if n == 0 and padded else smax(t.full_shape[i]) if whole else \
      _tile_part(t, pixels if vecs == 1 and not avx2_window else row, n, budget)
    if amt is not None and _try(t, Opt(OptOp.UPCAST, i, amt)): budget //= amt
  if window: _try(t, Opt(OptOp.UNROLL, last - t.first_reduce, 0))
  # a tile of fewer accumulators than hide an FMA's latency where pixels are left to loop over, reusing the packed vector
  # (none of their sizes divides: GPT-2's LM head, 50257 columns, one accumulator): the reduce unrolled, its products
  # summed as a tree into each (128x768 @ 50257x768^T, 1 thread, busy Zen 4: 481 -> 349 ms by 8); not where every pixel
  # is in the tile or there is none (matrix-vector products, 4 rows: memory-bound, 0.8-0.9x)
  elif (acc := _accumulators(t, width)) < ACC_CHAINS and any(smax(t.full_shape[i]) > 1 for i in pixels) and \
      t.is_reduce_axis(last := t.shape_len - t.upcasted - 1):
    next((a for a in (8, 4, 2) if acc * a <= ACC_CHAINS and _try(t, Opt(OptOp.UNROLL, last - t.first_reduce, a))), None)
  # AVX-512, two vectors whose packed weights would be over half the budget (_packed_vector keeps one there): the reduce
  # in blocks of BLOCK_K, a block's copy a fraction of that. 1 thread, BUSY Emerald Rapids, thread CPU time, interleaved,
  # against one vector: 1x1 2048->512 7x7 (256 KB whole) 1.67-1.71 -> 1.42-1.52 ms (two vectors unblocked 1.45; over
  # blocks of 128 1.48), 1024->256 14x14 (sops_3174, one vector x 14 pixels) 1.25 -> 1.08, sops_7647 (1152->192 7x7,
  # batch 2) 0.47 -> 0.41; 2 threads, 2048->512 least of 261 0.84 -> 0.69. Zen 4 ran two vectors' whole 128 and 256 KB
  # copies slower (2048->512: 0.59x, 32 rows 8 KB apart copied into one L1 set, before lower.pack copied them in lines)
  # and their 64 KB ones faster (_packed_vector): a block's 32 KB is under that, its rows copied in lines
  if vecs > 1 and wide and t.pack_bytes(packed) >= PACK_BYTES // 2:
    if t.is_reduce_axis(inner := t.shape_len - t.upcasted - 1): _block(t, inner, 1, BLOCK_K)
    # full-width AVX-512 (two FMAs a cycle), where that leaves the copy at half the budget or more (a window's reduce,
    # whose innermost axis is the window's row): the input channels in blocks (_channel_blocks). 1 thread, BUSY Emerald
    # Rapids, thread CPU time, interleaved, against one vector x 7 pixels (7 accumulators: fewer than two FMA ports'
    # chains, their products summed as a tree), blocks of 64 channels: 3x3 256 14x14 1.11-1.14x (of 128 1.16-1.21x), 128
    # stride 2 56x56 1.17-1.40x (unblocked 1.06-1.20x), 128 28x28 1.18-1.34x (unblocked 1.26-1.28x), 512 7x7 1.35-1.38x
    if not k.options.half_width_fma and t.pack_bytes(packed) >= PACK_BYTES // 2: _channel_blocks(t, packed)
  return t if all(_try(t, Opt(OptOp.PACK, j)) for j in packed + ([rows[0]] if rows is not None else [])) else None

def _channel_blocks(t: Kernel, packed: list[int]) -> None:
  """BLOCK the reduce's outermost axis (a conv's input channels) into the largest blocks whose packed copies are under
  half of PACK_BYTES, where one divides it."""
  size = t.full_shape[axis := t.first_reduce]
  def fits(d: int) -> bool: return _try(c := t.copy(), Opt(OptOp.BLOCK, axis, d)) and c.pack_bytes(packed) < PACK_BYTES // 2
  if isinstance(size, int) and (d := next((d for d in range(size // 2, 1, -1) if size % d == 0 and fits(d)), None)) is not None:
    t.apply_opt(Opt(OptOp.BLOCK, axis, d))

def _pixel_axes(k: Kernel, packed: list[int]) -> list[int]:
  """The global axes past threads and blocks, innermost first, that reuse each packed vector (the packed leaves do not
  move along them): a conv's pixels."""
  return [i for i in reversed(range(k.thread_dims + k.block_dims, k.first_reduce))
          if isinstance(m := k.full_shape[i], int) and m > 1 and all(k.sts[j].views[-1].strides[i] == 0 for j in packed)]

def _gathered_rows(k: Kernel, axis: int, packed: list[int]) -> list[tuple[int, int, int]]:
  """_packed_vector's vector along `axis` of a strided conv whose input's copy would hold each element it reads
  once (a 1x1 window; a 3x3 one's overlap): that input packed too, gathered into a dense copy, in blocks of the rows of
  pixels outside the channels' blocks (leaf, rows' axis, rows a block), largest first, each block copying the packed
  weights again, at most ROW_COPIES times. Left in place, each block of channels reads the input again at every other
  element of its rows: where the blocks are many and the input over GATHER_BYTES, that costs more than one copy. 1
  thread, BUSY Emerald Rapids (2 MB of L2), thread CPU time, interleaved: 1x1 256->512 stride 2 56x56 (3.2 MB, 32
  vectors of channels) 3.26-3.48 -> 1.99-2.05 ms in blocks of 7 rows (2.24 of 4, 2.78 of 2; 2.58 with the loops so but
  the input read in place), 512->1024 stride 2 28x28 (1.6 MB, 64 vectors) 2.62-2.80 -> 2.25-2.38 (one vector, 7 rows;
  3.07 with two vectors' 2 rows, the weights copied 7 times); but 64->128 stride 2 56x56 (0.8 MB, 8 vectors) 0.135 ->
  0.146 and 128->64 (1.6 MB, 4 vectors) 0.146 -> 0.163. Zen 4's L2 is half this one's: its in-place reads of such an
  input miss it sooner, not later. AVX2 (Zen 1, 512 KB of L2), 1x1 256->512 stride 2 (64 vectors of 8), BUSY, CPU time,
  interleaved: 1 thread 9.38 -> 6.68 ms (torch eager beside it 7.50), 2 threads 10.8 -> 8.29 (two vectors x 7 pixels,
  _channel_tile)."""
  pixels = _pixel_axes(k, packed)
  rest = [j for j in _reduce_operands(k) if j not in packed]
  width = max(k.options.float_vector_widths, default=4)
  if smax(k.full_shape[axis]) < GATHER_VECTORS * width or len(rest) != 1 or not _strided_conv(k, pixels, packed): return []
  a = k.leaves[rest[0]]
  if k.ast.buffer_sizes()[a.buf] * a.dtype.itemsize <= GATHER_BYTES or not _distinct_reads(k, rest[0]): return []
  size = smax(k.full_shape[pixels[1]])
  return [(rest[0], pixels[1], r) for r in range(size, 0, -1) if size % r == 0 and size // r <= ROW_COPIES]

def _distinct_reads(k: Kernel, leaf: int) -> bool:
  """Does `leaf` read a different element at every index of the axes it varies along, all valid (no window overlapping
  the next, no padding): its steps, smallest first, each past the span of those before, as a mixed radix's digits?"""
  vs, loads = _indexing(k)
  idx, valid = loads[[j for j, a in enumerate(k.leaves) if j > 0 and isinstance(a, MemArg)].index(leaf)]
  steps = [(s, v.max + 1) for v in vs if v is not None and isinstance(s := step(idx, v), int)]
  if valid != 1 or len(steps) != sum(v is not None for v in vs): return False
  span = 0
  for s, n in sorted((abs(s), n) for s, n in steps if s != 0):
    if s <= span: return False
    span += s * (n - 1)
  return True

def _packs_outweigh(k: Kernel) -> bool:
  """Are the packed operands' buffers (a conv's weights) larger than the reduce's other operands' (its input)? Threads
  then split an axis the packed copies vary along (the output channels' blocks), each thread packing its share of them,
  not the pixels, which made each pack all of them while it read half the input. 2 threads, busy Zen 3, process CPU
  time: 3x3 256 14x14 (2.4 MB of weights, 0.2 MB of input) 1.06x; but 1x1 256->512 stride 2 (0.5 MB, 3.2 MB) 0.91x."""
  mems = _reduce_operands(k)
  sizes = k.ast.buffer_sizes()
  def size(js: list[int]) -> int: return sum(sizes[k.leaves[j].buf] * k.leaves[j].dtype.itemsize for j in js)
  return size([j for j in mems if j in k.packed]) > size([j for j in mems if j not in k.packed])

def _spread_lanes(k: Kernel, axis: int) -> bool:
  """Do the lanes of a vector along output axis `axis`, each stored alone after the reduce (a conv's output channels),
  fall in different L1 sets: is the output's stride along it no multiple of L1_WAY_BYTES? Where it is (a conv's 64x64
  channel planes, 16 KB), two vectors' 16 lanes share one set of 8 ways and evict each other's lines: 3x3 4->320 64x64,
  two vectors beside 4 pixels against one, busy Zen 3, 1 thread, thread CPU time: 0.91x (sops_2454, batch 2: 0.77x);
  68x68, 18.5 KB, 1.13x."""
  stride = k.sts[0].views[-1].strides[axis]
  return isinstance(stride, int) and stride * k.leaves[0].dtype.itemsize % L1_WAY_BYTES != 0

def _strided_conv(t: Kernel, pixels: list[int], packed: list[int]) -> bool:
  """Does an operand of the reduce that is not packed (a conv's input) skip elements along both of the two innermost
  pixel axes: `s` > 1 apart along the row of pixels, `s` rows apart along the next (a strided conv's input, which
  neighbouring pixels do not share)? A matrix's rows (a matmul's) are read whole."""
  vs, loads = _indexing(t)
  if len(pixels) < 2 or (col := vs[pixels[0]]) is None or (row := vs[pixels[1]]) is None: return False
  inside, mems = _reduce_loads(t), [j for j, a in enumerate(t.leaves) if j > 0 and isinstance(a, MemArg)]
  for j, (idx, _) in zip(mems, loads):
    if j in packed or t.leaves[j] not in inside: continue
    s, rows = step(idx, col), step(idx, row)
    if isinstance(s, int) and isinstance(rows, int) and s > 1 and rows >= s * s * smax(t.full_shape[pixels[0]]): return True
  return False

def _padded_pixels(t: Kernel, pixels: list[int], budget: int) -> int:
  """_channel_tile's innermost pixel axis, where no part of the budget divides it and it is long (GPT-2's LM head:
  50257 = 29 x 1733 columns), padded (PADTO) to a multiple of the power of two within the budget plus one, which the
  tile then takes: 0 where it does not apply. Only its last tile's loads of the other operand are masked, and padded
  outputs are not stored. The LM head, 128x768 @ 50257x768^T, 1 thread, busy Zen 4: one vector of 16 rows a column with
  the reduce unrolled 430 ms, 2 vectors x 8 padded columns 158-167 ms (OpenBLAS 180-205), x 7 175, x 6 178, one vector
  x 12 254. Not over a short reduce, whose few multiply-adds do not pay for the padded tile's masked loads and its lanes
  stored one by one (16x1031 @ 32 deep: 0.83x of the unrolled reduce's one accumulator; 64x139 @ 40: 0.95x; 64 deep:
  1.29-1.36x; 96: 1.40x; busy Zen 4)."""
  if not pixels or _tile_part(t, pixels, 0, budget) is not None or not isinstance(size := t.full_shape[pixels[0]], int): return 0
  if math.prod(smax(s) for i, s in enumerate(t.full_shape) if t.is_reduce_axis(i)) < PAD_REDUCE: return 0
  amt = 1 << ((budget + 1).bit_length() - 1)
  return amt if amt > 1 and size >= PAD_WASTE * amt and _try(t, Opt(OptOp.PADTO, pixels[0], amt)) else 0

def _contiguous_reduce(k: Kernel, axis: int, width: int) -> bool:
  """Can an UNROLL of this reduce axis by `width` be the vector (lower._reduce_vector_axis): a loop left, a load that
  reads the axis with stride 1, unmasked."""
  if not 0 <= axis < k.shape_len: return False  # a reduce over size-1 axes only has none left (the hand-coded fuzz)
  size = k.full_shape[axis]
  return k.is_reduce_axis(axis) and isinstance(size, int) and size > width and size % width == 0 and \
    any(st.views[-1].strides[axis] == 1 and (st.views[-1].mask is None or st.views[-1].mask[axis] == (0, size))
        for a, st in zip(k.leaves[1:], k.sts[1:]) if not isinstance(a, ConstArg))

def _streamed_row(k: Kernel, widths: tuple[int, ...]) -> tuple[int, int] | None:
  """A reduce over an axis that is no load's contiguous one (a column sum), where an output axis is contiguous in the
  output and in every load that moves along it (no gathers: sops_7102 ran slower with them): upcast it as the vector,
  the widest that divides it (a 24-wide row takes 8: sops_8892 8.0 -> 0.25 ms, busy Zen 4), and then by as many vectors
  as divide it, up to 16, so each step of the reduce streams a row segment into accumulators (sum over axis 0 of
  4096x4096, 1 thread: 11.0 ms unrolled 8 rows -> 1.67 ms with 16 vectors and 2 rows unrolled, busy Zen 5). A pooling
  window (a reduce of at most POOL_WINDOW positions) may read the row at its stride 2 too: its lanes come from two
  loads and a shuffle (lower), cheaper than a scalar window each (maxpool 3x3 stride 2 from 64x112x112, busy Zen 4:
  1.12 -> 0.24 ms). The axis and the rows a step of the reduce reads (_stream_rows), or None."""
  out = k.sts[0].views[-1]
  window = math.prod(smax(k.full_shape[i]) for i in range(k.first_reduce, k.shape_len)) <= POOL_WINDOW
  loads = [st.views[-1].strides for a, st in zip(k.leaves[1:], k.sts[1:]) if isinstance(a, MemArg)]
  def streamed(i: int) -> bool:  # every load that moves along the axis reads it contiguously (no gathers), and one does
    strides = [s[i] for s in loads]
    if all(s in (0, 1) for s in strides) and 1 in strides: return True
    # a window at stride 2 where windows overlap (3 wide) or an operand is contiguous: two 2-wide windows' even and odd
    # lanes gcc vectorises by itself (maxpool 2x2, busy Zen 4: 0.068 -> 0.087 ms with the shuffles)
    return window and all(s in (1, 2) for s in strides) and (1 in strides or overlapping())
  @functools.cache
  def overlapping() -> bool:  # a load reads a window axis longer than 2 contiguously (the index's own step: views composed)
    vs, idxs = _indexing(k)
    return any(v is not None and smax(k.full_shape[j]) > 2 and step(idx, v) == 1 for idx, _ in idxs for j, v in enumerate(vs) if j >= k.first_reduce)
  rows = [i for i in range(k.thread_dims, k.first_reduce) if isinstance(k.full_shape[i], int) and out.strides[i] == 1 and out.mask is None
          and streamed(i)]
  axis, width = next(((i, w) for w in sorted(widths, reverse=True) for i in rows if k.full_shape[i] % w == 0), (None, 0))
  if axis is None or not _try(k, Opt(OptOp.UPCAST, axis, width)): return None
  # (leaving two steps of the axis at least: a loop threads can split); beside more than 2 rows a step (_stream_rows), as
  # many vectors as the rows leave of MAX_VECTORS
  cap = min(16, MAX_VECTORS // (rows_a_step := _stream_rows(k)))
  next((n for n in (16, 8, 4, 2) if n <= cap and smax(k.full_shape[axis]) >= 2 * n and _try(k, Opt(OptOp.UPCAST, axis, n))), None)
  return axis, rows_a_step

def _stream_rows(k: Kernel) -> int:
  """The rows a step of a streamed row's reduce reads (step 2's unroll): LinearizerOptions.column_sum_rows where that
  is over 2, the rows at most COLUMN_ROW_BYTES apart and _row_blocks can block the reduce (one loop of it, no window, a
  SUM into an output of its dtype: measured so only), else 2 (a float16 column sum, 125x256 over 256 cached rows,
  sops_8806: 0.95x at 8)."""
  last, rows = k.shape_len - k.upcasted - 1, k.options.column_sum_rows
  if rows <= 2 or k.first_reduce != last or smax(k.full_shape[last]) <= POOL_WINDOW: return 2
  apart = [(st.views[-1].strides[last], a.dtype.itemsize) for a, st in zip(k.leaves[1:], k.sts[1:]) if isinstance(a, MemArg)]
  if not all(isinstance(s, int) and abs(s) * size <= COLUMN_ROW_BYTES for s, size in apart): return 2
  return rows if _try(k.copy(), Opt(OptOp.BLOCK, last, 2)) else 2

def _row_blocks(k: Kernel, row: int) -> None:
  """CPUs, a reduce over the rows of a streamed row (_streamed_row; a sum over a matrix's columns) whose tile covers a
  part of each row: a loop step reads a tile-wide piece of a row, then jumps a whole row (4096x4096: 1 KB of each 16 KB
  row, every row a new page, 16 passes over the matrix). The reduce's loop in blocks of about ROW_BLOCK rows outside the
  row's tiles instead: a block reads its rows' whole length (a thread's share), accumulating through the output, whose
  row stays in L1. 4096x4096 over axis 0, busy Zen 4, interleaved, 1 thread: 1.44-1.49x with blocks of 4 or 8 rows,
  1.32x with 16 (too many streams at once). Only where the tile is the row's alone (each element read once, a stream):
  a tile over other axes too reloads and stores its accumulators every block (sops_3203, a 1x1 conv, 4x4x4 over a
  68-long reduce in blocks of 4 rows: 0.81x)."""
  last = k.shape_len - k.upcasted - 1
  if k.first_reduce != last or smax(k.full_shape[row]) < 2: return  # one reduce loop, and tiles of the row left to sweep
  rows = math.prod(s for i, s in enumerate(k.upcast_shape, last + 1) if k.is_reduce_axis(i))  # a step's
  _block(k, last, rows, max(ROW_BLOCK, 2 * rows))  # (two steps a block at least: BLOCK's least)

def _block(k: Kernel, axis: int, per_step: int, target: int) -> None:
  """BLOCK `axis` (each step of which covers `per_step` elements) into blocks of about `target` elements, where that
  leaves at least two."""
  size = k.full_shape[axis]
  if not isinstance(size, int) or size * per_step < 2 * target: return
  amt = max((d for d in range(2, min(target // per_step, size // 2) + 1) if size % d == 0), default=None)
  if amt is not None: _try(k, Opt(OptOp.BLOCK, axis, amt))

def _cache_blocks(k: Kernel, vec: int, width: int, vectors: int = 1) -> None:
  """CPUs, a tile over a broadcast output vector axis (`vec`, whose steps are `vectors` vectors of `width` lanes: its
  operands are reused across tiles): the innermost reduce loop in blocks of BLOCK_K elements, then `vec` in blocks of BLOCK_N: the reduce's
  loop outermost, then the vector axis's, then the global loops."""
  last = k.shape_len - k.upcasted - 1
  reduce_steps = math.prod(s for i, s in enumerate(k.upcast_shape, last + 1) if k.is_reduce_axis(i))  # elements a loop step covers
  if not k.is_reduce_axis(last): return
  before = k.block_dims
  _block(k, last, reduce_steps, BLOCK_K)
  # A packed beside B on AVX2 only: AVX-512's 4 x 4 tile reads 4 rows of A in place, in L1 sets enough, and lost to A's
  # copy (REGISTER_TILES' measurements)
  if width == 8 and k.block_dims > before and _packed_rows(k, vec + 1): return
  # the vector axis in blocks too where the reduce is too short to block (a 1x1 conv's 256 channels): its block loop
  # outermost, the other axes' tiles reuse its operand's panel while it is in L1 (1x1 conv 256->64 56x56, 1 thread:
  # 6.1 -> 3.3 ms, Cascade Lake, quiet)
  _block(k, vec + (k.block_dims > before), width * vectors, BLOCK_N)  # after a reduce block, which went before it
  if k.block_dims: _packs(k)

def _matmul_operands(k: Kernel, vec: int) -> tuple[int, int, int] | None:
  """A matmul's (A, B, rows): the reduce's two loaded operands (leaf indices), B varying along the output's vector axis
  `vec` and A not, and the first output axis outside the upcasts that A varies along and B does not (A's rows); None
  where the reduce is no such product."""
  mems = _reduce_operands(k)
  if len(mems) != 2: return None
  b, a = sorted(mems, key=lambda j: vec not in k.varies(j))
  if vec not in k.varies(b) or vec in k.varies(a): return None
  rows = next((i for i in range(k.thread_dims + k.block_dims, k.first_reduce)
               if i != vec and i in k.varies(a) and i not in k.varies(b) and isinstance(k.full_shape[i], int)), None)
  return None if rows is None else (a, b, rows)

def _register_tile(k: Kernel, vec: int, width: int) -> bool:
  """CPUs, a matmul whose reduce is long enough for _cache_blocks to block it, its vector axis `vec` upcast to one
  vector of `width` lanes: the tile REGISTER_TILES[width] (rows x vectors of columns; step 1's _tile would take 8 rows of
  one vector). Applied to a copy, kept only whole."""
  if width not in REGISTER_TILES or width == 16 and k.options.half_width_fma or (ops := _matmul_operands(k, vec)) is None:
    return False
  last = k.shape_len - k.upcasted - 1
  if not k.is_reduce_axis(last) or not isinstance(size := k.full_shape[last], int) or size < 2 * BLOCK_K: return False
  t, (rows, vectors) = k.copy(), REGISTER_TILES[width]
  if not (_try(t, Opt(OptOp.UPCAST, vec, vectors)) and _try(t, Opt(OptOp.UPCAST, ops[2], rows))): return False
  # only where step 2's unroll of the reduce by 2 fits beside it, as in every tile measured: a 4 x 4 tile of 16 lanes
  # is MAX_UPCAST elements, and where its lanes are no vectors (kernel.MAX_VECTORS: float16, or an epilogue no vector
  # width fits) the unroll was refused (sops_2252, 4x4096 @ 4096 in float16, and sops_1814: 0.79x of the 4 x 1 tile
  # unrolled, though sops_2478 ran 1.29x; 1 thread, busy Intel)
  if not _try(t.copy(), Opt(OptOp.UNROLL, t.shape_len - t.upcasted - 1 - t.first_reduce, 2)): return False
  k.apply_opts(t.applied_opts[len(k.applied_opts):])
  return True

def _packed_columns(k: Kernel, vec: int, width: int) -> bool:
  """CPUs, an NT matmul (B gathered along the output's vector axis `vec`, contiguous along the reduce) over a reduce of
  at most SHORT_REDUCE elements: `vec` the vector after all, B's block packed into rows of it (PACK lays a tile's
  vector contiguous), COLUMN_TILE rows of A a step, the reduce unrolled by 2; where B's copy is over the budget whole,
  the outermost axis B varies along besides `vec` (a batch) blocked by 2, then `vec` in blocks of BLOCK_N. Applied to a
  copy, kept only whole."""
  if not k.options.avx512 or (ops := _matmul_operands(k, vec)) is None: return False  # (AVX2: not measured)
  a, b, rows = ops
  last = k.shape_len - k.upcasted - 1
  if not k.is_reduce_axis(last) or not isinstance(size := k.full_shape[last], int) or size > SHORT_REDUCE: return False
  t = k.copy()
  if not (_try(t, Opt(OptOp.UPCAST, vec, width)) and _try(t, Opt(OptOp.UPCAST, rows, COLUMN_TILE)) and
          _try(t, Opt(OptOp.UNROLL, last - t.first_reduce, 2))): return False
  outer = next((i for i in range(t.thread_dims + t.block_dims, t.first_reduce) if i != vec and i in t.varies(b) and
                isinstance(t.full_shape[i], int) and t.full_shape[i] % 2 == 0), None)
  if not _try(t.copy(), Opt(OptOp.PACK, b)) and outer is not None and _try(t, Opt(OptOp.BLOCK, outer, 2)) and \
      not _try(t.copy(), Opt(OptOp.PACK, b)):
    _block(t, vec + 1, width, BLOCK_N)  # and B's columns in blocks (the block went before them)
  if not _try(t, Opt(OptOp.PACK, b)): return False
  k.apply_opts(t.applied_opts[len(k.applied_opts):])
  return True

def _packed_rows(k: Kernel, vec: int) -> bool:
  """AVX2, a matmul's reduce blocked (_cache_blocks): both operands packed, A (the operand that does not vary along the
  vector axis `vec`) in blocks of BLOCK_M rows of the tile's row axis, then B's columns (`vec`) in blocks of as many: the
  blocks K, then M, then N, so A's copy is made once per K and M block, B's once per N block inside them (lower). Applied
  to a copy, kept only whole. 1 thread, interleaved with numpy, busy Zen 3 (thread CPU time), against K in 256s and B
  alone packed in 256-column blocks: matmul 1024 0.63 -> 0.68x of OpenBLAS, 2048 0.58 -> 0.60x; 512 and 4096 unchanged."""
  if (ops := _matmul_operands(k, vec)) is None: return False
  a, b, rows = ops
  t, before = k.copy(), k.block_dims
  def tile(inside: int, outside: int) -> int:  # the tile's elements along the output axes `inside` varies along and `outside` not
    return math.prod(s for i, s in enumerate(k.upcast_shape, k.shape_len - k.upcasted) if i in k.varies(inside) and i not in k.varies(outside))
  _block(t, rows, tile(a, b), BLOCK_M)
  if t.block_dims == before: return False
  _block(t, vec + 1, tile(b, a), BLOCK_M)
  if t.block_dims != before + 2 or not (_try(t, Opt(OptOp.PACK, a)) and _try(t, Opt(OptOp.PACK, b))): return False
  # threads split the row blocks, not the tiles inside one (_threads' first choice), so each copies a whole B block for
  # twice the rows (2048, 2 threads, CPU time: 0.61x of OpenBLAS on the tiles, 0.67x on the row blocks)
  if t.options.has_threads and t.options.threads > 1: _try(t, Opt(OptOp.THREAD, before, t.options.threads))
  k.apply_opts(t.applied_opts[len(k.applied_opts):])
  return True

def _packs(k: Kernel) -> None:
  """Copy each operand's block to the stack where the loops inside the blocks reuse it (a global loop it does not vary
  along: a matmul's B block across the rows), most reused first, while the copies fit (kernel.PACK_BYTES). Measured on
  matmul 1024 and 2048 (1 thread, busy machine): 0.74x and 0.62x of OpenBLAS blocked, 1.24x and 1.17x with B packed."""
  outer = k.thread_dims + k.block_dims
  def reuse(j: int) -> int: return math.prod(smax(k.full_shape[i]) for i in range(outer, k.first_reduce) if i not in k.varies(j))
  for j in sorted((j for j, a in enumerate(k.leaves) if j > 0 and isinstance(a, MemArg)), key=reuse, reverse=True):
    if reuse(j) > 1: _try(k, Opt(OptOp.PACK, j))

def _reused_along(k: Kernel, axis: int) -> bool:
  """Is there another output axis (of more than one step) along which the reduce's operands that vary along `axis` are
  broadcast: a tile there would reuse what they load (a matmul's rows; a matrix-vector product has none)?"""
  inside = _reduce_loads(k)
  moving = [st.views[-1].strides for a, st in zip(k.leaves[1:], k.sts[1:]) if a in inside and st.views[-1].strides[axis] != 0]
  return any(i != axis and smax(k.full_shape[i]) > 1 and all(s[i] == 0 for s in moving) for i in range(k.thread_dims + k.block_dims, k.first_reduce))

def _matvec(k: Kernel, vec: int, width: int, work: int, transcendentals: int, start: int) -> list[Opt]:
  """CPUs, a matrix-vector product whose operands read the reduce contiguously and its output axis `vec` gathered (a
  Linear's weights stored (out, in)): the reduce's unroll is the vector (lower._reduce_vector_axis), 8 rows a step
  sharing each vector of the input, their lanes summed once after the loop. The rows are upcast 2 x 2 x 2: sizes no
  vector has, so the lowering takes the reduce, not the rows, as the vector (the rows' vector gathers the weights,
  packed or not: 3072x768 plus a bias, 1 thread, busy Zen 4: 0.40 -> 0.12 ms)."""
  for _ in range(3): _try(k, Opt(OptOp.UPCAST, vec, 2))
  _try(k, Opt(OptOp.UNROLL, k.shape_len - k.upcasted - 1 - k.first_reduce, width))
  return _threads(k, work, transcendentals, start)

def _broadcast_axes(k: Kernel, loads: list[ShapeTracker], upcasted: set[int]) -> list[int]:
  """The output axes not yet upcast along which a leaf (of `loads`) does not move."""
  return [i for i in range(k.thread_dims, k.first_reduce) if isinstance(k.full_shape[i], int) and i not in upcasted
          and any(st.views[-1].strides[i] == 0 and st.shape[i] != 1 for st in loads)]

def _tile(k: Kernel, vec: int | None, loads: list[ShapeTracker], upcasted: set[int], tile: int) -> None:
  """Upcast broadcast axes by 8, then 4, up to `tile` elements: the loads that are vectors (not broadcast along the vector
  axis `vec`: a conv's input rows, gathered where strided) reused along an axis first, then any load (a broadcast along
  the vector axis is one scalar load already), then the inner axis."""
  def reuse(i: int) -> tuple[int, int, int]:
    zero = [st.views[-1].strides[i] == 0 for st in loads]
    return sum(z and vec is not None and st.views[-1].strides[vec] != 0 for z, st in zip(zero, loads)), sum(zero), i
  while k.reduceop is not None and _upcast_budget(k) < tile and (cands := _broadcast_axes(k, loads, upcasted)):
    axis = max(cands, key=reuse)
    upcasted.add(axis)  # a tile over two axes reuses both operands; one axis twice reuses only one
    next((amt for amt in (8, 4) if _upcast_budget(k) * amt <= tile and _try(k, Opt(OptOp.UPCAST, axis, amt))), None)

def _vector_tile(k: Kernel, vec: int, width: int, loads: list[ShapeTracker], tile: int) -> int:
  """The accumulators a tile over output vector axis `vec` would keep (step 1 on a copy of k)."""
  t = k.copy()
  if not _try(t, Opt(OptOp.UPCAST, vec, width)): return 0
  _tile(t, vec, loads, {vec}, tile)
  return _accumulators(t, width)

def hand_coded_optimizations(k: Kernel) -> list[Opt]:
  """Apply the hand-coded opts to `k` and return them."""
  start = len(k.applied_opts)
  work = math.prod(s if isinstance(s, int) else s.max for s in k.full_shape)
  transcendentals = sum(n.op in vecmath.FUNCS for n in k.ast.nodes)
  gpu = k.options.has_local and k.options.has_shared
  if gpu and k.reduceop is not None and (_tensor_cores(k) or _group_reduce(k)): return k.applied_opts[start:]
  # 1. broadcast axes: a leaf that does not move along an output axis is reused by every lane of it, so
  #    upcasting such axes turns loads into register reuse (matmul's tile). The one the output is
  #    contiguous along becomes the vector, as wide as the ISA has; the others upcast by 8, then 4.
  #    A constant counts too (every axis is broadcast for it: the output's vector then gathers the reduce's rows, which
  #    still vectorises its ops), unless the reduce itself can be the vector (step 2: softmax's exp-sum reads its rows
  #    contiguously), which needs no gathers.
  upcasted: set[int] = set()
  streamed: tuple[int, int] | None = None  # the output row _streamed_row took, and its rows a step
  widths = vector_widths(k.ast, k.options)
  widest = max(widths or k.options.float_vector_widths, default=4)
  vector_reduce = k.reduceop is not None and not gpu and bool(widths) and _contiguous_reduce(k, k.shape_len - k.upcasted - 1, widest)
  loads = [st for a, st in zip(k.leaves[1:], k.sts[1:]) if not (vector_reduce and isinstance(a, ConstArg))]
  vec = next((i for i in _broadcast_axes(k, loads, upcasted) if k.sts[0].views[-1].strides[i] == 1 and k.full_shape[i] % widest == 0), None)
  tile = 32 if gpu else 128  # a work-item's registers are few; a CPU core's accumulators spill to L1 cheaply
  if k.reduceop is None: vec = None  # element-wise: a load saved per lane does not pay for the code (step 3 vectorises)
  elif not gpu and vector_reduce and vec is not None and not _clean_vector(k, vec, operands=True) and not _reused_along(k, vec):
    return _matvec(k, vec, widest, work, transcendentals, start)
  # the packed vector where the reduce's operands read the output's vector axis as no clean vector (a conv's padded rows,
  # an NT matmul's columns: gathered); but where the epilogue's loads read it cleanly (a bias, a residual), only with a
  # tile of more accumulators than that axis's own (GPT-2's MLP down projection, 128x3072 @ 3072x768 plus a bias and the
  # residual: 12 vs 8, 34.3 -> 7.4 ms; a matrix-vector product has no tile but the one vector, and a transposed output
  # with 4x2 pixels ran 0.35x: sops_589, 1 thread, busy Zen 4)
  elif not gpu and widths and vec is not None and not _clean_vector(k, vec, operands=True) and _packed_columns(k, vec, widest):
    return _threads(k, work, transcendentals, start)
  elif not gpu and widths and (vec is None or not _clean_vector(k, vec, operands=True)) and \
      _packed_vector(k, widest, beat=_vector_tile(k, vec, widest, loads, tile) if vec is not None and _clean_vector(k, vec) else 0):
    return _threads(k, work, transcendentals, start, split_packs=_packs_outweigh(k))
  # where no output axis is a vector at all, half-width vectors when a whole vector's packed weights are over the budget
  # (3x3 convs of 512 channels at 7x7, 18 KB a channel: 18.6 -> 2.9 ms, 1 thread, busy Zen 4); not where some vector
  # is (masked conv rows: sops_2460 0.39x), nor where the channels are no multiple of the full width (47 of 130 corpus
  # kernels slower)
  elif not gpu and widths and vec is None and (_packed_vector(k, widest, narrow=True) or _half_width_channels(k, widest, widths, vector_reduce)):
    return _threads(k, work, transcendentals, start, split_packs=_packs_outweigh(k))
  if vec is not None and _try(k, Opt(OptOp.UPCAST, vec, widest)): upcasted.add(vec)
  elif k.reduceop is not None and not gpu and widths and not vector_reduce and (streamed := _streamed_row(k, widths)) is not None:
    upcasted.add(streamed[0])
  row_tile = k.upcasted
  register_tile = not gpu and vec in upcasted and _register_tile(k, vec, widest)
  if not register_tile: _tile(k, vec, loads, upcasted, tile)
  if k.upcasted != row_tile: streamed = None  # a tile over other axes too reuses the row's loads: no stream (_row_blocks)
  # 2. reduces: unroll a short reduce whole, else by 4 (a tree of independent partial sums); where no output axis is
  #    upcast, by the widest vector first: on a CPU the unrolled axis becomes the vector where a load reads it
  #    contiguously (lower: vector accumulators, their lanes summed after the loop). Where the innermost reduce axis
  #    takes none (odd, or too long whole for the tile: a 7x7 window), a short one outside it whole: a loop step of
  #    one tile's products was 9x slower (the 7x7 stem conv, 3 input channels unrolled: 988 -> 109 us, busy machine)
  if k.reduceop is not None and k.first_reduce < k.shape_len - k.upcasted:
    last = k.shape_len - k.upcasted - 1
    size = k.full_shape[last]
    if isinstance(size, int):
      vector = [widest] if vector_reduce and _upcast_budget(k) == 1 else []
      # (whole within MAX_UPCAST elements first; past them, where the Kernel counts vectors (kernel.MAX_VECTORS), only
      # where nothing else divides: an odd window's 3 or 7 beside a 128-lane tile, 2.5-20x faster than its loop, while a
      # 6-long reduce whole lost its cache blocks and ran 7x slower than unrolled by 2, sops_3201)
      row_steps = [streamed[1]] if streamed is not None and streamed[1] > 2 else []  # (a streamed row's: _stream_rows)
      amts = ([0] if size <= 16 and _upcast_budget(k) * size <= MAX_UPCAST else []) + vector + row_steps + \
        ([2] if _upcast_budget(k) >= tile // 2 else [8, 4]) + ([0] if size <= 16 else [])
      done = next((amt for amt in amts if _try(k, Opt(OptOp.UNROLL, last - k.first_reduce, amt))), None)
      # several vector accumulators where the vector's reduce is cheap and long: its loop is one accumulate's latency a
      # vector (softmax's row max 4096x1024, 1 thread: 0.80 -> 0.34 ms at 4; a transcendental's throughput hides it; a
      # 64-long reduce has no loop left to gain from: sops_7755 ran slower)
      if done == widest and vector and not transcendentals and size >= 16 * widest:
        next((a for a in (4, 2) if _try(k, Opt(OptOp.UNROLL, last - k.first_reduce, a))), None)
      if done is None:
        next((a for a in reversed(range(k.first_reduce, last)) if k.is_reduce_axis(a) and isinstance(n := k.full_shape[a], int) and
              1 < n <= 16 and _try(k, Opt(OptOp.UNROLL, a - k.first_reduce, 0))), None)
  # 3. element-wise: upcast the output's unit-stride axis so the compiler vectorises it
  if k.reduceop is None and widths and _upcast_budget(k) < 8 and k.first_reduce > k.thread_dims:
    axis = k.first_reduce - 1
    amt = next((amt for amt in sorted(widths, reverse=True) if _try(k, Opt(OptOp.UPCAST, axis, amt))), None)
    # with transcendentals, up to 4 vectors a step (lower emits their ops side by side): each vector's ops are one long
    # latency chain the core overlaps with the others' (1 thread, busy Zen 5: elementwise_chain 10.8 -> 5.4 ms, GELU
    # 1.42 -> 1.20, SiLU 1.05 -> 0.95; a single SIN and a*b+c unchanged), where the expression is small enough that 4
    # vectors of its live values fit the registers (sops_268's 654 ops, 32 EXP2s: 2.7x slower). Two steps stay for threads.
    if amt is not None and transcendentals and sum(n.op not in ("LOAD", "CONST", "STORE") for n in k.ast.nodes) <= 64:
      next((a for a in (4, 2) if smax(k.full_shape[axis]) >= 2 * a and _try(k, Opt(OptOp.UPCAST, axis, a))), None)
  if not gpu and k.reduceop is not None and vec in upcasted:  # (vec: an int there)
    _cache_blocks(k, vec, widest, REGISTER_TILES[widest][1] if register_tile else 1)
  elif streamed is not None: _row_blocks(k, streamed[0])
  # 4. GPUs: work-groups; CPUs: threads
  if gpu and not k.dont_use_locals: _locals(k)
  return _threads(k, work, transcendentals, start)

def _half_width_channels(k: Kernel, widest: int, widths: tuple[int, ...], vector_reduce: bool) -> bool:
  """CPUs, no output axis a vector and channels that half the widest width divides and the widest does not (136 on
  AVX-512): _packed_vector at half the width, where its tile keeps two accumulators or more, instead of the reduce's
  unroll below, which would be a half-width vector that gathers the input a lane at a time. 1 thread, BUSY Zen 4, thread
  CPU time, interleaved: 1x1 convs 136 channels 7x7 1.86x, 14x14 1.86x, 72 channels 7x7 1.96x; corpus sops_3200 (four
  groups of 136 at 7x7 under a BatchNorm, 0.43x torch.compile at 2 threads) 4.66x, the only corpus kernel it changes
  (AVX2 schedules, TUNESVC_CPU_LANES=8: sops_7448 and sops_3203, 1.06-1.07x)."""
  return not vector_reduce and widest // 2 in widths and _contiguous_reduce(k, k.shape_len - k.upcasted - 1, widest // 2) and \
    _packed_vector(k, widest // 2, beat=1)

def _threads(k: Kernel, work: int, transcendentals: int, start: int, split_packs: bool = False) -> list[Opt]:
  """CPUs: threads, splitting the outermost global axis when there is enough work to pay for waking them, or where none
  splits (7 rows of a 7x7 image), the outermost block of one (a conv's channel blocks), or where the cores divide none, the
  first axis longer than the cores as the threads' whole loop; with `split_packs`, that block
  first where the global axis is one a packed copy does not vary along (each thread would pack all of it: a conv's rows;
  not a batch); the opts applied since `start`."""
  if k.options.has_threads and k.options.threads > 1 and work * (1 + TRANSCENDENTAL_COST * transcendentals) >= THREAD_WORK:
    def split(t: Kernel, a: int) -> bool: return not isinstance(t.full_shape[a], Node) and _try(t, Opt(OptOp.THREAD, a, t.options.threads))
    axes = [*range(k.block_dims, k.first_reduce), *range(k.block_dims)]
    if split_packs and (first := next((a for a in axes if split(k.copy(), a)), None)) is not None and first >= k.block_dims and \
        not all(first in k.varies(j) for j in k.packed):
      axes = [*range(k.block_dims), *axes]
    # where the cores divide no axis (17 channel blocks, 7 or 49 pixels), the first axis longer than the cores becomes the
    # threads' loop whole: its parts on the cores, ceil(n / cores) each (17: 1.89x of one core, 7: 1.75x)
    if next((a for a in axes if split(k, a)), None) is None:
      next((a for a in axes if isinstance(n := k.full_shape[a], int) and n > k.options.threads and _try(k, Opt(OptOp.THREAD, a, n))), None)
  return k.applied_opts[start:]
