"""Batched builds (devices/cpu.py compile_batch, search/builder.py): a batch's candidates share a translation unit, their
preambles merged; each still computes its own kernel, and a kernel's own attributes stay with it; batches are sized by the workers
and a budget's remainder, the batches compiled at once balanced by their sources' length, and the same kernels make the
same (cached) batches."""
import pytest
from devices import cpu
from linearizer import reference
from linearizer.builders import conv2d, softmax_exp_sum
from linearizer.cachedir import cache_dir
from linearizer.compare import compare
from linearizer.kernel import Kernel
from linearizer.lower import lower
from search.actions import actions_for, children
from search.builder import Build, Builder, balanced
from search.pool import CompilePool


@pytest.mark.parametrize("k", [conv2d(1, 4, 8, 8, 4, 3, 3, padding=1), softmax_exp_sum(16, 64)], ids=["masked", "exp2"])
def test_a_batch_is_one_unit_its_preambles_merged_and_each_entry_point_computes_its_own_kernel(k, tmp_path, monkeypatch):
  # masked: most children load under a mask, whose kernels carry an optimize attribute; exp2: vecmath's instances of
  # several lane counts, each source holding those its own is built of
  monkeypatch.setenv("TUNESVC_CACHE_DIR", str(tmp_path))  # compiled here, not found in the checkout's cache
  root = Kernel(k, cpu.options())
  srcs = list(dict.fromkeys(cpu.render(lower(c)) for c in children(root, actions_for(root.options))))
  split = [cpu._split_kernel(s) for s in srcs]
  assert all(p + kern == s for (p, kern), s in zip(split, srcs))
  assert len({p for p, _ in split}) > 1  # preambles that differ: a unit each before they were merged
  assert sum("optimize" in kern for _, kern in split) == sum("optimize" in s for s in srcs)  # never left in a shared preamble
  run, cmds = cpu._run, []
  monkeypatch.setattr(cpu, "_run", lambda cmd, *a, **kw: cmds.append(cmd) or run(cmd, *a, **kw))
  lib = cpu.compile_batch(srcs)
  assert sum(x.endswith(".c") for x in cmds[-1]) == 1
  vv = k.var_vals()
  want = reference.random_buffers(k, vv, 3)
  reference.run(k, want, vv)
  for i in range(len(srcs)):
    bufs = reference.random_buffers(k, vv, 3)
    bufs[0][:] = 12345.0  # poisoned
    cpu.Program(lib, f"kernel_{i}")(*bufs)
    assert compare(k, bufs, want, vv) is None, f"kernel_{i}"


def test_a_scalar_kernel_takes_the_lines_before_it_but_not_the_endif_of_its_preambles_guard():
  # vecmath's guard closes right before a scalar kernel: taken as the kernel's, two kernels of one preamble made a unit
  # of two #endifs to one #if, which failed to compile, and the builder compiled each candidate alone
  k = softmax_exp_sum(16, 64)
  root = Kernel(k, cpu.options())
  pre = cpu._split_kernel(cpu.render(lower(root)))[0]
  srcs = [s for s in dict.fromkeys(cpu.render(lower(c)) for c in children(root, actions_for(root.options))) if s.startswith(pre)]
  assert pre.endswith("#endif\n") and len(srcs) > 1 and all(cpu._split_kernel(s)[0] == pre for s in srcs)
  lib = cpu.compile_batch(srcs)
  vv = k.var_vals()
  want = reference.random_buffers(k, vv, 3)
  reference.run(k, want, vv)
  for i in range(len(srcs)):
    bufs = reference.random_buffers(k, vv, 3)
    cpu.Program(lib, f"kernel_{i}")(*bufs)
    assert compare(k, bufs, want, vv) is None, f"kernel_{i}"


def test_a_source_that_does_not_end_with_its_kernel_or_whose_preamble_does_not_split_gets_a_unit_of_its_own():
  src = "#include <math.h>\nvoid kernel(float* restrict data0) { data0[0] = 1.0f; }\nstatic int after(void) { return 0; }\n"
  assert cpu._split_kernel(src) == ("", "")
  brace = "/* a brace in a comment: { */\nstatic float two(void) { return 2.0f; }\nvoid kernel(float* restrict data0) { data0[0] = two(); }\n"
  assert cpu._split_kernel(brace)[1] and cpu._declarations(cpu._split_kernel(brace)[0]) is None  # its braces never close
  assert len(cpu._units([src, brace, brace])) == 3
  lib = cpu.compile_batch([src, brace, brace])
  for i, want in enumerate([1.0, 2.0, 2.0]):
    out = cpu.alloc(1, "float32")
    cpu.Program(lib, f"kernel_{i}")(out)
    assert out[0] == want


def test_a_budgets_last_candidates_are_batched_by_their_share_a_worker_not_by_the_full_batch():
  k = conv2d(1, 4, 8, 8, 4, 3, 3, padding=1)
  kids = list(children(Kernel(k, cpu.options()), actions_for(cpu.options())))
  with CompilePool(2) as pool:
    builder = Builder(pool, "devices.cpu", k, cpu.options())
    builds = builder.build(kids, need=4)
    first = [next(builds) for _ in range(4)]
    builds.close()
    assert all(b.error is None and b.name in ("kernel_0", "kernel_1") for b in first)  # 4 for 2 workers: batches of 2
    everything = list(Builder(pool, "devices.cpu", k, cpu.options()).build(kids))
  assert max(int(b.name.split("_")[1]) for b in everything) >= 2 and len(everything) > 4  # no budget: larger batches


def test_the_same_kernels_make_the_same_batches_which_the_compile_cache_then_holds(tmp_path, monkeypatch):
  # a cache of its own: a search an earlier test in this process ended may still have a compile running into the process's
  monkeypatch.setenv("TUNESVC_CACHE_DIR", str(tmp_path))
  k = conv2d(1, 4, 8, 8, 4, 3, 3, padding=1)
  kids = list(children(Kernel(k, cpu.options()), actions_for(cpu.options())))
  cache = cache_dir("compile")
  with CompilePool(2) as pool:
    once = sorted((b.source_hash, b.name) for b in Builder(pool, "devices.cpu", k, cpu.options()).build(kids))
    libs = set(cache.glob("*.so"))
    again = sorted((b.source_hash, b.name) for b in Builder(pool, "devices.cpu", k, cpu.options()).build(kids))  # renders finish in another order
  assert once == again and set(cache.glob("*.so")) == libs and len(libs) >= 2  # nothing compiled the second time


def test_the_batches_compiled_at_once_are_balanced_by_their_sources_length_each_in_the_kernels_order():
  # a ranked round's longest sources first: halves in order were 180 and 20 characters, one worker compiling most of it
  builds = [Build(None, source="x" * n) for n in (90, 80, 10, 10, 5, 5)]
  groups = balanced(builds, 3)
  assert [[len(b.source) for b in g] for g in groups] == [[90, 10, 5], [80, 10, 5]]
  at = {id(b): i for i, b in enumerate(builds)}
  assert [[at[id(b)] for b in g] for g in groups] == [[0, 3, 5], [1, 2, 4]]  # each group in order, the groups by their first
  assert [len(g) for g in balanced(builds[:5], 3)] == [2, 3] and len(balanced(builds[:3], 3)) == 1  # as many as hold them
