# Profile Warehouse. Newcomers need two targets: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STATE ?= .pwh
DEMO_WH := $(STATE)/warehouse.duckdb

.PHONY: setup demo test lint ui bench bench-quick clean

# A local virtual environment, created on first use and refreshed when pyproject.toml changes
# (or the C source of the one compiled module, built in place by the editable install).
$(STAMP): pyproject.toml warehouse/ingesting/formats/_kscan.c warehouse/ingesting/formats/_kscan_json.h
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[all,dev]'
	@touch $(STAMP)

setup: $(STAMP)

## demo: a fresh local warehouse: the example runs + a generated history (pwh synth), every
## model built, and the regression verdicts found, checked against what was planted
demo: $(STAMP)
	$(BIN)/python scripts/demo.py --warehouse $(DEMO_WH)

## test: the whole suite (each test uses its own temporary warehouse)
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

## ui: the Dagster UI and daemon on 127.0.0.1:3000 (Ctrl-C stops both); `make ui READONLY=1`
## serves a read-only UI for viewers (dagster-webserver --read-only, no daemon)
ui: $(STAMP)
	$(BIN)/python scripts/ui.py $(if $(READONLY),--read-only)

## bench: every performance goal at full size, for a person (~20 min, ~15 GB of disk in bench/out)
bench: $(STAMP)
	$(BIN)/python -m bench.run

## bench-quick: the same harness on tiny inputs (timings mean nothing; keeps the harness working)
bench-quick: $(STAMP)
	$(BIN)/python -m bench.run --quick

clean:
	rm -rf $(STATE) .pytest_cache
