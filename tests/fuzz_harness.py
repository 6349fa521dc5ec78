"""The linearizer fuzzer's harness: cases run in spawned worker processes on a device, checked against the reference,
failures saved as replay files. bench/fuzz_linearizer.py is its command line (its docstring says what a case is and
how it ends); the tests import it from here, so none puts bench/ on the path. The reference's dear outputs can be kept
on disk (`reference_cache`): two devices fuzzed with one seed draw the same variable values and data, so the second
reads what the first computed."""
from __future__ import annotations
import collections, contextlib, hashlib, inspect, itertools, json, os, random, re, resource, signal, subprocess, tempfile, time, traceback
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence
from multiprocessing import get_context
from multiprocessing.connection import wait
import numpy as np

from devices import registry
from devices.cpu import process_cpu_s
from linearizer import reference
from linearizer.ast import KernelAST, load, loads
from linearizer.compare import compare
from linearizer.fuzz import Case, Outcome, builder_kernel, draw_case, positions
from linearizer.kernel import Kernel, OptError, allowed_ops
from linearizer.lower import lower
from search.pool import die_with_parent
from tunesvc.cli import read_documents

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "examples" / "corpus" / "tinygrad-v0.8.0-kernels.jsonl.gz"
EXAMPLES = ROOT / "examples" / "kernels"
ASAN_FLAGS = ("-fsanitize=address", "-fno-omit-frame-pointer")
MAX_MESSAGE = 2000
SLOW_COMPILE_S = 10.0  # compiler CPU seconds past which a case is called out: a search compiles hundreds of candidates
REFERENCE_CACHE_MIN_S = 1.0  # reference CPU seconds from which its output is kept: below, reading it back saves little
# what the reference's output depends on besides the case: any change to the linearizer's code or numpy is a new key
REFERENCE_CODE = hashlib.sha256(b"".join(p.read_bytes() for p in sorted((ROOT / "linearizer").rglob("*.py")))
                                + np.__version__.encode()).hexdigest()


# ---------------------------------------------------------------- one case, in a worker

def _compiler_cpu_s() -> float:
  """CPU seconds of the compiler's processes (gcc, once waited for) and of this one (PoCL and NVRTC compile in it)."""
  r = resource.getrusage(resource.RUSAGE_CHILDREN)
  return r.ru_utime + r.ru_stime + time.process_time()

def reference_buffers(k: KernelAST, bufs: Sequence[np.ndarray], vv: dict[str, int], seed: int, cache: Optional[Path],
                      on_reference=lambda s, cached: None) -> list[np.ndarray]:
  """The reference's buffers for inputs `bufs` (random_buffers of `seed`): computed, or their output read from `cache`,
  where one that took REFERENCE_CACHE_MIN_S CPU seconds or more is kept under the key of the kernel, the variable values,
  the seed and REFERENCE_CODE. `on_reference` gets the seconds it took (CPU computing, wall reading) and whether it was read."""
  want = [b.copy() for b in bufs]
  key = hashlib.sha256(json.dumps([REFERENCE_CODE, k.key, sorted(vv.items()), seed]).encode()).hexdigest()
  path = cache / f"{key}.npy" if cache else None
  t0 = time.perf_counter()
  if path and path.exists():
    want[0] = np.load(path)
    on_reference(time.perf_counter() - t0, True)
    return want
  t0 = time.process_time()
  reference.run(k, want, vv)
  on_reference(spent := time.process_time() - t0, False)
  if path and spent >= REFERENCE_CACHE_MIN_S:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npy", delete=False) as f: np.save(f, want[0])
    os.replace(f.name, path)  # whole or not there: another worker may be reading the same key
  return want

