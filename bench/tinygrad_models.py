"""Whole tinygrad 0.8.0 models on this CPU, batch 1 inference, built from tinygrad's own `nn` layers with random weights:
each model's forward captured in a TinyJit per contender, then the captured kernels replayed, contenders interleaved
(A B C D A B C D ...), and each output checked against plain tinygrad CLANG's.

Contenders: tinygrad CLANG BEAM=0 (its default), tinygrad CLANG BEAM=2 (its own search; capture time = its tuning wall
time, with a fresh private beam cache), tunesvc hand-coded (tunesvc.integrations.tinygrad, no service), tunesvc tuned
(every distinct kernel submitted once to `tunesvc serve` on SQLite with local workers; the wall time until every one is
tuned is tunesvc's tuning time; then a run with every kernel's opts served; tunesvc_tuned_all: the same with every kernel
given the whole budget, worth_s 0, the search before it weighed kernels by their hand-coded time x runs), and torch 2.13 CPU eager on the same weights
(a child process in the tinygrad-tests venv, `make tinygrad-tests` builds it) where --torch.

  CLANG=1 .venv/bin/python bench/tinygrad_models.py --models mlp,gpt2,resnet --layers 1 --budget-s 5 [--torch]
"""
from __future__ import annotations
import argparse, json, math, os, re, statistics, subprocess, sys, tempfile, time
os.environ["CLANG"] = "1"  # tinygrad's CPU device, before tinygrad picks its default
os.environ.setdefault("CACHEDB", os.path.join(tempfile.mkdtemp(prefix="tg-beam-"), "cache.db"))  # BEAM=2 searches afresh
import numpy as np
from tinygrad import Tensor
from tinygrad.device import Compiled
from tinygrad.helpers import BEAM
from tinygrad.jit import TinyJit
from tinygrad.nn import BatchNorm2d, Conv2d, Embedding, LayerNorm, Linear
from tinygrad.nn.state import get_state_dict
from tinygrad.shape.symbolic import Variable
from tunesvc.integrations import tinygrad as tsvc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_to_program = Compiled.to_program
def _to_program_with_opts(self, k):  # tinygrad's runner keeps the opts its linearizer applied (BEAM's picks), for the report
  runner = _to_program(self, k)
  runner.opts = list(k.applied_opts)
  return runner
Compiled.to_program = _to_program_with_opts


# ---- models: written as tinygrad's examples write them

class Bottleneck:
  def __init__(self, cin: int, width: int, stride: int):
    self.stride = stride
    self.conv1, self.bn1 = Conv2d(cin, width, 1, bias=False), BatchNorm2d(width)
    self.conv2, self.bn2 = Conv2d(width, width, 3, stride=stride, padding=1, bias=False), BatchNorm2d(width)
    self.conv3, self.bn3 = Conv2d(width, width * 4, 1, bias=False), BatchNorm2d(width * 4)
    self.down = [Conv2d(cin, width * 4, 1, stride=stride, bias=False), BatchNorm2d(width * 4)] if stride != 1 or cin != width * 4 else []
  def __call__(self, x: Tensor) -> Tensor:
    out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu())).relu()
    return (self.bn3(self.conv3(out)) + x.sequential(self.down)).relu()

class ResNet50:
  """ResNet-50's layout (3, 4, 6, 3 bottlenecks); `layers` caps the blocks per stage."""
  def __init__(self, layers: int = 6):
    self.conv1, self.bn1 = Conv2d(3, 64, 7, stride=2, padding=3, bias=False), BatchNorm2d(64)
    self.blocks, cin = [], 64
    for i, (n, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
      for j in range(min(n, layers)):
        self.blocks.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
        cin = width * 4
    self.fc = Linear(cin, 1000)
  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn1(self.conv1(x)).relu().pad2d((1, 1, 1, 1), value=float("-inf")).max_pool2d(3, 2)
    return self.fc(x.sequential(self.blocks).mean((2, 3))).softmax()

class Attention:
  def __init__(self, dim: int, heads: int, max_context: int):
    self.c_attn, self.c_proj, self.heads, self.max_context = Linear(dim, 3 * dim), Linear(dim, dim), heads, max_context
    self.cache_k = self.cache_v = None
  def __call__(self, x: Tensor, start_pos, mask) -> Tensor:
    q, k, v = [t.reshape(x.shape[0], x.shape[1], self.heads, -1) for t in self.c_attn(x).chunk(3, dim=2)]
    if start_pos == 0:  # the prompt: its keys and values fill the cache (padded to the context, as tinygrad's gpt2 does)
      self.cache_k, self.cache_v = (t.pad((None, (0, self.max_context - t.shape[1]), None, None)).contiguous().realize() for t in (k, v))
    else:  # one token at a symbolic position: the cache up to it, then this token
      k = self.cache_k.shrink((None, (0, start_pos), None, None)).cat(k, dim=1)
      v = self.cache_v.shrink((None, (0, start_pos), None, None)).cat(v, dim=1)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return self.c_proj(q.scaled_dot_product_attention(k, v, mask).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))

