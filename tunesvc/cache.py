"""The runtime's local answers: one small JSON file per (action-space version, fingerprint, kernel key) under the user's
cache dir. A write goes to a temporary file that is renamed into place, so every process and thread reads a whole answer
or none, without locks. A hit is one stat: each OptsCache keeps the answers it has parsed and checked, by the file's
inode, size and modification time, and reads a file again only once it was replaced (a rename is a new inode) or changed."""
from __future__ import annotations
import json, math, os, re, tempfile, time
from pathlib import Path
from typing import Optional, Sequence
from linearizer.cachedir import cache_dir
from linearizer.kernel import Opt, OptError

HEX64 = re.compile(r"[0-9a-f]{64}")


class OptsCache:
  def __init__(self, root: str | Path | None = None, max_kept: int = 1 << 14):
    self.root = str(Path(root) if root is not None else cache_dir("opts"))
    self.max_kept = max_kept
    self.kept: dict[str, tuple[tuple[int, int, int], dict]] = {}  # path -> ((inode, size, mtime_ns), the well-formed answer read there)

  def path(self, key: str, fingerprint: str, version: int) -> str:
    # names come from callers and from the server: only hashes and an int may become a path
    if not (HEX64.fullmatch(key) and HEX64.fullmatch(fingerprint) and isinstance(version, int)):
      raise ValueError(f"a kernel key and a fingerprint are sha256 hex, a version an int: {key[:70]!r} {fingerprint[:70]!r} {version!r}")
    return f"{self.root}/v{version}/{fingerprint}/{key}.json"

  def get(self, key: str, fingerprint: str, version: int, max_age_s: float = math.inf) -> Optional[dict]:
    """The stored answer; None where there is none, it was written more than max_age_s ago, or it is not a well-formed
    answer for exactly this key (a damaged file, another kernel's answer, a directory in its place: a miss, replaced by
    the next answer)."""
    path = self.path(key, fingerprint, version)
    try: st = os.stat(path)
    except (OSError, ValueError): return None
    if time.time() - st.st_mtime > max_age_s: return None
    ident = (st.st_ino, st.st_size, st.st_mtime_ns)
    if (seen := self.kept.get(path)) is None or seen[0] != ident:
      try:
        with open(path, "rb") as f: answer = json.loads(f.read())
      except (OSError, ValueError): return None
      if not well_formed(answer, key, fingerprint, version): return None
      if len(self.kept) >= self.max_kept: self.kept = {}
      self.kept[path] = seen = (ident, answer)
    return {**seen[1], "opts": [dict(o) for o in seen[1]["opts"]]}  # the caller's own copy: what is kept stays as read

  def lookup(self, fingerprint: str, keys: Sequence[str], *, action_space_version: int) -> list[Optional[dict]]:
    """linearizer.cachedir.ResultStore: each key's stored answer, however old."""
    return [self.get(k, fingerprint, action_space_version) for k in keys]

  def put(self, answer: dict) -> None:  # OSError where the disk is full or the path is taken: the caller's to shrug off
    """Store a GET /v1/opts answer under its own key, fingerprint and version."""
    path = self.path(answer["kernel_key"], answer["fingerprint"], answer["action_space_version"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
      with os.fdopen(fd, "w") as f: json.dump(answer, f)
      os.replace(tmp, path)
    except BaseException:
      os.unlink(tmp)
      raise


def well_formed(answer, key: str, fingerprint: str, version: int) -> bool:
  """An opts answer (GET /v1/opts's form) for exactly this key, fingerprint and version, every opt parseable."""
  if not (isinstance(answer, dict) and answer.get("kernel_key") == key and answer.get("fingerprint") == fingerprint
          and answer.get("action_space_version") == version and isinstance(opts := answer.get("opts"), list)): return False
  try: [Opt.from_json(o) for o in opts]
  except OptError: return False
  return True
