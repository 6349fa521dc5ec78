"""The store on SQLite and on the real PostgreSQL (a fresh schema per test): submit, claims, leases, reports, best."""
import json, multiprocessing, os, sqlite3, threading, time, uuid
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.exc import OperationalError, StatementError
from devices.cpu import fingerprint_hash
from linearizer.ast import load
from linearizer.builders import matmul, reduce
from search_results import CUDA_FP, CUDA_HASH, CUDA_OPTIONS, cpu_fingerprint, cpu_options, example, examples, search_result
from search.result import SeedSource
from linearizer.alike import sizes, structure
import tunesvc.store
from tunesvc.store import Store, proof, queue, reads
from tunesvc.store.migrate import alembic_config
from tunesvc.states import JobKind, JobState, ResultStatus, WorkerState
from tunesvc.store.models import Base, Best, Job, Kernel, Measurement, Result, Worker

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def pg_schema_url() -> tuple[str, str]:
  """A new schema in the test database, as a URL whose connections use it; skips when PostgreSQL is not there."""
  schema = f"t_{uuid.uuid4().hex[:12]}"
  try:
    with create_engine(PG).begin() as c: c.execute(text(f"CREATE SCHEMA {schema}"))
  except OperationalError as e:  # it does not answer; any other error is a failure of its own
    why = f"PostgreSQL not reachable at {PG}: {str(e.orig).splitlines()[0] if e.orig else e}"
    if os.environ.get("CI"): pytest.fail(f"{why}; CI provisions it (scripts/postgres.sh), so its tests fail here instead of skipping")
    pytest.skip(why)
  return f"{PG}?options=-csearch_path%3D{schema}", schema

@pytest.fixture
def sqlite_store(tmp_path):
  st = Store(f"sqlite:///{tmp_path}/tunesvc.db")
  yield st
  st.close()

@pytest.fixture
def pg_store():
  url, schema = pg_schema_url()
  st = Store(url)
  yield st
  st.close()
  with create_engine(PG).begin() as c: c.execute(text(f"DROP SCHEMA {schema} CASCADE"))

@pytest.fixture(params=["sqlite_store", "pg_store"])
def store(request): return request.getfixturevalue(request.param)

@pytest.fixture
def cpu_worker(store):
  fp, h = cpu_fingerprint()
  return queue.register(store, "cpu-0", "CPU", fp, h, cpu_options())

def cpu(st, name: str) -> Worker: return queue.register(st, name, "CPU", *cpu_fingerprint(), cpu_options())

def report(st, w, job_id, confirm=True, **kw):
  """Report a search of the job as worker w; with `confirm`, a verified one is confirmed by w's measurement of its opts."""
  j, _ = reads.job(st, job_id)
  fp, h = cpu_fingerprint()
  k = load(reads.kernel(st, j.kernel_key).kernel.document)
  res, dup = queue.report(st, w.id, job_id, search_result(k, fp, h, **kw))
  if confirm and res.status == "unconfirmed":
    c, _ = queue.claim(st, w.id, 60)
    assert c.kind == "confirm" and c.confirms == res.id
    queue.report(st, w.id, c.id, search_result(k, fp, h, **kw))
  return res, dup

def count(st, what, *where) -> int:
  with st.read() as s: return s.scalar(select(func.count()).select_from(what).where(*where))


def test_migrations_create_exactly_the_models(store):
  with store.engine.connect() as c: assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []
  Store(store.url).close()  # a second process opening the store finds the schema current


def test_states_and_kinds_are_their_enums_and_no_other_name_is_written(store, cpu_worker):
  """Job states and kinds, result statuses and worker states read back as tunesvc/states.py's members (their values in the
  column, as before: the wire and the rows are unchanged); a name outside the set is refused before any SQL runs."""
  (job, _), = queue.submit(store, examples()[:1], "CPU", {"beam": 2})
  res, _ = report(store, cpu_worker, queue.claim(store, cpu_worker.id, 60)[0].id, confirm=False)
  j, r = reads.job(store, job.id)
  assert (type(j.state), type(j.kind), type(r.status)) == (JobState, JobKind, ResultStatus) and j.state == "done" and r.status == "unconfirmed"
  with store.read() as s:
    assert type(s.get(Worker, cpu_worker.id).state) is WorkerState
    assert s.scalar(select(text("state")).select_from(Job).where(Job.id == job.id)) == "done"  # the column holds the value
  with pytest.raises(StatementError, match="'finished' is not a valid JobState"), store.write() as s: s.get(Job, job.id).state = "finished"
  assert reads.job(store, job.id)[0].state is JobState.DONE


def test_identical_pending_requests_share_a_job(store):
  ks = examples()
  a = queue.submit(store, ks, "CPU", {"beam": 2})
  b = queue.submit(store, ks[::-1] + ks[:1], "CPU", {"beam": 2})
  assert [j.id for j, _ in b] == [j.id for j, _ in a[::-1] + a[:1]] and all(j.state == "queued" and r is None for j, r in a)
  other = queue.submit(store, ks[:1], "CPU", {"beam": 4}) + queue.submit(store, ks[:1], "CUDA", {"beam": 2})
  assert len({j.id for j, _ in a + other}) == len(ks) + 2
  assert count(store, Job) == len(ks) + 2