class Block:
  def __init__(self, dim: int, heads: int, max_context: int):
    self.ln_1, self.attn, self.ln_2 = LayerNorm(dim), Attention(dim, heads, max_context), LayerNorm(dim)
    self.c_fc, self.c_proj = Linear(dim, 4 * dim), Linear(4 * dim, dim)
  def __call__(self, x: Tensor, start_pos, mask) -> Tensor:
    h = x + self.attn(self.ln_1(x), start_pos, mask)
    return h + self.c_proj(self.c_fc(self.ln_2(h)).gelu())

class GPT2:
  """GPT-2 small's layout: 768 wide, 12 heads; `layers` blocks (12 in GPT-2 small)."""
  def __init__(self, layers: int = 12, vocab: int = 50257, dim: int = 768, heads: int = 12, max_context: int = 256):
    self.wte, self.wpe = Embedding(vocab, dim), Embedding(max_context, dim)
    self.h, self.ln_f, self.lm_head = [Block(dim, heads, max_context) for _ in range(layers)], LayerNorm(dim), Linear(dim, vocab, bias=False)
  def __call__(self, tokens: Tensor, start_pos) -> Tensor:
    seqlen = tokens.shape[1]
    pos = Tensor.arange(self.wpe.vocab_size).reshape(1, -1)[:, 0:seqlen] if start_pos == 0 else \
      Tensor.arange(self.wpe.vocab_size).reshape(1, -1).shrink((None, (start_pos, start_pos + 1)))
    x = self.wte(tokens) + self.wpe(pos)
    mask = Tensor.full((1, 1, seqlen, seqlen), float("-inf")).triu(1) if seqlen > 1 else None
    for b in self.h: x = b(x, start_pos, mask)
    return self.lm_head(self.ln_f(x))[:, -1, :].softmax()

class MLP:
  def __init__(self, layers: int = 4, dim: int = 2048):
    self.fcs = [Linear(dim, dim) for _ in range(layers)]
  def __call__(self, x: Tensor) -> Tensor: return x.sequential([lambda t, f=f: f(t).relu() for f in self.fcs]).softmax()


def model_steps(name: str, layers: int, size: int, vocab: int, rng):
  """(model, [(step name, a function returning the realized output of one step, its arguments)], the inputs by name): one
  inference; a symbolic position is an argument, so TinyJit replays the step at any position."""
  if name == "resnet":
    m, x = ResNet50(layers), Tensor(rng.standard_normal((1, 3, size, size)).astype(np.float32))
    return m, [("forward", lambda: m(x).realize(), ())], {"x": x.numpy()}
  if name == "mlp":
    m, x = MLP(layers), Tensor(rng.standard_normal((1, 2048)).astype(np.float32))
    return m, [("forward", lambda: m(x).realize(), ())], {"x": x.numpy()}
  if name == "gpt2":
    m = GPT2(layers, vocab)
    prompt, nxt = Tensor(rng.integers(0, vocab, (1, 128)).astype(np.int32)), Tensor(rng.integers(0, vocab, (1, 1)).astype(np.int32))
    pos = Variable("start_pos", 1, m.wpe.vocab_size - 1).bind(128)
    return m, [("prompt", lambda: m(prompt, 0).realize(), ()), ("decode", lambda p: m(nxt, p).realize(), (pos,))], \
      {"prompt": prompt.numpy(), "next": nxt.numpy()}
  raise SystemExit(f"unknown model {name!r}: resnet, gpt2, mlp")


def randomize(m, rng) -> None:
  """Random weights (never the init's zeros and ones), BatchNorm statistics included; realized on the CPU. A weight's scale
  is 1/sqrt(its fan-in, every axis but the first: a conv's input channels x window), so activations stay near 1 through
  the layers and the output is no saturated softmax whose comparison says nothing (a conv scaled by its window's width
  alone blew ResNet-50's up to a one-hot output at 224x224)."""
  for k, t in get_state_dict(m).items():
    if k.endswith("num_batches_tracked"): continue
    scale = 1.0 if "running_var" in k else 1 / np.sqrt(math.prod(t.shape[1:])) if len(t.shape) > 1 else 0.1
    val = np.abs(rng.standard_normal(t.shape)) + 0.5 if "running_var" in k else rng.standard_normal(t.shape) * scale
    t.assign(Tensor(val.astype(np.float32))).realize()


