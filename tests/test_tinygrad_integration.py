"""tinygrad 0.8.0 programs with their kernels compiled by tunesvc (tunesvc.integrations.tinygrad) give tinygrad's own
results, TinyJit and symbolic shapes included, on tinygrad's CPU device (CLANG) and its OpenCL one (GPU: PoCL here) --
and its CUDA one on an NVIDIA GPU; without one, tinygrad's kernels are built for CUDA as far as NVRTC goes. A kernel
tunesvc cannot take runs tinygrad's code, counted; a slice of tinygrad's own op tests has the same outcomes with and
without tunesvc."""
import json, os, subprocess, sys, time
import numpy as np
import pytest

os.environ["CLANG"] = "1"  # tinygrad's CPU device, before tinygrad picks its default (the `device` fixture switches it)
from tinygrad import Tensor, dtypes  # noqa: E402
from tinygrad.device import Compiled, Device  # noqa: E402
from tinygrad.jit import TinyJit  # noqa: E402
from tinygrad.shape.symbolic import Variable  # noqa: E402
from devices import cuda, nvrtc, registry  # noqa: E402
from linearizer import ACTION_SPACE_VERSION  # noqa: E402
from linearizer.heuristic import hand_coded_optimizations  # noqa: E402
from linearizer.kernel import Kernel  # noqa: E402
from linearizer.lower import lower  # noqa: E402
from linearizer import reference  # noqa: E402
from linearizer.compare import compare as check  # noqa: E402
from tunesvc import runtime  # noqa: E402
from tunesvc.cache import OptsCache  # noqa: E402
from tunesvc.integrations import tinygrad as tsvc  # noqa: E402
from tests.tinygrad_suite import compare  # noqa: E402
from tests.tinygrad_examples import PROGRAMS, llama  # noqa: E402
from conftest import once_a_run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_opencl = pytest.mark.skipif("OPENCL" not in registry.available(), reason="no OpenCL device (PoCL: pocl-opencl-icd)")
needs_gpu = pytest.mark.skipif(not cuda.available(), reason="no NVIDIA GPU (no CUDA driver with a device)")
# tunesvc's device names; the GPUs' tinygrad runs take seconds (every kernel built twice, by tinygrad and by tunesvc)
MARKS = {"CPU": [], "OPENCL": [needs_opencl, pytest.mark.slow], "CUDA": [needs_gpu, pytest.mark.slow]}
DEVICES = [pytest.param(d, marks=m) for d, m in MARKS.items()]
GPUS = DEVICES[1:]


@pytest.fixture(params=DEVICES)
def device(request, monkeypatch):
  """tunesvc's name of the device a test runs on; tinygrad's default device is its tinygrad device meanwhile."""
  monkeypatch.setattr(Device, "DEFAULT", tsvc.TINYGRAD_DEVICE[request.param])
  return request.param

def on_clang(f):
  """f() by tinygrad on CLANG: every device's reference (tinygrad's own OpenCL code cannot cast to half on PoCL, which
  has no cl_khr_fp16; tunesvc computes float16 in float registers there)."""
  with pytest.MonkeyPatch.context() as m:
    m.setattr(Device, "DEFAULT", "CLANG")
    return f()

@pytest.fixture(scope="session")
def plain_results(tmp_path_factory):
  """name -> PROGRAMS[name] computed by plain tinygrad on CLANG, once a run (conftest.once_a_run: the pytest-xdist workers
  share it): its scheduling and codegen in Python are most of a reference's CPU (llama's 7-8 CPU-s, its compiles cached
  or not), and three tests want llama's."""
  def plain(name: str) -> np.ndarray:
    Compiled.get_runner.cache_clear()  # tinygrad compiles every kernel itself
    return on_clang(PROGRAMS[name])
  return lambda name: once_a_run(tmp_path_factory, f"plain-tinygrad-{name}", lambda: plain(name))

@pytest.fixture
def enabled(device):
  tsvc.enable(device=device)
  yield device
  tsvc.disable()

