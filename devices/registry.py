"""Backend name -> device module; adding a backend is one line in _BACKENDS (its module must import without it).
A name with an index (OPENCL:0) is an alias of the backend's device 0, the one its module drives."""
from __future__ import annotations
import importlib
from types import ModuleType

_BACKENDS: dict[str, str] = {"CPU": "devices.cpu", "OPENCL": "devices.opencl", "CUDA": "devices.cuda", "HIP": "devices.hip"}
_ALIASES: dict[str, str] = {"OPENCL:0": "OPENCL", "CUDA:0": "CUDA", "HIP:0": "HIP"}


def available() -> list[str]: return [n for n, mod in _BACKENDS.items() if importlib.import_module(mod).available()]

def get(name: str) -> ModuleType:
  if _ALIASES.get(name, name) not in (avail := available()): raise ValueError(f"device {name!r} is not available; available: {avail}")
  return importlib.import_module(_BACKENDS[_ALIASES.get(name, name)])

def describe() -> list[dict]:
  """What this machine can run: per available backend its names, fingerprint and fingerprint hash."""
  out = []
  for name in available():
    dev, fp = get(name), get(name).fingerprint()
    out.append({"device": name, "aliases": [a for a, n in _ALIASES.items() if n == name], "fingerprint_hash": dev.fingerprint_hash(fp), "fingerprint": fp})
  return out
