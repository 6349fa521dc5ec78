"""The search's settings, one definition split by stage (strategy, build, measure, final check) and shared by the CLI,
the API and the worker. Their JSON form is flat (every name is unique across stages): what a job carries, what a
result stores, what the API validates. A field a job may set carries its bounds and help in its metadata (the API
builds its request model from them); the others belong to the machine or the caller. Unknown names are an error."""
from __future__ import annotations
import os, typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Optional

MAX_INT = 2**31 - 1


def job_field(default: Any, help: str, **bounds) -> Any:
  """A field a job may set: its default, its help, and its bounds (pydantic's ge/gt/le/lt)."""
  return field(default=default, metadata={"help": help, "bounds": bounds})


class OnBusy(StrEnum):
  """What a contended final check leads to. REFUSE: redo it once the machine is quiet (waiting up to quiet_wait_s),
  busy_retries times at most; still contended, the search ends with DeviceBusy unless the baseline won. STORE: keep it,
  marked busy, without waiting (TUNESVC_ON_BUSY=store: a machine known to be shared, as the test suite's tests that are
  not about this, which must pass on one)."""
  REFUSE = "refuse"
  STORE = "store"


class StrategyKind(StrEnum):
  """Which strategy proposes: BEAM (the default) measures every child of the beam; MODEL (search/model_beam.py) measures
  only the children a cost model ranks fastest, measure_top a round: the model shipped for the device's family
  (search/prior.py) from round 1, else one trained on the search's own measurements once it has enough. Not the default
  yet (docs/benchmarks.md, bench/strategy_ab.py): at these defaults, BUSY on an AVX2 host with a stale prior, its winners
  were 0.948x and 0.984x the beam's on the two memory-bound kernels (median of 3 pairs; single pairs 0.80x, 0.86x) for
  1.6-3.5x fewer candidates but barely shorter searches; cut to 5 without patience it searches 2.5-7x shorter and loses
  more. Wanted first: priors of today's code for both families, then the same bench quiet."""
  BEAM = "beam"
  MODEL = "model"


@dataclass(frozen=True)
class StrategySettings:
  beam: int = job_field(4, "beam width", ge=1, le=64)
  min_improvement: float = job_field(0.01, "a round gaining less than this share ends the search", ge=0, lt=1)
  max_rounds: int = 32
  patience: int = 1                   # rounds in a row without gain a round cut to measure_top children goes on for
  prune: float = 3.0                  # an action that made a schedule this many times slower is not tried on its descendants (0: off)
  strategy: StrategyKind = job_field(StrategyKind.BEAM, "beam: measure every child of the beam; model: only the cost model's top ones")
  measure_top: int = job_field(9, "children measured a round under the model strategy", ge=1, le=10_000)  # 2 x the beam, 1 more
  # a production autotuner spends its trials where a model's time is (TVM's task scheduler: by each task's share of the
  # end-to-end latency); a worker sees one kernel, so its search weighs the kernel by its worth, the hand-coded time x its
  # runs per inference (measured with the seeds): it cannot win back more than that, and a measured candidate costs ~30-70 ms
  worth_s: float = job_field(1e-3, "worth (hand-coded time x runs per inference) at which a search gets its whole budget; "
                             "less worth gets the square root of its share of it (0: every kernel all of it)", ge=0, le=3600)
  min_effort: float = job_field(0.1, "the least share of the budget a kernel of little worth gets", gt=0, le=1)
  # end the search at a schedule as fast as a stream of the bytes its kernel must move (search/roofline.py). Off: BUSY
  # (load 9-20, helper rf24) nothing was measured to 5%; QUIET (Zen 4, session 24 lead, docs/benchmarks.md) it ended
  # mul_add_16m after its seeds at 0.99x the full search's winner, and judged sops_170 (8M elements) without stopping
  # (288 candidates against the full search's 213: the judgements' cost or the beam's variance, not separated): one
  # kernel of each is no verdict yet
  roofline: bool = False

  def effort(self, worth_s: float) -> float:
    """The share of the budget (after the seeds) a kernel of this worth gets: the root (a kernel worth a hundredth gets a
    tenth) within [min_effort, 1]. Its timings stay: under a millisecond they end at max_runs before min_time_s anyway."""
    return 1.0 if self.worth_s <= 0 else min(1.0, max(self.min_effort, (worth_s / self.worth_s) ** 0.5))


