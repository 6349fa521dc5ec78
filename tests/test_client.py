"""The client library against a real server (uvicorn on a loopback port): the user and worker calls, and opts_for's
local cache (hits without network, misses, offline, cross-process safety, the cost of a hit)."""
import builtins, json, os, socket, subprocess, sys, threading, time
from pathlib import Path
import httpx
import pytest
from linearizer import reference
from linearizer.compare import compare
from tunesvc import runtime
from search_results import cpu_fingerprint, cpu_options, example, search_result
from tunesvc.cache import OptsCache
from tunesvc.client import Client, ServiceError

def tune(url, k, **kw) -> dict:
  """Submit k, and have a worker claim it and report a result: the server's job record."""
  fp, h = cpu_fingerprint()
  with Client(url, "sub") as user, Client(url, "wrk") as worker:
    job, = user.submit([k])
    wid = worker.register("cpu-0", "CPU", fp, h, cpu_options())
    assert worker.claim(wid)["job_id"] == job["job_id"]
    worker.report(wid, job["job_id"], search_result(k, fp, h, **kw))
    assert (c := worker.claim(wid))["kind"] == "confirm"  # measured again: then served
    worker.report(wid, c["job_id"], search_result(k, fp, h, **kw))
    return user.job(job["job_id"])


def test_the_user_and_worker_calls(server):
  k, (fp, h) = example("matmul_512"), cpu_fingerprint()
  user, worker = Client(server, "sub"), Client(server, "wrk")
  job, = user.submit([k], "CPU", {"beam": 3})
  assert job["state"] == "queued" and job["settings"]["beam"] == 3 and user.submit([k.to_json()], search={"beam": 3}) == [job]
  wid = worker.register("cpu-0", "CPU", fp, h, cpu_options())
  c = worker.claim(wid, lease_s=30)
  assert c["kernel"] == k.to_json() and worker.claim(wid) is None
  assert worker.heartbeat(wid, c["job_id"], 60)["lease_expires"] > c["lease_expires"]
  assert worker.release(wid, c["job_id"])["state"] == "queued"
  assert worker.fail(wid, worker.claim(wid)["job_id"], "device lost")["state"] == "queued"
  worker.claim(wid)
  r = search_result(k, fp, h)
  first = worker.report(wid, job["job_id"], r)
  assert worker.report(wid, job["job_id"], r) == {**first, "duplicate": True}
  with pytest.raises(ServiceError) as e: worker.heartbeat(wid, job["job_id"])
  assert e.value.status == 409 and "it is done" in e.value.detail
  assert user.job(job["job_id"])["result"]["opts"] == r.best_opts
  assert len(user.kernel(k.key)["results"][0]["measurements"]) == len(r.candidates)
  assert user.lookup(h, [k.key]) == [None]  # not served before a second measurement confirms it
  worker.report(wid, (c := worker.claim(wid))["job_id"], r)
  assert c["kind"] == "confirm" and c["settings"]["opts"] == r.best_opts
  assert user.lookup(h, [k.key, "0" * 64])[0]["opts"] == r.best_opts and user.lookup(h, kernels=[k]) == user.lookup(h, [k.key])[:1]
  with pytest.raises(ServiceError) as e: worker.submit([k])
  assert e.value.status == 403
  with pytest.raises(ServiceError) as e: user.submit([{"format": "x"}])
  assert e.value.status == 422 and e.value.detail[0]["path"] == "$"


def test_opts_for_asks_the_server_once_then_answers_from_the_cache(server, tmp_path):
  k, (_, h) = example("softmax_exp_sum"), cpu_fingerprint()
  job = tune(server, k)
  with Client(server, cache_dir=tmp_path / "cache") as c:
    assert c.opts_for(k, h, 1) == job["result"]["opts"]
  with Client("http://127.0.0.1:9", cache_dir=tmp_path / "cache") as offline:  # nothing listens there
    assert offline.opts_for(k, h, 1) == job["result"]["opts"] and offline.opts_for(k.key, h, 1) == job["result"]["opts"]
    assert offline._down_until == 0.0  # the hit never tried the network
    assert offline.opts_for(k, h, 2) is None  # another action-space version is another answer


