# Two commands do all set-up on a fresh machine: `make demo` (the main job) and `make test`.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

.PHONY: demo test opencl hipcc clang tinygrad-tests
demo: $(STAMP)
	$(VENV)/bin/tunesvc demo $(DEMO_ARGS)

test: $(STAMP) $(CHROMIUM) opencl hipcc clang $(TG_STAMP)
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

# the dashboard's browser test drives Debian's chromium through Playwright (never a browser Playwright downloads)
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "$(CHROMIUM) is missing and this is not root: the dashboard's browser test will be skipped (apt-get install chromium)"; fi

# GPU-style kernels are tested for real on PoCL, an OpenCL driver for the CPU: installed where missing when we may
# (root with apt, as on CI); elsewhere the OpenCL tests skip and say why.
OPENCL_PKGS := ocl-icd-libopencl1 pocl-opencl-icd
opencl:
	@if ! dpkg -s $(OPENCL_PKGS) >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(OPENCL_PKGS); fi

# The HIP renderer's source is built for AMD GPUs by Debian's hipcc (ROCm 5.2, ~40 MB with its LLVM), installed the same
# way; without it those tests skip and say why.
hipcc:
	@if ! command -v hipcc >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends hipcc >/dev/null; fi

# tinygrad's CLANG device (tests/test_tinygrad_integration.py, bench/tinygrad_models.py) runs the clang command
clang:
	@if ! command -v clang >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang >/dev/null; fi

# tinygrad 0.8.0's own tests (from its source distribution) compare against torch, which tunesvc never needs: they run in
# a venv of their own with torch 2.13 (CPU), tinygrad, and tunesvc's runtime dependencies (the checkout is on PYTHONPATH).
# tests/test_tinygrad_integration.py runs a slice of them; `make tinygrad-tests` runs the four files with and without tunesvc.
TG_VENV := .venv-tinygrad-tests
TG_STAMP := $(TG_VENV)/.installed
$(TG_STAMP):
	$(PY) -m venv $(TG_VENV)
	$(TG_VENV)/bin/pip install -q torch==2.13.0 tinygrad==0.8.0 'pytest>=8.3,<10' 'hypothesis>=6.100,<7' 'numpy>=2.0,<2.5' \
	  'ml_dtypes>=0.5,<0.6' 'httpx>=0.27,<0.29' 'platformdirs>=4.2,<5'
	$(TG_VENV)/bin/pip download -q --no-binary :all: --no-deps tinygrad==0.8.0 -d $(TG_VENV)/sdist
	tar xzf $(TG_VENV)/sdist/tinygrad-0.8.0.tar.gz -C $(TG_VENV)
	touch $@
tinygrad-tests: $(STAMP) $(TG_STAMP) clang
	PYTHONPATH=$$PWD $(VENV)/bin/python tests/tinygrad_suite.py
