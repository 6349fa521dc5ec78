"""The `tunesvc` command line."""
from __future__ import annotations
import argparse, contextlib, dataclasses, gzip, hashlib, importlib.metadata, json, os, signal, statistics, sys, time
from typing import TYPE_CHECKING, Callable, Iterator, NoReturn, Optional
import numpy as np
from devices import registry
from linearizer.ast import KernelAST, KernelValidationError, LazyOp, loads
from linearizer.cachedir import ResultStore
from linearizer.compare import compare
from linearizer.kernel import Opt, OptError
from linearizer.symbolic import render
from linearizer import reference
from tunesvc.runtime import compile_kernel
from tunesvc.states import ENDED, PENDING, JobState
if TYPE_CHECKING:  # imported where used: httpx costs a command that needs no server
  from tunesvc.client import Client
  from tunesvc.serve import Service


def read_documents(path: str) -> Iterator[tuple[str, str]]:
  """(label, JSON text) per document: a .json file holds one, .jsonl and .jsonl.gz one per line."""
  if path.endswith(".json"):
    with open(path, encoding="utf-8") as f: yield path, f.read()
    return
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rt", encoding="utf-8") as f:
    for i, line in enumerate(f, 1):
      if line.strip(): yield f"{path}:{i}", line


def _name_of(text: str, label: str) -> str:
  try:
    name = json.loads(text).get("name")
    return name if isinstance(name, str) else label
  except Exception:  # the document is broken; the label still names it
    return label


def cmd_check(args) -> int:
  ok = True
  for path in args.files:
    for label, text in read_documents(path):
      try:
        k = loads(text)
        rec = {"ok": True, "source": label, "name": k.name or label, "key": k.key}
      except KernelValidationError as e:
        ok = False
        rec = {"ok": False, "source": label, "name": _name_of(text, label), "path": e.path, "message": e.message}
      if args.json: print(json.dumps(rec))
      elif rec["ok"]: print(f"OK {rec['key']} {rec['name']}")
      else: print(f"ERROR {rec['name']} {rec['path']}: {rec['message']}")
  return 0 if ok else 1


def _load_file(path: str) -> Iterator[KernelAST]:
  for label, text in read_documents(path):
    try: yield loads(text)
    except KernelValidationError as e: raise SystemExit(f"ERROR {_name_of(text, label)} {e.path}: {e.message}") from None


def _fmt_shape(shape) -> str: return "(" + ", ".join(render(s) for s in shape) + ")"

def _tree(n: LazyOp, depth: int, seen: dict[LazyOp, int], out: list[str]) -> None:
  pad = "  " * depth
  if n in seen and n.src:
    out.append(f"{pad}{n.op} (shared, see #{seen[n]})")
    return
  seen.setdefault(n, len(seen) + 1)
  a, extra = n.arg, ""
  if n.op in ("LOAD", "STORE"): extra = f" buf{a.buf}"
  elif n.op == "CONST": extra = f" {a.val!r}"
  elif n.op == "CAST": extra = " bitcast" if a.bitcast else ""
  elif n.op == "REDUCE": extra = f" {a.fn} axis={list(a.axis)}"
  out.append(f"{pad}#{seen[n]} {n.op}{extra} {n.dtype.name} {_fmt_shape(n.shape)}")
  if n.op in ("LOAD", "STORE", "CONST"):
    for v in a.st.views:
      mask = "" if v.mask is None else " mask=" + str([[render(lo), render(hi)] for lo, hi in v.mask]).replace("'", "")
      out.append(f"{pad}    view {_fmt_shape(v.shape)} strides={_fmt_shape(v.strides)} offset={render(v.offset)}{mask}")
  for s in n.src: _tree(s, depth + 1, seen, out)


def cmd_show(args) -> int:
  for k in _load_file(args.file):
    vv = k.var_vals()
    at = f" at {', '.join(f'{n}={x}' for n, x in vv.items())}" if vv else ""
    print(f"kernel {k.name or '-'}  key {k.key}")
    if k.vars: print("vars " + ", ".join(f"{v.name} in [{v.min}, {v.max}]" for v in k.vars))
    print(f"full shape {_fmt_shape(k.full_shape)} -> output {_fmt_shape(k.output_shape)}")
    print(f"FLOPs {k.flops(vv):,}  bytes {k.bytes(vv):,}{at}")
    print("buffers " + ", ".join(f"buf{b.buf} {b.dtype.name}[{n:,}]" for b, n in zip(k.buffers, k.buffer_sizes(vv))))
    lines: list[str] = []
    _tree(k.ast, 0, {}, lines)
    print("\n".join(lines) + "\n")
  return 0


def _parse_vars(items: Optional[list[str]]) -> dict[str, int]:
  out = {}
  for it in items or []:
    name, sep, val = it.partition("=")
    try: out[name] = int(val)
    except ValueError: sep = ""
    if not sep: raise SystemExit(f"--var expects NAME=INT, got {it!r}")
  return out


def _fail(msg: str) -> NoReturn:
  print(msg, file=sys.stderr)
  raise SystemExit(2)

def _parse_opts(text: str) -> list[Opt]:
  try: opts = json.loads(text)
  except ValueError as e: _fail(f"ERROR --opts: not valid JSON: {e}")
  if not isinstance(opts, list): _fail(f'ERROR --opts: expected a JSON list of opts like [{{"op":"UPCAST","axis":0,"amt":4}}], got {text[:80]}')
  try: return [Opt.from_json(o) for o in opts]
  except OptError as e: _fail(f"ERROR --opts: {e}")

def _summary(out: np.ndarray) -> str:
  return f"checksum {hashlib.sha256(out.tobytes()).hexdigest()[:16]} sum {float(out.astype('float64').sum()):.6g}"

