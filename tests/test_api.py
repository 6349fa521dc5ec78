"""The HTTP API in-process (TestClient over a SQLite store): every endpoint's success and bad input, tokens, limits, and a
schemathesis run over the OpenAPI schema that must find no 5xx."""
import hashlib, inspect, json, os, select, signal, socket, subprocess, sys, time
import httpx
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from search_results import CUDA_FP, CUDA_HASH, CUDA_OPTIONS, cpu_fingerprint, cpu_options, example, examples, result_json
from linearizer import ACTION_SPACE_VERSION
from tunesvc.api import create_app
from tunesvc.config import Settings, parse_tokens
from tunesvc.store.models import Job, Worker

TOKENS = {"sub": "submit", "wrk": "worker", "adm": "admin"}
SUB, WRK, ADM = ({"Authorization": f"Bearer {t}"} for t in TOKENS)


def make_client(tmp_path, **kw) -> TestClient:
  return TestClient(create_app(Settings(**{"database_url": f"sqlite:///{tmp_path}/api.db", "tokens": TOKENS, **kw})))

@pytest.fixture
def api(tmp_path):
  with make_client(tmp_path, max_attempts=2) as c: yield c

def submit(api, kernels, **kw):
  r = api.post("/v1/kernels", json={"kernels": [k.to_json() for k in kernels], **kw}, headers=SUB)
  assert r.status_code == 202, r.text
  return r.json()["jobs"]

KEYS: dict[int, tuple[str, str]] = {}  # worker id -> the token and key of its (latest) registration

def register(api, name="cpu-0", fp=None, h=None, options=None, token="wrk") -> int:
  fp, h = (fp, h) if fp else cpu_fingerprint()
  body = {"name": name, "device": "CPU", "fingerprint": fp, "fingerprint_hash": h, "options": options or cpu_options()}
  r = api.post("/v1/workers", json=body, headers={"Authorization": f"Bearer {token}"})
  assert r.status_code == 201, r.text
  KEYS[r.json()["worker_id"]] = (token, r.json()["worker_key"])
  return r.json()["worker_id"]

def W(wid: int) -> dict:
  """The headers of a call as worker wid: the worker token it registered with and its key."""
  token, key = KEYS[wid]
  return {"Authorization": f"Bearer {token}", "X-Worker-Key": key}

def claim(api, wid, lease_s=60):
  r = api.post(f"/v1/workers/{wid}/claim", json={"lease_s": lease_s}, headers=W(wid))
  return None if r.status_code == 204 else r.json()

def report(api, wid, job, **kw):
  fp, h = cpu_fingerprint()
  return api.post(f"/v1/workers/{wid}/report", json={"job_id": job["job_id"], "result": result_json(example_of(job), fp, h, **kw)}, headers=W(wid))

def confirm(api, wid, job, **kw):
  """The worker measures its reported result again (the confirm job, claimed first): then it is served."""
  c = claim(api, wid)
  assert c["kind"] == "confirm" and c["kernel_key"] == job["kernel_key"], c
  r = report(api, wid, c, **kw)
  assert r.status_code == 200, r.text
  return c

def example_of(job):
  return next(k for k in examples() if k.key == job["kernel_key"])


def test_submit_answers_a_job_per_kernel_and_identical_requests_share_it(api):
  ks = examples()
  jobs = submit(api, ks, device="CPU", search={"beam": 2, "budget_s": 60})
  assert [j["kernel_key"] for j in jobs] == [k.key for k in ks] and {j["state"] for j in jobs} == {"queued"}
  assert jobs[0]["settings"] == {"beam": 2, "budget_s": 60.0, "budget_candidates": None, "min_improvement": 0.01, "min_time_s": 0.05,
                                 "final_rounds": 7, "seed": 0, "strategy": "beam", "measure_top": 9,
                                 "worth_s": 0.001, "min_effort": 0.1} and jobs[0]["result"] is None  # the defaults, spelled out
  assert [j["job_id"] for j in submit(api, ks, search={"budget_s": 60.0})] == [j["job_id"] for j in jobs]  # defaults fill in
  assert submit(api, ks[:1], search={"beam": 4})[0]["job_id"] not in {j["job_id"] for j in jobs}
  versioned, = submit(api, ks[:1], search={"action_space_version": 1})  # a runtime's request: its own job, for that version
  assert versioned["job_id"] not in {j["job_id"] for j in jobs} and versioned["settings"]["action_space_version"] == 1
  got = api.get(f"/v1/jobs/{jobs[0]['job_id']}", headers=SUB).json()
  assert {k: got[k] for k in ("job_id", "kernel_key", "state", "error", "result")} == \
         {"job_id": jobs[0]["job_id"], "kernel_key": ks[0].key, "state": "queued", "error": "", "result": None}
  wid, claimed = register(api), []
  while (r := api.post(f"/v1/workers/{wid}/claim", json={"action_space_version": 2}, headers=W(wid))).status_code == 200:
    claimed.append(r.json()["job_id"])
  assert len(claimed) == len(ks) + 1 and versioned["job_id"] not in claimed  # a worker of version 2 leaves it
  assert api.post(f"/v1/workers/{wid}/claim", json={"action_space_version": 1}, headers=W(wid)).json()["job_id"] == versioned["job_id"]


def test_submit_names_every_invalid_kernel_by_index_and_json_path(api):
  good = example("sum_all").to_json()
  bad_op = json.loads(json.dumps(good))
  bad_op["ast"]["src"][0]["op"] = "FROB"
  body = {"kernels": [good, {"format": "tunesvc.kernel/1"}, good, bad_op, {**good, "name": "\ud800"}]}
  # \u escapes: httpx will not encode a lone surrogate
  r = api.post("/v1/kernels", content=json.dumps(body), headers={**SUB, "Content-Type": "application/json"})
  assert r.status_code == 422
  assert [(e["loc"], e["path"]) for e in r.json()["detail"]] == [
    (["body", "kernels", 1], "$"), (["body", "kernels", 3], "ast.src[0].op"), (["body", "kernels", 4], "name")]
  assert r.json()["detail"][1]["msg"] == "kernels[3] ast.src[0].op: unknown op 'FROB'"
  assert api.get("/v1/kernels", headers=SUB).json()["kernels"] == []  # nothing of a rejected batch is stored


@pytest.mark.parametrize("body, where", [
  ({"kernels": []}, ["body", "kernels"]),
  ({"device": "CPU"}, ["body", "kernels"]),
  ({"kernels": [{}], "device": "cpu"}, ["body", "device"]),
  ({"kernels": [{}], "search": {"beam": 0}}, ["body", "search", "beam"]),
  ({"kernels": [{}], "search": {"budget_s": -1}}, ["body", "search", "budget_s"]),
  ({"kernels": [{}], "search": {"beams": 2}}, ["body", "search", "beams"]),
  ({"kernels": [{}], "priority": 10**6}, ["body", "priority"]),
  ({"kernels": "x"}, ["body", "kernels"]),
  ([1, 2], ["body"]),
])
def test_submit_rejects_bad_requests_naming_the_field(api, body, where):
  r = api.post("/v1/kernels", json=body, headers=SUB)
  assert r.status_code == 422 and r.json()["detail"][0]["loc"] == where, r.text


