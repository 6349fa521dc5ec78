"""One cache-directory policy (linearizer/cachedir.py): TUNESVC_CACHE_DIR, else the user's cache dir, holds every local store."""
import os, subprocess, sys
from pathlib import Path
import platformdirs
import pytest
from devices import cpu
from search.cache import ResultCache
from tunesvc.cache import OptsCache

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.mark.slow
def test_the_suite_writes_nothing_under_the_users_home(tmp_path):
  """A slice of the suite touching every cache -- tunesvc's stores, PoCL's kernels, tinygrad's compiles, processes that tests
  start, a browser -- run from an environment with none of the cache variables set and an empty HOME: it leaves HOME empty
  (before, PoCL's and tinygrad's caches and chromium's dconf went under ~/.cache; tunesvc's follow TUNESVC_CACHE_DIR, which
  the conftest sets)."""
  home = tmp_path / "home"
  home.mkdir()
  env = {k: v for k, v in os.environ.items() if not k.startswith(("TUNESVC_", "XDG_", "PYTEST_")) and k not in ("POCL_CACHE_DIR", "CACHEDB")}
  tests = ["tests/test_cache_dir.py::test_every_local_store_lies_under_tunesvc_cache_dir",
           "tests/test_opencl.py::test_gpu_schedules_match_the_reference[0-LOCAL0_4-GROUP0_4]",
           "tests/test_tinygrad_integration.py::test_results_match_plain_tinygrad[CPU-matmul_relu_sum]",
           "tests/test_tinygrad_integration.py::test_results_match_plain_tinygrad[OPENCL-matmul_relu_sum]",
           "tests/test_tinygrad_integration.py::test_an_unmodified_script_runs_on_tunesvc",  # tinygrad and tunesvc in a process of its own
           "tests/test_cli.py::test_run_on_the_cpu_defaults_to_the_hand_coded_opts",  # the CLI's compile, in a process of its own
           "tests/test_dashboard.py::test_the_api_docs_render_in_headless_chromium_with_no_network"]  # chromium's dconf and crash reports
  # without the plugins make test leaves out (the Makefile's PYTEST): ~2 CPU-s of imports, no cache touched
  r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-p", "no:schemathesis", "-p", "no:anyio", "-rs",
                      *tests], cwd=ROOT,
                     env={**env, "HOME": str(home)}, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []
