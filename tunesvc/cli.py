"""The `tunesvc` command line."""
from __future__ import annotations
import argparse, dataclasses, gzip, hashlib, json, os, statistics, sys, time
from typing import Iterator, NoReturn, Optional
import numpy as np
from devices import registry
from linearizer.ast import KernelAST, KernelValidationError, LazyOp, loads
from linearizer.fuzz import compare
from linearizer.kernel import Opt, OptError
from linearizer.symbolic import render
from linearizer import reference
from tunesvc.runtime import compile_kernel


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
    except KernelValidationError as e: raise SystemExit(f"ERROR {_name_of(text, label)} {e.path}: {e.message}")


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
  line = f"{_summary(bufs[0])}  {args.device} {statistics.median(times) * 1e3:.3f} ms (median of {len(times)})  " \
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
      except ValueError as e: raise SystemExit(f"ERROR {k.name}: {e}")
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

def cmd_tune(args) -> int:
  from rich.console import Console
  from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
  from rich.table import Table
  from linearizer import ACTION_SPACE_VERSION
  from search.cache import ResultCache
  from search.builder import RenderBug
  from search.settings import SearchSettings
  from search.tune import SearchError, tune
  try: dev = registry.get(args.device)
  except ValueError as e: _fail(f"ERROR --device: {e}")
  settings = SearchSettings.from_json({"beam": args.beam, "budget_s": args.budget_s, "budget_candidates": args.budget_candidates, "seed": args.seed})
  fp_hash = dev.fingerprint_hash(dev.fingerprint())
  cache = ResultCache()
  err = Console(stderr=True)
  table = Table("kernel", "baseline", "best", "rate", "speedup", "candidates", "failed", "search", "opts", title=f"tuned on {args.device}")
  ok = True
  for path in args.files:
    for k in _load_file(path):
      name = k.name or path
      r = None if args.no_cache else cache.get(k.key, fp_hash, ACTION_SPACE_VERSION)
      cached = r is not None
      if r is None:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=True,
                      disable=args.json or not err.is_terminal) as bar:
          task = bar.add_task(f"{name}: reference")
          show = lambda n, best: bar.update(task, description=f"{name}: {n} candidates, best {'-' if best is None else f'{best * 1e3:.3f} ms'}")
          try: r = tune(k, args.device, settings, progress=show)
          except (SearchError, RenderBug) as e:
            ok = False
            print(json.dumps({"kernel_key": k.key, "kernel_name": name, "device": args.device, "error": str(e)}) if args.json else f"FAILED {name}: {e}")
            continue
        cache.put(r)
      if args.json:
        print(json.dumps({"kernel_key": r.kernel_key, "kernel_name": name, "device": r.device, "fingerprint": r.fingerprint_hash,
                          "action_space_version": r.action_space_version, "baseline_s": r.baseline_s, "best_s": r.best_s,
                          "best_opts": r.best_opts, "speedup": r.speedup, "speedup_spread": list(r.speedup_spread),
                          "candidates": len(r.candidates), "failed": r.failed, "search_s": r.search_s, "verified": r.verified, "cached": cached}))
      else:
        lo, hi = r.speedup_spread
        table.add_row(name, f"{r.baseline_s * 1e3:.3f} ms", f"{r.best_s * 1e3:.3f} ms", rate(r.flops, r.bytes, r.best_s), f"{r.speedup:.2f}x ({lo:.2f}-{hi:.2f})",
                      str(len(r.candidates)), str(r.failed), "cached" if cached else f"{r.search_s:.1f} s", opts_text(r.best_opts))
  if not args.json: Console().print(table)
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
  from tunesvc.client import Client, ServiceError
  settings = {"beam": args.beam, "budget_s": args.budget_s, **({"budget_candidates": args.budget_candidates} if args.budget_candidates else {})}
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
    except ServiceError as e: _fail(f"ERROR {args.server}: {e}")
    names = ", ".join(m or "(kernels)" for m in groups)
    start, last = time.monotonic(), 0.0
    while True:
      counts = {s: sum(v == s for v in jobs.values()) for s in ("done", "running", "queued", "failed")}
      finished, elapsed = counts["done"] + counts["failed"], time.monotonic() - start
      left = len(jobs) - finished
      eta = f", about {left * elapsed / finished:.0f} s left" if finished and left and elapsed > 1 else ""
      if not left or args.no_wait or time.monotonic() - last >= 10:
        print(f"{names}: {counts['done']}/{len(jobs)} done, {counts['running']} running, {counts['queued']} queued, {counts['failed']} failed{eta}", flush=True)
        last = time.monotonic()
      if not left or args.no_wait: return 1 if counts["failed"] else 0
      time.sleep(2)
      for jid, state in jobs.items():
        if state in ("queued", "running"): jobs[jid] = c.job(jid)["state"]


