import glob, json, time
from dataclasses import replace
import pytest
from devices import cpu
from linearizer import CODEGEN_VERSION
from search.cache import ResultCache
from search.result import SearchResult
from tunesvc.cli import main

EXAMPLES = sorted(glob.glob("examples/kernels/*.json"))
KEYS = {"kernel_key", "device", "fingerprint", "action_space_version", "baseline_s", "best_s", "best_opts", "candidates", "failed",
        "search_s", "verified"}


@pytest.mark.slow
def test_tune_every_example_to_a_verified_winner_then_serve_it_from_the_cache(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("TUNESVC_CACHE_DIR", str(tmp_path))
  # what the search finds and keeps, not how precisely it times (test_search's FAST settings): short timings; and not how
  # well it searches (test_search does): 4 candidates, the two seeds and two children (with 10 the test took 39.5 s quiet:
  # the examples are large kernels, each candidate compiled, timed and checked against the reference)
  args = ["tune", *EXAMPLES, "--json", "--beam", "2", "--budget-candidates", "4", "--min-time-s", "0.005", "--final-rounds", "3"]
  assert main(args) == 0
  first = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert len(first) == len(EXAMPLES) > 10
  for r in first:
    assert KEYS <= set(r) and r["verified"] and not r["cached"], r
    assert r["best_s"] <= r["baseline_s"] and 0 < r["candidates"] <= 4 and r["device"] == "CPU"
  t = time.monotonic()
  assert main(args) == 0
  second = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert time.monotonic() - t < 5 and all(r["cached"] for r in second)
  assert [(r["kernel_key"], r["best_opts"], r["best_s"]) for r in second] == [(r["kernel_key"], r["best_opts"], r["best_s"]) for r in first]
  assert main(["tune", EXAMPLES[0], "--json", "--no-cache", "--budget-candidates", "2"]) == 0
  assert not json.loads(capsys.readouterr().out)["cached"]


def test_cache_misses_on_another_fingerprint_or_action_space_version(tmp_path):
  c = ResultCache(tmp_path / "r.sqlite")
  r = SearchResult("k" * 64, "n", "CPU", {"cpu": "x"}, "f" * 64, 1, {}, {}, 10, 20, [], 2.0, [{"op": "UPCAST", "axis": 0, "amt": 4}], 1.0,
                   2.0, (1.8, 2.2), True, "void kernel(){}", 3.0)
  c.put(r)
  assert c.get(r.kernel_key, r.fingerprint_hash, 1).to_json() == r.to_json()
  assert c.get(r.kernel_key, "e" * 64, 1) is None and c.get(r.kernel_key, r.fingerprint_hash, 2) is None
  c.put(replace(r, best_s=0.5))  # a new search replaces the entry
  assert ResultCache(tmp_path / "r.sqlite").get(r.kernel_key, r.fingerprint_hash, 1).best_s == 0.5


def test_results_tuned_on_older_generated_code_miss(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("TUNESVC_CACHE_DIR", str(tmp_path))
  args = ["tune", EXAMPLES[0], "--json", "--beam", "1", "--budget-candidates", "2"]
  for cached in (False, True):
    assert main(args) == 0 and json.loads(capsys.readouterr().out)["cached"] is cached
  monkeypatch.setattr(cpu, "CODEGEN_VERSION", CODEGEN_VERSION + 1)  # the fingerprint, so the cache key, changes with it
  assert main(args) == 0 and json.loads(capsys.readouterr().out)["cached"] is False


def test_tune_rejects_an_unknown_device(capsys):
  try: main(["tune", EXAMPLES[0], "--device", "NOPE"])
  except SystemExit as e: assert e.code == 2
  assert "not available" in capsys.readouterr().err


@pytest.mark.parametrize("flag,value,says", [("--min-time-s", "0", "0.0 is not at least 0.001"), ("--beam", "0", "0 is not at least 1"),
                                             ("--final-rounds", "101", "101 is not at most 100"), ("--budget-s", "-1", "-1.0 is not more than 0")])
def test_tune_refuses_settings_outside_the_bounds_a_job_is_held_to(capsys, flag, value, says):
  with pytest.raises(SystemExit) as e: main(["tune", EXAMPLES[0], flag, value])
  assert e.value.code == 2 and f"ERROR {flag}: {says}" in capsys.readouterr().err
