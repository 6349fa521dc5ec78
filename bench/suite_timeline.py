"""Where the test suite's time goes: a pytest plugin that writes one JSON line per test (its pytest-xdist worker, start,
wall seconds, CPU seconds of the worker and of the child processes it reaped meanwhile: compilers, pools, servers) into
$SUITE_TIMELINE_DIR, and a report of those lines: the sums, each worker's span and its last tests (a long test started
late sets the wall time), the files and the tests that cost most. A child still running when its test ends (the search
workshop's runner and compile pool, kept for the process's life) is not counted.

  rm -rf /tmp/tl && SUITE_TIMELINE_DIR=/tmp/tl PYTHONPATH=bench make test PYTEST_ARGS="-p suite_timeline"
  .venv/bin/python bench/suite_timeline.py /tmp/tl [--top 40] [--against /tmp/tl-warm]

With --against, another run's folder (a warm run's, with build/test-cache full, against a cold one's): the CPU seconds
by file and the tests whose CPU differs most, this run's less that one's -- what the cache keeps is most of a cold run's
extra. CPU a test's worker reaps from a process an earlier test started (a pool closed late) is counted for the later test.
"""
from __future__ import annotations
import argparse, collections, json, os, time
from pathlib import Path
import pytest

_out = None

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  global _out
  start, t0, c0 = time.time(), time.monotonic(), os.times()
  yield
  c1, worker = os.times(), os.environ.get("PYTEST_XDIST_WORKER", "main")
  if _out is None:
    (d := Path(os.environ.get("SUITE_TIMELINE_DIR", "suite-timeline"))).mkdir(parents=True, exist_ok=True)
    _out = open(d / f"{worker}-{os.getpid()}.jsonl", "a", buffering=1)
  _out.write(json.dumps({"worker": worker, "test": item.nodeid, "start": start, "wall": time.monotonic() - t0,
                         "cpu": c1.user + c1.system - c0.user - c0.system,
                         "children": c1.children_user + c1.children_system - c0.children_user - c0.children_system}) + "\n")


def rows_of(folder: str) -> list[dict]:
  return [json.loads(line) for f in sorted(Path(folder).glob("*.jsonl")) for line in f.read_text().splitlines()]

cpu = lambda r: r["cpu"] + r["children"]

def report(folder: str, top: int) -> None:
  rows = rows_of(folder)
  t0 = min(r["start"] for r in rows)
  end = lambda r: r["start"] + r["wall"] - t0
  own, kids = sum(r["cpu"] for r in rows), sum(r["children"] for r in rows)
  print(f"{len(rows)} tests over {max(map(end, rows)):.1f} s: test wall {sum(r['wall'] for r in rows):.1f} s, "
        f"CPU {own + kids:.1f} s ({own:.1f} in the workers, {kids:.1f} in their children)")
  by = collections.defaultdict(list)
  for r in rows: by[r["worker"]].append(r)
  for w, rs in sorted(by.items()):
    rs.sort(key=lambda r: r["start"])
    print(f"{w}: {len(rs)} tests, {sum(r['wall'] for r in rs):.1f} s of tests, from {rs[0]['start'] - t0:.1f} to {end(rs[-1]):.1f} s; last: " +
          ", ".join(f"{r['test'].split('::')[-1][:48]} ({r['wall']:.1f} s from {r['start'] - t0:.0f})" for r in rs[-3:]))
  files: collections.Counter = collections.Counter()
  for r in rows: files[r["test"].split("::")[0]] += cpu(r)
  print("CPU s by file: " + ", ".join(f"{Path(f).name} {s:.0f}" for f, s in files.most_common()))
  # more CPU than its cores could spend in its wall time: most of it is reaped from processes earlier tests started (a
  # shared compile pool closed: its whole compile history), not the test's own (two such led a session to the wrong tests)
  earlier = lambda r: cpu(r) > r["wall"] * (os.cpu_count() or 1) + 1.0
  print(f"{'wall':>7} {'CPU':>7} {'start':>6}  worker test   (*: more CPU than the cores allow in its wall time: reaped from earlier tests)")
  for r in sorted(rows, key=lambda r: -max(r["wall"], cpu(r)))[:top]:
    print(f"{r['wall']:7.1f} {cpu(r):7.1f}{'*' if earlier(r) else ' '}{r['start'] - t0:5.0f}  {r['worker']} {r['test']}")


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
