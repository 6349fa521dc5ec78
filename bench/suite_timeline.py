"""Where the test suite's time goes: a pytest plugin that writes one JSON line per test (its pytest-xdist worker, start,
wall seconds, CPU seconds of the worker and of the child processes it reaped meanwhile, and `tree`: the CPU seconds of the
worker's whole process tree over the test) into $SUITE_TIMELINE_DIR, and a report of those lines: the sums, each worker's
span and its last tests (a long test started late sets the wall time), the files and the tests that cost most.

The tree is a cgroup of the worker's own (cgroup v1's cpuacct, else v2; where neither can be made, as without root, the
lines have no `tree` and the report counts CPU by os.times()): every process the worker starts stays in it, so it counts
what os.times() cannot -- children still running when their test ends (the search workshop's runner and compile pool, kept
for the process's life), a forkserver's children, orphans reparented to init -- each in the test during which it ran.
A line's `left` counts the processes in the tree besides the worker when the test ended.

  rm -rf /tmp/tl && SUITE_TIMELINE_DIR=/tmp/tl PYTHONPATH=bench make test PYTEST_ARGS="-p suite_timeline"
  .venv/bin/python bench/suite_timeline.py /tmp/tl [--top 40] [--against /tmp/tl-warm]

With --against, another run's folder (a warm run's, with build/test-cache full, against a cold one's): the CPU seconds
by file and the tests whose CPU differs most, this run's less that one's -- what the cache keeps is most of a cold run's
extra. Without a tree, CPU a test's worker reaps from a process an earlier test started (a pool closed late) is counted
for the later test.
"""
from __future__ import annotations
import argparse, collections, json, os, time
from pathlib import Path
from typing import Callable, Optional
import pytest

_out = None
_tree: Optional[tuple[Path, Path, Callable[[], float]]] = None  # the worker's cgroup, the one it came from, its CPU seconds


def own_cgroup() -> Optional[tuple[Path, Path, Callable[[], float]]]:
  """Move this process into a new cgroup of its own (v1's cpuacct, else v2's): it, the cgroup it was in, and a reader of
  the CPU seconds spent in it so far; None where no cgroup can be made."""
  mine = {c: path.lstrip("/") for _, cs, path in (line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines())
          for c in cs.split(",")}  # controller ("" for v2's one hierarchy) -> this process's cgroup
  usage_v1 = lambda d: lambda: int((d / "cpuacct.usage").read_text()) / 1e9
  usage_v2 = lambda d: lambda: int((d / "cpu.stat").read_text().split()[1]) / 1e6  # its first line: usage_usec N
  mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
  tries = [(Path(m[1]) / mine["cpuacct"], usage_v1) for m in mounts if m[2] == "cgroup" and "cpuacct" in m[3].split(",") and "cpuacct" in mine]
  tries += [(Path(m[1]) / mine[""], usage_v2) for m in mounts if m[2] == "cgroup2" and "" in mine]
  for base, usage in tries:
    d = base / f"suite-timeline-{os.getpid()}"
    try:
      d.mkdir(exist_ok=True)
      (d / "cgroup.procs").write_text(str(os.getpid()))
      usage(d)()
      return d, base, usage(d)
    except (OSError, ValueError, IndexError):
      suppressed(d.rmdir)
  return None

def suppressed(fn: Callable[[], object]) -> None:
  try: fn()
  except OSError: pass

def tree_pids() -> list[int]:
  return [int(p) for p in (_tree[0] / "cgroup.procs").read_text().split()] if _tree else []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  global _out, _tree
  worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
  if _out is None:
    (d := Path(os.environ.get("SUITE_TIMELINE_DIR", "suite-timeline"))).mkdir(parents=True, exist_ok=True)
    _out = open(d / f"{worker}-{os.getpid()}.jsonl", "a", buffering=1)
    _tree = own_cgroup()  # where the tests run (not an xdist controller), before the first test starts anything
  start, t0, c0, tree0 = time.time(), time.monotonic(), os.times(), _tree[2]() if _tree else 0.0
  yield
  c1 = os.times()
  row = {"worker": worker, "test": item.nodeid, "start": start, "wall": time.monotonic() - t0,
         "cpu": c1.user + c1.system - c0.user - c0.system,
         "children": c1.children_user + c1.children_system - c0.children_user - c0.children_system}
  if _tree: row |= {"tree": _tree[2]() - tree0, "left": len(tree_pids()) - 1}
  _out.write(json.dumps(row) + "\n")