@pytest.mark.parametrize("body, status, says", [
  (b'{"kernels": [', 400, "malformed JSON at character 13"),
  (b'{"kernels": [1e999]}', 422, "valid dictionary"),
  (b"\xff\xfe", 400, "malformed JSON at character 0"),
  (b"[" * 100000 + b"]" * 100000, 400, "error parsing the body"),
])
def test_malformed_bodies_get_a_4xx_naming_the_problem(api, body, status, says):
  r = api.post("/v1/kernels", content=body, headers={**SUB, "Content-Type": "application/json"})
  assert r.status_code == status and says in r.text, r.text


def test_oversize_bodies_are_refused(tmp_path):
  with make_client(tmp_path, max_body_bytes=4096) as api:
    doc = example("matmul_512").to_json()
    assert api.post("/v1/kernels", json={"kernels": [doc]}, headers=SUB).status_code == 202
    assert api.post("/v1/kernels", json={"kernels": [doc] * 8}, headers=SUB).status_code == 413
    chunks = (b'{"kernels": [' + b" " * 1000 for _ in range(8))  # no Content-Length: counted as it streams
    assert api.post("/v1/kernels", content=chunks, headers={**SUB, "Content-Type": "application/json"}).status_code == 413


def test_tokens_and_roles(tmp_path):
  with make_client(tmp_path) as api:
    body = {"kernels": [example("sum_all").to_json()]}
    r = api.post("/v1/kernels", json=body)
    assert r.status_code == 401 and "missing token" in r.json()["detail"] and r.headers["WWW-Authenticate"] == "Bearer"
    assert api.post("/v1/kernels", json=body, headers={"Authorization": "Bearer nope"}).json() == {"detail": "unknown token"}
    r = api.post("/v1/kernels", json=body, headers=WRK)
    assert r.status_code == 403 and r.json()["detail"] == "a worker token may not do this: it needs submit"
    assert api.post("/v1/workers/1/claim", json={}, headers=SUB).status_code == 403
    assert api.post("/v1/kernels", json=body, headers=ADM).status_code == 202
    assert api.get("/v1/jobs/1").status_code == 401 and api.get("/v1/jobs/1", headers=WRK).status_code == 200
    key, h = example("sum_all").key, "0" * 64
    assert api.get(f"/v1/opts/{key}", params={"fingerprint": h}).status_code == 404  # lookups are open by default
  with make_client(tmp_path, open_lookups=False) as api:
    assert api.get(f"/v1/opts/{key}", params={"fingerprint": h}).status_code == 401
    assert api.post("/v1/opts/lookup", json={"fingerprint": h, "keys": [key]}).status_code == 401
    assert api.get(f"/v1/opts/{key}", params={"fingerprint": h}, headers=SUB).status_code == 404


def test_the_settings_may_hold_a_token_by_its_digest_alone(tmp_path):
  digest = hashlib.sha256(b"s3cret").hexdigest()
  with make_client(tmp_path, tokens=parse_tokens(f"sha256:{digest}:admin # kept as its hash\nplain:submit")) as api:
    ok = lambda token: api.get("/v1/jobs", headers={"Authorization": f"Bearer {token}"}).status_code
    assert (ok("s3cret"), ok("plain"), ok(f"sha256:{digest}"), ok(digest), ok("s3creT")) == (200, 200, 401, 401, 401)


def test_a_worker_claims_reports_and_the_opts_are_looked_up(api):
  k = example("matmul_512")
  job, = submit(api, [k])
  wid = register(api)
  c = claim(api, wid)
  assert c["job_id"] == job["job_id"] and c["kernel"] == k.to_json() and c["settings"]["beam"] == 2 and c["lease_expires"] > time.time()
  assert claim(api, wid) is None
  hb = api.post(f"/v1/workers/{wid}/heartbeat", json={"job_id": c["job_id"], "lease_s": 120}, headers=W(wid)).json()
  assert hb["lease_expires"] > c["lease_expires"]
  r = report(api, wid, job).json()
  assert r["state"] == "done" and not r["duplicate"]
  assert report(api, wid, job).json() == {**r, "duplicate": True}
  fp, h = cpu_fingerprint()
  assert api.get(f"/v1/opts/{k.key}", params={"fingerprint": h}).status_code == 404  # not served before it is confirmed
  c = confirm(api, wid, job)
  got = api.get(f"/v1/jobs/{job['job_id']}", headers=SUB).json()
  assert got["result"]["status"] == "confirmed" and got["result"]["worker_id"] == wid
  assert got["state"] == "done" and got["result"]["speedup"] == 2.0 and got["result"]["fingerprint"] == h and got["finished"]
  opts = api.get(f"/v1/opts/{k.key}", params={"fingerprint": h}).json()
  assert opts == {"kernel_key": k.key, "fingerprint": h, "action_space_version": 1, "opts": got["result"]["opts"], "best_s": 1e-3, "baseline_s": 2e-3}
  assert api.get(f"/v1/opts/{k.key}", params={"fingerprint": h, "action_space_version": 2}).status_code == 404
  assert api.get(f"/v1/opts/{k.key}", params={"fingerprint": CUDA_HASH}).status_code == 404
  other = example("sum_all")
  looked = api.post("/v1/opts/lookup", json={"fingerprint": h, "keys": [other.key, k.key], "kernels": [k.to_json()]}).json()["results"]
  assert looked == [None, opts, opts]
  detail = api.get(f"/v1/kernels/{k.key}", headers=SUB).json()
  assert detail["document"] == k.to_json()
  assert [(j["job_id"], j["kind"]) for j in detail["jobs"]] == [(job["job_id"], "tune"), (c["job_id"], "confirm")]
  res, measured = detail["results"]
  assert res["confirmed_by"] == measured["result_id"] and measured["status"] == "measurement"
  assert res["worker_id"] == wid and res["opts"] == opts["opts"] and len(res["measurements"]) == 6
  assert [m["status"] for m in res["measurements"]] == ["ok", "ok", "ok", "slow", "compile_error", "timeout"]
  again, = submit(api, [k])  # tuned: answered at once
  assert again["job_id"] == job["job_id"] and again["state"] == "done" and again["result"] == got["result"]
  metrics = api.get("/metrics").text
  assert 'tunesvc_lookups_total{outcome="hit"} 3.0' in metrics and 'tunesvc_lookups_total{outcome="miss"} 4.0' in metrics
  assert 'tunesvc_jobs{state="done"} 2.0' in metrics  # the search and its confirmation
  assert 'tunesvc_requests_total{method="GET",route="/v1/opts/{kernel_key}",status="200"} 1.0' in metrics  # the fast path is counted
  # a repeated parameter is not the fast path's plain form: FastAPI's route answers it, as the fast path would have
  assert api.get(f"/v1/opts/{k.key}?fingerprint={h}&fingerprint={h}").json() == opts
  miss = api.get(f"/v1/opts/{k.key}", params={"fingerprint": CUDA_HASH, "action_space_version": 1})
  assert api.get(f"/v1/opts/{k.key}?fingerprint={CUDA_HASH}&fingerprint={CUDA_HASH}&action_space_version=1").json() == miss.json()
  assert miss.json()["detail"] == f"kernel {k.key} is not tuned for fingerprint {CUDA_HASH} at action-space version 1"
  assert 'tunesvc_requests_total{method="POST",route="/v1/workers/{worker_id}/report",status="200"} 3.0' in metrics