def duration(s: float) -> str:
  """A kernel's time: in ms, or in us under a millisecond, where "0.000 ms" would hide a kernel of under a microsecond."""
  return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.3f} us"

RUNS, RUN_BUDGET = 5, 2.0  # the median of up to RUNS timed runs, fewer once they took RUN_BUDGET seconds

def _run_on_device(args, k: KernelAST, name: str, vv: dict[str, int], opts: Optional[list[Opt]]) -> tuple[str, bool]:
  """(what to print after the name, whether it matched or was not checked) for k run on args.device."""
  try: dev = registry.get(args.device)
  except ValueError as e: _fail(f"ERROR --device: {e}")
  try: src, prog, opts = compile_kernel(k, args.device, opts)
  except (OptError, dev.CompileError) as e: _fail(f"ERROR {name}: {e}")
  if args.print_source: print(src)
  bufs = reference.random_buffers(k, vv, seed=args.seed)
  want = [b.copy() for b in bufs] if args.check else []
  times: list[float] = []
  while len(times) < RUNS and sum(times) < RUN_BUDGET: times.append(prog.time(*bufs, var_vals=[vv[v.name] for v in k.vars]))
  line = f"{_summary(bufs[0])}  {args.device} {duration(statistics.median(times))} (median of {len(times)})  " \
         f"opts {json.dumps([o.to_json() for o in opts], separators=(',', ':'))}"
  if not args.check: return line, True
  reference.run(k, want, vv)
  msg = compare(k, bufs, want, vv)
  return line + ("  MATCH" if msg is None else f"  MISMATCH: {msg}"), msg is None

def cmd_run(args) -> int:
  var_args = _parse_vars(args.var)
  if args.device is None and (args.opts is not None or args.hand_coded or args.no_opts or args.check or args.print_source):
    _fail("ERROR --opts, --hand-coded, --no-opts, --check and --print-source need --device")
  opts = [] if args.no_opts else None if args.opts is None else _parse_opts(args.opts)  # None: the hand-coded ones
  ok = True
  for path in args.files:
    for k in _load_file(path):
      try: vv = k.var_vals({**k.var_vals(), **{n: x for n, x in var_args.items() if n in {v.name for v in k.vars}}})
      except ValueError as e: raise SystemExit(f"ERROR {k.name}: {e}") from None
      kr = k.rebased()  # allocate only the window of each buffer the kernel reaches
      at = f" ({', '.join(f'{n}={x}' for n, x in vv.items())})" if vv else ""
      if args.device is not None:
        line, matched = _run_on_device(args, kr, k.name or path, vv, opts)
        ok &= matched
        print(f"{k.name or path}{at}: {line}")
        continue
      bufs = reference.random_buffers(kr, vv, seed=args.seed)
      t = time.perf_counter()
      reference.run(kr, bufs, vv)
      dt = time.perf_counter() - t
      print(f"{k.name or path}{at}: {_summary(bufs[0])}  reference {dt * 1e3:.1f} ms")
  return 0 if ok else 1


def rate(flops: int, nbytes: int, seconds: float) -> str:
  """GFLOP/s for compute-bound kernels (more FLOPs than bytes), else GB/s."""
  return f"{flops / seconds / 1e9:.1f} GFLOP/s" if flops >= nbytes else f"{nbytes / seconds / 1e9:.1f} GB/s"

def opts_text(opts: list[dict]) -> str: return " ".join(f"{o['op']}{'' if o['axis'] is None else o['axis']}:{o['amt']}" for o in opts) or "-"

def print_table(table) -> None:
  """A rich table on stdout that never loses a cell: on a terminal the opts column folds onto more lines; piped (where rich
  would assume 80 columns and cut), every row is as wide as it needs."""
  from rich.console import Console
  for c in table.columns:
    if c.header == "opts": c.overflow = "fold"
  out = Console()
  (out if out.is_terminal else Console(width=100_000)).print(table)

class TuneProgress:
  """The live line of `tune` on stderr: rich's spinner on a terminal; elsewhere (a log, a pipe) a plain line when a kernel
  starts and at most every LOG_EVERY_S while it is searched."""
  LOG_EVERY_S = 5.0

  def __init__(self):
    from rich.console import Console
    self.err = Console(stderr=True)

  @contextlib.contextmanager
  def kernel(self, name: str, settings) -> Iterator[Callable[[int, Optional[float]], None]]:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    t0, last = time.monotonic(), [0.0]
    what = lambda n, best: f"{name}: {n} candidates, best {'-' if best is None else duration(best)}"
    if self.err.is_terminal:
      with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=self.err, transient=True) as bar:
        task = bar.add_task(f"{name}: computing the reference output, compiling the first candidates")
        yield lambda n, best: bar.update(task, description=what(n, best))
      return
    budget = "" if settings.budget_s is None else f", at most {settings.budget_s:g} s"
    print(f"tuning {name}: beam {settings.strategy.beam}{budget}", file=sys.stderr, flush=True)
    def log(n: int, best: Optional[float]) -> None:
      if (now := time.monotonic()) - last[0] >= self.LOG_EVERY_S:
        last[0] = now
        print(f"  {what(n, best)}, {now - t0:.0f} s", file=sys.stderr, flush=True)
    yield log

def _strategy_flags(args) -> dict:
  """--strategy and --measure-top where given (else the settings' defaults)."""
  return {k: v for k, v in (("strategy", args.strategy), ("measure_top", args.measure_top)) if v is not None}

def _strategy_args(p) -> None:
  p.add_argument("--strategy", choices=["beam", "model"], help="beam: measure every child of the beam (default); model: only those a cost model "
                 "trained on the search's own measurements ranks fastest")
  p.add_argument("--measure-top", type=int, help="with --strategy model: children measured a round")

