"""CPU kernel benchmark in one run: tunesvc with no opts and with the hand-coded opts, numpy, and tinygrad with its
default heuristics (no BEAM), kernel by kernel.

  .venv/bin/python bench/cpu_kernels.py                      # every kernel; prints a markdown report
  .venv/bin/python bench/cpu_kernels.py --kernels matmul_1024 --min-time 1 --json /tmp/bench.json

Per kernel: every contender is compiled and warmed up, and every output is checked against a numpy answer (a
tunesvc MISMATCH is printed loudly and makes the exit status 1); then the contenders run interleaved, in rounds of
one turn each (none hand numpy tinygrad none hand ...) so they share the machine's noise, until each has run
--min-time seconds in all (and at least --min-runs times) or --max-runs times; a turn is one untimed run, then
--turn seconds of timed runs (see measure). Reported: the median. Inputs are standard-normal random.
Threads: numpy (OpenBLAS) and tinygrad keep their defaults; tunesvc's come from the hand-coded THREAD opt. Before
each kernel the script waits (--quiet-wait) for the rest of the machine to go idle, and reports how busy it was.

tinygrad (pinned below) lives in its own venv, bench/.venv-tinygrad, made here with pip on first use and never a
project dependency; bench/_tinygrad.py runs there as a child process and its docstring says what exactly it times.
"""
from __future__ import annotations
import argparse, datetime, json, math, os, platform, shlex, shutil, subprocess, sys, tempfile, time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional
# OpenBLAS's idle threads spin for 2^28 cycles (~0.1 s) after each call; interleaved with our OpenMP kernels on a
# 2-core machine they take a core from whoever runs next and doubled the hand-coded matmul_512 and conv2d times
# (6.6 vs 2.9 ms, 22.6 vs 9.6 ms). 2^4 cycles lets them sleep at once: numpy keeps all its threads and its own
# times agree with --blocked runs. Set before numpy loads OpenBLAS; an explicit setting wins.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
# libgomp's idle threads (our kernels', and torch's in its child, which inherits this) spin 300,000 times after each
# parallel region: ~6 ms of a core on this host, into the next contender's turn. 30,000 (~0.6 ms) keeps them awake over
# the gaps inside a turn (the torch child's round trip: 75 us median, 142 us p90) and asleep within the next one's
# untimed run. Set before the first kernel loads libgomp; an explicit setting wins.
os.environ.setdefault("GOMP_SPINCOUNT", "30000")
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable without installing the package
from devices import cpu
from linearizer.ast import loads
from linearizer.dtypes import float32
from linearizer.kernel import Kernel
from linearizer.reference import mismatch, poison
from search.load import OtherLoad, wait_quiet
from tunesvc.runtime import compile_kernel
try: from linearizer.heuristic import hand_coded_optimizations
except ImportError: hand_coded_optimizations = None  # the hand-coded column reads n/a until the module exists

TINYGRAD_PIN = "0.14.0"
TG_VENV, TG_HELPER = ROOT / "bench" / ".venv-tinygrad", ROOT / "bench" / "_tinygrad.py"
QUIET = 0.1  # cores the rest of the machine may keep busy for a measurement to count as undisturbed
CONTENDERS = ("none", "hand", "numpy", "tinygrad")
HEADS = {"none": "tunesvc, no opts", "hand": "tunesvc, hand-coded", "numpy": "numpy", "tinygrad": "tinygrad default"}

# ---------------------------------------------------------------- the kernels and their numpy twins

