"""The lookup path under load: latency (p50, p99) and throughput of `GET /v1/opts/{key}` and `POST /v1/opts/lookup` at
--clients concurrent clients for --seconds, against a `tunesvc serve --workers 0 --api-processes N` (N: the cores) that
this script starts on a fresh SQLite database holding --kernels tuned kernels; and the local-cache hit time of
`Client.opts_for`.

  .venv/bin/python bench/api_load.py                         # 32 clients, 60 s; prints a markdown report
  .venv/bin/python bench/api_load.py --seconds 10 --clients 8

Each client is a task in one asyncio loop with a keep-alive connection of its own (a minimal HTTP/1.1 client: see
Connection) that sends its next request as soon as the last one is answered, and checks each answer. Of its requests,
--batch-share are a POST of --batch keys, the rest a GET of one key; --miss-share of the keys were never tuned (404 /
null). Latency is taken by the client, so it includes the client's own time: the load generator shares the machine with
the server. The report also gives the machine's load average before the run: other work on 2 cores shows in the p99.
"""
from __future__ import annotations
import argparse, asyncio, json, os, platform, random, secrets, socket, statistics, subprocess, sys, tempfile, time
from pathlib import Path
from typing import Any, Optional
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable without installing the package
from devices import cpu
from linearizer.builders import reduce
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel
from linearizer import ACTION_SPACE_VERSION
from search.result import Candidate, SearchResult
from tunesvc.client import Client
from tunesvc.store import Store, queue


def store_tuned(url: str, n: int) -> tuple[list[str], str]:
  """n kernels tuned on this CPU, reported through the store as a worker would: their keys, and the fingerprint hash."""
  fp = cpu.fingerprint()
  fp_hash = cpu.fingerprint_hash(fp)
  ks = {(k := reduce("SUM", (64 + i, 256), (1,), name=f"bench_sum_{i}")).key: k for i in range(n)}
  st = Store(url)
  queue.submit(st, list(ks.values()), "CPU", {"beam": 2})
  w = queue.register(st, "bench", "CPU", fp, fp_hash, cpu.options().to_json())
  while (got := queue.claim(st, w.id, 600)) is not None:  # each search, then its confirmation (the same measurement again)
    job, row = got
    kernel = ks[row.key]
    opts = [o.to_json() for o in hand_coded_optimizations(Kernel(kernel, cpu.options()))]
    cands = [Candidate([], "ok", 0, "0" * 64, "", 0.01, [2e-4], True), Candidate(opts, "ok", 0, "1" * 64, "", 0.01, [1e-4], True)]
    queue.report(st, w.id, job.id, SearchResult(kernel.key, kernel.name, "CPU", fp, fp_hash, ACTION_SPACE_VERSION, {"beam": 2}, {},
                                                kernel.flops(), kernel.bytes(), opts, 1e-4, opts, 1e-4, 1.0, (1.0, 1.0), True, "", 0.1, cands))
  st.close()
  return list(ks), fp_hash


def serve(db: str, api_processes: int) -> tuple[subprocess.Popen, int]:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  # its access log goes to /dev/null: a pipe nobody reads would fill and stall the server
  p = subprocess.Popen([sys.executable, "-m", "tunesvc.cli", "serve", "--port", str(port), "--workers", "0", "--db", db,
                        "--api-processes", str(api_processes)], cwd=ROOT,
                       stdout=subprocess.DEVNULL,
                       env={**os.environ, "TUNESVC_TOKENS": "", "TUNESVC_TOKENS_FILE": "", "TUNESVC_OPEN_RATE_PER_S": "0"})  # one client: unthrottled
  url = f"http://127.0.0.1:{port}"
  for _ in range(300):
    try:
      if httpx.get(f"{url}/healthz").status_code == 200: return p, port
    except httpx.TransportError: time.sleep(0.1)
  p.kill()
  raise SystemExit(f"tunesvc serve did not answer on {url}")


class Connection:
  """One keep-alive HTTP/1.1 connection over asyncio streams: the load generator's client. httpx's AsyncClient costs
  about 4 ms of CPU a request on this 2-core machine, more than the server, so with it the benchmark measured itself."""
  def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter): self.reader, self.writer = reader, writer

  @staticmethod
  async def open(port: int) -> Connection: return Connection(*await asyncio.open_connection("127.0.0.1", port))

  async def request(self, method: str, path: str, body: Optional[dict] = None) -> tuple[int, Any]:
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    self.writer.write(head.encode() + data)
    status, *headers = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    length = next(int(v) for k, _, v in (h.partition(":") for h in headers) if k.lower() == "content-length")
    return int(status.split()[1]), json.loads(await self.reader.readexactly(length))


