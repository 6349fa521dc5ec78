import os, pickle, time
import numpy as np
import pytest
from devices import cpu, registry
from devices.base import Binary
from devices.cpu import CompileError, Program, alloc
from linearizer import CODEGEN_VERSION
from linearizer.options import LinearizerOptions
from conftest import exited

DOUBLE = "void k(float* restrict out, const float* a, int n){ for(int i=0;i<n;i++) out[i]=a[i]*2; }"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("TUNESVC_CACHE_DIR", str(tmp_path / "cache"))
  return tmp_path / "cache" / "compile"

def prog(src: str, name: str = "k", flags=cpu.DEFAULT_FLAGS) -> Program: return Program(cpu.compile(src, flags), name)


def test_compile_and_run():
  a = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
  out = alloc(1000, np.float32)
  assert prog(DOUBLE)(out, a, var_vals=[1000]) is None
  np.testing.assert_array_equal(out, a * 2)
  assert isinstance(t := prog(DOUBLE).time(out, a, var_vals=[1000]), float) and 0 < t < 1

def test_cache_hit_and_keys(cache):
  lib = cpu.compile(DOUBLE)
  assert lib.image[:4] == b"\x7fELF" and lib.launch is None and [p.read_bytes() for p in cache.iterdir()] == [lib.image]  # no temp files left
  next(cache.iterdir()).write_bytes(b"from cache")
  assert cpu.compile(DOUBLE) == Binary(b"from cache")
  cpu.compile(DOUBLE, cpu.DEFAULT_FLAGS[1:])   # other flags, other entry
  cpu.compile(DOUBLE + "\n")                   # other source, other entry
  assert len(list(cache.iterdir())) == 3

def test_compile_error(cache):
  with pytest.raises(CompileError, match="no_such_identifier"): cpu.compile("void k(float* out){ out[0] = no_such_identifier; }")
  with pytest.raises(CompileError, match="failed"): cpu.compile(DOUBLE, ("-shared", "--no-such-flag"))
  assert not cache.exists() or list(cache.iterdir()) == []

def test_missing_compiler(monkeypatch):
  monkeypatch.setenv("TUNESVC_CC", "no-such-cc-tunesvc")
  with pytest.raises(CompileError, match="not found"): cpu.compile(DOUBLE)
  assert not cpu.available() and "CPU" not in registry.available()

@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.float32, np.float64, np.complex128])
def test_alloc_aligned(dtype):
  for n in (0, 1, 3, 7, 64, 1000, 4097):
    a = alloc(n, dtype)
    assert a.shape == (n,) and a.dtype == dtype and a.ctypes.data % 64 == 0 and a.flags.writeable and not a.any()

def test_vars_and_dtypes():
  src = """void k(double* restrict out, const int* a, const double* b, int n, int off, int scale){
    for(int i=0;i<n;i++) out[i] = (a[i] + off) * scale + b[i]; }"""
  rng = np.random.default_rng(1)
  a, b, out = rng.integers(-100, 100, 50, dtype=np.int32), rng.standard_normal(50), alloc(50, np.float64)
  prog(src)(out, a, b, var_vals=[40, -7, np.int64(3)])
  np.testing.assert_array_equal(out[:40], (a[:40] + -7) * 3 + b[:40])
  assert not out[40:].any()
  for bad in (2**31, 1.5):
    with pytest.raises(ValueError): prog(src)(out, a, b, var_vals=[40, bad, 1])
  with pytest.raises(ValueError, match="contiguous"): prog(src)(out, a[::2].copy(), b[::2], var_vals=[1, 0, 1])

def test_wrapv():
  src = "void k(int* restrict out, int a){ out[0] = a + 1 > a; out[1] = a + 1; }"  # without -fwrapv gcc folds out[0] to 1
  out = alloc(2, np.int32)
  prog(src)(out, var_vals=[2**31 - 1])
  assert out.tolist() == [0, -2**31]

def test_ieee_float_semantics():
  src = """void k(float* restrict out, int* restrict isnan, const float* a, const float* b, const float* c, int n){
    for(int i=0;i<n;i++){ out[i] = a[i]*b[i] + c[i]; isnan[i] = a[i] != a[i]; } }"""
  rng = np.random.default_rng(2)
  a, b, c = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
  a[::7] = np.nan
  out, isnan = alloc(4096, np.float32), alloc(4096, np.int32)
  prog(src)(out, isnan, a, b, c, var_vals=[4096])
  np.testing.assert_array_equal(out, a * b + c)  # bitwise: no fma contraction, NaNs kept
  np.testing.assert_array_equal(isnan, np.isnan(a))

def test_openmp_parallel_loop():
  src = """#include <omp.h>
  void k(float* restrict out, int* restrict nthreads, const float* a, int n){
    #pragma omp parallel for
    for(int i=0;i<n;i++){ out[i] = a[i] + 1; if(i == 0) nthreads[0] = omp_get_num_threads(); } }"""
  a, out, nt = np.arange(100000, dtype=np.float32), alloc(100000, np.float32), alloc(1, np.int32)
  prog(src)(out, nt, a, var_vals=[100000])
  np.testing.assert_array_equal(out, a + 1)
  assert nt[0] == cpu.options().threads

