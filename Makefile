# corral: `make demo` and `make test` do all set-up on a fresh machine (Python >= 3.11 on PATH).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PLUGIN := $(VENV)/.example-plugin
BENCH_EXTRA := $(VENV)/.bench-extra

.PHONY: demo test test-fast lint bench chaos clean

# Bytecode caches on, whatever the shell says: with PYTHONDONTWRITEBYTECODE set (some images set it),
# every `corral` subprocess a test starts compiles runner/ from source again and pytest rewrites every
# test module's asserts again at each collection (8 s per worker instead of 2).
unexport PYTHONDONTWRITEBYTECODE

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

# The peers bench/peers.py measures corral against (the `bench` extra): for make bench only, never make test.
$(BENCH_EXTRA): $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	touch $(BENCH_EXTRA)

## demo: the main job on the embedded SQLite store (a scripted controller lifecycle)
demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" ./scripts/demo.sh

## test: lint, type-check and run the whole test suite, in parallel (what CI runs), then the service
## suite again on the PostgreSQL store (CORRAL_TEST_STORE; tests/support/stores.py)
test: $(PLUGIN) lint
	$(BIN)/pytest -n auto
	CORRAL_TEST_STORE=postgresql $(BIN)/pytest -n auto tests/service

## test-fast: the tests not marked slow, in parallel, without lint (under a minute: for the edit-test loop)
test-fast: $(PLUGIN)
	CORRAL_TEST_FAST=1 $(BIN)/pytest -m "not slow" -n auto

lint: $(STAMP)
	$(BIN)/ruff check runner tests bench chaos
	$(BIN)/ruff format --check runner tests bench chaos
	$(BIN)/lint-imports
	$(BIN)/mypy

## bench: every figure of the issues' target tables (13 to 28) with its target, met or not, in one table
## (bench/summary.py runs each bench script with --quick --json; BENCH_FLAGS=--full for the full runs).
## Fails when a script crashes or a row is not measured; a missed target fails only with BENCH_FLAGS=--strict
bench: $(BENCH_EXTRA)
	$(BIN)/python bench/summary.py $(BENCH_FLAGS)

## chaos: randomized clients (real service operations, two state homes) on SQLite and PostgreSQL under a
## nemesis (kill -9, SIGSTOP past the TTL, clock jumps, immediate PostgreSQL restarts), every history checked
## for linearizability (docs/proof.md); CHAOS_FLAGS="--minutes 5 --seed 7 --store sqlite --json"
chaos: $(STAMP)
	$(BIN)/python -m chaos $(CHAOS_FLAGS)

clean:
	rm -rf $(VENV) .demo build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis .grimp_cache .import_linter_cache
