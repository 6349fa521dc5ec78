"""Realistic search results for the service's tests: example kernels, the hand-coded schedule as the baseline, and
candidates of every kind a search measures (the seeds, a winner, one stopped early, failures)."""
import functools, json
from typing import Sequence
from pathlib import Path
from devices import cpu
from linearizer.ast import KernelAST, loads
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt, OptError, OptOp
from linearizer.options import LinearizerOptions
from search.result import Candidate, SearchResult

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples" / "kernels").glob("*.json"))
CUDA_OPTIONS = LinearizerOptions("CUDA").to_json()
CUDA_FP = {"backend": "CUDA", "arch": "sm_90", "compiler": "nvrtc", "compiler_version": "12.4", "driver": "550.54", "options": CUDA_OPTIONS}
CUDA_HASH = cpu.fingerprint_hash(CUDA_FP)


@functools.cache
def example(name: str) -> KernelAST: return loads((EXAMPLES[0].parent / f"{name}.json").read_text())

def examples() -> list[KernelAST]: return [loads(p.read_text()) for p in EXAMPLES]

@functools.cache
def cpu_fingerprint() -> tuple[dict, str]:
  fp = cpu.fingerprint()
  return fp, cpu.fingerprint_hash(fp)

@functools.cache
def cpu_options() -> dict: return cpu.options().to_json()

def legal_step(k: KernelAST, base: list[dict]) -> list[dict]:
  """One opt that applies after `base` on this kernel (the winner's extra step), or none."""
  for o in ({"op": "UNROLL", "axis": 0, "amt": 2}, {"op": "UPCAST", "axis": 0, "amt": 2}, {"op": "UPCAST", "axis": 0, "amt": 4}):
    try:
      Kernel(k, cpu.options()).apply_opts(base + [o])
      return [o]
    except OptError: pass
  return []


def search_result(k: KernelAST, fp: dict, fp_hash: str, best_s: float = 1e-3, verified: bool = True, version: int = 1,
                  settings: dict | None = None) -> SearchResult:
  base = [o.to_json() for o in hand_coded_optimizations(Kernel(k, cpu.options()))]
  # the winner differs from the hand-coded schedule (one candidate each): one step past it, or where the heuristic left no
  # room for one (it upcasts as far as the limit allows), one step short of it
  best = base + step if (step := legal_step(k, base)) else base[:-1]
  src = lambda i: f"{i:064x}"
  cands = [Candidate([], "ok", 0, src(1), "", 0.04, [best_s * 4.1, best_s * 4.0, best_s * 4.2], True),
           Candidate(base, "ok", 0, src(2), "", 0.05, [best_s * 2.0, best_s * 2.1], True),
           Candidate(best, "ok" if verified else "mismatch", 1, src(3), "" if verified else "out[3]: 1.5 != 2.0", 0.06,
                     [best_s * 1.01, best_s, best_s * 1.02], verified),
           Candidate(base + [{"op": "UPCAST", "axis": 1, "amt": 8}], "slow", 1, src(4), "", 0.07, [best_s * 9], False),
           Candidate(base + [{"op": "UNROLL", "axis": 0, "amt": 16}], "compile_error", 1, "", "cc failed (1): too many registers", 0.2),
           Candidate(base + [{"op": "UPCAST", "axis": 0, "amt": 16}], "timeout", 2, src(6), "no answer after 5.0s", 0.08)]
  return SearchResult(k.key, k.name or "", fp["backend"], fp, fp_hash, version, settings or {"beam": 2, "budget_s": 60.0, "seed": 0},
                      k.var_vals(), k.flops(), k.bytes(), base, best_s * 2.0, best, best_s, 2.0, (1.9, 2.1), verified,
                      "void kernel(float* restrict data0) { }", 3.5, cands)

def result_json(*a, **kw) -> dict: return json.loads(json.dumps(search_result(*a, **kw).to_json()))


def thread_count(opts) -> int:
  """The parts a schedule's THREAD splits its work in (1: none, one core): opts as Opts or their JSON."""
  return next((o.amt if isinstance(o, Opt) else o["amt"] for o in opts if (o.op if isinstance(o, Opt) else OptOp(o["op"])) is OptOp.THREAD), 1)

def lineage_kinds(opts: Sequence[Opt], lead: Sequence[Opt]) -> set:
  """The kinds of lineage a child's opts open, as the cut counts them (search/model_beam.py kinds), written again here
  as the tests' oracle: its thread count (one core counted as one), and its last op where it is a child of the lead
  (the beam's fastest member) or a BLOCK."""
  return {thread_count(opts)} | ({opts[-1].op} if tuple(opts[:-1]) == tuple(lead) or opts[-1].op is OptOp.BLOCK else set())

def cut_to(round_opts: list, top: int) -> bool:
  """Whether a model-strategy round measured no more than its cut allows (search/model_beam.py lineages): its top
  children, and one more for each kind (lineage_kinds) those hold none of -- each adds a kind, and the top holds one at
  least. round_opts: each measured child's opts (Opts or their JSON), in any order; the lead, one of their parents."""
  ops = [[o if isinstance(o, Opt) else Opt.from_json(o) for o in opts] for opts in round_opts]
  leads = {tuple(o[:-1]) for o in ops}
  return len(ops) <= top or any(len(ops) - top <= len(set().union(*(lineage_kinds(o, lead) for o in ops))) - 1 for lead in leads)
