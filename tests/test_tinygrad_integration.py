"""tinygrad 0.8.0 programs with their kernels compiled by tunesvc (tunesvc.integrations.tinygrad) give tinygrad's own
results, TinyJit and symbolic shapes included; a kernel tunesvc cannot take runs tinygrad's code, counted; a slice of
tinygrad's own op tests has the same outcomes with and without tunesvc."""
import json, os, subprocess, sys, time
import numpy as np
import pytest

os.environ["CLANG"] = "1"  # tinygrad's CPU device, before tinygrad picks its default
from tinygrad import Tensor, dtypes  # noqa: E402
from tinygrad.device import Compiled  # noqa: E402
from tinygrad.jit import TinyJit  # noqa: E402
from tinygrad.shape.symbolic import Variable  # noqa: E402
from tunesvc.integrations import tinygrad as tsvc  # noqa: E402
from tests.tinygrad_suite import compare  # noqa: E402
from tests.tinygrad_examples import PROGRAMS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def enabled():
  tsvc.enable()
  yield
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
def test_results_match_plain_tinygrad(name):
  want = programs(np.random.default_rng(1))[name]()
  tsvc.enable()
  try: got = programs(np.random.default_rng(1))[name]()
  finally: tsvc.disable()
  s = tsvc.stats()
  assert s["compiled"] > 0 and s["fallback"] == 0, s
  assert got.dtype == want.dtype and got.shape == want.shape
  if want.dtype.kind == "f": np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # two codegens: float order differs
  else: np.testing.assert_array_equal(got, want)

@pytest.mark.slow
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_example_style_programs_match_plain_tinygrad(name):
  """Programs not built for tunesvc (tests/tinygrad_examples.py): every kernel tunesvc's, the results tinygrad's."""
  Compiled.get_runner.cache_clear()  # each side compiles every kernel itself
  want = PROGRAMS[name]()
  Compiled.get_runner.cache_clear()
  tsvc.enable()
  try: got = PROGRAMS[name]()
  finally: tsvc.disable()
  s = tsvc.stats()
  assert s["compiled"] > 0 and s["fallback"] == 0, s
  # two codegens sum in different orders; the training step's three SGD steps carry those differences on (1e-4)
  np.testing.assert_allclose(got, want, rtol=1e-4 if name == "mnist_train_step" else 1e-5, atol=1e-6)

def test_an_out_of_range_float_to_int_cast_saturates_in_every_kernel(enabled):
  """tunesvc's defined cast (docs/kernel-format.md) where C's is undefined: the same value whether the float is loaded
  or a constant the compiler could fold. Plain tinygrad 0.8.0 on clang has no rule to follow: every one of these
  (NaN included) gives INT_MIN loaded (x86's cvttss2si) and 0 as `arange(1) + v`, which clang folds."""
  vals = [2.0**31, 3e9, -3e9, float("nan"), 1e10, -(2.0**31) - 256, 2.0**31 - 128]
  want = [2**31 - 1, 2**31 - 1, -2**31, 0, 2**31 - 1, -2**31, 2**31 - 128]
  assert Tensor(vals).cast(dtypes.int32).numpy().tolist() == want
  assert [(Tensor.arange(1).cast(dtypes.float32) + v).cast(dtypes.int32).numpy()[0] for v in vals] == want
  assert tsvc.stats()["fallback"] == 0

def test_symbolic_shapes_in_tinyjit(enabled):
  rng = np.random.default_rng(2)
  @TinyJit
  def f(x, y): return (x @ y).relu().realize()
  for n in (3, 7, 2, 9, 5):  # calls 0 and 1 run and capture; the rest replay the captured tunesvc runners
    vn = Variable("n", 1, 10).bind(n)
    a, b = rng.standard_normal((4, n)).astype(np.float32), rng.standard_normal((n, 6)).astype(np.float32)
    got = f(Tensor(a).reshape(4, vn), Tensor(b).reshape(vn, 6)).reshape(4, 6).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-6)
  s = tsvc.stats()
  assert s["fallback"] == 0 and s["compiled"] >= 1 and s["runs"] >= 5, s
  assert any(k.vars for k, _ in tsvc.kernels()), "the symbolic matmul is one kernel with a variable"

def test_a_failing_compile_falls_back_to_tinygrad(enabled, monkeypatch):
  monkeypatch.setenv("TUNESVC_CC", "/nonexistent/cc")  # tunesvc's CPU backend has no compiler: every kernel falls back
  a = np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) * 2 + 1).exp().numpy(), np.exp(a * 2 + 1), rtol=1e-6)
  s = tsvc.stats()
  assert s["compiled"] == 0 and s["fallback"] >= 1 and all("not available" in r for r in s["fallback_reasons"]), s

def test_disable_restores_tinygrad():
  tsvc.enable()
  tsvc.disable()
  (Tensor.ones(3, 5) * 4).sum().numpy()
  assert tsvc.stats()["compiled"] == 0

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

SLICE = "test_matmul_simple or test_conv2d_bs_4_cin_1 or test_sum_full or test_max_pool2d_simple or test_pad2d or test_pad_slice or test_where"

@pytest.mark.slow
@pytest.mark.exhaustive  # ~45 CPU-s, and torch in a venv of its own (make test-exhaustive builds it): CI runs it, `make test` not
def test_tinygrad_op_tests_slice_same_outcomes():
  """A bounded slice of tinygrad's own test_ops.py against torch: the same outcome for every test, no fallback."""
  rep = compare(["test/test_ops.py"], SLICE, timeout=900)
  assert rep["differ"] == {}, rep["differ"]
  assert rep["tunesvc"]["passed"] >= 6 and rep["stats"]["compiled"] > 0 and rep["stats"]["fallback"] == 0, rep


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
