"""python -m tunesvc.integrations.tinygrad SCRIPT.py [ARGS] (or -m MODULE [ARGS]): run a tinygrad program with its
kernels compiled by tunesvc, configured by the environment (tunesvc.integrations.tinygrad.enable_from_env); the stats go
to stderr at exit unless TUNESVC_TINYGRAD_STATS names a file. --site-dir prints the folder to put on PYTHONPATH so that
TUNESVC_TINYGRAD=1 does the same for `python SCRIPT.py` and for the subprocesses of a run."""
import os, runpy, sys
from pathlib import Path

USAGE = "usage: python -m tunesvc.integrations.tinygrad (SCRIPT.py | -m MODULE) [ARGS...] | --site-dir"

def main(argv: list[str]) -> None:
  if argv[:1] == ["--site-dir"]: return print(Path(__file__).resolve().parent / "site")
  if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2): sys.exit(USAGE)
  os.environ.setdefault("TUNESVC_TINYGRAD_STATS", "-")
  from tunesvc.integrations.tinygrad_autoload import install
  install()
  if argv[0] == "-m":
    sys.argv = argv[1:]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
  else:
    sys.argv = argv
    sys.path[0] = str(Path(argv[0]).resolve().parent)  # as `python SCRIPT.py` would have it
    runpy.run_path(argv[0], run_name="__main__")

if __name__ == "__main__": main(sys.argv[1:])
