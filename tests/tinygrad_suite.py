"""tinygrad 0.8.0's own tests (from its sdist, compared against torch 2.13 CPU) run twice in the tinygrad-tests venv
(`make tinygrad-tests` builds it): on one of tinygrad's devices plain (CLANG, or GPU: OpenCL), and with every kernel
compiled by tunesvc. The outcome of every test must be the same, and every kernel tunesvc's except counted, explained
fallbacks.

  python tests/tinygrad_suite.py [FILE ...] [-k EXPR] [--device OPENCL]  # default: issue 12's four files on CPU (CLANG)"""
from __future__ import annotations
import argparse, json, os, subprocess, sys, tempfile, time
import xml.etree.ElementTree as ET
from pathlib import Path
from tunesvc.integrations.tinygrad import TINYGRAD_DEVICE

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-tinygrad-tests"
SDIST = VENV / "tinygrad-0.8.0"
FILES = ("test/test_ops.py", "test/test_conv.py", "test/test_dtype_alu.py", "test/test_symbolic_ops.py")
MODES = ("plain", "tunesvc")


def outcomes(junit: Path) -> dict[str, str]:
  """test id -> passed / failed / error / skipped (every subtest's failure counts as the test's)."""
  out: dict[str, str] = {}
  for case in ET.parse(junit).getroot().iter("testcase"):
    tid = f"{case.get('classname')}::{case.get('name')}"
    got = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
    out[tid] = got if out.get(tid, "passed") == "passed" else out[tid]
  return out

def run(mode: str, files: list[str], k: str | None, timeout: float, device: str = "CPU") -> tuple[dict[str, str], dict | None, float]:
  """(outcomes, the integration's stats or None, seconds) of one pytest run of tinygrad's tests on tunesvc's `device`'s
  tinygrad device."""
  if not (VENV / ".installed").exists(): raise RuntimeError(f"{VENV} is missing: `make tinygrad-tests` (or `make test-exhaustive`) builds it")
  with tempfile.TemporaryDirectory() as tmp:
    junit, stats = Path(tmp) / "junit.xml", Path(tmp) / "stats.json"
    env = {k: v for k, v in os.environ.items() if k not in TINYGRAD_DEVICE.values()}  # tinygrad's device: this one alone
    env.update({TINYGRAD_DEVICE[device]: "1", "TUNESVC_DEVICE": device, "PYTHONPATH": str(ROOT), "TUNESVC_TINYGRAD_STATS": str(stats)})
    env.pop("TUNESVC_URL", None)  # hand-coded opts: the same kernels whatever service this machine knows
    runner = ["-m", "tunesvc.integrations.tinygrad"] if mode == "tunesvc" else []
    cmd = [str(VENV / "bin" / "python"), *runner, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *files,
           *(["-k", k] if k else [])]
    st = time.monotonic()
    subprocess.run(cmd, cwd=SDIST, env=env, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return outcomes(junit), json.loads(stats.read_text()) if stats.exists() else None, time.monotonic() - st

def compare(files: list[str], k: str | None = None, timeout: float = 7200, device: str = "CPU") -> dict:
  """Both runs, interleaved by nothing (one after the other): outcomes, the tests whose outcome differs, stats, times."""
  res = {m: run(m, files, k, timeout, device) for m in MODES}
  plain, tsvc = res["plain"][0], res["tunesvc"][0]
  differ = {t: (plain.get(t), tsvc.get(t)) for t in sorted(set(plain) | set(tsvc)) if plain.get(t) != tsvc.get(t)}
  count = lambda o: {s: sum(v == s for v in o.values()) for s in ("passed", "failure", "error", "skipped")}
  return {"plain": count(plain), "tunesvc": count(tsvc), "differ": differ, "stats": res["tunesvc"][1],
          "seconds": {m: round(res[m][2], 1) for m in MODES}, "not_passed": sorted(t for t, o in plain.items() if o != "passed")}

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("files", nargs="*", default=list(FILES))
  ap.add_argument("-k", default=None)
  ap.add_argument("--device", default="CPU", choices=sorted(TINYGRAD_DEVICE), help="tunesvc's name of the device (CPU: tinygrad's CLANG)")
  args = ap.parse_args()
  load = open("/proc/loadavg").read().split()[:3]
  rep = compare(args.files, args.k, device=args.device)
  print(json.dumps({"files": args.files, "k": args.k, "device": args.device, "loadavg_before": load,
                    "loadavg_after": open("/proc/loadavg").read().split()[:3], **rep}, indent=1))
  sys.exit(1 if rep["differ"] or not rep["stats"] else 0)
