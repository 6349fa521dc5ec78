"""tinygrad v0.8.0 on tunesvc: every kernel a tinygrad program runs on one of its compiled devices (CLANG, and GPU or
CUDA: tinygrad's OpenCL and CUDA) is converted to a `tunesvc.kernel/1` document, its opts asked of the runtime library
for that device's fingerprint (the local cache, then the service, then the hand-coded schedule; with `submit`, an
untuned kernel is queued for tuning), rendered and compiled by tunesvc (its compile cache), and run on tinygrad's own
buffers with tinygrad's variable values, inside TinyJit too. A kernel the format cannot say, or that fails to convert,
compile or load, runs tinygrad's own code instead, and is counted with the reason.

On a GPU, tinygrad's buffers live in tinygrad's own context (OpenCL's or CUDA's) and its queue orders their copies and
kernels: tunesvc's build (OpenCL program binary, cubin) is loaded by tinygrad's device runtime there, and launched as
tunesvc's launch line says (work-groups, work-items, its argument order).

  from tunesvc.integrations import tinygrad as tunesvc_tinygrad
  tunesvc_tinygrad.enable(url="http://127.0.0.1:8000", submit=True)   # then use tinygrad as usual, with CLANG=1
  print(tunesvc_tinygrad.stats())

`python -m tunesvc.integrations.tinygrad SCRIPT.py ARGS` runs an unmodified script so; see __main__.py and site/."""
from __future__ import annotations
import collections, ctypes, functools, json, os, runpy, sys
from pathlib import Path
from dataclasses import dataclass, field
from typing import Optional
from tinygrad.device import Compiled, CompiledASTRunner, Device, update_stats
from tinygrad.helpers import DEBUG, cpu_time_execution
from tinygrad.shape.symbolic import Variable
from tinygrad.ops import LazyOp
from devices import opencl, registry
from devices.base import Binary, int_arg
from linearizer import ACTION_SPACE_VERSION
from linearizer.ast import KernelAST, KernelValidationError
from linearizer.kernel import Opt, OptError
from linearizer.render_c import OPENCL, launch_sizes
from linearizer.render_gpu import CUDA
from tunesvc import runtime
from tunesvc.client import Client
from tunesvc.integrations.tinygrad.convert import Unsupported, to_kernel

TINYGRAD_DEVICE = {"CPU": "CLANG", "OPENCL": "GPU", "CUDA": "CUDA"}  # a tunesvc backend -> the tinygrad device it takes over
SYMBOL = {"CPU": "kernel", "OPENCL": OPENCL.symbol.format("kernel"), "CUDA": CUDA.symbol.format("kernel")}  # build_kernel's entry point


@dataclass
class Counts:
  compiled: int = 0  # distinct kernels compiled by tunesvc: tuned + hand_coded
  tuned: int = 0  # ... with opts served by the cache or the service
  hand_coded: int = 0  # ... with the hand-coded schedule (untuned, or no service)
  fallback: collections.Counter = field(default_factory=collections.Counter)  # reason -> kernels tinygrad compiled itself
  runs: collections.Counter = field(default_factory=collections.Counter)  # kernel key -> runs through tunesvc


@dataclass
class _State:
  device: str
  client: Optional[Client]
  submit: bool
  search: dict  # the search settings a queued kernel is tuned with (the service's defaults where empty)
  counts: Counts = field(default_factory=Counts)
  kernels: dict[str, KernelAST] = field(default_factory=dict)  # key -> kernel, every kernel tunesvc compiled


_state: Optional[_State] = None

def _enabled() -> _State:
  if _state is None: raise RuntimeError("tunesvc's tinygrad integration is not enabled: call enable() first")
  return _state


class TunesvcRunner(CompiledASTRunner):
  """tinygrad's runner interface (schedule, JIT, stats) over a program tunesvc compiled for the CPU; build() loads it
  with tunesvc's CPU Program (tinygrad's buffers are host memory)."""
  first_run: bool  # CompiledASTRunner's: True until the first call's stats
  vars: list[Variable]  # CompiledASTRunner's: the program's variables, in its argument order here
  def __init__(self, ast: LazyOp, kernel: KernelAST, bufs: list[int], src: str, binary: Binary, how: str, symbol: str, opts: list[Opt],
               **launch):
    super().__init__(ast, f"tunesvc_{how}_{kernel.key[:10]}", src, binary.image, **launch)
    self.name, self.kernel, self.bufs, self.opts, self.counts = symbol, kernel, bufs, opts, _enabled().counts  # name: the entry point build() loads
    by_name = {v.expr: v for v in self.vars}
    self.vars = [by_name[v.name] for v in kernel.vars]  # tinygrad's Variables in the order the program takes them

  def __call__(self, rawbufs, var_vals, wait=False, jit=False, do_update_stats=True) -> Optional[float]:
    # as tinygrad's CLANG calls its own programs: its CPU buffers are ctypes arrays, passed as pointers, and nothing else
    # is made per call (a numpy view per buffer cost more than a small kernel's own time)
    args, fxn = [rawbufs[i]._buf for i in self.bufs] + [int_arg(var_vals[v]) for v in self.vars], self.clprg.fxn
    et = cpu_time_execution(lambda: fxn(*args), enable=wait or DEBUG >= 2)
    self.counts.runs[self.kernel.key] += 1
    if do_update_stats: update_stats(self.display_name, self.op_estimate, self.mem_estimate, var_vals, et, len(rawbufs), jit,
                                     device=rawbufs[0].device, first_run=self.first_run)
    self.first_run = False
    return et