def test_fingerprint():
  fp = cpu.fingerprint()
  assert set(fp) == {"backend", "arch", "cpu", "isa", "compiler", "compiler_version", "flags", "target", "threads", "codegen",
                     "stream_store_bytes", "options"}
  assert fp["codegen"] == CODEGEN_VERSION and fp["options"] == cpu.options().to_json()  # the hash names the options
  assert fp["backend"] == "CPU" and fp["flags"] == list(cpu.DEFAULT_FLAGS) and os.path.isabs(fp["compiler"])
  assert cpu.fingerprint() == fp and cpu.fingerprint_hash(cpu.fingerprint()) == cpu.fingerprint_hash(fp)
  other = cpu.fingerprint(cpu.DEFAULT_FLAGS[:-1])
  assert cpu.fingerprint_hash(other) != cpu.fingerprint_hash(fp)
  print(fp, cpu.fingerprint_hash(fp))

def test_options():
  o, isa = cpu.options(), set(cpu.fingerprint()["isa"])
  assert (o.device, o.has_local, o.has_shared, o.has_threads, o.supports_float4) == ("CPU", False, False, True, True)
  assert o.float_vector_widths == ((4, 8, 16) if "avx512f" in isa else (4, 8) if "avx" in isa else (4,))
  assert o.threads == len(os.sched_getaffinity(0)) == cpu.fingerprint()["threads"]
  assert pickle.loads(pickle.dumps(o)) == o and hash(o) == hash(LinearizerOptions.from_json(o.to_json()))
  gpu = LinearizerOptions("CUDA", global_max=(2**31 - 1, 65535, 65535), local_max=(1024, 1024, 64), shared_max=49152)
  assert LinearizerOptions.from_json(gpu.to_json()) == gpu and gpu.to_json()["local_max"] == [1024, 1024, 64]

def test_a_lanes_cap_schedules_as_a_narrower_host_under_its_own_fingerprint(monkeypatch):
  host, fp = cpu.options().float_vector_widths, cpu.fingerprint_hash(cpu.fingerprint())
  monkeypatch.setenv("TUNESVC_CPU_LANES", "4")
  assert cpu.options().float_vector_widths == (4,) and cpu.fingerprint()["options"] == cpu.options().to_json()
  assert (cpu.fingerprint_hash(cpu.fingerprint()) == fp) == (host == (4,))
  monkeypatch.setenv("TUNESVC_CPU_LANES", "16")
  assert cpu.options().float_vector_widths == host  # a cap above the host's lanes adds none
  monkeypatch.setenv("TUNESVC_CPU_LANES", "6")
  with pytest.raises(ValueError, match="TUNESVC_CPU_LANES='6': the widest float vector is 4, 8 or 16 lanes"): cpu.options()

def test_registry():
  assert registry.available()[0] == "CPU" and registry.get("CPU") is cpu
  with pytest.raises(ValueError, match="CPU"): registry.get("CUDA")


def fake_cc(tmp_path, script: str) -> str:
  """A "compiler": a shell running `script`."""
  (cc := tmp_path / "cc").write_text(f"#!/bin/sh\n{script}\n")
  cc.chmod(0o755)
  return str(cc)

def test_a_compile_that_times_out_leaves_no_process_of_its_own_running(tmp_path):
  # a driver killed alone left its cc1 running, reparented to init: a timed-out batch's burned minutes of CPU after the
  # search had moved on. Here the "compiler" is a shell that starts a grandchild and spins, as gcc's driver waits for a cc1 that works.
  pidfile = tmp_path / "grandchild"
  with pytest.raises(CompileError, match="timed out after 0.5 CPU-s"):
    cpu._run([fake_cc(tmp_path, f"sleep 60 &\necho $! > {pidfile}\nwhile :; do :; done")], timeout=0.5)
  pid, end = int(pidfile.read_text()), time.monotonic() + 30
  while not exited(pid):  # killed: a zombie until it is reaped
    assert time.monotonic() < end, f"the compiler's child {pid} still runs after the timeout"
    time.sleep(0.01)

def test_a_compiles_limit_is_its_cpu_time_and_wall_time_only_backs_it_up(tmp_path):
  # a loaded machine stretched 31 CPU-s of gcc on one unit past the 60 s of wall time that was the limit: a compile that
  # waits (here a compiler that sleeps: wall time, no CPU) is not cut off at its limit, one blocked for WALL_FACTOR x it is.
  # Its whole source reaches it, read after the limit was first checked (a pipe would have filled: 1 MiB)
  assert cpu._run([fake_cc(tmp_path, "sleep 1; wc -c")], "x" * (1 << 20), timeout=0.5).strip() == str(1 << 20)
  with pytest.raises(CompileError, match=f"timed out after {cpu.WALL_FACTOR * 0.2:g} s"): cpu._run([fake_cc(tmp_path, "exec sleep 60")], timeout=0.2)
