# Two commands do everything on a fresh machine (Python 3.11+, make):
#   make certify   -> certify the embedded reference target, report in reports/reference/
#   make test      -> the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
EXTRAS ?= test,spark,sdk,containers
REPORT_DIR ?= reports/reference

.PHONY: setup certify test bench bench-sdk serve clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $@

setup: $(BIN)/.installed

certify: setup
	$(BIN)/sbconform certify --target reference --report-dir $(REPORT_DIR)

test: setup
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python benchmarks/model_cycle.py

bench-sdk: setup
	$(BIN)/python benchmarks/sdk_throughput.py

serve: setup
	$(BIN)/sbconform serve --port 5672

clean:
	rm -rf $(VENV) reports .hypothesis
