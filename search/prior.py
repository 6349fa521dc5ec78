"""The cost model's prior: what searches of other kernels measured on a device family (rows of a candidate's features and
its time relative to its kernel's hand-coded time), so that the model strategy's first round is ranked too instead of
exhaustive. Two sources: the file shipped with the search (search/priors/<family>.json.gz, collected by
bench/search_prior.py), and one trained from every measurement in a service's store (`tunesvc cost-model train`), which
workers fetch from the API and hand to tune() in place of the shipped one.

A prior records what its rows were measured and featurised under: the family, the feature names (search/features.py's
schedule features), CODEGEN_VERSION and ACTION_SPACE_VERSION. Rows of other features mean other things, of another action
space other children: such a prior is refused, with a log line saying why (refusal). Rows of an older CODEGEN_VERSION timed
code that has since changed, mostly in a few kernels' fast paths: such a prior still ranks (logged, and one of today's
version is preferred), because it only decides which children are measured first -- every winner is measured and
verified -- and refusing it made every codegen change send the first round back to measuring every child."""
from __future__ import annotations
import functools, gzip, json, logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence
from linearizer import ACTION_SPACE_VERSION, CODEGEN_VERSION
from linearizer.options import LinearizerOptions
from search.cost_model import CostModel
from search.features import SCHEDULE_NAMES
from search.model_beam import MIN_TRAIN, Data, measured
from search.similar import Tuned

PRIORS = Path(__file__).resolve().parent / "priors"
log = logging.getLogger("tunesvc.search")


def family(o: LinearizerOptions) -> str:
  """The device family a prior is measured for: the backend and its widest float vector (cpu-w16: AVX-512, cpu-w8: AVX2)."""
  return f"{o.device.lower()}-w{max(o.float_vector_widths, default=1)}"


def path(o: LinearizerOptions) -> Path: return PRIORS / f"{family(o)}.json.gz"


@dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, so a fitted model is cached per prior object (_fitted)
class Prior:
  family: str
  names: tuple[str, ...]          # the features' names its rows were computed under (search/features.py SCHEDULE_NAMES)
  codegen_version: int            # the generated code its times are of (-1: not recorded, a file from before versions)
  action_space_version: int
  rows: tuple[tuple[float, ...], ...]  # (time relative to its kernel's hand-coded time, *features)
  kernels: tuple[str, ...] = ()   # the kernels measured (names, else keys): a benchmark of its ranking leaves them out
  meta: dict[str, Any] = field(default_factory=dict)  # how it was collected: settings, load, source

  def data(self) -> Data: return [(list(r[1:]), r[0]) for r in self.rows]

  def refusal(self, o: LinearizerOptions) -> Optional[str]:
    """Why this prior may not rank a search on a device of options o; None where it may."""
    if self.family != family(o): return f"it is of the {self.family} family, the device is {family(o)}"
    if self.names != SCHEDULE_NAMES: return "its features were computed under other names (search/features.py changed since)"
    if self.action_space_version != ACTION_SPACE_VERSION:
      return f"it was searched at ACTION_SPACE_VERSION {self.action_space_version}, this is {ACTION_SPACE_VERSION}"
    return None

  def stale(self) -> Optional[str]:
    """How its times are out of date (None where they are of today's generated code): it still ranks."""
    return None if self.codegen_version == CODEGEN_VERSION else f"it timed code of CODEGEN_VERSION {self.codegen_version}, this is {CODEGEN_VERSION}"

  def to_json(self) -> dict:
    return {"family": self.family, "names": list(self.names), "codegen_version": self.codegen_version,
            "action_space_version": self.action_space_version, "kernels": list(self.kernels), "meta": self.meta, "rows": [list(r) for r in self.rows]}

  @staticmethod
  def from_json(d: dict) -> Prior:
    return Prior(d["family"], tuple(d["names"]), d.get("codegen_version", -1), d.get("action_space_version", -1),
                 tuple(tuple(r) for r in d["rows"]), tuple(d.get("kernels", ())), d.get("meta", {}))


def build(searches: Sequence[tuple[LinearizerOptions, Sequence[Tuned]]], meta: dict, max_other_load: Optional[float] = None) -> Prior:
  """The prior of one device family from what the searches measured: (the options of the device they ran on, what was
  tuned there), each candidate featurised under its device's options (times rounded to 4 digits, features to 5); with
  max_other_load, only candidates timed while the rest of the machine kept fewer cores busy."""
  if len(fams := {family(o) for o, _ in searches}) != 1: raise ValueError(f"a prior is of one device family: {sorted(fams)}")
  rows = tuple((float(f"{t:.4g}"), *(float(f"{x:.5g}") for x in f)) for o, tuned in searches for f, t in measured(tuned, o, max_other_load))
  kernels = tuple(t.ast.name or t.ast.key for _, tuned in searches for t in tuned)
  return Prior(fams.pop(), SCHEDULE_NAMES, CODEGEN_VERSION, ACTION_SPACE_VERSION, rows, kernels, meta)


def read(p: Path) -> Prior:
  with gzip.open(p, "rt") as f: return Prior.from_json(json.load(f))


def write(prior: Prior, p: Optional[Path] = None) -> Path:
  """Write the prior (default: the shipped file of its family)."""
  p = p or PRIORS / f"{prior.family}.json.gz"
  p.parent.mkdir(parents=True, exist_ok=True)
  with gzip.open(p, "wt") as f: json.dump(prior.to_json(), f, separators=(",", ":"))
  _shipped.cache_clear()
  return p


@functools.cache
def _shipped(p: Path) -> Optional[Prior]: return read(p) if p.is_file() else None


def shipped(o: LinearizerOptions) -> Optional[Prior]:
  """The prior shipped for o's family, as it is (None where there is none): usable(prior, o) says whether it may rank."""
  return _shipped(path(o))


@functools.cache
def _warn_once(why: str) -> None: log.warning(why)  # once a process: a worker would say it every search


def usable(prior: Prior, o: LinearizerOptions) -> bool:
  """Whether the prior may rank a search on a device of options o; where it may not, logged once (why)."""
  if (why := prior.refusal(o) or (f"{len(prior.rows)} rows, under {MIN_TRAIN}" if len(prior.rows) < MIN_TRAIN else None)) is None: return True
  _warn_once(f"the {prior.meta.get('source', 'shipped')} cost-model prior of {prior.family} is not used: {why}")
  return False


@functools.lru_cache(maxsize=4)
def _fitted(prior: Prior) -> CostModel: return CostModel().fit(*zip(*prior.data()))


def model(o: LinearizerOptions, alike: Sequence[tuple[list[float], float]] = (), given: Optional[Prior] = None) -> Optional[CostModel]:
  """The cost model fitted on a prior of o's family -- `given` (a service's, trained from its store), else (or where it is
  refused) the shipped one; of those, one of today's CODEGEN_VERSION first, else a stale one (logged) -- (once a process:
  ~0.3 s) and on `alike` (what the searches of kernels alike measured, search/similar.py: fitted again for each search);
  None where neither is there and usable."""
  if not (priors := sorted((p for p in (given, shipped(o)) if p is not None and usable(p, o)), key=lambda p: p.stale() is not None)): return None
  if (why := (prior := priors[0]).stale()) is not None:
    _warn_once(f"the {prior.meta.get('source', 'shipped')} cost-model prior of {prior.family} ranks though {why}")
  return CostModel().fit(*zip(*[*prior.data(), *alike])) if alike else _fitted(prior)