def execute(case: Case, device: str, flags: tuple[str, ...], on_run=lambda: None, on_compiled=lambda s: None,
            compile_timeout: Optional[float] = None, reference_cache: Optional[Path] = None,
            on_reference=lambda s, cached: None) -> tuple[Outcome, str]:
  """(status, message) of one case. `on_compiled` gets the CPU seconds the compiler took (0 from the compile cache),
  `on_run` is called just before the compiled program runs (a crash after it is the program's). Buffers are exactly
  `buffer_sizes` long, so under ASan an access one past the end aborts. `compile_timeout` replaces the device's
  compile limit (its compiler's CPU seconds: devices/cpu.py) where it has one: the pool passes the case's own, which
  may allow more; slow compiles are called out by their CPU time.
  `reference_cache` and `on_reference`: reference_buffers'."""
  dev = registry.get(device)
  limit = {"timeout": compile_timeout} if compile_timeout and "timeout" in inspect.signature(dev.compile).parameters else {}
  k = load(case.doc).rebased()
  vv = k.var_vals(case.var_vals)
  try: kern = Kernel(k, dev.options()).apply_opts(case.opts)
  except OptError as e: return Outcome.OPT_ERROR, f"the schedule is rejected: {e}"
  if bad := [o for o in kern.applied_opts if o.op not in allowed_ops(kern.options)]: return Outcome.ILLEGAL_OPT, f"{device} accepted {bad[0]}"
  try: src = dev.render(lower(kern, "kernel"))
  except OptError as e: return Outcome.OPT_ERROR, f"accepted, then lowering raised: {e}"
  t0 = _compiler_cpu_s()
  try: prog = dev.Program(dev.compile(src, flags, **limit), "kernel")
  except dev.CompileError as e: return Outcome.COMPILE_ERROR, str(e)
  finally: on_compiled(_compiler_cpu_s() - t0)
  bufs = reference.random_buffers(k, vv, case.seed)
  want = reference_buffers(k, bufs, vv, case.seed, reference_cache, on_reference)
  on_run()
  prog(*bufs, var_vals=[vv[v.name] for v in k.vars])
  return (Outcome.MISMATCH, msg) if (msg := compare(k, bufs, want, vv)) else (Outcome.PASS, "")


def _worker(conn, device: str, flags: tuple[str, ...], max_positions: int, timeout: float, hand_coded: bool,
            reference_cache: Optional[Path]) -> None:
  """Cases in, messages out: ("case", Case) as it starts, drawn, ("compiled", CPU seconds), ("reference", seconds, read
  from the cache), ("run",) as the program starts, ("done", status, message)."""
  os.environ.pop("LD_PRELOAD", None)  # an ASan runtime is loaded by now; the compilers this process starts must not get it
  die_with_parent()  # a case may run for minutes: a killed fuzzer must not leave it running
  parsed: dict[str, KernelAST] = {}  # each kernel validated once per worker, not per case
  options = registry.get(device).options()
  while (case := conn.recv()) is not None:
    try:
      if case.opts is None:
        if (key := json.dumps(case.doc)) not in parsed: parsed[key] = load(case.doc)
        case = draw_case(case, parsed[key], options, max_positions, hand_coded)
      conn.send(("case", case))  # drawn: the case's clocks start (not with the worker's imports, before its first)
      status, msg = execute(case, device, flags, lambda: conn.send(("run",)), lambda s: conn.send(("compiled", s)), timeout,
                            reference_cache, lambda s, cached: conn.send(("reference", s, cached)))
    except Exception:
      status, msg = Outcome.ERROR, traceback.format_exc()
    conn.send(("done", status, msg[-MAX_MESSAGE:]))


# ---------------------------------------------------------------- the pool

class _Worker:
  def __init__(self, pool: Pool):
    self.conn, child = get_context("spawn").Pipe()
    args = (child, pool.device, pool.flags, pool.max_positions, pool.timeout, pool.hand_coded, pool.reference_cache)
    self.proc = get_context("spawn").Process(target=_worker, args=args, daemon=True)
    with pool.env(): self.proc.start()  # spawn hands this process's environment on
    child.close()
    self.case: Optional[Case] = None
    self.running, self.since, self.cpu_since = False, 0.0, 0.0

  def start(self, case: Case) -> None:
    self.case, self.running = case, False
    self.started()
    self.conn.send(case)

  def started(self) -> None:
    """The case's clocks start: as it is sent, and again as the worker starts it (after its imports and the drawing). Its CPU
    is the worker's every thread (PoCL and NVRTC compile in it) and its gcc's; a dead worker's reads 0: its death is the result."""
    self.since, self.cpu_since = time.monotonic(), process_cpu_s(self.proc.pid)

  def cpu_s(self) -> float: return process_cpu_s(self.proc.pid) - self.cpu_since


