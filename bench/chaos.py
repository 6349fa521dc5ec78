"""Chaos, bounded in time and count, on loopback only: several API processes (`tunesvc serve --workers 0`, each on its own
port, all on one store) and several CPU workers spread over them, on SQLite or PostgreSQL, while workers are SIGKILLed and
SIGSTOPped past their lease, API processes are killed and restarted, PostgreSQL connections are dropped
(pg_terminate_backend) and a thief with a stolen worker token forges and replays reports. Then the verdict, read from the
service: every job (searches and their confirmations) ended done or failed with a reason, every kernel is served or its
search failed with a reason, none was searched into two results, and nothing the thief reported or confirmed is served.

  python bench/chaos.py --db sqlite|postgres [--jobs 12] [--apis 2] [--workers 4] [--seconds 120] [--settle 240] [--seed 0]
                        [--on-busy store|refuse]

The kernels are submitted in three waves, a third of --seconds apart, so that there is work while the faults come. Each
worker slot has a worker token of its own (a fleet's machines each have one) and confirmations must come from another
token's worker (TUNESVC_CONFIRM_ON_OTHER_WORKER); the thief holds slot 0's token.

PostgreSQL: a database of its own (chaos_*, created and dropped here) on 127.0.0.1:5432, so that terminating its backends
touches no one else's. The workers time with TUNESVC_ON_BUSY=store: they share this machine's cores by construction, each
one's search is the others' load, and refusing to time (search/settings.py OnBusy) would leave nothing to confirm.
"""
from __future__ import annotations
import argparse, collections, json, os, random, signal, socket, subprocess, sys, tempfile, time, uuid
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

PG_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432"
# each worker slot its own worker token, as a fleet gives each machine one: a confirmation comes from another token's worker;
# the thief holds slot 0's
ENV = {**os.environ, "TUNESVC_TOKENS": ",".join(["sub:submit", "adm:admin"] + [f"wrk{i}:worker" for i in range(64)]), "TUNESVC_TOKENS_FILE": "",
       "TUNESVC_CONFIRM_ON_OTHER_WORKER": "1",
       "TUNESVC_ON_BUSY": "store", "PYTHONPATH": str(ROOT)}
SEARCH = {"beam": 2, "budget_candidates": 6, "min_time_s": 0.005, "final_rounds": 3}
LEASE_S = 6
ENDED = ("done", "failed")


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]

def url_of(port: int) -> str: return f"http://127.0.0.1:{port}"

def start_api(db: str, port: int, log) -> subprocess.Popen:
  p = subprocess.Popen([sys.executable, "-m", "tunesvc.cli", "serve", "--port", str(port), "--workers", "0", "--db", db], env=ENV,
                       stdout=log, stderr=log)
  for _ in range(600):
    try:
      if httpx.get(f"{url_of(port)}/healthz").status_code == 200: return p
    except httpx.HTTPError: pass
    time.sleep(0.1)
  raise SystemExit("an API process did not start")

def start_worker(url: str, slot: int, log) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-m", "tunesvc.cli", "worker", "--server", url, "--device", "CPU", "--lease-s", str(LEASE_S)],
                          env={**ENV, "TUNESVC_TOKEN": f"wrk{slot}"}, stdout=log, stderr=log, start_new_session=True)


def forged_result(ast, best: float) -> SearchResult:
  fp = cpu.fingerprint()
  cand = Candidate([], "ok", 0, "0" * 64, "", 0.01, [best], True)
  return SearchResult(ast.key, "", "CPU", fp, cpu.fingerprint_hash(fp), 1, {}, ast.var_vals(), ast.flops(), ast.bytes(), [], best, [],
                      best, 1.0, (1.0, 1.0), True, "", 0.1, [cand])

