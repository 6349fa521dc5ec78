import contextlib, ctypes, gzip, os, pickle, signal, time
from pathlib import Path
from typing import Callable, TypeVar
import pytest
from hypothesis import settings
from build_cache import BUILD_CACHE

# Property tests (hypothesis) draw 100 examples each in `make test`, and 500 more in `make test-exhaustive`, which sets
# TUNESVC_PROPERTY_EXAMPLES and selects them (`-m property`, marked below): CI runs both, so each is run as hard as when CI's
# make test drew 500 (CI=true did), and CI's make test is the one timed against the 6-minute bar (~27 CPU-s less on Zen 4)
settings.register_profile("suite", max_examples=int(os.environ.get("TUNESVC_PROPERTY_EXAMPLES", 100)), deadline=None)
settings.load_profile("suite")

# the corpus is part of the checkout (examples/corpus/README.md): a fresh clone runs every test; required, never skipped
CORPUS = Path(__file__).resolve().parents[1] / "examples" / "corpus" / "tinygrad-v0.8.0-kernels.jsonl.gz"
T = TypeVar("T")


def pytest_itemcollected(item):
  """Every hypothesis test is marked `property` (before -m selects)."""
  if getattr(getattr(item, "obj", None), "is_hypothesis_test", False): item.add_marker(pytest.mark.property)


