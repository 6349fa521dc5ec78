"""Enable the tinygrad integration the moment a program imports tinygrad, without importing it before: an import hook
(a meta-path finder) that runs tinygrad's own package code, then `enable_from_env()`. Installed by
`python -m tunesvc.integrations.tinygrad` and, for an unmodified `python script.py`, by site/sitecustomize.py when
TUNESVC_TINYGRAD=1."""
from __future__ import annotations
import importlib.abc, importlib.util, sys


class _EnableAfterImport(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name != "tinygrad": return None
    sys.meta_path.remove(self)  # once, and find tinygrad's real spec without finding ourselves
    if (spec := importlib.util.find_spec(name)) is None or spec.loader is None: return spec
    exec_module = spec.loader.exec_module
    def exec_then_enable(module):
      exec_module(module)
      from tunesvc.integrations.tinygrad import enable_from_env
      enable_from_env()
    spec.loader.exec_module = exec_then_enable
    return spec


def install() -> None:
  """Enable when tinygrad is imported, or now if it already is."""
  if "tinygrad" in sys.modules:
    from tunesvc.integrations.tinygrad import enable_from_env
    enable_from_env()
  elif not any(isinstance(f, _EnableAfterImport) for f in sys.meta_path): sys.meta_path.insert(0, _EnableAfterImport())
