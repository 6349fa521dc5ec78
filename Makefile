# Two commands do all set-up on a fresh machine: `make demo` (the main job) and `make test`.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

.PHONY: demo test
demo: $(STAMP)
	$(VENV)/bin/tunesvc demo $(DEMO_ARGS)

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)