def test_claims_match_the_worker_fingerprint_and_unknown_workers_are_404(api):
  submit(api, [example("sum_all")], device="CUDA")
  wid = register(api)
  assert api.post(f"/v1/workers/{wid}/claim", json={}, headers=W(wid)).status_code == 204
  gpu = register(api, "gpu-0", CUDA_FP, CUDA_HASH, CUDA_OPTIONS)
  assert claim(api, gpu)["device"] == "CUDA"
  r = api.post("/v1/workers/999/claim", json={}, headers=WRK)
  assert r.status_code == 404 and r.json()["detail"] == "worker 999 not found"
  r = api.post("/v1/workers", json={"name": "x", "device": "CPU", "fingerprint": CUDA_FP, "fingerprint_hash": cpu_fingerprint()[1],
                                    "options": CUDA_OPTIONS}, headers=WRK)
  assert r.status_code == 422 and "is not the fingerprint's hash" in r.json()["detail"]
  r = api.post("/v1/workers", json={"name": "x", "device": "CPU", "fingerprint": {"arch": "x"}, "fingerprint_hash": "0" * 64, "options": {}},
               headers=WRK)
  assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "fingerprint", "backend"]


@pytest.mark.timing
def test_a_job_taken_away_refuses_the_old_workers_heartbeat_and_report(api):
  job, = submit(api, [example("sum_all")])
  a, b = register(api, "a"), register(api, "b")
  claim(api, a, lease_s=1)
  time.sleep(1.1)
  assert claim(api, b)["attempts"] == 1  # the lapsed lease was swept and the job claimed again
  r = api.post(f"/v1/workers/{a}/heartbeat", json={"job_id": job["job_id"]}, headers=W(a))
  assert r.status_code == 409 and r.json()["detail"] == f"job {job['job_id']} is not held by worker {a}: it is running under worker {b}"
  r = report(api, a, job)
  assert r.status_code == 409 and "the lease of worker" in r.json()["detail"]
  assert report(api, b, job).status_code == 200


def test_failure_reports_requeue_then_fail_with_every_reason_and_release_costs_nothing(api):
  job_id = submit(api, [example("sum_all")])[0]["job_id"]
  wid = register(api)
  for reason, state in [("device lost", "queued"), ("out of memory", "failed")]:
    claim(api, wid)
    assert api.post(f"/v1/workers/{wid}/release", json={"job_id": job_id}, headers=W(wid)).json()["state"] == "queued"
    claim(api, wid)
    assert api.post(f"/v1/workers/{wid}/report", json={"job_id": job_id, "error": reason}, headers=W(wid)).json()["state"] == state
  got = api.get(f"/v1/jobs/{job_id}", headers=SUB).json()
  assert got["state"] == "failed"
  assert got["error"] == f"attempt 1: worker {wid} (cpu-0): device lost\nattempt 2: worker {wid} (cpu-0): out of memory\n"
  r = api.post(f"/v1/workers/{wid}/release", json={"job_id": job_id}, headers=W(wid))
  assert r.status_code == 409 and r.json()["detail"] == f"job {job_id} is not held by worker {wid}: it is failed"


def test_reports_are_validated(api):
  job, = submit(api, [example("sum_all")])
  wid = register(api)
  claim(api, wid)
  fp, h = cpu_fingerprint()
  good = result_json(example("sum_all"), fp, h)
  def send(**change):  # json.dumps writes NaN and Infinity, as a careless worker's JSON library might
    return api.post(f"/v1/workers/{wid}/report", content=json.dumps({"job_id": job["job_id"], **change}),
                    headers={**W(wid), "Content-Type": "application/json"})
  cases = [({"result": {**good, "best_s": float("nan")}}, "best_s: nan is not a finite number"),
           ({"result": {**good, "candidates": [{**good["candidates"][0], "times_s": [1e999]}]}}, "candidates[0].times_s[0]: inf"),
           ({"result": {**good, "candidates": [{**good["candidates"][0], "status": "great"}]}},
            '"loc": ["body", "result", "candidates", 0, "status"]'),
           ({"result": {**good, "candidates": [{**good["candidates"][0], "status": "pending"}]}}, "'pending' is not one of ok, slow, compile_error"),
           ({"result": {**good, "best_opts": [{"op": "WARP", "axis": 0, "amt": 2}]}}, "best_opts: not an opt"),
           ({"result": {**good, "action_space_version": -1}}, "action_space_version"),
           ({"result": {**good, "seeds": [{"opts": [], "source": "alike", "applied": [{"op": "WARP", "axis": 0, "amt": 2}]}]}},
            "seeds[0].applied: not an opt"),
           ({"result": {**good, "seeds": [{"opts": [], "source": "nowhere"}]}}, '"loc": ["body", "result", "seeds", 0, "source"]'),
           ({"result": good, "error": "both"}, "exactly one of result and error"),
           ({}, "exactly one of result and error"),
           ({"result": result_json(example("matmul_512"), fp, h)}, "the result is for kernel"),
           ({"result": {k: v for k, v in good.items() if k != "best_s"}}, '"loc": ["body", "result", "best_s"], "msg": "Field required"')]
  for change, says in cases:
    r = send(**change)
    assert r.status_code == 422 and says in r.text, (change.keys(), r.text)
  assert send(result=good).status_code == 200


def test_unknown_and_malformed_ids_and_keys(api):
  zero = "0" * 64
  assert api.get("/v1/jobs/999", headers=SUB).json() == {"detail": "job 999 not found"}
  assert api.get(f"/v1/kernels/{zero}", headers=SUB).status_code == 404
  for url in ["/v1/jobs/0", "/v1/jobs/abc", f"/v1/jobs/{2**64}", "/v1/kernels/XYZ", f"/v1/opts/{zero}", f"/v1/opts/{zero}?fingerprint=abc",
              "/v1/opts/abc?fingerprint=" + zero, "/v1/kernels?limit=0", "/v1/kernels?state=lost", "/v1/kernels?device=cpu%00"]:
    assert api.get(url, headers=SUB).status_code == 422, url
  r = api.post("/v1/opts/lookup", json={"fingerprint": zero, "keys": ["nope"], "kernels": [{"format": "x"}]})
  assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "keys", 0]
  r = api.post("/v1/opts/lookup", json={"fingerprint": zero, "kernels": [{"format": "x"}]})
  assert r.status_code == 422 and r.json()["detail"][0]["msg"] == "kernels[0] $: missing key 'ast'"
  assert api.post("/v1/workers/1/heartbeat", json={"job_id": 1}, headers=WRK).status_code == 404


def test_kernels_are_listed_filtered_and_paged(api):
  ks = examples()
  submit(api, ks)
  submit(api, [example("matmul_512")], device="CUDA")
  first = api.get("/v1/kernels", params={"limit": 5}, headers=SUB).json()
  rest = api.get("/v1/kernels", params={"limit": 5, "offset": first["next_offset"]}, headers=SUB).json()
  last = api.get("/v1/kernels", params={"limit": 5, "offset": rest["next_offset"]}, headers=SUB).json()
  assert last["next_offset"] is None and len({k["key"] for p in (first, rest, last) for k in p["kernels"]}) == len(ks)
  cuda = api.get("/v1/kernels", params={"device": "CUDA"}, headers=SUB).json()["kernels"]
  assert [k["name"] for k in cuda] == ["matmul_512"] and [j["device"] for j in cuda[0]["jobs"]] == ["CPU", "CUDA"]
  assert [k["name"] for k in api.get("/v1/kernels", params={"name": "softmax_"}, headers=SUB).json()["kernels"]] != []
  assert api.get("/v1/kernels", params={"state": "done"}, headers=SUB).json() == {"kernels": [], "next_offset": None}


