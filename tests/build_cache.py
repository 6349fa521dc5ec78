"""The checkout's build/test-cache (git ignores build/): what the suite compiles, by content, kept for its next runs and
shared by the pytest-xdist workers (tests/conftest.py points tunesvc's, PoCL's and tinygrad's compile caches here). And
the builds whose only question is whether a compiler accepts a source (NVRTC's and hipcc's checks of every op): the
answer is a function of the compiler, its flags and the source alone, so each success is remembered by the hash of all
of them and not asked again; a failure is never remembered, and a changed source, flag or compiler is a new question."""
import hashlib
from pathlib import Path

BUILD_CACHE = Path(__file__).resolve().parents[1] / "build" / "test-cache"
ACCEPTED = BUILD_CACHE / "accepted"


def _mark(parts: tuple[str, ...]) -> Path: return ACCEPTED / hashlib.sha256("\0".join(parts).encode()).hexdigest()

def accepted(*parts: str) -> bool:
  """Did a build of exactly these parts (the compiler's identity, its flags, the source) succeed before?"""
  return _mark(parts).exists()

def accept(*parts: str) -> None:
  ACCEPTED.mkdir(parents=True, exist_ok=True)
  _mark(parts).touch()
