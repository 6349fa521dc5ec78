"""What a search returns and stores: every candidate it measured, the winner, the baseline. Plain data with a JSON form
(the store, the API and the cache keep exactly `to_json()`), so nothing downstream imports the search machinery."""
from __future__ import annotations
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum, auto
from typing import Optional


class Status(StrEnum):
  """A candidate's status (its JSON form is the lower-case name): ok (timed in full; `verified` once checked, which the
  search does for the fastest of each round, all it may pick), slow (timing stopped early: clearly slower than the best,
  unverified), the failures, each with its error text, and pending until it is measured
  (never stored: the API refuses it)."""
  PENDING = auto(); OK = auto(); SLOW = auto()
  COMPILE_ERROR = auto(); TOO_LARGE = auto(); TIMEOUT = auto(); CRASH = auto(); MISMATCH = auto(); RUN_ERROR = auto()

FAILURES = (Status.COMPILE_ERROR, Status.TOO_LARGE, Status.TIMEOUT, Status.CRASH, Status.MISMATCH, Status.RUN_ERROR)
STORED = (Status.OK, Status.SLOW, *FAILURES)  # what a stored candidate may be


@dataclass
class Candidate:
  opts: list[dict]                      # [{"op", "axis", "amt"}], applied in order to the unoptimised kernel
  status: Status
  round: int = 0                        # 0: the seeds (unoptimised, hand-coded); n: the n-th beam expansion
  source_hash: str = ""                 # sha256 of the rendered source, the duplicate filter's key
  error: str = ""
  compile_s: float = 0.0
  times_s: list[float] = field(default_factory=list)  # every timed run, in order
  verified: bool = False                # its output matched the reference
  other_load: float = 0.0               # cores the rest of the machine kept busy while it was timed

  @property
  def min_s(self) -> Optional[float]: return min(self.times_s) if self.times_s else None
  @property
  def fastest_s(self) -> float:
    """min_s of a candidate that was timed (ok or slow)."""
    if not self.times_s: raise ValueError(f"candidate {self.opts} was not timed ({self.status})")
    return min(self.times_s)
  @property
  def failed(self) -> bool: return self.status in FAILURES

  def __post_init__(self): self.status = Status(self.status)  # from JSON, a plain str
  def to_json(self) -> dict: return {**asdict(self), "status": self.status.value, "min_s": self.min_s}
  @staticmethod
  def from_json(d: dict) -> Candidate: return Candidate(**{f.name: d[f.name] for f in fields(Candidate) if f.name in d})


class SeedSource(StrEnum):
  """Where a warm start came from: the same kernel's winner on another device fingerprint, or the winner of a kernel alike
  (its structure, other sizes: search/similar.py) on this one."""
  OTHER_FINGERPRINT = auto(); ALIKE = auto()


@dataclass
class Seed:
  """A warm start: a schedule found elsewhere, whose it was (its kernel, its fingerprint and, from the service, its stored
  result), and what the search made of it: `applied`, its opts re-fitted to this kernel (search/similar.py refit), measured in round
  0; [] where not even its first opt is legal here (dropped)."""
  opts: list[dict]
  source: SeedSource
  kernel_key: str = ""
  fingerprint_hash: str = ""
  result_id: Optional[int] = None
  applied: list[dict] = field(default_factory=list)

  @property
  def dropped(self) -> bool: return bool(self.opts) and not self.applied
  def __post_init__(self): self.source = SeedSource(self.source)  # from JSON, a plain str
  def to_json(self) -> dict: return {**asdict(self), "source": self.source.value}
  @staticmethod
  def from_json(d: dict) -> Seed: return Seed(**{f.name: d[f.name] for f in fields(Seed) if f.name in d})


@dataclass
class SearchResult:
  kernel_key: str
  kernel_name: str
  device: str                           # backend name, e.g. "CPU"
  fingerprint: dict                     # the device's fingerprint, and its hash: a result is only valid where it matches
  fingerprint_hash: str
  action_space_version: int
  settings: dict                        # beam width, budgets, seed, threshold: what produced this result
  var_vals: dict[str, int]              # where a symbolic kernel was tuned
  flops: int
  bytes: int
  baseline_opts: list[dict]             # the hand-coded schedule
  baseline_s: float                     # medians of the final interleaved re-timing
  best_opts: list[dict]
  best_s: float
  speedup: float                        # baseline_s / best_s
  speedup_spread: tuple[float, float]   # (low, high): the speedup's range over the final check's rounds
  verified: bool                        # the winner's output matched the reference on this device
  best_source: str
  search_s: float
  candidates: list[Candidate] = field(default_factory=list)
  # how the final check measured: other_load (cores busy elsewhere, the most in a round), drift (the baseline's change
  # between the first and second half of the rounds), retimed (final checks redone: the machine was busy), busy
  # (contended at any point of the search), spread (the winner's max/min time over the rounds), roofline (the search's
  # last judgement of its best against a stream of its bytes, `ended` where that ended it: search/roofline.py; absent
  # where none was made). {} from older workers.
  conditions: dict = field(default_factory=dict)
  seeds: list[Seed] = field(default_factory=list)  # the warm starts it was given, in order ([] from older workers)

  @property
  def failed(self) -> int: return sum(c.failed for c in self.candidates)
  @property
  def seeds_dropped(self) -> int: return sum(w.dropped for w in self.seeds)
  @property
  def candidates_per_s(self) -> float: return len(self.candidates) / self.search_s if self.search_s > 0 else 0.0

  def to_json(self) -> dict:
    d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("candidates", "seeds")}
    return {**d, "speedup_spread": list(self.speedup_spread), "failed": self.failed, "candidates_per_s": self.candidates_per_s,
            "seeds": [w.to_json() for w in self.seeds], "seeds_dropped": self.seeds_dropped, "candidates": [c.to_json() for c in self.candidates]}
  @staticmethod
  def from_json(d: dict) -> SearchResult:
    kw = {f.name: d[f.name] for f in fields(SearchResult) if f.name not in ("candidates", "seeds") and f.name in d}  # newer fields have defaults
    return SearchResult(**{**kw, "speedup_spread": tuple(d["speedup_spread"])}, candidates=[Candidate.from_json(c) for c in d["candidates"]],
                        seeds=[Seed.from_json(w) for w in d.get("seeds", [])])