def programs(rng):
  """name -> a function of nothing computing a numpy result with tinygrad, on random data (never zeros)."""
  x, w = rng.standard_normal((2, 3, 9, 9)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  a, b = rng.standard_normal((17, 33)).astype(np.float32), rng.standard_normal((33, 7)).astype(np.float32)
  i = rng.integers(-100, 100, (5, 6)).astype(np.int32)
  return {
    "matmul_relu_sum": lambda: (Tensor(a) @ Tensor(b)).relu().sum(axis=1).numpy(),
    "conv2d_padded_maxpool": lambda: Tensor(x).conv2d(Tensor(w), padding=1).max_pool2d().numpy(),
    "softmax": lambda: Tensor(a).softmax(axis=-1).numpy(),
    "layernorm_gelu": lambda: Tensor(a).layernorm().gelu().numpy(),
    "int_ops": lambda: ((Tensor(i) * 3 + 7).maximum(Tensor(i) - 1) + Tensor(i).sum(axis=0)).numpy(),
    "cast_compare_where": lambda: (Tensor(a) > 0).where(Tensor(a).cast(dtypes.float16).cast(dtypes.float32), -1.0).numpy(),
    "cumsum_pad_slice": lambda: Tensor(a).pad(((1, 2), (0, 3))).cumsum(axis=1)[2:9, ::2].numpy(),
    "backward": lambda: (lambda t: ((t @ Tensor(b)).tanh().sum().backward(), t.grad.numpy())[1])(Tensor(a, requires_grad=True)),
  }

@pytest.mark.parametrize("name", list(programs(np.random.default_rng(0))))
def test_results_match_plain_tinygrad(name, device):
  want = on_clang(programs(np.random.default_rng(1))[name])
  tsvc.enable(device=device)
  try: got = programs(np.random.default_rng(1))[name]()
  finally: tsvc.disable()
  s = tsvc.stats()
  assert s["compiled"] > 0 and s["fallback"] == 0 and s["runs"] >= s["compiled"], s
  assert got.dtype == want.dtype and got.shape == want.shape
  if want.dtype.kind == "f": np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # two codegens: float order differs
  else: np.testing.assert_array_equal(got, want)

# the MNIST training step's 86 kernels on a GPU took ~3 minutes busy (PoCL's LLVM builds each twice; AdamW's has 122):
# backward runs on the GPUs in test_results_match_plain_tinygrad. `make test` trains MNIST's convs (~22 CPU-s cold);
# AdamW's transformer (~21 CPU-s cold: its forward kernels are bert's, vit's and llama's, its backward, AdamW and the
# schedule's assigns are depth) is in the exhaustive tier, which CI runs too. On OpenCL `make test` runs the LLaMA decoder
# (a symbolic KV cache in a TinyJit, grouped KV heads: the integration's hardest path) and the exhaustive tier the other
# forward programs (8-11 CPU-s each cold: PoCL's LLVM builds; their kernels' kinds run on CPU in `make test`)
TRAINING = {"mnist_train_step", "adamw_train_step"}
DEPTH = {("adamw_train_step", "CPU"): [pytest.mark.exhaustive],
         **{(name, "OPENCL"): [pytest.mark.exhaustive] for name in ("bert_encoder", "unet", "lstm_unrolled", "vit")}}
EXAMPLES = [pytest.param(name, d, marks=m + DEPTH.get((name, d), [])) for name in PROGRAMS for d, m in MARKS.items()
            if d == "CPU" or name not in TRAINING]

@pytest.mark.slow
@pytest.mark.parametrize("name,device", EXAMPLES, indirect=["device"])
def test_example_style_programs_match_plain_tinygrad(name, device, plain_results):
  """Programs not built for tunesvc (tests/tinygrad_examples.py): every kernel tunesvc's, the results tinygrad's."""
  want = plain_results(name)
  Compiled.get_runner.cache_clear()  # each side compiles every kernel itself
  tsvc.enable(device=device)
  try: got = PROGRAMS[name]()
  finally: tsvc.disable()
  s = tsvc.stats()
  assert s["compiled"] > 0 and s["fallback"] == 0, s
  # two codegens sum in different orders; a training step's updates carry those differences on (1e-4)
  np.testing.assert_allclose(got, want, rtol=1e-4 if name in TRAINING else 1e-5, atol=1e-6)

@pytest.mark.slow
def test_a_float16_decoder_is_within_float16s_precision_of_float32(plain_results):
  """The LLaMA-style decoder with float16 as tinygrad's default float (weights, KV cache, activations) on tunesvc gives
  the float32 model's logits (plain CLANG's) to float16's precision: 11 bits, carried through ~50 kernels. Plain tinygrad
  0.8.0 on clang is no reference here: its float16 exp2 and sqrt are wrong (exp(1) gives 2.2e-5, rsqrt(1) 0), so its
  logits come out ~1e-5."""
  want = plain_results("llama_decode")  # llama's float32 logits
  Compiled.get_runner.cache_clear()
  tsvc.enable()
  try: got = llama(dtypes.float16)
  finally: tsvc.disable()
  s = tsvc.stats()
  assert s["compiled"] > 0 and s["fallback"] == 0, s
  assert got.dtype == np.float16
  np.testing.assert_allclose(got.astype(np.float32), want, rtol=0, atol=1e-2 * np.abs(want).max())

def test_an_out_of_range_float_to_int_cast_is_x86_64s_in_every_kernel(enabled):
  """tunesvc's defined cast (docs/kernel-format.md: x86-64's) where C's is undefined: numpy's astype on x86-64, which
  tinygrad's own tests hold it to, whether the float is loaded or a constant the compiler could fold, on every device.
  Plain tinygrad 0.8.0 on clang gives it loaded (cvttss2si) and 0 as `arange(1) + v`, which clang folds."""
  vals = [2.0**31, 3e9, -3e9, float("nan"), 1e10, -(2.0**31) - 256, 2.0**31 - 128, float("inf"), -1.9]
  want = [-2**31] * 6 + [2**31 - 128, -2**31, -1]
  assert Tensor(vals).cast(dtypes.int32).numpy().tolist() == want
  assert [(Tensor.arange(1).cast(dtypes.float32) + v).cast(dtypes.int32).numpy()[0] for v in vals] == want
  assert Tensor(vals).cast(dtypes.uint8).numpy().tolist() == [0] * 6 + [128, 0, 255]
  assert tsvc.stats()["fallback"] == 0

def test_symbolic_shapes_in_tinyjit(enabled):
  rng = np.random.default_rng(2)
  @TinyJit
  def f(x, y): return (x @ y).relu().realize()
  @TinyJit
  def g(y): return (y * 0.5 + 1).exp().realize()  # its output's size is symbolic: so is a GPU launch's
  for n in (3, 7, 2, 9, 5):  # calls 0 and 1 run and capture; the rest replay the captured tunesvc runners
    vn = Variable("n", 1, 10).bind(n)
    a, b = rng.standard_normal((4, n)).astype(np.float32), rng.standard_normal((n, 6)).astype(np.float32)
    got = f(Tensor(a).reshape(4, vn), Tensor(b).reshape(vn, 6)).reshape(4, 6).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g(Tensor(b).reshape(vn, 6)).reshape(n, 6).numpy(), np.exp(b * 0.5 + 1), rtol=1e-6)
  s = tsvc.stats()
  assert s["fallback"] == 0 and s["runs"] >= 10, s
  assert sum(bool(k.vars) and runs >= 5 for k, runs in tsvc.kernels()) == 2, "the symbolic matmul and exp: a kernel each, every call"

