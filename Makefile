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

.PHONY: demo test
demo: $(STAMP)
	$(VENV)/bin/tunesvc demo $(DEMO_ARGS)

test: $(STAMP) $(CHROMIUM)
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

# the dashboard's browser test drives Debian's chromium through Playwright (never a browser Playwright downloads)
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "$(CHROMIUM) is missing and this is not root: the dashboard's browser test will be skipped (apt-get install chromium)"; fi
