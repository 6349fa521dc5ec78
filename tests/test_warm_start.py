"""Warm starts from kernels alike (search/similar.py): a neighbour's winner re-fitted to new sizes, its tiles a step
smaller and larger, and a cost model that learns from the neighbours' measurements ordering the warm search's children."""
import json, sqlite3
from devices import cpu
from linearizer import ACTION_SPACE_VERSION
from linearizer.builders import matmul
from linearizer.heuristic import hand_coded_optimizations
from linearizer.kernel import Kernel, Opt
from search.actions import actions_for, children
from search.beam import BeamStrategy
from search.cache import ResultCache
from search.features import AT, features
from search.model_beam import MIN_TRAIN, ModelBeamStrategy, prior_data
from search.result import Candidate, SearchResult, Status
from search.settings import SearchSettings, StrategySettings
from linearizer.alike import sizes, structure
from search.similar import Tuned, refit, variants
from search.strategy import drive
from search.tune import tune, warm_seeds
from search_results import cut_to

FAST = dict(min_time_s=0.005, final_rounds=3)
U = lambda op, axis, amt: {"op": op, "axis": axis, "amt": amt}  # noqa: E731


def _opts(k: Kernel) -> list[dict]: return [o.to_json() for o in k.applied_opts]


def test_a_neighbours_winner_is_refitted_to_new_sizes_and_its_tiles_tried_a_step_smaller_and_larger():
  root = Kernel(matmul(24, 24, 24), cpu.options())
  actions = actions_for(root.options)
  won = [U("UPCAST", 1, 16), U("UPCAST", 0, 8), U("UNROLL", 0, 2)]  # a matmul 512's: 16 does not divide 24
  assert _opts(refit(root, won, actions)) == [U("UPCAST", 1, 8), U("UPCAST", 0, 8), U("UNROLL", 0, 2)]  # 8: the nearest that does
  assert [_opts(k) for k in warm_seeds(root, [[], won], actions)] == [[], _opts(refit(root, won, actions))]  # not cut short at 16
  assert [_opts(k) for k in variants(root, won, actions)] == [
    [U("UPCAST", 1, 4), U("UPCAST", 0, 8), U("UNROLL", 0, 2)],   # halved (doubled is 16 again: re-fitted, the seed itself)
    [U("UPCAST", 1, 8), U("UPCAST", 0, 4), U("UNROLL", 0, 2)],
    [U("UPCAST", 1, 8), U("UPCAST", 0, 8), U("UNROLL", 0, 4)]]   # doubled (2 is the smallest unroll)
  assert _opts(refit(root, [U("UPCAST", 9, 4), U("UPCAST", 0, 2)], actions)) == []  # no amount fits axis 9: the schedule ends


def _synthetic_s(k: Kernel) -> float:
  """A time the features explain: more threads, more work per inner iteration and this CPU's widest loads are faster."""
  f = features(k)
  return 1e-3 / f[AT["threads"]] / (1 + f[AT["alu_per_iter"]]) ** 0.5 / (1 + f[AT[f"load_w{max(cpu.options().float_vector_widths)}"]])


def _timed(log):
  def measure(kernels, rnd, limit, deadline):
    log.extend((rnd, tuple(k.applied_opts)) for k in kernels[:limit])
    return [(k, Candidate(_opts(k), Status.OK, rnd, times_s=[_synthetic_s(k)], verified=True)) for k in kernels[:limit]]
  return measure


def _tuned(ast, budget: int = 24) -> Tuned:
  """ast searched by beam search under synthetic timings, as a stored result."""
  root = Kernel(ast, cpu.options())
  hand = root.copy()
  hand_coded_optimizations(hand)
  measured = drive(BeamStrategy([hand, root], actions_for(root.options), StrategySettings(beam=2)), _timed([]), budget)
  best = min(measured, key=lambda p: p[1].fastest_s)[1]
  return Tuned(ast, SearchResult(ast.key, "", "CPU", {}, "fp", ACTION_SPACE_VERSION, {}, {}, 0, 0, _opts(hand), measured[0][1].fastest_s,
                                 best.opts, best.fastest_s, 1.0, (1.0, 1.0), True, "", 0.0, [c for _, c in measured]))


