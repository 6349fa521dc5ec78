# Two commands do all set-up on a fresh machine: `make demo` (the main job) and `make test`.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# without the pytest plugins of schemathesis and anyio, which their packages register and no test uses (test_api calls
# schemathesis itself): each pytest process (the xdist controller, each worker, the timing tier) imported them for nothing,
# ~2 of the ~13 CPU-s before the first test runs
PYTEST := $(VENV)/bin/python -m pytest -q -p no:schemathesis -p no:anyio
# over every core; work stealing, since a few tests take a minute of CPU and most a fraction of a second: an idle worker
# takes from a busy one's queue instead of waiting at the end with the longest test queued behind it; each worker's queue
# starts with its part of the slow tests (tests/conftest.py), so the thief takes quick ones
XDIST := -n auto --dist worksteal
# tinygrad 0.8.0's own tests (from its source distribution) compare against torch, which tunesvc never needs: they run in
# a venv of their own with torch 2.13 (CPU), tinygrad, and tunesvc's runtime dependencies (the checkout is on PYTHONPATH).
TG_VENV := .venv-tinygrad-tests
TG_STAMP := $(TG_VENV)/.installed

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

.PHONY: demo test test-quick test-exhaustive lint deps tinygrad-tests
demo: $(STAMP)
	$(VENV)/bin/tunesvc demo $(DEMO_ARGS)

# The tests write Python's bytecode (__pycache__/, git-ignored) even where PYTHONDONTWRITEBYTECODE says not to (this machine's
# shell, maybe CI's): the suite starts hundreds of Python processes (xdist workers, compile pools, CLI runs, each pytest
# rewriting every test module's asserts), each of which would compile the same sources again (CPU -20% on test_cli.py and
# -25% on test_worker + test_search_batch + test_client, no bytecode at the start either way)
test test-quick test-exhaustive tinygrad-tests: export PYTHONDONTWRITEBYTECODE =

# The suite, as CI runs it: every test but the timing-dependent and the exhaustive ones spread over the cores
# (pytest-xdist), then the timing-dependent ones alone, so nothing else shares the cores they measure on, once the rest of the
# machine has settled (tests/conftest.py: it waits up to a minute for a quiet second and prints what it saw). What it compiles
# (C libraries, PoCL's and tinygrad's kernels: by content) is kept in build/test-cache for the next run (tests/conftest.py).
test: $(STAMP) deps
	$(PYTEST) $(XDIST) -m "not timing and not exhaustive" $(PYTEST_ARGS)
	$(PYTEST) -m timing $(PYTEST_ARGS)

# The checks of every input and every corpus kernel, the rest of the checks `make test` runs a first part of (the bounded
# fuzz runs' later cases, most of the corpus round trip, the sampled corpus kernels whose hand-coded schedule repeats one
# already checked, the 30 s API outage), a slice of tinygrad's own tests against torch (its venv, torch included, is
# built on first use: `make test` never needs it), and every property test again with 500 examples (`make test`: 100):
# CI runs them after `make test` (.ci/run).
test-exhaustive: $(STAMP) $(TG_STAMP)
	TUNESVC_PROPERTY_EXAMPLES=500 $(PYTEST) $(XDIST) -m "exhaustive or property" $(PYTEST_ARGS)

# While working: neither the slow tier nor the timing one (see the markers in pyproject.toml).
test-quick: $(STAMP)
	$(PYTEST) $(XDIST) -m "not slow and not timing and not exhaustive" $(PYTEST_ARGS)

# ruff over the whole checkout (the tests and benchmarks too) and mypy over the packages, configured in pyproject.toml
# ([tool.ruff], [tool.mypy]: which packages, and the modules not yet type-clean); CI runs it before the suite, and fails on a finding.
lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy

# What the tests drive besides Python, installed where missing when we may (root with apt, as on CI), in one apt
# transaction that waits for a held dpkg lock (scripts/apt-deps.sh): Debian's chromium for the dashboard's browser test
# (never a browser of Playwright's own), PoCL (OpenCL on the CPU) for the GPU-style kernels, hipcc for the HIP renderer's
# source, clang for tinygrad's CLANG device, and PostgreSQL, started if stopped (scripts/postgres.sh), for the store's
# tests. Elsewhere those tests skip and say why (under CI=true the PostgreSQL ones fail instead).
deps:
	@bash scripts/apt-deps.sh
	@bash scripts/postgres.sh

# tests/test_tinygrad_integration.py runs a slice of tinygrad's tests (exhaustive tier); `make tinygrad-tests` runs the four files with and without tunesvc.
$(TG_STAMP):
	$(PY) -m venv $(TG_VENV)
	$(TG_VENV)/bin/pip install -q torch==2.13.0 tinygrad==0.8.0 'pytest>=8.3,<10' 'hypothesis>=6.100,<7' 'numpy>=2.0,<2.5' \
	  'ml_dtypes>=0.5,<0.6' 'httpx>=0.27,<0.29' 'platformdirs>=4.2,<5'
	$(TG_VENV)/bin/pip download -q --no-binary :all: --no-deps tinygrad==0.8.0 -d $(TG_VENV)/sdist
	tar xzf $(TG_VENV)/sdist/tinygrad-0.8.0.tar.gz -C $(TG_VENV)
	touch $@
tinygrad-tests: $(STAMP) $(TG_STAMP) deps
	PYTHONPATH=$$PWD $(VENV)/bin/python tests/tinygrad_suite.py
