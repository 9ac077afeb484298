# dprobe: the commands of the README. `make demo` installs everything and runs the demo;
# `make test` runs the test suite (it starts its own Kafka broker).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast check lint format typecheck broker-start broker-stop broker-status bench clean

$(STAMP): pyproject.toml requirements.lock scripts/install-system-deps.sh
	bash scripts/install-system-deps.sh
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[all,test]'
	$(BIN)/dprobe broker fetch
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/dprobe demo

test: install
	$(BIN)/python -m pytest

# The tier to run on every change: no broker, no dprobe processes, no trace files.
test-fast: install
	$(BIN)/python -m pytest -q -m "not integration and not traces and not slow and not gpu"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install
	$(BIN)/python scripts/typecheck.py

check: lint typecheck test

broker-start: install
	$(BIN)/dprobe broker start

broker-stop: install
	$(BIN)/dprobe broker stop

broker-status: install
	$(BIN)/dprobe broker status

# Every benchmark at its defaults; those needing traces or a GPU this machine lacks are
# skipped, saying so (scripts/run_benchmarks.py --list shows which).
bench: install
	$(BIN)/python scripts/run_benchmarks.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
