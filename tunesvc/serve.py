"""`tunesvc serve` (and the service `tunesvc demo` runs): the API and one local worker process per device, on one machine.

The API runs in a thread of this process (uvicorn), or with api_processes > 1 in that many spawned processes that
accept on the one listening socket (the kernel spreads connections among them; one Python process is one core); the
workers are child processes. On SIGINT or SIGTERM the workers stop first -- each gives its job back to the queue, which
needs the API still up -- and then the API."""
from __future__ import annotations
import collections, contextlib, dataclasses, functools, multiprocessing, os, secrets, shutil, signal, socket, subprocess, sys
import tempfile, threading, time
from multiprocessing.process import BaseProcess
from typing import IO, Optional
import httpx
import uvicorn
from devices import registry
from search.pool import die_with_parent
from tunesvc.api import create_app
from tunesvc.api.limits import BoundedHttp
from tunesvc.config import Settings


def _server(settings: Settings, log_level: str, access_log: bool) -> uvicorn.Server:
  http = functools.partial(BoundedHttp, max_head_bytes=settings.max_head_bytes, receive_s=settings.receive_s)
  return uvicorn.Server(uvicorn.Config(create_app(settings), http=http, log_level=log_level, access_log=access_log))  # type: ignore[arg-type]

def _api_process(sock: socket.socket, *server_args) -> None:
  os.setpgrp()  # a terminal's Ctrl-C reaches the service alone, which stops its workers (who need the API) before the API
  die_with_parent()
  _server(*server_args).run(sockets=[sock])


class Service:
  def __init__(self, settings: Settings, host: str = "127.0.0.1", port: int = 8000, workers: int = 1,
               devices: Optional[list[str]] = None, log_level: str = "warning", api_processes: int = 1, access_log: bool = False):
    # local workers get a token of their own where tokens are in force
    self.worker_token = secrets.token_urlsafe(24) if settings.tokens else None
    if self.worker_token: settings = dataclasses.replace(settings, tokens={**settings.tokens, self.worker_token: "worker"})
    elif host not in ("0.0.0.0", "::") and (name := f"[{host}]" if ":" in host else host) not in settings.allowed_hosts:
      settings = dataclasses.replace(settings, allowed_hosts=(*settings.allowed_hosts, name))  # the name it was asked to serve on
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY only on sockets that name it, and without it uvicorn's body, written
    # after the headers, waits for the client's delayed ACK (Nagle): 40 ms a response
    self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try: self.sock.bind((host, port))
    except OSError as e: raise SystemExit(f"ERROR cannot listen on {host}:{port}: {e.strerror} (choose another --port)") from None
    self.url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{self.sock.getsockname()[1]}"
    if api_processes < 1: raise SystemExit(f"ERROR --api-processes must be at least 1, not {api_processes}")
    # an access log line per request costs more than a lookup: off unless asked for (/metrics counts requests)
    self.api_args, self.api_processes = (settings, log_level, access_log), api_processes
    self.apis: list[BaseProcess] = []
    self.server = _server(*self.api_args) if api_processes == 1 else None
    # several processes count requests in files there, and /metrics sums them (prometheus_client's multiprocess mode)
    self.metrics_dir = tempfile.mkdtemp(prefix="tunesvc-metrics-") if api_processes > 1 else None
    self.devices = registry.available() if devices is None else devices
    self.n_workers = workers
    self.procs: list[subprocess.Popen] = []
    self.tails: list[collections.deque[str]] = []  # each worker's last lines of stderr (which still reaches ours)
    self.tees: list[threading.Thread] = []

  def _start_api(self) -> BaseProcess:
    p = multiprocessing.get_context("spawn").Process(target=_api_process, args=(self.sock, *self.api_args), daemon=True)
    assert self.metrics_dir is not None, "several API processes count their requests in metrics_dir"
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = self.metrics_dir  # read when the child imports prometheus_client
    try: p.start()
    finally: del os.environ["PROMETHEUS_MULTIPROC_DIR"]
    return p

  def start(self) -> Service:
    if self.server is not None:
      self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
      self.thread.start()
      while not self.server.started: time.sleep(0.01)
    else:
      self.sock.listen(2048)  # connections wait in the backlog until a process accepts them
      self.apis = [self._start_api() for _ in range(self.api_processes)]
      for _ in range(600):
        with contextlib.suppress(httpx.HTTPError):
          if httpx.get(f"{self.url}/healthz").status_code == 200: break
        time.sleep(0.05)
      else: raise SystemExit(f"ERROR the API processes did not answer on {self.url}")
    env = {**os.environ, **({"TUNESVC_TOKEN": self.worker_token} if self.worker_token else {})}
    # each worker in a process group of its own: a terminal's Ctrl-C (or hang-up) reaches this process alone, which stops the
    # workers in order (stop), and not the processes a worker's search runs, which would each print a KeyboardInterrupt
    # traceback; a worker ends with this process however it ends (--exit-with-parent)
    for device in self.devices:
      for _ in range(self.n_workers):
        cmd = [sys.executable, "-m", "tunesvc.cli", "worker", "--server", self.url, "--device", device, "--exit-with-parent"]
        p = subprocess.Popen(cmd, env=env, process_group=0, stderr=subprocess.PIPE)
        self.procs.append(p)
        self.tails.append(tail := collections.deque[str](maxlen=5))
        self.tees.append(tee := threading.Thread(target=_tee, args=(p.stderr, tail), daemon=True))
        tee.start()
    return self

  def exited(self, i: int) -> Optional[str]:
    """Why worker i is no longer running (its exit status and last lines of stderr), or None while it runs."""
    if (code := self.procs[i].poll()) is None: return None
    self.tees[i].join(2)  # its last lines read to the pipe's end (a process it left may hold it open: not for long)
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return f"worker {self.procs[i].pid} exited ({how}); its last lines:" + "".join(f"\n  {line}" for line in self.tails[i])

  def stop(self) -> None:
    for p in self.procs: p.send_signal(signal.SIGTERM)
    for p in self.procs:
      try: p.wait(60)
      except subprocess.TimeoutExpired: p.kill()
    if self.server is not None:
      self.server.should_exit = True
      self.thread.join(10)
    for a in self.apis: a.terminate()
    for a in self.apis:
      a.join(10)
      if a.is_alive(): a.kill()
    if self.metrics_dir: shutil.rmtree(self.metrics_dir, ignore_errors=True)

  def wait_for_signal(self) -> None:
    stop, told = threading.Event(), set[int]()
    for sig in (signal.SIGINT, signal.SIGTERM): signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1):
      for i in set(range(len(self.procs))) - told:
        if why := self.exited(i):
          print(f"WARNING: {why}", file=sys.stderr)
          told.add(i)
      for i, p in enumerate(self.apis):
        if not p.is_alive():
          print(f"WARNING: API process {p.pid} exited ({p.exitcode}); starting another", file=sys.stderr)
          self.apis[i] = self._start_api()


def _tee(src: IO[bytes], tail: collections.deque[str]) -> None:
  """Copy a worker's stderr to our fd 2 as it comes (where it went before), keeping its last lines in `tail`."""
  for line in src:
    with contextlib.suppress(OSError): os.write(2, line)  # reading on whatever happens to ours: a full pipe would stall the worker
    tail.append(line.decode(errors="replace").rstrip("\n"))
