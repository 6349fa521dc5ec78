"""The runtime library never crashes its caller: every bad run_kernel call is a clear ValueError (the compiled kernel would
read and write past a short buffer, or misread a mistyped one), and tuned opts that do not apply fall back to the
hand-coded ones."""
import re
import numpy as np
import pytest
from linearizer import reference
from linearizer.compare import compare
from search_results import example
from tunesvc.runtime import run_kernel


def buffers(k):
  vv = k.var_vals()
  return reference.random_buffers(k, vv, 1)

@pytest.mark.parametrize("bad, says", [
  (lambda b: b[:1], "takes 3 buffers"),
  (lambda b: [], "takes 3 buffers"),
  (lambda b: b + [b[0]], "takes 3 buffers"),
  (lambda b: [b[0][:-1], *b[1:]], "buffers[0]: 262,143 elements, the kernel reaches 262,144"),
  (lambda b: [b[0], b[1][:100], b[2]], "buffers[1]: 100 elements"),
  (lambda b: [b[0].astype(np.float64), *b[1:]], "buffers[0]: dtype float64, the kernel's buf0 is float32"),
  (lambda b: [b[0], b[1].astype(np.int32), b[2]], "buffers[1]: dtype int32"),
  (lambda b: [b[0].tolist(), *b[1:]], "buffers[0]: a numpy array, not list"),
  (lambda b: [b[0], np.repeat(b[1], 2)[::2], b[2]], "buffers[1]: not C-contiguous"),
  (lambda b: [np.broadcast_to(b[0], b[0].shape), *b[1:]], "buffers[0]: the output is read-only"),
  (lambda b: "abc", "takes 3 buffers"),
])
def test_bad_buffers_are_a_clear_value_error(bad, says):
  k = example("matmul_512")
  with pytest.raises(ValueError, match=re.escape(says)): run_kernel(k, bad(buffers(k)), opts=[])


class Answers:
  """A client whose service answers opts that do not fit the kernel (a damaged or foreign answer)."""
  def opts_for(self, *_): return [{"op": "UPCAST", "axis": 9, "amt": 7}]

def test_tuned_opts_that_do_not_apply_fall_back_to_the_hand_coded_ones():
  k = example("sum_all")
  vv = k.var_vals()
  got, want = buffers(k), buffers(k)
  reference.run(k, want, vv)
  run_kernel(k, got, client=Answers())
  assert compare(k, got, want, vv) is None