def test_the_cost_model_learns_from_kernels_alike_and_orders_a_warm_searchs_children_from_round_1():
  near = _tuned(matmul(32, 32, 32))
  root = Kernel(matmul(48, 48, 48), cpu.options())
  actions, hand = actions_for(root.options), root.copy()
  hand_coded_optimizations(hand)
  prior = prior_data([near], root.options)
  assert len(prior) >= MIN_TRAIN and min(t for _, t in prior) == near.result.best_s / near.result.baseline_s  # relative to its hand-coded
  seeds = lambda: warm_seeds(root, [hand.applied_opts, [], near.result.best_opts], actions)  # noqa: E731
  extra = lambda: variants(root, near.result.best_opts, actions)  # noqa: E731
  s = StrategySettings(beam=3, measure_top=4)  # the seeds all expanded
  runs = {}
  for name, make in (("beam", lambda: BeamStrategy(seeds(), actions, s, extra())),
                     ("warm beam", lambda: ModelBeamStrategy(seeds(), actions, s, extra(), prior, cut=False)),
                     ("warm model", lambda: ModelBeamStrategy(seeds(), actions, s, extra(), prior)),
                     ("model", lambda: ModelBeamStrategy(seeds(), actions, s, extra()))):
    log: list = []
    measured = drive(make(), _timed(log), 10)
    runs[name] = ([opts for r, opts in log if r == 1], min(c.fastest_s for _, c in measured))
  # all the first round may measure, in the beam's order (each once, no seed again)
  round1 = list({tuple(k.applied_opts): k for k in [*extra(), *(c for k in seeds() for c in children(k, actions))]
                 if k.applied_opts not in [s.applied_opts for s in seeds()]}.values())
  times, first = sorted(map(_synthetic_s, round1)), lambda run: _synthetic_s(root.copy().apply_opts(runs[run][0][0]))  # noqa: E731
  assert [_opts(k) for k in round1[:7]] == [list(map(Opt.to_json, o)) for o in runs["beam"][0]]  # no data: the beam's order
  assert [list(o) for o in runs["model"][0]] == [k.applied_opts for k in round1[:7]]  # too little to learn from: as the beam
  assert first("beam") > times[len(times) // 8]
  for warm in ("warm beam", "warm model"):  # the neighbour's data: ranked from round 1, among the round's fastest first
    assert first(warm) <= times[len(times) // 8] and runs[warm][1] < runs["beam"][1]
  # the model strategy cuts the round (its top 4, and one child of each thread count and op on the lead those lack: more
  # than the 7 the budget left), the beam does not
  log = []
  drive(ModelBeamStrategy(seeds(), actions, s, extra(), prior), _timed(log), len(seeds()) + len(round1))
  cut = [opts for r, opts in log if r == 1]
  assert s.measure_top <= len(cut) < len(round1) and cut_to(cut, s.measure_top)


def test_a_warm_search_of_a_neighbour_seeds_its_refitted_winner_and_learns_from_its_measurements(tmp_path):
  near, k = _tuned(matmul(32, 32, 32)), matmul(20, 20, 20)
  cache = ResultCache(tmp_path / "r.sqlite")
  cache.put(near.result, near.ast)
  alike, = cache.alike(k, "fp", ACTION_SPACE_VERSION)
  assert alike.ast.key == near.ast.key and alike.result.candidates == near.result.candidates
  root = Kernel(k.rebased(), cpu.options())
  refitted = _opts(refit(root, near.result.best_opts, actions_for(root.options)))
  assert refitted != near.result.best_opts  # a 32 matmul's vector (8 or 16 lanes) does not divide 20 (24: 8 lanes do)
  r = tune(k, settings=SearchSettings.from_json(dict(beam=2, budget_candidates=6, strategy="beam", **FAST)), alike=[alike])
  assert refitted in [c.opts for c in r.candidates if c.round == 0] and len(r.candidates) <= 6 and r.verified
  assert r.settings["strategy"] == "beam"  # the model orders a beam's rounds, it does not cut them


def test_a_cache_from_before_documents_opens_and_its_kernels_are_no_neighbours(tmp_path):
  path, a, b = tmp_path / "r.sqlite", matmul(32, 32, 32), matmul(48, 48, 48)
  db = sqlite3.connect(path)
  db.execute("CREATE TABLE kernels (kernel_key TEXT PRIMARY KEY, structure TEXT NOT NULL, sizes TEXT NOT NULL)")
  db.execute("INSERT INTO kernels VALUES (?, ?, ?)", (a.key, structure(a), json.dumps(sizes(a))))
  db.commit()
  db.close()
  cache = ResultCache(path)
  old = _tuned(a, 4).result
  cache.put(old)  # its kernel row from before: no document
  assert cache.alike(b, "fp", ACTION_SPACE_VERSION) == []
  cache.put(old, a)
  assert [t.ast.key for t in cache.alike(b, "fp", ACTION_SPACE_VERSION)] == [a.key]