def test_claims_follow_the_device_selector_then_priority_then_age(store, cpu_worker):
  mm, sm = example("matmul_512"), example("sum_all")
  (cuda, _), = queue.submit(store, [mm], "CUDA", {})
  (old, _), = queue.submit(store, [mm], "CPU", {})
  (exact, _), = queue.submit(store, [sm], cpu_worker.fingerprint_hash, {})
  (urgent, _), = queue.submit(store, [sm], "CPU", {}, priority=5)
  (exact_cuda, _), = queue.submit(store, [sm], CUDA_HASH, {})
  assert [queue.claim(store, cpu_worker.id, 60)[0].id for _ in range(3)] == [urgent.id, old.id, exact.id]
  assert queue.claim(store, cpu_worker.id, 60) is None
  gpu = queue.register(store, "gpu-0", "CUDA:0", CUDA_FP, CUDA_HASH, CUDA_OPTIONS)
  assert {queue.claim(store, gpu.id, 60)[0].id for _ in range(2)} == {cuda.id, exact_cuda.id}
  with pytest.raises(queue.NotFound): queue.claim(store, 999, 60)


def test_a_worker_is_given_no_job_that_asks_for_another_action_space_version(store, cpu_worker):
  mm, sm, ma = example("matmul_512"), example("sum_all"), example("mul_add_16m")
  (v2, _), = queue.submit(store, [mm], "CPU", {"beam": 2, "action_space_version": 2})
  (v1, _), = queue.submit(store, [sm], "CPU", {"beam": 2, "action_space_version": 1})
  (any_version, _), = queue.submit(store, [ma], "CPU", {"beam": 2})
  assert [queue.claim(store, cpu_worker.id, 60, 1)[0].id for _ in range(2)] == [v1.id, any_version.id]
  assert queue.claim(store, cpu_worker.id, 60, 1) is None  # v2 waits for a worker of version 2
  assert queue.claim(store, cpu_worker.id, 60, 2)[0].id == v2.id


def test_a_report_stores_result_measurements_and_best_once(store, cpu_worker):
  (job, _), = queue.submit(store, [example("matmul_512")], "CPU", {})
  queue.claim(store, cpu_worker.id, 60)
  res, dup = report(store, cpu_worker, job.id, best_s=2e-3)
  again, dup2 = report(store, cpu_worker, job.id, best_s=1e-3)  # a retried report: the first one stands
  assert (dup, dup2, again.id, again.best_s) == (False, True, res.id, 2e-3)
  assert count(store, Result) == 2 and count(store, Measurement) == 2 * len(res.result["candidates"]) == 12  # the search and its confirmation
  j, r = reads.job(store, job.id)
  assert j.state == "done" and j.result_id == r.id and j.lease_owner is None and r.result["best_opts"] == r.best_opts
  rows = reads.lookup(store, [job.kernel_key], cpu_worker.fingerprint_hash)
  assert rows[job.kernel_key].best_opts == res.best_opts and rows[job.kernel_key].best_s == 2e-3
  other = cpu(store, "cpu-1")
  with pytest.raises(queue.Conflict, match="already done"): report(store, other, job.id)
  (same, r2), = queue.submit(store, [example("matmul_512")], "CPU", {})  # tuned: answered at once
  assert same.id == job.id and r2.id == res.id


def test_best_is_replaced_only_by_a_faster_verified_result_per_version(store, cpu_worker):
  k, h = example("softmax_max"), cpu_worker.fingerprint_hash
  jobs = [j for seed in range(5) for j, _ in queue.submit(store, [k], "CPU", {"seed": seed})]
  for j, (best_s, verified, version) in zip(jobs, [(2e-3, True, 1), (1e-3, True, 1), (3e-3, True, 1), (5e-4, False, 1), (4e-3, True, 2)]):
    queue.claim(store, cpu_worker.id, 60)
    report(store, cpu_worker, j.id, best_s=best_s, verified=verified, version=version)
  assert reads.lookup(store, [k.key], h, 1)[k.key].best_s == 1e-3
  assert reads.lookup(store, [k.key], h)[k.key].action_space_version == 2  # no version asked: the newest
  assert reads.lookup(store, [k.key], h, 3) == {} and reads.lookup(store, [k.key], CUDA_HASH) == {}
  assert count(store, Best) == 2 and count(store, Result) == 5 + 4  # four verified results, each confirmed


@pytest.mark.timing
def test_lapsed_leases_requeue_until_attempts_run_out(store, cpu_worker):
  (job, _), = queue.submit(store, [example("sum_all")], "CPU", {}, max_attempts=2)
  other = cpu(store, "cpu-1")
  queue.claim(store, cpu_worker.id, 0.05)
  time.sleep(0.1)
  got, _ = queue.claim(store, other.id, 0.05)  # the claim sweeps the lapsed lease first
  assert got.id == job.id and got.attempts == 1 and got.lease_owner == other.id
  with pytest.raises(queue.Conflict, match="held by worker"): report(store, cpu_worker, job.id)
  with pytest.raises(queue.Conflict, match="not held by worker"): queue.heartbeat(store, cpu_worker.id, job.id, 60)
  time.sleep(0.1)
  assert queue.expire(store) == 1
  j, _ = reads.job(store, job.id)
  assert j.state == "failed" and j.attempts == 2 and j.finished is not None
  assert j.error.splitlines() == [f"attempt 1: the lease of worker {cpu_worker.id} expired", f"attempt 2: the lease of worker {other.id} expired"]
  with pytest.raises(queue.Conflict, match="has failed"): report(store, other, job.id)
  (fresh, _), = queue.submit(store, [example("sum_all")], "CPU", {})  # a failed job does not answer a new request
  assert fresh.id != job.id and fresh.state == "queued"


