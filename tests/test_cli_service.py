"""The newcomer's CLI: help everywhere, --version, `tunesvc` alone, and the service from the command line (submit, jobs,
kernels, opts against a real server; opts from the local cache `tune` fills), with one fingerprint form throughout."""
import argparse, contextlib, json, os, signal, socket, subprocess, sys, threading, time
from pathlib import Path
import httpx
import pytest
from linearizer import ACTION_SPACE_VERSION
from search.cache import ResultCache
from search_results import EXAMPLES, cpu_fingerprint, cpu_options, example, examples, search_result
from tunesvc.cli import demo_progress, duration, main, parser
from tunesvc.client import Client
from conftest import exited
from test_client import tune


def parsers(p: argparse.ArgumentParser):
  yield p
  for a in p._actions:
    if isinstance(a, argparse._SubParsersAction): yield from (x for sp in a.choices.values() for x in parsers(sp))

def test_every_argument_of_every_command_has_help():
  missing = [f"{p.prog} {a.dest}" for p in parsers(parser()) for a in p._actions
             if not isinstance(a, argparse._SubParsersAction) and not a.help]
  assert missing == []

def test_tunesvc_alone_prints_the_commands_and_version_prints_the_version():
  alone = subprocess.run([sys.executable, "-m", "tunesvc.cli"], capture_output=True, text=True)
  assert alone.returncode == 0 and "usage: tunesvc" in alone.stdout and "submit" in alone.stdout and alone.stderr == ""
  v = subprocess.run([sys.executable, "-m", "tunesvc.cli", "--version"], capture_output=True, text=True)
  assert v.returncode == 0 and v.stdout.startswith("tunesvc ") and "codegen version" in v.stdout


def test_the_fingerprint_devices_prints_is_the_one_lookups_take(server, capsys):
  assert main(["devices"]) == 0
  fp = capsys.readouterr().out.splitlines()[0].split("fingerprint ")[1]
  assert fp == cpu_fingerprint()[1]
  r = httpx.get(f"{server}/v1/opts/{example('sum_all').key}", params={"fingerprint": fp})
  assert r.status_code == 404 and "not tuned" in r.json()["detail"]  # accepted: the kernel is just not tuned yet


def test_a_worker_for_a_device_this_machine_lacks_exits_at_once_saying_so(capsys):
  with pytest.raises(SystemExit) as e: main(["worker", "--server", "http://127.0.0.1:9", "--device", "NOPE"])
  assert e.value.code == 2 and "ERROR --device: device 'NOPE' is not available" in capsys.readouterr().err


def test_submit_then_jobs_kernels_and_opts_on_a_server(server, capsys):
  k, (fp, h) = example("sum_all"), cpu_fingerprint()
  url = ["--server", server]
  assert main(["submit", str(EXAMPLES[0].parent / "sum_all.json"), *url, "--token", "sub"]) == 0
  job_id = int(capsys.readouterr().out.split()[1])
  assert tune(server, k, version=ACTION_SPACE_VERSION)["job_id"] == job_id  # a worker searches the job submitted above
  r = search_result(k, fp, h, version=ACTION_SPACE_VERSION)
  assert main(["submit", str(EXAMPLES[0].parent / "matmul_512.json"), *url, "--token", "sub", "--beam", "3", "--json"]) == 0
  assert json.loads(capsys.readouterr().out)["settings"]["beam"] == 3
  assert main(["jobs", *url, "--token", "sub"]) == 0
  out = capsys.readouterr().out  # piped: every cell whole, the opts too, however wide
  row = next(line for line in out.splitlines() if line.strip("│ ").startswith(str(job_id)))
  assert "sum_all" in row and "done" in row and "UNROLL0:2" in row
  assert main(["kernels", *url, "--token", "sub", "--name", "sum", "--json"]) == 0
  ks = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert [x["key"] for x in ks] == [k.key] and ks[0]["jobs"][0]["state"] == "done"
  assert main(["opts", k.key, *url, "--json"]) == 0
  assert json.loads(capsys.readouterr().out)["opts"] == r.best_opts
  assert main(["opts", str(EXAMPLES[0].parent / "sum_all.json"), *url]) == 0
  assert f"sum_all {k.key}: 1.000 ms (2.00x the hand-coded)" in capsys.readouterr().out
  assert main(["opts", example("matmul_1024").key, *url]) == 1  # not tuned: says so, exit status 1
  assert "not tuned for fingerprint " + h in capsys.readouterr().out


