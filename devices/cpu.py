"""The CPU backend (devices/base.py's Device): C compiler with an on-disk cache, ctypes program loader, aligned
allocator, timer, fingerprint."""
from __future__ import annotations
import contextlib, ctypes, functools, hashlib, json, os, platform, re, shutil, signal, subprocess, tempfile, time
from pathlib import Path
from typing import Callable, Optional, Sequence
import numpy as np
import numpy.typing as npt
from devices.base import Binary, CompileError, clipped, int_arg
from devices.base import fingerprint_hash as fingerprint_hash  # the device interface's
from linearizer import CODEGEN_VERSION
from linearizer.cachedir import cache_dir
from linearizer.options import LinearizerOptions
from linearizer.lower import Program as LinearProgram
from linearizer.render_c import render_c


@functools.cache
def _cpu_fields() -> dict[str, str]:
  """The first CPU's fields of /proc/cpuinfo, names lower-cased; empty where there is none."""
  try: text = Path("/proc/cpuinfo").read_text()
  except OSError: return {}
  kv: dict[str, str] = {}
  for line in text.splitlines():
    k, _, v = line.partition(":")
    kv.setdefault(k.strip().lower(), v.strip())
  return kv

@functools.cache
def _cpuinfo() -> tuple[str, frozenset[str]]:
  """(model name, ISA flags) of the first CPU ("Features" on ARM)."""
  if not (kv := _cpu_fields()): return platform.processor(), frozenset()
  return kv.get("model name") or kv.get("cpu part", ""), frozenset(kv.get("flags", kv.get("features", "")).split())

def _half_width_fma(isa: frozenset[str]) -> bool:
  """AMD family 25 (Zen 3 and 4) with AVX-512, i.e. Zen 4, which runs a 512-bit FMA as two 256-bit halves: one a cycle
  where Intel's AVX-512 cores issue two (LinearizerOptions.half_width_fma)."""
  kv = _cpu_fields()
  return "avx512f" in isa and kv.get("vendor_id") == "AuthenticAMD" and kv.get("cpu family") == "25"

# the most stream_store_bytes is: a last-level cache sysfs reports can be a whole socket's, shared with tens of cores
# (this session's Intel Emerald Rapids VM: 300 MiB for its 2 cores), of which one core's output gets no half. There,
# layernorm's norm (16 MiB out, its input in the cache) and a kernel reading the output back, 1 thread, BUSY, thread CPU
# time, interleaved, non-temporal against normal stores: 1 MiB 0.56x, 2 MiB 0.89-0.92x, 4 MiB 0.98-1.00x, 8 MiB 1.10x,
# 16 MiB 1.31-1.36x, 32 MiB 1.16-1.19x. At 32 MiB of L3 (Zen 3 and 4) half is this already: unchanged there
STREAM_STORE_MAX = 16 << 20