# ---- contenders

def jitted(steps, mode: str, url=None):
  """Capture each step in a TinyJit under a contender's mode; (jits, outputs, capture seconds)."""
  Compiled.get_runner.cache_clear()  # each contender compiles (or searches) its own kernels
  tsvc.disable()
  BEAM.value = 2 if mode == "beam2" else 0
  if mode.startswith("tunesvc"): tsvc.enable(url=url if mode.startswith("tunesvc_tuned") else None, cache_dir=tempfile.mkdtemp(prefix="tsvc-cache-"))
  st = time.perf_counter()
  jits, outs = [], []
  for _, fn, fargs in steps:
    j = TinyJit(fn)
    for _ in range(3): out = j(*fargs)  # run, capture, replay
    jits.append((j, fargs))
    outs.append(out.numpy().copy())
  took = time.perf_counter() - st
  BEAM.value = 0
  if mode.startswith("tunesvc"): counts = tsvc.stats()
  else: counts = None
  tsvc.disable()
  return jits, outs, took, counts

def replay(jits) -> float:
  st = time.perf_counter()
  for j, fargs in jits: j(*fargs)
  return time.perf_counter() - st

def opts_text(opts) -> str:
  """A schedule, tunesvc's Opts or tinygrad's, as "UPCAST 1 4, THREAD 0 2"."""
  return ", ".join(" ".join(str(x) for x in (getattr(o.op, "name", o.op), o.axis, o.amt) if x is not None) for o in opts)

def kernel_times(jits, reps: int) -> list[tuple[str, float, str]]:
  """(runner name, the least seconds of `reps` synchronous calls, its opts) of each captured kernel, in schedule order
  (the same order for every contender: one schedule)."""
  out = []
  for j, fargs in jits:
    var_vals = dict(v.unbind() for v in fargs)
    for ji in j.jit_cache:
      if ji.rawbufs[0] is None: continue  # an input slot the JIT fills per call: not a kernel of ours to time alone
      name = re.sub(r"\x1b\[[0-9;]*m", "", getattr(ji.prg, "display_name", type(ji.prg).__name__))  # tinygrad colours its names
      out.append((name, min(ji.prg(ji.rawbufs, var_vals, wait=True) or 0.0 for _ in range(reps)), opts_text(getattr(ji.prg, "opts", ()))))
  return out

def losses(per: dict, base: str, slack: float = 1.05) -> dict:
  """Per tunesvc contender, the kernels slower than `base`'s by more than `slack` (and 2 us, a call's noise):
  {contender: {"kernels": n, "slower": [(schedule index, base's name, base ms, its ms)]}}."""
  out = {}
  for mode, times in per.items():
    if not mode.startswith("tunesvc"): continue
    slow = [(i, b[0], round(b[1] * 1e3, 4), round(t[1] * 1e3, 4)) for i, (b, t) in enumerate(zip(per[base], times))
            if t[1] > b[1] * slack + 2e-6]
    out[mode] = {"kernels": len(times), "slower": slow}
  return out


