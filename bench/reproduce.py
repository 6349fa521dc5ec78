"""Do the headline ratios of docs/benchmarks.md still hold? Each claim is one recorded ratio (tunesvc against another
contender, measured interleaved in one run), named by the entry it comes from; each run is that entry's command, reduced
where the recorded one takes long (fewer rounds, the contenders the claims need). A claim reproduces when the ratio
measured now is within its tolerance of the recorded one: the larger of the noise recorded with the entry (`tol`) and
this run's own (the two contenders' interquartile ranges over their medians, combined). A claim measured on a busy
machine is reported BUSY (its verdict says nothing): over 0.1 cores of other load in the bench's own count beside the
claim's kernel, or, where the bench counts none, over the whole run -- the machine's busy time less the run's process
tree's (search.load.OtherLoad less the reaped children's CPU), measured while it ran. Not the load average: it trails
the minute before, and the previous run's own processes left it over 1 after every run. The lead runs the short runs (a
few minutes) in a quiet window; --long adds the whole-model ones (~10 min).

  .venv/bin/python bench/reproduce.py --list
  PYTHONPATH=$PWD .venv/bin/python bench/reproduce.py [RUN ...] [--long] [--keep DIR]
"""
from __future__ import annotations
import argparse, math, json, os, subprocess, sys, tempfile, time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from cpu_kernels import ROOT, med, spread  # it puts ROOT on sys.path
from devices import cpu
from search.load import Busiest, OtherLoad
from search.prior import family

DOCS = ROOT / "docs" / "benchmarks.md"
QUIET_OTHER = 0.1

def _q(ts: list[float]) -> tuple[float, float]: return med(ts), spread(ts)

# a measured claim: (ratio, its noise as a fraction, the rest of the machine's cores during it or None where unknown)
Measured = tuple[float, float, "float | None"]

def cvt(kernel: str, slow: str, fast: str = "hand") -> Callable[[dict], Measured]:
  """bench/cpu_vs_torch.py --json: `slow`'s median time over `fast`'s for one kernel (1.2: tunesvc 1.2x faster)."""
  def get(rep: dict) -> Measured:
    r = next(r for r in rep["results"] if r["name"] == kernel)
    (a, sa), (b, sb) = _q(r["times"][slow]), _q(r["times"][fast])
    return a / b, math.hypot(sa, sb), r["other_load"]
  return get

def models(model: str, slow: str, fast: str = "tunesvc_tuned") -> Callable[[dict], Measured]:
  """bench/tinygrad_models.py --json: `slow`'s median replay over `fast`'s."""
  def get(rep: dict) -> Measured:
    c = rep["models"][model]["contenders"]
    (a, sa), (b, sb) = _q(c[slow]["times"]), _q(c[fast]["times"])
    return a / b, math.hypot(sa, sb), None
  return get

def tuning(model: str) -> Callable[[dict], Measured]:
  """bench/tinygrad_models.py --json: tunesvc's whole-model tuning wall time over BEAM=2's (one measurement each: no spread)."""
  def get(rep: dict) -> Measured:
    m = rep["models"][model]
    return m["tunesvc_tuned_tuning_s"] / m["beam2_tuning_s"], 0.0, None
  return get


@dataclass(frozen=True)
class Claim:
  name: str
  recorded: float
  tol: float       # the noise recorded with the entry, as a fraction of the ratio
  measure: Callable[[dict], Measured]

@dataclass(frozen=True)
class Run:
  name: str
  entry: str       # a part of the heading of its entry in docs/benchmarks.md
  argv: tuple[str, ...]  # after the interpreter; JSON is written to the path --json is given
  minutes: float   # on a quiet AMD EPYC, 2 cores
  long: bool
  claims: tuple[Claim, ...]
  host: str = "amd f25 cpu-w16"  # the hosts its ratios hold for: host_kind()'s CPU vendor, family number and vector family