@pytest.mark.timing
def test_a_heartbeat_keeps_the_lease_and_a_late_report_of_an_unclaimed_job_is_kept(store, cpu_worker):
  (job, _), = queue.submit(store, [example("sum_all")], "CPU", {})
  queue.claim(store, cpu_worker.id, 0.5)
  for _ in range(4):  # outlives the first lease
    time.sleep(0.2)
    assert queue.heartbeat(store, cpu_worker.id, job.id, 0.5).lease_expires > time.time()
  assert queue.expire(store) == 0
  time.sleep(0.6)
  assert queue.expire(store) == 1 and reads.job(store, job.id)[0].state == "queued"
  res, dup = report(store, cpu_worker, job.id)  # nobody took it since: the finished search is kept
  j, r = reads.job(store, job.id)
  assert not dup and j.state == "done" and r.id == res.id and j.attempts == 1


def test_reported_failures_and_releases(store, cpu_worker):
  a, b = [j for j, _ in queue.submit(store, [example("sum_all"), example("matmul_512")], "CPU", {}, max_attempts=2)]
  queue.claim(store, cpu_worker.id, 60)
  assert queue.fail(store, cpu_worker.id, a.id, "device lost").state == "queued"
  queue.claim(store, cpu_worker.id, 60)
  assert queue.release(store, cpu_worker.id, a.id).state == "queued"  # costs no attempt
  queue.claim(store, cpu_worker.id, 60)
  j = queue.fail(store, cpu_worker.id, a.id, "out of memory")
  assert j.state == "failed" and j.attempts == 2
  assert j.error == f"attempt 1: worker {cpu_worker.id} (cpu-0): device lost\nattempt 2: worker {cpu_worker.id} (cpu-0): out of memory\n"
  queue.claim(store, cpu_worker.id, 60)
  assert queue.fail(store, cpu_worker.id, b.id, "no candidate compiles", retry=False).state == "failed"
  with pytest.raises(queue.Conflict): queue.fail(store, cpu_worker.id, b.id, "again")


def test_reports_that_contradict_the_job_are_refused(store, cpu_worker):
  (job, _), = queue.submit(store, [example("sum_all")], "CPU", {})
  queue.claim(store, cpu_worker.id, 60)
  fp, h = cpu_fingerprint()
  with pytest.raises(queue.Invalid, match="is for kernel"): queue.report(store, cpu_worker.id, job.id, search_result(example("matmul_512"), fp, h))
  with pytest.raises(queue.Invalid, match="fingerprint"):
    queue.report(store, cpu_worker.id, job.id, search_result(example("sum_all"), CUDA_FP, CUDA_HASH))
  with pytest.raises(queue.Invalid, match="not the fingerprint's hash"): queue.register(store, "liar", "CPU", CUDA_FP, h, cpu_options())
  with pytest.raises(queue.NotFound): queue.report(store, cpu_worker.id, 12345, search_result(example("sum_all"), fp, h))
  assert count(store, Result) == 0 and reads.job(store, job.id)[0].state == "running"


def test_any_text_can_be_stored(store):
  fp = {**CUDA_FP, "driver": "550\x00\ud800"}
  w = queue.register(store, "nul\x00 and a lone \udc80 surrogate", "CUDA:0", fp, queue.settings_hash(fp), CUDA_OPTIONS)
  with store.read() as s: assert s.get(Worker, w.id).name == "nul\ufffd and a lone ? surrogate"


def test_kernel_listing_filters_and_pages(store, cpu_worker):
  ks = examples()
  queue.submit(store, ks, "CPU", {})
  queue.submit(store, [example("matmul_512")], "CUDA", {})
  got, more = reads.kernels(store, limit=5)
  rest, more2 = reads.kernels(store, limit=50, offset=5)
  assert more and not more2 and {k.key for k in got + rest} == {k.key for k in ks} and len(got + rest) == len(ks)
  assert sorted(k.name for k in reads.kernels(store, name="matmul")[0]) == ["matmul_1024", "matmul_512"]
  assert [k.name for k in reads.kernels(store, device="CUDA")[0]] == ["matmul_512"]
  queue.claim(store, cpu_worker.id, 60)
  assert len(reads.kernels(store, state="running")[0]) == 1 and reads.kernels(store, name="100%_")[0] == []