def test_opts_reads_the_local_cache_that_tune_fills(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("TUNESVC_CACHE_DIR", str(tmp_path))
  k, (fp, h) = example("sum_all"), cpu_fingerprint()
  ResultCache().put(search_result(k, fp, h, version=ACTION_SPACE_VERSION))
  assert main(["opts", k.key, "--json"]) == 0
  assert json.loads(capsys.readouterr().out)["opts"][-1] == {"op": "UNROLL", "axis": 0, "amt": 2}
  with pytest.raises(SystemExit): main(["opts", "nonsense"])
  assert "neither a file nor a kernel key" in capsys.readouterr().err


def test_an_unreachable_server_is_one_clear_line(capsys):
  with pytest.raises(SystemExit) as e: main(["jobs", "--server", "http://127.0.0.1:9"])
  assert e.value.code == 2 and "ERROR http://127.0.0.1:9: ConnectError" in capsys.readouterr().err


def test_kernels_prints_a_row_per_kernel_and_limit_counts_kernels(server, capsys):
  # each kernel has two jobs (CPU and a fingerprint): one row for each kernel, a line of it for each job
  ks, (_, h) = examples()[:4], cpu_fingerprint()
  with Client(server, "sub") as c:
    for device in ("CPU", h): c.submit(ks, device)
  assert main(["kernels", "--server", server, "--token", "sub", "--limit", "3"]) == 0
  out = capsys.readouterr()
  rows = [line for line in out.out.splitlines() if any(k.key in line for k in ks)]
  assert len(rows) == 3 and len({k.key for k in ks if any(k.key in r for r in rows)}) == 3, out.out
  assert all("CPU" in r for r in rows) and out.out.count(h) == 3 and "more: --offset 3" in out.err, out.out


def test_times_under_a_millisecond_keep_their_digits():
  assert [duration(s) for s in (2.5, 1e-3, 4.2e-4, 3.1e-7)] == ["2500.000 ms", "1.000 ms", "420.000 us", "0.310 us"]


def test_the_demo_says_when_its_jobs_wait_for_a_quiet_device(server):
  # a worker that found the device too busy to time on gives the job back to wait: the demo's line says so, not just "tuning"
  ks, (fp, h) = examples()[:2], cpu_fingerprint()
  with Client(server, "sub") as user, Client(server, "wrk") as worker:
    jobs = user.submit(ks)
    assert demo_progress(jobs, time.time()) == "tuning 2 example kernels"
    wid = worker.register("cpu-0", "CPU", fp, h, cpu_options())
    worker.fail(wid, worker.claim(wid)["job_id"], "device busy: other load 1.5 cores", busy=True)
    line = demo_progress([user.job(j["job_id"]) for j in jobs], time.time())
  assert line.startswith("tuning 2 example kernels: 1 waiting for a quiet device (too busy to time on; tried again in "), line


def children(pid: int) -> list[int]:
  """The processes `pid` started that are still there: none once it is gone (its threads' lists are read one by one, and
  a thread may end meanwhile)."""
  kids: list[int] = []
  with contextlib.suppress(OSError):
    for t in os.listdir(f"/proc/{pid}/task"):
      with contextlib.suppress(OSError): kids += map(int, Path(f"/proc/{pid}/task/{t}/children").read_text().split())
  return kids

def descendants(pid: int) -> list[int]:
  """Every process under `pid` while read: a compiler a search started may end meanwhile (it read as an error)."""
  kids = children(pid)
  return kids + [d for k in kids for d in descendants(k)]

@pytest.mark.slow
def test_ctrl_c_stops_the_demo_with_one_line_and_no_traceback(tmp_path):
  # a terminal's Ctrl-C goes to its foreground process group, the demo's: whichever of the demo, its worker and the processes
  # the worker's search runs are in it, only the demo may say anything, in one line, and every one of them must end
  port, started = free_port(), []
  demo = start_cli(tmp_path, "demo", "--port", str(port), "--budget-s", "30")
  def searching() -> bool:  # a job running and the worker's search's processes started (not assumed 2 s after the job started)
    started[:] = descendants(demo.pid)
    return len(started) >= 2 and bool(httpx.get(f"http://127.0.0.1:{port}/v1/jobs", params={"state": "running"}).json()["jobs"])
  try:
    wait_for("the demo's worker searches a job", searching)
    os.killpg(demo.pid, signal.SIGINT)  # the terminal's foreground group: the demo's (start_new_session made it a leader)
    out, err = demo.communicate(timeout=120)
  finally:
    if demo.poll() is None: os.killpg(demo.pid, signal.SIGKILL)
  assert demo.returncode == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
  assert [line for line in err.splitlines() if "stopped" in line] == ["demo stopped (Ctrl-C) before every example was tuned"], err
  wait_for("every process of the demo ends", lambda: all(exited(p) for p in started), limit_s=60)  # the worker's go with it, not at once


def free_port() -> int:
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]

