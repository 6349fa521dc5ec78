import os
from hypothesis import settings

# CI runs every property test harder; locally the dev profile keeps `pytest` fast.
settings.register_profile("ci", max_examples=500, deadline=None)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

import gzip
from pathlib import Path
import pytest

# the shared corpus lies beside the checkout (../shared), as in CI's fresh clone; it is required, never skipped
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "tinygrad-v0.8.0-kernels.jsonl.gz"


@pytest.fixture(scope="session")
def corpus_lines() -> list[str]:
  with gzip.open(CORPUS, "rt", encoding="utf-8") as f: return [line for line in f if line.strip()]


@pytest.fixture(scope="session")
def corpus(corpus_lines):
  from linearizer.ast import loads
  return [loads(line) for line in corpus_lines]


TOKENS = {"sub": "submit", "wrk": "worker", "adm": "admin"}  # the tokens the `server` fixture knows, by role


@pytest.fixture
def server(tmp_path):
  """A real API server on SQLite, on a free loopback port (tunesvc serve's API thread, no local worker): its URL."""
  from tunesvc.config import Settings
  from tunesvc.serve import Service
  svc = Service(Settings(database_url=f"sqlite:///{tmp_path}/client.db", tokens=TOKENS), port=0, workers=0).start()
  yield svc.url
  svc.stop()