def test_a_claim_on_postgresql_skips_a_job_another_transaction_holds(pg_store):
  """FOR UPDATE SKIP LOCKED: a claimer passes over the row another claimer has locked instead of waiting for it."""
  w = cpu(pg_store, "cpu-0")
  (a, _), (b, _) = queue.submit(pg_store, [example("sum_all"), example("matmul_512")], "CPU", {})
  with pg_store.engine.connect() as held:
    held.execute(select(Job.id).where(Job.id == a.id).with_for_update())
    got: list = []
    t = threading.Thread(target=lambda: got.append(queue.claim(pg_store, w.id, 60)))
    t.start()
    t.join(10)
    assert got and got[0][0].id == b.id
    held.rollback()


def hold_write_lock(db: str, stop: threading.Event, commit_every_s: float | None) -> threading.Thread:
  """Another writer on `db` holding its write lock till `stop` is set: committing a change every `commit_every_s` and
  taking the lock again at once (a gap of microseconds SQLite's polling busy handler all but never hits), or never committing."""
  c = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
  c.execute("CREATE TABLE IF NOT EXISTS beat (t REAL)")
  c.execute("BEGIN IMMEDIATE")
  def hold():
    while not stop.wait(commit_every_s):
      c.execute("INSERT INTO beat VALUES (?)", (time.time(),))
      c.execute("COMMIT")
      c.execute("BEGIN IMMEDIATE")
    c.execute("COMMIT")
    c.close()
  (t := threading.Thread(target=hold)).start()
  return t

def test_a_sqlite_writer_waits_while_other_writers_commit_and_fails_only_on_a_stuck_one(tmp_path, monkeypatch):
  """The write lock held briefly, again and again, for 5 busy timeouts: the writer waits it out (before, SQLite's busy
  handler gave up after one busy timeout of missed retries: "database is locked" with 8 processes racing on a loaded
  machine). Held with no commit for a whole busy timeout: a stuck holder, and the writer fails (the API's 503)."""
  monkeypatch.setattr(tunesvc.store, "BUSY_TIMEOUT_MS", 300)
  st, db, stop = Store(f"sqlite:///{tmp_path}/tunesvc.db"), f"{tmp_path}/tunesvc.db", threading.Event()
  for tries in range(3):  # a holder preempted between its COMMIT and BEGIN (a busy machine) leaves a gap the writer takes:
    holder = hold_write_lock(db, stop, commit_every_s=0.05)  # such a run shows nothing, and runs again
    (timer := threading.Timer(1.5, stop.set)).start()
    queue.submit(st, [example("sum_all")], "CPU", {"try": tries})
    waited = stop.is_set()
    timer.cancel()
    stop.set()
    holder.join()
    stop.clear()
    if waited: break
  assert waited and count(st, Job) == tries + 1  # it got the lock once the holder let it go
  holder = hold_write_lock(db, stop, commit_every_s=None)
  try:
    with pytest.raises(OperationalError, match="database is locked"): queue.submit(st, [example("matmul_512")], "CPU", {})
  finally:
    stop.set()
    holder.join()
  st.close()


def racer(url: str, fp: dict, h: str, start, out) -> None:
  st = Store(url)
  w = queue.register(st, "racer", "CPU", fp, h, cpu_options())
  start.wait()
  done, results = [], {}
  while (got := queue.claim(st, w.id, 60)) is not None:
    j, k = got
    # one result a kernel (a confirmation agrees), built once: building it (the hand-coded schedule and a step past it) was
    # ~a fifth of a racer's CPU; the store checks every report as it comes
    if (r := results.get(k.key)) is None: r = results[k.key] = search_result(load(k.document), fp, h, best_s=1e-3 * (1 + int(k.key, 16) % 7))
    assert queue.report(st, w.id, j.id, r)[1] is False and queue.report(st, w.id, j.id, r)[1] is True  # a retried report writes nothing
    done.append(j.id)
  out.put(done)
  st.close()