def out_of_bounds(settings: dict) -> Optional[tuple[str, str]]:
  """(name, why) of the first setting outside the bounds a job's would be held to (search/settings.py), or None."""
  from search.settings import JOB_FIELDS
  tests = {"gt": (float.__gt__, "more than"), "ge": (float.__ge__, "at least"), "lt": (float.__lt__, "less than"), "le": (float.__le__, "at most")}
  for name, value in settings.items():
    for bound, limit in JOB_FIELDS.get(name, (None, None, {"bounds": {}}))[2]["bounds"].items():
      if not tests[bound][0](float(value), float(limit)): return name, f"{value} is not {tests[bound][1]} {limit}"
  return None

def cmd_tune(args) -> int:
  from rich.table import Table
  from linearizer import ACTION_SPACE_VERSION
  from search.cache import ResultCache
  from search.builder import RenderBug
  from search.settings import SearchSettings
  from search.tune import DeviceBusy, SearchError, tune
  try: dev = registry.get(args.device)
  except ValueError as e: _fail(f"ERROR --device: {e}")
  given = {"beam": args.beam, "budget_s": args.budget_s, "budget_candidates": args.budget_candidates, "seed": args.seed,
           "min_time_s": args.min_time_s, "final_rounds": args.final_rounds, **_strategy_flags(args)}
  given = {k: v for k, v in given.items() if v is not None}
  if bad := out_of_bounds(given): _fail(f"ERROR --{bad[0].replace('_', '-')}: {bad[1]}")
  settings = SearchSettings.from_json(given)
  fp_hash = dev.fingerprint_hash(dev.fingerprint())
  cache = ResultCache()
  progress = TuneProgress()
  table = Table("kernel", "baseline", "best", "rate", "speedup", "candidates", "failed", "search", "opts", title=f"tuned on {args.device}")
  ok = True
  for path in args.files:
    for k in _load_file(path):
      name = k.name or path
      r = None if args.no_cache else cache.get(k.key, fp_hash, ACTION_SPACE_VERSION)
      cached = r is not None
      if r is None:
        with progress.kernel(name, settings) as show:
          warm, alike = cache.winners_elsewhere(k.key, fp_hash, ACTION_SPACE_VERSION), cache.alike(k, fp_hash, ACTION_SPACE_VERSION)
          try: r = tune(k, args.device, settings, progress=show, warm=warm, alike=alike)
          except (SearchError, RenderBug, DeviceBusy) as e:
            ok, why = False, f"device busy: {e}" if isinstance(e, DeviceBusy) else str(e)
            failed = {"kernel_key": k.key, "kernel_name": name, "device": args.device, "error": why}
            print(json.dumps(failed) if args.json else f"FAILED {name}: {why}")
            continue
        cache.put(r, k)
      if args.json:
        print(json.dumps({"kernel_key": r.kernel_key, "kernel_name": name, "device": r.device, "fingerprint": r.fingerprint_hash,
                          "action_space_version": r.action_space_version, "baseline_s": r.baseline_s, "best_s": r.best_s,
                          "best_opts": r.best_opts, "speedup": r.speedup, "speedup_spread": list(r.speedup_spread),
                          "candidates": len(r.candidates), "failed": r.failed, "search_s": r.search_s, "verified": r.verified, "cached": cached,
                          "conditions": r.conditions}))
      else:
        lo, hi = r.speedup_spread
        busy = " busy" if r.conditions.get("busy") else ""  # measured while the rest of the machine contended the device
        table.add_row(name, duration(r.baseline_s), duration(r.best_s), rate(r.flops, r.bytes, r.best_s),
                      f"{r.speedup:.2f}x ({lo:.2f}-{hi:.2f}){busy}",
                      str(len(r.candidates)), str(r.failed), "cached" if cached else f"{r.search_s:.1f} s", opts_text(r.best_opts))
  if not args.json: print_table(table)
  return 0 if ok else 1


# --- a tinygrad model: capture its kernels, and tune them on a service with progress over the model

def cmd_capture(args) -> int:
  from tunesvc.integrations.tinygrad import capture, stats
  prog = args.program
  if len(prog) >= 2 and prog[-2] == "--out": args.out, prog = prog[-1], prog[:-2]  # the form `capture SCRIPT.py ARGS --out FILE`
  if not prog or not args.out: _fail("usage: tunesvc capture [--model NAME] --out model.jsonl SCRIPT.py [ARGS]")
  model = args.model or os.path.splitext(os.path.basename(prog[1] if prog[0] == "-m" else prog[0]))[0]
  lines = capture(prog, model)
  with open(args.out, "w", encoding="utf-8") as f: f.writelines(json.dumps(line) + "\n" for line in lines)
  s = stats()
  print(f"{len(lines)} distinct kernels of {model} ({sum(x['runs'] for x in lines)} runs) -> {args.out}" +
        (f"; {s['fallback']} kernels tunesvc cannot take (not captured): {s['fallback_reasons']}" if s["fallback"] else ""), file=sys.stderr)
  return 0

def _model_files(paths: list[str]) -> Iterator[tuple[Optional[str], dict, int]]:
  """(model or None, document, runs) per line of model files (`tunesvc capture`'s) or per kernel document."""
  for path in paths:
    for label, text in read_documents(path):
      try: doc = json.loads(text)
      except ValueError as e: _fail(f"ERROR {label}: not JSON: {e}")
      if isinstance(doc, dict) and "kernel" in doc: yield doc.get("model"), doc["kernel"], int(doc.get("runs", 1))
      else: yield None, doc, 1