class TorchChild:
  """torch 2.13 eager on the same weights and inputs, in the tinygrad-tests venv (bench/_torch_models.py)."""
  PY = os.path.join(ROOT, ".venv-tinygrad-tests", "bin", "python")
  def __init__(self, name: str, layers: int, m, inputs: dict):
    self.npz = os.path.join(tempfile.mkdtemp(prefix="tg-torch-"), "w.npz")
    arrays = {k: t.numpy() for k, t in get_state_dict(m).items() if "cache_" not in k}
    arrays.update({f"blocks.{i}.stride": np.array(b.stride) for i, b in enumerate(getattr(m, "blocks", []))}, **inputs)
    np.savez(self.npz, **arrays)
    self.p = subprocess.Popen([self.PY, os.path.join(ROOT, "bench", "_torch_models.py"), name, str(layers), self.npz], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": str(len(os.sched_getaffinity(0)))})
  def run(self) -> float:
    self.p.stdin.write("run\n")
    self.p.stdin.flush()
    return float(self.p.stdout.readline())
  def outputs(self) -> list[np.ndarray]:
    self.p.stdin.write(f"out {self.npz}.out.npz\n")
    self.p.stdin.flush()
    self.p.wait(60)
    with np.load(f"{self.npz}.out.npz") as z: return [z[f"arr_{i}"] for i in range(len(z.files))]


def tune_on_service(kernels, runs, budget_s: float, workers: int, search: dict) -> tuple[str, float, object, int, dict]:
  """Serve on SQLite with local workers, submit every distinct kernel once (with its runs: what its search is worth) and
  `search`'s settings besides the budget and beam 2, wait until no job (search or confirmation) is
  queued or running: (url, seconds, svc, kernels served tuned, where the time went). A job can fail (e.g. the worker finds
  the machine too busy to confirm a time): that kernel then runs hand-coded."""
  from devices import registry
  from tunesvc.client import Client
  from tunesvc.config import Settings
  from tunesvc.serve import Service
  svc = Service(Settings(database_url=f"sqlite:///{tempfile.mkdtemp(prefix='tsvc-db-')}/bench.db"), port=0, workers=workers, devices=["CPU"]).start()
  dev = registry.get("CPU")
  fp = dev.fingerprint_hash(dev.fingerprint())
  st = time.perf_counter()
  with Client(svc.url) as c:
    c.submit(kernels, fp, {"budget_s": budget_s, "beam": 2, **search}, model="bench", runs=runs)
    while (n := c.http.get("/v1/jobs", params={"limit": 1}).json()["counts"]).get("queued") or n.get("running"): time.sleep(1)
    took, served = time.perf_counter() - st, sum(x is not None for x in c.lookup(fp, [k.key for k in kernels]))
    return svc.url, took, svc, served, tuning_breakdown(c)


def tuning_breakdown(c) -> dict:
  """Where the service's tuning time went: per kind of job (search, confirmation) its count, failures and seconds in a
  worker's hands (the last attempt's), and how often a worker gave a job back as busy (the machine too contended to time)."""
  rows: list[dict] = []
  offset: int | None = 0
  while offset is not None:
    page = c.http.get("/v1/jobs", params={"limit": 500, "offset": offset}).json()
    rows, offset = rows + page["jobs"], page["next_offset"]
  out: dict = {kind: {"jobs": len(js), "failed": sum(j["state"] == "failed" for j in js),
                      "worker_s": round(sum(j["finished"] - j["started"] for j in js if j["finished"] and j["started"]), 1)}
               for kind in ("tune", "confirm") for js in [[j for j in rows if j["kind"] == kind]]}
  out["busy_give_backs"] = sum("device busy" in line for j in rows for line in j["error"].splitlines())
  return out


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--models", default="mlp,gpt2,resnet")
  ap.add_argument("--layers", type=int, default=None, help="cap: GPT-2 blocks, ResNet bottlenecks per stage, MLP layers")
  ap.add_argument("--size", type=int, default=224, help="ResNet input size")
  ap.add_argument("--vocab", type=int, default=50257, help="GPT-2 vocabulary (tinygrad 0.8.0's Embedding is a one-hot matmul over it)")
  ap.add_argument("--torch", action="store_true", help="torch 2.13 eager too (needs `make tinygrad-tests`)")
  ap.add_argument("--budget-s", type=float, default=10.0, help="tunesvc search seconds per kernel")
  ap.add_argument("--workers", type=int, default=1, help="tunesvc local workers")
  ap.add_argument("--search", default="{}", help="more of tunesvc's search settings, as JSON (e.g. {\"worth_s\": 0}: every kernel the whole budget)")
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--kernel-reps", type=int, default=5, help="calls per kernel in the per-kernel times (the least counts)")
  ap.add_argument("--contenders", default="clang,beam2,tunesvc_hand,tunesvc_tuned")
  ap.add_argument("--json", help="write the results here too")
  ap.add_argument("--dump", metavar="DIR", help="write each kernel's document to DIR/MODEL/INDEX_NAME.json (with tunesvc_hand)")
  args = ap.parse_args()
  contenders = args.contenders.split(",")
  report = {"command": " ".join(sys.argv), "loadavg_before": open("/proc/loadavg").read().split()[:3], "models": {}}
  for name in args.models.split(","):
    rng = np.random.default_rng(0)
    layers = args.layers or {"resnet": 6, "gpt2": 12, "mlp": 4}[name]
    m, steps, inputs = model_steps(name, layers, args.size, args.vocab, rng)
    randomize(m, rng)
    torch_child = TorchChild(name, layers, m, inputs) if args.torch else None
    res: dict = {"layers": layers, "contenders": {}}
    runs, svc = {}, None
    for mode in contenders:
      url = None
      if mode.startswith("tunesvc_tuned"):
        if "tunesvc_hand" not in runs: raise SystemExit(f"{mode} needs tunesvc_hand before it (its kernels are the ones tuned)")
        ks, kruns = [k for k, _ in tsvc.kernels()], [n for _, n in tsvc.kernels()]
        search = {**json.loads(args.search), **({"worth_s": 0} if mode == "tunesvc_tuned_all" else {})}
        url, res[f"{mode}_tuning_s"], svc, res[f"{mode}_served"], res[f"{mode}_tuning"] = \
          tune_on_service(ks, kruns, args.budget_s, args.workers, search)
        print(f"{name} {mode}: tuned {len(ks)} kernels in {res[f'{mode}_tuning_s']:.1f} s, {res[f'{mode}_served']} served: "
              f"{res[f'{mode}_tuning']}", flush=True)
        res["distinct_kernels"] = len(ks)
      jits, outs, took, counts = jitted(steps, mode, url)
      runs[mode] = jits
      if svc:  # its kernels are compiled: the service and its workers (polling, heartbeats) leave the cores to the timings
        svc.stop()
        svc = None
      ref = res.setdefault("_ref", outs)
      err = max(float(np.max(np.abs(o - r))) for o, r in zip(outs, ref))
      res["contenders"][mode] = {"capture_s": round(took, 2), "max_abs_err_vs_clang": err, "stats": counts, "times": []}
      print(f"{name} {mode}: captured in {took:.1f} s, max |err| vs CLANG {err:.2e}{'' if counts is None else f', {counts}'}", flush=True)
    if torch_child: res["contenders"]["torch"] = {"times": []}
    for _ in range(args.rounds):  # interleaved: every contender once a round
      for mode, jits in runs.items(): res["contenders"][mode]["times"].append(replay(jits))
      if torch_child: res["contenders"]["torch"]["times"].append(torch_child.run())
    if torch_child:
      res["contenders"]["torch"]["max_abs_err_vs_clang"] = max(float(np.max(np.abs(o - r))) for o, r in zip(torch_child.outputs(), res["_ref"]))
      runs["torch"] = []
    base = statistics.median(res["contenders"][contenders[0]]["times"])
    for mode in runs:
      c = res["contenders"][mode]
      c["median_s"], c["min_s"] = statistics.median(c["times"]), min(c["times"])  # min too: threads suffer most from a busy machine
      c["vs_" + contenders[0]] = round(base / c["median_s"], 2)
      print(f"{name} {mode}: median {c['median_s'] * 1e3:.1f} ms ({c['vs_' + contenders[0]]}x {contenders[0]}), "
            f"min {c['min_s'] * 1e3:.1f} ms", flush=True)
    if "beam2" in runs: res["beam2_tuning_s"] = res["contenders"]["beam2"]["capture_s"]
    per = {mode: kernel_times(jits, args.kernel_reps) for mode, jits in runs.items() if mode != "torch"}
    res["slower_kernels_vs_" + contenders[0]] = losses(per, contenders[0])
    res["kernel_sum_ms"] = {mode: round(sum(t[1] for t in times) * 1e3, 3) for mode, times in per.items()}  # what noise cannot add to
    print(f"{name}: sum of each kernel's least time (ms): {res['kernel_sum_ms']}", flush=True)
    for mode, lost in res["slower_kernels_vs_" + contenders[0]].items():
      print(f"{name} {mode}: {len(lost['slower'])} of {lost['kernels']} kernels slower than {contenders[0]}", flush=True)
    first = per[contenders[0]]  # the top 10 by its time, each side's time there
    top = sorted(range(len(first)), key=lambda i: -first[i][1])[:10]
    res["top10"] = [{mode: (f"{per[mode][i][0]} {per[mode][i][1] * 1e3:.3f} ms" if i < len(per[mode]) else "-") for mode in per} for i in top]
    res["kernels"] = [{mode: (n, round(t * 1e3, 4), o) for mode in per for n, t, o in [per[mode][i]]} for i in range(len(first))]  # name, ms, opts
    if args.dump and "tunesvc_hand" in runs:  # each kernel's document, for `tunesvc kernel run FILE --opts ...`
      os.makedirs(d := os.path.join(args.dump, name), exist_ok=True)
      for i, ji in enumerate(ji for j, _ in runs["tunesvc_hand"] for ji in j.jit_cache if ji.rawbufs[0] is not None):
        with open(os.path.join(d, f"{i:02d}_{first[i][0]}.json"), "w") as f: json.dump(ji.prg.kernel.to_json(), f)
    res.pop("_ref")
    report["models"][name] = res
  report["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
  print(json.dumps(report, indent=1, default=str))
  if args.json:
    with open(args.json, "w") as f: json.dump(report, f, indent=1, default=str)
  return 0

if __name__ == "__main__": sys.exit(main())
