"""The accuracy contract (linearizer/reference.py) against what the C renderer emits for EXP2, LOG2 and SIN: every float32
input through each lane count's function (1, 4, 8, 16: the source the renderer puts in a kernel, compiled as the CPU
device compiles it), every float16 and bfloat16 input, and a sample of float64 ones through libm (tests/vecmath_check.c
does the counting in C, on all cores: a few CPU-minutes in all)."""
import platform, re, subprocess
from pathlib import Path
import numpy as np
import pytest
from linearizer import reference, vecmath
from linearizer.builders import alu, kernel, ld
from linearizer.compare import compare
from linearizer.dtypes import float16, float32
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower
from linearizer.reference import ULP_BOUND
from linearizer.render_c import render_c
from devices import cpu, opencl
from tunesvc.runtime import run_kernel

HARNESS = Path(__file__).with_name("vecmath_check.c")
LANES = (1, 4, 8, 16)
LINE = re.compile(r"(\S+) checked=(\d+) max_ulp=([\d.]+) not_correctly_rounded=(\d+) special_violations=(\d+)")


def build(d: Path, march: str = "") -> Path:
  """The harness with the functions as the CPU device compiles kernels (its flags; `march` in place of -march=native)."""
  (d / "fns.h").write_text("#include <math.h>\n" + "".join(vecmath.c_source(n) for n in LANES))
  exe = d / f"check{march}"
  flags = [f if not (march and f.startswith("-march=")) else f"-march={march}" for f in cpu.DEFAULT_FLAGS if f not in ("-shared", "-fPIC")]
  # vectors wider than the ISA's (16 floats without AVX-512, or any width under another -march) pass differently: static
  # inline, they never cross a call
  subprocess.run([cpu._cc(), *flags, "-Wall", "-Werror", "-Wno-psabi", "-include", str(d / "fns.h"), str(HARNESS), "-o", str(exe), "-lm"], check=True)
  return exe

@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path: return build(tmp_path_factory.mktemp("vecmath"))

def check(exe: Path, *args: str) -> dict[str, tuple[int, float, int, int]]:
  out = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True).stdout
  print(out)
  return {m[1]: (int(m[2]), float(m[3]), int(m[4]), int(m[5])) for m in LINE.finditer(out)}

