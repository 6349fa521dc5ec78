"""python -m tunesvc.integrations.tinygrad SCRIPT.py [ARGS] (or -m MODULE [ARGS]): run a tinygrad program with its
kernels compiled by tunesvc, configured by the environment (tunesvc.integrations.tinygrad.enable_from_env); the stats go
to stderr at exit unless TUNESVC_TINYGRAD_STATS names a file. --site-dir prints the folder to put on PYTHONPATH so that
TUNESVC_TINYGRAD=1 does the same for `python SCRIPT.py` and for the subprocesses of a run."""
import os, sys
from pathlib import Path

USAGE = "usage: python -m tunesvc.integrations.tinygrad (SCRIPT.py | -m MODULE) [ARGS...] | --site-dir"

def main(argv: list[str]) -> None:
  if argv[:1] == ["--site-dir"]: return print(Path(__file__).resolve().parent / "site")
  if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2): sys.exit(USAGE)
  os.environ.setdefault("TUNESVC_TINYGRAD_STATS", "-")
  from tunesvc.integrations.tinygrad import enable_from_env, run_program
  enable_from_env()
  run_program(argv)

if __name__ == "__main__": main(sys.argv[1:])