class Pool:
  """`jobs` spawned workers, one case at a time each. A worker that dies (a signal, an ASan abort) or runs a case past
  `timeout` seconds fails that case only and is replaced; with `cpu_timeout`, also one whose case used more CPU seconds
  than that (its process and the compilers it waited for): a limit a busy machine does not move, where a compile that
  takes 20 CPU-s quiet ran past 120 s of wall time at load 14; `timeout` then only catches a case that hangs without
  using CPU. The defaults, 120 CPU-s and 600 s, are every test's: at 60 s of wall time and no CPU limit, the bounded
  run's case of corpus sops_268 (13.6 CPU-s of its worker, start-up included) failed at load 10-13, and the ASan run's of
  sops_8126 (5.8) at load 15-19 (84 and 22 s alone at load 10-13). With `asan`, kernels are compiled with ASAN_FLAGS and
  the workers preload the ASan runtime; its reports land in the failing case's message. With `reference_cache`, a
  directory, the reference's dear outputs are kept there and read back (reference_buffers); `reference_cases` and
  `reference_s` count the outputs "computed" and "read" and their seconds."""
  def __init__(self, jobs: int = 2, device: str = "CPU", asan: bool = False, timeout: float = 600.0, max_positions: int = 20_000_000,
               hand_coded: bool = False, cpu_timeout: Optional[float] = 120.0, reference_cache: Optional[Path] = None):
    self.device, self.asan, self.timeout, self.max_positions, self.hand_coded = device, asan, timeout, max_positions, hand_coded
    self.cpu_timeout, self.reference_cache = cpu_timeout, reference_cache
    self.reference_cases: collections.Counter[str] = collections.Counter()
    self.reference_s: dict[str, float] = collections.defaultdict(float)
    self.flags = registry.get(device).DEFAULT_FLAGS + (ASAN_FLAGS if asan else ())
    self.env_vars: dict[str, str] = {}
    if asan:
      lib = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
      if not os.path.isabs(lib): raise RuntimeError("no ASan runtime: `gcc -print-file-name=libasan.so` names no file; install libasan")
      self.logs = tempfile.TemporaryDirectory(prefix="fuzz-asan-")
      self.env_vars = {"LD_PRELOAD": lib, "ASAN_OPTIONS": f"detect_leaks=0:log_path={self.logs.name}/asan"}  # Python "leaks" at exit
    self.exitcodes: list[Optional[int]] = []  # of every worker that ended, in order
    self.workers = [_Worker(self) for _ in range(jobs)]

  @contextlib.contextmanager
  def env(self):
    saved = {k: os.environ.get(k) for k in self.env_vars}
    os.environ.update(self.env_vars)
    try: yield
    finally:
      for k, v in saved.items():
        if v is None: del os.environ[k]
        else: os.environ[k] = v

  def _poll(self, w: _Worker) -> Optional[tuple[Outcome, str]]:
    """The result of w's case once there is one: its own, or what its death or a timeout makes it."""
    with contextlib.suppress(EOFError, OSError):
      while w.conn.poll():
        msg = w.conn.recv()
        if msg[0] == "case":
          w.case = msg[1]
          w.started()
        elif msg[0] == "run": w.running = True
        elif msg[0] == "compiled": w.case.compile_s = msg[1]
        elif msg[0] == "reference":
          self.reference_cases[how := "read" if msg[2] else "computed"] += 1
          self.reference_s[how] += msg[1]
        else: return msg[1], msg[2]
    where = "running the program" if w.running else "before the program ran"
    over = f"timed out after {self.timeout:g} s" if time.monotonic() - w.since > self.timeout else \
           f"used over {self.cpu_timeout:g} CPU-s" if self.cpu_timeout and w.cpu_s() > self.cpu_timeout else None
    if over:
      w.proc.kill()
      w.proc.join()
      return (Outcome.RUN_ERROR if w.running else Outcome.ERROR), f"{over} {where}"
    if w.proc.is_alive(): return None
    w.proc.join()
    code = w.proc.exitcode
    msg = f"worker {f'killed by {signal.Signals(-code).name}' if code < 0 else f'exited with {code}'} {where}"
    if self.asan and (log := Path(self.logs.name) / f"asan.{w.proc.pid}").exists():
      msg += "\n" + log.read_text()[:MAX_MESSAGE]  # its head: the error, the access, the stack
    return (Outcome.RUN_ERROR if w.running else Outcome.ERROR), msg

  def _end(self, w: _Worker) -> None:
    if w.proc.is_alive():
      with contextlib.suppress(OSError): w.conn.send(None)
      w.proc.join(10)
      if w.proc.is_alive(): w.proc.kill(); w.proc.join()
    w.conn.close()
    self.exitcodes.append(w.proc.exitcode)

  def run(self, cases: Iterable[Case]) -> Iterator[Case]:
    """Each case, drawn if it was not, with its status, message and where it ran, in the order they finish."""
    todo, idle, busy = iter(cases), list(self.workers), []
    while True:
      while idle and (case := next(todo, None)) is not None:
        (w := idle.pop()).start(case)
        busy.append(w)
      if not busy: return
      wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=1.0)
      for w in list(busy):
        if (result := self._poll(w)) is None: continue
        busy.remove(w)
        case = w.case
        case.status, case.message = result
        case.extra = {"device": self.device, "asan": self.asan, "max_positions": self.max_positions,  # what a replay needs to draw alike
                      "hand_coded": self.hand_coded}
        if not w.proc.is_alive():  # a fresh worker in its place
          self._end(w)
          self.workers[self.workers.index(w)] = w = _Worker(self)
        idle.append(w)
        yield case

  def close(self) -> list[Optional[int]]:
    """Stop the workers; returns the exit code of every worker this pool ran (0: it ended cleanly)."""
    for w in self.workers: self._end(w)
    self.workers = []
    if self.asan: self.logs.cleanup()
    return self.exitcodes

  def __enter__(self) -> Pool: return self
  def __exit__(self, *exc) -> None:
    if self.workers: self.close()


