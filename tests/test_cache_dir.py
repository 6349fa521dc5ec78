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