def cmd_tune_remote(args) -> int:
  """Submit every kernel to the service, grouped by model, and follow the jobs: done / running / queued / failed, ETA."""
  import httpx
  from tunesvc.client import Client, ServiceError
  settings = {"beam": args.beam, "budget_s": args.budget_s, **({"budget_candidates": args.budget_candidates} if args.budget_candidates else {}),
              **_strategy_flags(args)}
  groups: dict[Optional[str], list[tuple[dict, int]]] = {}
  for model, doc, runs in _model_files(args.files): groups.setdefault(model, []).append((doc, runs))
  jobs: dict[int, str] = {}  # job id -> state
  with Client(args.server, args.token or os.environ.get("TUNESVC_TOKEN")) as c:
    try:
      for model, items in groups.items():
        for i in range(0, len(items), 1000):  # the API takes 1,000 kernels a request
          chunk = items[i:i + 1000]
          got = c.submit([d for d, _ in chunk], args.device, settings, model=model, runs=[r for _, r in chunk] if model else None)
          jobs.update({j["job_id"]: j["state"] for j in got})
    except (ServiceError, httpx.HTTPError) as e: _fail(f"ERROR {args.server}: {e}")
    names = ", ".join(m or "(kernels)" for m in groups)
    start, last = time.monotonic(), 0.0
    while True:
      counts = {s: sum(v == s for v in jobs.values()) for s in JobState}
      finished, elapsed = counts[JobState.DONE] + counts[JobState.FAILED], time.monotonic() - start
      left = len(jobs) - finished
      eta = f", about {left * elapsed / finished:.0f} s left" if finished and left and elapsed > 1 else ""
      if not left or args.no_wait or time.monotonic() - last >= 10:
        print(f"{names}: {counts[JobState.DONE]}/{len(jobs)} done, {counts[JobState.RUNNING]} running, {counts[JobState.QUEUED]} queued, "
              f"{counts[JobState.FAILED]} failed{eta}", flush=True)
        last = time.monotonic()
      if not left or args.no_wait: return 1 if counts[JobState.FAILED] else 0
      time.sleep(2)
      for jid, state in jobs.items():
        if state in PENDING: jobs[jid] = c.job(jid)["state"]


def cmd_cost_model_train(args) -> int:
  """Every search the store keeps of this checkout's codegen and action-space version, each measured candidate lowered
  under its device's options into one prior per device family (search/prior.py), kept in the store for workers to fetch
  for model-strategy jobs (a worker fits its model on it: the rows travel, not a model of this LightGBM's version)."""
  from collections import Counter
  from linearizer import ACTION_SPACE_VERSION, CODEGEN_VERSION
  from linearizer.ast import load
  from linearizer.options import LinearizerOptions
  from search.prior import build, family
  from search.result import SearchResult
  from search.similar import Tuned
  from tunesvc.store import Store, cost_models
  st = Store(_service_settings(args).database_url)
  families: dict[str, dict[str, tuple[LinearizerOptions, list[Tuned]]]] = {}  # family -> options (JSON) -> (options, searches)
  skipped: Counter[str] = Counter()
  for doc, fp, options, result in cost_models.searches(st):
    r = SearchResult.from_json(result)
    if fp.get("codegen") != CODEGEN_VERSION: skipped[f"code of another CODEGEN_VERSION than {CODEGEN_VERSION}"] += 1
    elif r.action_space_version != ACTION_SPACE_VERSION: skipped[f"another ACTION_SPACE_VERSION than {ACTION_SPACE_VERSION}"] += 1
    else:
      try: ast = load(doc)
      except KernelValidationError:
        skipped["a kernel document that no longer loads"] += 1
        continue
      o = LinearizerOptions.from_json(options)
      families.setdefault(family(o), {}).setdefault(json.dumps(options, sort_keys=True), (o, []))[1].append(Tuned(ast, r))
  from rich.table import Table
  table = Table("family", "searches", "kernels", "candidates", title="cost models trained from the store")
  for fam, by_options in sorted(families.items()):
    searches = list(by_options.values())
    n = sum(len(t) for _, t in searches)
    p = build(searches, {"source": "trained", "searches": n, "max_other_load": args.max_other_load}, args.max_other_load)
    cost_models.put(st, p.to_json())
    table.add_row(fam, str(n), str(len(set(p.kernels))), str(len(p.rows)))
  st.close()
  if families: print_table(table)
  else: print("no searches in the store to train from")
  for why, n in skipped.items(): print(f"left out: {n} searches of {why}", file=sys.stderr)
  return 0


def _service_settings(args):
  from tunesvc.config import Settings
  settings = Settings.from_env()
  return dataclasses.replace(settings, database_url=args.db) if args.db else settings

def cmd_serve(args) -> int:
  from tunesvc.serve import Service
  settings = _service_settings(args)
  if not settings.tokens and args.host not in ("127.0.0.1", "localhost", "::1"):
    print(f"WARNING: no tokens configured (TUNESVC_TOKENS): anyone who reaches {args.host}:{args.port} may do everything"
          + (" (the names it answers to besides the loopback ones: TUNESVC_ALLOWED_HOSTS)" if args.host in ("0.0.0.0", "::") else ""),
          file=sys.stderr)
  svc = Service(settings, args.host, args.port, args.workers, log_level="info", api_processes=args.api_processes,
                access_log=args.access_log).start()
  print(f"tunesvc on {svc.url} (dashboard {svc.url}/, API docs {svc.url}/docs); workers: {len(svc.procs)} on {svc.devices}", flush=True)
  svc.wait_for_signal()
  svc.stop()
  return 0

def demo_progress(jobs: list[dict], now: float) -> str:
  """The demo's progress line: its jobs, and those a worker refused as their device was too busy to time on, which wait
  queued until `not_before` (Unix seconds, as `now`)."""
  line = f"tuning {len(jobs)} example kernels"
  if waiting := [j["not_before"] for j in jobs if j["state"] == JobState.QUEUED and (j["not_before"] or 0) > now]:
    line += f": {len(waiting)} waiting for a quiet device (too busy to time on; tried again in {min(waiting) - now:.0f} s)"
  return line

