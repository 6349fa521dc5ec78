"""The local result cache: SQLite on disk, one row per (kernel key, device fingerprint hash, action-space version).

A different fingerprint or action-space version is a miss, so a result is never reused where it was not measured; it
may still seed a search (warm starts): the same kernel's winners on other fingerprints, and the winners of kernels of
the same structure on this one (search/similar.py; the kernels table holds each stored kernel's structure, sizes and
document: a kernel stored before it held documents is no neighbour). WAL mode and a busy timeout let several processes
share the file."""
from __future__ import annotations
import json, sqlite3
from pathlib import Path
from typing import Optional, Sequence
from linearizer.cachedir import cache_dir
from linearizer.ast import KernelAST, loads
from search.result import SearchResult, Seed, SeedSource
from linearizer.alike import nearest, sizes, structure
from search.similar import Tuned


def default_path() -> Path: return cache_dir("results.sqlite")


class ResultCache:
  def __init__(self, path: Optional[Path] = None):
    self.path = Path(path or default_path())
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
    self.db.execute("PRAGMA journal_mode=WAL")
    self.db.execute("CREATE TABLE IF NOT EXISTS results (kernel_key TEXT, fingerprint TEXT, action_space_version INTEGER, "
                    "result TEXT NOT NULL, PRIMARY KEY (kernel_key, fingerprint, action_space_version))")
    self.db.execute("CREATE TABLE IF NOT EXISTS kernels (kernel_key TEXT PRIMARY KEY, structure TEXT NOT NULL, sizes TEXT NOT NULL, document TEXT)")
    if "document" not in {r[1] for r in self.db.execute("PRAGMA table_info(kernels)")}:  # a cache from before documents
      self.db.execute("ALTER TABLE kernels ADD COLUMN document TEXT")
    self.db.execute("CREATE INDEX IF NOT EXISTS kernels_structure ON kernels (structure)")

  def get(self, kernel_key: str, fingerprint_hash: str, action_space_version: int) -> Optional[SearchResult]:
    row = self.db.execute("SELECT result FROM results WHERE kernel_key=? AND fingerprint=? AND action_space_version=?",
                          (kernel_key, fingerprint_hash, action_space_version)).fetchone()
    return SearchResult.from_json(json.loads(row[0])) if row else None

  def lookup(self, fingerprint: str, keys: Sequence[str], *, action_space_version: int) -> list[Optional[dict]]:
    """linearizer.cachedir.ResultStore: each key's stored winner, in the service's answer form."""
    found = [self.get(k, fingerprint, action_space_version) for k in keys]
    return [None if r is None else {"kernel_key": r.kernel_key, "fingerprint": r.fingerprint_hash, "action_space_version": r.action_space_version,
                                    "opts": r.best_opts, "best_s": r.best_s, "baseline_s": r.baseline_s} for r in found]

  def winners_elsewhere(self, kernel_key: str, fingerprint_hash: str, action_space_version: int) -> list[Seed]:
    """The winners of this kernel on other device fingerprints (same action space): warm starts for a search here."""
    rows = self.db.execute("SELECT fingerprint, result FROM results WHERE kernel_key=? AND fingerprint<>? AND action_space_version=?",
                           (kernel_key, fingerprint_hash, action_space_version)).fetchall()
    return [Seed(json.loads(r)["best_opts"], SeedSource.OTHER_FINGERPRINT, kernel_key, fp) for fp, r in rows]

  def alike(self, ast: KernelAST, fingerprint_hash: str, action_space_version: int, n: int = 3) -> list[Tuned]:
    """The n kernels nearest in size to `ast` with its structure (itself left out), tuned on this device fingerprint and
    action space, with their results: warm starts and a cost model's data for a search of a kernel not tuned before."""
    rows = self.db.execute("SELECT k.sizes, k.document, r.result FROM kernels k JOIN results r ON r.kernel_key = k.kernel_key "
                           "WHERE k.structure=? AND k.kernel_key<>? AND r.fingerprint=? AND r.action_space_version=? "
                           "AND k.document IS NOT NULL",
                           (structure(ast), ast.key, fingerprint_hash, action_space_version)).fetchall()
    near = nearest(sizes(ast), [(json.loads(sz), (doc, res)) for sz, doc, res in rows], n)  # only these parsed
    return [Tuned(loads(doc), SearchResult.from_json(json.loads(res))) for doc, res in near]

  def put(self, r: SearchResult, ast: Optional[KernelAST] = None) -> None:
    """Store r; with its kernel `ast`, also the kernel's structure, so that kernels alike find r (alike)."""
    self.db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)",
                    (r.kernel_key, r.fingerprint_hash, r.action_space_version, json.dumps(r.to_json())))
    if ast is not None:
      if ast.key != r.kernel_key: raise ValueError("the result is not this kernel's")
      self.db.execute("INSERT OR REPLACE INTO kernels VALUES (?, ?, ?, ?)",
                      (ast.key, structure(ast), json.dumps(sizes(ast)), json.dumps(ast.to_json())))

  def close(self) -> None: self.db.close()
