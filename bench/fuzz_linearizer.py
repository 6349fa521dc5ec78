"""Fuzz the linearizer: random legal schedules on real kernels, compiled, run on random data, checked against the reference.

  .venv/bin/python bench/fuzz_linearizer.py --cases 3000 --seed 0              # the shared corpus + examples + builder kernels
  .venv/bin/python bench/fuzz_linearizer.py --per-kernel 3 --builders 0 --max-positions 1000000000000 --timeout 1200
                                                                              # every kernel, 3 schedules each, none skipped
  ... the same --first 1200                                                   # that run again from its case 1200 (resumed)
  .venv/bin/python bench/fuzz_linearizer.py --corpus k.jsonl --builders 0 --asan  # only k.jsonl, under AddressSanitizer
  .venv/bin/python bench/fuzz_linearizer.py --per-kernel 1 --hand-coded       # each kernel's hand-coded schedule + 0-4 opts
  .venv/bin/python bench/fuzz_linearizer.py --replay fuzz_failures/MISMATCH-corpus_sops_7046-1a2b3c4d.json
  ... --per-kernel 3 --builders 0 --seed 17 --device OPENCL --sources a.txt  # each case's source hash, nothing run: diff two commits'
  ... the same run --only changed.txt                                         # only its cases named there (`diff a.txt b.txt | sed -n 's/^> //p'`)

Each case (linearizer.fuzz) is a kernel, 0-4 random opts the Kernel accepted (drawn among the device's ops and, now
and then, ops it lacks, which must raise OptError), variable values in bounds and a data seed; a worker draws it from
the seed. A case ends as
  PASS           the output matches the reference (linearizer.compare: reference.mismatch, within
                 reference.expected_range for a float SUM or EXP2/LOG2/SIN), nothing unwritten or extra, inputs untouched
  MISMATCH       it does not
  ILLEGAL_OPT    the Kernel accepted an op the device lacks
  OPT_ERROR      the Kernel accepted the opts, then lowering or rendering raised OptError (or, replayed, it rejects them)
  COMPILE_ERROR  the C compiler rejected the source
  RUN_ERROR      the program crashed (a signal, an ASan report) or ran past --timeout (or --cpu-timeout)
  ERROR          anything else raised in our Python (a traceback), or a worker lost before the program ran
The cases run in spawned worker processes, one case at a time each, so a crash takes down only its worker, which is
replaced. Every failure is written to --out as a JSON replay file; --replay runs one again (in a worker too).
Compiles that take the compiler more than SLOW_COMPILE_S (tests/fuzz_harness.py) CPU seconds are logged, and the run ends with the slowest.
Kernels whose full shape has more than --max-positions positions (at the variables' minimum) are skipped and counted.
Reference outputs that took a second or more are kept in --reference-cache (build/test-cache/reference/), by kernel,
variable values, data seed and the linearizer's code: a second device's run with the same seed reads them.
"""
from __future__ import annotations
import argparse, os, sys, time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable without installing the package
sys.path.insert(0, str(ROOT / "tests"))  # the harness, tests/fuzz_harness.py, which the tests import too
from build_cache import BUILD_CACHE  # noqa: E402
from fuzz_harness import CORPUS, EXAMPLES, Pool, fuzz, kernel_pool, replay, source_hashes, table  # noqa: E402
from linearizer.fuzz import Outcome  # noqa: E402