# ---------------------------------------------------------------- kernels, the table, the command line

def kernel_pool(paths: Iterable[str], builders: int, seed: int, max_positions: int, min_positions: int = 0,
                corpus: Sequence[KernelAST] = ()) -> tuple[list[tuple[str, dict]], int]:
  """(label, document) of every kernel to fuzz -- each file or directory of .json files, then `builders` random builder
  kernels -- and how many were skipped as too big (or too small: below `min_positions`, which another run covered).
  A label starts with its source: corpus, examples, builders, a file. `corpus`: CORPUS's kernels, in its order, where
  the caller has them parsed already (the suite's session fixture): not parsed again."""
  docs = []
  for p in paths:
    for f in sorted(Path(p).glob("*.json")) if Path(p).is_dir() else [Path(p)]:
      src = {CORPUS.resolve(): "corpus", EXAMPLES.resolve(): "examples"}.get(Path(p).resolve(), re.sub(r"(\.jsonl?)?(\.gz)?$", "", Path(p).name))
      if corpus and f.resolve() == CORPUS.resolve():
        docs += [(f"{src}:{k.name or f'{p}:{i}'}", k) for i, k in enumerate(corpus, 1)]
        continue
      docs += [(f"{src}:{(k := loads(text)).name or label}", k) for label, text in read_documents(str(f))]
  rng = random.Random(seed)
  docs += [(f"builders:{i}:{(k := builder_kernel(rng)).name}", k) for i in range(builders)]
  keep = [(label, k.to_json()) for label, k in docs if min_positions <= positions(k, {v.name: v.min for v in k.vars}) <= max_positions]
  return keep, len(docs) - len(keep)

def undrawn(kernels: list[tuple[str, dict]], cases: int, seed: int, per_kernel: int = 0) -> Iterator[Case]:
  """Cases to draw, each with a seed of its own: `per_kernel` for every kernel (all of them, in turn), else `cases`
  for random kernels."""
  rng = random.Random(seed)
  picks = [k for _ in range(per_kernel) for k in kernels] if per_kernel else (rng.choice(kernels) for _ in range(cases))
  for label, doc in picks: yield Case(doc, None, None, rng.getrandbits(32), label)

def source_hashes(kernels: list[tuple[str, dict]], cases: int, seed: int, per_kernel: int, device: str, max_positions: int,
                  hand_coded: bool = False) -> Iterator[str]:
  """Each case of the run drawn, lowered and rendered, nothing compiled or run: "label seed sha256-of-its-source" (or the
  error that stopped it). Two commits whose lines are equal generate the same source for every case, so a run at one
  stands for the other on the same compiler."""
  dev = registry.get(device)
  options = dev.options()
  for case in undrawn(kernels, cases, seed, per_kernel):
    try:
      k = load(case.doc)
      kern = Kernel(k.rebased(), options).apply_opts(draw_case(case, k, options, max_positions, hand_coded).opts or [])
      digest = hashlib.sha256(dev.render(lower(kern, "kernel")).encode()).hexdigest()
    except Exception as e: digest = f"{type(e).__name__}: {e}".replace("\n", " ")
    yield f"{case.label} {case.seed} {digest}"

