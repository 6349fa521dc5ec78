"""Chaos, bounded in time and count, on loopback only: an API process and several CPU workers on SQLite or PostgreSQL,
while workers are SIGKILLed and SIGSTOPped past their lease, the API is killed and restarted, PostgreSQL connections are
dropped (pg_terminate_backend), and a thief with a stolen worker token forges reports. Then: every accepted job ended done
or failed with a reason, none was searched twice into two results, and nothing the thief reported is served.

  python bench/chaos.py --db sqlite|postgres [--jobs 12] [--workers 3] [--seconds 120] [--settle 240] [--seed 0]
"""
from __future__ import annotations
import argparse, json, os, random, signal, socket, subprocess, sys, tempfile, time, uuid
from pathlib import Path
import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from devices import cpu  # noqa: E402
from linearizer.ast import load  # noqa: E402
from linearizer.builders import reduce  # noqa: E402
from search.result import Candidate, SearchResult  # noqa: E402
from tunesvc.client import Client, ServiceError  # noqa: E402

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ENV = {**os.environ, "TUNESVC_TOKENS": "sub:submit,wrk:worker,adm:admin", "TUNESVC_TOKENS_FILE": "", "TUNESVC_CONFIRM_ON_OTHER_WORKER": "1",
       "PYTHONPATH": str(ROOT)}
SEARCH = {"beam": 2, "budget_candidates": 6, "min_time_s": 0.005, "final_rounds": 3}
LEASE_S = 6


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]

def start_api(db: str, port: int) -> subprocess.Popen:
  p = subprocess.Popen([sys.executable, "-m", "tunesvc.cli", "serve", "--port", str(port), "--workers", "0", "--db", db], env=ENV,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  for _ in range(600):
    try:
      if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200: return p
    except httpx.HTTPError: pass
    time.sleep(0.1)
  raise SystemExit("the API did not start")

def start_worker(url: str, log) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-m", "tunesvc.cli", "worker", "--server", url, "--device", "CPU", "--lease-s", str(LEASE_S)],
                          env={**ENV, "TUNESVC_TOKEN": "wrk"}, stdout=log, stderr=log, start_new_session=True)


def forge(url: str, rng: random.Random, counts: dict) -> None:
  """The thief: a worker token, its own registration, reports for jobs it never claimed and for ones it did, with a time no
  device reaches, then a plausible but invented one."""
  fp = cpu.fingerprint()
  with Client(url, "wrk", timeout=10) as thief:
    try:
      wid = thief.register("thief", "CPU", fp, cpu.fingerprint_hash(fp), cpu.options().to_json())
      counts["thieves"].add(wid)
      jobs = Client(url, "sub").http.get("/v1/jobs", params={"state": "queued"}).json()["jobs"]
      targets = [j for j in jobs if j["kind"] == "tune"][:1]
      if (c := thief.claim(wid, LEASE_S)) is not None: targets.append(c)
      for j in targets:
        k = Client(url, "sub").kernel(j["kernel_key"])["document"]
        ast = load(k)
        best = 1e-30 if rng.random() < 0.5 else 1e-7  # impossible, or merely invented
        cand = Candidate([], "ok", 0, "0" * 64, "", 0.01, [best], True)
        r = SearchResult(ast.key, "", "CPU", fp, cpu.fingerprint_hash(fp), 1, {}, ast.var_vals(), ast.flops(), ast.bytes(), [], best, [],
                         best, 1.0, (1.0, 1.0), True, "", 0.1, [cand])
        try:
          thief.report(wid, j["job_id"], r)
          counts["forged_accepted"] += 1
        except ServiceError as e: counts[f"forged_refused_{e.status}"] = counts.get(f"forged_refused_{e.status}", 0) + 1
    except (httpx.HTTPError, ServiceError): counts["thief_errors"] = counts.get("thief_errors", 0) + 1  # the API was away


