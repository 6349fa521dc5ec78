"""The linearizer fuzzer (bench/fuzz_linearizer.py over linearizer/fuzz.py): a bounded run over the corpus, the examples
and builder kernels must find nothing; planted bugs must be classified, saved and replayed; under AddressSanitizer,
masked and padded kernels must never touch memory outside their buffers."""
import json, os, random, re, shutil, subprocess, sys
from pathlib import Path
from typing import Optional
import numpy as np
import pytest
from devices import cpu
from linearizer import builders as B
from linearizer.fuzz import Case, draw_case, draw_opts, draw_var_vals, positions
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt, OptError

import fuzz_harness as F

ROOT = Path(__file__).resolve().parents[1]


def planted_cc(tmp_path: Path, first: str = "", last: str = "") -> dict[str, str]:
  """Environment whose C compiler is the real one on a planted source: `first` goes in as the kernel's first line,
  `last` as its last. Workers and replays started with it inherit the bug."""
  cc = tmp_path / "planted-cc"
  cc.write_text(f"#!/bin/sh\nsed -e '/^void kernel(/a\\\n{first}' -e '$i\\\n{last}' | exec {shutil.which('cc')} \"$@\"\n")
  cc.chmod(0o755)
  return {"TUNESVC_CC": str(cc), "TUNESVC_CACHE_DIR": str(tmp_path / "cache")}

LIMITS = ("--cpu-timeout", "1", "--timeout", "120")  # a planted case's: a hang spins, the wall limit only backs it up


def fuzz_script(*args: str, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz_linearizer.py"), *args], capture_output=True, text=True,
                        cwd=ROOT, timeout=300, env={**os.environ, **(env or {})})


def test_hand_coded_cases_are_the_hand_coded_schedule_and_random_opts_after_it():
  # the schedule that runs untuned, fuzzed: each case starts with it (and replays alike: the flag travels in the case)
  k = B.conv2d(1, 8, 12, 12, 32, 3, 3, padding=1)
  hand = hand_coded_optimizations(Kernel(k.rebased(), cpu.options()))
  drawn = [draw_case(Case(k.to_json(), None, None, seed), k, cpu.options(), 10**6, hand_coded=True) for seed in range(8)]
  assert all(c.opts[:len(hand)] == hand for c in drawn) and any(len(c.opts) > len(hand) for c in drawn)
  with F.Pool(jobs=1, hand_coded=True) as pool: done = list(pool.run([Case(k.to_json(), None, None, 3, "conv")]))
  assert done[0].status == "PASS" and done[0].opts[:len(hand)] == hand and Case.from_json(done[0].to_json()).extra["hand_coded"]


# a bounded random run's coverage is its size: 320 cases, the first 50 in `make test` (at 100, the suite's second costliest
# test cold: 22.5 CPU-s) and the other 270 in the exhaustive tier, which CI runs too. The seed fixes the draw: the first
# 50 from the corpus and the builders; the examples (2 of the pool's 795 kernels: the rest are over max_positions) are
# cases 97 and 130, so the other 270 draw from all three sources
SOURCES = {"corpus", "examples", "builders"}
@pytest.mark.slow
@pytest.mark.parametrize("first,last,sources", [(0, 50, SOURCES - {"examples"}), pytest.param(50, 320, SOURCES, marks=pytest.mark.exhaustive)],
                         ids=["first-50", "other-270"])
def test_a_bounded_fuzz_run_finds_no_failures(first, last, sources, corpus):
  kernels, skipped = F.kernel_pool([str(F.CORPUS), str(F.EXAMPLES)], builders=80, seed=0, max_positions=1_000_000, corpus=corpus)
  assert len(kernels) > 700 and skipped > 0
  failures: list[str] = []
  with F.Pool(jobs=2, max_positions=1_000_000) as pool:  # a case's limits: 120 CPU-s, 600 s of wall time (F.Pool's defaults)
    counts = F.fuzz(pool, kernels, last, seed=0, out=None, log=failures.append, first=first)
  table = F.table(counts)
  assert sum(counts["PASS"].values()) == last - first, table + "\n" + "\n".join(failures)
  assert set(counts["PASS"]) == sources, table


# each case has 1 CPU-second (the compile of a matmul 8 takes a tenth of one; a hang spins it all, 3 times in the hang's
# test: at 2 CPU-s the limit was half that test's CPU), which a loaded machine does not stretch: not a
# timing test (with 2 s of wall time, a loaded machine's compile alone could take that)
@pytest.mark.parametrize("first,last,status,says", [
  ("", "  data0[0] += 1;", "MISMATCH", "elements differ"),
  ("  *(volatile int*)0 = 0;", "", "RUN_ERROR", "killed by SIGSEGV running the program"),
  pytest.param("  volatile int spin = 1; while (spin) {}", "", "RUN_ERROR", "used over 1 CPU-s running the program",
               marks=pytest.mark.slow)],  # 3 spins of 1 CPU-s, 4 fuzzer processes; among the quick tests it ended a worker last
  ids=["garbage", "segfault", "hang"])