def _service_settings(args):
  from tunesvc.config import Settings
  settings = Settings.from_env()
  return dataclasses.replace(settings, database_url=args.db) if args.db else settings

def cmd_serve(args) -> int:
  from tunesvc.serve import Service
  settings = _service_settings(args)
  if not settings.tokens and args.host not in ("127.0.0.1", "localhost", "::1"):
    print(f"WARNING: no tokens configured (TUNESVC_TOKENS): anyone who reaches {args.host}:{args.port} may do everything", file=sys.stderr)
  svc = Service(settings, args.host, args.port, args.workers, log_level="info", api_processes=args.api_processes,
                access_log=args.access_log).start()
  print(f"tunesvc on {svc.url} (dashboard {svc.url}/, API docs {svc.url}/docs); workers: {len(svc.procs)} on {svc.devices}", flush=True)
  svc.wait_for_signal()
  svc.stop()
  return 0

def cmd_demo(args) -> int:
  from tunesvc.serve import Service, demo
  settings = _service_settings(args)
  svc = Service(settings, "127.0.0.1", args.port, 1, devices=["CPU"]).start()
  token = next((t for t, role in settings.tokens.items() if role in ("submit", "admin")), None)
  try:
    rc = demo(svc, token, args.budget_s)
    if not args.exit:
      print("serving until Ctrl-C", flush=True)
      svc.wait_for_signal()
  finally: svc.stop()
  return rc

def cmd_devices(args) -> int:
  devs = registry.describe()
  for d in devs:
    if args.json: print(json.dumps(d))
    else:
      print(f"{' '.join([d['device'], *d['aliases']])}  fingerprint {d['fingerprint_hash'][:16]}" +
            "".join(f"\n  {k}: {v}" for k, v in d["fingerprint"].items() if k != "backend"))
  return 0 if devs else 1

def cmd_worker(args) -> int:
  from workers.worker import main as worker_main
  return worker_main(args.server, args.token or os.environ.get("TUNESVC_TOKEN"), args.device, args.lease_s)


def cmd_admin_invalidate(args) -> int:
  from tunesvc.client import Client, ServiceError
  with Client(args.server, args.token or os.environ.get("TUNESVC_TOKEN")) as c:
    try: out = c.invalidate(args.reason, result_id=args.result, kernel_key=args.kernel, worker_id=args.worker)
    except ServiceError as e: _fail(f"ERROR {args.server}: {e}")
  print(f"invalidated results {out['invalidated'] or '-'}; queued again as jobs {out['requeued'] or '-'}")
  return 0


