#!/bin/bash
# The GPU checks (issue 17) in one command on a lent NVIDIA machine (the device tool's `run`, which has Python 3.12, torch
# and the NVIDIA driver but no network): the project's missing dependencies travel as wheels in .whl/ (see the device
# README), then the GPU tests, a CUDA fuzz, and bench/gpu_kernels.py, each bounded in time, logs under $OUT.
#   scripts/gpu_checks.sh smoke   # ~4 min: every GPU test, a 300-case fuzz, the matmul bench at 1024, three corpus searches
#   scripts/gpu_checks.sh full    # ~8.5 min: an NVRTC cache probe, the CUDA tests again beside a corpus fuzz (3 schedules a
#                                 # kernel, as far as 230 s get), then alone on the GPU the matmul bench at 4096 fp16/fp32
#                                 # (hand-coded, searched, torch) and ten corpus kernels searched
#   scripts/gpu_checks.sh bigfuzz # ~9 min: the corpus kernels over 20M positions x 3 schedules, each case up to 20 min (the
#                                 # full run's fuzz covers the kernels under 20M)
set -u
PHASE=${1:-smoke}
OUT=${OUT:-/tmp/gpu-checks}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TUNESVC_CACHE_DIR=/tmp/tunesvc-cache TUNESVC_ON_BUSY=store
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nproc; python3 -V
  python3 -c "import numpy, torch; print('numpy', numpy.__version__, 'torch', torch.__version__)"
  python3 -c "from devices import cuda, nvrtc, registry; print(registry.available(), nvrtc.version()); print(cuda.fingerprint())"; } 2>&1 | tee "$OUT/env.txt"
fuzz() { timeout "$1" python3 bench/fuzz_linearizer.py --device CUDA --jobs 6 --timeout 120 --out /tmp/fuzz_failures --progress 300 "${@:2}" > "$OUT/fuzz.txt" 2>&1; }
if [ "$PHASE" = bigfuzz ]; then
  fuzz 540 --per-kernel 3 --builders 0 --seed 1 --jobs 14 --timeout 1200 --min-positions 20000001 --max-positions 1000000000000 --progress 20
  echo "fuzz rc=$? (124: stopped at its time limit; the counts so far are above)" >> "$OUT/fuzz.txt"
elif [ "$PHASE" = smoke ]; then
  fuzz 170 --cases 300 --builders 60 --seed 3 &
  timeout 170 python3 -m pytest -q -p no:cacheprovider -m "not exhaustive" -n 8 --durations 15 tests/test_cuda.py tests/test_codegen_cpu.py \
    tests/test_tensor_cores.py tests/test_gpu_driver.py > "$OUT/pytest.txt" 2>&1
  echo "pytest rc=$?" >> "$OUT/pytest.txt"
  timeout 100 python3 bench/gpu_kernels.py --size 1024 --budget-s 20 --min-time 0.3 --corpus 3 --corpus-budget-s 5 > "$OUT/bench.txt" 2>&1
  echo "bench rc=$?" >> "$OUT/bench.txt"
  wait
else
  # does NVRTC take a cubin it built before from the driver's compute cache, with no ptxas report (devices/nvrtc.py)?
  probe='from devices import cuda; import random; c = cuda.compile_for("extern \"C\" __global__ void k(float* o) { o[0] = %r; }" % SEED, "sm_90"); print(len(c.log), c.registers)'
  seed=$RANDOM.$RANDOM
  { for env in "" "" "CUDA_CACHE_DISABLE=1"; do echo "${env:-cache on}: $(env $env python3 -c "SEED = $seed; $probe")"; done; } > "$OUT/nvrtc_probe.txt" 2>&1
  fuzz 230 --per-kernel 3 --builders 0 --seed 1 --jobs 10 &
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m "not exhaustive" -n 6 --durations 10 tests/test_cuda.py tests/test_codegen_cpu.py \
    -k "cuda or CUDA" > "$OUT/pytest.txt" 2>&1
  echo "pytest rc=$?" >> "$OUT/pytest.txt"
  wait $!
  echo "fuzz rc=$? (124: stopped at its time limit; the counts so far are above)" >> "$OUT/fuzz.txt"
  timeout 250 python3 bench/gpu_kernels.py --size 4096 --budget-s 45 --min-time 1 --corpus 10 --corpus-budget-s 8 --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
  echo "bench rc=$?" >> "$OUT/bench.txt"
fi
echo "fuzz rc (smoke: of the background run) logged above; failures:" >> "$OUT/fuzz.txt"
ls /tmp/fuzz_failures >> "$OUT/fuzz.txt" 2>&1 && tar czf "$OUT/fuzz_failures.tgz" -C /tmp fuzz_failures 2>/dev/null
tail -n 5 "$OUT"/*.txt
