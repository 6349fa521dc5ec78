"""The service's closed sets of names, on the wire and in the store as their values (StrEnum: a member is that string).
Plain enums with no imports, so that the store, the API, the CLI and workers (through the client's JSON) share them."""
from __future__ import annotations
from enum import StrEnum, auto


class JobState(StrEnum):
  QUEUED = auto()
  RUNNING = auto()
  DONE = auto()
  FAILED = auto()

ENDED = (JobState.DONE, JobState.FAILED)
PENDING = (JobState.QUEUED, JobState.RUNNING)


class JobKind(StrEnum):
  TUNE = auto()     # a search
  CONFIRM = auto()  # a second measurement of one result's opts (tunesvc/store/proof.py)


class ResultStatus(StrEnum):
  """A result's standing: a verified search's result is unconfirmed until a confirm job's measurement agrees (confirmed:
  served) or disagrees (refuted); an admin may invalidate any; an unverified search's result and a confirm job's own
  measurement are never served."""
  UNCONFIRMED = auto()
  CONFIRMED = auto()
  REFUTED = auto()
  INVALIDATED = auto()
  UNVERIFIED = auto()
  MEASUREMENT = auto()


class WorkerState(StrEnum):
  IDLE = auto()
  BUSY = auto()
  OFFLINE = auto()  # shown, never stored: silent past the settings' worker_offline_s, holding no live lease
