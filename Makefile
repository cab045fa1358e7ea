# corral: `make demo` and `make test` do all set-up on a fresh machine (Python >= 3.11 on PATH).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PLUGIN := $(VENV)/.example-plugin

.PHONY: demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The test-only example plugin: one worked example of every extension point (tests/test_extension_points.py).
# Installed for the tests only, so the demo's corral knows only the built-in hosts and stores.
$(PLUGIN): $(STAMP) tests/plugins/example/pyproject.toml
	$(BIN)/pip install --quiet --no-build-isolation --no-deps -e tests/plugins/example
	touch $(PLUGIN)

## demo: the main job on the embedded SQLite store (a scripted controller lifecycle)
demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" ./scripts/demo.sh

## test: lint, type-check and run the whole test suite, in parallel (what CI runs)
test: $(PLUGIN) lint
	$(BIN)/pytest -n auto

## test-fast: the tests not marked slow, in parallel, without lint (under a minute: for the edit-test loop)
test-fast: $(PLUGIN)
	$(BIN)/pytest -m "not slow" -n auto

lint: $(STAMP)
	$(BIN)/ruff check runner tests bench
	$(BIN)/ruff format --check runner tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

## bench: transition cost ratios, CLI cold start, agent wake-up and round trips, each measured in one run
bench: $(STAMP)
	$(BIN)/python bench/transition.py
	$(BIN)/python bench/coldstart.py
	$(BIN)/python bench/agents.py
	$(BIN)/python bench/plans.py
	$(BIN)/python bench/hops.py

clean:
	rm -rf $(VENV) .demo build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis .grimp_cache .import_linter_cache