def test_grouped_kv_heads_over_a_symbolic_cache(enabled):
  """LLaMA's decode step with grouped KV heads: the cache's start_pos+1 rows expanded to the query heads make a view
  below the last with a symbolic dim (its outermost: the converter gives its bound). Every kernel tunesvc's, equal to
  numpy and, at several start_pos, to the reference interpreter."""
  rng = np.random.default_rng(8)
  cache = rng.standard_normal((16, 2, 8)).astype(np.float32)  # 16 positions x 2 KV heads x head_dim 8
  q = rng.standard_normal((4, 1, 8)).astype(np.float32)  # 4 query heads: 2 for each KV head
  @TinyJit
  def f(q, kv): return (q @ kv.reshape(kv.shape[0], 2, 1, 8).expand(kv.shape[0], 2, 2, 8).reshape(kv.shape[0], 4, 8).permute(1, 2, 0)).realize()
  for n in (3, 7, 2, 9):
    got = f(Tensor(q), Tensor(cache).shrink(((0, Variable("start_pos", 1, 15).bind(n) + 1), None, None))).reshape(4, 1, n + 1).numpy()
    kv = np.repeat(cache[:n + 1], 2, axis=1).transpose(1, 2, 0)  # (4, 8, n+1)
    np.testing.assert_allclose(got, q @ kv, rtol=1e-5, atol=1e-6)
  s = tsvc.stats()
  assert s["fallback"] == 0, s
  grouped = [k for k, _ in tsvc.kernels() if k.vars and any(n.op == "LOAD" and len(n.arg.st.views) > 1 for n in k.nodes)]
  assert grouped, [k.name for k, _ in tsvc.kernels()]
  for k in grouped:
    for n in (1, 8, 15):
      vv = {v.name: n for v in k.vars}
      bufs = reference.random_buffers(k, vv, seed=n)
      want = [b.copy() for b in bufs]
      runtime.run_kernel(k, bufs, device=enabled, opts=[], var_vals=vv)
      reference.run(k, want, vv)
      assert check(k, bufs, want, vv) is None

