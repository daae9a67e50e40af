# `make demo` and `make test` each set everything up on a fresh machine by themselves.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mltriage-installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	# The CPU build of torch first where it lies on local disk; a plain `torch` would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0 || echo "torch 2.13.0 CPU build not available here; the [torch] extra will pick one"
	$(PY) -m pip install -q -e ".[dev,torch]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mltriage demo

test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadgroup --durations=20

bench: $(STAMP)
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache
