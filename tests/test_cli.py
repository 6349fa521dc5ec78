"""`tunesvc kernel check | show | run`, through the real console script."""
import gzip, json, os, re, subprocess, sys
from pathlib import Path
import pytest
from linearizer.builders import matmul, symbolic_sum

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "kernels").glob("*.json"))


def tunesvc(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "tunesvc.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture
def files(tmp_path):
  good = matmul(8, 8, 8, name="mm8").to_json()
  bad = dict(good, ast={"op": "STORE"})
  (tmp_path / "good.json").write_text(json.dumps(good, indent=2))
  with gzip.open(tmp_path / "mixed.jsonl.gz", "wt") as f:
    f.write(json.dumps(good) + "\n\n" + json.dumps(bad) + "\n" + "{not json\n")
  return tmp_path


def test_check_prints_ok_with_key_and_exits_zero_for_the_examples():
  r = tunesvc("kernel", "check", *map(str, EXAMPLES))
  assert r.returncode == 0, r.stderr
  lines = r.stdout.splitlines()
  assert len(lines) == len(EXAMPLES) >= 12
  for line, path in zip(lines, EXAMPLES):
    ok, key, name = line.split(" ")
    assert ok == "OK" and len(key) == 64 and name == path.stem


def test_check_reports_each_bad_document_with_its_path_and_exits_nonzero(files):
  r = tunesvc("kernel", "check", str(files / "mixed.jsonl.gz"))
  assert r.returncode == 1
  assert r.stdout.splitlines() == [
    f"OK {matmul(8, 8, 8).key} mm8",
    "ERROR mm8 ast.src: STORE takes 1 sources, got 0",
    f"ERROR {files / 'mixed.jsonl.gz'}:4 $: not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"]


def test_check_json_output_is_one_object_per_document(files):
  r = tunesvc("kernel", "check", "--json", str(files / "good.json"), str(files / "mixed.jsonl.gz"))
  recs = [json.loads(line) for line in r.stdout.splitlines()]
  assert [x["ok"] for x in recs] == [True, True, False, False]
  assert recs[0]["key"] == matmul(8, 8, 8).key and recs[2]["path"] == "ast.src" and recs[3]["path"] == "$"


def test_show_prints_the_tree_with_shapes_flops_and_bytes(files):
  r = tunesvc("kernel", "show", str(files / "good.json"))
  assert r.returncode == 0, r.stderr
  out = r.stdout
  # 8*8*8 MULs and as many accumulates; three 64-element float32 buffers
  assert "FLOPs 1,024  bytes 768" in out
  assert "REDUCE SUM axis=[2] float32 (8, 8, 1)" in out and "MUL float32 (8, 8, 8)" in out
  assert out.count("LOAD buf") == 2 and "view (8, 8, 8) strides=(8, 0, 1) offset=0" in out


def test_run_prints_a_reproducible_checksum(files):
  a, b = tunesvc("kernel", "run", str(files / "good.json")), tunesvc("kernel", "run", str(files / "good.json"))
  assert a.returncode == 0, a.stderr
  checksum = lambda r: r.stdout.split("checksum ")[1].split()[0]
  assert checksum(a) == checksum(b)
  assert checksum(tunesvc("kernel", "run", "--seed", "1", str(files / "good.json"))) != checksum(a)


def test_run_binds_variables_and_rejects_bad_bindings(tmp_path):
  path = tmp_path / "sym.json"
  path.write_text(json.dumps(symbolic_sum(rows=4, var=("n", 1, 64), name="sym").to_json()))
  r = tunesvc("kernel", "run", str(path), "--var", "n=5")
  assert r.returncode == 0 and r.stdout.startswith("sym (n=5): checksum"), r.stderr
  assert "sym (n=32)" in tunesvc("kernel", "run", str(path)).stdout  # the midpoint by default
  assert "outside [1, 64]" in tunesvc("kernel", "run", str(path), "--var", "n=65").stderr
  assert "NAME=INT" in tunesvc("kernel", "run", str(path), "--var", "n").stderr


def test_a_bad_file_for_run_or_show_names_the_problem(files):
  r = tunesvc("kernel", "show", str(files / "mixed.jsonl.gz"))
  assert r.returncode != 0 and "ERROR mm8 ast.src: STORE takes 1 sources, got 0" in r.stderr


# ---------------------------------------------------------------- `kernel run --device`

def test_run_on_the_cpu_with_opts_checks_against_the_reference_and_prints_the_source(files):
  r = tunesvc("kernel", "run", str(files / "good.json"), "--device", "CPU", "--opts", '[{"op":"UPCAST","axis":0,"amt":4}]',
              "--check", "--print-source")
  assert r.returncode == 0, r.stderr
  assert "void kernel(" in r.stdout
  line = r.stdout.splitlines()[-1]
  assert line.startswith("mm8: checksum ") and re.search(r" CPU \d+\.\d{3} [mu]s \(median of ", line) and line.endswith("  MATCH")
  assert 'opts [{"op":"UPCAST","axis":0,"amt":4}]' in line


def test_run_on_the_cpu_defaults_to_the_hand_coded_opts(files):
  from devices import cpu
  from linearizer.heuristic import hand_coded_optimizations
  from linearizer.kernel import Kernel
  hand = json.dumps([o.to_json() for o in hand_coded_optimizations(Kernel(matmul(8, 8, 8), cpu.options()))], separators=(",", ":"))
  default, explicit = (tunesvc("kernel", "run", str(files / "good.json"), "--device", "CPU", "--check", *a) for a in ((), ("--hand-coded",)))
  for r in (default, explicit): assert r.returncode == 0 and f"opts {hand}  MATCH" in r.stdout, r.stdout + r.stderr
  none = tunesvc("kernel", "run", str(files / "good.json"), "--device", "CPU", "--no-opts", "--check")
  assert none.returncode == 0 and "opts []  MATCH" in none.stdout, none.stderr


def test_run_on_the_cpu_binds_variables(tmp_path):
  path = tmp_path / "sym.json"
  path.write_text(json.dumps(symbolic_sum(rows=4, var=("n", 1, 64), name="sym").to_json()))
  r = tunesvc("kernel", "run", str(path), "--device", "CPU", "--var", "n=5", "--opts", '[{"op":"UPCAST","axis":0,"amt":2}]', "--check")
  assert r.returncode == 0 and r.stdout.startswith("sym (n=5): checksum") and r.stdout.rstrip().endswith("MATCH"), r.stderr


def test_run_on_the_cpu_reports_a_mismatch_with_exit_status_1(files, tmp_path):
  from test_fuzz_linearizer import planted_cc  # a compiler whose code adds 1 to the first output element
  env = planted_cc(tmp_path, last="  data0[0] += 1;")
  r = subprocess.run([sys.executable, "-m", "tunesvc.cli", "kernel", "run", str(files / "good.json"), "--device", "CPU", "--check"],
                     capture_output=True, text=True, cwd=ROOT, timeout=300, env={**os.environ, **env})
  assert r.returncode == 1 and "  MISMATCH: 1 of 64 elements differ; first at 0: got " in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("args,says", [
  (("--opts", '[{"op":"UPCAST","axis":0,"amt":5}]'), "ERROR mm8: UPCAST 5 does not divide axis 0 of size 8"),
  (("--opts", '[{"op":"UPCAST","axis":0,"amt":4}'), "ERROR --opts: not valid JSON: "),
  (("--opts", '{"op":"UPCAST"}'), "ERROR --opts: expected a JSON list of opts like "),
  (("--opts", '[{"op":"FOO"}]'), "ERROR --opts: not an opt: "),
  (("--device", "TPU"), "ERROR --device: device 'TPU' is not available"),
], ids=["illegal", "bad-json", "not-a-list", "not-an-opt", "no-such-device"])
def test_run_on_the_cpu_rejects_bad_schedules_with_exit_status_2(files, args, says):
  r = tunesvc("kernel", "run", str(files / "good.json"), *(() if "--device" in args else ("--device", "CPU")), *args)
  assert r.returncode == 2 and says in r.stderr and r.stdout == "", r.stdout + r.stderr


def test_device_flags_need_a_device_and_schedules_are_exclusive(files):
  r = tunesvc("kernel", "run", str(files / "good.json"), "--check")
  assert r.returncode == 2 and "need --device" in r.stderr
  r = tunesvc("kernel", "run", str(files / "good.json"), "--device", "CPU", "--no-opts", "--hand-coded")
  assert r.returncode == 2 and "not allowed with argument" in r.stderr


@pytest.mark.parametrize("cmd", [["kernel", "check", *map(str, EXAMPLES)], ["kernel", "show", str(EXAMPLES[0])]], ids=["flushed", "buffered"])
def test_a_reader_that_stops_early_ends_the_command_quietly(cmd):
  """`tunesvc devices | head -1`: the pipe closed under the command ends it without a traceback, whether its lines were
  written as they came or at the end."""
  p = subprocess.Popen([sys.executable, "-m", "tunesvc.cli", *cmd], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  p.stdout.close()  # before the command writes a line
  err = p.stderr.read()
  assert p.wait(300) == 1 and err == "", err


def test_a_state_outside_the_set_is_refused_naming_the_states():
  r = tunesvc("jobs", "--state", "finished")
  assert r.returncode == 2 and "invalid choice: 'finished' (choose from 'queued', 'running', 'done', 'failed')" in r.stderr, r.stderr
