"""Backend name -> device module (devices/base.py's Device); adding a backend is one line in _BACKENDS (its module must
import without its library). A name with an index (OPENCL:0) is an alias of the backend's device 0, the one its module
drives."""
from __future__ import annotations
import importlib
from typing import TYPE_CHECKING, cast
from devices.base import Device

_BACKENDS: dict[str, str] = {"CPU": "devices.cpu", "OPENCL": "devices.opencl", "CUDA": "devices.cuda", "HIP": "devices.hip"}
_ALIASES: dict[str, str] = {"OPENCL:0": "OPENCL", "CUDA:0": "CUDA", "HIP:0": "HIP"}

if TYPE_CHECKING:  # mypy checks that every backend module is a Device; at run time they are imported by name, when asked
  from devices import cpu, cuda, hip, opencl
  _DEVICES: tuple[Device, ...] = (cpu, opencl, cuda, hip)


def _module(name: str) -> Device: return cast(Device, importlib.import_module(_BACKENDS[name]))

def available() -> list[str]: return [n for n in _BACKENDS if _module(n).available()]

def get(name: str) -> Device:
  if _ALIASES.get(name, name) not in (avail := available()): raise ValueError(f"device {name!r} is not available; available: {avail}")
  return _module(_ALIASES.get(name, name))

def describe() -> list[dict]:
  """What this machine can run: per available backend its names, fingerprint and fingerprint hash."""
  out = []
  for name in available():
    dev, fp = get(name), get(name).fingerprint()
    aliases = [a for a, n in _ALIASES.items() if n == name]
    out.append({"device": name, "aliases": aliases, "fingerprint_hash": dev.fingerprint_hash(fp), "fingerprint": fp})
  return out