def test_a_failing_compile_falls_back_to_tinygrad(monkeypatch):
  monkeypatch.setenv("TUNESVC_CC", "/nonexistent/cc")  # tunesvc's CPU backend has no compiler: every kernel falls back
  a = np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32)
  tsvc.enable()
  try: np.testing.assert_allclose((Tensor(a) * 2 + 1).exp().numpy(), np.exp(a * 2 + 1), rtol=1e-6)
  finally: tsvc.disable()
  s = tsvc.stats()
  assert s["compiled"] == 0 and s["fallback"] >= 1 and all("not available" in r for r in s["fallback_reasons"]), s

@pytest.mark.parametrize("device", GPUS, indirect=True)
def test_a_kernel_the_format_cannot_say_runs_tinygrads_code_on_the_gpu(enabled):
  """A cast to an image dtype (tinygrad's for Qualcomm GPUs; forced back to float32 without IMAGE=) is no kernel of the
  format: tinygrad builds that one itself, counted, and tunesvc the next, which reads its output."""
  a = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float32)
  got = ((Tensor(a) * 2).cast(dtypes.imagef((4, 4))).realize() + 1).numpy()
  np.testing.assert_allclose(got, a * 2 + 1, rtol=1e-6)
  s = tsvc.stats()
  assert s["fallback_reasons"] == {"image dtype": 1} and s["compiled"] == 1 and s["runs"] == 1, s

def test_disable_restores_tinygrad(device):
  tsvc.enable(device=device)
  tsvc.disable()
  (Tensor.ones(3, 5) * 4).sum().numpy()
  assert tsvc.stats()["compiled"] == 0

@needs_opencl
@pytest.mark.parametrize("device", ["OPENCL"], indirect=True)
def test_opts_are_the_opencl_devices_own(device, tmp_path):
  """Answers cached for tunesvc's OpenCL fingerprint serve tinygrad's GPU kernels (no service is asked: nothing listens
  at the URL) and none of the same kernels on the CPU: a device's opts are looked up by its own fingerprint."""
  rng = np.random.default_rng(7)
  a, b = rng.standard_normal((9, 40)).astype(np.float32), rng.standard_normal((40, 12)).astype(np.float32)
  model = lambda: (Tensor(a) @ Tensor(b)).relu().softmax().numpy()
  want = on_clang(model)
  tsvc.enable(device="OPENCL")
  try: model()
  finally: tsvc.disable()
  keys, dev = [k.key for k, _ in tsvc.kernels()], registry.get("OPENCL")
  fp = dev.fingerprint_hash(dev.fingerprint())
  for key in keys:  # no opts: a schedule unlike the hand-coded one (which upcasts and uses work-groups)
    OptsCache(tmp_path).put({"kernel_key": key, "fingerprint": fp, "action_space_version": ACTION_SPACE_VERSION, "opts": []})
  for dev_name, how in (("OPENCL", "tuned"), ("CPU", "hand_coded")):
    with pytest.MonkeyPatch.context() as m:
      m.setattr(Device, "DEFAULT", tsvc.TINYGRAD_DEVICE[dev_name])
      tsvc.enable("http://127.0.0.1:9", device=dev_name, cache_dir=str(tmp_path))
      try: got = model()
      finally: tsvc.disable()
    s = tsvc.stats()
    assert s[how] == s["compiled"] == len(keys) and s["fallback"] == 0, (dev_name, s)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

@pytest.mark.skipif(cuda.available(), reason="an NVIDIA GPU is here: the CUDA tests run on it")
def test_without_a_gpu_cuda_is_refused_clearly_and_tinygrad_runs_on():
  before = tsvc.stats()
  with pytest.raises(ValueError, match="'CUDA' is not available"): tsvc.enable(device="CUDA")
  with pytest.raises(ValueError, match="not 'METAL'"): tsvc.enable(device="METAL")
  assert (Tensor([1.0, 2.0]) * 3).numpy().tolist() == [3.0, 6.0] and tsvc.stats() == before  # plain tinygrad ran it