def test_an_old_cached_answer_is_asked_again_and_stands_while_the_server_has_none_newer(server, tmp_path):
  k, (_, h) = example("softmax_div"), cpu_fingerprint()
  old = {"kernel_key": k.key, "fingerprint": h, "action_space_version": 1, "opts": [{"op": "UPCAST", "axis": 0, "amt": 2}],
         "best_s": 1.0, "baseline_s": 2.0}
  cache = OptsCache(tmp_path)
  cache.put(old)
  path = cache.path(k.key, h, 1)
  os.utime(path, (time.time() - 7200,) * 2)  # written two hours ago
  with Client("http://127.0.0.1:9", cache_dir=tmp_path) as fresh:
    assert fresh.opts_for(k, h, 1) == old["opts"] and fresh._down_until == 0.0  # younger than a day: not asked
  with Client("http://127.0.0.1:9", cache_dir=tmp_path, refresh_s=3600) as offline:
    assert offline.opts_for(k, h, 1) == old["opts"]  # past its refresh age, but no server answers: it stands
    assert offline._down_until > 0.0  # the server was asked
  with Client(server, cache_dir=tmp_path, refresh_s=3600) as c:
    assert c.opts_for(k, h, 1) == old["opts"]  # the server has none: the old answer stands
  job = tune(server, k)
  with Client(server, cache_dir=tmp_path, refresh_s=3600) as c:
    assert c.opts_for(k, h, 1) == job["result"]["opts"] != old["opts"]  # a newer search's answer replaces it
    assert cache.get(k.key, h, 1, max_age_s=60)["opts"] == job["result"]["opts"]


def test_a_miss_answers_none_and_can_queue_the_kernel(server, tmp_path):
  k, (_, h) = example("elementwise_chain"), cpu_fingerprint()
  lookups = lambda: sum(float(line.split()[-1]) for line in Client(server).http.get("/metrics").text.splitlines()
                        if line.startswith("tunesvc_lookups_total"))
  with Client(server, "sub", cache_dir=tmp_path) as c:
    assert c.opts_for(k, h, 1, submit=True) is None
    job, = Client(server, "sub").kernel(k.key)["jobs"]  # queued by opts_for, for exactly this fingerprint and version
    assert job["device"] == h and job["state"] == "queued" and job["settings"]["action_space_version"] == 1
    asked = lookups()
    assert c.opts_for(k, h, 1, submit=True) is None and lookups() == asked  # a recent miss is not asked again
  with Client(server, cache_dir=tmp_path) as c:  # no token: the lookup is open, the submission is refused and logged
    assert c.opts_for(example("sum_all"), h, 1, submit=True) is None
  assert Client(server, "sub").http.get("/v1/kernels", params={"name": "sum_all"}).json()["kernels"] == []


@pytest.mark.timing
def test_opts_for_offline_answers_none_quickly(tmp_path):
  """Times on the caller's own clock (conftest.own_clock), the second kernel read before it starts: at load 7 reading an
  example took up to 33 ms of wall, 0.1 ms of its own; the lookup skipped while down takes ~0.2 ms."""
  from conftest import own_clock
  k, other, (_, h) = example("sum_all"), example("matmul_512"), cpu_fingerprint()
  silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers
  silent.bind(("127.0.0.1", 0))
  silent.listen()
  for url, limit_s in [("http://127.0.0.1:9", 0.5), (f"http://127.0.0.1:{silent.getsockname()[1]}", 1.0)]:
    with Client(url, lookup_timeout=0.3, cache_dir=tmp_path) as c:
      t = own_clock()
      assert c.opts_for(k, h, 1) is None
      assert own_clock() - t < limit_s
      t = own_clock()
      assert c.opts_for(other, h, 1) is None and own_clock() - t < 0.01  # down: not asked again
  silent.close()


@pytest.mark.timing
def test_a_cache_hit_costs_well_under_50us(tmp_path):
  k, (_, h) = example("matmul_1024"), cpu_fingerprint()
  OptsCache(tmp_path).put({"kernel_key": k.key, "fingerprint": h, "action_space_version": 1, "opts": [{"op": "UPCAST", "axis": 0, "amt": 4}],
                           "best_s": 1e-3, "baseline_s": 2e-3})
  with Client("http://127.0.0.1:9", cache_dir=tmp_path) as c:
    per_call = []
    for _ in range(5):
      t = time.perf_counter()
      for _ in range(2000): c.opts_for(k, h, 1)
      per_call.append((time.perf_counter() - t) / 2000)
  print(f"opts_for cache hit: {min(per_call) * 1e6:.1f} us")
  assert min(per_call) < 50e-6


def test_a_cache_hit_reads_its_file_once_and_again_only_once_it_changed(tmp_path, monkeypatch):
  k, (_, h) = example("sum_all"), cpu_fingerprint()
  cache, opened, real_open = OptsCache(tmp_path), [], builtins.open
  answer = lambda amt: {"kernel_key": k.key, "fingerprint": h, "action_space_version": 1, "opts": [{"op": "UPCAST", "axis": 0, "amt": amt}],
                        "best_s": 1.0, "baseline_s": 2.0}
  cache.put(answer(4))
  monkeypatch.setattr(builtins, "open", lambda *a, **kw: opened.append(a[0]) or real_open(*a, **kw))
  assert cache.get(k.key, h, 1) == answer(4) and len(opened) == 1
  cache.get(k.key, h, 1)["opts"][0]["amt"] = 99  # the caller's own copy
  assert cache.get(k.key, h, 1) == answer(4) and len(opened) == 1  # hits: a stat, no read
  cache.put(answer(2))  # replaced (renamed into place): read again
  assert cache.get(k.key, h, 1) == answer(2) and cache.get(k.key, h, 1) == answer(2) and len(opened) == 2
  Path(cache.path(k.key, h, 1)).write_text(json.dumps(answer(2))[:-2])  # damaged in place
  assert cache.get(k.key, h, 1) is None and len(opened) == 3