@dataclass(frozen=True)
class BuildSettings:
  compile_timeout_s: float = 60.0
  workers: int = 0                    # compile processes; 0: one per core (the machine's to choose, never a job's)
  # many candidates per compiler invocation where the device can (search/builder.py), those with one preamble in one
  # translation unit: 17-56 ms of compiler CPU a small corpus kernel's candidate instead of 36-68 (one unit each) or 52-82
  # (one gcc each), docs/benchmarks.md
  batch: bool = True


@dataclass(frozen=True)
class MeasureSettings:
  seed: int = job_field(0, "seed of the input data", ge=0, le=MAX_INT)
  min_time_s: float = job_field(0.05, "measured time per candidate", ge=0.001, le=10)
  early_stop: float = 3.0             # stop timing a candidate this many times slower than the best
  timeout_factor: float = 20.0        # a candidate's time limit: this many times the best (seeds: seed_timeout_s)
  seed_timeout_s: float = 120.0
  # check every timed candidate against the reference, not only each round's fastest (the seeds are always checked):
  # the others are never picked, and the check of a large output costs more than its timing
  verify_all: bool = False


@dataclass(frozen=True)
class FinalSettings:
  final_top: int = 3                  # candidates re-timed against the baseline at the end
  final_rounds: int = job_field(7, "interleaved re-timings of the finalists", ge=1, le=100)
  # a final check on the CPU is contended (busy) when the rest of the machine kept busy_load cores busy meanwhile, or
  # the baseline drifted more than max_drift between the check's halves: see OnBusy
  busy_load: float = 0.5
  max_drift: float = 0.25
  busy_retries: int = 2
  quiet_wait_s: float = 30.0
  on_busy: OnBusy = field(default_factory=lambda: OnBusy(os.environ.get("TUNESVC_ON_BUSY", OnBusy.REFUSE)))


@dataclass(frozen=True)
class SearchSettings:
  budget_s: Optional[float] = job_field(120.0, "seconds the search may take", gt=0, le=86400)
  budget_candidates: Optional[int] = job_field(None, "candidates the search may measure", ge=1, le=100_000)
  var_vals: Optional[dict] = None     # where to tune a symbolic kernel (default: each variable's midpoint)
  strategy: StrategySettings = StrategySettings()
  build: BuildSettings = BuildSettings()
  measure: MeasureSettings = MeasureSettings()
  final: FinalSettings = FinalSettings()

  def to_json(self) -> dict:
    return {k: v for f in fields(self) for k, v in (asdict(getattr(self, f.name)) if f.name in STAGES else {f.name: getattr(self, f.name)}).items()}

  @staticmethod
  def from_json(d: dict, *, job: bool = False) -> SearchSettings:
    """From the flat form; ValueError on a name it does not know (with `job`, on one a job may not set)."""
    allowed = set(JOB_FIELDS) | JOB_EXTRA if job else set(NAMES)
    if bad := sorted(set(d) - allowed): raise ValueError(f"unknown search settings: {', '.join(map(str, bad))}")
    top = {k: v for k, v in d.items() if NAMES.get(k) is None}
    stages = {s: cls(**{k: ENUMS[k](v) if k in ENUMS else v for k, v in d.items() if NAMES.get(k) == s}) for s, cls in STAGES.items()}
    return SearchSettings(**{k: v for k, v in top.items() if k not in JOB_EXTRA}, **stages)


STAGES: dict[str, type] = {"strategy": StrategySettings, "build": BuildSettings, "measure": MeasureSettings, "final": FinalSettings}
NAMES: dict[str, Optional[str]] = {**{f.name: None for f in fields(SearchSettings) if f.name not in STAGES},
                                   **{f.name: s for s, cls in STAGES.items() for f in fields(cls)}}  # name -> its stage (None: top)
ENUMS: dict[str, type] = {"on_busy": OnBusy, "strategy": StrategyKind}  # names whose JSON form is an enum's value
JOB_EXTRA = {"action_space_version"}  # a job's key the queue reads (which workers may claim it), not the search's


def _job_fields() -> dict[str, tuple[Any, Any, dict]]:
  out: dict[str, tuple[Any, Any, dict]] = {}
  for cls in (SearchSettings, *STAGES.values()):
    hints = typing.get_type_hints(cls)
    out |= {f.name: (hints[f.name], f.default if f.default is not MISSING else None, dict(f.metadata))
            for f in fields(cls) if "bounds" in f.metadata}
  return out

JOB_FIELDS: dict[str, tuple[Any, Any, dict]] = _job_fields()  # name -> (type, default, {"help", "bounds"}): what a job may set
