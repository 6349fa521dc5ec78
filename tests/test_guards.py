"""Guard regions around every buffer a candidate is given: a planted write 16 KB past the output (or before an input's
start) fails the candidate instead of being timed and verified; the guards are laid again for the next one; a device
buffer (OpenCL) is guarded after its end."""
import tempfile
from pathlib import Path
import numpy as np
import pytest
from devices import cpu, opencl
from devices.guard import Guarded
from linearizer.builders import matmul
from linearizer.kernel import Kernel
from linearizer.lower import lower
from search.runner import Runner, write_case

K = matmul(64, 64, 64)  # a 4,096-element output

def source(extra: str = "") -> str:
  src = cpu.render(lower(Kernel(K, cpu.options())))
  return src[:src.rindex("}")] + extra + "}\n"

@pytest.mark.parametrize("stray, where", [("for (int i = 0; i < 16; i++) data0[4096 + 4096 + i] = 1.0f;", "past its end"),  # 16 KB past
                                          ("((volatile float*)data1)[-3] = 2.0f;", "before its start")])
def test_a_write_outside_its_buffers_fails_the_candidate(stray, where):
  with tempfile.TemporaryDirectory() as tmp, Runner("devices.cpu") as runner:
    write_case(Path(tmp), K, {}, 0)
    runner.setup(Path(tmp), {})
    ok = runner.measure(cpu.compile(source()), "kernel", check=True, timeout_s=60, min_time_s=0.001)
    assert ok.status == "ok" and ok.verified, ok
    bad = runner.measure(cpu.compile(source(stray)), "kernel", check=True, timeout_s=60, min_time_s=0.001)
    assert bad.status == "crash" and not bad.verified and "out-of-bounds write around buffer" in bad.error and where in bad.error, bad
    again = runner.measure(cpu.compile(source()), "kernel", check=True, timeout_s=60, min_time_s=0.001)
    assert again.status == "ok" and again.verified, again  # the guards were laid again: the next candidate is not blamed

def test_a_write_to_an_input_fails_the_candidate_and_a_check_compares_the_output_alone():
  # the inputs lie on read-only pages: the write kills the runner (a crash), which starts again for the next candidate
  with tempfile.TemporaryDirectory() as tmp, Runner("devices.cpu") as runner:
    write_case(Path(tmp), K, {}, 0)
    runner.setup(Path(tmp), {})
    bad = runner.measure(cpu.compile(source("((volatile float*)data1)[5] = 2.0f;")), "kernel", check=True, timeout_s=60, min_time_s=0.001)
    assert bad.status == "crash" and "SIGSEGV" in bad.error and runner.restarts == 1, bad
    again = runner.measure(cpu.compile(source()), "kernel", check=True, timeout_s=60, min_time_s=0.001)
    assert again.status == "ok" and again.verified, again

def test_a_locked_buffer_is_filled_again_and_stays_locked():
  g = Guarded(cpu, 5000, np.float32)  # not a whole number of pages
  g.fill(np.ones(5000, np.float32))
  assert g.lock() and g.locked
  g.fill(np.full(5000, 2, np.float32))  # the runner's refill after a trampled guard
  assert g.locked and (g.contents() == 2).all() and g.trampled() is None
  assert g.lock(False) and not g.locked
  g.buf[0] = 3.0  # writable again

@pytest.mark.skipif(not opencl.available(), reason="no OpenCL device (install pocl-opencl-icd ocl-icd-libopencl1)")
def test_a_device_buffer_is_guarded_past_its_end():
  g = Guarded(opencl, 100, np.float32)
  g.fill(np.arange(100, dtype=np.float32))
  assert g.trampled() is None and (g.contents() == np.arange(100)).all()
  raw = opencl.copyout(g.raw)
  raw[100 + 5] = 0.5
  opencl.copyin(g.raw, raw)
  assert "20 bytes past its end" in g.trampled()