def save(case: Case, out: Path) -> Path:
  """The replay file of a failed case."""
  text = json.dumps(case.to_json())
  path = out / f"{case.status}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', case.label)[-60:]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}.json"
  out.mkdir(parents=True, exist_ok=True)
  path.write_text(text)
  return path

def describe(case: Case) -> str:
  opts = "not drawn" if case.opts is None else \
    " ".join(f"{o.op}{'' if o.axis is None else o.axis}:{o.amt}" for o in case.opts) or "no opts"
  return f"{case.label} [{opts}]" + "".join(f" {n}={x}" for n, x in (case.var_vals or {}).items()) + f" seed {case.seed}"

def table(counts: dict[str, collections.Counter]) -> str:
  """Cases per status (rows) and source (columns)."""
  sources = sorted({s for c in counts.values() for s in c})
  lines = [f"{'status':<14}{'total':>7}" + "".join(f"{s[:12]:>13}" for s in sources)]
  for st in Outcome:
    c = counts.get(st, collections.Counter())
    lines.append(f"{st:<14}{sum(c.values()):>7}" + "".join(f"{c[s]:>13}" for s in sources))
  return "\n".join(lines)

def fuzz(pool: Pool, kernels: list[tuple[str, dict]], cases: int, seed: int, out: Optional[Path], log=print,
         per_kernel: int = 0, progress: int = 0, first: int = 0, only: Optional[set[tuple[str, str]]] = None) -> dict[str, collections.Counter]:
  """Run the cases `undrawn` gives, from the `first` on (a run split in parts: each part's cases are the whole run's),
  with `only` those whose (label, seed as text) it holds;
  failures are logged and, with `out`, written there as replay files. So are compiles slower than SLOW_COMPILE_S, the
  counts so far every `progress` cases, and at the end the slowest compiles."""
  counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  slowest: list[tuple[float, str]] = []
  t0 = time.perf_counter()
  todo = itertools.islice(undrawn(kernels, cases, seed, per_kernel), first, None)
  for n, case in enumerate(pool.run(c for c in todo if only is None or (c.label, str(c.seed)) in only), 1):
    counts[case.status][case.label.split(":")[0]] += 1
    if progress and n % progress == 0:
      log(f"{n} cases in {time.perf_counter() - t0:.0f} s: " + ", ".join(f"{st} {sum(counts[st].values())}" for st in Outcome if counts.get(st)))
    if case.compile_s is not None:
      slowest = sorted(slowest + [(case.compile_s, describe(case))], reverse=True)[:5]
      if case.compile_s > SLOW_COMPILE_S: log(f"SLOW COMPILE {case.compile_s:.1f} s {describe(case)}")
    if case.status != Outcome.PASS:
      msg = case.message.strip()
      msg = msg[-800:] if case.status == Outcome.ERROR else msg[:800]  # a traceback ends with its error
      log(f"{case.status} {describe(case)}" + (f" -> {save(case, out)}" if out else "") + f"\n  {msg}")
  log("slowest compiles (compiler CPU s): " + "; ".join(f"{s:.1f} {d}" for s, d in slowest))
  n, took = pool.reference_cases, pool.reference_s
  log(f"reference outputs: {n['computed']} computed in {took['computed']:.1f} CPU-s, {n['read']} read from the cache in {took['read']:.1f} s")
  return counts


def replay(path: str, print_source: bool, timeout: float, cpu_timeout: Optional[float] = None) -> int:
  case = Case.from_json(json.loads(Path(path).read_text()))
  device = case.extra.get("device", "CPU")
  print(f"replay {describe(case)} on {device}{' with ASan' if case.extra.get('asan') else ''}; recorded {case.status or '-'}")
  if print_source and case.opts is not None:
    dev = registry.get(device)
    try: print(dev.render(lower(Kernel(load(case.doc).rebased(), dev.options()).apply_opts(case.opts))))
    except Exception as e: print(f"(no source: {type(e).__name__}: {e})")
  extra = case.extra
  with Pool(1, device, bool(extra.get("asan")), timeout, extra.get("max_positions", 20_000_000), bool(extra.get("hand_coded")),
            cpu_timeout) as pool:
    (got,) = pool.run([case])
  if got.compile_s is not None: print(f"compile: {got.compile_s:.1f} s of compiler CPU")
  print(f"{got.status}" + (f": {got.message.strip()}" if got.message else ""))
  return 0 if got.status == Outcome.PASS else 1