def forge(urls: list[str], rng: random.Random, counts: dict) -> None:
  """The thief: a worker token, its own registration (through one API process, reporting through another), reports for a
  job it never claimed and for one it did, with a time no device reaches or a merely invented one, and the replay of an
  honest worker's stored report under its own id."""
  fp, tally = cpu.fingerprint(), lambda what: counts.__setitem__(what, counts.get(what, 0) + 1)
  with Client(rng.choice(urls), "wrk0", timeout=10) as thief, Client(rng.choice(urls), "wrk0", timeout=10) as via, \
       Client(rng.choice(urls), "adm", timeout=10) as user:
    try:
      wid = thief.register("thief", "CPU", fp, cpu.fingerprint_hash(fp), cpu.options().to_json())
      counts["thieves"].add(wid)
      via.worker_keys[wid] = thief.worker_keys[wid]  # its own worker's key: it reports through another API process
      targets = [j for j in user.jobs(state="queued", limit=20)["jobs"] if j["kind"] == "tune"][:1]
      if (c := thief.claim(wid, LEASE_S)) is not None: targets.append(c)
      for j in targets:
        ast = load(user.kernel(j["kernel_key"])["document"])
        try:
          got = via.report(wid, j["job_id"], forged_result(ast, 1e-30 if rng.random() < 0.5 else 1e-7))  # impossible, or merely invented
          tally(f"forged_{'duplicate' if got.get('duplicate') else 'accepted'}")  # the queued job it then claimed: a repeat
        except ServiceError as e: tally(f"forged_refused_{e.status}")
      # someone else's work: a job another worker holds, reported under that worker's id; a done job reported again
      held = [j for j in user.jobs(state="running", limit=20)["jobs"] if j["kind"] == "tune" and j["worker_id"] not in counts["thieves"]][:1]
      done = [j for j in user.jobs(state="done", limit=20)["jobs"] if j["kind"] == "tune"][:1]
      for j, as_worker, what in [(j, j["worker_id"], "impersonated") for j in held] + [(j, wid, "replayed") for j in done]:
        try:
          got = via.report(as_worker, j["job_id"], forged_result(load(user.kernel(j["kernel_key"])["document"]), 1e-7))
          tally(f"{what}_{'duplicate' if got.get('duplicate') else 'accepted'}")  # a duplicate: its own report, nothing written
        except ServiceError as e: tally(f"{what}_refused_{e.status}")
    except (httpx.HTTPError, ServiceError): tally("thief_errors")  # the API process it picked was away


def all_jobs(c: Client) -> list[dict]:
  out, offset = [], 0
  while offset is not None:
    page = c.jobs(limit=500, offset=offset)
    out += page["jobs"]
    offset = page["next_offset"]
  return out