class TunesvcGPURunner(TunesvcRunner):
  """tunesvc's build loaded by tinygrad's device runtime (`build`: its context, where tinygrad's buffers are) and
  launched by tinygrad's CompiledASTRunner with tunesvc's launch: launch_dims is the launch line's at the variables'
  values, vars its argument order (what tinygrad's CUDA graph in a TinyJit reads too)."""
  def __init__(self, ast: LazyOp, kernel: KernelAST, bufs: list[int], src: str, binary: Binary, how: str, symbol: str, opts: list[Opt]):
    assert binary.launch is not None, "a GPU build carries its launch"
    self.launch = binary.launch  # groups symbolic in the variables (a str: tinygrad's JIT sees launch dims that change)
    groups = [int(g) if g.lstrip("-").isdigit() else g for g in self.launch["groups"]]
    super().__init__(ast, kernel, bufs, src, binary, how, symbol, opts, global_size=groups, local_size=list(self.launch["local"]))

  def launch_dims(self, var_vals: dict[Variable, int]) -> tuple[list[int], list[int]]:
    groups, local = launch_sizes(self.launch, [var_vals[v] for v in self.vars])
    return (groups + [1, 1, 1])[:3], (local + [1, 1, 1])[:3]

  def __call__(self, rawbufs, var_vals, wait=False, jit=False, do_update_stats=True) -> Optional[float]:
    self.counts.runs[self.kernel.key] += 1
    return super(TunesvcRunner, self).__call__([rawbufs[i] for i in self.bufs], var_vals, wait, jit, do_update_stats)


def _cpu_program(name: str, image: bytes): return registry.get("CPU").Program(Binary(image), name)

def _fallback(dev: Compiled, ast: LazyOp, reason: str) -> CompiledASTRunner:
  _enabled().counts.fallback[reason] += 1
  if DEBUG >= 1: print(f"tunesvc: tinygrad compiles this kernel itself: {reason}", file=sys.stderr)
  return Compiled.get_runner(dev, ast)

