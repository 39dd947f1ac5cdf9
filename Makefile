# Two commands: `make run` starts a node on port 7711, `make test` runs the whole suite.
# Both install the server and the Python client (clients/python) into .venv.
# `make bench` runs the benchmark harness (python -m bench).
# `make faults` runs a long Jepsen-style fault run (docs/FAULTS.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: run test lint bench faults install install-test install-bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e . -e clients/python

# the tests include disq_spark (spark/), which brings pyspark; `make run` does without
install-test: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]' -e clients/python -e spark

install-bench: $(BIN)/python
	$(BIN)/pip install -q -e '.[bench]'

run: install
	$(BIN)/disq-server --port 7711 $(ARGS)

test: install-test
	$(BIN)/ruff check disq tests clients bench spark
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: install-test
	$(BIN)/ruff check disq tests clients bench spark

# A long fault run (tests/faults/jepsen.py): 5 nodes, kill -9 and partitions, then a
# check that no acknowledged job is lost: `make faults ARGS="--nemesis mixed --seed 7"`.
FAULT_ARGS ?= --nemesis mixed --seed 1 --duration 300
faults: install-test
	$(BIN)/python tests/faults/jepsen.py $(if $(ARGS),$(ARGS),$(FAULT_ARGS))

# The benchmark harness (bench/, issue #7): `make bench ARGS="--scenario cycle"`.
bench: install-bench
	$(BIN)/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info clients/python/build clients/python/*.egg-info \
		spark/build spark/*.egg-info