OPENBLAS = "issue 14's matmuls and GPT-2's LM head against OpenBLAS"
MATMULS = ("bench/cpu_vs_torch.py", "--kernels", "matmul_1024,matmul_2048,matmul_4096,lm_head_gpt2", "--no-torch", "--no-tinygrad",
           "--no-tuned", "--quiet-wait", "60", "--retries", "1")
AVX2 = "every group, the corpus too at 2 threads, hand-coded, QUIET, on an AMD EPYC Zen 3"
AVX2_MM = "matmul and conv groups at 2 and at 1 thread, hand-coded, QUIET, the same AMD EPYC Zen 3"
ZEN1 = 'every group but the corpus at 2 and at 1 thread, hand-coded, QUIET, on an AMD EPYC "Zen 1" class host'
ZEN4 = "every group, the corpus too at 2 threads, hand-coded, QUIET, on AMD EPYC Zen 4"
EMR = 'every group, the corpus too at 2 threads, hand-coded, QUIET, on an Intel Xeon "Emerald Rapids" class host'
CONVS = ("r50_conv_3x3_64_56", "r50_conv_1x1_64to256_56", "r50_conv_1x1_256to64_56", "r50_conv_3x3_128_s2_56",
         "r50_conv_1x1_256to512_s2_56", "r50_conv_3x3_256_14", "r50_conv_1x1_2048to512_7", "dwconv_3x3_144_56")
MODEL_KERNELS = {"softmax": "softmax_4096x1024", "layernorm": "layernorm_4096x1024", "GELU": "gelu_2048x3072", "SiLU": "silu_2048x3072"}

def model_kernels(name: str, entry: str, minutes: float, ratios: tuple[tuple[float, float], ...], host: str) -> Run:
  """A run of the model kernels at 2 threads against torch.compile: `ratios` (recorded, tol) in MODEL_KERNELS' order."""
  return Run(name, entry, ("bench/cpu_vs_torch.py", "--threads", "2", "--kernels", ",".join(MODEL_KERNELS.values()), "--no-tune",
                           "--no-tinygrad", "--no-tuned", "--quiet-wait", "20", "--retries", "1"), minutes, False, tuple(
    Claim(f"{n} hand-coded vs torch.compile, 2 threads", r, tol, cvt(k, "compile")) for (n, k), (r, tol) in zip(MODEL_KERNELS.items(), ratios)), host)

def openblas(name: str, entry: str, threads: int, minutes: float, ratios: tuple[tuple[str, float, float], ...],
             host: str = "amd f25 cpu-w16") -> Run:
  """A run of the matmuls against OpenBLAS at `threads`: `ratios` (kernel, recorded, tol)."""
  return Run(name, entry, (*MATMULS, "--threads", str(threads)), minutes, False, tuple(
    Claim(f"{k} hand-coded vs OpenBLAS, {threads} thread{'s' if threads > 1 else ''}", r, tol, cvt(k, "numpy")) for k, r, tol in ratios), host)

