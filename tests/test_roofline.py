import contextlib, os
from dataclasses import replace
from types import SimpleNamespace
import numpy as np
import pytest
from devices import cpu
from linearizer.builders import alu, cast, elementwise, elementwise_chain, kernel, layernorm_norm, ld, mul_add, red, reduce, st
from linearizer.dtypes import float16, float32
from linearizer.lower import lower
from linearizer.shapetracker import ShapeTracker, View
from search import load as search_load, roofline, tune as search_tune
from search.result import Candidate, Status
from search.runner import Measurement
from search.settings import SearchSettings
from search.tune import tune

FAST = dict(min_time_s=0.005, final_rounds=3)


def test_the_bytes_a_kernel_must_move_count_only_inputs_it_is_sure_to_read_whole():
  assert roofline.must_move(mul_add(1 << 10), {}) == roofline.Traffic(1 << 10, {1: 1 << 10, 2: 1 << 10, 3: 1 << 10})
  # a broadcast input counts its distinct elements once: the row statistics (64) and gamma and beta (32)
  ln = layernorm_norm(64, 32)
  assert roofline.must_move(ln, {}) == roofline.Traffic(64 * 32, {1: 64 * 32, 2: 64, 3: 64, 4: 32, 5: 32})
  # a padded view (a mask: its edge positions read nothing) and sliding windows (positions share elements): not counted
  padded = kernel(alu("ADD", ld("x", st((62,)).pad(((1, 1),))), ld("y", (64,))))
  assert roofline.must_move(padded, {}) == roofline.Traffic(64, {2: 64})
  windows = kernel(red("SUM", ld("x", ShapeTracker((View.create((8, 3), (1, 1)),))), (1,)))
  assert roofline.must_move(windows, {}) == roofline.Traffic(8, {})
  # a transposed read is read whole all the same
  cols = reduce("SUM", (64, 32), (0,))
  assert roofline.must_move(cols, {}) == roofline.Traffic(32, {1: 64 * 32})


@pytest.mark.parametrize("k, moved, want", [
  (mul_add(1 << 17), 16 << 17, lambda b: b[1] + b[2] + b[3]),
  (kernel(alu("ADD", ld("x", (1 << 17,)), cast(ld("h", (1 << 17,), float16), float32))), 10 << 17, lambda b: b[1] + b[2].astype(np.float32)),
  (layernorm_norm(256, 512), 8 * 256 * 512, lambda b: b[1] + b[2][0] + b[3][0] + b[4][0] + b[5][0]),  # gamma, beta: one element
])
def test_a_stream_moves_the_bytes_over_the_kernels_own_buffers_read_and_written_whole(k, moved, want):
  s = roofline.stream(k, roofline.must_move(k, {}), cpu.options())
  assert s is not None and s.moved == moved and s.kernel.ast.name == "roofline_stream"
  rng = np.random.default_rng(0)
  bufs = [rng.random(n).astype(b.dtype.np) for b, n in zip(k.buffers, k.buffer_sizes({}))]  # the runner's: the kernel's, in order
  prog = cpu.Program(cpu.compile(cpu.render(lower(s.kernel))), "kernel")
  prog(*bufs)
  np.testing.assert_allclose(bufs[0], want(bufs), rtol=1e-5)


class _Runner:
  """Each library's time from `times`, each run."""
  def __init__(self, times, other): self.times, self.other, self.timed, self.pid = times, other, [], os.getpid()
  def measure(self, lib, name, **kw):
    self.timed.append(lib)
    return Measurement(Status.OK, [self.times[lib]] * kw.get("min_runs", 1), other_load=self.other)


@pytest.mark.parametrize("best_s, stream_s, other, at", [(1.04e-3, 1e-3, 0.0, True), (1.10e-3, 1e-3, 0.0, False), (1e-4, 1e-4, 0.0, False),
                                                        (1.04e-3, 1e-3, 0.6, False)], ids=["within", "slower", "too-short", "busy"])