@pytest.mark.slow
def test_eight_processes_race_over_200_jobs(store):
  ks = examples()
  jobs = [j.id for seed in range(200 // len(ks) + 1) for j, _ in queue.submit(store, ks, "CPU", {"seed": seed})][:200]
  with store.write() as s: s.execute(Job.__table__.delete().where(Job.id.not_in(jobs)))
  ctx = multiprocessing.get_context("forkserver")  # fresh processes (no inherited connections or threads), forked from
  # one that imported the heavy parts
  ctx.set_forkserver_preload(["tunesvc.store.queue", "linearizer.heuristic", "devices.cpu", "alembic.autogenerate", "pytest"])
  start, out = ctx.Barrier(8), ctx.Queue()
  procs = [ctx.Process(target=racer, args=(store.url, *cpu_fingerprint(), start, out)) for _ in range(8)]
  for p in procs: p.start()
  done = [out.get(timeout=120) for _ in procs]
  for p in procs: p.join(10)
  with store.read() as s: confirms = s.scalars(select(Job.id).where(Job.kind == "confirm")).all()
  assert sorted(sum(done, [])) == sorted(jobs + confirms) and len(confirms) == 200  # every job done, and by one worker only
  assert sum(len(d) > 0 for d in done) >= 2
  assert reads.jobs_by_state(store) == {"done": 400}
  assert count(store, Result) == 400 and count(store, Measurement) == 400 * 6
  with store.read() as s: assert s.scalar(select(func.count(func.distinct(Result.job_id)))) == 400
  assert count(store, Best) == len(ks)


def forged(k, **change):
  """A report as the issue's attacker sent it: verified, with a time no device reaches and opts that do not fit the kernel."""
  fp, h = cpu_fingerprint()
  r = search_result(k, fp, h)
  for name, v in change.items(): setattr(r, name, v)
  return r

def test_only_the_lease_holder_reports_and_every_report_is_checked(store, cpu_worker):
  k = example("sum_all")
  (job, _), = queue.submit(store, [k], "CPU", {})
  with pytest.raises(queue.Conflict, match="never leased to worker"): queue.report(store, cpu_worker.id, job.id, forged(k))  # not claimed
  queue.claim(store, cpu_worker.id, 60)
  queue.release(store, cpu_worker.id, job.id)
  with pytest.raises(queue.Conflict, match="never leased to worker"): queue.report(store, cpu_worker.id, job.id, forged(k))  # given back
  queue.claim(store, cpu_worker.id, 60)
  fp, h = cpu_fingerprint()
  hand = search_result(k, fp, h).baseline_opts
  for change, says in [({"best_s": 1e-30}, "best_s: 1e-30 s is not plausible"), ({"baseline_s": 0.0}, "baseline_s: 0.0 s is not plausible"),
                       ({"best_opts": [{"op": "UPCAST", "axis": 9, "amt": 7}]}, "best_opts:"),
                       ({"baseline_opts": hand + [{"op": "LOCAL", "axis": 0, "amt": 2}]}, "baseline_opts:"),  # no local dims on the CPU
                       ({"flops": 1}, "not the kernel's"), ({"speedup": 1e6}, "speedup"), ({"var_vals": {"n": 3}}, "var_vals"),
                       ({"candidates": []}, "no verified candidate of the search has best_opts")]:
    with pytest.raises(queue.Invalid, match=says): queue.report(store, cpu_worker.id, job.id, forged(k, **change))
  assert count(store, Result) == 0 and reads.job(store, job.id)[0].state == "running"


def test_registration_checks_the_hash_and_takes_only_the_options_the_fingerprint_names(store):
  """Before: the first registration of a fingerprint set its options, so a stolen worker token registering the real
  fingerprint first with options of its own (more threads, LOCAL made legal) had every honest worker of it refused."""
  fp, h = cpu_fingerprint()
  with pytest.raises(queue.Invalid, match="not the fingerprint's hash"): queue.register(store, "x", "CPU", {**fp, "threads": 999}, h, cpu_options())
  with pytest.raises(queue.Invalid, match="not the LinearizerOptions the fingerprint names"):
    queue.register(store, "x", "CPU", fp, h, {**cpu_options(), "has_local": True})  # a worker that would make LOCAL legal here
  with pytest.raises(queue.Invalid, match="not LinearizerOptions"): queue.register(store, "x", "CPU", fp, h, {"nonsense": 1})
  own = {**cpu_options(), "threads": 64}  # options of its own name another fingerprint, which no client of this device looks up
  thief = queue.register(store, "thief", "CPU", {**fp, "options": own}, queue.settings_hash({**fp, "options": own}), own)
  assert thief.fingerprint_hash != h and queue.register(store, "honest", "CPU", fp, h, cpu_options()).fingerprint_hash == h


def test_a_result_is_served_once_a_second_measurement_confirms_it(store, cpu_worker):
  k, h = example("matmul_512"), cpu_worker.fingerprint_hash
  (job, _), = queue.submit(store, [k], "CPU", {})
  queue.claim(store, cpu_worker.id, 60)
  res, _ = report(store, cpu_worker, job.id, confirm=False)
  assert res.status == "unconfirmed" and reads.lookup(store, [k.key], h) == {}  # not served yet
  c, _ = queue.claim(store, cpu_worker.id, 60)  # the embedded default: the same worker measures again
  assert (c.kind, c.confirms, c.device, c.settings["opts"]) == ("confirm", res.id, h, res.best_opts)
  fp = cpu_fingerprint()[0]
  with pytest.raises(queue.Invalid, match="other opts"): queue.report(store, cpu_worker.id, c.id, forged(k, best_opts=[]))
  queue.report(store, cpu_worker.id, c.id, search_result(k, fp, h, best_s=1.2e-3))  # within the tolerance
  assert reads.lookup(store, [k.key], h)[k.key].best_s == 1e-3
  with store.read() as s: assert (s.get(Result, res.id).status, s.get(Result, res.id).confirmed_by) == ("confirmed", reads.job(store, c.id)[1].id)


def test_a_search_won_by_the_hand_coded_schedule_is_served_without_a_confirm_job(store, cpu_worker):
  """Its opts make a client run what a miss runs, so no claim about them can make the kernel slower or wrong: served at
  once (half of a model's kernels keep their hand-coded schedule; each confirmation was a second search's worth of time)."""
  k, h = example("matmul_512"), cpu_worker.fingerprint_hash
  (job, _), = queue.submit(store, [k], "CPU", {})
  queue.claim(store, cpu_worker.id, 60)
  r = search_result(k, cpu_fingerprint()[0], h)
  r.best_opts, r.best_s, r.speedup = r.baseline_opts, r.baseline_s, 1.0
  res, _ = queue.report(store, cpu_worker.id, job.id, r)
  assert (res.status, res.note) == ("confirmed", "the hand-coded schedule, as a miss runs it: nothing to confirm")
  assert queue.claim(store, cpu_worker.id, 60) is None  # no confirm job
  assert reads.lookup(store, [k.key], h)[k.key].best_opts == r.baseline_opts  # search_result() made them the hand-coded ones

def measured(k, baseline_s: float, best_s: float, **kw):
  """A confirm job's measurement: the opts and the hand-coded baseline, timed interleaved in one run."""
  r = search_result(k, *cpu_fingerprint(), best_s=best_s, **kw)
  r.baseline_s, r.speedup = baseline_s, baseline_s / best_s
  return r

@pytest.mark.parametrize("measurement, why", [
  (dict(baseline_s=2e-3, best_s=2.5e-3), "more than 50% apart"),        # the same baseline, the opts far slower than claimed
  (dict(baseline_s=0.2, best_s=0.1), "past the 4x a busier machine"),   # the claim's speedup, but its times are not this device's
  (dict(baseline_s=2e-3, best_s=1e-3, verified=False), "did not verify")])
def test_a_second_measurement_that_disagrees_refutes_the_result_and_fails_its_job(store, cpu_worker, measurement, why):
  k, h = example("matmul_512"), cpu_worker.fingerprint_hash
  (job, _), = queue.submit(store, [k], "CPU", {})
  queue.claim(store, cpu_worker.id, 60)
  res, _ = report(store, cpu_worker, job.id, confirm=False)  # claims 1e-3 s against a baseline of 2e-3 s
  c, _ = queue.claim(store, cpu_worker.id, 60)
  queue.report(store, cpu_worker.id, c.id, measured(k, **measurement))
  j, r = reads.job(store, job.id)
  assert r.status == "refuted" and j.state == "failed" and f"result {res.id} refuted" in j.error and why in j.error
  assert reads.lookup(store, [k.key], h) == {}
  again, _ = queue.claim(store, cpu_worker.id, 60)  # searched again with no new request, the refutation an attempt spent
  assert again.id != job.id and (again.kind, again.attempts) == ("tune", 1) and f"searched again as job {again.id}" in j.error
  assert f"result {res.id} refuted" in again.error and queue.submit(store, [k], "CPU", {})[0][0].id == again.id  # a request shares it


def test_a_forgery_refuted_in_a_fleet_is_searched_again_by_other_credentials_and_retries_are_bounded(store):
  """Before: a refuted result failed its search for good, so a stolen worker token denied a kernel its tuning with one forgery."""
  k, (fp, h) = example("matmul_512"), cpu_fingerprint()
  thief, honest = [queue.register(store, n, "CPU", fp, h, cpu_options(), registrant=n) for n in ("thief", "honest")]
  fleet = proof.Proof(confirm_on_other_worker=True)
  (job, _), = queue.submit(store, [k], "CPU", {}, max_attempts=2)
  for n, (liar, judge) in enumerate([(thief, honest), (honest, thief)]):
    j, _ = queue.claim(store, liar.id, 60)
    queue.report(store, liar.id, j.id, search_result(k, fp, h), fleet)
    c, _ = queue.claim(store, judge.id, 60)
    queue.report(store, judge.id, c.id, measured(k, baseline_s=2e-3, best_s=4e-3), fleet)
    assert reads.job(store, j.id)[0].state == "failed"
    if n == 0:  # the retry is not the refuted worker's credentials' to claim
      assert queue.claim(store, thief.id, 60) is None
  assert j.attempts == 1 and queue.claim(store, honest.id, 60) is None and queue.claim(store, thief.id, 60) is None  # attempts spent
  assert reads.lookup(store, [k.key], h) == {} and "searched again" not in reads.job(store, j.id)[0].error


@pytest.mark.parametrize("scale", [3.0, 0.4])
def test_a_busier_or_quieter_confirmer_confirms_a_true_result(store, cpu_worker, scale):
  """Both of the confirmation's times are `scale` times the claim's (another load on the machine): its speedup over the baseline
  it timed alongside agrees, so the result is served; absolute times alone would refute it."""
  k, h = example("matmul_512"), cpu_worker.fingerprint_hash
  (job, _), = queue.submit(store, [k], "CPU", {})
  queue.claim(store, cpu_worker.id, 60)
  res, _ = report(store, cpu_worker, job.id, confirm=False)
  c, _ = queue.claim(store, cpu_worker.id, 60)
  queue.report(store, cpu_worker.id, c.id, measured(k, baseline_s=2e-3 * scale, best_s=1.1e-3 * scale))
  with store.read() as s: assert s.get(Result, res.id).status == "confirmed"
  assert reads.lookup(store, [k.key], h)[k.key].best_s == 1e-3


def test_a_busy_device_puts_the_job_back_to_wait_without_spending_an_attempt_a_bounded_number_of_times(store, cpu_worker):
  k = example("sum_all")
  (job, _), = queue.submit(store, [k], "CPU", {}, max_attempts=1)
  backoff = queue.Backoff(retries=2, first_s=30, max_s=40)
  for n, wait_s in [(1, 30), (2, 40)]:
    assert queue.claim(store, cpu_worker.id, 60)[0].id == job.id
    t = time.time()
    j = queue.fail(store, cpu_worker.id, job.id, "device busy: 1.5 cores", busy=backoff)
    assert (j.state, j.attempts, j.busy) == ("queued", 0, n) and t + wait_s - 1 < j.not_before < time.time() + wait_s + 1
    assert queue.claim(store, cpu_worker.id, 60) is None  # not before its wait is over
    with store.write() as s: s.get(Job, job.id).not_before = time.time() - 1
  queue.claim(store, cpu_worker.id, 60)
  j = queue.fail(store, cpu_worker.id, job.id, "device busy: 1.5 cores", busy=backoff)
  assert j.state == "failed" and "busy 3 times: no more waits" in j.error.splitlines()[-1] and j.error.count("again after") == 2


def test_a_confirmation_the_busy_device_never_gets_to_run_fails_its_result_with_the_reason(store, cpu_worker):
  """A kernel ends served or failed with a reason: a confirm job out of busy waits refutes its result, failing its search's job."""
  k, h = example("sum_all"), cpu_worker.fingerprint_hash
  (job, _), = queue.submit(store, [k], "CPU", {})
  queue.claim(store, cpu_worker.id, 60)
  res, _ = report(store, cpu_worker, job.id, confirm=False)
  c, _ = queue.claim(store, cpu_worker.id, 60)
  queue.fail(store, cpu_worker.id, c.id, "device busy: 1.5 cores", busy=queue.Backoff(retries=0))
  j, r = reads.job(store, job.id)
  assert (j.state, r.status) == ("failed", "refuted") and f"its confirm job {c.id} failed" in j.error and "device busy" in j.error
  assert reads.lookup(store, [k.key], h) == {}


def test_a_search_one_credentials_worker_failed_goes_to_another_credentials_worker_next(store):
  """Before: a stolen worker token claimed a kernel's search and failed it, called the device busy or let its lease lapse,
  again and again, until every attempt was spent: the kernel was never tuned."""
  k, (fp, h) = example("sum_all"), cpu_fingerprint()
  thief, accomplice = [queue.register(store, n, "CPU", fp, h, cpu_options(), registrant="thief") for n in ("thief", "accomplice")]
  (job, _), = queue.submit(store, [k], "CPU", {"seed": -1})
  queue.claim(store, thief.id, 60)
  queue.fail(store, thief.id, job.id, "made up")
  assert queue.claim(store, accomplice.id, 60)[0].id == job.id  # no other credentials' worker: the same credentials try again
  honest = queue.register(store, "honest", "CPU", fp, h, cpu_options(), registrant="honest")
  for i, how in enumerate(("fails", "calls the device busy", "lets its lease lapse")):
    (job, _), = queue.submit(store, [k], "CPU", {"seed": i})
    assert queue.claim(store, accomplice.id, 0.1 if how.startswith("lets") else 60)[0].id == job.id
    if how == "fails": queue.fail(store, accomplice.id, job.id, "made up")
    elif how.startswith("calls"): queue.fail(store, accomplice.id, job.id, "device busy", busy=queue.Backoff(first_s=0))
    else: time.sleep(0.2); queue.expire(store)
    assert queue.claim(store, thief.id, 60) is None and queue.claim(store, accomplice.id, 60) is None, how
    assert queue.claim(store, honest.id, 60)[0].id == job.id, how


def test_a_fleet_confirms_on_another_worker(store, cpu_worker):
  k, (fp, h) = example("sum_all"), cpu_fingerprint()
  (job, _), = queue.submit(store, [k], "CPU", {})
  queue.claim(store, cpu_worker.id, 60)
  queue.report(store, cpu_worker.id, job.id, search_result(k, fp, h), proof.Proof(confirm_on_other_worker=True))
  assert queue.claim(store, cpu_worker.id, 60) is None  # its own result's confirmation is not its to make
  other = cpu(store, "cpu-1")
  assert queue.claim(store, other.id, 60)[0].kind == "confirm"


def test_an_admin_invalidates_a_result_a_kernel_or_a_worker_and_lookups_fall_back(store, cpu_worker):
  k, h = example("softmax_max"), cpu_worker.fingerprint_hash
  honest, thief = cpu(store, "honest"), cpu(store, "thief")
  (slow, _), (fast, _) = [queue.submit(store, [k], "CPU", {"seed": s})[0] for s in (1, 2)]
  queue.claim(store, honest.id, 60)
  report(store, honest, slow.id, best_s=2e-3)
  queue.claim(store, thief.id, 60)
  bad, _ = report(store, thief, fast.id, best_s=1e-3)
  assert reads.lookup(store, [k.key], h)[k.key].best_s == 1e-3
  ids, requeued = queue.invalidate(store, "stolen token", worker_id=thief.id)
  assert bad.id in ids and reads.lookup(store, [k.key], h)[k.key].best_s == 2e-3  # the honest result stands in
  j, r = reads.job(store, fast.id)
  assert j.state == "failed" and "invalidated: stolen token" in j.error and r.status == "invalidated"
  (retune, _), = [reads.job(store, i) for i in requeued]
  assert retune.state == "queued" and retune.settings == {"seed": 2} and retune.kernel_key == k.key
  queue.invalidate(store, "wrong on this driver", kernel_key=k.key)
  assert reads.lookup(store, [k.key], h) == {}
  with pytest.raises(queue.NotFound): queue.invalidate(store, "x", result_id=99999)


def tuned(st, w, k, **kw):
  """k searched by worker w (its report confirmed): a served winner."""
  (job, _), = queue.submit(st, [k], "CPU", {})
  assert queue.claim(st, w.id, 60)[0].id == job.id
  res, _ = report(st, w, job.id, **kw)
  assert reads.job(st, job.id)[1].status == "confirmed"
  return res

def test_a_claimed_search_is_seeded_by_the_nearest_kernels_alike_served_on_its_fingerprint(store, cpu_worker):
  """Same structure, other sizes (search/similar.py), found by the indexed structure hash; nearest by sizes first, n of them."""
  near, mid, far, own = (tuned(store, cpu_worker, matmul(n, n, n)) for n in (64, 128, 32, 80))
  tuned(store, cpu_worker, reduce("SUM", (80, 80), (1,)))  # another structure
  fp2 = {**cpu_fingerprint()[0], "cpu": "another"}
  there = queue.register(store, "there", "CPU", fp2, h2 := fingerprint_hash(fp2), cpu_options())
  (job, _), = queue.submit(store, [matmul(96, 96, 96)], h2, {})  # alike, but tuned on the other fingerprint only
  for _ in range(2):  # its search and its confirmation: served there
    j, _ = queue.claim(store, there.id, 60)
    queue.report(store, there.id, j.id, search_result(matmul(96, 96, 96), fp2, h2))
  assert job.kernel_key in reads.lookup(store, [job.kernel_key], h2)
  (job, _), = queue.submit(store, [k := matmul(80, 80, 80)], "CPU", {"beam": 4})  # tuned with other settings: its own is a hit
  got, kernel = queue.claim(store, cpu_worker.id, 60)
  assert got.id == job.id and (kernel.structure, kernel.sizes) == (structure(k), sizes(k))
  seeds = reads.warm_starts(store, kernel, cpu_worker.id, n=2)
  assert [(w.source, w.kernel_key, w.result_id, w.opts) for w in seeds] == [(SeedSource.ALIKE, r.kernel_key, r.id, r.best_opts) for r in (near, mid)]
  assert {w.fingerprint_hash for w in seeds} == {cpu_worker.fingerprint_hash} and own.kernel_key != near.kernel_key
  assert [w.kernel_key for w in reads.warm_starts(store, kernel, cpu_worker.id, n=9)] == [r.kernel_key for r in (near, mid, far)]
  assert reads.warm_starts(store, kernel, cpu_worker.id, action_space_version=0) == []  # no result of a version it has
  assert [w.kernel_key for w in reads.warm_starts(store, kernel, cpu_worker.id, scan=2)] == [mid.kernel_key, far.kernel_key]  # the 2 newest read


@pytest.fixture(params=["sqlite", "pg"])
def store_url(request, tmp_path):
  if request.param == "sqlite":
    yield f"sqlite:///{tmp_path}/old.db"
    return
  url, schema = pg_schema_url()
  yield url
  with create_engine(PG).begin() as c: c.execute(text(f"DROP SCHEMA {schema} CASCADE"))

def test_the_structure_migration_fills_the_kernels_stored_before_it(store_url):
  """A store of revision 0006 with kernels: 0007 adds each one's structure and sizes (None for a document that no longer
  loads), and a kernel stored before it seeds the search of one alike submitted after."""
  engine, ks = create_engine(store_url), [matmul(64, 64, 64), matmul(48, 48, 48), reduce("SUM", (64, 64), (1,))]
  with engine.begin() as c:
    command.upgrade(alembic_config(c), "0006_registrants")
    rows = [{"key": k.key, "document": json.dumps(k.to_json()), "name": k.name} for k in ks] + \
      [{"key": "f" * 64, "document": '{"version": 0}', "name": None}]  # no longer loads
    c.execute(text("INSERT INTO kernels (key, document, name, flops, bytes, created) VALUES (:key, :document, :name, 1, 1, 0)"), rows)
  engine.dispose()
  st = Store(store_url)  # migrates
  try:
    with st.read() as s: got = {k.key: (k.structure, k.sizes) for k in s.scalars(select(Kernel))}
    assert got == {**{k.key: (structure(k), sizes(k)) for k in ks}, "f" * 64: (None, None)}
    assert got[ks[0].key][0] == got[ks[1].key][0] != got[ks[2].key][0]
    w = cpu(st, "cpu-0")
    old = tuned(st, w, ks[0])  # the kernel stored before the migration, tuned after it
    (job, _), = queue.submit(st, [matmul(80, 80, 80)], "CPU", {})
    _, kernel = queue.claim(st, w.id, 60)
    assert [(s.kernel_key, s.result_id) for s in reads.warm_starts(st, kernel, w.id)] == [(ks[0].key, old.id)]
  finally: st.close()
