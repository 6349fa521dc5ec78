"""Kernels before and after a codegen change, in one run: each kernel's hand-coded schedule as a git revision's
linearizer renders it (--before, default: the commit before linearizer.vecmath), as this checkout renders it, and this
checkout's source with SLEEF's u10 functions in place of vecmath's (where libsleef-dev is installed and the kernel has
a transcendental), interleaved (bench/cpu_kernels.measure) and each output checked against the reference
(linearizer.compare).

  .venv/bin/python bench/vecmath_ab.py                                  # examples' elementwise_chain, softmax_exp_sum
  .venv/bin/python bench/vecmath_ab.py --kernels softmax_exp_sum --min-time 3
  .venv/bin/python bench/vecmath_ab.py --kernels sops_3624,sops_972 --before 4f9a5f6   # shared-corpus kernels by name
  .venv/bin/python bench/vecmath_ab.py --kernels dump/gpt2/24_tunesvc_hand_coded_2dd9503b41.json --before main --threads 1

Prints a markdown table: median ms per contender, after's speed-up over before, and the CPU time the rest of the
machine used meanwhile (search.load.OtherLoad) with /proc/loadavg before and after.
"""
from __future__ import annotations
import argparse, dataclasses, io, json, subprocess, sys, tarfile, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.cpu_kernels import measure, med  # noqa: E402
from devices import cpu  # noqa: E402
from search.load import OtherLoad  # noqa: E402
from linearizer import reference  # noqa: E402
from linearizer.ast import loads  # noqa: E402
from linearizer.compare import compare  # noqa: E402
from linearizer.heuristic import hand_coded_optimizations  # noqa: E402
from linearizer.kernel import Kernel  # noqa: E402
from linearizer.lower import lower  # noqa: E402
from linearizer.options import LinearizerOptions  # noqa: E402
from linearizer.render_c import C, render_source  # noqa: E402
from linearizer import vecmath  # noqa: E402
from bench.search_vs_tinygrad import CORPUS  # noqa: E402
from tunesvc.cli import read_documents  # noqa: E402

BEFORE = "fd1f550"  # main before linearizer.vecmath: EXP2/LOG2/SIN as scalar double libm calls
SLEEF = {4: "__m128", 8: "__m256", 16: "__m512"}

# renders a kernel with the linearizer on sys.path[0]: argv[1] the kernel document, stdin the device options
OLD_RENDER = """import json, sys
from linearizer.ast import loads
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel
from linearizer.lower import lower
from linearizer.options import LinearizerOptions
from linearizer.render_c import render_c
ast = loads(open(sys.argv[1]).read())
k = Kernel(ast.rebased() if hasattr(ast, "rebased") else ast, LinearizerOptions.from_json(json.load(sys.stdin)))
opts = hand_coded_optimizations(k)
print(json.dumps({"src": render_c(lower(k, "bench")), "opts": [o.to_json() for o in opts]}))
"""

def sleef_source(n: int) -> str:
  """tsvc_exp2_f{n} & co. as SLEEF's 1.0-ulp functions (the measurement's third contender)."""
  t = f"tsvc_f{n}"
  head = f"#include <immintrin.h>\n#include <sleef.h>\ntypedef float {t} __attribute__((vector_size({4 * n})));\n"
  if n == 1:
    return head + "".join(f"static inline float tsvc_{fn}f(float x) {{ return Sleef_{fn}f_u10(x); }}\n" for fn in ("exp2", "log2", "sin"))
  return head + "".join(f"static inline {t} tsvc_{fn}_f{n}({t} x) {{ return ({t})Sleef_{fn}f{n}_u10(({SLEEF[n]})x); }}\n"
                        for fn in ("exp2", "log2", "sin"))

def before_source(rev: str, doc: Path, tmp: Path, options: LinearizerOptions) -> dict:
  tree = tmp / rev
  if not tree.exists():
    tree.mkdir()
    with tarfile.open(fileobj=io.BytesIO(subprocess.run(["git", "-C", str(ROOT), "archive", rev, "linearizer"], check=True,
                                                                     capture_output=True).stdout)) as tf: tf.extractall(tree)
  r = subprocess.run([sys.executable, "-c", OLD_RENDER, str(doc)], input=json.dumps(options.to_json()), capture_output=True, text=True,
                     check=True, cwd=tree, env={"PYTHONPATH": str(tree)})  # cwd: `-c` puts it first on sys.path
  return json.loads(r.stdout)