@pytest.mark.skipif(not nvrtc.available(), reason="no NVRTC (pip install nvidia-cuda-nvrtc: the test extra has it)")
def test_tinygrads_kernels_build_for_cuda_with_their_entry_point_and_launch():
  """What enable(device="CUDA") builds for each kernel (runtime.build_kernel: hand-coded opts, tunesvc's CUDA renderer,
  NVRTC), for sm_80 without a GPU: the cubin has the entry point tinygrad's CUDA runtime is asked to load, and the launch
  line gives tinygrad's launch, symbolic in the variables in the argument order."""
  tsvc.enable()
  try:
    rng = np.random.default_rng(6)
    for f in programs(rng).values(): f()
    vn, (x, y) = Variable("n", 1, 10).bind(5), (Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 5), (5, 6)))
    (x.reshape(4, vn) @ y.reshape(vn, 6)).realize()
    kernels = [k for k, _ in tsvc.kernels()]
  finally: tsvc.disable()
  assert len(kernels) >= 10 and any(k.vars for k in kernels)
  for k in kernels:
    lin = Kernel(k, cuda.ARCH_OPTIONS["sm_80"])
    hand_coded_optimizations(lin)
    src = cuda.render(lower(lin, "kernel"))
    assert f"void {tsvc.SYMBOL['CUDA']}(" in src and cuda.compile_for(src, "sm_80").cubin[:4] == b"\x7fELF"
    launch = json.loads(src.splitlines()[0].removeprefix("// launch "))
    assert launch["vars"] == [v.name for v in k.vars] and len(launch["groups"]) <= 3 and len(launch["local"]) <= 3

@pytest.mark.slow
def test_an_unmodified_script_runs_on_tunesvc(tmp_path):
  script = tmp_path / "model.py"
  script.write_text("from tinygrad import Tensor\nprint((Tensor([1.0, 2.0, 3.0]) * 2).sum().numpy())\n")
  env = {**os.environ, "PYTHONPATH": ROOT, "CLANG": "1", "TUNESVC_TINYGRAD_STATS": str(tmp_path / "stats.json")}
  env.pop("TUNESVC_URL", None)
  out = subprocess.run([sys.executable, "-m", "tunesvc.integrations.tinygrad", str(script)], env=env, capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "12.0" and '"compiled": 1' in (tmp_path / "stats.json").read_text()
  site = subprocess.run([sys.executable, "-m", "tunesvc.integrations.tinygrad", "--site-dir"], env=env, capture_output=True, text=True, check=True)
  env = {**env, "TUNESVC_TINYGRAD": "1", "PYTHONPATH": f"{ROOT}:{site.stdout.strip()}", "TUNESVC_TINYGRAD_STATS": str(tmp_path / "s2.json")}
  out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "12.0" and '"compiled": 1' in (tmp_path / "s2.json").read_text()

GPU_SLICE = ["test_matmul_simple", "test_sum_full", "test_pad2d", "test_pad_slice", "test_where"]  # a GPU's builds are slower
SLICE = GPU_SLICE + ["test_conv2d_bs_4_cin_1", "test_max_pool2d_simple"]

@pytest.mark.slow
@pytest.mark.exhaustive  # ~45 CPU-s (OPENCL: ~130 s busy), and torch in a venv of its own (make test-exhaustive builds it)
@pytest.mark.parametrize("device,tests", [("CPU", SLICE), pytest.param("OPENCL", GPU_SLICE, marks=needs_opencl)])
def test_tinygrad_op_tests_slice_same_outcomes(device, tests):
  """A bounded slice of tinygrad's own test_ops.py against torch (-k: every test whose name holds one of `tests`): the same
  outcome for every test, no fallback."""
  rep = compare(["test/test_ops.py"], " or ".join(tests), timeout=900, device=device)
  assert rep["differ"] == {}, rep["differ"]
  assert rep["tunesvc"]["passed"] >= len(tests) and rep["stats"]["compiled"] > 0 and rep["stats"]["fallback"] == 0, rep


@pytest.mark.slow
def test_end_to_end_a_served_model_is_tuned_then_every_kernel_served_tuned(tmp_path):
  """tunesvc serve on SQLite with a local worker; a small model run with submit=True queues its kernels, the worker
  tunes them, and a second run (a fresh local cache: every answer from the store) compiles every kernel with tuned opts."""
  from tunesvc.client import Client
  from tunesvc.config import Settings
  from tunesvc.serve import Service
  from devices import registry
  rng = np.random.default_rng(4)
  x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((4, 16), (16, 32), (32, 8)))
  model = lambda: (Tensor(x) @ Tensor(w1)).relu().matmul(Tensor(w2)).softmax().numpy()
  svc = Service(Settings(database_url=f"sqlite:///{tmp_path}/e2e.db", tokens={"sub": "submit"}), port=0, workers=1, devices=["CPU"]).start()
  try:
    tsvc.enable(svc.url, "sub", submit=True, search={"beam": 2, "budget_candidates": 8, "min_time_s": 0.005, "final_rounds": 3},
                cache_dir=str(tmp_path / "cache1"))
    first = model()
    s1, keys = tsvc.stats(), [k.key for k, _ in tsvc.kernels()]
    assert s1["compiled"] == len(keys) >= 2 and s1["hand_coded"] == s1["compiled"] and s1["fallback"] == 0, s1
    dev = registry.get("CPU")
    with Client(svc.url, "sub") as c:
      fp = dev.fingerprint_hash(dev.fingerprint())
      deadline = time.monotonic() + 300
      while None in c.lookup(fp, keys):
        assert time.monotonic() < deadline, "the worker did not tune every kernel in time"
        time.sleep(1)
    tsvc.enable(svc.url, "sub", cache_dir=str(tmp_path / "cache2"))
    second = model()
    s2 = tsvc.stats()
    assert s2["tuned"] == s2["compiled"] == len(keys) and s2["hand_coded"] == 0 and s2["fallback"] == 0, s2
    np.testing.assert_allclose(second, first, rtol=1e-5, atol=1e-6)
  finally:
    tsvc.disable()
    svc.stop()


@pytest.mark.slow
def test_capture_a_model_then_submit_it_grouped_by_model(tmp_path, server):
  """`tunesvc capture` writes each distinct kernel once with its runs; `tunesvc tune model.jsonl --server` submits them as
  the model's; the API and the dashboard group them by model with their states."""
  import httpx
  script = tmp_path / "mlp.py"
  script.write_text("import numpy as np\nfrom tinygrad import Tensor\nrng = np.random.default_rng(0)\n"
                    "x, w = (Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 16), (16, 8)))\n"
                    "for _ in range(3): (x @ w).relu().softmax().numpy()\n")
  out, env = tmp_path / "mlp.jsonl", {**os.environ, "PYTHONPATH": ROOT, "CLANG": "1"}
  subprocess.run([sys.executable, "-m", "tunesvc.cli", "capture", str(script), "--out", str(out)], env=env, check=True, capture_output=True)
  lines = [json.loads(x) for x in out.read_text().splitlines()]
  assert len(lines) >= 2 and {x["model"] for x in lines} == {"mlp"} and all(x["runs"] == 3 for x in lines)
  assert len({json.dumps(x["kernel"], sort_keys=True) for x in lines}) == len(lines)  # deduplicated by kernel
  r = subprocess.run([sys.executable, "-m", "tunesvc.cli", "tune", str(out), "--server", server, "--token", "sub", "--no-wait"],
                     env=env, check=True, capture_output=True, text=True)
  assert f"mlp: 0/{len(lines)} done, 0 running, {len(lines)} queued, 0 failed" in r.stdout
  m = httpx.get(f"{server}/v1/models/mlp", headers={"Authorization": "Bearer sub"}).json()
  assert m["kernels"] == len(lines) and m["runs"] == 3 * len(lines) and m["states"] == {"queued": len(lines)}
  assert httpx.get(f"{server}/v1/models", headers={"Authorization": "Bearer sub"}).json()["models"][0]["model"] == "mlp"
  assert httpx.get(f"{server}/models").status_code == 200
  bad = httpx.post(f"{server}/v1/kernels", json={"kernels": [lines[0]["kernel"]], "runs": [1]}, headers={"Authorization": "Bearer sub"})
  assert bad.status_code == 422 and "runs needs a model" in bad.text