def verdict(c: Client, ks, submitted: list[dict], thieves: set[int]) -> dict:
  """What the service says happened, checked."""
  jobs = all_jobs(c)
  h = cpu.fingerprint_hash(cpu.fingerprint())
  # an unended job, told apart: running under a live lease (a worker is on it and beating: slow, the settle window too short
  # for this machine's load), running past its lease (nothing swept it: a bug), or queued (nobody claimed it)
  now = time.time()
  out: dict = {"unended": [{"job_id": j["job_id"], "kind": j["kind"], "state": j["state"], "worker": j["worker_id"], "attempts": j["attempts"],
                            "lease_left_s": None if j["lease_expires"] is None else round(j["lease_expires"] - now, 1)}
                           for j in jobs if j["state"] not in ENDED],
               "failed_without_reason": [j["job_id"] for j in jobs if j["state"] == "failed" and not j["error"].strip()],
               "doubled": [], "unserved": [], "forged_served": [], "thief_results": collections.Counter()}
  mine = {j["job_id"] for j in submitted}
  for k in ks:
    detail = c.kernel(k.key)
    kind = {j["job_id"]: j for j in detail["jobs"]}
    tune_results = [r for r in detail["results"] if kind[r["job_id"]]["kind"] == "tune"]
    done_tunes = [j for j in detail["jobs"] if j["kind"] == "tune" and j["state"] == "done"]
    if len({r["job_id"] for r in tune_results}) != len(tune_results) or len(done_tunes) > 1: out["doubled"].append(k.key)
    for r in detail["results"]:  # what became of each result the thief's workers stored (a search's, or a confirm's measurement)
      if r["worker_id"] in thieves: out["thief_results"][f'{kind[r["job_id"]]["kind"]}_{r["status"]}'] += 1
    served = c.lookup(h, [k.key])[0]
    if served is None:
      if not any(j["state"] == "failed" and j["error"].strip() for j in detail["jobs"] if j["job_id"] in mine): out["unserved"].append(k.key)
      continue
    by = {r["result_id"]: r["worker_id"] for r in detail["results"]}
    src = [r for r in detail["results"] if r["status"] == "confirmed" and r["opts"] == served["opts"] and r["best_s"] == served["best_s"]]
    if not src or any(r["worker_id"] in thieves or by.get(r["confirmed_by"]) in thieves for r in src): out["forged_served"].append(k.key)
  out["jobs_by_state"] = {kd: {s: sum(j["state"] == s for j in jobs if j["kind"] == kd) for s in ("done", "failed", "queued", "running")}
                          for kd in ("tune", "confirm")}
  out["served"] = sum(c.lookup(h, [k.key])[0] is not None for k in ks)
  out["failure_reasons"] = sorted({line.split(": ", 1)[-1][:70] for j in jobs if j["state"] == "failed" for line in j["error"].splitlines()[-1:]})
  return out