def run(args) -> dict:
  rng = random.Random(args.seed)
  schema = None
  if args.db == "postgres":
    schema = f"chaos_{uuid.uuid4().hex[:10]}"
    with create_engine(PG).begin() as c: c.execute(text(f"CREATE SCHEMA {schema}"))
    db = f"{PG}?options=-csearch_path%3D{schema}"
  else: db = f"sqlite:///{tempfile.mkdtemp(prefix='tunesvc-chaos-')}/chaos.db"
  port = free_port()
  url = f"http://127.0.0.1:{port}"
  log = open(Path(tempfile.gettempdir()) / f"tunesvc-chaos-{args.db}.log", "w")
  api = start_api(db, port)
  workers = [start_worker(url, log) for _ in range(args.workers)]
  ks = [reduce("SUM", (64 + 8 * i, 256), (1,), name=f"chaos_{i}") for i in range(args.jobs)]
  jobs = Client(url, "sub").submit(ks, "CPU", SEARCH)
  counts = {"kills": 0, "stops": 0, "api_restarts": 0, "pg_terminated": 0, "forge_rounds": 0, "forged_accepted": 0, "thieves": set()}
  start, deadline = time.monotonic(), time.monotonic() + args.seconds
  def ended() -> bool:
    try: return all(Client(url, "sub").job(j["job_id"])["state"] in ("done", "failed") for j in jobs)
    except (httpx.HTTPError, ServiceError): return False
  try:
    while time.monotonic() < deadline and not ended():
      time.sleep(rng.uniform(2, 5))
      action = rng.choice(["kill", "stop", "api", "pg", "forge"] if schema else ["kill", "stop", "api", "forge"])
      if action == "kill":
        i = rng.randrange(len(workers))
        os.killpg(workers[i].pid, signal.SIGKILL)
        workers[i].wait()
        workers[i] = start_worker(url, log)
        counts["kills"] += 1
      elif action == "stop":
        w = rng.choice(workers)
        os.killpg(w.pid, signal.SIGSTOP)
        time.sleep(LEASE_S + 2)  # past its lease: the job goes to another worker
        os.killpg(w.pid, signal.SIGCONT)
        counts["stops"] += 1
      elif action == "api":
        api.kill()
        api.wait()
        time.sleep(rng.uniform(1, 4))
        api = start_api(db, port)
        counts["api_restarts"] += 1
      elif action == "pg":
        with create_engine(PG).begin() as c:
          n = c.execute(text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'test' AND pid <> pg_backend_pid() "
                             "AND query NOT ILIKE '%pg_stat_activity%'")).scalar()
        counts["pg_terminated"] += n
      else:
        forge(url, rng, counts)
        counts["forge_rounds"] += 1
    chaos_s = time.monotonic() - start
    settle = time.monotonic() + args.settle  # the chaos over, the survivors finish what is left
    while time.monotonic() < settle and not ended(): time.sleep(2)
    elapsed = time.monotonic() - start
    # the verdict, read from the service
    user = Client(url, "adm")
    final = [user.job(j["job_id"]) for j in jobs]
    unended = [j["job_id"] for j in final if j["state"] not in ("done", "failed")]
    no_reason = [j["job_id"] for j in final if j["state"] == "failed" and not j["error"].strip()]
    doubled, forged_served = [], []
    h = cpu.fingerprint_hash(cpu.fingerprint())
    thieves = counts["thieves"]
    for k in ks:
      detail = user.kernel(k.key)
      tune_results = [r for r in detail["results"] if next(j for j in detail["jobs"] if j["job_id"] == r["job_id"])["kind"] == "tune"]
      if len({r["job_id"] for r in tune_results}) != len(tune_results): doubled.append(k.key)
      served = user.lookup(h, [k.key])[0]
      if served is not None:
        src = [r for r in detail["results"] if r["status"] == "confirmed" and r["opts"] == served["opts"] and r["best_s"] == served["best_s"]]
        by = {r["result_id"]: r["worker_id"] for r in detail["results"]}
        if not src or any(r["worker_id"] in thieves or by.get(r["confirmed_by"]) in thieves for r in src): forged_served.append(k.key)
  finally:
    for w in workers:
      try: os.killpg(w.pid, signal.SIGCONT); os.killpg(w.pid, signal.SIGTERM)
      except ProcessLookupError: pass
    for w in workers:
      try: w.wait(30)
      except subprocess.TimeoutExpired: os.killpg(w.pid, signal.SIGKILL)
    api.terminate()
    api.wait(30)
    if schema:
      with create_engine(PG).begin() as c: c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
  states = {s: sum(j["state"] == s for j in final) for s in ("done", "failed", "queued", "running")}
  reasons = sorted({line.split(": ", 1)[-1][:60] for j in final if j["state"] == "failed" for line in j["error"].splitlines()[-1:]})
  return {"db": args.db, "jobs": args.jobs, "workers": args.workers, "chaos_s": round(chaos_s, 1), "seconds": round(elapsed, 1), "states": states,
          "failure_reasons": reasons,
          **{k: v for k, v in counts.items() if k != "thieves"}, "thieves": len(thieves), "unended": unended,
          "failed_without_reason": no_reason, "doubled": doubled, "forged_served": forged_served,
          "ok": not (unended or no_reason or doubled or forged_served)}


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
  p.add_argument("--jobs", type=int, default=12)
  p.add_argument("--workers", type=int, default=3)
  p.add_argument("--seconds", type=float, default=120.0, help="the chaos stops by then")
  p.add_argument("--settle", type=float, default=240.0, help="then the jobs left may take this long to end (the verdict follows)")
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args()
  print(open("/proc/loadavg").read().strip(), "(load before)", file=sys.stderr)
  out = run(args)
  print(json.dumps(out))
  print(open("/proc/loadavg").read().strip(), "(load after)", file=sys.stderr)
  return 0 if out["ok"] else 1


if __name__ == "__main__":
  sys.exit(main())
