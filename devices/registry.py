"""Backend name -> device module; adding a backend is one line in _BACKENDS (its module must import without it)."""
from __future__ import annotations
import importlib
from types import ModuleType

_BACKENDS: dict[str, str] = {"CPU": "devices.cpu"}


def available() -> list[str]: return [n for n, mod in _BACKENDS.items() if importlib.import_module(mod).available()]

def get(name: str) -> ModuleType:
  if name not in (avail := available()): raise ValueError(f"device {name!r} is not available; available: {avail}")
  return importlib.import_module(_BACKENDS[name])
