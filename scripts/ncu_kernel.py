"""One launch of a kernel under a schedule on CUDA, for Nsight Compute (ncu) to profile: what limits it.
  ncu --section SpeedOfLight --section Occupancy --section LaunchStats python3 scripts/ncu_kernel.py matmul 4096 fp16 "TC0:0 UPCAST1:2"
"""
import re, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from devices import cuda  # noqa: E402
from linearizer import reference  # noqa: E402
from linearizer.builders import matmul  # noqa: E402
from linearizer.dtypes import float16, float32  # noqa: E402
from linearizer.kernel import Opt  # noqa: E402
from tunesvc.runtime import compile_kernel  # noqa: E402

_, n, dt, opts = sys.argv[1:5]
k = matmul(int(n), int(n), int(n), dtype=float16 if dt == "fp16" else float32, acc=float32)
sched = [Opt(m[1], None if m[2] is None else int(m[2]), int(m[3])) for m in (re.fullmatch(r"([A-Z]+)(\d+)?:(\d+)", x) for x in opts.split()) if m]
src, prog, _ = compile_kernel(k, "CUDA", sched)
bufs = [cuda.alloc(b.size, b.dtype) for b in reference.random_buffers(k, {}, 0)]
print(f"{prog.time(*bufs) * 1e3:.3f} ms", src[:3000])