@pytest.mark.slow  # about 80 CPU-seconds a function
@pytest.mark.exhaustive
@pytest.mark.parametrize("fn", ["exp2", "log2", "sin"])
def test_float32_every_input(harness, fn):
  res = check(harness, "float32", fn)
  assert set(res) == {f"tsvc_f{n}" for n in LANES}
  # sin's blocks wholly at |x| >= 2^22, inf or NaN take libm's double sin (the reference itself): one in 64 is checked
  big = (256 - (127 + 22)) * 2 * (1 << 23) // 16
  want_checked = 1 << 32 if fn != "sin" else (1 << 32) - 16 * (big - big // 64)
  for name, (checked, worst, _, special) in res.items():
    assert checked == want_checked and special == 0 and worst <= ULP_BOUND["float32"], (name, worst, special)

# without AVX-512 (x86-64-v3: AVX2 and FMA; 8 lanes are two 4-lane halves) and without FMA or AVX (x86-64-v2: each
# fused multiply-add a multiply and an add, the lane loops) the source takes other paths: every 1021st block of inputs.
# EXP2 and SIN compute on float lanes where there is an FMA (vecmath.FLOAT_LANES), within the contract; elsewhere, and
# LOG2 everywhere, through doubles, correctly rounded
X86_LEVELS = ("x86-64-v2", "x86-64-v3")

@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 levels: an x86-64 host")
@pytest.mark.parametrize("march", X86_LEVELS)
@pytest.mark.parametrize("fn", ["exp2", "log2", "sin"])
def test_float32_sample_on_other_x86_levels(tmp_path, march, fn):
  res = check(build(tmp_path, march), "float32", fn, "1021")
  assert set(res) == {f"tsvc_f{n}" for n in LANES}
  float_lanes = fn in ("exp2", "sin") and march == "x86-64-v3"
  for name, (checked, worst, not_cr, special) in res.items():
    assert checked > 2 << 20 and special == 0 and worst <= ULP_BOUND["float32"], (name, checked, worst, special)
    assert (not_cr > 0) == float_lanes, (name, not_cr)  # the float path rounds some inputs the other way; the double one none

@pytest.mark.parametrize("fn", ["exp2", "log2", "sin"])
def test_float16_bfloat16_every_input(harness, fn):
  res = check(harness, "narrow", fn)
  assert len(res) == 2
  for name, (checked, worst, _, special) in res.items():
    assert checked == 65536 and special == 0 and worst <= ULP_BOUND["float16" if name.startswith("float16") else "bfloat16"], (name, worst)

@pytest.mark.parametrize("fn", ["exp2", "log2", "sin"])
def test_float64_sample(harness, fn):
  (checked, worst, _, special), = check(harness, "float64", fn, "2000000").values()
  assert checked > 2000000 and special == 0 and worst <= ULP_BOUND["float64"], worst


def test_kernels_carry_the_checked_source():
  """A kernel's float32 EXP2/LOG2/SIN call the functions checked above, their source verbatim: vectors at the lane count
  they were upcast to, scalars through the 1-lane instance."""
  k = kernel(alu("SIN", alu("LOG2", alu("EXP2", ld(1, (64,), float32)))))
  opts = cpu.options()
  for amt, call in ((16, "tsvc_exp2_f16("), (8, "tsvc_exp2_f8("), (4, "tsvc_exp2_f4(")):
    if amt not in opts.float_vector_widths: continue
    src = render_c(lower(Kernel(k, opts).apply_opts([Opt("UPCAST", 0, amt)])))
    assert vecmath.c_source(amt) in src and call in src and "exp2((double)" not in src
  src = render_c(lower(Kernel(k, opts)))
  assert vecmath.c_source(1) in src and "tsvc_sinf(" in src


OPENCL = pytest.mark.skipif(not opencl.available(), reason="no OpenCL device (pocl-opencl-icd)")

@pytest.mark.parametrize("device,amt", [("CPU", 0), ("CPU", 4), ("CPU", 8), ("CPU", 16),
                                        pytest.param("OPENCL", 0, marks=OPENCL), pytest.param("OPENCL", 4, marks=OPENCL)])
def test_kernels_meet_the_contract(device, amt):
  """Run at each lane count (0: scalar lanes) over special values and random ones of every magnitude, float32 and float16:
  compare's check everywhere; on the CPU float32 LOG2 is the reference's bit for bit (correctly rounded on every input),
  EXP2 and SIN within an ulp. OpenCL's vectors compute lane by lane through its double functions."""
  rng = np.random.default_rng(amt)
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 128.0, -149.0, -150.0, 1e-45, 3.1415927, 4194304.0, 3e38], np.float32)
  bits = rng.integers(0, 1 << 32, 1024 - special.size, dtype=np.uint64).astype(np.uint32).view(np.float32)
  xs = np.concatenate([special, bits])
  for dt in (float32, float16):
    for op in ("EXP2", "LOG2", "SIN"):
      k = kernel(alu(op, ld(1, (1024,), dt)))
      with np.errstate(over="ignore"): bufs = [reference.poison(dt, 1024), xs.astype(dt.np)]
      want = [b.copy() for b in bufs]
      reference.run(k, want)
      run_kernel(k, bufs, device, opts=[Opt("UPCAST", 0, amt)] if amt else [])
      assert (msg := compare(k, bufs, want, {})) is None, (op, dt, msg)
      nan = np.isnan(want[0])
      if dt == float32 and device == "CPU" and op == "LOG2":
        assert np.array_equal(np.isnan(bufs[0]), nan) and np.array_equal(bufs[0][~nan].view(np.uint32), want[0][~nan].view(np.uint32))
      elif dt == float32 and device == "CPU":  # an ulp apart is one apart in the bits: no result within an ulp of the reference's has the other sign
        assert np.array_equal(np.isnan(bufs[0]), nan) and np.abs(bufs[0][~nan].view(np.int32) - want[0][~nan].view(np.int32)).max() <= 1