# tol: the entry's margins are 1-12%, two 1-thread runs differed by up to 4% (1.11/1.04/1.02/1.20 vs 1.12/1.04/1.03/1.24)
RUNS = (
  openblas("openblas-2t", OPENBLAS, 2, 2, (
    ("matmul_1024", 1.08, 0.05), ("matmul_2048", 1.01, 0.05), ("matmul_4096", 1.03, 0.05), ("lm_head_gpt2", 1.21, 0.05))),
  openblas("openblas-1t", OPENBLAS, 1, 3, (("matmul_1024", 1.12, 0.05), ("matmul_2048", 1.04, 0.05), ("lm_head_gpt2", 1.24, 0.05))),
  # session 21's entry on this family (CODEGEN 23), QUIET: each ratio the middle of that entry's run, this file's rerun
  # beside it and the morning's run at d73798c (where the code it measures was the same); tol covers their spread, at
  # least the entry's pair's noise. torch eager's own hiccups (1x1 64->256 read 7.07x once) stay outside it
  model_kernels("model-kernels-2t", ZEN4, 3, ((1.12, 0.40), (1.58, 0.25), (5.20, 0.25), (1.70, 0.25)), "amd f25 cpu-w16"),
  Run("convs-2t", ZEN4, (
    "bench/cpu_vs_torch.py", "--threads", "2", "--kernels", ",".join(CONVS), "--no-tune", "--no-tinygrad", "--no-tuned",
    "--quiet-wait", "20", "--retries", "1"), 2, False, tuple(
    Claim(f"{k} hand-coded vs torch eager, 2 threads", r, tol, cvt(k, "eager")) for k, (r, tol) in zip(CONVS, (
      (1.12, 0.12), (1.34, 0.15), (1.47, 0.15), (1.14, 0.13), (1.20, 0.25), (1.08, 0.10), (1.26, 0.13), (1.55, 0.27))))),
  # session 23's entries on this AVX2 host kind (Zen 3), QUIET: the matmuls from the afternoon's (CODEGEN 25, mm23's kept
  # loads), tol the noise of its pair (their spreads combined, as judge()); the convs the middle of the morning's run and
  # the afternoon's (the same code but the two 1x1 convs, which a quiet A/B put at 0.996x/1.025x), tol covering both and
  # at least the pair's noise (1x1 2048->512 at 7x7: torch eager's 1.63 then 1.60 ms against ours 1.67 then 1.01 ms)
  openblas("openblas-2t-avx2", AVX2_MM, 2, 2, (
    ("matmul_1024", 0.87, 0.33), ("matmul_2048", 0.92, 0.17), ("matmul_4096", 0.81, 0.13), ("lm_head_gpt2", 0.98, 0.17)), "amd f25 cpu-w8"),
  openblas("openblas-1t-avx2", AVX2_MM, 1, 3, (
    ("matmul_1024", 0.91, 0.25), ("matmul_2048", 0.82, 0.20), ("lm_head_gpt2", 0.92, 0.57)), "amd f25 cpu-w8"),
  model_kernels("model-kernels-2t-avx2", AVX2, 3, ((1.43, 0.21), (1.55, 0.22), (6.04, 0.14), (2.49, 0.27)), "amd f25 cpu-w8"),
  Run("convs-2t-avx2", AVX2_MM, (
    "bench/cpu_vs_torch.py", "--threads", "2", "--kernels", ",".join(CONVS), "--no-tune", "--no-tinygrad", "--no-tuned",
    "--quiet-wait", "20", "--retries", "1"), 2, False, tuple(
    Claim(f"{k} hand-coded vs torch eager, 2 threads", r, tol, cvt(k, "eager")) for k, (r, tol) in zip(CONVS, (
      (0.77, 0.28), (1.10, 0.13), (1.13, 0.12), (0.655, 0.11), (1.015, 0.29), (1.055, 0.25), (1.28, 0.29), (2.565, 0.14)))), "amd f25 cpu-w8"),
  # session 20's entry on a Zen 1 class host, QUIET: tol as above (matmul_4096 ran once at 1 thread: no claim)
  openblas("openblas-2t-f23", ZEN1, 2, 2, (
    ("matmul_1024", 0.98, 0.06), ("matmul_2048", 0.92, 0.05), ("matmul_4096", 0.91, 0.09), ("lm_head_gpt2", 1.02, 0.07)), "amd f23 cpu-w8"),
  openblas("openblas-1t-f23", ZEN1, 1, 3, (("matmul_1024", 0.89, 0.13), ("matmul_2048", 0.89, 0.05), ("lm_head_gpt2", 1.02, 0.09)), "amd f23 cpu-w8"),
  # session 19's entry on an Intel host, QUIET (its spreads are this host's, idle: another VM shares its cores)
  model_kernels("model-kernels-2t-intel", "every group but the corpus at 2 and at 1 thread, hand-coded, QUIET, on an Intel host", 2,
                ((1.12, 0.14), (1.40, 0.24), (5.70, 0.29), (2.04, 0.16)), "intel f6 cpu-w16"),
  # session 22's entry on the same host kind (mm19's 4 x 4 tile since), QUIET: tol is the entry's pair's noise (this host
  # is noisy idle: matmul_1024's pair read 50%), so these say little more than "not far below"
  openblas("openblas-2t-intel", EMR, 2, 2, (
    ("matmul_1024", 1.05, 0.50), ("matmul_2048", 1.00, 0.07), ("matmul_4096", 0.88, 0.10), ("lm_head_gpt2", 0.91, 0.13)), "intel f6 cpu-w16"),
  openblas("openblas-1t-intel", EMR, 1, 3, (
    ("matmul_1024", 1.02, 0.40), ("matmul_2048", 1.00, 0.24), ("matmul_4096", 1.13, 0.41), ("lm_head_gpt2", 0.90, 0.28)), "intel f6 cpu-w16"),
  Run("convs-2t-intel", EMR, (
    "bench/cpu_vs_torch.py", "--threads", "2", "--kernels", ",".join(CONVS), "--no-tune", "--no-tinygrad", "--no-tuned",
    "--quiet-wait", "20", "--retries", "1"), 2, False, tuple(
    Claim(f"{k} hand-coded vs torch eager, 2 threads", r, tol, cvt(k, "eager")) for k, (r, tol) in zip(CONVS, (
      (1.16, 0.19), (1.59, 0.26), (1.37, 0.29), (1.23, 0.17), (1.35, 0.33), (1.00, 0.26), (1.21, 0.36), (1.55, 0.30)))), "intel f6 cpu-w16"),
  # the recorded command less --torch and with 3 rounds, not 7; two runs gave 11.4x and 11.4x, tuning 0.41x and 0.43x
  Run("gpt2-12", "the 12-block GPT-2 decoder (vocabulary 512), all five contenders, twice", (
    "bench/tinygrad_models.py", "--models", "gpt2", "--layers", "12", "--vocab", "512", "--budget-s", "2", "--rounds", "3"), 10, True, (
    Claim("GPT-2 12 blocks (vocab 512): tuned vs BEAM=2, end to end", 11.4, 0.05, models("gpt2", "beam2")),
    Claim("GPT-2 12 blocks (vocab 512): whole-model tuning time over BEAM=2's", 0.42, 0.15, tuning("gpt2")))),
)


