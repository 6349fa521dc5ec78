"""Every Python example in the README runs as written, from the checkout, offline: each block in a fresh interpreter."""
import os, re, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_the_readme_has_python_examples(): assert EXAMPLES

@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_a_readme_example_runs_as_written(code, tmp_path):
  env = {k: v for k, v in os.environ.items() if k not in ("TUNESVC_URL", "TUNESVC_TOKEN")}  # as a newcomer's shell has it
  r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
