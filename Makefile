# The two commands: `make demo` (evaluate the embedded model on MiniWoB++) and `make test`.
# Both set up whatever is missing first (Chromium, .venv, extras) and are quick when nothing is.
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# Test files are spread over this many processes (pytest-xdist, heaviest first: tests/conftest.py; a file's tests stay together, so
# module fixtures such as a shared browser server are per process). 1: one process, no xdist. Three on
# a 2-core machine: tests wait on browsers, sockets and child processes, and a third worker keeps both
# cores busy.
PYTEST_WORKERS ?= 3

.PHONY: demo test setup bench clean

setup:
	@bash scripts/setup.sh

demo: setup
	PLAYWRIGHT_BROWSERS_PATH=$(CURDIR)/$(VENV)/ms-playwright $(BIN)/envharness eval --model embedded \
		--tasks click-test,click-button,focus-text,enter-text --episodes 4 --max-steps 3 --max-new-tokens 16 \
		--concurrency 16 --out runs/demo --overwrite

# PYTHONDONTWRITEBYTECODE cleared: the suite starts many Python processes, and each
# would compile every envharness module again without the __pycache__ the first one writes.
test: setup
	$(BIN)/ruff check src tests bench examples scripts
	$(BIN)/ruff format --check src tests bench examples scripts
	PYTHONDONTWRITEBYTECODE= LITELLM_LOCAL_MODEL_COST_MAP=True PLAYWRIGHT_BROWSERS_PATH=$(CURDIR)/$(VENV)/ms-playwright $(BIN)/python -m pytest -q -ra $(if $(filter-out 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)

# The benchmarks of bench/README.md (about 30 minutes): browser, RL-shaped policy mix, step
# breakdown, rollouts, server.
bench: setup
	PLAYWRIGHT_BROWSERS_PATH=$(CURDIR)/$(VENV)/ms-playwright $(BIN)/python bench/bench_browser.py
	PLAYWRIGHT_BROWSERS_PATH=$(CURDIR)/$(VENV)/ms-playwright $(BIN)/python bench/bench_rl.py
	PLAYWRIGHT_BROWSERS_PATH=$(CURDIR)/$(VENV)/ms-playwright $(BIN)/python bench/bench_step_breakdown.py
	PLAYWRIGHT_BROWSERS_PATH=$(CURDIR)/$(VENV)/ms-playwright $(BIN)/python bench/bench_rollout.py
	$(BIN)/python bench/bench_server.py

clean:
	rm -rf runs .pytest_cache