CHURN = """
import sys, random
from tunesvc.cache import OptsCache
cache, seed = OptsCache(sys.argv[1]), int(sys.argv[2])
rng, keys, bad = random.Random(seed), [f"{i:064x}" for i in range(8)], 0
for i in range(300):
  key = rng.choice(keys)
  if rng.random() < 0.5:
    cache.put({"kernel_key": key, "fingerprint": "f" * 64, "action_space_version": 1, "opts": [{"op": "UPCAST", "axis": seed, "amt": i}] * 50})
  elif (got := cache.get(key, "f" * 64, 1)) is None or got["kernel_key"] != key or len(got["opts"]) != 50:
    bad += 1
print(bad)
"""

def test_the_cache_is_safe_across_processes_and_threads(tmp_path):
  """Four processes and three threads rewrite and read the same answers: every read finds a whole one."""
  cache, bad, keys = OptsCache(tmp_path), [], [f"{i:064x}" for i in range(8)]
  put = lambda k: cache.put({"kernel_key": k, "fingerprint": "f" * 64, "action_space_version": 1,
                             "opts": [{"op": "UNROLL", "axis": 0, "amt": 2}] * 50})
  for k in keys: put(k)
  procs = [subprocess.Popen([sys.executable, "-c", CHURN, str(tmp_path), str(seed)], stdout=subprocess.PIPE, text=True) for seed in range(4)]
  def reader():
    while any(p.poll() is None for p in procs):
      bad.extend(k for k in keys if (got := cache.get(k, "f" * 64, 1)) is None or len(got["opts"]) != 50)
  def writer():
    while any(p.poll() is None for p in procs):
      for k in keys: put(k)
  threads = [threading.Thread(target=f) for f in (reader, reader, writer)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert [p.communicate(timeout=60)[0].strip() for p in procs] == ["0"] * 4 and bad == []
  assert all(cache.get(k, "f" * 64, 1) is not None for k in keys)
  assert not list(tmp_path.rglob(".tmp-*"))  # every write was renamed into place


def test_a_damaged_cache_file_is_a_miss_and_names_are_checked(tmp_path):
  cache, key, fp = OptsCache(tmp_path), "a" * 64, "b" * 64
  path = tmp_path / "v1" / fp / f"{key}.json"
  path.parent.mkdir(parents=True)
  path.write_text('{"kernel_key": "aaa')
  assert cache.get(key, fp, 1) is None
  cache.put({"kernel_key": key, "fingerprint": fp, "action_space_version": 1, "opts": []})
  assert json.loads(path.read_text())["opts"] == []
  with pytest.raises(ValueError): cache.get("../../etc/passwd", fp, 1)
  with pytest.raises(ValueError): cache.put({"kernel_key": key, "fingerprint": "../x", "action_space_version": 1, "opts": []})


def test_tunesvc_admin_invalidate_stops_serving_a_kernel(server, tmp_path):
  k, (_, h) = example("softmax_max"), cpu_fingerprint()
  tune(server, k)
  assert Client(server).lookup(h, [k.key])[0] is not None
  cli = [sys.executable, "-m", "tunesvc.cli", "admin", "invalidate", "--kernel", k.key, "--reason", "wrong on this driver", "--server", server]
  r = subprocess.run(cli + ["--token", "wrk"], capture_output=True, text=True)
  assert r.returncode == 2 and "403" in r.stderr
  r = subprocess.run(cli, capture_output=True, text=True, env={**os.environ, "TUNESVC_TOKEN": "adm"})
  assert r.returncode == 0 and "invalidated results [1, 2]; queued again as jobs [3]" in r.stdout, r.stdout + r.stderr
  assert Client(server).lookup(h, [k.key])[0] is None


@pytest.mark.parametrize("damage", ["[1, 2, 3]", "{}", '{"opts": 5}', "another kernel's", "a directory", '{"kernel_key": "x"', "bad opts"])
def test_a_damaged_cache_entry_is_a_miss_and_never_raises(tmp_path, damage):
  k, other, (_, h) = example("sum_all"), example("matmul_512"), cpu_fingerprint()
  cache = OptsCache(tmp_path)
  path = Path(cache.path(k.key, h, 1))
  path.parent.mkdir(parents=True)
  answer = lambda key, opts: {"kernel_key": key, "fingerprint": h, "action_space_version": 1, "opts": opts, "best_s": 1.0, "baseline_s": 2.0}
  if damage == "a directory": path.mkdir()
  elif damage == "another kernel's": path.write_text(json.dumps(answer(other.key, [{"op": "UPCAST", "axis": 1, "amt": 4}])))
  elif damage == "bad opts": path.write_text(json.dumps(answer(k.key, [{"op": "UPCAST", "axis": "x"}])))
  else: path.write_text(damage)
  assert cache.get(k.key, h, 1) is None
  with Client("http://127.0.0.1:9", cache_dir=tmp_path) as offline: assert offline.opts_for(k, h, 1) is None
  vv = k.var_vals()
  bufs, want = reference.random_buffers(k, vv, 1), reference.random_buffers(k, vv, 1)
  reference.run(k, want, vv)
  with Client("http://127.0.0.1:9", cache_dir=tmp_path) as offline: runtime.run_kernel(k, bufs, client=offline)  # hand-coded opts
  assert compare(k, bufs, want, vv) is None


def test_a_full_cache_disk_keeps_the_servers_answer(server, tmpfs):
  from conftest import fill
  k, (_, h) = example("softmax_exp_sum"), cpu_fingerprint()
  job = tune(server, k)
  fill(tmpfs)
  with Client(server, cache_dir=tmpfs / "cache") as c:
    assert c.opts_for(k, h, 1) == job["result"]["opts"]  # not cached, still answered
    assert c._down_until == 0.0  # and the server is not marked away


def test_tunesvc_jobs_cancel_ends_a_queued_job(server):
  job, = Client(server, "sub").submit([example("matmul_512")])
  cli = [sys.executable, "-m", "tunesvc.cli", "jobs", "cancel", str(job["job_id"]), "--reason", "not needed", "--server", server, "--token", "sub"]
  r = subprocess.run(cli, capture_output=True, text=True)
  assert r.returncode == 0 and f"job {job['job_id']} failed: cancelled: not needed" in r.stdout, r.stdout + r.stderr
  assert Client(server, "sub").job(job["job_id"])["state"] == "failed"
  r = subprocess.run(cli, capture_output=True, text=True)
  assert r.returncode == 2 and "409" in r.stderr


class HostileServer:
  """A loopback HTTP server under an attacker's control: `answer(conn)` writes whatever it likes on each connection."""
  def __init__(self, answer):
    self.sock = socket.create_server(("127.0.0.1", 0))
    self.url, self.answer, self.stop = f"http://127.0.0.1:{self.sock.getsockname()[1]}", answer, threading.Event()
    threading.Thread(target=self.serve, daemon=True).start()

  def serve(self):
    while not self.stop.is_set():
      try: conn, _ = self.sock.accept()
      except OSError: return
      threading.Thread(target=self.one, args=(conn,), daemon=True).start()

  def one(self, conn):
    with conn:
      conn.recv(65536)
      try: self.answer(conn, self.stop)
      except OSError: pass

  def close(self):
    self.stop.set()
    self.sock.close()

def trickle(conn, stop):  # a well-formed answer, a byte every 0.1 s: each read waits less than any read timeout
  body = json.dumps({"results": [None]}).encode()
  for b in b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body):
    if stop.wait(0.1): return
    conn.sendall(bytes([b]))