def test_a_search_is_at_the_roofline_where_its_best_runs_within_the_tolerance_of_the_stream_timed_beside_it(monkeypatch, best_s, stream_s, other, at):
  # the stream on all the cores, and the rest of the machine on one of them half the time: a threaded timing is noise
  threads = [{"op": "THREAD", "axis": 0, "amt": os.cpu_count()}] if os.cpu_count() > 1 else []
  best = Candidate([*threads, {"op": "UPCAST", "axis": 1, "amt": 4}], Status.OK, 1, "best", times_s=[best_s], verified=True)
  near = Candidate([{"op": "UPCAST", "axis": 0, "amt": 4}], Status.OK, 1, "near", times_s=[1.2 * best_s], verified=True)
  base = Candidate([], Status.OK, 0, "base", times_s=[2 * best_s], verified=True)
  runner = _Runner({b"best": best_s, b"stream": stream_s, b"near": 1.2 * best_s, b"base": 2 * best_s}, other)
  pool = SimpleNamespace(paused=contextlib.nullcontext)
  built = SimpleNamespace(result=lambda: roofline.Built(b"stream", "kernel", 1 << 30, os.cpu_count()))
  s = SearchSettings.from_json(dict(final_rounds=3, on_busy="store"))
  search = search_tune._Search(cpu, s, None, pool, runner, None, None, hand_opts=[], stream=built)
  search.libs = {h: SimpleNamespace(binary=h.encode(), name="kernel") for h in ("best", "near", "base")}
  search.candidates = [base, near, best]
  assert search.at_roofline() is at and runner.timed.count(b"stream") == runner.timed.count(b"best") == roofline.ROUNDS
  assert search.roofline == ({} if stream_s < roofline.MIN_S else {"moved": 1 << 30, "stream_s": stream_s, "best_s": best_s,
                                                                   "opts": best.opts, "other_load": other, "ended": at})
  assert not search.at_roofline() and len(runner.timed) == 2 * roofline.ROUNDS  # judged once per new best: not again
  # the final check: at the roofline only the best and the baseline (nothing beats the best by more than noise)
  monkeypatch.setattr(search_load, "OtherLoad", lambda *pids: SimpleNamespace(cores=lambda: other, steal=lambda: 0.0))
  runner.timed.clear()
  _, win, *_ = search.final(search.candidates)
  assert win is best and set(runner.timed) == ({b"best", b"base"} if at else {b"best", b"near", b"base"})


@pytest.fixture
def one_core(monkeypatch):
  """The searches on one core: a threaded kernel waits for its slowest thread, and on a machine whose other core is busy
  with other work that was 10x (a + b + c on 4M floats at other load 1.6: THREAD 2 18.7 ms, one core 2.6 ms)."""
  options = cpu.options
  monkeypatch.setattr(cpu, "options", lambda: replace(options(), threads=1))


@pytest.mark.timing
def test_a_search_of_a_memory_bound_kernel_ends_at_the_roofline_with_its_winner_verified_and_says_so(one_core):
  # a + b + c on 4M floats: its hand-coded schedule moves its bytes as the stream does (the same source), so the search
  # ends with the round (the seeds', unless a busy machine's noise hid it there) whose best reached the stream's time
  k = elementwise((1 << 22,), [(1 << 22,)] * 3, lambda a, b, c: alu("ADD", alu("ADD", a, b), c))
  # the guard against a busy machine is the unit test's (above): here any load (the timing tier's machine may be shared)
  r = tune(k, settings=SearchSettings.from_json(dict(beam=2, budget_candidates=40, worth_s=0, roofline=True, busy_load=10, **FAST)))
  at = r.conditions["roofline"]
  assert r.verified and at["ended"] and at["moved"] == 16 << 22 and at["best_s"] <= (1 + roofline.TOLERANCE) * at["stream_s"]
  last = max(c.round for c in r.candidates)
  assert next(c for c in r.candidates if c.opts == at["opts"]).round == last and r.best_opts in (at["opts"], r.baseline_opts), (last, at)


@pytest.mark.timing
def test_a_kernel_its_seeds_leave_far_from_the_roofline_is_searched_on(one_core):
  # 32 ALU ops an element (SIN, EXP2) on 4M floats: compute, not the 48 MB it must move, is its time (at 1M floats, 12 MB,
  # the stream ran from the cache under MIN_S and was not judged)
  k = elementwise_chain((4096, 1024), 32)
  r = tune(k, settings=SearchSettings.from_json(dict(beam=2, budget_candidates=4, worth_s=0, roofline=True, busy_load=10, **FAST)))
  assert not r.conditions["roofline"]["ended"] and r.conditions["roofline"]["best_s"] > 1.5 * r.conditions["roofline"]["stream_s"]
  assert max(c.round for c in r.candidates) >= 1


@pytest.mark.slow
def test_every_corpus_kernel_gets_a_stream_of_no_more_bytes_than_its_buffers_hold_or_none(corpus):
  built = 0
  for k in (k.rebased() for k in corpus):
    vv = k.var_vals()
    if (s := roofline.stream(k, roofline.must_move(k, vv), cpu.options())) is None: continue
    assert s.moved <= k.bytes(vv), k.name
    if s.moved >= roofline.MIN_BYTES: built += bool(lower(s.kernel).uops)
  assert built > 10  # the corpus's large element-wise kernels and reduces