@functools.cache
def stream_store_bytes(sysfs: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> Optional[int]:
  """The output size from which a kernel's stores bypass the cache (render_c.streamed): half the last-level cache that
  sysfs reports for CPU 0, at most STREAM_STORE_MAX (None where it reports none: normal stores); read, not measured, as
  a fingerprint must not move with the load. An output of half the cache and the inputs it is computed from fill it, so
  its reader would find most of it in memory anyway. On a Zen 3 host (a 32 MiB L3 shared with other machines; BUSY) a
  kernel writing its output and a second reading it back ran faster with non-temporal stores from 8 MiB outputs, slower
  from 4 MiB down (2x at 1 MiB, where the reader finds the output in the cache): half is on the safe side of that."""
  levels = []
  for d in sysfs.glob("index[0-9]*"):
    try: level, kind, size = ((d / f).read_text().strip() for f in ("level", "type", "size"))
    except OSError: continue
    if kind in ("Data", "Unified") and (m := re.fullmatch(r"(\d+)([KMG]?)", size)):
      levels.append((int(level), int(m[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[m[2]]))
  return min(max(levels)[1] // 2, STREAM_STORE_MAX) if levels else None

def render(prog: LinearProgram) -> str:
  """The device interface's renderer: C, large outputs stored non-temporally; on x86 with AVX2 schedules (8 lanes at
  most: no AVX-512, or TUNESVC_CPU_LANES=8), vectors that several FMAs take kept in registers (render_c.kept_loads)."""
  return render_c(prog, stream_store_bytes(), keep_loads="avx2" in _cpuinfo()[1] and max(options().float_vector_widths) == 8)

def isa_flags(isa: frozenset[str]) -> tuple[str, ...]:
  """Flags a host's ISA asks for. AVX-512: gcc's Intel tunings (skylake-avx512 on) prefer 256-bit vectors and then leave
  the renderer's 16-lane helpers (a lane loop of fmaf or sqrtf, linearizer/render_c.py) scalar: a matmul 256's tile
  became 256 scalar FMAs on the H100 machine's CPU instead of one zmm FMA each. The linearizer picks 16 lanes on
  purpose (LinearizerOptions.float_vector_widths), so the compiler is told to keep them."""
  return ("-mprefer-vector-width=512",) if "avx512f" in isa else ()

# -fwrapv: signed overflow wraps (the reference semantics), so the optimiser may not assume it away.
# -ffp-contract=off: no silent a*b+c -> fma: the only fused ops are the linearizer's explicit MULACCs (a float SUM's
#   products, within the reference's range for the SUM), so results do not depend on how gcc happens to vectorise.
#   -fno-math-errno: sqrt & co inline and vectorise, same values.
# No -ffast-math: it reorders float ops and assumes NaN/inf away. -fno-strict-aliasing: vector loads cast pointers.
# -fopenmp always: one flag set (so one fingerprint) whether or not a kernel uses threads; gcc's libgomp is here.
DEFAULT_FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-shared", "-fPIC", "-fwrapv", "-ffp-contract=off",
                                  "-fno-math-errno", "-fno-strict-aliasing", "-fopenmp") + isa_flags(_cpuinfo()[1])
HOST_MEMORY = True  # buffers are numpy arrays (alloc)
ALIGN = 64  # bytes: a cache line and one AVX-512 vector
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
             "amx_tile", "neon", "asimd")


def _cc() -> str: return os.environ.get("TUNESVC_CC") or "cc"  # a name on PATH or a path, e.g. clang
def available() -> bool: return shutil.which(_cc()) is not None


# A compile's limit is the CPU seconds its processes use: a busy machine stretches its wall time, not that (a unit of 31
# CPU-s of gcc took 160 s at load 10-12, and timed out at the 60 s of wall time that was the limit). The wall-time
# backstop, this many times the limit, only ends a compiler blocked without using CPU; the limit is checked every POLL_S.
WALL_FACTOR, POLL_S = 10, 0.5

def _run(cmd: list[str], src: str = "", timeout: float = 60.0) -> str:
  """`cmd`'s output, `src` its input; CompileError where it fails, or uses over `timeout` CPU seconds (with the processes
  it starts), or runs WALL_FACTOR x that in wall time."""
  end = time.monotonic() + WALL_FACTOR * timeout
  # the input from a file: a communicate() that timed out and is called again reads on, but never writes the rest of its input
  with tempfile.TemporaryFile() as f:
    f.write(src.encode())
    f.seek(0)  # the compiler's descriptor shares this offset
    p = subprocess.Popen(cmd, stdin=f, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  with p:
    while True:
      try:
        out, err = p.communicate(timeout=max(0.0, min(POLL_S, end - time.monotonic())))
        break
      except subprocess.TimeoutExpired:
        tree = _tree(p.pid)
        over = f"{timeout:g} CPU-s" if _cpu_s(tree) > timeout else f"{WALL_FACTOR * timeout:g} s" if time.monotonic() >= end else None
        if over is None: continue
        for pid in tree:
          with contextlib.suppress(ProcessLookupError): os.kill(pid, signal.SIGKILL)
        p.communicate()
        raise CompileError(f"{cmd[0]}: timed out after {over}") from None
  if p.returncode != 0: raise CompileError(f"{cmd[0]} failed ({p.returncode}):\n{clipped(err.decode(errors='replace'))}")
  return out.decode(errors="replace")

def _tree(pid: int) -> dict[int, list[str]]:
  """Process `pid` and every process under it: pid -> its /proc stat fields after the command's name. Killing a compiler
  driver alone left its cc1 running, reparented to init, for as long as the unit takes (a timed-out batch's cc1 burned
  minutes of CPU after its search had moved on): the tree is read in one pass, before any of it dies."""
  stats: dict[int, list[str]] = {}
  for stat in Path("/proc").glob("[0-9]*/stat"):
    try: stats[int(stat.parent.name)] = _stat_fields(stat.parent.name)
    except OSError: continue  # gone meanwhile
  children: dict[int, list[int]] = {}
  for child, fields in stats.items(): children.setdefault(int(fields[1]), []).append(child)
  tree, i = [pid], 0
  while i < len(tree): tree, i = tree + children.get(tree[i], []), i + 1
  return {p: stats[p] for p in tree if p in stats}

def _stat_fields(pid: int | str) -> list[str]:
  """Process `pid`'s /proc stat fields after the command's name (which may hold spaces and parentheses); OSError once it is gone."""
  return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

def _cpu_s(tree: dict[int, list[str]]) -> float:
  """CPU seconds of a process tree: each process's own and those of the children it waited for (cc1, as: the driver's)."""
  return sum(int(x) for fields in tree.values() for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")

def process_cpu_s(pid: int) -> float:
  """CPU seconds of process `pid` (every thread) and of the children it waited for; 0 once it is gone."""
  try: return _cpu_s({pid: _stat_fields(pid)})
  except (OSError, ValueError): return 0.0

@functools.cache
def _compiler(cc: str) -> tuple[str, str, str]:
  """(path to invoke, resolved path, `--version` first line); invoke via the PATH name so ccache-style wrappers work."""
  if (path := shutil.which(cc)) is None: raise CompileError(f"C compiler {cc!r} not found (set TUNESVC_CC)")
  line = (_run([path, "--version"]).splitlines() or [""])[0]
  return path, os.path.realpath(path), line.removeprefix(os.path.basename(path) + " ")  # gcc starts with argv[0]

@functools.cache
def _target(cc: str, flags: tuple[str, ...]) -> str:
  """Hash of the predefined macros under `flags`: what -march=native resolved to on this host (ISA, tuning CPU)."""
  macros = _run([_compiler(cc)[0], *flags, "-E", "-dM", "-x", "c", "/dev/null"])
  return hashlib.sha256("\n".join(sorted(macros.splitlines())).encode()).hexdigest()[:16]

def compile(src: str, flags: tuple[str, ...] = DEFAULT_FLAGS, timeout: float = 60.0) -> Binary:
  """C source -> shared library, cached on disk; no device state, so it runs in any worker process."""
  path = _compiler(_cc())[0]
  return _cached(src, flags, lambda out: _run([path, *flags, "-x", "c", "-", "-o", out, "-lm"], src, timeout))


def compile_batch(srcs: Sequence[str], flags: tuple[str, ...] = DEFAULT_FLAGS, timeout: float = 60.0) -> Binary:
  """Several sources, each with the entry point `kernel`, -> one shared library in one compiler invocation, where source
  i's entry point is `kernel_i`, cached on disk as one. The text before each kernel (headers, typedefs, static helpers:
  the preamble) is merged into one translation unit, each of its top-level declarations once, the kernels after them,
  each under its own name; a source whose preamble does not split into declarations gets a unit of its own. A unit's
  fixed cost (cc1 starting and reading the headers, then as: 21-24 ms of CPU; the link, once a library, ~13 ms) is more
  than a small kernel's own -O3 work (~8 ms). A unit per distinct preamble, as before, made 1-4 of a batch of 16: merged,
  small corpus kernels' first two rounds cost 12% less compiler CPU (14-28% on batches of 9-11), 42 kernels' larger
  hand-coded children 2.5%; every kernel's instructions the same (docs/benchmarks.md, session 24, cc24)."""
  path, units = _compiler(_cc())[0], _units(srcs)
  def build(out: str) -> None:
    with tempfile.TemporaryDirectory(prefix="tunesvc-batch-") as d:
      files = [Path(d) / f"u{j}.c" for j in range(len(units))]
      for f, text in zip(files, units): f.write_text(text)
      _run([path, *flags, *map(str, files), "-o", out, "-lm"], "", timeout)
  return _cached(list(srcs), flags, build)


def _units(srcs: Sequence[str]) -> list[str]:
  """compile_batch's translation units: the merged one, then those of the sources whose preamble does not split."""
  decls: dict[str, None] = {}  # the merged preamble's declarations, in the order the sources first have them
  kernels, alone = [], []
  for i, src in enumerate(srcs):
    pre, kern = _split_kernel(src)
    named = f"#define kernel kernel_{i}\n{kern or src}#undef kernel\n"
    if kern and (parts := _declarations(pre)) is not None:
      decls.update(dict.fromkeys(parts))
      kernels.append(named)
    else: alone.append(pre + named)
  return ["".join(decls) + "".join(kernels)] * bool(kernels) + alone


def _cached(what: str | list[str], flags: tuple[str, ...], build: Callable[[str], object]) -> Binary:
  """The library build(path) writes from `what` (a source, or a batch's sources), kept on disk by its hash with the
  compiler's, the flags' and the target's."""
  cc = _cc()
  _, real, version = _compiler(cc)
  key = hashlib.sha256(json.dumps([what, real, version, list(flags), _target(cc, flags)]).encode()).hexdigest()
  out = cache_dir("compile") / f"{key}.so"
  if out.is_file(): return Binary(out.read_bytes())
  out.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".so", dir=out.parent)
  os.close(fd)
  try:
    build(tmp)
    lib = Path(tmp).read_bytes()
    os.replace(tmp, out)  # atomic: concurrent compiles of one key both write whole files, the last one wins
    return Binary(lib)
  finally:
    if os.path.exists(tmp): os.unlink(tmp)

def _split_kernel(src: str) -> tuple[str, str]:
  """(preamble, kernel) of a rendered source whose last definition is `void kernel(`, the preprocessor and attribute
  lines right before it going with the kernel (an optimize attribute is the kernel's own), but for the #endif of a block
  the preamble opened (vecmath's guard, which a scalar kernel's preamble ends with): a batch of two such kernels had two
  #endifs to one #if, failed to compile, and the builder compiled each alone; ("", "") otherwise."""
  if (at := src.find("\nvoid kernel(")) < 0 or (end := _body_end(src, src.find("{", at))) < 0 or src[end:].strip(): return "", ""
  lines = src[:at + 1].splitlines(keepends=True)
  kept = len(lines)
  while kept and lines[kept - 1].startswith(("#", "__attribute__")): kept -= 1
  while _nesting(lines[kept:]) != 0: kept += 1  # the preamble's #endif stays with its #if
  pre = "".join(lines[:kept])
  return pre, src[len(pre):]

def _nesting(lines: list[str]) -> Optional[int]:
  """How deep the lines leave #if blocks open; None where an #endif closes one that opened before them."""
  depth = 0
  for line in lines:
    if (depth := depth + _if_step(line)) < 0: return None
  return depth

def _if_step(line: str) -> int:
  """1 where a line opens an #if block (#if, #ifdef, #ifndef), -1 where it closes one, else 0."""
  if not (s := line.lstrip()).startswith("#"): return 0
  directive = s[1:].lstrip()
  return directive.startswith("if") - directive.startswith("endif")

def _body_end(src: str, start: int) -> int:
  """The index past the brace that closes the one at `start` (-1: none)."""
  depth = 0
  for m in re.compile(r"[{}]").finditer(src, max(start, 0)) if start >= 0 else ():
    if (depth := depth + (1 if m.group() == "{" else -1)) == 0: return m.end()
  return -1

def _declarations(pre: str) -> Optional[list[str]]:
  """A preamble's top-level declarations, each from its first line to where its braces and #if blocks close (None: some
  never close). The renderer names each one by what it declares (a vector type, its helpers, a guarded vecmath
  instance), so a declaration two sources share is the same text: merged, once. Were two different ones to clash, the
  batch would fail to compile and the builder compile each source alone."""
  out, lines, depth, nested = [], [], 0, 0
  for line in pre.splitlines(keepends=True):
    lines.append(line)
    if line.lstrip().startswith("#"): nested += _if_step(line)
    else: depth += line.count("{") - line.count("}")
    if depth == nested == 0:
      out.append("".join(lines))
      lines = []
  return None if lines else out


def _ptr(b: np.ndarray) -> ctypes.c_void_p:
  if not b.flags.c_contiguous: raise ValueError("buffers must be C-contiguous")
  return ctypes.c_void_p(b.ctypes.data)

class Program:
  """Entry point `void name(T0* restrict data0, T1* data1, ..., int var0, ...)` of a compiled library."""
  def __init__(self, binary: Binary, name: str):
    # dlopen returns an already-loaded library whose path matches, and temp names get reused: the content hash in
    # the name makes such a match the same code. The file may go once it is mapped.
    with tempfile.NamedTemporaryFile(prefix=hashlib.sha256(binary.image).hexdigest()[:16] + "-", suffix=".so") as f:
      f.write(binary.image)
      f.flush()
      self.lib = ctypes.CDLL(f.name)
    self.name, self.fxn = name, getattr(self.lib, name)
    self.fxn.restype = None

  def __call__(self, *bufs: np.ndarray, var_vals: Sequence[int] = (), timed: bool = False) -> float | None:
    t = self.time(*bufs, var_vals=var_vals)
    return t if timed else None

  def time(self, *bufs: np.ndarray, var_vals: Sequence[int] = ()) -> float:
    """Seconds one call took, ctypes call overhead (~1 us) included."""
    args = [_ptr(b) for b in bufs] + [int_arg(v) for v in var_vals]  # converted before the clock starts
    st = time.perf_counter_ns()
    self.fxn(*args)
    return (time.perf_counter_ns() - st) * 1e-9


def alloc(n: int, dtype: npt.DTypeLike) -> np.ndarray:
  """A zeroed 1-D array of n elements whose data is ALIGN-byte aligned, so aligned vector loads are legal."""
  dt = np.dtype(dtype)
  raw = np.zeros(n * dt.itemsize + ALIGN, np.uint8)
  off = -raw.ctypes.data % ALIGN
  return raw[off:][:n * dt.itemsize].view(dt)  # two steps: numpy keeps an empty slice's start only this way

# the device-memory interface the runner uses: on the CPU, device memory is host memory
def copyin(buf: np.ndarray, host: np.ndarray) -> None: np.copyto(buf, host)
def copyout(buf: np.ndarray) -> np.ndarray: return buf


def _threads() -> int: return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

def fingerprint(flags: tuple[str, ...] = DEFAULT_FLAGS) -> dict:
  """Everything that gives a timing its meaning on this host, the version of our code generator and the LinearizerOptions
  included (so that a fingerprint's hash names its options: no one can register other options under it), and nothing
  volatile (no PIDs, no clocks)."""
  cc = _cc()
  _, real, version = _compiler(cc)
  model, isa = _cpuinfo()
  return {"backend": "CPU", "arch": platform.machine(), "cpu": model, "isa": sorted(isa & set(ISA_FLAGS)),
          "compiler": real, "compiler_version": version, "flags": list(flags), "target": _target(cc, flags),
          "threads": _threads(), "codegen": CODEGEN_VERSION, "stream_store_bytes": stream_store_bytes(),
          "options": options().to_json()}

def _lanes_cap() -> Optional[int]:
  """TUNESVC_CPU_LANES (4, 8 or 16): the widest float vector the linearizer may use, below what the host has -- an
  AVX-512 host then schedules, lowers and checks kernels as an AVX2 one would (the fuzzer's way to cover the AVX2 paths
  here); its fingerprint names the narrower options, so its tuned results never mix with the host's own."""
  if not (v := os.environ.get("TUNESVC_CPU_LANES")): return None
  if v not in ("4", "8", "16"): raise ValueError(f"TUNESVC_CPU_LANES={v!r}: the widest float vector is 4, 8 or 16 lanes")
  return int(v)

# Zen 4's LinearizerOptions.column_sum_rows: sum over axis 0 of 4096x4096, 1 thread, BUSY (other load 1.4-1.7 cores),
# interleaved, thread CPU time, against 2 rows of 16 vectors a step in blocks of 8 rows: 8 rows of 8 vectors a step in
# blocks of 16 rows 1.08-1.13x (ten runs), 4 rows of 16 vectors 1.04-1.08x, 1 row 0.93-0.94x; blocks of 32 rows 0.55-0.77x
ZEN4_COLUMN_SUM_ROWS = 8

def options() -> LinearizerOptions:
  isa = _cpuinfo()[1]
  widths: tuple[int, ...] = (4, 8, 16) if "avx512f" in isa else (4, 8) if "avx" in isa else (4,)
  if (cap := _lanes_cap()) is not None: widths = tuple(w for w in widths if w <= cap)
  zen4 = max(widths) >= 16 and _half_width_fma(isa)  # (AVX2 schedules, TUNESVC_CPU_LANES=8, keep an AVX2 host's rules)
  return LinearizerOptions("CPU", has_local=False, has_shared=False, has_threads=True, supports_float4=True,
                           float_vector_widths=widths, threads=_threads(), half_width_fma=zen4,
                           column_sum_rows=ZEN4_COLUMN_SUM_ROWS if zen4 else LinearizerOptions.column_sum_rows)