def demo(svc: Service, token: Optional[str], budget_s: float) -> int:
  """Submit the example kernels to the service's worker, wait for their jobs, print a table; 0 if every one was tuned.
  A worker that dies ends the demo with why (its jobs would wait for it forever)."""
  from rich.console import Console
  from rich.progress import Progress
  from rich.table import Table
  from linearizer.builders import examples
  from tunesvc.client import Client
  def worker_alive() -> None:
    if why := svc.exited(0): _fail(f"ERROR the demo's CPU {why}")
  kernels, url = examples(), svc.url
  with Client(url, token) as c, Progress(console=Console(stderr=True), transient=True) as bar:
    task = bar.add_task("starting the CPU worker", total=None)
    deadline = time.monotonic() + 60  # its spawn and imports: submitted before it registers, the jobs would be said to wait for none
    while not c.http.get("/v1/workers").json().get("workers") and time.monotonic() < deadline:
      worker_alive()
      time.sleep(0.2)
    jobs = c.submit(list(kernels.values()), "CPU", {"budget_s": budget_s})
    bar.update(task, description=demo_progress(jobs, time.time()), total=len(jobs))
    while True:
      states = [c.job(j["job_id"]) for j in jobs]
      bar.update(task, description=demo_progress(states, time.time()), completed=sum(j["state"] in ENDED for j in states))
      if all(j["state"] in ENDED for j in states): break
      worker_alive()
      time.sleep(1)
  table = Table("kernel", "state", "baseline", "best", "speedup", "rate", "opts", title="tunesvc demo: the example kernels on CPU")
  for (name, k), j in zip(kernels.items(), states):
    r = j["result"]
    if r is None:
      table.add_row(name, j["state"], "", "", "", "", j["error"][:60])
      continue
    table.add_row(name, j["state"], duration(r["baseline_s"]), duration(r["best_s"]), f"{r['speedup']:.2f}x",
                  rate(k.flops(), k.bytes(), r["best_s"]), opts_text(r["opts"]))
  print_table(table)
  print(f"dashboard: {url}/   API docs: {url}/docs")
  return 0 if all(j["state"] == JobState.DONE for j in states) else 1

def cmd_demo(args) -> int:
  from tunesvc.serve import Service
  settings = _service_settings(args)
  svc = Service(settings, "127.0.0.1", args.port, 1, devices=["CPU"]).start()
  token = next((t for t, role in settings.tokens.items() if role in ("submit", "admin")), None)
  try:
    rc = demo(svc, token, args.budget_s)
    if not args.exit:
      print("serving until Ctrl-C", flush=True)
      svc.wait_for_signal()
      print("demo stopped", file=sys.stderr)
  except KeyboardInterrupt:  # Ctrl-C while the examples are tuned: the worker gives its job back as the service stops
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second one must not cut that short with a traceback
    print("demo stopped (Ctrl-C) before every example was tuned", file=sys.stderr)
    rc = 130
  finally: svc.stop()
  return rc

def cmd_devices(args) -> int:
  devs = registry.describe()
  for d in devs:
    if args.json: print(json.dumps(d))
    else:
      print(f"{' '.join([d['device'], *d['aliases']])}  fingerprint {d['fingerprint_hash']}" +
            "".join(f"\n  {k}: {v}" for k, v in d["fingerprint"].items() if k != "backend"))
  return 0 if devs else 1

def cmd_worker(args) -> int:
  from workers.worker import main as worker_main
  try: registry.get(args.device)  # a device this machine lacks stays lacking: say so once instead of retrying forever
  except ValueError as e: _fail(f"ERROR --device: {e}")
  if args.exit_with_parent:
    from search.pool import die_with_parent
    die_with_parent()
  return worker_main(args.server, args.token or os.environ.get("TUNESVC_TOKEN"), args.device, args.lease_s)


def cmd_admin_invalidate(args) -> int:
  from tunesvc.client import Client, ServiceError
  with Client(args.server, args.token or os.environ.get("TUNESVC_TOKEN")) as c:
    try: out = c.invalidate(args.reason, result_id=args.result, kernel_key=args.kernel, worker_id=args.worker)
    except ServiceError as e: _fail(f"ERROR {args.server}: {e}")
  print(f"invalidated results {out['invalidated'] or '-'}; queued again as jobs {out['requeued'] or '-'}")
  return 0


# ---- the service from the command line: kernels, opts, submit, jobs (a server by --server, default TUNESVC_URL) ----
def _is_hash(s: str) -> bool: return len(s) == 64 and all(c in "0123456789abcdef" for c in s)

@contextlib.contextmanager
def _service(args) -> Iterator[Client]:
  """A client of args.server; an unreachable server or an error answer ends the command with one clear line."""
  import httpx
  from tunesvc.client import Client, ServiceError
  try:
    with Client(args.server, args.token) as c: yield c
  except httpx.HTTPError as e: _fail(f"ERROR {args.server}: {type(e).__name__}: {e} (is `tunesvc serve` running there? --server URL or TUNESVC_URL)")
  except ServiceError as e: _fail(f"ERROR {args.server}: {e}" + (" (--token or TUNESVC_TOKEN)" if e.status in (401, 403) else ""))

def _result_cells(r: Optional[dict]) -> list[str]:
  """best, speedup, opts of a result (a job's or a lookup's answer)."""
  if r is None: return ["", "", ""]
  return [duration(r["best_s"]), f"{r['baseline_s'] / r['best_s']:.2f}x", opts_text(r["opts"])]

