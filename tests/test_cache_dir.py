"""One cache-directory policy (linearizer/cachedir.py): TUNESVC_CACHE_DIR, else the user's cache dir, holds every local store."""
from pathlib import Path
import platformdirs
from devices import cpu
from search.cache import ResultCache
from tunesvc.cache import OptsCache


def test_every_local_store_lies_under_tunesvc_cache_dir(tmp_path, monkeypatch):
  monkeypatch.setenv("TUNESVC_CACHE_DIR", str(tmp_path))
  cpu.compile("void k(float* out){ out[0] = 1; }")
  assert [p.suffix for p in (tmp_path / "compile").iterdir()] == [".so"]
  assert ResultCache().path == tmp_path / "results.sqlite" and (tmp_path / "results.sqlite").is_file()
  assert OptsCache().root == str(tmp_path / "opts")

def test_without_it_they_lie_under_the_users_cache_dir(monkeypatch):
  monkeypatch.delenv("TUNESVC_CACHE_DIR")
  assert Path(OptsCache().root) == Path(platformdirs.user_cache_dir("tunesvc")) / "opts"
  from search.cache import default_path
  assert default_path() == Path(platformdirs.user_cache_dir("tunesvc")) / "results.sqlite"


def test_every_result_store_answers_a_lookup_in_the_services_form(tmp_path, server):
  """linearizer.cachedir.ResultStore: the search's local results, the runtime's answer cache and the service (its SQL store,
  through the client) answer one question the same way: the same answer for the same result, None where they hold none."""
  from linearizer.cachedir import ResultStore
  from search_results import cpu_fingerprint, cpu_options, example, search_result
  from tunesvc.client import Client
  k, (fp, h) = example("sum_all"), cpu_fingerprint()
  r = search_result(k, fp, h)
  local, answers = ResultCache(tmp_path / "results.sqlite"), OptsCache(tmp_path / "opts")
  local.put(r, k)
  want = {"kernel_key": k.key, "fingerprint": h, "action_space_version": 1, "opts": r.best_opts, "best_s": r.best_s, "baseline_s": r.baseline_s}
  answers.put(want)
  with Client(server, "sub") as service, Client(server, "wrk") as worker:  # the service: searched, reported, confirmed
    job, = service.submit([k])
    wid = worker.register("cpu-0", "CPU", fp, h, cpu_options())
    for _ in ("search", "confirm"): worker.report(wid, worker.claim(wid)["job_id"], r)
    stores: list[ResultStore] = [local, answers, service]
    for store in stores:
      assert store.lookup(h, [k.key, "0" * 64], action_space_version=1) == [want, None], store
      assert store.lookup(h, [k.key], action_space_version=2) == [None], store