def kernel_doc(name: str, tmp: Path) -> Path:
  """A kernel document's path (bench/tinygrad_models.py --dump's), examples/kernels/NAME.json, else the shared corpus's
  kernel of that name written to a file."""
  if name.endswith(".json") and Path(name).is_file(): return Path(name)
  if (doc := ROOT / "examples" / "kernels" / f"{name}.json").is_file(): return doc
  text = next((t for _, t in read_documents(str(CORPUS)) if json.loads(t)["name"] == name), None)
  if text is None: raise SystemExit(f"{name}: neither an example nor a kernel of {CORPUS}")
  (doc := tmp / f"{name}.json").write_text(text)
  return doc

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--kernels", default="elementwise_chain,softmax_exp_sum", help="examples/kernels/NAME.json or corpus kernel names, or "
                  "kernel documents' paths, comma-separated")
  ap.add_argument("--before", default=BEFORE, help=f"git revision whose linearizer renders the 'before' column (default {BEFORE})")
  ap.add_argument("--min-time", type=float, default=2.0)
  ap.add_argument("--turn", type=float, default=0.2)
  ap.add_argument("--threads", type=int, default=0, help="the threads schedules may use (default: the machine's; 1: no THREAD opts, "
                  "what a busy machine's timings need: a descheduled thread stalls its parallel region)")
  args = ap.parse_args()
  try: sleef = bool(cpu.compile("#include <sleef.h>\n", cpu.DEFAULT_FLAGS + ("-Wl,--no-as-needed", "-lsleef")))
  except cpu.CompileError: sleef = False
  rows, options = [], cpu.options()
  if args.threads: options = dataclasses.replace(options, threads=args.threads)
  with tempfile.TemporaryDirectory() as tmp:
    for name in args.kernels.split(","):
      doc = kernel_doc(name, Path(tmp))
      ast = loads(doc.read_text()).rebased()
      k = Kernel(ast, options)
      opts = hand_coded_optimizations(k)
      prog = lower(k, "bench")
      old = before_source(args.before, doc, Path(tmp), options)
      srcs = {"before": (old["src"], ()), "after": (render_source(prog, C), ())}
      if sleef and any(n.op in vecmath.FUNCS for n in ast.nodes):
        srcs["sleef"] = (render_source(prog, dataclasses.replace(C, float_math=sleef_source)), ("-Wl,--no-as-needed", "-lsleef"))
      vv = ast.var_vals()  # each variable at its midpoint, as a search times it
      vargs = [vv[v.name] for v in ast.vars]
      bufs = reference.random_buffers(ast, vv, 0)
      want = [b.copy() for b in bufs]
      reference.run(ast, want, vv)
      fns, checks = {}, {}
      for who, (src, libs) in srcs.items():
        p = cpu.Program(cpu.compile(src, cpu.DEFAULT_FLAGS + libs), "bench")
        out = [cpu.alloc(b.size, b.dtype) for b in bufs]
        for o, b in zip(out, bufs): o[:] = b
        p(*out, var_vals=vargs)
        checks[who] = compare(ast, out, want, vv) or "ok"
        fns[who] = lambda p=p, out=out, vargs=vargs: p.time(*out, var_vals=vargs)
      avg0, load = Path("/proc/loadavg").read_text().split()[:3], OtherLoad()
      ts = measure(fns, args.min_time, 5, 1000, args.turn)
      rows.append({"kernel": doc.stem, "opts_before": old["opts"], "opts_after": [o.to_json() for o in opts], "checks": checks,
                   "ms": {w: med(t) * 1e3 for w, t in ts.items()}, "other_load": load.cores(),
                   "loadavg": [avg0, Path("/proc/loadavg").read_text().split()[:3]]})
  cols = ["before", "after"] + (["sleef"] if any("sleef" in r["ms"] for r in rows) else [])
  print("| kernel | " + " | ".join(f"{c} ms" for c in cols) + " | after vs before | checks | rest of machine (cores) | loadavg before -> after |")
  print("|---" * (len(cols) + 5) + "|")
  for r in rows:
    avgs = " -> ".join(" ".join(a) for a in r["loadavg"])
    ms = " | ".join(f"{r['ms'][c]:.3f}" if c in r["ms"] else "" for c in cols)
    print(f"| {r['kernel']} | {ms} | {r['ms']['before'] / r['ms']['after']:.2f}x | "
          + ", ".join(f"{w}: {c}" for w, c in r["checks"].items()) + f" | {r['other_load']:.2f} | {avgs} |")
  for r in rows: print(f"\n{r['kernel']}: before opts {r['opts_before']}, after opts {r['opts_after']}")
  return 0 if all(c == "ok" for r in rows for c in r["checks"].values()) else 1

if __name__ == "__main__": sys.exit(main())