@pytest.hookimpl(trylast=True)  # after -m has deselected: the shares below are of the tests that run
def pytest_collection_modifyitems(items):
  """Each pytest-xdist worker's share of the tests (the n contiguous parts worksteal deals out) starts with its part of the
  slow ones, dealt round-robin: both cores start on the tests of a minute, and the thief of an idle worker takes quick ones
  from the back of the other's queue: no test of a minute is left to start last and run alone. The same order on every
  worker (the count is theirs alike); without xdist, the slow tests first."""
  n = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1))
  slow = [item for item in items if item.get_closest_marker("slow")]
  quick = [item for item in items if not item.get_closest_marker("slow")]
  items[:] = [t for w in range(n) for t in slow[w::n] + quick[w * len(quick) // n:(w + 1) * len(quick) // n]]


# The timing tier runs right after the parallel one, and the machine takes a while to settle (its tests failed there at a
# load average of 2.2): it starts once the rest of the machine keeps under QUIET_CORES busy for a second, waiting at most
# SETTLE_S, and says what it saw (a busy machine's timings may still fail: they are the measurement, not the threshold)
QUIET_CORES, SETTLE_S = 0.2, 60.0

def pytest_ignore_collect(collection_path, config):
  """The timing tier (`-m timing`, make test's second run) imports only the test files that mark a test timing (every
  spelling of the marker has `mark.timing` in it): importing the other ~50 for nothing was ~4 CPU-s of its wall."""
  if config.option.markexpr == "timing" and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
    return "mark.timing" not in collection_path.read_text(encoding="utf-8") or None
  return None

def pytest_collection_finish(session):
  if os.environ.get("PYTEST_XDIST_WORKER") or session.config.option.collectonly: return  # nothing is timed: no wait (--collect-only waited 60 s busy)
  if not any(item.get_closest_marker("timing") for item in session.items): return
  from search.load import wait_quiet
  waited, cores = wait_quiet(QUIET_CORES, SETTLE_S)
  settled = "settled" if cores < QUIET_CORES else f"NOT settled (under {QUIET_CORES:g} wanted)"
  session.config.pluginmanager.get_plugin("terminalreporter").write_line(
    f"timing tests: the rest of the machine kept {cores:.2f} cores busy in the last second, {settled}, after {waited:.0f} s; "
    f"load average {os.getloadavg()[0]:.2f}")


@pytest.fixture(scope="session")
def corpus_lines() -> list[str]:
  with gzip.open(CORPUS, "rt", encoding="utf-8") as f: return [line for line in f if line.strip()]


def once_a_run(tmp_path_factory, name: str, make: Callable[[], T]) -> T:
  """make(), computed by the first of the run's test processes to ask and read back by the others: kept, pickled, in the
  run's temporary root, which its pytest-xdist workers share (written whole, then renamed: a race makes it twice, never
  reads half)."""
  root = tmp_path_factory.getbasetemp()
  path = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "once-a-run" / f"{name}.pickle"
  if path.exists(): return pickle.loads(path.read_bytes())
  value = make()
  path.parent.mkdir(exist_ok=True)
  (tmp := path.with_name(f"{path.name}.{os.getpid()}")).write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
  os.replace(tmp, path)
  return value


@pytest.fixture(scope="session")
def corpus(corpus_lines, tmp_path_factory):
  """Every document through loads once a run (a kernel that fails it errors the fixture in each process that asks): ~5
  CPU-s quiet, which each pytest-xdist worker paid, and each bounded fuzz run's kernel pool again (fuzz_harness.kernel_pool
  takes these); the other processes unpickle the kernels in ~0.2 s."""
  from linearizer.ast import loads
  return once_a_run(tmp_path_factory, "corpus", lambda: [loads(line) for line in corpus_lines])


# What the suite compiles is a function of the source, the compiler and its flags alone, and most of a cold run's CPU: kept in
# this checkout's build/ (git ignores it), shared by the pytest-xdist workers, every process they start and the checkout's
# next runs, whatever the user's cache dir holds: tunesvc's C compiles (devices/cpu.py names each .so by the hash of all
# that), PoCL's kernel binaries (POCL_CACHE_DIR; it hashes the source, options and device) and tinygrad's compiled kernels
# (CACHEDB, by source). Not results: each process's own (own_cache_dir). A fresh clone's run is cold; `rm -rf build/test-cache` makes one.
for sub in ("compile", "pocl"): (BUILD_CACHE / sub).mkdir(parents=True, exist_ok=True)
os.environ.setdefault("POCL_CACHE_DIR", str(BUILD_CACHE / "pocl"))  # read when PoCL loads: before any test imports it
os.environ.setdefault("CACHEDB", str(BUILD_CACHE / "tinygrad.db"))  # read when tinygrad is imported


@pytest.fixture(scope="session", autouse=True)
def own_cache_dir(tmp_path_factory):
  """Every test process (each pytest-xdist worker has its own base temp dir) keeps search results and the runtime's answers
  in a cache dir of its own, set before any test runs and inherited by the processes tests start: never the user's, so no
  test reads a result another run left. Its compile/ is the checkout's (BUILD_CACHE): a compile is the same wherever made."""
  cache = tmp_path_factory.getbasetemp() / "cache"
  cache.mkdir()
  (cache / "compile").symlink_to(BUILD_CACHE / "compile", target_is_directory=True)
  os.environ["TUNESVC_CACHE_DIR"] = str(cache)


# timings on a busy machine are re-taken and, still contended, refused (search/settings.py OnBusy): the tests that are
# not about that must pass on a shared machine too, so they store a contended result (marked busy); test_search's
# busy-machine tests set on_busy themselves
os.environ.setdefault("TUNESVC_ON_BUSY", "store")

# PoCL (OpenCL on the CPU, here and on CI) builds every kernel twice: a work-group function for any local size when
# devices/opencl.py takes the program's binary (clGetProgramInfo), and one specialised to the launch's local size at its
# first launch. Unspecialised, the launch runs the first: the same kernel source run by the same device, built once
# (-35% CPU on the tensor-core emulation's kernels, -13% on a fuzz sample; every test and process started from here)
os.environ.setdefault("POCL_WORK_GROUP_SPECIALIZATION", "0")

# A test ends every process it starts (a compile pool, a server, a browser): one left running spends CPU inside the tests
# after it, where no measure of them sees it, and processes pile up over a run. Each test process is the subreaper of
# what its tests start, so an orphan (a compiler whose driver was killed) comes back to it instead of init, and is seen.
# After each test the search workshop's pools and runner (kept for the process's life: search/workshop.py) close -- a
# search that ended leaves its last compiles running, results unread -- and then what the test started and is still
# running (after a grace of LEFT_GRACE_S for what is on its way out) is killed, named, and fails the test. Except, named
# in a warning: processes whose group leader is gone -- a compile pool worker's compilers, in its group, when the worker
# died with the thread that started it (search/pool.py's PR_SET_PDEATHSIG is per thread) and the pool has not yet replaced
# or closed it (which kills the group). multiprocessing's forkserver and resource tracker stay: idle, started once a process.
LEFT_GRACE_S = 2.0
with contextlib.suppress(OSError, AttributeError): ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER, Linux

def state_and_group(pid: int) -> tuple[str, int]:
  """A process's state (Z: exited, not yet reaped) and process group, from /proc (OSError once it is gone)."""
  state, _, pgid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:3]
  return state, int(pgid)

def running_descendants() -> dict[int, tuple[str, int]]:
  """This process's descendants that have not exited: pid -> (command line, process group)."""
  found, todo = {}, [os.getpid()]
  while todo:
    for task in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
      with contextlib.suppress(OSError):
        for pid in map(int, task.read_text().split()):
          with contextlib.suppress(OSError):
            if (sg := state_and_group(pid))[0] != "Z":
              found[pid] = (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip(), sg[1])
          todo.append(pid)
  return found

def exited(pid: int) -> bool:
  try: return state_and_group(pid)[0] == "Z"
  except OSError: return True

@pytest.fixture(autouse=True)
def no_process_left_running():
  import multiprocessing.forkserver, multiprocessing.resource_tracker, warnings
  from search.workshop import WORKSHOP
  before = running_descendants()
  yield
  WORKSHOP.close()
  servers = {multiprocessing.forkserver._forkserver._forkserver_pid, multiprocessing.resource_tracker._resource_tracker._pid}
  left = lambda: {pid: v for pid, v in running_descendants().items() if pid not in before and pid not in servers}
  end = time.monotonic() + LEFT_GRACE_S
  while (running := left()) and time.monotonic() < end: time.sleep(0.05)
  for pid in running:
    with contextlib.suppress(OSError): os.kill(pid, signal.SIGKILL)
  named = lambda procs: "; ".join(f"{pid}: {cmd[:200]}" for pid, (cmd, _) in procs)
  leaderless = [(pid, v) for pid, v in running.items() if v[1] != pid and exited(v[1])]
  if leaderless: warnings.warn(f"processes left running by a process group whose leader died (killed): {named(leaderless)}", stacklevel=2)
  if started := [(pid, v) for pid, v in running.items() if (pid, v) not in leaderless]:
    pytest.fail(f"the test left processes running (killed): {named(started)}")


def own_clock() -> float:
  """Seconds on a clock of this thread's own: the wall clock less the time the thread spent runnable but waiting for a core
  (/proc/thread-self/schedstat's run delay, what a busy machine adds). Two readings' difference is what a call's own work
  and waits took, which other load does not stretch: the measure of a bound on those (a deadline, a read cut short)."""
  return time.monotonic() - int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9


TOKENS = {"sub": "submit", "wrk": "worker", "adm": "admin"}  # the tokens the `server` fixture knows, by role


@pytest.fixture
def server(tmp_path):
  """A real API server on SQLite, on a free loopback port (tunesvc serve's API thread, no local worker): its URL."""
  from tunesvc.config import Settings
  from tunesvc.serve import Service
  svc = Service(Settings(database_url=f"sqlite:///{tmp_path}/client.db", tokens=TOKENS), port=0, workers=0).start()
  yield svc.url
  svc.stop()


@pytest.fixture
def tmpfs(tmp_path):
  """A 2 MiB tmpfs mounted at a fresh directory (a disk that fills in a moment): its path. Mounting needs root, as in CI."""
  import subprocess
  path = tmp_path / "tmpfs"
  path.mkdir()
  r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)], capture_output=True, text=True)
  if r.returncode != 0: pytest.skip(f"cannot mount a tmpfs (not root?): {r.stderr.strip()}")
  yield path
  subprocess.run(["umount", "-l", str(path)], check=True)


def fill(path) -> None:
  """Write to `path` until its file system is full."""
  with open(f"{path}/filler", "wb", buffering=0) as f:
    try:
      while True: f.write(b"\0" * 4096)
    except OSError: pass