def cmd_kernels(args) -> int:
  from rich.table import Table
  with _service(args) as c: page = c.kernels(args.name, args.device, args.state, args.limit, args.offset)
  if args.json:
    for k in page["kernels"]: print(json.dumps(k))
  else:
    # a row per kernel (--limit counts kernels), a line of it per job
    table = Table("kernel", "key", "device", "state", "best", "speedup", "opts", title=f"kernels on {args.server}", show_lines=True)
    for k in page["kernels"]:
      jobs = [[j["device"], j["state"], *_result_cells(j["result"])] for j in k["jobs"]] or [[""] * 5]
      table.add_row(k["name"] or "-", k["key"], *("\n".join(cells) for cells in zip(*jobs)))
    print_table(table)
  if page["next_offset"] is not None: print(f"more: --offset {page['next_offset']}", file=sys.stderr)
  return 0

def cmd_jobs_cancel(args) -> int:
  if args.job_id is None: _fail("ERROR jobs cancel needs a job ID")
  with _service(args) as c: j = c.cancel(args.job_id, args.reason)
  print(f"job {j['job_id']} {j['state']}: {j['error'].strip().splitlines()[-1]}")
  return 0

def cmd_jobs(args) -> int:
  if args.action == "cancel": return cmd_jobs_cancel(args)
  from rich.table import Table
  with _service(args) as c: page = c.jobs(args.state, args.limit, args.offset)
  if args.json:
    for j in page["jobs"]: print(json.dumps(j))
  else:
    table = Table("job", "kernel", "device", "state", "attempts", "best", "speedup", "opts",
                  title=f"jobs on {args.server}: " + ", ".join(f"{n} {s}" for s, n in sorted(page["counts"].items())))
    for j in page["jobs"]:
      best, speedup, opts = _result_cells(j["result"])
      table.add_row(str(j["job_id"]), j["kernel_name"] or j["kernel_key"], j["device"], j["state"], f"{j['attempts']}/{j['max_attempts']}",
                    best, speedup, opts if j["result"] else j["error"].splitlines()[-1] if j["error"] else "")
    print_table(table)
  if page["next_offset"] is not None: print(f"more: --offset {page['next_offset']}", file=sys.stderr)
  return 0

def cmd_submit(args) -> int:
  kernels = [k for path in args.files for k in _load_file(path)]
  given = {"beam": args.beam, "budget_s": args.budget_s, "budget_candidates": args.budget_candidates, **_strategy_flags(args)}
  search = {k: v for k, v in given.items() if v is not None}
  with _service(args) as c: jobs = c.submit(kernels, args.device, search, args.priority)
  for k, j in zip(kernels, jobs):
    print(json.dumps(j) if args.json else f"job {j['job_id']} {j['state']} {k.name or '-'} {j['kernel_key']}")
  return 0

def cmd_opts(args) -> int:
  from linearizer import ACTION_SPACE_VERSION
  named: list[tuple[str, str]] = []  # (name, kernel key)
  for item in args.kernels:
    if _is_hash(item): named.append(("-", item))
    elif os.path.exists(item): named += [(k.name or item, k.key) for k in _load_file(item)]
    else: _fail(f"ERROR {item}: neither a file nor a kernel key (64 hex digits)")
  if args.fingerprint is not None:
    if not _is_hash(args.fingerprint): _fail("ERROR --fingerprint: the 64-hex-digit hash `tunesvc devices` prints")
    fp = args.fingerprint
  else:
    try: dev = registry.get(args.device)
    except ValueError as e: _fail(f"ERROR --device: {e}")
    fp = dev.fingerprint_hash(dev.fingerprint())
  from search.cache import ResultCache, default_path
  store: ResultStore  # the local cache that `tunesvc tune` fills, or a server
  with contextlib.closing(ResultCache()) if args.server is None else _service(args) as store:
    answers = store.lookup(fp, [key for _, key in named], action_space_version=ACTION_SPACE_VERSION)
  source = args.server or f"the local cache ({default_path()})"
  for (name, key), a in zip(named, answers):
    if args.json: print(json.dumps({"kernel_name": name, "kernel_key": key, "fingerprint": fp, "action_space_version": ACTION_SPACE_VERSION,
                                    "opts": a and a["opts"], "best_s": a and a["best_s"], "baseline_s": a and a["baseline_s"]}))
    elif a is None: print(f"{name} {key}: not tuned for fingerprint {fp} in {source} (the hand-coded opts run)")
    else:
      best, speedup, opts = _result_cells(a)
      print(f"{name} {key}: {best} ({speedup} the hand-coded)  opts {json.dumps(a['opts'], separators=(',', ':'))}  ({opts})")
  return 0 if all(a is not None for a in answers) else 1