def np_conv(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> Callable[[], None]:
  """numpy has no conv: copy x into a kept zero border, im2col into a kept buffer, one sgemm (all of it timed)."""
  (_, c, h, wd), (co, _, kh, kw) = x.shape, w.shape
  xp, cols = np.zeros((c, h + kh - 1, wd + kw - 1), np.float32), np.empty((c, kh, kw, h, wd), np.float32)
  win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(1, 2)).transpose(0, 3, 4, 1, 2)  # a view of xp
  wm, om, cm = w.reshape(co, -1), out.reshape(co, h * wd), cols.reshape(c * kh * kw, h * wd)
  def run():
    xp[:, kh // 2:kh // 2 + h, kw // 2:kw // 2 + wd] = x[0]
    np.copyto(cols, win)
    np.matmul(wm, cm, out=om)
  return run

def conv_want(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  kh, kw = w.shape[2:]
  win = np.lib.stride_tricks.sliding_window_view(np.pad(x[0], ((0, 0), (kh // 2,) * 2, (kw // 2,) * 2)), (kh, kw), axis=(1, 2))
  return np.einsum("chwij,ocij->ohw", win, w, optimize=True)

def np_mul_add(a, b, c, out):
  def run():  # numpy cannot fuse: two passes, into the kept output
    np.multiply(a, b, out=out)
    np.add(out, c, out=out)
  return run

@dataclass
class Spec:
  metric: str                      # "flop" (GFLOP/s) or "byte" (GB/s of the kernel's minimal traffic)
  shapes: list[tuple[int, ...]]    # the inputs, in the kernel's buffer order 1..n
  out: tuple[int, ...]
  numpy: Callable[..., Callable[[], None]]  # (*inputs, out) -> a run writing out
  want: Callable[..., np.ndarray]           # float64 inputs -> the answer (float32 op by op for element-wise)
  reduce: int = 1                           # reduction length, for the mismatch tolerance

SPECS = {
  "matmul_512": Spec("flop", [(512, 512)] * 2, (512, 512), lambda a, b, o: lambda: np.matmul(a, b, out=o), np.matmul, 512),
  "matmul_1024": Spec("flop", [(1024, 1024)] * 2, (1024, 1024), lambda a, b, o: lambda: np.matmul(a, b, out=o), np.matmul, 1024),
  "sum_rows_4096": Spec("byte", [(4096, 4096)], (4096,), lambda x, o: lambda: np.sum(x, axis=1, out=o), lambda x: x.sum(axis=1), 4096),
  "mul_add_16m": Spec("byte", [(1 << 24,)] * 3, (1 << 24,), np_mul_add,
                      lambda a, b, c: (a.astype(np.float32) * b.astype(np.float32)) + c.astype(np.float32)),  # no fma, as ours
  "conv2d_3x3_pad": Spec("flop", [(1, 64, 56, 56), (64, 64, 3, 3)], (1, 64, 56, 56), np_conv, conv_want, 64 * 9),
}

# ---------------------------------------------------------------- tinygrad, in its own venv

def ensure_venv(venv: Path, pkg: str, pin: str, *more: str) -> tuple[Optional[Path], str]:
  """(the venv's python, "") with pkg==pin (and `more` requirements) installed by pip, or (None, why not)."""
  py = venv / "bin" / "python"
  probe = [str(py), "-c", f"import importlib.metadata as m, numpy; print(m.version({pkg!r}).split(\"+\")[0])"]
  if py.exists() and subprocess.run(probe, capture_output=True, text=True).stdout.strip() == pin: return py, ""
  print(f"installing {pkg}=={pin} into {os.path.relpath(venv, ROOT)} ...", file=sys.stderr)
  for cmd in ([sys.executable, "-m", "venv", "--clear", str(venv)],
              [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{pkg}=={pin}", "numpy>=2,<2.5", *more]):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0: return None, f"`{shlex.join(cmd[:4])} ...` failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
  return py, ""

class Child:
  """A helper script run by another venv's python: one JSON request, one JSON reply; its stderr goes to a file, shown
  when it dies. Its own process group: killing that ends its workers too."""
  def __init__(self, py: Path, script: Path, env: dict[str, str], tmp: Path):
    self.errpath = tmp / f"{script.stem}.stderr"
    self.proc = subprocess.Popen([str(py), str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=self.errpath.open("w"), text=True, env=env, cwd=tmp, start_new_session=True)
    self.info = self._read()

  def _read(self) -> dict:
    line = self.proc.stdout.readline()
    if not line: raise RuntimeError(f"{self.errpath.stem} helper died: " + " | ".join(self.errpath.read_text().strip().splitlines()[-3:]))
    return json.loads(line)

  def ask(self, **req) -> dict:
    self.proc.stdin.write(json.dumps(req) + "\n")
    self.proc.stdin.flush()
    if "error" in (r := self._read()): raise RuntimeError(r["error"])
    return r

  def close(self) -> None:
    try: self.ask(cmd="quit")
    except Exception: pass
    self.proc.wait(timeout=30)

class Tinygrad(Child):
  """bench/_tinygrad.py. `env`: more tinygrad settings (a BEAM search's limits)."""
  def __init__(self, py: Path, dev: str, tmp: Path, env: Optional[dict[str, str]] = None):
    env = {**{k: v for k, v in os.environ.items() if k not in ("DEBUG", "BEAM", "NOOPT", "JIT")}, **(env or {})}
    # default heuristics, compiled now: no BEAM (a request may ask for one), no kernel/compile caches (CACHELEVEL=0),
    # a private cache db anyway
    env.update(DEV=dev, BEAM="0", CACHELEVEL="0", IGNORE_BEAM_CACHE="1", CACHEDB=str(tmp / "tinygrad-cache.db"))
    super().__init__(py, TG_HELPER, env, tmp)

def start_tinygrad(dev: str, tmp: Path, env: Optional[dict[str, str]] = None) -> tuple[Optional[Tinygrad], str]:
  """(the helper child on DEV=dev, "") or (None, why not): tinygrad installed on first use, clang too where needed."""
  py, why = ensure_venv(TG_VENV, "tinygrad", TINYGRAD_PIN)
  if py is None: return None, why
  if dev == "CPU" and shutil.which("clang") is None and shutil.which("apt-get"):
    # tinygrad's CPU renderer compiles with clang: install it as this script installs tinygrad, not by hand
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "clang"]): subprocess.run(cmd, capture_output=True)
  if dev == "CPU" and shutil.which("clang") is None:
    return None, "its default CPU renderer compiles with clang, which is not on PATH (apt-get install clang)"
  try: return Tinygrad(py, dev, tmp, env), ""
  except Exception as e: return None, tg_note(e)

# ---------------------------------------------------------------- measuring

def measure(fns: dict[str, Callable[[], float]], min_time: float, min_runs: int, max_runs: int, turn: float,
            blocked: bool = False) -> dict[str, list[float]]:
  """Rounds of one turn per contender, in order, until every contender has min_time seconds (and min_runs runs) or
  max_runs runs; all stay in every round. A turn is one untimed run, then timed runs until `turn` seconds (at least
  one). The untimed run matters on this VM: a threaded kernel right after another contender waits for the idle
  vCPU and its sleeping threads (measured: hand-coded matmul_512 5.8 vs 2.9 ms, numpy 1.8 vs 1.0 ms), and finds its
  data evicted. `blocked`: each contender's runs back to back instead, a diagnostic of what interleaving costs."""
  ts: dict[str, list[float]] = {n: [] for n in fns}
  done = lambda n: len(ts[n]) >= max_runs or (len(ts[n]) >= min_runs and sum(ts[n]) >= min_time)
  for group in ([[n] for n in fns] if blocked else [list(fns)]):
    while not all(done(n) for n in group):
      for n in group:
        fns[n]()
        st = len(ts[n])
        while not done(n) or len(ts[n]) == st:
          ts[n].append(fns[n]())
          if sum(ts[n][st:]) >= turn and not blocked: break
  return ts

def timed(fn: Callable[[], None]) -> Callable[[], float]:
  def run() -> float:
    st = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - st) * 1e-9
  return run

def tg_note(e: Exception) -> str: return f"{type(e).__name__}: {e}".splitlines()[0][:200]

def bench_kernel(name: str, args, tg: Optional[Tinygrad], tmp: Path, rng: np.random.Generator) -> dict:
  spec, ast = SPECS[name], loads((ROOT / "examples" / "kernels" / f"{name}.json").read_text())
  sizes = ast.buffer_sizes()
  assert [b.dtype for b in ast.buffers] == [float32] * len(sizes) and sizes[1:] == [math.prod(s) for s in spec.shapes], name
  ins = []
  for n in sizes[1:]:  # aligned, random, never zeros
    ins.append(cpu.alloc(n, np.float32))
    ins[-1][:] = rng.standard_normal(n, dtype=np.float32)
  views = [x.reshape(s) for x, s in zip(ins, spec.shapes)]
  want = np.asarray(spec.want(*(v.astype(np.float64) for v in views)), np.float64).reshape(-1).astype(np.float32)
  res: dict = {"name": name, "metric": spec.metric, "flops": ast.flops(), "bytes": ast.bytes(), "notes": {}, "mismatch": []}
  fns: dict[str, Callable[[], float]] = {}

  def check(who: str, got: np.ndarray, fatal: bool) -> bool:
    if (bad := mismatch(got.reshape(-1), want, float32, spec.reduce)) is None: return True
    print(f"\n!!!!!!!! MISMATCH: {name} / {HEADS[who]}: {bad}\n", file=sys.stderr)
    res["notes"][who] = "MISMATCH"
    if fatal: res["mismatch"].append(who)
    return False

  # tunesvc: unoptimised, then hand-coded; each writes its own output
  scheds: dict[str, Optional[list]] = {"none": []}
  if hand_coded_optimizations is None: res["notes"]["hand"] = "n/a (no linearizer/heuristic.py)"
  else:
    try: scheds["hand"] = list(hand_coded_optimizations(Kernel(ast, cpu.options())))
    except Exception as e: res["notes"]["hand"] = f"heuristic failed: {tg_note(e)}"
  for who, opts in scheds.items():
    _, prg, _ = compile_kernel(ast, "CPU", opts)
    out = cpu.alloc(sizes[0], np.float32)
    out[:] = poison(float32, sizes[0])  # an element the kernel never writes shows as poison
    prg(out, *ins)
    if check(who, out, fatal=True):
      prg(out, *ins)  # warm-up
      fns[who] = lambda prg=prg, bufs=(out, *ins): prg.time(*bufs)
    res.setdefault("opts", {})[who] = [f"{o.op} {o.axis} {o.amt}" for o in opts]

  # numpy, into a kept output of the kernel's shape
  o = np.full(spec.out, np.nan, np.float32)
  run = spec.numpy(*views, o)
  run()
  if check("numpy", o, fatal=False):
    run()
    fns["numpy"] = timed(run)

  # tinygrad: same inputs through .npy files, its output back the same way
  if tg is not None:
    paths = [str(tmp / f"in{i}.npy") for i in range(len(views))]
    for p, v in zip(paths, views): np.save(p, v)
    try:
      res["tinygrad"] = tg.ask(cmd="setup", name=name, inputs=paths, out=str(tmp / "out.npy"))
      if check("tinygrad", np.load(tmp / "out.npy"), fatal=False): fns["tinygrad"] = lambda: tg.ask(cmd="time")["t"]
    except RuntimeError as e: res["notes"]["tinygrad"] = f"n/a ({tg_note(e)})"
    finally:
      for p in paths: os.unlink(p)

  res.update(measure_quietly({n: fns[n] for n in CONTENDERS if n in fns}, args, tg.proc.pid if tg is not None else None))
  return res

def quiet(args, *children: Optional[int]) -> None:
  """Wait (up to --quiet-wait s) for the rest of the machine to go idle, saying so when that took a while."""
  waited = wait_quiet(QUIET, args.quiet_wait, *filter(None, children))[0] if args.quiet_wait > 0 else 0.0
  if waited > 1.5: print(f"  waited {waited:.0f} s for the machine to go quiet", file=sys.stderr)

def measure_quietly(fns: dict[str, Callable[[], float]], args, *children: Optional[int]) -> dict:
  """{times, other_load, attempts}: `measure` on a quiet machine, taken again (--retries) while the rest of the machine
  disturbed it; the least disturbed attempt is kept. `children`: processes of ours (contenders' helpers: their turns are
  the run's own work; None is skipped) whose CPU time is no disturbance."""
  res: dict = {}
  for attempt in range(1 + args.retries):
    quiet(args, *children)
    load = OtherLoad(*filter(None, children))
    times = measure(fns, args.min_time, args.min_runs, args.max_runs, args.turn, args.blocked)
    if "times" not in res or load.cores() < res["other_load"]: res.update(times=times, other_load=load.cores(), attempts=attempt + 1)
    if res["other_load"] < QUIET: break
    print(f"  the rest of the machine kept {load.cores():.2f} cores busy meanwhile", file=sys.stderr)
  return res

# ---------------------------------------------------------------- the report

def med(ts: list[float]) -> float: return float(np.median(ts))
def spread(ts: list[float]) -> float:  # interquartile range over the median
  q1, q2, q3 = np.percentile(ts, [25, 50, 75])
  return float((q3 - q1) / q2)

def rate(r: dict, t: float) -> str:
  return f"{r['flops'] / t * 1e-9:.1f} GFLOP/s" if r["metric"] == "flop" else f"{r['bytes'] / t * 1e-9:.1f} GB/s"

def cell(r: dict, who: str) -> str:
  if who not in r["times"]: return r["notes"].get(who, "n/a")
  t = med(r["times"][who])
  return f"{t * 1e3:.3g} ms, {rate(r, t)}"

def vs(r: dict, who: str, other: str) -> str:  # how many times faster `who` is than `other`
  if who not in r["times"] or other not in r["times"]: return "n/a"
  return f"{med(r['times'][other]) / med(r['times'][who]):.2f}x"

def machine(tg_info: Optional[dict], tg_dev: str, tg_why: str, beam: int = 0) -> list[str]:
  fp = cpu.fingerprint()
  blas = np.__config__.CONFIG.get("Build Dependencies", {}).get("blas", {})
  cc = subprocess.run(["clang", "--version"], capture_output=True, text=True).stdout.splitlines()[0] if shutil.which("clang") else "none"
  tgl = (f"tinygrad {tg_info['version']}, DEV={tg_dev} ({tg_info['renderer']}, clang: {cc}), NUM_CPU_THREADS={tg_info['threads']}, BEAM={beam}"
         if tg_info else f"tinygrad: n/a ({tg_why})")
  git = lambda *a: subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()
  dirty = " + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
  return [f"- CPU: {fp['cpu']} ({fp['arch']}), {fp['threads']} hardware threads, ISA flags: {' '.join(fp['isa'])}",
          f"- tunesvc: commit {git('rev-parse', '--short', 'HEAD') or '?'}{dirty}; {fp['compiler_version']}, flags `{' '.join(fp['flags'])}`",
          f"- numpy {np.__version__}, BLAS {blas.get('name', '?')} {blas.get('version', '')} "
          f"(OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT')}; libgomp, ours and torch's: "
          f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}); Python {platform.python_version()}",
          f"- {tgl}"]

def report(results: list[dict], cmd: str, facts: list[str], args) -> str:
  when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
  lines = [f"Command: `{cmd}`", f"Date: {when}", "", *facts,
           "- method: per kernel, " + ("contenders one after the other (--blocked)" if args.blocked else
           f"contenders in rounds of turns (none, hand, numpy, tinygrad, none, ...); a turn is one untimed run, then timed runs "
           f"for {args.turn:g} s (at least one)") + f"; until each has {args.min_time:g} s of timed runs and >= {args.min_runs} runs, "
           f"or {args.max_runs} runs (all take their turn in every round, so fast ones may pass it); median shown", "",
           "| kernel | " + " | ".join(HEADS[c] for c in CONTENDERS) + " | hand vs numpy | hand vs tinygrad |",
           "|---|" + "---:|" * (len(CONTENDERS) + 2)]
  for r in results:
    lines.append(f"| {r['name']} | " + " | ".join(cell(r, c) for c in CONTENDERS) +
                 f" | {vs(r, 'hand', 'numpy')} | {vs(r, 'hand', 'tinygrad')} |")
  lines += ["", "\"x vs y\" is y's median time over x's: above 1, the hand-coded kernel is faster. Rates use each kernel's "
            "FLOPs or minimal bytes (inputs read once, output written once), whoever runs it.", "",
            "Runs and spread (interquartile range / median); other load: cores the rest of the machine kept busy meanwhile "
            "(the least disturbed of `attempts`):", "",
            "| kernel | " + " | ".join(HEADS[c] for c in CONTENDERS) + " | other load | attempts |", "|---|" + "---:|" * (len(CONTENDERS) + 2)]
  for r in results:
    lines.append(f"| {r['name']} | " + " | ".join(f"{len(r['times'][c])} runs, {spread(r['times'][c]):.1%}" if c in r["times"] else "n/a"
                                               for c in CONTENDERS) + f" | {r['other_load']:.2f} | {r['attempts']} |")
  lines += ["", "Schedules:", ""]
  for r in results:
    hand = r.get("opts", {}).get("hand")
    tgk = r.get("tinygrad")
    tgs = "; ".join(f"{n} [{', '.join(o)}]" for n, o in zip(tgk["names"], tgk["opts"])) if tgk else "n/a"
    lines.append(f"- {r['name']}: hand-coded [{', '.join(hand) if hand is not None else 'n/a'}]; tinygrad {tgs}")
  lines += ["", "Targets:", ""]
  for name, other, goal, what in (("matmul_1024", "tinygrad", 2.0, "hand-coded >= 2x tinygrad's default"),
                                  ("sum_rows_4096", "numpy", 0.7, "hand-coded >= 70% of numpy's bandwidth"),
                                  ("mul_add_16m", "numpy", 0.7, "hand-coded >= 70% of numpy's bandwidth")):
    r = next((r for r in results if r["name"] == name), None)
    if r is None or "hand" not in r["times"] or other not in r["times"]: lines.append(f"- {name}: {what}: n/a"); continue
    x = med(r["times"][other]) / med(r["times"]["hand"])
    lines.append(f"- {name}: {what}: {x:.2f}x, {'MET' if x >= goal else 'NOT MET'}")
  return "\n".join(lines)

def timing_args(ap: argparse.ArgumentParser) -> None:
  """The flags of `measure_quietly` and tinygrad's device."""
  ap.add_argument("--min-time", type=float, default=0.5, help="seconds of runs each contender needs (default 0.5)")
  ap.add_argument("--min-runs", type=int, default=5)
  ap.add_argument("--max-runs", type=int, default=200)
  ap.add_argument("--tinygrad-dev", default="CPU", help="tinygrad's DEV (default CPU: its default renderer, which needs clang)")
  ap.add_argument("--quiet-wait", type=float, default=300, help="before each timing phase, wait up to this many seconds for "
                  f"the rest of the machine to go idle (under {QUIET} cores busy for a second); 0: don't")
  ap.add_argument("--turn", type=float, default=0.02, help="seconds of timed runs per contender per round (default 0.02)")
  ap.add_argument("--retries", type=int, default=3, help=f"measure a kernel again, up to this many times, while the rest "
                  f"of the machine kept over {QUIET} cores busy meanwhile; the least disturbed attempt is reported")
  ap.add_argument("--blocked", action="store_true", help="run each contender's runs back to back, not interleaved")

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--kernels", default=",".join(SPECS), help=f"comma-separated, of: {', '.join(SPECS)}")
  ap.add_argument("--no-tinygrad", action="store_true", help="skip tinygrad (its column reads n/a)")
  timing_args(ap)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--json", type=Path, help="also write every sample and schedule here")
  args = ap.parse_args()
  names = [n.strip() for n in args.kernels.split(",") if n.strip()]
  if unknown := [n for n in names if n not in SPECS]: ap.error(f"unknown kernels {unknown}; known: {list(SPECS)}")
  cmd = shlex.join([os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else sys.executable,
                    os.path.relpath(__file__, ROOT), *sys.argv[1:]])
  if hand_coded_optimizations is None: print("linearizer/heuristic.py not found: the hand-coded column reads n/a", file=sys.stderr)

  with tempfile.TemporaryDirectory(prefix="bench-cpu-") as td:
    tmp, tg, why = Path(td), None, "skipped: --no-tinygrad"
    if not args.no_tinygrad:
      tg, why = start_tinygrad(args.tinygrad_dev, tmp)
      if tg is None: print(f"tinygrad: n/a: {why}", file=sys.stderr)
    tg_info = tg.info if tg is not None else None
    rng, results = np.random.default_rng(args.seed), []
    try:
      for n in names:
        print(f"{n} ...", file=sys.stderr, flush=True)
        results.append(bench_kernel(n, args, tg, tmp, rng))
    finally:
      if tg is not None: tg.close()
  print(report(results, cmd, machine(tg_info, args.tinygrad_dev, why), args))
  if args.json: args.json.write_text(json.dumps({"command": cmd, "tinygrad": tg_info, "results": results}, indent=1))
  bad = [(r["name"], w) for r in results for w in r["mismatch"]]
  if bad: print(f"\nMISMATCH in {bad}: these tunesvc kernels computed wrong results", file=sys.stderr)
  return 1 if bad else 0

if __name__ == "__main__": sys.exit(main())