def host_kind() -> str:
  """This host's CPU vendor and family number and search/prior.py's family ("amd f25 cpu-w16": Zen 4): a ratio recorded on
  one core says nothing on another of the same vector width -- AMD Zen 4 and an Intel AVX-512 core (two full-width FMA
  ports, half the per-core stream bandwidth: matmul_4096 vs OpenBLAS 1.03x on one, 0.79x on the other at the same code),
  Zen 3 (f25) and Zen 1 (f23, half its FP width: softmax 0.72x torch.compile where Zen 3 had 1.16x), though each pair
  schedules alike. (Zen 1 and Zen 2 share f23: the finest split /proc/cpuinfo gives without a table of models.)"""
  vendors = {"AuthenticAMD": "amd", "GenuineIntel": "intel"}
  try: first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]  # the first core's fields
  except OSError: first = ""
  info = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in first.splitlines())}
  vendor, fam = info.get("vendor_id", ""), info.get("cpu family", "")
  return f"{vendors.get(vendor, vendor or 'unknown')} f{fam or '?'} {family(cpu.options())}"


def headings() -> list[str]: return [line for line in DOCS.read_text().splitlines() if line.startswith("### ")]

def entry_of(run: Run) -> str:
  """The heading of the entry the run's claims come from; a claim whose entry is gone is an error, not a pass."""
  found = [h for h in headings() if run.entry in h]
  if len(found) != 1: raise SystemExit(f"{run.name}: {len(found)} entries of docs/benchmarks.md match {run.entry!r}")
  return found[0]