def start_cli(tmp_path, *args: str) -> subprocess.Popen:
  """`tunesvc ARGS` on SQLite in tmp_path, as a shell starts it: a process group of its own (a terminal's foreground
  group), Ctrl-C not ignored."""
  env = {**os.environ, "TUNESVC_DATABASE_URL": f"sqlite:///{tmp_path}/cli.db", "TUNESVC_CACHE_DIR": str(tmp_path / "cache")}
  env.pop("TUNESVC_TOKENS", None)
  return subprocess.Popen([sys.executable, "-m", "tunesvc.cli", *args], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

def wait_for(what: str, ready, limit_s: float = 180) -> None:
  deadline = time.monotonic() + limit_s
  while time.monotonic() < deadline:
    try:
      if ready(): return
    except httpx.HTTPError: pass
    time.sleep(0.5)
  pytest.fail(f"never: {what}")

@pytest.mark.slow
def test_the_demo_ends_saying_why_when_its_worker_dies(tmp_path):
  # its jobs would wait for a worker forever: the demo says the worker is gone, with its exit status and last lines, and exits non-zero
  # killed once it said it serves: registered, as the service saw, it had not always said so (a loaded machine's kill came between)
  serving = f"worker 1 on CPU (fingerprint {cpu_fingerprint()[1]}) serving"
  demo = start_cli(tmp_path, "demo", "--port", str(free_port()), "--budget-s", "30")
  lines: list[str] = []
  def read() -> None:
    for line in demo.stderr: lines.append(line)
  (reader := threading.Thread(target=read, daemon=True)).start()
  try:
    wait_for("the demo's worker says it serves", lambda: any(serving in line for line in list(lines)))
    worker, = [p for p in children(demo.pid) if b" worker " in Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")]
    os.kill(worker, signal.SIGKILL)
    demo.wait(120)
  finally:
    if demo.poll() is None: os.killpg(demo.pid, signal.SIGKILL)
  reader.join(60)
  err = "".join(lines)
  assert demo.returncode == 2 and "Traceback" not in err, err
  assert f"ERROR the demo's CPU worker {worker} exited (killed by SIGKILL); its last lines:\n" in err, err
  assert serving in err.split("its last lines:")[1], err  # its log's last line
