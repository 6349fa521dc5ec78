"""Non-temporal stores (render_c.streamed): a large output written once, in order, by aligned full vectors bypasses the
cache; every other store stays a normal one, and the results stay the reference's on any buffer alignment."""
import re
import numpy as np
import pytest
from linearizer import reference
from linearizer.builders import alu, broadcast, kernel, ld, matmul, mul_add
from linearizer.compare import compare
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower
from linearizer.options import LinearizerOptions
from linearizer.render_c import render_c
from linearizer.symbolic import Var
from devices import cpu

AVX2 = LinearizerOptions("CPU", has_local=False, has_shared=False, has_threads=True, float_vector_widths=(4, 8), threads=2)
N = 1 << 16  # elements: 256 KiB of float32


def src(k, opts, stream_bytes):
  return render_c(lower(Kernel(k, AVX2).apply_opts(opts)), stream_bytes)

def streams(s: str) -> int: return len(re.findall(r"if \(stream0\) stream_float32x8\(", s))


def test_an_output_of_at_least_the_threshold_is_stored_non_temporally():
  k, opts = mul_add(N), [Opt("UPCAST", 0, 8)]
  s = src(k, opts, 4 * N)
  assert streams(s) == 1 and "const int stream0 = ((__UINTPTR_TYPE__)data0 & 31) == 0;" in s
  assert s.rstrip().endswith("stream_fence();\n}"), s  # one thread: fenced before the kernel returns
  for small in (src(k, opts, 4 * N + 1), src(k, opts, None)): assert "stream" not in small


def test_each_thread_fences_its_part_and_unrolled_vectors_of_one_run_all_stream():
  s = src(mul_add(N), [Opt("UPCAST", 0, 8), Opt("UPCAST", 0, 4), Opt("THREAD", 0, 2)], 4 * N)
  assert streams(s) == 4, s
  body = s[s.index("#pragma omp parallel for"):]
  assert body.count("stream_fence();") == 1 and re.search(r"stream_fence\(\);\n  }\n}", body), body  # inside the threads' loop


def test_outputs_not_written_in_one_run_of_full_aligned_vectors_keep_normal_stores():
  rows = N // 256
  two_rows = kernel(alu("ADD", ld(1, (rows, 256)), ld(2, broadcast((256,), (rows, 256)))))  # a bias: two axes
  assert "stream" not in src(two_rows, [Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 2)], 64)  # two runs a row apart
  assert "stream" not in src(kernel(alu("NEG", ld(1, (N,)))), [], 64)  # scalar stores
  assert "stream" not in src(matmul(64, 64, 64), [Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 4)], 64)  # a tile of rows
  sym = kernel(alu("ADD", ld(1, (Var("n", 1, 1 << 20), 256)), ld(2, broadcast((256,), (Var("n", 1, 1 << 20), 256)))))
  assert "stream" not in src(sym, [Opt("UPCAST", 1, 8)], 64)  # its size is not known
  assert streams(src(two_rows, [Opt("UPCAST", 1, 8)], 64)) == 1  # the same kernel a row at a time


def test_a_heavy_loop_body_streams_only_whole_lines_an_iteration():
  x = ld(1, (N,))
  heavy = x
  for _ in range(20): heavy = alu("MUL", heavy, x)  # 20 ALU ops a vector, over render_c.LIGHT_BODY
  k = kernel(heavy)
  assert "stream" not in src(k, [Opt("UPCAST", 0, 8)], 64)  # half a line an iteration
  assert streams(src(k, [Opt("UPCAST", 0, 8), Opt("UPCAST", 0, 2)], 64)) == 2  # a whole line


@pytest.mark.parametrize("opts", [[Opt("UPCAST", 0, 8)], [Opt("UPCAST", 0, 8), Opt("UPCAST", 0, 2), Opt("THREAD", 0, 2)]],
                         ids=["one-thread", "threads"])
@pytest.mark.parametrize("offset", [0, 1, 4], ids=["aligned", "4-bytes-off", "16-bytes-off"])
def test_streamed_results_match_the_reference_at_any_output_alignment(opts, offset):
  k = mul_add(N)
  s = src(k, opts, 4 * N)
  assert "stream" in s
  prog = cpu.Program(cpu.compile(s), "kernel")
  bufs = reference.random_buffers(k, {}, 0)
  want = [b.copy() for b in bufs]
  reference.run(k, want, {})
  out = cpu.alloc(N + 8, np.float32)[offset:offset + N]
  prog(out, *bufs[1:])
  assert (msg := compare(k, [out, *bufs[1:]], want, {})) is None, msg


def test_the_threshold_is_half_the_last_level_cache_sysfs_reports_at_most_its_cap(tmp_path):
  def cache(i, level, kind, size):
    d = tmp_path / f"index{i}"
    d.mkdir()
    for f, v in (("level", level), ("type", kind), ("size", size)): (d / f).write_text(f"{v}\n")
  assert cpu.stream_store_bytes.__wrapped__(tmp_path) is None  # nothing reported: normal stores
  cache(0, 1, "Data", "32K")
  cache(1, 1, "Instruction", "64K")
  cache(2, 2, "Unified", "512K")
  assert cpu.stream_store_bytes.__wrapped__(tmp_path) == 256 << 10
  cache(3, 3, "Unified", "32768K")
  assert cpu.stream_store_bytes.__wrapped__(tmp_path) == 16 << 20
  (tmp_path / "index3" / "size").write_text("307200K\n")  # a socket's L3 (an Emerald Rapids VM's): at most STREAM_STORE_MAX
  assert cpu.stream_store_bytes.__wrapped__(tmp_path) == cpu.STREAM_STORE_MAX == 16 << 20
  assert cpu.fingerprint()["stream_store_bytes"] == cpu.stream_store_bytes()  # the fingerprint names the rule's threshold
