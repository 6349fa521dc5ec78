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

.PHONY: demo test opencl hipcc
demo: $(STAMP)
	$(VENV)/bin/tunesvc demo $(DEMO_ARGS)

test: $(STAMP) $(CHROMIUM) opencl hipcc
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