def flood(conn, stop):  # an answer of 1 GB
  conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n{\"results\": [" % (1 << 30))
  while not stop.is_set(): conn.sendall(b" " * (1 << 20))

@pytest.mark.parametrize("answer", [trickle, flood])
def test_a_hostile_server_cannot_hold_or_swamp_the_runtime(tmp_path, answer):
  """opts_for's lookup has a deadline, not only a timeout per read (httpx's: a byte every 0.1 s kept the caller ~9 s with
  a 0.5 s timeout), and a bound on the answer's size (a 1 GB answer was read whole into memory first). Each call's time is
  the caller's own (conftest.own_clock): what a busy machine adds is not the client's (1.63 s of wall at load 10)."""
  from conftest import own_clock
  k, (_, h) = example("sum_all"), cpu_fingerprint()
  hostile = HostileServer(answer)
  try:
    with Client(hostile.url, lookup_timeout=0.5, cache_dir=tmp_path) as c:
      t = own_clock()
      assert c.opts_for(k, h, 1) is None
      assert own_clock() - t < 2.0
      t = own_clock()
      with pytest.raises(httpx.ReadTimeout if answer is trickle else ServiceError):  # past the deadline; past the size, within it
        c.lookup(h, [k.key], timeout=1.0 if answer is trickle else 30.0, max_bytes=1 << 20)
      assert own_clock() - t < 2.0
  finally: hostile.close()