def test_health_metrics_and_the_openapi_schema(api, tmp_path):
  assert api.get("/healthz").json() == {"ok": True}
  assert "tunesvc_request_seconds_bucket" in api.get("/metrics").text
  assert api.get("/docs").status_code == 200
  paths = api.get("/openapi.json").json()["paths"]
  assert {"/v1/kernels", "/v1/jobs/{job_id}", "/v1/kernels/{key}", "/v1/opts/{kernel_key}", "/v1/opts/lookup", "/v1/workers",
          "/v1/workers/{worker_id}/claim", "/v1/workers/{worker_id}/heartbeat", "/v1/workers/{worker_id}/report",
          "/v1/workers/{worker_id}/release", "/v1/jobs", "/healthz", "/metrics"} <= set(paths) and "get" in paths["/v1/workers"]
  api.app.state.store.engine.dispose()
  (tmp_path / "api.db").rename(tmp_path / "gone.db")
  (tmp_path / "api.db").mkdir()  # the database can no longer be opened
  r = api.get("/healthz")
  assert r.status_code == 503 and r.json()["detail"].startswith("database: OperationalError")


# a bounded random run's coverage is its size: each operation 15 cases in `make test` (at 30, ~16 CPU-s cold) and 30 more,
# drawn independently (hypothesis, unseeded), in the exhaustive tier, which CI runs too
@pytest.mark.slow
@pytest.mark.parametrize("examples_per_op", [15, pytest.param(30, marks=pytest.mark.exhaustive)], ids=["15-each", "30-more-each"])
def test_fuzzing_the_openapi_schema_finds_no_server_error(tmp_path, examples_per_op):
  """No tokens, so the fuzzer reaches past authentication; a few kernels, a worker and a tuned result to find. (The fuzzer
  and TestClient call the app by the name testserver.)"""
  app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/fuzz.db", max_body_bytes=1 << 20, allowed_hosts=("testserver",)))
  with TestClient(app) as api:
    job, = submit(api, [example("sum_all")])
    submit(api, examples()[:4])
    wid = register(api)
    claim(api, wid)
    report(api, wid, job)
    confirm(api, wid, job)
  schema = schemathesis.openapi.from_asgi("/openapi.json", app)
  ops = [r.ok() for r in schema.get_all_operations()]
  assert len(ops) == 22
  for op in ops:
    @given(case=op.as_strategy())
    @settings(max_examples=examples_per_op, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def fuzz(case): case.call_and_validate(checks=[not_a_server_error])
    fuzz()


def test_tunesvc_serve_runs_the_app_with_uvicorn(tmp_path):
  env = {**os.environ, "TUNESVC_TOKENS": "sub:submit"}
  # port 0: the server takes a free port and prints its URL (a port picked here could be taken by a parallel test meanwhile)
  p = subprocess.Popen([sys.executable, "-m", "tunesvc.cli", "serve", "--port", "0", "--workers", "0", "--db", f"sqlite:///{tmp_path}/serve.db"],
                       env=env, stdout=subprocess.PIPE, text=True)
  try:
    url = p.stdout.readline().split()[2]
    with httpx.Client(base_url=url, timeout=60) as http:  # a loaded machine may take its time: it must answer, not be fast
      assert http.get("/healthz").status_code == 200
      r = http.post("/v1/kernels", json={"kernels": [example("sum_all").to_json()]}, headers=SUB)
      assert r.status_code == 202 and http.get("/v1/jobs/1").status_code == 401
  finally:
    p.terminate()
    p.wait(60)  # uvicorn's shutdown took more than 10 s on a loaded machine


def test_the_lookup_path_never_waits_for_the_threadpool():
  """FastAPI runs a sync endpoint or dependency in a worker thread; the hops there and back cost more than the lookup."""
  from tunesvc.api import opts
  def calls(d): return [d.call, *(c for sub in d.dependencies for c in calls(sub))]
  def is_async(c): return inspect.iscoroutinefunction(c) or inspect.iscoroutinefunction(type(c).__call__)
  found = {getattr(c, "__name__", type(c).__name__): is_async(c) for r in opts.router.routes for c in calls(r.dependant)}
  assert found == {"opts": True, "lookup": True, "lookup_role": True, "HTTPBearer": True}


def test_served_responses_are_not_held_back_by_nagle(tmp_path):
  """uvicorn writes a response's headers and its body separately: without TCP_NODELAY on the connection the body waited
  for the client's delayed ACK, 40 ms a response."""
  from tunesvc.serve import Service
  svc = Service(Settings(database_url=f"sqlite:///{tmp_path}/s.db"), port=0, workers=0).start()
  try:
    with httpx.Client(base_url=svc.url) as c:
      assert c.get("/healthz").status_code == 200
      conn, = svc.server.server_state.connections
      assert conn.transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
  finally: svc.stop()


@pytest.mark.slow
def test_several_api_processes_serve_one_port_and_sum_their_metrics(tmp_path):
  from tunesvc.serve import Service
  svc = Service(Settings(database_url=f"sqlite:///{tmp_path}/multi.db"), port=0, workers=0, api_processes=2).start()
  k, (_, h) = example("sum_all"), cpu_fingerprint()
  try:
    for stopped in svc.apis:  # each process in turn is the only one accepting: both answer, and both count
      os.kill(stopped.pid, signal.SIGSTOP)
      try:
        for _ in range(5): assert httpx.get(f"{svc.url}/v1/opts/{k.key}", params={"fingerprint": h}).status_code == 404
      finally: os.kill(stopped.pid, signal.SIGCONT)
    metrics = httpx.get(f"{svc.url}/metrics").text
    assert 'tunesvc_requests_total{method="GET",route="/v1/opts/{kernel_key}",status="404"} 10.0' in metrics
    assert 'tunesvc_lookups_total{outcome="miss"} 10.0' in metrics and 'tunesvc_jobs{state="queued"} 0.0' in metrics
  finally: svc.stop()
  assert all(not p.is_alive() for p in svc.apis) and not os.path.exists(svc.metrics_dir)


def test_a_stolen_worker_token_cannot_act_as_another_worker(api):
  """The worker token is a role; the id in the path is not proof: every call for a worker needs its registration's key."""
  k, (fp, h) = example("sum_all"), cpu_fingerprint()
  job, = submit(api, [k])
  honest, thief = register(api, "honest"), register(api, "honest")  # the same name: a label, not an identity
  assert KEYS[honest][1] != KEYS[thief][1]
  assert claim(api, honest)["job_id"] == job["job_id"]
  forged = {"job_id": job["job_id"], "result": result_json(k, fp, h, best_s=1e-5)}
  for headers in (WRK, W(thief), {**WRK, "X-Worker-Key": KEYS[honest][1][:-1] + "x"}):  # none, the thief's own, a guess
    for call, body in [("report", forged), ("report", {"job_id": job["job_id"], "error": "lost"}), ("heartbeat", {"job_id": job["job_id"]}),
                       ("release", {"job_id": job["job_id"]}), ("claim", {})]:
      r = api.post(f"/v1/workers/{honest}/{call}", json=body, headers=headers)
      assert r.status_code == 403 and f"worker {honest}'s key" in r.json()["detail"], (call, r.text)
  got = api.get(f"/v1/jobs/{job['job_id']}", headers=SUB).json()
  assert (got["state"], got["attempts"], got["result"]) == ("running", 0, None)  # untouched: still the honest worker's
  assert report(api, honest, job).status_code == 200


def test_only_the_submitter_or_an_admin_cancels_a_job_and_a_cancelled_running_job_takes_no_report(tmp_path):
  """Before: any submit token cancelled any job, a confirmation too (which refutes its result: another's kernel left untuned)."""
  other = {"Authorization": "Bearer sub2"}
  with make_client(tmp_path, tokens={**TOKENS, "sub2": "submit"}) as api:
    mine, theirs = submit(api, [example("sum_all"), example("matmul_512")])
    wid = register(api)
    assert claim(api, wid)["job_id"] == mine["job_id"] and report(api, wid, mine).status_code == 200
    check = claim(api, wid)
    assert check["kind"] == "confirm"
    cancel = lambda job, headers: api.post(f"/v1/jobs/{job['job_id']}/cancel", json={"reason": "mine now"}, headers=headers)
    for job, headers in [(theirs, other), (check, SUB), (check, other)]:
      r = cancel(job, headers)
      assert r.status_code == 403 and "only it or an admin may cancel it" in r.json()["detail"], r.text
    assert api.get(f"/v1/jobs/{mine['job_id']}", headers=SUB).json()["state"] == "done"  # its confirmation runs on
    assert cancel(check, ADM).status_code == 200  # an admin may: the result it would confirm is refuted
    got = api.get(f"/v1/jobs/{mine['job_id']}", headers=SUB).json()
    assert got["state"] == "failed" and "searched again" not in got["error"]  # a cancel is no refutation to retry
    assert claim(api, wid)["job_id"] == theirs["job_id"]
    assert cancel(theirs, SUB).status_code == 200  # its submitter's, while it runs
    assert api.post(f"/v1/workers/{wid}/heartbeat", json={"job_id": theirs["job_id"]}, headers=W(wid)).status_code == 409  # stop
    r = report(api, wid, theirs)
    assert r.status_code == 409 and "has failed" in r.json()["detail"] and "cancelled: mine now" in r.json()["detail"]


def test_one_caller_may_have_only_so_many_jobs_waiting(tmp_path):
  with make_client(tmp_path, tokens={**TOKENS, "sub2": "submit"}, max_pending_jobs=3) as api:
    ks = examples()[:5]
    post = lambda kernels, headers: api.post("/v1/kernels", json={"kernels": [k.to_json() for k in kernels]}, headers=headers)
    assert post(ks[:2], SUB).status_code == 202
    r = post(ks[2:4], SUB)
    assert r.status_code == 429 and r.headers["Retry-After"] and "2 of your jobs wait already and this would add 2" in r.json()["detail"]
    assert post(ks[:2], SUB).status_code == 202 and post(ks[2:3], SUB).status_code == 202  # shared jobs cost nothing; one more fits
    assert post(ks[3:4], SUB).status_code == 429
    assert post(ks[3:5], {"Authorization": "Bearer sub2"}).status_code == 202  # another caller's own bound
    assert post(examples()[5:9], ADM).status_code == 202  # an admin's are not bounded
    assert api.get("/v1/jobs", headers=SUB).json()["counts"] == {"queued": 9}


def test_one_token_registers_a_bounded_number_of_live_workers(tmp_path):
  """Before: a worker token registered workers without bound (a row each): a stolen one could grow the table forever."""
  with make_client(tmp_path, max_live_workers=2, tokens={**TOKENS, "wrk2": "worker"}) as api:
    first, _ = register(api, "a"), register(api, "b")
    body = {"name": "c", "device": "CPU", "fingerprint": cpu_fingerprint()[0], "fingerprint_hash": cpu_fingerprint()[1], "options": cpu_options()}
    r = api.post("/v1/workers", json=body, headers=WRK)
    assert r.status_code == 429 and "at most 2" in r.json()["detail"] and r.headers["Retry-After"]
    register(api, "c", token="wrk2")  # other credentials count apart, and an admin's are not bounded
    assert api.post("/v1/workers", json=body, headers=ADM).status_code == 201
    with api.app.state.store.write() as s: s.get(Worker, first).last_heartbeat = 0.0  # offline: no longer counted
    register(api, "d")


def test_the_forged_report_sequence_is_refused_and_nothing_forged_is_served(tmp_path):
  """The issue's attack with a stolen worker token: a report for a job never claimed, with verified true, best_s 1e-30 and
  opts that do not fit the 1-axis kernel; then a plausible forgery under a real lease, which the second measurement refutes."""
  k, (fp, h) = example("sum_all"), cpu_fingerprint()
  with make_client(tmp_path, confirm_on_other_worker=True, tokens={**TOKENS, "wrk2": "worker"}) as api:
    job, = submit(api, [k])
    thief, honest = register(api, "thief"), register(api, "honest", token="wrk2")
    accomplice = register(api, "accomplice")  # the thief's second worker, on the same stolen token
    lie = {**result_json(k, fp, h), "best_s": 1e-30, "speedup": 2e-3 / 1e-30, "best_opts": [{"op": "UPCAST", "axis": 9, "amt": 7}]}
    send = lambda wid, j, result: api.post(f"/v1/workers/{wid}/report", json={"job_id": j["job_id"], "result": result}, headers=W(wid))
    r = send(thief, job, lie)
    assert r.status_code == 409 and "never leased to worker" in r.json()["detail"]
    assert claim(api, thief)["job_id"] == job["job_id"]
    r = send(thief, job, lie)
    assert r.status_code == 422 and "best_s: 1e-30 s is not plausible" in r.json()["detail"]
    r = send(thief, job, {**lie, "best_s": 1e-3, "speedup": 2.0})
    assert r.status_code == 422 and "best_opts: UPCAST axis 9" in r.json()["detail"]
    assert send(thief, job, result_json(k, fp, h, best_s=1e-5)).status_code == 200  # legal opts, a time 100x too good
    assert api.get(f"/v1/opts/{k.key}", params={"fingerprint": h}).status_code == 404  # unconfirmed: not served
    assert claim(api, thief) is None and claim(api, accomplice) is None  # its confirmation is a worker's of another token
    c = claim(api, honest)
    assert c["kind"] == "confirm" and report(api, honest, c, best_s=1e-3).status_code == 200
    got = api.get(f"/v1/jobs/{job['job_id']}", headers=SUB).json()
    assert got["state"] == "failed" and "refuted" in got["error"] and got["result"]["status"] == "refuted"
    assert api.get(f"/v1/opts/{k.key}", params={"fingerprint": h}).status_code == 404
    again, = submit(api, [k])  # already searched again with no new request, honestly this time, and confirmed by the other worker
    assert f"searched again as job {again['job_id']}" in got["error"] and claim(api, thief) is None and claim(api, accomplice) is None
    assert claim(api, honest)["job_id"] == again["job_id"] and report(api, honest, again, best_s=1e-3).status_code == 200
    confirm(api, thief, again, best_s=1.1e-3)
    served = api.get(f"/v1/opts/{k.key}", params={"fingerprint": h}).json()
    assert served["best_s"] == 1e-3
    from tunesvc.runtime import compile_kernel
    compile_kernel(k, "CPU", served["opts"])  # what is served applies: no OptError in any client
    # the token was stolen: every result the thief made or confirmed goes, and the kernel is searched again
    assert api.post(f"/v1/admin/workers/{thief}/invalidate", json={"reason": "stolen token"}, headers=WRK).status_code == 403
    out = api.post(f"/v1/admin/workers/{thief}/invalidate", json={"reason": "stolen token"}, headers=ADM).json()
    assert len(out["invalidated"]) == 3 and len(out["requeued"]) == 1
    assert api.get(f"/v1/opts/{k.key}", params={"fingerprint": h}).status_code == 404
    assert api.get(f"/v1/jobs/{out['requeued'][0]}", headers=SUB).json()["state"] == "queued"


def test_database_trouble_is_a_json_503_with_retry_after_and_the_service_recovers(tmpfs):
  """A full disk under SQLite, then a write lock another process holds: each a JSON 503 with Retry-After on a kept-alive
  connection, and the service answers again by itself once the disk is freed and the lock released."""
  import sqlite3
  from conftest import fill
  from tunesvc.serve import Service
  db = tmpfs / "full.db"
  svc = Service(Settings(database_url=f"sqlite:///{db}", tokens=TOKENS), port=0, workers=0).start()
  try:
    with httpx.Client(base_url=svc.url, headers=SUB, timeout=60) as http:
      ks = examples()
      body = lambda i: {"kernels": [ks[i % len(ks)].to_json()], "search": {"seed": i}}
      assert http.post("/v1/kernels", json=body(0)).status_code == 202
      fill(tmpfs)
      for i in range(1, 4):
        r = http.post("/v1/kernels", json=body(i))
        assert r.status_code == 503 and r.headers["retry-after"] == "5" and "database" in r.json()["detail"], r.text
        assert r.headers.get("connection") != "close"
      (tmpfs / "filler").unlink()
      assert http.post("/v1/kernels", json=body(4)).status_code == 202  # recovered by itself
      held = sqlite3.connect(db, isolation_level=None)
      held.execute("BEGIN IMMEDIATE")  # another process's write lock
      t = time.monotonic()
      r = http.post("/v1/kernels", json=body(5))
      assert r.status_code == 503 and r.headers["retry-after"] == "5" and time.monotonic() - t < 15, r.text
      assert http.get("/healthz").json() == {"ok": True}  # reads go on
      held.execute("ROLLBACK")
      held.close()
      assert http.post("/v1/kernels", json=body(6)).status_code == 202
  finally: svc.stop()


def wide(seed: int, leaves: int = 1000):
  """A valid kernel of about 3 x leaves nodes (a balanced tree, so no depth limit is hit): seconds of validation in bulk."""
  from linearizer.builders import alu, const, kernel, ld
  def tree(lo, hi):
    if hi - lo == 1: return alu("MUL", ld(1, (64, 64)), const(float(seed * leaves + lo) + 0.5, (64, 64)))
    return alu("ADD", tree(lo, (lo + hi) // 2), tree((lo + hi) // 2, hi))
  return kernel(tree(0, leaves)).to_json()

@pytest.mark.timing  # compares latencies: alone, after the rest (it failed at load 15 beside other tests: 1.2 s vs 2.9 s / 3)
def test_a_heavy_lookup_does_not_stall_the_api(tmp_path):
  """Validating four documents of 4,000 nodes (seconds on a busy machine) runs off the event loop: /healthz answers
  meanwhile, in a small part of the lookup's time (on the loop it waited for the whole validation)."""
  import threading
  from test_worker import api_process
  docs = [wide(i) for i in range(4)]
  h = cpu_fingerprint()[1]
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  api, server = api_process(f"sqlite:///{tmp_path}/heavy.db", port), f"http://127.0.0.1:{port}"  # its own process: its own GIL
  with httpx.Client(base_url=server, timeout=120) as http:
    http.get("/healthz")
    answers, took = [], []
    def heavy():
      for _ in range(3):
        start = time.perf_counter()
        answers.append(http.post("/v1/opts/lookup", json={"fingerprint": h, "kernels": docs}).json())
        took.append(time.perf_counter() - start)
    t = threading.Thread(target=heavy)
    t.start()
    worst = 0.0
    with httpx.Client(base_url=server, timeout=120) as probe:
      while t.is_alive():
        start = time.perf_counter()
        assert probe.get("/healthz").status_code == 200
        worst = max(worst, time.perf_counter() - start)
        time.sleep(0.05)
    t.join()
  api.terminate()
  api.wait(30)
  assert answers == [{"results": [None] * 4}] * 3, answers
  print(f"/healthz worst latency under a heavy lookup: {worst * 1e3:.0f} ms; the lookups took {min(took) * 1e3:.0f} ms or more")
  assert worst < min(took) / 3, (worst, took)  # on the event loop, a probe waited for a whole validation (the 12 s)

@pytest.mark.timing  # the burst must outrun the refill (5 a second): at a load of 14 twelve lookups took long enough to refill it
def test_one_lookup_request_is_bounded_and_open_lookups_are_rate_limited(tmp_path):
  h = cpu_fingerprint()[1]
  with make_client(tmp_path, lookup_nodes=5000, open_rate_per_s=5) as api:
    r = api.post("/v1/opts/lookup", json={"fingerprint": h, "kernels": [wide(0), wide(1)]})  # 8,000 nodes
    assert r.status_code == 413 and "more than 5000 kernel nodes" in r.json()["detail"]
    key = examples()[0].key
    got = [api.get(f"/v1/opts/{key}", params={"fingerprint": h}).status_code for _ in range(12)]
    assert got[:8] == [404] * 8 and got[-1] == 429, got  # a burst of ten (less the lookup above), then the rate
    r = api.get(f"/v1/opts/{key}", params={"fingerprint": h})
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert api.get(f"/v1/opts/{key}", params={"fingerprint": h}, headers=SUB).status_code == 404  # a token's lookups are not open


def test_inputs_that_cannot_run_are_refused_up_front(tmp_path):
  from linearizer.builders import alu
  from linearizer.builders import elementwise
  from linearizer.dtypes import float64
  big = elementwise((32768, 65536), [(32768, 65536)] * 2, lambda a, b: alu("ADD", a, b), float64)  # 51.5 GB of buffers
  with make_client(tmp_path, max_kernel_bytes=1 << 30) as api:
    r = api.post("/v1/kernels", json={"kernels": [big.to_json()]}, headers=SUB)
    assert r.status_code == 422 and "its buffers need 51,539,607,552 bytes, more than this service's limit of 1,073,741,824" in r.text, r.text
    doc = example("sum_all").to_json()
    nan = json.dumps({"kernels": [example("softmax_div").to_json()]}).replace('"val": 1.4426950216293335', '"val": NaN', 1)
    assert "NaN" in nan
    r = api.post("/v1/kernels", content=nan, headers={**SUB, "Content-Type": "application/json"})
    assert r.status_code == 422 and "NaN is not JSON" in r.text, r.text  # as `tunesvc kernel check` says
    r = api.post("/v1/kernels", json={"kernels": [doc], "device": "HIP"}, headers=SUB)
    assert r.status_code == 202 and r.json()["warnings"] == ["no worker has registered device HIP: the jobs wait for one; registered: none"]
    job = r.json()["jobs"][0]
    r = api.post(f"/v1/jobs/{job['job_id']}/cancel", json={"reason": "wrong device"}, headers=SUB)
    assert r.status_code == 200 and r.json()["state"] == "failed" and "cancelled: wrong device" in r.json()["error"]
    assert api.post(f"/v1/jobs/{job['job_id']}/cancel", json={}, headers=SUB).status_code == 409
    assert api.post("/v1/jobs/999/cancel", json={}, headers=SUB).status_code == 404
    assert api.post("/v1/kernels", json={"kernels": [doc], "device": "HIP"}, headers=SUB).json()["jobs"][0]["job_id"] != job["job_id"]


def test_without_tokens_only_loopback_host_names_are_answered(tmp_path):
  """No tokens: every caller may do everything, so a page on another site that rebinds its name to 127.0.0.1 (DNS rebinding)
  must not reach the API as a same-origin caller: its requests carry its own name as Host."""
  with TestClient(create_app(Settings(database_url=f"sqlite:///{tmp_path}/h.db")), base_url="http://127.0.0.1:8000") as api:
    assert api.get("/v1/jobs").status_code == 200
    for host in ("localhost:8000", "[::1]:8000", "127.0.0.1"): assert api.get("/v1/jobs", headers={"Host": host}).status_code == 200
    for host in ("evil.example:8000", "127.0.0.1.evil.example", ""):
      r = api.post(f"/v1/admin/kernels/{'0' * 64}/invalidate", json={"reason": "rebound"}, headers={"Host": host})
      assert r.status_code == 400, (host, r.status_code)
  allowed = Settings(database_url=f"sqlite:///{tmp_path}/h.db", allowed_hosts=("tunesvc.lan",))
  with TestClient(create_app(allowed), base_url="http://tunesvc.lan") as api: assert api.get("/v1/jobs").status_code == 200
  with make_client(tmp_path) as api:  # tokens: they, not the name, decide (a rebound page has none)
    assert api.get("/v1/jobs", headers={**SUB, "Host": "tunesvc.example.com"}).status_code == 200
  assert Settings.from_env({"TUNESVC_ALLOWED_HOSTS": "a.lan, b.lan"}).allowed_hosts == ("a.lan", "b.lan")


def _raw(url: str, head: bytes, then: bytes = b"", wait_s: float = 0.0, chunks: int = 0) -> tuple[bytes, float]:
  """Send `head` on a raw connection, then `chunks` times `then` (wait_s apart) until the server answers; (what it answered,
  seconds until it closed). A server that closes with bytes of ours unread may reset the connection: b"RESET"."""
  host, port = url.removeprefix("http://").split(":")
  t, got = time.monotonic(), b""
  with socket.create_connection((host, int(port)), timeout=30) as s:
    try:
      s.sendall(head)
      for _ in range(chunks):
        if select.select([s], [], [], 0)[0]: break  # answered (or closed): read it
        s.sendall(then)
        if wait_s: time.sleep(wait_s)
      while chunk := s.recv(65536): got += chunk
    except (ConnectionResetError, BrokenPipeError): got += b"RESET"
  return got, time.monotonic() - t

def test_a_request_head_is_bounded_in_size_and_a_request_in_time(tmp_path):
  """httptools keeps however many header bytes a client sends (64 MB of one header were taken, 21 s of the event loop) and
  waits forever for a head or a body that trickles in (slow loris): each connection held memory, a socket and a task."""
  from tunesvc.serve import Service
  settings = Settings(database_url=f"sqlite:///{tmp_path}/s.db", tokens=TOKENS, max_head_bytes=16 << 10, receive_s=2.0)
  svc = Service(settings, port=0, workers=0).start()
  try:
    got, _ = _raw(svc.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * (20 << 10) + b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 431 ") and b"16384" in got, got[:200]
    for flood in (b"a" * 8192, b"".join(b"X-%d: a\r\n" % i for i in range(1000))):  # 2 MB of one header, 256,000 headers
      got, _ = _raw(svc.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: ", flood, chunks=256)
      assert got.startswith(b"HTTP/1.1 431 ") or got == b"RESET", got[:200]  # cut off while it still sends: answered or reset
    got, took = _raw(svc.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b"X: y\r\n", wait_s=0.5, chunks=20)  # a header every 0.5 s
    assert got.startswith(b"HTTP/1.1 408 ") and took < 6, (got[:200], took)
    _, took = _raw(svc.url, b"", chunks=0)  # connects and says nothing
    assert took < 6
    body = json.dumps({"kernels": [example("sum_all").to_json()]}).encode()
    head = (b"POST /v1/kernels HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sub\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    got, took = _raw(svc.url, head, body[:1], wait_s=0.5, chunks=20)  # a byte of the body every 0.5 s
    assert not got.startswith(b"HTTP/1.1 202") and took < 6, (got[:200], took)
    got, _ = _raw(svc.url, head + body + b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-B: " + b"b" * 8000 + b"\r\nConnection: close\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 202") and got.count(b"HTTP/1.1 200") == 1, got[:300]  # within the bounds: both answered
    with httpx.Client(base_url=svc.url, headers=SUB) as c: assert c.get("/v1/jobs").status_code == 200
  finally: svc.stop()


def test_models_are_paged(api):
  """A model costs its submitter nothing once its kernels' jobs exist (they are shared): one submit token could file the same
  kernels under any number of model names, and GET /v1/models read every row of every model (with each kernel's document)
  on each of the dashboard's polls."""
  ks = examples()[:3]
  jobs = submit(api, ks)
  wid = register(api)
  claim(api, wid)
  report(api, wid, jobs[0])
  for i in range(120): submit(api, ks, model=f"m{i:03d}", runs=[3, 2, 1])
  page = api.get("/v1/models", headers=SUB).json()
  assert [m["model"] for m in page["models"]] == [f"m{i:03d}" for i in range(50)] and page["next_offset"] == 50
  assert page["models"][0] == {"model": "m000", "kernels": 3, "runs": 6, "states": {"done": 1, "queued": 2}, "detail": None, "next_offset": None}
  last = api.get("/v1/models", params={"offset": 100, "limit": 50}, headers=SUB).json()
  assert len(last["models"]) == 20 and last["next_offset"] is None
  assert api.get("/v1/models", params={"limit": 501}, headers=SUB).status_code == 422
  one = api.get("/v1/models/m007", params={"limit": 2}, headers=SUB).json()
  assert one["kernels"] == 3 and one["runs"] == 6 and one["states"] == {"done": 1, "queued": 2} and one["next_offset"] == 2
  assert [(k["key"], k["runs"], k["state"]) for k in one["detail"]] == [(ks[0].key, 3, "done"), (ks[1].key, 2, "queued")]
  rest = api.get("/v1/models/m007", params={"offset": 2}, headers=SUB).json()
  assert [k["key"] for k in rest["detail"]] == [ks[2].key] and rest["next_offset"] is None
  assert api.get("/v1/models/nope", headers=SUB).status_code == 404


def test_a_result_of_another_action_space_version_is_confirmed_by_a_newer_worker_and_must_be_the_one_asked_for(tmp_path):
  """A report names its action-space version. One no worker runs (a stolen token's forgery said 1 where every worker runs
  2; an old worker's report after the fleet moved on) queued its confirm job for that version only: no worker ever claimed
  it (chaos on PostgreSQL: queued through the whole settle window), the search stayed done and unserved, and the kernel's
  resubmissions shared that job. A worker of a newer version can measure the opts of an older one (versions only add)."""
  with make_client(tmp_path, confirm_on_other_worker=True) as api:
    k = example("sum_all")
    job, = submit(api, [k])
    thief, honest = register(api, "thief"), register(api, "honest", token="adm")
    assert claim(api, thief)["job_id"] == job["job_id"]  # claimed without saying its version: any job
    assert (r := report(api, thief, job, best_s=1e-5, version=1)).status_code == 200, r.text  # invented, plausible
    for v, expect in ((0, None), (1, "confirm"), (2, "confirm")):  # an older worker cannot apply newer opts; a newer one can
      r = api.post(f"/v1/workers/{honest}/claim", json={"action_space_version": v}, headers=W(honest))
      assert (r.json()["kind"] if r.status_code == 200 else None) == expect, (v, r.status_code)
      if expect: assert api.post(f"/v1/workers/{honest}/release", json={"job_id": r.json()["job_id"]}, headers=W(honest)).status_code == 200
    asked, = submit(api, [example("matmul_512")], search={"action_space_version": 2})
    assert claim(api, thief)["job_id"] == asked["job_id"]
    r = report(api, thief, asked, version=1)
    assert r.status_code == 422 and "action-space version" in r.text, r.text  # the job asked for 2


def test_every_answer_says_its_content_type_is_meant_and_may_not_be_framed(api):
  """A JSON answer quotes what callers sent (a kernel's name, a path): with nosniff a browser never takes it for a page,
  and no answer may be framed by another site (the dashboard's buttons under someone else's)."""
  k, h = example("sum_all"), cpu_fingerprint()[1]
  for r in (api.get("/healthz"), api.get(f"/v1/opts/{k.key}", params={"fingerprint": h}), api.get("/v1/jobs"), api.get("/v1/jobs", headers=SUB),
            api.get("/static/dashboard.js"), api.get("/docs"),
            api.post("/v1/opts/lookup", content=b"<script>", headers={"content-type": "text/html"})):
    assert r.headers.get("x-content-type-options") == "nosniff" and r.headers.get("x-frame-options") == "DENY", (r.request.url, r.headers)
    assert r.headers.get("referrer-policy") == "no-referrer"


def test_a_fingerprint_registers_only_its_own_devices_linearizer_options(api):
  """The first worker of a fingerprint registers the LinearizerOptions its results are checked against, and every later
  one must send the same: a CUDA fingerprint registered first with the CPU's options (or a CPU one with a GPU's) would
  check that device's reports against another device's rules, and refuse every honest worker of it."""
  fp, h = cpu_fingerprint()
  for name, f, fh, options in (("cpu-as-cuda", fp, h, CUDA_OPTIONS), ("cuda-as-cpu", CUDA_FP, CUDA_HASH, cpu_options())):
    r = api.post("/v1/workers", json={"name": name, "device": "X", "fingerprint": f, "fingerprint_hash": fh, "options": options}, headers=WRK)
    assert r.status_code == 422 and "another device's" in r.text, r.text
  assert register(api, "cuda", CUDA_FP, CUDA_HASH, CUDA_OPTIONS) and register(api)  # each its own: registered


def test_heartbeats_cannot_hold_a_job_past_its_search_budget(api):
  """A lease lasts while its worker beats. A worker (a stolen token) that claims jobs and only beats held each forever:
  no one else could search it and it never ended. Beats are refused (409) once the job has run twice its search budget
  and 10 more minutes; its lease lapses like a dead worker's, the attempt counted."""
  job, = submit(api, [example("sum_all")], search={"budget_s": 30})
  wid = register(api)
  assert claim(api, wid, lease_s=60)["job_id"] == job["job_id"]
  beat = lambda: api.post(f"/v1/workers/{wid}/heartbeat", json={"job_id": job["job_id"], "lease_s": 60}, headers=W(wid))
  assert beat().status_code == 200
  st = api.app.state.store
  with st.write() as s: s.get(Job, job["job_id"]).started -= 2 * 30 + 600 + 1  # it has run that long
  r = beat()
  assert r.status_code == 409 and "held past" in r.text, r.text


def test_the_open_rate_limit_holds_against_many_addresses():
  """An IPv6 client holds a /64 (2**64 addresses): one bucket per address gave it a fresh burst per request, and 65,536 of
  them emptied the table -- every other client's bucket with it. A /64 is one client; a full table drops the buckets
  that have refilled (forgetting those changes nothing) before any that still hold a debt."""
  from tunesvc.api.limits import RateLimit
  rl = RateLimit(rate=1.0, burst=2.0, max_clients=100)
  assert rl.retry_after("2001:db8::1") == 0 and rl.retry_after("2001:db8::2") == 0 and rl.retry_after("2001:db8::3") > 0  # one /64
  assert rl.retry_after("2001:db8:0:1::1") == 0  # the next /64: another client
  assert rl.retry_after("10.0.0.1") == 0 and rl.retry_after("10.0.0.1") == 0 and rl.retry_after("10.0.0.1") > 0
  for i in range(500): rl.buckets[f"192.0.2.{i}"] = (rl.burst, time.monotonic() - 10)  # idle clients, refilled long ago
  assert rl.retry_after("198.51.100.7") == 0 and len(rl.buckets) <= 100
  assert rl.retry_after("10.0.0.1") > 0 and rl.retry_after("2001:db8::4") > 0  # still in debt: not forgotten


def test_a_claimed_search_brings_the_kernels_served_winners_on_other_fingerprints_as_warm_starts(api):
  k, fp = example("sum_all"), cpu_fingerprint()[0]
  fp2 = {**fp, "cpu": f"{fp.get('cpu')} (another)"}
  h2 = hashlib.sha256(json.dumps(fp2, sort_keys=True).encode()).hexdigest()
  here, there = register(api, "here"), register(api, "there", fp2, h2)
  job, = submit(api, [k], device=h2)
  assert claim(api, there)["warm"] == []  # nothing served yet
  body = {"job_id": job["job_id"], "result": result_json(k, fp2, h2, best_s=1e-5, version=ACTION_SPACE_VERSION)}
  assert api.post(f"/v1/workers/{there}/report", json=body, headers=W(there)).status_code == 200
  c = claim(api, there)
  assert c["kind"] == "confirm" and c["warm"] == []  # a confirmation searches nothing
  body = {"job_id": c["job_id"], "result": result_json(k, fp2, h2, best_s=1e-5, version=ACTION_SPACE_VERSION)}
  assert api.post(f"/v1/workers/{there}/report", json=body, headers=W(there)).status_code == 200
  won, rid = body["result"]["best_opts"], api.get(f"/v1/jobs/{job['job_id']}", headers=SUB).json()["result"]["result_id"]
  again, = submit(api, [k], device="CPU")
  c = api.post(f"/v1/workers/{here}/claim", json={"action_space_version": ACTION_SPACE_VERSION}, headers=W(here)).json()
  assert c["job_id"] == again["job_id"]  # the winner there is a seed here, named
  assert c["warm"] == [{"opts": won, "source": "other_fingerprint", "kernel_key": k.key, "fingerprint_hash": h2, "result_id": rid, "applied": []}]
  assert api.post(f"/v1/workers/{here}/release", json={"job_id": c["job_id"]}, headers=W(here)).status_code == 200
  assert claim(api, there)["warm"] == []  # its own fingerprint's winner is a hit, not a warm start
