# Two commands do everything on a fresh machine (Python 3.11+, make):
#   make certify   -> certify the embedded reference target, report in reports/reference/
#   make test      -> the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# make certify needs only the kit (pytest, pytest-bdd, Hypothesis); make test adds Spark, the SDK, containers
EXTRAS ?= test,spark,sdk,containers
REPORT_DIR ?= reports/reference
# make test runs the test files on this many processes (pytest-xdist; one file's tests stay on one)
TEST_WORKERS ?= 2

.PHONY: setup setup-certify certify test bench bench-sdk serve clean

$(BIN)/.base: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

$(BIN)/.installed: $(BIN)/.base
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $@

setup-certify: $(BIN)/.base

setup: $(BIN)/.installed

certify: setup-certify
	$(BIN)/sbconform certify --target reference --report-dir $(REPORT_DIR)

test: setup
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile

bench: setup-certify
	$(BIN)/python benchmarks/model_cycle.py

bench-sdk: setup
	$(BIN)/python benchmarks/sdk_throughput.py

serve: setup
	$(BIN)/sbconform serve --port 5672

clean:
	rm -rf $(VENV) reports .hypothesis