def _get_runner(dev: Compiled, ast: LazyOp) -> CompiledASTRunner:
  """What Compiled.get_runner is while enabled (cached per AST by tinygrad's own lru_cache, as the original is)."""
  st = _enabled()
  try: kernel, bufs = to_kernel(ast)
  except Unsupported as e: return _fallback(dev, ast, str(e))
  except KernelValidationError as e: return _fallback(dev, ast, f"validation: {e.message}")
  try:
    if (opts := runtime.opts_for(kernel, st.device, st.client)) is None and st.submit and st.client: _queue(kernel)
    try: src, binary, applied = runtime.build_kernel(kernel, st.device, opts)
    except OptError:  # served opts this codegen rejects: the hand-coded ones still run it
      src, binary, applied = runtime.build_kernel(kernel, st.device, opts := None)
    how = "hand_coded" if opts is None else "tuned"
    if st.device == "CPU": runner = TunesvcRunner(ast, kernel, bufs, src, binary, how, SYMBOL["CPU"], applied).build(_cpu_program)
    else: runner = TunesvcGPURunner(ast, kernel, bufs, src, binary, how, SYMBOL[st.device], applied).build(dev.runtime)
  except Exception as e:  # a compiler error or anything else: tinygrad's own code runs it, the caller never sees it
    return _fallback(dev, ast, f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
  st.counts.compiled += 1
  setattr(st.counts, how, getattr(st.counts, how) + 1)
  st.kernels[kernel.key] = kernel
  return runner


def _queue(kernel: KernelAST) -> None:
  """Queue an untuned kernel for tuning on exactly this device's fingerprint (a worker on another model of the device
  would find opts this one never looks up); a service that cannot take it costs a warning, never the caller's run."""
  st = _enabled()
  assert st.client is not None, "kernels are queued only with a service"
  dev = registry.get(st.device)
  try: st.client.submit([kernel], dev.fingerprint_hash(dev.fingerprint()), {"action_space_version": ACTION_SPACE_VERSION, **st.search},
                        timeout=st.client.lookup_timeout)
  except Exception as e: print(f"tunesvc: could not queue kernel {kernel.key[:12]} for tuning: {e}", file=sys.stderr)


def enable(url: Optional[str] = None, token: Optional[str] = None, submit: bool = False, device: str = "CPU",
           search: Optional[dict] = None, cache_dir: Optional[str] = None) -> None:
  """Compile tinygrad's kernels for `device` (tunesvc's name, TINYGRAD_DEVICE: CPU is tinygrad's CLANG, OPENCL its GPU,
  CUDA its CUDA) through tunesvc from now on, with opts from the service at `url` (default: TUNESVC_URL's, or none:
  hand-coded) through the local cache at `cache_dir` (default: the user's); with `submit`, kernels the service has no
  opts for are queued for tuning with the `search` settings (e.g. {"budget_s": 30}). Counts restart. ValueError where
  tunesvc cannot drive the device tinygrad's is (absent, or another OpenCL device)."""
  global _state
  if device not in TINYGRAD_DEVICE: raise ValueError(f"tunesvc runs tinygrad's kernels for {sorted(TINYGRAD_DEVICE)}, not {device!r}")
  if device != "CPU": registry.get(device)  # ValueError for a GPU that is not here (a CPU without a compiler: every kernel falls back)
  dev = Device[TINYGRAD_DEVICE[device]]
  if device == "OPENCL" and (ours := opencl.device_id()) != (theirs := ctypes.cast(dev.device_id, ctypes.c_void_p).value):
    raise ValueError(f"tinygrad's GPU device (cl_device_id {theirs:#x}) is not tunesvc's OPENCL device 0 ({ours:#x}): their "
                     "builds and opts would be another device's")
  disable()
  url = url or os.environ.get("TUNESVC_URL")
  _state = _State(device, Client(url, token or os.environ.get("TUNESVC_TOKEN"), cache_dir=cache_dir) if url else None, submit, search or {})
  dev.get_runner = functools.lru_cache(None)(functools.partial(_get_runner, dev))  # the instance's, over the class's

def disable() -> None:
  """tinygrad compiles its own kernels again (runners made while enabled, e.g. inside a TinyJit, stay tunesvc's)."""
  if _state: Device[TINYGRAD_DEVICE[_state.device]].__dict__.pop("get_runner", None)
  if _state and _state.client: _state.client.close()

def stats() -> dict:
  """Distinct kernels compiled by tunesvc (tuned / hand-coded), fallbacks by reason, and kernel runs through tunesvc."""
  c = _state.counts if _state else Counts()
  return {"compiled": c.compiled, "tuned": c.tuned, "hand_coded": c.hand_coded, "fallback": sum(c.fallback.values()),
          "fallback_reasons": dict(c.fallback), "runs": sum(c.runs.values())}

def kernels() -> list[tuple[KernelAST, int]]:
  """Every distinct kernel tunesvc compiled since enable(), with how many times it ran."""
  return [(k, _state.counts.runs[key]) for key, k in _state.kernels.items()] if _state else []


def enable_from_env() -> None:
  """enable() as the environment says: TUNESVC_URL, TUNESVC_TOKEN, TUNESVC_SUBMIT=1, TUNESVC_DEVICE (CPU, OPENCL or CUDA); with
  TUNESVC_TINYGRAD_STATS=PATH the stats are written there as JSON at exit ("-": to stderr)."""
  enable(submit=os.environ.get("TUNESVC_SUBMIT") == "1", device=os.environ.get("TUNESVC_DEVICE", "CPU"))
  if out := os.environ.get("TUNESVC_TINYGRAD_STATS"):
    import atexit
    def write():
      text = json.dumps(stats(), sort_keys=True)
      if out == "-": print(f"tunesvc: {text}", file=sys.stderr)
      else:
        with open(out, "w") as f: f.write(text + "\n")
    atexit.register(write)


def run_program(argv: list[str]) -> None:
  """Run `SCRIPT.py ARGS` (or `-m MODULE ARGS`) here as `python` would, as __main__; a SystemExit(0) or None is its success."""
  if argv[0] == "-m":
    sys.argv = argv[1:]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
  else:
    sys.argv = argv
    sys.path[0] = str(Path(argv[0]).resolve().parent)  # as `python SCRIPT.py` would have it
    runpy.run_path(argv[0], run_name="__main__")

def capture(argv: list[str], model: str) -> list[dict]:
  """Run a tinygrad program with every kernel through tunesvc (hand-coded opts, no service) and return each distinct
  kernel it ran, by key, as a model-file line: {"model", "runs", "kernel": the document}, most-run first."""
  os.environ.pop("TUNESVC_URL", None)
  enable()
  try: run_program(argv)
  except SystemExit as e:
    if e.code not in (None, 0): raise
  finally: disable()
  return [{"model": model, "runs": runs, "kernel": k.to_json()} for k, runs in sorted(kernels(), key=lambda kr: -kr[1])]
