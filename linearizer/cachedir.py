"""The one cache-directory policy: everything tunesvc keeps because it is costly to recompute lies under TUNESVC_CACHE_DIR,
else the user's cache dir (~/.cache/tunesvc on Linux), one subdirectory or file per store:
  compile/          the CPU compiler's shared libraries, by source, compiler and flags (devices/cpu.py)
  results.sqlite    the search results of `tunesvc tune`, by kernel, fingerprint and action-space version (search/cache.py)
  opts/             the runtime's answers from the service (tunesvc/cache.py)
(The service's SQL store is its state, not a cache: under the user's data dir, or TUNESVC_DATABASE_URL.)
Here, below every package, so that each of them may ask; with ResultStore, the one question every result store answers."""
from __future__ import annotations
import os
from pathlib import Path
from typing import Optional, Protocol, Sequence
import platformdirs


def cache_dir(*parts: str) -> Path: return Path(os.environ.get("TUNESVC_CACHE_DIR") or platformdirs.user_cache_dir("tunesvc"), *parts)


class ResultStore(Protocol):
  """What the search's local results (search/cache.py), the runtime's answer cache (tunesvc/cache.py) and the service
  (tunesvc/client.py, over the SQL store) all answer: each kernel key's best on a device fingerprint at an action-space
  version, as GET /v1/opts answers it -- {"kernel_key", "fingerprint", "action_space_version", "opts", "best_s",
  "baseline_s"} -- or None where none is known. What each records differs (a search, an answer, a proven report)."""
  def lookup(self, fingerprint: str, keys: Sequence[str], *, action_space_version: int) -> list[Optional[dict]]: ...