def main(argv: Optional[list[str]] = None) -> int:
  p = argparse.ArgumentParser(prog="tunesvc", description="Kernel autotuning service.")
  sub = p.add_subparsers(dest="cmd", required=True)
  kp = sub.add_parser("kernel", help="work with kernel documents (tunesvc.kernel/1)").add_subparsers(dest="kcmd", required=True)
  c = kp.add_parser("check", help="validate documents: OK <key> <name> or ERROR <name> <json-path>: <message>")
  c.add_argument("files", nargs="+", help=".json (one document), .jsonl or .jsonl.gz (one per line)")
  c.add_argument("--json", action="store_true", help="one JSON object per document")
  c.set_defaults(fn=cmd_check)
  s = kp.add_parser("show", help="print the tree with shapes, dtypes, FLOPs and bytes")
  s.add_argument("file")
  s.set_defaults(fn=cmd_show)
  r = kp.add_parser("run", help="run on seeded random data: in the reference interpreter, or compiled with --device")
  r.add_argument("files", nargs="+")
  r.add_argument("--var", action="append", metavar="NAME=VALUE", help="bind a variable (default: its midpoint)")
  r.add_argument("--seed", type=int, default=0)
  r.add_argument("--device", help="compile and run on this device (e.g. CPU): prints the median time and the opts")
  sched = r.add_mutually_exclusive_group()
  sched.add_argument("--opts", metavar="JSON", help='the schedule, e.g. \'[{"op":"UPCAST","axis":0,"amt":4}]\'')
  sched.add_argument("--hand-coded", action="store_true", help="the hand-coded opts (the default with --device)")
  sched.add_argument("--no-opts", action="store_true", help="the unoptimised kernel")
  r.add_argument("--check", action="store_true", help="compare with the reference: MATCH, or MISMATCH and exit status 1")
  r.add_argument("--print-source", action="store_true", help="print the generated source")
  r.set_defaults(fn=cmd_run)
  t = sub.add_parser("tune", help="search the fastest verified schedule of each kernel on a device (results cached on disk)")
  t.add_argument("files", nargs="+")
  t.add_argument("--device", default="CPU")
  t.add_argument("--beam", type=int, default=4, help="beam width (default 4)")
  t.add_argument("--budget-s", type=float, default=120.0, help="search time per kernel, seconds (default 120)")
  t.add_argument("--budget-candidates", type=int, help="candidates measured per kernel, at most")
  t.add_argument("--seed", type=int, default=0, help="seed of the input data")
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
  sv.add_argument("--host", default="127.0.0.1")
  sv.add_argument("--port", type=int, default=8000)
  sv.add_argument("--db", metavar="URL", help="database URL, e.g. postgresql+psycopg://user@host/db (or TUNESVC_DATABASE_URL)")
  sv.add_argument("--workers", type=int, default=1, help="local worker processes per device found (0: the API only)")
  sv.add_argument("--api-processes", type=int, default=1, metavar="N", help="API processes sharing the port (default 1; one per core serves the most lookups)")
  sv.add_argument("--access-log", action="store_true", help="log every request (off by default: it costs more than a lookup)")
  sv.set_defaults(fn=cmd_serve)
  d = sub.add_parser("demo", help="serve, tune the example kernels with a local CPU worker, print the table and the dashboard URL")
  d.add_argument("--port", type=int, default=8000)
  d.add_argument("--db", metavar="URL")
  d.add_argument("--budget-s", type=float, default=15.0, help="search seconds per kernel (default 15)")
  d.add_argument("--exit", action="store_true", help="exit after the table instead of serving the dashboard until Ctrl-C")
  d.set_defaults(fn=cmd_demo)
  dv = sub.add_parser("devices", help="list the devices this machine can run, with their fingerprints")
  dv.add_argument("--json", action="store_true", help="one JSON object per device")
  dv.set_defaults(fn=cmd_devices)
  w = sub.add_parser("worker", help="claim and tune jobs for one device of this machine from a tunesvc server")
  w.add_argument("--server", required=True, metavar="URL")
  w.add_argument("--token", help="a worker token (default: TUNESVC_TOKEN)")
  w.add_argument("--device", default="CPU")
  w.add_argument("--lease-s", type=float, default=60.0, help="job lease, renewed by heartbeats every quarter of it")
  w.set_defaults(fn=cmd_worker)
  ap = sub.add_parser("admin", help="an admin's verdicts on the service's results (needs an admin token)").add_subparsers(dest="acmd", required=True)
  inv = ap.add_parser("invalidate", help="stop serving a result, a kernel's results or every result of a worker; searched again")
  which = inv.add_mutually_exclusive_group(required=True)
  which.add_argument("--result", type=int, metavar="ID")
  which.add_argument("--kernel", metavar="KEY")
  which.add_argument("--worker", type=int, metavar="ID", help="every result it reported or confirmed (a stolen token, a faulty device)")
  inv.add_argument("--reason", required=True, help="recorded on each result and job")
  inv.add_argument("--server", required=True, metavar="URL")
  inv.add_argument("--token", help="an admin token (default: TUNESVC_TOKEN)")
  inv.set_defaults(fn=cmd_admin_invalidate)
  args = p.parse_args(argv)
  return args.fn(args)


if __name__ == "__main__":
  sys.exit(main())