def pytest_unconfigure(config):
  """Back to the cgroup the worker came from, with whatever its tests left in its own, which goes."""
  if not _tree: return
  for pid in [os.getpid(), *tree_pids()]: suppressed(lambda pid=pid: (_tree[1] / "cgroup.procs").write_text(str(pid)))
  suppressed(_tree[0].rmdir)


def rows_of(folder: str) -> list[dict]:
  return [json.loads(line) for f in sorted(Path(folder).glob("*.jsonl")) for line in f.read_text().splitlines()]

cpu = lambda r: r["tree"] if "tree" in r else r["cpu"] + r["children"]  # the whole tree where a cgroup counted it

def report(folder: str, top: int) -> None:
  rows = rows_of(folder)
  t0 = min(r["start"] for r in rows)
  end = lambda r: r["start"] + r["wall"] - t0
  own, kids = sum(r["cpu"] for r in rows), sum(r["children"] for r in rows)
  tree = f", their trees' {sum(map(cpu, rows)):.1f} s (cgroups)" if all("tree" in r for r in rows) else ""
  print(f"{len(rows)} tests over {max(map(end, rows)):.1f} s: test wall {sum(r['wall'] for r in rows):.1f} s, "
        f"CPU {own + kids:.1f} s ({own:.1f} in the workers, {kids:.1f} in the children they reaped){tree}")
  by = collections.defaultdict(list)
  for r in rows: by[r["worker"]].append(r)
  for w, rs in sorted(by.items()):
    rs.sort(key=lambda r: r["start"])
    print(f"{w}: {len(rs)} tests, {sum(r['wall'] for r in rs):.1f} s of tests, from {rs[0]['start'] - t0:.1f} to {end(rs[-1]):.1f} s; last: " +
          ", ".join(f"{r['test'].split('::')[-1][:48]} ({r['wall']:.1f} s from {r['start'] - t0:.0f})" for r in rs[-3:]))
  files: collections.Counter = collections.Counter()
  for r in rows: files[r["test"].split("::")[0]] += cpu(r)
  print("CPU s by file: " + ", ".join(f"{Path(f).name} {s:.0f}" for f, s in files.most_common()))
  # without a cgroup, more CPU than its cores could spend in its wall time: most of it is reaped from processes earlier tests
  # started (a shared compile pool closed: its whole compile history), not the test's own (two such led a session to the wrong tests)
  earlier = lambda r: "tree" not in r and cpu(r) > r["wall"] * (os.cpu_count() or 1) + 1.0
  print(f"{'wall':>7} {'CPU':>7} {'start':>6} {'left':>4}  worker test   (*: more CPU than the cores allow in its wall time: reaped from "
        "earlier tests; left: processes besides the worker in its tree when the test ended)")
  for r in sorted(rows, key=lambda r: -max(r["wall"], cpu(r)))[:top]:
    print(f"{r['wall']:7.1f} {cpu(r):7.1f}{'*' if earlier(r) else ' '}{r['start'] - t0:5.0f} {r.get('left', ''):>4}  {r['worker']} {r['test']}")


def against(folder: str, other: str, top: int) -> None:
  a, b = ({r["test"]: cpu(r) for r in rows_of(f)} for f in (folder, other))
  files: collections.Counter = collections.Counter()
  for t in a.keys() | b.keys(): files[t.split("::")[0]] += a.get(t, 0.0) - b.get(t, 0.0)
  print(f"\nCPU s, this run less {other}'s: {sum(a.values()):.1f} - {sum(b.values()):.1f}; by file: " +
        ", ".join(f"{Path(f).name} {s:+.0f}" for f, s in files.most_common() if abs(s) >= 0.5))
  print(f"{'this':>7} {'other':>7} {'diff':>7}  test")
  for t in sorted(a.keys() | b.keys(), key=lambda t: -abs(a.get(t, 0.0) - b.get(t, 0.0)))[:top]:
    print(f"{a.get(t, 0.0):7.1f} {b.get(t, 0.0):7.1f} {a.get(t, 0.0) - b.get(t, 0.0):+7.1f}  {t}")


if __name__ == "__main__":
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("folder", help="the $SUITE_TIMELINE_DIR of a run")
  p.add_argument("--top", type=int, default=40, help="tests listed, costliest first")
  p.add_argument("--against", metavar="FOLDER", help="another run's folder: the CPU by file and test, this run's less that one's")
  a = p.parse_args()
  report(a.folder, a.top)
  if a.against: against(a.folder, a.against, a.top)
