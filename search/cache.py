"""The local result cache: SQLite on disk, one row per (kernel key, device fingerprint hash, action-space version).

A different fingerprint or action-space version is a miss, so a result is never reused where it was not measured.
WAL mode and a busy timeout let several processes share the file."""
from __future__ import annotations
import json, sqlite3
from pathlib import Path
from typing import Optional
from linearizer.cachedir import cache_dir
from search.result import SearchResult


def default_path() -> Path: return cache_dir("results.sqlite")


class ResultCache:
  def __init__(self, path: Optional[Path] = None):
    self.path = Path(path or default_path())
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
    self.db.execute("PRAGMA journal_mode=WAL")
    self.db.execute("CREATE TABLE IF NOT EXISTS results (kernel_key TEXT, fingerprint TEXT, action_space_version INTEGER, "
                    "result TEXT NOT NULL, PRIMARY KEY (kernel_key, fingerprint, action_space_version))")

  def get(self, kernel_key: str, fingerprint_hash: str, action_space_version: int) -> Optional[SearchResult]:
    row = self.db.execute("SELECT result FROM results WHERE kernel_key=? AND fingerprint=? AND action_space_version=?",
                          (kernel_key, fingerprint_hash, action_space_version)).fetchone()
    return SearchResult.from_json(json.loads(row[0])) if row else None

  def winners_elsewhere(self, kernel_key: str, fingerprint_hash: str, action_space_version: int) -> list[list[dict]]:
    """The winning opts of this kernel on other device fingerprints (same action space): warm starts for a search here."""
    rows = self.db.execute("SELECT result FROM results WHERE kernel_key=? AND fingerprint<>? AND action_space_version=?",
                           (kernel_key, fingerprint_hash, action_space_version)).fetchall()
    return [json.loads(r[0])["best_opts"] for r in rows]

  def put(self, r: SearchResult) -> None:
    self.db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)",
                    (r.kernel_key, r.fingerprint_hash, r.action_space_version, json.dumps(r.to_json())))

  def close(self) -> None: self.db.close()
