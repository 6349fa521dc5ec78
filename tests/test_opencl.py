"""The OpenCL backend on this machine's OpenCL device (PoCL on CI): build errors with their log, device buffers,
launches timed by the device, fingerprint and options; GPU-style schedules (locals, grouped reduces, many launch
dims) against the reference; and a bounded fuzz run whose schedules use every GPU-style opt."""
import itertools, os, subprocess, sys
from pathlib import Path
import pytest
from devices import opencl, registry
from gpu_schedules import IDS, SCHEDULES, host_arrays_round_trip, run, var_values
from linearizer.builders import kernel, ld, matmul, red, reduce
from linearizer.render_c import LAUNCH

import fuzz_harness as F

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not opencl.available(), reason="no OpenCL device (install pocl-opencl-icd ocl-icd-libopencl1)")


def test_build_errors_carry_the_build_log():
  with pytest.raises(opencl.CompileError, match="no_such_identifier"):
    opencl.compile(LAUNCH + '{"groups": [], "local": [], "vars": []}\n__kernel void k(__global float* o) { o[0] = no_such_identifier; }\n')


def test_programs_take_host_arrays_and_copy_every_buffer_back():
  host_arrays_round_trip(opencl, "OPENCL")


def test_fingerprint_options_and_registry():
  fp, o = opencl.fingerprint(), opencl.options()
  assert fp["options"] == o.to_json()  # the hash names the options
  assert fp["backend"] == "OPENCL" and all(fp[f] for f in ("platform", "platform_version", "device", "device_version", "driver_version"))
  assert o.has_local and o.has_shared and not o.has_threads and o.local_size_max >= 64 and o.shared_max >= 16 << 10
  assert registry.get("OPENCL:0") is registry.get("OPENCL") is opencl
  assert [d["device"] for d in registry.describe()] == registry.available() and "OPENCL" in registry.available()


def test_without_an_icd_opencl_is_not_available():
  code = "from devices import opencl, registry; print(opencl.available(), registry.available())"
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "OCL_ICD_VENDORS": "/nonexistent"})
  first = r.stdout.split("\n")[0]
  assert first.startswith("False [") and "OPENCL" not in first, r.stdout + r.stderr


@pytest.mark.parametrize("k,opts", SCHEDULES, ids=IDS)
def test_gpu_schedules_match_the_reference(k, opts):
  run(opencl, "OPENCL", k, opts, var_values(k))


# a bounded random run's coverage is its size: 300 cases, the first 50 in `make test` (the suite's costliest test at 100:
# ~30 CPU-s cold) and the other 250 in the exhaustive tier, which CI runs too. Each part uses every GPU opt (the seed
# fixes the draw: at least 2 uses of each in the first 50, 6 in the other 250; 10 in all 300)
@pytest.mark.slow
@pytest.mark.parametrize("first,last,min_uses", [(0, 50, 2), pytest.param(50, 300, 6, marks=pytest.mark.exhaustive)],
                         ids=["first-50", "other-250"])
def test_a_bounded_fuzz_run_uses_every_gpu_opt_and_finds_no_failures(first, last, min_uses, corpus):
  kernels, _ = F.kernel_pool([str(F.CORPUS), str(F.EXAMPLES)], builders=40, seed=1, max_positions=100_000, corpus=corpus)
  # a case's limit is CPU seconds (the costliest, sops_12225's 64-wide unroll, compiles in 21-22 CPU-s), which a busy machine
  # does not stretch as it does wall time; the wall limit catches a hang that uses none
  with F.Pool(jobs=2, device="OPENCL", timeout=600, cpu_timeout=120, max_positions=100_000) as pool:
    cases = list(pool.run(itertools.islice(F.undrawn(kernels, 300, 1), first, last)))
  assert [f"{c.status} {F.describe(c)}: {c.message[:400]}" for c in cases if c.status != "PASS"] == []
  uses = {op: sum(any(o.op == op for o in c.opts) for c in cases) for op in ("LOCAL", "GROUP", "GROUPTOP", "UPCASTMID", "NOLOCALS", "PADTO")}
  assert len(cases) == last - first and min(uses.values()) >= min_uses, uses


# 40 sampled corpus kernels have 23 distinct hand-coded GPU schedules (their opts and amounts): `make test` checks the named
# kernels and the first corpus kernel of each schedule (28 PoCL builds, was 45), the exhaustive tier, which CI runs too, the
# 17 kernels after it, which repeat a schedule already checked on another kernel (as test_codegen_cpu's sample does)
@pytest.mark.slow
@pytest.mark.parametrize("repeats", [False, pytest.param(True, marks=pytest.mark.exhaustive)], ids=["first-of-each-schedule", "repeated-schedules"])
def test_hand_coded_gpu_schedules_group_and_use_locals_and_match_the_reference(corpus, repeats):
  import math, random
  from linearizer.heuristic import hand_coded_optimizations
  from linearizer.kernel import Kernel
  hand = lambda k: hand_coded_optimizations(Kernel(k, opencl.options()))
  named = {"matvec": matmul(1, 256, 512), "vecmat": matmul(1, 256, 512, transpose_b=True), "sum": reduce("SUM", (1 << 16,), (0,)),
           "matmul": matmul(64, 48, 80)}
  assert {n: {o.op for o in hand(k)} for n, k in named.items()} == {
    "matvec": {"GROUP", "LOCAL", "UPCAST"}, "vecmat": {"GROUP", "LOCAL", "UPCAST"}, "sum": {"GROUPTOP"}, "matmul": {"UPCAST", "UNROLL", "LOCAL"}}
  # a sum whose first reduce axis is too short to split over a work-group: a later one is split (corpus sops_7117's shape)
  few_outputs = kernel(red("SUM", ld(1, (2, 32, 112, 112)), (0, 2, 3)))  # per channel over batch, rows, columns: shape (32, 2, 12544)
  assert [(o.op, o.axis) for o in hand(few_outputs) if o.op in ("GROUP", "GROUPTOP")] == [("GROUPTOP", 1)], hand(few_outputs)
  small = [k for k in corpus if math.prod(k.shape_at(k.full_shape, k.var_vals())) < 1_000_000]
  seen: set[tuple] = set()
  cases = [] if repeats else list(named.values()) + [few_outputs]
  for k in [k.rebased() for k in random.Random(2).sample(small, 40)]:
    if ((schedule := tuple((o.op, o.amt) for o in hand(k))) in seen) == repeats: cases.append(k)
    seen.add(schedule)
  for k in cases: run(opencl, "OPENCL", k, hand(k))