def run(args) -> dict:
  rng = random.Random(args.seed)
  ENV["TUNESVC_ON_BUSY"] = args.on_busy
  dbname = None
  if args.db == "postgres":
    dbname = f"chaos_{uuid.uuid4().hex[:10]}"
    with create_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT").connect() as c: c.execute(text(f"CREATE DATABASE {dbname}"))
    db = f"{PG_SERVER}/{dbname}"
  else: db = f"sqlite:///{tempfile.mkdtemp(prefix='tunesvc-chaos-')}/chaos.db"
  log = open(Path(tempfile.gettempdir()) / f"tunesvc-chaos-{args.db}.log", "w")
  ports = [free_port() for _ in range(args.apis)]
  urls = [url_of(p) for p in ports]
  apis = [start_api(db, p, log) for p in ports]
  workers = [start_worker(urls[i % len(urls)], i, log) for i in range(args.workers)]  # spread over the API processes
  ks = [reduce("SUM", (64 + 8 * i, 256), (1,), name=f"chaos_{i}") for i in range(args.jobs)]
  waves = [ks[i::3] for i in range(3)]  # submitted at the start, a third and two thirds into the chaos: work all along
  submitted = Client(urls[0], "sub").submit(waves.pop(0), "CPU", SEARCH)
  counts = {"kills": 0, "stops": 0, "api_restarts": 0, "pg_terminated": 0, "forge_rounds": 0, "forged_accepted": 0, "thieves": set()}
  start, deadline = time.monotonic(), time.monotonic() + args.seconds
  def ended() -> bool:
    try: return all(j["state"] in ENDED for j in all_jobs(Client(rng.choice(urls), "adm")))
    except (httpx.HTTPError, ServiceError): return False
  try:
    while time.monotonic() < deadline and (waves or not ended()):
      time.sleep(rng.uniform(2, 5))
      if waves and time.monotonic() > start + args.seconds * (3 - len(waves)) / 3:
        try: submitted += Client(rng.choice(urls), "sub").submit(waves[0], "CPU", SEARCH)
        except (httpx.HTTPError, ServiceError): continue  # that API process is away: the next round submits the wave
        waves.pop(0)
      action = rng.choice(["kill", "stop", "api", "pg", "forge"] if dbname else ["kill", "stop", "api", "forge"])
      if action == "kill":
        i = rng.randrange(len(workers))
        os.killpg(workers[i].pid, signal.SIGKILL)
        workers[i].wait()
        workers[i] = start_worker(urls[i % len(urls)], i, log)
        counts["kills"] += 1
      elif action == "stop":
        w = rng.choice(workers)
        os.killpg(w.pid, signal.SIGSTOP)
        time.sleep(LEASE_S + 2)  # past its lease: the job goes to another worker
        os.killpg(w.pid, signal.SIGCONT)
        counts["stops"] += 1
      elif action == "api":  # one API process dies; its workers wait for it, the others go on through theirs
        i = rng.randrange(len(apis))
        apis[i].kill()
        apis[i].wait()
        time.sleep(rng.uniform(1, 4))
        apis[i] = start_api(db, ports[i], log)
        counts["api_restarts"] += 1
      elif action == "pg":
        with create_engine(f"{PG_SERVER}/postgres").connect() as c:
          n = c.execute(text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = :db"), {"db": dbname}).scalar()
        counts["pg_terminated"] += n
      else:
        forge(urls, rng, counts)
        counts["forge_rounds"] += 1
    for wave in waves: submitted += Client(urls[0], "sub").submit(wave, "CPU", SEARCH)  # any the chaos left unsent (every API is up)
    chaos_s = time.monotonic() - start
    settle = time.monotonic() + args.settle  # the chaos over, the survivors finish what is left
    while time.monotonic() < settle and not ended(): time.sleep(2)
    elapsed = time.monotonic() - start
    with Client(urls[0], "adm", timeout=60) as user: out = verdict(user, ks, submitted, counts["thieves"])
  finally:
    for w in workers:
      try:
        os.killpg(w.pid, signal.SIGCONT)
        os.killpg(w.pid, signal.SIGTERM)
      except ProcessLookupError: pass
    for w in workers:
      try: w.wait(30)
      except subprocess.TimeoutExpired: os.killpg(w.pid, signal.SIGKILL)
    for a in apis: a.terminate()
    for a in apis: a.wait(30)
    if dbname:
      with create_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT").connect() as c:
        c.execute(text(f"DROP DATABASE {dbname} WITH (FORCE)"))
  # a report under another worker's id, or a done job's again, is never taken
  ok = not (out["unended"] or out["failed_without_reason"] or out["doubled"] or out["unserved"] or out["forged_served"]
            or counts.get("impersonated_accepted") or counts.get("replayed_accepted"))
  return {"db": args.db, "on_busy": args.on_busy, "jobs": args.jobs, "apis": args.apis, "workers": args.workers, "chaos_s": round(chaos_s, 1),
          "seconds": round(elapsed, 1),
          **{k: v for k, v in counts.items() if k != "thieves"}, "thieves": len(counts["thieves"]), **out, "ok": ok}


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
  p.add_argument("--jobs", type=int, default=12, help="kernels submitted (one search job each)")
  p.add_argument("--apis", type=int, default=2, help="API processes on the one store, each on its own port")
  p.add_argument("--workers", type=int, default=4, help="CPU workers, spread over the API processes")
  p.add_argument("--seconds", type=float, default=120.0, help="the chaos stops by then (or once every job has ended)")
  p.add_argument("--settle", type=float, default=240.0, help="then the jobs left may take this long to end (the verdict follows)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--on-busy", choices=["store", "refuse"], default="store",
                 help="the workers' TUNESVC_ON_BUSY: refuse waits for a quiet machine (on a loaded one, minutes a job)")
  args = p.parse_args()
  print(open("/proc/loadavg").read().strip(), "(load before)", file=sys.stderr)
  out = run(args)
  print(json.dumps(out))
  print(open("/proc/loadavg").read().strip(), "(load after)", file=sys.stderr)
  return 0 if out["ok"] else 1


if __name__ == "__main__":
  sys.exit(main())
