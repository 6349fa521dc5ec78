"""The cost model's prior: what full beam searches of other kernels measured on a CPU of this vector width, shipped with
the search (search/priors/), so that its first round is ranked too instead of exhaustive.

A prior file holds rows of (features, time relative to its kernel's hand-coded time) and the feature names they were
computed under: a file whose names differ from search/features.py's NAMES, or of another family, is not used. The
kernels it was measured on are named in it (bench/search_prior.py collects it, leaving out the benchmarks' kernels)."""
from __future__ import annotations
import functools, gzip, json
from pathlib import Path
from typing import Optional, Sequence
from linearizer.options import LinearizerOptions
from search.cost_model import CostModel
from search.features import NAMES
from search.model_beam import MIN_TRAIN, Data, prior_data
from search.similar import Tuned

PRIORS = Path(__file__).resolve().parent / "priors"


def family(o: LinearizerOptions) -> str:
  """The device family a prior is measured for: the backend and its widest float vector (cpu-w16: AVX-512, cpu-w8: AVX2)."""
  return f"{o.device.lower()}-w{max(o.float_vector_widths, default=1)}"


def path(o: LinearizerOptions) -> Path: return PRIORS / f"{family(o)}.json.gz"


@functools.cache
def _file(p: Path) -> dict:
  if not p.is_file(): return {}
  with gzip.open(p, "rt") as f: d = json.load(f)
  return d if tuple(d["names"]) == NAMES else {}  # features computed another way: not comparable


@functools.cache
def _load(p: Path) -> tuple[tuple[tuple[float, ...], float], ...]: return tuple((tuple(r[1:]), r[0]) for r in _file(p).get("rows", ()))


def trained_on(o: LinearizerOptions) -> frozenset[str]:
  """The names of the kernels the prior of o's family was measured on (a benchmark of its ranking leaves them out)."""
  return frozenset(_file(path(o)).get("kernels", ()))


def load(o: LinearizerOptions) -> Data:
  """The shipped prior of o's family, [] where there is none (or it is stale)."""
  return [(list(f), t) for f, t in _load(path(o))]


@functools.cache
def _model(p: Path) -> Optional[CostModel]:
  data = _load(p)
  return CostModel().fit(*zip(*data)) if len(data) >= MIN_TRAIN else None


def model(o: LinearizerOptions, alike: Sequence[tuple[list[float], float]] = ()) -> Optional[CostModel]:
  """The cost model fitted on the prior of o's family (once a process: ~0.3 s) and on `alike` (what the searches of kernels
  alike measured, search/similar.py: fitted again for each search); None where the family has no prior."""
  if not _load(path(o)): return None
  return CostModel().fit(*zip(*[*load(o), *alike])) if alike else _model(path(o))


def save(o: LinearizerOptions, tuned: Sequence[Tuned], meta: dict) -> Path:
  """Write the prior of o's family from full searches of `tuned`; times rounded to 4 digits, features to 5."""
  rows = [[float(f"{t:.4g}"), *(float(f"{x:.5g}") for x in f)] for f, t in prior_data(tuned, o)]
  PRIORS.mkdir(exist_ok=True)
  with gzip.open(p := path(o), "wt") as f:
    json.dump({"names": list(NAMES), "family": family(o), "options": o.to_json(), "kernels": [t.ast.name for t in tuned], **meta,
               "rows": rows}, f, separators=(",", ":"))
  for c in (_file, _load, _model): c.cache_clear()
  return p
