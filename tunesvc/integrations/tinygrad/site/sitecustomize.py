"""Put this folder on PYTHONPATH to run an unmodified tinygrad program on tunesvc when TUNESVC_TINYGRAD=1:
  TUNESVC_TINYGRAD=1 PYTHONPATH=$(python -m tunesvc.integrations.tinygrad --site-dir) CLANG=1 python model.py
Python imports sitecustomize at start-up; this one installs an import hook and imports nothing of tinygrad itself."""
import os
if os.environ.get("TUNESVC_TINYGRAD") == "1":
  from tunesvc.integrations.tinygrad_autoload import install
  install()
