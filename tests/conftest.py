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


TOKENS = {"sub": "submit", "wrk": "worker"}  # the tokens the `server` fixture knows, by role


@pytest.fixture
def server(tmp_path):
  """A real API server on SQLite, on a free loopback port (uvicorn in a thread): its URL."""
  import socket, threading, time
  import uvicorn
  from tunesvc.api import create_app
  from tunesvc.config import Settings
  app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/client.db", tokens=TOKENS))
  sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # so asyncio sets TCP_NODELAY (see tunesvc/serve.py)
  sock.bind(("127.0.0.1", 0))
  srv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
  t = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
  t.start()
  while not srv.started: time.sleep(0.01)
  yield f"http://127.0.0.1:{sock.getsockname()[1]}"
  srv.should_exit = True
  t.join(10)
