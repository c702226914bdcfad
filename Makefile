# Two-command quick start: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Stamp files record what is installed, so a second `make` goes straight to the work.
$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[plot]'
	@touch $@

$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test]'
	@touch $@

# The FedNMap linear-speedup sweep on the bundled digits into results/demo.db, then its report
# (slopes printed, figures in results/demo_report/). `fedopt demo --quick` is the short tour.
demo: $(VENV)/.core
	$(BIN)/python -m fedopt demo

# One worker per core (pytest-xdist): each compiles its own kernels, into the shared Numba cache.
# Work stealing keeps both busy to the end: on a cold cache a few tests take a minute of compiling.
test: $(VENV)/.test
	$(BIN)/python -m pytest -n auto --dist worksteal

# The rules and their reasons are in pyproject.toml ([tool.ruff.lint]); CI runs this before the tests.
lint: $(VENV)/.test
	$(BIN)/python -m ruff check .

bench: $(VENV)/.test
	$(BIN)/python -m pytest bench --benchmark-enable --benchmark-only --benchmark-columns=min,median,rounds

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
	find . -name __pycache__ -prune -exec rm -rf {} +
