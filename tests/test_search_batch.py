"""Batched builds (devices/cpu.py compile_batch): candidates sharing a preamble share a translation unit; each still
computes its own kernel, and a kernel's own attributes stay with it."""
from devices import cpu
from linearizer import reference
from linearizer.builders import conv2d
from linearizer.compare import compare
from linearizer.kernel import Kernel
from linearizer.lower import lower
from search.actions import actions_for, children


def test_candidates_with_one_preamble_share_a_unit_and_each_entry_point_computes_its_own_kernel():
  k = conv2d(1, 4, 8, 8, 4, 3, 3, padding=1)  # padded: most children load under a mask, whose kernels carry an optimize attribute
  root = Kernel(k, cpu.options())
  srcs = list(dict.fromkeys(cpu.render(lower(c)) for c in children(root, actions_for(root.options))))
  split = [cpu._split_kernel(s) for s in srcs]
  assert all(p + kern == s for (p, kern), s in zip(split, srcs))
  assert len({p for p, _ in split}) < len(srcs) // 2  # few units for many candidates
  assert sum("optimize" in kern for _, kern in split) == sum("optimize" in s for s in srcs) > 0  # never left in a shared preamble
  lib = cpu.compile_batch(srcs)
  vv = k.var_vals()
  want = reference.random_buffers(k, vv, 3)
  reference.run(k, want, vv)
  for i in range(len(srcs)):
    bufs = reference.random_buffers(k, vv, 3)
    bufs[0][:] = 12345.0  # poisoned
    cpu.Program(lib, f"kernel_{i}")(*bufs)
    assert compare(k, bufs, want, vv) is None, f"kernel_{i}"


def test_a_source_that_does_not_end_with_its_kernel_gets_a_unit_of_its_own():
  src = "#include <math.h>\nvoid kernel(float* restrict data0) { data0[0] = 1.0f; }\nstatic int after(void) { return 0; }\n"
  assert cpu._split_kernel(src) == ("", "")
  lib = cpu.compile_batch([src, src])
  for i in range(2):
    out = cpu.alloc(1, "float32")
    cpu.Program(lib, f"kernel_{i}")(out)
    assert out[0] == 1.0