def main(argv: Optional[list[str]] = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--cases", type=int, default=1000)
  p.add_argument("--per-kernel", type=int, default=0, metavar="N", help="N cases for every kernel of the pool instead of --cases")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--corpus", action="append", metavar="PATH", help=f"a kernel file (.json, .jsonl, .jsonl.gz) or a directory of "
                 f".json files; repeatable (default: {CORPUS.relative_to(ROOT)} and examples/kernels)")
  p.add_argument("--builders", type=int, default=250, help="random builder kernels in the pool (default 250)")
  p.add_argument("--device", default="CPU")
  p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
  p.add_argument("--asan", action="store_true", help="compile with AddressSanitizer, run with its runtime preloaded")
  p.add_argument("--timeout", type=float, default=60.0, help="seconds per case (default 60)")
  p.add_argument("--cpu-timeout", type=float, metavar="S", help="CPU seconds per case (its worker and the compilers it ran): a limit a busy "
                 "machine does not stretch; --timeout then only catches a case that hangs without using CPU")
  p.add_argument("--max-positions", type=int, default=20_000_000, help="skip bigger kernels (default 20,000,000)")
  p.add_argument("--hand-coded", action="store_true", help="each case's random opts follow the hand-coded schedule's")
  p.add_argument("--min-positions", type=int, default=0, help="skip smaller kernels (a run of only the big ones)")
  p.add_argument("--reference-cache", type=Path, default=BUILD_CACHE / "reference", metavar="DIR",
                 help="where the reference's dear outputs are kept and read back (default build/test-cache/reference/)")
  p.add_argument("--no-reference-cache", dest="reference_cache", action="store_const", const=None, help="compute every reference output")
  p.add_argument("--out", default="fuzz_failures", help="directory for replay files (default fuzz_failures/)")
  p.add_argument("--replay", metavar="FILE", help="run one replay file again; exit 0 if it passes now")
  p.add_argument("--print-source", action="store_true", help="with --replay: print the generated source")
  p.add_argument("--progress", type=int, default=0, metavar="N", help="print the counts so far every N cases")
  p.add_argument("--first", type=int, default=0, metavar="N", help="start at case N of the run, the cases before it drawn but not run: "
                 "a long run resumed where it stopped (its last --progress count), or split in parts")
  p.add_argument("--sources", type=Path, metavar="FILE", help="compile and run nothing: write each case's label, seed and its source's "
                 "sha256 to FILE; two commits' files equal line for line generate the same code, so a run at one stands for the other")
  p.add_argument("--only", type=Path, metavar="FILE", help="run only the cases whose label and seed begin a line of FILE (as --sources "
                 "writes them): the cases whose code a change altered")
  args = p.parse_args(argv)
  if args.replay: return replay(args.replay, args.print_source, args.timeout, args.cpu_timeout)
  t0 = time.perf_counter()
  kernels, skipped = kernel_pool(args.corpus or [str(CORPUS), str(EXAMPLES)], args.builders, args.seed, args.max_positions, args.min_positions)
  if not kernels: raise SystemExit("no kernels to fuzz")
  if args.per_kernel: args.cases = args.per_kernel * len(kernels)
  if args.sources:
    args.sources.write_text("".join(f"{line}\n" for line in source_hashes(kernels, args.cases, args.seed, args.per_kernel, args.device,
                                                                         args.max_positions, args.hand_coded)))
    print(f"{args.cases} cases' source hashes in {args.sources} ({time.perf_counter() - t0:.1f} s)")
    return 0
  only = {tuple(line.split()[:2]) for line in args.only.read_text().splitlines() if line.strip()} if args.only else None
  runs = max(0, args.cases - args.first) if only is None else len(only)
  print(f"{len(kernels)} kernels, {skipped} skipped (outside {args.min_positions:,} to {args.max_positions:,} positions); "
        f"{args.cases} cases{f', from case {args.first} on' if args.first else ''}, seed {args.seed}, {args.jobs} jobs on {args.device}"
        f"{' with ASan' if args.asan else ''}", flush=True)
  t1 = time.perf_counter()
  with Pool(args.jobs, args.device, args.asan, args.timeout, args.max_positions, args.hand_coded, cpu_timeout=args.cpu_timeout,
            reference_cache=args.reference_cache) as pool:
    counts = fuzz(pool, kernels, args.cases, args.seed, Path(args.out), lambda s: print(s, flush=True), args.per_kernel, args.progress, args.first,
                  only)
  t2 = time.perf_counter()
  print(table(counts))
  print(f"{runs} cases in {t2 - t1:.1f} s ({(t2 - t1) / max(1, runs) * 1e3:.0f} ms a case, {args.jobs} jobs); loading {t1 - t0:.1f} s")
  return 0 if set(counts) <= {Outcome.PASS} else 1


if __name__ == "__main__":
  sys.exit(main())
