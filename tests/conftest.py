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