async def client(port: int, keys: list[str], fp: str, a, warm_until: float, until: float, out: dict[str, list[float]], errors: list[str]):
  """Send the next request as soon as the last is answered, or with --rate on a fixed schedule (a late answer delays the
  next request, and its latency counts from when it was due); check every answer, time those after the warm-up."""
  conn, rng, tuned = await Connection.open(port), random.Random(secrets.randbits(32)), set(keys)
  key = lambda: rng.choice(keys) if rng.random() >= a.miss_share else secrets.token_hex(32)
  period = 1 / a.rate if a.rate else 0.0
  due = time.perf_counter() + rng.random() * period  # a random phase: clients do not fire together
  while (t0 := due if period else time.perf_counter()) < until:
    await asyncio.sleep(t0 - time.perf_counter())  # at once when already due
    due = t0 + period
    if rng.random() < a.batch_share:
      asked = [key() for _ in range(a.batch)]
      kind, (status, got) = "POST /v1/opts/lookup", await conn.request("POST", "/v1/opts/lookup", {"fingerprint": fp, "keys": asked})
      ok = status == 200 and [r and r["kernel_key"] for r in got["results"]] == [k if k in tuned else None for k in asked]
    else:
      asked = key()
      kind, (status, got) = "GET /v1/opts/{key}", await conn.request("GET", f"/v1/opts/{asked}?fingerprint={fp}")
      ok = (status, got.get("kernel_key")) == ((200, asked) if asked in tuned else (404, None))
    dt = time.perf_counter() - t0
    if not ok: errors.append(f"{kind}: {status} {str(got)[:200]}")
    elif t0 >= warm_until: out.setdefault(kind, []).append(dt)


async def load(port: int, keys: list[str], fp: str, a) -> tuple[dict[str, list[float]], list[str]]:
  out, errors, warm_until = {}, [], time.perf_counter() + a.warmup
  await asyncio.gather(*(client(port, keys, fp, a, warm_until, warm_until + a.seconds, out, errors) for _ in range(a.clients)))
  return out, errors


def cache_hit_s(url: str, key: str, fp: str, calls: int) -> list[float]:
  """Each of `calls` opts_for answers for a key already in the local cache, timed one by one."""
  with tempfile.TemporaryDirectory() as d, Client(url, cache_dir=d) as c:
    assert c.opts_for(key, fp, ACTION_SPACE_VERSION) is not None  # from the server, into the cache
    times = []
    for _ in range(calls):
      t0 = time.perf_counter()
      c.opts_for(key, fp, ACTION_SPACE_VERSION)
      times.append(time.perf_counter() - t0)
  return times


def pct(xs: list[float], q: float) -> float: return sorted(xs)[min(len(xs) - 1, int(q / 100 * len(xs)))]

def main() -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--seconds", type=float, default=60.0, help="measured seconds of load (default 60)")
  p.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
  p.add_argument("--rate", type=float, default=0.0, help="requests/s per client on a fixed schedule (default 0: as fast as answered)")
  p.add_argument("--api-processes", type=int, default=os.cpu_count(), help="tunesvc serve --api-processes (default: the cores)")
  p.add_argument("--kernels", type=int, default=300, help="tuned kernels stored first (default 300)")
  p.add_argument("--batch", type=int, default=16, help="keys per POST /v1/opts/lookup (default 16)")
  p.add_argument("--batch-share", type=float, default=0.2, help="share of requests that are batches (default 0.2)")
  p.add_argument("--miss-share", type=float, default=0.1, help="share of keys that were never tuned (default 0.1)")
  p.add_argument("--warmup", type=float, default=2.0, help="seconds of load before measuring (default 2)")
  p.add_argument("--cache-calls", type=int, default=20000, help="opts_for cache hits timed (default 20000)")
  a = p.parse_args()
  load_before = os.getloadavg()[0]
  with tempfile.TemporaryDirectory() as d:
    db = f"sqlite:///{d}/bench.db"
    t0 = time.perf_counter()
    keys, fp = store_tuned(db, a.kernels)
    print(f"stored {len(keys)} tuned kernels in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    server, port = serve(db, a.api_processes)
    url = f"http://127.0.0.1:{port}"
    try:
      print(f"{a.clients} clients for {a.seconds:g} s (+{a.warmup:g} s warm-up) against {url}", file=sys.stderr)
      out, errors = asyncio.run(load(port, keys, fp, a))
      hits = cache_hit_s(url, keys[0], fp, a.cache_calls)
    finally:
      server.terminate()
      server.wait(30)
  n, secs = sum(len(v) for v in out.values()), a.seconds
  print(f"\n`bench/api_load.py --seconds {a.seconds:g} --clients {a.clients}{f' --rate {a.rate:g}' if a.rate else ''} "
        f"--api-processes {a.api_processes} --kernels {a.kernels} --batch {a.batch}` on "
        f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, load average before {load_before:.2f}\n")
  print("| request | count | throughput | p50 | p99 | max |")
  print("|---|---:|---:|---:|---:|---:|")
  for kind, xs in sorted(out.items()) + [("all", [x for v in out.values() for x in v])]:
    print(f"| {kind} | {len(xs)} | {len(xs) / secs:.0f}/s | {pct(xs, 50) * 1e3:.2f} ms | {pct(xs, 99) * 1e3:.2f} ms | {max(xs) * 1e3:.1f} ms |")
  print(f"| `Client.opts_for`, local cache hit | {len(hits)} | | {statistics.median(hits) * 1e6:.1f} µs | {pct(hits, 99) * 1e6:.1f} µs "
        f"| {max(hits) * 1e6:.0f} µs |")
  print(f"\n{n / secs:.0f} requests/s; errors: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""))
  return 1 if errors else 0


if __name__ == "__main__":
  sys.exit(main())