def add_service_commands(sub) -> None:
  server = argparse.ArgumentParser(add_help=False)
  server.add_argument("--server", metavar="URL", default=os.environ.get("TUNESVC_URL", "http://127.0.0.1:8000"),
                      help="the tunesvc server (default: TUNESVC_URL, else http://127.0.0.1:8000)")
  server.add_argument("--token", default=os.environ.get("TUNESVC_TOKEN"), help="a token for the server (default: TUNESVC_TOKEN)")
  page = argparse.ArgumentParser(add_help=False)
  page.add_argument("--limit", type=int, default=50, help="rows per page (default 50, at most 500)")
  page.add_argument("--offset", type=int, default=0, help="rows to skip (the next page's offset is printed on stderr)")
  page.add_argument("--json", action="store_true", help="one JSON object per row")
  k = sub.add_parser("kernels", parents=[server, page], help="list the server's kernels with their jobs and tuned opts, newest first")
  k.add_argument("--name", help="only kernels whose name contains this")
  k.add_argument("--device", help="only kernels with a job for this device (CPU, CUDA, ... or a fingerprint hash)")
  k.add_argument("--state", choices=[s.value for s in JobState], help="only kernels with a job in this state")
  k.set_defaults(fn=cmd_kernels)
  j = sub.add_parser("jobs", parents=[server, page], help="list the server's jobs: queued ones in claim order, then the others newest first")
  j.add_argument("--state", choices=[s.value for s in JobState], help="only jobs in this state")
  j.add_argument("action", nargs="?", choices=["cancel"], help="cancel: end job ID (queued or running) as failed, with --reason")
  j.add_argument("job_id", nargs="?", type=int, metavar="ID", help="the job to cancel (with cancel)")
  j.add_argument("--reason", default="cancelled by the user", help="why, kept as the job's error (with cancel)")
  j.set_defaults(fn=cmd_jobs)
  s = sub.add_parser("submit", parents=[server], help="queue kernels for tuning on a server: a job per kernel")
  s.add_argument("files", nargs="+", help=".json (one document), .jsonl or .jsonl.gz (one per line)")
  s.add_argument("--device", default="CPU", help="a device class (CPU, OPENCL, CUDA, HIP) or one fingerprint hash (default CPU)")
  s.add_argument("--beam", type=int, help="beam width (the server's default: 2)")
  s.add_argument("--budget-s", type=float, help="search seconds per kernel (the server's default: 60)")
  s.add_argument("--budget-candidates", type=int, help="candidates measured per kernel, at most")
  _strategy_args(s)
  s.add_argument("--priority", type=int, default=0, help="higher is claimed first (default 0)")
  s.add_argument("--json", action="store_true", help="one JSON object per job")
  s.set_defaults(fn=cmd_submit)
  o = sub.add_parser("opts", help="look up the tuned opts of kernels on a device: in the local cache `tune` fills, or with --server on a server")
  o.add_argument("kernels", nargs="+", metavar="FILE|KEY", help="a kernel file (.json, .jsonl, .jsonl.gz) or a kernel key (64 hex digits)")
  o.add_argument("--device", default="CPU", help="look up for this device of this machine (default CPU)")
  o.add_argument("--fingerprint", metavar="HASH", help="look up for this device fingerprint hash instead (as `tunesvc devices` prints it)")
  o.add_argument("--server", metavar="URL", help="ask this tunesvc server instead of the local cache")
  o.add_argument("--token", default=os.environ.get("TUNESVC_TOKEN"), help="a token for the server where lookups need one (default: TUNESVC_TOKEN)")
  o.add_argument("--json", action="store_true", help="one JSON object per kernel")
  o.set_defaults(fn=cmd_opts)


def version() -> str:
  try: v = importlib.metadata.version("tunesvc")
  except importlib.metadata.PackageNotFoundError: v = "(not installed)"
  from linearizer import CODEGEN_VERSION
  return f"tunesvc {v} (codegen version {CODEGEN_VERSION})"