def judge(claim: Claim, got: Measured, run_other: float) -> tuple[str, str]:
  """(its verdict, its report line); `run_other`: the rest of the machine's cores over the whole run, for a claim whose
  bench counts none beside it."""
  ratio, noise, other = got
  off, tol = ratio / claim.recorded - 1, max(claim.tol, noise)
  other = run_other if other is None else other
  verdict = "BUSY" if other > QUIET_OTHER else "reproduces" if abs(off) <= tol else "DIFFERS"
  return verdict, (f"| {claim.name} | {claim.recorded:.3g} | {ratio:.3g} | {off:+.1%} | {tol:.0%} | {other:.2f} | {verdict} |")


def run_measuring_others(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, float, str]:
  """Run cmd: (its result, the cores the rest of the machine kept busy meanwhile, the busiest others). Ours is the whole
  process tree: this process and every descendant reaped (os.times' children); one left running is counted as others'."""
  c0, t0, load, who = os.times(), time.monotonic(), OtherLoad(), Busiest()
  p = subprocess.run(cmd, **kw)
  c1, dt = os.times(), time.monotonic() - t0
  tree = c1.children_user + c1.children_system - c0.children_user - c0.children_system
  return p, max(0.0, load.cores() - tree / dt), who.top()


def run(r: Run, out: Path) -> list[tuple[str, str]]:
  cmd = [sys.executable, *r.argv, "--json", str(out)]
  print(f"{r.name}: {' '.join(r.argv)}", file=sys.stderr, flush=True)
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
  if r.argv[0].endswith("tinygrad_models.py"): env.setdefault("CLANG", "1")  # its recorded runs' tinygrad device
  p, other, busiest = run_measuring_others(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
  print(f"  other load over the run {other:.2f} cores (busiest others: {busiest})", file=sys.stderr, flush=True)
  failed = lambda c, why: ("FAILED", f"| {c.name} | {c.recorded:.3g} | - | - | - | - | FAILED ({why}) |")
  if p.returncode != 0 or not out.exists(): return [failed(c, f"exit {p.returncode}") for c in r.claims]
  rep, judged = json.loads(out.read_text()), []
  for c in r.claims:
    try: judged.append(judge(c, c.measure(rep), other))
    except (KeyError, StopIteration) as e: judged.append(failed(c, f"no samples: {e!r}"))  # a contender failed (the bench's notes say why)
  return judged


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("runs", nargs="*", help="run names (default: every short one; see --list)")
  ap.add_argument("--long", action="store_true", help="the long runs too (whole models)")
  ap.add_argument("--list", action="store_true", help="the runs, their claims and entries; runs nothing")
  ap.add_argument("--keep", type=Path, help="keep each run's JSON in this folder")
  a = ap.parse_args()
  if unknown := set(a.runs) - {r.name for r in RUNS}: ap.error(f"unknown runs {sorted(unknown)}")
  host = host_kind()
  if other := [r.name for r in RUNS if r.name in a.runs and r.host != host]:
    ap.error(f"{other} hold for other hosts than this {host} one: their ratios say nothing here")
  chosen = [r for r in RUNS if r.name in a.runs or (not a.runs and r.host == host and (a.long or not r.long))]
  if a.list:
    for r in RUNS:
      print(f"{r.name} ({r.host} hosts, {'long, ' if r.long else ''}~{r.minutes:g} min): {' '.join(r.argv)}\n  entry: {entry_of(r)}")
      for c in r.claims: print(f"  - {c.name}: {c.recorded:g} (tolerance {c.tol:.0%})")
    return 0
  if not chosen: ap.error(f"no run's claims were recorded on a {host} host (--list)")
  for r in chosen: entry_of(r)
  if a.keep: a.keep.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(prefix="reproduce-") as td:
    judged = [j for r in chosen for j in run(r, (a.keep or Path(td)) / f"{r.name}.json")]
  print("\n".join(["| claim | recorded | now | off | tolerance | other load | verdict |", "|---|---:|---:|---:|---:|---:|---|",
                   *(line for _, line in judged)]))
  return 1 if any(v in ("DIFFERS", "FAILED") for v, _ in judged) else 0


if __name__ == "__main__":
  sys.exit(main())
