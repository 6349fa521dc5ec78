"""The one cache-directory policy: everything tunesvc keeps because it is costly to recompute lies under TUNESVC_CACHE_DIR,
else the user's cache dir (~/.cache/tunesvc on Linux), one subdirectory or file per store:
  compile/          the CPU compiler's shared libraries, by source, compiler and flags (devices/cpu.py)
  results.sqlite    the search results of `tunesvc tune`, by kernel, fingerprint and action-space version (search/cache.py)
  opts/             the runtime's answers from the service (tunesvc/cache.py)
Here, below every package, so that each of them may ask."""
from __future__ import annotations
import os
from pathlib import Path
import platformdirs


def cache_dir(*parts: str) -> Path: return Path(os.environ.get("TUNESVC_CACHE_DIR") or platformdirs.user_cache_dir("tunesvc"), *parts)