def _prints_help(p: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
  """A command's fn where it was named without a subcommand: its help."""
  def fn(_: argparse.Namespace) -> int:
    p.print_help()
    return 0
  return fn

def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="tunesvc", description="Kernel autotuning service.")
  p.add_argument("--version", action="version", version=version(), help="print the version and exit")
  p.set_defaults(fn=_prints_help(p))  # `tunesvc` alone: the commands
  sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
  kernel = sub.add_parser("kernel", help="work with kernel documents (tunesvc.kernel/1): check, show, run")
  kernel.set_defaults(fn=_prints_help(kernel))
  kp = kernel.add_subparsers(dest="kcmd", metavar="COMMAND")
  c = kp.add_parser("check", help="validate documents: OK <key> <name> or ERROR <name> <json-path>: <message>")
  c.add_argument("files", nargs="+", help=".json (one document), .jsonl or .jsonl.gz (one per line)")
  c.add_argument("--json", action="store_true", help="one JSON object per document")
  c.set_defaults(fn=cmd_check)
  s = kp.add_parser("show", help="print the tree with shapes, dtypes, FLOPs and bytes")
  s.add_argument("file", help=".json (one document), .jsonl or .jsonl.gz (one per line)")
  s.set_defaults(fn=cmd_show)
  r = kp.add_parser("run", help="run on seeded random data: in the reference interpreter, or compiled with --device")
  r.add_argument("files", nargs="+", help=".json (one document), .jsonl or .jsonl.gz (one per line)")
  r.add_argument("--var", action="append", metavar="NAME=VALUE", help="bind a variable (default: its midpoint)")
  r.add_argument("--seed", type=int, default=0, help="seed of the random input data (default 0)")
  r.add_argument("--device", help="compile and run on this device (e.g. CPU): prints the median time and the opts")
  sched = r.add_mutually_exclusive_group()
  sched.add_argument("--opts", metavar="JSON", help='the schedule, e.g. \'[{"op":"UPCAST","axis":0,"amt":4}]\'')
  sched.add_argument("--hand-coded", action="store_true", help="the hand-coded opts (the default with --device)")
  sched.add_argument("--no-opts", action="store_true", help="the unoptimised kernel")
  r.add_argument("--check", action="store_true", help="compare with the reference: MATCH, or MISMATCH and exit status 1")
  r.add_argument("--print-source", action="store_true", help="print the generated source")
  r.set_defaults(fn=cmd_run)
  t = sub.add_parser("tune", help="search the fastest verified schedule of each kernel on a device (results cached on disk)")
  t.add_argument("files", nargs="+", help=".json (one document), .jsonl or .jsonl.gz (one per line)")
  t.add_argument("--device", default="CPU", help="a device of this machine, as `tunesvc devices` lists them (default CPU)")
  t.add_argument("--beam", type=int, default=4, help="beam width (default 4)")
  t.add_argument("--budget-s", type=float, default=120.0, help="search time per kernel, seconds (default 120)")
  t.add_argument("--budget-candidates", type=int, help="candidates measured per kernel, at most")
  _strategy_args(t)
  t.add_argument("--seed", type=int, default=0, help="seed of the input data")
  t.add_argument("--min-time-s", type=float, help="measured time per candidate, seconds (default 0.05): less is quicker and noisier")
  t.add_argument("--final-rounds", type=int, help="interleaved re-timings of the finalists against the baseline (default 7)")
  t.add_argument("--json", action="store_true", help="one JSON object per kernel")
  t.add_argument("--no-cache", action="store_true", help="search even where a cached result exists (and replace it)")
  t.add_argument("--server", metavar="URL", help="submit to this service instead (model files from `tunesvc capture` too) and follow the jobs")
  t.add_argument("--token", help="with --server: a submit token (default: TUNESVC_TOKEN)")
  t.add_argument("--no-wait", action="store_true", help="with --server: submit, print the counts, and exit")
  t.set_defaults(fn=lambda a: (cmd_tune_remote if a.server else cmd_tune)(a))
  cp = sub.add_parser("capture", help="run a tinygrad program with its kernels through tunesvc and write each distinct kernel with its run count")
  cp.add_argument("--out", help="the model file (JSON lines: model, runs, kernel)")
  cp.add_argument("--model", help="the model's name (default: the script's)")
  cp.add_argument("program", nargs=argparse.REMAINDER, help="SCRIPT.py [ARGS] or -m MODULE [ARGS]; --out FILE may also come last")
  cp.set_defaults(fn=cmd_capture)
  sv = sub.add_parser("serve", help="the HTTP API and dashboard, with local workers (SQLite under the user's data dir unless --db)")
  sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; another needs TUNESVC_TOKENS)")
  sv.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: a free one, printed)")
  sv.add_argument("--db", metavar="URL", help="database URL, e.g. postgresql+psycopg://user@host/db (or TUNESVC_DATABASE_URL)")
  sv.add_argument("--workers", type=int, default=1, help="local worker processes per device found (0: the API only)")
  sv.add_argument("--api-processes", type=int, default=1, metavar="N",
                  help="API processes sharing the port (default 1; one per core serves the most lookups)")
  sv.add_argument("--access-log", action="store_true", help="log every request (off by default: it costs more than a lookup)")
  sv.set_defaults(fn=cmd_serve)
  d = sub.add_parser("demo", help="serve, tune the example kernels with a local CPU worker, print the table and the dashboard URL")
  d.add_argument("--port", type=int, default=8000, help="port of the demo's server on 127.0.0.1 (default 8000)")
  d.add_argument("--db", metavar="URL", help="database URL (default: TUNESVC_DATABASE_URL, else SQLite under the user's data dir)")
  d.add_argument("--budget-s", type=float, default=15.0, help="search seconds per kernel (default 15)")
  d.add_argument("--exit", action="store_true", help="exit after the table instead of serving the dashboard until Ctrl-C")
  d.set_defaults(fn=cmd_demo)
  dv = sub.add_parser("devices", help="list the devices this machine can run, with their fingerprints")
  dv.add_argument("--json", action="store_true", help="one JSON object per device")
  dv.set_defaults(fn=cmd_devices)
  w = sub.add_parser("worker", help="claim and tune jobs for one device of this machine from a tunesvc server")
  w.add_argument("--server", required=True, metavar="URL", help="the tunesvc server, e.g. http://api-host:8000")
  w.add_argument("--token", help="a worker token (default: TUNESVC_TOKEN)")
  w.add_argument("--device", default="CPU", help="the device to tune on, as `tunesvc devices` lists them (default CPU)")
  w.add_argument("--lease-s", type=float, default=60.0, help="job lease, renewed by heartbeats every quarter of it")
  w.add_argument("--exit-with-parent", action="store_true", help="end when the process that started it ends (as `tunesvc serve` starts its workers)")
  w.set_defaults(fn=cmd_worker)
  admin = sub.add_parser("admin", help="an admin's verdicts on the service's results (needs an admin token)")
  admin.set_defaults(fn=_prints_help(admin))
  ap = admin.add_subparsers(dest="acmd")
  inv = ap.add_parser("invalidate", help="stop serving a result, a kernel's results or every result of a worker; searched again")
  which = inv.add_mutually_exclusive_group(required=True)
  which.add_argument("--result", type=int, metavar="ID", help="one result, by its id (GET /v1/kernels/KEY lists them)")
  which.add_argument("--kernel", metavar="KEY", help="every result of this kernel")
  which.add_argument("--worker", type=int, metavar="ID", help="every result it reported or confirmed (a stolen token, a faulty device)")
  inv.add_argument("--reason", required=True, help="recorded on each result and job")
  inv.add_argument("--server", required=True, metavar="URL", help="the tunesvc server")
  inv.add_argument("--token", help="an admin token (default: TUNESVC_TOKEN)")
  inv.set_defaults(fn=cmd_admin_invalidate)
  cm = sub.add_parser("cost-model", help="the search's cost model: train it from the store's measurements for the workers")
  cm.set_defaults(fn=_prints_help(cm))
  cmp_ = cm.add_subparsers(dest="cmcmd")
  tr = cmp_.add_parser("train", help="a prior per device family from every search the store keeps; workers fetch it for model-strategy jobs")
  tr.add_argument("--db", metavar="URL", help="the service's database URL (default: TUNESVC_DATABASE_URL, else SQLite under the user's data dir)")
  tr.add_argument("--max-other-load", type=float, default=0.5, metavar="CORES",
                  help="leave out candidates timed while the rest of the machine kept this many cores busy (default 0.5: a busy "
                       "machine's THREAD candidates time 2-100x slow)")
  tr.set_defaults(fn=cmd_cost_model_train)
  add_service_commands(sub)
  return p


def main(argv: Optional[list[str]] = None) -> int:
  args = parser().parse_args(argv)
  try:
    rc = args.fn(args)
    sys.stdout.flush()  # here, where a closed pipe is caught, rather than at exit
    return rc
  except BrokenPipeError:  # the reader stopped early (`| head`): end quietly, and let no flush at exit write to the pipe again
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1


if __name__ == "__main__":
  sys.exit(main())