def test_planted_bugs_are_classified_saved_and_replayed(tmp_path, first, last, status, says):
  (tmp_path / "mm.json").write_text(json.dumps(B.matmul(8, 8, 8, name="mm8").to_json()))
  env, out = planted_cc(tmp_path, first, last), tmp_path / "failures"
  r = fuzz_script("--corpus", str(tmp_path / "mm.json"), "--builders", "0", "--cases", "2", "--jobs", "1", *LIMITS,
                  "--out", str(out), env=env)
  assert r.returncode == 1, r.stdout + r.stderr
  assert f"{status:<14}      2" in r.stdout and says in r.stdout, r.stdout  # the fuzzer survived both, and says so
  files = sorted(out.glob(f"{status}-mm_mm8-*.json"))
  assert len(files) == 2
  if status == "MISMATCH":  # a run resumed at its second case runs exactly that case again
    part = fuzz_script("--corpus", str(tmp_path / "mm.json"), "--builders", "0", "--cases", "2", "--first", "1", "--jobs", "1", *LIMITS,
                       "--out", str(tmp_path / "part"), env=env)
    assert f"{status:<14}      1" in part.stdout and "from case 1 on" in part.stdout, part.stdout + part.stderr
    second = Path(re.findall(r" -> (\S+\.json)", r.stdout)[1]).name  # one job: the cases end in their order
    assert [f.name for f in (tmp_path / "part").iterdir()] == [second]
  rec = json.loads(files[0].read_text())
  assert rec["status"] == status and rec["kernel"]["name"] == "mm8" and rec["device"] == "CPU" and says in rec["message"]
  again = fuzz_script("--replay", str(files[0]), "--print-source", *LIMITS, env=env)
  assert again.returncode == 1 and f"\n{status}: " in again.stdout and says in again.stdout, again.stdout + again.stderr
  assert "void kernel(" in again.stdout
  fixed = fuzz_script("--replay", str(files[0]), env={"TUNESVC_CACHE_DIR": env["TUNESVC_CACHE_DIR"]})  # the real compiler
  assert fixed.returncode == 0 and "\nPASS" in fixed.stdout, fixed.stdout + fixed.stderr


def test_fuzzed_blocked_and_packed_schedules_pass():
  """The fuzzer draws BLOCK and PACK among the CPU's opts; cases where BLOCK blocks a reduce (accumulating through the
  output) or an output axis, and where PACK copies an operand, on builder kernels of odd sizes, run against the reference."""
  rng, opts, cases, reduces, packs = random.Random(1), cpu.options(), [], 0, 0
  while len(cases) < 24:
    k = B.matmul(*(rng.choice((5, 12, 17, 32, 36)) for _ in range(3)), transpose_a=rng.random() < 0.5) if rng.random() < 0.6 else \
      B.conv2d(1, rng.choice((2, 4, 6)), 9, 7, rng.choice((3, 8)), 3, 3, padding=1)
    drawn = draw_opts(Kernel(k, opts), rng)
    if not any(o.op in ("BLOCK", "PACK") for o in drawn): continue
    reduces += (blocked := Kernel(k, opts).apply_opts(drawn).blocked_reduce)
    packs += (packed := any(o.op == "PACK" for o in drawn))
    if blocked or packed or (reduces >= 8 and packs >= 8): cases.append(Case(k.to_json(), drawn, {}, rng.getrandbits(32), "blocked"))
  assert reduces >= 8 and packs >= 8
  with F.Pool(jobs=1) as pool: done = list(pool.run(cases))
  assert [(c.status, c.message) for c in done if c.status != "PASS"] == []


def test_a_worker_that_raises_reports_error_with_the_traceback():
  bad = Case(B.matmul(4, 4, 4).to_json(), [Opt("UPCAST", 0, 2)], {"nope": 1}, 0, "bad-vars")
  with F.Pool(jobs=1) as pool: (got,) = pool.run([bad])
  assert got.status == "ERROR" and "unknown variables ['nope']" in got.message


def test_reference_outputs_are_kept_by_kernel_variables_and_seed_and_read_back(tmp_path, monkeypatch):
  # a second device's run of the same seed reads the reference's output the first kept: planted there, a wrong one is what
  # the case is checked against; another seed or variable value is another key; a quick reference is not kept
  k = B.symbolic_sum(8, ("n", 1, 16), "MAX", name="sym")  # a MAX: compare checks the output against the reference alone
  read: list[bool] = []
  def run(seed: int, n: int) -> str:
    status, _ = F.execute(Case(k.to_json(), [Opt("UPCAST", 0, 2)], {"n": n}, seed, "sym"), "CPU", cpu.DEFAULT_FLAGS,
                          reference_cache=tmp_path, on_reference=lambda s, cached: read.append(cached))
    return status
  monkeypatch.setattr(F, "REFERENCE_CACHE_MIN_S", float("inf"))
  assert run(1, 5) == "PASS" and list(tmp_path.iterdir()) == []
  monkeypatch.setattr(F, "REFERENCE_CACHE_MIN_S", 0.0)
  assert run(1, 5) == "PASS"
  (kept,) = tmp_path.iterdir()
  np.save(kept, np.load(kept) + 1)
  assert run(1, 5) == "MISMATCH" and run(2, 5) == "PASS" and run(1, 6) == "PASS"
  assert read == [False, False, True, False, False] and len(list(tmp_path.iterdir())) == 3


# ---------------------------------------------------------------- AddressSanitizer

def test_asan_catches_a_read_one_past_the_end_of_an_exact_buffer(tmp_path, monkeypatch):
  k = B.kernel(B.alu("NEG", B.ld(1, (13,))))  # a 13-float input
  for idx, status in ((12, "PASS"), (13, "RUN_ERROR")):
    (tmp_path / str(idx)).mkdir()
    for key, v in planted_cc(tmp_path / str(idx), f"  ((volatile float*)data1)[{idx}];").items(): monkeypatch.setenv(key, v)
    with F.Pool(jobs=1, asan=True) as pool: (got,) = pool.run([Case(k.to_json(), [], {}, 0, "oob")])
    assert got.status == status, got.message
  assert "heap-buffer-overflow" in got.message and "READ of size 4" in got.message


@pytest.mark.slow
def test_masked_kernels_under_padto_schedules_stay_inside_their_buffers_under_asan(corpus):
  rng = random.Random(0)
  opts = cpu.options()
  masked = [k for k in corpus if positions(k, {v.name: v.min for v in k.vars}) < 100_000 and
            any(v.mask is not None for n in k.nodes if n.op in ("LOAD", "CONST") for v in n.arg.st.views)]
  cases = []
  for k in rng.sample(masked, len(masked)):
    kern = Kernel(k.rebased(), opts)
    for axis, amt in rng.sample([(a, m) for a in range(kern.shape_len) for m in (2, 3, 4, 8, 16)], kern.shape_len * 5):
      try: kern.apply_opt(Opt("PADTO", axis, amt))
      except OptError: continue
      break
    if not kern.applied_opts: continue
    vv = draw_var_vals(k, rng, 100_000)
    cases.append(Case(k.to_json(), draw_opts(kern, rng), vv, rng.getrandbits(32), k.name))
    if len(cases) == 30: break
  assert len(cases) == 30
  with F.Pool(jobs=2, asan=True) as pool:
    done = list(pool.run(cases))
    exitcodes = pool.close()
  assert [c for c in done if c.status != "PASS"] == []
  assert exitcodes == [0, 0]  # every worker, each of which ran its cases in the ASan runtime, exits 0


def test_source_hashes_name_each_case_of_the_run_and_its_code(tmp_path):
  # the cases a run would run (undrawn's labels and seeds, in order), each with the sha256 of the source it would compile:
  # a planted change to the code (the hand-coded schedule under every case) changes the hashes, the same draw does not
  args = ("--corpus", str(F.EXAMPLES), "--builders", "0", "--per-kernel", "2", "--seed", "5", "--max-positions", "10000000000")
  for name, extra in (("a", ()), ("b", ()), ("hand", ("--hand-coded",))):
    assert (r := fuzz_script(*args, *extra, "--sources", str(tmp_path / name))).returncode == 0, r.stderr
  a, b, hand = ((tmp_path / n).read_text().splitlines() for n in ("a", "b", "hand"))
  kernels, _ = F.kernel_pool([str(F.EXAMPLES)], 0, 5, 10**10)
  want = [f"{c.label} {c.seed}" for c in F.undrawn(kernels, 0, 5, 2)]
  assert [line.rsplit(" ", 1)[0] for line in a] == want and all(re.fullmatch(r"[0-9a-f]{64}", line.rsplit(" ", 1)[1]) for line in a)
  assert a == b and [line.rsplit(" ", 1)[0] for line in hand] == want and a != hand
